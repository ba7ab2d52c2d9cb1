"""Device and machine failures in a run's logs: CUDA runtime and library errors, device-side asserts, the kernel's
Xid lines, GPU recordings, and the package versions the logs state (``ev.stack``).

Xid meanings follow NVIDIA's Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/index.html and its
"Analyzing Xid Errors" tables for Ampere and newer), in our words: what broke and the first thing to do.
A device-side assert in an embedding lookup (``Indexing.cu`` indexSelect*Index, condition ``srcIndex <
srcSelectDimSize``) or in the loss (``Loss.cu`` nll_loss*, ``t >= 0 && t < n_classes``) means an id outside
the table: token ids or labels at or above the vocabulary size (a tokenizer with added tokens and an embedding
that was not resized, or a template that writes ids of another tokenizer).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.cudnncause import cudnn_finalize
from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.analyzers.postmortem.kernelwords import illegal_access_lead
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import Evidence, src
from finetune_doctor.readers.runlogs.logpatterns import INDEX_ASSERTS

# code -> (what it means, what to do); the codes issue 16 names, from NVIDIA's Xid catalogue
XID_MEANINGS: dict[int, tuple[str, str, str]] = {
    13: ("graphics engine exception: a kernel faulted (out-of-range access, illegal instruction); usually the "
         "application or a library kernel, rarely the GPU", "rerun the failing step with CUDA_LAUNCH_BLOCKING=1; if "
         "it repeats on one GPU only, run the GPU's diagnostics", "application"),
    31: ("GPU memory page fault: a kernel touched an address it does not own (illegal memory access); usually an "
         "application or library bug, a driver bug otherwise", "look for the illegal-memory-access error in the "
         "training log; update the library whose kernel faulted", "application"),
    43: ("GPU stopped processing: the channel of a faulting application was reset; the GPU itself is fine",
         "the process that owned the channel died: fix that error; no GPU reset is needed", "application"),
    45: ("preemptive cleanup: the driver tore down a channel after an earlier error or a killed process",
         "look at the Xid or kill just before it: that is the cause", "follow-up"),
    48: ("double-bit ECC error: uncorrectable memory corruption on the GPU", "drain the node; reset the GPU "
         "(nvidia-smi -r) or reboot, and report the card if it repeats", "hardware"),
    63: ("ECC page retirement / row remapping recorded: a failing memory row was marked", "reset the GPU (or "
         "reboot) to activate the remap; the card is fine afterwards", "hardware"),
    64: ("ECC page retirement / row remapping failed: the card could not retire a failing row", "drain the node "
         "and report the card", "hardware"),
    74: ("NVLink error: a link between GPUs reported a fault", "reset the GPUs; if it repeats check the NVLink "
         "bridge/board and nvidia-smi nvlink -e counters", "hardware"),
    79: ("GPU has fallen off the bus: the card stopped answering on PCIe", "reboot the node; check power, "
         "cooling and the PCIe slot; report the card if it repeats", "hardware"),
    92: ("high single-bit ECC error rate", "watch the card's ECC counters (nvidia-smi -q -d ECC); plan a "
         "replacement if the rate stays high", "hardware"),
    94: ("contained ECC error: memory corruption confined to one application, which had to stop", "restart the "
         "training; the GPU keeps working (row remapping follows at the next reset)", "hardware"),
    95: ("uncontained ECC error: memory corruption that may have reached every application on the GPU",
         "drain the node and reset the GPU before any further use", "hardware"),
    119: ("GSP RPC timeout: the GPU's system processor (firmware) stopped answering the driver", "reset the "
          "GPU or reboot; update the driver if it repeats", "hardware"),
}


# cudaGetErrorString texts (logpatterns.CUDA_RUNTIME_ERRORS) -> (what it means, what to do), from the CUDA runtime
# API's documentation of each cudaError value (docs.nvidia.com/cuda/cuda-runtime-api, group__CUDART__TYPES)
OTHER_STATUS_MEANINGS: dict[str, tuple[str, str]] = {
    "launch failure": ("an exception in a kernel while it ran (an out-of-range access the hardware caught, or "
                       "failing hardware); the same causes as an illegal memory access, and an Xid 13/31/43 in the "
                       "kernel log tells which", "rerun with CUDA_LAUNCH_BLOCKING=1; check dmesg for Xid lines"),
    "launch timed out": ("a kernel ran longer than the display watchdog allows (a GPU that also drives a "
                         "display)", "train on a GPU without a display attached, or disable the watchdog"),
    "no kernel image is available": ("the installed torch (or a compiled extension such as flash-attn, "
                                     "bitsandbytes, apex) was not built for this GPU's compute capability",
                                     "install a build that lists this GPU's architecture (torch.cuda."
                                     "get_arch_list()), or rebuild the extension for it"),
    "driver version is insufficient": ("the NVIDIA driver is older than the CUDA runtime torch was built with",
                                       "update the driver, or install a torch build for an older CUDA"),
    "no cuda-capable device": ("no GPU is visible to the process (CUDA_VISIBLE_DEVICES, the container's GPU "
                               "options, or the driver)", "check nvidia-smi and CUDA_VISIBLE_DEVICES inside the "
                                                          "job"),
    "too many resources requested for launch": ("a kernel was launched with more threads or registers than the "
                                                "GPU allows (a library kernel built for another GPU)",
                                                "update the library whose kernel failed"),
    "initialization error": ("CUDA could not initialise in this process (CUDA used before a fork, e.g. in "
                             "dataloader workers, or a driver problem)",
                             "use the spawn start method for workers, or check the driver"),
    "illegal instruction": ("a kernel executed an illegal instruction (a kernel built for another GPU, or a "
                            "kernel bug)", "update the library whose kernel failed"),
    # cudaErrorInvalidDevice (101, cudaGetErrorString "invalid device ordinal"): a device index past the visible
    # cards, which a launch makes when it starts more processes per node than CUDA_VISIBLE_DEVICES leaves
    "invalid device ordinal": ("a request for a GPU index that is not visible to the process: more processes per "
                               "node than visible GPUs (--nproc_per_node, or CUDA_VISIBLE_DEVICES listing fewer "
                               "cards), or a device index set in the config or script",
                               "launch one process per visible GPU (nproc_per_node = the cards CUDA_VISIBLE_DEVICES "
                               "leaves)"),
    "busy or unavailable": ("the GPU is in exclusive-process mode and another process holds it",
                            "check nvidia-smi's compute mode and the processes on the card"),
}


def stack_facts(ev: Evidence) -> dict[str, Any] | None:
    """``ev.stack``: {package: {version, source}} from the version lines the logs print (the first per package,
    in reading order); None when no log states one."""
    out: dict[str, Any] = {}
    for f in ev.files:
        for fact in f.facts:
            if fact.name.startswith("version:"):
                pkg = fact.name[8:]
                if pkg not in out:
                    out[pkg] = {"version": str(fact.value), "source": src(fact.file, fact.line)}
    return out or None


def cuda_error_facts(ev: Evidence, cx: RunContext) -> dict[str, Any] | None:
    """``ev.cuda_error``: the first CUDA runtime/library error (not an allocator OOM, which ``ev.oom`` holds),
    what it means and where. None without one."""
    errs = [e for f in ev.files for e in f.device_errors if e.kind != "out-of-memory"]
    if not errs:
        return cpu_lookup_facts(ev, cx)
    e = errs[0]
    ranks = sorted({x.rank for x in errs if x.rank is not None})
    table = INDEX_ASSERTS.get(e.assert_cond or "")
    vocab = cx.vocab()
    if table in ("embedding", "loss"):
        where = "the embedding lookup" if table == "embedding" else "the loss"
        meaning = (f"a device-side assert in {where} ({e.assert_site}: {e.assert_cond}): "
                   + ("token ids" if table == "embedding" else "labels") + " outside the vocabulary"
                   + (f" (ids at or above vocab_size {vocab})" if vocab else "")
                   + ": the tokenizer has tokens the model's embedding does not (added special tokens without "
                   "resize_vocab: true, or a template or dataset that was tokenized with another tokenizer)")
        fix = "set resize_vocab: true (or use the model's own tokenizer and template)"
    elif e.kind == "device-assert":
        meaning = ("a device-side assert" + (f" in {e.assert_site} ({e.assert_cond})" if e.assert_site else "")
                   + ": a kernel's own check failed; the traceback's operation names where")
        fix = "rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing operation"
    elif e.kind == "illegal-address":
        meaning = ("an illegal memory access: a kernel read or wrote outside its memory (a kernel bug in the "
                   "attention implementation or a fused op, an id outside a table, or failing GPU memory; an Xid "
                   "31/13/94 in the kernel log tells which)")
        # the kernel the line or the words beside it name (kernelwords.py): a short paste's whole text, a log's line
        meaning += illegal_access_lead("\n".join([e.text or "", *(str(f.text or "") for f in ev.files
                                                                    if f.read.path == e.file)])) or ""
        fix = "switch the attention implementation (flash_attn: sdpa) and rerun with CUDA_LAUNCH_BLOCKING=1"
    elif e.kind == "cudnn" and cudnn_finalize("RuntimeError", e.text or ""):
        # the frontend's descriptor finalize with its status (cudnncause.py): the cuDNN loaded, not the shapes
        meaning = "the cuDNN frontend's failed descriptor finalize: " + (cudnn_finalize("RuntimeError", e.text or "") or "")
        fix = "remove a cuDNN installed beside torch's own (or change the torch release with its torch-bound packages)"
    elif e.kind in ("cublas", "cudnn"):
        meaning = (f"{'cuBLAS' if e.kind == 'cublas' else 'cuDNN'} failed with {e.status}"
                   + (f" in `{e.call}`" if e.call else "") + ": usually memory exhausted inside the library "
                   "(NOT_INITIALIZED / ALLOC_FAILED), a shape or dtype the library does not support (NOT_SUPPORTED, "
                   "INVALID_VALUE), or an earlier asynchronous CUDA error surfacing here (EXECUTION_FAILED)")
        fix = "rerun with CUDA_LAUNCH_BLOCKING=1; lower the micro-batch if memory is near the limit"
    elif e.kind in ("npu-kernel", "npu-other"):
        # torch_npu's error block (readers/runlogs/npulines.py): reported asynchronously, so the operator named is
        # where the fault surfaced ("the stacktrace may be inaccurate", torch_npu's own RuntimeError)
        meaning = (NPU_KERNEL_MEANING if e.kind == "npu-kernel" else f"the Ascend runtime reported: {e.status}") + (
            f" (the operator it surfaced in: {e.call})" if e.call else "")
        fix = NPU_FIX
    elif e.kind == "ecc":
        meaning = "an uncorrectable ECC error on the GPU: hardware, not the training code"
        fix = "drain the node and reset the GPU"
    else:
        known = next((v for k, v in OTHER_STATUS_MEANINGS.items() if k in (e.status or "").lower()), None)
        meaning = known[0] if known else f"the CUDA runtime reported: {e.status}"
        fix = known[1] if known else "rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing operation"
    return {"kind": e.kind, "exc": e.exc, "status": e.status, "call": e.call, "assert_site": e.assert_site,
            "assert_cond": e.assert_cond, "out_of_vocab": table in ("embedding", "loss"), "table": table,
            "rank": e.rank, "ranks": ranks, "count": len(errs), "step": e.step, "meaning": meaning, "fix_title": fix,
            "location": location_of(e.file, e.line), "what": DEVICE_ERROR_WORDS.get(e.kind, "a CUDA error"),
            "status_text": STATUS_FORMS.get(e.kind, "CUDA error: {}").format(e.status),
            "timeline_text": f"{e.exc + ': ' if e.exc else ''}{STATUS_FORMS.get(e.kind, 'CUDA error: {}').format(e.status)}"[:160]}


DEVICE_ERROR_WORDS = {"npu-kernel": "an Ascend NPU error", "npu-other": "an Ascend NPU error"}
"""``ev.cuda_error.what`` by the record's kind (readers/runlogs/npulines.py); a CUDA error otherwise."""
STATUS_FORMS = {"npu-kernel": "torch_npu: \"{}\"", "npu-other": "torch_npu: \"{}\""}
"""How ``ev.cuda_error.status_text`` quotes the status, by kind: torch's own "CUDA error: X" otherwise."""
NPU_KERNEL_MEANING = ("a kernel faulted on the NPU (an AI Core, AI CPU or vector-core exception): an operator bug of the "
                      "installed CANN or torch_npu release (fused attention and matmul operators most often), an index "
                      "outside a table, or a shape or dtype the operator does not support; torch_npu reports it "
                      "asynchronously, so the line that raised is not always the one that faulted")
