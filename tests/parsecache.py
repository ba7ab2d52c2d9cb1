"""Parses of large, unchanging test inputs kept on disk between test processes, keyed by the exact bytes parsed.

ruamel.yaml's pure-Python parser (the C extension ruamel.yaml.clib is not a dependency) reads ~0.35 MB/CPU s here:
the calibration rows (benchmarks/data/calibration_rows*.yaml, 1.2 MB) cost 3-4 CPU s a parse, and the rule pack and
the rule cases, which test_rule_registry.py and test_rule_cases.py parse while they are collected, ~1.2 CPU s in
every pytest-xdist worker (each worker collects every file). A parse is a pure function of the text and the parser,
so its result is stored once (pickle) and read back by later processes, as Python keeps bytecode: the key is the
SHA-256 of the text, the parser's name and version, and the Python version, so an edited file, another ruamel or
another interpreter parses again. A store that cannot be read or written (read-only disk, a truncated file) is the
same as no store: the test parses. Callers copy what they change; the value handed back is theirs alone.

Set FINETUNE_DOCTOR_TEST_PARSE_CACHE=0 to parse every time.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _folder() -> Path:
    # per user: another account's files are never read back (a pickle is code to whoever wrote it)
    uid = os.getuid() if hasattr(os, "getuid") else "u"
    return Path(tempfile.gettempdir()) / f"finetune-doctor-test-parses-{uid}"


def _enabled() -> bool:
    return os.environ.get("FINETUNE_DOCTOR_TEST_PARSE_CACHE", "1") != "0"


def cached(kind: str, texts: Iterable[str | bytes], build: Callable[[], T]) -> T:
    """`build()`, or the value an earlier process stored for the same `kind` (a name for the parse and its parser,
    with the parser's version in it) and the same `texts` (every input the parse reads, in order). Raises what
    `build` raises; a store that fails is skipped silently (the value is then simply not kept)."""
    h = hashlib.sha256(f"{kind}\0{sys.version}\0".encode())
    for t in texts:
        b = t.encode("utf-8") if isinstance(t, str) else t
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    if not _enabled():
        return build()
    folder = _folder()
    path = folder / f"{h.hexdigest()}.pickle"
    try:
        if hasattr(os, "getuid") and folder.stat().st_uid != os.getuid():
            return build()   # a folder someone else made: neither read nor write there
    except OSError:
        pass
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:   # absent, truncated or unreadable: parse as if never stored
        pass
    value = build()
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, path)   # whole or not at all: two workers may store the same parse at once
    except OSError:
        pass
    return value


def ruamel_safe_load(text: str, pure: bool = True) -> Any:
    """``YAML(typ="safe", pure=pure).load(text)``, stored by `cached` (ruamel's version is part of the key)."""
    import ruamel.yaml
    from ruamel.yaml import YAML

    return cached(f"ruamel-safe-pure={pure}-{ruamel.yaml.__version__}", [text],
                  lambda: YAML(typ="safe", pure=pure).load(text))


def calibration_rows(calib_data: Any) -> list[dict[str, Any]]:
    """``calib_data.load_rows()`` (benchmarks/calib_data.py), stored by `cached`: the key holds calib_data.py's own
    source and every ``calibration_rows*.yaml`` beside its main data file (a superset of what load_rows reads, so
    an added, edited or removed row file parses again, as does any change to how load_rows reads them)."""
    import ruamel.yaml

    files = sorted(Path(calib_data.ROWS).parent.glob("calibration_rows*.yaml"))
    texts = [Path(calib_data.__file__).read_bytes()]
    for p in files:
        texts += [str(p.name), p.read_bytes()]
    return cached(f"calib_data.load_rows-{ruamel.yaml.__version__}", texts, calib_data.load_rows)
