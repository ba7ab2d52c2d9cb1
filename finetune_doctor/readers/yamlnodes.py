"""Fast reading of YAML (and JSON, which is YAML) with the position of every key.

libyaml's composer (PyYAML's C binding, ``yaml.compose(..., Loader=CSafeLoader)``) builds the node tree with
marks about 20x faster than a pure-Python round-trip parser, which keeps `doctor lint` in pre-commit's budget.
Values are then typed from the nodes by the caller's rule (OmegaConf's for LLaMA-Factory YAML); positions are
1-based (line, column) of each key, dotted for nested mappings. Comment- and order-preserving *edits* stay with
ruamel.yaml (fixer.py). When PyYAML with libyaml is absent, `available()` is False and callers use ruamel.
"""

from __future__ import annotations

from typing import Any, Callable


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
        return yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        raise ParseError((err.problem or err.context or "malformed YAML").strip(),
                         None if mark is None else mark.line + 1) from None
    except yaml.YAMLError as err:
        raise ParseError(str(err), None) from None


def to_python(node: Any, scalar: Callable[[Any], Any], positions: dict[str, tuple[int, int]] | None = None,
              prefix: str = "", allow_duplicates: bool = False) -> Any:
    """Plain Python values of a node tree; `scalar(node)` types each scalar node; key positions go to `positions`.

    Raises DuplicateKey for a repeated key unless `allow_duplicates` (then the last one wins, as json does).
    """
    import yaml

    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for knode, vnode in node.value:
            key = str(scalar(knode)) if isinstance(knode, yaml.ScalarNode) else str(knode.value)
            if key in out and not allow_duplicates:
                raise DuplicateKey(key, knode.start_mark.line + 1)
            path = f"{prefix}.{key}" if prefix else key
            if positions is not None:
                # with duplicates allowed, a key points at its first occurrence (what ruamel's lc reports)
                positions.setdefault(path, (knode.start_mark.line + 1, knode.start_mark.column + 1))
            out[key] = to_python(vnode, scalar, positions, path, allow_duplicates)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [to_python(x, scalar, positions, prefix, allow_duplicates) for x in node.value]
    if node is None:
        return None
    return scalar(node)


def key_positions(text: str) -> dict[str, tuple[int, int]]:
    """Positions of every key of a YAML/JSON text (duplicates allowed: the first position is kept)."""
    positions: dict[str, tuple[int, int]] = {}
    to_python(compose(text), lambda n: n.value, positions, allow_duplicates=True)
    return positions
