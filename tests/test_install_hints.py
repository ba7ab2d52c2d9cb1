"""Every install line the doctor prints works from this repository (issue 17: `finetune-doctor` on the package
index is an unrelated project, so a hint may name only this project's distribution or the place it came from)."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest

from finetune_doctor import errors

ROOT = Path(__file__).resolve().parent.parent


class _Dist:
    def __init__(self, direct_url: dict | None):
        self._raw = json.dumps(direct_url) if direct_url is not None else None

    def read_text(self, name: str) -> str | None:
        return self._raw if name == "direct_url.json" else None


@pytest.mark.parametrize("direct_url, want", [
    ({"url": "file:///home/me/src/finetune%20doctor", "dir_info": {"editable": True}},
     "pip install '/home/me/src/finetune doctor[plot]'"),
    ({"url": "https://github.com/acme/finetune-doctor.git", "vcs_info": {"vcs": "git", "commit_id": "ab12"}},
     "pip install 'lf-finetune-doctor[plot] @ https://github.com/acme/finetune-doctor.git'"),
    (None, "pip install 'lf-finetune-doctor[plot]'"),
])
def test_the_hint_names_where_this_installation_came_from(monkeypatch, direct_url, want):
    monkeypatch.setattr(metadata, "distribution", lambda name: _Dist(direct_url))
    assert errors.install_hint("plot") == want
    assert str(errors.MissingExtra("--plot", "plot")) == f"--plot needs the 'plot' extra: {want}"


def test_the_distribution_name_is_the_one_pyproject_declares():
    name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert name == errors.DISTRIBUTION != "finetune-doctor"


def test_no_message_names_the_unrelated_package():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "finetune_doctor").rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if "finetune-doctor[" in line]
    assert hits == []
