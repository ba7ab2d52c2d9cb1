"""PPO's rollout generation under ZeRO-3 (analyzers/memory/ppo.py): TRL's ``unwrap_model_for_generation`` gathers
the whole model on every rank, so a model too large for one card runs out "in the PPO sampling phase" however
many ranks share its partitions.

The config is LlamaFactory#5273's as the user pasted it (Qwen2-72B-Instruct, LoRA on all linears, PPO with an API
reward, examples/deepspeed/ds_z3_config.json, 8 A800 80GB PCIe, LF 0.8.4.dev0 / trl 0.9.6): out of memory while
sampling.
"""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.moments import later_moments
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.ppo import gathered_model_bytes, kv_cache_bytes
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

GIB = float(1 << 30)

ISSUE_5273 = """\
### model
model_name_or_path: Qwen/Qwen2-72B
reward_model_type: api

### method
stage: ppo
do_train: true
finetuning_type: lora
lora_target: all

# ddp
ddp_timeout: 180000000

### dataset
template: qwen
cutoff_len: 4096
overwrite_cache: true
preprocessing_num_workers: 16

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
learning_rate: 1.0e-5
num_train_epochs: 1.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true

### generate
max_new_tokens: 512
top_k: 0
top_p: 0.9
"""


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    for k in ("FORCE_TORCHRUN", "NNODES", "NPROC_PER_NODE", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)


def _run(**kw):
    from ruamel.yaml import YAML

    values = dict(YAML(typ="safe").load(ISSUE_5273))
    values.update(kw)
    arch, _ = load_arch("Qwen/Qwen2-72B")
    return resolve_run(values, arch, parse_gpu_spec("8xA800-80GB"), stack={"transformers": "4.44.0"})


def _zero3(run):
    return run.with_(deepspeed=True, zero_stage=3, engine="deepspeed")


def test_zero3_generation_gathers_the_whole_model_on_every_rank():
    run = _zero3(_run())
    assert run.world_size == 8 and run.gen_new_tokens == 512
    c = count_params(run)
    gathered = gathered_model_bytes(run, c, 2.0)
    # Qwen2-72B: 72.7 B bf16 parameters (> 135 GiB) + the LoRA adapter, whole on each of the 8 ranks
    assert 135.0 < gathered / GIB < 137.0
    assert gathered >= c.base * 2.0
    # 1 × (4096 + 512) tokens × 2 × 80 layers × 8 KV heads × 128 × 2 B
    assert kv_cache_bytes(run) == 4608 * 2 * 80 * 8 * 128 * 2
    moments = {n: (v, when) for n, v, _p, when in later_moments(run, compute_terms(run))}
    assert moments["ppo generation"][1].endswith("step 0")


def test_the_sampling_phase_does_not_fit_an_80gb_card_and_is_the_peak():
    est = estimate(_zero3(_run()), parse_gpu_spec("8xA800-80GB"))
    assert est.fits is False
    assert est.details["peak_moment"] == "PPO rollout generation, first at step 0"
    assert est.details["first_oom"] == "PPO rollout generation, first at step 0"
    assert est.peak_allocated > 136.0


def test_outside_zero3_only_the_kv_cache_is_added_and_sft_has_no_such_moment():
    run = _run()
    assert not run.deepspeed
    assert gathered_model_bytes(run, count_params(run), 2.0) == 0.0
    sft = _run(stage="sft")
    assert sft.gen_new_tokens == 0
    assert "ppo generation" not in {n for n, *_ in later_moments(sft, compute_terms(sft))}
    # LF's default max_new_tokens when the YAML has none
    values_default = _run(max_new_tokens=None)
    assert values_default.gen_new_tokens == 1024
