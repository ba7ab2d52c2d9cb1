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

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_TRUE = ("true", "y", "1")


def env_enabled(name: str) -> bool:
    """LLaMA-Factory's ``is_env_enabled`` (extras/misc.py:258-260)."""
    return os.environ.get(name, "0").lower() in _TRUE


def _dedup(cands: list[str]) -> list[Path]:
    out: list[Path] = []
    for c in cands:
        p = Path(os.path.expanduser(c))
        if p not in out:
            out.append(p)
    return out


def hub_cache_dirs(hf_home: str | None = None, cache_dir: str | None = None) -> list[Path]:
    """Hub cache folders to look in, in order: `cache_dir` (LLaMA-Factory ``cache_dir``), `hf_home`/hub,
    ``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub``,
    ``~/.cache/huggingface/hub``."""
    cands: list[str] = []
    if cache_dir:
        cands.append(cache_dir)
    if hf_home:
        cands.append(os.path.join(hf_home, "hub"))
    env = os.environ
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
    `_hf_layout_config` looks up: huggingface_hub's file_download.py ``repo_folder_name``), or None. Users pass
    such paths, copied from the training machine, as ``model_name_or_path``."""
    m = _CACHE_FOLDER.search(path.replace("\\", "/"))
    return f"{m.group('org')}/{m.group('name')}" if m else None


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
    return _hf_layout_config(repo_id, hub_cache_dirs(hf_home, cache_dir))


def modelscope_cache_dirs(cache_dir: str | None = None) -> list[Path]:
    """ModelScope model roots: `cache_dir`, ``$MODELSCOPE_CACHE/hub``, ``~/.cache/modelscope/hub`` (each also with
    its ``models/`` subfolder, where newer modelscope releases put models)."""
    cands: list[str] = []
    if cache_dir:
        cands.append(cache_dir)
    base = os.environ.get("MODELSCOPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "modelscope")
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


def openmind_cache_config(repo_id: str, cache_dir: str | None = None) -> Path | None:
    """``config.json`` of `repo_id` in an openMind cache (huggingface_hub layout, see the module docstring)."""
    if not REPO_ID.match(repo_id):
        return None
    cands = [c for c in (cache_dir, os.environ.get("OPENMIND_HUB_CACHE")) if c]
    cands.append(os.path.join(os.path.expanduser("~"), ".cache", "openmind", "hub"))
    return _hf_layout_config(repo_id, _dedup(cands))
