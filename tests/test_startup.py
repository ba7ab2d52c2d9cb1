"""startup.py: the dataclass methods compiled once and cached give the same classes as dataclasses alone."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from finetune_doctor import startup

ROOT = Path(__file__).resolve().parent.parent


def _make():
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: float = 0.5
        tags: tuple = dataclasses.field(default_factory=tuple, compare=False)

    return Point


def test_cached_exec_builds_the_same_class(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE", raising=False)
    plain = _make()
    startup.install()
    try:
        cached = _make()
        assert dataclasses.exec is startup._exec
    finally:
        startup.uninstall()
    assert not hasattr(dataclasses, "exec")
    p, q = plain(1), cached(1)
    assert repr(p) == repr(q) and repr(q).endswith("Point(x=1, y=0.5, tags=())")
    assert q == cached(1, 0.5, ("other",)) and hash(q) == hash(cached(1)) and q != cached(2)
    # the generated __init__'s annotations are objects, as without the cache (no __future__ flag inherited)
    assert cached.__init__.__annotations__ == plain.__init__.__annotations__
    try:
        q.x = 3
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("frozen")
    assert dataclasses.replace(q, x=5).x == 5 and [f.name for f in dataclasses.fields(q)] == ["x", "y", "tags"]


def test_cache_file_is_written_and_read_back(tmp_path):
    """A second process finds every method source in the file and compiles none."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FINETUNE_DOCTOR_NO_CACHE", None)
    code = ("from finetune_doctor import startup; startup.install()\n"
            "import finetune_doctor.types, finetune_doctor.run.model\n"
            "print(startup._NEW); startup.save()\n")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(first.stdout) > 20
    assert len(list((tmp_path / "finetune-doctor").glob("dataclass-code-*.marshal"))) == 1
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(second.stdout) == 0
    off = subprocess.run([sys.executable, "-c", code], env={**env, "FINETUNE_DOCTOR_NO_CACHE": "1"},
                         capture_output=True, text=True, check=True)
    assert int(off.stdout) == int(first.stdout)
