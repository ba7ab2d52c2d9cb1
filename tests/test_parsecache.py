"""tests/parsecache.py: a stored parse is handed back only for the same kind and bytes, and a broken store parses."""

from __future__ import annotations

import os
import tempfile

import pytest

import parsecache


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv("FINETUNE_DOCTOR_TEST_PARSE_CACHE", raising=False)
    return tmp_path


def test_a_second_process_reads_the_stored_value_and_an_edit_parses_again(store):
    calls = []

    def build(v):
        return lambda: calls.append(v) or {"v": v}

    assert parsecache.cached("k", ["a: 1"], build(1)) == {"v": 1}
    assert parsecache.cached("k", ["a: 1"], build(2)) == {"v": 1}          # stored: build not called
    assert parsecache.cached("k", ["a: 2"], build(3)) == {"v": 3}          # other bytes
    assert parsecache.cached("other", ["a: 1"], build(4)) == {"v": 4}      # other parser
    assert parsecache.cached("k", ["a: ", "1"], build(5)) == {"v": 5}      # same bytes, split otherwise
    assert calls == [1, 3, 4, 5]


def test_a_truncated_store_parses_and_is_replaced(store):
    assert parsecache.cached("k", ["x"], lambda: [1, 2]) == [1, 2]
    (stored,) = list(parsecache._folder().glob("*.pickle"))
    stored.write_bytes(stored.read_bytes()[:3])
    assert parsecache.cached("k", ["x"], lambda: [3]) == [3]
    assert parsecache.cached("k", ["x"], lambda: [4]) == [3]


def test_off_switch_and_a_folder_of_another_owner_parse_every_time(store, monkeypatch):
    parsecache.cached("k", ["x"], lambda: "stored")
    monkeypatch.setenv("FINETUNE_DOCTOR_TEST_PARSE_CACHE", "0")
    assert parsecache.cached("k", ["x"], lambda: "fresh") == "fresh"
    monkeypatch.delenv("FINETUNE_DOCTOR_TEST_PARSE_CACHE")
    folder, uid = parsecache._folder(), os.getuid()
    monkeypatch.setattr(parsecache, "_folder", lambda: folder)          # the same folder, under another user
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    assert parsecache.cached("k", ["x"], lambda: "fresh") == "fresh"
    monkeypatch.setattr(os, "getuid", lambda: uid)
    assert parsecache.cached("k", ["x"], lambda: "fresh") == "stored"   # nor was it written over


def test_ruamel_load_equals_ruamel_itself(store):
    from ruamel.yaml import YAML

    text = "a: 1.0e-5\nb: [yes, no, 0o17]\nc: 2024-01-02\nd: ~\n"
    want = YAML(typ="safe", pure=True).load(text)
    assert parsecache.ruamel_safe_load(text) == want
    assert parsecache.ruamel_safe_load(text) == want                      # read back from the store
