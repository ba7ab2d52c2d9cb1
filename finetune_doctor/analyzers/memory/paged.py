"""bitsandbytes' paged optimizers (``paged_adamw_8bit``, ``paged_adamw_32bit``, ``paged_lion_*``, ...): the
optimizer states that live in CUDA unified memory, which the driver pages out to the host when the card is full.

Read in bitsandbytes at 95f9af30 (bitsandbytes-foundation/bitsandbytes):

* ``bitsandbytes/optim/optimizer.py:374-390`` (``Optimizer8bit.get_state_buffer``): a paged optimizer allocates a
  parameter's state with ``F.get_paged`` when the parameter has at least 1e5 elements, else as an ordinary tensor
  on the parameter's device;
* ``bitsandbytes/functional.py:91-93`` (``get_paged``): the buffer comes from ``lib.cget_managed_ptr``, which is
  ``cudaMallocManaged(&ptr, bytes, cudaMemAttachHost)`` (``csrc/pythonInterface.cpp:559``), wrapped as a host
  tensor: it is outside PyTorch's caching allocator (``max_memory_allocated``/``max_memory_reserved`` do not count
  it) and its pages migrate between host and device on demand;
* ``optimizer.py:333`` (``step``): each parameter's states are prefetched to the device (``prefetch_state``) right
  before its update, one parameter at a time.

So when a paged run is near its card, the pages of the states not being updated are evicted to the host instead of
the run raising an OOM: what the run *needs* on the device holds at most the states of the largest parameter, while
what nvidia-smi shows on a roomy card (``total``) holds them all. Only LF's own training without DeepSpeed or FSDP
builds the optimizer this way (transformers ``Trainer.create_optimizer`` with ``optim: paged_*``); under DeepSpeed
the optimizer is DeepSpeed's. LoRA-type runs are left out: most adapter matrices are under 1e5 elements and stay
ordinary tensors, and their states are small.
"""

from __future__ import annotations

from finetune_doctor.run import Run

def is_paged(run: Run) -> bool:
    """Whether `run`'s optimizer keeps its states in unified memory (transformers' ``paged_*`` optim names, which
    select bitsandbytes' paged optimizers), as LF builds it without DeepSpeed or FSDP; not when LF builds an
    optimizer of its own (BAdam, GaLore, APOLLO, Muon: optstates.py), which `optim` does not choose."""
    own = any(getattr(run, k, False) for k in ("use_badam", "use_galore", "use_apollo", "use_muon"))
    return str(getattr(run, "optim", "")).startswith("paged_") and run.engine in ("single", "ddp") \
        and not run.deepspeed and not own


def evictable_state_bytes(run: Run, states: float, trainable: float) -> float:
    """Bytes of the optimizer states (`states` bytes over `trainable` elements) that the driver can page out when
    the card is full: all but the largest parameter's, whose states are on the device during its update, for a
    full or freeze run with a paged optimizer (module docstring); 0 otherwise. The largest parameter is the
    embedding or the largest linear of any layer kind (an untied output layer is as large as the embedding)."""
    if not is_paged(run) or run.finetuning_type not in ("full", "freeze") or states <= 0 or trainable <= 0:
        return 0.0
    a = run.arch
    largest = max([a.embedding_params()] + [lin.params // max(lin.count, 1) for kind, _n in a.layer_groups()
                                          for lin in a.kind_linears(kind)])
    return states * max(1.0 - largest / trainable, 0.0)
