"""Read captured training output (stdout/stderr via tee, launcher output, multi-rank interleaved logs) and
nvidia-smi CSV logs, streaming, in bounded memory, without judging anything.

How a text log is read. The file is scanned in 8 MiB chunks with one byte-level trigger expression; only the
lines that hold a trigger are decoded and parsed, so a multi-gigabyte log costs one C-level regex pass plus
a few microseconds per interesting line, and memory stays at a few chunks plus what is kept (metric series
in typed arrays, capped record lists). A line is delimited by ``\\n`` *or* ``\\r`` for parsing, because tqdm
rewrites its bar with carriage returns, but line numbers count ``\\n`` only (what an editor shows).
Binary junk, NUL bytes, invalid UTF-8, UTF-16 files (PowerShell ``tee``) and gzip-compressed logs are read;
what could not be read is reported in the returned `FileRead`.

Which step an event belongs to: the last training progress bar seen before it (``129/882 [40:17<3:41:05,
17.62s/it]`` means 129 optimizer steps are done), so an OOM, overflow or NCCL timeout printed after that bar
happened *during* step 130; a metric dict printed after the bar belongs to step 129 (HF's ProgressCallback
updates the bar in ``on_step_end`` before ``on_log`` writes the dict). The one exception is decided from the
text: once a line printed *during* step 130 (a DeepSpeed loss-scale line, which ``engine.step()`` prints before
HF increments ``global_step``) has followed bar 129, a metric dict after it belongs to step 130 -- the dict of
step 129 cannot come after step 130's optimizer step. This is what a pasted terminal shows: ``tqdm.write``
erases bar 130 before printing the dict, so the dict seems to follow bar 129 (case 065: ``379/2724 ...
OVERFLOW`` then ``{'loss': 2.0491, ...}`` is the step-380 log of a ``logging_steps: 10`` run). An overflow
that reduced the scale still completes its step (DeepSpeed skips the update, HF counts the step). Bars of other totals (eval loops,
``datasets.map``) are ignored once the training total is known from "Total optimization steps = N".

Exact message texts and their version differences: reference/deepspeed/log_patterns.md (§2 DeepSpeed loss
scaling, §3 see_memory_usage, §5 PyTorch CUDA OOM by version, §6 NCCL watchdog, §7 HF Trainer dicts, §8 process
death) and the examples in reference/deepspeed/log_examples/ and reference/llamafactory/log_examples/.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
from dataclasses import replace
from typing import Any, Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.evidence import (
    MAX_RECORDS, Fact, FileEvidence, FileRead, KillRecord, MemoryRecord, NcclRecord, Notice,
    OomRecord, OverflowRecord, Restart, Series,
)

CHUNK = 8 << 20          # bytes read at a time
LOOKAHEAD = 16 << 10     # bytes after a hit a parser may look at (a ChildFailedError block)
LOOKBACK = 32 << 10      # bytes before a hit kept across chunk boundaries (the traceback above an OOM)
MAX_LINE = 16 << 10      # a line around a hit is cut to this many bytes on each side
MAX_PENDING = 64 << 20   # a "line" longer than this is split (a log without newlines)

# Literal keywords, one of which every line worth decoding contains; the per-kind parsers below do the exact
# matching. They are compiled into one expression factored as a trie (`trie_regex`), so that at each byte the
# engine tests one branch per distinct first character: 3-4x faster than a flat alternation on DeepSpeed logs.
TRIGGER_WORDS = (
    # CUDA OOM (log_patterns.md §5)
    "CUDA out of memory", "CUDA error: out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED",
    "cudaErrorMemoryAllocation",
    # DeepSpeed loss scaling (§2)
    "OVERFLOW!", "loss scale overflow", "Overflow detected", "Grad overflow", "Reducing dynamic", "Increasing dynamic",
    "Current loss scale",
    # NCCL (§6)
    "Watchdog caught", "NCCL",
    # process death (§8)
    "Killed", "(exitcode: ", "return code = ", "Root Cause", "ChildFailedError", "Signal ", "DefaultCPUAllocator",
    "Detected ", "Out Of Memory", "Out of memory: ", "Memory cgroup",
    # metrics (§7)
    "'loss': ", "{'eval_", "{'train_runtime'", '"current_steps"',
    # see_memory_usage (§3)
    "MA ", "CPU Virtual Memory",
    # warnings, exceptions
    "WARNING|", "ERROR|", "It is strongly", "Traceback (most", "Error: ", "Exception: ",
    # run facts: HF Trainer banner, LF, DeepSpeed init and config dump (".... " is the dump's dot filler)
    "Total optimization", "Total train batch", "Num Epochs", "Gradient Accumulation", "Instantaneous batch",
    "Number of trainable", "all params: ", "Process rank: ", "Config mesh", "DeepSpeed info", "ZeRO stage ", ".... ",
    "finished initializing", "Running training", "Continuing training",
)


def trie_regex(words: tuple[str, ...] | list[str]) -> "re.Pattern[bytes]":
    """One bytes regex matching any of `words`, with shared prefixes factored (a ab -> a(?:b)?)."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w.encode("utf-8"):
            node = node.setdefault(ch, {})
        node[None] = {}

    def build(node: dict) -> bytes:
        alts = [re.escape(bytes([ch])) + build(node[ch]) for ch in sorted(k for k in node if k is not None)]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        return b"(?:" + body + b")?" if None in node else body

    return re.compile(build(trie))


_TRIGGER = trie_regex(TRIGGER_WORDS)
# tqdm bar of a loop: "|██▌       | 129/882 [40:17<3:41:05, 17.62s/it]"; anchored on the bar's closing "|" (rare in
# other output, so the scan runs at memchr speed); the rate unit is checked after the match
_TQDM = re.compile(rb"\| ?(\d+)/(\d+) \[[\d:]+<[\d:?]+,")
_TQDM_UNIT = re.compile(rb"\s*[\d.?]+\s*(s/it|it/s)\]")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RANK = re.compile(r"^\[rank(\d+)\]:\s?")
_RANK_ANY = re.compile(r"\[rank(\d+)\]:\s?")
_SIZE = r"[\d.]+\s*(?:bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)"
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20,
          "GiB": 1 << 30, "GB": 1 << 30, "TiB": 1 << 40, "TB": 1 << 40}


