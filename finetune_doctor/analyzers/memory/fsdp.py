"""Per-rank memory of FSDP1 (``FullyShardedDataParallel``, one FlatParameter per unit) and FSDP2
(``fully_shard``, per-parameter DTensor shards) as accelerate 1.15.0 wraps a LLaMA-Factory model.

Units. accelerate wraps every decoder layer (TRANSFORMER_BASED_WRAP; ``_no_split_modules`` when no class is
named). Under PEFT, transformers replaces the policy by peft's, which also gives every trainable leaf (LoRA A/B)
its own unit (transformers 5.24 ``distributed/fsdp.py:267-287``); they are all-gathered with their layer and
counted with it. What is left is the root: FSDP1 keeps embeddings, final norm and lm_head in the root unit and
never reshards the root after forward (torch ``fsdp/_runtime_utils.py`` ``_post_forward_reshard``: the root's
parameters are needed again at once in backward); FSDP2 under accelerate 1.15.0 shards the embedding alone and
``[final norm, lm_head]`` as a tail unit with ``reshard_after_forward=False`` (``utils/fsdp_utils.py:857-885``),
the root keeping torch's heuristic (root: no reshard, ``_fully_shard/_fsdp_state.py:203-207``).

Per rank, with N ranks in the shard group (the world; a node for HYBRID_SHARD; 1 for NO_SHARD):

* **sharded parameters** in their stored dtype: trainable ones in fp32 (LLaMA-Factory's upcast, adapter.py:337-349;
  FSDP2 under mixed precision upcasts every trainable parameter, fsdp_utils.py:803-815), frozen ones as loaded
  (4-bit QLoRA weights packed in the compute dtype, quantization.py:189). FSDP1 pads each unit's FlatParameter to a
  multiple of N (``_flat_param.py`` ``_get_shard``); FSDP2 chunks every parameter on dim 0 (``_fsdp_param.py``:
  ``ceil(dim0 / N)`` rows per rank);
* **unsharded units** in the mixed-precision dtype (``MixedPrecision(param_dtype=...)``, accelerate
  ``set_mixed_precision``): with resharding after forward, FSDP2 holds the tail at the loss and two decoder layers
  at a time otherwise (the running one and the one prefetched: implicit forward prefetch, explicit backward
  prefetch of one); FSDP1 holds the root throughout plus one layer, two with ``backward_prefetch``. Without
  resharding (SHARD_GRAD_OP, ``reshard_after_forward: false``) every unit stays unsharded from its forward to its
  backward: the whole model. NO_WRAP is one unit: the whole model while it runs;
* **gradients**: each unit's unsharded gradient in the param dtype and a reduce-scatter input in the reduce dtype
  exist during that unit's backward (FSDP2 ``foreach_reduce``; FSDP1 ``_reduce_grad``), FSDP1's root gradients until
  the end of backward; the fp32 sharded gradients stay until the optimizer step;
* **optimizer states** on the fp32 shard (AdamW: 8 bytes per trainable element / N), and the implementation's
  temporaries (foreach: one shard-sized copy). LF's ``pure_bf16`` without accelerate mixed precision (``no``)
  leaves the trainable shards in bf16 (no LF upcast, adapter.py:338-344; no accelerate upcast), so gradients
  and AdamW moments are bf16 too (4 bytes of moments per element / N) and no fp32 copy exists; with ``bf16``
  mixed precision accelerate upcasts them to fp32 all the same (accelerate 1.11.0 accelerator.py:1921-1955,
  since 0.30.0, huggingface/accelerate#2674);
* **CPU offload** (``fsdp_offload_params``): sharded parameters and gradients live on the host and the optimizer
  steps there (FSDP1 ``CPUOffload``, FSDP2 ``CPUOffloadPolicy``): the GPU keeps only unsharded units,
  gradients in flight and activations; the host pins shards, gradients and states of every rank of the node.
* **host RAM at load**: every rank reads the whole checkpoint into CPU memory, unless
  ``fsdp_cpu_ram_efficient_loading`` lets rank 0 alone load it and the others start on the meta device
  (accelerate ``FullyShardedDataParallelPlugin.cpu_ram_efficient_loading``; fsdp_utils.py:820-838).

* **allocator pools** (FSDP1): what the caching allocator keeps on FSDP's unshard, pre-unshard and
  post-backward streams, and what initialisation leaves cached on the default stream (`stream_pools`; the reserve
  is assembled in analyzers/memory/reserve.py ``pool_reserve``).

Activations and logits are the HF model's (activations.py, logits.py) computed on what the GPU runs: under mixed
precision FSDP casts the parameters to ``param_dtype`` and accelerate adds autocast, so the residual stream and
the matmuls are half precision and no autocast weight cache exists (`compute_view`).
"""

