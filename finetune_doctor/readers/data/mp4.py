"""Duration and frame size of an MP4/MOV video from its box headers, without decoding a frame.

ISO/IEC 14496-12 (ISO base media file format): a file is a sequence of boxes ``size:u32 type:4cc`` (``size`` 1: a
u64 size follows; 0: to the end of the file). ``moov/mvhd`` holds the movie's ``timescale`` and ``duration``
(version 0: u32 fields after two u32 times; version 1: u64 times and duration); ``moov/trak/tkhd`` holds a track's
``width`` and ``height`` as 16.16 fixed point after the 36-byte matrix (audio tracks carry 0 × 0).

Bounded: at most `MAX_BOXES` box headers are read, each with a seek, and only ``mvhd``/``tkhd`` bodies (≤ 120
bytes) are read, so a file of any size costs a few kilobytes of reads.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

MAX_BOXES = 4096
_CONTAINERS = {b"moov", b"trak"}


def video_header(path: str) -> tuple[float, int, int] | None:
    """(duration in seconds, width, height) of the MP4/MOV file at `path`, or None when it is not one, has no
    ``mvhd``, no track with a frame size, or cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            end = f.tell()
            found: dict[str, tuple] = {}
            budget = [MAX_BOXES]
            _walk(f, 0, end, found, budget)
    except (OSError, ValueError, struct.error):
        return None
    mv, tk = found.get("mvhd"), found.get("tkhd")
    if not mv or not tk or mv[0] <= 0:
        return None
    return mv[1] / mv[0], tk[0], tk[1]


def _walk(f: BinaryIO, start: int, end: int, found: dict[str, tuple], budget: list[int]) -> None:
    pos = start
    while pos + 8 <= end and budget[0] > 0 and not ("mvhd" in found and "tkhd" in found):
        budget[0] -= 1
        f.seek(pos)
        head = f.read(8)
        if len(head) < 8:
            return
        size, kind = struct.unpack(">I4s", head)
        body = pos + 8
        if size == 1:
            size = struct.unpack(">Q", f.read(8))[0]
            body += 8
        elif size == 0:
            size = end - pos
        if size < body - pos or pos + size > end:
            return                                   # a box that claims more than the file holds: stop here
        if kind in _CONTAINERS:
            _walk(f, body, pos + size, found, budget)
        elif kind == b"mvhd" and "mvhd" not in found:
            b = f.read(min(size - (body - pos), 32))
            if b[:1] == b"\x01":
                found["mvhd"] = struct.unpack(">IQ", b[20:32])
            else:
                found["mvhd"] = struct.unpack(">II", b[12:20])
        elif kind == b"tkhd" and "tkhd" not in found:
            b = f.read(min(size - (body - pos), 104))
            off = 88 if b[:1] == b"\x01" else 76   # width/height after the times, matrix and reserved fields
            w, h = struct.unpack(">II", b[off:off + 8])
            if w >> 16 and h >> 16:
                found["tkhd"] = (w >> 16, h >> 16)
        pos += size