def size_bytes(text: str | None) -> float | None:
    """``"12.94 GiB"`` -> bytes. PyTorch's ``format_size`` prints binary units (KiB/MiB/GiB); hand-edited
    pastes that say ``GB`` are read as binary too. Returns None for None or unparsable text."""
    if not text:
        return None
    m = re.match(r"\s*([\d.]+)\s*([A-Za-z]+)", text)
    if not m or m.group(2) not in _UNITS:
        return None
    try:
        return float(m.group(1)) * _UNITS[m.group(2)]
    except ValueError:
        return None


def _g(name: str) -> str:
    return f"(?P<{name}>{_SIZE})"


# PyTorch CUDA OOM, torch <= 2.0 (log_patterns.md §5), tolerant to spacing and a "." after the request
_OOM_LEGACY = re.compile(
    r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?CUDA out of memory\.\s*Tried to allocate " + _g("requested")
    + r"\.?\s*\(GPU (?P<gpu>\d+);\s*" + _g("total") + r" total capacity;\s*(?:" + _g("allocated")
    + r" already allocated;\s*)?" + _g("free") + r" free;\s*(?:" + _g("allowed") + r" allowed;\s*)?"
    + _g("reserved") + r" (?:reserved in total by PyTorch|cached)")
# torch >= 2.1 (PR pytorch#99699; "capacty" typo in 2.1; private pools clause from 2.4)
_OOM_V2 = re.compile(
    r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?CUDA out of memory\.\s*Tried to allocate " + _g("requested")
    + r"\.\s*GPU (?P<gpu>\d+) has a total capac(?:i?)ty of " + _g("total") + r" of which " + _g("free")
    + r" is free\.\s*(?P<procs>(?:(?:Process \d+|Including non-PyTorch memory, this process) has "
    + _SIZE + r" memory in use\.\s*)*)(?:" + _g("allowed") + r" allowed;\s*)?Of the allocated memory "
    + _g("allocated") + r" is allocated by PyTorch,\s*(?:with " + _g("private_pools")
    + r" allocated in private pools \(e\.g\., CUDA Graphs\),\s*)?and " + _g("reserved_unallocated")
    + r" is reserved by PyTorch but unallocated")
_OOM_PROC = re.compile(r"(?:Process (?P<pid>\d+)|(?P<self>this process)) has (?P<mem>" + _SIZE + r") memory in use")
_OOM_PARTIAL = re.compile(r"(?:(?P<exc>[\w.]*(?:Error|Exception)):\s*)?CUDA out of memory\.?(?:\s*Tried to allocate "
                          + _g("requested") + r")?")
_OOM_RUNTIME = re.compile(r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation")

# DeepSpeed fp16 loss scaler (log_patterns.md §2)
_DS_OVERFLOW = re.compile(
    r"\[(?:deepspeed|deepscale)\] (?:fp16 dynamic loss scale overflow!|OVERFLOW!) (?:Rank (?P<rank>\d+) )?"
    r"Skipping step\.(?: Attempted loss scale: (?P<attempted>[\d.]+), (?:reducing to (?P<new>[\d.]+)"
    r"|but hysteresis is (?P<h>\d+)\. Reducing hysteresis to (?P<h2>\d+)))?")
_DS_OVERFLOW_DETECTED = re.compile(r"Overflow detected\. Skipping step\. Attempted loss scale: (?P<attempted>[\d.]+),"
                                   r" reducing to (?P<new>[\d.]+)")
_DS_SCALE_CHANGE = re.compile(r"(?P<dir>Reducing|Increasing) dynamic loss scale from (?P<old>[\d.]+) to (?P<new>[\d.]+)")
_DS_MIN_SCALE = re.compile(r"Current loss scale already at minimum - cannot decrease scale anymore")

# NCCL watchdog (log_patterns.md §6); a pasted line may be cut anywhere after "Watchdog caught collective operati"
_NCCL_TIMEOUT = re.compile(
    r"(?:\[Rank (?P<rank>\d+)\] )?Watchdog caught collective operati(?:on timeout: WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?"
    r"(?:OpType=(?P<op>\w+))?(?:, TensorShape=\[[^\]]*\])?(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r"(?:, Timeout\(ms\)=(?P<tmo>\d+))?\)?(?: ran for (?P<ran>\d+) milliseconds)?)?")
_NCCL_LAST = re.compile(
    r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID [^\]]+?)? Rank (?P<rank>\d+)\] (?:Exception \(either an error or timeout\) "
    r"detected by watchdog at work|Timeout at NCCL work): (?P<work>-?\d+), last enqueued NCCL work: (?P<enq>-?\d+), "
    r"last completed NCCL work: (?P<done>-?\d+)")
_NCCL_HEARTBEAT = re.compile(r"(?:Rank (?P<rank>\d+)\] )?ProcessGroupNCCL's watchdog got stuck for (?P<sec>\d+) seconds")
_NCCL_ERROR = re.compile(r"NCCL error|nccl(?:System|Internal|UnhandledCuda|Remote)Error")

# process death (log_patterns.md §8)
_KERNEL_OOM = re.compile(r"(?P<cg>Memory cgroup )?[Oo]ut of memory: Killed process (?P<pid>\d+) \((?P<comm>[^)]+)\)"
                         r"(?: total-vm:\d+kB, anon-rss:(?P<rss>\d+)kB)?")
