"""The vocabulary of readers/runlogs/userwords.py: which words of a short description name which symptom and phase.

Kept apart from the reader so that it can grow by input family (English and Chinese phrasings of the same failure)
without touching the reading logic. Every symptom here is one a postmortem rule already means (its `docs:` say so);
the words are those the tools themselves print and users repeat in issue titles:

- disk-full: errno ENOSPC's "No space left on device" / "[Errno 28]", EDQUOT's "Disk quota exceeded", torch's
  PytorchStreamWriter failure (caffe2/serialize/inline_container.cc); 磁盘/硬盘/存储空间 满/不足.
- nccl-error: NCCL's result names (nccl src/misc/utils.cc ncclGetErrorString: "unhandled system error",
  "unhandled cuda error", "internal error", "remote process exited or there was a network error"), its bootstrap
  "socketFinalizeAccept" (src/misc/socket.cc), ProcessGroupNCCL's "NCCL error in:" (torch/csrc/distributed/c10d).
- image-tokens: transformers' multimodal models' "Image features and image tokens do not match: tokens: N, features
  M" (e.g. models/qwen2_vl/modeling_qwen2_vl.py get_placeholder_mask), "image tokens 不匹配".
- native-crash: bash's "Segmentation fault (core dumped)" / "Bus error" / "Illegal instruction" / "Floating point
  exception" (the strsignal texts of SIGSEGV, SIGBUS, SIGILL, SIGFPE; "段错误 (核心已转储)" in a Chinese locale),
  CPython's "Fatal Python error: Segmentation fault" (Python/faulthandler.c); 段错误, 总线错误, 非法指令.
- cuda-error: cudaGetErrorString's "an illegal memory access was encountered", "device-side assert triggered",
  "unspecified launch failure", "misaligned address", "no kernel image is available" (cuda_runtime_api.h), cuBLAS
  and cuDNN status names (CUBLAS_STATUS_*, CUDNN_STATUS_*); 非法内存访问.
- loss-scale: DeepSpeed's fp16 loss scaler ("Current loss scale already at minimum - cannot decrease scale anymore",
  "Grad overflow on iteration", "OVERFLOW!": deepspeed/runtime/fp16/loss_scaler.py, fused_optimizer.py), "fp16
  overflow", loss scale 降到最小 / fp16 溢出.
- host-oom: host RAM said out ("CPU OOM", "out of RAM", the OOM killer); 内存 不足/溢出/爆 (RAM, not 显存).
- killed: the kernel's "Killed" (the shell's report of SIGKILL), "exit code -9" / "return code = -9"
  (torch/distributed/elastic/multiprocessing/api.py, deepspeed/launcher/launch.py sigkill_handler); 被kill/被杀.
- stopped: a run that ended with no error printed ("stops without any error", 突然中断, 没有报错就退出): SIGKILL
  leaves no Python traceback, so this is what a kill looks like from the outside.
- oom: c10's "CUDA out of memory" (c10/cuda/CUDACachingAllocator.cpp), OutOfMemoryError, "OOM"; 显存 不足/溢出/爆,
  爆显存, CUDA/GPU 内存不足.
- no-update: a grad norm or learning rate of exactly 0 ("grad_norm 一直为 0", "lr is 0"), PEFT's "trainable params: 0",
  weights not updated / 参数不更新.
- nan: HF Trainer's logged "nan" loss or grad_norm, "inf" losses; loss-zero: a loss logged or said as 0 / zero / 零.
- diverged: a loss that explodes, spikes or diverges (loss 爆炸/飙升/发散/突然变大), 梯度爆炸.
- timeout: "timeout", "timed out", the NCCL watchdog's "Watchdog caught collective operation timeout"
  (ProcessGroupNCCL.cpp), 超时.
- hang: hangs, stuck, freezes, no progress, deadlock; 卡住/卡死/卡在/不动/无响应/没反应/停住.
- no-samples: a dataset that yields no sample: "StopIteration", "dataset is empty", "too small", "no valid samples",
  LLaMA-Factory's "Cannot find valid/sufficient samples" (0.9.0 data/loader.py:199-207), a dataset "format error"
  (数据集格式错误, 数据集为空).
- version: a version range a package or model states ("requires transformers>=4.45", "is required for a normal
  functioning of this module" (transformers utils/versions.py require_version), "not supported", "版本不兼容").
- oom also: a DDP run's memory said per card ("each GPU holds the whole model", "more GPUs did not help",
  每张卡都加载了完整模型); 内存 said of the cards (userwords.py `_CARDS`) is the GPU's, not the host's.
- version also: a run said broken or failing with a package release ("broken with vllm==0.5.0", "fails with
  deepspeed 0.15.1 installed").
- error: a save said to fail or crash (保存...崩溃/报错), a named API said not to do its job ("`X` does not pass
  `y`"), "does not work with", "got an error"; and an exception class named in the words ("fails with KeyError 'qwen3_next'") or 报错/失败 with the words
  that follow: a crash whose cause the words hold, read by run-crashed.

A match right after a negation ("no OOM", "without NaN", "没有超时") does not count: the next match, or the next
symptom, is tried.
"""

from __future__ import annotations

import re

# re.A: \b and \w are ASCII-only, so a Latin word written right against Chinese ("模型会hang", "报错OOM") still
# starts at a word boundary (under Unicode rules 会 is a word character and "\bhang" does not match after it)
_I = re.I | re.A

# the packages a title may say a run is broken with (a release named right after them)
_PKG = (r"(?:torch|pytorch|transformers|deepspeed|peft|accelerate|trl|vllm|datasets|flash[-_]?attn|bitsandbytes|"
        r"xformers|unsloth|triton)")

