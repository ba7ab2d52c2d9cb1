"""The safe expression language of rule files: simpleeval over a tree of read-only facts.

Why simpleeval: it parses Python expression syntax with the `ast` module and walks it with a whitelist of
node types, operators and functions, so a rule file can say ``run.zero_stage == 3 and mem.fits == False``
without any ``eval``. Its import costs about 12 ms (measured, issue #2), inside the lint budget.

Facts are exposed as `Facts` objects: attribute access into a dict, where a missing key reads as None. That
lets a condition test ``ds.zero_optimization.offload_param.device == 'cpu'`` without guarding every level.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Mapping

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

    def eval(self, expr: "str | Expr") -> Any:
        """The value of `expr`: a compiled `Expr` (a rule's, parsed once at load) or source text (parsed once per
        process through `compile_expr`'s cache). Raises ExprError when it fails."""
        if not isinstance(expr, Expr):
            expr = compile_expr(expr)
        try:
            return self._se.eval(expr.source, previously_parsed=expr.node)
        except ExprError:
            raise
        except Exception as err:  # simpleeval raises many types; all mean the same to a rule
            raise ExprError(f"{expr.source!r}: {err}") from err

    def truth(self, expr: "str | Expr | None") -> bool:
        if expr is None or expr == "":
            return True
        v = self.eval(expr)
        return bool(v) and not isinstance(v, _Null)

    def render(self, template: "str | Template") -> str:
        """Fill ``{expr}`` and ``{expr:spec}`` placeholders; ``{{``/``}}`` are literal braces."""
        if not isinstance(template, Template):
            template = compile_template(template)
        out = []
        for literal, expr, spec in template.pieces:
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


class Expr:
    """One rule expression, parsed at most once per process.

    `node` is the body of ``ast.parse(source, mode="eval")``, the tree simpleeval walks (``previously_parsed``), so
    the evaluator keeps simpleeval's whitelist of node types, operators and functions while no expression is parsed
    twice. It is parsed on first use, not at load: a cached rule pack loads in ~1 ms, and a rule `doctor lint` never
    evaluates (a memory rule without a model) costs nothing. Raises ExprError from `node` on a syntax error; the
    loader touches `node` of every expression of a pack it has not validated before.
    """

    __slots__ = ("source", "_node")

    def __init__(self, source: str):
        self.source = source.strip()
        self._node: ast.AST | None = None

    @property
    def node(self) -> ast.AST:
        if self._node is None:
            try:
                self._node = ast.parse(self.source, mode="eval").body
            except SyntaxError as err:
                raise ExprError(f"invalid expression {self.source!r}: {err.msg}") from None
        return self._node

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Expr) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


class Template:
    """A message template split once into (literal, `Expr` or None, format spec or None) pieces."""

    __slots__ = ("source", "_pieces")

    def __init__(self, source: str):
        self.source = source
        self._pieces: tuple[tuple[str, Expr | None, str | None], ...] | None = None

    @property
    def pieces(self) -> tuple[tuple[str, "Expr | None", str | None], ...]:
        """Split on first use (raises ExprError on an unclosed placeholder); each placeholder a shared `Expr`."""
        if self._pieces is None:
            self._pieces = tuple((lit, None if e is None else compile_expr(e), spec)
                                 for lit, e, spec in split_template(self.source))
        return self._pieces

    def exprs(self) -> tuple["Expr", ...]:
        return tuple(e for _, e, _ in self.pieces if e is not None)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Template) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def __repr__(self) -> str:
        return f"Template({self.source!r})"


_EXPRS: dict[str, Expr] = {}
_TEMPLATES: dict[str, Template] = {}


def compile_expr(source: str) -> Expr:
    """The one `Expr` of `source` in this process (rules sharing an expression share its tree)."""
    e = _EXPRS.get(source)
    if e is None:
        e = _EXPRS[source] = Expr(source)
    return e


def compile_template(source: str) -> Template:
    """The one `Template` of `source` in this process; raises ExprError on an unclosed placeholder."""
    t = _TEMPLATES.get(source)
    if t is None:
        t = _TEMPLATES[source] = Template(source)
    return t
