"""`doctor postmortem` end to end through the CLI: bad input never gives a traceback, the report says what was
read, JSON is strict JSON (no bare NaN), the text report draws the curves, --plot writes a PNG."""

from __future__ import annotations

import json
import os
import random

from click.testing import CliRunner

from finetune_doctor.cli import main

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "postmortem")


def invoke(*args):
    r = CliRunner().invoke(main, ["postmortem", *args], catch_exceptions=False)
    return r.exit_code, r.output


def strict_json(text):
    def bad(tok):
        raise ValueError(f"non-standard JSON token {tok}")

    return json.loads(text, parse_constant=bad)


def test_missing_path_is_one_line_exit_2(tmp_path):
    code, out = invoke(str(tmp_path / "nope"))
    assert code == 2 and "no such file or directory" in out and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1


def test_empty_directory_says_nothing_to_diagnose(tmp_path):
    code, out = invoke(str(tmp_path), "--format", "json")
    d = strict_json(out)
    assert code == 0 and [f["name"] for f in d["findings"]] == ["no-run-evidence"]
    assert d["read"]["files"] == [] and d["command"] == "postmortem" and d["inputs"]["run_dir"]


def test_junk_everywhere_is_reported_not_raised(tmp_path):
    # seeded, not os.urandom: a random draw can now and then hold a run of printable bytes that reads as a log line
    junk = random.Random(7)
    (tmp_path / "train.log").write_bytes(junk.randbytes(20000))
    (tmp_path / "trainer_state.json").write_bytes(b'{"global_step": 5, "log_history": [{"loss": 1.0, "step": 1}, {"lo')
    (tmp_path / "trainer_log.jsonl").write_bytes(b"\x00\x01garbage\n{\"current_steps\": 1, \"loss\": 2.0}\n{\"cur")
    runs = tmp_path / "runs" / "Jan01_x"
    runs.mkdir(parents=True)
    (runs / "events.out.tfevents.1.host").write_bytes(junk.randbytes(3000))
    (tmp_path / "all_results.json").write_text("{not json")
    code, out = invoke(str(tmp_path), "--format", "json")
    assert code in (0, 1)
    d = strict_json(out)
    rows = {os.path.basename(f["path"]): f for f in d["read"]["files"]}
    assert rows["train.log"]["status"] == "skipped"
    assert rows["trainer_state.json"]["status"] == "partial" and rows["trainer_state.json"]["items"] == 1
    assert rows["trainer_log.jsonl"]["status"] == "partial" and "malformed" in rows["trainer_log.jsonl"]["problems"][1]
    assert rows["events.out.tfevents.1.host"]["status"] in ("partial", "skipped")
    assert rows["all_results.json"]["status"] in ("partial", "skipped")
    code, text = invoke(str(tmp_path))
    assert "Read" in text and "Traceback" not in text


def test_json_report_of_a_case(tmp_path):
    d = os.path.join(FIX, "case_067")
    code, out = invoke(d, "--config", os.path.join(d, "config.yaml"), "--format", "json")
    rep = strict_json(out)
    assert code == 1 and rep["findings"][0]["name"] == "constant-grad-norm"
    tl = rep["timeline"]
    assert {"step": 25, "kind": "nccl_timeout"}.items() <= tl[-1].items()
    assert tl[-1]["source"].endswith("log.txt:6")
    curves = rep["postmortem"]["curves"]
    assert curves["loss"]["values"] == [3.5534, 0.0] and curves["loss"]["steps"] == [10, 20]
    kinds = {f["kind"] for f in rep["read"]["files"]}
    assert {"trainer-log", "event-file", "text-log"} <= kinds


def test_text_report_draws_sparklines_and_marks():
    d = os.path.join(FIX, "case_046")
    code, out = invoke(d, "--config", os.path.join(d, "config.yaml"))
    assert code == 1
    assert "Timeline" in out and "Postmortem" in out and "×" in out and "N nan" in out
    assert "fix (unsafe): switch the attention kernel" in out