# another process said to hold the card: a previous run that did not exit, a zombie, another user's job
# (LlamaFactory#8082's kind): the card's memory is taken, so it is said as an oom of the GPU after every other symptom
# (analyzers/postmortem/saidlead.py words the lead)
HELD_CARD = re.compile(
    r"\b(?:previous|earlier|old|last|zombie|stale|another|other|leftover)\s+(?:training\s+)?"
    r"(?:process(?:es)?|run|job|task)\b[^.\n]{0,60}?\b(?:still\s+)?(?:hold\w*|occup\w*|using|uses|running|"
    r"on the GPU|not (?:exit|killed|released))|"
    r"\b(?:GPU|card|VRAM)(?: memory)?\s+(?:is |was |are |were )?(?:still )?(?:occupied|in use|held|taken|used) by\b|"
    r"\bzombie process|"
    r"(?:之前|上次|上一次|别的|别人|其他|残留|僵尸)的?(?:训练)?进程[^。\n]{0,20}?(?:占用|占着|占了|没有?(?:退出|结束|释放)|还在)|"
    r"(?:显存|显卡|GPU|卡)(?:一直)?被\S{0,12}?(?:占用|占着|占了|占满)", _I)

# (symptom, words): the first symptom whose words occur (not negated) wins; the specific ones first
SYMPTOMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("disk-full", re.compile(
        r"No space left on device|\[?Errno 28\]?|os error 28|Disk quota exceeded|PytorchStreamWriter failed writing file|"
        r"\bdisk (?:is |was |gets |got )?full\b|\bfull disk\b|out of disk(?: space)?|\bno (?:more )?(?:disk )?space left\b|"
        r"\bnot enough (?:free )?disk space\b|\bcannot write to (?:file|disk)\b|\b(?:unable|failed) to write to disk\b|"
        r"\bdisk[- ]space (?:error|issue|problem|exhausted|ran out)\b|[/\\s]disk[- ]space\b[\"'”]?\s*error|"
        r"\b(?:ephemeral[- ]storage|storage quota) (?:exceeded|limit|full|ran out)|\bran out of (?:disk|storage)\b|"
        r"\bout of (?:storage|space on (?:the )?(?:disk|device))\b|"
        # the kubelet's evictions for a pod's own disk (kubernetes pkg/kubelet/eviction/helpers.go: "Pod ephemeral
        # local storage usage exceeds the total limit of containers %s.", "Container %s exceeded its local
        # ephemeral storage limit %q.", "Usage of EmptyDir volume %q exceeds the limit %q.", "The node was low on
        # resource: ephemeral-storage.")
        r"ephemeral local storage usage exceeds|exceeded its local ephemeral storage limit|"
        r"Usage of EmptyDir volume \S+ exceeds|low on resource: ephemeral-storage|(?:磁盘|硬盘|存储)(?:空间)?(?:不足|已?满|爆|不够)|(?<!显存)(?<!内存)(?<!显卡)空间(?:不足|不够|满了)|磁盘满", _I)),
    ("nccl-error", re.compile(
        r"socketFinalizeAccept|socketStartConnect|ncclSystemError|ncclInternalError|ncclRemoteError|"
        r"ncclUnhandledCudaError|ncclInvalidUsage|NCCL error|NCCL WARN|unhandled (?:system|cuda) error|"
        r"NCCL\s*(?:报错|错误|通信(?:失败|错误))|"
        # said in words: an NCCL issue/failure, NCCL and CUDA (or torch) releases that do not match, the dynamic
        # loader missing an NCCL symbol torch was linked against (a libnccl older than torch's: "undefined symbol:
        # ncclCommRegister"), a libnccl named in a version complaint
        r"\bNCCL\s*(?:issue|problem|failure|fail(?:s|ed)?|crash\w*|bug|exception)s?\b|NCCL\s*(?:问题|出错|失败|异常)|"
        r"\bNCCL\b[^.\n。]{0,40}\bversions?\b[^.\n。]{0,20}(?:mismatch\w*|do(?:es)?(?: not|n't) match|incompatib\w*|conflict\w*)|"
        r"\bNCCL\b[^.\n。]{0,40}版本\s*(?:不匹配|不一致|不兼容|对不上|冲突)|"
        r"\bNCCL (?:version )?mismatch\w*|undefined symbol:?\s*nccl\w+|\blibnccl\S*\b[^.\n。]{0,40}(?:mismatch|version|not found)", _I)),
    ("image-tokens", re.compile(
        r"image features and image tokens do not match|video features and video tokens do not match|"
        r"\b(?:image|video|visual) (?:features? and (?:image |video )?tokens?|tokens?(?: and features?)?|token count)\s*"
        r"(?:do(?:es)?(?: not|n't) match|mismatch\w*|不匹配|不一致|对不上)|(?:图像|图片|视频)\s*token\w*\s*(?:数量?)?(?:不匹配|不一致|对不上)",
        _I)),
    ("native-crash", re.compile(
        r"Segmentation fault|\bsegfault\w*|\bSIGSEGV\b|core dumped|\bBus error\b|\bSIGBUS\b|Illegal instruction|"
        r"\bSIGILL\b|(?:exit ?code|return code|exitcode)\s*[:=]?\s*-?(?:11|139)\b|段错误|总线错误|非法指令|核心已转储|"
        r"Floating point exception|\bSIGFPE\b|浮点数?例外|"
        # (round 14) CPython's faulthandler for SIGABRT ("Fatal Python error: Aborted", Python/faulthandler.c's
        # signal table), bash's strsignal text "Aborted (core dumped)" is matched by "core dumped" above
        r"Fatal Python error:?\s*(?:Aborted|Bus error|Illegal instruction|Floating point exception)|\bSIGABRT\b", _I)),
    ("loss-scale", re.compile(
        r"loss scale (?:is )?already at (?:the )?minimum|(?:minimum|min) loss scale|"
        r"loss[ _]scale\S*\s*(?:collaps\w*|keeps? (?:decreasing|dropping|falling)|drops? to|(?:goes|went|falls?|fell) to)|"
        r"\bfp16 (?:gradient |grad )?overflow\w*|Gradient overflow|Grad overflow|OVERFLOW!|"
        r"loss[ _]?scale\S*\s*(?:降到|降至|一直(?:下降|减小))|(?:梯度)?溢出.{0,6}fp16|fp16.{0,6}(?:梯度)?溢出", _I)),
    ("host-oom", re.compile(
        r"\b(?:CPU|host|system) (?:OOM|RAM|memory)\b(?:[^.\n]{0,30}(?:OOM|out of|exceed|killed|full|不足))?|"
        r"\bRAM (?:OOM|out of memory|exhausted|(?:is )?full)|\bout of (?:host |system |CPU )?RAM\b|"
        r"(?<!显)(?<!CUDA)(?<!GPU)(?<!卡)(?<!CUDA )(?<!GPU )内存(?:空间)?(?:不足|溢出|爆|不够|耗尽|占满|满了|\s?OOM)|爆内存|"
        r"(?:OOM|oom)[ -]?kill\w*", _I)),
    # a kill said without its sender: the host's memory is the usual one (rule host-oom-killed says so)
    ("killed", re.compile(
        r"\b(?:gets?|got|was|were|is|are|been|being)\s+(?:\w+\s+)?killed\b|"
        r"\b(?:process(?:es)?|training|trainer|job|run|worker|rank\s*\d*|it|and|then)\s+killed\b|^\s*Killed\b|"
        r"被\s*(?:系统)?\s*(?:kill(?:ed)?|杀|干掉)|\bSIGKILL\b|\bsignal 9\b|"
        r"(?:exit ?code|return code|exitcode)\s*[:=]?\s*-9\b|"
        # (round 14) the status said with a verb, or as the shell's 128 + 9 (bash, docker and Kubernetes report a
        # process ended by SIGKILL as 137): "exits with code -9", "exit code 137", "exit status 137"
        r"\bexit(?:s|ed)? with (?:exit )?(?:code|status)\s*[:=]?\s*(?:-9|137)\b|"
        r"(?:exit ?(?:code|status)|return ?code|exitcode|returncode)\s*[:=]?\s*137\b", _I | re.M)),
    ("oom", re.compile(
        r"out of memory|\bOOM(?:s|ed|ing)?\b|OutOfMemory|(?<![A-Za-z])oom(?![A-Za-z])|显存(?:空间)?(?:不足|溢出|爆|不够|炸|占满)|爆显存|"
        r"(?:CUDA|GPU|显卡)\s?(?:的)?内存(?:不足|溢出|爆|不够)|\bran out of (?:GPU |CUDA |video )?memory\b|"
        r"\bruns? out of (?:GPU |CUDA |video )?memory\b|\bnot enough (?:GPU |CUDA )?memory\b|"
        r"\bout of (?:GPU |CUDA )?VRAM\b|\bGPU memory (?:overflow|is full|exhausted)|\bVRAM (?:overflow|is full)|"
        r"显存(?:满了|用完|用尽)|"
        # a DDP run's memory said per card: each card holds the whole model, more cards did not help
        r"\beach (?:GPU|card|device) (?:holds|loads|keeps|has|gets|stores) (?:a |the )?(?:whole|full|entire|complete)\b"
        r"[^.\n]{0,20}\bmodel\b|\b(?:more|adding|extra|additional) (?:GPUs|cards) (?:did(?:n't| not)|does(?:n't| not)|"
        r"do(?:n't| not)) help\b|每(?:张|块)卡都(?:加载|放|存|有)了?(?:一份)?(?:完整的?)?模型|(?:加|多)了?卡(?:也|都)?(?:没用|不管用|没有用)", _I)),
    ("cuda-error", re.compile(
        r"illegal memory access(?!\s+(?:check|checker|detect\w*|sanitiz\w*))|device-side assert\w*|unspecified launch failure|misaligned address|"
        r"no kernel image is available|CUBLAS_STATUS_\w+|driver version is insufficient|driver on your system is too old|"
        r"\b(?:NVIDIA |CUDA |GPU )?driver (?:is )?too old\b|驱动(?:版本)?(?:太低|过低|太旧|过旧|不够)|CUDNN_STATUS_\w+|\bcuDNN error\b|"
        r"\bCUDA error(?!:? ?out of memory)|非法内存访问", _I)),
    # an optimizer that changes nothing (rule no-parameter-update): a grad norm or learning rate of exactly 0, no
    # trainable parameter (PEFT's print_trainable_parameters "trainable params: 0")
    ("no-update", re.compile(
        r"(?:grad(?:ient)?[_ ]?norm|梯度(?:范数)?)\s*(?:is |was |stays |=|:|为|是|一直(?:是|为)?|始终(?:是|为)?)?\s*(?:0(?:\.0+)?|zero|零)(?![\d.])|"
        r"(?:learning[_ ]rate|\blr)\s*(?:is |was |stays |=|:|为|是|一直(?:是|为)?|始终(?:是|为)?)?\s*(?:0(?:\.0+)?|zero|零)(?![\d.e])|"
        r"学习率\s*(?:一直|始终)?(?:是|为)?\s*0(?![\d.])|trainable params:?\s*0\b|(?:可训练|需要训练的)参数\s*(?:量|数)?\s*(?:为|是)?\s*0(?![\d.])|"
        r"\bno trainable param\w*|\bweights? (?:are |were )?not (?:updated|updating|changing)\b|\bparameters? (?:are |were )?not "
        r"(?:updated|updating|changing)\b|参数(?:没有|不)更新|权重(?:没有|不)更新", _I)),
    ("nan", re.compile(
        r"(?<![A-Za-z])nan(?![A-Za-z])|(?<![A-Za-z])(?:inf|infinite) loss|"
        r"(?:loss|grad_norm|grad norm|梯度)\s*(?:is |becomes |goes to |=|:|为|变成)?\s*inf\b", _I)),
    ("loss-zero", re.compile(
        r"(?:loss|损失)(?:[^\d\n.,;，。]{0,12}?)(?<![\d.])0(?:\.0+)?(?![\d.%])|"
        r"(?:loss|损失)\s*(?:is |was |becomes |became |goes to |stays |drops to |为|是|变成|一直(?:是|为)?)\s*(?:zero|零)\b|"
        r"\bzero (?:training )?loss\b", _I)),
    ("diverged", re.compile(
        r"(?:loss|损失)\s*(?:suddenly |then |quickly )?(?:explod\w*|spik\w*|diverg\w*|blows? up|blew up|skyrocket\w*|"
        r"shoots? up|jumps? up)|(?:loss|损失)(?:值)?\s*(?:突然|骤然|迅速)?(?:变大|升高|上升|飙升|暴涨|增大|爆炸|发散)|"
        r"梯度爆炸|\bgradient explo\w*|\bexploding (?:loss|gradients?)\b|\bloss divergence\b", _I)),
    ("timeout", re.compile(r"\btime[ -]?out\b|\btimed out\b|\btimeouts?\b|Watchdog caught|超时", _I)),
    ("hang", re.compile(
        r"\bhang(?:s|ing)?\b|\bhung\b|\bstuck\b|\bfreez(?:e|es|ing)\b|\bfroze(?:n)?\b|\bdeadlock\w*|"
        r"\bno progress\b|\bnot (?:progressing|moving|proceeding|advancing)\b|"
        r"\bdo(?:es)?(?:n't| not) (?:proceed|progress|move(?: on)?|advance)\b(?!\s+(?:the|to|a|an|it|them|my|its)\b)|"
        r"\bnever (?:starts|finishes|returns)\b|卡住|卡死|卡在|卡着|不动了?|无响应|没(?:有)?反应|停住|停在|夯住|死锁|"
        r"(?:一直|始终)在?(?:等待|等着|不动)|没有进度|\bnothing (?:happens|happened|is happening)\s+(?:for|after|since)\b|\b(?:just )?sits there\b|"
        r"\bno (?:new )?(?:output|log(?: line)?s?) for (?:hours|\d+ ?(?:min\w*|hours?|h))\b|"
        r"(?:很久|半天|几个小时|一个小时|好几个小时)(?:都|也)?没(?:有)?(?:输出|动静|日志)|进度条不动|\b(?:stays?|remains?|sits?|stuck) at 0\s?%|"
        r"进度(?:条)?(?:一直|始终)(?:是|为|在|停在)?\s*0\s*%", _I)),
    # a run that ended with no error at all (the words say none was printed)
    ("stopped", re.compile(
        r"\b(?:stops?|stopped|exits?|exited|ends?|ended|quits?|dies|died|terminat\w*)\s+(?:suddenly\s+|silently\s+)?"
        r"(?:without|with no)\s+(?:any\s+)?(?:error|traceback|message|output|log)|\bexits? silently\b|"
        r"\bsilently (?:stops?|stopped|exits?|exited|dies|died)\b|\bdisappear\w* without\b|"
        r"(?:突然|自动|直接)(?:中断|停止|退出|结束|断掉|挂掉|没了)|(?:没有|无)(?:任何)?(?:报错|错误)(?:信息)?(?:就|直接)?(?:退出|停止|中断|结束)|"
        r"进程(?:消失|没了|自己退出)", _I)),
    # an error said only of multi-node training ("多机多卡训练的时候报错", "fails on multi-node"): what a second node
    # adds is the network between ranks, so NCCL's transport (rule nccl-error) is the lead; after every specific
    # symptom ("多机 OOM" stays oom), and not where the words quote the exception (its reading says more)
    ("nccl-error", re.compile(
        r"(?:多机|多节点|跨节点|跨机|\bmulti[- ]?node\b|\bmultiple (?:nodes|machines)\b|\b(?:two|2|several) (?:nodes|machines)\b)"
        r"[^.\n。]{0,24}?(?:报错|出错|错误|失败|\berrors?\b|\bfail\w*|\bcrash\w*)(?![^\n]{0,60}(?-i:Error|Exception)\b)|"
        r"(?:\berrors?\b|\bfail\w*|\bcrash\w*)[^.\n。]{0,24}?(?:\bmulti[- ]?node\b|\bmultiple (?:nodes|machines)\b|"
        r"\b(?:two|2|several) (?:nodes|machines)\b)(?![^\n]{0,60}(?-i:Error|Exception)\b)", _I)),
    # a dataset that yields no sample (rule no-valid-samples): LLaMA-Factory takes the first processed sample to
    # print it and turns the StopIteration of an empty dataset into "Cannot find sufficient samples, consider
    # increasing dataset size." (stage pt: texts grouped into cutoff_len blocks) or "Cannot find valid samples,
    # check `data/README.md` for the data format." (0.9.0 data/loader.py:199-207; main :264-271; llmtuner's
    # preprocess.py let the bare StopIteration through): the error users call a dataset "format error"
    ("no-samples", re.compile(
        r"\bStopIteration\b|Cannot find (?:valid|sufficient) samples|\bno valid (?:training )?samples?\b|"
        r"\b(?:dataset|data) (?:is |was |becomes |became |gets? |got )?empty\b|\bempty (?:training |train )?dataset\b|"
        r"\b(?:dataset|data) (?:is |was )?too small\b|\bnot enough (?:samples|data|rows)\b|"
        r"\bdataset format (?:error|is wrong|is invalid)|数据集?\S{0,3}格式(?:错误|不对|有误)|(?:没有|无)有效(?:的)?(?:样本|数据)|"
        r"数据集?(?:为空|是空的)|样本(?:为空|数为0)|数据集?[^，,。\n]{0,10}?(?:是空的|变成?空的?|空了)|(?:没有|0\s*条|零条)(?:有效的?)?样本|数据(?:集)?(?:太少|过少|量太小)", _I)),
    ("version", re.compile(
        r"\b(?:requires?|required|need|needs)\s+(?:`)?[\w.-]+\s*(?:>=|==|<=|>|<)\s*\d[\w.]*|"
        r"is required for a normal functioning|\bversion (?:mismatch|conflict|incompatib\w*)\b|"
        # a model type the installed transformers does not know (configuration_auto.py's "does not recognize this
        # architecture", said in users' words): a transformers older than the model
        r"\bmodel[_ ]type\s*[`'\"]?[\w.-]+[`'\"]?\s*(?:is\s+)?(?:not recogni[sz]ed|unrecogni[sz]ed|not supported|unknown)|"
        r"\b(?:unrecogni[sz]ed|unknown|unsupported) model[_ ]type\b|"
        r"\b(?:is|are) not supported (?:by|in|with) (?:the )?(?:installed |current )?(?:transformers|torch|deepspeed|peft|vllm|accelerate|flash[-_]?attn|version)\b|"
        r"\bincompatible (?:with )?(?:the )?(?:installed )?(?:version|transformers|torch|deepspeed|peft|vllm)\b|"
        # two packages said not to go together ("torch and deepspeed versions are currently incompatible",
        # "deepspeed 0.14.3 does not work with torch 2.4"), a release the user must move to ("please use a version
        # that is greater than 0.5.0", "need accelerate>=0.34"), a version said not compatible
        r"\bversions? (?:are|is) (?:currently |still |now )?(?:incompatible|not compatible)\b|"
        r"\bversions? (?:of \S+ )?(?:you are using )?(?:is|are) not compatible\b|"
        r"\buse a version (?:that is )?(?:greater|newer|higher|later|lower|older) than\b|"
        r"\b(?:does(?:n't| not)|do(?:n't| not)|won't) work with (?:the )?(?:torch|transformers|deepspeed|peft|accelerate|"
        r"trl|vllm|datasets|flash[-_]?attn|bitsandbytes|cuda)\s*v?\d|"
        # a run said broken or failing with a package release installed ("training is broken with vllm==0.5.0",
        # "fails with vllm 0.5.0 installed", "breaks after upgrading to peft 0.7.0"): the release is the lead
        r"\b(?:is|are|gets?|got|was|were|became) broken\s+(?:with|by|after|since|on|when)\s+"
        r"(?:installing |upgrading (?:to )?|using )?(?:the )?" + _PKG + r"\s*(?:==|=|>=)?\s*v?\d[\w.]*|"
        r"\bbr(?:eaks?|oke)\s+(?:with|after|on|since)\s+(?:installing |upgrading (?:to )?)?" + _PKG
        + r"\s*(?:==|=)?\s*v?\d[\w.]*|\bfail(?:s|ed|ing)?\s+(?:with|after|when|once)\s+(?:installing |upgrading (?:to )?)?"
        + _PKG + r"\s*(?:==|=)?\s*v?\d[\w.]*(?:\s+(?:is |being )?installed)?|"
        # a package with its version, then within the same sentence said not to go with another ("deepspeed 0.15 和
        # torch 2.4 不兼容"); with no version it may be an option conflict ("DeepSpeed ZeRO-3 is incompatible with
        # pure_bf16"), not a release one
        r"\b(?:torch|pytorch|transformers|deepspeed|peft|accelerate|trl|vllm|datasets|flash[-_]?attn|bitsandbytes)"
        r"\s*(?:==|=)?\s*v?\d+(?:\.\d+)+[^。\n]{0,40}?(?:不兼容|不匹配|\bincompatible\b|\bnot compatible\b)|"
        r"版本(?:不兼容|不匹配|冲突|不对|问题|太低|太高|过低|过高)|(?:升级|降级)[\w.-]*版本|(?:升级|降级)\s*(?:transformers|torch|"
        r"deepspeed|peft|vllm|accelerate|flash[-_]attn)", _I)),
    # an exception class the words say the run raised: after a verb of failing ("fails with KeyError", "报错
    # KeyError"), or opening the text with its value quoted ("KeyError 'qwen3_next' when ..."); a class merely
    # mentioned ("see ChildFailedError in the docs", "except OSError: pass") is not a failure. The class name is
    # matched case-sensitively (CPython's spelling), the words around it are not.
    ("error", re.compile(
        # a title that opens with the error and what was being done ("Error patching SFTTrainer", "[BUG] Error
        # loading checkpoint"): a crash whose cause the words hold
        r"(?i:^\s*(?:\[[^\]\n]{1,20}\]\s*)*errors?\s+(?:while\s+|when\s+)?[a-z]+ing\b)|"
        r"(?i:\bfail(?:s|ed|ing)? with|\bcrash(?:es|ed)? with|\braise[sd]?|\bthrows?|\bthrew|\bgot|\bgets|\bgetting|"
        r"\bhits?|报错|出现|遇到|提示|抛出)\s*(?:an? |the )?[`'\"“]?(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\b|"
        r"^\s*(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\s+(?:['\"`“‘]|(?i:(?:is |was )?(?:raised|thrown|occur\w*)|"
        r"when|during|while|after|with)\b)|报错|出错|错误[:：]|"
        r"(?i:\b(?:config(?:uration)?|tokenizer|template|dataset|data|import|runtime|cuda|deepspeed|training|"
        r"load(?:ing)?|save|saving)\s+error\s*[:：])|"
        r"(?i:\bfail(?:s|ed|ing)? to (?:load|import|start|save|launch|initiali[sz]e|run)\b|"
        r"(?<!loss )(?<!损失)\berrors? (?:when|during|while|in|at)\b|\bcannot (?:load|import|find)\b|"
        r"\bcan't (?:load|import|find)\b|"
        r"\b(?:install\w*|resum\w*|sav(?:e|ing)|load(?:ing)?|import(?:ing)?|build(?:ing)?|compil\w*|merg\w*|export\w*)"
        r"\s+(?:[\w.-]+\s+){0,3}?(?:fail(?:s|ed|ure)?|crash(?:es|ed)?)\b)|"
        r"(?:安装|编译|保存|加载|导入|合并|导出|断点续训|恢复训练|续训)\S{0,6}(?:失败|崩溃|报错|出错|挂了)|"
        r"(?:保存|存)\s*(?:模型|checkpoint|ckpt|权重)[^，,。\n]{0,12}?(?:失败|崩溃|报错|出错|挂了|挂掉|崩了)|"
        r"(?i:\b(?:got|get|gets|getting|hit|hits|throws?|threw|raised?)\s+(?:an? |the |this |following )?(?:error|exception)\b)|"
        # a title that states a named API's failure ("`SFTTrainer` does not pass `token_type_ids` ...") or that
        # one thing does not work with another: a bug report whose words are the cause's only text
        r"[`'\"][A-Za-z_][\w.]*(?:\(\))?[`'\"]\s+(?i:(?:does(?:n't| not)|do(?:n't| not)|cannot|can't|fails? to|never)\s+[a-z]+)\b|"
        r"(?i:\b(?:does(?:n't| not)|do(?:n't| not)|won't|cannot|can't) work (?:with|on|under|when)\b)|"
        # message fragments that only an exception prints: torch/cuda/__init__.py _lazy_init's "Torch not compiled
        # with CUDA enabled", CPython's "No module named" / "cannot import name" / "got an unexpected keyword
        # argument" / "has no attribute", the dynamic loader's "undefined symbol", transformers' AutoConfig "does
        # not recognize this architecture"
        r"\bnot compiled with (?:CUDA|NCCL|ROCm)|\bNo module named\b|\bcannot import name\b|\bundefined symbol\b|"
        r"\bunexpected keyword argument\b|\bhas no attribute\b|\bdoes not recognize this architecture\b|"
        # LLaMA-Factory's own refusals (data/template.py "Template {name} does not exist.", data/parser.py
        # "Undefined dataset {name} in dataset_info.json.") and users' words for a dataset it cannot read
        r"\bTemplate \S+ does not exist|\bUndefined dataset\b|(?i:\bdataset format (?:error|is wrong|is invalid))|"
        r"找不到数据集|数据集格式(?:错误|不对|有误)|"
        # more refusals users quote without their class: LF's mm_plugin.py "Processor was not found", transformers'
        # training_args.py "Your setup doesn't support bf16/gpu" and hf_argparser.py "Some keys are not used by the
        # HfArgumentParser", PyTorch's "Expected all tensors to be on the same device" and load_state_dict's "size
        # mismatch for", CPython's errno texts, the hub's "is not a valid model identifier"
        r"\bProcessor was not found\b|\bdoesn't support bf16|(?i:\bbf16 (?:is )?not supported)|不支持\s*bf16|"
        r"\bSome keys are not used by the HfArgumentParser|\bExpected all tensors to be on the same device|"
        r"\bsize mismatch for\b|\bNo such file or directory\b|\bPermission denied\b|\bAddress already in use\b|"
        r"\bis not a valid model identifier\b|\bdoes not appear to have a file named\b|"
        # an exception class right after 报/抛/出 ("报ValueError", "抛出 KeyError")
        r"(?:报|抛|出)了?\s*(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\b", re.A)),
    # (session 13, appended) message fragments only an exception prints, quoted without their class: autograd's
    # "element 0 of tensors does not require grad and does not have a grad_fn" (torch/csrc/autograd/engine.cpp
    # validate_outputs... run_backward), torch's embedding on a partitioned weight "'weight' must be 2-D"
    # (aten/src/ATen/native/Embedding.cpp embedding_symint): crashcause.py / launchcause.py read them
    # (the tail "does not have a grad_fn" is blanked as a negated "have" by userwords._NEGATED: not matched)
    ("error", re.compile(r"\belement \d+ of tensors does not require grad\b|\bdoes not require grad and\b|"
                         r"(?<!\w)['\"‘’`]?weight['\"‘’`]? must be 2-?D\b", re.A)),
    # (session 13, appended) a save's rename said to fail ("tmp-checkpoint rename fails at save"): an error whose
    # save lead savecause.py words; the card said held by another process: its memory (HELD_CARD above)
    ("error", re.compile(r"\brenam\w*\s+(?:[\w.-]+\s+){0,3}?(?:fail(?:s|ed|ure)?|crash\w*|error)\b|"
                         r"\btmp-checkpoint\S*\s+[^.\n]{0,40}?\b(?:fail\w*|errors?|crash\w*)\b", _I)),
    ("oom", HELD_CARD),
    # a run said to fail after a package was moved to a release ("fails after upgrading accelerate to 0.30.0",
    # accelerate#2761's kind; "升级 accelerate 到 0.30.0 后报错"): the release is the lead
    ("version", re.compile(
        r"\b(?:fail\w*|br(?:eaks?|oke|oken)|crash\w*|errors?|stopped working)\s+(?:after|since|when|once)\s+"
        r"(?:upgrading|updating|installing|downgrading|moving|bumping)\s+(?:to\s+)?" + _PKG + r"\s+(?:to\s+)?v?\d[\w.]*|"
        r"(?:升级|更新|安装|降级)\s*" + _PKG + r"\s*(?:到|至)?\s*v?\d[\w.]*\s*(?:之?后|以后)\S{0,6}?(?:报错|失败|出错|崩溃)", _I)),
    # a process said to end with an exception class ("dies right after saving with ChildFailedError"): a Python
    # exception whose text is not in the words (a positive exit code alone is no evidence:
    # tests/test_postmortem_short_pastes.py)
    ("error", re.compile(
        r"\b(?:dies|died|exits?|exited|stops?|stopped|ends?|ended|terminat\w*)\b[^.\n]{0,60}?\bwith\s+(?:an? )?"
        r"(?:[a-z_]\w*\.)*[A-Z][A-Za-z]*(?:Error|Exception)\b", re.A)),
)

