"""What a new user's tenth trial found (issues #21, #25), each fixed as a kind (fixtures/trial10/README.md).

Each test names the trial-10 case it stems from; the fixtures are written from the formats (LLaMA-Factory launch
scripts and `llamafactory-cli env` reports), not copied from the threads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

from casekit import run_json as _run

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial10"


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")




def _codes(rep: dict) -> list[str]:
    return [f["code"] for f in rep["findings"]]


def test_unknown_card_with_visible_devices_counts_two_gpus_and_no_rule_fails(tmp_path: Path):
    """Case 06: an env naming the card but not its number, a launch line with CUDA_VISIBLE_DEVICES=0,1."""
    case = FX / "unknown_card"
    code, rep = _run("check", str(case / "train.sh"), "--env", str(case / "env.txt"), "--offline", "--no-data")
    assert "FD097" not in _codes(rep)                       # FD602 no longer fails on the unknown capacity
    assert "FD617" not in _codes(rep)                       # 2 ranks on the 2 visible GPUs
    assert rep["hardware"]["num_gpus"] == 2 and rep["hardware"]["gpu"] == "GRID K520"
    assert rep["run"]["world_size"] == 2
    assert any(n.endswith("GRID K520 x 2 (the number from CUDA_VISIBLE_DEVICES on the launch line)")
               for n in rep["notes"]), rep["notes"]
    assert code == 0


def test_ranks_over_an_assumed_gpu_count_are_not_stated_as_an_error(tmp_path: Path):
    """The same env (card, no number) with NPROC_PER_NODE=4 and no visible-device list: one GPU is only assumed,
    so FD617's "4 processes but a node has 1 GPU" is not stated."""
    case = FX / "unknown_card"
    script = (case / "train.sh").read_text(encoding="utf-8").replace(
        "CUDA_VISIBLE_DEVICES=0,1 FORCE_TORCHRUN=1", "NPROC_PER_NODE=4 FORCE_TORCHRUN=1")
    (tmp_path / "train.sh").write_text(script, encoding="utf-8")
    _, rep = _run("check", str(tmp_path / "train.sh"), "--env", str(case / "env.txt"), "--offline", "--no-data")
    assert "FD617" not in _codes(rep) and "FD097" not in _codes(rep)
    assert rep["run"]["world_size"] == 4 and rep["hardware"]["num_gpus"] == 1
    # a --gpu count is the user's own statement: the mismatch is then an error
    _, rep2 = _run("check", str(tmp_path / "train.sh"), "--gpu", "2xA100-80GB", "--offline", "--no-data")
    f = next(f for f in rep2["findings"] if f["code"] == "FD617")
    assert "starts 4 processes per node, but a node has 2 GPUs" in f["message"] and f["severity"] == "error"


def test_a_bare_str_or_bool_flag_is_true_and_a_named_stage_is_the_assumed_range():
    """Case 03: `--include_num_input_tokens_seen` alone (HfArgumentParser drops `str` from its `str | bool` union
    and gives it nargs "?" const True) was refused with exit 2; a DeepSpeed file not here named ds_z2_config.json
    was at-risk because it "might be ZeRO-3", while FD602 stated the replicated weights as a fact."""
    case = FX / "named_stage"
    code, rep = _run("check", str(case / "train.sh"), "--gpu", "8xH20-96GB", "--transformers", "4.51.3",
                     "--offline", "--no-data")
    ds = next(a for a in rep["assumptions"] if a["name"] == "deepspeed-config")
    assert ds["value"] == "ds_z2_config.json" and ds["source"].startswith(
        "/mnt/work/LLaMA-Factory/my_configs/ds_z2_config.json is not on this machine: name-implied: its file name "
        "says ZeRO stage 2")
    assert ds["alternatives"] == ["ds_z2_offload_config.json"]    # not another stage
    assert rep["memory"]["verdict"] == "oom"                    # 72B replicated on every 96 GB card either way
    f = next(f for f in rep["findings"] if f["code"] == "FD602")
    assert f["message"].startswith("If /mnt/work/LLaMA-Factory/my_configs/ds_z2_config.json is ZeRO-2 as its name "
                                   "says (the file is not on this machine, so its stage is assumed from the name): "
                                   "each of the 8 GPUs holds the whole model")
    assert code == 1


