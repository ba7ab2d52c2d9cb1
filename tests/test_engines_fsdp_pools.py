"""FSDP1's allocator pools (analyzers/memory/fsdp.py ``stream_pools``, analyzers/memory/reserve.py ``pool_reserve``) against
their definitions, with every unit size computed here from the model's parameter shapes: the unshard stream holds
the root unit plus (running + backward-prefetched + queued frees) decoder layers (torch 2.13.0 ``_runtime_utils.py``
rate limiter, ``_limiter_utils.py:15``), the pre-unshard stream a low-precision shard per unit in flight, and FSDP
initialisation leaves the largest unit's parameters, its flat copy and a broadcast bucket in the default pool
(``_init_utils.py:60``, ``:603-637``; ``_flat_param.py:893``, ``:945-975``). Accelerate's FSDP1 upcast of half
trainable flat params to fp32 under mixed precision (accelerate ``accelerator.py:1991-2032``)."""

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

MODEL = "Qwen/Qwen2.5-0.5B"
BUCKET = 250 * 1024 * 1024


def _run(n: int, cfg: dict, mixed: str = "bf16", **fsdp):
    base = {"model_name_or_path": MODEL, "bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 1024,
            "optim": "adamw_torch_fused"}
    acc = accelerate_config_from_values(
        {"distributed_type": "FSDP", "mixed_precision": mixed, "num_processes": n,
         "fsdp_config": {"fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                         "fsdp_sync_module_states": True, **fsdp}}, "acc.yaml")
    arch, _ = load_arch(MODEL)
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec(f"{n}xA100-80GB"), launch=LaunchInputs(acc))


def _units(run):
    """(one decoder layer's frozen elements, its LoRA elements, the root's elements) from the shapes."""
    a = run.arch
    layer = sum(x.params for x in a.layer_linears(0)) + a.layer_other_params(0)
    lora = count_params(run).adapter / a.num_layers
    root = a.embedding_params() + a.lm_head_params() + a.final_norm_params()
    return layer, lora, root


@pytest.mark.parametrize("prefetch,pending", [("BACKWARD_PRE", 1), ("NO_PREFETCH", 1)])
def test_lora_unshard_and_pre_unshard_pools(prefetch, pending):
    run = _run(2, {"finetuning_type": "lora", "lora_target": "all"}, fsdp_backward_prefetch=prefetch)
    t = compute_terms(run)
    layer, lora, root = _units(run)
    big = 2.0 * (layer + lora)                 # all-gathered in bf16 (param_dtype)
    big_stored = 2.0 * layer + 4.0 * lora      # frozen bf16 as loaded, LoRA fp32 (LF's upcast)
    running_and_prefetched = 2 if prefetch == "BACKWARD_PRE" else 1
    n = running_and_prefetched + pending       # LoRA leaves are units: one layer free stays queued
    unshard = 2.0 * root + n * big
    pre_unshard = (n * big + 2.0 * root) / 2   # the low-precision shard of each unit in flight
    assert t.side_pools == pytest.approx(unshard + pre_unshard, rel=1e-9)
    assert t.side_live == pytest.approx(t.live_params, rel=1e-12)
    unit = max(big_stored, 2.0 * root)
    assert t.init_floor == pytest.approx(t.weights + 2 * unit + min(BUCKET, unit), rel=1e-9)


def test_full_fine_tuning_queues_two_layer_frees():
    run = _run(4, {"finetuning_type": "full"}, fsdp_backward_prefetch="BACKWARD_PRE")
    t = compute_terms(run)
    layer, _, root = _units(run)
    # no LoRA leaves between two decoder layers: the limiter's two queued frees are both layers
    unshard = 2.0 * root + (2 + 2) * 2.0 * layer
    pre_unshard = (4 * 2.0 * layer + 2.0 * root) / 4
    assert t.side_pools == pytest.approx(unshard + pre_unshard, rel=1e-9)


def test_reserve_is_the_pools_over_the_peak():
    run = _run(2, {"finetuning_type": "lora", "lora_target": "all"}, fsdp_backward_prefetch="BACKWARD_PRE")
    est = estimate(run, parse_gpu_spec("2xA100-80GB"))
    t = compute_terms(run)
    peak = est.peak_allocated * (1 << 30)
    share = est.details["reserve_share"]
    default_pool = max((peak - t.side_live) * (1 + share), t.init_floor)
    assert est.details["reserve_gib"] * (1 << 30) == pytest.approx(default_pool + t.side_pools - peak, rel=1e-9)
    # the side pools exceed what the tensor peak counts: the FSDP reserve is larger than the share alone
    assert est.details["reserve_gib"] > share * est.peak_allocated


def test_outside_fsdp1_the_reserve_is_the_share():
    arch, _ = load_arch(MODEL)
    run = resolve_run({"model_name_or_path": MODEL, "finetuning_type": "lora", "bf16": True, "cutoff_len": 1024},
                      arch, parse_gpu_spec("A100-80GB"))
    est = estimate(run, parse_gpu_spec("A100-80GB"))
    assert est.details["reserve_gib"] == pytest.approx(est.peak_allocated * est.details["reserve_share"], rel=1e-12)
    v2 = _run(2, {"finetuning_type": "lora", "lora_target": "all"}, fsdp_version=2)
    t2 = compute_terms(v2)
    assert (t2.side_pools, t2.init_floor) == (0.0, 0.0)


def test_accelerate_upcasts_half_trainable_flat_params():
    mixed = _run(2, {"finetuning_type": "full", "pure_bf16": True})
    plain = mixed.with_(fsdp_param_dtype=None)   # no mixed precision: the flat params stay bf16
    tm, tp = compute_terms(mixed), compute_terms(plain)
    assert tm.weights == pytest.approx(2 * tp.weights, rel=1e-12)
    assert tm.gradients == pytest.approx(2 * tp.gradients, rel=1e-12)


def test_expandable_segments_only_under_llamafactory_cli():
    """LF 0.9.5 launcher.py:80-83 exports expandable_segments:True when llamafactory-cli starts torchrun; an
    accelerate launch keeps the allocator's default, so its default-stream share is the table's 'off' column."""
    from finetune_doctor.analyzers.memory.reserve import reserve_fraction

    acc = _run(2, {"finetuning_type": "lora", "lora_target": "all"})
    assert acc.launcher == "accelerate"
    est = estimate(acc, parse_gpu_spec("2xA100-80GB"))
    assert est.details["reserve_share"] == reserve_fraction(acc, compute_terms(acc), expandable=False)[0]
    arch, _ = load_arch(MODEL)
    cli = resolve_run({"model_name_or_path": MODEL, "finetuning_type": "lora", "bf16": True, "cutoff_len": 1024},
                      arch, parse_gpu_spec("2xA100-80GB"))
    est_cli = estimate(cli, parse_gpu_spec("2xA100-80GB"))
    assert est_cli.details["reserve_share"] == reserve_fraction(cli, compute_terms(cli), expandable=True)[0]
    assert reserve_fraction(cli, compute_terms(cli), expandable=True)[0] != \
        reserve_fraction(cli, compute_terms(cli), expandable=False)[0]


def test_pure_bf16_leaves_accelerates_mixed_precision_alone():
    """LF's pure_bf16 sets only the compute dtype (hparams/parser.py:640), so FSDP's mixed precision is the
    accelerate config's: none under mixed_precision 'no' (bf16 flat params, no upcast), bf16 under 'bf16'."""
    base = {"finetuning_type": "full", "pure_bf16": True, "bf16": False}
    off, on = _run(2, base, mixed="no"), _run(2, base, mixed="bf16")
    assert (off.fsdp_param_dtype, on.fsdp_param_dtype) == (None, "bfloat16")
    assert compute_terms(on).weights == pytest.approx(2 * compute_terms(off).weights, rel=1e-12)
