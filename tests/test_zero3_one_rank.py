"""ZeRO-3 on one rank gathers nothing of its own (analyzers/memory/zero3.py `gather_allocates`): DeepSpeed's
``_no_gather_coalesced`` makes a parameter a view of its on-device partition (partition_parameters.py
``NoGatherHandle``), so the coordinator's live parameters, the output layer at the loss and any weight autograd
keeps cost no bytes beyond the partition; with ``offload_param`` the partition is on the host and is copied.
Every expected figure is a hand count of Llama-3-8B's shapes (config.json: hidden 4096, 32 layers, 8 KV heads,
intermediate 14336, vocabulary 128256, untied head)."""

from __future__ import annotations

import dataclasses

from test_zero3_linear_retain import BASE, HEAD, _DS

from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.weights import weight_terms
from finetune_doctor.analyzers.memory.zero3 import (LINEAR_WRAP_ABSENT_RELEASE, gather_allocates,
                                                    linear_weights_retained, zero3_live)
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

L3 = "meta-llama/Meta-Llama-3-8B"


def _run(gpus: str, zo: dict | None = None, deepspeed: str | None = None, **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "lora",
            "lora_target": "all"}
    arch, _ = load_arch(L3)
    stack = (("deepspeed", deepspeed, "--env"),) if deepspeed else ()
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec(gpus), _DS(zo or {"stage": 3}), stack_sources=stack)


def test_one_rank_gathers_nothing_two_ranks_gather_the_output_layer():
    one, two = _run("1xA100-80GB"), _run("2xA100-80GB")
    assert one.world_size == 1 and two.world_size == 2
    assert not gather_allocates(one) and gather_allocates(two)
    z1, z2 = zero3_live(one), zero3_live(two)
    assert (z1.persistent, z1.at_loss, z1.in_backward) == (0.0, 0.0, 0.0)
    # two ranks: the untied output layer (128256 x 4096) in bf16 is gathered at the loss; the reuse distance
    # keeps no decoder module across the boundary (2 x 525,336,576 head elements > 1e9)
    assert HEAD == 525_336_576
    assert z2.at_loss == 2.0 * HEAD == 1_050_673_152
    w1 = weight_terms(one, count_params(one))
    assert w1.live == 0.0
    # the frozen base is whole on one rank (every base element in bf16) beside LoRA r8 on all seven linears, also
    # in bf16 (DeepSpeed's engine casts the module to its half dtype; the fp32 copies are the optimizer's masters):
    # 8 x (q 4096+4096, k and v 4096+1024, o 4096+4096, gate and up 4096+14336, down 14336+4096) x 32 layers
    assert BASE == 8_030_261_248
    adapters = 8 * (8192 + 2 * 5120 + 8192 + 3 * 18432) * 32
    assert adapters == 20_971_520
    assert w1.weights == 2.0 * BASE + 2.0 * adapters == 16_102_465_536


def test_parameter_offload_on_one_rank_copies_the_partition_to_the_device():
    off = _run("1xA100-80GB", zo={"stage": 3, "offload_param": {"device": "cpu"},
                                  "offload_optimizer": {"device": "cpu"}})
    assert off.offload_param and gather_allocates(off)
    assert zero3_live(off).at_loss == 2.0 * HEAD
    # the optimizer alone offloaded keeps the partitions on the device: still a view
    opt_only = _run("1xA100-80GB", zo={"stage": 3, "offload_optimizer": {"device": "cpu"}})
    assert not opt_only.offload_param and not gather_allocates(opt_only)
    assert zero3_live(opt_only).at_loss == 0.0


def test_weights_autograd_keeps_on_one_rank_are_the_partitions():
    # no linear wrapper (a model built outside zero.Init, DeepSpeed 0.19.3): on 8 ranks every decoder weight and
    # the output layer stay gathered at the loss; on one rank they are the partitions, so nothing is added
    full = {"finetuning_type": "full", "disable_gradient_checkpointing": True}
    one = dataclasses.replace(_run("1xA100-80GB", deepspeed=LINEAR_WRAP_ABSENT_RELEASE, **full), zero3_init=False)
    eight = dataclasses.replace(_run("8xA100-80GB", deepspeed=LINEAR_WRAP_ABSENT_RELEASE, **full), zero3_init=False)
    assert linear_weights_retained(one) and linear_weights_retained(eight)
    assert weight_terms(one, count_params(one)).live == 0.0
    # 8 ranks: 32 layers of 218,103,808 linear elements plus the output layer, in bf16, and the 65 RMSNorm weights
    # of 4096 held whole (7/8 of them beyond the rank's own partition)
    p_layer = 218_103_808
    live8 = weight_terms(eight, count_params(eight)).live
    assert 2.0 * (32 * p_layer + HEAD) == 15_009_316_864
    assert live8 == 15_009_316_864 + 2.0 * 65 * 4096 * 7 / 8 == 15_009_782_784
