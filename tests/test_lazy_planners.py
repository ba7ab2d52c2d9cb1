"""The remedy planners are imported on the first finding that needs one (issue #22): a lint with no such finding
does not import engine/planners.py, and a finding whose fix a planner computes gets it as before."""

import json
import os
import subprocess
import sys
from pathlib import Path

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


def _lint(tmp_path, *files):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FINETUNE_DOCTOR_LINT_JOBS": "1", "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", CODE, *map(str, files)], env=env, capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    return json.loads(out.stdout)


def test_a_lint_without_planned_fixes_imports_no_planner(tmp_path):
    got = _lint(tmp_path, CONFIG)
    assert got["report"]["findings"] == []
    assert got["planners"] is False


def test_a_planned_fix_still_gets_its_planner(tmp_path):
    fp32 = tmp_path / "fp32.yaml"
    # a full fine-tuning with no precision flag: accidental-fp32, whose fix the fit-precision planner computes
    fp32.write_text(FULL.read_text().replace("bf16: true\n", ""))
    got = _lint(tmp_path, fp32)
    fd101 = [f for f in got["report"]["findings"] if f["code"] == "FD101"]
    assert len(fd101) == 1 and got["planners"] is True
    fix = fd101[0]["fix"]
    assert fix["title"] == "enable bf16 mixed precision" and fix["edits"][0]["key"] == "bf16"
    effect = fix["effect"]
    assert effect["total_gib_after"] < effect["total_gib_before"]
