"""Analytic per-rank GPU memory of a training step in steady state (step >= 2), and host RAM per node.

No torch: every term is a closed-form byte count of the tensors PyTorch, transformers, peft and DeepSpeed keep.
One module per part of the sum, each citing its sources:

==============  ==============================================================================================
weights.py      parameters (quantized as stored), ZeRO-3 partitions and gathers; gradients, fp32 masters,
                optimizer states and the update's temporaries, with and without DeepSpeed
activations.py  saved activations per token and layer (reference/memory/REPORT.md §3, verified to the byte), checkpointing,
                autocast's weight copies
logits.py       lm_head's output and the loss, DPO/KTO reference log-probs, the reward model's value head
buffers.py      DeepSpeed/DDP communication buckets and host RAM per node
runtime.py      CUDA context, cuBLAS workspaces, NCCL communicators
terms.py        `Terms` of one rank: all of the above
moments.py      the moments of a step, the allocator reserve and `estimate`
constants.py    runtime constants, the former flat reserve, the verdict margin
zero3.py        ZeRO-3 persistent and gathered parameters (DeepSpeed's coordinator: reuse distance, prefetch)
qlora.py        bitsandbytes 4-bit: the dequantised weight of the linear being computed; the inputs releases
                before 0.43.2 keep for backward; 8-bit's backward dequantisation and kept inputs
qlora_residual.py  the fp32 residual stream bitsandbytes' linears return after an fp32 norm (upcast_layernorm,
                LayerNorm under autocast)
ddp.py          torch DDP's Reducer buckets as the HF Trainer configures them, the wrap-time broadcast
dataparallel.py one process over several GPUs (torch DataParallel): the logits of the whole batch gathered on GPU 0
npu.py          Ascend NPUs: HCCL communicator buffers, torch_npu's allocator settings
vision.py       Qwen2-VL-family vision tokens per image and the tower's working set
hostsave.py     host RAM when a ZeRO-3 checkpoint's 16-bit weights are consolidated on rank 0
assumed.py      what those terms assumed, as `Assumption` values in the estimate's details
reserve.py      the allocator reserve per shape class: the share a roomy card shows and the share a run needs
paged.py        bitsandbytes' paged optimizers: states in unified memory, shown but paged out near the limit
==============  ==============================================================================================
"""

from __future__ import annotations

from typing import Any

# The package's names, each imported from its module on first use (PEP 562): `doctor lint` imports this package for
# analyzers/memory/params.py, launchenv.py and uncertainty.py and must not pay for the whole memory model (issue #22).
_FROM = {
    "activation_bytes_per_token_layer": "activations",
    **dict.fromkeys(("CUBLAS_WORKSPACE_MIB", "CUDA_CONTEXT_GIB", "CUDA_CONTEXT_GIB_HOPPER", "HOST_PER_PROCESS_GIB",
                     "MARGIN", "MIB", "NCCL_2_RANKS_GIB", "NCCL_MANY_RANKS_GIB", "RESERVE_DEFAULT",
                     "RESERVE_EXPANDABLE"), "constants"),
    "estimate": "moments",
    "runtime_bytes": "runtime",
    "Terms": "terms", "compute_terms": "terms",
    "optimizer_state_bytes": "weights", "weight_bytes_per_param": "weights",
}

__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    mod = _FROM.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
