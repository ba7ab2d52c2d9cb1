"""Fast reading of YAML (and JSON, which is YAML) with the position of every key.

libyaml's composer (PyYAML's C binding, ``yaml.compose(..., Loader=CSafeLoader)``) builds the node tree with
marks about 20x faster than a pure-Python round-trip parser, which keeps `doctor lint` in pre-commit's budget.
Values are then typed from the nodes by the caller's rule (OmegaConf's for LLaMA-Factory YAML); positions are
1-based (line, column) of each key, dotted for nested mappings. Comment- and order-preserving *edits* stay with
ruamel.yaml (fixes/edit.py). When PyYAML with libyaml is absent, `available()` is False and callers use ruamel.
"""

from __future__ import annotations

from typing import Any, Callable

from finetune_doctor.readers.limits import MAX_DEPTH, MAX_CONFIG_NODES, LimitExceeded


class DuplicateKey(Exception):
    """A mapping repeats a key (OmegaConf's loader refuses that too). `line` is 1-based."""

    def __init__(self, key: str, line: int):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line = key, line


class ParseError(Exception):
    """Malformed YAML; `line` is 1-based or None, `problem` says what is wrong."""

    def __init__(self, problem: str, line: int | None):
        super().__init__(problem)
        self.problem, self.line = problem, line


def loader_refusal(text: str) -> str | None:
    """PyYAML's own words, on one line, for why its safe loader refuses `text` (``while scanning a simple key (line
    47, column 1): could not find expected ':' (line 48, column 1)``), or None when it loads the text or PyYAML is not
    installed. LLaMA-Factory reads a config with PyYAML in every catalogued release (``yaml.safe_load`` through
    ``HfArgumentParser.parse_yaml_file`` in 0.8.0-0.9.1, ``yaml.safe_load`` in 0.9.2-0.9.3, ``OmegaConf.load``,
    whose loader subclasses PyYAML's SafeLoader, from 0.9.4: hparams/parser.py ``read_args``), so these are the
    words its traceback ends with."""
    try:
        import yaml
    except ImportError:
        return None
    try:
        yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as err:
        parts = []
        for what, mark in ((err.context, err.context_mark), (err.problem, err.problem_mark)):
            if what:
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                parts.append(" ".join(str(what).split()) + where)
        return ": ".join(parts) or "malformed YAML"
    except yaml.YAMLError as err:
        return " ".join(str(err).split())
    return None


def available() -> bool:
    try:
        import yaml
    except ImportError:
        return False
    return bool(getattr(yaml, "__with_libyaml__", False))


def compose(text: str) -> Any:
    """The libyaml node tree of `text` (None for an empty document); raises ParseError."""
    import yaml

    try:
        return yaml.compose(text, Loader=_loader())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        raise ParseError(" ".join((err.problem or err.context or "malformed YAML").split()),
                         None if mark is None else mark.line + 1) from None
    except yaml.reader.ReaderError as err:
        # libyaml's reader knows only a character offset: turn it into the line users see in an editor
        pos = err.position if isinstance(err.position, int) else 0
        ch = err.character
        code = ord(ch) if isinstance(ch, str) and len(ch) == 1 else ch
        what = f"character U+{code:04X}" if isinstance(code, int) else f"character {ch!r}"
        raise ParseError(f"{what} is not allowed in YAML ({err.reason})", text[:pos].count("\n") + 1) from None
    except yaml.YAMLError as err:
        raise ParseError(" ".join(str(err).split()), None) from None


_LOADER: list[Any] = []


