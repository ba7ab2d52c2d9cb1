"""The check / estimate / lint pipelines end to end on real-shaped inputs: stock DeepSpeed files, sweeps,
the first moment a run runs out of memory, command-line keys, and bad input."""

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "fixtures" / "quickstart" / "llama7b_full_zero2_v100.yaml"
CASE028 = ROOT / "fixtures" / "cases" / "028" / "config.yaml"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_quickstart_names_the_adam_step_with_the_2023_optimizer():
    # case 002: "Tried to allocate 3.14 GiB" in exp_avg_sq.sqrt() — 4 B x 6.74e9 / 8 ranks, ZeRO-2, non-fused AdamW
    r = invoke("check", QUICK, "optim=adamw_torch", "--gpu", "8xV100-32GB", "--format", "json")
    assert r.exit_code == 1
    oom = next(f for f in json.loads(r.output)["findings"] if f["name"] == "predicted-oom")
    assert "first runs out at the optimizer step of step 1" in oom["message"]
    assert "of which 3.14 GiB are the update's temporaries" in oom["message"]   # the traceback's allocation
    assert oom["fix"]["effect"]["total_gib_after"] < 31.75 < oom["fix"]["effect"]["total_gib_before"]


def test_stock_deepspeed_file_is_read_when_not_on_disk(tmp_path, monkeypatch):
    shutil.copy(CASE028, tmp_path / "config.yaml")
    monkeypatch.chdir(tmp_path)
    r = invoke("check", "config.yaml", "optim=adamw_torch", "--gpu", "8xH200", "--no-data", "--format", "json")
    d = json.loads(r.output)
    assert any("stock copy" in n for n in d["notes"])
    assert d["run"]["zero_stage"] == 2
    oom = next(f for f in d["findings"] if f["name"] == "predicted-oom")
    # the remedy switches to another stock file instead of editing LLaMA-Factory's copy
    assert {"file": "config.yaml", "key": "deepspeed", "value": "examples/deepspeed/ds_z3_config.json"} in oom["fix"]["edits"]


def test_missing_deepspeed_file_is_an_assumption_for_check_and_not_checked_here_for_lint(tmp_path, monkeypatch):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CASE028.read_text().replace("examples/deepspeed/ds_z2_config.json", "configs/none.json"))
    monkeypatch.chdir(tmp_path)
    # check: not on this machine, so estimated with LLaMA-Factory's stock file of the stage the name suggests (none:
    # ZeRO-2), an assumption whose other stock stages are evaluated; --strict makes the missing path an error
    d = json.loads(invoke("check", "config.yaml", "--gpu", "8xH200", "--format", "json").output)
    ds = next(a for a in d["assumptions"] if a["name"] == "deepspeed-config")
    assert ds["value"] == "ds_z2_config.json" and "ds_z3_config.json" in ds["effect"]["total_gib"]
    assert d["run"]["zero_stage"] == 2
    assert "deepspeed-file-missing" not in [f["name"] for f in d["findings"]]
    d = json.loads(invoke("check", "config.yaml", "--gpu", "8xH200", "--format", "json", "--strict").output)
    assert "deepspeed-file-missing" in [f["name"] for f in d["findings"]]
    r = invoke("lint", "config.yaml", "--format", "json")
    d = json.loads(r.output)
    # away from the training machine the path is not checked here (info); --strict makes it the error
    assert [f["name"] for f in d["findings"] if "deepspeed" in f["message"]] == ["not-checked-here"]
    d = json.loads(invoke("lint", "config.yaml", "--format", "json", "--strict").output)
    assert [f["name"] for f in d["findings"] if f["name"] == "deepspeed-file-missing"] == ["deepspeed-file-missing"]


def test_sweep_over_stock_deepspeed_files():
    r = invoke("estimate", QUICK, "optim=adamw_torch", "--gpu", "8xV100-32GB", "--format", "json", "--sweep",
               "deepspeed=examples/deepspeed/ds_z2_config.json,examples/deepspeed/ds_z3_config.json")
    rows = json.loads(r.output)["sweep"]["rows"]
    assert [row["fits"] for row in rows] == [False, True]
    assert rows[1]["total_gib"] < rows[0]["total_gib"]


def test_command_line_keys_point_at_the_command_line(tmp_path):
    r = invoke("check", QUICK, "per_device_train_batch_size=abc", "learning_rte=1e-4", "--gpu", "8xV100-32GB",
               "--format", "json")
    found = {f["location"]["key"]: f for f in json.loads(r.output)["findings"]}
    assert found["per_device_train_batch_size"]["location"]["file"] == "<command line>"
    assert found["learning_rte"]["location"]["file"] == "<command line>"
    assert "learning_rate" in found["learning_rte"]["message"]


def test_output_file_is_written_whole(tmp_path):
    out = tmp_path / "r.sarif"
    r = invoke("check", QUICK, "optim=adamw_torch", "--gpu", "8xV100-32GB", "--format", "sarif", "--output", out)
    assert r.exit_code == 1 and json.loads(out.read_text())["version"] == "2.1.0"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_bad_inputs_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_name_or_path: x\n  bad: : indent\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    for args in (["check", tmp_path / "missing.yaml"], ["check", bad], ["check", empty], ["lint", bad],
                 ["estimate", QUICK, "--gpu", "9xZ999"], ["check", QUICK, "--sweep"]):
        r = invoke(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_when_nothing_fits_the_closest_remedy_says_how_far_it_is():
    # case 023: Qwen3-30B-A3B LoRA r256 on every expert, one RTX 4090 — no set of three remedies fits
    r = invoke("check", ROOT / "fixtures" / "cases" / "023" / "config.yaml", "--gpu", "4090", "--no-data",
               "--format", "json")
    oom = next(f for f in json.loads(r.output)["findings"] if f["name"] == "predicted-oom")
    assert "still needs" in oom["fix"]["title"] and oom["fix"]["edits"]
    assert oom["fix"]["effect"]["total_gib_after"] > 23.6 > 0


def test_lint_diff_prints_only_the_diff(tmp_path):
    cfg = tmp_path / "typos.yaml"
    shutil.copy(ROOT / "fixtures" / "lint" / "typos_sft.yaml", cfg)
    before = cfg.read_text()
    r = CliRunner().invoke(main, ["lint", str(cfg), "--diff", "--unsafe-fixes"])
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"--- {cfg}", f"+++ {cfg}"] and lines[2].startswith("@@")
    assert all(x[:1] in " +-@" for x in lines)                    # nothing but the diff on stdout
    assert "-learing_rate: 1.0e-4" in lines and "+learning_rate: 1.0e-4" in lines
    assert cfg.read_text() == before                              # nothing written
    safe_only = CliRunner().invoke(main, ["lint", str(cfg), "--diff"])
    assert "shown only with --unsafe-fixes" in safe_only.stderr
