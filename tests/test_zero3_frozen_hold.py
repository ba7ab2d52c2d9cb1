"""DeepSpeed 0.19.3 and later keep the frozen base weights a reentrant checkpoint recomputes gathered until backward
ends (analyzers/memory/zero3.py `frozen_recompute_hold`; measured by benchmarks/zero3_lora_stack.py). Every expected
figure is a hand count of Qwen2.5-7B's shapes (config.json: hidden 3584, 28 layers, 4 KV heads of 128, intermediate
18944) with LoRA rank 8 on every linear and DeepSpeed's default persistence threshold (1e5 elements)."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.zero3 import (all_layers_gathered_bytes, frozen_recompute_hold,
                                                    persistent_elements, zero3_live)
from finetune_doctor.facts.assumestack import NO_FROZEN_HOLD_RELEASE
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run.stack import FROZEN_HOLD_ABSENT_RELEASE
from finetune_doctor.run import resolve_run

Q2 = "Qwen/Qwen2.5-7B"
H, KV, I = 3584, 512, 18944
LAYER = 2 * H * H + 2 * H * KV + 3 * H * I              # 233,046,016 linear elements per layer
LORA_BIG = 3 * 8 * I                                    # lora_B of gate/up, lora_A of down: 151,552 > 1e5 each
GIB = float(1 << 30)


class _DS:
    """A resolved DeepSpeed config as readers/deepspeed/dsconfig.py hands it to resolve_run."""

    def __init__(self, zo: dict):
        self.resolved = {"zero_optimization": zo}
        self.defaults = {}


def _run(ds: str | None, gpus: str = "2xA100-80GB", **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 512, "finetuning_type": "lora",
            "lora_target": "all"}
    arch, _ = load_arch(Q2)
    stack = (("deepspeed", ds, "env.txt"),) if ds else ()
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec(gpus), _DS({"stage": 3}), stack_sources=stack)


def test_which_runs_hold_the_frozen_layers():
    assert LAYER == 233_046_016
    assert NO_FROZEN_HOLD_RELEASE == FROZEN_HOLD_ABSENT_RELEASE == "0.19.2"
    assert frozen_recompute_hold(_run("0.19.3")) and frozen_recompute_hold(_run("0.19.8"))
    # unnamed: LLaMA-Factory's deepspeed extra installs <= 0.18.4, so the hold is weighed as an alternative, not applied
    assert not frozen_recompute_hold(_run(None))
    assert not frozen_recompute_hold(_run("0.19.2")) and not frozen_recompute_hold(_run("0.16.4"))
    assert not frozen_recompute_hold(_run("0.19.8", finetuning_type="full"))          # nothing frozen is attributed
    assert not frozen_recompute_hold(_run("0.19.8", use_reentrant_gc=False))         # recompute inside its module
    assert not frozen_recompute_hold(_run("0.19.8", disable_gradient_checkpointing=True))
    assert not frozen_recompute_hold(_run("0.19.8", quantization_bit=4))              # not measured


def test_every_frozen_layer_is_gathered_at_the_first_layers_backward():
    hold, before = _run("0.19.8"), _run("0.19.2")
    assert all_layers_gathered_bytes(hold) == 2.0 * 28 * (LAYER + LORA_BIG)          # 12.18 GiB of bf16
    t, t0 = compute_terms(hold), compute_terms(before)
    c = count_params(hold)
    z = zero3_live(hold, c)
    assert t0.backward_hold == 0.0 and t.live_params == t0.live_params               # no other moment moves
    assert t.live_params == pytest.approx(z.peak + z.persistent, rel=1e-12)
    assert t.backward_hold == pytest.approx(2.0 * 28 * (LAYER + LORA_BIG) - z.peak, rel=1e-12)
    assert persistent_elements(hold) > 0 and t.backward_hold / GIB == pytest.approx(11.16, abs=0.01)
    m = estimate(hold, parse_gpu_spec("2xA100-80GB")).details["moments_gib"]
    m0 = estimate(before, parse_gpu_spec("2xA100-80GB")).details["moments_gib"]
    assert "backward, first layer of step 2" not in m0
    assert m["loss of step 2"] == m0["loss of step 2"] and m["backward end of step 2"] == m0["backward end of step 2"]
    g_bwd = max(t.gradients if t.grads_persistent else 0.0, t.grads_in_backward)
    first = (t.weights + t.buffers + t.grads_always + t.master + t.states + t.live_params + t.backward_hold + g_bwd
             + t.recompute)
    assert m["backward, first layer of step 2"] == pytest.approx(first / GIB, rel=1e-12)
    assert m["backward, first layer of step 2"] > m0["backward of step 2"] + 10.0     # the run's peak moves there


def test_one_rank_gathers_nothing_of_its_own():
    # one rank, partitions on the device: a gathered parameter is a view of its partition (zero3.py
    # `gather_allocates`), so holding it costs nothing
    assert compute_terms(_run("0.19.8", gpus="1xA100-80GB")).backward_hold == 0.0
