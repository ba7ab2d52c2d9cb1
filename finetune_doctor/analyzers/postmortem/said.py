"""The user's own words as evidence: the symptom a description names, when the run left nothing else to read.

readers/runlogs/userwords.py reads a short file that is prose (an issue title, a sentence) into ``FileEvidence.said``.
Here it becomes the ``ev.said`` fact, but only when no log line gave any evidence: a symptom read from words never
competes with one read from the run's own output. The rules that judge a symptom from a log (cuda-oom, nan-loss,
loss-stuck-zero, nccl-timeout, nccl-error, disk-full, host-oom-killed, run-hang, native-crash, cuda-error,
loss-diverged; run-crashed for an error or a version conflict the words name; no-valid-samples for a dataset said
to give no sample) read ``ev.said`` as a second,
weaker kind of evidence and word their finding as what the words alone support, asking for the output.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.crashcause import crash_cause
from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.analyzers.postmortem.kernelwords import said_kernel_lead
from finetune_doctor.analyzers.postmortem.knownbugs import regression_lead
from finetune_doctor.analyzers.postmortem.kindwords import (PERSIST_OPENING, UPGRADE_OPENING, kind_lead, persist_lead,
                                                        resumed_untrained)
from finetune_doctor.analyzers.postmortem.remotewords import remote_family_lead, unsloth_lead
from finetune_doctor.analyzers.postmortem.resumewords import resume_error_lead
from finetune_doctor.analyzers.postmortem.saidlead import host_lead, said_lead
from finetune_doctor.analyzers.postmortem.saidstack import setup_lead, stack_text, stated, version_text
from finetune_doctor.analyzers.postmortem.savecause import said_save_lead, staged_said
from finetune_doctor.arch import BF16_FAMILIES
from finetune_doctor.evidence import Evidence, Notice
from finetune_doctor.readers.runlogs.statedwords import NODES

# every evidence no-run-evidence counts (rules/no-run-evidence.yaml), and the detectors that need a log
_LOG_EVIDENCE = ("oom", "nan", "crash", "nccl", "nccl_error", "killed", "cuda_error", "xid", "loss_zero", "host_alloc",
                 "scale", "gpus", "completed", "has_metrics", "grad_nan_only", "diverged", "image_cut",
                 "attention_warning", "ga_loss")


# a line as a program prints it, not as a person writes it: glog / c10d's "[W socket.cpp:663]" and "[W513 10:00:00.1
# socket.cpp:663]", torch's "[rank0]:", glog's "W0513 10:00:00", a date-time stamp (trial 17, LlamaFactory#3715: such
# a line alone was read as words and the finding said "no log lines were given")
_LOG_PREFIX = re.compile(r"\s*(?:\[[WEIF]\d{0,4}[ \d:.]*\S+\.(?:cpp|cc|h|py):\d+\]|\[rank\d+\]:|[WEIF]\d{4} \d{2}:\d{2}"
                         r"|\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2})")


# exception classes that only say a child process failed (torch/distributed/elastic/multiprocessing/errors/__init__.py
# ChildFailedError; subprocess.CalledProcessError raised by accelerate's and LLaMA-Factory's launchers)
_WRAPPER_EXC = ("ChildFailedError", "CalledProcessError")


def generic_crash(crash: dict[str, Any]) -> bool:
    """True for an ``ev.crash`` that names no cause of its own: torchelastic's failure summary without the child's
    error (kind child-failed), a traceback cut before its exception line (traceback-only), or a launcher's wrapper
    exception alone (`_WRAPPER_EXC`)."""
    if crash.get("kind") in ("child-failed", "traceback-only"):
        return True
    return any(c in (crash.get("cls") or "") for c in _WRAPPER_EXC)


def said_facts(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.said``: {symptom, words, phase, phase_words, step, after, text, metric, location, given, reading,
    stack_text, version_text, versions, nodes_only, lead} (the last five from saidstack.py) of the first file
    read as the user's words (readers/runlogs/userwords.py `read_words`), or None when there is none or when any
    log evidence (`_LOG_EVIDENCE`, a hang or a stop of the run-health detector) was found. A crash that says nothing of its
    cause (`generic_crash`: torchrun's ChildFailedError alone, a launcher's CalledProcessError, a traceback cut
    before its exception) does not count: the words of a title outrank such a line."""
    if any(out.get(k) for k in _LOG_EVIDENCE if k != "crash") or (out.get("crash") and not generic_crash(out["crash"])):
        return None
    h = out.get("health") or {}
    if h.get("hang") or h.get("stopped"):
        return None
    for f in ev.files:
        if f.said and f.said.get("above_traceback") and (out.get("crash") or {}).get("cause"):
            continue   # words above a traceback whose frames name a cause (a start-up check): the frames outrank them
        if f.said:
            s = dict(f.said)
            s.pop("above_traceback", None)
            s["location"] = location_of(s.pop("file"), s.pop("line"))
            crash = out.get("crash")
            # honest about what was read: a line that names no cause may have been there beside the words
            s["given"] = (f"the only log line read ({crash.get('text')}) names no cause" if crash else
                          "the log line read names no cause the doctor reads" if _LOG_PREFIX.match(
                              str(s.get("text") or "")) else "no log lines were given")
            s["reading"] = _reading(ev, s, f.read.path) if s["symptom"] in ("error", "version") else None
            # what the words state of the stack and the set-up (saidstack.py): the versions named, judged against
            # LF's start-up ranges, and what to run for the rest; a hang's or an NCCL error's set-up lead
            s["stack_text"] = stack_text(ev) if s["symptom"] in ("error", "version") else None
            s["version_text"] = version_text(s["stack_text"])
            s["versions"] = {k: v["version"] for k, v in (stated(ev).get("versions") or {}).items()
                             if v["version"] and "x" not in v["version"]}
            # an error said only of several nodes (userwords_vocab's multi-node entry), not of NCCL itself
            s["nodes_only"] = (s["symptom"] == "nccl-error" and bool(NODES.search(str(s.get("words"))))
                               and "nccl" not in str(s.get("words")).lower())
            setup = stated(ev).get("setup") or {}
            if s["symptom"] in ("stopped", "error") and resumed_untrained(str(s.get("text") or "")):
                s["symptom"], s["phase"] = "no-update", "resume"   # a resume that trained nothing (kindwords.py)
            # the general kinds (kindwords.py): an MoE hang beyond ZeRO-3 first, the rest after a save's lead
            s["lead"] = ((kind_lead(s, setup) if s["symptom"] in ("hang", "no-update") else None)
                         or setup_lead(ev, s["symptom"], s.get("phase"), str(s.get("text") or ""))
                         # a save said to fail, quoting the staged save's errno or folder: its episode (savecause.py)
                         or (said_save_lead(s, s["versions"]) if staged_said(s) else None)
                         # a release the words state with a known regression of the kind said (knownbugs.py)
                         or regression_lead(s, s["versions"])
                         or said_save_lead(s, s["versions"])   # a save said to fail: which save (savecause.py)
                         or kind_lead(s, setup) or persist_lead(s, stated(ev).get("versions") or {})
                         or fp16_lead(s) or said_lead(s) or replicated_lead(s) or host_lead(s)
                         or resume_error_lead(s) or remote_family_lead(s) or unsloth_lead(s)
                         or said_kernel_lead(s))
            s["lr_first"] = lr_first(s)
            if s["lead"] and s["lead"].startswith((UPGRADE_OPENING, PERSIST_OPENING)) and s["stack_text"]:
                # what the words say changed comes before the judging of the releases they name, with one `pip
                # show` sentence (issue #25): the stack's names the command already
                lead = re.sub(r"; `pip show [^`]+` gives the one that ran", "", s["lead"]) \
                    if "`pip show" in s["stack_text"] else s["lead"]
                s["stack_text"], s["lead"] = lead + " " + s["stack_text"], None
            return s
    return None