# Appended (wt/pmfix13a), tried after every symptom above. A resumed run said to end at once with nothing trained:
# HF's Trainer skips the steps a checkpoint already holds (analyzers/postmortem/kindwords.py `resume_lead`).
RESUME_ENDED = re.compile(
    r"(?:\bresum\w*|resume_from_checkpoint|\bcontinu\w* (?:training|from (?:the )?checkpoint))[^.\n。]{0,80}?"
    r"(?:\b(?:ends?|ended|finish\w*|stops?|stopped|exits?|exited|complet\w*|done|returns?)\s+(?:almost\s+)?"
    r"(?:immediately|instantly|at once|right away|directly|straight away)|\bwithout (?:any |actually )?training\b|"
    r"\b(?:no|zero|0) (?:training )?steps?\b|\bnothing (?:is |was |gets )?trained\b|"
    r"\bdoes(?:n't| not) (?:train|start training)\b)|"
    r"(?:断点续训|续训|恢复训练|继续训练|resume)\S{0,20}?(?:直接|立刻|马上|立即|瞬间)(?:就)?(?:结束|退出|完成|停止)|"
    r"(?:断点续训|续训|恢复训练|继续训练|resume)\S{0,20}?(?:没有|没|不)(?:开始)?训练", _I)
# A failure said with no exception or 报错 word ("Axolotl crashes at the end of training", "Fine-tuning ... failure
# on main branch", "script broke after upgrading", "在进行ppo训练时发生下面错误"): an error whose cause the words may hold (rule run-crashed).
# (a negation between the run and "fail" takes the failure back: "it does not fail to start" says none)
# (a failure after a duration is left to userwords' default-timeout reading: "crashes after 30 minutes" is torch's
# 1800 s collective timeout; "failed" needs the run as its subject: "Assertion check failed." is any program's)
# (round 14: a qualifier before the figure, "after exactly 30 minutes", "after roughly half an hour", counts too)
_NO_DURATION = (r"(?!\s+(?:\w+\s+)?(?:after|within|at)\s+(?:(?:about|exactly|around|roughly|approximately|almost|nearly|"
                r"precisely|always)\s+|~)?(?:\d|half an))")
