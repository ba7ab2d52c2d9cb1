"""Stream the rows of local dataset files in chunks, keeping the file, line and row index of each row.

Files are read as ``datasets.load_dataset`` reads LLaMA-Factory's file types. LF 0.9.5 pins ``datasets>=2.16.0,
<=4.0.0`` (LLaMA-Factory pyproject.toml at ff6d4d12); the behaviours below are those of datasets 4.0.0:

=======  ==========================================================================================================
json     packaged_modules/json/json.py: JSON Lines go to pyarrow.json; a JSON array falls back to pandas.read_json
csv      packaged_modules/csv/csv.py: pandas.read_csv
text     packaged_modules/text/text.py: ``open(encoding="utf-8")`` with universal newlines, one row per line
parquet  pyarrow.parquet; arrow: pyarrow IPC (the stream format ``datasets`` caches, else the file format)
=======  ==========================================================================================================

**Only regular files are read.** `open_regular` opens without blocking and refuses a FIFO, a device, a socket or a
folder before any read, so that nothing waits on a pipe or reads ``/dev/zero`` without end; `file_problem` says
why a path cannot be read (a symlink loop, a name too long for the OS, ...) in the OS's own words.

**One decoding policy** for every file of the data path (dataset_info.json included, readers/data/datasets.py):

* Bytes are UTF-8, strictly, as datasets reads them (``encoding="utf-8"``, strict errors; pyarrow takes UTF-8
  only). A file in UTF-16, latin-1, GBK, ... is where LF's load fails (UnicodeDecodeError, or ArrowInvalid
  "Invalid UTF8" for CSV): the reader stops at the first byte that is not UTF-8 and reports the byte offset, the
  line, what the bytes look like and how to convert them (`not_utf8`); rows before it are kept.
* A UTF-8 byte-order mark at the start of a file is skipped where LF's loader skips it (JSON Lines: pyarrow; CSV:
  pandas), kept as the first character of the first row where the loader keeps it (text), and read past but
  reported (`BOM_MESSAGE`) where the loader fails on it: a JSON array (pandas.read_json: "Expected object or
  value") and dataset_info.json (json.load: "Unexpected UTF-8 BOM").
* A raw control character inside a JSON Lines string is malformed JSON (pyarrow rejects it, and so does
  ``json.loads``); a JSON array takes it (pandas' parser does); in CSV and text files it is content.

Each case above was run through ``datasets.load_dataset`` 4.0.0 with pyarrow 26 and pandas 3.1; tests/
test_data_hostile.py restates the outcomes.

**Memory is bounded** whatever the size of a file or a row: a chunk closes at `chunk_rows` rows or `CHUNK_CHARS`
characters, and a row over `MAX_ROW_BYTES` is skipped without being held (`row_too_large`: LF would read it and
cut it to cutoff_len; the doctor does not measure it). Parquet and Arrow files are read batch by batch from a
plain file handle (no memory map, whose pages would count in the process's resident memory).
"""

from __future__ import annotations

import codecs
import csv
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterator, Protocol

from finetune_doctor.fsutil import format_bytes
from finetune_doctor.readers.data.jsonarray import LONE_SURROGATE, ArrayReader, has_lone_surrogate, json_limit



class RowSource(Protocol):
    """What the row reader needs of a dataset entry (readers/data/datasets.py `DatasetSpec` is one): its local
    files and LF's file type for them. A protocol, so the row reader does not import the resolver above it."""

    files: tuple[str, ...]
    file_type: str | None

# LF's file types (extras/constants.py FILEEXT2TYPE): the extension decides the builder
FILEEXT2TYPE = {"arrow": "arrow", "csv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet", "txt": "text"}
CHUNK_ROWS = 1000
CHUNK_CHARS = 4 << 20      # characters of row text per chunk (what a worker encodes at once)
MAX_ROW_BYTES = 8 << 20    # ~2M tokens: beyond any cutoff_len; the tokenizer's buffers for it stay near 150 MB
_READ_BYTES = 1 << 20
_HEAD = 4096

BOM_MESSAGE = ("starts with a UTF-8 byte-order mark (BOM), on which LLaMA-Factory's loader fails ({how}); the "
               "doctor reads on past it. Save the file as UTF-8 without BOM")


