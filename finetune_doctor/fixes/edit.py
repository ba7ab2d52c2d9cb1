"""Apply key edits to a LLaMA-Factory YAML or a DeepSpeed JSON without disturbing anything else in the file.

Every edit is a `types.Edit`: set a key (``value``), or remove it (``delete=True``). Keys are dotted paths
(``zero_optimization.stage``); a LLaMA-Factory YAML is flat, so its keys are plain names.

How the file is kept intact
---------------------------
The file is parsed with ruamel.yaml's round-trip loader (YAML) or a small span-recording JSON scanner (fixes/jsonedit.py), which give
the exact line and column of every key and value. Each edit then rewrites only the characters of that key's value
(set), the lines of that key (delete) or adds one line (insert), so comments, blank lines, key order, quoting, number
spellings like ``5.0e-6`` or ``1e9`` and indentation stay byte for byte as they were -- a full ``ruamel.dump`` or
``json.dumps`` would reflow some of them (``null`` becomes empty, ``1e9`` becomes ``1000000000.0``). After the edits
the new text is parsed again and compared with the old data plus the edits; a mismatch raises InputError rather than
write a file that means something else.

* Set on a missing key inserts it: at the end of its mapping/object, or after a named sibling (`after`).
  A delete of key A next to a set of missing key B in the same mapping (in either order) is a rename: B takes A's
  line and keeps A's trailing comment (fixes/plan.py `pair_renames`: how merged edits of several fixes are paired).
* A new string value keeps the quote style of the value it replaces; otherwise it is written plain when LLaMA-Factory
  (OmegaConf, YAML 1.1) would read it back as the same string, else double-quoted.
* Writes are atomic (a temp file in the same directory, then ``os.replace``; the file mode is kept). Nothing is
  written when the file's text is not `expect_text` (it changed since it was read). Applying the same edits twice
  changes nothing the second time.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from finetune_doctor.errors import InputError
from finetune_doctor.fixes.fileio import atomic_write as _atomic_write
from finetune_doctor.fixes.fileio import lf as _lf
from finetune_doctor.fixes.fileio import read as _read
from finetune_doctor.fixes.jsonedit import JsonDoc
from finetune_doctor.fixes.plan import Op, expected_data, is_noop, lookup_path, pair_renames, plan_ops, same_data
from finetune_doctor.types import Edit


@dataclass(frozen=True)
class FixResult:
    """What `apply_edits` did to one file.

    `changed` is True when the file was (or, for a dry run, would be) rewritten; `keys` lists the edited key paths
    that changed something; `stale` is True when nothing was written because the file no longer had the expected
    text; `text` is the new text (the old one when unchanged); `diff` the unified diff; `notes` human remarks.
    """

    path: str
    changed: bool
    keys: tuple[str, ...] = ()
    stale: bool = False
    text: str = ""
    diff: str = ""
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------------------
# public API

def apply_edits(path: str, edits: Sequence[Edit], *, expect_text: str | None = None,
                after: Mapping[str, str] | None = None, dry_run: bool = False) -> FixResult:
    """Apply `edits` to the file at `path` and write it atomically; returns a FixResult.

    `expect_text`: the text the caller read (and based its findings on); when the file now holds something else,
    nothing is written and the result is ``stale``. `after` maps a new key to the sibling it goes after (default:
    the end of its mapping). `dry_run` computes the result without writing. Raises InputError when the file cannot
    be read or parsed, or an edit cannot be expressed (a key below a scalar).
    """
    raw, text, bom = _read(path)
    if expect_text is not None and _lf(text) != _lf(expect_text):
        return FixResult(path, False, stale=True, text=text,
                         notes=(f"{path}: changed since it was read; fixes not written",))
    left: list[str] = []
    new_text, keys = render_edits(text, edits, kind=file_kind(path, text), path=path, after=after, notes=left)
    if new_text == text:
        return FixResult(path, False, text=text, notes=tuple(left))
    diff = _unified(path, text, new_text)
    if not dry_run:
        _atomic_write(path, new_text, bom=bom, expect_raw=raw)
    return FixResult(path, True, keys=tuple(keys), text=new_text, diff=diff, notes=tuple(left))


def diff_edits(path: str, edits: Sequence[Edit], *, after: Mapping[str, str] | None = None) -> str:
    """The unified diff `apply_edits` would write (``--- PATH`` / ``+++ PATH``), or "" when nothing changes."""
    _raw, text, _bom = _read(path)
    new_text, _ = render_edits(text, edits, kind=file_kind(path, text), path=path, after=after)
    return "" if new_text == text else _unified(path, text, new_text)


def file_kind(path: str, text: str = "") -> str:
    """'json' for ``*.json`` (or text starting with ``{``), else 'yaml'."""
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    return "json" if text.lstrip().startswith("{") else "yaml"


def render_edits(text: str, edits: Sequence[Edit], *, kind: str, path: str = "<text>",
                 after: Mapping[str, str] | None = None, notes: list[str] | None = None) -> tuple[str, list[str]]:
    """The new text after `edits` (pure: no I/O) and the keys that changed; `notes`, when given, collects why an
    edit was left out (a key from a merge key, an anchor an alias uses). Raises InputError as apply_edits."""
    ops = plan_ops(edits)
    doc: Any = JsonDoc(text, path) if kind == "json" else _YamlDoc(text, path)
    out = doc.apply(ops, after or {})
    if notes is not None:
        notes.extend(getattr(doc, "skipped", ()))
    return out


# --------------------------------------------------------------------------------------------------------------
# YAML

_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")


def yaml_scalar(v: Any, quote: str | None = None, flow: bool = False) -> str:
    """One value as YAML text that OmegaConf (YAML 1.1) and ruamel (1.2) both read back as `v`: the one YAML scalar
    writer (fixes and the edits reporters show)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return ".nan"
        if v in (float("inf"), float("-inf")):
            return ".inf" if v > 0 else "-.inf"
        text = repr(v)
        if "e" in text:  # 5e-06 -> 5.0e-6, the spelling LLaMA-Factory's examples use; 1e+20 keeps its sign,
            mant, exp = text.split("e")   # which YAML 1.1's float pattern requires
            e = int(exp)
            text = f"{mant if '.' in mant else mant + '.0'}e{'-' if e < 0 else '+'}{abs(e)}"
        return text
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_scalar(x, flow=True) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{yaml_scalar(str(k), flow=True)}: {yaml_scalar(x, flow=True)}"
                               for k, x in v.items()) + "}"
    s = str(v)
    if quote == "'":
        return "'" + s.replace("'", "''") + "'"
    if quote == '"' or not _plain_ok(s, flow):
        return json.dumps(s, ensure_ascii=False)
    return s


