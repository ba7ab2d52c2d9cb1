"""One process over several visible GPUs (torch DataParallel), the launch of `llamafactory-cli train` before
LLaMA-Factory 0.8.0 (0.8.0 cli.py:75-76 is the first to start torchrun itself): the term GPU 0 gains
(analyzers/memory/dataparallel.py) and the ``launcher`` assumption's alternative (facts/kinds.py `DATA_PARALLEL`).

The config is the one of LlamaFactory#3914 (and #4263, the same example on 0.7.1): LF 0.7.x's
examples/lora_single_gpu/llama3_lora_sft.yaml as the user ran it, `CUDA_VISIBLE_DEVICES=0,1 llamafactory-cli train
...` on two RTX A6000.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.dataparallel import gathered_logit_bytes
from finetune_doctor.analyzers.memory.moments import later_moments
from finetune_doctor.cli import main
from finetune_doctor.facts.kinds import DATA_PARALLEL
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

GIB = float(1 << 30)
LLAMA3_VOCAB = 128256

EXAMPLE_071 = """\
# model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct

# method
stage: sft
do_train: true
finetuning_type: lora
lora_target: q_proj,v_proj

# dataset
dataset: identity,alpaca_gpt4_en
template: llama3
cutoff_len: 1024
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

# output
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

# train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 0.0001
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_steps: 0.1
fp16: true

