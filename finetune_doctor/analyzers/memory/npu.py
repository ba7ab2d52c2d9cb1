"""Ascend NPUs as a device family of their own: HCCL's communicator buffers and the allocator settings a
LLaMA-Factory launch leaves torch_npu with.

* **Capacity** is what torch_npu reports (``torch.npu.get_device_properties().total_memory``, the "GiB total
  capacity" of its OOM message): hardware/gpus.json holds it per card (Ascend-910B-64GB: 60.97 GiB, quoted from
  hiyouga/LlamaFactory#5491), so nothing here rescales it.
* **HCCL buffers**: every HCCL communicator takes ``2 × HCCL_BUFFSIZE`` of device memory for its send and receive
  buffers, outside the caching allocator and not reusable by it; ``HCCL_BUFFSIZE`` defaults to 200 (MB)
  (CANN 8.0/8.5 environment-variable reference, "HCCL_BUFFSIZE": https://www.hiascend.com/document/detail/en/
  canncommercial/850/commlib/hcclug/hcclug_000076.html). A run has the default process group's communicator and,
  under DeepSpeed, the clone of the world group DeepSpeed makes for its data-parallel group (DeepSpeed 0.19.8
  ``utils/groups.py:723-735`` ``_clone_world_group``, returned by ``_get_data_parallel_group`` :767-780).
* **Allocator**: torch_npu's caching allocator reads ``PYTORCH_NPU_ALLOC_CONF`` (else ``PYTORCH_ALLOC_CONF``),
  never ``PYTORCH_CUDA_ALLOC_CONF`` (Ascend/pytorch ``torch_npu/csrc/core/npu/NPUAllocatorConfig.cpp``
  ``NPUAllocatorConfig::instance``, commit 00ebc60). ``llamafactory-cli`` exports only
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` for its torchrun launch (LF launcher.py:80-83), so on an NPU
  the segments are not expandable unless the user sets the NPU variable: the reserve takes the allocator-default
  column (analyzers/memory/reserve.py). Its block sizes are CUDA's (``NPUCachingAllocator.cpp`` at commit 0045d0d:
  ``kMinBlockSize`` 512 B, ``kSmallBuffer`` 2 MiB, ``kLargeBuffer`` 20 MiB, ``kMinLargeAlloc`` 10 MiB,
  ``kRoundLarge`` 2 MiB; large allocations also aligned to ``kAlignRoundLarge`` 16 KiB), so the replay-derived
  shares of the CUDA allocator carry over; 1 GiB segments appear only with ``page_size:1g`` in that variable.
  So does the reserve a run *needs* (analyzers/memory/reserve.py, 'Shown and needed'): before it reports an
  out-of-memory error torch_npu's allocator, like CUDA's, frees every cached block that is not split
  (``release_cached_blocks`` → ``release_blocks`` over its large and small pools, unmapping the free pages of
  expandable segments) and retries.

Not derived (no source found that states it): the CANN runtime context and operator workspaces
(``NPUWorkspaceAllocator``). The CUDA context constant stands in for them, an assumption `runtime_bytes` says in
its notes.
"""

from __future__ import annotations

from finetune_doctor.analyzers.memory.collectives import communicators
from finetune_doctor.hardware.catalog import vendor_of
from finetune_doctor.run import Run
from finetune_doctor.types import Hardware

MB = float(1 << 20)
HCCL_BUFFSIZE_MB = 200.0     # CANN default (module docstring)


def is_npu(hw: Hardware | None) -> bool:
    """Whether `hw` is an Ascend NPU (the catalog's vendor ``huawei``)."""
    return bool(hw is not None and hw.gpu and vendor_of(hw.gpu) == "huawei")


def hccl_communicators(run: Run) -> int:
    """HCCL communicators one rank joins: the default group, plus DeepSpeed's clone of it; 0 for one rank. The
    process groups are the framework's, not the backend's, so the count is NCCL's (collectives.py `communicators`,
    its one home and its sources)."""
    return communicators(run)


def hccl_bytes(run: Run, buffsize_mb: float = HCCL_BUFFSIZE_MB) -> float:
    """Device bytes of HCCL's buffers on one rank: ``communicators × 2 × HCCL_BUFFSIZE`` MB."""
    return hccl_communicators(run) * 2.0 * buffsize_mb * MB


def expandable_on_npu(env_conf: str | None = None) -> bool:
    """Whether torch_npu's allocator runs with expandable segments: only when ``PYTORCH_NPU_ALLOC_CONF`` (given
    as `env_conf`) says so; LLaMA-Factory's launcher never sets it."""
    return bool(env_conf and "expandable_segments:true" in env_conf.replace(" ", "").lower())
