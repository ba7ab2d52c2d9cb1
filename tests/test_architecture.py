"""The house rules of docs/ARCHITECTURE.md, checked on the source: imports point down the data flow, no import
cycles, no module over 800 lines, no function over 100 lines, no project import hidden behind ImportError.

Imports are read from the syntax tree (module-level and function-level alike), so a lazy import that climbs back
up the flow fails here too.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import pkgast

PKG = Path(__file__).resolve().parent.parent / "finetune_doctor"

# The data flow, bottom up (docs/ARCHITECTURE.md). A module may import its own layer or a lower one.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "types", "errors", "fsutil", "projectconfig", "settings", "arch", "quant", "dtypes", "evidence",
     "numbers"),
    ("readers", "hardware"),
    ("run",),
    ("analyzers",),
    ("facts",),
    ("engine", "probes", "reporters", "fixes"),
    ("pipeline",),
    ("cli", "__main__", "lintcli", "startup"),
)
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100
# Modules being split right now (issue 15), each on its own branch; this list only shrinks.
NOT_YET_SPLIT: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _group(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _resolve(target: str) -> str | None:
    """The project module an import names (``from finetune_doctor.facts import cfg`` names facts.cfg)."""
    while target and target not in MODULES:
        target = target.rsplit(".", 1)[0] if "." in target else ""
    return target or None


def _import_statements(body: list, type_checking: bool):
    """The import statements in a list of statements and in the statement lists nested in them (bodies, else
    branches, handlers, match cases), skipping the body of ``if TYPE_CHECKING:`` unless `type_checking`. An import
    is a statement, never part of an expression, so the expressions (most of a tree's nodes) are not walked:
    walking every node cost ~3 of this file's ~6 CPU s (2026-12-07)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if (not type_checking and isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):   # imports for annotations only never run
            yield from _import_statements(node.orelse, type_checking)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                yield from _import_statements(nested, type_checking)


def _tree(path: Path) -> ast.Module:
    """The syntax tree of one module, parsed once per test process (pkgast.py): four checks here and the whole-
    package checks of test_one_home and test_startup read every module's tree and none changes it."""
    return pkgast.tree(path)


def _all_nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of one module's tree in ``ast.walk`` order, listed once per test process (pkgast.py): three
    checks walk every module, and ast.walk's generators cost more than the parse (~0.5 CPU s a pass, 2026-12-07)."""
    return pkgast.nodes(path)


def _imports(path: Path, *, type_checking: bool = False) -> list[tuple[int, str]]:
    """Project imports of one module as (line, module); ``type_checking`` adds those under ``if TYPE_CHECKING:``."""
    out = []
    for node in _import_statements(_tree(path).body, type_checking):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("finetune_doctor"):
            for a in node.names:
                tgt = _resolve(f"{node.module}.{a.name}") or _resolve(node.module)
                if tgt:
                    out.append((node.lineno, tgt))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("finetune_doctor"):
                    tgt = _resolve(a.name)
                    if tgt:
                        out.append((node.lineno, tgt))
    return out


@functools.cache
def _graph(type_checking: bool = False) -> dict[str, list[tuple[int, str]]]:
    """module -> its project imports; built at first use, not at collection (every pytest-xdist worker collects
    this file, one runs these tests). ``type_checking``: the same graph with the imports made for annotations
    only: a cycle there is a cycle a reader must untangle too."""
    return {m: _imports(p, type_checking=type_checking) for m, p in MODULES.items()}


def test_every_top_level_part_has_a_layer():
    groups = {_group(m) for m in MODULES}
    assert groups <= set(LAYER_OF), f"give these a layer in LAYERS: {sorted(groups - set(LAYER_OF))}"


def test_imports_point_down_the_flow():
    up = []
    for mod, imps in _graph().items():
        src = LAYER_OF[_group(mod)]
        for line, tgt in imps:
            if tgt == "finetune_doctor" and _group(mod) != "__init__":
                continue   # the package's version string
            if LAYER_OF[_group(tgt)] > src:
                up.append(f"{MODULES[mod].relative_to(PKG.parent)}:{line} imports {tgt}")
    assert up == []


def test_facts_import_only_what_lies_below_them():
    bad = [f"{m}:{line} -> {t}" for m, imps in _graph().items() if _group(m) == "facts"
           for line, t in imps if LAYER_OF[_group(t)] >= LAYER_OF["facts"] and _group(t) != "facts"]
    assert bad == []


def test_no_pipeline_module_imports_another():
    bad = [f"{m}:{line} -> {t}" for m, imps in _graph().items() if _group(m) == "pipeline"
           for line, t in imps if _group(t) == "pipeline" and t != m]
    assert bad == []


def _cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    # Tarjan's strongly connected components over module -> module edges
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for _, w in graph.get(v, ()):
            if w == v or w == "finetune_doctor":
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return cycles


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_no_import_cycles_counting_type_checking_imports():
    assert _cycles(_graph(True)) == []


def _room(module: str) -> str | None:
    """The input-family room of a reader or analyzer (``readers.runlogs``), None for a module outside one."""
    parts = module.split(".")
    if len(parts) >= 4 and parts[1] in ("readers", "analyzers"):
        return ".".join(parts[1:3])
    return None


@pytest.mark.parametrize("layer", ["readers", "analyzers"])
def test_rooms_of_a_layer_form_no_cycle(layer):
    """The rooms (readers/config, readers/runlogs, ...) import each other one way only, so each can be read
    knowing only the rooms below it."""
    rooms: dict[str, list[tuple[int, str]]] = {}
    for mod, imps in _graph(True).items():
        src = _room(mod)
        if src is None or not src.startswith(layer + "."):
            continue
        for line, tgt in imps:
            dst = _room(tgt)
            if dst and dst != src and dst.startswith(layer + "."):
                rooms.setdefault(src, []).append((line, dst))
    assert _cycles(rooms) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_size_limits(module):
    if module in NOT_YET_SPLIT:
        pytest.skip("being split on its own branch (issue 15)")
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path.name} has {text.count(chr(10))} lines"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines, line {n.lineno})"
            for n in _all_nodes(path) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_project_import_behind_import_error():
    hidden = []
    for mod, path in MODULES.items():
        for node in _all_nodes(path):
            if not isinstance(node, ast.Try):
                continue
            catches = any(isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                          for h in node.handlers)
            if not catches:
                continue
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("finetune_doctor") \
                            and mod not in NOT_YET_SPLIT:
                        hidden.append(f"{path.relative_to(PKG.parent)}:{sub.lineno}")
    assert hidden == []