def said_image_cut(said: dict[str, Any] | None) -> dict[str, Any] | None:
    """``ev.image_cut`` of state ``said`` when the words name transformers' multimodal features/tokens mismatch
    ("Image features and image tokens do not match", userwords_vocab "image-tokens") and no log line gave it: no
    token or feature count is known, so rule image-tokens-exceed-cutoff words it as the usual cause, not a cut
    seen. None otherwise."""
    if not said or said.get("symptom") != "image-tokens":
        return None
    return {"state": "said", "modality": "image", "tokens": None, "features": None, "missing": None,
            "text": said.get("words"), "location": said.get("location"), "phase_words": said.get("phase_words")}


_CLASS = re.compile(r"(?<![\w.])(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\b")


_IMPLIED = ((re.compile(r"\bNo module named\b"), "ModuleNotFoundError"), (re.compile(r"\bcannot import name\b"), "ImportError"))


def _reading(ev: Evidence, said: dict[str, Any], path: str) -> str | None:
    """What the exception readings of crashcause.py establish from the words, read as the error's own text (the
    class the words name, if any, and the whole description as its message): a quoted "No module named
    'flash_attn'", "Template X does not exist" or "does not recognize this architecture" is read as the line
    itself would be. None when no reading applies."""
    text = str(said.get("text") or "")
    m = _CLASS.search(text)
    msgs = [text]
    if m:   # the words after the class, as its message; a KeyError's message is the quoted key alone
        rest = text[m.end():].strip(" :：,，")
        q = _QUOTED.match(rest)
        msgs = ([q.group(0)] if q else []) + [rest, text]
    # a fragment only one class prints stands for that class when the words name none (CPython's import system:
    # "No module named" is ModuleNotFoundError's, "cannot import name" ImportError's; Python/import.c, importlib)
    cls = m.group(0) if m else next((c for pat, c in _IMPLIED if pat.search(text)), "")
    for msg in msgs:
        n = Notice(path, 1, None, "exception", text, {"cls": cls, "msg": msg})
        cause = crash_cause(ev, n, None, {}, {})
        if cause:
            return str(cause["text"])
    return None


