"""Find and validate the project configuration: ``[tool.finetune-doctor]`` or ``.finetune-doctor.toml``.

Discovery walks up from the linted file's directory to the filesystem root; the first directory holding a
``.finetune-doctor.toml``, or a ``pyproject.toml`` with a ``[tool.finetune-doctor]`` table, wins (ruff's rule).
An unknown option is an input error naming the file.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOWN = {"select", "ignore", "per-file-ignores", "fail-on", "rules", "gpu", "nnodes", "format", "torch",
         "transformers", "offline", "llamafactory"}


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


@lru_cache(maxsize=64)
def _find(d: str) -> tuple[tuple[str, Any], ...]:
    cur = Path(d)
    for folder in [cur, *cur.parents]:
        dot = folder / ".finetune-doctor.toml"
        if dot.is_file():
            return tuple(_load(dot, table=None).items())
        pp = folder / "pyproject.toml"
        if pp.is_file():
            try:
                data = tomllib.loads(pp.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
                raise InputError(f"malformed TOML: {err}", file=str(pp)) from None
            if "finetune-doctor" in data.get("tool", {}):
                return tuple(_validate(data["tool"]["finetune-doctor"], pp).items())
    return ()


def _load(path: Path, table: str | None) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"malformed TOML: {err}", file=str(path)) from None
    return _validate(data if table is None else data.get(table, {}), path)


def _validate(conf: dict[str, Any], path: Path) -> dict[str, Any]:
    unknown = set(conf) - KNOWN
    if unknown:
        raise InputError(f"unknown option(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN))}",
                         file=str(path))
    out = dict(conf)
    if "rules" in out:
        out["rules"] = [str((path.parent / r).resolve()) for r in out["rules"]]
    if "fail-on" in out and out["fail-on"] not in ("error", "warning", "info", "never"):
        raise InputError("fail-on must be error, warning, info or never", file=str(path))
    out["__file__"] = str(path)
    return out
