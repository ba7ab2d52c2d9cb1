"""Other forms of the symptoms of userwords_vocab.py: the words a second user picks for the same failure.

Found by the paraphrase yardstick of issue #25 (benchmarks/real_threads_paraphrase.py: the words-only dev cases said
another way), and written by KIND of phrasing, never from one paraphrase's text:

- a failure said with a verb the vocabulary lacked: "X fails to patch/start ...", "fails when/while/during ...",
  "does not work anymore", "not working", "stops: <the error>", "gives/shows/reports a ... error"; Chinese
  失败/崩了/挂了 after what was being run (训练, 微调, 运行, 保存 ...), 跑不起来, 跑不通, 训练不了, 无法训练, 用不了;
- an errno text quoted without its class (CPython's strerror texts, "[Errno 39] Directory not empty" of a rename
  onto a folder that is not empty);
- a release said to break a run without its version number ("errors after updating trl to the latest",
  "after installing vllm 0.5.0, training does not work");
- GPU memory said to run out in the progressive or with its device ("running out of GPU memory", "out of CUDA
  memory");
- a dataset "format error" said with words between ("custom dataset gives a format error");
- the end of training said as a verb ("when training finishes", "training ends with a crash", 训练跑完了).

Every entry is tried only after every symptom (phase) of userwords_vocab.py found nothing, except that a specific
symptom here (a dataset format error, a release that broke the run, GPU memory running out) replaces the
vocabulary's catch-all ``error`` (`specific`); a match right after a negation does not count (userwords_vocab.NEGATED).
"""

from __future__ import annotations

import re

from finetune_doctor.readers.runlogs.userwords_vocab import NEGATED

_I = re.I | re.A
_PKG = (r"(?:torch|pytorch|transformers|deepspeed|peft|accelerate|trl|vllm|datasets|flash[-_]?attn|bitsandbytes|"
        r"xformers|unsloth|triton|liger[-_ ]?kernel|megatron(?:-core)?|swift|ms-swift|llamafactory)")
# a failure said of any run: the verbs and their Chinese forms (失败 needs what was run before it: "检查失败" of a
# health check is not the run's)
_FAIL_EN = (r"\bfail(?:s|ed|ing)?\s+(?:to\s+(?!converge|learn|improve|decrease|drop|go\b|fit\b)[a-z]+|when|while|during|at|on|"
            r"right|immediately|as soon as)\b|"
            r"\b(?:does(?:n't| not)|do(?:n't| not)|did(?:n't| not)|no longer|won't|can't|cannot|could(?:n't| not))\s+"
            r"(?:work|train)(?:s|ing)?\b(?!\s+(?:with|on|under|when)\b)|\bnot working\b|\bstopped working\b|"
            r"\b(?:stops?|stopped|dies|died|aborts?|aborted|exits?|exited|quits?)\b[^.\n。:：]{0,30}?[:：]\s*\S|"
            r"\b(?:gives?|gave|giving|shows?|showed|reports?|reported|prints?|printed|returns?|returned)\s+(?:me\s+)?"
            r"(?:an?\s+|the\s+|this\s+|that\s+|following\s+|some\s+)?(?:[\w-]+\s+){0,2}?(?:error|exception)s?\b")
_FAIL_ZH = (r"(?:训练|微调|运行|启动|加载|跑|执行|保存|推理|预测|评估|导出|合并)\S{0,12}?(?:失败|崩了|挂了|崩掉|挂掉|炸了)|"
            r"跑不起来|跑不通|训练不了|跑不了|(?:无法|不能)(?:正常)?(?:训练|运行|启动|跑)|用不了|崩了")
# CPython's strerror texts users quote without the OSError head (Modules/errnomodule.c names; glibc's texts)
_ERRNO = r"\[?Errno \d+\]?|\bDirectory not empty\b|\bFile exists\b|\bResource temporarily unavailable\b|\bIs a directory\b"

SYMPTOMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("no-samples", re.compile(
        r"\b(?:dataset|data)\b[^.\n]{0,40}?\b(?:format (?:errors?|is wrong|is invalid|problems?)|"
        r"(?:wrong|invalid|bad|incorrect) format)\b|数据\S{0,8}格式(?:错误|不对|有误|有问题)", _I)),
    ("oom", re.compile(
        r"\bout of (?:GPU|CUDA|video|device) memory\b|\brunning out of (?:GPU |CUDA |video )?memory\b|"
        r"\b(?:VRAM|(?:GPU|CUDA|video) memory)\s+(?:is\s+)?(?:not enough|insufficient|runs? out)\b|显存(?:不太够|不够用|告急)", _I)),
    ("version", re.compile(
        r"\b(?:fail\w*|br(?:eaks?|oke|oken)|crash\w*|errors?|stopped working)\s+(?:after|since|when|once)\s+"
        r"(?:upgrading|updating|installing|downgrading|bumping)\s+(?:to\s+)?" + _PKG + r"\b|"
        r"\b(?:after|since|once)\s+(?:installing|upgrading|updating|installed|upgraded|updated)\s+" + _PKG +
        r"\b[^.\n]{0,60}?(?:\bfail\w*|\bbr(?:eaks?|oke|oken)\b|\bcrash\w*|\berrors?\b|"
        r"(?:does(?:n't| not)|no longer|won't|can't|cannot) (?:work|train))|"
        r"(?:装了?|安装了?|升级了?|更新了?|换了?)\s*" + _PKG + r"[^，,。\n]{0,20}?(?:之?后|以后)\S{0,10}?"
        r"(?:跑不起来|跑不通|报错|失败|出错|崩溃|崩了|不能|无法|用不了)", _I)),
    ("error", re.compile(_ERRNO)),
    ("error", re.compile(_FAIL_EN + "|" + _FAIL_ZH, _I)),
)

PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("end", re.compile(
        r"\bwhen (?:the )?training (?:finishes|ends|is (?:done|finished|over)|completes)\b|"
        r"\b(?:training|the run)\s+(?:finish(?:es|ed)|ends|ended|complet(?:es|ed)|is done|is over)\b|"
        r"\bafter (?:the )?training (?:finishes|ends|is done|completes)\b|"
        r"训练(?:都)?(?:完成|跑完|完)(?:了|后|之后|时|的时候)|跑完(?:了|后|之后)", _I)),
)


def _first(table: tuple[tuple[str, re.Pattern[str]], ...], text: str) -> tuple[str, re.Match[str]] | None:
    for name, pat in table:
        for m in pat.finditer(text):
            if not NEGATED.search(text[max(0, m.start() - 24):m.start()]):
                return name, m
    return None


def first_symptom(text: str) -> tuple[str, re.Match[str]] | None:
    """(symptom, match) of the first entry of `SYMPTOMS` found in `text` and not negated, or None; the symptoms are
    those of userwords_vocab.SYMPTOMS. Only called when that vocabulary found none."""
    return _first(SYMPTOMS, text)


def specific(text: str) -> tuple[str, re.Match[str]] | None:
    """(symptom, match) of the first entry of `SYMPTOMS` other than the catch-all ``error`` found in `text`, or
    None: called when userwords_vocab's reading is that catch-all ("... throws a format error at startup", "升级了X之后
    就报错了"), since a dataset format error, a release that broke the run or GPU memory running out says more than
    "an error"."""
    return _first(tuple(e for e in SYMPTOMS if e[0] != "error"), text)


def first_phase(text: str) -> tuple[str, re.Match[str]] | None:
    """(phase, match) of `PHASES` in `text`, or None; only called when userwords_vocab.PHASES found none."""
    return _first(PHASES, text)
