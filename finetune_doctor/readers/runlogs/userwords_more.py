"""More words of the symptoms of userwords_vocab.py, each with the place it is tried at (issue #25, round 14).

userwords_vocab.SYMPTOMS is tried in order and the first symptom whose words occur wins, so where a form stands is
its precedence. Forms appended at the end of that table lose to every catch-all before them ("RAM usage grows
until the machine crashes" read as an error, not the host's memory). Here each added form names the symptom it
belongs to and is tried right after that symptom's first entries, before any other symptom (``PLACED``: the one
declared table of where the forms added since round 14 stand); a few stand before their anchor where the kind must
outrank a weaker reading.

The forms, by kind (found by the round-14 yardstick, fixtures/postmortem/paraphrases_round14.py, and written by
kind, not from one sentence):

- (MOVED) NCCL's transport errors after every rank-ending symptom: said beside a rank's own failure, that failure is
  the cause (see `MOVED`).
- interrupted (rule stopped-from-outside): a sender named: SIGTERM (signal 15: schedulers, ``kill``, Kubernetes'
  grace period; torchelastic's own "closing signal SIGTERM" to the other ranks after a failure is not one), SIGINT /
  KeyboardInterrupt / Ctrl-C, a job pre-empted or cancelled, Slurm's "CANCELLED ... DUE TO TIME LIMIT" (slurmstepd),
  the session the run hung on closed (ssh, tmux, a terminal; SIGHUP), a pod evicted, torchelastic's SignalException
  named alone. Tried before ``stopped`` (a run
  said to end with no error: the sender is what the words add) and after every specific symptom.
- oom: GPU memory said to be tight for the fresh run beside a resume said to fail (round 12, transformers#22123's
  kind: the optimizer state loaded onto the GPU at the resume).
- host-oom: host RAM said to grow or leak ("RAM keeps growing", "内存一直涨", "memory leak ... RAM"); memory use said
  abnormal beside CPU offload (round 11, DeepSpeed#4380's kind).
- no-update: the loss said to stay constant, a model said not to learn at all (round 11, accelerate#3256's kind).
- stopped: a stop, then "no error", in the Chinese order (round 11, LlamaFactory#815's kind).
- killed: the shell's "Killed" anywhere in a sentence ("训练时 Killed", "it just says Killed"), case-sensitive as
  bash prints it.
- hang: nothing printed any more, GPU utilisation said to drop to 0, waiting forever or at a barrier, 没有任何反应.
- nccl-error: NCCL with a failure word a few characters on ("NCCL 初始化失败", "NCCL init failed"; not a timeout,
  which is nccl-timeout's), NCCL's socket and InfiniBand transports named with an error ("NET/Socket", "NET/IB").
- version: a package said too old or too new, or not supported at a release ("transformers too old for gemma3",
  "torch 2.6 不支持"), a release said to fix or to work where another fails ("pip install transformers==4.49.0 fixed
  it").
- loss-zero: a loss said to change to 0 with a clause between (round 11, ChatGLM-Efficient-Tuning#267's kind).
- error: a thing the run could not do ("could not save the adapter", "unable to load"), a title that ends on the word
  error/bug after what was run ("llamafactory 0.9.2 with transformers 4.48 error").
"""

from __future__ import annotations

import re

_I = re.I | re.A
_PKG = (r"(?:torch|pytorch|transformers|deepspeed|peft|accelerate|trl|vllm|datasets|flash[-_]?attn|bitsandbytes|"
        r"xformers|unsloth|triton|liger[-_ ]?kernel|numpy|llamafactory|llama[-_]factory)")

