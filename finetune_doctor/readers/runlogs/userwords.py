"""A short text that is the user's own description of a failure, not a log: its symptom and phase, read from words.

Issue threads often carry no paste at all: the "log" is the title or a sentence ("QWEN1.5 training reports OOM as
soon as it enters eval", "损失为0", "Training hangs in the end while calling dist.barrier()"). Such a text has none of
a log's line shapes (no traceback frame, no logger prefix, no progress bar, no metric dict), so the line patterns of
logpatterns.py find nothing in it. `read_words` reads it as a *report*: which symptom the user names and in which
phase, with the words that said so. It never states a figure the words do not hold.

Only small files are read this way (`MAX_PASTE_BYTES`, checked by the caller before anything else: a 50 MB log never
reaches this module), and only when the line scan found no evidence at all (readers/runlogs/logs.py). The blocks of
a report that are neither words nor log (an environment dump, a config, a data sample: readers/runlogs/
pasteblocks.py) are blanked first; what is left must be short (`MAX_BYTES`, `MAX_LINES`).

The symptom and phase words (English and Chinese, with their upstream sources) are in userwords_vocab.py.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.readers.runlogs import pasteblocks
from finetune_doctor.readers.runlogs.launchlines import blank_launch_lines
from finetune_doctor.readers.runlogs import userwords_forms as forms
from finetune_doctor.readers.runlogs.quotewords import quote_text
from finetune_doctor.readers.runlogs import userwords_vocab as vocab

MAX_BYTES = 4096
"""Words longer than this are a log (a title or a paragraph is far below 4 KiB), counted once the environment,
config and data blocks are blanked."""
MAX_PASTE_BYTES = 65536
"""The largest file the caller hands to `read_words` (the first read of readers/runlogs/logs.py, so the file is
whole in it): a title above a `pip list` or `conda list` (a few hundred rows) stays below it; a 50 MB log never
reaches the block test."""
MAX_LINES = 12
"""A chosen bound, not a measured one: a title plus a short paragraph fits; a paste of the last lines of a log rarely
stays under it and is read by the line patterns instead."""

# a line shaped like program output: traceback frames, logger/launcher prefixes, timestamps, progress bars, metric
# dicts, shell prompts; two or more of them and the text is a paste, not a description
_LOG_LINE = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|File \"|\[rank\d+\]|\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|"
    r"\d\d/\d\d/\d{4} \d\d:\d\d|\[?(?:INFO|WARNING|ERROR|DEBUG)\b|[\w.-]+:\d+:\d+ \[\d+\] NCCL|\{'loss'|\$ |>>> |"
    r"\s*\d+%\|)|\d+(?:\.\d+)?(?:it/s|s/it)\]", re.M)

_STEP = re.compile(r"\b(?:step|iter(?:ation)?)\s*(?P<a>\d+)\b|\b(?P<b>\d+)\s*(?:steps|iterations|iters)\b|第\s*(?P<c>\d+)\s*步",
                   re.I)
_AFTER = re.compile(r"\bafter (?:about |~)?(?P<n>\d+) ?(?P<u>minutes?|mins?|hours?|h)\b|(?P<cn>\d+)\s*(?P<cu>分钟|小时)后",
                    re.I)

_DEFAULT_TIMEOUT = re.compile(r"\b(?:after|within|at|takes?|took)\s+(?:(?:about|exactly|around|roughly|approximately|almost|nearly|precisely|always) |~)?(?:30 ?min(?:ute)?s?|half an hour|1800 ?s(?:ec(?:onds)?)?)\b|"
                              r"30\s*分钟", re.I)
# words that say which memory ran out was the GPU's: without them "out of memory" / "OOM" / 报oom may be the host's
# RAM (the kernel's OOM killer, dataset packing and preprocessing) as well as CUDA's allocator (trial 14)
_GPU_MEMORY = re.compile(r"CUDA|\bGPU|显存|显卡|\bVRAM\b|video memory|OutOfMemoryError|Tried to allocate|\bNPU\b|\bHBM\b", re.I)
# a thing the user says they did NOT use or turn on ("没用流式加载", "did not use streaming", "not using packing",
# "without using deepspeed"; a bare "without" is left, as "stops without any error" names a symptom): the words after the negated verb, up to the end of the clause, name no symptom or phase of
# the run (trial 14 read "没用流式加载" as the loading phase). Only a negated use/enable verb is taken: a negation in
# an error's own words ("No space left", "Torch not compiled with CUDA", "does not require grad") is kept.
_NEGATED = re.compile(
    r"(?:\b(?:did(?:n't| not)|do(?:n't| not)|does(?:n't| not)|was(?:n't| not)|were(?:n't| not)|am not|are not|is not|"
    r"never)\s+(?:use|using|enable|enabling|turn on|set|have|run)\b|\bnot (?:using|enabling)\b|\bwithout using\b"
    r"|(?:没有?|未|不)(?:用|使用|开启|启用|打开|设置?))(?:\s+(?:the|a|an)\b)?"
    # the clause ends at punctuation, or where a new statement starts ("without deepspeed the loss is nan")
    r"(?:(?!\s(?:the|and|but|so|then|when|while|it|training|loss|after|before|during|at)\b|在|时|后|但|就)"
    r"[^,，.。;；:：!！?？\n])*", re.I)
# 内存 is the word for any memory: said of the cards ("GPU的内存情况", "一号卡", "每张卡", "显卡"), an "out of 内存"
# is the GPU's (a card merely counted, "多卡训练内存不足", is not: each process also loads the model into host RAM) (a DDP run holds a whole model copy per card, so more cards do not pool it); only the bare word
# is re-read, never one the user tied to the host (CPU/RAM/系统内存/the OOM killer)
_CARDS = re.compile(r"GPU|CUDA|显卡|显存|每(?:张|块)卡|\b(?:each|every) (?:card|device)\b|\bcards\b|加了?卡|[一二三四五六七八\d]+\s*号卡|卡的?(?:内存|占用)|\bVRAM\b", re.I)
_HOST_SAID = re.compile(r"CPU|\bhost\b|\bsystem\b|\bRAM\b|系统|主机|kill|杀", re.I)
_HOST_RAM = re.compile(r"\bRAM\b|\b(?:host|CPU|system) memory\b|系统内存|主机内存|\bhtop\b|\bfree -[ghm]\b", re.I)
_HOST_MECH = re.compile(r"offload|\bfork\w*|copy[- ]on[- ]write|\bCOW\b|\bDataLoader\s*(?:workers?|进程)|"
                        r"\bnum_workers\b|dataloader_num_workers", re.I)
_FAILED = re.compile(r"\bfail\w*|\bcrash\w*|\berror\w*|\bdies\b|\bdied\b|\bkilled\b|报错|失败|挂了|崩溃", re.I)


# the features/tokens mismatch quoted with no placeholder token ("tokens: 0, features 777")
_NO_PLACEHOLDER = re.compile(r"\btokens:\s*0\s*,\s*features:?\s*[1-9]", re.I)


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

    Returns ``{symptom, words, phase, phase_words, step, after, text, line, default_timeout, metric, memory}``: `symptom` one of disk-full, no-samples,
    nccl-error, image-tokens, native-crash, loss-scale, host-oom, killed, oom, cuda-error, no-update, nan, loss-zero, diverged,
    timeout, hang, stopped, version, error, interrupted
    (userwords_vocab.SYMPTOMS); `words` the text that named it; `phase` evaluation |
    save | tokenization | loading | end | start | None with `phase_words`; `step` the step number the words give (int) or
    None; `after` the duration the words give ("30 minutes") or None; `text` the description (first 300
    characters, one line); `metric` for nan: grad_norm when the words call the gradient norm non-finite,
    else loss (None for the other symptoms); `line` the 1-based line the symptom words are on; `default_timeout` whether the words
    give a failure after 30 minutes, the default collective timeout; `inferred` True when no symptom word was there and
    that duration alone made it a `timeout`; `memory` for oom: ``gpu`` when the words name the GPU's memory (CUDA,
    GPU, 显存, OutOfMemoryError...), else None, for "out of memory" alone does not say which. Environment, config and data blocks (pasteblocks.py) are blanked
    before anything is read, so their words never name a symptom and a title above them counts; so is what the
    user says they did not use (`_NEGATED`).
    """
    # a pasted launch command is what was run, not what happened (launchlines.py, trial 18: LlamaFactory#5864)
    text = blank_launch_lines(pasteblocks.blank_blocks(text)[0])
    if not looks_like_prose(text):
        return None
    shown = text
    # negated phrases blanked in place (same length: line numbers and offsets stay those of the file)
    text = _NEGATED.sub(lambda m: " " * len(m.group(0)), text)
    # the vocabulary's forms first; a second user's other forms of the same symptoms after (userwords_forms.py)
    found = vocab.first_symptom(text) or forms.first_symptom(text)
    if found is not None and found[0] == "error":
        found = forms.specific(text) or _quoted_after(text, found[1]) or found   # a more specific kind beside it
    if found is None:
        # no symptom word, but the paste ends on a datasets bar still at 0: where it stopped is the report
        lines = text.rstrip().splitlines()
        bar = vocab.BAR_AT_ZERO.search(lines[-1]) if lines else None
        if bar is not None:
            found = ("hang", vocab.BAR_AT_ZERO.search(text, len(text.rstrip()) - len(lines[-1])))
    if found is not None and found[1] is not None:
        symptom, m = found
    else:
        # a failure after exactly the default collective timeout: torch.distributed's default process-group
        # timeout and HF TrainingArguments.ddp_timeout are both 1800 s (torch/distributed/constants.py
        # default_pg_timeout; transformers training_args.py ddp_timeout)
        m = _DEFAULT_TIMEOUT.search(text)
        if m is None or not _FAILED.search(text):
            return None
        symptom = "named"
    # NaN said to show as a loss of 0 ("有些token会输出nan, 导致loss为0"): the logged loss is 0, and loss-stuck-zero's
    # reading is the one that covers non-finite values logged as 0
    if symptom == "nan" and vocab.loss_zero_said(text):
        symptom, m = "loss-zero", vocab.loss_zero_said(text)
    if symptom == "image-tokens" and _NO_PLACEHOLDER.search(text):
        symptom = "error"   # "tokens: 0": no placeholder at all, a data-format error, not a cut (mmcause.py)
    if symptom == "host-oom" and not _HOST_SAID.search(m.group(0)) and _CARDS.search(text) \
            and not _HOST_SAID.search(text):
        symptom = "oom"
    # the reverse: an "out of memory" that names the host's RAM and no GPU ("RAM climbs to 1.3 TB while loading the
    # dataset until the node runs out of memory", axolotl#2975's kind) is the host's
    # (or names what holds host RAM: CPU offload, forked DataLoader workers and their copy-on-write pages,
    # ms-swift#9687's kind)
    if symptom == "oom" and (_HOST_RAM.search(text) or _HOST_MECH.search(text)) and not _GPU_MEMORY.search(text) \
            and not _CARDS.search(text):
        symptom = "host-oom"
    out: dict[str, Any] = {"symptom": "timeout" if symptom == "named" else symptom, "inferred": symptom == "named",
                           "words": m.group(0).strip(), "phase": None, "phase_words": None,
                           "step": None, "after": None, "text": quote_text(shown),
                           "line": text.count("\n", 0, m.start()) + 1,
                           "default_timeout": bool(_DEFAULT_TIMEOUT.search(text))}
    # which value the words call non-finite: HF's Trainer logs as grad_norm what clip_grad_norm_ returned, which
    # is inf/nan for a step whose gradients overflowed (fp16's GradScaler then skips that step) while the loss
    # stays finite
    # which memory an "oom" names: gpu when the words say so, else None (unknown: GPU memory or host RAM)
    out["memory"] = ("gpu" if _GPU_MEMORY.search(text) or _CARDS.search(text) else None) if symptom == "oom" else None
    out["metric"] = ("grad_norm" if vocab.GRAD_BEFORE.search(text[max(0, m.start() - 24):m.start()]) else "loss") \
        if symptom == "nan" else None
    ph = vocab.first_phase(text) or forms.first_phase(text)
    if ph is not None:
        out["phase"], out["phase_words"] = ph[0], ph[1].group(0).strip()
    sm = _STEP.search(text)
    if sm:
        out["step"] = int(sm.group("a") or sm.group("b") or sm.group("c"))
    am = _AFTER.search(text)
    if am:
        out["after"] = am.group(0).strip()
    return out


