"""Find and validate the project configuration: ``[tool.finetune-doctor]`` or ``.finetune-doctor.toml``.

Discovery walks up from the linted file's directory to the filesystem root; the first directory holding a
``.finetune-doctor.toml``, or a ``pyproject.toml`` with a ``[tool.finetune-doctor]`` table, wins (ruff's rule).
An unknown option, or a value of the wrong type or outside its range, is an input error: one line naming the
file, the key and what is expected (exit 2), so that one bad value never turns into an internal error of every
command (issue 27: ``gpu = 8``, ``select = 5``, ``rules = [1]``, ``tool = 5``, 1,000 nested arrays).
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError

FORMATS = ("text", "json", "sarif", "github", "concise")
SCHEMA: dict[str, str] = {
    "select": "codes", "ignore": "codes", "per-file-ignores": "per-file", "fail-on": "fail-on",
    "rules": "strings", "gpu": "string", "nnodes": "nnodes", "format": "format", "torch": "string",
    "transformers": "string", "offline": "bool", "strict": "bool", "exclude": "strings",
    "extend-exclude": "strings", "llamafactory": "string",
}
"""Each option's type; `_check` says what each type accepts."""
KNOWN = set(SCHEMA)
MAX_ITEMS = 10_000
"""Longest list (or table) an option may hold; the TOML reader's own nesting is bounded by the depth check."""
MAX_DEPTH = 32
"""Deepest nesting of arrays/tables read at all (tomllib recurses: 1,000 nested arrays raise RecursionError)."""
MAX_STRING = 4096


def find_project_config(start: str) -> dict[str, Any]:
    """The project options that apply to `start` (a file or directory), or {} when there are none."""
    try:
        p = Path(start).resolve()
        d = p if p.is_dir() else p.parent
    except (OSError, RuntimeError):
        # a symlink loop (RuntimeError from pathlib) or a name too long for the OS: discovery falls back to the
        # folder the path names, and the command's own reader reports the path itself (file:line, exit 2)
        d = Path(os.path.abspath(start)).parent
    try:
        return dict(_find(str(d)))
    except OSError:
        return {}


@lru_cache(maxsize=256)
def _find(d: str) -> tuple[tuple[str, Any], ...]:
    # the folder's own files, else its parent's answer: kept per folder, so the ~20 folders of a lint of
    # LLaMA-Factory's examples walk their shared parents once (issue #22)
    folder = Path(d)
    dot = folder / ".finetune-doctor.toml"
    if dot.is_file():
        return tuple(_validate(_toml(dot), dot).items())
    pp = folder / "pyproject.toml"
    if pp.is_file():
        table = _tool_table(_toml(pp), pp)
        if table is not None:
            return tuple(_validate(table, pp).items())
    up = os.path.dirname(d)
    return () if up == d else _find(up)


def load_project_config(path: str) -> dict[str, Any]:
    """The options of one named file (``lint --config FILE``): a ``pyproject.toml`` (its
    ``[tool.finetune-doctor]`` table; none is an error) or a ``.finetune-doctor.toml``-style file (the whole file).
    Raises InputError naming the file for a missing, malformed or invalid one."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such configuration file", file=path)
    data = _toml(p)
    if p.name == "pyproject.toml":
        table = _tool_table(data, p)
        if table is None:
            raise InputError("no [tool.finetune-doctor] table", file=path)
        return _validate(table, p)
    return _validate(data, p)


def _toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read TOML: {err}", file=str(path)) from None
    if _nesting(text) > MAX_DEPTH:
        raise InputError(f"arrays or tables nested deeper than {MAX_DEPTH} levels", file=str(path))
    # imported here, not at the top: most runs find no pyproject.toml/.finetune-doctor.toml and parse no TOML
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        raise InputError(f"malformed TOML: {err}", file=str(path)) from None


def _nesting(text: str) -> int:
    """Deepest run of unclosed ``[``/``{`` outside strings and comments, in one linear pass (an upper bound on
    the nesting tomllib would recurse into; table headers ``[a]`` count 1)."""
    depth = deepest = 0
    quote = ""
    comment = False
    for ch in text:
        if comment:
            comment = ch != "\n"
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def _tool_table(data: dict[str, Any], path: Path) -> dict[str, Any] | None:
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise InputError(f"tool: expected a table, found {_kind(tool)}", file=str(path))
    if "finetune-doctor" not in tool:
        return None
    table = tool["finetune-doctor"]
    if not isinstance(table, dict):
        raise InputError(f"tool.finetune-doctor: expected a table, found {_kind(table)}", file=str(path))
    return table


def _validate(conf: dict[str, Any], path: Path) -> dict[str, Any]:
    unknown = set(conf) - KNOWN
    if unknown:
        raise InputError(f"unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN))}",
                         file=str(path))
    for key, value in conf.items():
        problem = _check(SCHEMA[key], value)
        if problem:
            raise InputError(f"{key}: expected {problem}, found {_kind(value)}", file=str(path))
    out = dict(conf)
    if "rules" in out:
        out["rules"] = [str((path.parent / r).resolve()) for r in out["rules"]]
    out["__file__"] = str(path)
    return out


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, (int, float)):
        return f"number {v!r}"[:60]
    if isinstance(v, str):
        return f"string {v[:40]!r}" + ("…" if len(v) > 40 else "")
    if isinstance(v, list):
        return f"an array of {len(v)}"
    if isinstance(v, dict):
        return "a table"
    return type(v).__name__


def _strings(v: Any) -> bool:
    return (isinstance(v, list) and len(v) <= MAX_ITEMS
            and all(isinstance(x, str) and 0 < len(x) <= MAX_STRING for x in v))


def _check(kind: str, v: Any) -> str | None:
    """None when `v` is a valid value of `kind`, else what is expected (for the one-line error)."""
    if kind in ("codes", "strings"):
        what = "rule codes or prefixes" if kind == "codes" else "paths or patterns"
        return None if _strings(v) else f"an array of strings ({what})"
    if kind == "string":
        return None if isinstance(v, str) and 0 < len(v) <= MAX_STRING else "a non-empty string"
    if kind == "bool":
        return None if isinstance(v, bool) else "true or false"
    if kind == "nnodes":
        ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65536
        return None if ok else "a whole number of nodes from 1 to 65536"
    if kind == "fail-on":
        return None if v in ("error", "warning", "info", "never") else "error, warning, info or never"
    if kind == "format":
        return None if v in FORMATS else ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]
    if kind == "per-file":
        ok = (isinstance(v, dict) and len(v) <= MAX_ITEMS
              and all(isinstance(k, str) and _strings(x) for k, x in v.items()))
        return None if ok else "a table of glob = [codes]"
    raise AssertionError(kind)  # pragma: no cover - SCHEMA names only the kinds above