SENT_STOP = re.compile(
    # (Lightning's "Received SIGTERM: N handlers registered, continuing" reports handlers, not a stop)
    r"(?<!closing signal )\bSIGTERM\b(?!:\s*\d+ handlers)|\bsignal 15\b|\bSIGINT\b|\bKeyboardInterrupt\b|\bCtrl[- +]?C\b|"
    r"\bpre-?empt(?:ed|ion)\b|\bDUE TO TIME LIMIT\b|"
    r"\b(?:hit|reached|exceeded) (?:the |its |my )?(?:slurm |job |wall[- ]?(?:clock|time) )?time ?limit\b|"
    # (a cancel with its sender or reason: "the job was CANCELLED AT the end of the queue window" names neither)
    r"\b(?:job|run|training) (?:was |got )?cancell?ed (?:by|due to|because)\b|\bscancel(?:led|ed)?\b|被(?:调度|集群|平台)\S{0,6}(?:抢占|取消|终止)|"
    r"\b(?:ssh|terminal|tmux|screen|remote)\b(?: session| connection)?\s+(?:was |got )?(?:disconnect\w*|dropped|closed|"
    r"lost|timed out|died)|\b(?:closed|lost) (?:the |my )?(?:ssh|terminal|session|connection)\b|\bSIGHUP\b|"
    # torchelastic's SignalException named alone (elastic/multiprocessing/api.py: the agent's handler of SIGTERM,
    # SIGINT, SIGHUP, SIGQUIT raises it; its "Process N got signal: S" form is a log line, logfailures.py)
    r"\bSignalException\b|\bevict(?:ed|ion)\b|(?:ssh|终端|远程连接|连接|会话)\S{0,6}(?:断开|断了|掉线|关闭|关了)|关(?:掉|闭)了?终端|驱逐", _I)

RAM_GROWS = re.compile(
    r"\b(?:RAM|CPU memory|host memory|system memory)\b(?: usage)?\s+(?:keeps?\s+|kept\s+|is\s+|was\s+)?"
    r"(?:grow\w*|increas\w*|climb\w*|ris(?:es|ing)|rose|explod\w*|leak\w*|balloon\w*)|"
    r"\bmemory leak\b[^.\n。]{0,40}\b(?:RAM|CPU|host)\b|\b(?:RAM|CPU|host)\b[^.\n。]{0,40}\bmemory leak\b|"
    r"(?<!显)(?<!GPU)(?<!卡)(?:系统|主机|CPU\s?)?内存\S{0,2}(?:一直|持续|不断)(?:增长|上涨|涨|增加)|(?<!显)(?<!GPU)内存泄[漏露]", _I)

KILLED_WORD = re.compile(r"(?<![A-Za-z])Killed\b(?!\s+process\s+\d+\s+\(\S+\)\s+total-vm)", re.A)

HANG_MORE = re.compile(
    r"\bnothing (?:is |gets )?(?:printed|logged|output)\b|\bno (?:more )?output\b[^.\n]{0,20}\bGPU\b|"
    r"\b(?:GPU )?util(?:i[sz]ation)?\s+(?:drops?|dropped|falls?|fell|goes|went|stays?|is)\s+(?:down\s+)?(?:to\s+)?0\s?%?(?![\d.])|"
    r"\b(?:keeps?|kept|still|forever) waiting\b|停留在(?:这|此)|\bwait(?:s|ing|ed)? forever\b|\bwait(?:s|ing)? (?:at|in|on) "
    r"(?:the )?(?:dist\.|torch\.distributed\.)?barrier\b|没(?:有)?任何反应|一直没(?:有)?动静", _I)

NCCL_MORE = re.compile(
    r"\bNCCL\b(?:(?!time|超时)[^.\n。]){0,16}?(?:失败|出错|报错|错误|异常|\bfail(?:s|ed|ure)?\b|\berrors?\b)|"
    r"\bNET/(?:Socket|IB)\b[^.\n。]{0,40}?(?:\berrors?\b|\bfail\w*|\bclosed\b|\brefused\b|\breset\b)", _I)

VERSION_MORE = re.compile(
    _PKG + r"(?:\s*(?:==|=)?\s*v?\d[\w.]*)?\s+(?:is\s+|was\s+)?(?:too|way too)\s+(?:old|new|recent|low|high)\b|"
    + _PKG + r"(?:\s*(?:==|=)?\s*v?\d[\w.]*)?\s*(?:版本)?\s*(?:太|过)(?:新|旧|老|低|高)|"
    + _PKG + r"\s*(?:==|=)?\s*v?\d+(?:\.\d+)+\s*(?:还)?不支持|"
    r"(?:\binstall(?:ing|ed)?\s+|\bdowngrad\w*\s+(?:to\s+)?|\busing\s+|换成?|装了?|降到|降级到)\s*" + _PKG
    + r"\s*(?:==|=)?\s*v?\d[\w.]*\s*(?:\bfix(?:es|ed)\b|\bsolv(?:es|ed)\b|\bworks?\b|\bworked\b|就好了|就可以了|解决了?)", _I)

