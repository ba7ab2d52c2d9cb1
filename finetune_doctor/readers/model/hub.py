"""The opt-in download of a model's JSON configs: config.json (and, for a multimodal model, its processor and
preprocessor configs), nothing else — never code, never weights.

huggingface_hub's ``hf_hub_download`` fetches one named file into a cache folder (its documented single-file
API: ``docs/source/en/guides/download.md``); under ``USE_MODELSCOPE_HUB`` modelscope's ``model_file_download``
does the same from ModelScope. Files land in the doctor's cache folder (``fsutil.cache_dir()/hub`` in the
huggingface_hub layout, ``.../modelscope`` for ModelScope), so a second run finds them without the network.
Every call runs in a worker thread joined with a deadline: the whole attempt (config.json and any processor
config) costs at most `timeout_s` seconds (2 s by default) and ends in one note, never a hang or a traceback.
Before the client runs, one TCP connect to the endpoint's host (``HF_ENDPOINT``, else huggingface.co:443; ModelScope:
www.modelscope.cn:443) decides whether there is a network at all: without one, huggingface_hub's ``http_backoff``
would retry five times with waits of 1, 2, 4, 8, 8 s (utils/_http.py, ``max_retries=5``, ``max_wait_time=8``) and log
"Retrying in 1s [Retry 1/5]" for each, so the attempt stops at the connect instead. huggingface_hub's own logger is
lowered to errors for the process once a download is attempted (a worker left behind by the deadline must not
print into the report). Skipped when ``HF_HUB_OFFLINE=1`` (huggingface_hub ``constants.py``) or ``offline=True``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.errors import install_hint
from finetune_doctor import fsutil
from finetune_doctor.readers.model.caches import REPO_ID, hf_layout_config

CONFIG_FILES = ("config.json",)
MULTIMODAL_FILES = ("preprocessor_config.json", "processor_config.json")
DEFAULT_TIMEOUT_S = 2.0   # the whole attempt, seconds (issue 21: one short attempt, then one line)
HF_DEFAULT_ENDPOINT = "https://huggingface.co"   # huggingface_hub constants.py _HF_DEFAULT_ENDPOINT
MS_DEFAULT_ENDPOINT = "https://www.modelscope.cn"


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
    hit = hf_layout_config(repo_id, [root])
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


def _quiet_clients() -> None:
    """Lower huggingface_hub's and modelscope's loggers to errors and turn off their progress bars: their retry
    warnings and bars would otherwise interleave with the report (the doctor says what happened in one note)."""
    import importlib.util
    import logging

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if importlib.util.find_spec("huggingface_hub") is not None:
        # its import sets its root logger to WARNING (utils/logging.py _configure_library_root_logger): import first
        import huggingface_hub.utils.logging  # noqa: F401
    for name in ("huggingface_hub", "modelscope"):
        logging.getLogger(name).setLevel(logging.ERROR)


def endpoint_address(use_modelscope: bool = False) -> tuple[str, int]:
    """(host, port) the download would connect to: ``HF_ENDPOINT`` (or ``MODELSCOPE_DOMAIN`` under ModelScope),
    else the public hub; port 443 for https, 80 for http, or the one the address names."""
    from urllib.parse import urlsplit

    if use_modelscope:
        dom = os.environ.get("MODELSCOPE_DOMAIN", "").strip()
        url = (dom if "://" in dom else f"https://{dom}") if dom else MS_DEFAULT_ENDPOINT
    else:
        url = os.environ.get("HF_ENDPOINT", "").strip() or HF_DEFAULT_ENDPOINT
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname or "", port or (80 if parts.scheme == "http" else 443)


def reachable(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection to `host`:`port` opens within `timeout_s` seconds, else the one-line reason."""
    import socket   # here, not at the top: `doctor lint` imports this module and never connects

    if not host:
        return "no endpoint host"
    try:
        with socket.create_connection((host, port), timeout=max(timeout_s, 0.05)):
            return None
    except socket.timeout:
        return f"no answer from {host}:{port} within {timeout_s:.1f} s"
    except OSError as e:   # DNS failure (gaierror), refused, unreachable network
        return f"cannot reach {host}:{port} ({e.strerror or type(e).__name__})"


def _hf_fetch(repo_id: str, filename: str, root: Path, timeout_s: float) -> str:
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo_id, filename, cache_dir=str(root), etag_timeout=timeout_s)


def _ms_fetch(repo_id: str, filename: str, root: Path, timeout_s: float) -> str:
    from modelscope.hub.file_download import model_file_download  # type: ignore[import-not-found]

    return model_file_download(repo_id, filename, cache_dir=str(root))


_NETWORK_FETCHERS = (_hf_fetch, _ms_fetch)   # the real clients; a stand-in (tests) skips the connect probe


def _with_timeout(fn: Callable[[], str], timeout_s: float) -> tuple[str | None, str | None]:
    """(result, error) of `fn` run in a daemon thread; error is a one-line reason."""
    import threading

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
        return None, f"timed out after {round(timeout_s, 1):g} s"
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
    (each becomes the `note`). `timeout_s` bounds the whole attempt (seconds): one connect probe, then the files,
    no retries beyond the deadline.
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
    where = "ModelScope" if use_modelscope else "the Hugging Face hub"
    deadline = time.monotonic() + timeout_s
    _quiet_clients()
    if fetch in _NETWORK_FETCHERS:
        down = reachable(*endpoint_address(use_modelscope), timeout_s)
        if down is not None:
            return Download(None, note=f"no network: {repo_id} config.json not downloaded from {where} ({down}); "
                                       "--offline skips this attempt")
    left = max(deadline - time.monotonic(), 0.05)
    got, err = _with_timeout(lambda: fetch(repo_id, CONFIG_FILES[0], root, left), left)
    if err and ("No module named" in err or "ModuleNotFoundError" in err or "ImportError" in err):
        return Download(None, note=f"no download: {client} is not installed ({install_hint('hub')})")
    if got is None:
        return Download(None, note=f"download of {repo_id} config.json from {where} failed: {err or 'no file'}")
    cfg = Path(got)
    files = [cfg]
    if _is_multimodal(cfg):
        for name in MULTIMODAL_FILES:
            left = deadline - time.monotonic()
            if left <= 0:   # the processor configs only refine the image budget: the deadline wins
                break
            extra, _ = _with_timeout(lambda n=name, t=left: fetch(repo_id, n, root, t), left)
            if extra:
                files.append(Path(extra))
    return Download(cfg, tuple(files), note=f"config.json downloaded from {where} into {root}")
