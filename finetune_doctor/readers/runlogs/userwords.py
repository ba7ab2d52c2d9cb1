"""A short text that is the user's own description of a failure, not a log: its symptom and phase, read from words.

Issue threads often carry no paste at all: the "log" is the title or a sentence ("QWEN1.5 training reports OOM as
soon as it enters eval", "损失为0", "Training hangs in the end while calling dist.barrier()"). Such a text has none of
a log's line shapes (no traceback frame, no logger prefix, no progress bar, no metric dict), so the line patterns of
logpatterns.py find nothing in it. `read_words` reads it as a *report*: which symptom the user names and in which
phase, with the words that said so. It never states a figure the words do not hold.

Only small files are read this way (`MAX_BYTES`, checked by the caller before anything else: a 50 MB log never
reaches this module), and only when the line scan found no evidence at all (readers/runlogs/logs.py).

The symptom words are the ones the tools themselves print and users repeat: PyTorch's "CUDA out of memory" /
"OutOfMemoryError" (c10/cuda/CUDACachingAllocator.cpp), "No space left on device" / "[Errno 28]" (errno ENOSPC),
NCCL's bootstrap "socketFinalizeAccept: wrong type" (nccl src/misc/socket.cc) and its result names (ncclSystemError,
"unhandled system error": nccl src/misc/utils.cc ncclGetErrorString), "nan" as HF's Trainer logs a non-finite loss,
and the Chinese words users write for the same (显存不足/爆显存, 超时, 卡住, 磁盘满, 损失为0).
"""

from __future__ import annotations

import re
from typing import Any

MAX_BYTES = 4096
"""Larger files are logs (a title or a paragraph is far below 4 KiB); the caller checks the size first."""
MAX_LINES = 12
"""A chosen bound, not a measured one: a title plus a short paragraph fits; a paste of the last lines of a log rarely
stays under it and is read by the line patterns instead."""

# a line shaped like program output: traceback frames, logger/launcher prefixes, timestamps, progress bars, metric
# dicts, shell prompts; two or more of them and the text is a paste, not a description
_LOG_LINE = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|File \"|\[rank\d+\]|\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|"
    r"\d\d/\d\d/\d{4} \d\d:\d\d|\[?(?:INFO|WARNING|ERROR|DEBUG)\b|[\w.-]+:\d+:\d+ \[\d+\] NCCL|\{'loss'|\$ |>>> |"
    r"\s*\d+%\|)|\d+(?:\.\d+)?(?:it/s|s/it)\]", re.M)

# (symptom, words): the first symptom whose words occur wins; the specific ones first
_SYMPTOMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("disk-full", re.compile(r"No space left on device|\[?Errno 28\]?|os error 28|Disk quota exceeded|"
                             r"PytorchStreamWriter failed writing file|\bdisk (?:is |was )?full\b|out of disk|"
                             r"磁盘(?:空间)?(?:不足|已?满|爆)|硬盘(?:空间)?(?:不足|已?满)", re.I)),
    ("nccl-error", re.compile(r"socketFinalizeAccept|ncclSystemError|ncclInternalError|ncclRemoteError|"
                              r"ncclUnhandledCudaError|ncclInvalidUsage|NCCL error|unhandled system error", re.I)),
    ("host-oom", re.compile(r"\b(?:CPU|host|system) (?:OOM|RAM|memory)\b(?:[^.\n]{0,30}(?:OOM|out of|exceed|killed))?|"
                            r"\bRAM (?:OOM|out of memory|exhausted)|\bout of (?:host |system |CPU )?RAM\b|"
                            r"(?<!显)内存(?:不足|溢出|爆|不够|耗尽)|(?:OOM|oom)[ -]?kill", re.I)),
    ("oom", re.compile(r"out of memory|\bOOM\b|OutOfMemory|显存(?:不足|溢出|爆|不够)|爆显存|(?<![A-Za-z])oom(?![A-Za-z])",
                       re.I)),
    ("nan", re.compile(r"(?<![A-Za-z])nan(?![A-Za-z])|(?<![A-Za-z])(?:inf|infinite) loss|loss (?:is |becomes |goes to )?inf\b",
                       re.I)),
    ("loss-zero", re.compile(r"(?:loss|损失)(?:[^\d\n.,;，。]{0,12}?)(?<![\d.])0(?:\.0+)?(?![\d.%])", re.I)),
    ("timeout", re.compile(r"\btime[ -]?out\b|\btimed out\b|\btimeouts?\b|超时", re.I)),
    ("hang", re.compile(r"\bhang(?:s|ing)?\b|\bhung\b|\bstuck\b|\bfreez(?:e|es|ing)\b|\bfroze\b|卡住|卡死|卡在|不动了?|无响应",
                        re.I)),
)