ERROR_MORE = re.compile(
    r"\b(?:could(?:n't| not)|can(?:'t|not)|unable to|fail(?:s|ed)? to)\s+(?:save|load|resume|launch|start|import|merge|"
    r"export)\b|"
    r"^\s*(?:\[[^\]\n]{1,20}\]\s*)?[^\n]{3,100}?(?<!no )(?<!any )(?<!without )\b(?:errors?|bug)\s*[.!?。！？]*\s*$",
    _I | re.M)

# (session 16) the shell's report of a program not on its PATH, as each shell prints it: dash "/bin/sh: 1: X: not
# found", bash "bash: X: command not found", zsh "zsh: command not found: X" (msgcause.py `_not_on_path` reads it);
# and a failure said as a raised exception or a fatal issue with no class ("Exception raised with trainer + FSDP",
# "Fatal issues when using DeepSpeed Stage 3 only")
NOT_ON_PATH = re.compile(r"(?:^|\s)(?:/bin/)?(?:ba|da|z)?sh: (?:line )?\d*:? ?[\w.+-]+: (?:command )?not found\b|"
                         r"\bcommand not found: [\w.+-]+|\b[\w.+-]+: command not found\b", re.M | re.A)
FAILURE_NAMED = re.compile(r"^\s*(?:\[[^\]\n]{1,20}\]\s*)?(?:an? )?(?:exception|fatal (?:issues?|errors?|failures?))"
                           r"\s+(?:raised|thrown|occurs?|when|with|during|while|in)\b", _I | re.M)

# a loss said to change to 0 with a clause between ("loss先在2左右上下波动，然后突然变成0", "the loss hovered around
# 1.8, then dropped to 0"): the verb of change before the 0 is what the plain form's 12 characters miss
LOSS_TO_ZERO = re.compile(
    r"(?:loss|损失)(?:[^\n.。]|\.\d){0,40}?(?:变成|变为|降到|降为|掉到|到了|\bdrop(?:s|ped)? to|\bfell to|\bfalls? to|"
    r"\bwent to|\bgoes to|\bbecame|\bbecomes)\s*(?:0(?:\.0+)?(?![\d.%])|zero\b|零)", _I)

# a stop and then "no error" in the Chinese order ("存储checkpoint后任务停掉，无报错", "训练到一半就退出了，也没有报错")
STOPPED_MORE = re.compile(
    r"(?:停掉|停止|停了|中断|退出|结束|挂掉|断掉|没了)了?\s*[，,、]?\s*(?:也|但是?|并且)?\s*(?:没有|无|没)(?:任何)?(?:报错|错误|error)",
    _I)

# host memory said to be used abnormally beside CPU offload (DeepSpeed's ZeRO-Offload keeps the optimizer states, and
# ZeRO-3's offload the parameters, in host RAM): "abnormal memory usage with zero3 ... offload", "offload 时内存占用异常"
_ABNORMAL = (r"(?:\b(?:abnormal|excessive|huge|unusual|enormous)\s+(?:CPU |host |system )?memory\s+(?:usage|consumption|use)\b|"
             r"内存(?:占用|消耗|使用)(?:异常|过大|过高|太大|太高|很大)|大量内存消耗)")
MEMORY_ABNORMAL = re.compile(_ABNORMAL + r"[^.\n。?？]{0,60}?offload|offload[^.\n。?？]{0,60}?" + _ABNORMAL, _I)

# a model said not to learn at all: the loss said to stay constant across steps or epochs, or learning said absent
# ("loss stays constant for each epoch", "the model learns nothing", "loss 一直不变"); "loss not decreasing" is not
# one (slow learning, a low learning rate)
NO_UPDATE_MORE = re.compile(
    r"\bloss(?:es)?\s+(?:stays?|stayed|remains?|remained|is|was|keeps?|kept)\s+(?:exactly\s+|completely\s+|totally\s+)?"
    r"(?:constant|the same|unchanged|identical)\b|\b(?:completely|totally)\s+not\s+learning\b|\bnot learning at all\b|"
    r"\b(?:does(?:n't| not)|did(?:n't| not)) learn (?:at all|anything)\b|\blearns? nothing\b|"
    r"(?:loss|损失)\s*(?:值)?\s*(?:一直|始终|完全|根本)(?:都)?(?:不变|没有?变化?|保持不变)", _I)

