"""Hostile and careless postmortem inputs (issue 17): files that are not regular files, symlink loops, paths
too long, corrupt gzip, logs without newlines, huge numbers, a missing tensorboard, and the plot's marks."""

from __future__ import annotations

import gzip
import json
import math
import os
import signal
import threading

import pytest

from finetune_doctor.errors import InputError, MissingExtra
from finetune_doctor.readers.runlogs import logs as logs_mod
from finetune_doctor.readers.runlogs.logs import read_text_log
from finetune_doctor.readers.runlogs.runlayout import collect
from pmhelp import diagnose_dir


def _no_hang(seconds: int = 20):
    """Fail instead of hanging: SIGALRM raises in the test thread."""
    def boom(*_):
        raise TimeoutError("postmortem hung")
    signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)


def test_fifo_in_the_run_folder_is_skipped_not_read(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "train.log").write_text("{'loss': 1.5, 'learning_rate': 1e-4, 'epoch': 0.1}\n")
    os.mkfifo(d / "stdout.log")
    _no_hang()
    try:
        r = diagnose_dir(str(d))
    finally:
        signal.alarm(0)
    skipped = [f for f in r.sections["read"]["files"] if f["path"].endswith("stdout.log")]
    assert skipped and "FIFO" in skipped[0]["problems"][0]
    assert any("skipped" in n and "stdout.log" in n for n in r.notes)


def test_dev_zero_as_log_or_run_dir_is_skipped(tmp_path):
    _no_hang()
    try:
        r = diagnose_dir("/dev/zero")
        ev = collect(str(tmp_path), ["/dev/zero"])
    finally:
        signal.alarm(0)
    assert any("character device" in p for f in r.sections["read"]["files"] for p in f["problems"])
    assert [s.path for s in ev.skipped] == ["/dev/zero"]
    with pytest.raises(InputError) as e:
        read_text_log("/dev/zero")
    assert e.value.file == "/dev/zero" and "not a regular file" in e.value.message


def test_symlink_loop_and_too_long_path(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "train.log").write_text("{'loss': 1.5, 'learning_rate': 1e-4, 'epoch': 0.1}\n")
    os.symlink(d / "b.log", d / "a.log")
    os.symlink(d / "a.log", d / "b.log")
    ev = collect(str(d), [])
    looped = {os.path.basename(s.path): s.problems[0] for s in ev.skipped}
    assert set(looped) == {"a.log", "b.log"} and all("symbolic links" in p for p in looped.values())
    long = str(tmp_path / ("x" * 300))
    with pytest.raises(InputError) as e:
        diagnose_dir(long)
    assert e.value.file == long and "too long" in e.value.message
    with pytest.raises(InputError) as e:
        diagnose_dir(str(d), [str(d / "a.log")])
    assert e.value.file.endswith("a.log")


