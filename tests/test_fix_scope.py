"""`check --fix` writes only the file named on the command line and reports the state after the fix; remedies
never propose a key LLaMA-Factory ignores for the model; `doctor gpus --gpu SPEC` without a driver gives advice
that fits (issue 26)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "fixtures" / "quickstart"


@pytest.fixture(autouse=True)
def _no_nvml(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def _edits(report: dict) -> list[tuple[str, str, object]]:
    out = []
    for f in report["findings"]:
        fix = f.get("fix") or {}
        for e in [*(fix.get("edits") or []), *(e for a in fix.get("alternatives") or [] for e in a.get("edits") or [])]:
            out.append((f["code"], e["key"], e.get("value")))
    return out


def test_check_fix_writes_only_the_named_config_and_reports_after(tmp_path):
    for f in QUICK.iterdir():
        shutil.copy2(f, tmp_path / f.name)
    cfg = tmp_path / "llama7b_full_zero2_v100.yaml"
    cfg.write_text(cfg.read_text() + "dataset: alpaca_en_demo\ntemplate: llama2\ndpo_beta: 0.1  # old name\n")
    ds_before = (tmp_path / "ds_z2_config.json").read_bytes()
    args = ["check", str(cfg), "optim=adamw_torch", "--gpu", "8xV100-32GB", "--offline", "--no-data"]
    before = json.loads(CliRunner().invoke(main, [*args, "--format", "json"]).output)
    # the OOM remedy edits the DeepSpeed JSON (ZeRO-3) and FD002 renames the key: both are safe fixes
    assert ("FD601", "zero_optimization.stage", 3) in _edits(before)
    assert "FD002" in [f["code"] for f in before["findings"]]

    res = CliRunner().invoke(main, [*args, "--fix", "--format", "json"])
    after = json.loads(res.output)
    assert (tmp_path / "ds_z2_config.json").read_bytes() == ds_before        # not named: not written
    assert "pref_beta: 0.1  # old name" in cfg.read_text()
    codes = [f["code"] for f in after["findings"]]
    assert "FD002" not in codes and "FD601" in codes                      # the state after the fix
    assert after["fixes"] == {"fixed": 1, "remaining": len(codes)}
    assert any("ds_z2_config.json: not among the files given" in n for n in after["notes"])

    text = CliRunner().invoke(main, [*args, "--fix"]).output              # nothing left to fix in the YAML
    assert f"0 fixed, {len(codes)} remaining" in text and "fixable with --fix" not in text


def test_no_quantization_bit_proposed_for_a_prequantized_checkpoint():
    # case 055: Qwen3-32B-AWQ on the user's machine (its config.json is not here: the name is the only hint, and the
    # weights are sized as AWQ 4-bit from it, ~18 GiB: a T4 cannot hold them at any sample length)
    res = CliRunner().invoke(main, ["check", str(ROOT / "fixtures/cases/055/config.yaml"), "--gpu", "T4",
                                    "--offline", "--no-data", "--format", "json"])
    report = json.loads(res.output)
    keys = {k for _, k, _ in _edits(report)}
    assert "FD601" in [f["code"] for f in report["findings"]]              # it does run out, remedies are offered
    assert "quantization_bit" not in keys                                 # LF ignores it for an AWQ checkpoint
    assert not any(k.startswith("zero_optimization") or k == "deepspeed" for k in keys)  # ZeRO-3: refused


def test_gpus_with_a_spec_and_no_driver_does_not_advise_the_spec():
    res = CliRunner().invoke(main, ["gpus", "--gpu", "A100-80GB"])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and "--gpu SPEC" not in line and "--from FILE" in line and "live memory" in line
    plain = CliRunner().invoke(main, ["gpus"])
    assert plain.exit_code == 2 and "--gpu SPEC" in plain.output   # without --gpu the spec is still the advice
