"""The safe expression language of rule files: simpleeval's language over a tree of read-only facts, compiled.

Why simpleeval: it defines a whitelist of Python expression syntax (node types, operators with length-capped
``+``/``*``/``**``, no ``_`` names or attributes, no ``format``), so a rule file can say
``run.zero_stage == 3 and mem.fits == False`` and nothing more. Walking the tree with simpleeval on every evaluation
cost most of `doctor lint`'s judge time (issue #22), so each expression is checked against that same whitelist once,
its operators are bound to the same operator functions, and the result is compiled to a code object evaluated with
no builtins (`Expr`). Not carried over: simpleeval's cap on comprehension length (facts are finite lists read from
the user's files) and its check that no result is a module (no module is reachable from facts or `FUNCTIONS`).

Facts are exposed as `Facts` objects: attribute access into a dict, where a missing key reads as None. That
lets a condition test ``ds.zero_optimization.offload_param.device == 'cpu'`` without guarding every level.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping   # not typing.Mapping, whose isinstance is slower: `wrap` runs ~70 times a file
from functools import lru_cache
from typing import Any

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

    def __iter__(self) -> Any:
        # without it, `for k in facts` falls back to __getitem__(0), (1), ... which never raises: a rule looping over
        # a mapping fact would never end. Iterating yields the keys, as `in` tests them.
        return iter(tuple(self._d))

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

    def __iter__(self) -> Any:
        return iter(())   # a missing fact holds nothing to loop over (and __getitem__ alone would loop forever)

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

    # Arithmetic with a missing fact is missing too, as in SQL: `mem.weights_gib > 0.4 * hw.capacity_gib` without a
    # known card is NULL > NULL, never true, instead of a TypeError that skipped the whole rule (trial 10 case 06:
    # FD602 failed with "unsupported operand type(s) for *: 'float' and '_Null'"). A rule cannot state a number it
    # does not have; the conditions that must hold without it say so with `is None`.
    def _missing(self, *_: Any) -> "_Null":
        return NULL

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _missing
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _missing
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _missing


NULL = _Null()


_PLAIN = frozenset({str, int, float, bool})
_set_d = Facts._d.__set__   # the slot's setter: a view made without `__init__`'s copy


def wrap(v: Any) -> Any:
    """A fact value as rule expressions see it: None as `NULL`, a mapping as `Facts`, a list or tuple as a list of
    wrapped values, anything else as is. The exact types facts are made of are tested first (`isinstance` against
    the `Mapping` ABC costs ~1 us, and `doctor lint` wraps ~100 values a file, issue #22); a nested dict is viewed,
    not copied: it is read during one evaluation and facts are not changed while rules run."""
    t = type(v)
    if t in _PLAIN:
        return v
    if v is None:
        return NULL
    if t is dict:
        f = object.__new__(Facts)
        _set_d(f, v)
        return f
    if t is list or t is tuple:
        return [wrap(x) for x in v]
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


def _of_known(fn: Any) -> Any:
    """`fn` of a missing fact is missing (as `_Null`'s arithmetic is): ``round(mem.x, 1)`` without mem.x."""
    def call(x: Any = None, *rest: Any) -> Any:
        return NULL if x is None or isinstance(x, _Null) else fn(x, *rest)

    return call


FUNCTIONS: dict[str, Any] = {
    "len": len, "min": min, "max": max, "abs": _of_known(abs), "round": _of_known(round), "int": _of_known(int),
    "float": _of_known(float), "str": str, "bool": bool, "any": any, "all": all, "sum": sum, "sorted": sorted,
    "sqrt": _of_known(math.sqrt), "log": _of_known(math.log), "isnan": lambda x: isinstance(x, float) and math.isnan(x),
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
        # each namespace copied once (`Facts.__init__`): the evaluator keeps the facts as they were when it was made
        self._names = {k: Facts(v) if type(v) is dict else wrap(v) for k, v in names.items()}
        # a namespace the command does not assemble (ev outside postmortem, gpus outside `doctor gpus`) reads as
        # None, as a missing fact does: a rule shared by commands (image-tokens-exceed-cutoff) may name it
        self._scope = {**_SCOPE, "ev": wrap(None), "gpus": wrap(None), **self._names}

    def with_names(self, **extra: Any) -> "Evaluator":
        ev = Evaluator.__new__(Evaluator)
        more = {k: wrap(v) for k, v in extra.items()}
        ev._names = {**self._names, **more}
        ev._scope = {**self._scope, **more}
        return ev

    def eval(self, expr: "str | Expr") -> Any:
        """The value of `expr`: a compiled `Expr` (a rule's, compiled once per process) or source text (compiled
        once per process through `compile_expr`'s cache). Raises ExprError when it fails."""
        if not isinstance(expr, Expr):
            expr = compile_expr(expr)
        try:
            return eval(expr.code, self._scope)   # noqa: S307 - a code object checked and lowered by `lower`
        except ExprError:
            raise
        except Exception as err:  # a rule's expression failing on facts of an unexpected shape
            raise ExprError(f"{expr.source!r}: {err}") from err

    def truth(self, expr: "str | Expr | None") -> bool:
        if expr is None or (type(expr) is str and expr == ""):   # an Expr is never "" (Expr.__eq__ is slow)
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
    """One rule expression, parsed and compiled at most once per process.

    `node` is the body of ``ast.parse(source, mode="eval")``; `code` the code object `lower` makes of it: the tree is
    first checked against simpleeval's whitelist (its node types, its operators, no name or attribute starting with
    ``_``, none of its forbidden methods), then every operator becomes a call of the same operator function simpleeval
    would call (`_OPS`: its length-capped ``+``/``*``/``**``, our NULL-aware ``is`` and type-safe orderings). So a
    rule means what it meant under simpleeval's tree walk, at CPython's speed. Both are made on first use, not at load:
    a cached rule pack loads in ~1 ms, and a rule `doctor lint` never evaluates costs nothing. Raises ExprError from
    `node`/`code` on a syntax error or a construct outside the whitelist; the loader touches `node` of every
    expression of a pack it has not validated before.
    """

    __slots__ = ("source", "_node", "_code", "_guards")

    def __init__(self, source: str):
        self.source = source.strip()
        self._node: ast.AST | None = None
        self._code: Any = None
        self._guards: tuple[Guard, ...] | None = None

    @property
    def node(self) -> ast.AST:
        if self._node is None:
            try:
                tree = ast.parse(self.source, mode="eval")
            except SyntaxError as err:
                raise ExprError(f"invalid expression {self.source!r}: {err.msg}") from None
            _check_allowed(tree, self.source)
            self._node = tree.body
            # the guards of both uses from this tree, so that no expression is parsed a second time for them
            # (kept in memory; only the guards a rule asks for are written to the cache: `_guards_of`)
            for prefix, make in ((_GUARD_KEY, _leading), (_EACH_KEY, _each)):
                _FROM_TREE.setdefault(prefix + self.source, make(tree.body))
        return self._node

    @property
    def code(self) -> Any:
        if self._code is None:
            code = _cached_code(self.source)
            if code is None:
                # lowering rewrites the checked tree in place (a deep copy costs more than the parse); should
                # anything ask for `node` afterwards, it is parsed again
                code = _CODE_NEW[self.source] = lower(self.node, self.source)
                self._node = None
            self._code = code
        return self._code

    @property
    def guards(self) -> tuple["Guard", ...]:
        """The tests a rule's `engine/evaluate.py` may apply to the raw facts before evaluating this expression as
        a condition (`leading_guards`), kept with the code objects between processes."""
        if self._guards is None:
            self._guards = _guards_of(_GUARD_KEY, self.source, leading_guards)
        return self._guards

    @property
    def each_guards(self) -> tuple["Guard", ...]:
        """The same for this expression as a rule's ``for_each`` (`each_guards`)."""
        return _guards_of(_EACH_KEY, self.source, each_guards)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Expr) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"


Guard = tuple[str, tuple[str, ...], Any]
"""(test, fact path, constant): ``("truthy", ("cfg", "galore_target"), None)`` for a conjunct ``cfg.galore_target``;
"not" for ``not PATH``, "none"/"not-none" for ``PATH is None``/``is not None``, "eq"/"ne" for ``PATH == CONSTANT``/
``!=``, "in"/"not-in" for ``PATH in (CONSTANT, ...)``/``not in``; "or" (path ``()``) for ``G1 or G2 ...`` of such
tests, its operands' guards as the constant; "each" for a ``for_each`` (`each_guards`)."""
_GUARD_KEY = "\x00guards "   # the guards' key in the code cache: no expression source starts with NUL
_EACH_KEY = "\x00each "
_GUARDS_SEEN: dict[str, tuple[Guard, ...]] = {}   # asked for in this process
_FROM_TREE: dict[str, tuple[Guard, ...]] = {}     # made from a tree `Expr.node` parsed anyway


def _guards_of(prefix: str, source: str, make: Any) -> tuple[Guard, ...]:
    key = prefix + source
    got = _GUARDS_SEEN.get(key)
    if got is None:
        got = _cached_code(key)
        if got is None:
            got = _FROM_TREE.get(key)
            _CODE_NEW[key] = got = make(source) if got is None else got
        _GUARDS_SEEN[key] = got
    return got


def each_guards(source: str) -> tuple[Guard, ...]:
    """``(("each", PATH, None),)`` for a rule's ``for_each`` that is one fact path, or one list comprehension with
    a single ``for`` over one fact path (``[k for k in lint.keys if k.kind == 'unknown']``): when that path's value
    is None or an empty list, there is nothing to iterate, so the rule has no item to judge and cannot fire (nor
    raise); () for anything else."""
    try:
        body = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    return _each(body)


def _each(body: ast.AST) -> tuple[Guard, ...]:
    if isinstance(body, ast.ListComp) and len(body.generators) == 1 and not body.generators[0].is_async:
        body = body.generators[0].iter
    path = _path(body)
    return (("each", path, None),) if path is not None else ()


def leading_guards(source: str) -> tuple[Guard, ...]:
    """The conjuncts at the start of a condition ``A and B and ...`` that test one fact path (names joined by dots,
    no call, no subscript) against constants, in order, up to the first conjunct that does anything else; () for
    a source that does not parse (evaluating it reports the error, as before). When one of them is false on the
    facts the whole condition is false (``and`` stops at the first false operand), and the conjuncts before it,
    being guards too, cannot raise: so a rule can be ruled out from the facts' dicts without evaluating its
    condition (ruff's and sqlfluff's "does the rule apply to this file" prefilter; issue #22: of ~76 rules
    evaluated per file in a lint of LLaMA-Factory's examples, most test a key the file does not set)."""
    try:
        body = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    return _leading(body)


def _leading(body: ast.AST) -> tuple[Guard, ...]:
    conjuncts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else [body]
    out: list[Guard] = []
    for c in conjuncts:
        g = _guard(c)
        if g is None:
            break
        out.append(g)
    return tuple(out)


def _path(node: ast.AST) -> tuple[str, ...] | None:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or not names or any(n.startswith("_") for n in (node.id, *names)):
        return None   # a name the whitelist refuses: evaluating it reports that
    return (node.id, *reversed(names))


def _guard(node: ast.AST) -> Guard | None:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        operands = tuple(_guard(v) for v in node.values)
        return None if any(g is None for g in operands) else ("or", (), operands)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        path = _path(node.operand)
        return None if path is None else ("not", path, None)
    path = _path(node)
    if path is not None:
        return ("truthy", path, None)
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    path, op, right = _path(node.left), node.ops[0], node.comparators[0]
    if path is None:
        return None
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
        return ("none" if isinstance(op, ast.Is) else "not-none", path, None)
    if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant) and type(right.value) in _PLAIN:
        return ("eq" if isinstance(op, ast.Eq) else "ne", path, right.value)
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List)) and right.elts and all(
            isinstance(e, ast.Constant) and (e.value is None or type(e.value) in _PLAIN) for e in right.elts):
        return ("in" if isinstance(op, ast.In) else "not-in", path, tuple(e.value for e in right.elts))
    return None
    path, op, right = _path(node.left), node.ops[0], node.comparators[0]
    if path is None:
        return None
    if isinstance(op, ast.IsNot) and isinstance(right, ast.Constant) and right.value is None:
        return ("not-none", path, None)
    if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and type(right.value) in _PLAIN:
        return ("eq", path, right.value)
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List)) and right.elts and all(
            isinstance(e, ast.Constant) and (e.value is None or type(e.value) in _PLAIN) for e in right.elts):
        return ("in", path, tuple(e.value for e in right.elts))
    return None


