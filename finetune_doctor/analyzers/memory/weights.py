"""Weights, gradients, fp32 masters and optimizer states of one rank, with DeepSpeed ZeRO partitioning.

Sources: reference/deepspeed/memory_estimators.md (ZeRO partition formulas; ZeRO paper §5), DeepSpeed 0.19.8
runtime/zero/stage_1_and_2.py and stage3.py (which buffer exists when), reference/memory/REPORT.md §3 (AdamW's temporaries per
torch implementation), dtypes.py (stored bytes per parameter, optimizer-state bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import finetune_doctor.dtypes as bytes_table
from finetune_doctor.analyzers.memory.zero3 import (all_layers_gathered_bytes, ds_model_bytes, frozen_recompute_hold,
                                                    gather_allocates, linear_weights_retained,
                                                    output_layer_gathered_bytes, recompute_leak,
                                                    sub_group_half_flat_bytes, zero3_live)
from finetune_doctor.analyzers.memory.optstates import badam_states, lowrank_states, muon_states
from finetune_doctor.analyzers.memory.params import ParamCounts, badam_block_params
from finetune_doctor.analyzers.memory.qlora import fused_experts_left_unquantized
from finetune_doctor.arch import Linear, ModelArch
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run


def weight_bytes_per_param(dtype: str, double_quant: bool = True) -> float:
    """Bytes per parameter of stored weights, quantization overhead included (dtypes.py, from
    bitsandbytes' 4-bit and 8-bit layouts)."""
    return bytes_table.weight_bytes_per_param(dtype, double_quant)


def optimizer_state_bytes(impl: str, state_dtype_bytes: float) -> float:
    """Persistent optimizer-state bytes per trainable parameter (dtypes.py, shared with the simulate
    probe): AdamW 2 × `state_dtype_bytes`; bitsandbytes 8-bit AdamW 2 × 1 B + an fp32 absmax per block of 256
    (bitsandbytes ≥ 0.44, ``Optimizer2State.init_state``); Lion one state; AdEMAMix three; Adafactor (HF default
    beta1=None) factored, O(rows + cols), counted as 0; SGD as HF builds it and LOMO: 0."""
    return bytes_table.optimizer_state_bytes_per_param(impl, state_dtype_bytes)


@dataclass(frozen=True)
class WeightTerms:
    """Bytes of the model's parameters on one rank: `weights` resident, `live` gathered for compute (ZeRO-3),
    `stored_per_param` the bytes of one stored (possibly quantized) decoder-linear parameter, `backward_hold` what
    is gathered beyond `live` by the first decoder layer's backward only (ZeRO-3 `frozen_recompute_hold`: every
    frozen layer, released when backward ends)."""

    weights: float
    live: float
    stored_per_param: float
    backward_hold: float = 0.0


def weight_terms(run: Run, c: ParamCounts) -> WeightTerms:
    """Resident and gathered weights (bytes). A reference model (DPO/KTO full/freeze) is a frozen copy."""
    a = run.arch
    N = max(run.world_size, 1)
    stage = run.zero_stage if run.deepspeed else 0
    wq = run.linear_weight_bytes or weight_bytes_per_param(run.weights_dtype, run.double_quantization)
    if run.quantized:
        # weight elements only: bitsandbytes packs a linear's weight, not its bias (Linear4bit/Linear8bitLt keep
        # ``bias`` a plain parameter in the load dtype, bitsandbytes nn/modules.py), and a PTQ checkpoint's bias
        # bytes are already inside its per-element figure (run/quantization.py `stored_linear_bytes`)
        linear = sum(n * sum(lin.count * lin.in_features * lin.out_features for lin in a.kind_linears(k)
                             if not fused_experts_left_unquantized(run, lin))
                     for k, n in a.layer_groups())
        other_frozen = max(c.frozen - linear, 0)
        frozen_bytes = linear * wq + other_frozen * _bytes(a.dtype if a.dtype != "float32" else run.compute_dtype)
    else:
        frozen_bytes = c.frozen * wq
    trainable_bytes = (c.trainable_base + c.adapter) * _bytes(run.trainable_dtype)
    ref = frozen_bytes + c.trainable_base * wq if run.ref_model else 0.0
    weights = (frozen_bytes + trainable_bytes + ref) / (N if stage == 3 else 1)
    live = 0.0
    if stage == 3:
        # gathered and persistent parameters as DeepSpeed's coordinator keeps them (zero3.py)
        z = zero3_live(run, c)
        # DeepSpeed 0.16.0-0.16.7 with non-reentrant checkpointing releases no layer in backward, 0.19.3 and later
        # with reentrant checkpointing no frozen base layer; torch's F.linear (no ZeRO-3 linear wrapper) keeps each
        # gathered weight until its backward (zero3.py)
        gathered = z.peak
        if recompute_leak(run):
            gathered = max(gathered, all_layers_gathered_bytes(run))
        # the frozen layers accumulate through backward and are all gathered only at its end (zero3.py): a moment
        # of their own (moments.py "backward, first layer"), not every moment's
        hold = all_layers_gathered_bytes(run) if frozen_recompute_hold(run) and gather_allocates(run) else 0.0
        if linear_weights_retained(run):
            # at the loss: every decoder layer still held by autograd, and the output layer gathered for the loss
            gathered = max(gathered, all_layers_gathered_bytes(run) + output_layer_gathered_bytes(run))
        if not gather_allocates(run):
            gathered = 0.0  # one rank: what autograd or the coordinator holds is the partition itself (zero3.py)
        live = gathered + z.persistent
        if run.offload_param:
            weights = 0.0   # partitions live on the host; only gathered layers (`live`) reach the GPU
        return WeightTerms(weights, live, wq, max(hold - gathered, 0.0))
    return WeightTerms(weights, live, wq)


@dataclass(frozen=True)
class StateTerms:
    """Gradients, fp32 masters, optimizer states and the update's temporaries of one rank (bytes).

    `trainable` is the parameter count the optimizer holds at once (BAdam: one block); `grads_persistent` says
    gradients live across micro batches; `grads_always` is a buffer kept for the whole run (ZeRO-3), `grads_step`
    the fp32 partition DeepSpeed builds inside step(), `grads_in_backward` what exists from the first moment of
    backward (ZeRO-2's partition buffer).
    """

    trainable: float
    gradients: float
    grads_persistent: bool
    grads_always: float
    grads_step: float
    grads_in_backward: float
    master: float
    states: float
    step_temp: float


def state_terms(run: Run, c: ParamCounts) -> StateTerms:
    """The optimizer side of one rank (StateTerms), with or without DeepSpeed."""
    P_t = c.trainable
    if run.use_badam and run.badam_mode == "layer":
        # BAdam trains one block (decoder layer) at a time: gradients and Adam states exist for that block only
        # (optstates.badam_states; Luo et al. 2024, arXiv:2404.02827)
        P_t = float(badam_block_params(run))
    if run.deepspeed and not ds_plain_optimizer(run):
        return _zero_states(run, P_t)
    return _torch_states(run, c, c.trainable if run.use_badam else P_t)


def ds_plain_optimizer(run: Run) -> bool:
    """True when DeepSpeed steps the client's torch optimizer as it is: ZeRO stage 0 with neither fp16 nor bf16
    enabled. LF's stock DeepSpeed files say ``"enabled": "auto"``, which transformers fills from
    TrainingArguments' bf16/fp16 (integrations/deepspeed.py ``trainer_config_process``); LF's ``pure_bf16`` is not
    TrainingArguments.bf16 (LF hparams/parser.py:640-641 sets only the compute dtype), so `pure_bf16` alone, like
    no precision flag, leaves both disabled. DeepSpeed then takes float32 as the model and accumulation dtype
    (engine.py:1485-1496 ``get_data_types`` at edaa72212), ``_do_optimizer_sanity_check`` returns no wrapper when
    ZeRO is off and both dtypes are float32 (:1978-2020), and ``_configure_optimizer`` keeps the basic optimizer
    (:2056-2071): no fp32 master copy, the states in the parameters' dtype (bf16 under pure_bf16: LF loads the
    checkpoint's dtype and does not upcast, model/adapter.py:338-344), gradients likewise: the terms of a torch
    optimizer (`_torch_states`). ZeRO 1/2 keep fp32 masters and states whatever the flags (DeepSpeedZeroOptimizer's
    fp32 partitions); ZeRO-3 with pure_bf16 is refused by LF (parser.py:502-503)."""
    return bool(run.deepspeed) and run.zero_stage == 0 and not (run.bf16 or run.fp16)


def _lf_optimizer(run: Run, P_t: float, e_t: float) -> StateTerms | None:
    """The optimizers LF builds itself (optstates.py), as StateTerms; None for transformers' own."""
    if run.use_galore or run.use_apollo:
        o = lowrank_states(run, P_t, e_t)
    elif run.use_badam:
        o = badam_states(run, P_t, e_t)
        P_t = o.gradients / e_t if run.badam_mode == "layer" else P_t
    elif run.use_muon:
        o = muon_states(run, P_t, e_t)
    else:
        return None
    return StateTerms(P_t, o.gradients, o.persistent, 0.0, o.grads_step, 0.0, o.master, o.states, o.temp)


def _torch_states(run: Run, c: ParamCounts, P_t: float) -> StateTerms:
    """A torch optimizer on the whole trainable set (no DeepSpeed, or DeepSpeed's plain optimizer:
    `ds_plain_optimizer`): gradients in the trainable dtype, states in the parameters' dtype and no master copy
    (torch 2.13 optim/adam.py:178-184: ``exp_avg``/``exp_avg_sq`` are ``zeros_like(p)``, so LF's pure_bf16 keeps
    bf16 moments), and the temporaries of the fused/foreach/for-loop implementation (reference/memory/REPORT.md §3);
    GaLore, APOLLO, BAdam and Muon as LF builds them (optstates.py)."""
    a = run.arch
    impl = run.optimizer_impl
    e_t = _bytes(run.trainable_dtype)
    state_b = 4.0 if run.trainable_dtype == "float32" else e_t
    lf = _lf_optimizer(run, P_t, e_t)
    if lf is not None:
        return lf
    states = P_t * optimizer_state_bytes(impl, state_b)
    if run.finetuning_type == "full":
        largest_t = max(a.embedding_params(), max((lin.params // lin.count for lin in _all_linears(a)), default=0))
    elif run.finetuning_type in ("lora", "oft"):
        largest_t = max((run.lora_rank * max(lin.in_features, lin.out_features) for lin in _all_linears(a)),
                        default=0)
    else:
        largest_t = c.trainable // max(a.num_layers, 1)
    temp = {"fused": 0.0, "foreach": P_t * state_b, "forloop": 2 * largest_t * state_b}.get(impl, 0.0)
    if impl in ("8bit", "paged_8bit", "8bit_lion"):
        temp = 0.0
    return StateTerms(P_t, P_t * e_t, run.grad_accum > 1, 0.0, 0.0, 0.0, 0.0, states, temp)


def _zero_states(run: Run, P_t: float) -> StateTerms:
    """DeepSpeed keeps fp32 masters and fp32 optimizer states in its optimizer (ZeRO paper §5; DeepSpeed
    estimate_zero2/3_model_states_mem_needs: 2 + 4 + 4 + 8 bytes per parameter). When each exists, read from
    deepspeed 0.19.8 runtime/zero/stage_1_and_2.py and stage3.py:

    * stage 0 (bf16/fp16 optimizer) and 1: half-precision replica gradients from backward to the step;
    * stage 2: each reduced gradient is copied into a half-precision partition buffer (grads_in_partition,
      allocated in backward, released after the step) and the replica gradients are freed bucket by bucket;
    * stage 3: a persistent flat gradient-partition buffer (grad_partitions_flat_buffer) in the model dtype;
    * "half" is DeepSpeed's model dtype: 4 bytes when neither fp16 nor bf16 is enabled (zero3.py `ds_model_bytes`);
    * all: inside step() an fp32 copy of this rank's gradient partition per parameter group (stage 3: per
      sub_group_size elements), freed after that group's update; the fp32 master partition and the optimizer
      states on it are persistent. With the optimizer offloaded, masters, states and the fp32 gradients live on
      the host and the GPU keeps the half partition buffers.
    """
    N = max(run.world_size, 1)
    stage = run.zero_stage
    # stage 0 with bf16 accumulated in fp32 in v0.14.2 (engine.py:898-900; gone in 0.19.8 :1806-1809): not modelled
    half = ds_model_bytes(run)
    shard = N if stage >= 1 else 1
    master, states = P_t * 4.0 / shard, P_t * optimizer_state_bytes(run.optimizer_impl, 4.0) / shard
    grads_always = 0.0
    if stage <= 1:
        grads = P_t * half
    elif stage == 2:
        grads = P_t * half / N
    else:
        grads, grads_always = 0.0, P_t * half / N
    grads_step = P_t * 4.0 / shard
    if stage == 3:
        grads_step = min(grads_step, run.ds_buckets.get("sub_group_size", 1e9) * 4.0)
    temp = {"fused": 0.0, "foreach": grads_step, "forloop": 2 * grads_step}.get(run.optimizer_impl, 0.0)
    # ZeRO-3 flattens a sub-group's half gradients before the fp32 cast; gone before the update (zero3.py)
    temp = max(temp, sub_group_half_flat_bytes(run, P_t))
    if run.offload_optimizer is not None and stage >= 1:
        master, states, temp, grads_step = 0.0, 0.0, 0.0, 0.0
        if stage == 3:
            # the flat gradient partition lives where the optimizer does: stage3.py:333 sets the device to cpu
            # under offload_optimizer and :790-795 allocates (and pins) grad_partitions_flat_buffer there
            grads_always = 0.0
    return StateTerms(P_t, grads, run.grad_accum > 1, grads_always, grads_step, grads if stage == 2 else 0.0,
                      master, states, temp)


def _all_linears(a: ModelArch) -> list[Linear]:
    """The linear layers of every layer kind of the stack (``ModelArch.layer_groups``): the largest tensor of a
    hybrid model may sit in a layer kind that layer 0 is not (a MoE layer after dense ones)."""
    return [lin for kind, _n in a.layer_groups() for lin in a.kind_linears(kind)]



def unsloth_rope_bytes(run: Run) -> float:
    """Bytes of the cos and sin tables that every attention layer holds under unsloth releases before 2024.8
    (`Run.unsloth_rope_positions`; run/savers.py cites unsloth's llama.py lines): 2 tables × positions × head_dim per
    layer, in lm_head's dtype, which is the dtype unsloth loads the model in (LF's compute dtype). 0 otherwise.
    For a 1M-context Llama-3-8B (1,048,576 positions, head_dim 128, 32 layers, fp16): 16 GiB."""
    if run.unsloth_rope_positions <= 0:
        return 0.0
    return run.arch.num_layers * 2.0 * run.unsloth_rope_positions * run.arch.hd * _bytes(run.compute_dtype)