from __future__ import annotations

import math

from finetune_doctor.analyzers.memory.activations import activation_terms
from finetune_doctor.analyzers.memory.constants import HOST_PER_PROCESS_GIB
from finetune_doctor.analyzers.memory.logits import logit_terms
from finetune_doctor.analyzers.memory.qlora import fused_experts_left_unquantized
from finetune_doctor.analyzers.memory.weights import optimizer_state_bytes, weight_bytes_per_param
from finetune_doctor.analyzers.memory.params import ParamCounts
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run
from finetune_doctor.types import GIB

_NO_RESHARD = ("SHARD_GRAD_OP", "_HYBRID_SHARD_ZERO2")


def shard_group(run: Run) -> int:
    """Ranks a parameter is sharded over: the world, one node for the hybrid strategies, 1 for NO_SHARD."""
    s = run.fsdp_sharding or "FULL_SHARD"
    if s == "NO_SHARD":
        return 1
    if s in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        return max(run.gpus_per_node, 1)
    return max(run.world_size, 1)


def compute_view(run: Run) -> Run:
    """The run as the GPU computes it: under FSDP mixed precision every parameter is cast to `fsdp_param_dtype`
    before its module runs, so activations and logits are those of a half-precision model under autocast."""
    pd = run.fsdp_param_dtype
    if not pd:
        return run
    return run.with_(trainable_dtype=pd, autocast=pd, weights_dtype=run.weights_dtype if run.quantized else pd,
                     deepspeed=False)


def _stored_bytes(run: Run) -> tuple[float, float, float, float]:
    """(trainable, frozen linear, other frozen) bytes per element of the sharded parameters, and the bytes per
    frozen linear element every rank keeps whole.

    A bitsandbytes 4-bit weight is a ``Params4bit`` whose packed data (0.5 B per element, stored in the compute
    dtype) is the parameter FSDP shards; its ``quant_state`` (absmax, nested absmax, code) is a plain attribute of
    that parameter (bitsandbytes ``nn/modules.py`` ``Params4bit``), which neither FSDP1's FlatParameter nor FSDP2's
    DTensor shards: each rank keeps all of it.

    Under accelerate's mixed precision, FSDP1 trainable FlatParameters stored in half precision are upcast to fp32
    after wrapping, as DeepSpeed keeps fp32 partitions (accelerate 16cb6eb ``accelerator.py:1991-2032``: every
    FSDP module whose flat parameter requires grad and is not fp32, quantized models' adapters included)."""
    pd = run.fsdp_param_dtype
    upcast = bool(pd) and (run.fsdp_version != 2 or not run.quantized)
    b_t = 4.0 if (run.trainable_dtype == "float32" or upcast) else _bytes(run.trainable_dtype)
    if run.quantized:
        wq = run.linear_weight_bytes or weight_bytes_per_param(run.weights_dtype, run.double_quantization)
        packed = _bytes(run.weights_dtype) if run.weights_dtype in ("nf4", "fp4") else wq
        return b_t, packed, _bytes(run.compute_dtype), wq - packed
    b_f = _bytes(run.weights_dtype)
    return b_t, b_f, b_f, 0.0


