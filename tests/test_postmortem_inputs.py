"""`doctor postmortem` takes the same inputs as `check`: key=value overrides, --deepspeed, the launch command of
cmdline.txt or the log; a missing DeepSpeed file is a finding; the config-level rules of check run on the config.
And sparse curves: a jump between two logged points is judged whatever their distance."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from finetune_doctor.cli import main
from pmhelp import diagnose_dir

REF_DS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "finetune_doctor", "catalog",
                      "lf_deepspeed")


def lf_line(step: int, total: int, loss: float, lr: float = 1e-4) -> str:
    """One trainer_log.jsonl record as LLaMA-Factory's LogCallback writes it (train/callbacks.py:271-310)."""
    return json.dumps({"current_steps": step, "total_steps": total, "loss": loss, "lr": lr, "epoch": step / total,
                       "percentage": round(step / total * 100, 2), "elapsed_time": "0:01:00",
                       "remaining_time": "0:10:00"})


def test_sparse_spike_between_two_logged_points_raises_loss_spike(tmp_path):
    """Issue 16: loss 3.60 -> 63.37 between two logged points (logging_steps 50) raised nothing."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "trainer_log.jsonl").write_text("\n".join(
        [lf_line(50, 1000, 3.71), lf_line(100, 1000, 3.64), lf_line(150, 1000, 3.60), lf_line(200, 1000, 63.37)])
        + "\n")
    r = diagnose_dir(str(d))
    f = next(f for f in r.findings if f.name == "loss-spike")
    assert "63.37" in f.message and "17.6× the log before it (3.6 at step 150, 50 step(s) earlier)" in f.message
    ev_spike = [e for e in r.timeline if e.kind == "loss_spike"]
    assert [e.step for e in ev_spike] == [200] and "50 step(s) after the previous log" in ev_spike[0].detail


def test_sparse_curve_without_a_jump_raises_nothing(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "trainer_log.jsonl").write_text("\n".join(
        [lf_line(50, 1000, 3.71), lf_line(100, 1000, 3.64), lf_line(150, 1000, 3.90), lf_line(200, 1000, 3.55)])
        + "\n")
    r = diagnose_dir(str(d))
    assert "loss-spike" not in [f.name for f in r.findings]


def test_nan_onset_says_how_far_the_last_finite_log_was(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "trainer_log.jsonl").write_text("\n".join(
        [lf_line(100, 1000, 2.1), lf_line(200, 1000, 2.0), lf_line(300, 1000, float("nan"))]) + "\n")
    r = diagnose_dir(str(d))
    nan = r.sections["postmortem"]
    facts = next(f for f in r.findings if f.name == "nan-loss")
    assert facts is not None
    from finetune_doctor.analyzers.postmortem.timeline import analyze
    from finetune_doctor.readers.runlogs.runlayout import collect

    ev = analyze(collect(str(d), [])).facts["nan"]
    assert (ev["prev_finite_step"], ev["gap_steps"]) == (200, 100)
    assert nan["completed"] is False


def _missing_ds_run(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "training_args.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\ndeepspeed: ds_z3.json\n"
        "bf16: true\nlogging_steps: 1\n")
    (d / "trainer_log.jsonl").write_text("\n".join(lf_line(s, 100, float("nan")) for s in range(1, 6)) + "\n")
    return d


def test_missing_deepspeed_file_is_a_finding_and_nothing_else_is_blamed(tmp_path):
    d = _missing_ds_run(tmp_path)
    r = diagnose_dir(str(d))
    names = [f.name for f in r.findings]
    # the logs show five steps: the training machine had the file (trial 7 c10), so no launch-time error
    assert "deepspeed-file-missing" not in names
    f = next(f for f in r.findings if f.name == "not-checked-here")
    assert "ds_z3.json" in f.message and f.location.file.endswith("training_args.yaml") and f.location.key == "deepspeed"
    assert f.severity == "info" and "the logs show the run trained (to step 5)" in f.message
    nan = next(f for f in r.findings if f.name == "nan-loss")
    assert "attention kernel is not blamed" in nan.message
    assert not any(e.key == "flash_attn" for e in (nan.fix.edits if nan.fix else ()))
    assert "nan-loss" in names


def test_deepspeed_option_and_overrides_reach_the_config(tmp_path):
    d = _missing_ds_run(tmp_path)
    ds = os.path.join(REF_DS, "ds_z3_config.json")
    base = diagnose_dir(str(d), deepspeed=ds)
    r = diagnose_dir(str(d), overrides=("fp16=true",), deepspeed=ds)
    names = [f.name for f in r.findings]
    assert "deepspeed-file-missing" not in names
    assert r.inputs["deepspeed"] and r.inputs["deepspeed"].endswith("ds_z3_config.json")
    # the override is judged by the config-level rules of check (fp16 with bf16 also set)
    added = {f.name for f in r.findings} - {f.name for f in base.findings}
    assert added and all(f.category in ("config", "precision", "deepspeed") for f in r.findings if f.name in added)


def test_cli_takes_overrides_and_deepspeed(tmp_path):
    d = _missing_ds_run(tmp_path)
    ds = os.path.join(REF_DS, "ds_z3_config.json")
    res = CliRunner().invoke(main, ["postmortem", str(d), "finetuning_type=lora", "--deepspeed", ds,
                                    "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    rep = json.loads(res.output)
    assert rep["inputs"]["deepspeed"].endswith("ds_z3_config.json")
    assert "deepspeed-file-missing" not in [f["name"] for f in rep["findings"]]


def test_launch_command_from_cmdline_txt(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "sft.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\n"
                                "bf16: true\n")
    (d / "cmdline.txt").write_text("FORCE_TORCHRUN=1 llamafactory-cli train sft.yaml learning_rate=5e-2 \\\n"
                                   "  deepspeed=missing_ds.json\n")
    (d / "trainer_log.jsonl").write_text(lf_line(1, 10, 2.0) + "\n")
    r = diagnose_dir(str(d))
    assert r.inputs["config"].endswith("sft.yaml")
    assert any("launch command" in n for n in r.notes)
    names = [f.name for f in r.findings]
    # deepspeed=missing_ds.json came from the launch line of a run that logged a step: not checked here
    assert "deepspeed-file-missing" not in names
    here = next(f for f in r.findings if f.name == "not-checked-here")
    assert "missing_ds.json" in here.message and here.location.file == "<command line>"


def test_launch_command_echoed_in_the_log(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "cfg.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\nfinetuning_type: lora\n"
                                "fp16: true\nbf16: true\n")
    (d / "train.log").write_text("$ llamafactory-cli train cfg.yaml\n{'loss': 2.0, 'learning_rate': 1e-4, "
                                 "'epoch': 0.1}\n")
    r = diagnose_dir(str(d))
    assert r.inputs["config"].endswith("cfg.yaml")
    # a config-level rule of check (fp16 and bf16 both set) runs on it
    assert any(f.category in ("config", "precision") for f in r.findings)


def test_overrides_without_a_config_are_an_input_error(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "trainer_log.jsonl").write_text(lf_line(1, 10, 2.0) + "\n")
    res = CliRunner().invoke(main, ["postmortem", str(d), "learning_rate=1e-4"])
    assert res.exit_code == 2 and "need a config" in res.output
