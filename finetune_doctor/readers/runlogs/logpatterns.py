"""Every message pattern the text-log reader matches, each with the upstream line that prints it.

Versions covered: torch 2.3-2.14 (and the older CUDA OOM layouts), NCCL 2.18-2.28, DeepSpeed 0.14-0.19,
transformers 4.45-5.x, LLaMA-Factory 0.9.x, apex amp. Line numbers are of the named commits or installed wheels:

* torch 2.13.0 wheel (``site-packages/torch``): elastic ``multiprocessing/errors/__init__.py:185-201`` (the
  ChildFailedError block), ``errors/error_handler.py:69-88`` (TORCHELASTIC_ERROR_FILE JSON),
  ``include/c10/util/Exception.h:331-336`` (``AcceleratorError``, the Python ``torch.AcceleratorError`` of torch
  >= 2.8), ``include/ATen/cuda/Exceptions.h:43-69`` (cuDNN / cuBLAS status messages).
* pytorch/pytorch at cf1380dfb6c8 (C++ not shipped in the wheel, cited by function):
  ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`` ``WorkNCCL::checkTimeout`` ("Watchdog caught collective
  operation timeout: <WorkNCCL> ran for N milliseconds before timing out."), ``Watchdog::runLoop`` /
  ``watchdogHandler`` ("Exception (either an error or timeout) detected by watchdog at work: W, last enqueued NCCL
  work: E, last completed NCCL work: C." and, on a timeout, "Timeout at NCCL work: W, last enqueued ...";
  "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels ...";
  "Process group watchdog thread terminated with exception: ..."), ``HeartbeatMonitor`` ("ProcessGroupNCCL's
  watchdog got stuck for N seconds without making progress"); ``torch/csrc/distributed/c10d/TraceUtils.h``
  ``analyzeMissingRanks`` / ``analyzeLaggingRanks`` (the TORCH_NCCL_DESYNC_DEBUG report); ``logPrefix()`` is
  ``[PG n Rank r]`` (2.3-2.5), ``[PG ID n PG GUID g(desc) Rank r]`` (2.6+) and ``[PG n (desc) Rank r]`` in
  between; c10 glog lines start ``[rankN]:[E<M>DD HH:MM:SS.ns ProcessGroupNCCL.cpp:LINE]``.
  ``c10/cuda/CUDAException.cpp`` ``c10_cuda_check_implementation`` ("CUDA error: <cudaGetErrorString>", then
  "CUDA kernel errors might be asynchronously reported ..."); device-side asserts print the kernel's
  ``file:line: kernel: block: [..], thread: [..] Assertion `cond` failed.`` (``aten/src/ATen/native/cuda/
  Indexing.cu`` indexSelect*Index for embeddings, ``Loss.cu`` nll_loss_forward_reduce_cuda_kernel_2d for the loss).
* NVIDIA/nccl at 5067397c (v2.28): ``src/init.cc:695`` ("NCCL version X.Y.Z+cudaN"), ``src/init.cc:3415-3437``
  (``ncclGetErrorString``: "unhandled system error", "remote process exited or there was a network error", ...);
  the same strings since v2.18 (``src/init.cc`` of v2.18.1-1). ``NCCL WARN`` is the WARN level of ``debug.cc``.
* deepspeedai/DeepSpeed at edaa7221 (v0.19.5+): ``runtime/fp16/loss_scaler.py:274-290`` (OVERFLOW! ... reducing
  to / but hysteresis is / Consecutive hysteresis),
  ``runtime/fp16/fused_optimizer.py:171,269,406-419`` and ``unfused_optimizer.py:155,203,281-294`` (the ZeRO-0
  wordings), ``__init__.py:158`` ("DeepSpeed info: version=..."), ``env_report.py:136-148`` (``ds_report``).
* NVIDIA/apex at 007c5947 ``apex/amp/handle.py`` ``scale_loss`` ("Gradient overflow.  Skipping step, loss scaler
  N reducing loss scale to S"); torch_npu's scaler prints "Loss scaler reducing loss scale to S".
* hiyouga/LLaMA-Factory at ff6d4d12 (0.9.6.dev0): ``extras/env.py:38-102`` (``llamafactory-cli env``: "- PyTorch
  version: ..."), ``hparams/parser.py:652-653`` ("Process rank: R, world size: W, device: cuda:G, ..."),
  ``extras/logging.py:39-41`` (running_log.txt lines), ``train/callbacks.py:302-307`` (the webui metric line).
* Linux ``mm/oom_kill.c`` ``__oom_kill_process`` ("Out of memory: Killed process P (comm) total-vm:..."),
  ``dump_header`` ("comm invoked oom-killer: gfp_mask=..."); NVIDIA's kernel module prints
  ``NVRM: Xid (PCI:dddd:bb:dd): N, ...`` (https://docs.nvidia.com/deploy/xid-errors/index.html).

The older message shapes (torch <= 2.2 OOM, NCCL watchdog of torch 1.x-2.2) and the HF / LF metric lines are
documented in reference/deepspeed/log_patterns.md (§2-§8), which these expressions were first checked against.
"""

from __future__ import annotations

import re

# Every word starts with an upper-case letter or punctuation: Python's regex engine tries the branches at each
# byte equal to a first character, so a first character as common as a space or a lower-case letter costs 2-3x the
# whole scan (measured in benchmarks/bench_postmortem_ranks.py); the line parsers still match the full messages.
TRIGGER_WORDS = (
    # CUDA OOM (log_patterns.md §5)
    "CUDA out of memory", "CUDA error: out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED",
    "ErrorMemoryAllocation", "NPU out of memory", "NPU function error", "ERR00100", "Inner error is reported",   # torch_npu's block (npulines.py)
    # Intel GPUs (c10/xpu/XPUCachingAllocator.cpp) and Apple's Metal (OOM_MPS); 'X' is a new first byte, rare in logs
    "XPU out of memory", "MPS backend out of memory",
    # DeepSpeed loss scaling (§2)
    "OVERFLOW!", "[deepspeed] fp16 dynamic", "Overflow detected", "Grad overflow", "Reducing dynamic",
    "Increasing dynamic", "Current loss scale",
    # NCCL (§6)
    "Watchdog caught", "NCCL",
    # process death (§8)
    "Killed", "(exitcode: ", "(pid: ", "DefaultCPUAllocator", "Root Cause", "Failures:", "ChildFailedError", "Signal ", "Detected ",
    "Out Of Memory", "Out of memory: ", "Memory cgroup", "] exits with return code", "Killing subprocess",
    "Main process received",
    # torchelastic's agent stopped by a signal (`ELASTIC_SIGNALLED`): its warning and the SignalException it raises
    "Received ", "SignalException: ",
    # host-RAM kills said by other tools: Ray's memory monitor (`RAY_OOM`) and its worker gone (logfailures.py
    # `RAY_WORKER_GONE`), DeepSpeed's launcher exit code in a pasted sentence ("exits with return code = -9"; 'w' is
    # a rare first byte); PyTorch DataLoader's worker signal handlers (`LOADER_SIGNAL`); DataParallel's exception
    "Task was killed due", "Memory on the node", "with return code = -", "ERROR: Unexpected ", "Worker exit type",
    # a rank's wait on the c10d store timing out (`C10D_SOCKET_TIMEOUT`: a barrier whose other side never came)
    "[c10d] waitForInput",
    # LLaMA-Factory's dataset map bar (data/loader.py `_get_preprocessed_dataset` desc): the phase of a failure
    # that follows it with no traceback (analyzers/postmortem/hostalloc.py); 'R' is already a first byte
    "Running tokenizer on dataset",
    # a host allocation refused in-process by CPython, NumPy or Arrow (`HOST_MEMORY_ERROR`); 'M' is a first byte already
    "MemoryError",
    # stopped from outside (`SLURM_CANCELLED`, `LIGHTNING_SIGTERM`: "Received " is a trigger already) or by a
    # container limit (`K8S_OOMKILLED`); 'C' and 'O' are first bytes already
    "CANCELLED AT", "OOMKilled",
    # DeepSpeed's process-group set-up (`DIST_INIT`): a log that ends on it is a start-up that never went on
    "Initializing TorchBackend",
    # LLaMA-Factory's model/loader.py load_tokenizer: why no processor was loaded (before "Processor was not found")
    "Failed to load processor: ",
    "Segmentation fault", "Bus error", "Illegal instruction", "Fatal Python error", "(core dumped)",
    # a short paste with no exception type or launcher line (`CAUGHT_SIGNAL`, `EXIT_CODE_SIGNAL`, `TYPELESS_EXC`):
    # UCX's signal report, a wrapper's negative exit code ('w' shares "with return code = -"), CPython's keyword
    # error and LLaMA-Factory's unknown template without their "TypeError: " / "ValueError: ", THC's error in the
    # upper case titles use, a device assert whose backticks markdown ate
    "Caught signal ", "with exit code -", "() got an unexpected keyword", "Template ", "CUDA runtime error",
    "Assertion ", "DeepSpeed Z",
    # more typeless messages with one raise site (`TYPELESS_EXC`); first bytes 'A', 'F', 'N', 'w' are triggers' already
    "Attempting to unscale", "FORCE_TORCHRUN=1", "No available memory for the cache", "waiting for clients",
    # pastes the reader took for nothing (round 6): torch's load_state_dict "size mismatch for K: ... torch.Size([",
    # transformers' unknown model type ValueError without its class, a retyped keyword TypeError ("()got"), the CUDA
    # runtime's illegal-address text as a title; 'S', 'T', '(' and 'A' are first bytes already
    "Size([", "Transformers does not recognize", "()got an unexpected keyword", "An illegal memory access",
    # a dataset load the log may end on (`DATA_LOAD`): LLaMA-Factory's and datasets' own lines; 'L' is a first byte
    "Loading dataset ", "Loading cached processed dataset", "Loading prepared dataset",
    # glog's fatal-signal banner (`GLOG_SIGNAL`), printed by C++ libraries that install glog's handler
    "SIGSEGV (@", "SIGBUS (@", "SIGILL (@", "SIGFPE (@", "SIGABRT (@",
    # metrics (§7); "loss=", "loss: ", "Loss: ": other trainers' step lines (`STEP_LINE_*` below). Their lower-case
    # first letter costs the expression scan (no grep, or a file under loggrep.MIN_BYTES) 15-25 %: 0.94-1.06 ->
    # 1.08-1.27 CPU s for a 50 MB rank log with FINETUNE_DOCTOR_NO_GREP=1 (2026-12-07); grep's scan is unchanged
    "'loss': ", "{'eval_", "{'train_runtime'", '"current_steps"', "loss=", "loss: ", "Loss: ",
    # verl's console metrics (`VERL_STEP`), "step:N - actor/pg_loss:... - actor/grad_norm:..."; '/' is a first byte
    "/grad_norm:", "/pg_loss:",
    # see_memory_usage (§3)
    "MA ", "CPU Virtual Memory",
    # warnings, exceptions
    "WARNING|", "ERROR|", "It is strongly", "Traceback (most", "Error: ", "Exception: ",
    # the CUDA samples' CUDA_CHECK_RETURN ("Error <cudaGetErrorString> at line N in file F", bitsandbytes' csrc and
    # many CUDA programs; `CUDA_CHECK_RETURN` below); 'E' is a first byte already
    "Error ",
    # a traceback's frame: a paste cut above the "Traceback" header still shows the frames it kept
    'File "',
    # run facts: HF Trainer banner, LF, DeepSpeed init and config dump (".... " is the dump's dot filler)
    "Total optimization", "Total train batch", "Num Epochs", "Gradient Accumulation", "Instantaneous batch",
    "Number of trainable", "|| all params: ", "Process rank: ", "Config mesh", "DeepSpeed info", "ZeRO stage ",
    ".... ", "- num_params = ", "Running training", "Continuing training", "Training with DataParallel",
    # HF Trainer's evaluation and save markers (the phase a crash happened in); LF's loss plot and the model card after training (logmoments.py)
    "Saving model checkpoint", "Running Evaluation", "Running Prediction", "train metrics *****", "cpu_adam op", "No metric ", "Dropping the following result",
    # the trainer (FACTS "trainer"): Lightning's process-group line; NeMo's "[NeMo I" prefix is on every line of
    # its logs, so a log of >= 4 MiB (grep path) names NeMo only through the other lines
    "GLOBAL_RANK: ",
    # CUDA runtime and library errors (c10_cuda_check_implementation, ATen/cuda/Exceptions.h, device asserts)
    "CUDA error: ", "AcceleratorError", "Assertion `", "CUBLAS_STATUS_", "CUDNN_STATUS_", "CUDA warning: ",
    # ... as other stacks print them (`CUDA_RUNTIME_ERRORS` below): darknet's "CUDA Error", NVIDIA's samples'
    # "CUDA error at FILE:LINE code=N(name)", the driver API's CUresult names (TensorFlow, JAX, CuPy), Caffe's and
    # Caffe2's checks; a runtime name is found by its upper-case tail ("cudaErrorIllegalAddress")
    "CUDA Error", "CUDA error at ", "CUDA_ERROR_", "Check failed: error == cudaSuccess", "] error == cudaSuccess",
    "ErrorIllegalAddress", "ErrorLaunchFailure", "ErrorMisalignedAddress", "ErrorAssert", "ErrorECCUncorrectable",
    "ErrorIllegalInstruction", "ErrorLaunchTimeout", "ErrorHardwareStackError", "ErrorLaunchOutOfResources",
    "ErrorNoKernelImageForDevice",
    # out of memory as XLA (JAX, TF2), TensorFlow's allocator, PaddlePaddle and ROCm torch say it; HIP errors
    "RESOURCE_EXHAUSTED", "OOM when allocating", "Out of memory error on GPU", "HIP out of memory", "HIP error: ",
    # kernel log (dmesg / journalctl -k): Xid (the OOM killer's own line is "Out of memory: Killed process")
    "NVRM: Xid",
    # the desync report of TORCH_NCCL_DESYNC_DEBUG (TraceUtils.h): "ranks [5] are the lagging ...", "[3] joined ..."
    "] are the lagging", "] joined but", "] finished collective #",
    # apex / torch_npu loss scaler
    "Skipping step, loss scaler", "Loss scaler reducing",
    # other trainers' loss scalers, NaN lines and step lines (`OTHER_OVERFLOW`, `NONFINITE_LINES`, `SCALE_REPORT`,
    # `STEP_LINE_LOSS`): fairseq, Megatron/NeMo, Lightning, mmdet, MAE/DeiT-style loops, insightface, DLLogger
    "NOTE: overflow detected", "NOTE: gradient overflow", "AMP: overflow detected", "Minimum loss scale reached",
    "Grad Scale", "NaN in local", "Monitored metric", "NaN!", "Loss ", "DLL 20", "Invalid loss, terminating",
    "The grad norm is ", "Check failed: e == cudaSuccess",
    # versions (llamafactory-cli env: the block is read from its first line on) and the launch command
    "`llamafactory` version", "-cli train ", "/launcher.py ",
)


