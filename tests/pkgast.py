"""The project's modules parsed once per test process, for the tests that read the whole package's source.

test_architecture, test_one_home and test_startup each parsed and walked every module of finetune_doctor/ (~250
modules, ~1 CPU s a pass, 2026-12-07); under pytest-xdist's --dist loadfile two of them often share a worker, which
then parsed the package two or three times. None of them changes a tree. Keyed by the resolved path, so two
spellings of one file share an entry.
"""

from __future__ import annotations

import ast
import functools
import gc
from pathlib import Path


def tree(path: Path) -> ast.Module:
    """The syntax tree of the Python file at `path` (read as UTF-8); raises OSError or SyntaxError as ast.parse
    does. Shared: callers must not change it."""
    return _tree(Path(path).resolve())


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of `tree(path)` in ``ast.walk`` order, listed once."""
    return _nodes(Path(path).resolve())


def _paused_gc(build):
    """`build()` with the cyclic collector off: parsing the package makes ~680,000 tracked objects and no cycles,
    and the collector's passes over them while they were made took half of the build (2.1 -> 1.05 CPU s for every
    module, 2026-12-07). Reference counting still frees whatever the build drops."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        return build()
    finally:
        if was_on:
            gc.enable()


@functools.cache
def _tree(path: Path) -> ast.Module:
    return _paused_gc(lambda: ast.parse(path.read_text(encoding="utf-8")))


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return _paused_gc(lambda: tuple(ast.walk(_tree(path))))