# GPU memory said to be tight for the fresh run beside a resume said to fail ("trains fine with <1GB of memory to
# spare ... when loading from checkpoint I run into issues loading optimizer states"; either order): the resume's
# extra copies are what no longer fit (rule cuda-oom's resume phase)
_TIGHT = (r"(?:<\s*\d+(?:\.\d+)?\s*[GM]i?B (?:of (?:GPU |video )?(?:memory|VRAM|RAM) )?(?:to spare|left|free)|"
          r"\bbarely fits?\b|\bjust fits?\b|显存(?:刚好|勉强|刚刚)(?:够|够用|放得下))")
_RESUMED = (r"(?:\bload\w* (?:from |the |a )*checkpoints?\b|\bresum\w*|resume_from_checkpoint|\boptimizer states?\b|"
            r"断点续训|恢复训练|续训)")
RESUME_TIGHT = re.compile(_TIGHT + r"[\s\S]{0,300}?" + _RESUMED + r"|" + _RESUMED + r"[\s\S]{0,300}?" + _TIGHT, _I)

# (where, anchor symptom, symptom, pattern): "after" tries the pattern right after the anchor's first run of entries
# (the forms it already had keep their reading, and no other symptom comes between), "before" right before it
PLACED: tuple[tuple[str, str, str, re.Pattern[str]], ...] = (
    ("before", "stopped", "interrupted", SENT_STOP),   # the sender outranks "ended with no error"
    ("after", "host-oom", "host-oom", RAM_GROWS),
    ("after", "oom", "oom", RESUME_TIGHT),
    ("after", "host-oom", "host-oom", MEMORY_ABNORMAL),
    ("after", "stopped", "stopped", STOPPED_MORE),
    ("after", "no-update", "no-update", NO_UPDATE_MORE),
    ("after", "killed", "killed", KILLED_WORD),
    ("after", "hang", "hang", HANG_MORE),
    ("after", "nccl-error", "nccl-error", NCCL_MORE),
    ("after", "version", "version", VERSION_MORE),
    ("after", "loss-zero", "loss-zero", LOSS_TO_ZERO),
    ("before", "error", "error", ERROR_MORE),   # before the first catch-all error form, which is no more specific
    ("before", "error", "error", NOT_ON_PATH),  # the shell's own words, tried before any other error form
    ("after", "error", "error", FAILURE_NAMED),
)


# (symptom, anchor): the symptom's first run of entries is tried right after the anchor's first run instead of where
# the vocabulary put it. NCCL's transport errors are what the OTHER ranks print when one rank dies (NCCL's "remote
# process exited or there was a network error", ncclRemoteError): said beside a rank's own failure ("NCCL error
# after CUDA out of memory on rank 3", "segfault then NCCL error on the other ranks") that failure is the cause, so
# every rank-ending symptom (a native crash, the host's memory, a kill, the GPU's memory) is tried before NCCL's.
# cuda-error stays after it: NCCL's "unhandled cuda error" is NCCL's own wording.
MOVED: tuple[tuple[str, str], ...] = (
    ("nccl-error", "oom"),
)


def _run_end(out: list[tuple[str, re.Pattern[str]]], name: str) -> tuple[int, int]:
    """(start, end) of the first run of entries of symptom `name` in `out`; StopIteration when there is none."""
    start = next(i for i, (n, _) in enumerate(out) if n == name)
    end = start
    while end < len(out) and out[end][0] == name:
        end += 1
    return start, end


def place(table: tuple[tuple[str, re.Pattern[str]], ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """`table` (userwords_vocab.SYMPTOMS) with the moves of `MOVED` made, then each entry of `PLACED` inserted
    before the first entry of its anchor symptom, or after that entry and the ones of the same symptom right behind
    it; an anchor the table lacks is an error (a renamed symptom must not drop its forms silently)."""
    out = list(table)
    for name, anchor in MOVED:
        start, end = _run_end(out, name)
        run = out[start:end]
        del out[start:end]
        at = _run_end(out, anchor)[1]
        out[at:at] = run
    for where, anchor, symptom, pat in PLACED:
        at = next(i for i, (name, _) in enumerate(out) if name == anchor)
        if where == "after":
            while at < len(out) and out[at][0] == anchor:
                at += 1
        out.insert(at, (symptom, pat))
    return tuple(out)