def trie_regex(words: tuple[str, ...] | list[str]) -> "re.Pattern[bytes]":
    """One bytes regex matching any of `words`, with shared prefixes factored (a ab -> a(?:b)?)."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w.encode("utf-8"):
            node = node.setdefault(ch, {})
        node[None] = {}

    def build(node: dict) -> bytes:
        alts = [re.escape(bytes([ch])) + build(node[ch]) for ch in sorted(k for k in node if k is not None)]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        return b"(?:" + body + b")?" if None in node else body

    return re.compile(build(trie))


TRIGGER = trie_regex(TRIGGER_WORDS)
# tqdm bar of a loop: "|██▌       | 129/882 [40:17<3:41:05, 17.62s/it]"; anchored on the bar's closing "|" (rare in
# other output, so the scan runs at memchr speed); the rate unit is checked after the match
TQDM = re.compile(rb"\| ?(\d+)/(\d+) \[[\d:]+<[\d:?]+,")
TQDM_UNIT = re.compile(rb"\s*(?P<rate>[\d.?]+)\s*(?P<unit>s/it|it/s)\]")
# the two in one match (TQDM's part ends at the first comma after "<", so the split is the same as matching them in
# turn): the line parser's bar search, run at every hit of a long log
TQDM_RATE = re.compile(TQDM.pattern + TQDM_UNIT.pattern)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RANK = re.compile(r"^\[rank(\d+)\]:\s?")
RANK_ANY = re.compile(r"\[rank(\d+)\]:\s?")
SIZE = r"[\d.]+\s*(?:bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)"
UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20,
          "GiB": 1 << 30, "GB": 1 << 30, "TiB": 1 << 40, "TB": 1 << 40}


def size_bytes(text: str | None) -> float | None:
    """``"12.94 GiB"`` -> bytes. PyTorch's ``format_size`` prints binary units (KiB/MiB/GiB); hand-edited
    pastes that say ``GB`` are read as binary too. Returns None for None or unparsable text."""
    if not text:
        return None
    m = re.match(r"\s*([\d.]+)\s*([A-Za-z]+)", text)
    if not m or m.group(2) not in UNITS:
        return None
    try:
        return float(m.group(1)) * UNITS[m.group(2)]
    except ValueError:
        return None


def _g(name: str) -> str:
    return f"(?P<{name}>{SIZE})"


# PyTorch CUDA OOM, torch <= 2.0 (log_patterns.md §5), tolerant to spacing and a "." after the request
OOM_LEGACY = re.compile(
    r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?CUDA out of memory\.\s*Tried to allocate " + _g("requested")
    + r"\.?\s*\(GPU (?P<gpu>\d+);\s*" + _g("total") + r" total capacity;\s*(?:" + _g("allocated")
    + r" already allocated;\s*)?" + _g("free") + r" free;\s*(?:" + _g("allowed") + r" allowed;\s*)?"
    + _g("reserved") + r" (?:reserved in total by PyTorch|cached)")
# torch >= 2.1 (PR pytorch#99699; "capacty" typo in 2.1; private pools clause from 2.4)
OOM_V2 = re.compile(
    r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?CUDA out of memory\.\s*Tried to allocate " + _g("requested")
    + r"\.\s*GPU (?P<gpu>\d+) has a total capac(?:i?)ty of " + _g("total") + r" of which " + _g("free")
    + r" is free\.\s*(?P<procs>(?:(?:Process \d+|Including non-PyTorch memory, this process) has "
    + SIZE + r" memory in use\.\s*)*)(?:" + _g("allowed") + r" allowed;\s*)?Of the allocated memory "
    + _g("allocated") + r" is allocated by PyTorch,\s*(?:with " + _g("private_pools")
    + r" allocated in private pools \(e\.g\., CUDA Graphs\),\s*)?and " + _g("reserved_unallocated")
    + r" is reserved by PyTorch but unallocated")
# torch_npu's caching allocator (Ascend; the CUDA allocator's legacy layout with "NPU n" and a "current active"
# clause): "NPU out of memory. Tried to allocate 260.00 MiB (NPU 0; 28.50 GiB total capacity; 10.24 GiB already
# allocated; 10.24 GiB current active; 149.57 MiB free; 10.28 GiB reserved in total by PyTorch)" (quoted in the
# vllm-ascend and MindIE FAQs; hiyouga/LlamaFactory#5491 "NPU 2; 60.97 GiB total capacity")
OOM_NPU = re.compile(
    r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?(?:[\w.]+:\s*)?NPU out of memory\.\s*Tried to allocate "
    + _g("requested") + r"\.?\s*(?:\(NPU (?P<gpu>\d+);\s*" + _g("total") + r" total capacity;\s*(?:" + _g("allocated")
    + r" already allocated;\s*)?(?:" + _g("active") + r" current active;\s*)?" + _g("free") + r" free;\s*(?:"
    + _g("allowed") + r" allowed;\s*)?" + _g("reserved") + r" reserved in total by PyTorch)?")
# Apple's Metal backend (aten/src/ATen/mps/MPSAllocator.mm ``MPSHeapAllocatorImpl::alloc_buffer_block``): "MPS
# backend out of memory (MPS allocated: 3.11 GB, other allocations: 5.42 GB, max allowed: 9.07 GB). Tried to
# allocate 720.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 ..."; the limit is a share of the
# unified memory the GPU shares with the CPU, so macOS may kill the process (jetsam) before this is raised
OOM_MPS = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?MPS backend out of memory \(MPS allocated: "
                     + _g("allocated") + r"(?:, other allocations: " + _g("other") + r")?(?:, max allowed: "
                     + _g("total") + r")?\)(?:\.\s*Tried to allocate " + _g("requested") + r")?")
OOM_PROC = re.compile(r"(?:Process (?P<pid>\d+)|(?P<self>this process)) has (?P<mem>" + SIZE + r") memory in use")
OOM_PARTIAL = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?CUDA out of memory\.?(?:\s*Tried to allocate "
                          + _g("requested") + r")?")
# each figure of an OOM message on its own, so that a message cut by a paste keeps every figure printed whole
# before the cut (a size needs its unit: "2.1" at the cut is not read as 2.1 bytes). Both layouts above.
OOM_FIGURES = (
    ("gpu_total", re.compile(r"GPU (?P<gpu>\d+) has a total capac(?:i?)ty of " + _g("v") + r"(?= of which)")),
    ("gpu_total", re.compile(r"\(GPU (?P<gpu>\d+);\s*" + _g("v") + r" total capacity;")),
    ("free", re.compile(r"of which " + _g("v") + r" is free")),
    ("free", re.compile(r"total capacity;.*?" + _g("v") + r" free;")),
    ("this_process", re.compile(r"this process has " + _g("v") + r" memory in use")),
    ("allocated", re.compile(r"Of the allocated memory " + _g("v") + r" is allocated by PyTorch")),
    ("allocated", re.compile(_g("v") + r" already allocated;")),
    ("reserved_unallocated", re.compile(r"and " + _g("v") + r" is reserved by PyTorch but unallocated")),
    ("reserved", re.compile(_g("v") + r" reserved in total by PyTorch")),
    ("allowed", re.compile(_g("v") + r" allowed;")),
)
# NCCL's own allocation failure (nccl include/alloc.h: "NCCL WARN Cuda failure 2 'out of memory'") is the same event
# ... and the same exhaustion as other stacks report it: the driver API's CUDA_ERROR_OUT_OF_MEMORY (TensorFlow's
# "failed to allocate 3.77G (4046333952 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory", CuPy, JAX),
# darknet's "CUDA Error: out of memory", Caffe's "Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
# XLA's "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes." (xla/pjrt, JAX and TF2),
# TensorFlow's "ResourceExhaustedError: OOM when allocating tensor with shape[...]" (core/framework/op_kernel.cc),
# torch's driver-API check "CUDA driver error: out of memory" (c10/cuda/driver_api.h), MXNet's "cudaMalloc retry
# failed: out of memory" (src/storage/pooled_storage_manager.h) and PaddlePaddle's "Out of memory error on GPU 0.
# Cannot allocate ..." (paddle/fluid/memory/allocation)
OOM_RUNTIME = re.compile(r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|"
                         r"Cuda failure (?:\d+ )?'out of memory'|CUDA_ERROR_OUT_OF_MEMORY|(?i:CUDA (?:driver )?error)\W[^\n]*?out of memory|"
                         r"error == cudaSuccess[^\n]*?out of memory|RESOURCE_EXHAUSTED: Out of memory|"
                         r"OOM when allocating tensor|cudaMalloc[\w ]* failed: out of memory|"
                         r"Out of memory error on GPU \d+")

# DeepSpeed fp16 loss scaler (log_patterns.md §2)
DS_OVERFLOW = re.compile(
    r"\[(?:deepspeed|deepscale)\] (?:fp16 dynamic loss scale overflow!|OVERFLOW!) (?:Rank (?P<rank>\d+) )?"
    r"Skipping step\.(?: Attempted loss scale: (?P<attempted>[\d.]+), (?:reducing to (?P<new>[\d.]+)"
    r"|but hysteresis is (?P<h>\d+)\. Reducing hysteresis to (?P<h2>\d+)))?")
DS_OVERFLOW_DETECTED = re.compile(r"Overflow detected\. Skipping step\. Attempted loss scale: (?P<attempted>[\d.]+),"
                                   r" reducing to (?P<new>[\d.]+)")
DS_SCALE_CHANGE = re.compile(r"(?P<dir>Reducing|Increasing) dynamic loss scale from (?P<old>[\d.]+) to (?P<new>[\d.]+)")
# apex amp (handle.py scale_loss) and torch_npu: "Gradient overflow.  Skipping step, loss scaler 0 reducing loss
# scale to 32768.0" / "Loss scaler reducing loss scale to 5120.0"
APEX_OVERFLOW = re.compile(r"(?i:loss scaler) (?:(?P<idx>\d+) )?reducing loss scale to (?P<new>[\d.]+(?:e[-+]?\d+)?)")
# fairseq (trainer.py "NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0", older
# fp16_optimizer.py "NOTE: overflow detected, setting loss scale to: 64.0", amp_optimizer.py "AMP: overflow
# detected, setting scale to: 64.0") and Megatron-LM's "WARNING: Overflow detected, setting loss scale to 32768.0";
# these scalers halve the scale at an overflow (fairseq scale_factor 2, Megatron backoff_factor 0.5)
OTHER_OVERFLOW = re.compile(r"(?i:overflow detected), (?:ignoring gradient, )?setting (?:loss )?scale to:? "
                            r"(?P<new>[\d.]+(?:e[-+]?\d+)?)")
# fairseq's abort when the scale reaches --min-loss-scale (fairseq/optim/dynamic_loss_scaler.py: "Minimum loss
# scale reached (0.0001). Your loss is probably exploding. ...", raised as FloatingPointError)
OTHER_MIN_SCALE = re.compile(r"Minimum loss scale reached \((?P<min>[\d.e-]+)\)")
DS_GRAD_OVERFLOW_ITER = re.compile(r"Grad overflow on iteration:? (?P<it>\d+)")
DS_MIN_SCALE = re.compile(r"Current loss scale already at minimum - cannot decrease scale anymore")

# NCCL watchdog (ProcessGroupNCCL.cpp, see the module docstring); a pasted line may be cut anywhere after
# "Watchdog caught collective operati". The WorkNCCL repr: 1.10-1.13 SeqNum, OpType, Timeout(ms); 2.0+ adds
# NumelIn/NumelOut; some builds print TensorShape.
NCCL_TIMEOUT = re.compile(
    r"(?:\[Rank (?P<rank>\d+)\] )?Watchdog caught collective operati(?:on timeout: WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?"
    r"(?:OpType=(?P<op>\w+))?(?:, TensorShape=\[[^\]]*\])?(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r"(?:, Timeout\(ms\)=(?P<tmo>\d+))?\)?(?: ran for (?P<ran>\d+) milliseconds)?)?")
# logPrefix() of every generation: [PG 1 Rank 4], [PG 0 (default_pg) Rank 1], [PG ID 2 PG GUID 3(desc) Rank 3]
_PG = r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\]\s]+?))?(?: ?\((?P<desc>[^)\]]*)\))? Rank (?P<rank>\d+)\] "
# "Timeout at NCCL work: W" alone is what a paste cut at the line end leaves (LlamaFactory#7396)
NCCL_LAST = re.compile(
    _PG + r"(?P<what>Exception \(either an error or timeout\) detected by watchdog at work|Timeout at NCCL work): "
    r"(?P<work>-?\d+)(?:, last enqueued NCCL work: (?P<enq>-?\d+)(?:, last completed NCCL work: (?P<done>-?\d+))?)?")
NCCL_HEARTBEAT = re.compile(r"(?:Rank (?P<rank>\d+)\] )?ProcessGroupNCCL's watchdog got stuck for (?P<sec>\d+) seconds")
NCCL_FAILED = re.compile(r"(?:\[Rank (?P<rank>\d+)\] )?Some NCCL operations have failed or timed out")
NCCL_TERMINATED = re.compile(_PG.replace("(?P<", "(?P<t_") + r"(?:Process group|NCCL) watchdog thread terminated "
                             r"with exception: |(?:Process group|NCCL) watchdog thread terminated with exception: ")
# the watchdog's exception stack ("Exception raised from F at .../ProcessGroupNCCL.cpp"; F checkTimeout, ncclCommWatchdog
# before torch 2.6, run since: Watchdog::run rethrows what runLoop raised) is all a paste cut above the message keeps
NCCL_CHECK_FRAME = re.compile(r"c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout|Exception raised from (?:checkTimeout at|(?:ncclCommWatchdog|run) at \S*ProcessGroupNCCL\.cpp)")
# ncclGetErrorString (nccl src/init.cc:3415-3437, the same since v2.18) as torch's "NCCL error in: ..." prints it
NCCL_ERROR = re.compile(r"(?:NCCL error(?: in: [^,]*,)?|ProcessGroupNCCL\.cpp:\d+,|NCCL failure [\w./-]+:\d+ ') ?"
                        r"(?P<desc>unhandled system error|unhandled cuda error|internal "
                        r"error|invalid usage|invalid argument|remote process exited or there was a network error|"
                        r"timeout)?|(?P<name>nccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)"
                        r"Error)|NCCL WARN (?P<warn>.*)")
NCCL_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)")
# NCCL WARN lines that are a failure in themselves (nccl src/misc/socket.cc and its predecessor
# include/socket.h; transport/net_ib.cc; bootstrap.cc): the socket could not connect ("socketStartConnect:
# Connect to ADDR<port> failed : strerror" since 2.12, "Connect to ADDR failed : strerror" before, "Connect to ADDR
# from ADDR failed" in network plugins, "socketPollConnect: Connect to ADDR returned ..."), connect() was refused
# until the retries ran out ("socketStartConnect: exceeded retries (N)" / "exceeded timeouts (N)": the peer never
# listened; the "Call to connect returned ..., retrying" lines before it are INFO), the peer closed it
# ("socketProgress: Connection closed by remote peer HOST", before 2.12 "Net : Connection closed by remote peer"),
# an InfiniBand work completion with an error ("NET/IB : Got completion from peer ADDR with error N"/"with
# status=N"), no interface to bind ("Bootstrap : no socket interface found", "NET/Socket : No usable listening
# interface found"). NCCL returns ncclSystemError / ncclRemoteError after each, so a paste that holds only the
# WARN line (no torch "NCCL error" line) still shows the error.
NCCL_WARN_FAILURE = re.compile(
    r"Connect to (?P<addr>\S+?)(?:<\d+>)? (?:from \S+ )?(?:failed : |returned )(?P<err>[^\n]+)|socketStartConnect: "
    r"exceeded (?P<err2>retries|timeouts) \((?P<n>\d+)\)|(?P<closed>Connection closed by remote peer)(?: (?P<peer>\S+))?"
    r"|NET/IB : Got completion from peer (?P<ibpeer>\S+) with (?:error |status=)(?P<ib>\d+)|(?P<noif>no socket "
    r"interface found|No usable listening interface found)"
    # the shared-memory transport (nccl include/shm.h before 2.12, src/misc/shmutils.cc since): the segment in
    # /dev/shm could not be created or sized ("Error while creating shared memory segment NAME (size N)", after
    # "Call to posix_fallocate failed : <strerror>"); NCCL then returns ncclSystemError
    r"|(?P<shm>Error while creating shared memory segment (?P<seg>\S+)(?: \(size (?P<shmsize>\d+)\))?"
    r"|Call to posix_fallocate failed ?: ?(?P<shmerr>[^\n]+))")
# TORCH_NCCL_DESYNC_DEBUG report (TraceUtils.h analyzeMissingRanks / analyzeLaggingRanks)
DESYNC_MISSING = re.compile(r"ranks \[(?P<ranks>[\d, ]*)\] are the lagging ranks that caused this timeout")
DESYNC_STARTED = re.compile(r"\[(?P<ranks>[\d, ]*)\] joined but didn't finish collective #(?P<seq>\d+)")
DESYNC_ENDED = re.compile(r"\[(?P<ranks>[\d, ]*)\] finished collective #(?P<seq>\d+), but didn't join collective")

# process death (log_patterns.md §8)
KERNEL_OOM = re.compile(r"(?P<cg>Memory cgroup )?[Oo]ut of memory: Killed process (?P<pid>\d+) \((?P<comm>[^)]+)\)"
                         r"(?: total-vm:\d+kB, anon-rss:(?P<rss>\d+)kB)?")
SHELL_KILLED = re.compile(r"line \d+:\s+(?P<pid>\d+) Killed\s+(?P<cmd>.+)$|^\s*Killed\s*$")
# bash's report of a child a signal ended (bash's siglist: "Segmentation fault", "Bus error", "Aborted",
# "Illegal instruction", then " (core dumped)" when a core was written), and CPython's faulthandler banner
SHELL_SIGNALED = re.compile(r"line \d+:\s+(?P<pid>\d+) (?P<what>Segmentation fault|Bus error|Aborted|Illegal instruction)"
                            r"(?: +\(core dumped\))?(?:\s+(?P<cmd>.+))?$"
                            r"|^\s*(?P<bare>Segmentation fault|Bus error|Illegal instruction)(?: \(core dumped\))?\s*$"
                            r"|^Fatal Python error: (?P<py>Segmentation fault|Bus error|Aborted|Illegal instruction)")
SHELL_SIGNALS = {"Segmentation fault": ("SIGSEGV", 139), "Bus error": ("SIGBUS", 135), "Aborted": ("SIGABRT", 134),
                 "Illegal instruction": ("SIGILL", 132)}
SLURM_OOM = re.compile(r"Detected (?P<n>\d+) oom[-_]kill event|task \d+: Out Of Memory")
TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\)")
SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")
LAUNCHER_EXIT = re.compile(r"\[launch\.py:\d+:sigkill_handler\] .*exits with return code = (?P<rc>-?\d+)")
# the child's command that line prints (deepspeed/launcher/launch.py builds it with "--local_rank={local_rank}")
LAUNCHER_LOCAL_RANK = re.compile(r"'--local[_-]rank=(\d+)'")
# ... the same words without the launcher's log prefix, as a user quotes them in a sentence ("... training glm4
# ended with exits with return code = -9."): only a negative code (a signal) is read, since a bare positive code in
# prose is no evidence of how the child died
LAUNCHER_EXIT_QUOTED = re.compile(r"exits with return code = (?P<rc>-\d+)")
# Ray's memory monitor (ray-project/ray src/ray/raylet/node_manager.cc, the OOM kill message, and
# python/ray/exceptions.py OutOfMemoryError; doc/source/ray-core/scheduling/ray-oom-prevention.rst): the raylet
# kills a worker once the node's memory use passes RAY_memory_usage_threshold (default 0.95): "Task was killed due
# to the node running low on memory.", "Memory on the node (IP: A, ID: N) where the task (task ID: T, name=N,
# pid=P, memory used=XGB) was running was U / T (F), which exceeds the memory usage threshold of H."
RAY_OOM = re.compile(r"Task was killed due to the node running low on memory|Memory on the node \(IP: (?P<ip>[^,)]+)"
                     r"[^\n]*?where the (?:task|actor)(?:[^\n]*?pid=(?P<pid>\d+))?(?:[^\n]*?was running was "
                     r"(?P<used>[\d.]+\s*[KMGT]?B) / (?P<total>[\d.]+\s*[KMGT]?B) \((?P<frac>[\d.]+)\))?")
# PyTorch DataLoader's worker signal handlers (torch/csrc/DataLoader.cpp, SIGNAL_HANDLER for SIGBUS, SIGSEGV, SIGFPE):
# each prints "ERROR: Unexpected <what> encountered in worker." to stderr and re-raises the signal; the bus-error
# text adds that it may be insufficient shared memory (/dev/shm)
LOADER_SIGNAL = re.compile(r"ERROR: Unexpected (?P<what>segmentation fault|bus error|floating-point exception) "
                           r"encountered in worker")
LOADER_SIGNALS = {"segmentation fault": ("SIGSEGV", -11), "bus error": ("SIGBUS", -7),
                  "floating-point exception": ("SIGFPE", -8)}
# ... and the main process's report of a worker that died of a signal (DataLoader.cpp ``_error_if_any_worker_fails``:
# "DataLoader worker (pid N) is killed by signal: <strsignal>. ", the SIGBUS one adding the shared-memory hint),
# raised as RuntimeError: strsignal's texts, so "Killed" is SIGKILL (the host's OOM killer, most often)
LOADER_KILLED = re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<what>[A-Za-z ]+?)\.")
# UCX's fatal-signal handler (openucx/ucx src/ucs/debug/debug.c, the error-signal handler): "Caught signal N
# (<strsignal>: <si_code cause>)" then "==== backtrace (tid: T) ====" and its frames; UCX is loaded by NCCL/MPI
# builds and by torch wheels that link it, so a training process that faults in native code prints it
CAUGHT_SIGNAL = re.compile(r"Caught signal (?P<num>\d+) \((?P<what>[A-Z][a-z]+(?: [a-z]+)*)")
# glog's failure signal handler (google/glog src/signalhandler.cc DumpSignalInfo): "*** SIGSEGV (@0x0) received by
# PID P (TID 0x...) from PID Q; stack trace: ***", then "@ 0xADDR symbol" frames (after "*** Aborted at T ...")
GLOG_SIGNAL = re.compile(r"\*\*\* (?P<name>SIG[A-Z]+) \(@0x[0-9a-fA-F]+\) received by PID (?P<pid>\d+)")
# a wrapper's report of its child's return code: CPython's subprocess returncode is -N for a child ended by
# signal N (Lib/subprocess.py, Popen.returncode), so "exit code -9" is SIGKILL, -11 SIGSEGV
EXIT_CODE_SIGNAL = re.compile(r"with exit code (?P<code>-\d+)\b")
# CPython's CalledProcessError.__str__ (Lib/subprocess.py): "Command '...' died with <Signals.SIGKILL: 9>." for a
# child a signal ended (accelerate's simple_launcher and other wrappers raise it with the child's returncode)
DIED_WITH = re.compile(r"died with <Signals\.(?P<sig>SIG[A-Z0-9]+): (?P<num>\d+)>")
# exception messages that name their class without "Cls: " in front (a title or a sentence that quotes only the
# message): CPython's keyword check (Python/ceval.c, Objects/call.c: "F() got an unexpected keyword argument 'k'")
# and LLaMA-Factory's template lookup (data/template.py get_template_and_fix_tokenizer, ValueError "Template T does
# not exist.")
TYPELESS_EXC = (
    # (retyped by hand as users do: "f()got an unexpected keyword argument'k'", spaces lost)
    (re.compile(r"(?P<msg>[\w.]+\(\) ?got an unexpected keyword argument ?'\w+')"), "TypeError"),
    # torch/nn/modules/module.py load_state_dict (2.13.0 wheel :2443-2444): one "size mismatch for K: copying a
    # param with shape S from checkpoint, the shape in current model is S'." per tensor under the RuntimeError's
    # "Error(s) in loading state_dict for C:" header, which a paste of the list alone does not hold
    (re.compile(r"(?P<msg>size mismatch for [\w.]+: copying a param with shape torch\.Size\(\[[\d, ]*\]\) from "
                r"checkpoint.*)"), "RuntimeError"),
    # transformers models/auto/configuration_auto.py AutoConfig.from_pretrained (5.6.0 wheel :406-411): the
    # ValueError for a config.json whose model_type the release does not register, often pasted as a title
    (re.compile(r"(?P<msg>(?:The checkpoint you are trying to load )?has model type `[\w-]+` but Transformers does "
                r"not recognize this architecture.*)"), "ValueError"),
    (re.compile(r"(?P<msg>Template \S+ does not exist\.)"), "ValueError"),
    # transformers modeling_utils.py from_pretrained under ZeRO-3 ("DeepSpeed Zero-3 is not compatible with
    # `low_cpu_mem_usage=True` or with passing a `device_map`.", quotes as pasted) and LLaMA-Factory
    # model_utils/quantization.py:105 (snapshot) "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models."
    (re.compile(r"(?P<msg>DeepSpeed Z\w+-3 is not compatible with .low_cpu_mem_usage=True. or with passing a "
                r".device_map.\.?|DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models\.)"),
     "ValueError"),
    # the messages of this session's launch/precision causes (analyzers/postmortem/launchcause.py), each with one
    # raise site: torch/amp/grad_scaler.py:275 (torch 2.13), LLaMA-Factory hparams/parser.py:472 (snapshot),
    # vLLM's KV-cache check, c10d TCPStore's rendezvous wait (the format string in torch 2.13's libtorch_cpu)
    (re.compile(r"(?P<msg>Attempting to unscale FP16 gradients\.?)"), "ValueError"),
    (re.compile(r"(?P<msg>Please use .FORCE_TORCHRUN=1. to launch DeepSpeed training\.?)"), "ValueError"),
    (re.compile(r"(?P<msg>No available memory for the cache blocks\..*)"), "ValueError"),
    (re.compile(r"(?P<msg>Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined\.?)"),
     "torch.distributed.DistStoreError"),
)
TYPELESS_TRIGGERS = ("() got an unexpected keyword", "()got an unexpected keyword", "size mismatch for ",
                     "Transformers does not recognize", "Template ", "DeepSpeed Z", "Attempting to unscale",
                     "FORCE_TORCHRUN=1", "No available memory for the cache", "waiting for clients")
"""The words that send a line to the typeless-exception check (logparse.py); each is in TRIGGER_WORDS."""
STRSIGNAL = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Killed": "SIGKILL", "Aborted": "SIGABRT",
             "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL", "Terminated": "SIGTERM"}
# the c10d TCPStore client's socket wait (pytorch torch/csrc/distributed/c10d/socket.cpp ``SocketImpl::waitForInput``:
# "[c10d] waitForInput: socket SocketImpl(fd=N, addr=A, remote=R) timed out after Nms"): a rank waited on the store
# (a store-based barrier, or the rendezvous) for the whole timeout
C10D_SOCKET_TIMEOUT = re.compile(r"\[c10d\] waitForInput: socket SocketImpl\([^)]*\) timed out after (?P<ms>\d+) ?ms")
# HF datasets' map/filter bar (arrow_dataset.py ``map``: hf_tqdm(unit=" examples", desc=desc or "Map"), "Running
# tokenizer on dataset:  88%|...| 383700/433643 [29:55<03:25, 2432.70 examples/s]"; datasets 1.x counted batches,
# "ba/s" or "s/ba", transformers#17106): the preprocessing the main process runs while the others wait at a barrier
DATASETS_BAR = re.compile(r"(?P<desc>[A-Z][^\r\n|:]{1,80}?):\s+(?P<pct>\d+)%\|[^|\r\n]*\|\s*(?P<done>\d+)/(?P<total>\d+) "
                          r"\[(?P<el>[\d:]+)<[\d:?]+,\s*[\d.?]+ ?(?:examples/s|ba/s|s/ba)\]")
# DataParallel (torch/nn/parallel/parallel_apply.py wraps a replica's exception in torch/_utils.py ExceptionWrapper,
# whose reraise() raises the original type with "Caught <Type> in replica N on device D."): a CUDA OOM in a replica
DP_CAUGHT_OOM = re.compile(r"Caught OutOfMemoryError in replica (?P<replica>\d+) on device (?P<gpu>\d+)")
# DeepSpeed's launcher (deepspeed/launcher/launch.py `sigkill_handler`): when a child exits with a non-zero return
# code, or the launcher itself gets SIGINT/SIGTERM, it logs "Killing subprocess PID" for every child it started,
# then "<cmd> exits with return code = RC" (a child failed) or "Main process received SIGxxx, exiting" (it was
# stopped from outside)
LAUNCHER_KILL = re.compile(r"\[launch\.py:\d+:sigkill_handler\] Killing subprocess (?P<pid>\d+)")
LAUNCHER_SIGNALLED = re.compile(r"\[launch\.py:\d+:sigkill_handler\] Main process received (?P<sig>SIG\w+), exiting")
# torchelastic (torchrun, `FORCE_TORCHRUN=1 llamafactory-cli train`): PContext.start registers a handler for the
# signals of TORCHELASTIC_SIGNALS_TO_HANDLE (default SIGTERM,SIGINT,SIGHUP,SIGQUIT) that raises SignalException
# ("Process PID got signal: SIG", torch/distributed/elastic/multiprocessing/api.py `_terminate_process_handler`);
# the agent logs "Received SIG death signal, shutting down workers" (agent/server/api.py `run`) and stops the
# children. SIG is a signal.Signals printed with %s / f"{}": its number on Python >= 3.11 ("1"), "Signals.SIGHUP"
# before. Either line means the launcher itself was signalled from outside (retyped: "got sigval:1", "signal : 1")
ELASTIC_SIGNALLED = re.compile(r"(?:Received (?:Signals\.)?(?P<sig>SIG[A-Z0-9]+|\d+) death signal, shutting down workers"
                               r"|SignalException: Process (?P<pid>\d+) got sig(?:nal|val) ?: ?(?:Signals\.)?(?P<sig2>SIG[A-Z0-9]+|\d+))")
SIGNAL_NAMES = {"1": "SIGHUP", "2": "SIGINT", "3": "SIGQUIT", "15": "SIGTERM", "10": "SIGUSR1", "12": "SIGUSR2"}
# c10/core/impl/alloc_cpu.cpp ``alloc_cpu``: posix_memalign's failure ("can't allocate memory: ... Error code 12");
# the _MSC_VER branch (Windows, torch 1.x-2.x) "DefaultCPUAllocator: not enough memory: you tried to allocate N
# bytes."; a title keeps the words without the size ("DefaultCPUAllocator: Can't allocate memory when ..."): None
CPU_ALLOC = re.compile(r"DefaultCPUAllocator: (?i:can't allocate memory|not enough memory)(?:: you tried to allocate "
                       r"(?P<bytes>\d+) bytes)?")
# Windows' commit limit (RAM + paging file) reached: Win32 ERROR_COMMITMENT_LIMIT (1455), "OSError: [WinError 1455]
# The paging file is too small for this operation to complete." as CPython raises it: host memory refused in-process
WIN_COMMIT = re.compile(r"\[WinError 1455\] The paging file is too small")
# Slurm's step daemon when it ends a job or step (slurm src/slurmd/slurmstepd/req.c ``_handle_signal_container``:
# error("*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***", entity, node, time), "... DUE TO PREEMPTION ***",
# "... DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***", and without a reason for scancel; entity "JOB N" or
# "STEP N.M"; releases before the node name print "*** JOB N CANCELLED AT T DUE TO TIME LIMIT ***")
SLURM_CANCELLED = re.compile(r"\*\*\* (?P<what>JOB|STEP) (?P<id>[\w.]+)(?: ON (?P<node>\S+))? CANCELLED AT (?P<at>\S+)"
                             r"(?: DUE TO (?P<why>[A-Z][A-Z ]*[A-Z]))?[^*]*\*\*\*")
# Lightning's SIGTERM notifier (lightning/pytorch/trainer/connectors/signal_connector.py ``_sigterm_notifier_fn``:
# log.info(rank_prefixed_message(f"Received SIGTERM: {signum}", local_rank)), "[rank: 0] Received SIGTERM: 15")
LIGHTNING_SIGTERM = re.compile(r"(?:\[rank: (?P<rank>\d+)\] )?Received SIGTERM: (?P<num>\d+)\s*$")
# Kubernetes' container status as `kubectl describe pod` prints it ("Reason:       OOMKilled", with "Exit Code:
# 137"): the container's memory limit (a cgroup) killed it
K8S_OOMKILLED = re.compile(r"^\s*Reason:\s+OOMKilled\s*$")
# other in-process host allocation failures, each the last line of a Python traceback (the class alone or with its
# message): CPython's bare MemoryError; NumPy's _ArrayMemoryError (numpy/_core/_exceptions.py ``__str__``: "Unable
# to allocate 7.45 GiB for an array with shape (1000000, 2000) and data type float32", numpy._core in 2.x,
# numpy.core in 1.x); Arrow's ArrowMemoryError under HF datasets' tables (pyarrow.lib, arrow/memory_pool.cc: "malloc
# of size N failed"). Not torch's OutOfMemoryError (a device OOM): the class must start the name
HOST_MEMORY_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(?P<cls>_ArrayMemoryError|ArrowMemoryError|MemoryError)"
                               r"(?::\s*(?P<msg>.*?))?\s*$")
NUMPY_ALLOC = re.compile(r"Unable to allocate (?P<num>[\d.]+) (?P<unit>bytes|[KMGTPE]iB) for an array with shape")
ARROW_ALLOC = re.compile(r"malloc of size (?P<bytes>\d+) failed")
CF_RANK = re.compile(r"rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<lr>\d+)\)")
CF_EXIT = re.compile(r"exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)(?:\s*\((?P<sig>SIG\w+)\))?")
CF_HOST = re.compile(r"host\s*:\s*(?P<host>\S+)")
CF_TB = re.compile(r"traceback\s*:\s*(?P<tb>.*)")
CF_ENTRY = re.compile(r"^\[\d+\]:$")

# HF Trainer / LLaMA-Factory metric dicts (log_patterns.md §7): 4.x bare floats and nan, 5.x '.4g' strings
HF_TRAIN_DICT = re.compile(r"\{'loss': '?([^,'}]+)'?, 'grad_norm': '?([^,'}]+)'?, 'learning_rate': '?([^,'}]+)'?, "
                           r"'epoch': '?([^,'}]+)'?\}")
HF_TRAIN_DICT_B = re.compile(HF_TRAIN_DICT.pattern.encode())
# ... alone on its line: at most one byte after it before the line ends (the line parser's test), or the text ends;
# the bulk path of readers/runlogs/logs.py (TextLogParser.train_dict), which hands any line whose four values float() does
# not read to the line parser
HF_TRAIN_DICT_LINE_B = re.compile(HF_TRAIN_DICT_B.pattern.replace(rb"[^,'}]", rb"[^,'}\n\r]")
                                  + rb"[^\n\r]?(?:[\n\r]|\Z)")
# A step line of a trainer that prints neither HF's dict nor LF's JSON: a step key and a loss key on one line, as
# custom loops print them: "step=220  loss=1.43  gnorm=7.7" (paiml/entrenar#274), nanoGPT's "iter 100: loss
# 2.3456" is not matched (no separator after "loss"), Megatron's "iteration  1/ 55000 | ... | lm_loss:
# 2.27E+00 |", torchtune's "Step 1 | loss:1.2", "Global Step: 20 ... Loss: nan". Values: float() or nan/inf.
_NUM = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)|nan|NaN|inf|-inf)"
# (a step printed as a float is read when it is a whole number, NeMo's bar "global_step=129.0"; a rounded one,
# "global_step=3.2e+4", is no step)
STEP_LINE_STEP = re.compile(r"(?i)(?<![\w.])(?:global[ _]step|step|iter(?:ation)?)(?![\w])\s*[=:]?\s*\[?\s*(\d+)"
                            r"(?:\.0+)?(?![\d.eE])")
# the loss key: "loss=", "loss: ", DLLogger's "average_loss : nan" (NVIDIA DeepLearningExamples' dllogger
# StdOutBackend: "DLL <time> - <step> key : value"), or the key and a number apart by spaces only (insightface's
# "Loss nan   LearningRate 0.001", nanoGPT's "iter 100: loss 2.3456"), NeMo's bar "reduced_train_loss=1.820";
# "loss scale: N" is not a loss
STEP_LINE_LOSS = re.compile(r"(?i)(?<![\w.])(?:(?:reduced[ _])?train[ _]|average[ _]|avg[ _])?(?:lm[ _])?loss(?:\s*[=:]\s*|\s+"
                            r"(?=[-+\d.]|nan\b|inf\b))" + _NUM)
# a loss scale a trainer prints among its step values: DLLogger "PARAMETER loss_scale : 2.9e-11", insightface
# arcface_torch "Fp16 Grad Scale: 0" (its fp16 GradScaler's scale, printed "%2.f"), Megatron "loss scale: 32768.0",
# fairseq "loss_scale=32768"
SCALE_REPORT = re.compile(r"(?i)(?<![\w.])(?:fp16[ _])?(?:grad|loss)[ _]scale\s*[=:]\s*" + _NUM)
# a line that says the loss or the gradients went non-finite, without a metric dict: (metric, expression)
NONFINITE_LINES = (
    # MAE / DeiT / BEiT-style loops (engine_pretrain.py / engine.py): print("Loss is {}, stopping training")
    ("loss", re.compile(r"Loss is (?P<v>nan|inf|-inf), stopping training")),
    # Megatron-core (NeMo's GPT training too): param_and_grad_buffer.py "Rank R: found NaN in local grad norm in
    # backward pass before data-parallel communication collective" (newer: "... for bucket #i in backward pass"),
    # and training's "found NaN in local forward loss calculation"
    ("grad_norm", re.compile(r"found NaN in local grad norm")),
    ("loss", re.compile(r"found NaN in local forward loss")),
    # Lightning's EarlyStopping(check_finite=True): "Monitored metric train_loss = nan is not finite. Previous
    # best value was 0.412. Signaling Trainer to stop." (callbacks/early_stopping.py, the tensor may print whole)
    ("monitored", re.compile(r"Monitored metric (?P<name>\S+) = (?:tensor\()?(?P<v>nan|inf|-inf)\b")),
    # mmdet's CheckInvalidLossHook (mmdet/engine/hooks/checkloss_hook.py): "loss become infinite or NaN!"
    ("loss", re.compile(r"loss become infinite or NaN!")),
    # detectron2 (engine/train_loop.py ``_write_metrics``): "FloatingPointError: Loss became infinite or NaN at
    # iteration=1234!" (the step is the line's own)
    ("loss", re.compile(r"Loss became infinite or NaN at iteration=(?P<step>\d+)")),
    # Keras' TerminateOnNaN callback: "Batch 123: Invalid loss, terminating training"
    ("loss", re.compile(r"Batch (?P<batch>\d+): Invalid loss, terminating training")),
    # ESPnet (espnet2/train/trainer.py): "The grad norm is nan. Skipping updating the model."
    ("grad_norm", re.compile(r"The grad norm is (?P<v>nan|inf)\. Skipping updating the model")),
    # torch autograd anomaly mode (torch/csrc/autograd/engine.cpp, validate_outputs / anomaly check):
    # "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."
    ("grad_norm", re.compile(r"Function '\w+' returned (?P<v>nan) values in its \d+\w* output")),
    # torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=True) (torch/nn/utils/clip_grad.py): "The total
    # norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped."
    ("grad_norm", re.compile(r"The total norm of order \S+ for gradients from `parameters` is non-finite")),
)
# the step of a line that names it by epoch and iteration: the MetricLogger of DETR / DeiT / MAE / BLIP-style loops
# (util/misc.py ``log_every``: "Epoch: [8]  [ 200/2293]  eta: ...  loss: 0.2606 (0.2654)", epochs from 0) and
# mmengine's LoggerHook ("Epoch(train)  [1][ 50/7330]  lr: ...  loss: ...", epochs from 1; "Iter(train)
# [ 50/90000]" for iteration-based loops) and mmcv 1.x's TextLoggerHook ("Epoch [1][100/62598]\tlr: ...", epochs
# from 1: mmcv/runner/hooks/logger/text.py prints runner.epoch + 1): the global iteration is (epochs before this
# one) x iterations-per-epoch + iteration; only the MetricLogger's "Epoch: [e]" (a colon) counts from 0
STEP_LINE_EPOCH_ITER = re.compile(r"Epoch(?P<mm>\(train\))?(?P<colon>:)?\s*\[(?P<e>\d+)\]\s*\[\s*(?P<i>\d+)/(?P<n>\d+)\]"
                                  r"|Iter\(train\)\s*\[\s*(?P<it>\d+)/\d+\]")
# verl's console logger (verl/utils/logger/aggregate_logger.py ``concat_dict_to_str``: "step:{step}" then
# "{key}:{value}" per numeric metric, joined by " - "; values by pprint.pformat, so a NaN prints "nan"): the actor's
# grad norm and learning rate are a step's; its losses are policy-gradient terms (signed, noisy: not a curve the
# supervised detectors may judge), kept only when non-finite
VERL_STEP = re.compile(r"(?:^|\s)step:(?P<step>\d+) - ")
VERL_METRIC = re.compile(r"(?:^| - )(?P<k>actor/(?:grad_norm|lr|pg_loss|loss)):(?P<v>[-+\w.]+)")
# Lightning's training bar (lightning/pytorch/callbacks/progress/tqdm_progress.py: desc "Epoch {current_epoch}", the
# logged metrics as tqdm's postfix, "Epoch 2:  31%|███  | 310/1000 [05:12<11:35,  0.99it/s, v_num=12,
# train_loss=1.840]"): the bar counts batches within the epoch, so the step is epoch x batches + batch (an epoch of
# n batches; with gradient accumulation the optimizer steps are fewer, and the placement is in batches)
LIGHTNING_BAR = re.compile(r"Epoch (?P<e>\d+):\s+\d+%\|[^|\r\n]*\|\s*(?P<i>\d+)/(?P<n>\d+) \[[^\]\r\n]*?it/s,"
                           r"[^\]\r\n]*?loss")
# a tqdm bar with a postfix (tqdm's ``set_postfix``: "desc: 12%|█▏  | 120/1000 [01:02<07:40, 1.91it/s, k1=v1,
# k2=v2]", tqdm/std.py ``format_meter`` appends ", " + postfix inside the brackets), as OpenRLHF's and many
# scripts' training loops print their losses: the bar's own count is the step of the values beside it
TQDM_POSTFIX = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+) \[[^\]\r\n]*?,\s*(?P<post>[A-Za-z_][\w/.]*=[^\]\r\n]*)\]")
TQDM_COUNT = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+) \[")
STEP_LINE_GNORM = re.compile(r"(?i)(?<![\w.])(?:gnorm|grad[ _]norm)\s*[=:]\s*" + _NUM)
STEP_LINE_LR = re.compile(r"(?i)(?<![\w.])(?:lr|learning[ _]rate)\s*[=:]\s*" + _NUM)
KV = re.compile(r"'(?P<k>[\w/]+)':\s*(?P<q>'?)(?P<v>[^,'}]*)(?P=q)")
LF_CALLBACK = re.compile(r"callbacks(?:\.py)?(?::\d+)? (?:>>|-) ")
DS_PROGRESS = re.compile(r"\[Rank (?P<rank>\d+)\] step=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=\[(?P<lr>[^\]]*)\]")

# see_memory_usage (log_patterns.md §3)
MEM_MA = re.compile(r"MA (?P<ma>[\d.]+) GB\s+Max_MA (?P<mma>[\d.]+) GB\s+CA (?P<ca>[\d.]+) GB\s+Max_CA (?P<mca>[\d.]+) GB")
MEM_CPU = re.compile(r"CPU Virtual Memory:\s+used = (?P<used>[\d.]+) GB, percent = (?P<pct>[\d.]+)%")
DS_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\] \[[\w.]+:\d+:\w+\] ")

# exceptions and warnings
# an exception line quoted inside a sentence or a title ('Getting "ValueError: Asking to pad ..." while running',
# "训练报错，RuntimeError: ..."): the class starts after a space, a quote, a bracket or CJK/ASCII punctuation
EXC_IN = re.compile(r"(?:(?<=[\s\"'`(（“‘，,:：>])|^)(?P<cls>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)|"
                    r"Exception):\s(?P<msg>\S.*)$")   # (bare Exception: accelerate's FSDP wrap raises it)
QUOTE_CLOSE = {'"': '"', "'": "'", "“": "”", "‘": "’", "`": "`", "(": ")", "（": "）"}
# a traceback's frame line that a paste cut inside its path, before ``File "`` (CPython Lib/traceback.py
# FrameSummary's '  File "{filename}", line {lineno}, in {name}'): "site-packages/transformers/x.py", line 9, in f"
CUT_FRAME = re.compile(r'^\s*(?P<file>[^\s"]+\.py)", line (?P<line>\d+), in (?P<func>[\w<>]+)')
# torchrun's exception class alone on its line (torch/distributed/elastic/multiprocessing/errors/__init__.py
# ``ChildFailedError``): a paste that kept only the wrapper, not the summary's entries nor the child's error
CHILD_FAILED_ALONE = re.compile(r"(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError")
# cudaGetErrorString(cudaErrorIllegalAddress) (CUDA runtime API, cuda_runtime_api.h) said without "CUDA error: "
CUDA_STATUS_ALONE = re.compile(r"(?P<status>[Aa]n illegal memory access was encountered)")
EXC = re.compile(r"^\s*(?P<cls>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)|Exception):\s?(?P<msg>.*)$")
# the line that ends a traceback, whatever the class is called: CPython's TracebackException.format_exception_only
# (Lib/traceback.py, 3.8-3.13) prints "{module}.{qualname}: {str(exc)}" — the module left out only for builtins
# and __main__, ": {msg}" left out when str(exc) is empty — so a class outside builtins is always dotted
# ("zipfile.BadZipFile", "triton.runtime.errors.OutOfResources"; module names lower case or all capitals, "PIL");
# the builtins whose names end in neither Error nor Exception are named. Read only on the line right below a
# traceback's frames (logparse `_tb_exception`).
EXC_ANY = re.compile(r"^(?P<cls>(?:(?:[a-z_][\w]*|[A-Z][A-Z0-9_]*)\.)+[A-Z_]\w*|StopIteration|StopAsyncIteration|"
                     r"SystemExit|GeneratorExit|KeyboardInterrupt|\w*ExceptionGroup)(?::\s?(?P<msg>.*))?$")
# a Python warning as warnings.formatwarning prints it (Lib/warnings.py: "{filename}:{lineno}: {category}:
# {message}"), e.g. torch/utils/checkpoint.py's "None of the inputs have requires_grad=True. Gradients will be None"
PY_WARNING = re.compile(r"(?P<file>[^\s:\"']+\.py):(?P<line>\d+): (?P<cat>[A-Z]\w*Warning): (?P<msg>\S.*)$")
# the same line alone in a short paste where nothing else was found (`logs._exception_alone`): only a module-qualified
# class (lower-case module names, as every non-builtin exception prints) with a message
EXC_ALONE = re.compile(r"^[\s`>*-]*(?P<cls>(?:[a-z_][a-z0-9_]*\.)+[A-Z]\w*): (?P<msg>\S.*?)[\s`]*$")
LF_LOG = re.compile(r"^\[(?P<lvl>WARNING|ERROR)\|(?P<where>[^\]]+)\]\s*(?:[\d-]+ [\d:,]+ )?(?:(?P<logger>[\w.]+):\d+ )?>> (?P<msg>.*)$")
ATTN_WARN = re.compile(r"strongly recommended to train (?P<model>\w+) models with the `?(?P<want>\w+)`? attention "
                        r"implementation instead of `?(?P<have>\w+)`?")

# run facts
FACTS = [   # (fact, a literal every matching line contains, expression, conversion)
    ("total_steps", "Total optimization", re.compile(r"Total optimization steps = (?P<v>[\d,]+)"), int),
    ("num_epochs", "Num Epochs", re.compile(r"Num Epochs = (?P<v>[\d,.]+)"), float),
    ("grad_accum", "Gradient Accumulation", re.compile(r"Gradient Accumulation steps = (?P<v>[\d,]+)"), int),
    ("micro_batch", "Instantaneous", re.compile(r"Instantaneous batch size per device = (?P<v>[\d,]+)"), int),
    ("data_parallel_batch", "with DataParallel", re.compile(r"Training with DataParallel so batch size has been adjusted to: (?P<v>[\d,]+)"), int),
    ("total_batch", "Total train batch", re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = (?P<v>[\d,]+)"), int),
    ("trainable_params", "Number of trainable", re.compile(r"Number of trainable parameters = (?P<v>[\d,]+)"), int),
    ("trainable_params", "trainable params", re.compile(r"trainable params: (?P<v>[\d,]+) \|\|"), int),
    ("all_params", "all params", re.compile(r"all params: (?P<v>[\d,]+)"), int),
    ("world_size", "world", re.compile(r"world[ _]size(?: =|:)\s*(?P<v>\d+)"), int),
    ("world_size", "world_size", re.compile(r"\[config\.py:\d+:print\]\s+world_size \.+ (?P<v>\d+)"), int),
    ("compute_dtype", "compute dtype", re.compile(r"compute dtype: (?:torch\.)?(?P<v>\w+)"), str),
    ("ds_version", "DeepSpeed info", re.compile(r"DeepSpeed info: version=(?P<v>[^,]+)"), str),
    ("zero_stage", "ZeRO stage", re.compile(r"Creating (?:torch\.\w+|fp16|fp32|bf16) ZeRO stage (?P<v>\d) optimizer"), int),
    ("zero_stage", "zero_optimization_stage", re.compile(r"zero_optimization_stage \.+ (?P<v>\d)"), int),
    ("zero_stage", "zero_config", re.compile(r"zero_config \.+ stage=(?P<v>\d)"), int),
    ("overlap_comm", "zero_config", re.compile(r"zero_config \.+ .*\boverlap_comm=(?P<v>True|False)"), lambda v: v == "True"),
    ("fp16_enabled", "fp16_enabled", re.compile(r"fp16_enabled \.+ (?P<v>True|False)"), lambda v: v == "True"),
    ("fp16_enabled", "float16_config", re.compile(r"float16_config \.+ enabled=(?P<v>True|False)"), lambda v: v == "True"),
    ("bf16_enabled", "bfloat16_enabled", re.compile(r"bfloat16_enabled \.+ (?P<v>True|False)"), lambda v: v == "True"),
    ("bf16_enabled", "bfloat16_config", re.compile(r"bfloat16_config \.+ enabled=(?P<v>True|False)"), lambda v: v == "True"),
    ("min_loss_scale", "float16_config", re.compile(r"float16_config \.+ .*\bmin_loss_scale=(?P<v>[\d.]+)"), float),
    ("initial_scale_power", "float16_config", re.compile(r"float16_config \.+ .*\binitial_scale_power=(?P<v>\d+)"), int),
    ("ds_params_elems", "num_elems", re.compile(r"finished initializing model - num_params = \d+, num_elems = (?P<v>[\d.]+[KMBT]?)"), str),
    # which trainer wrote the log, so that advice names that trainer's setting: HF Trainer's banner
    # (transformers/trainer.py ``_inner_training_loop``: "***** Running training *****"), LLaMA-Factory's logger
    # names, NeMo's logging prefix (nemo/utils/nemo_logging.py: "[NeMo I 2024-05-01 10:00:00 file:line]") and
    # Lightning's process-group line (lightning/fabric/utilities/distributed.py ``_init_dist_connection``:
    # "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8"); the first one a file prints wins
    ("trainer", "Running training", re.compile(r"(?P<v>\*+ Running training \*+)"), lambda v: "transformers"),
    ("trainer", "llamafactory.", re.compile(r"(?P<v>llamafactory\.\w+)"), lambda v: "transformers"),
    ("trainer", "[NeMo ", re.compile(r"(?P<v>\[NeMo [IWE] \d{4}-)"), lambda v: "nemo"),
    # NeMo's Megatron progress bar (nemo/.../megatron_gpt_model.py logs reduced_train_loss, consumed_samples)
    # and Lightning's own bar (its version number ``v_num``)
    ("trainer", "reduced_train_loss", re.compile(r"(?P<v>reduced_train_loss=)"), lambda v: "nemo"),
    ("trainer", "v_num=", re.compile(r"(?P<v>, v_num=)"), lambda v: "lightning"),
    ("trainer", "GLOBAL_RANK", re.compile(r"(?P<v>Initializing distributed: GLOBAL_RANK: \d+)"), lambda v: "lightning"),
]
SAVE_MARK = re.compile(r"Saving model checkpoint to (?P<dir>\S+)")
CHECKPOINT_STEP = re.compile(r"checkpoint-(?P<step>\d+)")
# a write that ran out of disk: the OS error (errno 28, ENOSPC), safetensors' "(os error 28)", and what torch.save's
# zip writer says when a write stops short (caffe2/serialize/inline_container.cc: "unexpected pos N vs M",
# "PytorchStreamWriter failed writing file")
DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|os error 28|PytorchStreamWriter failed writing file|"
                       r"inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+|Disk quota exceeded")
ZERO3_DETECTED = re.compile(r"Detected DeepSpeed ZeRO-3")
RUN_START = re.compile(r"\*+ Running training \*+")
RESUME = re.compile(r"Continuing training from (?:checkpoint, will skip to saved global_step|global step (?P<step>\d+))")


# CUDA runtime and library errors (module docstring). The class is torch.AcceleratorError from torch 2.8,
# RuntimeError (or torch.cuda.CudaError) before.
CUDA_ERROR = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)): )?CUDA error: (?P<status>[^\n]+?)(?: when calling "
                        r"`(?P<call>[^`]+)`)?\s*$")
CUDNN_ERROR = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)): )?cuDNN error: (?P<status>CUDNN_STATUS_\w+)")
DEVICE_ASSERT = re.compile(r"(?P<file>[\w.]+\.cuh?):\d+: (?:(?P<kernel>[^:\n]*?): )?block: \[[\d,]+\], thread: \[[\d,]+\]"
                           r" Assertion (?:`(?P<cond>[^`]+)`|(?P<cond2>[^`\n]+?)) failed")
# the assert line without its "file.cu:N: kernel: block: [..], thread: [..]" head (a paste that kept only the
# condition, or a rich traceback that printed it alone); without the backticks (markdown ate them) only the
# index asserts of INDEX_ASSERTS are read, since a bare "Assertion X failed" is any program's assert
DEVICE_ASSERT_BARE = re.compile(r"Assertion `(?P<cond>[^`]+)` failed"
                                r"|Assertion (?P<cond2>srcIndex < srcSelectDimSize|t >= 0 && t < n_classes) failed")
# the same CUDA errors as a destructor's warning ("CUDA warning: an illegal memory access was encountered (function
# destroyEvent)", c10/cuda/CUDAFunctions) or as thrust/CUB name them ("merge_sort: failed to synchronize:
# cudaErrorIllegalAddress: an illegal memory access was encountered")
CUDA_ERROR_ALT = re.compile(r"(?:CUDA warning: |cudaError\w+: )(?P<status>[^\n(]+?)(?: \(function \w+\))?\s*$")
# The CUDA runtime's error enum (driver_types.h ``cudaError``), the driver API's (cuda.h ``CUresult``, the same
# numbers) and the text ``cudaGetErrorString`` gives for each: other stacks print the name, the number or the text
# (darknet "CUDA Error: <text>", helper_cuda.h "CUDA error at F:L code=700(cudaErrorIllegalAddress)", TensorFlow
# "CUDA_ERROR_ILLEGAL_ADDRESS: <text>", Caffe "Check failed: error == cudaSuccess (700 vs. 0)  <text>", Caffe2
# "[enforce fail at context_gpu.cu:N] error == cudaSuccess. 700 vs 0. Error at: F:L: <text>"); every spelling maps
# to the text torch prints after "CUDA error: ", which `DeviceError.kind` is read from. (runtime, driver, code, text)
CUDA_RUNTIME_ERRORS = (
    ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", 2, "out of memory"),
    ("cudaErrorInitializationError", "CUDA_ERROR_NOT_INITIALIZED", 3, "initialization error"),
    ("cudaErrorInsufficientDriver", None, 35, "CUDA driver version is insufficient for CUDA runtime version"),
    ("cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE", 100, "no CUDA-capable device is detected"),
    ("cudaErrorNoKernelImageForDevice", "CUDA_ERROR_NO_BINARY_FOR_GPU", 209,
     "no kernel image is available for execution on the device"),
    ("cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE", 214, "uncorrectable ECC error encountered"),
    ("cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", 700, "an illegal memory access was encountered"),
    ("cudaErrorLaunchOutOfResources", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 701,
     "too many resources requested for launch"),
    ("cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT", 702, "the launch timed out and was terminated"),
    ("cudaErrorAssert", "CUDA_ERROR_ASSERT", 710, "device-side assert triggered"),
    ("cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR", 714, "hardware stack error"),
    ("cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", 715, "an illegal instruction was encountered"),
    ("cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", 716, "misaligned address"),
    ("cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", 719, "unspecified launch failure"),
)
CUDA_ERROR_TEXT = {n: t for r, d, _, t in CUDA_RUNTIME_ERRORS for n in (r, d) if n}
CUDA_ERROR_TEXT.update({str(c): t for _, _, c, t in CUDA_RUNTIME_ERRORS})
# a name, then (optionally) the text printed after it: "cudaErrorIllegalAddress: an illegal memory ...",
# "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal ...", "code=700(cudaErrorIllegalAddress) "cudaDeviceSynchronize()""
CUDA_NAMED = re.compile(r"(?P<name>cudaError[A-Z]\w+|CUDA_ERROR_[A-Z_]+)(?::\s*(?P<status>[^\n:]+))?")
# no name: darknet's "CUDA Error: <text>" (also "CUDA Error Prev: "), a wrapper's "CUDA error at FILE:LINE - <text>",
# torch's driver-API "CUDA driver error: <text>" and its ROCm build's "HIP error: <text>" (hipGetErrorString's
# texts are CUDA's), NCCL's CUDACHECK "NCCL WARN Cuda failure 700 'an illegal memory access was encountered'"
# (src/include/checks.h; the code from 2.12, the quotes always), PaddlePaddle's "ExternalError: CUDA error(700), an
# illegal memory access was encountered." and MXNet's "Check failed: e == cudaSuccess || e ==
# cudaErrorCudartUnloading (700 vs. 0) : CUDA: an illegal memory access was encountered",
# and the glog CHECK / Caffe2 ENFORCE of a runtime call, "error == cudaSuccess (700 vs. 0)  <text>"
CUDA_ERROR_OTHER = re.compile(r"(?:(?i:CUDA(?: driver)? error|HIP error)(?: Prev)?(?:\((?P<code2>\d+)\))?(?: at \S+)?"
                              r"\s*[-:,]|Cuda failure (?:\d+ )?(?=')|(?<![\w.])(?:error|e|err|status) == cudaSuccess"
                              r"(?: \|\| \w+ == \w+)*\.?\s*\(?(?P<code>\d+)?"
                              r"(?: vs\.? 0\)?\.?)?(?:\s*Error at: \S+)?:?)\s*(?P<status>[^\n]+?)\s*$")
# the CUDA samples' check macro, copied into bitsandbytes' csrc (ops.cuh) and many CUDA programs:
# ``fprintf(stderr, "Error %s at line %d in file %s\n", cudaGetErrorString(status), __LINE__, __FILE__); exit(1);``
# — the runtime's error text without "CUDA error: ", and the process exits with no Python traceback
CUDA_CHECK_RETURN = re.compile(r"(?:^|\s)Error (?P<status>[a-z][^\n]*?) at line \d+ in file (?P<file>\S+)\s*$")
# a cuDNN / cuBLAS status name alone, as TensorFlow ("Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR") or
# Caffe ("Check failed: status == CUDNN_STATUS_SUCCESS (4 vs. 0)  CUDNN_STATUS_INTERNAL_ERROR") print it; the
# success names are not errors and ALLOC_FAILED is an OOM (`OOM_RUNTIME`)
LIB_STATUS = re.compile(r"(?P<status>(?:CUDNN|CUBLAS)_STATUS_(?!SUCCESS\b|ALLOC_FAILED\b)[A-Z_]+)(?![\w])(?! \()")
# torch <= 1.x's runtime-error text (THC: "cuda runtime error (59) : device-side assert triggered at FILE:LINE")
CUDA_ERROR_THC = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)): )?(?i:cuda) runtime error \((?P<code>\d+)\) : "
                            r"(?P<status>[^\n]+?)(?: at (?P<call>\S+))?\s*$")
# the assert conditions that mean an id outside the table: an embedding lookup (Indexing.cu) or a label outside
# the classes of the loss (Loss.cu / cross entropy); the rest are named by their kernel
INDEX_ASSERTS = {"srcIndex < srcSelectDimSize": "embedding", "t >= 0 && t < n_classes": "loss",
                 "idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"": "gather",
                 "index out of bounds": "index"}
# kernel log lines: dmesg "[  179.43] NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus."
XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+)(?:, pid=(?P<pid>'?<?\w+>?'?))?"
                 r"(?:, name=(?P<name>[^,]+))?,?\s*(?P<rest>.*)$")
# versions a log prints (module docstring): llamafactory-cli env, ds_report, DeepSpeed's init line, NCCL's INFO
VERSION_LINES = (
    ("llamafactory", re.compile(r"^- `llamafactory` version: (?P<v>\S+)")),
    ("torch", re.compile(r"^- PyTorch version: (?P<v>[\w.+]+)")),
    ("transformers", re.compile(r"^- Transformers version: (?P<v>[\w.+]+)")),
    ("datasets", re.compile(r"^- Datasets version: (?P<v>[\w.+]+)")),
    ("accelerate", re.compile(r"^- Accelerate version: (?P<v>[\w.+]+)")),
    ("peft", re.compile(r"^- PEFT version: (?P<v>[\w.+]+)")),
    ("trl", re.compile(r"^- TRL version: (?P<v>[\w.+]+)")),
    ("deepspeed", re.compile(r"^- DeepSpeed version: (?P<v>[\w.+]+)")),
    ("bitsandbytes", re.compile(r"^- Bitsandbytes version: (?P<v>[\w.+]+)")),
    ("vllm", re.compile(r"^- vLLM version: (?P<v>[\w.+]+)")),
    ("gpu", re.compile(r"^- GPU type: (?P<v>.+?)\s*$")),
    ("deepspeed", re.compile(r"DeepSpeed info: version=(?P<v>[^,\s]+)")),
    ("torch", re.compile(r"^torch version \.+ (?P<v>[\w.+]+)")),
    ("deepspeed", re.compile(r"^deepspeed info \.+ (?P<v>[\w.+]+)")),
    ("cuda", re.compile(r"^torch cuda version \.+ (?P<v>[\w.]+)")),
    ("nccl", NCCL_VERSION),
)
# deepspeed/comm/comm.py ``init_distributed`` (0.19.8 wheel :908, logged at INFO from every rank before
# torch.distributed.init_process_group): "Initializing TorchBackend in DeepSpeed with backend nccl"; the lines a
# start-up prints around it ("[comm.py:637:init_distributed] cdb=None", LLaMA-Factory's "Process rank: ...")
DIST_INIT = re.compile(r"Initializing TorchBackend in DeepSpeed with backend (?P<backend>\w+)")
# a dataset being loaded: LLaMA-Factory data/loader.py:58 (snapshot) "Loading dataset {attr}...", datasets
# arrow_dataset.py:3326 (the wheel installed here) "Loading cached processed dataset at {file}", and the same words
# with "prepared"/"tokenized"/"preprocessed" other trainers print before a load_from_disk
DATA_LOAD = re.compile(r"Loading (?:cached processed |prepared |tokenized |preprocessed )?dataset\b")
DIST_INIT_TAIL = re.compile(r"init_distributed\]|Initializing TorchBackend|Process rank: \d+|NCCL INFO|^\s*$")
# "Process rank: 3, world size: 8, device: cuda:3, distributed training: True, compute dtype: torch.bfloat16"
LF_PROCESS = re.compile(r"Process rank: (?P<rank>\d+), world size: (?P<world>\d+), device: (?P<dev>[\w:]+)")
# the launch command as a log or cmdline.txt echoes it: LF's CLI with a YAML and key=value overrides, torchrun of
# LF's launcher.py, or the argparse form of src/train.py
LAUNCH_LF = re.compile(r"(?:llamafactory-cli|lmf) train (?P<yaml>\S+\.ya?ml)(?P<over>(?:\s+[\w.]+=\S+)*)")
LAUNCH_TORCHRUN = re.compile(r"launcher\.py (?P<yaml>\S+\.ya?ml)(?P<over>(?:\s+[\w.]+=\S+)*)")
LAUNCH_ARGPARSE = re.compile(r"(?:src/)?train(?:_bash)?\.py\s+(?P<args>(?:--\w+(?:[ =](?!--)\S+)?\s*)+)")
# c10 glog prefix (c10/util/Logging.cpp): "[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607]"
GLOG_TIME = re.compile(r"\[[EWIF](?P<md>\d{3,4}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d(?:\.\d+)?) ")


def is_summary(metrics: dict) -> bool:
    """Whether one Trainer log dict (a printed ``{'...': ...}`` line or a trainer_state.json ``log_history`` entry)
    is the final metrics of ``Trainer.train``, not a step's: transformers' ``_inner_training_loop`` logs
    ``speed_metrics("train", ...)`` (train_runtime, train_samples_per_second, ... and train_tokens_per_second when
    tokens are counted), then ``train_loss`` and ``epoch`` -- always ``train_loss``, never a step's ``loss``. A step
    dict may carry ``train_runtime`` and ``train_tokens_per_second`` too (LlamaFactory#9194: rank 5 died at step 3
    after two such lines, with LF's tokens-per-second logging on), so those alone do not end the training loop."""
    return "train_loss" in metrics or ("train_runtime" in metrics and "loss" not in metrics)
