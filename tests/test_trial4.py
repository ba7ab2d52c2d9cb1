"""What a new user's fourth trial found (issue #21, /tmp/briefs8/trial4_report.md), each fixed as a kind.

1. A release the user states that is older than the catalogue (0.6.3 < 0.8.0) is never judged as 0.8.0: the report
   says the keys are not judged for it, and no rename or removal error (``cache_path`` "last accepted in v0.6")
   nor a fix to a key that release lacks (``tokenized_path``) is made.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config.lfrelease import choose

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial4"


def _run(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(main, [*args, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def test_a_release_before_the_catalogue_is_not_replaced():
    rel = choose("0.6.3", "--llamafactory")
    assert rel.older and rel.given == "0.6.3"
    assert rel.note == "the doctor knows LLaMA-Factory releases from 0.8.0; keys are not judged for 0.6.3"
    assert not choose("0.8.0").older and not choose("0.9.2.dev0").older


def test_stated_063_gets_no_rename_error_and_no_fix_to_a_key_it_lacks():
    case = FX / "galore_train_bash_063"
    for cmd in (("check", str(case / "config.yaml"), "--launch", str(case / "cmdline.txt")),
                ("lint", str(case / "config.yaml"))):
        _, rep = _run(*cmd, "--llamafactory", "0.6.3")
        names = {f["name"] for f in rep["findings"]}
        assert "renamed-key" not in names and "unknown-key" not in names, names
        assert "tokenized_path" not in json.dumps([f.get("fix") for f in rep["findings"]])
        assert any("keys are not judged for 0.6.3" in n for n in rep["notes"]), rep["notes"]
        assert not [a for a in rep["assumptions"] if a["name"] == "lf-version"]
    # without the version, every catalogued release renamed the key: the error stands (0.8.0 ... main)
    _, rep = _run("lint", str(case / "config.yaml"))
    assert "renamed-key" in {f["name"] for f in rep["findings"]}