# bf16 said too: the words compare or already moved, so fp16 is not the one cause to rule out first
_BF16 = re.compile(r"(?<![A-Za-z])(?:bf16|bfloat16)(?![A-Za-z0-9])", re.I)
# the words say the model is already sharded (ZeRO-3, FSDP, DeepSpeed): no whole copy per card to name
_SHARDED = re.compile(r"zero[-_ ]?3|\bz3\b|\bFSDP\b|\bdeepspeed\b|\bzero stage 3\b", re.I)
# fp16 said in the words ("fp16", "float16", "半精度" is either half type, so not taken)
_FP16 = re.compile(r"(?<![A-Za-z])(?:fp16|float16|torch\.float16)(?![A-Za-z0-9])", re.I)


def fp16_lead(said: dict[str, Any]) -> str | None:
    """The fp16 cause first, for a NaN or a loss of 0 said in words that also say fp16: the family the words
    name when it is one pre-trained in bf16 (arch.BF16_FAMILIES, the one home of that list), whose activations
    exceed fp16's maximum of 65504. None for other symptoms or without fp16 in the words."""
    if said.get("symptom") not in ("nan", "loss-zero"):
        return None
    text = str(said.get("text") or "")
    if not _FP16.search(text) or _BF16.search(text):   # "fp16 and bf16 alike" or "moved to bf16": not fp16's alone
        return None
    flat = re.sub(r"[-_ ]", "", text.lower())
    fam = next((f for f in sorted(BF16_FAMILIES, key=len, reverse=True)
                if re.search(rf"(?<![a-z]){re.escape(f.replace('_', ''))}(?![a-z])", flat)), None)
    named = (f"the words name fp16 and {fam}, a family pre-trained in bf16" if fam else
             "the words name fp16")
    return (f"First: {named}, so fp16 overflow is the cause to rule out before the others (activations past fp16's "
            "maximum of 65504 become inf/NaN, which the trainer logs as a NaN or a loss of 0): train in bf16 "
            "(fp32 on a GPU without bf16).")


# the loss said to train first (a value, a fluctuation, a number of steps) and then to collapse
_BEFORE = re.compile(r"先|前\s*\d+|一开始|刚开始|起初|开始(?:时|的时候)|波动|\bfirst\b|\binitially\b|\bhover\w*|\bfluctuat\w*|"
                     r"\b(?:for|after) (?:the first |about |around |~)?\d+\+? ?(?:steps|iterations|iters)\b", re.I)
_THEN = re.compile(r"然后|之后|突然|就开始|后来|\bthen\b|\bsuddenly\b|\bafter that\b|\bstart(?:s|ed)? to\b", re.I)


def lr_first(said: dict[str, Any]) -> bool:
    """Whether a NaN or a loss of 0 said in words comes after the loss first trained (`_BEFORE` then `_THEN`:
    "loss先在2左右上下波动，然后突然变成0", "loss 10-20 for the first 20 steps, then nan"): AdamW at too large a
    learning rate trains for a while and then diverges (rules/learning-rate-too-high-confirmed.yaml, its
    references LlamaFactory#2810, ChatGLM-Efficient-Tuning#267, ChatGLM2-6B#519), so the learning rate is the
    cause to rule out first. False where the words name fp16 (`fp16_lead` leads) or no such order."""
    if said.get("symptom") not in ("nan", "loss-zero"):
        return False
    text = str(said.get("text") or "")
    if _FP16.search(text):
        return False
    b = _BEFORE.search(text)
    return bool(b and _THEN.search(text, b.end()))


# several cards said of an OOM: "三张卡", "1,2,3 并行", "4 GPUs", "multi-GPU", "DDP", "each card", "more GPUs"
_SEVERAL = re.compile(r"[二两三四五六七八2-9]\s*(?:张|块)(?:显)?卡|多卡|并行训练|\b[2-9] ?(?:x ?)?GPUs\b|\bmulti[- ]?GPU\b|\bDDP\b|"
                      r"\b(?:each|every|more|several|multiple) (?:GPUs?|cards?)\b|每(?:张|块)卡|(?:加|多)了?卡", re.I)


def replicated_lead(said: dict[str, Any]) -> str | None:
    """For GPU memory said to run out on several cards: data-parallel training (DDP, LLaMA-Factory's default for
    several GPUs without DeepSpeed or FSDP) keeps a whole copy of the weights, gradients and optimizer states on
    every card, so more cards add no room per model (rule weights-replicated says the same from a config). None
    for other symptoms or without several cards in the words."""
    text = str(said.get("text") or "")
    if said.get("symptom") != "oom" or said.get("memory") != "gpu" or not _SEVERAL.search(text) or _SHARDED.search(text):
        return None
    return ("The words name several cards: under DDP (LLaMA-Factory's default for several GPUs without DeepSpeed "
            "or FSDP) every card holds a whole copy of the model with its gradients and optimizer states, so more "
            "cards add no memory per model and the longest sample that fits is bounded by one card; ZeRO-3 "
            "(`deepspeed: examples/deepspeed/ds_z3_config.json`) or FSDP shards them across the cards.")


_QUOTED = re.compile(r"'[^'\s]+'|\"[^\"\s]+\"")