def _layer_parts(run: Run, c: ParamCounts, i: int) -> tuple[float, float, float]:
    """(frozen linear, other frozen, trainable) elements of decoder layer `i` and its LoRA leaves."""
    a = run.arch
    # fused 3-D experts that on-the-fly quantization skips are stored like the other unquantized parameters
    kept = float(sum(x.params for x in a.layer_linears(i) if fused_experts_left_unquantized(run, x)))
    lin = float(sum(x.params for x in a.layer_linears(i))) - kept
    other = float(a.layer_other_params(i)) + kept
    ft = run.finetuning_type
    L = max(a.num_layers, 1)
    if ft == "full":
        return 0.0, 0.0, lin + other
    if ft in ("lora", "oft"):
        return lin, other, c.adapter / L
    if ft == "freeze":
        k = run.freeze_trainable_layers
        trains = (i >= L - k) if k > 0 else (i < -k)
        if trains:
            share = c.trainable_base / max(abs(k), 1) / max(lin + other, 1)
            t = min(lin + other, share * (lin + other))
            return max(lin - t, 0.0), other, t
    return lin, other, 0.0


def _chunk(elems: float, rows: int, N: int) -> float:
    """Per-rank elements of a parameter of `elems` elements and `rows` dim-0 rows chunked over N (FSDP2)."""
    if N <= 1 or rows <= 0:
        return elems
    return math.ceil(rows / N) * (elems / rows)


# torch.distributed.fsdp._init_utils.PARAM_BROADCAST_BUCKET_SIZE (torch 2.13.0 _init_utils.py:60): the bucket
# sync_module_states broadcasts each unit's states in
BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024
# torch 2.13.0 _limiter_utils.py:15: free events the rate limiter lets queue before it waits on the oldest
LIMITER_INFLIGHT = 2


def stream_pools(run: Run, N: int, big: float, big_stored: float, root_live: float, root_stored: float,
                 live: float, gpu_weights: float) -> dict[str, float]:
    """What the caching allocator reserves for an FSDP1 rank beyond the default stream's tensors. Bytes.

    Returns ``side_pools`` (the high-water mark of the pools of FSDP's own streams), ``side_live`` (the part of
    it the tensor peak already counts: the unsharded units in `live`) and ``init_floor`` (what the default
    stream's pool still holds when training starts). analyzers/memory/reserve.py ``pool_reserve`` turns them into the
    reserve. `big`/`big_stored`: the largest decoder-layer unit unsharded in the compute / stored dtype;
    `root_live`/`root_stored`: the root unit (embeddings, final norm, lm_head) likewise.

    Why (torch 2.13.0, ``torch/distributed/fsdp``): the caching allocator keeps one pool per stream: a block
    freed on one stream is re-allocated only on that stream (c10/cuda/CUDACachingAllocator.cpp, the opening
    comment), and a block freed after ``record_stream`` waits until the recording stream passes that point.
    FSDP1 allocates on three streams of its own (``_runtime_utils.py:263-269``):

    * unshard stream: every all-gather destination (``_runtime_utils.py:304-306`` → ``_flat_param.py:1395-1409``
      ``_alloc_padded_unsharded_flat_param``). A unit's block is freed at its reshard with ``record_stream`` on
      the compute stream (``_flat_param.py:1805-1821``), so while the CPU runs ahead the next all-gather cannot
      reuse it. The rate limiter lets ``LIMITER_INFLIGHT`` freed units queue before it synchronises the oldest
      (``_runtime_utils.py:297-302``, events enqueued at every reshard ``:316-326``). High water: the root (never
      resharded after forward, ``:496-499``) plus the running unit, the prefetched one (``backward_prefetch``)
      and the queued frees. With LoRA leaves wrapped as units of their own (peft's policy) the queue entries
      between two decoder layers are leaf frees, so one layer free stays queued; without leaves, two;
    * pre-unshard stream (``_runtime_utils.py:293-294`` ``pre_unshard``): under parameter mixed precision the
      low-precision shard ``_mp_shard`` (``_flat_param.py:1342-1357``), with CPU offload the shard's copy to the
      device (``:1336-1338``), one per unit in flight; the offloaded copy lives until the reshard;
    * post-backward stream: the reduce-scatter output (``_runtime_utils.py:890-902``); with CPU offload it is
      copied to the host and freed (``:985``), a shard per unit in flight.

    Initialisation leaves its blocks in the default stream's pool (nothing empties the cache between
    ``FullyShardedDataParallel(...)``/``accelerator.prepare`` and the first step): per unit
    ``_init_param_handle_from_module`` moves the unit's parameters to the GPU (``_init_utils.py:603-608``),
    broadcasts them in ``BROADCAST_BUCKET_BYTES`` buckets under ``sync_module_states`` (``:1162-1167``), and
    ``FlatParamHandle`` concatenates them (``_flat_param.py:893``) before ``shard`` clones this rank's chunk
    and frees the whole (``:945-975``, ``:1122-1138``). The largest unit's parameters, its flat copy and a
    bucket stay cached beside the shards. Later default-stream tensors reuse those blocks, so the default pool
    is the larger of this floor and the default stream's own peak.

    FSDP2 (``fully_shard``), NO_SHARD and SHARD_GRAD_OP get zeros (the share alone, as before): no published row
    measures them, and their streams' lifetimes are not derived here.
    """
    zero = {"side_pools": 0.0, "side_live": 0.0, "init_floor": 0.0}
    strategy = run.fsdp_sharding or "FULL_SHARD"
    if run.fsdp_version == 2 or N <= 1 or strategy in _NO_RESHARD:
        return zero
    leaves = run.finetuning_type in ("lora", "oft")
    pre = 2 if (run.fsdp_backward_prefetch in ("BACKWARD_PRE", "BACKWARD_POST") or run.fsdp_forward_prefetch) else 1
    n = pre + (LIMITER_INFLIGHT - 1 if leaves else LIMITER_INFLIGHT)
    unshard = root_live + n * big
    pd = run.fsdp_param_dtype
    pre_unshard = 0.0
    if pd and big != big_stored:   # parameter mixed precision: the low-precision shard is a copy
        pre_unshard = (n * big + root_live) / N
    if run.fsdp_offload_params:
        pre_unshard = max(pre_unshard, (n * big_stored + root_stored) / N)
    post = n * big_stored / N if run.fsdp_offload_params else 0.0
    unit = max(big_stored, root_stored)
    bucket = min(BROADCAST_BUCKET_BYTES, unit) if (run.fsdp_sync_module_states and run.world_size > 1) else 0.0
    return {"side_pools": unshard + pre_unshard + post, "side_live": live,
            "init_floor": gpu_weights + 2 * unit + bucket}