_SHELL_KILLED = re.compile(r"line \d+:\s+(?P<pid>\d+) Killed\s+(?P<cmd>.+)$|^\s*Killed\s*$")
_SLURM_OOM = re.compile(r"Detected (?P<n>\d+) oom[-_]kill event|task \d+: Out Of Memory")
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\)")
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")
_LAUNCHER_EXIT = re.compile(r"\[launch\.py:\d+:sigkill_handler\] .*exits with return code = (?P<rc>-?\d+)")
_CPU_ALLOC = re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (?P<bytes>\d+) bytes")
_CF_RANK = re.compile(r"rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<lr>\d+)\)")
_CF_EXIT = re.compile(r"exitcode\s*:\s*(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)(?:\s*\((?P<sig>SIG\w+)\))?")
_CF_HOST = re.compile(r"host\s*:\s*(?P<host>\S+)")
_CF_TB = re.compile(r"traceback\s*:\s*(?P<tb>.*)")

# HF Trainer / LLaMA-Factory metric dicts (log_patterns.md §7): 4.x bare floats and nan, 5.x '.4g' strings
_KV = re.compile(r"'(?P<k>[\w/]+)':\s*(?P<q>'?)(?P<v>[^,'}]*)(?P=q)")
_LF_CALLBACK = re.compile(r"callbacks(?:\.py)?(?::\d+)? (?:>>|-) ")
_DS_PROGRESS = re.compile(r"\[Rank (?P<rank>\d+)\] step=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=\[(?P<lr>[^\]]*)\]")

# see_memory_usage (log_patterns.md §3)
_MEM_MA = re.compile(r"MA (?P<ma>[\d.]+) GB\s+Max_MA (?P<mma>[\d.]+) GB\s+CA (?P<ca>[\d.]+) GB\s+Max_CA (?P<mca>[\d.]+) GB")
_MEM_CPU = re.compile(r"CPU Virtual Memory:\s+used = (?P<used>[\d.]+) GB, percent = (?P<pct>[\d.]+)%")
_DS_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\] \[[\w.]+:\d+:\w+\] ")

# exceptions and warnings
_EXC = re.compile(r"^\s*(?P<cls>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)|Exception):\s?(?P<msg>.*)$")
_LF_LOG = re.compile(r"^\[(?P<lvl>WARNING|ERROR)\|(?P<where>[^\]]+)\]\s*(?:[\d-]+ [\d:,]+ )?(?:(?P<logger>[\w.]+):\d+ )?>> (?P<msg>.*)$")
_ATTN_WARN = re.compile(r"strongly recommended to train (?P<model>\w+) models with the `?(?P<want>\w+)`? attention "
                        r"implementation instead of `?(?P<have>\w+)`?")