def _loader() -> Any:
    """PyYAML's CSafeLoader with each plain scalar's implicit tag remembered per (text, implicit flags).

    libyaml builds the nodes in C, but asks the Python resolver for the tag of every scalar (PyYAML
    ``resolver.py`` ``BaseResolver.resolve``: the implicit resolvers' regular expressions keyed by the first
    character): ~4,700 calls for LLaMA-Factory's 95 examples, ~5 ms of CPU on a loaded 2-core machine, most of them
    for the same few dozen texts (``true``, ``sft``, ``lora``, ``1.0e-4``; issue #22). For a scalar the answer reads
    nothing but the text, the flags and the loader's resolver tables, and SafeLoader has no path resolvers, so the
    tag is kept per (text, flags); a loader with path resolvers asks the resolver every time."""
    if not _LOADER:
        import yaml

        base, scalar, memo = yaml.CSafeLoader, yaml.ScalarNode, {}

        def resolve(self: Any, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is not scalar or self.yaml_path_resolvers:
                return base.resolve(self, kind, value, implicit)
            key = (value, implicit)
            tag = memo.get(key)
            if tag is None:
                if len(memo) >= 65536:   # bounded: a file of many distinct scalars restarts it
                    memo.clear()
                tag = memo[key] = base.resolve(self, kind, value, implicit)
            return tag

        _LOADER.append(type("_TagMemoLoader", (base,), {"resolve": resolve}))
    return _LOADER[0]


def to_python(node: Any, scalar: Callable[[Any], Any], positions: dict[str, tuple[int, int]] | None = None,
              prefix: str = "", allow_duplicates: bool | list[dict[str, Any]] = False) -> Any:
    """Plain Python values of a node tree; `scalar(node)` types each scalar node; key positions go to `positions`.

    Merge keys (``<<: *base``) merge as PyYAML's SafeLoader merges them (constructor.py ``flatten_mapping``), which is
    what OmegaConf.load does: explicit keys win, and of several merged mappings the first wins. Raises DuplicateKey
    for a repeated explicit key unless `allow_duplicates` (then the last one wins, as json and PyYAML's safe_load
    do; a list given there also receives one dict per repeat: ``{key, line, first_line, same}``, `same` whether
    the repeat has the value already read), and
    limits.LimitExceeded for nesting deeper than MAX_DEPTH, more than MAX_CONFIG_NODES values after alias expansion
    ("billion laughs") or an alias that contains itself.
    """
    return _Walker(scalar, positions, allow_duplicates).value(node, prefix, 0)


class _Walker:
    def __init__(self, scalar: Callable[[Any], Any], positions: dict[str, tuple[int, int]] | None,
                 allow_duplicates: bool | list[dict[str, Any]]):
        self.scalar, self.positions, self.dups = scalar, positions, allow_duplicates
        self.count = 0
        self.open: set[int] = set()   # ids of the collection nodes being converted: an alias back to one loops

    def value(self, node: Any, prefix: str, depth: int) -> Any:
        import yaml

        self.count += 1
        if self.count > MAX_CONFIG_NODES:
            raise LimitExceeded(f"alias expansion exceeds {MAX_CONFIG_NODES} values (a billion-laughs guard)", _line(node))
        if node is None:
            return None
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return self.scalar(node)
        if depth >= MAX_DEPTH:
            raise LimitExceeded(f"nesting exceeds {MAX_DEPTH} levels", _line(node))
        if id(node) in self.open:
            raise LimitExceeded("an alias contains itself (a recursive alias)", _line(node))
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.value(x, prefix, depth + 1) for x in node.value]
            return self.mapping(node, prefix, depth)
        finally:
            self.open.discard(id(node))

    def mapping(self, node: Any, prefix: str, depth: int) -> dict[str, Any]:
        import yaml

        out: dict[str, Any] = {}
        explicit: dict[str, int] = {}
        for knode, vnode, merged in self._pairs(node, depth):
            key = str(self.scalar(knode)) if isinstance(knode, yaml.ScalarNode) else str(knode.value)
            repeat = None
            if not merged:
                if key in explicit:
                    if self.dups is False:   # (an empty list collects)
                        raise DuplicateKey(key, knode.start_mark.line + 1)
                    repeat = explicit[key]
                else:
                    explicit[key] = knode.start_mark.line + 1
            path = f"{prefix}.{key}" if prefix else key
            if self.positions is not None:
                # a key points at its first occurrence (what ruamel's lc reports with duplicates allowed)
                self.positions.setdefault(path, (knode.start_mark.line + 1, knode.start_mark.column + 1))
            value = self.value(vnode, path, depth + 1)
            if repeat is not None and isinstance(self.dups, list):
                self.dups.append({"key": path, "line": knode.start_mark.line + 1, "first_line": repeat,
                                  "same": out.get(key) == value})
            out[key] = value
        return out

    def _pairs(self, node: Any, depth: int) -> list[tuple[Any, Any, bool]]:
        """(key node, value node, came from a merge) in construction order: merged pairs first."""
        import yaml

        merged: list[tuple[Any, Any, bool]] = []
        own: list[tuple[Any, Any, bool]] = []
        for knode, vnode in node.value:
            if getattr(knode, "tag", None) == "tag:yaml.org,2002:merge":
                sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
                batch: list[tuple[Any, Any, bool]] = []
                for sub in reversed(sources):   # of several merged mappings the first wins
                    if not isinstance(sub, yaml.MappingNode):
                        raise LimitExceeded("a merge key (<<) must merge a mapping", _line(sub))
                    if id(sub) in self.open or depth >= MAX_DEPTH:
                        raise LimitExceeded("a merge key merges a mapping that contains it", _line(sub))
                    self.open.add(id(sub))
                    try:
                        batch.extend((k, v, True) for k, v, _ in self._pairs(sub, depth + 1))
                    finally:
                        self.open.discard(id(sub))
                merged.extend(batch)
            else:
                own.append((knode, vnode, False))
        return merged + own


def _line(node: Any) -> int | None:
    mark = getattr(node, "start_mark", None)
    return None if mark is None else mark.line + 1


def key_positions(text: str) -> dict[str, tuple[int, int]]:
    """Positions of every key of a YAML/JSON text (duplicates allowed: the first position is kept)."""
    positions: dict[str, tuple[int, int]] = {}
    to_python(compose(text), lambda n: n.value, positions, allow_duplicates=True)
    return positions