@dataclass(frozen=True)
class RowError:
    """A row (or the rest of a file) that could not be read: `file`, 1-based `line` (or None), `index` of the row
    in the dataset when known.

    `kind`: malformed_json | bad_row | unreadable | encoding | row_too_large. `fatal`: the rest of the file could
    not be read. `lf_fails`: LLaMA-Factory's loader fails on it too (a row over the doctor's size limit: no).
    """

    kind: str
    file: str
    line: int | None
    message: str
    index: int | None = None
    fatal: bool = False
    lf_fails: bool = True


@dataclass
class Chunk:
    """A batch of rows from one file. Either `rows` (parsed dicts, None for a row that could not be read) or `raw`
    (JSON Lines text, parsed later by `parse_json_lines` so that parsing can run in worker processes); `lines[i]`
    is the 1-based line of row i (None where a line does not identify the row: columnar files, several array
    elements on one line), `first_index` the 0-based row index of the first row within the dataset and
    `file_first` that of the file's first row (so ``index - file_first`` is the row within the file)."""

    file: str
    first_index: int
    rows: list[dict[str, Any] | None] | None = None
    raw: list[str | None] | None = None
    lines: list[int | None] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    bytes_done: int = 0
    keys: set[str] = field(default_factory=set)
    file_first: int = 0

    def __len__(self) -> int:
        return len(self.rows if self.rows is not None else self.raw or ())


