"""The plan of an edit set, shared by the YAML and the JSON editor (fixes/edit.py, fixes/jsonedit.py): one op per
key path (the last edit of a key wins), a delete and a set of the same value paired into a rename, ops that change
nothing dropped, and the data the edited file must parse to (`expected_data`), which each editor checks its text
against before it returns. Split from fixes/edit.py at the 800-line cap (issue #22).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from finetune_doctor.types import Edit


@dataclass
class Op:
    """One planned change at a dotted key path: set, delete or rename."""
    path: tuple[str, ...]
    action: str          # set | delete | rename
    value: Any = None
    new_name: str | None = None


def plan_ops(edits: Sequence[Edit]) -> list[Op]:
    ops: dict[tuple[str, ...], Op] = {}
    for e in edits:
        p = tuple(e.key.split("."))
        ops[p] = Op(p, "delete" if e.delete else "set", None if e.delete else e.value)
    return list(ops.values())


MISSING = object()


def is_noop(o: "Op", data: Mapping[str, Any]) -> bool:
    """True when edit `o` would leave `data` (the parsed YAML or JSON) as it is: deleting an absent key, or setting
    a key to the value it already has. Shared by the YAML and JSON documents."""
    cur: Any = data
    for k in o.path[:-1]:
        if not isinstance(cur, Mapping) or k not in cur:
            return o.action == "delete"
        cur = cur[k]
    if not isinstance(cur, Mapping):
        return False
    if o.action == "delete":
        return o.path[-1] not in cur
    if o.action == "set":
        return o.path[-1] in cur and same_data(cur[o.path[-1]], o.value)
    return False


def pair_renames(ops: list[Op], exists, current=lambda path: MISSING) -> list[Op]:
    """An existing key's delete next to a set of a missing sibling is one rename (the new key takes the old line).

    Only adjacent edits pair up: that is how one fix spells a rename (``[set new, delete old]`` or
    ``[delete old, set new]``), while unrelated fixes of the same file stay separate. When a set has a delete on
    both sides, the one whose current value is the value being set wins (a rename moves the value), else the
    following one.
    """
    def can(d: Op | None, st: Op) -> bool:
        return (d is not None and d.action == "delete" and d.path[:-1] == st.path[:-1] and exists(d.path))

    out: list[Op] = []
    taken: set[int] = set()
    for i, o in enumerate(ops):
        if i in taken:
            continue
        if o.action == "set" and not exists(o.path):
            cands = [j for j in (i + 1, i - 1) if 0 <= j < len(ops) and j not in taken and can(ops[j], o)]
            if cands:
                same = [j for j in cands if same_data(current(ops[j].path), o.value)]
                j = (same or cands)[0]
                taken.add(j)
                rename = Op(ops[j].path, "rename", o.value, new_name=o.path[-1])
                if j < i:  # the delete was already emitted: replace it
                    out = [x for x in out if x is not ops[j]]
                out.append(rename)
                continue
        out.append(o)
    return out


def same_data(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(same_data(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True   # NaN (a JSON NaN literal, YAML .nan) is the value it was
    return a == b


def lookup_path(data: Any, path: tuple[str, ...]) -> Any:
    cur = data
    for k in path:
        if not isinstance(cur, Mapping) or k not in cur:
            return MISSING
        cur = cur[k]
    return cur


def expected_data(data: Any, ops: list[Op]) -> Any:
    import copy

    out = copy.deepcopy(data)
    for o in ops:
        parent = out
        for k in o.path[:-1]:
            parent = parent.setdefault(k, {})
        if o.action == "delete":
            parent.pop(o.path[-1], None)
        elif o.action == "rename":
            parent.pop(o.path[-1], None)
            parent[o.new_name] = o.value
        else:
            parent[o.path[-1]] = o.value
    return out
