"""Saved activations of the decoder layers: bytes per token and layer, and the terms of a whole forward pass.

Sources: reference/memory/REPORT.md §3 (the op-by-op formula of HF LLaMA/Qwen2 layers, verified to the byte against
a fake-mode tracker), LLaMA-Factory's checkpointing (model_utils/checkpointing.py), torch autocast, and the savers
LLaMA-Factory applies (run/savers.py): liger-kernel's RMSNorm and SwiGLU (v0.8.2 ``ops/rms_norm.py``,
``ops/swiglu.py``), peft's DoRA (v0.18.1 ``tuners/lora/dora.py``), unsloth's offloaded checkpoints
(checkpointing.py:63-97) and KTransformers' CPU experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.analyzers.memory.params import ParamCounts, _targets
from finetune_doctor.analyzers.memory.qlora_residual import fp32_residual
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run
from finetune_doctor.run.savers import S2ATTN_GROUP_RATIO


def activation_bytes_per_token_layer(run: Run, layer: int = 0, frozen: bool = False) -> float:
    """Saved activation bytes per token of one decoder layer, without checkpointing (`frozen`: a layer without
    trainable parameters that gradients still flow through, which keeps no projection inputs).

    HF LLaMA/Qwen2 (bf16, SDPA/flash, no dropout, SwiGLU, GQA), verified op by op to the byte (reference/memory/REPORT.md §3):
    ``22h + 4·h_kv + 8·I + 4·a`` bytes per token. Generalised here by element size: `e` the compute dtype bytes
    (2 under autocast or a half-precision model, 4 in fp32), `r` the residual/norm dtype bytes (4 when the norm weights
    are fp32 trainable params). RMSNorm keeps an fp32 copy of its input (4h) and, when its weight trains, the
    re-cast normed value (r·h); norm outputs are saved by the projections that read them (`_norms_and_inputs`: one
    r·h each, or a copy per adapted module where peft casts the input for fp32 adapters, or per call under autocast
    with an fp32 residual); rotated q, the SDPA output
    and the o_proj input are e·h_q each; k and v e·h_kv each; gate, silu, up and their product e·I each; SDPA keeps a
    float32 log-sum-exp per head (4a). Eager attention keeps the softmax output in fp32 and its cast (4+e)·a·s
    instead.
    A projection that neither trains nor has a trainable adapter does not keep its input (its backward needs only the
    weight), so LoRA on q,v keeps less than LoRA on all linears.

    Savers: liger's RMSNorm keeps its input X and one fp32 rstd per row (``save_for_backward(X, W, RSTD)``,
    rms_norm.py:449-453, :657) and returns Y in X's dtype, instead of HF's fp32 copy and re-cast value; liger's
    SwiGLU keeps gate and up (``save_for_backward(a, b)``, swiglu.py:262) and writes their gradients in place,
    instead of HF's silu output as a third tensor. DoRA multiplies the base and the LoRA results by the magnitude
    scale, and autograd keeps both (``(mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result``,
    dora.py:99): one output-sized tensor each per adapted module. KTransformers runs the routed experts on the CPU,
    so their activations leave the GPU. Shift short attention (LongLoRA) makes eager attention's probabilities
    group-sized (a quarter of the row, model_utils/longlora.py:91-92).
    """
    a = run.arch
    h, hq, hkv = a.hidden_size, a.num_heads * a.hd, a.num_kv_heads * a.hd
    if a.mla:
        hq = a.num_heads * ((a.qk_nope_head_dim or 0) + (a.qk_rope_head_dim or 0))
        hkv = hq
    half_model = run.weights_dtype in ("bfloat16", "float16") or run.quantized
    adapters_only = run.finetuning_type in ("lora", "oft")
    e = 2.0 if (run.autocast or (half_model and (adapters_only or _bytes(run.trainable_dtype) == 2))) else 4.0
    norms_fp32 = (run.finetuning_type in ("full", "freeze") and run.trainable_dtype == "float32" and not frozen) \
        or run.upcast_layernorm
    r = 4.0 if norms_fp32 else e
    trains = set() if frozen else _trainable_linear_names(run)
    qkv_saved = bool(trains & {"q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa"})
    o_saved = "o_proj" in trains
    gu_saved = bool(trains & {"gate_proj", "up_proj"})
    down_saved = "down_proj" in trains

    b = _norms_and_inputs(run, h, r, trains, frozen)
    b += e * hq + e * hq                          # rotated q, SDPA output
    b += e * hq if o_saved else 0                 # o_proj input
    b += 2 * e * hkv                              # rotated k, v
    seq = run.rank_seq_len   # eager attention: probabilities over the padded (or packed) row length on this rank
    if run.shift_attn:
        seq = max(int(seq * S2ATTN_GROUP_RATIO), 1)
    if run.attention == "eager":
        # fp32 probabilities and their cast (HF eager, BLOOM, MPT), or what a model's own code keeps instead
        # (run/attention.py: Falcon's ALiBi branch one half copy, Baichuan-13B's clamp and softmax two)
        per = {"half": e, "half+masked": 2 * e}.get(run.attention_saved, 4 + e)
        b += per * a.num_heads * seq
    else:
        b += 4 * a.num_heads
    # MLP
    if a.is_dense_layer(layer):
        width, k = a.intermediate_size, 1
    else:
        width, k = (a.moe_intermediate_size or a.intermediate_size), a.num_experts_per_tok
    gated = 2 if run.liger_swiglu else 3        # liger: gate and up; HF: gate, silu, up
    # bitsandbytes linears fed an fp32 norm output return fp32 (qlora_residual.py): gate, silu and up are fp32 then
    em = 4.0 if fp32_residual(run) else e
    mlp = (em * width * gated + (e * width if down_saved else 0)) * k   # (+ product if down trains)
    if not a.is_dense_layer(layer):
        if run.use_kt:
            mlp = 0.0                             # routed experts run on the CPU (KTransformers)
        mlp += 4 * a.num_experts + em * h * k     # router logits (fp32) and dispatched copies of the input
        if a.shared_expert_intermediate_size:
            w2 = a.shared_expert_intermediate_size
            mlp += em * w2 * gated + (e * w2 if down_saved else 0)
    b += mlp
    if run.use_dora and run.finetuning_type == "lora" and trains:
        b += 2 * e * sum(lin.out_features * (k if lin.expert else lin.count)
                         for lin in a.layer_linears(layer) if _canonical(lin.name) in trains and lin.targetable)
    b += _lora_dropout_bytes(run, layer, trains, e, residual_bytes(run) if run.liger_rms_norm else r)
    # peft without autocast runs each fp32 adapter on an fp32 cast of its input (``_cast_input_dtype``), which
    # lora_A keeps: 4 bytes per input element per adapted module, e of them counted above (saved-tensor hooks on
    # a real CPU step, and reference/memory/REPORT.md §4: 24.72 vs 22.59 GiB at s=1024, no GC).
    if run.finetuning_type in ("lora", "oft") and run.autocast is None and run.trainable_dtype == "float32":
        # (q/k/v and gate/up copies are in _norms_and_inputs; o_proj's and down_proj's inputs are kept at e above)
        ins = {"o_proj": hq, "down_proj": width * k}
        b += 2 * sum(v for n, v in ins.items() if n in trains)
    return b


_ATTN_IN = {"q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa"}   # read the attention norm's output
_MLP_IN = {"gate_proj", "up_proj"}                                              # read the MLP norm's output


def _lora_dropout_bytes(run: Run, layer: int, trains: set[str], e: float, norm_out: float) -> float:
    """Bytes per token that ``lora_dropout > 0`` adds to one decoder layer's saved activations, over the same run
    with ``lora_dropout: 0``; 0.0 for other methods, a rate of 0 or a layer without adapted modules.

    peft builds ``nn.Dropout(p=lora_dropout)`` for each adapted module when the rate is above 0 and ``nn.Identity``
    otherwise (peft v0.18.1 ``tuners/lora/layer.py:188-191``), and adds ``lora_B(lora_A(dropout(x))) * scaling``
    after casting x to the adapter's dtype (layer.py:805-807; the bitsandbytes layers cast only outside autocast,
    ``tuners/lora/bnb.py:563-569``). ``F.dropout`` calls ``_VF.dropout`` (torch 2.13 ``nn/functional.py:1491``); on
    CUDA aten's dropout takes the fused ``native_dropout``, which returns ``(output, mask)`` with a bool mask, the
    one tensor its backward keeps (torch ``_decomp/decompositions.py:1278-1291`` states the same contract). So each
    adapted module keeps, per token and input feature: the mask (1 byte) and the dropped copy that lora_A keeps
    for its weight gradient in place of what it kept at rate 0. Two cases, for a group of `m` adapted modules
    reading one tensor of `n` features (q/k/v, or gate/up: the norm's output; o_proj and down_proj alone):

    * lora_A kept x itself at rate 0 (adapter dtype = x's and no autocast cast between): the group shared one x,
      which nothing else keeps (the frozen base weight needs no input; the norm keeps its own input). With
      dropout each module keeps its own copy and x is freed: ``m·n·(1 + x_bytes) − n·x_bytes``.
    * lora_A kept its own cast of x (peft's cast to fp32 adapters, or autocast's cast of an fp32 input; also
      where `_norms_and_inputs` counts a copy per adapted module, which under autocast with peft's bnb layers is
      the dropped copy): the dropped tensor takes the cast's place: ``m·n`` (the masks).

    Routed experts count ``num_experts_per_tok`` times. `e` the compute-dtype bytes, `norm_out` the bytes of the
    norm outputs. Under checkpointing the caller takes the largest layer, so only the layer being recomputed
    holds these. Off CUDA aten's dropout multiplies by a noise tensor in x's dtype instead of a bool mask, which
    a CPU measurement shows (tests/test_lora_dropout.py measures peft's layer with saved-tensor hooks).
    """
    if run.finetuning_type != "lora" or run.lora_dropout <= 0.0 or not trains:
        return 0.0
    a = run.arch
    adapter_b = _bytes(run.trainable_dtype)
    bnb = run.quantization_bit in (4, 8) and (run.quantization_method or "bnb") in ("bnb", "bitsandbytes")
    k = 1 if a.is_dense_layer(layer) else a.num_experts_per_tok
    groups: dict[tuple[str, bool], list[int]] = {}     # (input, expert) -> [modules m, features n]
    for lin in a.layer_linears(layer):
        roles = set(lin.roles)
        if not lin.targetable or not roles & trains:
            continue
        key = "attn" if roles <= _ATTN_IN else "mlp" if roles <= _MLP_IN else lin.name
        g = groups.setdefault((key, lin.expert), [0, lin.in_features])
        g[0] += 1 if lin.expert else lin.count
    total = 0.0
    for (key, expert), (m, n) in groups.items():
        x_b = norm_out if key in ("attn", "mlp") and not expert else e
        peft_casts = adapter_b != x_b and not (bnb and run.autocast)
        reaching = adapter_b if peft_casts else x_b          # the dtype that reaches lora_A
        shared = not peft_casts and not (run.autocast and reaching != 2)
        if key in ("attn", "mlp") and not expert and adapter_b == 4 and norm_out != 4:
            shared = False
        total += (k if expert else 1) * ((m * n * (1.0 + x_b) - n * x_b) if shared else m * n)
    return total


def _norms_and_inputs(run: Run, h: int, r: float, trains: set[str], frozen: bool) -> float:
    """Bytes per token the two norms keep, plus the copies of their outputs the q/k/v and gate/up projections keep.

    HF's RMSNorm keeps an fp32 copy of its input (4h) and, when its weight trains, the re-cast normed value the
    weight multiplies (r·h; autograd saves an operand only for the other operand's gradient). liger's keeps X and
    an fp32 rstd per row. A projection that trains (or carries a trainable adapter) keeps its input: one shared
    tensor, except when the input must be cast for it — peft casts the input to the adapter's fp32 dtype
    (``_cast_input_dtype``, peft v0.18.1 tuners_utils.py:1538-1553) and autocast casts that back to half for
    lora_A, so each adapted module keeps its own 2-byte copy; under autocast with an fp32 residual every
    projection call casts its input again.
    """
    qkv = trains & {"q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa"}
    gu = trains & {"gate_proj", "up_proj"}
    if run.liger_rms_norm:
        out_b = residual_bytes(run)
        b = 2 * (out_b * h + 4)
    else:
        norm_trains = run.finetuning_type in ("full", "freeze") and not frozen
        out_b = r
        b = 2 * (4 * h + (r * h if norm_trains else 0))
    fp32_adapters = run.finetuning_type in ("lora", "oft") and run.trainable_dtype == "float32"
    if fp32_adapters and out_b != 4.0:
        # each adapted module: its own copy, half under autocast (the cast back for lora_A), else the fp32 cast
        b += (len(qkv) + len(gu)) * (2 if run.autocast else 4) * h
    elif run.autocast and out_b == 4.0:
        b += (3 * bool(qkv) + 2 * bool(gu)) * 2 * h   # per-call autocast casts of the fp32 norm outputs
    else:
        b += (out_b * h if qkv else 0) + (out_b * h if (gu or (run.finetuning_type == "full" and not frozen)) else 0)
    return b


def layer_transients(run: Run, layer: int | None = None) -> tuple[float, float]:
    """(forward, backward) bytes per token a LoRA/OFT decoder layer holds for a moment on top of what it saves,
    at its adapted down projection (the widest input, I). Forward: the MLP product (2·I), peft's cast of it to
    the adapters' dtype when that differs (4·I for fp32 adapters, ``_cast_input_dtype``), OFT's rotated input
    (2·I, the base layer runs on it) and the base and adapter outputs (2·2h). Backward: the base path's input
    gradient (2·I), the adapter path's (2·I, plus 4·I back through the fp32 cast), and for OFT the gradient of
    the rotated input plus the operands ``einsum("...rk,rkc->...rc")``'s backward lays out contiguously for its
    batched matmuls (3 × 2·I; peft v0.18.1 ``tuners/oft/layer.py:246-278``). They decide the step only when the
    logits no longer do (liger's fused loss); full and freeze tuning keep no such casts: (0, 0)."""
    if run.finetuning_type not in ("lora", "oft") or "down_proj" not in _trainable_linear_names(run):
        return 0.0, 0.0
    a = run.arch
    i = a.num_layers - 1 if layer is None else layer
    if a.is_dense_layer(i):
        width = a.intermediate_size
    else:
        width = (a.moe_intermediate_size or a.intermediate_size) * a.num_experts_per_tok
    cast = 4.0 if (run.trainable_dtype == "float32" and _bytes(run.compute_dtype) == 2) else 0.0
    oft = run.finetuning_type == "oft"
    return (2.0 + cast + 2.0 * oft) * width + 4.0 * a.hidden_size, (4.0 + cast + 6.0 * oft) * width


def residual_bytes(run: Run) -> float:
    """Bytes per element of the residual stream: fp32 when full tuning keeps fp32 weights (the embedding output
    is fp32 and every residual add stays fp32 under autocast), else the compute dtype (freeze tuning leaves the
    embedding in half precision, and autocast returns the projections' outputs in half). fp32 too for QLoRA whose
    bitsandbytes 4- or 8-bit linears receive an fp32 norm output, which they return in fp32 (qlora_residual.py; the first
    layer's input, the embedding's output, stays in the compute dtype: `activation_terms`)."""
    if run.finetuning_type == "full" and run.trainable_dtype == "float32":
        return 4.0
    if fp32_residual(run):
        return 4.0   # QLoRA: bitsandbytes linears return an fp32 norm output in fp32 (qlora_residual.py)
    return 2.0 if run.autocast or _bytes(run.compute_dtype) == 2 else 4.0


def final_hidden_bytes(run: Run) -> float:
    """Bytes per element of the final norm's output, the hidden states lm_head (or the fused loss) reads: HF's
    RMSNorm multiplies by its weight after re-casting, so an fp32 norm weight (full tuning in fp32,
    ``upcast_layernorm``) promotes it to fp32; liger's returns the input's dtype (rms_norm.py:449)."""
    if run.liger_rms_norm:
        return residual_bytes(run)
    fp32_norm = (run.finetuning_type in ("full", "freeze") and run.trainable_dtype == "float32") or run.upcast_layernorm
    return 4.0 if fp32_norm else residual_bytes(run)


def _canonical(name: str) -> str:
    return name.split(".")[-1]


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


def _grad_layers(run: Run) -> tuple[range, range]:
    """(trainable layers, frozen layers above the lowest trainable one) of the decoder stack.

    LF checkpoints only layers with trainable parameters and runs the others as they are
    (``get_custom_gradient_checkpointing_func``, checkpointing.py:100-123); a frozen layer above a trainable one is
    still on the gradient's path, so it keeps its activations, unchecked. Layers below the lowest trainable layer
    keep nothing. Freeze tuning trains the last `freeze_trainable_layers` (the first |n| when negative,
    adapter.py:129-136); BAdam's layer mode trains one decoder layer at a time (badam ``BlockOptimizer``,
    ``infer_param_groups`` makes one block per ``layers.<i>.``), and every switch order reaches the lowest layer,
    where all layers above it are frozen: that block decides the peak.
    """
    L = run.arch.num_layers
    if run.finetuning_type == "freeze":
        k = run.freeze_trainable_layers
        if k > 0:
            return range(max(L - k, 0), L), range(0)
        n = min(-k, L) if k < 0 else L
        return range(0, n), range(n, L)
    if run.use_badam and run.badam_mode == "layer" and L > 1:
        return range(0, 1), range(1, L)
    return range(0, L), range(0)


def _dora_transient(run: Run) -> float:
    """Bytes DoRA builds per adapted module to take the weight norm (dora.py:73-79): an ``in × in`` identity,
    the ``out × in`` LoRA weight, its scaled copy and the sum with the base weight, in the input's dtype; the
    largest adapted module decides (they are freed before the next module runs)."""
    if not (run.use_dora and run.finetuning_type == "lora"):
        return 0.0
    e = 2.0 if run.autocast or _bytes(run.compute_dtype) == 2 else 4.0
    trains = _trainable_linear_names(run)
    sizes = [lin.in_features * lin.in_features + 3 * lin.in_features * lin.out_features
             for kind, _n in run.arch.layer_groups() for lin in run.arch.kind_linears(kind)
             if _canonical(lin.name) in trains and lin.targetable]
    return e * max(sizes, default=0)


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes of one rank's forward: saved activations at the loss moment, the one layer rebuilt during a
    checkpointed backward, autocast's cache of half-precision copies of fp32 trainable weights, and what the
    savers keep in host RAM per process (`host`: unsloth's offloaded checkpoints, KTransformers' experts)."""

    saved: float
    recompute: float
    autocast_cache: float
    host: float = 0.0


def layers_bytes_per_token(run: Run, layers: range, frozen: bool = False) -> list[float]:
    """`activation_bytes_per_token_layer` of each decoder layer in `layers` (bytes per token, one per layer, in
    order), computed once per layer kind.

    A layer's bytes depend on its index only through its attention kind and its MLP kind
    (`ModelArch.attention_kind`, `mlp_kind`): those pick its linears (`layer_linears`), its MLP width and its
    experts. The remedy planners and the assumption bisection of ``doctor check`` evaluate the activation model
    thousands of times a run, and each evaluation repeated one layer's arithmetic for every layer of the model
    (25-42 % of the CPU of check-heavy test files, cProfile 2026-12-07). Equal to the per-layer calls by
    construction; tests/test_savers_checkpointing.py pins it on dense, MoE and mixed-attention layouts."""
    a = run.arch
    memo: dict[tuple[str, str], float] = {}
    out: list[float] = []
    for i in layers:
        key = (a.attention_kind(i), a.mlp_kind(i))
        if key not in memo:
            memo[key] = activation_bytes_per_token_layer(run, i, frozen)
        out.append(memo[key])
    return out


def activation_terms(run: Run, c: ParamCounts, T: int) -> ActivationTerms:
    """Activations of a micro batch of `T` tokens (module docstring); `c` the parameter counts."""
    a = run.arch
    trainable, frozen = _grad_layers(run)
    per_layer = layers_bytes_per_token(run, trainable)
    above = T * sum(layers_bytes_per_token(run, frozen, frozen=True))
    e_res = residual_bytes(run)
    offloaded = run.unsloth_gc or run.use_unsloth
    recompute = 0.0
    if run.gradient_checkpointing:
        # each checkpointed layer keeps only its input (in host RAM with unsloth's checkpointing); backward
        # rebuilds one layer's activations at a time, after the logits are gone (the loss moment does not see it)
        kept = 0.0 if offloaded else e_res * a.hidden_size * len(trainable)
        if kept and fp32_residual(run) and trainable and trainable.start == 0:
            # the first layer's input is the embedding's output, in the compute dtype (qlora_residual.py, step 3)
            kept -= (e_res - _bytes(run.compute_dtype)) * a.hidden_size
        acts = T * kept + above
        recompute = T * max(per_layer, default=0.0) + (T * e_res * a.hidden_size if offloaded else 0.0)
        recompute += _dora_transient(run) + T * layer_transients(run)[1]
        # the checkpointed layers sit below the frozen ones: by the time backward rebuilds them, the frozen
        # layers above have released what they kept
        recompute = max(recompute - above, 0.0)
    else:
        acts = T * sum(per_layer) + above
        recompute = T * layer_transients(run)[1]
    # final norm + the hidden state handed to lm_head (liger's norm keeps its input and an fp32 rstd per row)
    acts += T * ((2 * e_res * a.hidden_size + 4) if run.liger_rms_norm else (4 + e_res) * a.hidden_size)
    per_layer_cast, head_cast = _frozen_weight_casts(run)
    if per_layer_cast:
        L_grad = len(trainable) + len(frozen)
        if run.gradient_checkpointing:
            recompute += max(per_layer_cast[-L_grad:], default=0.0)
        else:
            acts += sum(per_layer_cast[-L_grad:])
        acts += head_cast
    if run.neat_packing and run.attention not in ("fa2", "fa3"):
        acts += run.micro_batch * run.rank_seq_len ** 2 * _bytes(run.compute_dtype)   # 4-D mask [B,1,L,L]
    cache = 0.0
    if run.autocast and run.trainable_dtype == "float32" and not run.deepspeed:
        # autocast keeps a half-precision copy of each fp32 weight used in a matmul for backward
        cache = (c.trainable_base + c.adapter) * 2.0
    host = offloaded_checkpoint_bytes(run, T, len(trainable)) if run.gradient_checkpointing else 0.0
    return ActivationTerms(acts, recompute, cache, host + kt_host_bytes(run, c, T))


def offloaded_checkpoint_bytes(run: Run, T: int, layers: int) -> float:
    """Host RAM one process holds for unsloth's checkpointing: each checkpointed layer's input moved to the CPU
    (``hidden_states.to("cpu", non_blocking=True)``, checkpointing.py:75). A non-blocking copy from the GPU lands
    in pinned memory (torch ``_to_copy``: ``pin_out`` when non_blocking from CUDA), which the caching host
    allocator rounds up to a power of two and keeps for reuse (torch 2.13
    ``ATen/core/CachingHostAllocator.h:300-309``, ``PowerOf2Ceil``)."""
    if not (run.unsloth_gc or run.use_unsloth) or layers <= 0:
        return 0.0
    nbytes = int(T * run.arch.hidden_size * residual_bytes(run))
    return float(layers * (1 << max(nbytes - 1, 0).bit_length()))


def kt_host_bytes(run: Run, c: ParamCounts, T: int) -> float:
    """Host RAM of KTransformers' CPU experts per process (hparams/model_args.py:463-520, LF
    docs/en/advanced/ktransformers.md): the routed experts' weights at `Run.kt_expert_bytes` each, their LoRA
    weights with fp32 gradients and AdamW states (4 + 4 + 8 B each), and with ``kt_cpu_activation: retain`` the
    experts' gate/up/product activations of every MoE layer (3 × width × k × 2 B per token). KT's own staging
    buffers (``kt_max_cache_depth``) are not counted."""
    if not run.use_kt or not c.kt_expert_params:
        return 0.0
    a = run.arch
    host = c.kt_expert_params * run.kt_expert_bytes + c.expert_lora_params * 16.0
    if run.kt_cpu_activation == "retain":
        moe_layers = sum(n for k, n in a.layer_groups() if k[1] == "moe")
        width = a.moe_intermediate_size or a.intermediate_size
        host += T * moe_layers * 3 * width * a.num_experts_per_tok * 2.0
    return host
