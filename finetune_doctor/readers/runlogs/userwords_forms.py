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
    # (round 2 of the yardstick: set 2's misses, by kind)
    # machines or nodes counted in Chinese ("两台机器", "三个节点") with an error: multi-node, the network lead
    ("nccl-error", re.compile(r"(?:[两二三四五六七八2-9]|多|几)\s*(?:台|个)\s*(?:机器|服务器|节点|主机)[^。\n]{0,20}?"
                              r"(?:报错|出错|错误|失败)")),
    # Chinese words for a run that stopped moving (froze, went numb): a hang
    ("hang", re.compile(r"冻住|僵住|假死|停滞|一动不动")),
    # releases said incompatible with words between ("torch and deepspeed releases are incompatible", 版本冲突)
    ("version", re.compile(r"\b(?:versions?|releases?)\b[^.\n]{0,20}?\b(?:are |is )?(?:incompatible|not compatible|"
                           r"mismatch(?:ed)?)\b|\bincompatible (?:versions?|releases?)\b|版本\S{0,6}(?:不兼容|不匹配|冲突)", _I)),
    ("error", re.compile(
        # an exception class in brackets after its message ("... not found in the base model (ValueError)")
        r"\((?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\)|"
        # "<what was run> error" as the title ("sft training error", "deepspeed error"), not a metric's error
        r"(?i:\b(?:sft|dpo|ppo|kto|grpo|orpo|pretrain\w*|training|train|fine[- ]?tun\w*|finetun\w*|lora|qlora|"
        r"deepspeed|fsdp|launch|startup|runtime)\s+errors?\b(?!\s+(?:rate|bars?|analysis|metric)))|"
        r"(?:训练|微调|运行|启动)(?:时|的时候)?(?:出现|发生)?(?:了)?错误|"
        # 报 right before a quoted message ("时报 `ddp_find_unused_parameters` needs ...", "会报 'xxx'")
        r"报\s*[:：]?\s*[`'\"“‘]|"
        # a named argument or key said missing ("token_type_ids missing when ...", "missing key 'label'"): an
        # identifier (snake_case or quoted), not a plain word ("something missing in the output" is no error)
        r"(?i:(?:[`'\"]\w+[`'\"]|\b[a-z]+_[a-z_]+\b)\s+(?:is\s+|are\s+)?missing\b|\bmissing\s+(?:required\s+)?"
        r"(?:argument|key|field|keyword|column)s?\b)|"
        # message fragments only one raise site prints, quoted without their class: peft's tuners_utils
        # "Target modules {...} not found in the base model", accelerate's FSDP auto wrap "Could not find the
        # transformer layer class to wrap in the model" (utils/dataclasses.py), LLaMA-Factory's hparams parser
        # "... needs to be set as False for LoRA in DDP training" / "Please specify `max_steps` in streaming mode"
        r"\bnot found in the base model\b|\bCould not find the transformer layer class to wrap\b|"
        r"\bneeds to be set as False for LoRA\b|\bPlease specify `?max_steps`? in streaming mode\b")),
    # (R1 of rounds 1-6, by kind)
    # a library's version requirement quoted without its exception class: the check's own words (transformers
    # utils/import_utils.py "you need flash_attn package version to be greater or equal than ... Detected version",
    # utils/versions.py "... is required for a normal functioning of this module, but found ...")
    ("version", re.compile(
        r"\b(?:need|needs|requires?|required)\b[^.\n]{0,50}?\bversion\b[^.\n]{0,12}?\bto be\s+(?:greater|higher|at least)|"
        r"\bDetected version\s+\d|\bis required for a normal functioning\b|\brequired\b[^.\n]{0,60}?\bbut found\s+[\w.-]+==\d",
        _I)),
    # 报/报错 right before an English message quoted without quotes or class ("但是报 you need ... ", "报错 Target
    # modules ... not found"): three English words in a row after it
    ("error", re.compile(r"报(?:错)?\s*[:：]?\s*[A-Za-z][\w.-]*\s+[A-Za-z][\w.-]*\s+[A-Za-z][\w.-]*")),
    # (set 3's leftovers of rounds 7-9, by kind; tested in other wordings)
    # multi-node said as machines, servers or hosts in English ("multi machine", "multi-server", "more than one
    # machine") with a failure: the vocabulary's multi-node reading (the network between ranks), and not where the
    # words quote the exception (its reading says more)
    ("nccl-error", re.compile(
        r"(?:\bmulti[- ]?(?:machines?|servers?|hosts?)\b|\bmore than one (?:machine|node|server|host)\b|"
        r"\bacross (?:machines|servers|hosts)\b)[^.\n。]{0,40}?(?:\berrors?\b|\bfail\w*|\bcrash\w*)"
        r"(?![^\n]{0,60}(?-i:Error|Exception)\b)", _I)),
    # GPU memory said to blow up ("blows up GPU memory", "VRAM blew up"): the idiom for running out of it
    ("oom", re.compile(
        r"\b(?:blows?|blew|blown|blowing)\s+up\s+(?:the\s+|my\s+|all\s+(?:the\s+)?)?(?:GPU|CUDA|video|VRAM)\b|"
        r"\b(?:VRAM|(?:GPU|CUDA|video)\s+memory)\s+(?:usage\s+)?(?:blows?|blew|blown|blowing)\s+up\b", _I)),
    ("error", re.compile(
        # an exception class typed with a lower-case first letter and its colon ("valueError: ...", "keyError:")
        r"\b[a-z][a-z]*(?:[A-Z][a-z]+)*(?:Error|Exception)\s*[:：]|"
        # an exception class followed by its quoted value with no colon ("KeyError 'label'")
        r"\b(?:[A-Z][a-z]+)+(?:Error|Exception)\s+[`'\"‘“][^`'\"’”\n]{1,80}[`'\"’”]")),
    # (round 14) an exception class named mid-sentence with where it was raised ("FileNotFoundError at checkpoint
    # save", "ValueError when saving with zero3", "KeyError during eval"): a crash the words place ("in" is left
    # out: "see ChildFailedError in the docs" names no failure)
    ("error", re.compile(
        r"\b(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\s+(?i:at|on|upon|when|while|during|after|before|whil)\s+\S")),    # (R2 of rounds 1-6, by kind) an exception message pasted alone, with neither its class nor a failure word:
    # the library register of an error, not a user's sentence - CPython's call-signature TypeErrors
    # (Objects/call.c, Python/getargs.c: "takes N positional arguments but M were given", "missing N required
    # positional argument", "got multiple values for argument"), a capability refused ("X is not available, but is
    # needed", "only supports <hardware> or newer"), a config equation that does not hold ("is not equal to a * b"),
    # transformers' "Asking to <do> but ..." family (tokenization_utils_base.py), torch's "Expected to have finished
    # reduction" (DDP reducer) and safetensors' "contained shared tensors" (one raise site each)
    ("error", re.compile(
        r"\btakes \d+ positional arguments? but \d+ (?:was|were) given\b|"
        r"\bmissing \d+ required (?:positional |keyword-only )?arguments?\b|\bgot multiple values for (?:keyword )?argument\b|"
        r"\bis not available,? but (?:it )?is (?:needed|required)\b|"
        r"\bonly supports? (?:[\w.-]+ ){1,4}(?:or newer|or later|or above|or higher)\b|"
        r"\bis not equal to\b[^.\n]{0,80}?\d\s*[*x×]\s*\d|"
        r"\bAsking to [a-z]+\b[^.\n]{0,60}?\b(?:but|while)\b|"
        r"\bExpected to have finished reduction\b|\bcontained shared tensors\b")),
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
