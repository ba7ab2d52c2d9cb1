"""The moments after the steady step (evaluation, saves, a resume) and the training stack read from the machine.

Issue 12: an eval-time OOM is predicted for its moment, with an edit of the eval settings as its fix; a stack read
from package metadata (or a pasted `llamafactory-cli env`) changes the default optimizer exactly as --torch does.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.facts.config import assemble_config
from finetune_doctor.settings import Options

CFG = """\
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: alpaca_en_demo
template: qwen
cutoff_len: 4096
output_dir: saves/qwen2.5-7b/lora/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""
EVAL = "val_size: 0.05\neval_strategy: steps\neval_steps: 500\n"


def _check(tmp_path, text, *args):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(text)
    res = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--format", "json", *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


@pytest.mark.usefixtures("pinned_error_model")   # the remedy planner's choice under a fixed error model
def test_the_first_evaluation_decides_the_peak_and_its_fix_is_the_eval_batch(tmp_path):
    # 8 eval sequences x 4096 tokens x 152064 vocab entries: bf16 logits, their fp32 upcast and log_softmax's fp32
    # output alive together = 8*4096*152064*10 B = 46.4 GiB, before any weight
    report = _check(tmp_path, CFG + EVAL, "--gpu", "A100-40GB")
    # the data is not here: 8 x 4096-token eval samples run out, 8 x 512 do not, so the verdict depends on the
    # sample lengths (verdict-depends-on-assumption) and its fix makes the assumed worst case fit
    oom = next(f for f in report["findings"] if f["name"] == "verdict-depends-on-assumption")
    assert "first evaluation, at step 500" in oom["message"]
    assert report["memory"]["token_budget"]["eval"]["tokens_per_sample"] < 4096
    assert abs(report["memory"]["per_gpu_gib"]["logits"] - 8 * 4096 * 152064 * 10 / 2**30) < 0.05
    edits = {e["key"]: e["value"] for e in oom["fix"]["edits"]}
    assert edits == {"per_device_eval_batch_size": 1} and oom["fix"]["safety"] == "safe"
    assert oom["fix"]["effect"]["total_gib_after"] < 40


def test_without_evaluation_the_same_run_fits(tmp_path):
    report = _check(tmp_path, CFG, "--gpu", "A100-40GB")
    assert report["memory"]["fits"] is True
    assert not any(f["name"] == "predicted-oom" for f in report["findings"])


def test_eval_needs_eval_data_and_a_strategy(tmp_path):
    asm = assemble_config(str(_write(tmp_path, CFG + "eval_strategy: steps\n")), (), Options(command="check"))
    assert asm.run.eval_during_training is False          # no val_size / eval_dataset: transformers never evaluates
    asm = assemble_config(str(_write(tmp_path, CFG + "val_size: 0.1\neval_strategy: steps\nlogging_steps: 10\n")),
                          (), Options(command="check"))
    assert (asm.run.eval_during_training, asm.run.eval_first_step, asm.run.eval_micro_batch) == (True, 10, 8)


def test_a_resumed_run_carries_the_optimizer_states_from_step_1(tmp_path):
    base = assemble_config(str(_write(tmp_path, CFG)), (), Options(command="check", gpu="A100-80GB"))
    resumed = assemble_config(str(_write(tmp_path, CFG + "resume_from_checkpoint: saves/ckpt-500\n")), (),
                              Options(command="check", gpu="A100-80GB"))
    m0, m1 = base.memory.details["moments_gib"], resumed.memory.details["moments_gib"]
    states = base.memory.details["terms_bytes"]["states"] / 2**30
    assert abs((m1["loss of step 1"] - m0["loss of step 1"]) - states) < 1e-6 and states > 0


def _write(tmp_path, text):
    p = tmp_path / "train.yaml"
    p.write_text(text)
    return p


ENV = """
- `llamafactory` version: 0.9.2.dev0
- Platform: Linux-5.15.0-119-generic-x86_64-with-glibc2.35
- Python version: 3.10.16
- PyTorch version: 2.5.1+cu124 (GPU)
- Transformers version: 4.46.1
- Datasets version: 3.1.0
- Accelerate version: 1.0.1
- PEFT version: 0.12.0
- TRL version: 0.9.6
- GPU type: NVIDIA GeForce RTX 4090
- GPU number: 4
- GPU memory: 23.65GB
- DeepSpeed version: 0.15.4
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
"""


def test_an_env_report_sets_versions_and_gpus(tmp_path):
    from finetune_doctor.readers.config.stack import read_env_file

    env = tmp_path / "env.txt"
    env.write_text(ENV)
    r = read_env_file(str(env))
    assert r.versions["torch"] == "2.5.1+cu124" and r.versions["transformers"] == "4.46.1"
    assert (r.gpu_type, r.gpu_number, r.gpu_memory_gib) == ("NVIDIA GeForce RTX 4090", 4, 23.65)
    assert r.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    report = _check(tmp_path, CFG, "--env", str(env))
    assert report["hardware"]["num_gpus"] == 4 and report["hardware"]["source"] == "env"
    assert report["run"]["optim"] == "adamw_torch"        # torch 2.5 < 2.8: transformers' non-fused default
    assert {s["package"]: s["source"] for s in report["run"]["stack"]}["torch"] == str(env)


