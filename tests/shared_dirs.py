"""Where the project's shared folder is: the LLaMA-Factory snapshot the parity oracles run
(``oracles/llamafactory-main``) and the reference facts (``reference/``).

CI clones the repository beside ``shared/`` (README, Development); a git worktree sits one level deeper
(``wt/<name>`` beside ``shared/``); the machine this project is built on keeps it at /work/shared. One search for
every test that needs it, so that the order and the places stay the same everywhere (tests/test_shared_dirs.py).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLACES = (ROOT.parent / "shared", ROOT.parent.parent / "shared", Path("/work/shared"))


def shared_dir(*parts: str) -> Path | None:
    """The first of PLACES whose ``parts`` (joined, e.g. ``"oracles", "llamafactory-main", "src"``) is a folder;
    None when none is."""
    return next((p for p in PLACES if p.joinpath(*parts).is_dir()), None)