# (phase, words) in the order they are tried; eval before save ("保存" is rarer in an eval complaint than the reverse)
_PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("evaluation", re.compile(r"\beval(?:uat\w*)?\b|\bvalidat\w*|评估|验证|eval阶段|测评", re.I)),
    ("save", re.compile(r"\bsav(?:e|es|ed|ing)\b|\bcheckpoint\w*|保存|存储模型", re.I)),
    ("tokenization", re.compile(r"\btokeni[sz]\w*|\bpreprocess\w*|\bdatasets? map\b|\bmap\(|预处理|分词|数据处理", re.I)),
    ("loading", re.compile(r"\bload(?:s|ing)?\b(?! balanc)|加载", re.I)),
    ("end", re.compile(r"\bin the end\b|\bat the end\b|\bend of training\b|训练结束|最后", re.I)),
)
_STEP = re.compile(r"\b(?:step|iter(?:ation)?)\s*(?P<a>\d+)\b|\b(?P<b>\d+)\s*(?:steps|iterations|iters)\b|第\s*(?P<c>\d+)\s*步",
                   re.I)
_AFTER = re.compile(r"\bafter (?:about |~)?(?P<n>\d+) ?(?P<u>minutes?|mins?|hours?|h)\b|(?P<cn>\d+)\s*(?P<cu>分钟|小时)后",
                    re.I)

_DEFAULT_TIMEOUT = re.compile(r"\b(?:after|within|at|takes?|took)\s+(?:about |~)?(?:30 ?min(?:ute)?s?|half an hour|1800 ?s(?:ec(?:onds)?)?)\b|"
                              r"30\s*分钟", re.I)
_FAILED = re.compile(r"\bfail\w*|\bcrash\w*|\berror\w*|\bdies\b|\bdied\b|\bkilled\b|报错|失败|挂了|崩溃", re.I)


def looks_like_prose(text: str) -> bool:
    """True when `text` is short and holds at most one line shaped like program output (`_LOG_LINE`): a title or a
    sentence, possibly quoting one error line."""
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        return False
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or len(lines) > MAX_LINES:
        return False
    return len(_LOG_LINE.findall(text)) <= 1


def read_words(text: str) -> dict[str, Any] | None:
    """The symptom a short description names, or None (not prose, or no symptom word).

    Returns ``{symptom, words, phase, phase_words, step, after, text, line, default_timeout}``: `symptom` one of disk-full,
    nccl-error, host-oom, oom, nan, loss-zero, timeout, hang; `words` the text that named it; `phase` evaluation |
    save | tokenization | loading | end | None with `phase_words`; `step` the step number the words give (int) or
    None; `after` the duration the words give ("30 minutes") or None; `text` the description (first 300
    characters, one line); `line` the 1-based line the symptom words are on; `default_timeout` whether the words
    give a failure after 30 minutes, the default collective timeout; `inferred` True when no symptom word was there and
    that duration alone made it a `timeout`.
    """
    if not looks_like_prose(text):
        return None
    for symptom, pat in _SYMPTOMS:
        m = pat.search(text)
        if m:
            break
    else:
        # a failure after exactly the default collective timeout: torch.distributed's default process-group
        # timeout and HF TrainingArguments.ddp_timeout are both 1800 s (torch/distributed/constants.py
        # default_pg_timeout; transformers training_args.py ddp_timeout)
        m = _DEFAULT_TIMEOUT.search(text)
        if m is None or not _FAILED.search(text):
            return None
        symptom = "named"
    out: dict[str, Any] = {"symptom": "timeout" if symptom == "named" else symptom, "inferred": symptom == "named",
                           "words": m.group(0).strip(), "phase": None, "phase_words": None,
                           "step": None, "after": None, "text": " ".join(text.split())[:300],
                           "line": text.count("\n", 0, m.start()) + 1,
                           "default_timeout": bool(_DEFAULT_TIMEOUT.search(text))}
    for phase, ppat in _PHASES:
        pm = ppat.search(text)
        if pm:
            out["phase"], out["phase_words"] = phase, pm.group(0).strip()
            break
    sm = _STEP.search(text)
    if sm:
        out["step"] = int(sm.group("a") or sm.group("b") or sm.group("c"))
    am = _AFTER.search(text)
    if am:
        out["after"] = am.group(0).strip()
    return out