NPU_FIX = ("rerun with ASCEND_LAUNCH_BLOCKING=1 (torch_npu's own advice) to see the failing operator, and compare the "
           "CANN and torch_npu releases with the ones the operator is known to work with")


def xid_facts(ev: Evidence) -> dict[str, Any] | None:
    """``ev.xid``: the kernel's Xid lines, each explained; `worst` is the first hardware Xid (else the first).
    None without any."""
    recs = [x for f in ev.files for x in f.xids]
    if not recs:
        return None
    events = []
    for x in recs[:200]:
        meaning, action, who = XID_MEANINGS.get(x.xid, ("an Xid the doctor has no explanation for; see NVIDIA's "
                                                         "Xid catalogue", "look the code up in NVIDIA's catalogue",
                                                         "unknown"))
        events.append({"xid": x.xid, "pci": x.pci, "pid": x.pid, "process": x.process, "host": x.host,
                       "meaning": meaning, "action": action, "who": who, "location": location_of(x.file, x.line),
                       "when": x.wall, "timeline_text": f"kernel Xid {x.xid} on GPU {x.pci}: {meaning.split(':')[0]}"})
    hw = [e for e in events if e["who"] == "hardware"]
    worst = hw[0] if hw else events[0]
    return {"events": events, "worst": worst, "count": len(recs), "codes": sorted({x.xid for x in recs}),
            "hardware": bool(hw), "location": worst["location"]}


