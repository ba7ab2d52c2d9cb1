"""File helpers: atomic writes (a temporary file in the target's directory, then os.replace, so that a crash or a
full disk never leaves a half-written report or config), the doctor's cache folder, and paths as users type them."""

from __future__ import annotations

import os
from pathlib import Path

from finetune_doctor.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically; InputError on OS errors.

    An existing file keeps its mode; a new file gets 0666 less the umask, as ``open()`` would create it (mkstemp's
    0600 would hide a report from the rest of a team). A symlink is followed: its target is rewritten and the link
    stays a link (editors and pre-commit do the same).
    """
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        import tempfile   # not on the lint path's import list: it pulls in shutil, bz2 and lzma

        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise InputError(f"cannot write: {err.strerror}", file=path) from None
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as fh:
            fh.write(text)
        os.chmod(tmp, (target.stat().st_mode & 0o7777) if target.exists() else (0o666 & ~_umask()))
        os.replace(tmp, target)
    except OSError as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"cannot write: {err.strerror}", file=path) from None


def cache_dir() -> Path | None:
    """The doctor's own cache folder: ``$XDG_CACHE_HOME/finetune-doctor``, else ``~/.cache/finetune-doctor``.
    None when ``FINETUNE_DOCTOR_NO_CACHE=1`` (nothing is read from or written to it then)."""
    if os.environ.get("FINETUNE_DOCTOR_NO_CACHE") == "1":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "finetune-doctor"


def write_cache(path: Path, text: str) -> None:
    """Write a cache file atomically, best effort: a failed write (read-only home, full disk) leaves no cache
    rather than a bad one, and is never an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(path), text)
    except (InputError, OSError):
        pass


def display_path(path: str | None, base: str | None = None) -> str | None:
    """`path` relative to `base` (default: the working directory) when it lies below it, else unchanged.

    CI annotations and SARIF want repository-relative paths (GitHub relativises against the checkout);
    a path outside the base stays absolute rather than growing ``../`` chains.
    """
    if not path:
        return path
    base = base or os.getcwd()
    try:
        absolute = os.path.abspath(path)
        rel = os.path.relpath(absolute, base)
    except ValueError:  # different drives on Windows
        return path
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return path
    return rel.replace(os.sep, "/")


def format_bytes(n: int | None) -> str:
    """A byte count for people, in binary units with one decimal: "0 B", "512 B", "1.5 KiB", "20.0 MiB", "2.3 GiB".
    The one size formatter of reports and messages (the PyTorch-worded OOM text keeps c10's own format_size,
    probes/replay.py)."""
    if not n:
        return "0 B"
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n} B"

