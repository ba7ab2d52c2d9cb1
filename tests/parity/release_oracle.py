"""Another LLaMA-Factory release's v0 parser as the oracle, in a child process: ``python release_oracle.py SRC <
entries.json > verdicts.json``.

SRC is the folder holding that release's ``llamafactory`` package (the snapshot's ``src``); it goes first on
``sys.path`` here only, so the test process keeps the llamafactory it imported. Each entry is ``{"config", "cwd"}``
of scripts/gen_parity_corpus.py's index; each verdict is tests/parity/oracle.py's `Verdict` as a dict.

``DISABLE_VERSION_CHECK=1`` is set before LF is imported: the snapshot's ``check_dependencies`` (extras/misc.py,
run when ``hparams/parser.py`` is imported) refuses transformers 5.6.0, the test extra's pin, although its parser
runs on it; that import-time check says nothing about a config. oracle.py removes the variable again while each
config is parsed, as for the installed release.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path


def main() -> int:
    os.environ["DISABLE_VERSION_CHECK"] = "1"
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from parity.oracle import lf_verdict

    out = []
    for e in json.load(sys.stdin):
        out.append(asdict(lf_verdict(Path(e["config"]), cwd=Path(e["cwd"]))))
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
