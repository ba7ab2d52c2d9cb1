"""Check every fact name a rule uses against the declared namespaces (facts/schema.py), before it ever runs.

A rule's expressions are Python expression syntax (engine/expr.py). Each attribute chain rooted at a name —
``run.finetuning_type``, ``mem.per_gpu.weights``, ``item.kind`` — is resolved field by field: the root must be a
namespace, ``item`` (inside a ``for_each`` rule), a comprehension variable or one of the expression language's
functions; each further name must be a declared field unless its parent is declared open. ``item`` and
comprehension variables take the shape of the list they iterate (a field's ``items``), so
``[k for k in lint.keys if k.kind == 'renamed']`` checks ``k.kind`` against ``lint.keys``' items; two such lists
joined with ``+`` give ``item`` the fields of either (`_merge_items`).

What cannot be known statically (subscripts, a value computed by a call, a list built in place) is not checked.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from finetune_doctor.facts.schema import Field, Namespace

_SCALARS = ("bool", "int", "float", "number", "str")


@dataclass(frozen=True)
class NameProblem:
    """A name a rule uses that no namespace declares: the dotted name and why."""

    name: str
    message: str


class _Shape:
    """What a name stands for while checking: a namespace, a field, or the fields of a list's element."""

    __slots__ = ("fields", "open", "type", "items", "values")

    def __init__(self, fields: Mapping[str, Field] | None, open_: bool, type_: str = "dict",
                 items: Mapping[str, Field] | None = None, values: tuple[str, ...] | None = None):
        self.fields, self.open, self.type, self.items, self.values = fields, open_, type_, items, values

    @classmethod
    def of_field(cls, f: Field) -> "_Shape":
        return cls(f.fields, f.open or (f.fields is None and f.type in ("dict", "any")), f.type, f.items, f.values)

    @classmethod
    def of_items(cls, items: Mapping[str, Field] | None) -> "_Shape | None":
        return None if items is None else cls(items, False)