def _plain_ok(s: str, flow: bool) -> bool:
    from finetune_doctor.readers.config.yamlcfg import type_scalar

    if not s or s != s.strip() or "\n" in s or s[0] in _INDICATORS or ": " in s or " #" in s or s.endswith(":"):
        return False
    if flow and any(c in s for c in ",[]{}"):
        return False
    # YAML 1.1 (LF's reader) and 1.2 (ruamel) must both see a string
    if type_scalar(s) != s:
        return False
    return not re.fullmatch(r"[-+]?(\.inf|\.nan|[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|0x[0-9a-fA-F]+|0o[0-7]+)",
                            s, re.IGNORECASE)


_TAB_AFTER_COLON = re.compile(r"^([ ]*(?:- )?[^\s#'\"{}\[\]][^:#\n]*:)([ \t]*\t[ \t]*)(?=\S)", re.M)


def _blank_tabs(m: "re.Match[str]") -> str:
    return m.group(1) + m.group(2).replace("\t", " ")


_ANCHOR = re.compile(r"(?<![\w&*])&([^\s,\[\]{}]+)")


class _Unfaithful(Exception):
    """Applied edits would change keys they do not name."""


class _YamlDoc:
    def __init__(self, text: str, path: str):
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError

        self.path = path
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.nl = "\r\n" if "\r\n" in text else "\n"
        y = YAML(typ="rt")
        y.preserve_quotes = True
        self.skipped: list[str] = []
        try:
            # ruamel refuses a tab between `key:` and its value, which libyaml and OmegaConf accept (issue 27):
            # it parses a copy with those tabs as blanks, one for one, so every line and column stays valid
            self.root = y.load(_TAB_AFTER_COLON.sub(_blank_tabs, text))
        except YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            from finetune_doctor.readers.config.yamlcfg import CUT_WORD

            last = [ln for ln in text.splitlines() if ln.strip()][-1:]
            if last and CUT_WORD.match(last[0]):
                # read, judged and hedged as a cut paste (readers/config/yamlcfg.py `_parse_maybe_cut`); an edit
                # would write around a line no one knows the end of
                raise InputError(f"not fixed: the file looks cut (its last line, `{last[0].strip()}`, stops in the "
                                 "middle of a key): complete or remove that line, then --fix", file=path,
                                 line=len(text.splitlines())) from None
            raise InputError(f"malformed YAML: {getattr(err, 'problem', err)}", file=path,
                             line=mark.line + 1 if mark else None) from None
        if self.root is None:
            from ruamel.yaml.comments import CommentedMap

            self.root = CommentedMap()
        if not isinstance(self.root, dict):
            raise InputError("top level must be a mapping to edit keys", file=path, line=1)

    # -- lookups
    def _node(self, path: tuple[str, ...]):
        cur = self.root
        for k in path:
            if not isinstance(cur, dict) or k not in cur:
                return None
            cur = cur[k]
        return cur

    def _exists(self, path: tuple[str, ...]) -> bool:
        """`path` is a key written in its own mapping (not one a merge key ``<<`` brings in)."""
        parent = self._node(path[:-1]) if len(path) > 1 else self.root
        if not isinstance(parent, dict) or path[-1] not in parent:
            return False
        own = getattr(parent, "_ok", None)   # ruamel's set of a mapping's own keys when it has merges
        return own is None or path[-1] in own

    def _present(self, path: tuple[str, ...]) -> bool:
        parent = self._node(path[:-1]) if len(path) > 1 else self.root
        return isinstance(parent, dict) and path[-1] in parent

    def _blocked(self, o: Op) -> str | None:
        """Why op `o` cannot be applied without breaking what YAML users rely on, or None (issue 27)."""
        key = ".".join(o.path)
        if o.action in ("delete", "rename") and self._present(o.path) and not self._exists(o.path):
            return (f"`{key}` comes from a merge key (<<): not fixed; edit the mapping it is merged from "
                    "by hand")
        if not self._exists(o.path) or (o.action == "rename" and _same_value(self._node(o.path), o.value)):
            return None   # a rename that keeps the value keeps its text, anchor included
        parent = self._node(o.path[:-1]) if len(o.path) > 1 else self.root
        first, end, _col = self._key_span(parent, o.path[-1])
        span = "".join(self.lines[first:end])
        rest = "".join(self.lines[:first] + self.lines[end:])
        for name in _ANCHOR.findall(span):
            if re.search(r"\*" + re.escape(name) + r"(?![^\s,\[\]{}])", rest):
                return (f"`{key}` carries the anchor &{name} that an alias (*{name}) elsewhere uses: not fixed, "
                        "as changing it would change or break that alias; edit it by hand")
        return None

    def _typed(self, text: str) -> Any:
        from finetune_doctor.readers.config.yamlcfg import parse_yaml_text

        return parse_yaml_text(text, self.path)[0]

    def apply(self, ops: list[Op], after: Mapping[str, str]) -> tuple[str, list[str]]:
        before = self._typed(self.text) if self.text.strip() else {}
        before = before if isinstance(before, dict) else {}
        ops = [o for o in pair_renames(ops, self._present, lambda p: lookup_path(before, p)) if not is_noop(o, before)]
        kept = []
        for o in ops:
            why = self._blocked(o)
            if why:
                self.skipped.append(why)
            else:
                kept.append(o)
        ops = kept
        if not ops:
            return self.text, []
        original = self.text   # every attempt starts from it on a fresh document (_reparse re-initialises)
        try:
            return _YamlDoc(original, self.path)._apply_ops(ops, after, before)
        except _Unfaithful:
            pass
        # one op changed other keys (a merge key or an alias supplies the key too): keep the ops that apply on
        # their own and say which could not, instead of refusing the whole file (issue 27, fuzz round 2)
        good = []
        for o in ops:
            try:
                _YamlDoc(original, self.path)._apply_ops([o], after, before)
                good.append(o)
            except _Unfaithful:
                self.skipped.append(f"`{'.'.join(o.path)}`: the fix would change other keys too (a merge key or "
                                    "an alias supplies it as well); not fixed, edit it by hand")
        if not good:
            return self.text, []
        try:
            return _YamlDoc(original, self.path)._apply_ops(good, after, before)
        except _Unfaithful:
            raise InputError("could not apply the fix without changing other keys; edit the file by hand",
                             file=self.path) from None

    def _apply_ops(self, ops: list[Op], after: Mapping[str, str], before: Any) -> tuple[str, list[str]]:
        """Apply `ops` to this document's lines; _Unfaithful when the result differs from `before` + `ops`."""
        # edit bottom-up so earlier line numbers stay valid; inserts (no line) go last, in order
        located = [(self._anchor_line(o), i, o) for i, o in enumerate(ops)]
        for _line, _i, o in sorted((t for t in located if t[0] is not None), key=lambda t: (-t[0], t[1])):
            self._apply_existing(o)
        for _line, _i, o in (t for t in located if t[0] is None):
            self._reparse()
            self._insert(o, after)
        new_text = "".join(self.lines)
        got = self._typed(new_text) if new_text.strip() else {}
        want = expected_data(before, ops)
        if not same_data(got, want):
            raise _Unfaithful()
        return new_text, [".".join(o.path if o.action != "rename" else o.path[:-1] + (o.new_name,)) for o in ops]

    def _anchor_line(self, o: Op) -> int | None:
        if not self._exists(o.path):
            return None
        parent = self._node(o.path[:-1]) if len(o.path) > 1 else self.root
        return parent.lc.key(o.path[-1])[0]

    def _key_span(self, parent, key: str) -> tuple[int, int, int]:
        """(first line, last line + 1, key column) of `key`'s own lines: its line and its value's continuation."""
        line, col = parent.lc.key(key)
        end = line + 1
        probe = end
        while probe < len(self.lines):
            s = self.lines[probe]
            stripped = s.strip()
            indent = len(s) - len(s.lstrip(" "))
            if not stripped or stripped.startswith("#"):
                probe += 1
                continue
            if indent > col or (indent == col and stripped.startswith("-") and stripped[1:2] in ("", " ")):
                end = probe = probe + 1
                continue
            break
        return line, end, col

    def _value_text(self, line_idx: int, start_col: int) -> tuple[int, int]:
        """Column span [start, end) of the scalar/flow value that starts at (line, col) on one line."""
        s = self.lines[line_idx].rstrip("\r\n")
        i = start_col
        if i >= len(s):
            return i, i
        c = s[i]
        if c in "'\"":
            j = i + 1
            while j < len(s):
                if c == "'" and s[j] == "'":
                    if j + 1 < len(s) and s[j + 1] == "'":
                        j += 2
                        continue
                    return i, j + 1
                if c == '"' and s[j] == "\\":
                    j += 2
                    continue
                if c == '"' and s[j] == '"':
                    return i, j + 1
                j += 1
            return i, len(s)
        if c in "[{":
            depth, j, q = 0, i, None
            while j < len(s):
                ch = s[j]
                if q:
                    if ch == q:
                        q = None
                elif ch in "'\"":
                    q = ch
                elif ch in "[{":
                    depth += 1
                elif ch in "]}":
                    depth -= 1
                    if depth == 0:
                        return i, j + 1
                j += 1
            return i, len(s)
        m = re.search(r"\s#", s[i:])
        end = i + m.start() if m else len(s)
        return i, len(s[:end].rstrip())

    def _colon_after_key(self, line_idx: int, col: int) -> int:
        s = self.lines[line_idx]
        if s[col:col + 1] in "'\"":
            q = s[col]
            j = s.index(q, col + 1) + 1
        else:
            m = re.match(r"[^:]*?:(?=\s|$)", s[col:])
            j = col + (m.end() - 1 if m else len(s[col:]))
        while j < len(s) and s[j] != ":":
            j += 1
        return j

    def _apply_existing(self, o: Op) -> None:
        parent = self._node(o.path[:-1]) if len(o.path) > 1 else self.root
        key = o.path[-1]
        first, end, col = self._key_span(parent, key)
        if o.action == "delete":
            del self.lines[first:end]
            return
        colon = self._colon_after_key(first, col)
        line = self.lines[first]
        eol = line[len(line.rstrip("\r\n")):] or ""
        body = line.rstrip("\r\n")
        multi = end - first > 1
        old = parent[key]
        vstart = colon + 1
        while vstart < len(body) and body[vstart] in " \t":
            vstart += 1
        if o.action == "rename" and _same_value(old, o.value):
            new_body = body   # a rename moves the value as the user wrote it (1.0e-4 stays 1.0e-4)
        elif o.action == "rename" and not multi and vstart < len(body) and body[vstart] not in "#|>&*!":
            # a new key with a new value replaces the old line: the old line's trailing comment spoke of the
            # deleted key and its value, so it goes with them instead of landing on the new key
            s, _e = self._value_text(first, vstart)
            new_body = body[:s].rstrip() + " " + yaml_scalar(o.value)
        elif multi or vstart >= len(body) or body[vstart] in "#|>&*!":
            # a block value, an anchor/tag, or nothing: the new value goes right after the colon, the trailing
            # comment of the key line stays, the continuation lines go
            m = re.search(r"(?:^|\s)(#.*)$", body[colon + 1:])
            comment = f" {m.group(1)}" if m else ""
            anchor = re.match(r"&[^\s,\[\]{}]+", body[vstart:])   # an anchor no alias uses: it stays
            new_body = (body[:colon + 1] + " " + (anchor.group(0) + " " if anchor and not multi else "")
                        + yaml_scalar(o.value) + comment)
            if multi:
                del self.lines[first + 1:end]
        else:
            s, e = self._value_text(first, vstart)
            quote = getattr(old, "style", None) if isinstance(old, str) else None
            quote = quote if quote in ("'", '"') and isinstance(o.value, str) else None
            new_body = body[:s] + yaml_scalar(o.value, quote) + body[e:]
        if o.action == "rename":
            new_body = new_body[:col] + yaml_scalar(o.new_name) + new_body[colon:]
        self.lines[first] = new_body + (eol or (self.nl if first < len(self.lines) - 1 else ""))

    def _insert(self, o: Op, after: Mapping[str, str]) -> None:
        # find the deepest existing mapping on the path
        parent_path: tuple[str, ...] = ()
        for k in o.path[:-1]:
            nxt = self._node(parent_path + (k,))
            if not isinstance(nxt, dict):
                if nxt is not None:
                    raise InputError(f"cannot set {'.'.join(o.path)}: {'.'.join(parent_path + (k,))} is not a "
                                     f"mapping", file=self.path)
                break
            parent_path += (k,)
        parent = self._node(parent_path) if parent_path else self.root
        rest = o.path[len(parent_path):]
        # indentation: siblings' column, else parent column + 2 (keys a merge key brings in have no line here)
        own = [k for k in parent if getattr(parent, "_ok", None) is None or k in parent._ok]
        if own:
            col = parent.lc.key(own[0])[1]
        else:
            col = 0 if not parent_path else self._col_of(parent_path) + 2
        new_lines = []
        for depth, k in enumerate(rest):
            pad = " " * (col + 2 * depth)
            if depth < len(rest) - 1:
                new_lines.append(f"{pad}{yaml_scalar(k)}:{self.nl}")
            else:
                new_lines.append(f"{pad}{yaml_scalar(k)}: {yaml_scalar(o.value)}{self.nl}")
        sibling = after.get(".".join(o.path)) or after.get(o.path[-1])
        if sibling is not None and sibling in own and len(rest) == 1:
            _first, at, _c = self._key_span(parent, sibling)
        elif own:  # right after the last key's own lines, before any trailing comment block
            _first, at, _c = self._key_span(parent, own[-1])
        else:
            at = self._line_of(parent_path) + 1 if parent_path else len(self.lines)
            if parent_path:  # `parent: {}` or `parent:` -> cannot append children under a flow/empty value
                raise InputError(f"cannot add {'.'.join(o.path)} under an empty {'.'.join(parent_path)}",
                                 file=self.path)
        if at > 0 and not self.lines[at - 1].endswith(("\n", "\r")):
            self.lines[at - 1] += self.nl
        self.lines[at:at] = new_lines

    def _reparse(self) -> None:
        """Re-read the edited lines so that key positions are current again."""
        self.__init__("".join(self.lines), self.path)

    def _col_of(self, path: tuple[str, ...]) -> int:
        parent = self._node(path[:-1]) if len(path) > 1 else self.root
        return parent.lc.key(path[-1])[1]

    def _line_of(self, path: tuple[str, ...]) -> int:
        parent = self._node(path[:-1]) if len(path) > 1 else self.root
        return parent.lc.key(path[-1])[0]


def _unified(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=path, tofile=path))


def _same_value(old: Any, new: Any) -> bool:
    """True when a YAML scalar already holds `new` (bool is not a number here: ``true`` is not ``1``)."""
    if isinstance(old, (dict, list)) or isinstance(new, (dict, list)):
        return False
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool) and old == new
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        return float(old) == float(new)
    return isinstance(old, str) and isinstance(new, str) and str(old) == new
