"""torch DDP's Reducer under the HF Trainer: gradient buckets, bucket views and the broadcast at wrap time.

Derived from the versions docs/ARCHITECTURE.md "Sources" names (read in the installed packages):

* **What DDP is given.** transformers 5.6.0 ``trainer.py:700-715`` passes ``find_unused_parameters``,
  ``bucket_cap_mb`` (``ddp_bucket_cap_mb``) and ``broadcast_buffers`` to accelerate's
  ``DistributedDataParallelKwargs``, whose other fields keep their defaults (accelerate 1.11.0
  ``utils/dataclasses.py:178-186``: ``bucket_cap_mb=25``, ``gradient_as_bucket_view=False``). TrainingArguments has
  no key for ``gradient_as_bucket_view``, so a LLaMA-Factory run always trains without bucket views.
* **Buckets.** The Reducer gives every parameter that requires grad a slot in one flat bucket tensor per bucket
  (first bucket ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB, the others ``bucket_cap_mb``; torch 2.13
  ``nn/parallel/distributed.py:87-109``). Without bucket views the gradient autograd produced stays in
  ``param.grad`` and is copied into its bucket slot for the all-reduce, then copied back: the buckets add one
  more copy of every trainable gradient, in the gradient's dtype, for the whole run. With views the bucket *is*
  the gradient (no extra). Frozen parameters (LoRA's base) never enter a bucket, so for LoRA only the adapters
  count.
* **find_unused_parameters.** LLaMA-Factory sets it False for LoRA under DDP when the user leaves it unset
  (LF hparams/parser.py:596-602); transformers otherwise sets it to ``not gradient_checkpointing``
  (trainer.py:701-708). It walks the autograd graph each step and keeps a per-parameter used-map (an int per
  parameter): no tensor the size of the model.
* **Wrap-time broadcast.** ``_sync_module_states`` broadcasts every parameter and buffer from rank 0 in coalesced
  buckets of ``broadcast_bucket_size`` = 250 MiB (distributed.py:1020, :1066): one flat tensor of at most that size
  at a time, freed before training, whose block the caching allocator keeps (``broadcast_cache_bytes``); later
  allocations reuse it, so it bounds the reserve from below rather than adding to the peak.
"""

from __future__ import annotations

from finetune_doctor.dtypes import dtype_bytes
from finetune_doctor.run import Run

FIRST_BUCKET_BYTES = float(1 << 20)          # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_CAP_MB = 25.0                         # accelerate DistributedDataParallelKwargs default
BROADCAST_BUCKET_BYTES = 250.0 * (1 << 20)   # DistributedDataParallel.broadcast_bucket_size
GRADIENT_AS_BUCKET_VIEW = False              # HF Trainer never sets it (module docstring)


def is_ddp(run: Run) -> bool:
    """More than one rank, without DeepSpeed, FSDP or Megatron: the HF Trainer wraps the model in DDP."""
    return run.world_size > 1 and not run.deepspeed and run.engine not in ("fsdp", "megatron")


def reducer_bucket_bytes(run: Run, trainable: float, bucket_view: bool = GRADIENT_AS_BUCKET_VIEW) -> float:
    """Bytes of the Reducer's bucket tensors on one rank for `trainable` parameters (elements): one copy of
    every trainable gradient in its dtype, or nothing extra with ``gradient_as_bucket_view``."""
    if not is_ddp(run) or bucket_view:
        return 0.0
    return trainable * dtype_bytes(run.trainable_dtype)


def bucket_count(run: Run, trainable: float, cap_mb: float = BUCKET_CAP_MB) -> int:
    """How many buckets the Reducer builds: a 1 MiB first bucket, then ``cap_mb`` ones (a bound: buckets close
    at parameter boundaries, so a real count can be one or two higher)."""
    if not is_ddp(run) or trainable <= 0:
        return 0
    total = trainable * dtype_bytes(run.trainable_dtype)
    if total <= FIRST_BUCKET_BYTES:
        return 1
    cap = cap_mb * (1 << 20)
    return 1 + int(-(-(total - FIRST_BUCKET_BYTES) // cap))


def broadcast_cache_bytes(run: Run, model_bytes: float) -> float:
    """The largest block the wrap-time broadcast leaves in the allocator's cache (bytes): one coalesced
    bucket of at most 250 MiB of the model's states."""
    if not is_ddp(run):
        return 0.0
    return min(BROADCAST_BUCKET_BYTES, model_bytes)