def test_a_deepspeed_file_whose_name_states_no_stage_keeps_every_stock_stage_open(tmp_path: Path):
    text = (FX / "named_stage" / "train.sh").read_text(encoding="utf-8").replace("ds_z2_config.json",
                                                                                 "deepspeed.json")
    (tmp_path / "train.sh").write_text(text, encoding="utf-8")
    # DeepSpeed named (0.19.2): under 0.19.8, the release assumed when none is named, the ZeRO-3 alternative holds
    # every frozen layer gathered (zero3.py `frozen_recompute_hold`) and runs out of memory too
    (tmp_path / "env.txt").write_text("deepspeed==0.19.2\n", encoding="utf-8")
    _, rep = _run("check", str(tmp_path / "train.sh"), "--gpu", "8xH20-96GB", "--offline", "--no-data",
                  "--env", str(tmp_path / "env.txt"))
    ds = next(a for a in rep["assumptions"] if a["name"] == "deepspeed-config")
    assert "name-implied" not in ds["source"] and "ds_z3_config.json" in ds["alternatives"]
    assert rep["memory"]["verdict"] == "at-risk"
    f = next(f for f in rep["findings"] if f["code"] == "FD602")
    assert f["message"].startswith("If /mnt/work/LLaMA-Factory/my_configs/deepspeed.json is ZeRO-2 (the file is not "
                                   "on this machine and its name states no stage, so ZeRO-2 was assumed): each of")


def _finding(rep: dict, code: str) -> dict:
    return next(f for f in rep["findings"] if f["code"] == code)


def test_a_kill_in_the_final_evaluation_is_placed_after_training_not_at_an_eval_step():
    """Case 09: the evaluation bar (40/120) after "***** train metrics *****" was read as step 41 of 120."""
    code, rep = _run("postmortem", "--log", str(FX / "eval_kill" / "log.txt"))
    pm = rep["postmortem"]
    assert pm["steps"]["last"] is None and pm["steps"]["total"] is None   # no training bar in the excerpt
    assert pm["completed"]
    f = _finding(rep, "FD315")
    assert ("local rank 0 was killed by SIGKILL (exit code -9) after the training loop had finished (its final "
            "metrics are logged at line 7), in the final evaluation (its progress bar counts evaluation batches, "
            "not training steps), with no Python traceback") in f["message"]
    assert "during step" not in f["message"] and code == 1
    killed = next(e for e in rep["timeline"] if e["kind"] == "killed")
    assert killed["step"] is None


def test_a_traceback_after_the_training_loop_is_reported():
    """Case 12: a bare AssertionError at shutdown, after the final metrics: was "No findings", exit 0."""
    code, rep = _run("postmortem", "--log", str(FX / "shutdown_assert" / "log.txt"))
    f = _finding(rep, "FD317")
    assert f["message"].startswith("The run ended after the training loop had finished (its final metrics are "
                                   "logged at line 2), at shutdown or in the final save with AssertionError")
    assert "raised in destroy_process_group (distributed_c10d.py, torch), called from on_shutdown (config.py, ray)" \
        in f["message"]
    assert f["location"]["line"] == 15 and code == 1


def test_the_nccl_heartbeat_monitor_is_its_own_cause_with_its_own_knob():
    """Case 11: the heartbeat monitor's abort was read as a collective timeout, "raise ddp_timeout" beside
    "rather than raising the timeout"."""
    _, rep = _run("postmortem", "--log", str(FX / "heartbeat" / "log.txt"), "--gpu", "8xA800-80GB", "--nnodes", "4")
    f = _finding(rep, "FD314")
    assert f["message"].startswith("NCCL heartbeat monitor on rank 9: ProcessGroupNCCL's watchdog thread made no "
                                   "progress for 480 s.")
    assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in f["message"] and "this run spans 4 nodes" in f["message"]
    assert "raise ddp_timeout" not in f["message"]
    title = f["fix"]["title"]
    assert title.startswith("raise TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (e.g. 1200)") and "TORCH_NCCL_ENABLE_MONITORING=0" \
        in title and "rather than raising the timeout" not in title
    assert not f["fix"]["edits"]                      # no ddp_timeout edit: it does not set this limit


