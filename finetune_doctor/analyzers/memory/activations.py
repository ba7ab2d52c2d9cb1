"""Saved activations of the decoder layers: bytes per token and layer, and the terms of a whole forward pass.

Sources: reference/memory/REPORT.md §3 (the op-by-op formula of HF LLaMA/Qwen2 layers, verified to the byte against
a fake-mode tracker), LLaMA-Factory's checkpointing (model_utils/checkpointing.py), torch autocast.
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.analyzers.params import ParamCounts, _targets
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run


def activation_bytes_per_token_layer(run: Run, layer: int = 0) -> float:
    """Saved activation bytes per token of one decoder layer, without checkpointing.

    HF LLaMA/Qwen2 (bf16, SDPA/flash, no dropout, SwiGLU, GQA), verified op by op to the byte (REPORT.md §3):
    ``22h + 4·h_kv + 8·I + 4·a`` bytes per token. Generalised here by element size: `e` the compute dtype bytes
    (2 under autocast or a half-precision model, 4 in fp32), `r` the residual/norm dtype bytes (4 when the norm weights
    are fp32 trainable params). RMSNorm keeps an fp32 copy of its input (4h) and the re-cast normed value (r·h);
    norm outputs are saved by the projections that read them (one r·h each — under autocast with an fp32 residual
    every projection call casts its input again, so q,k,v and gate,up each keep a 2h copy); rotated q, the SDPA output
    and the o_proj input are e·h_q each; k and v e·h_kv each; gate, silu, up and their product e·I each; SDPA keeps a
    float32 log-sum-exp per head (4a). Eager attention keeps the softmax output in fp32 and its cast (4+e)·a·s instead.
    A projection that neither trains nor has a trainable adapter does not keep its input (its backward needs only the
    weight), so LoRA on q,v keeps less than LoRA on all linears.
    """
    a = run.arch
    h, hq, hkv = a.hidden_size, a.num_heads * a.hd, a.num_kv_heads * a.hd
    if a.mla:
        hq = a.num_heads * ((a.qk_nope_head_dim or 0) + (a.qk_rope_head_dim or 0))
        hkv = hq
    half_model = run.weights_dtype in ("bfloat16", "float16") or run.quantized
    adapters_only = run.finetuning_type in ("lora", "oft")
    e = 2.0 if (run.autocast or (half_model and (adapters_only or _bytes(run.trainable_dtype) == 2))) else 4.0
    norms_fp32 = (run.finetuning_type in ("full", "freeze") and run.trainable_dtype == "float32") or run.upcast_layernorm
    r = 4.0 if norms_fp32 else e
    trains = _trainable_linear_names(run)
    qkv_saved = bool(trains & {"q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa"})
    o_saved = "o_proj" in trains
    gu_saved = bool(trains & {"gate_proj", "up_proj"})
    down_saved = "down_proj" in trains

    b = 2 * (4 * h + r * h)                      # two RMSNorms: fp32 input copy + re-cast normed value
    if run.autocast and r == 4.0:
        b += (3 * qkv_saved + 2 * gu_saved) * 2 * h   # per-call autocast casts of the norm outputs
    else:
        b += (r * h if qkv_saved else 0) + (r * h if (gu_saved or run.finetuning_type == "full") else 0)
    b += e * hq + e * hq                          # rotated q, SDPA output
    b += e * hq if o_saved else 0                 # o_proj input
    b += 2 * e * hkv                              # rotated k, v
    seq = run.seq_len   # eager attention: probabilities over the padded (or packed) row length
    if run.attention == "eager":
        b += (4 + e) * a.num_heads * seq
    else:
        b += 4 * a.num_heads
    # MLP
    if a.is_dense_layer(layer):
        width, k = a.intermediate_size, 1
    else:
        width, k = (a.moe_intermediate_size or a.intermediate_size), a.num_experts_per_tok
    mlp = (e * width * 3 + (e * width if down_saved else 0)) * k   # gate, silu, up (+ product if down trains)
    if not a.is_dense_layer(layer):
        mlp += 4 * a.num_experts + e * h * k      # router logits (fp32) and dispatched copies of the input
        if a.shared_expert_intermediate_size:
            w2 = a.shared_expert_intermediate_size
            mlp += e * w2 * 3 + (e * w2 if down_saved else 0)
    b += mlp
    # peft without autocast runs each fp32 adapter on a cast copy of its input (LoraLayer forward). Measured in
    # fake mode on Qwen2-7B LoRA r8 (REPORT.md §4: 24.72 vs 22.59 GiB at s=1024, no GC): 2 bytes per input element
    # per adapted module stay alive, not 4 — the fp32 copy is freed once lora_A's half-precision result exists.
    if run.finetuning_type in ("lora", "oft") and run.autocast is None and run.trainable_dtype == "float32":
        ins = {"q_proj": h, "k_proj": h, "v_proj": h, "o_proj": hq, "gate_proj": h, "up_proj": h,
               "down_proj": width * k}
        b += 2 * sum(v for n, v in ins.items() if n in trains)
    return b


def _trainable_linear_names(run: Run) -> set[str]:
    allnames = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "q_a_proj",
                "kv_a_proj_with_mqa", "kv_b_proj", "q_b_proj"}
    if run.finetuning_type in ("full", "freeze"):
        return allnames
    names, _ = _targets(run.arch, run.lora_target)
    return names & allnames


def _frozen_weight_casts(run: Run) -> tuple[list[float], float]:
    """Bytes of autocast's copies of frozen weights that autograd saves for backward: (per decoder layer, lm_head).

    When the frozen base weights are stored in a dtype other than the autocast dtype (``fp16: true`` on a bf16
    checkpoint, LF_FACTS.md §2: weights stay in the checkpoint dtype), every matmul casts its weight to the autocast
    dtype, and since the gradient must flow to the layer input, the matmul keeps that copy until its backward —
    one half-precision copy of every frozen linear of every layer, plus lm_head (the tied embedding included).
    Under checkpointing only the layer being recomputed holds its copies. LoRA/OFT only: full and freeze train
    fp32 weights, whose casts `autocast_cache` counts; QLoRA dequantizes to the compute dtype already.
    Found by the gpu probe on an H200 and matched by the simulate probe (benchmarks/results/gpu_measure.md, row
    10: 2.43 GiB of copies on Qwen2.5-1.5B); the cast and save are torch's autocast (``cached_cast``) and
    ``F.linear``'s saved weight for ``grad_input``.
    """
    if (run.finetuning_type not in ("lora", "oft") or not run.autocast or run.quantization_bit
            or run.weights_dtype == run.autocast or run.deepspeed):
        return [], 0.0
    a = run.arch
    e = _bytes(run.autocast)
    per_layer = [e * sum(lin.params for lin in a.layer_linears(i)) for i in range(a.num_layers)]
    return per_layer, e * a.vocab_size * a.hidden_size


def _layers_with_grad(run: Run) -> int:
    """Decoder layers that keep activations: all of them, except in freeze tuning, where only the trainable layers
    and those above them do (LF checkpoints only layers with trainable params, checkpointing.py:100-123)."""
    L = run.arch.num_layers
    if run.finetuning_type == "freeze":
        k = run.freeze_trainable_layers
        return min(L, k) if k > 0 else L
    return L


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes of one rank's forward: saved activations at the loss moment, the one layer rebuilt during a
    checkpointed backward, and autocast's cache of half-precision copies of fp32 trainable weights."""

    saved: float
    recompute: float
    autocast_cache: float


