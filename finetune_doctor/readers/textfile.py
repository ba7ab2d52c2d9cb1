"""One decoding policy for the text files a user names (training configs, DeepSpeed JSONs, model configs).

LLaMA-Factory reads its config with ``OmegaConf.load``, which opens the file as UTF-8 (omegaconf.py ``load``:
``io.open(..., encoding="utf-8")``); transformers and DeepSpeed open JSON the same way. So every command reads such
a file the same way and refuses what those would refuse, saying why:

* only a regular file is read (a FIFO or /dev/zero would block or never end), or standard input as ``-``;
* at most ``limits.MAX_CONFIG_BYTES``;
* UTF-8, with or without a BOM; a UTF-16/UTF-32 file (recognised by its BOM) or bytes that are not UTF-8 are named
  as such, with the line of the first bad byte; NUL bytes mean a binary file.
"""

from __future__ import annotations

import os
import stat
import sys

from finetune_doctor.errors import InputError
from finetune_doctor.readers.limits import MAX_CONFIG_BYTES

STDIN = "-"
_PROVIDED: dict[str, bytes] = {}
"""Inputs already read from elsewhere (``doctor lint -`` reads standard input once, under its --stdin-filename)."""


def provide(path: str, data: bytes) -> None:
    """Make `read_bytes(path)` return `data`: standard input read once, linted under the name the user gave."""
    _PROVIDED[path] = data


def provided(path: str) -> bytes | None:
    """The bytes `provide` registered for `path`, or None."""
    return _PROVIDED.get(path)


_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def read_bytes(path: str, what: str = "file", limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of a regular file (or standard input for ``-``), at most `limit`.

    Raises InputError naming `path` for a missing path, a directory, anything that is not a regular file, an OS
    error (permission, a symlink loop, a name too long) or a file over `limit` bytes.
    """
    if path in _PROVIDED:
        data = _PROVIDED[path]
    elif path == STDIN:
        data = sys.stdin.buffer.read(limit + 1)
    else:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise InputError("no such file", file=path) from None
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"is a directory, expected a {what}", file=path)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"not a regular file (a FIFO, socket or device), expected a {what}", file=path)
        if st.st_size > limit:
            raise InputError(f"{what} of {st.st_size} bytes exceeds the {limit >> 20} MiB limit", file=path)
        try:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
    if len(data) > limit:
        raise InputError(f"{what} exceeds the {limit >> 20} MiB limit", file=path)
    return data


def decode(data: bytes, path: str, what: str = "file") -> str:
    """UTF-8 text of `data` (a UTF-8 BOM is dropped); InputError naming the encoding problem and its line."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise InputError(f"{name} text: a {what} must be UTF-8 (LLaMA-Factory, transformers and DeepSpeed read "
                             "it as UTF-8); save it as UTF-8", file=path, line=1)
    if b"\x00" in data[:8192]:
        raise InputError(f"binary file, expected a {what}", file=path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(f"not UTF-8 text: byte 0x{data[err.start]:02X} at column {col} (a {what} must be UTF-8, "
                         "as LLaMA-Factory reads it; save it as UTF-8)", file=path, line=line) from None


def read_text(path: str, what: str = "file", limit: int = MAX_CONFIG_BYTES) -> str:
    """`read_bytes` then `decode`: the one way a user's config is read."""
    return decode(read_bytes(path, what, limit), path, what)


def sniff_text(data: bytes) -> str:
    """A best-effort decoding for deciding what a file is (never for reading it): the BOM's encoding, else UTF-8
    with replacement characters."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            enc = {"UTF-16": "utf-16", "UTF-32": "utf-32"}[name]
            return data.decode(enc, errors="replace")
    return data.decode("utf-8", errors="replace")
