"""The causal model of a multi-rank failure (issue #25): a rank that raised is the root and the ranks that timed
out waiting are its consequences whatever the clocks say; a watchdog abort on a CUDA error is not a timeout;
equal collective counts name no laggard; a late watchdog and a counter far behind are noticed; a trainer other
than HF's is not told about transformers' ddp_timeout.

Line formats: torch >= 2.4 (glog prefix ``[rankN]:[E<M>DD HH:MM:SS.ns ProcessGroupNCCL.cpp:L]``, WorkNCCL with
NumelIn/NumelOut, "Timeout at NCCL work: W, last enqueued NCCL work: E, last completed NCCL work: C", the OOM
message of c10/cuda/CUDACachingAllocator.cpp) as fixtures/postmortem/make_multirank.py cites them; torch 2.1's
watchdog line (no PG prefix, no Numel) from the paste in pytorch/pytorch#118369.
"""

from __future__ import annotations

import datetime
import os

import pytest

from pmhelp import diagnose_dir


FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem", "causal")
T0 = 1774058400          # 2026-03-21T02:00:00Z
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU {g} has a total capacity of "
       "79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use. "
       "Of the allocated memory 74.90 GiB is allocated by PyTorch, and 1.95 GiB is reserved by PyTorch but "
       "unallocated.")


