"""Constants of the analytic memory model that are not byte counts of tensors: the CUDA runtime, NCCL, the
allocator reserve the model used before the replay-derived table, the verdict margin and host RAM per process."""

from __future__ import annotations

MIB = float(1 << 20)

# Runtime constants (reference/memory/REPORT.md §7). CUDA context with lazy module loading on a current driver: 0.3-0.9 GB; we take
# 0.5 GiB. NCCL per communicator: 544 MB for 2 ranks, 688 MB for more on A100 (nccl#964). DeepSpeed's clone of the
# world group is a second communicator of the same size (collectives.py `communicators`).
CUDA_CONTEXT_GIB = 0.5
# Hopper, measured: device usage minus max_memory_reserved was 0.749 GiB in 13 of 14 training runs on an H200
# (CUDA 13.0, torch 2.11, driver 580; benchmarks/results/gpu_measure.md). The 33 MiB of cuBLAS workspace added
# below are inside that figure on a real run, so the context itself is taken as 0.72 GiB.
CUDA_CONTEXT_GIB_HOPPER = 0.72
NCCL_2_RANKS_GIB = 0.51
NCCL_MANY_RANKS_GIB = 0.64
CUBLAS_WORKSPACE_MIB = {"hopper": 32.0, "other": 8.0}
# Allocator reserve = reserved - allocated at the peak. PyTorch's caching allocator rounds large blocks to 2 MiB and
# keeps freed blocks cached; measured gaps: Answer.AI LoRA 8.28 vs 10.24 GiB, PEFT method comparison 32.94 (fake
# tensor peak) vs 34.68 GiB reserved (reference/memory/REPORT.md §5, §7). Fitted in benchmarks/memory_accuracy.py on the 72
# single-process published rows (results/memory_accuracy.md): 8 % leaves no row off by more than 25 % at a 7.5 %
# median error in that fit; 10 % lowers the median to 7.3 % but puts 2 rows over 25 %. With expandable_segments
# (llamafactory-cli exports it for multi-GPU torchrun launches, launcher.py:79-83) segments grow in place instead
# of splitting, and we take half of that.
# These flat values are the reserve the estimate used before the replay-derived table (analyzers/memory/reserve.py); they
# stay for the benchmarks that compare against them.
RESERVE_EXPANDABLE = 0.05
RESERVE_DEFAULT = 0.08
# A verdict or a remedy must leave this share of the card free: the estimator's error against published
# measurements is ~5-10 % (benchmarks/results/memory_accuracy.md), so a fit closer than this is inside the error
# (rule predicted-tight-fit) and a fix that lands just under the capacity is no fix (engine/planners.py).
MARGIN = 0.05
# Host RAM per training process for the Python/torch/CUDA runtime: the resident CUDA and torch libraries of an idle
# process. An assumption (typical, not measured here: no GPU machine was available); offload terms come on top.
HOST_PER_PROCESS_GIB = 3.0
