"""torch_npu's error block (Ascend NPUs), read as the failure it reports: device memory exhausted, page-locked host
memory refused, or a kernel that faulted on the device. `NpuLines` is mixed into readers/runlogs/logparse.py's
parser, whose state (`path`, `keep`, `nccl_seen`, `during()`, `fail_wall`) it uses.

What torch_npu prints when an ACL call fails (torch_npu/csrc/core/npu/NPUException.h ``NPU_CHECK_ERROR`` and its
``getErrorMessage`` neighbourhood; the shapes below are those of public reports, e.g. vllm-project/vllm-ascend
issues, LlamaFactory#4372, Ascend/pytorch#66, modelscope/ms-swift#9135):

    <Exception class>: <site> NPU function error: call aclnnBatchMatMul failed, error code is 207001
    [ERROR] 2025-03-14-09:21:55 (PID:41877, Device:3, RankID:3) ERR00100 PTA call acl api failed
    [Error]: Failed to apply for memory.
    Memory_Allocation_Failure(EL0004): Failed to allocate memory requested by APP module.
            rtMalloc execution failed, reason=driver error:out of memory

The "[Error]: " line is torch_npu's reading of the runtime code; the CANN error codes follow ("EL0004",
"EZ9999: Inner Error!", written ``Name(EL0018)`` since CANN 8), then the runtime's own TraceBack lines.

- **Device memory** (`DEVICE_MEMORY`): code 207001 with "Failed to apply for memory", EL0004 (Memory_Allocation_
  Failure) or ``rtMalloc ... out of memory``: the NPU's memory is exhausted, as CUDA's OOM is, without the
  caching allocator's figures. Recorded as an OomRecord of format ``npu-runtime`` (the device index from the
  "[ERROR] ... (PID:p, Device:d, RankID:r)" line).
- **Host memory** (`HOST_MEMORY`): the same code from ``aclrtMallocHost*`` / ``rtsMallocHost`` or EL0018
  (Resource_Error_Insufficient_Host_Memory: "Failed to allocate N bytes host memory"): page-locked host memory was
  refused — the host's RAM or its locked-memory limit (``ulimit -l``; Docker's default is 64 KiB unless the
  container runs with ``--ulimit memlock=-1``). Recorded as the in-process host allocation it is (KillRecord
  ``cpu-alloc``, analyzers/postmortem/hostalloc.py), with the bytes the line names.
- **A kernel fault** (`KERNEL_FAULT`): "[Error]: The aicore execution is abnormal." (507015), "The aicpu execution
  is abnormal." (507018), "The vector core execution is abnormal." (507035), or the runtime's "[aicore
  exception]" / "[aicpu exception]" lines: a kernel faulted on the device, which the process reports
  asynchronously ("The Inner error is reported as above ... the current working operator name is X"). Recorded as
  a DeviceError of kind ``npu-kernel`` (analyzers/postmortem/failures.py words it).
- Any other "[Error]: " text of the block: a DeviceError of kind ``npu-other`` with that text.
"""

from __future__ import annotations

import re
from finetune_doctor.evidence import DeviceError, KillRecord, OomRecord
from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes
from finetune_doctor.readers.runlogs.logcontext import Keep, LineContext

NPU_FUNC = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?.*?NPU function error:\s*(?P<call>.+?),\s*error code "
                      r"is (?P<code>\d+)")
INNER = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?The Inner error is reported as above\..*?operator name "
                   r"is (?P<op>[\w.]+)")
ERROR_TEXT = re.compile(r"^\s*\[Error\]:\s*(?P<what>\S.*?)\s*$")
DEVICE_OF = re.compile(r"\(PID:\s*\d+,\s*Device:\s*(?P<dev>-?\d+),\s*RankID:\s*(?P<rank>-?\d+)\)")
HOST_MEMORY = re.compile(r"aclrtMallocHost|rtsMallocHost|rtMallocHost|EL0018|host memory", re.I)
HOST_BYTES = re.compile(r"Failed to allocate (?P<bytes>\d+) bytes host memory")
DEVICE_MEMORY = re.compile(r"Failed to apply for memory|EL0004|rtMalloc\w* execution failed, reason=driver error:out of "
                           r"memory|device memory is insufficient")