FAILURE_SAID = re.compile(
    r"\bcrash(?:es|ed|ing)?\b" + _NO_DURATION + r"|\bfailures?\b(?!\s+(?:rate|mode)s?\b)|"
    r"\b(?:training|train|fine[- ]?tun\w*|finetun\w*|runs?|job|script|sft|dpo|ppo|grpo|kto|pretrain\w*|it)\b"
    r"(?:(?!\b(?:not|never)\b|n't|\bno longer\b)(?:[^.\n。]|\.(?=\d))){0,60}?\bfail(?:s|ed|ing)?\b" + _NO_DURATION + r"|"
    r"\b(?:broke|broken|breaks)\b|\berror(?:s|ed)?\s+out\b|\berrored\b|(?:发生|出现|遇到|产生)\S{0,6}?(?:错误|异常)", _I)
# A distributed engine said to be on although the user turned it off ("FSDP is still enabled even though I set fsdp
# to false", "明明关闭了 deepspeed 还是启用了"): a launcher's own config outranks the run's (accelerate's default
# config: analyzers/postmortem/kindwords.py `engine_lead`), an error whose cause the words hold
ENGINE_ON_ANYWAY = re.compile(
    r"\b(?:fsdp|deepspeed|zero[-_ ]?[23])\b[^.\n]{0,40}?\b(?:enabled|turned on|activated|active|used|on)\b[^.\n]{0,40}?"
    r"\b(?:even though|although|though|despite|while)\b|"
    r"\b(?:uses|using|used|runs? (?:with|under|in)|starts?)\s+(?:\w+\s+)?(?:fsdp|deepspeed)\b[^.\n]{0,40}?"
    r"\b(?:even though|although|though|despite)\b|"
    r"(?:明明|已经)?(?:设置|关闭|关掉|没开|没有开|禁用)了?[^，,。\n]{0,20}?(?:fsdp|deepspeed)[^，,。\n]{0,20}?(?:还是|仍然|依然|却)"
    r"(?:开启|启用|被启用|被使用|生效|打开)", _I)
