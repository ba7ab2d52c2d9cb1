"""Per-process memos on the lint path (issue #22) give the answers the uncached lookups give, and notice changes
to the file system that matter: the HF-layout lookup, the resolved folder of a file, the project configuration."""

from __future__ import annotations

from pathlib import Path

from finetune_doctor import fsutil
from finetune_doctor.projectconfig import _find, find_project_config
from finetune_doctor.readers.model import caches


def _snapshot(root: Path, repo: str, rev: str) -> Path:
    snap = root / ("models--" + repo.replace("/", "--")) / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "llama"}')
    return snap / "config.json"


def test_hf_layout_lookup_sees_a_download_made_after_a_miss(tmp_path):
    root = tmp_path / "hub"
    root.mkdir()
    assert caches.hf_layout_config("org/model-a", [root]) is None
    assert caches.hf_layout_config("org/model-a", [root]) is None   # the kept miss
    made = _snapshot(root, "org/model-a", "abc")   # a download after the miss: a new folder in the root
    assert caches.hf_layout_config("org/model-a", [root]) == made


def test_hf_layout_lookup_sees_a_new_snapshot_and_a_removed_file(tmp_path):
    root = tmp_path / "hub"
    (root / "models--org--model-b" / "snapshots").mkdir(parents=True)
    assert caches.hf_layout_config("org/model-b", [root]) is None
    first = _snapshot(root, "org/model-b", "r1")   # a snapshot added inside an existing repository folder
    assert caches.hf_layout_config("org/model-b", [root]) == first
    first.unlink()   # the found file is gone: looked up again, not returned from the memo
    assert caches.hf_layout_config("org/model-b", [root]) is None
    # the case-insensitive match of the folder name still answers
    other = _snapshot(root, "Org/Model-C", "r1")
    assert caches.hf_layout_config("org/model-c", [root]) == other


def test_real_parent_follows_a_linked_file_and_a_linked_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.yaml").write_text("x: 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.yaml").symlink_to(real / "a.yaml")   # the file is a link: its target's folder
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)   # the folder is a link
    assert fsutil.real_parent(str(elsewhere / "b.yaml")) == real.resolve()
    assert fsutil.real_parent(str(tmp_path / "alias" / "a.yaml")) == real.resolve()
    assert fsutil.real_parent(str(elsewhere / "missing.yaml")) == elsewhere.resolve()
    for p in (elsewhere / "b.yaml", tmp_path / "alias" / "a.yaml", elsewhere / "missing.yaml"):
        assert fsutil.real_parent(str(p)) == Path(p).resolve().parent


def test_project_config_of_nested_folders_comes_from_the_nearest(tmp_path):
    top = tmp_path / "proj"
    deep = top / "a" / "b"
    deep.mkdir(parents=True)
    (top / "pyproject.toml").write_text('[tool.finetune-doctor]\nfail-on = "warning"\n')
    (top / "a" / ".finetune-doctor.toml").write_text('fail-on = "never"\n')
    _find.cache_clear()
    try:
        got = find_project_config(str(deep / "x.yaml"))
        assert (got["fail-on"], got["__file__"]) == ("never", str((top / "a" / ".finetune-doctor.toml").resolve()))
        got = find_project_config(str(top / "y.yaml"))
        assert (got["fail-on"], got["__file__"]) == ("warning", str((top / "pyproject.toml").resolve()))
        # a pyproject.toml without the tool table does not stop the search
        (deep / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        _find.cache_clear()
        assert find_project_config(str(deep / "x.yaml"))["fail-on"] == "never"
    finally:
        _find.cache_clear()
