"""tests/rewritecache.py: a rewritten test module is read back only for the same bytes and path, equal to pytest's
own rewrite, and a broken store rewrites."""

from __future__ import annotations

import sys
import tempfile

import pytest
from _pytest.assertion import rewrite

import rewritecache


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """pytest's own rewrite behind a counter, wrapped by rewritecache with its store in `tmp_path`."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.delenv("FINETUNE_DOCTOR_TEST_PARSE_CACHE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    real = getattr(rewrite._rewrite_test, "__wrapped__", None) or rewrite._rewrite_test
    calls = []

    def original(fn, config):
        calls.append(fn)
        return real(fn, config)

    monkeypatch.setattr(rewrite, "_rewrite_test", original)
    assert rewritecache.install()
    return calls


def test_a_stored_rewrite_is_pytests_own_and_an_edit_rewrites(counted, tmp_path, pytestconfig):
    fn = tmp_path / "test_x.py"
    fn.write_text("def test_a():\n    x = [1, 2]\n    assert x == [1, 3]\n", encoding="utf-8")
    first = rewrite._rewrite_test(fn, pytestconfig)
    second = rewrite._rewrite_test(fn, pytestconfig)
    assert len(counted) == 1                                     # the second came from the store
    assert first == second                                       # code objects compare by value
    func = next(c for c in first[1].co_consts if hasattr(c, "co_varnames"))
    assert "@py_assert1" in func.co_varnames                     # the assert was rewritten, not plain
    fn.write_text("def test_a():\n    assert 1 == 2\n", encoding="utf-8")
    rewrite._rewrite_test(fn, pytestconfig)
    assert len(counted) == 2
    other = tmp_path / "sub" / "test_x.py"                       # same bytes, another path: its own code object
    other.parent.mkdir()
    other.write_bytes(fn.read_bytes())
    assert rewrite._rewrite_test(other, pytestconfig)[1].co_filename == str(other)
    assert len(counted) == 3


def test_a_truncated_store_rewrites(counted, tmp_path, pytestconfig):
    fn = tmp_path / "test_y.py"
    fn.write_text("def test_b():\n    assert 1\n", encoding="utf-8")
    rewrite._rewrite_test(fn, pytestconfig)
    for stored in (tmp_path / "tmp").rglob("*.code"):
        stored.write_bytes(b"\xe3\x00")
    assert rewrite._rewrite_test(fn, pytestconfig)[1].co_filename == str(fn)
    assert len(counted) == 2


def test_nothing_is_installed_where_python_may_write_bytecode(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert rewritecache.install() is False
