"""Every real case in fixtures/cases runs through `doctor check` in text and JSON; where its known cause is
visible in the config, the matching finding is among the results (fixtures/cases/expected.yaml says which, and
says why when the cause cannot be seen before launch)."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from casekit import CASES, case_ids, lay_out
from finetune_doctor.cli import main

EXPECTED = YAML(typ="safe").load((CASES / "expected.yaml").read_text())


def test_every_case_has_an_expectation():
    assert sorted(EXPECTED) == case_ids()


@pytest.mark.parametrize("case", case_ids())
def test_case(case, tmp_path, monkeypatch):
    exp = EXPECTED[case]
    cfg = lay_out(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    base = ["check", str(cfg), *exp.get("overrides", []), "--no-data"]
    if exp.get("launch"):   # the launch file the case holds, given as a user gives it (--launch)
        shutil.copy(CASES / case / exp["launch"], tmp_path / "cmdline.txt")
        base += ["--launch", "cmdline.txt"]
    if exp.get("gpu"):
        base += ["--gpu", exp["gpu"]]
    if exp.get("nnodes"):
        base += ["--nnodes", str(exp["nnodes"])]
    for lib in ("torch", "transformers"):   # the versions the user reported, where the case states them
        if exp.get(lib):
            base += [f"--{lib}", str(exp[lib])]
    res = CliRunner().invoke(main, base + ["--format", "json"])
    if exp.get("exit") == 2:
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
        return
    assert res.exit_code in (0, 1), res.output
    report = json.loads(res.output)
    names = {f["name"] for f in report["findings"]}
    assert set(exp.get("expect") or []) <= names, (exp, names)
    assert not (set(exp.get("forbid") or []) & names), names
    assert report["summary"]["error"] + report["summary"]["warning"] + report["summary"]["info"] == len(report["findings"])
    assert res.exit_code == (1 if report["summary"]["error"] else 0)
    # the text report of the same case renders without error
    text = CliRunner().invoke(main, base + ["--format", "text"])
    assert text.exit_code == res.exit_code and "Traceback" not in text.output