@lru_cache(maxsize=1)
def _allowed_nodes() -> frozenset[type]:
    """simpleeval's evaluable node types, plus the parts of them that are not evaluated on their own."""
    from simpleeval import EvalWithCompoundTypes

    evaluable = set(EvalWithCompoundTypes().nodes) - {ast.Assign, ast.AugAssign, ast.Import, ast.Expr}
    parts = {ast.Expression, ast.Load, ast.Store, ast.comprehension, ast.keyword, ast.And, ast.Or}
    return frozenset(evaluable | parts | set(_OPS))


def _check_allowed(tree: ast.AST, source: str) -> None:
    """Raise ExprError for any construct simpleeval would refuse to evaluate."""
    from simpleeval import DISALLOW_METHODS, DISALLOW_PREFIXES

    allowed = _allowed_nodes()
    for n in ast.walk(tree):
        if type(n) not in allowed:
            raise ExprError(f"{source!r}: {type(n).__name__} is not available in rule expressions")
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name is not None and (name.startswith(tuple(DISALLOW_PREFIXES)) or name in DISALLOW_METHODS):
            raise ExprError(f"{source!r}: the name {name!r} is not available in rule expressions")


class _Lower(ast.NodeTransformer):
    """Every binary operator and comparison becomes a call of its `_OPS` function (named ``_op_<Op>``, a name no
    rule can write: names starting with ``_`` are refused)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        return ast.Call(ast.Name(f"_op_{type(node.op).__name__}", ast.Load()), [node.left, node.right], [])

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1:
            return ast.Call(ast.Name(f"_op_{type(node.ops[0]).__name__}", ast.Load()),
                            [node.left, node.comparators[0]], [])
        fns = ast.Tuple([ast.Name(f"_op_{type(o).__name__}", ast.Load()) for o in node.ops], ast.Load())
        return ast.Call(ast.Name("_op_chain", ast.Load()),
                        [node.left, fns, ast.Tuple(list(node.comparators), ast.Load())], [])


def _chain(left: Any, fns: tuple, rights: tuple) -> Any:
    """``a < b < c`` as simpleeval evaluates it: pairwise, stopping at the first false result."""
    result: Any = True
    for fn, right in zip(fns, rights):
        result = fn(left, right)
        if not result:
            return result
        left = right
    return result


def lower(node: ast.AST, source: str) -> Any:
    """The code object of an expression tree already checked by `_check_allowed` (see `Expr`); rewrites `node`."""
    body = _Lower().visit(node)
    tree = ast.fix_missing_locations(ast.Expression(body))
    return compile(tree, f"<rule expression {source[:60]!r}>", "eval")


# Compiled expressions kept between processes, as CPython keeps compiled modules in __pycache__: parsing, checking
# and lowering the ~50 expressions one `doctor lint` evaluates (and importing simpleeval to check them) cost
# 8-20 ms of a one-file run (issue #22). Only code made by `lower` from a tree `_check_allowed` passed is written;
# the file is keyed by Python's bytecode tag and this module's size and mtime (the whitelist and the lowering live
# here), and by expression source inside. FINETUNE_DOCTOR_NO_CACHE=1 turns it off (fsutil.cache_dir).
_CODE_CACHE: dict[str, Any] | None = None   # source -> code object read from the cache file; None until read
_CODE_NEW: dict[str, Any] = {}              # compiled in this process and not in the file yet
_CODE_CACHE_MAX = 4096                      # entries; past it the file restarts from this process's expressions


def _code_cache_file() -> Any:
    """The cache file's Path, or None when caching is off."""
    import os
    import sys

    from finetune_doctor.fsutil import cache_dir

    base = cache_dir()
    if base is None:
        return None
    try:
        st = os.stat(__file__)
    except OSError:   # run from an archive (zipapp, frozen): no file to key on, so no cache
        return None
    return base / f"exprs-{sys.implementation.cache_tag}-{st.st_size}-{st.st_mtime_ns}.marshal"