# run facts
_FACTS = [   # (fact, a literal every matching line contains, expression, conversion)
    ("total_steps", "Total optimization", re.compile(r"Total optimization steps = (?P<v>[\d,]+)"), int),
    ("num_epochs", "Num Epochs", re.compile(r"Num Epochs = (?P<v>[\d,.]+)"), float),
    ("grad_accum", "Gradient Accumulation", re.compile(r"Gradient Accumulation steps = (?P<v>[\d,]+)"), int),
    ("micro_batch", "Instantaneous", re.compile(r"Instantaneous batch size per device = (?P<v>[\d,]+)"), int),
    ("total_batch", "Total train batch", re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = (?P<v>[\d,]+)"), int),
    ("trainable_params", "Number of trainable", re.compile(r"Number of trainable parameters = (?P<v>[\d,]+)"), int),
    ("trainable_params", "trainable params", re.compile(r"trainable params: (?P<v>[\d,]+) \|\|"), int),
    ("all_params", "all params", re.compile(r"all params: (?P<v>[\d,]+)"), int),
    ("world_size", "world", re.compile(r"world[ _]size(?: =|:)\s*(?P<v>\d+)"), int),
    ("world_size", "world_size", re.compile(r"\[config\.py:\d+:print\]\s+world_size \.+ (?P<v>\d+)"), int),
    ("compute_dtype", "compute dtype", re.compile(r"compute dtype: (?:torch\.)?(?P<v>\w+)"), str),
    ("ds_version", "DeepSpeed info", re.compile(r"DeepSpeed info: version=(?P<v>[^,]+)"), str),
    ("zero_stage", "ZeRO stage", re.compile(r"Creating (?:torch\.\w+|fp16|fp32|bf16) ZeRO stage (?P<v>\d) optimizer"), int),
    ("zero_stage", "zero_optimization_stage", re.compile(r"zero_optimization_stage \.+ (?P<v>\d)"), int),
    ("zero_stage", "zero_config", re.compile(r"zero_config \.+ stage=(?P<v>\d)"), int),
    ("overlap_comm", "zero_config", re.compile(r"zero_config \.+ .*\boverlap_comm=(?P<v>True|False)"), lambda v: v == "True"),
    ("fp16_enabled", "fp16_enabled", re.compile(r"fp16_enabled \.+ (?P<v>True|False)"), lambda v: v == "True"),
    ("fp16_enabled", "float16_config", re.compile(r"float16_config \.+ enabled=(?P<v>True|False)"), lambda v: v == "True"),
    ("bf16_enabled", "bfloat16_enabled", re.compile(r"bfloat16_enabled \.+ (?P<v>True|False)"), lambda v: v == "True"),
    ("bf16_enabled", "bfloat16_config", re.compile(r"bfloat16_config \.+ enabled=(?P<v>True|False)"), lambda v: v == "True"),
    ("min_loss_scale", "float16_config", re.compile(r"float16_config \.+ .*\bmin_loss_scale=(?P<v>[\d.]+)"), float),
    ("initial_scale_power", "float16_config", re.compile(r"float16_config \.+ .*\binitial_scale_power=(?P<v>\d+)"), int),
    ("ds_params_elems", "num_elems", re.compile(r"finished initializing model - num_params = \d+, num_elems = (?P<v>[\d.]+[KMBT]?)"), str),
]
_ZERO3_DETECTED = re.compile(r"Detected DeepSpeed ZeRO-3")
_RUN_START = re.compile(r"\*+ Running training \*+")
_RESUME = re.compile(r"Continuing training from (?:checkpoint, will skip to saved global_step|global step (?P<step>\d+))")


class _Keep:
    """Capped lists: keep the first MAX_RECORDS of each kind, count the rest."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = {}
        self.dropped: dict[str, int] = {}

    def add(self, kind: str, item: Any) -> None:
        lst = self.lists.setdefault(kind, [])
        if len(lst) < MAX_RECORDS:
            lst.append(item)
        else:
            self.dropped[kind] = self.dropped.get(kind, 0) + 1

    def get(self, kind: str) -> tuple[Any, ...]:
        return tuple(self.lists.get(kind, ()))


def _num(v: str) -> float | None:
    v = v.strip()
    try:
        return float(v)
    except ValueError:
        return None


def _int(v: str) -> int:
    return int(v.replace(",", ""))


def _open_chunks(path: str, problems: list[str]) -> Iterator[bytes]:
    """Yield the file's bytes in CHUNK pieces: gzip is decompressed; UTF-16 (with a BOM) is re-encoded to UTF-8."""
    with open(path, "rb") as raw:
        head = raw.read(4)
        raw.seek(0)
        if head[:2] == b"\x1f\x8b":
            fh: Any = gzip.open(raw)
        else:
            fh = raw
        if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
            dec = codecs.getincrementaldecoder("utf-16")(errors="replace")
            problems.append("UTF-16 text (re-encoded to UTF-8 for reading)")
            while True:
                b = fh.read(CHUNK)
                if not b:
                    tail = dec.decode(b"", final=True)
                    if tail:
                        yield tail.encode("utf-8")
                    return
                yield dec.decode(b).encode("utf-8")
        try:
            while True:
                b = fh.read(CHUNK)
                if not b:
                    return
                yield b
        except (OSError, EOFError) as err:  # a truncated gzip stream
            problems.append(f"stopped early: {err}")


def looks_binary(sample: bytes) -> bool:
    """True when a file's leading bytes are not text: a NUL or >10 % control bytes in the first 512 bytes
    (an event file, a pickle, an image), or >30 % in the whole sample. UTF-16 and gzip are text here."""
    if not sample:
        return False
    if sample[:2] in (b"\xff\xfe", b"\xfe\xff") or sample[:2] == b"\x1f\x8b":
        return False

    def bad(b: bytes) -> int:
        return sum(1 for c in b if c < 9 or 13 < c < 32 or c == 127)

    head = sample[:512]
    if b"\x00" in head or bad(head) > len(head) * 0.1:
        return True
    return bad(sample) > len(sample) * 0.3


class _TextLogParser:
    """State of one text-log scan. Call `feed_line` for every triggered line, in file order."""

    def __init__(self, path: str):
        self.path = path
        self.keep = _Keep()
        self.series: dict[str, Series] = {}
        self.facts: dict[str, Fact] = {}
        self.step: int | None = None          # completed optimizer steps per the last training bar
        self.train_total: int | None = None
        self.bar_total_max = 0
        self.run_starts = 0
        self.last_mem_label: str | None = None
        self.last_mem_label_line = 0
        self.items = 0
        self.nccl_seen: set[tuple] = set()
        self.pending_mem: MemoryRecord | None = None
        self.in_step = False      # a line printed during step self.step + 1 has followed the last bar

    # -- progress -------------------------------------------------------------------------------------------
    def progress(self, window: bytes) -> None:
        """Move the step to the last training bar in `window`. Searched backwards from the end (only the last
        bar matters), skipping bars of other loops: an eval loop's total, a datasets.map "examples/s" bar."""
        end = len(window)
        for _ in range(64):
            k = max(window.rfind(b"s/it]", 0, end), window.rfind(b"it/s]", 0, end))
            if k < 0:
                return
            j = window.rfind(b"|", max(0, k - 120), k)
            if j < 0:
                end = k
                continue
            m = _TQDM.match(window, j)
            end = j
            if m is None or not _TQDM_UNIT.match(window, m.end(), k + 5):
                continue
            n, total = int(m.group(1)), int(m.group(2))
            if self.train_total is not None:
                if total != self.train_total:
                    continue
            elif total < self.bar_total_max:
                continue
            else:
                self.bar_total_max = total
            if n != self.step:
                self.in_step = False
            self.step = n
            return

    def during(self) -> int | None:
        """The step in progress: one past the last completed step on the training bar."""
        return None if self.step is None else self.step + 1

    def logged(self) -> int | None:
        """The step a metric dict belongs to: the bar's step, or the step in progress once a line printed
        during that step has followed the bar (see the module docstring)."""
        return self.during() if self.in_step else self.step

    # -- helpers --------------------------------------------------------------------------------------------
    def fact(self, name: str, value: Any, line: int) -> None:
        if name not in self.facts:
            self.facts[name] = Fact(name, value, self.path, line)
            if name == "total_steps":
                self.train_total = int(value)

    def point(self, name: str, step: int | None, value: float, line: int) -> None:
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series(name, self.path)
        s.append(step, value, line)

    # -- one line -------------------------------------------------------------------------------------------
    def feed_line(self, text: str, line: int, context: "_Context") -> int:
        """Parse one triggered line. Returns how many *extra* bytes after the line a parser consumed (0)."""
        text = _ANSI.sub("", text).strip("\r\n")
        rank = None
        m = _RANK_ANY.search(text)   # "[rank3]: " starts the line, or follows a tqdm fragment on it
        if m:
            rank = int(m.group(1))
            text = text[:m.start()] + text[m.end():] if m.start() else text[m.end():]
        self.items += 1

        if "out of memory" in text or "OutOfMemoryError" in text or "ALLOC_FAILED" in text \
                or "cudaErrorMemoryAllocation" in text:
            if self._oom(text, line, rank, context):
                return 0
        if "OVERFLOW!" in text or "overflow!" in text or "Overflow detected" in text or "dynamic loss scale from" in text:
            self._overflow(text, line, rank)
        if "at minimum - cannot" in text and _DS_MIN_SCALE.search(text):
            self.keep.add("aborts", Notice(self.path, line, self.during(), "min-loss-scale", text.strip()))
        if "Watchdog caught" in text or "NCCL work:" in text or "watchdog got stuck" in text \
                or "NCCL error" in text or "nccl" in text:
            self._nccl(text, line, rank)
        if "'loss': " in text or "{'eval_" in text or "{'train_runtime'" in text:
            if self._metric_dict(text, line) and "Error" not in text and "OVERFLOW" not in text:
                return 0   # the common case in a long log: a metric dict and nothing else on its line
        if '"current_steps"' in text:
            self._lf_jsonl(text, line)
        if "MA " in text or "CPU Virtual Memory" in text or "see_memory_usage" in text:
            self._memory(text, line, context)
        if ("Killed" in text or "exitcode" in text or "exits with return code" in text or "oom" in text
                or "Out Of Memory" in text or "Out of memory" in text or "received by PID" in text
                or "can't allocate memory" in text):
            self._kill(text, line, rank)
        if "Root Cause (first" in text:
            self._child_failed(line, context)
        if "[WARNING|" in text or "[ERROR|" in text or "strongly recommended to train" in text:
            self._warning(text, line)
        if "Traceback (most recent" in text:
            self.keep.add("notices", Notice(self.path, line, self.during(), "traceback", text.strip(), rank))
        if "Error" in text or "Exception" in text:
            m = _EXC.match(text)
            if m and "CUDA out of memory" not in text:
                self.keep.add("notices", Notice(self.path, line, self.during(), "exception", text.strip()[:500],
                                                {"cls": m.group("cls"), "msg": m.group("msg")[:300], "rank": rank}))
        self._facts(text, line)
        return 0

    def _facts(self, text: str, line: int) -> None:
        for name, kw, rx, conv in _FACTS:
            if name in self.facts or kw not in text:
                continue
            m = rx.search(text)
            if m:
                try:
                    v = m.group("v")
                    self.fact(name, conv(v.replace(",", "")) if conv in (int, float) else conv(v), line)
                except ValueError:
                    pass
        if "zero_stage" not in self.facts and _ZERO3_DETECTED.search(text):
            self.fact("zero_stage", 3, line)
        if _RUN_START.search(text):
            self.run_starts += 1
            if self.run_starts > 1:
                self.keep.add("restarts", Restart(self.path, line, self.step, "relaunch",
                                                  f"training started again (launch #{self.run_starts} in this log)"))
        m = _RESUME.search(text)
        if m:
            st = int(m.group("step")) if m.group("step") else None
            self.keep.add("restarts", Restart(self.path, line, st, "resume", text.strip()[:200]))

    # -- OOM ------------------------------------------------------------------------------------------------
    def _oom(self, text: str, line: int, rank: int | None, context: "_Context") -> bool:
        rec = None
        m = _OOM_V2.search(text)
        if m:
            procs, this = [], None
            for pm in _OOM_PROC.finditer(m.group("procs") or ""):
                if pm.group("self"):
                    this = size_bytes(pm.group("mem"))
                else:
                    procs.append((int(pm.group("pid")), size_bytes(pm.group("mem")) or 0.0))
            rec = OomRecord(self.path, line, self.during(), rank, "v2", exc=m.group("exc"),
                            requested=size_bytes(m.group("requested")), gpu=int(m.group("gpu")),
                            total=size_bytes(m.group("total")), free=size_bytes(m.group("free")),
                            allocated=size_bytes(m.group("allocated")),
                            reserved_unallocated=size_bytes(m.group("reserved_unallocated")),
                            private_pools=size_bytes(m.group("private_pools")), allowed=size_bytes(m.group("allowed")),
                            this_process=this, procs=tuple(procs))
        else:
            m = _OOM_LEGACY.search(text)
            if m:
                rec = OomRecord(self.path, line, self.during(), rank, "legacy", exc=m.group("exc"),
                                requested=size_bytes(m.group("requested")), gpu=int(m.group("gpu")),
                                total=size_bytes(m.group("total")), free=size_bytes(m.group("free")),
                                allocated=size_bytes(m.group("allocated")), reserved=size_bytes(m.group("reserved")),
                                allowed=size_bytes(m.group("allowed")))
            elif "CUDA out of memory" in text:
                # a message cut by the paste: keep it only if it is an exception line or names a size
                m = _OOM_PARTIAL.search(text)
                if m and (m.group("exc") or m.group("requested") or text.lstrip().startswith("CUDA out of memory")):
                    rec = OomRecord(self.path, line, self.during(), rank, "partial", exc=m.group("exc"),
                                    requested=size_bytes(m.group("requested")))
            elif _OOM_RUNTIME.search(text):
                rec = OomRecord(self.path, line, self.during(), rank, "runtime")
        if rec is None:
            return False
        frames = context.frames()
        rec = replace(rec, frames=frames, memory_label=self.last_mem_label, text=text.strip()[:1000])
        self.keep.add("ooms", rec)
        return True

    # -- loss scaling -----------------------------------------------------------------------------------------
    def _overflow(self, text: str, line: int, rank: int | None) -> None:
        m = _DS_OVERFLOW.search(text)
        if m:
            r = int(m.group("rank")) if m.group("rank") else rank
            if m.group("new"):
                rec = OverflowRecord(self.path, line, self.during(), r, "reduce", float(m.group("attempted")),
                                     float(m.group("new")))
            elif m.group("h"):
                rec = OverflowRecord(self.path, line, self.during(), r, "hysteresis", float(m.group("attempted")),
                                     float(m.group("attempted")), int(m.group("h2")))
            else:
                rec = OverflowRecord(self.path, line, self.during(), r, "bare")
            self.keep.add("overflows", rec)
            self.in_step = self.step is not None
            if rec.new_scale is not None:
                self.point("loss_scale", self.during(), rec.new_scale, line)
            return
        m = _DS_OVERFLOW_DETECTED.search(text)
        if m:
            rec = OverflowRecord(self.path, line, self.during(), rank, "reduce", float(m.group("attempted")),
                                 float(m.group("new")))
            self.keep.add("overflows", rec)
            self.in_step = self.step is not None
            self.point("loss_scale", self.during(), rec.new_scale, line)
            return
        m = _DS_SCALE_CHANGE.search(text)
        if m and m.group("dir") == "Increasing":
            self.keep.add("overflows", OverflowRecord(self.path, line, self.during(), rank, "increase",
                                                      float(m.group("old")), float(m.group("new"))))
            self.in_step = self.step is not None
            self.point("loss_scale", self.during(), float(m.group("new")), line)

    # -- NCCL -------------------------------------------------------------------------------------------------
    def _nccl(self, text: str, line: int, rank: int | None) -> None:
        m = _NCCL_TIMEOUT.search(text)
        if m:
            r = int(m.group("rank")) if m.group("rank") else rank

            def gi(k: str) -> int | None:
                return int(m.group(k)) if m.group(k) else None

            key = ("timeout", r, gi("seq"), m.group("op"))
            if key in self.nccl_seen:   # the same timeout repeated by "watchdog thread terminated" / "what():"
                return
            self.nccl_seen.add(key)
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), r, "timeout", op=m.group("op"),
                                             seq=gi("seq"), numel_in=gi("nin"), numel_out=gi("nout"),
                                             timeout_ms=gi("tmo"), ran_ms=gi("ran"), text=text.strip()[:500]))
            return
        m = _NCCL_LAST.search(text)
        if m:
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), int(m.group("rank")), "last_work",
                                             work=int(m.group("work")), last_enqueued=int(m.group("enq")),
                                             last_completed=int(m.group("done")), text=text.strip()[:500]))
            return
        m = _NCCL_HEARTBEAT.search(text)
        if m:
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), int(m.group("rank")) if m.group("rank")
                                             else rank, "heartbeat", ran_ms=int(m.group("sec")) * 1000,
                                             text=text.strip()[:500]))
            return
        if _NCCL_ERROR.search(text):
            self.keep.add("nccl", NcclRecord(self.path, line, self.during(), rank, "error", text=text.strip()[:500]))

    # -- metrics ----------------------------------------------------------------------------------------------
    def _metric_dict(self, text: str, line: int) -> bool:
        i = text.find("{'")
        body = text[i:] if i >= 0 else text[text.find("'loss'"):] if "'loss'" in text else text
        kv: dict[str, float] = {}
        for m in _KV.finditer(body):
            v = _num(m.group("v"))
            if v is not None:
                kv[m.group("k")] = v
        if not kv:
            return False
        prefix = "lf_" if _LF_CALLBACK.search(text[:max(i, 0)] if i >= 0 else text) else ""
        if "train_runtime" in kv or "train_loss" in kv:
            self.keep.add("notices", Notice(self.path, line, self.logged(), "train-summary", body[:500], kv))
            return True
        if "loss" in kv:
            for key, name in (("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "learning_rate"),
                              ("epoch", "epoch")):
                if key in kv:
                    self.point(prefix + name, self.logged(), kv[key], line)
            return True
        if "eval_loss" in kv:
            self.point(prefix + "eval_loss", self.logged(), kv["eval_loss"], line)
            return True
        return False

    def _lf_jsonl(self, text: str, line: int) -> None:
        i = text.find("{")
        try:
            d = json.loads(text[i:])
        except (ValueError, TypeError):
            return
        if not isinstance(d, dict):
            return
        st = d.get("current_steps")
        for key, name in (("loss", "loss"), ("lr", "learning_rate"), ("epoch", "epoch"), ("eval_loss", "eval_loss")):
            v = d.get(key)
            if isinstance(v, (int, float)):
                self.point(name, st, float(v), line)

    # -- memory -----------------------------------------------------------------------------------------------
    def _memory(self, text: str, line: int, context: "_Context") -> None:
        m = _MEM_MA.search(text)
        if m:
            label = context.previous_line()
            label = _DS_PREFIX.sub("", label).strip() if label else None
            if label and (_MEM_MA.search(label) or _MEM_CPU.search(label)):
                label = None
            rec = MemoryRecord(self.path, line, self.during(), label, float(m.group("ma")), float(m.group("mma")),
                               float(m.group("ca")), float(m.group("mca")))
            self.keep.add("memory", rec)
            if label:
                self.last_mem_label, self.last_mem_label_line = label, line
            return
        m = _MEM_CPU.search(text)
        mem = self.keep.lists.get("memory")
        if m and mem and mem[-1].line >= line - 2 and mem[-1].cpu_used is None:
            mem[-1] = replace(mem[-1], cpu_used=float(m.group("used")), cpu_percent=float(m.group("pct")))
        elif m:
            self.keep.add("memory", MemoryRecord(self.path, line, self.during(), None, cpu_used=float(m.group("used")),
                                                 cpu_percent=float(m.group("pct"))))

    # -- process death ----------------------------------------------------------------------------------------
    def _kill(self, text: str, line: int, rank: int | None) -> None:
        st = self.during()
        m = _KERNEL_OOM.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "cgroup-oom" if m.group("cg") else "kernel-oom",
                                              signal="SIGKILL", pid=int(m.group("pid")),
                                              bytes=int(m.group("rss")) * 1024 if m.group("rss") else None,
                                              text=text.strip()[:300]))
            return
        m = _SLURM_OOM.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "slurm-oom", signal="SIGKILL", text=text.strip()[:300]))
            return
        m = _TORCHRUN_FAILED.search(text)
        if m:
            code = int(m.group("code"))
            self.keep.add("kills", KillRecord(self.path, line, st, "torchrun-exit", exitcode=code,
                                              signal=_signame(code), local_rank=int(m.group("lr")),
                                              pid=int(m.group("pid")), text=text.strip()[:300]))
            return
        m = _LAUNCHER_EXIT.search(text)
        if m:
            code = int(m.group("rc"))
            self.keep.add("kills", KillRecord(self.path, line, st, "launcher-exit", exitcode=code,
                                              signal=_signame(code), text=text.strip()[:300]))
            return
        m = _CPU_ALLOC.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "cpu-alloc", bytes=float(m.group("bytes")),
                                              text=text.strip()[:300]))
            return
        m = _SHELL_KILLED.search(text)
        if m:
            self.keep.add("kills", KillRecord(self.path, line, st, "shell-killed", exitcode=137, signal="SIGKILL",
                                              pid=int(m.group("pid")) if m.group("pid") else None,
                                              text=text.strip()[:300]))
            return
        m = _SIGNAL.search(text)
        if m and "traceback" not in text:
            self.keep.add("kills", KillRecord(self.path, line, st, "signal", exitcode=-int(m.group("num")),
                                              signal=m.group("name"), pid=int(m.group("pid")), rank=rank,
                                              text=text.strip()[:300]))

    def _child_failed(self, line: int, context: "_Context") -> None:
        """torchrun's ChildFailedError block: parse the entry under "Root Cause (first observed failure):"."""
        rank = lr = code = pid = None
        sig = host = tb = None
        for ln in context.following_lines(12):
            ln = _RANK.sub("", ln)
            if ln.strip().startswith("=") and rank is not None:
                break
            if (m := _CF_RANK.search(ln)):
                rank, lr = int(m.group("rank")), int(m.group("lr"))
            elif (m := _CF_EXIT.search(ln)):
                code, pid, sig = int(m.group("code")), int(m.group("pid")), m.group("sig")
            elif (m := _CF_HOST.search(ln)):
                host = m.group("host")
            elif (m := _CF_TB.search(ln)):
                tb = m.group("tb").strip()
        if code is None:
            return
        if sig is None:
            sig = _signame(code)
        self.keep.add("kills", KillRecord(self.path, line, self.during(), "child-failed-root", exitcode=code,
                                          signal=sig, rank=rank, local_rank=lr, pid=pid, host=host,
                                          text=(tb or "")[:300]))

    def _warning(self, text: str, line: int) -> None:
        m = _ATTN_WARN.search(text)
        if m:
            self.keep.add("notices", Notice(self.path, line, self.during(), "attention-warning", text.strip()[:400],
                                            {"model": m.group("model"), "want": m.group("want"),
                                             "have": m.group("have")}))
            return
        m = _LF_LOG.match(text.strip())
        if m:
            self.keep.add("notices", Notice(self.path, line, self.during(), m.group("lvl").lower(),
                                            m.group("msg").strip()[:400], {"where": m.group("where"),
                                                                          "logger": m.group("logger")}))


