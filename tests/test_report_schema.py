"""Every command's ``--format json`` report validates against the JSON Schema the repository ships
(finetune_doctor/schema/report-v1.json, named by the report's ``schema`` key) — issue 26.

The inputs are the README's runs plus the states that add optional keys: ``check --fix`` (``fixes``), an
estimate sweep (``sweep``, ``breakdown``), a postmortem (``timeline``), recorded GPUs (``gpus``, source ``record``),
a data scan (``data``), a lint of a directory and of standard input, and a simulate probe (slow: torch).
`doctor rules --format json` and `lint --statistics` print other shapes (a catalogue, a count table), not reports.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
QUICK = "fixtures/quickstart/llama7b_full_zero2_v100.yaml"
RUNS = {
    "check": ["check", QUICK, "optim=adamw_torch", "--gpu", "8xV100-32GB", "--offline"],
    "check-no-gpu": ["check", "fixtures/cases/023/config.yaml", "--offline", "--no-data"],
    "check-awq": ["check", "fixtures/cases/055/config.yaml", "--gpu", "4090", "--offline", "--no-data"],
    "estimate-sweep": ["estimate", QUICK, "--gpu", "8xV100-32GB", "--offline", "--sweep",
                       "deepspeed=examples/deepspeed/ds_z2_config.json,examples/deepspeed/ds_z3_config.json"],
    "lint-dir": ["lint", "fixtures/llamafactory/examples/"],
    "postmortem": ["postmortem", "fixtures/postmortem/case_041"],
    "gpus-record": ["gpus", "--from", "fixtures/gpus/node0.jsonl", "fixtures/gpus/node1.jsonl"],
    "data": ["data", "configs/qwen_lora_sft.yaml", "--approximate", "--offline"],
}
CWD = {"data": ROOT / "fixtures" / "data"}


@pytest.fixture(scope="module")
def validator():
    from finetune_doctor.reporters.json import SCHEMA, load_schema

    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == SCHEMA == schema["properties"]["schema"]["const"]
    return jsonschema.Draft202012Validator(schema)


def _json(args: list[str], cwd: Path = ROOT, stdin: bytes | None = None) -> dict:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(main, [*args, "--format", "json"], input=stdin,
                                 env={"FINETUNE_DOCTOR_NO_NVML": "1", "HF_HUB_OFFLINE": "1"})
    finally:
        os.chdir(old)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


def _errors(validator, report: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(report)]


@pytest.mark.parametrize("name", list(RUNS))
def test_report_validates(validator, name):
    report = _json(RUNS[name], CWD.get(name, ROOT))
    assert report["schema"] == "finetune-doctor/report/v1"
    assert _errors(validator, report) == []


def test_lint_of_stdin_validates(validator):
    text = (ROOT / "fixtures/llamafactory/examples/train_lora/qwen3_lora_sft.yaml").read_text()
    report = _json(["lint", "-", "--stdin-filename", "qwen.yaml"], stdin=text.replace("learning_rate", "lr").encode())
    assert report["findings"] and _errors(validator, report) == []


def test_check_fix_report_validates(validator, tmp_path):
    for f in (ROOT / "fixtures" / "quickstart").iterdir():
        shutil.copy2(f, tmp_path / f.name)
    cfg = tmp_path / "llama7b_full_zero2_v100.yaml"
    cfg.write_text(cfg.read_text() + "dpo_beta: 0.1\n")
    report = _json(["check", str(cfg), "--gpu", "8xV100-32GB", "--offline", "--no-data", "--fix"])
    assert report["fixes"]["fixed"] == 1 and _errors(validator, report) == []


def test_the_schema_rejects_what_it_should(validator):
    report = _json(RUNS["check"])
    bad = json.loads(json.dumps(report))
    bad["findings"][0]["severity"] = "fatal"
    del bad["summary"]
    bad["memory"]["p_oom"] = 1.5
    errors = _errors(validator, bad)
    assert len(errors) == 3, errors
    # additions the contract allows: new sections, token_budget, assumptions as Assumption.as_dict gives them
    ok = json.loads(json.dumps(report))
    ok["new_section"] = {"anything": [1, 2]}
    ok["memory"]["token_budget"] = {"cutoff_len": 8192, "eval": None,
                                    "train": {"tokens_per_sample": 2048, "tokens_per_micro_batch": 4096,
                                              "micro_batch": 2, "fits_at_cutoff": False}}
    ok["assumptions"] = [{"name": "sample-lengths", "value": 2048, "source": "cutoff_len", "alternatives": [512],
                          "effect": {"total_gib": {"512": 20.5}, "verdict": {"512": "fits"}},
                          "resolve_with": "doctor data", "moves_verdict": True}]
    assert _errors(validator, ok) == []


@pytest.mark.slow
def test_probe_report_validates(validator, tmp_path):
    pytest.importorskip("torch")
    from casekit import lay_out

    cfg = lay_out("020", tmp_path)
    report = _json(["probe", str(cfg), "--gpu", "8xV100-16GB", "--mode", "simulate"], cwd=tmp_path)
    assert report["command"] == "probe" and _errors(validator, report) == []