def activation_terms(run: Run, c: ParamCounts, T: int) -> ActivationTerms:
    """Activations of a micro batch of `T` tokens (module docstring); `c` the parameter counts."""
    a = run.arch
    L_grad = _layers_with_grad(run)
    per_layer = [activation_bytes_per_token_layer(run, i) for i in range(a.num_layers - L_grad, a.num_layers)]
    e_res = 4.0 if (run.finetuning_type in ("full", "freeze") and run.trainable_dtype == "float32") else (
        2.0 if run.autocast or _bytes(run.compute_dtype) == 2 else 4.0)
    recompute = 0.0
    if run.gradient_checkpointing:
        # each checkpointed layer keeps only its input; backward rebuilds one layer's activations at a time,
        # after the logits are gone (the loss moment does not see it)
        kept = 0.0 if run.unsloth_gc else e_res * a.hidden_size * L_grad
        acts = T * kept
        recompute = T * max(per_layer, default=0.0)
    else:
        acts = T * sum(per_layer)
    # final norm + the hidden state handed to lm_head
    acts += T * (4 + e_res) * a.hidden_size
    per_layer_cast, head_cast = _frozen_weight_casts(run)
    if per_layer_cast:
        if run.gradient_checkpointing:
            recompute += max(per_layer_cast[-L_grad:], default=0.0)
        else:
            acts += sum(per_layer_cast[-L_grad:])
        acts += head_cast
    if run.neat_packing and run.attention not in ("fa2", "fa3"):
        acts += run.micro_batch * run.seq_len * run.seq_len * _bytes(run.compute_dtype)   # 4-D mask [B,1,L,L]
    cache = 0.0
    if run.autocast and run.trainable_dtype == "float32" and not run.deepspeed:
        # autocast keeps a half-precision copy of each fp32 weight used in a matmul for backward
        cache = (c.trainable_base + c.adapter) * 2.0
    return ActivationTerms(acts, recompute, cache)
