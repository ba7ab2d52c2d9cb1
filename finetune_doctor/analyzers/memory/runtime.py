"""The runtime outside the tensors: CUDA context, cuBLAS workspaces, NCCL communicators (reference/memory/REPORT.md §7);
on an Ascend NPU the HCCL communicators' buffers instead of NCCL's (npu.py)."""

from __future__ import annotations

from finetune_doctor.analyzers.memory.constants import (
    CUBLAS_WORKSPACE_MIB, CUDA_CONTEXT_GIB, CUDA_CONTEXT_GIB_HOPPER, MIB, NCCL_2_RANKS_GIB, NCCL_MANY_RANKS_GIB)
from finetune_doctor.analyzers.memory.npu import hccl_bytes, is_npu
from finetune_doctor.run import Run
from finetune_doctor.types import GIB, Hardware


def nccl_communicators(run: Run) -> int:
    """NCCL communicators over all ranks that one rank of `run` creates and uses in a training step: 0 on one
    rank; the default (world) group's; with DeepSpeed also its clone of the world group.

    Why two under DeepSpeed (read in DeepSpeed 0.19.8, the version docs/ARCHITECTURE.md "Sources" names): without a
    model-parallel unit the engine's data-parallel groups are ``_clone_world_group()``, a ``dist.new_group`` over
    every rank (``utils/groups.py:723-735``, returned by ``_get_data_parallel_group`` :767-780; the engine keeps it
    as ``data_parallel_group``/``seq_data_parallel_group``, ``runtime/engine.py:2162-2164``), and the ZeRO
    optimizers reduce their gradients over it (``dp_process_group=self.seq_data_parallel_group``, engine.py:2626,
    :2683, :2768). The default group has its communicator too: LLaMA-Factory's dataset step runs under
    ``training_args.main_process_first`` (data/loader.py:302, :313 at the oracle snapshot), whose ``dist.barrier()``
    takes the default group (transformers 5.6.0 training_args.py:2094, :2103); ZeRO-3's parameter all-gather also
    runs on it: ``zero.Init`` without a ``data_parallel_group`` (as transformers enters it) partitions over
    ``dist.get_world_group()`` (``runtime/zero/partition_parameters.py:1093-1096``). A second communicator has
    buffers of its own: "More communicators = more memory used, except if communicators are created with
    ncclCommSplit and the flag to share resources is set" (NCCL's maintainer,
    https://github.com/NVIDIA/nccl/issues/864#issuecomment-1573800780, quoted in NVIDIA/nccl#986). DeepSpeed asks
    for no shared resources (a plain ``new_group``), and the clone spans the same ranks over the same links, so it
    is taken at what the world communicator takes (`NCCL_2_RANKS_GIB` / `NCCL_MANY_RANKS_GIB`, measured per
    communicator in NVIDIA/nccl#964); it was 0.1 GiB before, an assumption with no source. HCCL's count on an Ascend
    NPU is this one (`npu.hccl_communicators`)."""
    if run.world_size <= 1:
        return 0
    return 2 if run.deepspeed else 1


def runtime_bytes(run: Run, hw: Hardware | None) -> float:
    """CUDA context + cuBLAS/cuBLASLt workspaces + NCCL communicator buffers (reference/memory/REPORT.md §7), bytes:
    one communicator's buffers per `nccl_communicators` (0.51 GiB over 2 ranks, 0.64 GiB over more, nccl#964)."""
    hopper = bool(hw and hw.compute_capability and hw.compute_capability[0] >= 9)
    b = (CUDA_CONTEXT_GIB_HOPPER if hopper else CUDA_CONTEXT_GIB) * GIB \
        + (CUBLAS_WORKSPACE_MIB["hopper" if hopper else "other"] + 1.0) * MIB
    if is_npu(hw):
        # HCCL instead of NCCL: 2 x HCCL_BUFFSIZE per communicator (npu.py)
        return b + hccl_bytes(run)
    per = (NCCL_2_RANKS_GIB if run.world_size == 2 else NCCL_MANY_RANKS_GIB) * GIB
    return b + nccl_communicators(run) * per
