"""Every command's text output fits the terminal (issue 26): at 80 and 120 columns (``COLUMNS``, as a pipe
gets it) no line is wider, no number is cut (``1,0…`` for 1,090) and no word of a finding is cut (``OO|M``).

The inputs are the README's own runs. Not golden files: the wording of the reports changes with every rule, so
each output is checked for the properties instead — width, whole numbers, and every word of every finding
message and fix title (taken from the same command's JSON report) present whole in the text.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = "fixtures/quickstart/llama7b_full_zero2_v100.yaml"
COMMANDS = {
    "check": ["check", QUICK, "optim=adamw_torch", "--gpu", "8xV100-32GB", "--offline"],
    "check-moe": ["check", "fixtures/cases/023/config.yaml", "--gpu", "4090", "--offline"],
    "estimate": ["estimate", QUICK, "--gpu", "8xV100-32GB", "--offline", "--sweep",
                 "deepspeed=examples/deepspeed/ds_z2_config.json,examples/deepspeed/ds_z3_config.json"],
    "lint": ["lint", "fixtures/llamafactory/examples/"],
    "postmortem": ["postmortem", "fixtures/postmortem/case_041"],
    "gpus": ["gpus", "--from", "fixtures/gpus/node0.jsonl", "fixtures/gpus/node1.jsonl"],
    "data": ["data", "configs/qwen_lora_sft.yaml", "--approximate", "--offline"],
    "rules": ["rules"],
    "explain": ["explain", "predicted-oom"],
}
CWD = {"data": ROOT / "fixtures" / "data"}
CUT_NUMBER = re.compile(r"\d…|…\d")


def _invoke(args: list[str], name: str, columns: int):
    old = os.getcwd()
    os.chdir(CWD.get(name, ROOT))
    try:
        return CliRunner().invoke(main, args, env={"COLUMNS": str(columns), "FINETUNE_DOCTOR_NO_NVML": "1",
                                                   "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"})
    finally:
        os.chdir(old)


def _words(report: dict) -> set[str]:
    out: set[str] = set()
    for f in report.get("findings", []):
        texts = [f.get("message") or ""]
        if f.get("fix"):
            texts.append(f["fix"].get("title") or "")
            texts += [a.get("title") or "" for a in f["fix"].get("alternatives") or []]
        for t in texts:
            out.update(w for w in t.split() if len(w) < 60)
    return out


def _one_link(line: str) -> bool:
    body = line.strip().removeprefix("- ").strip()
    return " " not in body and "://" in body


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_text_output_fits_the_terminal(name, columns):
    res = _invoke(COMMANDS[name], name, columns)
    assert res.exit_code in (0, 1), res.output
    text = res.output
    assert text.strip()
    for line in text.splitlines():
        assert len(line) <= columns or _one_link(line), f"{len(line)} > {columns}: {line!r}"
        assert not CUT_NUMBER.search(line), f"cut number: {line!r}"
        for tok in line.split():
            # an ellipsis ends a cut word; the gpus section shortens long command lines in the middle on purpose
            # (the whole command is in --format json), which is a path, not a word of the report
            assert not re.search(r"\w…$", tok) or "/" in tok, f"cut word {tok!r}: {line!r}"
    if name in ("rules", "explain", "gpus"):
        return
    report = json.loads(_invoke([*COMMANDS[name], "--format", "json"], name, columns).output)
    tokens = set(text.split())
    missing = sorted(w for w in _words(report) if w not in tokens)
    assert not missing, f"words cut or lost at {columns} columns: {missing[:10]}"


def test_every_rule_explained_fits_80_columns():
    from finetune_doctor.engine.loader import load_rules

    for rule in load_rules([]):
        res = _invoke(["explain", rule.code], "explain", 80)
        assert res.exit_code == 0, res.output
        fenced = False
        for line in res.output.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if not fenced:
                assert len(line) <= 80 or _one_link(line) or line.startswith("#"), (rule.code, line)


def test_columns_wins_over_the_default_when_piped(monkeypatch):
    from finetune_doctor.reporters.wrap import terminal_width

    monkeypatch.setenv("COLUMNS", "80")
    assert terminal_width() == 80
    monkeypatch.setenv("COLUMNS", "not a number")
    assert terminal_width() in range(40, 1001)
    monkeypatch.setenv("COLUMNS", "5")
    assert terminal_width() == 40   # too narrow to lay out a table: the floor


def test_wrapping_keeps_numbers_and_styles_whole():
    from finetune_doctor.reporters.wrap import wrap_pieces

    lines = wrap_pieces([("fix", "bold green"), (" (safe): predicted OOM at 1,090 samples on 8 cards", None)],
                        24, "  ", "    ")
    flat = ["".join(t for t, _ in ln) for ln in lines]
    assert all(len(x) <= 24 for x in flat)
    assert " ".join(x.strip() for x in flat) == "fix (safe): predicted OOM at 1,090 samples on 8 cards"
    assert lines[0][1] == ("fix", "bold green")
