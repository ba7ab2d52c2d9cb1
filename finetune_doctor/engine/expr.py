"""The safe expression language of rule files: simpleeval over a tree of read-only facts.

Why simpleeval: it parses Python expression syntax with the `ast` module and walks it with a whitelist of
node types, operators and functions, so a rule file can say ``run.zero_stage == 3 and mem.fits == False``
without any ``eval``. Its import costs about 12 ms (measured, issue #2), inside the lint budget.

Facts are exposed as `Facts` objects: attribute access into a dict, where a missing key reads as None. That
lets a condition test ``ds.zero_optimization.offload_param.device == 'cpu'`` without guarding every level.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Iterable, Mapping

from simpleeval import EvalWithCompoundTypes

from finetune_doctor.types import GIB


class Facts:
    """Read-only attribute view of a mapping; missing keys and attributes of None read as None.

    Nested mappings are wrapped on access; lists of mappings become lists of `Facts`.
    """

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[str, Any] | None):
        object.__setattr__(self, "_d", dict(d or {}))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return wrap(self._d.get(name))

    def __getitem__(self, name: str) -> Any:
        return wrap(self._d.get(name))

    def __contains__(self, name: str) -> bool:
        return name in self._d

    def __setattr__(self, name: str, value: Any) -> None:  # pragma: no cover - defensive
        raise AttributeError("facts are read-only")

    def __bool__(self) -> bool:
        return bool(self._d)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Facts) and other._d == self._d

    def __repr__(self) -> str:
        return f"Facts({self._d!r})"

    # No public methods: every attribute name belongs to the facts (a fact may be called `keys` or `get`).


class _Null:
    """Stands for a missing fact: every attribute of it is missing too, and it compares equal to None."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return NULL

    def __getitem__(self, name: Any) -> Any:
        return NULL

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: Any) -> bool:
        return other is None or isinstance(other, _Null)

    def __hash__(self) -> int:
        return hash(None)

    # ordering against a missing fact is never true (a rule about "lr > x" does not fire without an lr)
    def __lt__(self, other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __repr__(self) -> str:
        return "None"

    def __str__(self) -> str:
        return "None"

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


NULL = _Null()


def wrap(v: Any) -> Any:
    if v is None:
        return NULL
    if isinstance(v, Facts):
        return v
    if isinstance(v, Mapping):
        return Facts(v)
    if isinstance(v, (list, tuple)):
        return [wrap(x) for x in v]
    return v


def unwrap(v: Any) -> Any:
    if isinstance(v, _Null):
        return None
    if isinstance(v, Facts):
        return {k: unwrap(x) for k, x in object.__getattribute__(v, '_d').items()}
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def _gib(x: Any) -> str:
    return "?" if x is None or isinstance(x, _Null) else f"{float(x):.2f} GiB"


def _sci(x: Any) -> str:
    return "?" if x is None or isinstance(x, _Null) else f"{float(x):g}"


FUNCTIONS: dict[str, Any] = {
    "len": len, "min": min, "max": max, "abs": abs, "round": round, "int": int, "float": float, "str": str,
    "bool": bool, "any": any, "all": all, "sum": sum, "sorted": sorted,
    "sqrt": math.sqrt, "log": math.log, "isnan": lambda x: isinstance(x, float) and math.isnan(x),
    "gib": _gib, "sci": _sci, "GIB": GIB,
    "join": lambda xs, sep=", ": sep.join(str(x) for x in xs),
    "lower": lambda s: str(s).lower(),
}


def _norm_null(x: Any) -> Any:
    return None if isinstance(x, _Null) else x


def _operators() -> dict:
    import ast

    from simpleeval import DEFAULT_OPERATORS

    ops = dict(DEFAULT_OPERATORS)
    # a missing fact is NULL (so that `a.b.c` never raises); `is None` must still see it as None
    ops[ast.Is] = lambda a, b: _norm_null(a) is _norm_null(b)
    ops[ast.IsNot] = lambda a, b: _norm_null(a) is not _norm_null(b)
    # An ordering between values of the wrong types (a quoted "5e-6" against a float) is not true: the value's
    # type is reported by invalid-value, and one mistyped key must not stop every other rule.
    for node, fn in ((ast.Lt, operator.lt), (ast.Gt, operator.gt), (ast.LtE, operator.le), (ast.GtE, operator.ge)):
        ops[node] = _ordering(fn)
    return ops


def _ordering(fn: Any) -> Any:
    def compare(a: Any, b: Any) -> bool:
        try:
            return fn(a, b)
        except TypeError:
            return False

    return compare


_OPS = _operators()


class Evaluator:
    """Evaluates rule expressions and message templates over a fixed set of fact namespaces.

    Raises `ExprError` when an expression is malformed or fails (the rule loader checks syntax up front,
    so a failure at evaluation time means the facts had an unexpected shape).
    """

    def __init__(self, names: Mapping[str, Any]):
        self._names = {k: wrap(v) for k, v in names.items()}
        self._se = EvalWithCompoundTypes(operators=_OPS, names=self._names, functions=FUNCTIONS)

    def with_names(self, **extra: Any) -> "Evaluator":
        ev = Evaluator.__new__(Evaluator)
        ev._names = {**self._names, **{k: wrap(v) for k, v in extra.items()}}
        ev._se = EvalWithCompoundTypes(operators=_OPS, names=ev._names, functions=FUNCTIONS)
        return ev

    def eval(self, expr: str) -> Any:
        try:
            return self._se.eval(expr)
        except Exception as err:  # simpleeval raises many types; all mean the same to a rule
            raise ExprError(f"{expr!r}: {err}") from err

    def truth(self, expr: str | None) -> bool:
        if expr is None or expr == "":
            return True
        v = self.eval(expr)
        return bool(v) and not isinstance(v, _Null)

    def render(self, template: str) -> str:
        """Fill ``{expr}`` and ``{expr:spec}`` placeholders; ``{{``/``}}`` are literal braces."""
        out = []
        for literal, expr, spec in split_template(template):
            out.append(literal)
            if expr is None:
                continue
            v = unwrap(self.eval(expr))
            if spec:
                try:
                    out.append(format(v, spec))
                    continue
                except (TypeError, ValueError):
                    pass
            if isinstance(v, float):
                out.append(f"{v:.4g}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5) else f"{v:.2f}".rstrip("0").rstrip("."))
            elif isinstance(v, list):
                out.append(", ".join(str(x) for x in v))
            else:
                out.append(str(v))
        return "".join(out)


def split_template(template: str) -> list[tuple[str, str | None, str | None]]:
    """Split a message template into (literal, expression, format spec) pieces.

    A placeholder runs from ``{`` to its matching ``}``; quotes, brackets and nested braces inside it are
    respected, and the format spec starts at the last ``:`` outside them (so ``'a: b'`` in a string is safe).
    Raises ExprError on an unclosed placeholder.
    """
    pieces: list[tuple[str, str | None, str | None]] = []
    lit: list[str] = []
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if ch == "{" and template.startswith("{{", i):
            lit.append("{")
            i += 2
            continue
        if ch == "}" and template.startswith("}}", i):
            lit.append("}")
            i += 2
            continue
        if ch != "{":
            lit.append(ch)
            i += 1
            continue
        depth, j, quote, colon = 0, i + 1, None, None
        while j < n:
            c = template[j]
            if quote:
                if c == "\\":
                    j += 2
                    continue
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif c in "([{":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == "}":
                if depth == 0:
                    break
                depth -= 1
            elif c == ":" and depth == 0:
                colon = j
            j += 1
        if j >= n:
            raise ExprError(f"unclosed placeholder in {template!r}")
        body = template[i + 1:j]
        if colon is not None:
            expr, spec = template[i + 1:colon], template[colon + 1:j]
        else:
            expr, spec = body, None
        pieces.append(("".join(lit), expr.strip(), spec))
        lit = []
        i = j + 1
    pieces.append(("".join(lit), None, None))
    return pieces


class ExprError(Exception):
    """A rule expression could not be parsed or evaluated."""


def check_syntax(expr: str) -> str | None:
    """Return an error message if `expr` is not a valid expression, else None (no evaluation happens)."""
    import ast

    try:
        ast.parse(expr, mode="eval")
    except SyntaxError as err:
        return f"invalid expression {expr!r}: {err.msg}"
    return None


def template_exprs(template: str) -> Iterable[str]:
    for _, expr, _ in split_template(template):
        if expr is not None:
            yield expr
