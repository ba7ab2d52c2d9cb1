"""A config.json transformers would refuse is an error at its line (issue 27): without ``model_type`` AutoConfig
raises "Unrecognized model ... Should have a `model_type` key" (unless a model type's name is in the path), so
LLaMA-Factory cannot load it; the doctor said "fits", exit 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "fixtures" / "models" / "Qwen2.5-0.5B-Instruct"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def _run(tmp_path: Path, folder: str, drop: bool) -> dict:
    model = tmp_path / folder
    shutil.copytree(MODEL, model)
    cfg = json.loads((model / "config.json").read_text())
    if drop:
        cfg.pop("model_type")
    (model / "config.json").write_text(json.dumps(cfg, indent=2))
    train = tmp_path / "train.yaml"
    train.write_text(f"model_name_or_path: {model}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                     "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\n")
    res = CliRunner().invoke(main, ["check", str(train), "--gpu", "A100-80GB", "--offline", "--no-data",
                                    "--format", "json"])
    return json.loads(res.output) | {"exit": res.exit_code}


def test_config_json_without_model_type_is_an_error(tmp_path):
    report = _run(tmp_path, "my-model", drop=True)
    assert report["exit"] == 1 and report["memory"] is None
    [f] = [f for f in report["findings"] if "model_type" in f["message"]]
    assert f["severity"] == "error" and "Unrecognized model" in f["message"]


def test_model_type_in_the_path_is_what_transformers_falls_back_to(tmp_path):
    report = _run(tmp_path, "qwen2-finetune", drop=True)   # AutoConfig matches "qwen2" in the path
    assert not [f for f in report["findings"] if "model_type" in f["message"]]
    assert report["memory"] is not None


def test_with_model_type_nothing_changes(tmp_path):
    report = _run(tmp_path, "my-model", drop=False)
    assert report["memory"] is not None and report["exit"] in (0, 1)


def test_probe_with_micro_batch_zero_names_the_real_reason(tmp_path):
    # was: "no model to probe: set model_name_or_path" for a config that sets it
    train = tmp_path / "train.yaml"
    train.write_text(f"model_name_or_path: {MODEL}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                     "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\nper_device_train_batch_size: 0\n")
    res = CliRunner().invoke(main, ["probe", str(train), "--mode", "simulate", "--gpu", "A100-80GB"])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert line.startswith(f"doctor: {train}:8: nothing to probe:") and "per_device_train_batch_size" in line
    assert "set model_name_or_path" not in line