def fsdp_terms(run: Run, c: ParamCounts, T: int) -> dict[str, float | bool]:
    """The `Terms` fields (analyzers/memory/terms.py) of one FSDP rank for micro batches of `T` tokens. Bytes."""
    a = run.arch
    N = shard_group(run)
    v2 = run.fsdp_version == 2
    b_t, b_fl, b_fo, b_whole = _stored_bytes(run)
    pd = run.fsdp_param_dtype
    live_t = _bytes(pd) if pd else b_t
    live_fo = _bytes(pd) if pd else b_fo
    live_fl = b_fl if run.quantized else live_fo
    red = _bytes(pd) if pd else b_t
    # ---- decoder layers
    shard_w = shard_t = whole = 0.0
    layer_live: list[float] = []
    layer_stored: list[float] = []
    layer_train: list[float] = []
    for i in range(a.num_layers):
        fl, fo, tr = _layer_parts(run, c, i)
        if v2:
            rows = [(x.params, x.out_features * (1 if not a.experts_fused or not x.expert else x.count) or 1)
                    for x in a.layer_linears(i)]
            lin_rank = sum(_chunk(e, r, N) for e, r in rows)
            frac = lin_rank / max(sum(e for e, _ in rows), 1)
        else:
            frac = math.ceil((fl + fo + tr) / N) / max(fl + fo + tr, 1) if N > 1 else 1.0
        shard_w += frac * (fl * b_fl + fo * b_fo)
        whole += fl * b_whole
        shard_t += frac * tr
        layer_live.append(fl * live_fl + fo * live_fo + tr * live_t)
        layer_stored.append(fl * b_fl + fo * b_fo + tr * b_t)
        layer_train.append(tr)
    # ---- embeddings, final norm, lm_head
    emb, head, norm = a.embedding_params(), a.lm_head_params(), a.final_norm_params()
    vocab_trains = run.finetuning_type == "full" or run.resize_vocab or bool(run.additional_target)
    emb_t = c.trainable_base - sum(layer_train) if run.finetuning_type != "full" else emb + head + norm
    emb_t = min(max(emb_t if vocab_trains else 0.0, 0.0), emb + head + norm)
    outer = emb + head + norm
    outer_frozen = outer - emb_t
    ofrac = _chunk(1.0, a.vocab_size, N) if v2 else (math.ceil(outer / N) / max(outer, 1) if N > 1 else 1.0)
    shard_w += ofrac * outer_frozen * b_fo
    shard_t += ofrac * emb_t
    tail = (norm + (head or emb)) if v2 else outer
    tail_t = min(emb_t, tail)
    tail_live = (tail - tail_t) * live_fo + tail_t * live_t
    # ---- unsharded units at once
    big = max(layer_live, default=0.0)
    total_live = sum(layer_live) + outer_frozen * live_fo + emb_t * live_t
    strategy = run.fsdp_sharding or "FULL_SHARD"
    if run.fsdp_wrap == "NO_WRAP" and run.finetuning_type not in ("lora", "oft"):
        live = total_live
    elif strategy in _NO_RESHARD or (v2 and not run.fsdp_reshard_after_forward):
        live = total_live
    elif strategy == "NO_SHARD" and not pd:
        live = 0.0
    elif v2:
        live = max(tail_live, 2 * big)
    else:
        pre = 2 if (run.fsdp_backward_prefetch in ("BACKWARD_PRE", "BACKWARD_POST") or run.fsdp_forward_prefetch) else 1
        live = tail_live + pre * big
    # ---- gradients in flight during a unit's backward
    unit_t = max(max(layer_train, default=0.0), tail_t)
    g_bwd = unit_t * (live_t + red)
    if not v2:
        g_bwd += tail_t * live_t   # FSDP1: the root's gradients wait for the end of backward
    if run.fsdp_wrap == "NO_WRAP" and run.finetuning_type not in ("lora", "oft"):
        g_bwd = c.trainable * (live_t + red)
    # ---- sharded gradients, optimizer
    P_t = shard_t
    state_b = 4.0 if b_t == 4.0 else b_t
    grads = P_t * b_t
    states = P_t * optimizer_state_bytes(run.optimizer_impl, state_b)
    largest = max(layer_train + [tail_t], default=0.0) / max(N, 1)
    temp = {"fused": 0.0, "foreach": P_t * state_b, "forloop": 2 * largest * state_b}.get(run.optimizer_impl, 0.0)
    if run.optimizer_impl in ("8bit", "paged_8bit", "8bit_lion"):
        temp = 0.0
    weights = shard_w + P_t * b_t + whole
    host_steady = 0.0
    if run.fsdp_offload_params:
        # only parameters are offloaded: the 4-bit quant_state stays where the kernels read it
        host_steady = weights - whole + grads + states
        weights, grads, states, temp = whole, 0.0, 0.0, 0.0
    # ---- host RAM per node: the load (every rank, or rank 0 alone) or the offloaded shards, plus the runtime
    g = max(run.gpus_per_node, 1)
    model_bytes = c.base * ((b_fl + b_whole) if run.quantized else _bytes(run.weights_dtype))
    load = model_bytes * (1 if run.fsdp_cpu_ram_efficient_loading else g)
    host = HOST_PER_PROCESS_GIB * GIB * g + max(load, host_steady * g)
    pools = stream_pools(run, N, max(layer_live, default=0.0), max(layer_stored, default=0.0),
                         tail_live if not v2 else 0.0, outer_frozen * b_fo + emb_t * b_t, live, weights)
    view = compute_view(run)
    act = activation_terms(view, c, T)
    lg = logit_terms(view, T)
    return {"weights": weights, "live_params": live, "gradients": grads, "grads_persistent": run.grad_accum > 1,
            "grads_always": 0.0, "grads_step": 0.0, "master": 0.0, "states": states, "step_temp": temp,
            # a unit's unsharded gradients exist while that unit runs its backward, beside the layer a
            # checkpointed backward rebuilds: both belong to the "backward" moment (moments.py), not to the
            # loss's backward, where no unit has produced a gradient yet
            "activations": act.saved, "recompute": act.recompute + g_bwd, "autocast_cache": act.autocast_cache,
            "logits": lg.forward, "logits_bwd": lg.backward, "grads_in_backward": 0.0, "buffers": 0.0,
            "host": host, **pools}
