"""NCCL's communicator line read as the rank of the process that printed it (issue #25: an NCCL INFO "comm 0x..
rank R nranks N cudaDev D" line stated the rank but the report said "(the rank is not printed, device D)").

The line formats, by NCCL release (NVIDIA/nccl src/init.cc):
- 2.7-2.17: ``comm %p rank %d nranks %d cudaDev %d busId %x - Init COMPLETE`` (v2.7.8-1 init.cc:843, v2.10.3-1
  :907, v2.14.3-1 :1095);
- 2.18-2.20: ``comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START|COMPLETE``
  (v2.18.5-1 :1356/:1375, v2.19.3-1 :1394/:1418);
- 2.21: ``ncclCommInitRank comm %p rank ...`` and the split form ``ncclCommSplit comm %p ... parent %p color %d
  key %d`` (v2.21.5-1 :1541-1573); 2.21+ also ``comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d
  MNNVL %d`` (v2.21.5-1 :1160);
- 2.23+: ``%s comm %p rank ...`` with the API's name (v2.23.4-1 :1454/:1482); 2.29+ ``[Rank %d] %s comm %p ...``
  (v2.30.7 :1912); ``comm %p rank %d nranks %d cudaDev %d busId %lx - Destroy COMPLETE`` (v2.30.7 :375).
The prefix is NCCL's own ``host:pid:tid [cudaDev]`` (src/debug.cc). The rank is the one of the largest
communicator a process set up (the world group); a sub-group or a split numbers its ranks within itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.readers.runlogs.logs import read_text_log
from finetune_doctor.settings import Options

_P = "gpu-node-07:2871:{tid} [3] NCCL INFO "
_WARN = ("gpu-node-07:2871:3155 [3] transport/net_ib.cc:1294 NCCL WARN NET/IB : Got completion from peer "
         "10.0.3.9<43012> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.3.7\n"
         "gpu-node-07:2871:3155 [3] NCCL INFO transport/net.cc:1305 -> 6\n")

FORMATS = {
    "2.7-2.17": "comm 0x7f3c2c001f10 rank 11 nranks 16 cudaDev 3 busId 3d000 - Init COMPLETE",
    "2.18-2.20": ("comm 0x55d1c3a0b9e0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId 0x6a1f2e3c4b5a6978 "
                  "- Init COMPLETE"),
    "2.21": ("ncclCommInitRank comm 0x55d1c3a0b9e0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId "
             "0x6a1f2e3c4b5a6978 - Init COMPLETE"),
    "2.21+ topology": "comm 0x55d1c3a0b9e0 rank 11 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
    "2.23+": ("ncclCommInitRankConfig comm 0x55d1c3a0b9e0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 3d000 commId "
              "0x6a1f2e3c4b5a6978 - Init START"),
    "2.29+": ("[Rank 11] ncclCommInitRankConfig comm 0x55d1c3a0b9e0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId "
              "3d000 commId 0x6a1f2e3c4b5a6978 - Init START"),
}


def _log(tmp_path: Path, body: str, name: str = "train.log") -> Path:
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    return p


@pytest.mark.parametrize("release", sorted(FORMATS))
def test_the_communicator_line_is_the_files_rank(tmp_path: Path, release: str) -> None:
    """Each release's line gives rank 11 of 16, not the CUDA device 3 of the prefix."""
    fe = read_text_log(str(_log(tmp_path, _P.format(tid=3012) + FORMATS[release] + "\n")))
    assert fe.origin.get("rank") == 11
    assert fe.origin.get("world") == 16


def test_a_sub_group_does_not_replace_the_world_rank(tmp_path: Path) -> None:
    """A later communicator of 8 ranks (a tensor-parallel group, a node-local group) numbers this process 3 in it;
    a split names its parent: the file's rank stays 11 of the 16-rank world."""
    body = (_P.format(tid=3012) + FORMATS["2.18-2.20"] + "\n"
            + _P.format(tid=3090) + "comm 0x55d1c4f00a10 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3d000 commId "
              "0x11aa22bb33cc44dd - Init COMPLETE\n"
            + _P.format(tid=3091) + "ncclCommSplit comm 0x55d1c4f00b20 rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId "
              "3d000 parent 0x55d1c3a0b9e0 color 1 key 11 commId 0x99 - Init COMPLETE\n")
    fe = read_text_log(str(_log(tmp_path, body)))
    assert (fe.origin.get("rank"), fe.origin.get("world")) == (11, 16)


def test_two_processes_in_one_file_name_no_single_rank(tmp_path: Path) -> None:
    """A file where two pids printed (all ranks' output in one stdout) has no one writer."""
    body = (_P.format(tid=3012) + FORMATS["2.7-2.17"] + "\n"
            + "gpu-node-07:2872:3013 [4] NCCL INFO comm 0x7f3c2c002000 rank 12 nranks 16 cudaDev 4 busId 3e000 - "
              "Init COMPLETE\n")
    fe = read_text_log(str(_log(tmp_path, body)))
    assert fe.origin.get("rank") is None
    assert fe.origin.get("ranks") == [11, 12]


def test_an_nccl_error_is_said_on_the_rank_its_process_printed(tmp_path: Path) -> None:
    """The WARN line carries only ``host:pid:tid [device]``: its rank is the one that pid's communicator line
    gave (11), not the device index (3)."""
    _log(tmp_path, _P.format(tid=3012) + FORMATS["2.18-2.20"] + "\n" + _WARN)
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    f = r.findings[0]
    assert f.name == "nccl-error"
    assert "on rank 11 " in f.message


def test_without_a_communicator_line_the_rank_stays_unknown(tmp_path: Path) -> None:
    """The same error with no communicator line: no rank is said (the device index is no rank)."""
    _log(tmp_path, _WARN)
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert r.findings[0].name == "nccl-error"
    assert "on rank" not in r.findings[0].message


_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of 79.15 "
        "GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of "
        "the allocated memory 74.20 GiB is allocated by PyTorch, and 2.41 GiB is reserved by PyTorch but "
        "unallocated.\n")
# torch 2.5's watchdog line without a "[Rank N]" prefix (ProcessGroupNCCL.cpp's glog prefix only)
_TIMEOUT = ("[E1207 10:41:07.118437213 ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800073 "
            "milliseconds before timing out.\n")


def test_rank_files_named_only_by_their_communicator_lines_join_as_ranks(tmp_path: Path) -> None:
    """Two files whose names hold no rank and whose lines no ``[rankN]`` prefix: the communicator lines say rank 0
    and rank 1; rank 0 raised a CUDA OOM, rank 1's watchdog timed out. The timeout is said on rank 1 and rank 0
    is the rank the other waited on (before: "(the rank is not printed, device 0)" and no root)."""
    _log(tmp_path, "gpu-a:4011:4102 [0] NCCL INFO comm 0x5581a0c3f2d0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId "
                   "1b000 commId 0x7d3c9a11e0f2b845 - Init COMPLETE\n" + _OOM, "worker-a.log")
    _log(tmp_path, "gpu-b:4012:4101 [0] NCCL INFO comm 0x55d2b1a4e3c0 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId "
                   "1b000 commId 0x7d3c9a11e0f2b845 - Init COMPLETE\n" + _TIMEOUT, "worker-b.log")
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert r.findings[0].name == "cuda-oom"
    t = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "NCCL watchdog timeout on rank 1:" in t.message
    assert "rank 0 failed first (CUDA out of memory), the others waited on it" in t.message
