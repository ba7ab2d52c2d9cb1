"""The opt-in download of a model's JSON configs: config.json (and, for a multimodal model, its processor and
preprocessor configs), nothing else — never code, never weights.

huggingface_hub's ``hf_hub_download`` fetches one named file into a cache folder (its documented single-file
API: ``docs/source/en/guides/download.md``); under ``USE_MODELSCOPE_HUB`` modelscope's ``model_file_download``
does the same from ModelScope. Files land in the doctor's cache folder (``fsutil.cache_dir()/hub`` in the
huggingface_hub layout, ``.../modelscope`` for ModelScope), so a second run finds them without the network.
Every call runs in a worker thread joined with a timeout: a slow or dead network costs at most `timeout_s`
seconds and ends in a note, never a hang or a traceback. Skipped when ``HF_HUB_OFFLINE=1`` (huggingface_hub
``constants.py``) or ``offline=True``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.errors import install_hint
from finetune_doctor import fsutil
from finetune_doctor.readers.model.caches import REPO_ID, _hf_layout_config

CONFIG_FILES = ("config.json",)
MULTIMODAL_FILES = ("preprocessor_config.json", "processor_config.json")
DEFAULT_TIMEOUT_S = 8.0


@dataclass(frozen=True)
class Download:
    """Outcome of one download attempt: `config` the local config.json path (None when nothing came), `files`
    every file fetched, `note` what happened (why nothing came, or where from)."""

    config: Path | None
    files: tuple[Path, ...] = ()
    note: str = ""


def download_root(kind: str = "hub") -> Path | None:
    root = fsutil.cache_dir()
    return None if root is None else root / kind


def cached_download(repo_id: str) -> Path | None:
    """A config.json an earlier run downloaded into the doctor's cache folder, or None."""
    root = download_root("hub")
    if root is None or not REPO_ID.match(repo_id):
        return None
    hit = _hf_layout_config(repo_id, [root])
    if hit is not None:
        return hit
    ms = download_root("modelscope")
    f = ms / repo_id / "config.json" if ms is not None else None
    return f if f is not None and f.is_file() else None


def offline_reason(offline: bool) -> str | None:
    if offline:
        return "--offline"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE=1"
    return None


def _hf_fetch(repo_id: str, filename: str, root: Path, timeout_s: float) -> str:
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo_id, filename, cache_dir=str(root), etag_timeout=timeout_s)


def _ms_fetch(repo_id: str, filename: str, root: Path, timeout_s: float) -> str:
    from modelscope.hub.file_download import model_file_download  # type: ignore[import-not-found]

    return model_file_download(repo_id, filename, cache_dir=str(root))


def _with_timeout(fn: Callable[[], str], timeout_s: float) -> tuple[str | None, str | None]:
    """(result, error) of `fn` run in a daemon thread; error is a one-line reason."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["ok"] = fn()
        except BaseException as e:  # noqa: BLE001 - any failure of a third-party client is a note, not a crash
            box["err"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}".rstrip(": ")

    t = threading.Thread(target=work, name="finetune-doctor-config-download", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return None, f"timed out after {timeout_s:g} s"
    return box.get("ok"), box.get("err")


def _is_multimodal(path: Path) -> bool:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get("vision_config"), dict)


def download_configs(repo_id: str, *, offline: bool = False, use_modelscope: bool = False,
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> Download:
    """Fetch `repo_id`'s config.json (plus processor configs of a multimodal model) into the doctor's cache.

    Returns a `Download`; never raises for network, authentication, missing-repo or missing-package problems
    (each becomes the `note`). `timeout_s` bounds each file's wait (seconds).
    """
    why = offline_reason(offline)
    if why:
        return Download(None, note=f"no download ({why})")
    if not REPO_ID.match(repo_id):
        return Download(None, note="no download: not a hub repo id")
    kind = "modelscope" if use_modelscope else "hub"
    root = download_root(kind)
    if root is None:
        return Download(None, note="no download: the doctor's cache folder is off (FINETUNE_DOCTOR_NO_CACHE=1)")
    fetch = _ms_fetch if use_modelscope else _hf_fetch
    client = "modelscope" if use_modelscope else "huggingface_hub"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return Download(None, note=f"no download: cannot create {root}: {e.strerror}")
    got, err = _with_timeout(lambda: fetch(repo_id, CONFIG_FILES[0], root, timeout_s), timeout_s)
    if err and ("No module named" in err or "ModuleNotFoundError" in err or "ImportError" in err):
        return Download(None, note=f"no download: {client} is not installed ({install_hint('hub')})")
    if got is None:
        return Download(None, note=f"download of {repo_id} config.json from {'ModelScope' if use_modelscope else 'the Hugging Face hub'} "
                                   f"failed: {err or 'no file'}")
    cfg = Path(got)
    files = [cfg]
    if _is_multimodal(cfg):
        for name in MULTIMODAL_FILES:
            extra, _ = _with_timeout(lambda n=name: fetch(repo_id, n, root, timeout_s), timeout_s)
            if extra:
                files.append(Path(extra))
    return Download(cfg, tuple(files), note=f"config.json downloaded from {'ModelScope' if use_modelscope else 'the Hugging Face hub'} "
                                           f"into {root}")
