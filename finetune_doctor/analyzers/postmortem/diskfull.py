"""``ev.crash.disk_full``: the exception line that says a write ran out of space, the writer its path names, and
where the paste itself says so, that the full device is the container's shared memory rather than the disk.

errno 28 (ENOSPC, "No space left on device") is raised by any filesystem, /dev/shm's tmpfs included. Docker gives
a container 64 MB of /dev/shm unless it is started with ``--shm-size`` or ``--ipc=host`` (docker run reference,
"--shm-size": default 64m), and PyTorch's DataLoader workers and NCCL's intra-node transport write there
(NVIDIA/Megatron-LM#878: errno 28 in nvcr.io's PyTorch container, fixed by --shm-size). ATen MapAllocator's own
"unable to write to file </torch_...>" is launchcause.py's SHM_MAP and no disk at all.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.analyzers.postmortem.launchcause import SHM_MAP
from finetune_doctor.evidence import Evidence

DOCKER = re.compile(r"\b(?:nvidia-)?docker\s+run\b|\bpodman\s+run\b", re.I)
SHM_SET = re.compile(r"--shm-size|--ipc[= ]host", re.I)
SHM_SAID = re.compile(r"/dev/shm|(?<!--)\bshm\b(?!-size)|shared memory|共享内存", re.I)


def disk_full(ev: Evidence) -> dict[str, Any] | None:
    """{text, location, writer, saving, shm} of the first exception line that says a write ran out of space
    (logpatterns.DISK_FULL), or None. `writer`: datasets' map cache or /tmp where the path names it; `shm`: a
    sentence when the same short file shows a `docker run` without --shm-size/--ipc=host, or names shared
    memory, else ""."""
    from finetune_doctor.readers.runlogs import logpatterns as pat

    for f in ev.files:
        for n in f.notices:
            if n.kind == "exception" and pat.DISK_FULL.search(n.text) and not SHM_MAP.search(n.text):
                low = n.text.lower()
                writer = ("datasets" if "cache-" in low and ".arrow" in low or "/datasets/" in low else
                          "tmp" if "'/tmp/" in low or '"/tmp/' in low else None)
                return {"text": n.text[:200], "location": location_of(n.file, n.line), "writer": writer,
                        "saving": "save" in low or "serializ" in low, "shm": shm_lead(str(f.text or ""))}
    return None


def shm_lead(text: str) -> str:
    """The shared-memory reading of a full device for the short file `text`: a container started without a
    larger /dev/shm, or shared memory named in the words; "" otherwise (a long log, or nothing of either)."""
    docker = DOCKER.search(text)
    if not (docker and not SHM_SET.search(text) or SHM_SAID.search(text)):
        return ""
    why = ("the paste starts a container without --shm-size or --ipc=host, so its /dev/shm is Docker's 64 MB"
           if docker and not SHM_SET.search(text) else "the words name shared memory")
    return (f"The full device may be /dev/shm, not the disk: {why}, and DataLoader workers and NCCL write there; "
            "check `df -h /dev/shm` in the container and start it with --shm-size=16g (or --ipc=host).")
