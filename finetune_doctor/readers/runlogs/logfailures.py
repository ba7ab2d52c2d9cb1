"""Failure lines of a text log: CUDA OOM, loss-scale overflows, the NCCL watchdog and its desync report,
process deaths, CUDA runtime/library errors and kernel Xid lines. The patterns and the upstream lines that print
them are in readers/runlogs/logpatterns.py; `FailureLines` is mixed into readers/runlogs/logparse.py's parser, whose state
(`path`, `keep`, `during()`, the training bar's `step`) it uses.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from finetune_doctor.evidence import (
    DeviceError, KillRecord, NcclRecord, OomRecord, OverflowRecord, XidRecord,
)
from finetune_doctor.readers.runlogs import logpatterns as pat
from finetune_doctor.readers.runlogs.logcontext import Keep, LineContext, num, signame
from finetune_doctor.readers.runlogs.oomlines import CUT_CLASS, TORCH_OOM, oom_figures
from finetune_doctor.readers.runlogs.lineprefix import Prefix

# A Ray worker that vanished without raising (ray-project/ray doc/source/ray-observability/user-guides/debug-apps/
# debug-memory.rst, "Detecting Out-of-Memory errors": the message a task or actor of a worker killed by the Linux
# OOM killer raises, since SIGKILL cannot be handled): "Worker exit type: SYSTEM_ERROR (UNEXPECTED_SYSTEM_EXIT in
# older Ray) Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file."
RAY_WORKER_GONE = re.compile(r"(?:Worker PID: (?P<pid>\d+)\s+)?Worker exit type: (?:SYSTEM_ERROR|UNEXPECTED_SYSTEM_EXIT)"
                             r"\s+Worker exit detail: Worker unexpectedly exits with a connection error code")


# NCCL's own log prefix (src/debug.cc ncclDebugLog: "%s:%d:%d [%d] NCCL INFO|WARN ..." = host:pid:tid [cudaDev]):
# the CUDA device of the process that printed it, not its rank
NCCL_DEVICE = re.compile(r"^\S+:\d+:\d+ \[(?P<dev>\d+)\] NCCL (?:INFO|WARN)")
# NCCL's communicator line (NCCL_DEBUG=INFO), the process's rank in that communicator and its size, by release
# (NVIDIA/nccl src/init.cc): 2.7-2.17 "comm %p rank %d nranks %d cudaDev %d busId %x - Init COMPLETE" (v2.7.8-1
# :843, v2.14.3-1 :1095); 2.18-2.20 "... nvmlDev %d busId %lx commId 0x%llx - Init START|COMPLETE" (v2.18.5-1
# :1356/:1375); 2.21 "ncclCommInitRank comm %p ..." (v2.21.5-1 :1544/:1573); 2.23+ "%s comm %p ..." with the API's
# name (v2.23.4-1 :1454/:1482); 2.29+ "[Rank %d] %s comm %p ..." (v2.30.7 :1912); 2.21+ also "comm %p rank %d
# nRanks %d nNodes %d localRanks %d ..." (v2.21.5-1 :1160); "... - Destroy COMPLETE" (v2.30.7 :375). A split
# communicator ("ncclCommSplit ... parent %p color %d key %d") numbers its ranks within the split: not taken
NCCL_COMM = re.compile(r"^\S+:(?P<pid>\d+):\d+ \[\d+\] NCCL INFO (?:\[Rank \d+\] )?(?:ncclCommInit\w* )?"
                       r"comm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) n[Rr]anks (?P<n>\d+)\b(?!.*\bparent 0x)")


class _Status:
    """A match-like holder of a status read by `other_cuda_error` (what `_device` reads of a match)."""

    re = pat.re.compile("(?P<status>)")

    def __init__(self, status: str):
        self.status = status

    def group(self, name: str) -> str | None:
        return self.status if name == "status" else None


# the driver older than the CUDA runtime, without "CUDA error: " before it: torch/cuda/__init__.py `_lazy_init`'s
# "RuntimeError: The NVIDIA driver on your system is too old (found version 12080)" (c10/cuda/CUDAFunctions.cpp;
# the same text as a "UserWarning: CUDA initialization: ..." at import is a warning, not the failure), and
# cudaGetErrorString(cudaErrorInsufficientDriver) raised bare ("RuntimeError: CUDA driver version is insufficient
# for CUDA runtime version", TensorFlow's "Status: CUDA driver version is insufficient ...")
DRIVER_TOO_OLD = re.compile(r"NVIDIA driver on your system is too old|CUDA driver version is insufficient")


def other_cuda_error(text: str) -> _Status | None:
    """A CUDA runtime/library error printed by a stack other than torch (logpatterns.CUDA_RUNTIME_ERRORS): a
    runtime or driver error name, a wrapper's "CUDA Error" / "CUDA error at F:L", a failed check of a runtime
    call, or a cuDNN/cuBLAS status name alone. The status is the text torch would print after "CUDA error: "
    (cudaGetErrorString's, from the name or the code when the line gives one). None when the line holds none."""
    # a check of a runtime call ("e == cudaSuccess || e == cudaErrorCudartUnloading (719 vs. 0)") names the
    # accepted values, not the error: its code and text come first
    c = pat.CUDA_CHECK_RETURN.search(text) if " in file " in text and " at line " in text else None
    if c:
        return _Status(c.group("status").strip())
    if DRIVER_TOO_OLD.search(text) and "Warning" not in text:
        return _Status("CUDA driver version is insufficient for CUDA runtime version")
    m = pat.CUDA_NAMED.search(text) if ("cudaError" in text or "CUDA_ERROR_" in text) and (
        "== cudaSuccess" not in text) else None
    if m:
        known = pat.CUDA_ERROR_TEXT.get(m.group("name"))
        return _Status(known or (m.group("status") or m.group("name")).strip())
    m = pat.CUDA_ERROR_OTHER.search(text)
    if m:
        status = m.group("status")
        if status.endswith(": Success"):   # darknet appends strerror(errno) of a call that did not fail
            status = status[:-9]
        if status.startswith("'") and status.endswith("'"):   # NCCL's CUDACHECK quotes the text
            status = status[1:-1]
        if status.startswith(": "):
            status = status[2:]
        if status.startswith("CUDA: "):   # MXNet's prefix
            status = status[6:]
        known = pat.CUDA_ERROR_TEXT.get(m.group("code") or m.group("code2") or "")
        return _Status(known or status.rstrip("."))
    m = pat.LIB_STATUS.search(text)
    if m:
        return _Status(m.group("status"))
    m = pat.CUDA_STATUS_ALONE.search(text)
    # cudaGetErrorString's text with no "CUDA error: " before it (an issue title, a sentence): the error itself
    return _Status(m.group("status").lower()) if m else None


class FailureLines:
    """The failure half of the text-log parser (a mixin; see the module docstring)."""

    path: str
    keep: Keep
    step: int | None
    in_step: bool
    last_mem_label: str | None
    nccl_seen: set[tuple]
    timing: dict[str, Any]
    origin_votes: dict[str, Any]

    def during(self) -> int | None:  # pragma: no cover - provided by the parser
        raise NotImplementedError

    def point(self, name: str, step: int | None, value: float, line: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def step_now(self) -> int | None:  # pragma: no cover - provided by the parser
        raise NotImplementedError

    def fail_wall(self, wall: float | None) -> None:
        """The wall clock of the first failure line of this file (what orders the ranks' failures)."""
        if wall is not None and self.timing.get("fail_wall") is None:
            self.timing["fail_wall"] = wall

    # -- OOM ------------------------------------------------------------------------------------------------
    def _oom(self, text: str, line: int, rank: int | None, context: LineContext) -> bool:
        rec = None
        xpu = "XPU out of memory" in text   # kept in the record's text: the report names the device
        if "HIP out of memory" in text:
            # ROCm builds of torch print the CUDA caching allocator's message with "HIP" for "CUDA" (hipified
            # c10/cuda/CUDACachingAllocator.cpp): the same figures, read by the same expressions
            text = text.replace("HIP out of memory", "CUDA out of memory")
        elif "XPU out of memory" in text:
            # Intel's XPU caching allocator raises the same v2 message with "XPU" (c10/xpu/XPUCachingAllocator.cpp)
            text = text.replace("XPU out of memory", "CUDA out of memory")
        elif "MPS backend out of memory" in text:
            return self._mps_oom(text, line, rank, context)
        full = text
        k = text.find("CUDA out of memory")
        if k > 160:   # the expressions start with an optional class name: search from just before the message
            text = text[k - 160:]
        m = pat.OOM_V2.search(text) if "total capac" in text else None
        if m:
            procs, this = [], None
            for pm in pat.OOM_PROC.finditer(m.group("procs") or ""):
                if pm.group("self"):
                    this = pat.size_bytes(pm.group("mem"))
                else:
                    procs.append((int(pm.group("pid")), pat.size_bytes(pm.group("mem")) or 0.0))
            rec = OomRecord(self.path, line, self.during(), rank, "v2", exc=m.group("exc"),
                            requested=pat.size_bytes(m.group("requested")), gpu=int(m.group("gpu")),
                            total=pat.size_bytes(m.group("total")), free=pat.size_bytes(m.group("free")),
                            allocated=pat.size_bytes(m.group("allocated")),
                            reserved_unallocated=pat.size_bytes(m.group("reserved_unallocated")),
                            private_pools=pat.size_bytes(m.group("private_pools")), allowed=pat.size_bytes(m.group("allowed")),
                            this_process=this, procs=tuple(procs))
        elif "NPU out of memory" in full:
            rec = self._npu_oom(full, line, rank)
        else:
            m = pat.OOM_LEGACY.search(text) if "total capacity;" in text else None
            if m:
                rec = OomRecord(self.path, line, self.during(), rank, "legacy", exc=m.group("exc"),
                                requested=pat.size_bytes(m.group("requested")), gpu=int(m.group("gpu")),
                                total=pat.size_bytes(m.group("total")), free=pat.size_bytes(m.group("free")),
                                allocated=pat.size_bytes(m.group("allocated")), reserved=pat.size_bytes(m.group("reserved")),
                                allowed=pat.size_bytes(m.group("allowed")))
            elif "CUDA out of memory" in text:
                # a message cut by the paste: keep it only if it is an exception line or names a size
                m = pat.OOM_PARTIAL.search(text)
                if m and (m.group("exc") or m.group("requested") or text.lstrip().startswith("CUDA out of memory")):
                    rec = OomRecord(self.path, line, self.during(), rank, "partial", exc=m.group("exc"),
                                    requested=pat.size_bytes(m.group("requested")), **oom_figures(text))
            elif (om := TORCH_OOM.search(text)) is not None:   # the class and the request alone (issue titles)
                rec = OomRecord(self.path, line, self.during(), rank, "partial", exc=om.group("exc"),
                                requested=pat.size_bytes(om.group("requested")))
            elif (cut := CUT_CLASS.search(text)) and "CUDA out of memory".startswith(cut.group("msg")):
                # the message cut inside its first words ("CUDA out of mem"): torch's allocator class says the OOM
                rec = OomRecord(self.path, line, self.during(), rank, "partial", exc=cut.group("exc"))
            elif "Caught OutOfMemoryError in replica" in text and (dp := pat.DP_CAUGHT_OOM.search(text)):
                # DataParallel re-raised a replica's CUDA OOM (torch/_utils.py ExceptionWrapper): the figures are
                # in the replica's own traceback below, which a paste often leaves out
                rec = OomRecord(self.path, line, self.during(), rank, "partial", exc="torch.cuda.OutOfMemoryError",
                                gpu=int(dp.group("gpu")))
            elif pat.OOM_RUNTIME.search(text):
                ce = pat.CUDA_ERROR.search(text)   # torch >= 2.8 raises it as torch.AcceleratorError
                rec = OomRecord(self.path, line, self.during(), rank, "runtime", exc=ce.group("exc") if ce else None)
        if rec is None:
            return False
        frames = context.frames()
        shown = full.replace("CUDA out of memory", "XPU out of memory") if xpu else full
        rec = replace(rec, frames=frames, memory_label=self.last_mem_label, text=shown.strip()[:1000])
        self.keep.add("ooms", rec)
        return True

    def _mps_oom(self, text: str, line: int, rank: int | None, context: LineContext) -> bool:
        """Apple's Metal backend's OOM (logpatterns.OOM_MPS): MPS allocated, other allocations and the limit ("max
        allowed", a share of unified memory) as allocated / reserved-by-others / total."""
        m = pat.OOM_MPS.search(text)
        if m is None:
            return False
        size = pat.size_bytes
        rec = OomRecord(self.path, line, self.during(), rank, "mps", exc=m.group("exc"),
                        requested=size(m.group("requested")), allocated=size(m.group("allocated")),
                        total=size(m.group("total")), frames=context.frames(), memory_label=self.last_mem_label,
                        text=text.strip()[:1000])
        self.keep.add("ooms", rec)
        return True

    def _npu_oom(self, text: str, line: int, rank: int | None) -> OomRecord | None:
        """torch_npu's OOM message (logpatterns.OOM_NPU): the legacy layout's sizes, device index as `gpu`."""
        k = text.find("NPU out of memory")
        m = pat.OOM_NPU.search(text[max(k - 160, 0):])
        if m is None:
            return None
        size = pat.size_bytes
        return OomRecord(self.path, line, self.during(), rank, "npu", exc=m.group("exc"),
                         requested=size(m.group("requested")), gpu=int(m.group("gpu")) if m.group("gpu") else None,
                         total=size(m.group("total")), free=size(m.group("free")),
                         allocated=size(m.group("allocated")), reserved=size(m.group("reserved")),
                         allowed=size(m.group("allowed")))

    # -- loss scaling -----------------------------------------------------------------------------------------
    def _overflow(self, text: str, line: int, rank: int | None) -> None:
        m = pat.DS_OVERFLOW.search(text)
        if m:
            r = int(m.group("rank")) if m.group("rank") else rank
            if m.group("new"):
                rec = OverflowRecord(self.path, line, self.during(), r, "reduce", float(m.group("attempted")),
                                     float(m.group("new")))
            elif m.group("h"):
                rec = OverflowRecord(self.path, line, self.during(), r, "hysteresis", float(m.group("attempted")),
                                     float(m.group("attempted")), int(m.group("h2")))
            else:
                rec = OverflowRecord(self.path, line, self.during(), r, "bare")
            self.keep.add("overflows", rec)
            self.in_step = self.step is not None
            if rec.new_scale is not None:
                self.point("loss_scale", self.during(), rec.new_scale, line)
            return
        m = pat.DS_OVERFLOW_DETECTED.search(text)
        if m:
            rec = OverflowRecord(self.path, line, self.during(), rank, "reduce", float(m.group("attempted")),
                                 float(m.group("new")))
            self.keep.add("overflows", rec)
            self.in_step = self.step is not None
            self.point("loss_scale", self.during(), rec.new_scale, line)
            return
        m = pat.APEX_OVERFLOW.search(text)
        if m:
            new = float(m.group("new"))
            self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "reduce", new * 2, new))
            self.in_step = self.step is not None
            self.point("loss_scale", self.during(), new, line)
            return
        m = pat.OTHER_OVERFLOW.search(text)
        if m:   # fairseq / Megatron: the new scale only; they halve at an overflow (logpatterns.OTHER_OVERFLOW)
            new = float(m.group("new"))
            self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "reduce", new * 2, new))
            self.timing["scale_reported"] = new
            self.in_step = self.step is not None
            self.point("loss_scale", self.during(), new, line)
            return
        m = pat.DS_SCALE_CHANGE.search(text)
        if m and m.group("dir") == "Reducing":
            # ZeRO-0 fp16 optimizers print it after "Grad overflow on iteration N" (fused_optimizer.py:406-407);
            # the same halving may also have been printed as an OVERFLOW line: count it once
            old_s, new_s = float(m.group("old")), float(m.group("new"))
            prev = (self.keep.lists.get("overflows") or [None])[-1]
            if prev is None or (prev.attempted, prev.new_scale) != (old_s, new_s):
                self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "reduce", old_s, new_s))
                self.in_step = self.step is not None
                self.point("loss_scale", self.during(), new_s, line)
            return
        if m and m.group("dir") == "Increasing":
            self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "increase",
                                                      float(m.group("old")), float(m.group("new"))))
            self.in_step = self.step is not None
            self.point("loss_scale", self.during(), float(m.group("new")), line)


    def _numerics(self, text: str, line: int, rank: int | None) -> None:
        """Other trainers' loss-scale reports and NaN lines (logpatterns.SCALE_REPORT, NONFINITE_LINES). A
        reported scale below the last one is an overflow that halved it (attempted = the last one); a first
        report below 1 is a scale that had already collapsed before the log shows it (dynamic scalers start at
        2^16: torch GradScaler's init_scale, apex, DeepSpeed's initial_scale_power 16), recorded as kind
        ``reported``; exactly 1 is what a run without loss scaling prints (Megatron's bf16 "loss scale: 1.0").
        A NaN line is a non-finite point of its metric at the step in progress."""
        if ("cale" in text and "Attempted loss scale" not in text and "educing" not in text
                and "OVERFLOW" not in text and "setting" not in text):
            m = pat.SCALE_REPORT.search(text)
            v = num(m.group(1)) if m else None
            if v is not None and math.isfinite(v):
                prev = self.timing.get("scale_reported")
                self.timing["scale_reported"] = v
                if prev is not None and v < prev:
                    self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "reduce", prev, v))
                elif prev is None and v < 1.0:
                    self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "reported", v, v))
                self.point("loss_scale", self.during(), v, line)
        if "NaN" in text or "nan" in text or "inf" in text or "finite" in text or "Invalid loss" in text:
            for metric, rx in pat.NONFINITE_LINES:
                m = rx.search(text)
                if m is None:
                    continue
                if metric == "monitored":
                    if "loss" not in m.group("name"):
                        return
                    metric = "loss"
                v = float(m.groupdict().get("v") or "nan")
                own = m.groupdict().get("step")
                self.point(metric, int(own) if own else self.step_now(), v, line)
                return

    # -- NCCL -------------------------------------------------------------------------------------------------
    def _nccl(self, text: str, line: int, rank: int | None, wall: float | None) -> None:
        if " NCCL " in text and (d := NCCL_DEVICE.match(text.strip())):
            # the one device NCCL's lines name (facts nccl_device; nccl_devices_mixed once a second one is seen):
            # what a report without a printed rank can still say of the process
            dev = int(d.group("dev"))
            if "nccl_device" in self.facts and self.facts["nccl_device"].value != dev:
                self.fact("nccl_devices_mixed", True, line)
            self.fact("nccl_device", dev, line)
        if rank is None and " NCCL " in text:
            rank = self._nccl_comm_rank(text)
        # each expression is tried only where its literal occurs: a hit's window can be kilobytes of one line
        m = pat.NCCL_TIMEOUT.search(text) if "Watchdog caught" in text else None
        if m:
            r = int(m.group("rank")) if m.group("rank") else rank

            def gi(k: str) -> int | None:
                return int(m.group(k)) if m.group(k) else None

            key = ("timeout", r, gi("seq"), m.group("op"))
            if key in self.nccl_seen:   # the same timeout repeated by "watchdog thread terminated" / "what():"
                return
            self.nccl_seen.add(key)
            self.fail_wall(wall)
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), r, "timeout", op=m.group("op"),
                                             seq=gi("seq"), numel_in=gi("nin"), numel_out=gi("nout"),
                                             timeout_ms=gi("tmo"), ran_ms=gi("ran"), text=text.strip()[:500],
                                             wall=wall))
            return
        m = pat.NCCL_LAST.search(text) if "NCCL work" in text or "detected by watchdog" in text else None
        if m:
            work = int(m.group("work"))
            key = ("last", int(m.group("rank")), m.group("pg"), work, m.group("what")[:7])
            if key in self.nccl_seen:
                return
            self.nccl_seen.add(key)
            self.fail_wall(wall)
            self.keep.add("nccl", NcclRecord(
                self.path, line, self.during(), int(m.group("rank")), "last_work",
                op="timeout" if m.group("what").startswith("Timeout") else "exception", work=work,
                last_enqueued=int(m.group("enq")) if m.group("enq") else None,
                last_completed=int(m.group("done")) if m.group("done") else None, text=text.strip()[:500],
                pg=m.group("pg"), pg_desc=m.group("desc"), wall=wall))
            return
        m = pat.NCCL_HEARTBEAT.search(text) if "watchdog got stuck" in text else None
        if m:
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), int(m.group("rank")) if m.group("rank")
                                             else rank, "heartbeat", ran_ms=int(m.group("sec")) * 1000,
                                             text=text.strip()[:500], wall=wall))
            return
        for kind, rx in (("desync-missing", pat.DESYNC_MISSING), ("desync-started", pat.DESYNC_STARTED),
                         ("desync-ended", pat.DESYNC_ENDED)):
            m = rx.search(text) if ("lagging" in text or "collective #" in text) else None
            if m:
                ranks = tuple(int(x) for x in m.group("ranks").replace(" ", "").split(",") if x.isdigit())
                seq = int(m.group("seq")) if "seq" in rx.groupindex else None
                self.keep.add("nccl", NcclRecord(self.path, line, self.during(), rank, kind, seq=seq, ranks=ranks,
                                                 text=text.strip()[:500], wall=wall))
                return
        if "thread terminated" in text and "imeout" not in text and "timed out" not in text \
                and pat.NCCL_TERMINATED.search(text):
            # the watchdog aborts on any asynchronous error of the stream it watches ("... terminated with
            # exception: CUDA error: an illegal memory access was encountered"): the CUDA error is the event
            # (recorded by _device), the abort is not a collective timeout
            what = text[pat.NCCL_TERMINATED.search(text).end():].strip()[:200] or None
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), rank, "watchdog-error", op=what,
                                             text=text.strip()[:500], wall=wall))
            return
        if ("have failed or timed out" in text or "thread terminated" in text or "checkTimeout" in text
                or "Exception raised from" in text) and (
                pat.NCCL_FAILED.search(text) or pat.NCCL_TERMINATED.search(text) or pat.NCCL_CHECK_FRAME.search(text)):
            if ("failed", rank) not in self.nccl_seen:
                self.nccl_seen.add(("failed", rank))
                self.fail_wall(wall)
                # only the watchdog thread's own stack: it ended on a timeout or an error, the message saying
                # which is not in the paste (collectives.py words it so)
                stack = "watchdog-stack" if ("from run at" in text or "from ncclCommWatchdog at" in text) else None
                self.keep.add("nccl", NcclRecord(self.path, line, self.during(), rank, "failed", op=stack,
                                                 text=text.strip()[:500], wall=wall))
            return
        m = pat.NCCL_ERROR.search(text) if ("NCCL error" in text or "Error" in text or "NCCL WARN" in text
                                            or "NCCL failure" in text or ".cpp:" in text) else None
        if m and "NCCL INFO" not in text:
            what = m.group("desc") or m.group("name") or ("WARN " + m.group("warn").strip()[:200] if m.group("warn")
                                                          else None)
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), rank, "error", op=what,
                                             text=text.strip()[:500], wall=wall))

    def _nccl_comm_rank(self, text: str) -> int | None:
        """The rank of the process that printed an NCCL line, from its communicator lines (`NCCL_COMM`, keyed by
        the pid of NCCL's prefix): the rank in the largest communicator that process set up so far (the world
        group; a sub-group's line numbers its ranks within the group), kept as the vote ``nccl_rank`` {pid: (rank,
        nranks)} for the file's writer (readers/runlogs/logs.py `_origin`). None before any communicator line of that pid."""
        known: dict[str, tuple[int, int]] = self.origin_votes.setdefault("nccl_rank", {})
        m = NCCL_COMM.match(text.strip())
        if m:
            pid, r, n = m.group("pid"), int(m.group("rank")), int(m.group("n"))
            if pid not in known or n > known[pid][1]:
                known[pid] = (r, n)
        p = text.strip().split(" ", 1)[0].split(":")
        got = known.get(p[1]) if len(p) >= 3 else None
        return got[0] if got else None

    # -- process death ----------------------------------------------------------------------------------------
    def _kill(self, text: str, line: int, rank: int | None, context: LineContext | None = None) -> None:
        st = self.during()
        if self._short_kill(text, line, rank, context) or self._child_entry(text, line, context):
            return
        m = pat.KERNEL_OOM.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "cgroup-oom" if m.group("cg") else "kernel-oom",
                                              signal="SIGKILL", pid=int(m.group("pid")),
                                              bytes=int(m.group("rss")) * 1024 if m.group("rss") else None,
                                              text=text.strip()[:300]))
            return
        m = pat.SLURM_OOM.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "slurm-oom", signal="SIGKILL", text=text.strip()[:300]))
            return
        m = pat.TORCHRUN_FAILED.search(text)
        if m:
            code = int(m.group("code"))
            self.keep.add("kills", KillRecord(self.path, line, st, "torchrun-exit", exitcode=code,
                                              signal=signame(code), local_rank=int(m.group("lr")),
                                              pid=int(m.group("pid")), text=text.strip()[:300]))
            return
        m = pat.LAUNCHER_EXIT.search(text)
        if m:
            code = int(m.group("rc"))
            # the child's command line, which DeepSpeed's launcher prints, gives its local rank
            lr = pat.LAUNCHER_LOCAL_RANK.search(text)
            self.keep.add("kills", KillRecord(self.path, line, st, "launcher-exit", exitcode=code,
                                              signal=signame(code), local_rank=int(lr.group(1)) if lr else None,
                                              text=text.strip()[:300]))
            return
        m = pat.LAUNCHER_EXIT_QUOTED.search(text) if "sigkill_handler" not in text else None
        if m:
            code = int(m.group("rc"))
            self.keep.add("kills", KillRecord(self.path, line, st, "launcher-exit", exitcode=code,
                                              signal=signame(code), text=text.strip()[:300]))
            return
        if self._ray_kill(text, line, rank, st):
            return
        m = pat.LOADER_SIGNAL.search(text) if "encountered in worker" in text else None
        if m:
            sig, _ = pat.LOADER_SIGNALS[m.group("what")]
            self.keep.add("kills", KillRecord(self.path, line, st, "loader-signal", signal=sig,
                                              rank=rank, text=text.strip()[:300]))
            return
        m = pat.LOADER_KILLED.search(text) if "is killed by signal" in text else None
        if m and m.group("what") in pat.STRSIGNAL:
            self.keep.add("kills", KillRecord(self.path, line, st, "loader-signal",
                                              signal=pat.STRSIGNAL[m.group("what")], pid=int(m.group("pid")),
                                              rank=rank, text=text.strip()[:300]))
            return
        m = pat.LAUNCHER_KILL.search(text) or pat.LAUNCHER_SIGNALLED.search(text)
        if m:
            sig = m.groupdict().get("sig")
            self.keep.add("kills", KillRecord(self.path, line, st, "launcher-signalled" if sig else "launcher-kill",
                                              signal=sig, pid=int(m.group("pid")) if not sig else None,
                                              text=text.strip()[:300]))
            return
        m = pat.ELASTIC_SIGNALLED.search(text) if "death signal" in text or "SignalException" in text else None
        if m:
            sig = m.group("sig") or m.group("sig2")
            self.keep.add("kills", KillRecord(self.path, line, st, "elastic-signalled",
                                              signal=pat.SIGNAL_NAMES.get(sig, sig if sig.startswith("SIG") else None),
                                              pid=int(m.group("pid")) if m.group("pid") else None,
                                              text=text.strip()[:300]))
            return
        m = pat.CPU_ALLOC.search(text) or (pat.WIN_COMMIT.search(text) if "WinError 1455" in text else None)
        if m:   # WIN_COMMIT states no size
            self.keep.add("kills", KillRecord(self.path, line, st, "cpu-alloc", bytes=float(m.group("bytes")) if
                                              "bytes" in m.re.groupindex and m.group("bytes") else None, text=text.strip()[:300]))
            return
        if self._outside_stop(text, line, rank, st):
            return
        m = pat.HOST_MEMORY_ERROR.search(text) if "MemoryError" in text else None
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "cpu-alloc", bytes=_host_alloc_bytes(m.group("msg")),
                                              signal=None, rank=rank, text=text.strip()[:300]))
            return
        m = pat.SHELL_KILLED.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "shell-killed", exitcode=137, signal="SIGKILL",
                                              pid=int(m.group("pid")) if m.group("pid") else None,
                                              text=text.strip()[:300]))
            return
        m = pat.SHELL_SIGNALED.search(text)
        if m:
            sig, code = pat.SHELL_SIGNALS[m.group("what") or m.group("bare") or m.group("py")]
            self.keep.add("kills", KillRecord(self.path, line, st, "shell-signaled", exitcode=code, signal=sig,
                                              pid=int(m.group("pid")) if m.group("pid") else None, rank=rank,
                                              text=text.strip()[:300]))
            return
        m = pat.SIGNAL.search(text)
        if m and "traceback" not in text:
            self.keep.add("kills", KillRecord(self.path, line, st, "signal", exitcode=-int(m.group("num")),
                                              signal=m.group("name"), pid=int(m.group("pid")), rank=rank,
                                              text=text.strip()[:300]))


    def _outside_stop(self, text: str, line: int, rank: int | None, st: int | None) -> bool:
        """A scheduler or container that ended the run: Slurm's "*** JOB N ON node CANCELLED AT T DUE TO TIME
        LIMIT ***" (SIGTERM, then SIGKILL after KillWait), Lightning's "[rank: 0] Received SIGTERM: 15", and
        Kubernetes' "Reason: OOMKilled" (the container's memory cgroup). True when one was recorded."""
        m = pat.SLURM_CANCELLED.search(text) if "CANCELLED AT" in text else None
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "slurm-cancel", signal="SIGTERM", host=m.group("node"),
                                              text=text.strip()[:300]))
            return True
        m = pat.LIGHTNING_SIGTERM.search(text) if "Received SIGTERM" in text else None
        if m:
            r = int(m.group("rank")) if m.group("rank") else rank
            self.keep.add("kills", KillRecord(self.path, line, st, "trainer-signalled", signal="SIGTERM", rank=r,
                                              text=text.strip()[:300]))
            return True
        if "OOMKilled" in text and pat.K8S_OOMKILLED.search(text):
            self.keep.add("kills", KillRecord(self.path, line, st, "cgroup-oom", exitcode=137, signal="SIGKILL",
                                              text=text.strip()[:300]))
            return True
        return False

    def _ray_kill(self, text: str, line: int, rank: int | None, st: int | None) -> bool:
        """Ray's memory monitor killing a worker (`pat.RAY_OOM`), or a Ray worker gone without an exception of its
        own (`RAY_WORKER_GONE`: the OOM killer's SIGKILL, by Ray's own docs); True when the line was one."""
        m = pat.RAY_OOM.search(text) if "Task was killed due" in text or "Memory on the node" in text else None
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "ray-oom", signal="SIGKILL",
                                              pid=int(m.group("pid")) if m.group("pid") else None, rank=rank,
                                              host=m.group("ip"), text=text.strip()[:600]))
            return True
        m = RAY_WORKER_GONE.search(text) if "Worker exit type" in text else None
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "ray-worker-gone", rank=rank,
                                              pid=int(m.group("pid")) if m.group("pid") else None,
                                              text=text.strip()[:600]))
        return m is not None

    def _short_kill(self, text: str, line: int, rank: int | None, context: LineContext | None) -> bool:
        """The kills a short paste shows without a launcher's lines: UCX's "Caught signal N (...)", a wrapper's
        "... with exit code -N" or CPython's "died with <Signals.SIGx: N>" (a negative return code is the signal
        that ended the child), and the DataLoader's "killed by signal: Bus error." when a paste broke the line
        inside the signal's name. True when one was recorded."""
        st = self.during()
        g = pat.GLOG_SIGNAL.search(text) if " (@0x" in text else None
        if g:
            code = {"SIGSEGV": -11, "SIGBUS": -7, "SIGILL": -4, "SIGFPE": -8, "SIGABRT": -6}.get(g.group("name"))
            self.keep.add("kills", KillRecord(self.path, line, st, "signal", exitcode=code, signal=g.group("name"),
                                              pid=int(g.group("pid")), rank=rank, text=text.strip()[:300]))
            return True
        m = pat.CAUGHT_SIGNAL.search(text) if "Caught signal " in text else None
        if m:
            num = int(m.group("num"))
            self.keep.add("kills", KillRecord(self.path, line, st, "signal", exitcode=-num,
                                              signal=pat.STRSIGNAL.get(m.group("what")) or signame(-num), rank=rank,
                                              text=text.strip()[:300]))
            return True
        m = (pat.EXIT_CODE_SIGNAL.search(text) if "with exit code -" in text else None) or (
            pat.DIED_WITH.search(text) if "died with <Signals." in text else None)
        if m:
            code = int(m.group("code")) if "code" in m.groupdict() else -int(m.group("num"))
            self.keep.add("kills", KillRecord(self.path, line, st, "exit-signal", exitcode=code, signal=signame(code),
                                              rank=rank, text=text.strip()[:300]))
            return True
        if "is killed by signal" in text and context is not None and not pat.LOADER_KILLED.search(text):
            nxt = context.following_lines(1)
            joined = text.rstrip() + " " + (nxt[0].strip() if nxt else "")
            m = pat.LOADER_KILLED.search(joined)
            if m and m.group("what") in pat.STRSIGNAL:
                self.keep.add("kills", KillRecord(self.path, line, st, "loader-signal",
                                                  signal=pat.STRSIGNAL[m.group("what")], pid=int(m.group("pid")),
                                                  rank=rank, text=joined.strip()[:300]))
                return True
        return False

    def _child_failures(self, line: int, context: LineContext) -> None:
        """torchelastic's "Failures:" list (torch/distributed/elastic/multiprocessing/errors/__init__.py,
        ``ChildFailedError.format_msg``): the failed children other than the root cause, one "[n]:" entry each with
        rank, exitcode and traceback lines; "<NO_OTHER_FAILURES>" when there are none. Recorded as "child-failed"."""
        entry: dict[str, Any] = {}

        def close() -> None:
            if entry.get("code") is not None:
                code = entry["code"]
                self.keep.add("kills", KillRecord(self.path, line, self.during(), "child-failed", exitcode=code,
                                                  signal=entry.get("sig") or signame(code), rank=entry.get("rank"),
                                                  local_rank=entry.get("lr"), pid=entry.get("pid"),
                                                  text=(entry.get("tb") or "")[:300]))
            entry.clear()

        for ln in context.following_lines(60):
            ln = pat.RANK.sub("", ln).strip()
            if ln.startswith("Root Cause") or ln.startswith("=") or "NO_OTHER_FAILURES" in ln:
                break
            if pat.CF_ENTRY.match(ln):
                close()
            elif (m := pat.CF_RANK.search(ln)):
                entry["rank"], entry["lr"] = int(m.group("rank")), int(m.group("lr"))
            elif (m := pat.CF_EXIT.search(ln)):
                entry["code"], entry["pid"], entry["sig"] = int(m.group("code")), int(m.group("pid")), m.group("sig")
            elif (m := pat.CF_TB.search(ln)):
                entry["tb"] = m.group("tb").strip()
        close()

    def _child_entry(self, text: str, line: int, context: LineContext | None) -> bool:
        """One "[n]:" entry of torchelastic's failure summary pasted without the ChildFailedError header above it
        (torch/distributed/elastic/multiprocessing/errors/__init__.py ``_FAILURE_FORMAT_TEMPLATE``: "time", "host",
        "rank : R (local_rank: L)", "exitcode : N (pid: P)", "error_file", "traceback" lines), read at its
        exitcode line. An entry under "Root Cause (first observed failure):" or "Failures:" is the header readers'
        (`_child_failed`, `_child_failures`), so it is left to them. The first headerless entry of a file is
        recorded as "child-failed-root" (a paste of one entry is most often the root-cause section, the one users
        copy), later ones as "child-failed". False when the line is no such entry."""
        m = pat.CF_EXIT.match(pat.RANK.sub("", text).strip()) if context is not None else None
        if m is None:
            return False
        before = context.buf[max(0, context.ls - 8192):context.ls].decode("utf-8", "replace").splitlines()[-80:]
        rank = lr = host = None
        own = True   # still inside this entry (below its "[n]:" line)
        for b in reversed(before):
            b = pat.RANK.sub("", b).strip()
            if b.startswith("Root Cause") or b == "Failures:":
                return False
            if b.startswith("=" * 8):
                break
            if own and (r := pat.CF_RANK.match(b)):
                rank, lr = int(r.group("rank")), int(r.group("lr"))
            elif own and (h := pat.CF_HOST.match(b)):
                host = h.group("host")
            own = own and not pat.CF_ENTRY.match(b)
        tb = next((t.group("tb").strip() for ln in context.following_lines(3)
                   if (t := pat.CF_TB.match(pat.RANK.sub("", ln).strip()))), "")
        code = int(m.group("code"))
        root = not any(k.kind == "child-failed-root" for k in self.keep.get("kills"))
        self.keep.add("kills", KillRecord(self.path, line, self.during(), "child-failed-root" if root else "child-failed",
                                          exitcode=code, signal=m.group("sig") or signame(code), rank=rank,
                                          local_rank=lr, pid=int(m.group("pid")), host=host, text=tb[:300]))
        return True

    def _child_failed(self, line: int, context: LineContext) -> None:
        """torchrun's ChildFailedError block: parse the entry under "Root Cause (first observed failure):"."""
        rank = lr = code = pid = None
        sig = host = tb = None
        for ln in context.following_lines(12):
            ln = pat.RANK.sub("", ln)
            if ln.strip().startswith("=") and rank is not None:
                break
            if (m := pat.CF_RANK.search(ln)):
                rank, lr = int(m.group("rank")), int(m.group("lr"))
            elif (m := pat.CF_EXIT.search(ln)):
                code, pid, sig = int(m.group("code")), int(m.group("pid")), m.group("sig")
            elif (m := pat.CF_HOST.search(ln)):
                host = m.group("host")
            elif (m := pat.CF_TB.search(ln)):
                tb = m.group("tb").strip()
        if code is None:
            return
        if sig is None:
            sig = signame(code)
        self.keep.add("kills", KillRecord(self.path, line, self.during(), "child-failed-root", exitcode=code,
                                          signal=sig, rank=rank, local_rank=lr, pid=pid, host=host,
                                          text=(tb or "")[:300]))


    # -- CUDA runtime and library errors ------------------------------------------------------------------------
    def _device(self, text: str, line: int, rank: int | None, context: LineContext, wall: float | None) -> None:
        m = pat.DEVICE_ASSERT.search(text)
        bare = pat.DEVICE_ASSERT_BARE.search(text) if m is None and "Assertion " in text else None
        if m or bare:
            site = f"{m.group('file')} {m.group('kernel') or ''}".strip() if m else None
            cond = (m or bare).group("cond") or (m or bare).group("cond2")
            self.keep.add("asserts", (line, site, cond))
            # the assert is the event even when the paste holds no "CUDA error: device-side assert triggered"
            # line after it; that line, when it comes, is the same error (same key) and adds nothing
            key = ("device", "device-assert", rank, "device-side assert triggered")
            known = any(d.kind == "device-assert" for d in self.keep.lists.get("device_errors") or [])
            if key not in self.nccl_seen and not known:
                self.nccl_seen.add(key)
                self.fail_wall(wall)
                self.keep.add("device_errors", DeviceError(self.path, line, self.during(), rank, "device-assert",
                                                           status="device-side assert triggered", assert_site=site,
                                                           assert_cond=cond, text=text.strip()[:500]))
            return
        m = pat.CUDA_ERROR.search(text) or pat.CUDNN_ERROR.search(text) or (
            pat.CUDA_ERROR_THC.search(text) if "untime error (" in text else None) or (
            pat.CUDA_ERROR_ALT.search(text) if "CUDA warning" in text or "cudaError" in text else None)
        if m is None:
            if "CUBLAS_STATUS_" in text and "ALLOC_FAILED" not in text and "when calling" in text:
                m = pat.CUDA_ERROR.search("CUDA error: " + text[text.index("CUBLAS_STATUS_"):])
            if m is None:
                m = other_cuda_error(text)
            if m is None:
                return
        status = m.group("status").strip().rstrip(".")
        low = status.lower()
        if "CUDNN_STATUS" in status:
            kind = "cudnn"
        elif "CUBLAS_STATUS" in status:
            kind = "cublas"
        elif "illegal memory access" in low or "illegal address" in low or "misaligned address" in low:
            kind = "illegal-address"
        elif "device-side assert" in low:
            kind = "device-assert"
        elif "out of memory" in low:
            kind = "out-of-memory"
        elif "ecc" in low:
            kind = "ecc"
        elif "launch failure" in low or "launch timed out" in low:
            kind = "launch-failure"
        else:
            kind = "other"
        key = ("device", kind, rank, status)
        if key in self.nccl_seen:   # the same error re-raised by every frame of a chained exception
            recs = self.keep.lists.get("device_errors") or []
            for i, rec in enumerate(recs):
                # an assert line recorded first: the exception line names the class it was raised as
                if rec.kind == kind and rec.exc is None and "exc" in m.re.groupindex and m.group("exc"):
                    recs[i] = replace(rec, exc=m.group("exc"))
                    break
            return
        self.nccl_seen.add(key)
        self.fail_wall(wall)
        site = cond = None
        asserts = self.keep.lists.get("asserts")
        if asserts:
            _, site, cond = asserts[0]
        else:
            for ln in context.following_lines(40):   # the kernel's own assert lines often follow the traceback
                a = pat.DEVICE_ASSERT.search(ln)
                if a:
                    site = f"{a.group('file')} {a.group('kernel') or ''}".strip()
                    cond = a.group("cond") or a.group("cond2")
                    break
        call = m.group("call") if "call" in m.re.groupindex else None
        exc = m.group("exc") if "exc" in m.re.groupindex else None
        self.keep.add("device_errors", DeviceError(self.path, line, self.during(), rank, kind, exc=exc,
                                                   status=status[:200], call=call, assert_site=site,
                                                   assert_cond=cond, text=text.strip()[:500]))

    # -- kernel log -------------------------------------------------------------------------------------------
    def _kernel(self, text: str, line: int, pre: Prefix) -> None:
        m = pat.XID.search(text)
        if m:
            pid = m.group("pid")
            self.keep.add("xids", XidRecord(self.path, line, int(m.group("xid")), pci=m.group("pci"),
                                            pid=int(pid) if pid and pid.isdigit() else None,
                                            process=(m.group("name") or "").strip() or None, host=pre.host,
                                            when=(f"{pre.uptime:.1f} s after boot" if pre.uptime is not None
                                                  else None), wall=pre.wall, text=text.strip()[:300]))
            return


_BINARY_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
                 "EiB": 1 << 60}


def _host_alloc_bytes(msg: str | None) -> float | None:
    """The request of a host MemoryError's message, when it states one: NumPy's "Unable to allocate 7.45 GiB ..."
    (binary units, numpy/_core/_exceptions.py ``_size_to_string``), Arrow's "malloc of size N failed"."""
    if not msg:
        return None
    m = pat.NUMPY_ALLOC.search(msg)
    if m:
        return float(m.group("num")) * _BINARY_UNITS[m.group("unit")]
    m = pat.ARROW_ALLOC.search(msg)
    return float(m.group("bytes")) if m else None
