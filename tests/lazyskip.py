"""Skip a test module when a package cannot be imported, asked when its first test runs instead of at collection.

``pytest.importorskip`` at module level imports the package while the file is collected, and every
pytest-xdist worker collects every file (README, Development: ``-n auto --dist loadfile``), so a package only a
few tests need was imported by both workers even in the fast lane, where those tests are deselected: peft costs
3.9 CPU s per process here (``import torch, transformers`` 3.2 s, with peft 7.2 s, load 4.6, 2026-12-07). Asked by
a module fixture, it is imported by the one worker that runs the file, and not at all when its tests are
deselected. Same outcome as before: the whole module is skipped when the import fails.
"""

from __future__ import annotations

import pytest


def importorskip_when_run(*modules: str, bind: dict | None = None):
    """A module-scoped autouse fixture that calls ``pytest.importorskip`` on each of `modules` before the first
    test of the module that assigns it (``_needs = importorskip_when_run("peft")``) runs. With `bind` (the test
    module's ``globals()``), each imported module is also bound there under its own name (``torch``), for test
    bodies that name it; the module declares that name as ``None`` beside the call so readers and linters see it.
    11 test modules imported torch and transformers at collection (module-level importorskip): ~2 CPU s in each
    pytest-xdist worker, also in one that runs none of their tests (issue #22, 2026-12-07, tests/conftest.py's
    `_TORCH_FILES` keeps those files on one worker)."""

    @pytest.fixture(scope="module", autouse=True)
    def _importable() -> None:
        for name in modules:
            mod = pytest.importorskip(name)
            if bind is not None and "." not in name:
                bind[name] = mod

    return _importable
