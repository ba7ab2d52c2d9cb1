"""NaN at the first log read, with nothing healthy before it: whether that log is the run's first, what the
settings are known to be, and fp16 on a model pre-trained in bf16 as the cause it names first.

A paste that starts mid-run (LlamaFactory#6286: the first line is step 70 of 6249, no config given) shows no
healthy log before its first NaN, yet says nothing of the steps before it; it is "the first step in the paste",
not the run's first. The run's first logged step is step ``logging_steps`` (HF Trainer logs when
``global_step % logging_steps == 0``, trainer.py ``_maybe_log_save_evaluate``) or step 1 with
``logging_first_step``; a first log later than that (or, without a config, later than step 1) starts mid-run.
fp16 training of a family pre-trained in bf16 (arch.BF16_FAMILIES; GLM-4's maintainers fine-tune it in bf16)
overflows fp16's maximum of 65504 in its activations: where the config or log says fp16 and the model is such a
family, that is the cause and training in bf16 the fix (rule fp16-on-bf16-model-confirmed states the evidence).
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.analyzers.postmortem.said import _BF16, _FP16
from finetune_doctor.arch import BF16_FAMILIES
from finetune_doctor.evidence import Evidence

# (is the first log the run's first?, are the settings known?) -> how the cause opens
_OPENING = {
    (True, True): "NaN from the first logged step with ordinary settings",
    (True, False): "NaN from the first logged step (no config given: the settings are not known)",
    (False, True): "NaN from the first step in the paste (step {st}; the steps before it are not in the logs read), "
                   "with ordinary settings",
    (False, False): "NaN from the first step in the paste (step {st}; the steps before it are not in the logs "
                    "read, and no config was given)",
}
_KINDS = ("usually the attention kernel or the library stack (LLaMA-Factory #2916, #9631, #7263, #3353), or fp16 on "
          "a bf16 model")


def run_first_log(st: int | None, cx: RunContext) -> bool:
    """Whether step `st` (the first log read) can be the run's first logged step: unknown (None), step 1, or at
    most the config's ``logging_steps``."""
    if st is None or st <= 1:
        return True
    every = cx.cfg.get("logging_steps")
    return isinstance(every, (int, float)) and not isinstance(every, bool) and st <= every


# a line as a program prints it (a bracketed tag, a metric dict, a progress bar)
_PROGRAM = re.compile(r"^\s*[\[{(]|\{'|\d+/\d+ \[|s/it\b|it/s\b|^\s*(?:Traceback|File \")|^[A-Z]\d{4} ")


def _head(text: str) -> str:
    """The user's lines above a paste's first line of program output (`_PROGRAM`), at most 5 lines."""
    head = []
    for line in text.splitlines()[:5]:
        if _PROGRAM.search(line):
            break
        head.append(line)
    return " ".join(head)


def words_family(ev: Evidence) -> str | None:
    """The bf16-pre-trained family (arch.BF16_FAMILIES) the user's words beside the logs name together with fp16
    (``FileEvidence.said`` text, else the lines above a paste's first line of output; said.py's `_FP16`, not
    beside bf16), or None."""
    for f in ev.files:
        text = str((f.said or {}).get("text") or "") or _head(f.text or "")
        if text and _FP16.search(text) and not _BF16.search(text):
            # the tool's own name is not the Llama family; "GLM-4" and "glm4" alike
            low = re.sub(r"llama[-_ ]?factory", " ", text.lower()).replace("-", "")
            fam = next((m for m in BF16_FAMILIES if re.search(r"(?<![a-z])" + m.replace("_", ""), low)), None)
            if fam:
                return fam
    return None


def from_start(st: int | None, cx: RunContext, fp16: bool, said_family: str | None = None) -> tuple[str, str, str]:
    """(cause, text, fix title) of ``ev.nan`` for NaN at the first log read with nothing healthy before it
    (`st`: its step or None; `fp16`: the run computes in fp16, from the config or the log; `said_family`: a
    bf16 family the words name with fp16, `words_family`). Cause ``fp16-bf16`` when fp16 meets a model
    pre-trained in bf16 (`RunContext.model_bf16`, else the words), else ``from-start``."""
    opening = _OPENING[(run_first_log(st, cx), bool(cx.cfg))].format(st=st)
    bf16_model, why = cx.model_bf16()
    if (fp16 and bf16_model) or said_family:
        why = why if fp16 and bf16_model else f"your words name fp16 and {said_family}, a family pre-trained in bf16"
        return "fp16-bf16", (f"{opening}: fp16 training of a model pre-trained in bf16 ({why}; its activations "
                             "exceed fp16's maximum of 65504, see fp16-on-bf16-model-confirmed)"), \
            "train in bf16 instead of fp16"
    return "from-start", f"{opening}: {_KINDS}", "switch the attention kernel"
