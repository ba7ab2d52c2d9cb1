"""Counted reads of many big rank logs (readers/runlogs/runlayout.py `COUNTED`): each rank log's HF step dicts are
counted from grep's output, not parsed, and the file with the most dicts is read again in full. The report must
be the one a full read of every file gives, whichever ranks print the dicts (every rank, as the worst case of
benchmarks/bench_postmortem_ranks.py, or one rank, as HF's ProgressCallback does on the world's process zero)."""

from __future__ import annotations

import json
import shutil

import pytest

from finetune_doctor.readers.runlogs import loggrep, logs, runlayout
from finetune_doctor.reporters import render
from pmhelp import diagnose_dir
from tests.test_postmortem_fastpath import _bar, _small, tricky_log  # noqa: F401

pytestmark = pytest.mark.skipif(shutil.which("grep") is None, reason="counted reads need grep")

OOM = ("[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU {g} has a total "
       "capacity of 79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB "
       "memory in use. Of the allocated memory 74.90 GiB is allocated by PyTorch, and 1.95 GiB is reserved by "
       "PyTorch but unallocated.\n")
TIMEOUT = ("[rank{r}]:[E321 03:10:00.000000000 ProcessGroupNCCL.cpp:1709] [PG 1 Rank {r}] Timeout at NCCL work: "
           "91580, last enqueued NCCL work: 91580, last completed NCCL work: 91579.\n")


def _folder(root, dicts_on) -> None:
    """9 rank logs (LF's process line, the steps, then rank 5's OOM or the others' watchdog); `dicts_on`: the
    ranks whose steps include the metric dicts (the others print the bars only)."""
    with_dicts = tricky_log()
    bars = "\n".join(_bar(s) for s in range(1, 401)) + "\n"
    for r in range(9):
        d = root / f"node{r // 8}"
        d.mkdir(exist_ok=True)
        head = (f"[INFO|2025-06-01 10:00:00] llamafactory.hparams.parser:652 >> Process rank: {r}, world size: 9, "
                f"device: cuda:{r % 8}, distributed training: True, compute dtype: torch.bfloat16\n")
        tail = (OOM if r == 5 else TIMEOUT).format(r=r, g=r % 8)
        (d / f"rank{r}.log").write_text(head + (with_dicts if r in dicts_on else bars) + tail, encoding="utf-8")


def _report(root) -> dict:
    r = diagnose_dir(root)
    return json.loads(render(r, "json"))


@pytest.mark.parametrize("dicts_on", [set(range(9)), {3}], ids=["every-rank", "one-rank"])
def test_counted_reads_give_the_report_of_full_reads(tmp_path, monkeypatch, dicts_on):
    monkeypatch.setattr(loggrep, "MIN_BYTES", 0)
    _folder(tmp_path, dicts_on)
    calls = []
    real = logs.read_text_log

    def spy(path, count_dicts=False):
        calls.append((path.rsplit("/", 1)[-1], count_dicts))
        return real(path, count_dicts)

    monkeypatch.setattr(logs, "read_text_log", spy)
    counted = _report(tmp_path)
    # every rank log was a counted read, then the one with the most dicts (the first of equals) a full read
    first = "rank0.log" if len(dicts_on) == 9 else "rank3.log"
    assert sorted(c for c in calls if c[1]) == sorted((f"rank{r}.log", True) for r in range(9))
    assert [c for c in calls if not c[1]] == [(first, False)]
    monkeypatch.setattr(runlayout, "COUNTED_MIN_FILES", 10 ** 6)
    calls.clear()
    full = _report(tmp_path)
    assert all(not c[1] for c in calls) and len(calls) == 9
    # the same report but for what the read section says of the counted files
    notes = {f["path"]: f.pop("note") for f in counted["read"]["files"]}
    for f in (*counted["read"]["files"], *full["read"]["files"]):
        f.pop("items")
        f.pop("note", None)
    assert counted == full
    assert sum(1 for n in notes.values() if n and "counted, not parsed" in n) == len(dicts_on) - 1
    # not vacuous: the curves of the dicts are in the report, and rank 5's OOM is named first
    assert full["findings"][0]["name"] == "cuda-oom"
    assert full["postmortem"]["ranks"]["first_failed"]["rank"] == 5
    assert full["postmortem"]["curves"]["loss"]["points"] > 0


def test_a_counted_read_counts_the_dicts_and_keeps_every_other_line(tmp_path, monkeypatch):
    _small(monkeypatch)
    p = tmp_path / "rank0.log"
    p.write_text(tricky_log() + OOM.format(r=0, g=0), encoding="utf-8")
    full = logs.read_text_log(str(p))
    counted = logs.read_text_log(str(p), count_dicts=True)
    # the lines that start "{'loss': " (the fixture's shapes but LF's logger line, whose dict is mid-line)
    n = sum(1 for ln in tricky_log().replace("\r", "\n").splitlines() if "'loss': " in ln)
    assert counted.counted_dicts == n and full.counted_dicts == 0
    assert not any(s.name in ("loss", "grad_norm") for s in counted.series)
    assert [o.line for o in counted.ooms] == [o.line for o in full.ooms]
    assert counted.overflows == full.overflows and counted.last_step == full.last_step == 400
    assert counted.read.lines == full.read.lines
    monkeypatch.setattr(loggrep, "MIN_BYTES", 1 << 40)   # no grep: a counted read is a full read
    assert repr(logs.read_text_log(str(p), count_dicts=True)) == repr(full)
