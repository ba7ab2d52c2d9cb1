"""The runtime outside the tensors: CUDA context, cuBLAS workspaces, NCCL communicators (reference/memory/REPORT.md §7);
on an Ascend NPU the HCCL communicators' buffers instead of NCCL's (npu.py)."""

from __future__ import annotations

from finetune_doctor.analyzers.memory.collectives import communicators
from finetune_doctor.analyzers.memory.constants import (
    CUBLAS_WORKSPACE_MIB, CUDA_CONTEXT_GIB, CUDA_CONTEXT_GIB_HOPPER, MIB, NCCL_2_RANKS_GIB, NCCL_MANY_RANKS_GIB)
from finetune_doctor.analyzers.memory.npu import hccl_bytes, is_npu
from finetune_doctor.run import Run
from finetune_doctor.types import GIB, Hardware


def runtime_bytes(run: Run, hw: Hardware | None) -> float:
    """CUDA context + cuBLAS/cuBLASLt workspaces + NCCL communicator buffers (reference/memory/REPORT.md §7), bytes:
    one communicator's buffers per process group (collectives.py `communicators`: 0.51 GiB over 2 ranks, 0.64 GiB
    over more, nccl#964)."""
    hopper = bool(hw and hw.compute_capability and hw.compute_capability[0] >= 9)
    b = (CUDA_CONTEXT_GIB_HOPPER if hopper else CUDA_CONTEXT_GIB) * GIB \
        + (CUBLAS_WORKSPACE_MIB["hopper" if hopper else "other"] + 1.0) * MIB
    if is_npu(hw):
        # HCCL instead of NCCL: 2 x HCCL_BUFFSIZE per communicator (npu.py)
        return b + hccl_bytes(run)
    per = (NCCL_2_RANKS_GIB if run.world_size == 2 else NCCL_MANY_RANKS_GIB) * GIB
    return b + communicators(run) * per