def test_corrupt_gzip_log_is_a_per_file_problem(tmp_path):
    good = gzip.compress(b"{'loss': 1.5, 'learning_rate': 1e-4, 'epoch': 0.1}\n" * 2000)
    p = tmp_path / "train.log.gz"
    p.write_bytes(good[:len(good) // 2] + b"\x00garbage" * 50)
    fe = read_text_log(str(p))
    assert not fe.read.complete and "corrupt gzip stream" in fe.read.problems[0]
    p.write_bytes(b"\x1f\x8b" + os.urandom(0) + b"\x08\x00not gzip at all")
    fe = read_text_log(str(p))
    assert not fe.read.complete and fe.read.problems


def test_log_without_newlines_costs_linear_work(tmp_path, monkeypatch):
    """One 'line' of 2 MB full of trigger words: the parser sees one window per HIT_BEFORE + HIT_AFTER bytes at
    most (not one per word, each with a 32 KiB window, as before), so the work grows linearly with the size."""
    calls = []
    real = logs_mod.TextLogParser.feed_line

    def count(self, text, line, ctx):
        calls.append(len(text))
        return real(self, text, line, ctx)

    monkeypatch.setattr(logs_mod.TextLogParser, "feed_line", count)
    for n in (1 << 20, 2 << 20):
        calls.clear()
        p = tmp_path / f"nonl{n}.log"
        p.write_text(("CUDA out of memory 'loss': NCCL Killed " * (n // 40)))
        read_text_log(str(p))
        window = logs_mod.HIT_BEFORE + logs_mod.HIT_AFTER
        assert len(calls) <= n // logs_mod.HIT_AFTER + 2 and max(calls) <= window
    assert len(calls) >= 2 * (1 << 20) // (window + logs_mod.LOOKAHEAD)


def test_huge_steps_and_lengths_are_per_file_problems(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "trainer_log.jsonl").write_text(
        json.dumps({"current_steps": 2 ** 63, "total_steps": 10, "loss": 1.0, "lr": 1e-4, "epoch": 0.1}) + "\n"
        + json.dumps({"current_steps": 2, "total_steps": 10, "loss": 1.1, "lr": 1e-4, "epoch": 0.2}) + "\n")
    (d / "trainer_state.json").write_text('{"global_step": 3, "log_history": [{"loss": 1.0, "step": 1e400}, '
                                          '{"loss": 1.1, "step": 2}], "max_steps": 99999999999999999999999}')
    import struct

    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as pw

    head = struct.pack("<Q", 1 << 63)
    (d / "runs").mkdir()
    (d / "runs" / "events.out.tfevents.1717000000.host").write_bytes(
        head + struct.pack("<I", pw.masked_crc32c(head)) + b"x" * 64)
    r = diagnose_dir(str(d))
    probs = {os.path.basename(f["path"]): f["problems"] for f in r.sections["read"]["files"]}
    assert any("2^62" in p for p in probs["trainer_log.jsonl"])
    assert any("2^62" in p for p in probs["trainer_state.json"])
    assert any("length exceeds" in p for p in probs["events.out.tfevents.1717000000.host"])


def test_core_install_without_tensorboard_reads_the_text_logs(tmp_path, monkeypatch):
    from finetune_doctor.readers.runlogs import tbevents
    def missing():
        raise MissingExtra("reading TensorBoard event files", "tensorboard")

    monkeypatch.setattr(tbevents, "_stub", missing)
    d = tmp_path / "run"
    (d / "runs" / "x").mkdir(parents=True)
    (d / "runs" / "x" / "events.out.tfevents.1717000000.host").write_bytes(b"\x00" * 64)
    (d / "train.log").write_text("".join(f"{{'loss': {v}, 'learning_rate': 0.0001, 'epoch': 0.{i}}}\n"
                                         for i, v in enumerate([2.0, 1.9, float("nan")])))
    r = diagnose_dir(str(d))
    assert "nan-loss" in [f.name for f in r.findings]
    note = next(n for n in r.notes if "tensorboard" in n)
    assert "events.out.tfevents" in note and "pip install '" in note and "[tensorboard]'" in note   # the extra, named where this install came from


def test_trainer_state_of_100k_entries_is_read_whole():
    """Normal with logging_steps: 1. The reading is linear (the speed is benchmarks/bench_postmortem_big.py's);
    here: every entry comes back."""
    import tempfile

    from finetune_doctor.readers.runlogs.trainer_log import read_trainer_state

    hist = [{"epoch": i / 1000, "grad_norm": 1.0, "learning_rate": 1e-4, "loss": 2.0, "step": i} for i in range(1, 100001)]
    with tempfile.TemporaryDirectory() as t:
        p = os.path.join(t, "trainer_state.json")
        with open(p, "w") as fh:
            json.dump({"global_step": 100000, "log_history": hist, "max_steps": 100000}, fh)
        fe = read_trainer_state(p)
    loss = next(s for s in fe.series if s.name == "loss")
    assert fe.read.records == 100000 and len(loss) == 100000 and loss.steps[-1] == 100000


def test_constant_grad_norm_over_100k_logs_is_linear():
    """A grad norm constant over the whole run (the signature of LF #8261) once cost O(n²) lookups (331 s at
    100k logs); the lookups are bisections now, so this finishes in a second or two."""
    from array import array

    from finetune_doctor.analyzers.postmortem.curves import Curve
    from finetune_doctor.analyzers.postmortem.detectors import grad_const_facts

    n = 100000
    steps = array("q", range(1, n + 1))
    gn = Curve("grad_norm", steps, array("d", [1.0] * n), array("q", range(1, n + 1)), ((0, "f"),))
    loss = Curve("loss", steps, array("d", [2.0 + (i % 7) * 0.01 for i in range(n)]), array("q", range(1, n + 1)),
                 ((0, "f"),))
    done = []
    t = threading.Thread(target=lambda: done.append(grad_const_facts(gn, loss)), daemon=True)
    t.start()
    t.join(60)
    assert done and done[0]["count"] == n and done[0]["loss_varies"]


def test_plot_marks_nonfinite_values_visibly_with_a_safe_palette(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from finetune_doctor.analyzers.postmortem.curves import Curve
    from finetune_doctor.reporters import plot

    from array import array

    c = Curve("grad_norm", array("q", [1, 2, 3, 4]), array("d", [1.0, math.nan, 1.2, math.inf]),
              array("q", [1, 2, 3, 4]), ((0, "f"),))
    fig, ax = plt.subplots()
    plot._panel(ax, c, "grad_norm", "grad norm", True)
    marks = {tuple(coll.get_offsets()[0]) for coll in ax.collections}
    # NaN at step 2 and Inf at step 4 sit on the band above the data (axes coordinates), not at a data value
    assert marks == {(2.0, plot.NONFINITE_Y), (4.0, plot.NONFINITE_Y)}
    assert all(coll.get_offset_transform() == ax.get_xaxis_transform() for coll in ax.collections)
    plt.close(fig)
    assert set(plot.COLORS.values()) <= set(plot.OKABE_ITO.values())
    # the two crash kinds that were near-identical reds before are now told apart by colour or line style
    assert plot.STYLES["oom"] != plot.STYLES["loss_zero"] and plot.STYLES["nan"] != plot.STYLES["loss_spike"]


def test_plot_title_names_model_and_run_folder(tmp_path):
    pytest.importorskip("matplotlib")
    d = tmp_path / "run"
    d.mkdir()
    (d / "training_args.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\n"
                                          "finetuning_type: lora\nbf16: true\n")
    (d / "train.log").write_text("{'loss': 2.0, 'learning_rate': 0.0001, 'epoch': 0.1}\n"
                                 "{'loss': nan, 'learning_rate': 0.0001, 'epoch': 0.2}\n")
    captured = {}
    import finetune_doctor.reporters.plot as plot

    real = plot.draw

    def spy(tl, path, title=None, **kw):
        captured["title"] = title
        return real(tl, path, title=title, **kw)

    import finetune_doctor.pipeline.postmortem as pipe

    pipe.draw = spy
    try:
        diagnose_dir(str(d), plot=str(tmp_path / "p.png"))
    finally:
        pipe.draw = real
    assert "Qwen/Qwen2.5-7B-Instruct" in captured["title"] and str(d) in captured["title"]
    assert (tmp_path / "p.png").stat().st_size > 1000
