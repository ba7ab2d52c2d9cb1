"""Model caches on this machine, read as plain files: Hugging Face, ModelScope and openMind.

* Hugging Face (huggingface_hub ``constants.py`` and ``docs/source/en/guides/manage-cache.md``):
  ``models--{org}--{name}/snapshots/<rev>/config.json`` with the revision named by ``refs/main``, under the
  YAML's ``cache_dir``, ``$HF_HUB_CACHE``, the legacy ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``,
  ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub``.
* ModelScope, consulted when ``USE_MODELSCOPE_HUB`` is on (LLaMA-Factory ``extras/misc.py:331-336``,
  ``is_env_enabled``: "true", "y" or "1"; LF then calls modelscope's ``snapshot_download(model_name_or_path,
  cache_dir=model_args.cache_dir)``, misc.py:294-315): modelscope ``utils/file_utils.py`` puts models under
  ``$MODELSCOPE_CACHE`` (default ``~/.cache/modelscope``) ``/hub``, as ``<org>/<name>`` or, in newer releases,
  ``models/<org>/<name>``, with dots in names written ``___``; a ``cache_dir`` replaces that root.
* openMind, when ``USE_OPENMIND_HUB`` is on (misc.py:317-328, ``openmind.utils.hub.snapshot_download``):
  openmind_hub derives from huggingface_hub and keeps its ``models--{org}--{name}/snapshots`` layout; the root is
  ``cache_dir``, ``$OPENMIND_HUB_CACHE`` or ``~/.cache/openmind/hub`` (an assumption from that derivation: the
  openmind_hub source was not available to check).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

from finetune_doctor.readers.lfenv import env_enabled   # LF's is_env_enabled, one copy (read here as before)

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def _dedup(cands: list[str]) -> list[Path]:
    out: list[Path] = []
    for c in cands:
        p = Path(os.path.expanduser(c))
        if p not in out:
            out.append(p)
    return out


_HUB_ENV = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME")
_DIRS: dict[tuple[str | None, ...], tuple[Path, ...]] = {}


def hub_cache_dirs(hf_home: str | None = None, cache_dir: str | None = None,
                   env: Mapping[str, str] | None = None) -> list[Path]:
    """Hub cache folders to look in, in order: `cache_dir` (LLaMA-Factory ``cache_dir``), `hf_home`/hub,
    ``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub``,
    ``~/.cache/huggingface/hub`` (`env` defaults to ``os.environ``). Without `cache_dir` and `hf_home` the first is
    the one folder huggingface_hub itself uses (constants.py).

    With `env` left to ``os.environ`` the answer is kept per process for the arguments and the variables it reads
    (``HOME`` for ``~``): `doctor lint` asks it once per config, ~0.2 ms of path building each (issue #22)."""
    if env is not None:
        return _hub_cache_dirs(hf_home, cache_dir, env)
    key = (hf_home, cache_dir, *map(os.environ.get, _HUB_ENV))
    kept = _DIRS.get(key)
    if kept is None:
        kept = tuple(_hub_cache_dirs(hf_home, cache_dir, os.environ))
        if len(_DIRS) < 256:
            _DIRS[key] = kept
    return list(kept)


def _hub_cache_dirs(hf_home: str | None, cache_dir: str | None, env: Mapping[str, str]) -> list[Path]:
    cands: list[str] = []
    if cache_dir:
        cands.append(cache_dir)
    if hf_home:
        cands.append(os.path.join(hf_home, "hub"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            cands.append(env[var])
    if env.get("HF_HOME"):
        cands.append(os.path.join(env["HF_HOME"], "hub"))
    if env.get("XDG_CACHE_HOME"):
        cands.append(os.path.join(env["XDG_CACHE_HOME"], "huggingface", "hub"))
    cands.append(os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub"))
    return _dedup(cands)


def _snapshot_file(repo: Path, filename: str = "config.json") -> Path | None:
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        return None
    ref = repo / "refs" / "main"
    try:
        if ref.is_file():
            rev = ref.read_text(encoding="utf-8", errors="replace").strip()[:200]
            if rev and (snaps / rev / filename).is_file():
                return snaps / rev / filename
        found = [s / filename for s in snaps.iterdir() if (s / filename).is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


_CACHE_FOLDER = re.compile(r"(?:^|/)models--(?P<org>[A-Za-z0-9][\w.-]*?)--(?P<name>[\w.-]+?)(?:/snapshots/[^/]+)?/?$")


def repo_of_cache_folder(path: str) -> str | None:
    """``ORG/NAME`` of a huggingface_hub cache folder (``.../models--ORG--NAME/snapshots/<revision>``, the folder
    `hf_layout_config` looks up: huggingface_hub's file_download.py ``repo_folder_name``), or None. Users pass
    such paths, copied from the training machine, as ``model_name_or_path``."""
    m = _CACHE_FOLDER.search(path.replace("\\", "/"))
    return f"{m.group('org')}/{m.group('name')}" if m else None


def hf_layout_config(repo_id: str, roots: list[Path]) -> Path | None:
    """The config.json of `repo_id` in the first of `roots` laid out as huggingface_hub's cache
    (``models--ORG--NAME/snapshots/<revision>/config.json``, the folder name matched without regard to case), or
    None. The one lookup of that layout: the HF and openMind caches here and the hub reader's download folder.

    Kept per process for the roots' state: `doctor lint` of LLaMA-Factory's 95 examples asks it ~160 times for
    31 names (two roots each, every miss listing the root for a case-insensitive match; ~10 % of the per-file
    work, issue #22). An answer is reused only while the modification times of every root, the repository folder
    and its snapshots folder are what they were (a download or a new snapshot adds an entry to one of them) and a
    found file still exists."""
    stamp = _stamp(repo_id, roots)
    key = (repo_id, tuple(roots))
    kept = _LAYOUT.get(key)
    if kept is not None and kept[0] == stamp and (kept[1] is None or os.path.isfile(kept[1])):
        return kept[1]
    hit = _hf_layout_config(repo_id, roots)
    if len(_LAYOUT) < 4096:
        _LAYOUT[key] = (stamp, hit)
    return hit


_LAYOUT: dict[tuple[str, tuple[Path, ...]], tuple[tuple[int, ...], Path | None]] = {}


def _stamp(repo_id: str, roots: list[Path]) -> tuple[int, ...]:
    """The modification times (ns; -1 when absent) of each root, of the repository's folder in it and of its
    snapshots folder (a new snapshot is an entry there)."""
    folder = "models--" + repo_id.replace("/", "--")
    out = []
    for root in roots:
        for p in (str(root), os.path.join(root, folder), os.path.join(root, folder, "snapshots")):
            try:
                out.append(os.stat(p).st_mtime_ns)
            except (OSError, ValueError):
                out.append(-1)
    return tuple(out)


def _hf_layout_config(repo_id: str, roots: list[Path]) -> Path | None:
    folder = "models--" + repo_id.replace("/", "--")
    for root in roots:
        if not root.is_dir():
            continue
        repo = root / folder
        if not repo.is_dir():
            low = folder.lower()
            try:
                repo = next((d for d in root.iterdir() if d.name.lower() == low and d.is_dir()), repo)
            except OSError:
                continue
        hit = _snapshot_file(repo)
        if hit is not None:
            return hit
    return None


def hub_cache_config(repo_id: str, hf_home: str | None = None, cache_dir: str | None = None) -> Path | None:
    """``config.json`` of `repo_id` in the first HF hub cache that has it: the snapshot ``refs/main`` names,
    else the most recently modified snapshot holding one. Repo folder names are matched exactly, then
    case-insensitively (the hub itself resolves ids case-insensitively)."""
    if not REPO_ID.match(repo_id):
        return None
    return hf_layout_config(repo_id, hub_cache_dirs(hf_home, cache_dir))


def modelscope_cache_dirs(cache_dir: str | None = None, env: Mapping[str, str] | None = None) -> list[Path]:
    """ModelScope model roots: `cache_dir`, ``$MODELSCOPE_CACHE/hub``, ``~/.cache/modelscope/hub`` (each also with
    its ``models/`` subfolder, where newer modelscope releases put models). ``$MODELSCOPE_CACHE`` is the cache's
    base, not its model root: modelscope ``utils/file_utils.py`` ``get_model_cache_root`` joins ``hub`` to it."""
    cands: list[str] = []
    if cache_dir:
        cands.append(cache_dir)
    env = os.environ if env is None else env
    base = env.get("MODELSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "modelscope")
    cands.append(os.path.join(base, "hub"))
    out: list[Path] = []
    for p in _dedup(cands):
        out += [p / "models", p]
    return out


def modelscope_cache_config(repo_id: str, cache_dir: str | None = None) -> Path | None:
    """``config.json`` of `repo_id` in a ModelScope cache (``<root>/<org>/<name>``, dots as ``___``)."""
    if not REPO_ID.match(repo_id):
        return None
    org, name = repo_id.split("/", 1)
    for root in modelscope_cache_dirs(cache_dir):
        for nm in (name, name.replace(".", "___")):
            f = root / org / nm / "config.json"
            if f.is_file():
                return f
    return None


def openmind_cache_dirs(cache_dir: str | None = None, env: Mapping[str, str] | None = None) -> list[Path]:
    """openMind hub roots: `cache_dir`, ``$OPENMIND_HUB_CACHE``, ``~/.cache/openmind/hub`` (module docstring)."""
    env = os.environ if env is None else env
    cands = [c for c in (cache_dir, env.get("OPENMIND_HUB_CACHE")) if c]
    cands.append(os.path.join(os.path.expanduser("~"), ".cache", "openmind", "hub"))
    return _dedup(cands)


def openmind_cache_config(repo_id: str, cache_dir: str | None = None) -> Path | None:
    """``config.json`` of `repo_id` in an openMind cache (huggingface_hub layout, see the module docstring)."""
    if not REPO_ID.match(repo_id):
        return None
    return hf_layout_config(repo_id, openmind_cache_dirs(cache_dir))


def cached_model_files(repo_id: str, filename: str, cache_dir: str | None = None,
                       env: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """`filename` of hub model `repo_id` wherever LLaMA-Factory would have downloaded it on this machine: the
    ModelScope cache when ``USE_MODELSCOPE_HUB`` is on, the openMind cache when ``USE_OPENMIND_HUB`` is on, then the
    HF hub cache (misc.py:294-336 tries them in that order). Returns (file, "ModelScope cache" | "openMind cache" |
    "HF cache") for each copy found, in that order; [] for a name that is not a hub id. The one cache locator
    for model files (config.json, tokenizer.json)."""
    if not REPO_ID.match(repo_id):
        return []
    out: list[tuple[Path, str]] = []
    if env_enabled("USE_MODELSCOPE_HUB", env):
        org, name = repo_id.split("/", 1)
        for root in modelscope_cache_dirs(cache_dir, env):
            for nm in dict.fromkeys((name, name.replace(".", "___"))):
                if (root / org / nm / filename).is_file():
                    out.append((root / org / nm / filename, "ModelScope cache"))
    if env_enabled("USE_OPENMIND_HUB", env):
        out += [(f, "openMind cache") for root in openmind_cache_dirs(cache_dir, env)
                if (f := _hf_layout_file(repo_id, root, filename)) is not None]
    out += [(f, "HF cache") for root in hub_cache_dirs(cache_dir=cache_dir, env=env)
            if (f := _hf_layout_file(repo_id, root, filename)) is not None]
    return out


def _hf_layout_file(repo_id: str, root: Path, filename: str) -> Path | None:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    return _snapshot_file(repo, filename) if repo.is_dir() else None