KERNEL_FAULT = re.compile(r"The (?P<unit>aicore|aicpu|vector core) execution is abnormal|\[(?P<exc_unit>aicore|aicpu|"
                          r"aivector) exception\]|there is an? (?:exception of )?(?:fftsplus )?(?P<err_unit>aicore|"
                          r"aivector|aicpu) error")
OP_NAME = re.compile(r"\b(?P<op>aclnn\w+)")

BLOCK_LINES = 16
"""Lines read below the exception (and above it, for "The Inner error is reported as above") as one block."""


def _block(text: str, below: list[str], above: list[str]) -> list[str]:
    """The lines of one error block: `above` back to the last traceback line, the line, `below` up to the next
    "Traceback" header; line prefixes taken off."""
    up: list[str] = []
    for ln in reversed(above):
        ln = strip_prefixes(ln)[0]
        if "Traceback (most recent call last)" in ln or ln.lstrip().startswith('File "'):
            break
        up.append(ln)
    down: list[str] = []
    for ln in below:
        ln = strip_prefixes(ln)[0]
        if ln.startswith("Traceback (most recent call last)"):
            break
        down.append(ln)
    return list(reversed(up)) + [text] + down


class NpuLines:
    """The torch_npu half of the text-log parser (a mixin; see the module docstring)."""

    path: str
    keep: Keep
    nccl_seen: set[tuple]
    last_mem_label: str | None

    def during(self) -> int | None:  # pragma: no cover - provided by the parser
        raise NotImplementedError

    def fail_wall(self, wall: float | None) -> None:  # pragma: no cover - provided by FailureLines
        raise NotImplementedError

    def _npu(self, text: str, line: int, rank: int | None, context: LineContext, wall: float | None) -> bool:
        """One torch_npu error block around the line `text` (module docstring). True when it was recorded as a
        device OOM (the line is then consumed, as a CUDA OOM line is)."""
        m = NPU_FUNC.search(text) or INNER.search(text)
        if m is None and "ERR00100" not in text:
            return False
        above = context.buf[max(0, context.ls - 4096):context.ls].decode("utf-8", "replace").splitlines()[-30:] \
            if m is not None and m.re is INNER else []
        lines = _block(text, context.following_lines(BLOCK_LINES), above)
        block = "\n".join(lines)
        said = next((e.group("what").rstrip(".") for e in map(ERROR_TEXT.match, lines) if e), None)
        dev = DEVICE_OF.search(block)
        if rank is None and dev is not None and int(dev.group("rank")) >= 0:
            rank = int(dev.group("rank"))
        exc = m.group("exc") if m is not None else None
        op = OP_NAME.search(block)
        kind = ("host-memory" if HOST_MEMORY.search(block) else "device-memory" if DEVICE_MEMORY.search(block)
                else "npu-kernel" if KERNEL_FAULT.search(block) else "npu-other" if said else None)
        if kind is None:
            return False
        key = ("npu", kind, rank)
        if key in self.nccl_seen:   # the same block read again from its exception line
            return kind == "device-memory"
        self.nccl_seen.add(key)
        self.fail_wall(wall)
        shown = block.strip()[:1000]
        if kind == "device-memory":
            self.keep.add("ooms", OomRecord(self.path, line, self.during(), rank, "npu-runtime", exc=exc,
                                            gpu=int(dev.group("dev")) if dev is not None else None,
                                            frames=context.frames(), memory_label=self.last_mem_label, text=shown))
            return True
        if kind == "host-memory":
            b = HOST_BYTES.search(block)
            self.keep.add("kills", KillRecord(self.path, line, self.during(), "cpu-alloc", rank=rank,
                                              bytes=float(b.group("bytes")) if b else None, text=shown))
            return False
        unit = KERNEL_FAULT.search(block)
        status = said or (f"{next(g for g in unit.groups() if g)} exception" if unit else "")
        self.keep.add("device_errors", DeviceError(self.path, line, self.during(), rank, kind, exc=exc,
                                                   status=status[:200], call=op.group("op") if op else None,
                                                   text=shown[:500]))
        return False


def npu_line(text: str) -> bool:
    """Whether `text` may open or hold a torch_npu error block (what the parser hands to `NpuLines._npu`)."""
    return "NPU function error" in text or "ERR00100" in text or "Inner error is reported as above" in text


__all__ = ["NpuLines", "npu_line"]