SYMPTOMS = SYMPTOMS + (("no-update", RESUME_ENDED), ("error", FAILURE_SAID), ("error", ENGINE_ON_ANYWAY))

# a datasets progress bar at 0 (datasets arrow_dataset.py map's "Map (num_proc=N)", LLaMA-Factory's "Running
# tokenizer on dataset" / "Converting format of dataset" descriptions, data/loader.py and data/converter.py): as
# the last line of a short paste that names no symptom, the user pasted where it stopped (userwords.read_words)
BAR_AT_ZERO = re.compile(r"^\s*(?:Map|Filter|Running tokenizer on dataset|Converting format of dataset)\b[^\n]{0,80}?:"
                         r"\s*0%\|[^\n]*\|\s*0/\d+\b[^\n]*$", _I | re.M)

# a negation right before a symptom's words: that match does not count
# (one word may stand between: "no NCCL timeout", "没有 CUDA 报错")
# (what a user did to avoid a symptom is no report of it: "to avoid OOM I set batch 1", "为了防止OOM")
# (whole words: "node", "nothing", "normal" do not negate what follows them)
NEGATED = re.compile(r"(?:\b(?:no|not|without|never|nor)\b|n't|\bavoid\w*|\bprevent\w*|\binstead of|没有|没|不是|并非|"
                     r"并无|无|防止|避免|以免)\s*(?:an? |any |the |任何|什么|啥)?"
                     r"(?:[A-Za-z][\w-]*\s+)?$", _I)