class Unreadable(Exception):
    """A reader cannot go on in this file: `kind` (unreadable | encoding | row_too_large), `message`, `line`."""

    def __init__(self, kind: str, message: str, line: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.line = line


def file_type(path: str) -> str | None:
    """The builder LF picks for `path` by its extension, or None for a type LF does not load."""
    return FILEEXT2TYPE.get(os.path.splitext(path)[1][1:])


# --- regular files --------------------------------------------------------------------------------------------------

_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR,
                "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _NOT_REGULAR if test(mode)), "not a file")


def os_reason(err: OSError) -> str:
    """The OS's words for `err` ("Too many levels of symbolic links", "File name too long", ...)."""
    return err.strerror or str(err) or type(err).__name__


def file_problem(path: str) -> str | None:
    """Why `path` cannot be read as a data file, or None for a regular file (symlinks followed)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as err:   # ValueError: a NUL byte in the path
        return os_reason(err) if isinstance(err, OSError) else str(err)
    what = _not_regular(st.st_mode)
    return f"is {what}, not a regular file (only regular files are read)" if what else None


def open_regular(path: str) -> BinaryIO:
    """`path` opened for binary reading; raises `Unreadable` for anything but a regular file, OSError when the OS
    refuses. Opened with O_NONBLOCK so that a FIFO cannot make the open wait for a writer."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        what = _not_regular(os.fstat(fd).st_mode)
        if what:
            raise Unreadable("unreadable", f"is {what}, not a regular file (only regular files are read)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# --- decoding -------------------------------------------------------------------------------------------------------

_MAGIC = ((b"\x1f\x8b", "gzip-compressed data", "decompress it (gunzip)"),
          (b"PK\x03\x04", "a zip archive", "unpack it"),
          (b"(\xb5/\xfd", "zstd-compressed data", "decompress it (zstd -d)"),
          (b"BZh", "bzip2-compressed data", "decompress it (bunzip2)"),
          (b"\xfd7zXZ\x00", "xz-compressed data", "decompress it (unxz)"),
          (b"PAR1", "a Parquet file", "name it .parquet"),
          (b"ARROW1", "an Arrow file", "name it .arrow"))


def looks_like(head: bytes) -> tuple[str, str]:
    """(what a file whose first bytes are `head` holds, if not UTF-8; how to make it readable)."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32 (it starts with a UTF-32 byte-order mark)", "convert it: iconv -f UTF-32 -t UTF-8"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 (it starts with a UTF-16 byte-order mark)", "convert it: iconv -f UTF-16 -t UTF-8"
    for magic, what, fix in _MAGIC:
        if head.startswith(magic):
            return what, fix
    if head and head.count(0) * 4 >= len(head):
        return "UTF-16 or UTF-32 without a byte-order mark (many NUL bytes)", "convert it: iconv -f UTF-16LE -t UTF-8"
    return ("text in another encoding (latin-1, cp1252, GBK, ...)",
            "convert it: iconv -f <its encoding> -t UTF-8")


DATASETS_UTF8 = "LLaMA-Factory's loader reads UTF-8 only (datasets: encoding='utf-8') and fails here"


def not_utf8(head: bytes, offset: int, line: int | None, who: str = DATASETS_UTF8) -> str:
    """The message for a file that stops being UTF-8 at byte `offset` (0-based) of line `line`; `who` says
    which upstream reader fails on it."""
    what, fix = looks_like(head)
    where = f"byte {offset:,}" + (f" (line {line})" if line else "")
    return f"not UTF-8 at {where}: looks like {what}. {who}; nothing after it is read. To use it, {fix}"


def _decode(raw: bytes, head: bytes, offset: int, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise Unreadable("encoding", not_utf8(head, offset + err.start, line), line) from None


_size = format_bytes   # the one size formatter (fsutil.py)


def too_large(size: int) -> str:
    return (f"a row of {_size(size)}, over the doctor's limit of {_size(MAX_ROW_BYTES)} per row: skipped, not "
            "measured (LLaMA-Factory reads it and cuts it to cutoff_len)")


class _Utf8Text:
    """Strictly decoded text of a binary file, read in blocks; at the first byte that is not UTF-8 it returns the
    text before it, then nothing (`error_at` holds the byte offset)."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.dec = codecs.getincrementaldecoder("utf-8")("strict")
        self.read_bytes = 0
        self.error_at: int | None = None
        self.eof = False

    def read(self, n: int) -> str:
        if self.eof:
            return ""
        raw = self.f.read(n)
        before = self.read_bytes - len(self.dec.getstate()[0])   # bytes of `err.object` already counted
        self.read_bytes += len(raw)
        try:
            text = self.dec.decode(raw, final=not raw)
        except UnicodeDecodeError as err:
            self.error_at = before + err.start
            self.eof = True
            return bytes(err.object[:err.start]).decode("utf-8")
        self.eof = not raw
        return text


def _lines(f: BinaryIO) -> Iterator[tuple[int, int, bytes | None, int]]:
    """(line number, byte offset, the line's bytes or None when over MAX_ROW_BYTES, its size) for each line
    ending in ``\\n`` (or at the end of the file). An overlong line is skipped in blocks, never held whole."""
    lineno = offset = 0
    while True:
        raw = f.readline(MAX_ROW_BYTES + 1)
        if not raw:
            return
        lineno += 1
        start = offset
        if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
            size = len(raw)
            while True:
                more = f.readline(_READ_BYTES)
                size += len(more)
                if not more or more.endswith(b"\n"):
                    break
            offset += size
            yield lineno, start, None, size
            continue
        offset += len(raw)
        yield lineno, start, raw, len(raw)


# --- chunks ---------------------------------------------------------------------------------------------------------


class _Batch:
    """Rows of one file gathered into chunks of at most `n` rows or CHUNK_CHARS characters, stopping after `left`
    rows (None: no limit). `raw` keeps JSON Lines text instead of parsed rows."""

    def __init__(self, path: str, first: int, n: int, left: int | None, raw: bool = False):
        self.path, self.file_first, self.n, self.left, self.raw = path, first, n, left, raw
        self.index = first            # dataset index of the next chunk's first row
        self.taken = 0
        self.fixed_keys: set[str] = set()   # the columns of a columnar or CSV file: every chunk has them
        self.bytes_done = 0
        self._reset()

    def _reset(self) -> None:
        self.items: list[Any] = []
        self.lines: list[int | None] = []
        self.errors: list[RowError] = []
        self.keys: set[str] = set(self.fixed_keys)
        self.chars = 0

    @property
    def next_index(self) -> int:
        return self.index + len(self.items)

    @property
    def done(self) -> bool:
        return self.left is not None and self.taken >= self.left

    def add(self, item: Any, line: int | None, chars: int = 0) -> None:
        self.items.append(item)
        self.lines.append(line)
        self.chars += chars

    def error(self, kind: str, message: str, line: int | None, *, row: bool = True, fatal: bool = False,
              lf_fails: bool = True) -> None:
        """Record a problem; `row` adds an unreadable row (None) in its place."""
        self.errors.append(RowError(kind, self.path, line, message, index=self.next_index, fatal=fatal,
                                    lf_fails=lf_fails))
        if row:
            self.add(None, line)

    def full(self) -> bool:
        k = len(self.items)
        return k >= self.n or self.chars >= CHUNK_CHARS or (self.left is not None and self.taken + k >= self.left)

    def flush(self, bytes_done: int | None = None) -> Chunk:
        """The rows gathered so far as a Chunk; `bytes_done` is how far into the file they reach (None: as far as
        the last chunk)."""
        self.bytes_done = max(self.bytes_done, bytes_done or 0)
        items, lines = self.items, self.lines
        if self.left is not None and len(items) > self.left - self.taken:
            keep = self.left - self.taken
            items, lines = items[:keep], lines[:keep]
        ch = Chunk(self.path, self.index, lines=lines, errors=self.errors, bytes_done=self.bytes_done, keys=self.keys,
                   file_first=self.file_first)
        if self.raw:
            ch.raw = items
        else:
            ch.rows = items
        self.index += len(items)
        self.taken += len(items)
        self._reset()
        return ch


def iter_chunks(spec: RowSource, *, chunk_rows: int = CHUNK_ROWS, max_rows: int | None = None,
                raw_jsonl: bool = False) -> Iterator[Chunk]:
    """Stream the rows of every file of `spec` in chunks of at most `chunk_rows` rows (and CHUNK_CHARS characters).

    `max_rows` stops after that many rows in total (LF's ``max_samples``). With `raw_jsonl`, JSON Lines files
    yield unparsed lines (`Chunk.raw`) for `parse_json_lines`. Read problems come out as `Chunk.errors`; a file
    that cannot be read on (not a regular file, an OS error, bytes that are not UTF-8, a corrupt Parquet file)
    ends with a chunk carrying a fatal `RowError` naming why.
    """
    index = 0
    reader = _READERS[spec.file_type or "json"]
    for path in spec.files:
        if max_rows is not None and index >= max_rows:
            return
        b = _Batch(path, index, chunk_rows, None if max_rows is None else max_rows - index, raw=raw_jsonl)
        try:
            with open_regular(path) as f:
                yield from reader(f, b)
        except Unreadable as err:
            b.error(err.kind, err.message, err.line, row=False, fatal=True, lf_fails=err.kind != "row_too_large")
            yield b.flush()
        except OSError as err:
            b.error("unreadable", f"cannot read: {os_reason(err)}", None, row=False, fatal=True)
            yield b.flush()
        index = b.index


def _json_chunks(f: BinaryIO, b: _Batch) -> Iterator[Chunk]:
    """A ``.json`` or ``.jsonl`` file: a JSON array when its first non-blank character is '[', else JSON Lines
    (datasets tries pyarrow's JSON Lines reader first and falls back to the array parser)."""
    head = f.read(_HEAD)
    f.seek(0)
    if head.lstrip(codecs.BOM_UTF8 + b" \t\r\n")[:1] == b"[":
        yield from _json_array_chunks(f, b, head)
    else:
        yield from _jsonl_chunks(f, b, head)


def _jsonl_chunks(f: BinaryIO, b: _Batch, head: bytes) -> Iterator[Chunk]:
    for lineno, start, data, size in _lines(f):
        if data is None:
            b.error("row_too_large", too_large(size), lineno, lf_fails=False)
        else:
            if lineno == 1 and data.startswith(codecs.BOM_UTF8):
                data, start = data[3:], 3    # pyarrow's JSON reader skips it
            text = _decode(data, head, start, lineno)
            if not text.strip():
                continue  # datasets' JSON Lines reader skips blank lines
            if b.raw:
                b.add(text, lineno, len(text))
            else:
                _parse_into(b, text, lineno)
        if b.full():
            yield b.flush(f.tell())
            if b.done:
                return
    if b.items or b.errors:
        yield b.flush(f.tell())


def _parse_into(b: _Batch, text: str, lineno: int) -> None:
    rows, errors, keys = parse_json_lines(b.path, [text], [lineno], b.next_index)
    b.errors.extend(errors)
    b.keys |= keys
    b.add(rows[0], lineno, len(text))


def parse_json_lines(path: str, lines: list[str | None], nums: list[int | None], first_index: int
                     ) -> tuple[list[dict[str, Any] | None], list[RowError], set[str]]:
    """Parse JSON Lines text. A malformed line gives None in its slot and a `RowError` with file:line:column;
    a line that is valid JSON but not an object gives None and a ``bad_row`` error; a None line (already
    reported by the reader) stays None. Returns (rows, errors, union of keys)."""
    rows: list[dict[str, Any] | None] = []
    errors: list[RowError] = []
    keys: set[str] = set()
    loads = json.loads
    for i, line in enumerate(lines):
        if line is None:
            rows.append(None)
            continue
        try:
            obj = loads(line.rstrip("\r\n"))  # without the newline an error reports this line's column
        except json.JSONDecodeError as err:
            rows.append(None)
            errors.append(RowError("malformed_json", path, nums[i], f"malformed JSON: {err.msg} (column "
                                   f"{err.colno})", index=first_index + i))
            continue
        except (RecursionError, ValueError) as err:   # nesting past the parser's depth; a 4300+ digit integer
            rows.append(None)
            errors.append(RowError("malformed_json", path, nums[i], json_limit(err), index=first_index + i))
            continue
        if has_lone_surrogate(line, obj):
            rows.append(None)
            errors.append(RowError("malformed_json", path, nums[i], LONE_SURROGATE, index=first_index + i))
            continue
        if not isinstance(obj, dict):
            rows.append(None)
            errors.append(RowError("bad_row", path, nums[i], f"a row must be a JSON object, found "
                                   f"{type(obj).__name__}", index=first_index + i))
            continue
        keys.update(obj)
        rows.append(obj)
    return rows, errors, keys


# --- JSON arrays ----------------------------------------------------------------------------------------------------


def _json_array_chunks(f: BinaryIO, b: _Batch, head: bytes) -> Iterator[Chunk]:
    """Stream a top-level JSON array. An element's line is kept only where it names the element: elements that
    share a start line (a one-line file) get None, and the row index is the place to look instead."""
    src = _Utf8Text(f)
    if head.startswith(codecs.BOM_UTF8):
        b.error("encoding", BOM_MESSAGE.format(how="datasets' JSON-array path, pandas.read_json: 'Expected object "
                                               "or value'"), 1, row=False)
    reader = ArrayReader(src, read_bytes=_READ_BYTES, max_element=MAX_ROW_BYTES)
    prev_line = None
    for kind, value, line in reader.elements():
        if kind == "encoding":
            b.error("encoding", not_utf8(head, src.error_at or 0, line), line, row=False, fatal=True)
            break
        if kind == "error":
            b.error("malformed_json", value, line, row=False, fatal=True)
            break
        shown: int | None = line
        if line == prev_line:
            shown = None
            if b.lines and b.items:
                b.lines[-1] = None
        prev_line = line
        k = b.next_index - b.file_first
        if kind == "large":
            b.error("row_too_large", f"array element {k}: " + too_large(value), shown, lf_fails=False)
        elif isinstance(value, dict):
            b.keys.update(value)
            b.add(value, shown, reader.last_size)
        else:
            b.error("bad_row", f"array element {k} is {type(value).__name__}, not a JSON object", shown)
        if b.full():
            yield b.flush(src.read_bytes)
            if b.done:
                return
    if b.items or b.errors:
        yield b.flush(src.read_bytes)


# --- CSV and text ---------------------------------------------------------------------------------------------------


def _decoded_lines(f: BinaryIO, head: bytes, skip_bom: bool) -> Iterator[str]:
    """Each line of `f` decoded, with its line ending; Unreadable on bytes that are not UTF-8 or a line over
    MAX_ROW_BYTES (the csv module cannot skip a record it has not read)."""
    for lineno, start, data, size in _lines(f):
        if data is None:
            raise Unreadable("row_too_large", f"line {lineno}: {too_large(size)}; the rest of the file is not "
                                              "read", lineno)
        if lineno == 1 and skip_bom and data.startswith(codecs.BOM_UTF8):
            data, start = data[3:], 3
        yield _decode(data, head, start, lineno)


def _csv_chunks(f: BinaryIO, b: _Batch) -> Iterator[Chunk]:
    """pandas.read_csv's reading as datasets calls it, through the standard csv module (a BOM is skipped)."""
    csv.field_size_limit(MAX_ROW_BYTES)
    head = f.read(_HEAD)
    f.seek(0)
    reader = csv.DictReader(_decoded_lines(f, head, skip_bom=True))
    try:
        b.fixed_keys = set(reader.fieldnames or ())  # reading the header makes line_num count it
        b.keys |= b.fixed_keys
        start = reader.line_num + 1
        for row in reader:
            if None in row:
                b.error("bad_row", "more fields than header columns", start, row=False)
                row.pop(None)
            b.add(row, start, sum(len(v) for v in row.values() if isinstance(v, str)))
            start = reader.line_num + 1
            if b.full():
                yield b.flush(f.tell())
                if b.done:
                    return
    except csv.Error as err:
        b.error("malformed_json", f"malformed CSV: {err}", reader.line_num, row=False, fatal=True)
    if b.items or b.errors:
        yield b.flush(f.tell())


def _text_chunks(f: BinaryIO, b: _Batch) -> Iterator[Chunk]:
    """datasets' text builder: every line (blank ones too) is a row ``{"text": line}`` without its newline; lines
    end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (universal newlines); a BOM stays in the first row's text."""
    head = f.read(_HEAD)
    f.seek(0)
    row_line = 0
    b.fixed_keys = b.keys = {"text"}
    for lineno, start, data, size in _lines(f):
        if data is None:
            row_line += 1
            b.error("row_too_large", too_large(size), row_line, lf_fails=False)
        else:
            body = data[:-2] if data.endswith(b"\r\n") else data[:-1] if data.endswith((b"\n", b"\r")) else data
            for piece in body.split(b"\r"):
                row_line += 1
                text = _decode(piece, head, start, lineno)
                b.add({"text": text}, row_line, len(text))
        if b.full():
            yield b.flush(f.tell())
            if b.done:
                return
    if b.items or b.errors:
        yield b.flush(f.tell())


# --- Parquet and Arrow ----------------------------------------------------------------------------------------------


def _need_pyarrow(suffix: str) -> Any:
    try:
        import pyarrow
    except ImportError:
        raise Unreadable("unreadable", f"reading {suffix} files needs pyarrow (pip install pyarrow)") from None
    return pyarrow


def _columnar(f: BinaryIO, b: _Batch, what: str, batches: Callable[[Any], Iterator[Any]]) -> Iterator[Chunk]:
    """Rows of the record batches `batches(pyarrow)` yields, cut to chunks; pyarrow's errors (a truncated or
    corrupt file) become `Unreadable` naming what the file should have been."""
    pa = _need_pyarrow(what)
    size = os.fstat(f.fileno()).st_size
    try:
        for batch in batches(pa):
            b.fixed_keys = set(batch.schema.names)
            b.keys |= b.fixed_keys
            step = max(1, min(b.n, int(batch.num_rows * CHUNK_CHARS / max(1, batch.nbytes))))
            for s in range(0, batch.num_rows, step):
                for row in batch.slice(s, step).to_pylist():
                    b.add(row, None)
                yield b.flush(min(size, f.tell()))   # one chunk per slice: a slice is sized to CHUNK_CHARS
                if b.done:
                    return
    except (pa.ArrowException, OSError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise Unreadable("unreadable", f"not a readable {what} file ({why}); LLaMA-Factory's loader (datasets, "
                                       "through pyarrow) fails on it too") from None
    if b.items or b.errors:
        yield b.flush(size)


def _parquet_chunks(f: BinaryIO, b: _Batch) -> Iterator[Chunk]:
    def batches(pa: Any) -> Iterator[Any]:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(f, buffer_size=_READ_BYTES, pre_buffer=False)
        meta = pf.metadata
        total = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        per_row = total / max(1, meta.num_rows)
        yield from pf.iter_batches(batch_size=max(1, min(b.n, int(CHUNK_CHARS / max(1.0, per_row)))))

    yield from _columnar(f, b, "Parquet", batches)


def _arrow_chunks(f: BinaryIO, b: _Batch) -> Iterator[Chunk]:
    """Arrow IPC: the file format when the file opens with its magic ``ARROW1``, else the stream format (what
    ``datasets`` writes to its cache)."""
    def batches(pa: Any) -> Iterator[Any]:
        magic = f.read(6)
        f.seek(0)
        if magic == b"ARROW1":
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            yield from pa.ipc.open_stream(f)

    yield from _columnar(f, b, "Arrow", batches)


_READERS: dict[str, Callable[[BinaryIO, _Batch], Iterator[Chunk]]] = {
    "json": _json_chunks, "csv": _csv_chunks, "parquet": _parquet_chunks, "arrow": _arrow_chunks,
    "text": _text_chunks}


def total_bytes(spec: RowSource) -> int:
    """Sum of the sizes of the dataset's files (progress bars measure bytes)."""
    tot = 0
    for f in spec.files:
        try:
            tot += os.path.getsize(f)
        except OSError:
            pass
    return tot
