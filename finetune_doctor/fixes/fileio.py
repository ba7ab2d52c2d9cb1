"""The fixer's file I/O: read a config as bytes and text (BOM noted), and write the fixed text back under the
output policy of fsutil.py (read-only files refused, hard links kept, OS errors as one line)."""

from __future__ import annotations

import os
from pathlib import Path

from finetune_doctor.errors import InputError


def read(path: str) -> tuple[bytes, str, bool]:
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=path) from None
    bom = raw.startswith(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", file=path) from None
    return raw, text, bom


def lf(text: str) -> str:
    """`text` with CRLF and lone CR line ends as LF: a reader that decoded with universal newlines (Python's
    default text mode) saw the same document as the bytes on disk."""
    return text.replace("\r\n", "\n").replace("\r", "\n")



def atomic_write(path: str, text: str, *, bom: bool, expect_raw: bytes | None) -> None:
    """Write under the output policy (fsutil.py): a temp file in the same directory and ``os.replace`` (in place
    when the file has other hard links); keep the mode; refuse a read-only file and a file that moved on.

    A symlinked config is written at its target (``os.path.realpath``), so the link stays a link and the file it
    names gets the fix, as an editor saving through the link would do. Every OS error (a read-only folder, a full
    disk) is an InputError naming the file; the file is then unchanged.
    """
    from finetune_doctor.fsutil import is_read_only, write_bytes

    target = os.path.realpath(path)
    if is_read_only(target):
        raise InputError("read-only file: --fix does not rewrite it (make it writable first)", file=path)
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")
    try:
        moved = expect_raw is not None and Path(target).read_bytes() != expect_raw
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
    if moved:
        raise InputError("changed while the fix was being written; not written", file=path)
    write_bytes(target, data, shown=path)
