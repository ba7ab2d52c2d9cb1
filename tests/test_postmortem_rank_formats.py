"""The rank folder of issue #25's "Done when" (one rank raised, the others timed out waiting in the collective
it never joined) in the line formats of each torch generation and launcher, the clocks ordered against causality
or absent: the rank that raised is named first (analyzers/postmortem/ranks.py, causes.py).

Line formats, each as real pastes show it (the pastes in fixtures/postmortem/real_threads/ and the fixtures cited):
* torch 1.13-2.0: ``[E ProcessGroupNCCL.cpp:737] [Rank R] Watchdog caught collective operation timeout:
  WorkNCCL(SeqNum=S, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for N milliseconds before timing out.`` (no Numel,
  no rank prefix) and the allocator's "(GPU g; X GiB total capacity; ...)" OOM (c10/cuda/CUDACachingAllocator.cpp
  before torch 2.1);
* torch 2.1: ``[E ProcessGroupNCCL.cpp:475] [Rank R] Watchdog caught ... NumelIn=..., NumelOut=...`` and the OOM
  "GPU g has a total capacity of X GiB of which Y is free. Process PID has Z GiB memory in use." of 2.1-2.3;
* torch 2.2-2.3: the same behind torchrun's ``[rankR]:`` prefix (``[E ProcessGroupNCCL.cpp:523]``);
* torch 2.6+: ``[rankR]:[E<M><DD> hh:mm:ss.ns ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank R]
  Process group watchdog thread terminated with exception: [Rank R] Watchdog caught ...`` and ``torch.OutOfMemoryError``
  ("Including non-PyTorch memory, this process has ..." of torch >= 2.4), each line behind ``kubectl logs
  --timestamps``' ISO stamp, the raising rank's stamp 15 minutes AFTER every timeout;
* DeepSpeed's multi-node runner over pdsh (launcher/multinode_runner.py PDSHRunner): "host: " before each line
  it relays, on torch 2.3's lines;
* the raising rank's exception not an OOM: a Python exception (``KeyError`` in a data collator) under HF
  Trainer's ``[rankR]:`` traceback lines, the timeouts stamped before it by the glog clock.
"""

from __future__ import annotations

import datetime
import os

import pytest

from pmhelp import diagnose_dir

T0 = 1774058400          # 2026-03-21T02:00:00Z
BAD = 21


def _glog(t: float) -> str:
    d = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return f"E{d.month}{d.day:02d} {d:%H:%M:%S}.{d.microsecond:06d}000"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def _oom(fmt: str, g: int) -> str:
    if fmt == "2.0":
        return (f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB (GPU {g}; 79.35 GiB total "
                "capacity; 74.90 GiB already allocated; 1.10 GiB free; 76.85 GiB reserved in total by PyTorch) If "
                "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation. See "
                "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    if fmt == "2.1":
        return (f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU {g} has a total "
                "capacity of 79.15 GiB of which 1.10 GiB is free. Process 2450534 has 78.04 GiB memory in use. Of the "
                "allocated memory 74.90 GiB is allocated by PyTorch, and 1.95 GiB is reserved by PyTorch but "
                "unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU {g} has a total capacity of "
            "79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in "
            "use. Of the allocated memory 74.90 GiB is allocated by PyTorch, and 1.95 GiB is reserved by PyTorch but "
            "unallocated.")


def _timeout(fmt: str, r: int, t: float) -> str:
    work = ("WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=1800000) ran "
            f"for {1800000 + r} milliseconds before timing out.")
    if fmt == "2.0":
        return (f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
                f"SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for {1800000 + r} milliseconds before "
                "timing out.")
    if fmt == "2.1":
        return f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: {work}"
    if fmt in ("2.3", "ds-pdsh"):
        return f"[rank{r}]:[E ProcessGroupNCCL.cpp:523] [Rank {r}] Watchdog caught collective operation timeout: {work}"
    return (f"[rank{r}]:[{_glog(t)} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Process "
            f"group watchdog thread terminated with exception: [Rank {r}] Watchdog caught collective operation "
            f"timeout: {work}")


def write_folder(d: str, fmt: str, n: int) -> None:
    """`n` rank logs (node<k>/rank<r>.log, 8 a node): rank BAD raises, the others time out on collective 1580."""
    for r in range(n):
        node = os.path.join(d, f"node{r // 8}")
        os.makedirs(node, exist_ok=True)
        # timeouts in reverse rank order (no order to lean on); with "keyerror" the glog clock of the timeouts is
        # all there is, every timeout 28 minutes "before" the unstamped KeyError
        t = T0 + (60 if fmt == "keyerror" else 1800) + (n - r) * 0.01
        head = (f"[INFO|2026-03-21 02:00:00] llamafactory.hparams.parser:652 >> Process rank: {r}, world size: {n}, "
                f"device: cuda:{r % 8}, distributed training: True, compute dtype: torch.bfloat16")
        if r != BAD:
            body = [_timeout(fmt, r, t)]
        elif fmt == "keyerror":
            body = [f"[rank{r}]: Traceback (most recent call last):",
                    f'[rank{r}]:   File "/opt/conda/lib/python3.11/site-packages/transformers/data/data_collator.py", '
                    "line 46, in __call__",
                    f"[rank{r}]:     return self.torch_call(features)",
                    f"[rank{r}]: KeyError: 'labels'"]
        else:
            pre = f"[rank{r}]: " if fmt in ("2.3", "2.6", "ds-pdsh") else ""
            body = [f"{pre}Traceback (most recent call last):", pre + _oom(fmt, r % 8)]
        lines = [head] + body
        if fmt == "2.6":       # kubectl's stamps: the raising rank's line 15 minutes after every timeout
            lines = [f"{_iso(T0)} {lines[0]}"] + [f"{_iso(T0 + 2700 if r == BAD else t)} {x}" for x in lines[1:]]
        elif fmt == "ds-pdsh":   # DeepSpeed's multi-node runner (pdsh) puts "host: " before every line it relays
            lines = [f"node{r // 8}: {x}" for x in lines]
        with open(os.path.join(node, f"rank{r}.log"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")


# 256 ranks where the clocks lie (the Done-when's folder); the other formats on 32 ranks, which cost an eighth as much
@pytest.mark.parametrize(("fmt", "n"), [("2.0", 32), ("2.1", 32), ("2.3", 32), ("2.6", 256), ("keyerror", 32),
                                        ("ds-pdsh", 32)])
def test_ranks_in_each_generations_format_name_the_rank_that_raised(tmp_path, fmt, n):
    d = str(tmp_path / "ranks")
    write_folder(d, fmt, n)
    r = diagnose_dir(d)
    rk = r.sections["postmortem"]["ranks"]
    assert rk["count"] == n and rk["first_failed"]["rank"] == BAD, rk["first_failed"]
    assert rk["first_failed"]["state"] == "raised" and rk["waiting_count"] == n - 1
    want = "run-crashed" if fmt == "keyerror" else "cuda-oom"
    assert r.findings[0].name == want and r.findings[0].location.file.endswith(f"rank{BAD}.log"), \
        [(f.name, f.message[:120]) for f in r.findings[:3]]
    first = next(f for f in r.findings if f.name == "rank-failed-first")
    assert f"Rank {BAD}" in first.message and "causality" in first.message
