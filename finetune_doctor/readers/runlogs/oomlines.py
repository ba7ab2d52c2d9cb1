"""The OOM lines of a log that the full "CUDA out of memory" pattern (readers/runlogs/logpatterns.py) misses: the
allocator's class quoted with only its request, or with its message cut, and the figures of a cut message read one
by one. Used by readers/runlogs/logfailures.py."""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.readers.runlogs import logpatterns as pat


CUT_CLASS = re.compile(r"(?P<exc>torch\.(?:cuda\.)?OutOfMemoryError): (?P<msg>CUDA[ \w]*?)\s*$")
"""torch's CUDA allocator OOM class (c10/cuda/CUDACachingAllocator.cpp raises it as torch.OutOfMemoryError, named
torch.cuda.OutOfMemoryError before torch 2.5) with its message cut before "CUDA out of memory" ends."""


def oom_figures(text: str) -> dict[str, Any]:
    """The figures of a cut OOM message, each read on its own (logpatterns.OOM_FIGURES): {gpu, total, free,
    this_process, allocated, reserved_unallocated, reserved, allowed} for those printed whole."""
    out: dict[str, Any] = {}
    for name, rx in pat.OOM_FIGURES:
        key = "total" if name == "gpu_total" else name
        if key in out:
            continue
        m = rx.search(text)
        if m:
            out[key] = pat.size_bytes(m.group("v"))
            if name == "gpu_total":
                out["gpu"] = int(m.group("gpu"))
    return out


# torch's OutOfMemoryError (raised by c10/cuda/CUDACachingAllocator.cpp only) quoted without "CUDA out of memory."
TORCH_OOM = re.compile(r"(?P<exc>torch(?:\.cuda)?\.OutOfMemoryError):\s*Tried to allocate (?P<requested>" + pat.SIZE + ")")
