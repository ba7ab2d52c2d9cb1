"""The parity corpus and an oracle's verdicts on it, for tests/test_parity_lf.py, test_parity_releases.py and
test_parity_release_090.py.

`corpus_index` writes scripts/gen_parity_corpus.py's corpus once per test process (a pytest-xdist worker that runs
two of those files builds it once; the generator is deterministic, so every worker's copy is the same corpus).
`oracle_verdicts` asks one LLaMA-Factory release about every config of it in one child process
(tests/parity/release_oracle.py): LF and transformers are imported once per corpus, and LF's patches of
transformers (oracle.py `_lf`) stay out of the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
_BUILT: dict[str, list[dict[str, Any]]] = {}


def corpus_index(tmp_path_factory: Any) -> list[dict[str, Any]]:
    """scripts/gen_parity_corpus.py's index (one dict per config: id, source, keys, config, cwd), written under
    the session's temporary folder the first time a test of this process asks for it."""
    if "index" not in _BUILT:
        sys.path.insert(0, str(ROOT / "scripts"))
        import gen_parity_corpus

        _BUILT["index"] = gen_parity_corpus.build(tmp_path_factory.mktemp("parity_corpus"))
    return _BUILT["index"]


def oracle_verdicts(src: Path, index: list[dict[str, Any]], tmp: Path,
                    timeout_s: int = 3000) -> tuple[list[SimpleNamespace] | None, str]:
    """LF's verdict (oracle.py `Verdict` fields) on each entry of `index`, by the release whose ``llamafactory``
    package is in the folder `src`, in one child process. Returns (verdicts in index order, "") or (None, the
    last line the child wrote to stderr) when that release could not run here."""
    verdict_file = tmp / "verdicts.json"
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "parity" / "release_oracle.py"), str(src),
                          str(verdict_file)],
                         input=json.dumps([{"config": e["config"], "cwd": e["cwd"]} for e in index]),
                         capture_output=True, text=True, timeout=timeout_s, check=False,
                         env={**os.environ, "PYTHONPATH": ""})
    if res.returncode != 0:
        return None, " ".join(res.stderr.strip().splitlines()[-1:])
    return [SimpleNamespace(**v) for v in json.loads(verdict_file.read_text(encoding="utf-8"))], ""