def gpu_record_facts(ev: Evidence) -> dict[str, Any] | None:
    """``ev.gpus``: per-card peaks of GPU recordings (nvidia-smi logs, ``doctor gpus --record``, pasted per-card
    summaries), several nodes together: cards are named by the recording's file when more than one file holds
    cards."""
    files = [f for f in ev.files if f.gpus]
    if not files:
        return None
    many = len(files) > 1
    peaks = []
    for f in files:
        node = f.origin.get("node") or f.origin.get("host")
        for g in f.gpus:
            peaks.append({"index": g.index, "name": g.name, "peak_gib": g.max_used_mib / 1024, "samples": g.samples,
                          "total_gib": None if g.total_mib is None else g.total_mib / 1024,
                          "node": node if many else None, "location": location_of(g.file, g.max_line)})
    hi = max(peaks, key=lambda x: x["peak_gib"])
    lo = min(peaks, key=lambda x: x["peak_gib"])
    return {"cards": peaks, "busiest": hi, "lightest": lo, "spread_gib": hi["peak_gib"] - lo["peak_gib"],
            "nodes": len(files)}


# torch's CPU index_select / embedding bound check (aten/src/ATen/native/TensorAdvancedIndexing.cpp
# ``index_select_out_cpu_``: TORCH_CHECK_INDEX(... "index out of range in self")): the same lookup that, on a GPU, is
# the device-side assert ``indexSelectLargeIndex: srcIndex < srcSelectDimSize`` (INDEX_ASSERTS "embedding")
CPU_LOOKUP = "index out of range in self"
CPU_LOOKUP_MEANING = (
    "an index outside a lookup table, raised by torch's bound check of index_select / nn.Embedding (on a GPU the "
    "same lookup is a device-side assert in indexSelectLargeIndex): a token id at or above the embedding's rows "
    "(a tokenizer with added tokens, e.g. a [PAD] added to Llama's tokenizer, without resizing the embedding, or a "
    "tokenizer whose vocabulary and the checkpoint's config.json vocab_size disagree){vocab}, or a position at or "
    "above max_position_embeddings in a model with an absolute position table (GPT-2, BERT, OPT: inputs longer "
    "than the table). The deciding input: len(tokenizer) against vocab_size in config.json, then the longest "
    "input against max_position_embeddings")
