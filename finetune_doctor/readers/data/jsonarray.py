"""The elements of a top-level JSON array, one at a time, from a text source of any size (readers/data/datarows.py).

`ArrayReader` reads its source (``read(n) -> str``, ``eof``, ``error_at``: readers/data/datarows.py ``_Utf8Text``) into a
sliding buffer and decodes one element at a time; an element larger than `max_element` characters is skipped by a
scan that keeps nothing of it. `json_limit` words the two ways Python's JSON reader gives up on valid-looking input.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator


def json_limit(err: Exception) -> str:
    if isinstance(err, RecursionError):
        return "JSON nested too deeply to read (over ~1,000 levels, Python's recursion limit)"
    return f"a JSON value exceeds what can be read: {err}"


# a \uD800-\uDFFF escape: the only way a lone surrogate gets into a decoded JSON string. pyarrow's JSON reader, which
# datasets.load_dataset("json") uses for LLaMA-Factory's datasets, refuses one ("JSON parse error: The surrogate
# pair in string is invalid.", pyarrow 26.0.1; tests/test_fuzz_regressions.py), so the dataset fails to load.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
LONE_SURROGATE = ("a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without its pair): datasets' JSON reader "
                  "(pyarrow) stops with \"The surrogate pair in string is invalid\"")


def has_lone_surrogate(source: str, value: Any) -> bool:
    """Whether decoded JSON `value` holds a lone surrogate; `source` (its text) is searched first, so a value
    whose text has no surrogate escape costs one regex scan. O(size of value) otherwise."""
    if _SURROGATE_ESCAPE.search(source) is None:
        return False
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any("\ud800" <= ch <= "\udfff" for ch in v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


_WS = re.compile(r"[ \t\r\n]*")
_STRING_BODY = re.compile(r'(?:[^"\\]++|\\.)*+', re.S)
_SKIP_OUTSIDE = re.compile(r'["\[\]{},]')


class ArrayReader:
    """The elements of a top-level JSON array, decoded one at a time from a sliding text buffer.

    ``raw_decode`` (the standard library's C scanner, ``strict=False``: raw control characters in strings are
    taken, as pandas' parser takes them) parses an element; when it runs past the buffer the buffer doubles. An
    element over `max_element` characters is skipped by a scan for its end that keeps nothing (string bodies are
    matched by one regular expression, in C). A syntax error ends the file (an array cannot be resynchronised).
    """

    def __init__(self, src: Any, *, read_bytes: int, max_element: int):
        self.src = src
        self.read_bytes, self.max_element = read_bytes, max_element
        self.buf = src.read(read_bytes).lstrip("\ufeff")
        self.dropped = 0                      # characters dropped from the front so far
        self.line_no, self.line_pos = 1, 0    # line number at buf[line_pos]
        self.pos = _WS.match(self.buf, 0).end() + 1   # past the '['
        self.decoder = json.JSONDecoder(strict=False)
        self.last_size = 0                    # characters of the last element
        self.seen = False                     # an element was read

    def line_at(self, p: int) -> int:
        self.line_no += self.buf.count("\n", self.line_pos, p)
        self.line_pos = p
        return self.line_no

    def refill(self) -> bool:
        """Drop what is before `pos` and read more (at least as much as is left); False at the end."""
        if self.src.eof:
            return False
        self.line_at(self.pos)
        more = self.src.read(max(self.read_bytes, len(self.buf) - self.pos))
        self.dropped += self.pos
        self.buf = self.buf[self.pos:] + more
        self.pos = self.line_pos = 0
        return bool(more) or not self.src.eof

    def _stop(self, message: str, line: int) -> tuple[str, Any, int]:
        # text that ends early because the next bytes are not UTF-8 is a decoding problem, not a syntax error
        return ("encoding", None, line) if self.src.error_at is not None else ("error", message, line)

    def elements(self) -> Iterator[tuple[str, Any, int]]:
        """("row", value, line) per element, ("large", size, line) per skipped element, then at most one
        ("error", message, line) or ("encoding", None, line) that ends the file."""
        expect_value = True
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos >= len(self.buf):
                if self.refill():
                    continue
                yield self._stop("unexpected end of file inside the JSON array", self.line_at(len(self.buf)))
                return
            c = self.buf[self.pos]
            if c == "]" and (not expect_value or not self.seen):
                return
            if c == "," and not expect_value:
                self.pos += 1
                expect_value = True
                continue
            item = self._element()
            if item is None:
                continue            # the buffer grew: decode again
            yield item
            if item[0] in ("error", "encoding"):
                return
            expect_value, self.seen = False, True
            if self.pos > self.read_bytes and not self.src.eof:
                self.refill()

    def _element(self) -> tuple[str, Any, int] | None:
        start = self.pos
        try:
            obj, end = self.decoder.raw_decode(self.buf, start)
        except json.JSONDecodeError as err:
            incomplete = err.msg.startswith("Unterminated") or err.pos >= len(self.buf) - 16
            if incomplete and not self.src.eof:
                if len(self.buf) - start >= self.max_element:
                    line = self.line_at(start)
                    size = self._skip()
                    if size is None:
                        return self._stop("unexpected end of file inside the JSON array", line)
                    return "large", size, line
                return None if self.refill() else self._stop(f"malformed JSON: {err.msg}", self.line_at(err.pos))
            msg = f"malformed JSON: {err.msg} (the rest of this JSON array cannot be read)"
            return self._stop(msg, self.line_at(err.pos)) if incomplete else ("error", msg, self.line_at(err.pos))
        except (RecursionError, ValueError) as err:
            return "error", json_limit(err) + " (the rest of this JSON array cannot be read)", self.line_at(start)
        if end >= len(self.buf) and not self.src.eof and self.refill():
            return None  # a number or literal may continue past the buffer end
        line = self.line_at(start)
        if has_lone_surrogate(self.buf[start:end], obj):
            return "error", LONE_SURROGATE + " (the rest of this JSON array cannot be read)", line
        self.pos, self.last_size = end, end - start
        if end - start > self.max_element:   # it fitted in the buffer; the limit is the same as for a skipped one
            return "large", end - start, line
        return "row", obj, line

    def _skip(self) -> int | None:
        """Move past the element at `pos` without decoding it; its size in characters, or None at the end."""
        begin = self.dropped + self.pos
        depth, in_string, p = 0, False, self.pos
        while True:
            if in_string:
                q = _STRING_BODY.match(self.buf, p).end()   # runs of text and escapes, in C
                if q < len(self.buf) and self.buf[q] == '"':
                    in_string, p = False, q + 1
                    if depth == 0:
                        break
                    continue
                p = q                                       # the buffer ends inside the string (or its escape)
            else:
                m = _SKIP_OUTSIDE.search(self.buf, p)
                if m is not None:
                    c = m.group()
                    if c == '"':
                        in_string, p = True, m.end()
                        continue
                    if c in "[{":
                        depth, p = depth + 1, m.end()
                        continue
                    if c in "]}" and depth > 0:
                        depth, p = depth - 1, m.end()
                        if depth == 0:
                            break
                        continue
                    if depth == 0:      # ',' or ']' after a scalar element
                        p = m.start()
                        break
                    p = m.end()
                    continue
            # the element goes on past the buffer: drop what was scanned and read more
            if not in_string:
                p = len(self.buf)
            self.pos = p
            if not self.refill():
                return None
            p = self.pos
        self.pos = p
        return self.dropped + p - begin
