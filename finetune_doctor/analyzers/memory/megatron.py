"""Per-rank memory of Megatron-Core training (LLaMA-Factory's mcore adapter or Megatron Bridge), following
Megatron-LM's own theoretical-memory formula.

Source: NVIDIA/Megatron-LM ``megatron/training/theoretical_memory_usage.py`` at d98e8a6 (2026-08-22):

* ``compute_weight_and_optimizer_memory`` (lines 12-305): parameters are split into TP-sharded ones (attention,
  dense MLP, shared experts; ÷ TP), replicated ones (norms, router) and expert-sharded ones (routed experts;
  ÷ ETP·EP); a rank holds 1/PP of the decoder layers, and the stage with the embedding (first; the output layer
  too when untied and PP = 1) is the most loaded. Bytes per parameter: 18 (bf16 param 2 + fp32 main grad 4 + fp32
  main param 4 + Adam 8) without the distributed optimizer, ``6 + 12 / DP`` with it, experts over the expert
  data-parallel size (lines 293-303).
* ``compute_activation_memory`` (lines 308-379, Korthikanti et al. 2022 arXiv:2205.05198 Table 2) with sequence
  parallelism and selective recomputation: ``s·b·h·(18 + 4·ffn/h) / TP`` bytes per layer, times the layers of
  the first stage times its in-flight microbatches (``min(PP, microbatches)``; the interleaved schedule's penalty
  ``1 + (PP-1)/(PP·VPP)``), plus the embedding's ``8·s·b·PP + s·b·h·PP`` and, at PP = 1, the output layer's
  ``4·s·b·h·(1 + V/h)``; ``compute_activation_memory_without_sp`` (lines 382-453) otherwise: ``s·b·h·(10 +
  24/TP)`` per layer, logits ``2·(s·b·V/TP + s·b·h)``, and 5 % for temporaries.

What the formula leaves open is filled here, each from its own source:

* the MLP term ``4·ffn/h`` (two ffn-wide tensors, GeLU) is scaled by the formula's own gated-linear multiplier 3/2
  for SwiGLU (fc1 emits gate and up); MoE layers use ``topk · moe_ffn`` (+ the shared expert) as their width;
  without SP the same ffn dependence is kept (``10 + (8 + 4·ffn/h)/TP``, which is ``10 + 24/TP`` at ffn = 4h);
* full recomputation keeps each layer's input only (``2·s·b·h`` per layer, ÷ TP under SP; Korthikanti Table 2)
  and rebuilds ``recompute_num_layers`` layers of one microbatch during backward (mcore adapter model_config.py
  :359-366 defaults ``uniform`` / 1 layer);
* context parallelism splits the sequence: activations ÷ CP (Megatron Bridge PR #3910 adds the same to its
  estimator); the distributed optimizer shards over DP × CP (megatron/core/distributed/
  distributed_data_parallel.py:285-295: dense buffers use ``intra_dp_cp_group``);
* the last pipeline stage (output layer, logits, one microbatch in flight under 1F1B) is computed beside the
  first and the busier of the two is the rank reported; a tied embedding still costs the last stage a copy of the
  word embeddings when PP > 1 (Megatron ``LanguageModule.setup_embeddings_and_output_layer``);
* frozen parameters (Megatron Bridge LoRA) keep only their 2-byte copy; ``optimizer_cpu_offload`` moves
  ``optimizer_offload_fraction`` of the fp32 main params and Adam states to the host (mcore adapter
  training_args.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from finetune_doctor.analyzers.memory.constants import HOST_PER_PROCESS_GIB
from finetune_doctor.analyzers.memory.params import ParamCounts, count_params
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run
from finetune_doctor.types import GIB


@dataclass(frozen=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds (elements): `dense` (TP-sharded and replicated, already
    divided), `expert` (already ÷ ETP·EP), and which layers it runs."""

    dense: float
    expert: float
    layers: tuple[int, ...]
    first: bool
    last: bool


def _layer_split(run: Run, i: int) -> tuple[float, float, float]:
    """(TP-sharded, replicated, routed-expert) elements of decoder layer `i` (theoretical_memory_usage.py
    lines 214-230 split)."""
    a = run.arch
    tp_sh = expert = 0.0
    for lin in a.layer_linears(i):
        if lin.expert:
            expert += lin.params
        else:
            tp_sh += lin.params
    return tp_sh, float(a.layer_other_params(i)), expert