def _cached_code(source: str) -> Any:
    """The cached code object of `source`, or None (no cache, not cached, unreadable or foreign file)."""
    global _CODE_CACHE
    if _CODE_CACHE is None:
        _CODE_CACHE = {}
        path = _code_cache_file()
        if path is not None and path.is_file():
            import marshal
            from types import CodeType

            try:
                data = marshal.loads(path.read_bytes())
            except (OSError, ValueError, EOFError, TypeError):
                data = None
            if isinstance(data, dict):
                _CODE_CACHE = {k: v for k, v in data.items() if isinstance(k, str) and (
                    isinstance(v, tuple) if k.startswith("\x00") else isinstance(v, CodeType))}
    return _CODE_CACHE.get(source)


def save_code_cache() -> None:
    """Add the expressions compiled in this process to the cache file; best effort (a read-only or full disk
    leaves the file as it was, never an error). Called by the judge once a command's rules have run."""
    global _CODE_CACHE
    if not _CODE_NEW:
        return
    path = _code_cache_file()
    if path is None:
        return
    import marshal

    from finetune_doctor.errors import InputError
    from finetune_doctor.fsutil import prune_cache, write_bytes

    merged = {**(_CODE_CACHE or {}), **_CODE_NEW}
    if len(merged) > _CODE_CACHE_MAX:
        merged = dict(_CODE_NEW)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        write_bytes(str(path), marshal.dumps(merged))
        if fresh:   # a new file: this module changed or another interpreter runs it
            prune_cache(path, "exprs-")
    except (InputError, OSError, ValueError):
        return
    _CODE_CACHE = merged
    _CODE_NEW.clear()


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


# what a compiled expression sees besides the facts: no builtins, the rule functions, the operator functions
_SCOPE: dict[str, Any] = {"__builtins__": {}, **FUNCTIONS, "_op_chain": _chain,
                          **{f"_op_{t.__name__}": fn for t, fn in _OPS.items()}}
