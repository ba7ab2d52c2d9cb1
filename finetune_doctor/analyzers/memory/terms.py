"""All byte terms of one rank, assembled from the parts (weights, states, activations, logits, buffers, host)."""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.analyzers.memory.activations import _grad_layers, activation_terms
from finetune_doctor.analyzers.memory.buffers import buffer_bytes, host_bytes
from finetune_doctor.analyzers.memory.dataparallel import gathered_logit_bytes
from finetune_doctor.analyzers.memory.ddp import broadcast_cache_bytes
from finetune_doctor.analyzers.memory.fsdp import fsdp_terms
from finetune_doctor.analyzers.memory.hostsave import save_host_bytes
from finetune_doctor.analyzers.memory.megatron import megatron_terms
from finetune_doctor.analyzers.memory.logits import logit_terms
from finetune_doctor.analyzers.memory.qlora import dequant_transient_bytes, saved_input_terms
from finetune_doctor.analyzers.memory.vision import vision_terms
from finetune_doctor.analyzers.memory.zero3 import (largest_trainable_elements, quantized_load_bytes,
                                                    reduce_scatter_bytes, unpartitioned_load_bytes)
from finetune_doctor.analyzers.memory.weights import state_terms, unsloth_rope_bytes, weight_terms
from finetune_doctor.analyzers.memory.params import ParamCounts, count_params
from finetune_doctor.run import Run


@dataclass(frozen=True)
class Terms:
    """Byte counts of one rank, by category, before the moments of a step are assembled."""

    weights: float
    live_params: float          # ZeRO-3 gathered parameters during compute
    gradients: float            # gradients from backward to the optimizer step
    grads_persistent: bool      # ... also alive at the loss moment (accumulation keeps them)
    grads_always: float         # gradient buffers allocated once and kept (ZeRO-3 flat partition buffer)
    grads_step: float           # fp32 gradient partition DeepSpeed builds inside step() only
    master: float
    states: float
    step_temp: float
    activations: float          # saved for backward, alive at the loss moment
    recompute: float            # activation checkpointing: one layer's activations rebuilt during backward
    autocast_cache: float
    logits: float
    logits_bwd: float           # logits-related tensors during the loss's backward
    grads_in_backward: float    # gradient buffers that exist from the first moment of backward (ZeRO-2 partition)
    buffers: float
    host: float
    # FSDP1 only (analyzers/memory/fsdp.py stream_pools): pools of FSDP's own streams, the part of them the
    # tensor peak counts, and what initialisation leaves cached on the default stream
    # ZeRO-3 (weights.py `backward_hold`): gathered beyond live_params by the first decoder layer's backward only
    backward_hold: float = 0.0
    side_pools: float = 0.0
    side_live: float = 0.0
    init_floor: float = 0.0
    # multimodal (analyzers/memory/vision.py): one vision block's working set at the start of the forward
    vision: float = 0.0
    # ZeRO-3 + bitsandbytes, or a ZeRO-3 model built outside zero.Init: the whole model on every rank while it
    # loads, before DeepSpeed partitions it (zero3.py `quantized_load_bytes`, `unpartitioned_load_bytes`); also
    # part of `init_floor`
    load_whole: float = 0.0
    # host RAM rank 0's node gains while a ZeRO-3 checkpoint's 16-bit weights are consolidated (hostsave.py)
    host_save: float = 0.0
    # what host_save would be if the whole model were gathered (a transformers < 5 PEFT save; hostsave.py)
    host_save_whole: float = 0.0

    @property
    def model_load(self) -> float:
        """Bytes while the model loads, before any step: the resident weights and the always-kept gradient buffer,
        or the whole bitsandbytes model a ZeRO-3 rank holds before DeepSpeed partitions it (`load_whole`)."""
        return max(self.weights + self.grads_always, self.load_whole)


def compute_terms(run: Run, counts: ParamCounts | None = None, tokens: int | None = None) -> Terms:
    """All byte terms for one rank. `tokens` overrides micro batch × cutoff_len (e.g. the longest real micro-batch),
    except under 360-LLaMA-Factory's sequence parallelism, which pads every sample to cutoff_len before splitting it
    (run/seqpar.py): there each rank always holds `Run.tokens_per_micro_batch`."""
    c = counts or count_params(run)
    T = tokens if tokens is not None and run.sp_size <= 1 else run.tokens_per_micro_batch
    if run.engine == "fsdp" and not run.deepspeed:   # a DeepSpeed config would take over (run/engines.py)
        return Terms(**fsdp_terms(run, c, T))        # analyzers/memory/fsdp.py
    if run.engine == "megatron":
        return Terms(**megatron_terms(run, c, T))    # analyzers/memory/megatron.py
    w = weight_terms(run, c)
    s = state_terms(run, c)
    act = activation_terms(run, c, T)
    lg = logit_terms(run, T)
    vis_work, vis_saved, _ = vision_terms(run)
    # bitsandbytes < 0.43.2 keeps each 4-bit linear's input for backward (qlora.py)
    bnb_saved, bnb_recompute = saved_input_terms(run, T, *_grad_layers(run))
    load_whole = max(quantized_load_bytes(run, c), unpartitioned_load_bytes(run, c))
    return Terms(
        # unsloth < 2024.8 keeps whole-window RoPE tables in every attention layer (weights.py)
        weights=w.weights + unsloth_rope_bytes(run), live_params=w.live, backward_hold=w.backward_hold,
        gradients=s.gradients,
        grads_persistent=s.grads_persistent,
        grads_always=s.grads_always, grads_step=s.grads_step, master=s.master, states=s.states,
        step_temp=s.step_temp, activations=act.saved + vis_saved + bnb_saved,
        # the backward of a 4-bit linear dequantises its weight beside the layer rebuilt for it (qlora.py)
        recompute=act.recompute + dequant_transient_bytes(run) + bnb_recompute, autocast_cache=act.autocast_cache,
        # one process over several GPUs gathers every replica's logits on GPU 0 before the backward (dataparallel.py)
        logits=lg.forward + gathered_logit_bytes(run, T), logits_bwd=lg.backward,
        # ZeRO-3 flattens each gradient bucket for its reduce-scatter during backward (zero3.py)
        grads_in_backward=s.grads_in_backward
        + reduce_scatter_bytes(run, s.trainable, largest_trainable_elements(run, c)),
        buffers=buffer_bytes(run, s.trainable),
        # DDP's wrap-time broadcast leaves one coalesced bucket cached (ddp.py); a ZeRO-3 model loaded whole
        # (bitsandbytes, or built outside zero.Init) leaves its blocks cached (zero3.py)
        init_floor=max(broadcast_cache_bytes(run, w.weights), load_whole), load_whole=load_whole, vision=vis_work,
        host_save=save_host_bytes(run, c)[0],
        host_save_whole=float(c.total) * 2.0 if run.deepspeed and run.zero_stage == 3 else 0.0,
        # per node: each process's own host RAM, plus what the savers keep there per process (activations.py)
        host=host_bytes(run, c, s.trainable, w.stored_per_param) + act.host * run.gpus_per_node)
