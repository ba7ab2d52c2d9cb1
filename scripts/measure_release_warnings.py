"""How many `unverified-config-problem` (FD041) and release-range findings `doctor lint` gives per LLaMA-Factory
example training YAML when no LLaMA-Factory version is given and none is installed (issue #21: a hook that warns on
every file teaches users to ignore it).

Usage: python scripts/measure_release_warnings.py DIR [DIR ...]
Reads every ``*.yaml`` under each DIR that sets ``do_train: true``, runs ``lint --format json`` in-process with the
installed-llamafactory lookup disabled (readers/config/lfrelease.installed_version -> None), and prints, per DIR:
files, FD041 findings per file, files with any, findings of the other release-range rule, and the ``lf-version``
assumption values seen. Not a test: a measurement for the issue note.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config import lfrelease

RANGE_RULES = ("unverified-config-problem", "keys-of-no-one-release")


def measure(root: Path) -> dict:
    lfrelease.installed_version = lambda: None   # "no LF installed": the venv carries one for the oracle tests
    files = sorted(p for p in root.rglob("*.yaml") if "do_train: true" in p.read_text(encoding="utf-8"))
    per_rule: Counter = Counter()
    with_any = 0
    values: Counter = Counter()
    for p in files:
        res = CliRunner().invoke(main, ["lint", "--format", "json", str(p)])
        rep = json.loads(res.output)
        names = [f["name"] for f in rep["findings"] if f["name"] in RANGE_RULES]
        per_rule.update(names)
        with_any += bool(names)
        for a in rep.get("assumptions") or []:
            if a.get("name") == "lf-version":
                values[a.get("value")] += 1
    n = len(files)
    return {"dir": str(root), "files": n, "files_with_any": with_any,
            **{f"{r}_per_file": round(per_rule[r] / n, 2) if n else 0 for r in RANGE_RULES},
            "lf_version_assumed": dict(values)}


if __name__ == "__main__":
    for d in sys.argv[1:]:
        print(json.dumps(measure(Path(d))))
