"""Records of a LevelDB-log-framed file: wandb's ``run-<id>.wandb`` and swanlab's ``run-<id>.swanlab``.

Framing (Google LevelDB ``doc/log_format.md``): the file is cut into 32 KiB blocks; each record piece has a
7-byte header ``crc32 (uint32 LE), length (uint16 LE), type (1 full, 2 first, 3 middle, 4 last)``; a block tail
shorter than a header is zero padding. Both trackers start the file with a 7-byte header of their own: wandb
``:W&B`` + 0xBEE1 + version 0 (wandb's former ``sdk/internal/datastore.py``; the bytes its Go core still writes,
checked on a wandb 0.31 offline run), swanlab ``:SWL`` + 0xE1D6 + version 2 (``swanlab/sdk/internal/
core_python/store/__init__.py`` at b444209a). swanlab checksums with zlib's CRC-32 seeded by the type byte; wandb
with CRC-32C, which the standard library lacks, so wandb records are checked by parsing instead.

Streaming: one 32 KiB block in memory plus the record being assembled (capped at `MAX_RECORD`). Damage (a bad
checksum, a torn last block) stops the scan with a problem string; what came before is kept.
"""

from __future__ import annotations

import struct
import zlib
from typing import Callable, Iterator

BLOCK = 32768
HEADER = 7
MAX_RECORD = 64 << 20
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
WANDB_IDENT = b":W&B"
SWANLAB_IDENT = b":SWL"
_SEED = {t: zlib.crc32(bytes([t])) & 0xFFFFFFFF for t in (FULL, FIRST, MIDDLE, LAST)}


def swanlab_crc(kind: int, data: bytes) -> int:
    """swanlab's record checksum: CRC-32 of the payload, seeded with the CRC-32 of the type byte."""
    return zlib.crc32(data, _SEED[kind]) & 0xFFFFFFFF


def records(fh, problems: list[str], check: Callable[[int, bytes], int] | None = None) -> Iterator[bytes]:
    """Yield each record payload of an open binary file positioned after the tracker's 7-byte header."""
    pos = HEADER
    parts: list[bytes] = []
    size = 0
    while True:
        room = BLOCK - pos % BLOCK
        if room < HEADER:
            fh.read(room)
            pos += room
            continue
        head = fh.read(HEADER)
        if len(head) < HEADER:
            if head.strip(b"\x00"):
                problems.append(f"last record header cut off at byte {pos}")
            return
        crc, length, kind = struct.unpack("<IHB", head)
        pos += HEADER
        if kind == 0 and length == 0:          # zero padding of a preallocated tail
            return
        if kind not in _SEED or length > room - HEADER:
            problems.append(f"damaged record header at byte {pos - HEADER}; stopped there")
            return
        data = fh.read(length)
        pos += len(data)
        if len(data) < length:
            problems.append(f"last record cut off at byte {pos} (the writer died mid-write)")
            return
        if check is not None and check(kind, data) != crc:
            problems.append(f"checksum mismatch at byte {pos - length - HEADER}; stopped there")
            return
        if kind == FULL:
            parts, size = [], 0
            yield data
            continue
        if kind == FIRST:
            parts, size = [data], len(data)
        elif parts:
            parts.append(data)
            size += len(data)
        if size > MAX_RECORD:
            problems.append(f"a record larger than {MAX_RECORD >> 20} MiB at byte {pos}; skipped")
            parts, size = [], 0
            continue
        if kind == LAST and parts:
            yield b"".join(parts)
            parts, size = [], 0