# (any tag a paste's lines carry before it: torchrun's "[rankN]:", a Markdown quote, colour codes, Ray's worker, Docker
# Compose's service, Open MPI's tag; lineprefix.py reads them)
_TB_HEAD = re.compile(r"^[^\n]{0,80}?Traceback \(most recent call last\):", re.M)


def read_words_above_traceback(text: str) -> dict[str, Any] | None:
    """`read_words` of the words a user wrote above a pasted traceback (ms-swift#6392: "... checkpoints co-exist,
    causing the disk memory OOM" over a traceback cut before its exception), which the traceback's frame lines
    keep from reading as prose whole; None when there is no traceback, nothing above it, or no symptom there. The
    line numbers stay those of the file; ``above_traceback`` is set. Whether these words count beside the
    traceback is said.py's decision (only where the traceback's frames establish no cause)."""
    m = _TB_HEAD.search(text)
    if m is None or not text[:m.start()].strip():
        return None
    said = read_words(text[:m.start()])
    return {**said, "above_traceback": True} if said else None


# the catch-all error word closing its line with a colon ("...这一步时报错：", "it fails with the following error:"):
# the lines after it are the error as printed
_INTRODUCES = re.compile(r"\s*[:：]\s*(?:\n|$)")


def _quoted_after(text: str, m: re.Match[str]) -> tuple[str, re.Match[str]] | None:
    """The specific symptom (userwords_vocab.SYMPTOMS other than ``error``) of the error quoted below the words when
    the catch-all `m` ends its line with a colon (`_INTRODUCES`): "报错：" followed by the c10d store's "Socket
    Timeout" is a timeout said, not an error of unknown kind (round 12, Finetune-ChatGLM2-6B#13's kind). None
    otherwise."""
    if not _INTRODUCES.match(text, m.end()):
        return None
    for symptom, pat in vocab.SYMPTOMS:
        q = pat.search(text, m.end()) if symptom != "error" else None
        if q is not None:
            return symptom, q
    return None
