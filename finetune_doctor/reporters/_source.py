"""Where a key's value sits in the text of a YAML or JSON file, for reporters that show or describe edits.

The text reporter shows an edit as ``key: old → new`` and SARIF carries fixes as text replacements
(deleted region + inserted content), while an `Edit` only names a file, a dotted key and a new value. This
module reads the file as it is now and finds the value's span without a YAML/JSON library round trip:

- JSON: a small recursive scan over the text with the standard library's own ``scanstring`` and
  ``raw_decode``, so every dotted path maps to the exact character span of its value.
- YAML: block mappings only (what LLaMA-Factory configs are): each ``key:`` line is placed under its parent
  by indentation, giving its dotted path; the value runs to the end of the line or to an inline comment.
  Flow mappings, block scalars (``|``/``>``) and list items are not located: callers get None and say less.

Everything here is a best effort for display: None means "unknown", never an error. Positions are 1-based
lines and 1-based columns counted in Unicode code points; ``end_col`` is the column after the value
(SARIF's ``endColumn`` convention).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any

_YAML_KEY = re.compile(r"""^(?P<indent>[ ]*)(?P<q>["']?)(?P<key>[^"'#:\s][^"'#:]*?)(?P=q)[ \t]*:(?=[ \t]|$)""")


@dataclass(frozen=True)
class Span:
    """A value's place in a file: `line`, `col` .. `end_col` (exclusive) on one line, and its raw text."""

    line: int
    col: int
    end_col: int
    text: str
    whole_line: bool = False  # the line holds only this key and its value: deleting the line deletes the key
    block: bool = False  # YAML: the value is the indented block below the key (a mapping or a list)


class SourceIndex:
    """Reads and indexes files on first use; one instance per rendering, so each file is read once."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, dict[str, Span]] | None] = {}

    def text(self, path: str) -> str | None:
        got = self._load(path)
        return got[0] if got else None

    def value(self, path: str, key: str) -> Span | None | bool:
        """The value span of dotted `key` in `path`; False when the file was read and has no such key;
        None when the file cannot be read or the key's place cannot be determined."""
        got = self._load(path)
        if got is None:
            return None
        text, spans = got
        if key in spans:
            return spans[key]
        if _is_json(path, text):
            return False
        # YAML: an unlocated key may hide in a construct we do not index (flow map, list)
        leaf = key.rsplit(".", 1)[-1]
        body = "\n".join(ln for ln in text.split("\n") if not ln.lstrip().startswith("#"))
        return None if re.search(rf"(^|[\s{{,]){re.escape(leaf)}\s*:", body, re.M) else False

    def command_values(self, path: str) -> dict[str, Any] | None:
        """The keys of `path` when it holds a training command line rather than a YAML (a WebUI preview, a .sh, or
        the words after ``doctor check --``, registered as ``<command line>``: readers/config/cliflags.py), read as
        the config reader reads them; None for any other file (trial 5: a fix printed ``deepspeed: (unset)`` for a
        ``--deepspeed`` flag)."""
        text = self.text(path)
        if text is None or _is_json(path, text):
            return None
        from finetune_doctor.errors import InputError
        from finetune_doctor.readers.config import cliflags
        from finetune_doctor.readers.config.yamlcfg import type_scalar

        if not cliflags.looks_like_command(text):
            return None
        try:
            return cliflags.parse_command(text, path, type_scalar)[0]
        except InputError:
            return None

    def is_json(self, path: str) -> bool:
        text = self.text(path)
        return text is not None and _is_json(path, text)

    def _load(self, path: str) -> tuple[str, dict[str, Span]] | None:
        if path not in self._cache:
            from finetune_doctor.readers.textfile import provided

            given = provided(path)
            try:
                if given is not None:
                    text = given.decode("utf-8")
                else:
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
            except (OSError, UnicodeDecodeError):
                self._cache[path] = None
            else:
                try:
                    spans = _json_spans(text) if _is_json(path, text) else _yaml_spans(text)
                except ValueError:
                    spans = {}
                self._cache[path] = (text, spans)
        return self._cache[path]


def _is_json(path: str, text: str) -> bool:
    if path.lower().endswith(".json"):
        return True
    return text.lstrip().startswith("{") and not path.lower().endswith((".yaml", ".yml"))


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def _pos(starts: list[int], offset: int) -> tuple[int, int]:
    """Character offset -> (1-based line, 1-based column)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1, offset - starts[lo] + 1


def _json_spans(text: str) -> dict[str, Span]:
    """Dotted path -> span of its value, for every key of every object in a JSON document."""
    dec = json.JSONDecoder()
    starts = _line_starts(text)
    spans: dict[str, Span] = {}
    ws = re.compile(r"\s*")

    def skip(i: int) -> int:
        return ws.match(text, i).end()  # type: ignore[union-attr]

    def obj(i: int, prefix: str) -> int:
        # text[i] == "{"; returns the index after the matching "}"
        i = skip(i + 1)
        if text[i] == "}":
            return i + 1
        while True:
            if text[i] != '"':
                raise ValueError("expected a key")
            key, i = scanstring(text, i + 1)
            i = skip(i)
            if text[i] != ":":
                raise ValueError("expected ':'")
            i = skip(i + 1)
            path = f"{prefix}.{key}" if prefix else key
            start = i
            end = obj(i, path) if text[i] == "{" else dec.raw_decode(text, i)[1]
            (l0, c0), (l1, c1) = _pos(starts, start), _pos(starts, end)
            if l0 == l1:
                spans[path] = Span(l0, c0, c1, text[start:end])
            i = skip(end)
            if text[i] == ",":
                i = skip(i + 1)
                continue
            if text[i] == "}":
                return i + 1
            raise ValueError("expected ',' or '}'")

    i = skip(0)
    if i < len(text) and text[i] == "{":
        obj(i, "")
    return spans


def _yaml_spans(text: str) -> dict[str, Span]:
    """Dotted path -> span of its scalar value, for block-mapping keys of a YAML document."""
    lines = text.split("\n")
    spans: dict[str, Span] = {}
    stack: list[tuple[int, str]] = []  # (indent, dotted path) of the open parent keys
    for n, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        m = _YAML_KEY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack and not spans[stack[-1][1]].block:
            # a more indented line under an empty ``key:`` makes that key a block, not an empty scalar
            parent = spans[stack[-1][1]]
            spans[stack[-1][1]] = Span(parent.line, parent.col, parent.end_col, parent.text, True, True)
        if m is None:
            continue  # list item, continuation or flow content: not indexed, and not a parent either
        key = m.group("key").strip()
        path = f"{stack[-1][1]}.{key}" if stack else key
        rest_start = m.end()
        value, v0 = _yaml_scalar(line, rest_start)
        if value is None:  # block scalar or unterminated quote
            continue
        if value == "":
            stack.append((indent, path))  # maybe a parent of an indented block; an empty scalar otherwise
        spans[path] = Span(n, v0 + 1, v0 + 1 + len(value), value, whole_line=True)
    return spans


def _yaml_scalar(line: str, i: int) -> tuple[str | None, int]:
    """The scalar after ``key:`` starting near index `i`: (raw text without comment, 0-based start)."""
    while i < len(line) and line[i] in " \t":
        i += 1
    if i >= len(line) or line[i] == "#":
        return "", i
    ch = line[i]
    if ch in "|>":
        return None, i
    if ch in "\"'":
        j = i + 1
        while j < len(line):
            if ch == '"' and line[j] == "\\":
                j += 2
                continue
            if line[j] == ch:
                if ch == "'" and j + 1 < len(line) and line[j + 1] == "'":
                    j += 2
                    continue
                return line[i:j + 1], i
            j += 1
        return None, i
    m = re.search(r"[ \t]#", line[i:])
    end = i + m.start() if m else len(line)
    return line[i:end].rstrip(), i


def yaml_scalar(value: Any) -> str:
    """`value` spelled as a YAML scalar that LLaMA-Factory reads back as the same type: exactly what ``--fix``
    writes (fixes/edit.py `yaml_scalar`, the one YAML scalar writer: ``1.0e-5``, never ``1e-05``, which a YAML 1.1
    reader takes for a string; reference/llamafactory/LF_FACTS.md §1)."""
    from finetune_doctor.fixes.edit import yaml_scalar as write

    return write(value)


def format_value(value: Any, as_json: bool) -> str:
    """`value` as it would be written into a JSON file (`as_json`) or a YAML file."""
    if as_json:
        return json.dumps(value, ensure_ascii=False, default=str)
    return yaml_scalar(value)


def edit_text(edit: Any, sources: SourceIndex) -> str:
    """One edit for people: ``key: old → new``, ``key: old → (delete)``, ``key: (unset) → new``.

    The old value is the edit's own ``old`` attribute when it has a non-None one, else read from the file as it is
    now; when it cannot be found the edit reads ``key → new``.
    """
    as_json = edit.file.lower().endswith(".json") or sources.is_json(edit.file)
    new = "(delete)" if edit.delete else format_value(edit.value, as_json)
    old: str | None
    cmd = None if getattr(edit, "old", None) is not None else sources.command_values(edit.file)
    if getattr(edit, "old", None) is not None:
        old = format_value(edit.old, as_json)
    elif cmd is not None:   # a run given as flags: its value as the flag gave it, in every form alike
        old = format_value(cmd[edit.key], as_json) if edit.key in cmd else "(unset)"
    else:
        span = sources.value(edit.file, edit.key)
        if span is False:
            old = "(unset)"
        elif isinstance(span, Span):
            old = "(block)" if span.block else (span.text or "null")
        else:
            old = None
    return f"{edit.key}: {old} → {new}" if old is not None else f"{edit.key} → {new}"
