"""The remedy planners are imported on the first finding that needs one (issue #22): a lint with no such finding
does not import engine/planners.py, and a finding whose fix a planner computes gets it as before."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "fixtures" / "llamafactory" / "examples" / "train_lora" / "qwen3_lora_sft.yaml"
FULL = ROOT / "fixtures" / "llamafactory" / "examples" / "train_full" / "qwen3_full_sft.yaml"

CODE = """
import io, json, sys
from finetune_doctor import lintcli
sys.stdout = io.StringIO()
try:
    lintcli.main(["--format", "json", *sys.argv[1:]])
except SystemExit:
    pass
report = sys.stdout.getvalue()
sys.stdout = sys.__stdout__
print(json.dumps({"planners": "finetune_doctor.engine.planners" in sys.modules,
                                "report": json.loads(report)}))
"""


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    """One cache folder for the module's two lints, away from the user's: the first (no planner) runs with an
    empty cache and writes the rule pack, the second (a planner) reads it, so both of the loader's paths are
    taken; a folder per test parsed the ~150 rule files in each child (~2 CPU s each, 2026-12-07)."""
    return tmp_path_factory.mktemp("xdg")


def _lint(tmp_path, cache_home, *files):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FINETUNE_DOCTOR_LINT_JOBS": "1", "XDG_CACHE_HOME": str(cache_home)}
    out = subprocess.run([sys.executable, "-c", CODE, *map(str, files)], env=env, capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    return json.loads(out.stdout)


def test_a_lint_without_planned_fixes_imports_no_planner(tmp_path, cache_home):
    got = _lint(tmp_path, cache_home, CONFIG)
    assert got["report"]["findings"] == []
    assert got["planners"] is False


def test_a_planned_fix_still_gets_its_planner(tmp_path, cache_home):
    fp32 = tmp_path / "fp32.yaml"
    # a full fine-tuning with no precision flag: accidental-fp32, whose fix the fit-precision planner computes
    fp32.write_text(FULL.read_text().replace("bf16: true\n", ""))
    got = _lint(tmp_path, cache_home, fp32)
    fd101 = [f for f in got["report"]["findings"] if f["code"] == "FD101"]
    assert len(fd101) == 1 and got["planners"] is True
    fix = fd101[0]["fix"]
    assert fix["title"] == "enable bf16 mixed precision" and fix["edits"][0]["key"] == "bf16"
    effect = fix["effect"]
    assert effect["total_gib_after"] < effect["total_gib_before"]
