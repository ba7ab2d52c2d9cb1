"""Analytic per-rank GPU memory of a training step in steady state (step >= 2), and host RAM per node.

No torch: every term is a closed-form byte count of the tensors PyTorch, transformers, peft and DeepSpeed keep.
The peak is the largest of three moments of a step, each a sum of terms (bytes):

* **loss** — end of the forward of a micro-batch: static state + every saved activation + the logits at the loss
  (+ gradients when gradient accumulation keeps them from earlier micro-batches, or DeepSpeed keeps buffers).
* **backward-end** — static state + all gradients (activations are freed as backward walks down the layers).
* **optimizer** — static state + gradients + the optimizer implementation's temporaries.

Sources of the terms (each function cites its own):
reference/memory/REPORT.md (§3 op-by-op activation formula verified to the byte; §3 AdamW temporaries; §4 measured
7B figures; §7 allocator, context, cuBLAS and NCCL sizes), reference/deepspeed/memory_estimators.md (ZeRO partition
formulas), DeepSpeed engine/stage_1_and_2/stage3 buffer behaviour (reference/deepspeed/schema.md defaults),
bitsandbytes NF4 layout (blocksize 64, fp32 absmax; nested quantization of absmax to 8 bit in blocks of 256),
PyTorch DDP docs (``gradient_as_bucket_view=False`` keeps bucket buffers the size of all gradients).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from finetune_doctor.analyzers.params import ParamCounts, count_params
from finetune_doctor.analyzers.reserve import reserve_fraction
import finetune_doctor.dtypes as bytes_table
from finetune_doctor.dtypes import dtype_bytes
from finetune_doctor.run import Run
from finetune_doctor.types import GIB, Hardware, MemoryEstimate

MIB = float(1 << 20)

# Runtime constants (REPORT.md §7). CUDA context with lazy module loading on a current driver: 0.3-0.9 GB; we take
# 0.5 GiB. NCCL per communicator: 544 MB for 2 ranks, 688 MB for more on A100 (nccl#964). DeepSpeed adds its
# data-parallel process group beside the world group; we add 0.1 GiB for it, an assumption not measured here.
CUDA_CONTEXT_GIB = 0.5
# Hopper, measured: device usage minus max_memory_reserved was 0.749 GiB in 13 of 14 training runs on an H200
# (CUDA 13.0, torch 2.11, driver 580; benchmarks/results/gpu_measure.md). The 33 MiB of cuBLAS workspace added
# below are inside that figure on a real run, so the context itself is taken as 0.72 GiB.
CUDA_CONTEXT_GIB_HOPPER = 0.72
NCCL_2_RANKS_GIB = 0.51
NCCL_MANY_RANKS_GIB = 0.64
CUBLAS_WORKSPACE_MIB = {"hopper": 32.0, "other": 8.0}
# Allocator reserve = reserved - allocated at the peak. PyTorch's caching allocator rounds large blocks to 2 MiB and
# keeps freed blocks cached; measured gaps: Answer.AI LoRA 8.28 vs 10.24 GiB, PEFT method comparison 32.94 (fake
# tensor peak) vs 34.68 GiB reserved (REPORT.md §5, §7). Fitted in benchmarks/memory_accuracy.py on the 72
# single-process published rows (results/memory_accuracy.md): 8 % leaves no row off by more than 25 % at a 7.5 %
# median error in that fit; 10 % lowers the median to 7.3 % but puts 2 rows over 25 %. With expandable_segments
# (llamafactory-cli exports it for multi-GPU torchrun launches, launcher.py:79-83) segments grow in place instead
# of splitting, and we take half of that.
# These flat values are the reserve the estimate used before the replay-derived table (analyzers/reserve.py); they
# stay for the benchmarks that compare against them.
RESERVE_EXPANDABLE = 0.05
RESERVE_DEFAULT = 0.08
# A verdict or a remedy must leave this share of the card free: the estimator's error against published
# measurements is ~5-10 % (benchmarks/results/memory_accuracy.md), so a fit closer than this is inside the error
# (rule predicted-tight-fit) and a fix that lands just under the capacity is no fix (engine/planners.py).
MARGIN = 0.05
# Host RAM per training process for the Python/torch/CUDA runtime: the resident CUDA and torch libraries of an idle
# process. An assumption (typical, not measured here: no GPU machine was available); offload terms come on top.
HOST_PER_PROCESS_GIB = 3.0


def _bytes(dtype: str) -> float:
    return dtype_bytes(dtype)


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
    from finetune_doctor.analyzers.params import _targets

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


def compute_terms(run: Run, counts: ParamCounts | None = None, tokens: int | None = None) -> Terms:
    """All byte terms for one rank. `tokens` overrides micro batch × cutoff_len (e.g. the longest real micro-batch)."""
    a = run.arch
    c = counts or count_params(run)
    N = max(run.world_size, 1)
    T = tokens if tokens is not None else run.tokens_per_micro_batch
    ds, stage = run.deepspeed, (run.zero_stage if run.deepspeed else 0)
    shard_w = N if stage == 3 else 1

    # ---- weights -------------------------------------------------------------------------------------------
    wq = run.linear_weight_bytes or weight_bytes_per_param(run.weights_dtype, run.double_quantization)
    if run.quantized:
        linear = sum(lin.params for i in range(a.num_layers) for lin in a.layer_linears(i))
        other_frozen = max(c.frozen - linear, 0)
        frozen_bytes = linear * wq + other_frozen * _bytes(a.dtype if a.dtype != "float32" else run.compute_dtype)
    else:
        frozen_bytes = c.frozen * wq
    trainable_bytes = (c.trainable_base + c.adapter) * _bytes(run.trainable_dtype)
    ref = frozen_bytes + c.trainable_base * wq if run.ref_model else 0.0
    weights = (frozen_bytes + trainable_bytes + ref) / shard_w
    live = 0.0
    if stage == 3:
        e_w = _bytes(run.trainable_dtype)
        prefetch = run.ds_buckets.get("stage3_prefetch_bucket_size", 5e7)
        max_live = run.ds_buckets.get("stage3_max_live_parameters", 1e9)
        largest = max(c.largest_layer, a.embedding_params())
        live = e_w * min(max_live, largest + prefetch)
        # parameters under the persistence threshold stay whole on every rank (norms, biases)
        thr = run.ds_buckets.get("stage3_param_persistence_threshold", 1e5)
        if a.hidden_size < thr:
            live += e_w * a.hidden_size * (2 * a.num_layers + 1)
        if run.offload_param:
            weights = 0.0   # partitions live on the host; only gathered layers (`live`) reach the GPU

    # ---- gradients, master weights, optimizer states ----------------------------------------------------------
    P_t = c.trainable
    if run.use_badam:
        # BAdam trains one block (decoder layer) at a time: gradients and Adam states exist for that block only
        # (LF badam_mode layer; Luo et al. 2024, arXiv:2404.02827)
        P_t = c.trainable / max(a.num_layers, 1)
    e_t = _bytes(run.trainable_dtype)
    offload = run.offload_optimizer is not None and stage >= 1
    impl = run.optimizer_impl
    if not ds:
        grads = P_t * e_t
        grads_persistent = run.grad_accum > 1
        grads_always = grads_step = 0.0
        master = 0.0
        state_b = 4.0 if run.trainable_dtype == "float32" else e_t
        states = P_t * optimizer_state_bytes(impl, state_b)
        if run.use_galore or run.use_apollo:
            # GaLore/APOLLO keep Adam moments of the rank-r projected gradient (r x n per m x n matrix) plus the
            # projector: about r/h of the full states (LF default rank 16; Zhao et al. 2024, arXiv:2403.03507)
            states = P_t * optimizer_state_bytes(impl, state_b) * min(1.0, 2 * 16 / a.hidden_size) + P_t * 4 * 16 / a.hidden_size
        largest_t = max(a.embedding_params(), max((lin.params // lin.count for lin in a.layer_linears(0)),
                                                   default=0)) if run.finetuning_type == "full" else 0
        if run.finetuning_type != "full":
            largest_t = max((run.lora_rank * max(lin.in_features, lin.out_features) for lin in a.layer_linears(0)),
                            default=0) if run.finetuning_type in ("lora", "oft") else c.trainable // max(a.num_layers, 1)
        temp = {"fused": 0.0, "foreach": P_t * state_b, "forloop": 2 * largest_t * state_b}.get(impl, 0.0)
        if impl in ("8bit", "paged_8bit", "8bit_lion"):
            temp = 0.0
    else:
        # DeepSpeed keeps fp32 masters and fp32 optimizer states in its optimizer (ZeRO paper §5; DeepSpeed
        # estimate_zero2/3_model_states_mem_needs: 2 + 4 + 4 + 8 bytes per parameter). When each exists, read from
        # deepspeed 0.19.8 runtime/zero/stage_1_and_2.py and stage3.py:
        # * stage 0 (bf16/fp16 optimizer) and 1: half-precision replica gradients from backward to the step;
        # * stage 2: each reduced gradient is copied into a half-precision partition buffer (grads_in_partition,
        #   allocated in backward, released after the step) and the replica gradients are freed bucket by bucket;
        # * stage 3: a persistent flat gradient-partition buffer (grad_partitions_flat_buffer) in the model dtype;
        # * all: inside step() an fp32 copy of this rank's gradient partition per parameter group (stage 3: per
        #   sub_group_size elements), freed after that group's update; the fp32 master partition and the optimizer
        #   states on it are persistent.
        half = 2.0
        shard = N if stage >= 1 else 1
        master, states = P_t * 4.0 / shard, P_t * optimizer_state_bytes(impl, 4.0) / shard
        grads_always = 0.0
        if stage <= 1:
            grads = P_t * half
        elif stage == 2:
            grads = P_t * half / N
        else:
            grads, grads_always = 0.0, P_t * half / N
        grads_persistent = run.grad_accum > 1
        grads_step = P_t * 4.0 / shard
        if stage == 3:
            grads_step = min(grads_step, run.ds_buckets.get("sub_group_size", 1e9) * 4.0)
        temp = {"fused": 0.0, "foreach": grads_step, "forloop": 2 * grads_step}.get(impl, 0.0)
        if offload:
            # master, states and the fp32 gradients live on the host; the GPU keeps the half partition buffers
            master, states, temp, grads_step = 0.0, 0.0, 0.0, 0.0

    # ---- activations ------------------------------------------------------------------------------------------
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
    if run.autocast and run.trainable_dtype == "float32" and not ds:
        # autocast keeps a half-precision copy of each fp32 weight used in a matmul for backward
        cache = (c.trainable_base + c.adapter) * 2.0

    # ---- logits -----------------------------------------------------------------------------------------------
    # lm_head output in the compute dtype, its fp32 upcast for the loss, log_softmax's fp32 output (REPORT.md §3:
    # 2sbV + 4sbV kept; the loss adds 4sbV while it runs). fp32 compute has no separate upcast.
    e_logit = 4.0 if (run.upcast_lmhead_output or (run.autocast is None and run.compute_dtype == "float32")) else (
        2.0 if run.autocast or run.weights_dtype != "float32" else 4.0)
    logits = T * a.vocab_size * (e_logit + 4.0 + (4.0 if e_logit == 2.0 else 0.0)
                                 + (4.0 if run.shifted_logits_copy else 0.0))
    # the loss's backward: log_softmax's saved fp32 output, its incoming and its outgoing fp32 gradient are alive
    # together (12 B per token per vocabulary entry); the half-precision logits are gone by then. Measured against
    # the simulate probe (benchmarks/results/calibration.md): LoRA/freeze/ZeRO runs peak exactly there.
    logits_bwd = T * a.vocab_size * 12.0
    if e_logit == 2.0 and run.autocast is None and not a.loss_upcasts_logits:
        # remote-code loss on half-precision logits (ModelArch.loss_upcasts_logits): the logits, the contiguous
        # shifted copy and log_softmax's half output; its backward holds three half tensors
        logits = T * a.vocab_size * (2.0 + 2.0 + 2.0)
        logits_bwd = T * a.vocab_size * 6.0
    if run.stage in ("dpo", "kto") and (run.ref_model or run.finetuning_type in ("lora", "oft")):
        # LF computes the reference log-probs after the policy forward (dpo/trainer.py get_batch_loss_metrics),
        # under no_grad but while the policy's activations and logits are alive: its logits and their fp32
        # log-softmax exist at the same time.
        logits += T * a.vocab_size * (e_logit + 4.0)
    if run.stage == "rm":
        logits = logits_bwd = T * 4.0 * 2   # a value head: one fp32 score per token (LF ValueHead), no vocabulary

    # ---- buffers ----------------------------------------------------------------------------------------------
    buffers = 0.0
    if ds and stage >= 1:
        rb = run.ds_buckets.get("reduce_bucket_size", 5e8)
        ab = run.ds_buckets.get("allgather_bucket_size", 5e8)
        if run.contiguous_gradients:
            # the gradient reduction (IPG) buffer is allocated at its full reduce_bucket_size, however few the
            # trainable parameters: ZeRO-1/2 one per bucket plus a second with overlap_comm (DeepSpeed 0.19.8
            # stage_1_and_2.py setup_buckets, "buf_0"/"buf_1"), ZeRO-3 one (stage3.py, "# IPG"); taken in half
            # precision (ZeRO-1 with an fp32 gradient accumulator stages fp32 there: not modelled)
            buffers += 2.0 * rb * (2 if run.overlap_comm and stage in (1, 2) else 1)
        else:
            buffers += 2.0 * min(rb, P_t)   # no preallocated buffer: the reduction's temporaries only
        if stage in (1, 2):
            buffers += 2.0 * min(ab, P_t) if N > 1 else 0.0
    elif not ds and N > 1:
        buffers += P_t * e_t   # DDP bucket buffers (gradient_as_bucket_view=False)

    # ---- host (per node) --------------------------------------------------------------------------------------
    g = run.gpus_per_node
    host = HOST_PER_PROCESS_GIB * GIB * g
    if offload:
        host += g * P_t * (4.0 + 4.0 + optimizer_state_bytes("foreach", 4.0)) / N
    if run.offload_param:
        host += g * (c.frozen * wq + P_t * 2.0) / N
    grads_in_backward = grads if (ds and stage == 2) else 0.0
    return Terms(weights, live, grads, grads_persistent, grads_always, grads_step, master, states, temp, acts,
                 recompute, cache, logits, logits_bwd, grads_in_backward, buffers, host)


def runtime_bytes(run: Run, hw: Hardware | None) -> float:
    """CUDA context + cuBLAS/cuBLASLt workspaces + NCCL communicator buffers (REPORT.md §7)."""
    hopper = bool(hw and hw.compute_capability and hw.compute_capability[0] >= 9)
    b = (CUDA_CONTEXT_GIB_HOPPER if hopper else CUDA_CONTEXT_GIB) * GIB \
        + (CUBLAS_WORKSPACE_MIB["hopper" if hopper else "other"] + 1.0) * MIB
    if run.world_size > 1:
        b += (NCCL_2_RANKS_GIB if run.world_size == 2 else NCCL_MANY_RANKS_GIB) * GIB
        if run.deepspeed:
            b += 0.1 * GIB
    return b


def estimate(run: Run, hw: Hardware | None = None, *, tokens: int | None = None,
             counts: ParamCounts | None = None) -> MemoryEstimate:
    """Predicted steady-state peak per rank (GiB) as nvidia-smi and max_memory_allocated would show it.

    `hw.capacity_gib` decides `fits` (None when no GPU is known); `tokens` replaces micro batch × cutoff_len by a
    measured worst micro-batch. Returns per_gpu terms at the peak phase; `details` holds every term in bytes, the
    three phase totals and the parameter counts.
    """
    c = counts or count_params(run)
    t = compute_terms(run, c, tokens)
    W = t.weights + t.buffers + t.grads_always
    held = t.gradients if t.grads_persistent else 0.0
    # Moments of a step, in execution order. Optimizer states are created lazily inside the first optimizer step
    # (torch.optim.AdamW._init_group), so step 1 runs without them; from step 2 on every moment carries them.
    def moments(states: float) -> list[tuple[str, float, dict[str, float]]]:
        opt = t.master + states
        g_bwd = max(held, t.grads_in_backward)
        return [
            ("loss", W + opt + t.live_params + held + t.activations + t.autocast_cache + t.logits,
             {"activations": t.activations + t.autocast_cache, "logits": t.logits, "gradients": held,
              "weights": t.weights + t.live_params}),
            # the autocast weight cache is dropped when the forward's autocast region exits (only casts that
            # autograd saved survive, which the per-layer activations already count)
            ("loss backward", W + opt + t.live_params + g_bwd + t.activations + t.logits_bwd,
             {"activations": t.activations, "logits": t.logits_bwd, "gradients": g_bwd,
              "weights": t.weights + t.live_params}),
            ("backward", W + opt + t.live_params + g_bwd + t.activations + t.autocast_cache + t.recompute,
             {"activations": t.activations + t.autocast_cache + t.recompute, "gradients": g_bwd,
              "weights": t.weights + t.live_params}),
            ("backward end", W + opt + t.live_params + t.gradients,
             {"gradients": t.gradients, "weights": t.weights + t.live_params}),
            ("optimizer step", W + t.master + t.states + t.gradients + t.grads_step + t.step_temp,
             {"gradients": t.gradients + t.grads_step, "weights": t.weights, "temp": t.step_temp}),
        ]

    steady = moments(t.states)
    name, peak, parts = max(steady, key=lambda m: m[1])
    phase = {"loss": "forward/loss", "loss backward": "backward", "backward": "backward",
             "backward end": "backward", "optimizer step": "optimizer step"}[name]
    comp = {
        "weights": parts.get("weights", 0.0),
        "gradients": parts.get("gradients", 0.0) + t.grads_always,
        "optimizer": t.master + t.states + parts.get("temp", 0.0),
        "activations": parts.get("activations", 0.0),
        "logits": parts.get("logits", 0.0),
        "buffers": t.buffers,
    }
    phases = {f"{n} (step 2)": v for n, v, _ in steady}
    first = moments(0.0)
    # loading the model: the weights (partitioned under ZeRO-3) before any step
    timeline = [("model load", t.weights + t.grads_always)] + [(f"{n} of step 1", v) for n, v, _ in first[:-1]] + [("optimizer step of step 1", steady[-1][1])] + [
        (f"{n} of step 2", v) for n, v, _ in steady[:-1]]
    expandable = run.world_size > 1  # llamafactory-cli sets expandable_segments for torchrun launches
    # the allocator's reserve by shape class, derived from allocator replays (analyzers/reserve.py)
    reserve_share, shape = reserve_fraction(run, t, expandable)
    factor = 1 + reserve_share
    reserve = peak * (factor - 1)
    rt = runtime_bytes(run, hw)
    first_oom = None
    if hw is not None and hw.capacity_gib:
        budget = (hw.capacity_gib - (max(hw.in_use_gib) if hw.in_use_gib else 0.0)) * GIB - rt
        first_oom = next((n for n, b in timeline if b * factor > budget), None)
    total = peak + reserve + rt
    per_gpu = {k: v / GIB for k, v in comp.items()}
    per_gpu["runtime"] = (rt + reserve) / GIB
    per_gpu["total"] = total / GIB
    fits = headroom = None
    if hw is not None and hw.capacity_gib:
        in_use = max(hw.in_use_gib) if hw.in_use_gib else 0.0
        headroom = hw.capacity_gib - in_use - total / GIB
        fits = headroom >= 0
    details: dict[str, Any] = {
        "phase_gib": {k: v / GIB for k, v in phases.items()},
        "terms_bytes": {k: float(v) for k, v in t.__dict__.items() if isinstance(v, float)},
        "params": {"base": c.base, "trainable": c.trainable, "adapter": c.adapter, "frozen": c.frozen,
                   "trainable_base": c.trainable_base, "expert_lora": c.expert_lora_params},
        "tokens_per_micro_batch": tokens if tokens is not None else run.tokens_per_micro_batch,
        "reserve_gib": reserve / GIB,
        "reserve_share": reserve_share,
        "reserve_class": shape,
        "first_oom": first_oom,
        "peak_moment": f"{name} of step 2" if name != "optimizer step" else "optimizer step",
        "moments_gib": {name: b / GIB for name, b in timeline},
        "runtime_gib": rt / GIB,
    }
    return MemoryEstimate(per_gpu=per_gpu, peak_allocated=peak / GIB, host=t.host / GIB, fits=fits,
                          headroom=headroom, method="analytic", phase=phase, details=details)