# (phase, words) in the order they are tried; eval before save ("保存" is rarer in an eval complaint than the reverse)
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("evaluation", re.compile(r"\beval(?:uat\w*)?\b|\bvalidat\w*|\bdo_predict\b|\bpredict(?:ion|ing)?\b|"
                              r"评估|验证|eval阶段|测评|预测", _I)),
    # (a run loaded back from a checkpoint, or its optimizer states loaded, is a resume, not a save)
    ("resume", re.compile(r"\bresum(?:e|es|ed|ing)\b|resume_from_checkpoint|断点续训|恢复训练|续训|"
                          r"\bload\w* (?:it )?(?:back )?from (?:a |the )?(?:last |saved )?checkpoint\b|"
                          r"\bload\w* (?:the )?optimizer states?\b", _I)),
    ("save", re.compile(r"\bsav(?:e|es|ed|ing)\b|\bcheckpoint(?:s|ing)?\b(?!\s+shards)|保存|存储模型|存模型|save_steps", _I)),
    # (LLaMA-Factory's map descriptions, data/loader.py and data/converter.py: "Running tokenizer on dataset",
    # "Converting format of dataset")
    ("tokenization", re.compile(r"\btokeni[sz](?:e|es|ed|ing|ation)\b|Running tokenizer on dataset|"
                                r"Converting format of dataset|\bpreprocess\w*|\bdatasets? map\b|\bmap\(|\bMap \(num_proc=|"
                                r"\bload(?:s|ing)? (?:the )?(?:dataset|data)\b|预处理|分词|数据处理|加载数据|数据集加载|"
                                r"读取数据", _I)),
    # ("after loading the model" / "加载完后" is past the load: the hang is not in it)
    ("loading", re.compile(r"(?<!after )(?<!after the )\bload(?:s|ing)?\b(?! balanc)|checkpoint shards|from_pretrained|"
                           r"(?:加载|载入)(?!完|后|之后|结束|成功)", _I)),
    # (最后 alone is "finally" as often as "at the end": only its phrases of the run's end count)
    ("end", re.compile(r"\bin the end\b|\bat the end\b|\bend of training\b|训练(?:结束|快结束|的最后)|"
                       r"最后一(?:步|个\s?epoch|轮)|(?:训练|跑)到最后", _I)),
    ("start", re.compile(r"\b(?:at|from) the (?:very )?(?:start|beginning)\b|\bfirst (?:step|iteration|batch)\b|"
                         r"刚开始|一开始|第一步", _I)),
)


