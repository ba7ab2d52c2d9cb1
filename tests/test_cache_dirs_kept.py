"""The folders kept per process (issue #22) follow the variables that decide them."""

from pathlib import Path

from finetune_doctor import fsutil
from finetune_doctor.readers.model.caches import hub_cache_dirs


def test_hub_cache_dirs_follow_the_environment(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "a"))
    first = hub_cache_dirs()
    assert first == [tmp_path / "a" / ".cache" / "huggingface" / "hub"]
    first.append(Path("/elsewhere"))   # a caller's list is its own
    assert hub_cache_dirs() == [tmp_path / "a" / ".cache" / "huggingface" / "hub"]
    monkeypatch.setenv("HOME", str(tmp_path / "b"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dirs(cache_dir="~/c") == [tmp_path / "b" / "c", tmp_path / "hf" / "hub",
                                               tmp_path / "b" / ".cache" / "huggingface" / "hub"]
    assert hub_cache_dirs(env={"HF_HUB_CACHE": "/x"})[0] == Path("/x")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert fsutil.cache_dir() == tmp_path / "x" / "finetune-doctor"
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_CACHE", "1")
    assert fsutil.cache_dir() is None
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert fsutil.cache_dir() == tmp_path / "h" / ".cache" / "finetune-doctor"
