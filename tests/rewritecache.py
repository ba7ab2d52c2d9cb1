"""pytest's rewritten test modules kept between test processes when Python may not write bytecode.

pytest rewrites the ``assert`` statements of every test module it imports (a parse, an AST walk and a compile per
file) and normally keeps the result as a ``.pyc`` in ``tests/__pycache__``; with ``PYTHONDONTWRITEBYTECODE=1`` set
(this project's sandbox sets it) it writes none, so every pytest-xdist worker rewrites all ~220 test modules again
on every run: ~4 CPU s of the ~9 s a worker spends collecting the fast lane (issue #22, 2026-12-07, session 12's
collect-only measurements, benchmarks/results/test_speed.md). The rewrite is a pure function of the file's bytes,
its path (written into the code object), pytest's version, the interpreter and the one ini option that changes the
rewritten code (``enable_assertion_pass_hook``), so its code object is stored once (``marshal``) in the same
per-user temporary folder as the parses of parsecache.py, never next to the sources, and read back by later
processes. A store that cannot be read or written is the same as no store: pytest rewrites.

Set FINETUNE_DOCTOR_TEST_PARSE_CACHE=0 to rewrite every time, as pytest does without this module.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys
import types
from pathlib import Path

from parsecache import _enabled, _folder


def _key(fn: Path, source: bytes, pass_hook: bool) -> str:
    import pytest

    h = hashlib.sha256(f"pytest-rewrite\0{pytest.__version__}\0{sys.version}\0"
                       f"{importlib.util.MAGIC_NUMBER.hex()}\0{pass_hook}\0{fn}\0".encode())
    h.update(source)
    return h.hexdigest()


def install() -> bool:
    """Wrap pytest's ``_pytest.assertion.rewrite._rewrite_test`` (fn, config) -> (source hash, code) so that a
    rewrite an earlier process stored is read back. Installs only when Python may not write bytecode (otherwise
    pytest keeps its own .pyc) and the cache is enabled; returns whether it installed. pytest's internals are
    checked first: another signature leaves pytest as it is."""
    if not sys.dont_write_bytecode or not _enabled():
        return False
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return False
    original = getattr(rewrite, "_rewrite_test", None)
    if original is None or getattr(original, "__wrapped_by_rewritecache__", False):
        return False

    def _rewrite_test(fn: Path, config) -> tuple[bytes, types.CodeType]:
        try:
            source = Path(fn).read_bytes()
            pass_hook = bool(config.getini("enable_assertion_pass_hook")) if config is not None else False
        except (OSError, ValueError):
            return original(fn, config)
        folder = _folder()
        path = folder / f"{_key(Path(fn), source, pass_hook)}.code"
        try:
            if hasattr(os, "getuid") and folder.stat().st_uid != os.getuid():
                return original(fn, config)
        except OSError:
            pass
        try:
            co = marshal.loads(path.read_bytes())
            if isinstance(co, types.CodeType):
                return importlib.util.source_hash(source), co
        except Exception:   # absent, truncated or unreadable: rewrite as if never stored
            pass
        source_hash, co = original(fn, config)
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps(co))
            os.replace(tmp, path)   # whole or not at all: both workers may store the same module at once
        except (OSError, ValueError):
            pass
        return source_hash, co

    _rewrite_test.__wrapped_by_rewritecache__ = True
    _rewrite_test.__wrapped__ = original
    rewrite._rewrite_test = _rewrite_test
    return True