def _signame(code: int | None) -> str | None:
    return {-9: "SIGKILL", 137: "SIGKILL", -6: "SIGABRT", 134: "SIGABRT", -15: "SIGTERM", 143: "SIGTERM",
            -11: "SIGSEGV", 139: "SIGSEGV", -7: "SIGBUS"}.get(code) if code is not None else None


class _Context:
    """Access to the bytes around the line being parsed (bounded: LOOKBACK before, LOOKAHEAD after)."""

    def __init__(self) -> None:
        self.buf = b""
        self.ls = 0
        self.le = 0

    def set(self, buf: bytes, ls: int, le: int) -> None:
        self.buf, self.ls, self.le = buf, ls, le

    def previous_line(self) -> str | None:
        end = self.ls - 1
        if end <= 0:
            return None
        start = max(self.buf.rfind(b"\n", max(0, end - MAX_LINE), end), self.buf.rfind(b"\r", max(0, end - MAX_LINE), end))
        return self.buf[start + 1:end].decode("utf-8", "replace").strip() or None

    def following_lines(self, n: int) -> list[str]:
        chunk = self.buf[self.le:self.le + LOOKAHEAD].decode("utf-8", "replace")
        return chunk.splitlines()[1:n + 1]

    def frames(self) -> tuple[str, ...]:
        """Function names and code lines of the traceback around the current line, nearest first: the frames
        above it up to "Traceback (most recent call last)", else a traceback that starts right below it."""
        before = self.buf[max(0, self.ls - 8192):self.ls].decode("utf-8", "replace").splitlines()[-80:]
        out: list[str] = []
        for ln in reversed(before):
            ln = _RANK.sub("", ln)
            if "Traceback (most recent call last)" in ln:
                break
            if _EXC.match(ln) and out:  # a previous exception: this traceback ended before it
                break
            _frame(ln, out)
        if not out:
            after = self.buf[self.le:self.le + 8192].decode("utf-8", "replace").splitlines()[1:80]
            if after and "Traceback (most recent call last)" in _RANK.sub("", after[0]):
                lines = []
                for ln in after[1:]:
                    ln = _RANK.sub("", ln)
                    if _EXC.match(ln):
                        break
                    lines.append(ln)
                for ln in reversed(lines):
                    _frame(ln, out)
        return tuple(out[:40])


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>[\d.]+), in (?P<func>[\w<>]+)')


