"""Two ZeRO-3 terms read from DeepSpeed's code (analyzers/memory/zero3.py): the gathered weights that torch's own
F.linear keeps until backward when DeepSpeed's linear wrapper is not installed (`linear_weights_retained`), and the
half-precision flat copy of a sub-group's gradients made at the optimizer step (`sub_group_half_flat_bytes`).
Every expected figure is a hand count of Llama-3-8B's shapes (config.json: hidden 4096, 32 layers, 8 KV heads,
intermediate 14336, vocabulary 128256, untied head)."""

from __future__ import annotations

import dataclasses

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.weights import weight_terms
from finetune_doctor.analyzers.memory.zero3 import (LINEAR_WRAP_ABSENT_RELEASE, linear_weights_retained,
                                                    persistent_elements,
                                                    sub_group_half_flat_bytes, zero3_live)
from finetune_doctor.facts.assumestack import NO_LINEAR_WRAP_RELEASE
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

L3 = "meta-llama/Meta-Llama-3-8B"
Q, K, V, O = 4096 * 4096, 4096 * 1024, 4096 * 1024, 4096 * 4096
G = U = D = 4096 * 14336
P_LAYER = Q + K + V + O + G + U + D          # 218,103,808 linear elements per layer
HEAD = 128256 * 4096
BASE = 32 * P_LAYER + 2 * HEAD + 65 * 4096   # + embedding, head and 65 RMSNorm weights
GIB = float(1 << 30)


class _DS:
    """A resolved DeepSpeed config as readers/deepspeed/dsconfig.py hands it to resolve_run."""

    def __init__(self, zo: dict):
        self.resolved = {"zero_optimization": zo}
        self.defaults = {}


def _run(zo: dict | None = None, deepspeed: str | None = None, **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "full",
            "disable_gradient_checkpointing": True}
    arch, _ = load_arch(L3)
    stack = (("deepspeed", deepspeed, "--env"),) if deepspeed else ()
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec("8xA100-80GB"), _DS(zo or {"stage": 3}),
                       stack_sources=stack)


def _outside_init(run):
    return dataclasses.replace(run, zero3_init=False)


def test_when_the_gathered_weights_stay_with_autograd():
    built_inside = _run()
    assert built_inside.zero3_init and not linear_weights_retained(built_inside)     # zero.Init installed the wrapper
    # DeepSpeed unnamed: the newest behaviour (0.19.8), as the deepspeed-version assumption states; it weighs 0.19.3
    assert not linear_weights_retained(_outside_init(built_inside))
    assert linear_weights_retained(_outside_init(_run(deepspeed=LINEAR_WRAP_ABSENT_RELEASE)))
    assert NO_LINEAR_WRAP_RELEASE == LINEAR_WRAP_ABSENT_RELEASE
    assert linear_weights_retained(_outside_init(_run(deepspeed="0.14.2")))
    assert linear_weights_retained(_outside_init(_run(deepspeed="0.19.3")))
    assert not linear_weights_retained(_outside_init(_run(deepspeed="0.19.4")))      # DeepSpeed #8189
    # memory_efficient_linear false: no wrapper even for a model built under zero.Init
    assert linear_weights_retained(_run(zo={"stage": 3, "memory_efficient_linear": False}, deepspeed="0.19.8"))
    # checkpointing: the first forward saves nothing (reentrant) or drops what it saves (non-reentrant)
    assert not linear_weights_retained(_outside_init(_run(deepspeed="0.14.2", disable_gradient_checkpointing=False)))
    assert not linear_weights_retained(_outside_init(_run(deepspeed="0.14.2", zo={"stage": 2})))
    assert not linear_weights_retained(_outside_init(_run(deepspeed="0.14.2", finetuning_type="lora",
                                                          quantization_bit=4)))


def test_accelerate_zero3_init_flag_false_reaches_the_term():
    acc = accelerate_config_from_values({"distributed_type": "DEEPSPEED", "num_processes": 8, "mixed_precision": "bf16",
                                         "deepspeed_config": {"zero_stage": 3, "zero3_init_flag": False}}, "ds.yaml")
    arch, _ = load_arch(L3)
    run = resolve_run({"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "full",
                       "disable_gradient_checkpointing": True}, arch, parse_gpu_spec("8xA100-80GB"), None,
                      stack_sources=(("accelerate", "0.33.0", "--env"), ("deepspeed", "0.14.2", "--env")),
                      launch=LaunchInputs(acc, None))
    assert run.zero3_init is False and linear_weights_retained(run)


