"""Communication buffers (DeepSpeed's reduction and allgather buckets, DDP's bucket views) and host RAM per node.

Sources: DeepSpeed 0.19.8 stage_1_and_2.py ``setup_buckets`` and stage3.py (the IPG buffer), torch DDP's Reducer as
the HF Trainer configures it (ddp.py: ``gradient_as_bucket_view=False`` keeps bucket buffers the size of all
trainable gradients), reference/memory/REPORT.md §7.
"""

from __future__ import annotations

from finetune_doctor.analyzers.memory.constants import HOST_PER_PROCESS_GIB
from finetune_doctor.analyzers.memory.ddp import reducer_bucket_bytes
from finetune_doctor.analyzers.memory.weights import optimizer_state_bytes
from finetune_doctor.analyzers.memory.zero3 import ds_model_bytes
from finetune_doctor.analyzers.memory.params import ParamCounts
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run
from finetune_doctor.types import GIB


def buffer_bytes(run: Run, trainable: float) -> float:
    """Bucket buffers of one rank for `trainable` parameters (bytes)."""
    N = max(run.world_size, 1)
    stage = run.zero_stage if run.deepspeed else 0
    if run.deepspeed and stage >= 1:
        rb = run.ds_buckets.get("reduce_bucket_size", 5e8)
        ab = run.ds_buckets.get("allgather_bucket_size", 5e8)
        e = ds_model_bytes(run)    # the parameters' dtype: fp32 when DeepSpeed runs without fp16/bf16
        if run.contiguous_gradients:
            # the gradient reduction (IPG) buffer is allocated at its full reduce_bucket_size, however few the
            # trainable parameters: ZeRO-1/2 one per bucket plus a second with overlap_comm ("buf_0"/"buf_1"),
            # ZeRO-3 one ("# IPG"); in the parameters' dtype (ZeRO-1 with an fp32 gradient accumulator stages fp32
            # there: not modelled)
            out = e * rb * (2 if run.overlap_comm and stage in (1, 2) else 1)
        else:
            out = e * min(rb, trainable)   # no preallocated buffer: the reduction's temporaries only
        if stage in (1, 2) and N > 1:
            out += e * min(ab, trainable)
        return out
    # DDP's Reducer: one bucket copy of every trainable gradient (HF never sets gradient_as_bucket_view; ddp.py)
    return reducer_bucket_bytes(run, trainable)


def host_bytes(run: Run, c: ParamCounts, trainable: float, stored_per_param: float) -> float:
    """Host RAM per node (bytes): each process's runtime, plus what ZeRO-Offload keeps on the host."""
    N = max(run.world_size, 1)
    g = run.gpus_per_node
    host = HOST_PER_PROCESS_GIB * GIB * g
    stage = run.zero_stage if run.deepspeed else 0
    if run.offload_optimizer is not None and stage >= 1:
        host += g * trainable * (4.0 + 4.0 + optimizer_state_bytes("foreach", 4.0)) / N
    if run.offload_param:
        host += g * (c.frozen * stored_per_param + trainable * 2.0) / N
    return host