def test_plot_writes_a_png(tmp_path):
    d = os.path.join(FIX, "case_041")
    png = tmp_path / "run.png"
    code, out = invoke(d, "--config", os.path.join(d, "config.yaml"), "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000


def test_sarif_and_github_formats_render():
    d = os.path.join(FIX, "case_058")
    code, out = invoke(d, "--config", os.path.join(d, "config.yaml"), "--format", "sarif")
    sarif = strict_json(out)
    assert sarif["runs"][0]["results"][0]["ruleId"] == "FD304"
    code, out = invoke(d, "--config", os.path.join(d, "config.yaml"), "--format", "github")
    assert out.startswith("::error") and "FD304" in out


def test_log_option_and_a_run_dir_that_is_a_file(tmp_path):
    log = os.path.join(FIX, "case_050", "log.txt")
    code, out = invoke(str(tmp_path), "--log", log, "--format", "json")
    assert strict_json(out)["findings"][0]["name"] == "first-step-loss-abnormal"
    code, out = invoke(log, "--format", "json")
    assert strict_json(out)["findings"][0]["name"] == "first-step-loss-abnormal"
    code, out = invoke(str(tmp_path), "--log", str(tmp_path / "missing.log"))
    assert code == 2 and "missing.log" in out


def test_the_same_log_given_twice_under_two_paths_is_read_once(tmp_path):
    """Case 065's log as two --log copies: 5 overflow lines, not 10, and the read section names the copy."""
    src = os.path.join(os.path.dirname(__file__), "..", "fixtures", "postmortem", "case_065", "log.txt")
    data = open(src, "rb").read()
    a, b = tmp_path / "a" / "log.txt", tmp_path / "b" / "copy.txt"
    for p in (a, b):
        p.parent.mkdir()
        p.write_bytes(data)
    (tmp_path / "run").mkdir()
    code, out = invoke(str(tmp_path / "run"), "--log", str(a), "--log", str(b), "--format", "json")
    rep = json.loads(out)
    drop = next(e for e in rep["timeline"] if e["kind"] == "loss_scale_drop")
    assert drop["detail"].startswith("5 overflow(s)")
    assert [f["path"] for f in rep["read"]["files"]] == [str(a)]
    assert rep["read"]["duplicates"] == [{"path": str(b), "same_as": str(a)}]
    code, out = invoke(str(tmp_path / "run"), "--log", str(a), "--log", str(b))
    assert "same content as" in out and "read once" in out
    # one changed byte is another file: both are read
    b.write_bytes(data.replace(b"2.0491", b"2.0492"))
    rep = json.loads(invoke(str(tmp_path / "run"), "--log", str(a), "--log", str(b), "--format", "json")[1])
    assert len(rep["read"]["files"]) == 2 and rep["read"]["duplicates"] == []


def _postmortem_block(out: str) -> list[str]:
    lines = out.splitlines()
    i = lines.index("Postmortem")
    j = next(k for k in range(i + 1, len(lines)) if lines[k] and not lines[k].startswith(" "))
    return lines[i + 1:j]


def test_curve_rows_fit_100_columns_with_compact_numbers():
    """Piped output is 100 columns: each curve is one line, min–max in 3 significant digits (case 065: lr
    0.0001961913563176343 -> 1.96e-4, loss 2.0491 -> 2.05, one value when min == max)."""
    from finetune_doctor.reporters.sections.postmortem import _fmt

    code, out = invoke(os.path.join(FIX, "case_065"))
    block = _postmortem_block(out)
    assert all(len(x) <= 100 for x in block)
    row = {x.split()[0]: x for x in block if x.strip() and x.split()[0] in ("loss", "lr") and "scale" not in x}
    assert row["lr"].split()[-2:] == ["1.96e-4", "1.96e-4"] and row["loss"].split()[-2:] == ["2.05", "2.05"]
    scale = next(x for x in block if x.lstrip().startswith("loss scale"))
    assert scale.split()[-4:] == ["2", "–", "32", "2"]
    assert [_fmt(v) for v in (0.0001961913563176343, 2.0491, 1234.5, 65536.0, -3.2e-7, 0.05)] == \
        ["1.96e-4", "2.05", "1234", "6.55e+4", "-3.2e-7", "0.05"]


def test_event_strip_keeps_marks_of_the_same_step_and_the_legend_gives_steps():
    """Case 041: the NaN and the loss-0 mark are both at step 5; both letters show, the legend says where."""
    code, out = invoke(os.path.join(FIX, "case_041"))
    block = _postmortem_block(out)
    strip = next(x for x in block if x.lstrip().startswith("events"))
    assert "N" in strip and "0" in strip.split("events", 1)[1]
    assert any("N nan @5" in x and "0 loss zero @5" in x for x in block)


def test_plot_draws_single_point_series_and_integer_step_ticks(tmp_path, monkeypatch):
    """Case 065 has one logged loss and lr (step 380): their panels must show a marker, and the step axis
    (379..384) must not have half-step ticks."""
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    d = os.path.join(FIX, "case_065")
    code, out = invoke(d, "--plot", str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 1000
    fig = figs[-1]
    loss_ax = next(a for a in fig.axes if a.get_ylabel() == "loss")
    line = loss_ax.get_lines()[0]
    assert list(line.get_xdata()) == [380] and line.get_marker() == "o"
    ticks = [t for t in fig.axes[-1].get_xticks() if 379 <= t <= 384]
    assert ticks and all(float(t).is_integer() for t in ticks)
    plt.close(fig)


def test_the_ranks_a_log_names_bound_the_world_size_when_nothing_states_it(tmp_path):
    # a pasted tail of rank 5's output: torch 2.x's OOM message behind torchrun's `[rankN]:` prefix, and no line
    # that states the world size (LF's "Process rank: ..., world size: ..." line scrolled away)
    (tmp_path / "train.log").write_text(
        "[rank5]: Traceback (most recent call last):\n"
        "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.56 GiB. GPU 5 has a total "
        "capacity of 79.10 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB "
        "memory in use. Of the allocated memory 74.20 GiB is allocated by PyTorch, and 2.90 GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")
    _code, out = invoke(str(tmp_path), "--format", "json")
    report = strict_json(out)
    assert report["hardware"]["num_gpus"] == 6 and report["hardware"]["capacity_gib"] == 79.1
    assert any("world size taken as 6" in n for n in report["notes"])
