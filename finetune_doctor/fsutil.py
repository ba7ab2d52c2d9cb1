"""Atomic file writes: a temporary file in the target's directory, then os.replace, so that a crash or a full
disk never leaves a half-written report or config."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from finetune_doctor.errors import InputError


def atomic_write(path: str, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically, keeping the file's mode when it exists; InputError on OS errors."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise InputError(f"cannot write: {err.strerror}", file=path) from None
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as fh:
            fh.write(text)
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except OSError as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"cannot write: {err.strerror}", file=path) from None
