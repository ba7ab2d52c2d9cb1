"""Opening a GPU file for the readers of ``doctor gpus --from``: only regular files or stdin, decoded once, with
limits, and streamed line by line so a recording of any size costs memory for one line at a time.

Why each limit: a FIFO or a device such as ``/dev/zero`` never ends (issue 17), so anything that is not a regular
file is refused before it is opened (opening a FIFO alone blocks). A file without newlines would make one
"line" of the whole file, so a line may hold at most `MAX_LINE` characters. A single JSON or XML document is
parsed whole (stdlib parsers), so it may hold at most `MAX_DOCUMENT` bytes; long watches are recorded as JSONL or
CSV, which stream.

Decoding: UTF-8 (a byte-order mark is dropped); UTF-16 when the file starts with a UTF-16 byte-order mark (what
Windows PowerShell 5's ``nvidia-smi > file.txt`` writes); undecodable bytes become U+FFFD rather than an error,
since a paste with a stray byte still holds readable rows.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import sys
from pathlib import Path
from typing import IO, Iterator, Protocol

from finetune_doctor.errors import InputError

MAX_LINE = 16 << 20          # characters in one line
MAX_DOCUMENT = 64 << 20      # characters in one JSON/XML document read whole
HEAD_CHARS = 64 << 10        # what format detection looks at


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


class TextInput:
    """One input file (or ``-`` for stdin), opened for reading text line by line.

    `host` is the name its samples get when the file carries none: the file's stem, or ``stdin``. Use as a
    context manager. Raises InputError naming the path for a missing or unreadable file, one that is not a
    regular file, or a line over MAX_LINE.
    """

    def __init__(self, path: str):
        self.path = path
        self.host = "stdin" if path == "-" else Path(path).stem
        raw: IO[bytes]
        if path == "-":
            raw = sys.stdin.buffer
        else:
            try:
                st = os.stat(path)
            except OSError as err:
                raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{_kind(st.st_mode)}, not a regular file: only regular files or - (stdin) are "
                                 "read", file=path)
            try:
                raw = open(path, "rb")
            except OSError as err:
                raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
        self._raw = raw
        start = self._peek(raw, 4)
        encoding = "utf-8"
        if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            encoding = "utf-16"
        elif start.startswith(codecs.BOM_UTF8):
            encoding = "utf-8-sig"
        self._text = io.TextIOWrapper(raw, encoding=encoding, errors="replace", newline="")
        self._buffer: list[str] = []
        self._head: str | None = None
        self.lineno = 0

    @staticmethod
    def _peek(raw: IO[bytes], n: int) -> bytes:
        peek = getattr(raw, "peek", None)
        if peek is not None:
            try:
                return peek(n)[:n]
            except (OSError, ValueError):
                return b""
        return b""

    def __enter__(self) -> "TextInput":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.path != "-":
            try:
                self._text.close()
            except OSError:
                pass

    def _readline(self) -> str:
        try:
            line = self._text.readline(MAX_LINE + 1)
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror or err}", file=self.path) from None
        if len(line) > MAX_LINE:
            raise InputError(f"line exceeds {MAX_LINE >> 20} MiB: not a GPU tool's output", file=self.path,
                             line=self.lineno + len(self._buffer) + 1)
        return line

    def head(self) -> str:
        """The first HEAD_CHARS characters or so (whole lines), without consuming them."""
        if self._head is None:
            size = 0
            while size < HEAD_CHARS:
                line = self._readline()
                if not line:
                    break
                self._buffer.append(line)
                size += len(line)
            self._head = "".join(self._buffer)
        return self._head

    def lines(self) -> Iterator[str]:
        """Every line with its line end ('' at the end of input); `lineno` is the 1-based number of the last one."""
        while self._buffer:
            self.lineno += 1
            yield self._buffer.pop(0)
        while True:
            line = self._readline()
            if not line:
                return
            self.lineno += 1
            yield line

    def document(self) -> str:
        """The whole (remaining) input as one string; InputError past MAX_DOCUMENT characters."""
        parts: list[str] = []
        size = 0
        for line in self.lines():
            size += len(line)
            if size > MAX_DOCUMENT:
                raise InputError(f"exceeds {MAX_DOCUMENT >> 20} MiB as one document: record long watches as JSONL "
                                 "(doctor gpus --record x.jsonl) or CSV, which are read as a stream",
                                 file=self.path, line=self.lineno)
            parts.append(line)
        return "".join(parts)


class GpuSource(Protocol):
    """What a format reader (readers/gpus/smi_xml.py, npu_smi.py) needs of the GPU file being read
    (readers/gpus/smi.py `GpuStream` is one): its path, its host name and the open `TextInput`."""

    path: str
    host: str
    input: TextInput
