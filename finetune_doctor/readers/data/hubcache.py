"""Hub datasets and models already on this machine: the HF hub cache and the ``datasets`` Arrow cache.

Paths follow huggingface_hub's constants (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME) and the ``datasets`` cache layout
(``HF_DATASETS_CACHE``, ``org___name/<config>/<version>/<hash>/name-<split>*.arrow``). Nothing here touches the
network.
"""

from __future__ import annotations

import os
from pathlib import Path

from finetune_doctor.readers.data.datarows import file_type
from finetune_doctor.readers.model.caches import hub_cache_dirs

def hf_hub_cache(env: dict[str, str] | None = None) -> Path:
    """The HF hub cache folder huggingface_hub itself uses (constants.py): the first of readers/model/caches.py
    `hub_cache_dirs`, the one list of hub cache locations."""
    return hub_cache_dirs(env=env)[0]


def hub_snapshot(repo_id: str, kind: str, cache: Path) -> Path | None:
    """The snapshot folder of a cached hub repo (``{kind}s--org--name/snapshots/<rev>``): the revision
    ``refs/main`` names, else the newest snapshot. `kind` is ``model`` or ``dataset``."""
    root = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    snaps = root / "snapshots"
    if not snaps.is_dir():
        return None
    ref = root / "refs" / "main"
    try:
        rev = ref.read_text(encoding="utf-8").strip() if ref.is_file() else ""
    except (OSError, ValueError):   # unreadable or not UTF-8: fall back to the newest snapshot
        rev = ""
    if rev and (snaps / rev).is_dir():
        return snaps / rev
    cands = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    return cands[0] if cands else None


def find_cached_hub_dataset(repo_id: str, split: str = "train", *, subset: str | None = None,
                            folder: str | None = None, cache_dir: str | None = None,
                            env: dict[str, str] | None = None) -> tuple[list[str], str, str] | None:
    """Data files of a hub dataset already on disk, or None: (files, file type, where found).

    Looks in (1) the ``datasets`` Arrow cache (``HF_DATASETS_CACHE`` or ``HF_HOME/datasets``, or `cache_dir`
    which LF passes as ``cache_dir=model_args.cache_dir``): ``org___name/<config>/<version>/<hash>/
    name-<split>*.arrow``; (2) the hub cache snapshot: files of a loadable type whose path names the split
    (``train``), else all of them. Never touches the network.
    """
    env = os.environ if env is None else env
    org_name = repo_id.replace("/", "___")
    short = repo_id.split("/")[-1]
    roots = []
    if cache_dir:
        roots.append(Path(cache_dir).expanduser())
    if env.get("HF_DATASETS_CACHE"):
        roots.append(Path(env["HF_DATASETS_CACHE"]).expanduser())
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                              "huggingface")
    roots.append(Path(home).expanduser() / "datasets")
    for root in roots:
        base = root / org_name
        if not base.is_dir():
            continue
        configs = [base / subset] if subset else sorted(p for p in base.iterdir() if p.is_dir())
        for cfg in configs:
            arrows = sorted(cfg.glob(f"*/*/{short}-{split}*.arrow")) or sorted(cfg.glob(f"*/*/*-{split}*.arrow"))
            if arrows:
                return [str(p) for p in arrows], "arrow", str(cfg)
    snap = hub_snapshot(repo_id, "dataset", Path(cache_dir).expanduser() if cache_dir else hf_hub_cache(env))
    if snap is None:
        return None
    root = snap / folder if folder else snap
    if subset and (root / subset).is_dir():
        root = root / subset
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and file_type(str(p))]
    if not files:
        return None
    with_split = [p for p in files if split in p.relative_to(root).as_posix()]
    files = with_split or files
    types = {file_type(str(p)) for p in files}
    ftype = "parquet" if "parquet" in types else sorted(t for t in types if t)[0]
    return [str(p) for p in files if file_type(str(p)) == ftype], ftype, str(snap)