def _merge_items(a: Mapping[str, Field], b: Mapping[str, Field]) -> dict[str, Field]:
    """The element fields of a list joined from lists with elements `a` and `b`: every field of either; a field of
    both lists every value either declares (no values where one of them declares none)."""
    out = dict(a)
    for name, f in b.items():
        g = out.get(name)
        if g is None:
            out[name] = f
        elif g.values != f.values:
            out[name] = replace(g, values=None if g.values is None or f.values is None
                                else tuple(dict.fromkeys((*g.values, *f.values))))
    return out


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """(root name, attribute names) of ``a.b.c``; None when the chain is not rooted at a plain name."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, list(reversed(attrs))
    return None


class _Checker:
    def __init__(self, namespaces: Mapping[str, Namespace], functions: Iterable[str]):
        self.ns = namespaces
        self.functions = set(functions) | {"True", "False", "None"}
        self.problems: list[NameProblem] = []

    def shape_of_root(self, name: str, scope: Mapping[str, _Shape | None]) -> tuple[bool, _Shape | None]:
        """(known, shape) of a root name; shape None means "known but not checkable"."""
        if name in scope:
            return True, scope[name]
        if name in self.ns:
            n = self.ns[name]
            return True, _Shape(n.fields, n.open)
        if name in self.functions:
            return True, None
        return False, None

    def resolve(self, root: str, attrs: list[str], scope: Mapping[str, _Shape | None]) -> _Shape | None:
        known, shape = self.shape_of_root(root, scope)
        if not known:
            self.problems.append(NameProblem(root, f"unknown name {root!r} (namespaces: {', '.join(self.ns)})"))
            return None
        path = root
        for a in attrs:
            if shape is None:
                return None
            if shape.type in _SCALARS:
                self.problems.append(NameProblem(f"{path}.{a}", f"{path} is a {shape.type}: it has no field {a!r}"))
                return None
            if shape.fields is not None and a in shape.fields:
                shape = _Shape.of_field(shape.fields[a])
            elif shape.open:
                shape = None
            else:
                near = _near(a, list(shape.fields or ()))
                hint = f" (did you mean {path}.{near}?)" if near else ""
                self.problems.append(NameProblem(f"{path}.{a}", f"{path} has no field {a!r}{hint}"))
                return None
            path = f"{path}.{a}"
        return shape

    def shape_of(self, node: ast.AST, scope: Mapping[str, _Shape | None]) -> _Shape | None:
        """The shape of an expression's value where it can be known (a chain or a filtered comprehension)."""
        ch = _chain(node)
        if ch is not None:
            return self.resolve(*ch, scope) if ch[1] or ch[0] in scope or ch[0] in self.ns else None
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            gen = node.generators[0]
            if isinstance(gen.target, ast.Name) and isinstance(node.elt, ast.Name) and node.elt.id == gen.target.id:
                src = self.shape_of(gen.iter, scope)
                return None if src is None else _Shape(src.items, False, "list", src.items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            # two lists joined (``lint.keys`` items and ``ev``'s items of the same rule): the items of either
            left, right = self.shape_of(node.left, scope), self.shape_of(node.right, scope)
            if left is not None and right is not None and left.items is not None and right.items is not None:
                both = _merge_items(left.items, right.items)
                return _Shape(both, False, "list", both)
        return None

    def visit(self, node: ast.AST, scope: Mapping[str, _Shape | None]) -> None:
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = dict(scope)
            for gen in node.generators:
                self.visit(gen.iter, inner)
                src = self.shape_of(gen.iter, inner)
                for t in ast.walk(gen.target):
                    if isinstance(t, ast.Name):
                        inner[t.id] = _Shape.of_items(src.items) if (src is not None and isinstance(gen.target, ast.Name)) else None
                for cond in gen.ifs:
                    self.visit(cond, inner)
            for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
                self.visit(part, inner)
            return
        if isinstance(node, ast.Lambda):
            inner = dict(scope)
            for a in node.args.args:
                inner[a.arg] = None
            self.visit(node.body, inner)
            return
        ch = _chain(node)
        if ch is not None:
            self.resolve(*ch, scope)
            return
        if isinstance(node, ast.Call):
            # a method called on a fact (``s.startswith``) is not a field: check only its receiver
            if isinstance(node.func, ast.Attribute):
                self.visit(node.func.value, scope)
            elif not (isinstance(node.func, ast.Name) and node.func.id in self.functions):
                self.visit(node.func, scope)
            for a in node.args:
                self.visit(a, scope)
            for k in node.keywords:
                self.visit(k.value, scope)
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope)


def _near(word: str, choices: list[str]) -> str | None:
    import difflib

    hit = difflib.get_close_matches(word, choices, n=1, cutoff=0.75)
    return hit[0] if hit else None


def check_names(trees: Iterable[ast.AST], namespaces: Mapping[str, Namespace], functions: Iterable[str], *,
                item_from: ast.AST | None = None) -> list[NameProblem]:
    """Every name problem of `trees` (parsed expression bodies: a rule's compiled `Expr.node`s, engine/expr.py).

    `item_from` is the tree of the rule's ``for_each``: ``item`` then has the shape of its elements (unchecked when
    that cannot be known).
    """
    ck = _Checker(namespaces, functions)
    scope = _item_scope(ck, item_from)
    for tree in trees:
        ck.visit(tree, scope)
    seen: dict[str, NameProblem] = {}
    for p in ck.problems:
        seen.setdefault(p.name, p)
    return list(seen.values())


def _item_scope(ck: _Checker, item_from: ast.AST | None) -> dict[str, _Shape | None]:
    if item_from is None:
        return {}
    src = ck.shape_of(item_from, {})
    return {"item": _Shape.of_items(src.items) if src is not None else None}


def declared_values(tree: ast.AST, namespaces: Mapping[str, Namespace], functions: Iterable[str], *,
                    item_from: ast.AST | None = None) -> tuple[str, ...] | None:
    """The values the fact `tree` names can take, as its declaration lists them (`Field.values`); None when it is
    not a plain fact chain or its field declares no values. A message table switching on it may only name these
    (engine/loader.py)."""
    ck = _Checker(namespaces, functions)
    shape = ck.shape_of(tree, _item_scope(ck, item_from))
    return None if shape is None else shape.values