def test_every_decoder_layer_and_the_head_are_gathered_at_the_loss():
    run = _outside_init(_run(deepspeed="0.14.2"))
    c = count_params(run)
    assert c.base == BASE
    z = zero3_live(run, c)
    persistent = 65 * 4096 * 2.0 * (1 - 1 / 8)          # the norms (4096 <= DeepSpeed's 1e5 threshold), 7/8 extra
    assert z.persistent == pytest.approx(persistent)
    # all 32 layers' linears in bf16 held by autograd, and the output layer gathered for the loss
    retained = 2.0 * (32 * P_LAYER + HEAD)
    assert weight_terms(run, c).live == pytest.approx(retained + persistent)
    # under zero.Init the same run keeps only what the coordinator keeps (the head at the loss, the last layer in
    # backward): the difference is the rest of the decoder
    inside = weight_terms(_run(), c).live
    assert inside == pytest.approx(z.peak + persistent)
    assert weight_terms(run, c).live - inside > 2.0 * 30 * P_LAYER
    # and the peak moves by that much (the loss moment holds it; GiB)
    gain = (estimate(run).peak_allocated - estimate(_run()).peak_allocated) * GIB
    assert gain == pytest.approx(retained + persistent - inside, rel=1e-6)


def test_the_half_flat_copy_of_a_sub_group_at_the_step():
    run = _run()
    c = count_params(run)
    part = BASE / 8                                       # 1,003,782,656 elements: above sub_group_size 1e9
    assert part > 1e9
    assert sub_group_half_flat_bytes(run, c.trainable) == 2.0 * 1e9
    small = _run(zo={"stage": 3, "sub_group_size": 1e8})
    assert sub_group_half_flat_bytes(small, c.trainable) == 2.0 * 1e8
    # torch AdamW foreach makes a temporary the size of the fp32 gradient (4·1e9): larger than the flat copy
    foreach = compute_terms(dataclasses.replace(run, optimizer_impl="foreach"), c)
    assert foreach.grads_step == 4.0 * 1e9 and foreach.step_temp == 4.0 * 1e9
    # a fused optimizer makes none, so the flat copy is what the step holds beside the fp32 gradient
    fused = compute_terms(dataclasses.replace(run, optimizer_impl="fused"), c)
    assert fused.grads_step == 4.0 * 1e9 and fused.step_temp == 2.0 * 1e9
    # fp32 training flattens fp32 gradients, and .to(fp32) returns that flat tensor itself: it is the fp32
    # gradient grads_step counts, nothing beside it; the optimizer on the host leaves nothing on the device
    assert sub_group_half_flat_bytes(dataclasses.replace(run, compute_dtype="float32"), c.trainable) == 0.0
    off = _run(zo={"stage": 3, "offload_optimizer": {"device": "cpu"}})
    assert sub_group_half_flat_bytes(off, c.trainable) == 0.0 and compute_terms(off, c).step_temp == 0.0
    assert sub_group_half_flat_bytes(_run(zo={"stage": 2}), c.trainable) == 0.0


def test_persistent_elements_unchanged_by_the_new_terms():
    # the threshold decides persistence, not the linear wrapper
    assert persistent_elements(_outside_init(_run())) == persistent_elements(_run()) == 65 * 4096


def test_unnamed_deepspeed_weighs_the_release_without_the_wrapper(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    acc = tmp_path / "ds.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 8\n"
                   "mixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: false\n")
    env = tmp_path / "pip-freeze.txt"
    env.write_text("accelerate==0.33.0\n")
    cfg = tmp_path / "train.yaml"

    def report(**extra) -> tuple[float, dict]:
        keys = {"model_name_or_path": L3, "stage": "sft", "do_train": True, "finetuning_type": "full",
                "dataset": "alpaca_en_demo", "template": "llama3", "cutoff_len": 2048,
                "per_device_train_batch_size": 1, "bf16": True, "output_dir": "out", **extra}
        cfg.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in keys.items()))
        r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "8xA100-80GB", "--no-data", "--offline",
                                      "--accelerate-config", str(acc), "--env", str(env), "--format", "json"])
        assert r.exit_code in (0, 1), r.output
        d = json.loads(r.stdout)
        return d["memory"]["per_gpu_gib"]["total"], {a["name"]: a for a in d["assumptions"]}

    total, seen = report(disable_gradient_checkpointing=True)
    effect = seen["deepspeed-version"]["effect"]["total_gib"]
    # the release without the wrapper holds ~30 more bf16 decoder layers of Llama-3-8B at the loss (~12 GiB)
    assert effect[NO_LINEAR_WRAP_RELEASE] > total + 2.0 * 30 * P_LAYER / GIB
    # with checkpointing (LF's default) the release changes nothing here and is not weighed
    assert NO_LINEAR_WRAP_RELEASE not in report()[1]["deepspeed-version"]["effect"]["total_gib"]