def _glog(t: float) -> str:
    d = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return f"E{d.month}{d.day:02d} {d:%H:%M:%S}.{d.microsecond:06d}000"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def write_ranks(d, n: int, bad: int, oom_clock: str | None, timeout_offset: float, stuck: int | None = None,
                enq: int = 1580) -> None:
    """`n` rank logs: rank `bad` raises a CUDA OOM (its line stamped `oom_clock` = None | "early" | "late"
    against the timeouts), the others time out on collective 1580 `timeout_offset` s after T0; `stuck` (if
    set) is a rank that logged progress and nothing else."""
    os.makedirs(d, exist_ok=True)
    for r in range(n):
        lines = [f"[INFO|2026-03-21 02:00:00] llamafactory.hparams.parser:652 >> Process rank: {r}, world size: {n}, "
                 f"device: cuda:{r % 8}, distributed training: True, compute dtype: torch.bfloat16"]
        if r == bad:
            pre = "" if oom_clock is None else _iso(T0 + (5 if oom_clock == "early" else timeout_offset + 900)) + " "
            lines += [f"{pre}[rank{r}]: Traceback (most recent call last):", f"{pre}[rank{r}]: " + OOM.format(g=r % 8)]
        elif r == stuck:
            lines += [f"{s * 100 // 620:3d}%|▏         | {s}/620 [00:{s * 3:02d}<30:00, 3.00s/it]" for s in (1, 2, 3)]
        else:
            t = T0 + timeout_offset + (n - r) * 0.01      # clocks in reverse rank order: no order to lean on
            lines += [f"[rank{r}]:[{_glog(t)} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
                      "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
                      "Timeout(ms)=1800000) ran for 1800004 milliseconds before timing out.",
                      f"[rank{r}]:[{_glog(t)} ProcessGroupNCCL.cpp:1709] [PG 1 Rank {r}] Timeout at NCCL work: 1580, "
                      f"last enqueued NCCL work: {enq}, last completed NCCL work: 1579."]
        with open(os.path.join(d, f"rank{r}.log"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("clock", [None, "early", "late"])
def test_256_ranks_the_rank_that_raised_is_the_root_whatever_the_clocks(tmp_path, clock):
    d = tmp_path / "ranks"
    write_ranks(str(d), 256, 173, clock, 1800)
    r = diagnose_dir(str(d))
    rk = r.sections["postmortem"]["ranks"]
    assert rk["count"] == 256 and rk["first_failed"]["rank"] == 173
    assert rk["first_failed"]["state"] == "raised" and rk["waiting_count"] == 255
    assert r.findings[0].name == "cuda-oom" and r.findings[0].location.file.endswith("rank173.log")
    first = next(f for f in r.findings if f.name == "rank-failed-first")
    assert "Rank 173" in first.message and "causality" in first.message
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    # every rank that printed a counter shows 1580/1579: nobody "completed the fewest collectives"
    assert "fewest" not in nccl.message and "stopped at" not in nccl.message
    assert "rank 173 failed first (CUDA out of memory)" in nccl.message


def test_rank_states_are_tabled(tmp_path):
    d = tmp_path / "ranks"
    write_ranks(str(d), 8, 5, None, 1800, stuck=None)
    from finetune_doctor.analyzers.postmortem.ranks import rank_facts
    from finetune_doctor.readers.runlogs.runlayout import collect

    rk = rank_facts(collect(str(d), []), {})
    assert rk["states"] == {"raised": 1, "timed out": 7}
    row = next(x for x in rk["table"] if x["rank"] == 2)
    assert (row["state"], row["failure"]["op"], row["failure"]["seq"]) == ("timed out", "ALLREDUCE", 1580)


def test_a_stuck_rank_without_a_failure_is_the_one_waited_on(tmp_path):
    d = tmp_path / "ranks"
    write_ranks(str(d), 8, -1, None, 1800, stuck=6)
    r = diagnose_dir(str(d))
    ff = r.sections["postmortem"]["ranks"]["first_failed"]
    assert ff["rank"] == 6 and ff["state"] == "still running"
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "rank 6 logged no failure" in nccl.message


def test_a_rank_behind_in_enqueued_collectives_is_named(tmp_path):
    d = tmp_path / "ranks"
    write_ranks(str(d), 8, -1, None, 1800)
    p = d / "rank3.log"
    p.write_text(p.read_text().replace("last enqueued NCCL work: 1580", "last enqueued NCCL work: 1579"))
    r = diagnose_dir(str(d))
    rk = r.sections["postmortem"]["ranks"]
    assert rk["first_failed"]["rank"] == 3 and "last enqueued collective #1579" in rk["first_failed"]["how"]


def test_a_cut_counter_line_names_nobody(tmp_path):
    d = tmp_path / "ranks"
    write_ranks(str(d), 4, -1, None, 1800)
    p = d / "rank1.log"
    p.write_text(p.read_text().split(", last enqueued")[0] + "\n")      # the paste was cut there
    r = diagnose_dir(str(d))
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "fewest" not in nccl.message and "stopped at" not in nccl.message
    assert "weakest" in r.sections["postmortem"]["ranks"]["first_failed"]["how"]


def test_watchdog_abort_on_a_cuda_error_is_not_a_timeout(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "train.log").write_text(open(os.path.join(FIX, "watchdog_cuda_error.log"), encoding="utf-8").read())
    r = diagnose_dir(str(d))
    names = [f.name for f in r.findings]
    assert names[0] == "cuda-error" and "nccl-timeout" not in names
    assert "illegal memory access" in r.findings[0].message


def test_late_watchdog_and_a_counter_far_behind_on_a_nemo_run(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "train.log").write_text(open(os.path.join(FIX, "lightning_late_watchdog.log"), encoding="utf-8").read())
    r = diagnose_dir(str(d))
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "ddp_timeout" not in nccl.message and "transformers" not in nccl.message
    assert "NeMo" in nccl.message
    assert "14× its 1800 s timeout" in nccl.message
    assert "rank(s) 7 stopped at timed-out collective #64088" in nccl.message and "32037 collectives behind" \
        in nccl.message


def test_hf_run_is_told_about_ddp_timeout(tmp_path):
    d = tmp_path / "ranks"
    write_ranks(str(d), 4, 2, None, 1800)
    nccl = next(f for f in diagnose_dir(str(d)).findings if f.name == "nccl-timeout")
    assert "transformers' default ddp_timeout" in nccl.message