CPU_LOOKUP_FIX = "set resize_vocab: true (or use the model's own tokenizer), or cut inputs to max_position_embeddings"


def cpu_lookup_facts(ev: Evidence, cx: RunContext) -> dict[str, Any] | None:
    """``ev.cuda_error`` for an embedding or index_select lookup out of range raised on the CPU (an ``IndexError``
    whose message is `CPU_LOOKUP`; also what a title keeps of the GPU's device-side assert): the out-of-vocabulary
    reading of the GPU's assert, with the position table as the other cause. None without such an exception."""
    n = next((x for f in ev.files for x in f.notices if x.kind == "exception"
              and str((x.value or {}).get("cls") or "").endswith("IndexError")
              and CPU_LOOKUP in str((x.value or {}).get("msg") or "")), None)
    if n is None:
        return None
    vocab = cx.vocab()
    meaning = CPU_LOOKUP_MEANING.format(vocab=f" (vocab_size {vocab})" if vocab else "")
    return {"kind": "index-range", "exc": "IndexError", "status": CPU_LOOKUP, "call": None, "assert_site": None,
            "assert_cond": None, "out_of_vocab": True, "table": "embedding", "rank": None, "ranks": [], "count": 1,
            "step": n.step, "meaning": meaning, "fix_title": CPU_LOOKUP_FIX, "location": location_of(n.file, n.line),
            "what": "an index out of a lookup table's range", "status_text": CPU_LOOKUP,
            "timeline_text": f"IndexError: {CPU_LOOKUP}"}