def test_a_maxwell_card_gets_bf16_judged_and_no_triton_remedy(tmp_path: Path):
    """Case 06 with the card known (Tesla M10: Maxwell, compute capability 5.0, 8 GB per GPU): bf16 is judged, and
    liger-kernel (Triton kernels, compute capability 7.0+) is neither the first fix nor an assumption."""
    case = FX / "unknown_card"
    env = (case / "env.txt").read_text(encoding="utf-8").replace("GPU type: GRID K520", "GPU type: Tesla M10")
    (tmp_path / "env.txt").write_text(env, encoding="utf-8")
    _, rep = _run("check", str(case / "train.sh"), "--env", str(tmp_path / "env.txt"), "--offline", "--no-data")
    assert rep["hardware"]["gpu"] == "M10" and rep["hardware"]["bf16"] is False and rep["hardware"]["num_gpus"] == 2
    assert {"FD103", "FD105"} & set(_codes(rep))                # bf16 on a card without bf16 units
    fixes = json.dumps([f.get("fix") for f in rep["findings"]])
    assert "enable_liger_kernel" not in fixes and "liger" not in fixes
    assert "liger-kernel" not in [a["name"] for a in rep["assumptions"]]
    # the floor is the card's compute capability: Turing's T4 (7.5) keeps liger, a card of unknown capability too
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.run.savers import triton_supported

    assert [triton_supported(parse_gpu_spec(g)) for g in ("Tesla-M10", "P40", "T4", "24GB")] == [
        False, False, True, True]


def test_keyerror_bias_correction_is_read_from_deepspeeds_source():
    """Case 01: the KeyError was restated with no link to DeepSpeed's Adam and its param groups."""
    _, rep = _run("postmortem", "--log", str(FX / "cpu_adam_keyerror" / "log.txt"))
    f = _finding(rep, "FD317")
    assert "with KeyError: 'bias_correction' — DeepSpeed's own Adam (DeepSpeedCPUAdam under ZeRO-Offload, " \
           "FusedAdam otherwise) reads `bias_correction`" in f["message"]
    assert "name the optimizer in the DeepSpeed JSON" in f["message"]


def test_a_host_kill_with_cpu_offload_in_the_log_names_the_offload_first():
    """Case 10: "fewer workers" was the fix although DeepSpeed's CPU Adam (ZeRO-Offload) was loaded."""
    _, rep = _run("postmortem", "--log", str(FX / "offload_killed" / "log.txt"))
    f = _finding(rep, "FD315")
    assert "The log shows DeepSpeed's CPU Adam loaded (line 4): ZeRO-Offload keeps the fp32 master weights" \
        in f["message"]
    assert f["fix"]["title"].startswith("cut host RAM per node: offload fewer states")


def test_a_bare_size_beside_an_env_card_of_that_size_is_that_card(tmp_path: Path):
    """Case 06 run with --gpu 2x8GB: the env names a Tesla M10 (8 GB per GPU): the card is known, bf16 judged;
    a size the env's card is not sold with stays a bare size."""
    case = FX / "unknown_card"
    env = (case / "env.txt").read_text(encoding="utf-8").replace("GPU type: GRID K520", "GPU type: Tesla M10")
    (tmp_path / "env.txt").write_text(env, encoding="utf-8")
    _, rep = _run("check", str(case / "train.sh"), "--env", str(tmp_path / "env.txt"), "--gpu", "2x8GB",
                  "--offline", "--no-data")
    hw = rep["hardware"]
    assert (hw["gpu"], hw["num_gpus"], hw["capacity_gib"], hw["bf16"]) == ("M10", 2, 7.84, False)
    assert {"FD103", "FD105"} & set(_codes(rep))
    _, rep2 = _run("check", str(case / "train.sh"), "--env", str(tmp_path / "env.txt"), "--gpu", "2x24GB",
                   "--offline", "--no-data")
    assert rep2["hardware"]["gpu"] == "24GB card"