# eval
val_size: 0.1
per_device_eval_batch_size: 1
evaluation_strategy: steps
eval_steps: 500
"""


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    for k in ("FORCE_TORCHRUN", "NNODES", "NPROC_PER_NODE", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)


def _values() -> dict:
    from ruamel.yaml import YAML

    return dict(YAML(typ="safe").load(EXAMPLE_071))


def _one_gpu_run(transformers: str = "4.40.2", **kw):
    arch, _ = load_arch("meta-llama/Meta-Llama-3-8B-Instruct")
    return resolve_run(_values(), arch, parse_gpu_spec("RTX-A6000"), stack={"transformers": transformers}).with_(**kw)


def test_gpu0_gathers_the_fp32_logits_of_every_replica():
    one = _one_gpu_run()
    assert one.arch.vocab_size == LLAMA3_VOCAB and one.shifted_logits_copy   # transformers 4.40.2
    dp = one.with_(dp_replicas=2)
    # 2 replicas x 1 sample x 1024 tokens x 128256 x 4 B (4.40.2 LlamaForCausalLM returns logits.float())
    assert gathered_logit_bytes(dp, 1024) == 2 * 1024 * LLAMA3_VOCAB * 4 == 1_050_673_152
    assert gathered_logit_bytes(one, 1024) == 0.0
    # the term sits at the loss moment only: the gathered output is dropped before the backward
    t1, t2 = compute_terms(one), compute_terms(dp)
    assert t2.logits - t1.logits == 1_050_673_152
    assert (t2.logits_bwd, t2.activations, t2.weights, t2.states) == (t1.logits_bwd, t1.activations, t1.weights,
                                                                        t1.states)
    # a current transformers returns lm_head's half-precision output: half the bytes
    assert gathered_logit_bytes(_one_gpu_run("4.57.1", dp_replicas=2), 1024) == 2 * 1024 * LLAMA3_VOCAB * 2


def test_evaluation_gathers_too_and_a_reward_model_gathers_its_whole_output():
    one = _one_gpu_run()
    dp = one.with_(dp_replicas=2)
    e1 = {n: v for n, v, _p, _w in later_moments(one, compute_terms(one))}
    e2 = {n: v for n, v, _p, _w in later_moments(dp, compute_terms(dp))}
    assert e2["evaluation"] - e1["evaluation"] == 2 * 1024 * LLAMA3_VOCAB * 4   # per_device_eval_batch_size 1
    # TRL's value-head wrapper returns (fp32 vocabulary logits, loss, value): 2 replicas x 1024 tokens x
    # (128,256 + 1) x 4 B = 1,050,681,344 B, gathered on GPU 0 (was 8,192 B, the scores alone)
    assert gathered_logit_bytes(dp.with_(stage="rm"), 1024) == 2 * 1024 * (LLAMA3_VOCAB + 1) * 4 == 1_050_681_344


def test_the_one_process_estimate_is_the_one_gpu_run_plus_the_gather():
    one = _one_gpu_run()
    a, b = estimate(one, parse_gpu_spec("RTX-A6000")), estimate(one.with_(dp_replicas=2), parse_gpu_spec("RTX-A6000"))
    # LoRA at cutoff 1024: the loss moment is the peak, so the peak grows by the gathered logits (0.98 GiB)
    assert b.details["phase_gib"]["loss (step 2)"] - a.details["phase_gib"]["loss (step 2)"] == pytest.approx(
        1_050_673_152 / GIB, abs=1e-9)
    assert b.total > a.total + 1_050_673_152 / GIB


def doctor(path: Path, *args: str) -> dict:
    r = CliRunner().invoke(main, ["check", str(path), "--no-data", "--offline", "--format", "json", *args])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def launcher(report: dict) -> dict | None:
    got = [a for a in report["assumptions"] if a["name"] == "launcher"]
    return got[0] if got else None


@pytest.fixture()
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "llama3_lora_sft.yaml"
    p.write_text(EXAMPLE_071)
    return p


def test_an_unknown_release_opens_data_parallel_with_its_effect(cfg):
    r = doctor(cfg, "--gpu", "2xRTX-A6000", "--transformers", "4.40.2")
    a = launcher(r)
    assert a["value"].startswith("llamafactory-cli train (torchrun, DDP")
    assert DATA_PARALLEL in a["alternatives"]
    # the effect is the one-process run on GPU 0: the same config checked on one A6000 (no NCCL, no expandable
    # segments either way) plus the gathered logits and the reserve on them
    one = doctor(cfg, "--gpu", "RTX-A6000", "--transformers", "4.40.2")["memory"]["per_gpu_gib"]["total"]
    dp = a["effect"]["total_gib"][DATA_PARALLEL]
    assert one + 1_050_673_152 / GIB <= dp <= one + 1.25 * 1_050_673_152 / GIB + 0.01
    assert a["effect"]["verdict"][DATA_PARALLEL] == "fits"   # 48 GB cards: ~21 GiB on GPU 0


def test_without_transformers_the_alternative_runs_the_stack_of_its_releases(cfg):
    a = launcher(doctor(cfg, "--gpu", "2xRTX-A6000"))
    given = launcher(doctor(cfg, "--gpu", "2xRTX-A6000", "--transformers", "4.40.2"))
    # not given: re-resolved with transformers 4.40.2 (kinds.py DATA_PARALLEL_TRANSFORMERS), so the same figure
    assert a["effect"]["total_gib"][DATA_PARALLEL] == given["effect"]["total_gib"][DATA_PARALLEL]


@pytest.mark.parametrize("version, opened", [("0.7.1", True), ("0.7.0", True), ("0.8.0", False), ("0.9.5", False)])
def test_a_given_release_decides(cfg, version, opened):
    a = launcher(doctor(cfg, "--gpu", "2xRTX-A6000", "--llamafactory", version))
    assert (DATA_PARALLEL in a["alternatives"]) is opened


def test_not_opened_where_one_process_cannot_be_data_parallel(cfg, tmp_path):
    # several nodes: DataParallel cannot span them
    a = launcher(doctor(cfg, "--gpu", "2xRTX-A6000", "--nnodes", "2"))
    assert a is not None and DATA_PARALLEL not in a["alternatives"]
    # a DeepSpeed file: transformers' DeepSpeed integration starts a process group; no DataParallel wrap
    ds = tmp_path / "ds_z2_config.json"
    ds.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                              "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 2}}))
    a = launcher(doctor(cfg, "--gpu", "2xRTX-A6000", f"deepspeed={ds}"))
    assert a is not None and DATA_PARALLEL not in a["alternatives"]
    # one visible GPU: nothing to spread over
    assert launcher(doctor(cfg, "--gpu", "RTX-A6000")) is None


def test_a_launch_read_closes_it(cfg, monkeypatch):
    monkeypatch.setenv("FORCE_TORCHRUN", "1")
    assert launcher(doctor(cfg, "--gpu", "2xRTX-A6000")) is None


def test_a_python_launch_over_two_visible_gpus_is_estimated_as_data_parallel(cfg, tmp_path):
    # the launch read from the user's files: one process, both cards visible -> the estimate itself is the
    # DataParallel run, and it equals what the unknown launcher's alternative says of it
    launch = tmp_path / "train.sh"
    launch.write_text(f"CUDA_VISIBLE_DEVICES=0,1 python src/train.py {cfg}\n")
    r = doctor(cfg, "--gpu", "2xRTX-A6000", "--transformers", "4.40.2", "--launch", str(launch))
    assert r["run"]["world_size"] == 1 and launcher(r) is None
    assert any("torch DataParallel" in n for n in r["notes"])
    alt = launcher(doctor(cfg, "--gpu", "2xRTX-A6000", "--transformers", "4.40.2"))["effect"]["total_gib"]
    assert r["memory"]["per_gpu_gib"]["total"] == alt[DATA_PARALLEL]
    one = doctor(cfg, "--gpu", "RTX-A6000", "--transformers", "4.40.2")
    assert r["memory"]["per_gpu_gib"]["logits"] - one["memory"]["per_gpu_gib"]["logits"] == pytest.approx(
        1_050_673_152 / GIB, abs=0.011)   # the report rounds to 0.01 GiB
    # one visible card: a one-GPU run, nothing gathered
    launch.write_text(f"CUDA_VISIBLE_DEVICES=1 python src/train.py {cfg}\n")
    solo = doctor(cfg, "--gpu", "2xRTX-A6000", "--transformers", "4.40.2", "--launch", str(launch))
    assert solo["memory"]["per_gpu_gib"]["total"] == one["memory"]["per_gpu_gib"]["total"]


def test_ascend_npus_are_never_data_parallel(cfg):
    # transformers' TrainingArguments gives an NPU n_gpu = 1 (training_args.py:2069-2072)
    a = launcher(doctor(cfg, "--gpu", "2x910B"))
    assert a is not None and DATA_PARALLEL not in a["alternatives"]


def test_the_assumption_says_what_removes_it(cfg):
    a = launcher(doctor(cfg, "--gpu", "2xRTX-A6000"))
    assert "before 0.8.0, llamafactory-cli train ran one process" in a["source"]
    assert a["resolve_with"].endswith("or --llamafactory VERSION")
    closed = launcher(doctor(cfg, "--gpu", "2xRTX-A6000", "--llamafactory", "0.9.5"))
    assert "0.8.0" not in closed["source"] and "--llamafactory" not in closed["resolve_with"]


def test_weighed_and_marked_where_no_input_rules_it_out(tmp_path):
    # cutoff 3072 on two 24 GB cards: as DataParallel GPU 0 runs out, as two DDP ranks it is at risk. No input rules
    # out a release before 0.8.0 (transformers 4.40.2 is one of its time), so the alternative is plausible and
    # marked `!` as its verdict differs (trial 15: one computation for the `!` and the verdict, facts/assumebase.py
    # `opens_verdict`); at-risk already says the verdict depends, so none decides it. A stated release closes it;
    # `--launch` with the python line estimates that launch itself
    p = tmp_path / "llama3_lora_sft.yaml"
    p.write_text(EXAMPLE_071.replace("cutoff_len: 1024", "cutoff_len: 3072"))
    r = doctor(p, "--gpu", "2xRTX4090", "--transformers", "4.40.2")
    a = launcher(r)
    assert a["effect"]["verdict"][DATA_PARALLEL] == "oom" and r["memory"]["verdict"] == "at-risk"
    assert a["moves_verdict"] is True
    assert (r["memory"].get("deciding_assumption") or {}).get("name") != "launcher"
    closed = launcher(doctor(p, "--gpu", "2xRTX4090", "--llamafactory", "0.9.5"))
    assert DATA_PARALLEL not in closed["alternatives"] and closed["moves_verdict"] is False
    launch = tmp_path / "train.sh"
    launch.write_text(f"CUDA_VISIBLE_DEVICES=0,1 python src/train_bash.py {p}\n")
    read = doctor(p, "--gpu", "2xRTX4090", "--transformers", "4.40.2", "--launch", str(launch))
    assert read["memory"]["per_gpu_gib"]["total"] == a["effect"]["total_gib"][DATA_PARALLEL]
