"""The JSON editor of `--fix` (a DeepSpeed config, an accelerate JSON): strict JSON with the character span of every
object member, edited in place so that the rest of the text (indentation, key order, other members) stays as
written; a key written twice is edited where json.load reads it (the last occurrence). fixes/edit.py `render_edits`
chooses it by file kind. Split from fixes/edit.py at the 800-line cap (issue #22).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from finetune_doctor.errors import InputError
from finetune_doctor.fixes.plan import Op, expected_data, is_noop, lookup_path, pair_renames, same_data


_NUM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WS = re.compile(r"\s*")


@dataclass
class _Member:
    """One member of a JSON object and the character span of its key and value."""
    key: str
    key_start: int
    value_start: int
    value_end: int
    value: Any


@dataclass
class _Obj:
    """A JSON object's character span and its members."""
    start: int          # index of '{'
    end: int            # index after '}'
    members: list[_Member]


class JsonDoc:
    """Strict JSON with the character span of every object member (the json module keeps no positions)."""

    def __init__(self, text: str, path: str):
        self.text = text
        self.path = path
        try:
            self.data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"malformed JSON: {err.msg}", file=path, line=err.lineno) from None
        if not isinstance(self.data, dict):
            raise InputError("top level must be an object to edit keys", file=path, line=1)
        self.objects: dict[tuple[str, ...], _Obj] = {}
        i = _WS.match(text, 0).end()
        self._value(i, ())
        self.unit, self.tabs = self._detect_indent()

    def _value(self, i: int, path: tuple[str, ...]) -> tuple[Any, int]:
        c = self.text[i]
        if c == "{":
            members: list[_Member] = []
            j = _WS.match(self.text, i + 1).end()
            out: dict[str, Any] = {}
            if self.text[j] == "}":
                self.objects[path] = _Obj(i, j + 1, members)
                return out, j + 1
            while True:
                key, k_end = json.decoder.scanstring(self.text, j + 1)
                colon = _WS.match(self.text, k_end).end()
                vstart = _WS.match(self.text, colon + 1).end()
                val, vend = self._value(vstart, path + (key,))
                members.append(_Member(key, j, vstart, vend, val))
                out[key] = val
                j = _WS.match(self.text, vend).end()
                if self.text[j] == ",":
                    j = _WS.match(self.text, j + 1).end()
                    continue
                self.objects[path] = _Obj(i, j + 1, members)
                return out, j + 1
        if c == "[":
            j = _WS.match(self.text, i + 1).end()
            items = []
            if self.text[j] == "]":
                return items, j + 1
            while True:
                val, j = self._value(j, path + ("[]",))
                items.append(val)
                j = _WS.match(self.text, j).end()
                if self.text[j] == ",":
                    j = _WS.match(self.text, j + 1).end()
                    continue
                return items, j + 1
        if c == '"':
            s, end = json.decoder.scanstring(self.text, i + 1)
            return s, end
        # Python's json (which DeepSpeed and HF read the file with) also takes NaN, Infinity and -Infinity
        for lit, val in (("true", True), ("false", False), ("null", None), ("NaN", float("nan")),
                         ("Infinity", float("inf")), ("-Infinity", float("-inf"))):
            if self.text.startswith(lit, i):
                return val, i + len(lit)
        m = _NUM.match(self.text, i)
        if m is None:
            line = self.text.count("\n", 0, i) + 1
            raise InputError(f"cannot edit: unexpected {self.text[i:i + 12]!r} where a JSON value belongs",
                             file=self.path, line=line)
        return json.loads(m.group(0)), m.end()

    def _detect_indent(self) -> tuple[int, bool]:
        for line in self.text.splitlines()[1:]:
            stripped = line.lstrip(" \t")
            if stripped and len(stripped) < len(line):
                lead = line[: len(line) - len(stripped)]
                return (len(lead), lead.startswith("\t"))
        return 2, False

    def _indent_at(self, pos: int) -> str:
        line_start = self.text.rfind("\n", 0, pos) + 1
        lead = self.text[line_start:pos]
        return lead[: len(lead) - len(lead.lstrip(" \t"))]

    def _dump(self, v: Any, base: str) -> str:
        unit = "\t" if self.tabs else " " * self.unit
        text = json.dumps(v, indent=unit if isinstance(v, (dict, list)) and v else None, ensure_ascii=False)
        return text.replace("\n", "\n" + base)

    def _exists(self, path: tuple[str, ...]) -> bool:
        obj = self.objects.get(path[:-1])
        return obj is not None and any(m.key == path[-1] for m in obj.members)

    def apply(self, ops: list[Op], after: Mapping[str, str]) -> tuple[str, list[str]]:
        ops = [o for o in pair_renames(ops, self._exists, lambda p: lookup_path(self.data, p)) if not is_noop(o, self.data)]
        if not ops:
            return self.text, []
        text = self.text
        for o in ops:  # one at a time, re-scanning, so spans stay exact
            doc = JsonDoc(text, self.path)
            text = doc._apply_one(o, after)
        got = json.loads(text)
        if not same_data(got, expected_data(self.data, ops)):
            raise InputError("could not apply the fix without changing other keys; edit the file by hand",
                             file=self.path)
        return text, [".".join(o.path if o.action != "rename" else o.path[:-1] + (o.new_name,)) for o in ops]

    def _apply_one(self, o: Op, after: Mapping[str, str]) -> str:
        t = self.text
        obj = self.objects.get(o.path[:-1])
        member = next((m for m in reversed(obj.members) if m.key == o.path[-1]), None) if obj else None  # json.load keeps the last
        if member is not None and o.action in ("set", "rename"):
            base = self._indent_at(member.key_start)
            new_val = self._dump(o.value, base)
            if o.action == "rename":
                key_end = json.decoder.scanstring(t, member.key_start + 1)[1]
                return (t[:member.key_start] + json.dumps(o.new_name, ensure_ascii=False) + t[key_end:member.value_start]
                        + new_val + t[member.value_end:])
            return t[:member.value_start] + new_val + t[member.value_end:]
        if member is not None:  # delete the member with its comma; whole lines when it sits on its own line
            idx = obj.members.index(member)
            if len(obj.members) == 1:
                return t[:obj.start + 1] + t[obj.end - 1:]
            if idx + 1 < len(obj.members):
                nxt = obj.members[idx + 1]
                own_line = t[t.rfind("\n", 0, member.key_start) + 1:member.key_start].strip() == ""
                if own_line and "\n" in t[member.value_end:nxt.key_start]:
                    start = t.rfind("\n", 0, member.key_start) + 1
                    stop = t.rfind("\n", 0, nxt.key_start) + 1
                else:
                    start, stop = member.key_start, nxt.key_start
                return t[:start] + t[stop:]
            prev = obj.members[idx - 1]  # the last member: from the previous value's end (drops the comma)
            return t[:prev.value_end] + t[member.value_end:]
        # insert (the parent chain may need creating)
        parent_path: tuple[str, ...] = ()
        for k in o.path[:-1]:
            if parent_path + (k,) in self.objects:
                parent_path += (k,)
            else:
                break
        if len(parent_path) < len(o.path) - 1 and self._get(parent_path + (o.path[len(parent_path)],)) is not None:
            raise InputError(f"cannot set {'.'.join(o.path)}: {'.'.join(o.path[:len(parent_path) + 1])} is not an "
                             f"object", file=self.path)
        obj = self.objects[parent_path]
        rest = o.path[len(parent_path):]
        value: Any = o.value
        for k in reversed(rest[1:]):
            value = {k: value}
        name = rest[0]
        unit = "\t" if self.tabs else " " * self.unit
        if obj.members:
            anchor = obj.members[-1]
            sib = after.get(".".join(o.path)) or after.get(o.path[-1])
            for m in obj.members:
                if sib == m.key and len(rest) == 1:
                    anchor = m
            base = self._indent_at(anchor.key_start)
            multiline = "\n" in t[obj.start:obj.end]
            sep = ",\n" + base if multiline else ", "
            entry = json.dumps(name, ensure_ascii=False) + ": " + self._dump(value, base)
            return t[:anchor.value_end] + sep + entry + t[anchor.value_end:]
        base = self._indent_at(obj.start)
        entry = json.dumps(name, ensure_ascii=False) + ": " + self._dump(value, base + unit)
        return t[:obj.start + 1] + "\n" + base + unit + entry + "\n" + base + t[obj.end - 1:]

    def _get(self, path: tuple[str, ...]) -> Any:
        cur: Any = self.data
        for k in path:
            if not isinstance(cur, dict) or k not in cur:
                return None
            cur = cur[k]
        return cur