def _frame(ln: str, out: list[str]) -> None:
    m = _FRAME.match(ln)
    if m:
        out.append(f"{m.group('func')} ({os.path.basename(m.group('file'))})")
    elif ln.strip() and not ln.strip().startswith(("^", "~")):
        out.append(ln.strip()[:200])


def read_text_log(path: str) -> FileEvidence:
    """Stream one captured log and extract every metric, OOM, loss-scale, NCCL, kill and warning line.

    Returns a `FileEvidence` whose `read` says how many bytes and lines were read and what went wrong.
    Memory: a few 8 MiB buffers plus the kept series/records, whatever the file size.
    Raises InputError only if the path cannot be opened at all.
    """
    problems: list[str] = []
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            sample = fh.read(65536)
    except OSError as err:
        raise InputError(f"cannot read log: {err.strerror or err}", file=path) from None
    if looks_binary(sample):
        return FileEvidence(FileRead(path, "unknown", size, 0, complete=False,
                                     problems=("not a text file (binary content); skipped",)))
    p = _TextLogParser(path)
    ctx = _Context()
    pending = b""
    prev_tail = b""
    line_no = 1
    read = 0
    nul = 0
    skip_abs = 0          # hits before this absolute offset were consumed by an earlier line
    abs_pending = 0       # absolute offset of pending[0]
    tq_abs = 0            # absolute offset up to which tqdm bars were scanned
    chunks = _open_chunks(path, problems)
    eof = False
    last_byte = b"\n"
    while not eof:
        chunk = next(chunks, None)
        if chunk is None:
            eof = True
            chunk = b""
        read += len(chunk)
        if chunk:
            last_byte = chunk[-1:]
        nul += chunk.count(b"\x00")
        data = pending + chunk
        if eof:
            cut = len(data)
        else:
            cut = data.rfind(b"\n", 0, max(0, len(data) - LOOKAHEAD))
            if cut < 0:
                if len(data) < MAX_PENDING:
                    pending = data
                    continue
                cut = len(data) - LOOKAHEAD
                problems.append(f"a line longer than {MAX_PENDING >> 20} MiB near byte {abs_pending + cut} was split")
            else:
                cut += 1
        buf = prev_tail + data
        off = len(prev_tail)
        base_abs = abs_pending - off          # absolute offset of buf[0]
        cursor, line = off, line_no
        end = off + cut
        for m in _TRIGGER.finditer(buf, off, end):
            pos = m.start()
            if pos + base_abs < skip_abs:
                continue
            lo = max(0, pos - MAX_LINE)
            ls = max(buf.rfind(b"\n", lo, pos), buf.rfind(b"\r", lo, pos))
            ls = ls + 1 if ls >= 0 else lo      # a longer line is cut to MAX_LINE before the hit
            le_n = buf.find(b"\n", pos, pos + MAX_LINE)
            le_r = buf.find(b"\r", pos, pos + MAX_LINE)
            cands = [x for x in (le_n, le_r) if x >= 0]
            le = min(cands) if cands else min(len(buf), pos + MAX_LINE)
            line += buf.count(b"\n", cursor, pos)
            cursor = pos
            win_start = max(tq_abs - base_abs, 0)
            if win_start < pos:
                p.progress(buf[win_start:pos])
                tq_abs = base_abs + pos
            ctx.set(buf, ls, le)
            p.feed_line(buf[ls:le].decode("utf-8", "replace"), line, ctx)
            skip_abs = base_abs + le
        # bars after the last hit of this piece still move the step
        if tq_abs < base_abs + end:
            p.progress(buf[max(tq_abs - base_abs, off):end])
            tq_abs = base_abs + end
        line_no += data.count(b"\n", 0, cut)
        prev_tail = (prev_tail + data[:cut])[-LOOKBACK:]
        pending = data[cut:]
        abs_pending += cut
    if nul:
        problems.append(f"{nul} NUL bytes (binary junk) ignored")
    lines = line_no - 1 + (1 if read and last_byte != b"\n" else 0)
    series = tuple(p.series.values())
    dropped = dict(p.keep.dropped)
    rd = FileRead(path, "text-log", size, read, lines=lines, items=p.items, complete=not any(
        "stopped early" in x for x in problems), problems=tuple(problems))
    return FileEvidence(
        read=rd, series=series, ooms=p.keep.get("ooms"), overflows=p.keep.get("overflows"),
        aborts=p.keep.get("aborts"), nccl=p.keep.get("nccl"), kills=p.keep.get("kills"),
        memory=p.keep.get("memory"), notices=p.keep.get("notices"), facts=tuple(p.facts.values()),
        restarts=p.keep.get("restarts"), dropped=dropped, last_step=p.logged(), total_steps=p.train_total or
        (p.bar_total_max or None))


