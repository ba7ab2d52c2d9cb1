"""What `doctor lint` reads: files, directories and standard input, taken the way ruff takes them.

* A file named on the command line is linted (or skipped, when it is neither a LLaMA-Factory config nor a
  DeepSpeed JSON); ``--force-exclude`` applies the exclusions below to named files too (ruff's flag, for
  pre-commit, which names every staged file).
* A directory is walked: every ``*.yaml``, ``*.yml`` and ``*.json`` below it, in sorted order, minus what the
  project configuration excludes (``exclude`` replaces the default list, ``extend-exclude`` adds to it; patterns
  are gitignore-style, relative to the folder of the configuration file, as ruff reads them) and minus what the
  ``.gitignore`` files from the walk's root up to the repository root, and inside the walked folders, ignore.
  Files found by walking that are not training or DeepSpeed configs are dropped silently.
* ``-`` is standard input, read once; ``--stdin-filename`` names it (findings point at that name, the project
  configuration is looked up from it, its suffix says YAML or JSON).
* No input at all is a usage error (exit 2): an empty run must never read as an all-clear.

Patterns are matched with `pathspec`'s gitwildmatch (the same engine pre-commit's and black's tooling use).
Cost: one ``os.scandir`` per folder and one pattern match per entry; nothing is read but ``.gitignore`` files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from finetune_doctor.errors import InputError
from finetune_doctor.readers.textfile import STDIN

SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_EXCLUDE = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".ruff_cache",
                   ".pytest_cache", "__pycache__", "node_modules", "site-packages", "build", "dist", ".eggs",
                   "*.egg-info")
"""Folders no training config lives in (ruff's default exclusions, the ones that apply to YAML/JSON)."""
MAX_FILES = 100_000
"""A walk that finds more candidate files than this stops with an error naming the folder (a wrong root)."""


def collect(paths: Iterable[str], *, stdin_filename: str | None = None, config_file: str | None = None,
            force_exclude: bool = False) -> list[str]:
    """The files to lint, in command-line order with each directory expanded in sorted order.

    Returns path strings; ``-`` becomes `stdin_filename` (or stays ``-``) with its bytes provided to the readers
    (readers/textfile.py `provide`). Raises InputError for no input (file ``lint``), a missing path, or a walk
    over MAX_FILES candidates.
    """
    paths = list(paths)
    if not paths:
        raise InputError("no input: name files or directories to lint, or - for standard input", file="lint")
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        if p == STDIN:
            out.append(_stdin(stdin_filename))
            continue
        if os.path.isdir(p):
            found = _walk(p, config_file)
        else:
            # a missing or unreadable file is reported by the reader (file, reason, exit 2)
            found = [p] if not (force_exclude and _excluded_file(p, config_file)) else []
        for f in found:
            key = os.path.normpath(f)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _stdin(name: str | None) -> str:
    import sys

    from finetune_doctor.readers.limits import MAX_CONFIG_BYTES
    from finetune_doctor.readers.textfile import provide

    data = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)
    target = name or STDIN
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError(f"standard input exceeds the {MAX_CONFIG_BYTES >> 20} MiB limit", file=target)
    provide(target, data)
    return target


def _project(start: str, config_file: str | None) -> tuple[Path, list[str]]:
    """(folder patterns are relative to, exclusion patterns) from the project configuration that applies."""
    from finetune_doctor.projectconfig import find_project_config, load_project_config

    conf = load_project_config(config_file) if config_file else find_project_config(start)
    here = Path(start).resolve()
    base = Path(conf["__file__"]).resolve().parent if conf.get("__file__") else (
        here if here.is_dir() else here.parent)
    patterns = list(conf["exclude"]) if "exclude" in conf else list(DEFAULT_EXCLUDE)
    patterns += list(conf.get("extend-exclude") or ())
    return base, patterns


def _spec(lines: Iterable[str]) -> Any:
    import pathspec

    try:   # pathspec >= 1.0 names git's semantics "gitignore"; older releases only know "gitwildmatch"
        return pathspec.PathSpec.from_lines("gitignore", list(lines))
    except (KeyError, LookupError):
        return pathspec.PathSpec.from_lines("gitwildmatch", list(lines))


def _excluded_file(path: str, config_file: str | None) -> bool:
    base, patterns = _project(path, config_file)
    rel = _rel(Path(path).resolve(), base)
    return rel is not None and _spec(patterns).match_file(rel)


def _rel(p: Path, base: Path) -> str | None:
    try:
        return p.relative_to(base).as_posix()
    except ValueError:
        return None


def _git_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _gitignores(root: Path) -> list[tuple[Path, Any]]:
    """The .gitignore specs from `root`'s repository root down to `root` (each relative to its own folder)."""
    top = _git_root(root)
    if top is None:
        return []
    chain = [root, *root.parents]
    chain = chain[:chain.index(top) + 1]
    return [spec for folder in reversed(chain) if (spec := _read_gitignore(folder)) is not None]


def _read_gitignore(folder: Path) -> tuple[Path, Any] | None:
    gi = folder / ".gitignore"
    try:
        if gi.is_file() and gi.stat().st_size <= 1 << 20:
            return folder, _spec(gi.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return None
    return None


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, Any]]) -> bool:
    for folder, spec in specs:
        rel = _rel(path, folder)
        if rel is not None and spec.match_file(rel + ("/" if is_dir else "")):
            return True
    return False


def _walk(top: str, config_file: str | None) -> list[str]:
    root = Path(top).resolve()
    base, patterns = _project(top, config_file)
    exclude = _spec(patterns)
    specs = _gitignores(root)
    found: list[str] = []
    stack: list[tuple[Path, str, list[tuple[Path, Any]]]] = [(root, top, specs)]
    while stack:
        folder, shown, specs_here = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            raise InputError(f"cannot read folder: {err.strerror or err}", file=shown) from None
        local = _read_gitignore(folder) if folder != root else None
        if local is not None:
            specs_here = [*specs_here, local]
        subdirs = []
        for e in entries:
            path = Path(e.path)
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            # patterns are relative to the configuration's folder; a walk outside it matches from its own root
            rel = _rel(path, base) or _rel(path, root)
            if rel is not None and exclude.match_file(rel + ("/" if is_dir else "")):
                continue
            if _ignored(path, is_dir, specs_here):
                continue
            if is_dir:
                subdirs.append((path, os.path.join(shown, e.name), specs_here))
            elif e.name.lower().endswith(SUFFIXES):
                found.append(os.path.join(shown, e.name))
                if len(found) > MAX_FILES:
                    raise InputError(f"more than {MAX_FILES} YAML/JSON files below this folder; name the config "
                                     "folders instead", file=top)
        stack.extend(reversed(subdirs))
    return found
