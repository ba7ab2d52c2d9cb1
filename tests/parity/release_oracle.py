"""Another LLaMA-Factory release's v0 parser as the oracle, in a child process: ``python release_oracle.py SRC OUT <
entries.json`` writes the verdicts to OUT (LF logs to stdout, so stdout is not the channel).

SRC is the folder holding that release's ``llamafactory`` package (the snapshot's ``src``, or a ``pip install
--no-deps --target`` folder of a published release with the transformers/peft/trl/accelerate/datasets it pins,
.ci/run); it goes first on
``sys.path`` here only, so the test process keeps the llamafactory it imported. Each entry is ``{"config", "cwd"}``
of scripts/gen_parity_corpus.py's index; each verdict is tests/parity/oracle.py's `Verdict` as a dict.

``DISABLE_VERSION_CHECK=1`` is set before LF is imported: the snapshot's ``check_dependencies`` (extras/misc.py,
run when ``hparams/parser.py`` is imported) refuses transformers 5.6.0, the test extra's pin, although its parser
runs on it; that import-time check says nothing about a config. oracle.py removes the variable again while each
config is parsed, as for the installed release.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path


def main() -> int:
    # LF's check_version (transformers' require_version) asks importlib.metadata for a package's version at every
    # config, 12 % of a verdict (cProfile, 2026-12-07); nothing installs a package while this process runs, so a
    # version found once is the version. A package not found is looked up again (lru_cache keeps no exception).
    importlib.metadata.version = functools.lru_cache(maxsize=None)(importlib.metadata.version)
    os.environ["DISABLE_VERSION_CHECK"] = "1"
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from parity.oracle import lf_verdict

    out = []
    for e in json.load(sys.stdin):
        out.append(asdict(lf_verdict(Path(e["config"]), cwd=Path(e["cwd"]))))
    Path(sys.argv[2]).write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