def first_symptom(text: str) -> tuple[str, re.Match[str]] | None:
    """The first symptom of `SYMPTOMS` with a match in `text` that no negation precedes (`NEGATED`, looked for
    in the 24 characters before it), and that match; None when there is none. The first non-empty line (an issue's
    title: the user's own summary) is searched first, the whole text only when it names no symptom."""
    lead = len(text) - len(text.lstrip())
    nl = text.find("\n", lead)
    title_end = len(text) if nl < 0 else nl
    for end in ((title_end, len(text)) if title_end < len(text) else (title_end,)):
        for symptom, pat in SYMPTOMS:
            for m in pat.finditer(text, 0, end):
                if not NEGATED.search(text[max(0, m.start() - 24):m.start()]):
                    return symptom, m
    return None


# a non-finite value said of the gradient norm rather than the loss ("grad_norm 是 nan，loss 正常")
GRAD_BEFORE = re.compile(r"(?:grad(?:ient)?[_ ]?norm|gradients?|梯度(?:范数)?)\W{0,4}(?:is |are |becomes |=|:|为|是|变成)?\s*$", _I)


def first_phase(text: str) -> tuple[str, re.Match[str]] | None:
    """The first phase of `PHASES` whose words occur in `text`, and the match; None when none does."""
    for phase, pat in PHASES:
        m = pat.search(text)
        if m:
            return phase, m
    return None


