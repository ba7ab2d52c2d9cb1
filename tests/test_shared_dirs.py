"""tests/shared_dirs.py is the one search for the shared folder: every test that needs LF's snapshot or the
reference facts asks it, and it answers in the documented order."""

from __future__ import annotations

import re
from pathlib import Path

import shared_dirs

TESTS = Path(__file__).resolve().parent


def test_no_test_searches_for_the_shared_folder_itself() -> None:
    # the search that tests/test_parity_releases.py, test_parity_v1.py and test_lf_today.py each wrote out
    own = re.compile(r'ROOT\.parent\.parent / "shared"|parent\.parent\.parent / "shared"')
    copies = [p.name for p in TESTS.rglob("*.py") if p.name != "shared_dirs.py" and own.search(p.read_text("utf-8"))]
    assert copies == []


def test_places_in_order_clone_worktree_machine() -> None:
    root = TESTS.parent
    assert shared_dirs.PLACES == (root.parent / "shared", root.parent.parent / "shared", Path("/work/shared"))


def test_first_place_holding_the_folder_wins(tmp_path: Path, monkeypatch) -> None:
    a, b = tmp_path / "a" / "shared", tmp_path / "b" / "shared"
    (b / "oracles" / "llamafactory-main" / "src").mkdir(parents=True)
    (a / "oracles").mkdir(parents=True)          # a shared folder without the snapshot does not count
    (a / "reference" / "llamafactory").mkdir(parents=True)
    monkeypatch.setattr(shared_dirs, "PLACES", (a, b))
    assert shared_dirs.shared_dir("oracles", "llamafactory-main", "src") == b
    assert shared_dirs.shared_dir("reference", "llamafactory") == a
    assert shared_dirs.shared_dir("reference", "deepspeed") is None
    (b / "reference" / "deepspeed").parent.mkdir(parents=True)
    (b / "reference" / "deepspeed").write_text("a file, not a folder")
    assert shared_dirs.shared_dir("reference", "deepspeed") is None
