"""LLaMA-Factory's ``pure_bf16`` in the memory model, by engine, each figure computed here from the parameter count.

What LF does (oracle snapshot): ``pure_bf16`` sets only the compute dtype (hparams/parser.py:640-641), not
TrainingArguments.bf16, so no AMP runs unless ``bf16`` is set too; the model loads in its checkpoint's dtype
(model/loader.py:154, ``torch_dtype="auto"``) and LF leaves the trainable parameters in it (model/adapter.py:338-344);
transformers' Trainer builds torch AdamW on those parameters, whose ``exp_avg``/``exp_avg_sq`` are ``zeros_like(p)``:
bf16 moments, no fp32 master copy. Under FSDP the accelerate config's mixed precision decides: ``no`` keeps the bf16
flat parameters, ``bf16`` upcasts trainable flat parameters to fp32 (accelerate 0.30.0+, huggingface/accelerate#2674).
Under DeepSpeed the stock files' ``"auto"`` precision follows TrainingArguments.bf16/fp16, so ``pure_bf16`` alone
leaves both disabled: ZeRO-0 steps the plain torch optimizer (DeepSpeed engine.py ``_do_optimizer_sanity_check``,
``_configure_optimizer``), ZeRO-1/2 keep fp32 masters and fp32 states; LF refuses pure_bf16 under ZeRO-3
(parser.py:502-503).

Qwen2.5-0.5B: 494,032,768 parameters (tied embeddings; 151,936 × 896 embedding, 24 layers).
"""

import pytest

from finetune_doctor.analyzers.memory import compute_terms
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
from finetune_doctor.readers.deepspeed.dsconfig import build_ds_config
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

MODEL = "Qwen/Qwen2.5-0.5B"
P = 494_032_768
BASE = {"model_name_or_path": MODEL, "finetuning_type": "full", "per_device_train_batch_size": 1,
        "cutoff_len": 1024, "optim": "adamw_torch_fused"}
STOCK_PRECISION = {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}


def _one_gpu(**cfg):
    arch, _ = load_arch(MODEL)
    return resolve_run({**BASE, **cfg}, arch, parse_gpu_spec("A100-80GB"))


def _fsdp(mixed: str, **cfg):
    acc = accelerate_config_from_values(
        {"distributed_type": "FSDP", "mixed_precision": mixed, "num_processes": 2,
         "fsdp_config": {"fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}, "acc.yaml")
    arch, _ = load_arch(MODEL)
    return resolve_run({**BASE, **cfg}, arch, parse_gpu_spec("2xA100-80GB"), launch=LaunchInputs(acc))


def _ds(stage: int, n: int, **cfg):
    lf = {**BASE, **cfg}
    raw = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": stage}, **STOCK_PRECISION}
    ds = build_ds_config(raw, "ds.json", {}, lf, n, 896)
    arch, _ = load_arch(MODEL)
    return resolve_run(lf, arch, parse_gpu_spec(f"{n}xA100-80GB"), ds=ds)


def test_parameter_count_is_the_checkpoints():
    assert count_params(_one_gpu(pure_bf16=True)).trainable == P


def test_one_gpu_pure_bf16_keeps_bf16_params_and_moments_without_amp():
    run = _one_gpu(pure_bf16=True)
    assert (run.trainable_dtype, run.compute_dtype, run.autocast) == ("bfloat16", "bfloat16", None)
    t = compute_terms(run)
    assert t.gradients == P * 2            # bf16 gradients
    assert t.states == P * 4               # exp_avg + exp_avg_sq, 2 bytes each
    assert (t.master, t.step_temp) == (0.0, 0.0)   # no fp32 copy; the fused step keeps no temporaries


def test_one_gpu_bf16_amp_upcasts_and_pure_bf16_with_bf16_does_not():
    amp, both = compute_terms(_one_gpu(bf16=True)), compute_terms(_one_gpu(bf16=True, pure_bf16=True))
    assert (amp.gradients, amp.states) == (P * 4, P * 8)     # LF's fp32 upcast: fp32 grads and moments
    assert (both.gradients, both.states) == (P * 2, P * 4)
    assert _one_gpu(bf16=True, pure_bf16=True).autocast == "bfloat16"


def test_fsdp_without_mixed_precision_shards_bf16_params_grads_and_moments():
    run = _fsdp("no", pure_bf16=True)
    assert run.fsdp_param_dtype is None
    t = compute_terms(run)
    # FSDP1 pads each unit's FlatParameter to a multiple of 2 ranks: at most a few elements per unit above P / 2
    assert t.gradients == pytest.approx(P / 2 * 2, rel=1e-6)
    assert t.states == pytest.approx(P / 2 * 4, rel=1e-6)
    assert t.master == 0.0


def test_fsdp_bf16_mixed_precision_upcasts_the_flat_params_even_with_pure_bf16():
    t = compute_terms(_fsdp("bf16", pure_bf16=True, bf16=True))
    assert t.gradients == pytest.approx(P / 2 * 4, rel=1e-6)
    assert t.states == pytest.approx(P / 2 * 8, rel=1e-6)


def test_zero0_pure_bf16_steps_the_plain_optimizer():
    run = _ds(0, 1, pure_bf16=True)
    assert (run.deepspeed, run.zero_stage, run.bf16) == (True, 0, False)
    t = compute_terms(run)
    assert (t.master, t.grads_step) == (0.0, 0.0)
    assert t.states == P * 4 and t.gradients == P * 2


def test_zero0_with_bf16_keeps_fp32_masters_and_states():
    t = compute_terms(_ds(0, 1, pure_bf16=True, bf16=True))
    assert t.master == P * 4 and t.states == P * 8


def test_zero2_pure_bf16_keeps_fp32_master_partitions():
    t = compute_terms(_ds(2, 2, pure_bf16=True))
    assert t.master == P * 4 / 2 and t.states == P * 8 / 2