def loss_zero_said(text: str) -> re.Match[str] | None:
    """The first loss-zero match of `SYMPTOMS` in `text` that no negation precedes, or None."""
    pat = next(p for name, p in SYMPTOMS if name == "loss-zero")
    return next((m for m in pat.finditer(text) if not NEGATED.search(text[max(0, m.start() - 24):m.start()])), None)

# Appended (wt/pmfix13c, round 10's kinds). The disk said to fill in words users bend from the GPU's: "disk memory
# OOM", "硬盘 OOM", or checkpoints said to pile up past save_total_limit (ms-swift#6392: "step 200, 250, 300's
# checkpoint co-exist, causing the disk memory OOM"); tried before every symptom (else "OOM" reads as the GPU's).
DISK_SAID = re.compile(
    r"\b(?:disk|storage|hard[- ]?drive|SSD)\s+(?:memory\s+|space\s+)?(?:OOM|out of memory|overflow\w*)\b|"
    r"(?:磁盘|硬盘|存储)(?:空间)?\s*(?:OOM|溢出|爆了)|"
    r"\bsave_total_limit\b[^.\n。]{0,80}?(?:does(?:n't| not) (?:work|delete|remove|apply)|not (?:work\w*|respected|"
    r"deleting|honou?red)|(?:is |was )?ignored)|save_total_limit\S{0,20}?(?:不生效|没有?生效|失效|没用)|"
    r"\bcheckpoints?\b[^.\n。]{0,40}?\b(?:co-?exist\w*|pil(?:e|es|ed|ing) up|keep accumulating)\b", _I)
# A DataLoader worker said to die (torch utils/data/_utils/signal_handling.py / dataloader.py: "DataLoader worker
# (pid(s) N) exited unexpectedly", "DataLoader worker (pid N) is killed by signal: ..."): the worker processes hold
# host RAM and pass batches through /dev/shm, so the host's memory is the usual cause (2U1/Qwen-VL-Series-Finetune
# #44: confirmed host OOM); a "Bus error" beside it stays native-crash (tried earlier).
LOADER_DIED = re.compile(
    r"\bDataLoader worker\b[^.\n。]{0,40}?\b(?:exited unexpectedly|exits? unexpectedly|died|crashed|was killed)\b|"
    r"\bDataLoader worker\b[^.\n。]{0,20}?(?:意外退出|异常退出|退出了|挂了|被杀)", _I)
# A run said to be interrupted part-way with no error named ("训练过程中异常中断", "training was interrupted"): a
# stop from outside (a closed terminal or ssh session under nohup, a scheduler, Ctrl-C) is the kind the words give
# (ymcui/Chinese-LLaMA-Alpaca-3#47: DDP under nohup); rule stopped-from-outside words it, at most a warning.
INTERRUPTED = re.compile(
    r"(?:异常|意外)中断|训练\S{0,6}?(?:被)?中断|被中断|中断了|"
    r"\b(?:training|train|run|job|process(?:es)?|it)\s+(?:\w+\s+)?(?:was |is |got |gets |keeps getting )?"
    r"interrupted\b|\binterrupted (?:training|run|job)\b", _I)
# Shapes said not to match, or parameters said not to be saved whole ("resume ... dimension mismatch", "维度不匹配",
# "无法把所有的LoRA参数保存下来"): an error whose cause the words may hold (LlamaFactory#1226, rule run-crashed).
MISMATCH_SAID = re.compile(
    r"\b(?:dimension|shape|size)s? (?:mismatch\w*|do(?:es)?(?: not|n't) match)\b|(?:维度|形状|尺寸|shape)\s*(?:不匹配|不一致|对不上)|"
    r"(?:无法|没法|不能|没有)\S{0,14}?(?:参数|权重)?保存(?:下来|完整|全)|保存\S{0,10}?(?:不全|不完整)|"
    r"\b(?:not|n't) (?:all|every|the whole)\b[^.\n]{0,30}\b(?:saved|in the checkpoint)\b|\bincomplete (?:checkpoint|adapter)", _I)
SYMPTOMS = (("disk-full", DISK_SAID),) + SYMPTOMS + (("host-oom", LOADER_DIED), ("interrupted", INTERRUPTED),
                                                     ("error", MISMATCH_SAID))

# Round 14 (wt/pmfix14a): more words of these symptoms, each tried at the place userwords_more.PLACED declares (the
# one table of where an added form stands among the symptoms above), not after every catch-all
from finetune_doctor.readers.runlogs.userwords_more import place  # noqa: E402  (placed last: it reads SYMPTOMS)

SYMPTOMS = place(SYMPTOMS)