def stage_layers(run: Run, stage: int) -> tuple[int, ...]:
    """Decoder layers of pipeline rank `stage`: contiguous blocks of L/PP, or with VPP the chunks
    ``stage, stage+PP, ...`` of L/(PP·VPP) layers each (Megatron ``get_num_layers_to_build`` /
    ``get_transformer_layer_offset``). Uneven splits give the remainder to the last stage."""
    L, pp, vpp = run.arch.num_layers, max(run.mcore_pp, 1), run.mcore_vpp or 1
    chunks = pp * vpp
    per = max(L // chunks, 1)
    out: list[int] = []
    for c in range(stage, chunks, pp):
        start = c * per
        end = L if c == chunks - 1 else min(start + per, L)
        out.extend(range(start, end))
    return tuple(out)


def stage_params(run: Run, stage: int) -> StageParams:
    """What rank `stage` holds, following theoretical_memory_usage.py:247-272."""
    a = run.arch
    tp, e_sh = max(run.mcore_tp, 1), max(run.mcore_etp * run.mcore_ep, 1)
    pp = max(run.mcore_pp, 1)
    layers = stage_layers(run, stage)
    dense = expert = 0.0
    for i in layers:
        t, r, e = _layer_split(run, i)
        dense += t / tp + r
        expert += e / e_sh
    first, last = stage == 0, stage == pp - 1
    emb = a.embedding_params() / tp
    if first:
        dense += emb
    if last:
        dense += a.final_norm_params()
        if not a.tie_word_embeddings or pp > 1:
            dense += emb   # the output layer (an untied one, or the tied embedding's copy on the last stage)
    return StageParams(dense, expert, layers, first, last)


def _per_layer_activation(run: Run, i: int, tokens: float) -> float:
    """Bytes one microbatch leaves saved in layer `i` without full recomputation (module docstring)."""
    a = run.arch
    h, tp = a.hidden_size, max(run.mcore_tp, 1)
    gated = 1.5 if a.gated_mlp else 1.0
    if a.is_dense_layer(i):
        ffn = a.intermediate_size
    else:
        ffn = (a.moe_intermediate_size or a.intermediate_size) * max(a.num_experts_per_tok, 1) \
            + (a.shared_expert_intermediate_size or 0)
    mlp = 4.0 * gated * ffn / h
    if run.mcore_sp:
        return tokens * h * (18.0 + mlp) / tp
    return tokens * h * (10.0 + (8.0 + mlp) / tp)


def _in_flight(run: Run, stage: int) -> float:
    """Microbatches whose activations stage `stage` holds at once under 1F1B (``pp - stage``, at most the
    microbatches of a step; lines 341-366), with the interleaved schedule's penalty when VPP is set."""
    pp, m = max(run.mcore_pp, 1), max(run.grad_accum, 1)
    if pp == 1:
        return 1.0
    if run.mcore_vpp:
        return (pp - stage) * (1 + (pp - 1) / (pp * run.mcore_vpp))
    return float(min(pp - stage, m))


def stage_activations(run: Run, stage: int, tokens: float) -> tuple[float, float]:
    """(saved activation bytes, bytes rebuilt during a recomputed backward) of rank `stage` for microbatches of
    `tokens` tokens (÷ CP already applied by the caller)."""
    a = run.arch
    h, tp = a.hidden_size, max(run.mcore_tp, 1)
    sp_div = tp if run.mcore_sp else 1
    layers = stage_layers(run, stage)
    flight = _in_flight(run, stage)
    per = [_per_layer_activation(run, i, tokens) for i in layers]
    recompute = 0.0
    if run.mcore_recompute == "full":
        n = run.mcore_recompute_num_layers or 1
        if (run.mcore_recompute_method or "uniform") == "block":
            kept = sum(2.0 * tokens * h / sp_div for _ in per[:n]) + sum(per[n:])
        else:
            kept = 2.0 * tokens * h / sp_div * len(per)
        saved = kept * flight
        recompute = max(per, default=0.0) * min(n, len(per))
    else:
        saved = sum(per) * flight
    if stage == 0:
        pp = max(run.mcore_pp, 1)
        saved += (8.0 * tokens + tokens * h) * (flight if pp > 1 else 1.0)   # input ids + embedding dropout
    if not run.mcore_sp:
        saved *= 1.05   # the formula's allowance for temporaries (without SP, line 450)
    return saved, recompute


def _logits(run: Run, tokens: float, fused_ce: bool) -> tuple[float, float]:
    """(at the loss, during its backward) bytes of the last stage's logits [s, b, V/TP].

    The unfused vocab-parallel cross-entropy computes on an fp32 copy of the bf16 logits (megatron/core/
    tensor_parallel/cross_entropy.py:25; the formula's 4 bytes per logit, line 370-376) and saves its softmax in
    it; backward turns that softmax into the fp32 gradient and casts it to bf16: 2 + 4 bytes at the loss, 4 + 2
    during its backward. The fused one (megatron/core/fusions/fused_cross_entropy.py) keeps the bf16 logits and a
    bf16 exp_logits (2 + 2), and in backward the saved bf16 softmax, an fp32 gradient and its bf16 cast
    (2 + 4 + 2 at most, the fp32 one freed as the cast completes: taken as 2 + 4)."""
    V, tp = run.arch.vocab_size, max(run.mcore_tp, 1)
    n = tokens * V / tp
    if fused_ce:
        return 4.0 * n, 6.0 * n
    return 6.0 * n, 6.0 * n


def megatron_terms(run: Run, c: ParamCounts, T: int) -> dict[str, float | bool]:
    """The `Terms` fields (analyzers/memory/terms.py) of the busiest rank (the first or the last pipeline
    stage), for microbatches of `T` tokens. Bytes. Under the mcore adapter every parameter trains whatever
    `finetuning_type` says (run/engines.py), and DeepSpeed settings do not apply (the adapter clears them)."""
    if run.mcore == "mca" and run.finetuning_type != "full":
        run = run.with_(finetuning_type="full")
        c = count_params(run)
    best: dict[str, float | bool] | None = None
    stages = {0, max(run.mcore_pp, 1) - 1}
    for s in sorted(stages):
        t = _stage_terms(run, c, T, s)
        total = sum(v for k, v in t.items() if isinstance(v, float) and k not in ("host", "logits_bwd"))
        if best is None or total > best["_total"]:
            best = {**t, "_total": total}
    assert best is not None
    best.pop("_total")
    return best


def _stage_terms(run: Run, c: ParamCounts, T: int, stage: int) -> dict[str, float | bool]:
    sp = stage_params(run, stage)
    frozen_share = c.frozen / max(c.base, 1)
    e_half = _bytes(run.weights_dtype) if run.weights_dtype in ("bfloat16", "float16") else 4.0
    half_master = e_half < 4.0   # bf16/fp16 training keeps fp32 main params; fp32 training updates in place
    d_t, e_t = sp.dense * (1 - frozen_share), sp.expert * (1 - frozen_share)
    adapter = c.adapter / max(run.mcore_pp, 1) / max(run.mcore_tp, 1)
    d_t += adapter
    shard_d = max(run.mcore_dp * run.mcore_cp, 1) if run.mcore_distributed_optimizer else 1
    shard_e = max(run.mcore_expert_dp, 1) if run.mcore_distributed_optimizer else 1
    weights = (sp.dense + sp.expert + adapter) * e_half
    grads = (d_t + e_t) * 4.0                              # fp32 main-grad buffer, allocated once
    master = (d_t / shard_d + e_t / shard_e) * (4.0 if half_master else 0.0)
    states = (d_t / shard_d + e_t / shard_e) * 8.0
    off = run.mcore_optimizer_offload
    host_opt = (master + states) * off
    master, states = master * (1 - off), states * (1 - off)
    tokens = T / max(run.mcore_cp, 1)
    saved, recompute = stage_activations(run, stage, tokens)
    fwd = bwd = 0.0
    if sp.last:
        fwd, bwd = _logits(run, tokens, run.mcore_ce_fusion)
        saved += 4.0 * tokens * run.arch.hidden_size / max(run.mcore_tp if run.mcore_sp else 1, 1)
    g = run.gpus_per_node
    return {"weights": weights, "live_params": 0.0, "gradients": 0.0, "grads_persistent": False,
            "grads_always": grads, "grads_step": 0.0, "master": master, "states": states, "step_temp": 0.0,
            "activations": saved, "recompute": recompute, "autocast_cache": 0.0, "logits": fwd,
            "logits_bwd": bwd, "grads_in_backward": 0.0, "buffers": 0.0,
            "host": HOST_PER_PROCESS_GIB * GIB * g + host_opt * g}
