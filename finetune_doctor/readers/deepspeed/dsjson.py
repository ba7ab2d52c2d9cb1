"""Read a JSON file as HF's ``json.load`` reads it, with the position of every key, within readers/limits.py.

HF and accelerate open the DeepSpeed config with ``open(path, encoding="utf-8")`` and ``json.load``
(transformers ``integrations/deepspeed.py`` ``HfDeepSpeedConfig.__init__``, accelerate ``utils/deepspeed.py``), so
this reader accepts exactly what CPython's ``json`` module accepts (``NaN``/``Infinity`` included; comments,
trailing commas and a UTF-8 byte-order mark rejected) and gives the same values, plus:

* the 1-based (line, column) of every key, as dotted paths (keys inside lists keep their list's path);
* every duplicated key with its full dotted path (``json.load`` keeps the last value silently);
* the limits of readers/limits.py, each breach an `InputError` at its line (``... exceeds ...``);
* strings made printable: a lone surrogate (``\\ud800``, which no UTF-8 output can encode) or a control
  character (which a terminal would obey) is kept as the ``\\uXXXX`` escape the file spells. No DeepSpeed key
  or value contains one, so every comparison with DeepSpeed's names and enums comes out as with the raw string.

Both ways of reading are linear in the text and never recurse. A text within every limit goes through the C
``json.loads`` and one regular-expression scan for its keys; any other goes through the exact parser, iterative,
whose strings are decoded by the ``json`` module's own C ``scanstring`` and numbers matched with its ``NUMBER_RE``
(CPython ``Lib/json/scanner.py``), and which places every breach at its line. A syntax error is reported with the
message and line ``json.loads`` itself gives for the text.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import stat
from dataclasses import dataclass
from json.decoder import scanstring
from json.scanner import NUMBER_RE
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers import limits

_WS = re.compile(r"[ \t\n\r]*")
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")   # tab, newline and CR stay
_CONSTANTS = {"null": None, "true": True, "false": False, "NaN": float("nan"), "Infinity": float("inf"),
              "-Infinity": float("-inf")}
_HINT = (" — HF/LLaMA-Factory read the DeepSpeed config with json.load, so comments and trailing commas are not "
         "allowed (DeepSpeed's own hjson reader would accept them)")


@dataclass(frozen=True)
class JsonDoc:
    """A parsed JSON object: `values` as ``json.load`` gives them, `positions` dotted key → (line, column) of its
    first occurrence, `duplicates` the dotted keys given more than once (sorted)."""

    values: dict[str, Any]
    positions: dict[str, tuple[int, int]]
    duplicates: tuple[str, ...] = ()


def printable(s: str) -> str:
    """`s` with lone surrogates and C0/C1 control characters but tab, newline and CR written as ``\\uXXXX`` escapes."""
    if not _UNPRINTABLE.search(s):
        return s
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", s)


def read_bytes(path: str, what: str = "DeepSpeed config") -> bytes:
    """The bytes of a regular file, at most limits.MAX_CONFIG_BYTES of them.

    The file is opened non-blocking and checked with ``fstat`` on the open descriptor, so a FIFO, a device
    (``/dev/zero``) or a directory is refused before anything is read and cannot hang the read. Raises InputError
    naming `path` for those, for every OS error (missing, permission, symlink loop, name too long) and for a file
    over the size limit.
    """
    from finetune_doctor.readers.textfile import provided

    given = provided(str(path))
    if given is not None:
        if len(given) > limits.MAX_CONFIG_BYTES:
            raise InputError(f"{what} exceeds the {limits.MAX_CONFIG_BYTES >> 20} MiB limit", file=str(path))
        return given
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise InputError(f"cannot read {what}: {err.strerror or err}", file=str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a plain file")
            raise InputError(f"{what} is {kind}, not a regular file", file=str(path))
        # read one byte past the limit: st_size is 0 for some regular files (/proc) and a file may grow meanwhile
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            data = f.read(limits.MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise InputError(f"cannot read {what}: {err.strerror or err}", file=str(path)) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limits.MAX_CONFIG_BYTES:
        raise InputError(limits.exceeds("file size", f"over {limits.MAX_CONFIG_BYTES} bytes",
                                        f"{limits.MAX_CONFIG_BYTES // (1024 * 1024)} MiB",
                                        f"a {what} is a few KB"), file=str(path), line=1)
    return data


def decode(data: bytes, path: str, what: str = "DeepSpeed config") -> str:
    """Decode as HF does (UTF-8, no byte-order mark); raises InputError with the line of the first bad byte.

    UTF-16/UTF-32 text (with or without BOM, detected by ``json.detect_encoding``, the stdlib's rule) and a UTF-8
    BOM are named as such: ``json.load`` on a file opened as UTF-8 fails on all of them.
    """
    enc = json.detect_encoding(data[:4]) if data else "utf-8"
    if enc.startswith(("utf-16", "utf-32")):
        raise InputError(f"{what} is {enc.upper()} text; HF opens it as UTF-8 and json.load fails: save it as UTF-8",
                         file=path, line=1)
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError(f"malformed {'DeepSpeed JSON' if what == 'DeepSpeed config' else what}: Unexpected UTF-8 "
                         "BOM (HF decodes with utf-8, not utf-8-sig, so json.load fails): save it without the BOM",
                         file=path, line=1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(f"{what} is not UTF-8 text: byte 0x{data[err.start]:02X} at column {col} cannot be decoded "
                         "(HF opens it as UTF-8)", file=path, line=line) from None


def read_json(path: str, what: str = "DeepSpeed config") -> JsonDoc:
    """`read_bytes`, `decode` and `parse` in one; raises InputError (file, line)."""
    return parse(decode(read_bytes(path, what), str(path), what), str(path), what)


class _Lines:
    """Offset → (line, column), 1-based, from the offsets of the newlines (found once, in C)."""

    def __init__(self, text: str):
        self.starts = [m.end() for m in re.finditer("\n", text)]

    def at(self, pos: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.starts, pos)
        return i + 1, pos - (self.starts[i - 1] if i else 0) + 1


def parse(text: str, path: str, what: str = "DeepSpeed config") -> JsonDoc:
    """Parse `text` (a JSON object) as ``json.loads`` would; raises InputError (file, line) for an empty text, a
    syntax error, a top level that is not an object, or a breached limit.

    Two ways, one result: a text within every limit and without a string to make printable is read by the C
    ``json.loads`` and scanned once for its keys (`_fast`); any other text, and every text with an error, by the
    exact parser (`_Parser`), which places each breach and error at its line. tests/test_ds_hostile.py checks that
    both give the same document.
    """
    if not text.strip():
        raise InputError(f"empty {what}", file=path, line=1)
    doc = _fast(text)
    if doc is None:
        try:
            values, positions, dups = _Parser(text, path).run()
        except _Syntax as err:
            raise _json_error(text, path, err) from None
        doc = JsonDoc(values, positions, tuple(sorted(dups)))
    if not isinstance(doc.values, dict):
        raise InputError(f"a {what} must be a JSON object, found {_jtype(doc.values)}", file=path, line=1)
    return doc


# a string token (a key when a colon follows) or a bracket; and what in a text may decode to an unprintable string
_NEXT = re.compile(r'["{}\[\]]')
_UNPRINTABLE_SRC = re.compile(r"\\u(?:00[01][0-9a-fA-F]|007[fF]|00[89][0-9a-fA-F]|[dD][89a-fA-F][0-9a-fA-F]{2})"
                              r"|\\[bfnrt]|[\x7f-\x9f]")


def _fast(text: str) -> JsonDoc | None:
    """The document by ``json.loads`` plus one scan for key positions and duplicates, or None when the text must
    go to the exact parser (an error, a limit that may be breached, a string to make printable)."""
    if text.count(",") + text.count("{") + text.count("[") >= limits.MAX_CONFIG_NODES:
        return None
    if ("\\" in text or not text.isascii()) and _UNPRINTABLE_SRC.search(text):
        return None
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):      # JSONDecodeError, an integer over the digit limit, deep nesting
        return None
    offsets: list[tuple[str, int, bool]] = []
    dups: set[str] = set()
    stack: list[list[Any]] = []              # [is object, dotted path, pending key path, keys seen]
    longest = limits.MAX_SCALAR_CHARS + 2
    pos = 0
    # strings are measured by the json module's own C scanstring, never by a regex: a `(?:[^"\\]|\\.)*` group
    # over one 10 MiB string kept a backtracking frame per character and peaked at 1.4 GB (issue 27)
    while True:
        m = _NEXT.search(text, pos)
        if m is None:
            break
        at, tok = m.start(), m.group()
        if tok == '"':
            try:
                name, end = scanstring(text, at + 1, True)
            except ValueError:
                return None
            if end - at > longest:
                return None
            pos = end
            after = _WS.match(text, end).end()
            if after >= len(text) or text[after] != ":":
                continue                      # a string value
            frame = stack[-1]
            key = f"{frame[1]}.{name}" if frame[1] else name
            if name in frame[3]:
                dups.add(key)
            frame[3].add(name)
            offsets.append((key, at, any(not f[0] for f in stack)))
            frame[2] = key
            continue
        pos = at + 1
        if tok == "{" or tok == "[":
            if len(stack) >= limits.MAX_DEPTH:
                return None
            top = stack[-1] if stack else None
            prefix = "" if top is None else top[2] if top[0] else top[1]
            stack.append([tok == "{", prefix, None, set() if tok == "{" else None])
        else:
            stack.pop()
    return JsonDoc(values, _positions(text, offsets), tuple(sorted(dups)))


def key_positions(text: str) -> dict[str, tuple[int, int]]:
    """(line, column), both 1-based, of every object key of a JSON text by dotted path (``text_config.hidden_size``;
    a key inside an array under the array's path). A duplicated key is placed at its last occurrence, the one whose
    value ``json.load`` keeps. The one JSON key scanner: DeepSpeed JSONs, model config.json, recordings. {} for a text
    that does not parse or breaches the input limits (readers/limits.py)."""
    doc = _fast(text)
    if doc is not None:
        return doc.positions
    try:
        return _Parser(text, "").run()[1]
    except (_Syntax, InputError):
        return {}


def _positions(text: str, offsets: list[tuple[str, int, bool]]) -> dict[str, tuple[int, int]]:
    """Key offsets (ascending; each flagged when inside an array) → (line, column), in one merge with the newline
    offsets. A key met again keeps its last offset, where json.load takes its value from (a duplicate, or any key
    below one); inside an array the first element's keys stand for the path (the elements are not duplicates)."""
    out: dict[str, tuple[int, int]] = {}
    lines = _Lines(text).starts
    start, j = 0, 0
    for path, off, in_array in offsets:
        while j < len(lines) and lines[j] <= off:
            start, j = lines[j], j + 1
        if in_array:
            out.setdefault(path, (j + 1, off - start + 1))
        else:
            out[path] = (j + 1, off - start + 1)
    return out


class _Syntax(Exception):
    def __init__(self, pos: int, msg: str):
        super().__init__(msg)
        self.pos, self.msg = pos, msg


def _json_error(text: str, path: str, err: _Syntax) -> InputError:
    """The InputError for a syntax error, worded and placed as ``json.loads`` words and places it."""
    try:
        json.loads(text)
    except json.JSONDecodeError as jerr:
        hint = _HINT if ("Expecting property name" in jerr.msg or "Expecting value" in jerr.msg
                         or "trailing comma" in jerr.msg) else ""
        return InputError(f"malformed DeepSpeed JSON: {jerr.msg} (column {jerr.colno}){hint}", file=path,
                          line=jerr.lineno)
    except (ValueError, RecursionError):
        pass
    line, col = _Lines(text).at(err.pos)
    return InputError(f"malformed DeepSpeed JSON: {err.msg} (column {col})", file=path, line=line)


_COLON = re.compile(r"[ \t\n\r]*:[ \t\n\r]*")
_AFTER = re.compile(r"[ \t\n\r]*([,}\]])[ \t\n\r]*")


class _Parser:
    """One pass over the text with an explicit stack of open containers (see the module docstring).

    A frame is [dict or list, its dotted path, pending key, pending key's path, keys seen] (the last three unused
    for a list). Key offsets are collected in text order and turned into (line, column) in one merge at the end.
    """

    def __init__(self, text: str, path: str):
        self.s, self.path = text, path
        self.offsets: list[tuple[str, int, bool]] = []
        self.stack: list[list[Any]] = []
        self.dups: set[str] = set()

    def breach(self, pos: int, what: str, value: Any, limit: Any, why: str) -> InputError:
        return InputError(limits.exceeds(what, value, limit, why), file=self.path, line=_Lines(self.s).at(pos)[0])

    def run(self) -> tuple[Any, dict[str, tuple[int, int]], set[str]]:
        s = self.s
        value, i = self.document(_WS.match(s, 0).end())
        i = _WS.match(s, i).end()
        if i != len(s):
            raise _Syntax(i, "Extra data")
        return value, self.positions(), self.dups

    def positions(self) -> dict[str, tuple[int, int]]:
        return _positions(self.s, self.offsets)

    def document(self, i: int) -> tuple[Any, int]:
        s, n, stack, nodes = self.s, len(self.s), [], 0
        self.stack = stack
        max_depth, max_nodes = limits.MAX_DEPTH, limits.MAX_CONFIG_NODES
        while True:
            if i >= n:
                raise _Syntax(i, "Expecting value")
            ch = s[i]
            if ch == "{" or ch == "[":
                if len(stack) >= max_depth:
                    raise self.breach(i, "nesting depth", f"over {max_depth} levels", max_depth,
                                      "a DeepSpeed config nests about 6 levels")
                prefix = "" if not stack else stack[-1][3] if stack[-1][4] is not None else stack[-1][1]
                i = _WS.match(s, i + 1).end()
                if ch == "{":
                    stack.append([{}, prefix, None, None, set()])
                    if s.startswith("}", i):
                        value, i = stack.pop()[0], i + 1
                    else:
                        i = self.key(stack[-1], i)
                        continue
                else:
                    stack.append([[], prefix, None, None, None])
                    if s.startswith("]", i):
                        value, i = stack.pop()[0], i + 1
                    else:
                        continue
            elif ch == '"':
                value, i = self.string(i + 1)
            else:
                value, i = self.scalar(i)
            while stack:                          # store the value, then read past every container it closes
                nodes += 1
                if nodes > max_nodes:
                    raise self.breach(i, "number of values", f"over {max_nodes}", max_nodes,
                                      "a DeepSpeed config holds a few dozen")
                top = stack[-1]
                is_obj = top[4] is not None
                if is_obj:
                    top[0][top[2]] = value
                else:
                    top[0].append(value)
                m = _AFTER.match(s, i)
                if m is None:
                    raise _Syntax(_WS.match(s, i).end(), "Expecting ',' delimiter")
                sep, i = m.group(1), m.end()
                if sep == ",":
                    if is_obj:
                        i = self.key(top, i)
                    break
                if sep != ("}" if is_obj else "]"):
                    raise _Syntax(m.start(1), "Expecting ',' delimiter")
                value = stack.pop()[0]
            else:
                return value, i

    def key(self, frame: list[Any], i: int) -> int:
        """Read ``"name" :`` at `i` into `frame` (pending key, offset, duplicate check); returns the value's start."""
        s = self.s
        if not s.startswith('"', i):
            raise _Syntax(i, "Expecting property name enclosed in double quotes")
        name, end = self.string(i + 1)
        path = f"{frame[1]}.{name}" if frame[1] else name
        seen = frame[4]
        if name in seen:
            self.dups.add(path)
        seen.add(name)
        self.offsets.append((path, i, any(f[4] is None for f in self.stack)))
        frame[2], frame[3] = name, path
        m = _COLON.match(s, end)
        if m is None:
            raise _Syntax(_WS.match(s, end).end(), "Expecting ':' delimiter")
        return m.end()

    def string(self, i: int) -> tuple[str, int]:
        try:
            value, end = scanstring(self.s, i, True)
        except json.JSONDecodeError as err:
            raise _Syntax(err.pos, err.msg) from None
        if len(value) > limits.MAX_SCALAR_CHARS:
            raise self.breach(i, "string length", f"{len(value)} characters", limits.MAX_SCALAR_CHARS,
                              "no DeepSpeed value is longer than a file path")
        return (printable(value) if _UNPRINTABLE.search(value) else value), end

    def scalar(self, i: int) -> tuple[Any, int]:
        s = self.s
        m = NUMBER_RE.match(s, i)
        if m is not None:
            integer, frac, exp = m.groups()
            if frac or exp:
                return float(integer + (frac or "") + (exp or "")), m.end()
            digits = len(integer) - integer.startswith("-")
            if digits > limits.MAX_INT_DIGITS:
                raise self.breach(i, "integer literal", f"{digits} digits", f"{limits.MAX_INT_DIGITS} digits",
                                  "Python's int parsing, and so HF's json.load, refuses longer ones")
            return int(integer), m.end()
        for word in ("null", "true", "false", "NaN", "Infinity", "-Infinity"):
            if s.startswith(word, i):
                return _CONSTANTS[word], i + len(word)
        raise _Syntax(i, "Expecting value")


def copy_tree(value: Any) -> Any:
    """A deep copy of a parsed tree (dicts, lists, scalars). Through pickle's C code: about twice as fast as
    ``copy.deepcopy`` on a 200k-key config, and safe because `parse`/`plain_copy` bound the nesting."""
    import pickle   # imported on first copy: a lint of YAML configs alone never copies a JSON tree

    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def plain_copy(value: Any, path: str, line: int | None, what: str = "DeepSpeed config") -> Any:
    """A copy of an already parsed tree (an inline ``deepspeed:`` mapping of a YAML) held to the same limits and
    printable strings as `parse` gives; iterative, so any nesting is refused cleanly. Raises InputError at
    (`path`, `line`)."""
    def breach(what_: str, value_: Any, limit: Any) -> InputError:
        return InputError(limits.exceeds(what_, value_, limit), file=path, line=line)

    def leaf(v: Any) -> Any:
        if isinstance(v, str):
            if len(v) > limits.MAX_SCALAR_CHARS:
                raise breach("string length", f"{len(v)} characters", limits.MAX_SCALAR_CHARS)
            return printable(v)
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > limits.MAX_INT_DIGITS * 3.33:
            raise breach("integer", f"about {int(v.bit_length() / 3.33)} digits", f"{limits.MAX_INT_DIGITS} digits")
        return v

    root: Any = {} if isinstance(value, dict) else []
    stack = [(value, root, 1)]
    nodes = 0
    while stack:
        src, dst, depth = stack.pop()
        if depth > limits.MAX_DEPTH:
            raise breach(f"nesting depth of the inline {what}", f"over {limits.MAX_DEPTH} levels", limits.MAX_DEPTH)
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for k, v in items:
            nodes += 1
            if nodes > limits.MAX_CONFIG_NODES:
                raise breach("number of values", f"over {limits.MAX_CONFIG_NODES}", limits.MAX_CONFIG_NODES)
            if isinstance(v, (dict, list, tuple)):
                child: Any = {} if isinstance(v, dict) else []
                stack.append((v, child, depth + 1))
                v = child
            else:
                v = leaf(v)
            if isinstance(dst, dict):
                dst[printable(str(k))] = v
            else:
                dst.append(v)
    return root


def _jtype(v: Any) -> str:
    return {list: "list", str: "str", bool: "bool", int: "int", float: "float", type(None): "null"}.get(type(v),
                                                                                                       type(v).__name__)
