"""A host (CPU) allocation that failed inside the process: ``ev.host_alloc``.

PyTorch's CPU allocator raises a Python ``RuntimeError`` when malloc/posix_memalign fails (c10/core/impl/
alloc_cpu.cpp ``alloc_cpu``: ``CAFFE_ENFORCE_EQ(err, 0, "DefaultCPUAllocator: can't allocate memory: you tried to
allocate ", nbytes, " bytes. Error code ", err, " (", c10::utils::str_error(err), ")")``; torch 2.13.0+cpu prints
``[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate
1125899906842624 bytes. Error code 12 (Cannot allocate memory)`` for ``torch.empty(2**50, dtype=torch.uint8)``).
That is an exception with a traceback, raised by the process itself: not the kernel's OOM killer, which sends
SIGKILL and leaves no traceback (host-oom-killed). What the two have in common is too little host RAM for what the
process asked at that moment; what to change depends on the phase, which the traceback's frames or the progress
lines before the error show: LLaMA-Factory's dataset preprocessing (``Running tokenizer on dataset``, LF
data/loader.py ``_get_preprocessed_dataset``: ``dataset.map(..., num_proc=preprocessing_num_workers)``), the model
load, a checkpoint save, or a training step.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence, KillRecord

# the frames of LLaMA-Factory's and HF datasets' preprocessing (LF data/loader.py ``get_dataset`` →
# ``_get_preprocessed_dataset`` → datasets/arrow_dataset.py ``map`` → ``_map_single`` → LF
# data/processor/*.py ``preprocess_dataset``), and of tokenizing outside LF (HF tokenizers' ``__call__`` under
# ``map``): checked before the oomcause phases, whose "forward"/"model load" words a processor's frames can share
PREPROCESS_FRAMES = ("_get_preprocessed_dataset", "get_dataset (loader.py)", "preprocess_dataset", "_map_single",
                     "map (arrow_dataset.py)", "apply_function_on_filtered_inputs", "_encode_data_example",
                     "process_messages (mm_plugin.py)", "_get_mm_inputs", "align_dataset", "_load_single_dataset",
                     "tokenize_function", "preprocess_function", "_tokenize")

HUGE_BYTES = 4 << 40
"""A single request above 4 TiB is beyond the RAM of any one training host: the size was computed from a bad
shape (an overflowed length, a corrupt image header), not a RAM shortage."""

PHASE_ADVICE = {
    "preprocessing": ("the dataset preprocessing holds its batches in host RAM in every worker process: lower "
                      "preprocessing_num_workers (each worker is a full process) and preprocessing_batch_size "
                      "(1000 examples by default), or tokenize once where RAM suffices and reuse it with "
                      "tokenized_path, or stream the data (streaming: true)"),
    "checkpoint save": ("the save copies the model's (and, with the optimizer, its states') tensors to host RAM: "
                        "free host RAM for the save, save fewer states (save_only_model: true), or use fewer ranks "
                        "per node"),
    "model load": ("the checkpoint is read into host RAM before it moves to the GPUs (every rank of a node loads "
                   "its own copy unless the weights are sharded or loaded lazily): fewer ranks per node, "
                   "low_cpu_mem_usage, or more RAM"),
    "optimizer step": ("host-side optimizer states (DeepSpeed CPU offload keeps fp32 master weights and Adam "
                       "moments in host RAM) outgrew the RAM: offload fewer states, fewer ranks per node, or more RAM"),
    "optimizer set-up": ("the optimizer's host-side states (DeepSpeed CPU offload pins 12 bytes per trainable "
                         "parameter) did not fit: offload fewer states, fewer ranks per node, or more RAM"),
}
GENERIC_ADVICE = ("free host RAM for the run (other processes, fewer ranks or DataLoader workers per node) or give it "
                  "more; a container or Slurm memory limit counts, not the machine's total")


def _phase_of(frames: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(phase, frame) of the traceback's frames, nearest the error first; preprocessing before the step phases."""
    from finetune_doctor.analyzers.postmortem.oomcause import oom_phase

    inner = tuple(reversed(frames))
    for fr in inner:
        if any(k in fr for k in PREPROCESS_FRAMES):
            return "preprocessing", fr
    return oom_phase(inner, None)


def _notes_before(ev: Evidence, file: str, line: int) -> list[Any]:
    f = next((x for x in ev.files if x.read.path == file), None)
    return [n for n in f.notices if n.line <= line] if f is not None else []


def _traceback_frames(notes: list[Any], line: int) -> tuple[str, ...]:
    """The frames of the traceback nearest above `line` in the same file (the one the exception ends)."""
    tb = next((n for n in reversed(notes) if n.kind == "traceback" and n.line < line), None)
    if tb is None or not isinstance(tb.value, dict):
        return ()
    return tuple(tb.value.get("frames") or ())