def test_installed_versions_act_like_torch_flag_on_the_training_machine(tmp_path, monkeypatch):
    from finetune_doctor.facts import config as fc
    from finetune_doctor.types import Hardware

    here = Hardware(gpu="A100-80GB", num_gpus=1, capacity_gib=79.15, bf16=True, source="nvml")
    monkeypatch.setattr(fc.hw_facts, "resolve", lambda *a, **k: here)
    monkeypatch.setattr(fc, "installed_versions", lambda: {"torch": "2.6.0", "transformers": "4.51.3"})
    cfg = _write(tmp_path, CFG)
    from_metadata = assemble_config(str(cfg), (), Options(command="check"))
    from_flag = assemble_config(str(cfg), (), Options(command="check", gpu="A100-80GB", torch_version="2.6.0",
                                                      transformers_version="4.51.3"))
    assert from_metadata.run.optim == from_flag.run.optim == "adamw_torch"
    assert from_metadata.memory.total == from_flag.memory.total
    assert ("torch", "2.6.0", "installed here") in from_metadata.run.stack_sources
    # the flags still win over what is installed (the fused default needs torch >= 2.8 and transformers >= 4.54,
    # huggingface/transformers#37358: with only --torch 2.8 the installed 4.51.3 keeps adamw_torch)
    assert assemble_config(str(cfg), (), Options(command="check", torch_version="2.8")).run.optim == "adamw_torch"
    flagged = assemble_config(str(cfg), (), Options(command="check", torch_version="2.8", transformers_version="4.57.1"))
    assert flagged.run.optim == "adamw_torch_fused"


def test_an_env_file_with_nothing_in_it_is_an_input_error(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text("hello\n")
    cfg = _write(tmp_path, CFG)
    res = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--env", str(env)])
    assert res.exit_code == 2 and f"{env}:" in res.output and "llamafactory-cli env" in res.output


def test_the_stacks_transformers_major_decides_the_moe_expert_layout(tmp_path):
    # transformers 5 fuses a Qwen3-MoE layer's experts into 3-D parameters (modeling_qwen3_moe.py at v5.0.0), so
    # LoRA's `all` target no longer reaches them: fewer trainable parameters than under 4.x's nn.Linear experts
    cfg = _write(tmp_path, "model_name_or_path: Qwen/Qwen3-30B-A3B\nstage: sft\ndo_train: true\n"
                           "finetuning_type: lora\nlora_target: all\nbf16: true\ncutoff_len: 2048\n")
    v4, v5 = (assemble_config(str(cfg), (), Options(command="estimate", gpu="H100-80GB", offline=True,
                                                    transformers_version=v))
              for v in ("4.57.1", "5.6.0"))
    assert (v4.run.arch.experts_fused, v5.run.arch.experts_fused) == (False, True)
    assert v5.counts.trainable < v4.counts.trainable
    assert v5.memory.total < v4.memory.total


def test_host_ram_of_the_training_machine_is_what_offload_is_judged_against():
    from finetune_doctor.errors import InputError
    from finetune_doctor.facts.hw import parse_host_ram

    assert parse_host_ram("744GB") == round(744e9 / 2**30, 2) == 692.9   # decimal, as `free -g` prints it
    assert parse_host_ram("693GiB") == parse_host_ram("693") == 693.0
    assert parse_host_ram("1.5TB") == round(1.5e12 / 2**30, 2)
    for bad in ("lots", "0", "-5GB", "12 MB"):
        with pytest.raises(InputError):
            parse_host_ram(bad)
    # LF#6755: Qwen2.5-32B full, ZeRO-3 offload on one H100 NVL; CPU offload needs ~552 GiB of host RAM
    cfg = "fixtures/real_reports/13-qwen25-32b-full-z3off-1xh100nvl-hostoom/config.yaml"
    for ram, fires in (("300GB", True), ("2TB", False)):
        res = CliRunner().invoke(main, ["check", cfg, "--gpu", "H100-NVL", "--offline", "--no-data",
                                        "--host-ram", ram, "--format", "json"])
        codes = {f["code"] for f in json.loads(res.output)["findings"]}
        assert ("FD603" in codes) is fires, (ram, codes)


def test_the_stacks_full_transformers_version_reaches_the_model_reader(tmp_path):
    # DeepSeek-V2's router is an nn.Linear before transformers 5.24 (generic.py ROUTER_LINEAR_BEFORE): the minor
    # version decides, so the stack's whole version string must reach the reader, not only its major number
    cfg = _write(tmp_path, "model_name_or_path: deepseek-ai/DeepSeek-V2-Lite\nstage: sft\ndo_train: true\n"
                           "finetuning_type: lora\nlora_target: all\nbf16: true\n")
    linear = [assemble_config(str(cfg), (), Options(command="estimate", gpu="H100-80GB", offline=True,
                                                    transformers_version=v)).run.arch.router_linear
              for v in ("5.6.0", "5.24.0")]
    assert linear == [True, False]