# -- GPU recordings ------------------------------------------------------------------------------------------------
# nvidia-smi tables and --query-gpu CSV, doctor gpus --record files and per-card summaries are read by
# readers/smi.py; here we only recognise them so that they are not scanned as training logs.
_GPU_CSV_HEAD = re.compile(r"\b(index|uuid)\b.*\bmemory\.used\b|\bmemory\.used\b.*\b(index|uuid)\b", re.I)
_GPU_SUMMARY = re.compile(r"^\s*gpu\s*\d+\s*$", re.M | re.I)


def looks_gpu_record(sample: bytes) -> bool:
    """True when a file starts like a GPU recording readers/smi.py reads (not like a training log)."""
    text = sample[:8192].decode("utf-8", "replace")
    head = text.lstrip()
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    if "," in first and _GPU_CSV_HEAD.search(first):
        return True
    if head.startswith('{"schema": "finetune-doctor/gpus-record'):
        return True
    if re.match(r"^(?:\w{3} \w{3}\s+\d+ [\d:]+ \d{4}\s*)?\+-+\+", head) and "NVIDIA-SMI" in head[:2000]:
        return True
    return bool(_GPU_SUMMARY.search(head[:2000]) and re.search(r"^\s*used:", head[:2000], re.M | re.I)
                and not _TRIGGER.search(sample[:8192]))


def sniff(path: str) -> str:
    """Guess what a file given with ``--log`` (or a ``*.txt``/``*.log`` of the run directory) is:
    trainer-log | trainer-state | event-file | gpu-record | text-log | unknown (binary)."""
    name = os.path.basename(path)
    if "tfevents" in name:
        return "event-file"
    try:
        with open(path, "rb") as fh:
            sample = fh.read(65536)
    except OSError:
        return "text-log"
    head = sample.lstrip()[:200]
    if head.startswith(b'{"current_steps"'):
        return "trainer-log"
    if head.startswith(b"{") and b'"log_history"' in sample:
        return "trainer-state"
    if looks_gpu_record(sample):
        return "gpu-record"
    if looks_binary(sample):
        return "unknown"
    return "text-log"


__all__ = ["read_text_log", "sniff", "size_bytes", "looks_binary", "looks_gpu_record"]