def host_alloc_facts(kills: list[KillRecord], ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.host_alloc``: {bytes, size_text, huge, phase, evidence, where_text, advice, count, step, location,
    timeline_text} for the first c10 "DefaultCPUAllocator: can't allocate memory" of the files, or None.

    Phase, from the strongest evidence first: the frames of the traceback that ends in the error (`_phase_of`),
    else the last progress line before it in the same file (HF datasets' map bar, ``Running tokenizer on
    dataset``, with no training step counted: preprocessing), else the training step the log had reached."""
    recs = [k for k in kills if k.kind == "cpu-alloc"]
    if not recs:
        return None
    k = min(recs, key=lambda x: (x.file, x.line))
    nbytes = float(k.bytes or 0)   # 0: the error does not state its request (CPython's bare MemoryError)
    notes = _notes_before(ev, k.file, k.line)
    phase, frame = _phase_of(_traceback_frames(notes, k.line))
    evidence = f"the traceback's frame {frame}" if frame else None
    bar = next((n for n in reversed(notes) if n.kind == "prep-bar"), None)
    if phase is None and bar is not None and k.step is None:
        b = bar.value or {}
        phase = "preprocessing"
        evidence = f"the last progress line before it: \"{b.get('desc')}\" at {b.get('pct')} %"
    elif bar is not None and phase == "preprocessing" and k.step is None:
        b = bar.value or {}
        evidence += f", after \"{b.get('desc')}\" reached {b.get('pct')} %"
    if phase is None and k.step is not None:
        phase, evidence = "training", f"the training bar at step {k.step}"
    where = {"preprocessing": "during the dataset preprocessing (tokenization), before training started",
             "checkpoint save": "during a checkpoint save", "model load": "while loading the model",
             "training": f"during training step {k.step}"}.get(phase or "", f"in the {phase}" if phase else
                                                                "at a moment the log does not show")
    huge = nbytes >= HUGE_BYTES
    if huge:
        advice = ("a single request that large is beyond any host's RAM: the size was computed from a bad shape "
                  "(an overflowed length or count, a corrupt or enormous image or video), so find the sample being "
                  "processed rather than adding RAM")
    else:
        advice = PHASE_ADVICE.get(phase or "", GENERIC_ADVICE)
    gib = nbytes / (1 << 30)
    size_text = ("" if not nbytes else f"{gib:,.2f} GiB" if gib < 1 << 20 else f"{gib / (1 << 20):,.1f} PiB")
    who, raised = _allocator(k.text or "")
    d = {"bytes": nbytes or None, "size_text": size_text, "size_words": f" of {size_text}" if size_text else "",
         "huge": huge, "phase": phase, "evidence": evidence, "where_text": where, "advice": advice,
         "allocator": who, "raised_text": raised, "count": len(recs), "step": k.step,
         "location": location_of(k.file, k.line)}
    d["timeline_text"] = f"host allocation{d['size_words']} failed in-process ({who})"
    return d


def _allocator(text: str) -> tuple[str, str]:
    """(who refused, what it raised) from the error line (readers/runlogs/logpatterns.py CPU_ALLOC and
    HOST_MEMORY_ERROR)."""
    if "DefaultCPUAllocator" in text:
        said = "not enough memory" if "not enough memory" in text else "can't allocate memory"
        return ("c10 DefaultCPUAllocator", "PyTorch's CPU allocator raised a Python RuntimeError "
                f"(\"DefaultCPUAllocator: {said}\")")
    if "WinError 1455" in text:
        # Win32 ERROR_COMMITMENT_LIMIT: every committed page counts against RAM + paging file (loading torch's
        # CUDA DLLs in each DataLoader worker or rank commits hundreds of MiB each)
        return ("Windows' commit limit", "Windows refused to commit more memory (OSError [WinError 1455]: the "
                "paging file is too small); RAM plus the paging file is the limit: enlarge the paging file or "
                "run fewer processes (dataloader_num_workers, preprocessing_num_workers, ranks)")
    if "MallocHost" in text or "EL0018" in text:
        # torch_npu's pinned host allocator (readers/runlogs/npulines.py): page-locked memory counts against the
        # locked-memory limit as well as the RAM
        return ("torch_npu's page-locked host allocator", "the Ascend runtime refused page-locked (pinned) host "
                "memory (aclrtMallocHost: \"Failed to apply for memory\", EL0018): the host's RAM or its locked-"
                "memory limit ran out (`ulimit -l`; a Docker container gets 64 KiB unless started with "
                "`--ulimit memlock=-1`); pinned buffers come from DeepSpeed's offload and pin_memory")
    if "_ArrayMemoryError" in text:
        return "NumPy", "NumPy raised _ArrayMemoryError (\"Unable to allocate ... for an array\")"
    if "ArrowMemoryError" in text:
        return ("Arrow", "Arrow, which holds HF datasets' tables, raised ArrowMemoryError "
                "(\"malloc of size ... failed\")")
    return "Python", "Python raised MemoryError"
