"""A ZeRO-3 model built outside deepspeed.zero.Init (run/engines.py `_zero3_init`, analyzers/memory/zero3.py
`unpartitioned_load_bytes`): when it happens, what a rank then holds, checked against a hand count of the model's
parameters and against a replay of DeepSpeed's partitioning through the caching-allocator model."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.zero3 import unpartitioned_load_bytes
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.probes.allocator import CachingAllocator
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values, parse_launch
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

GIB = float(1 << 30)
L3 = "meta-llama/Meta-Llama-3-8B-Instruct"
LORA = {"model_name_or_path": L3, "stage": "sft", "finetuning_type": "lora", "lora_target": "all", "bf16": True,
        "per_device_train_batch_size": 1, "cutoff_len": 2048}
# Llama-3-8B: 32 layers of 218,103,808 linear elements, embedding and untied head of 128256 × 4096, 65 RMSNorm
# weights of 4096 (2 per layer and the final one)
BASE = 32 * 218_103_808 + 2 * 128256 * 4096 + 65 * 4096


def _acc(**ds):
    return accelerate_config_from_values({"distributed_type": "DEEPSPEED", "num_processes": 8,
                                          "mixed_precision": "bf16", "deepspeed_config": ds}, "ds.yaml")


def _run(acc, accelerate: str | None = "0.33.0", launch: str | None = None, cfg: dict | None = None,
         deepspeed: str | None = None):
    arch, _ = load_arch(L3)
    stack = (("accelerate", accelerate, "--env"),) if accelerate else ()
    stack += (("deepspeed", deepspeed, "--env"),) if deepspeed else ()
    return resolve_run(cfg or LORA, arch, parse_gpu_spec("8xA100-80GB"), None, stack_sources=stack,
                       launch=LaunchInputs(acc, parse_launch(launch) if launch else None))


def test_when_the_model_is_built_outside_zero_init():
    off = _acc(zero_stage=3, zero3_init_flag=False)
    assert _run(off).zero3_init is False                        # accelerate 0.33.0: no weakref, no zero.Init
    assert _run(off, accelerate="1.3.0").zero3_init is True     # from 1.0.0 the weakref is set anyway
    assert _run(off, accelerate=None).zero3_init is True        # unnamed: LF's supported range (>= 1.3.0)
    assert _run(_acc(zero_stage=3)).zero3_init is True          # absent: DeepSpeedPlugin defaults to is_zero3()
    assert _run(_acc(zero_stage=3, zero3_init_flag=True)).zero3_init is True
    assert _run(_acc(zero_stage=2, zero3_init_flag=False)).zero3_init is True   # nothing is partitioned at stage 2
    # accelerate launch's own flag wins over the config file
    on = _acc(zero_stage=3, zero3_init_flag=True)
    line = "accelerate launch --config_file ds.yaml --zero3_init_flag false src/train.py c.yaml"
    assert _run(on, launch=line).zero3_init is False
    assert any("zero3_init_flag false" in n for n in _run(off).notes)


def test_the_whole_model_is_held_at_load_and_stays_reserved():
    # DeepSpeed 0.19.2: before 0.19.3 the step holds one frozen layer at a time (zero3.py `frozen_recompute_hold`),
    # so the step's peak stays under the whole model and the floor is what decides
    r = _run(_acc(zero_stage=3, zero3_init_flag=False), deepspeed="0.19.2")
    c = count_params(r)
    assert c.base == BASE
    whole = BASE * 2.0                                          # LF loads in the compute dtype (bf16 here)
    assert unpartitioned_load_bytes(r, c) == whole
    t = compute_terms(r)
    assert t.load_whole == whole and t.init_floor == whole
    assert t.weights < whole / 4                                # the step itself holds an eighth plus gathered layers
    est = estimate(r, parse_gpu_spec("8xA100-80GB"))
    assert est.details["moments_gib"]["model load"] == pytest.approx(whole / GIB, rel=1e-9)
    assert est.per_gpu["total"] - est.details["runtime_gib"] >= whole / GIB - 1e-9
    # the same run under zero.Init: nothing whole
    z = _run(_acc(zero_stage=3, zero3_init_flag=False), accelerate="1.3.0", deepspeed="0.19.2")
    assert unpartitioned_load_bytes(z, count_params(z)) == 0.0 and compute_terms(z).load_whole == 0.0
    ez = estimate(z, parse_gpu_spec("8xA100-80GB"))
    # the step is the same; only the reserve's floor differs (analyzers/memory/reserve.py: the default pool is the
    # larger of the step's peak with its reserve and the floor)
    step = ez.per_gpu["total"] - ez.details["runtime_gib"]
    assert step < whole / GIB
    assert est.per_gpu["total"] - est.details["runtime_gib"] == pytest.approx(max(step, whole / GIB), rel=1e-6)


def test_the_floor_matches_a_replay_of_deepspeeds_partitioning():
    # DeepSpeed 0.19.8: the model is whole on the rank (LF's device_map), then Init(module=...) partitions each
    # parameter: the partition allocated while the whole tensor lives, then the whole freed
    # (partition_parameters.py _partition_param :1778-1870). Replayed through the caching-allocator model, the
    # rank keeps at least the whole model reserved; under zero.Init (whole, partition, free per parameter) it does not.
    r = _run(_acc(zero_stage=3, zero3_init_flag=False))
    a = r.arch
    params = [a.embedding_params()]
    for layer in range(a.num_layers):
        params += [lin.in_features * lin.out_features for lin in a.layer_linears(layer) for _ in range(lin.count)]
        params.append(a.layer_other_params(layer))
    params += [a.final_norm_params(), a.lm_head_params()]
    assert sum(params) == BASE
    floor = compute_terms(r).init_floor
    late = CachingAllocator()
    wholes = [late.malloc(n * 2) for n in params]
    for n, w in zip(params, wholes):
        late.malloc(-(-n // 8) * 2)
        late.free(w)
    assert floor <= late.reserved <= floor * 1.05
    early = CachingAllocator()
    for n in params:
        w = early.malloc(n * 2)
        early.malloc(-(-n // 8) * 2)
        early.free(w)
    assert early.reserved < floor / 4
