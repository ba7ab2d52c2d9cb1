"""The bulk path of HF's step dicts (readers/runlogs/logs.py `_Scan.piece` -> TextLogParser.train_dict / flush) against the
line parser (`fast=False`: every dict through `feed_line` / `_metric_dict`), and grep's hits against the reader's own
expression: the same FileEvidence field for field, and the same postmortem report.

The dict lines are what the writers print:
* transformers 4.x ProgressCallback.on_log writes ``str(logs)``: Python float reprs (``1e-05``, ``nan``, ``inf``);
* transformers 5.6.0 trainer_callback.py:686 formats floats ``f"{v:.4g}"`` before ``str(...)`` (line 690), so the
  values are quoted strings (``'1e-05'``, ``'1.234e+04'``);
* ``grad_norm`` printed as a tensor (transformers 4.38-4.40 under DeepSpeed returned the tensor itself), extra keys
  of TRL's SFTTrainer (``num_tokens``, ``mean_token_accuracy``), a nested value, LLaMA-Factory's LogCallback line
  (``llamafactory.train.callbacks:N >> {...}``, LF train/callbacks.py:271-310), eval and train-summary dicts;
* tqdm bars rewritten with ``\\r`` (tqdm std.py ``format_meter``) and DeepSpeed's OVERFLOW line (loss_scaler.py
  ``update_scale``), which makes the following dict count for the step in progress.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from array import array

import pytest
from click.testing import CliRunner

from finetune_doctor import evidence
from finetune_doctor.cli import main
from finetune_doctor.evidence import Series
from finetune_doctor.readers.runlogs import loggrep, logparse, logs
TOTAL = 400


def _bar(s: int) -> str:
    return f" {100 * s // TOTAL:2d}%|{'█' * (s * 10 // TOTAL):<10}| {s}/{TOTAL} [{s * 3 // 60:02d}:{s * 3 % 60:02d}<" \
           f"{(TOTAL - s) * 3 // 60:02d}:{(TOTAL - s) * 3 % 60:02d},  3.{s % 7:02d}s/it]"


def tricky_log(seed: int = 3, steps: int = TOTAL) -> str:
    """A long log whose dicts take every shape the bulk path must take, or hand to the line parser, exactly."""
    rnd = random.Random(seed)
    shapes = [
        "{{'loss': {a:.4f}, 'grad_norm': {b:.6f}, 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': nan, 'grad_norm': inf, 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': {a!r}, 'grad_norm': -inf, 'learning_rate': 9.999e-06, 'epoch': 1}}",
        "{{'loss': '{a:.4g}', 'grad_norm': '{b:.4g}', 'learning_rate': '{lr:.4g}', 'epoch': '{ep:.4g}'}}",
        "{{'loss': 1.2e+01, 'grad_norm': 3.4E+02, 'learning_rate': 1E-5, 'epoch': 1.0}}",
        "{{'loss': {a:.4f}, 'grad_norm': tensor({b:.4f}, device='cuda:0'), 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': {a:.4f}, 'grad_norm': {{'total': {b:.3f}}}, 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': {a:.4f}, 'grad_norm': {b:.4f}, 'learning_rate': {lr!r}, 'num_tokens': 40960.0, "
        "'mean_token_accuracy': 0.61, 'epoch': {ep}}}",
        "[INFO|2025-06-01 10:00:00] llamafactory.train.callbacks:310 >> {{'loss': {a:.4f}, 'learning_rate': {lr!r}, "
        "'epoch': {ep}, 'throughput': 1000.0}}",
        "{{'loss': {a:.4f}, 'grad_norm': {b:.4f}, 'learning_rate': {lr!r}, 'epoch': {ep}}} ",
        "{{'loss': {a:.4f}, 'grad_norm': {b:.4f}, 'learning_rate': {lr!r}, 'epoch': {ep}}}xy",
        "{{'loss': 1_000, 'grad_norm': ١, 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': \x1b[31m{a:.4f}\x1b[0m, 'grad_norm': {b:.4f}, 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': '{a:.4f}, 'grad_norm': {b:.4f}', 'learning_rate': {lr!r}, 'epoch': {ep}}}",
        "{{'loss': {a:.4f}, 'grad_norm': {b:.4f}, 'learning_rate': {lr!r}, 'epoch': {ep}",   # cut short
        "{{'eval_loss': {a:.4f}, 'eval_runtime': 10.5, 'eval_samples_per_second': 9.5, 'epoch': {ep}}}",
    ]
    out = ["[INFO|trainer.py:2414] 2025-06-01 10:00:00,000 >>   Total optimization steps = 400"]
    for s in range(1, steps + 1):
        bars = "".join(_bar(k) + "\r" for k in range(max(1, s - 2), s)) + _bar(s)
        out.append(bars)
        if s % 9 == 0:
            out.append(f"[2025-06-01 10:00:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! "
                       f"Rank 0 Skipping step. Attempted loss scale: {2 ** 16}, reducing to {2 ** 15}")
        a, b = 2.5 - s / 400 + rnd.random() / 50, rnd.random() + 0.5
        lr, ep = 1e-4 * (1 - s / TOTAL) + 1e-9, round(s / TOTAL, 2)
        line = shapes[s % len(shapes)].format(a=a, b=b, lr=lr, ep=ep)
        out.append(line + ("\r" if s % 5 == 0 else ""))
    out.append("{'train_runtime': 100.0, 'train_samples_per_second': 1.0, 'train_steps_per_second': 0.1, "
               "'train_loss': 1.8, 'epoch': 1.0}")
    return "\n".join(out) + "\n"


def _small(monkeypatch):
    """Pieces of 20 kB, flushes every 3 dicts and curves thinned at 64 points: every boundary is crossed."""
    monkeypatch.setattr(logs, "CHUNK", 20000)
    monkeypatch.setattr(logparse, "FLUSH_DICTS", 3)
    monkeypatch.setattr(evidence, "SERIES_CAP", 64)
    monkeypatch.setattr(loggrep, "MIN_BYTES", 0)


def test_bulk_dicts_equal_the_line_parser_field_for_field(tmp_path, monkeypatch):
    _small(monkeypatch)
    p = tmp_path / "rank0.log"
    p.write_text(tricky_log(), encoding="utf-8")
    seen = {}
    for grep in ((True, False) if shutil.which("grep") else (False,)):
        if grep:
            monkeypatch.delenv("FINETUNE_DOCTOR_NO_GREP", raising=False)
        else:
            monkeypatch.setenv("FINETUNE_DOCTOR_NO_GREP", "1")
        for fast in (True, False):
            monkeypatch.setattr(logs, "FAST_DICTS", fast)
            seen[(grep, fast)] = logs.read_text_log(str(p))
    ref = seen[(False, False)]
    by = {s.name: s for s in ref.series}
    # the fixture reaches what it is meant to: thinned curves, lf_ and eval curves, non-finite points, overflows
    assert by["loss"].stride[0] >= 2 and {"lf_loss", "eval_loss", "loss_scale"} <= set(by)
    assert sum(1 for v in by["grad_norm"].values if v in (float("inf"), float("-inf"))) > 0
    assert sum(1 for v in by["loss"].values if v != v) > 0
    for key, fe in seen.items():
        assert repr(fe) == repr(ref), key


def test_the_bulk_path_is_taken_and_refuses_what_float_cannot_read(tmp_path, monkeypatch):
    """The comparison above is not vacuous: most dicts go the bulk way; an ANSI-coloured or non-ASCII value matches
    the expression but not float(), so the line parser takes it (tensor / nested / cut-short dicts do not match)."""
    _small(monkeypatch)
    p = tmp_path / "rank0.log"
    p.write_text(tricky_log(), encoding="utf-8")
    taken, refused = [], []
    real = logparse.TextLogParser.train_dict

    def spy(self, groups, line):
        ok = real(self, groups, line)
        (taken if ok else refused).append(groups)
        return ok

    monkeypatch.setattr(logparse.TextLogParser, "train_dict", spy)
    logs.read_text_log(str(p))
    assert len(taken) > TOTAL // 3
    assert any(b"\x1b" in g[0] for g in refused) and any("١".encode() in g[1] for g in refused)
    assert not any(b"\x1b" in x or b"tensor" in x or b"{" in x for g in taken for x in g)


def test_series_extend_is_append_point_by_point(monkeypatch):
    monkeypatch.setattr(evidence, "SERIES_CAP", 16)
    rnd = random.Random(1)
    for odd in (None, 1 << 62, 7.5, True):
        steps = [i for i in range(100)]
        steps[40] = odd
        vals = [rnd.choice((rnd.random(), float("nan"), float("inf"))) for _ in steps]
        lines = list(range(1, 101))
        for st in (steps, list(range(100))):
            a, b = Series("loss", "f"), Series("loss", "f")
            for s, v, ln in zip(st, vals, lines):
                a.append(s, v, ln)
            for k in range(0, 100, 7):
                b.extend(st[k:k + 7], vals[k:k + 7], lines[k:k + 7])
            assert repr(a) == repr(b)
    assert array("q", b.stride)[0] > 1


@pytest.mark.slow
def test_postmortem_report_is_the_same_with_and_without_the_bulk_path(tmp_path, monkeypatch):
    _small(monkeypatch)
    for r in range(2):
        d = tmp_path / "run" / f"node{r}"
        d.mkdir(parents=True)
        tail = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU 1 has a total "
                "capacity of 79.19 GiB of which 1.10 GiB is free.\n" if r else
                "[rank0]:[E321 03:10:00.000000001 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 0] Timeout at NCCL work: "
                "91580, last enqueued NCCL work: 91580, last completed NCCL work: 91579.\n")
        (d / f"rank{r}.log").write_text(tricky_log(seed=r, steps=TOTAL - 37 * r) + tail, encoding="utf-8")
    reports = []
    for fast in (True, False):
        monkeypatch.setattr(logs, "FAST_DICTS", fast)
        res = CliRunner().invoke(main, ["postmortem", str(tmp_path / "run"), "--format", "json"],
                                 catch_exceptions=False)
        reports.append(json.loads(res.output))
    assert reports[0] == reports[1]
    names = [f["name"] for f in reports[0]["findings"]]
    assert "cuda-oom" in names and reports[0]["postmortem"]["ranks"]
    assert os.path.exists(tmp_path / "run" / "node1" / "rank1.log")


def test_line_numbers_stay_right_after_grep_stops_at_a_line_longer_than_a_chunk(tmp_path):
    """grep is stopped at the first line longer than a chunk (readers/runlogs/logs.py, a log without newlines would grow
    grep to the file's size); from there the scan counts lines itself and must start from grep's count."""
    import shutil

    from finetune_doctor.readers.runlogs import logs as logs_mod
    from finetune_doctor.readers.runlogs.logs import read_text_log

    if shutil.which("grep") is None:
        pytest.skip("no grep here")
    head = [f"{{'loss': {2.0 - i * 1e-4:.4f}, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': {i / 100:.2f}}}"
            for i in range(1, 1001)]
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.10 GiB of which 1.00 GiB is free.")
    text = "\n".join(head + ["x" * (logs_mod.CHUNK + (1 << 20)), oom]) + "\n"
    path = tmp_path / "train.log"
    path.write_text(text)
    ev = read_text_log(str(path))
    assert [o.line for o in ev.ooms] == [len(head) + 2]
