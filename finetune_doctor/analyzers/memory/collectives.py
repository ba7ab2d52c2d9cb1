"""The process groups a training rank communicates over: one communicator each, whose buffers the runtime term sizes
(runtime.py for NCCL, npu.py for HCCL). The one home of that count."""

from __future__ import annotations

from finetune_doctor.run import Run


def communicators(run: Run) -> int:
    """Communicators (NCCL on CUDA, HCCL on an Ascend NPU) over all ranks that one rank of `run` creates and uses in
    a training step: 0 on one rank; the default (world) group's; with DeepSpeed also its clone of the world group.

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
    buffers of its own: each added communicator costs memory, unless it was split off an existing one with
    ``ncclCommSplit`` and asked to share that one's resources (an NCCL maintainer's answer,
    https://github.com/NVIDIA/nccl/issues/864#issuecomment-1573800780, cited again in NVIDIA/nccl#986). DeepSpeed asks
    for no shared resources (a plain ``new_group``), and the clone spans the same ranks over the same links, so it
    is taken at what the world communicator takes (`NCCL_2_RANKS_GIB` / `NCCL_MANY_RANKS_GIB`, measured per
    communicator in NVIDIA/nccl#964); it was 0.1 GiB before, an assumption with no source. runtime.py (NCCL) and
    npu.py (HCCL) both count these."""
    if run.world_size <= 1:
        return 0
    return 2 if run.deepspeed else 1
