"""What the postmortem readers found in a run's leftovers, typed and with positions, never judged.

Readers (readers/runlogs/logs.py, readers/runlogs/trainer_log.py, readers/runlogs/tbevents.py, readers/runlogs/trackers.py, readers/runlogs/elastic.py,
readers/runlogs/flight.py; found by readers/runlogs/runlayout.py) return these frozen dataclasses; the timeline analyzer
(analyzers/postmortem/timeline.py) turns them into timeline events and the ``ev`` fact namespace that the postmortem rules
read. Nothing here imports more than the standard library.

Units: memory sizes are **bytes** (as parsed from the message, GiB = 2^30 bytes); steps are optimizer steps
(``global_step``) where the source says so; ``line`` is 1-based and counts ``\\n`` line feeds (a tqdm bar that
rewrites itself with ``\\r`` stays on one line, as an editor shows it). For event files ``line`` holds the
1-based record number instead.

Series keep every point in typed arrays, 24 bytes per point (int64 step, float64 value, int64 line), up to
SERIES_CAP (1,048,576 points, 24 MiB) per series; a longer curve is thinned 2:1 each time it fills, keeping
non-finite values and the larger move of each pair (``Series.stride`` says how many logs a point stands for).

The ``ev`` fact namespace
-------------------------
analyzers/postmortem/timeline.py `analyze` turns an `Evidence` into the ``ev`` namespace that postmortem rules read
(merged by pipeline/postmortem.py beside cfg/run/model/hw/mem/ds of ``facts.config.assemble_config``). Plain dicts and
lists; a missing fact is None; every ``location`` is ``{file, line, column, key}`` of the evidence line:

==================  ==========================================================================================
files / readable    files read / files that yielded anything; ``unread``: paths with problems
has_metrics         a loss curve was found
completed           the training loop finished (summary dict, ``*_results.json``, LF's final log line)
steps               {first, last, total, logged}
loss, grad_norm     {n, first, first_step, last, last_step, min, max, median, nonfinite, zeros, basis, file}
lr                  {first, peak, peak_step, warmup_end_step, last, schedule}
first_loss          {value, step, vocab, ln_vocab, threshold, ratio, abnormal, vocab_known, location}
nan                 first non-finite loss/grad_norm: {step, step_text, metric, what, value, loss, grad_norm, lr,
                    epoch, healthy_before, healthy_text, first_logged, hidden, count, cause, cause_text, fix_title,
                    prev_finite_step, gap_steps, ref_model (analyzers/postmortem/refmodel.py), location}
loss_zero           {start_step, count, until_end, with_grad_nan, grad_norm, meaning, location}
loss_spike          first merged loss spike {step, value, baseline, sigma, score, ratio, count, peak, method: robust|jump,
                    gap_steps, prev_step, prev_value, location};
                    ``loss_spikes`` counts them; ``grad_spike`` / ``grad_spikes`` the same for grad_norm
grad_const          {value, value_text, count, first_step, last_step, sqrt_k, loss_varies, location}
scale               DeepSpeed loss scale {text, initial, min, last, overflows, reductions, after_calibration,
                    increases, trajectory: benign|collapse|abort, abort, still_falling, first_step, last_step,
                    min_loss_scale, location}
amp_skips           HF AMP skipped steps {count, steps, location}; ``benign_overflow`` {text, kind, location}
fp16                {in_use, source, model_bf16, model_text, evidence, confirmed, hw_bf16, location}
lr_high             {lr, threshold, step, what, reason, suggested, fix_title, finetuning_type, location}
oom                 {step, gpu, rank, format, exc, requested_gib, total_gib, free_gib, allocated_gib,
                    reserved_gib, reserved_unallocated_gib, this_process_gib, fragmented, foreign {gib, kind,
                    text, pids, fix}, phase, phase_evidence, match {label, formula, expected_gib, ratio, phase},
                    when_text, summary, advice, timeline_text, stage_text, count, ranks, params, world, location}
nccl                {rank, op, what, seq, timeout_ms, timeout_text, ran_ms, numel_in, numel_out, step, kind, likely,
                    stragglers, ddp_timeout_fix, count, ranks, pg, pg_desc, first_failed, waiting, location}
killed              {kind, signal, exitcode, rank, local_rank, pid, host, step, host_oom, who, how, host_ram_text,
                    offload, count, outside, total, nohup, location}
host_alloc          {bytes, size_text, size_words, huge, phase, evidence, where_text, advice, allocator,
                    raised_text, count, step, location}: c10's "DefaultCPUAllocator: can't allocate memory", or
                    CPython's/NumPy's/Arrow's MemoryError, raised in-process (analyzers/postmortem/hostalloc.py)
crash               {kind: exception|traceback-only|child-failed, cls, msg, step, where_text, text, explained,
                    location, cause {kind, text} (analyzers/postmortem/crashcause.py; None where the text
                    establishes nothing beyond the exception), cause_text (" — " + cause.text, or ""), first (a
                    process raised it and others' failures followed: NCCL timeout/error, torchrun's teardown),
                    consequences (" — then ...: consequences of rank R's exception ...", or "")}
restarts            [{step, kind: resume|relaunch|session-start, detail, location}]
attention_warning   {model, want, have, text, location}
data_parallel       {batch, micro_batch, gpus, text, where, location}: HF Trainer's "Training with DataParallel so
                    batch size has been adjusted to: B" (analyzers/postmortem/dpcause.py)
gpus                {cards: [{index, name, node, peak_gib, total_gib, samples, location}], busiest, lightest, spread_gib,
                    nodes} (recordings of several nodes join: each card names its node)
cuda_error          {kind, exc, status, call, assert_site, assert_cond, out_of_vocab, table, rank, ranks, count, step,
                    meaning, fix_title, location} (analyzers/postmortem/failures.py)
xid                 {events: [{xid, pci, pid, process, host, meaning, action, who, location}], worst, count, codes,
                    hardware, location}
ranks               {count, nodes, node_count, table, first_failed {rank, node, gpu, kind, how, location}, waiting,
                    waiting_count, stragglers [{rank, node, sec_per_step, ratio, why}], desync {source, lagging, seq,
                    how, location}, failed_count} (analyzers/postmortem/ranks.py)
said                the user's description read from words when no log line gave evidence: {symptom, words, phase,
                    phase_words, step, after, text, location} (readers/runlogs/userwords.py, analyzers/postmortem/
                    said.py); ``basis`` is "words" then, else "log"
image_cut           transformers' features/tokens mismatch with fewer tokens than features: {state, modality,
                    tokens, features, missing, text, location} (analyzers/postmortem/mmcause.py); state "said" when
                    only the user's words name the mismatch, no count known (analyzers/postmortem/said.py)
ga_loss             a loss that follows gradient accumulation: {variant, shape, ga, release, release_text,
                    rows_text, columns | counts_text, location} (analyzers/postmortem/gaacc.py)
stack               {package: {version, source}}: versions the logs print (llamafactory-cli env, ds_report, NCCL)
skipped             [{path, why, extra}]: what was not read (not a regular file, a missing extra)
model, world        {params, params_source, trainable, vocab, name}; {value, source}
zero_stage          from the log, else the DeepSpeed config; ``overlap_comm`` likewise
events              the timeline as dicts
==================  ==========================================================================================
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterable

STEP_LIMIT = 1 << 62
"""Steps at or above this are no optimizer step (2^62: any real run is far below it; the int64 arrays hold up to
2^63 - 1, so arithmetic on them cannot overflow either)."""

SERIES_CAP = 1 << 20
"""Points kept per series (1,048,576: 24 MiB): a longer curve is thinned 2:1 each time it fills (Series._thin), so
a 512 MB log of metric lines (four curves of 5.4 M points) stays within the 400 MiB budget with the analyzers'
working copies (at 2^21 it peaked at 470 MiB: benchmarks/results/postmortem_big.md)."""

MAX_RECORDS = 5000
"""Per kind, per file: records kept in full (the rest are counted). Keeps memory bounded on pathological logs
that print the same OVERFLOW or warning line millions of times."""


def src(file: str | None, line: int | None) -> str | None:
    """``file:line`` as the timeline's ``source`` field shows it (None when the file is unknown)."""
    if file is None:
        return None
    return f"{file}:{line}" if line else file


@dataclass(frozen=True)
class FileRead:
    """What one reader could and could not read from one file.

    `kind` is text-log | trainer-log | trainer-state | results | args | event-file | nvidia-smi | unknown.
    `complete` is False when reading stopped early (truncated record, bad CRC that could not be skipped, a
    decode error); `problems` says what, one short sentence each. `items` counts what was extracted
    (metric rows, scalar points, matched log lines).
    """

    path: str
    kind: str
    size: int = 0
    bytes_read: int = 0
    lines: int = 0
    records: int = 0
    items: int = 0
    complete: bool = True
    problems: tuple[str, ...] = ()
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "size": self.size, "bytes_read": self.bytes_read,
                "lines": self.lines, "records": self.records, "items": self.items, "complete": self.complete,
                "problems": list(self.problems), "note": self.note}


@dataclass(frozen=True)
class Series:
    """One metric over steps, from one file. Every point is kept.

    `steps` are global steps, or -1 where the source gave none (HF's printed loss dicts carry no step; the
    analyzer assigns one). `lines` holds the 1-based line (text files) or record number (event files) of
    each point. `name` is the canonical metric (loss, grad_norm, learning_rate, epoch, eval_loss, loss_scale,
    ...) or, for event files, the tag itself (``train/loss``).
    """

    name: str
    file: str
    steps: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))
    lines: array = field(default_factory=lambda: array("q"))
    first_wall: float | None = None
    last_wall: float | None = None

    def __len__(self) -> int:
        return len(self.values)

    # steps that did not fit a 64-bit step (2^63 or more, inf, nan) and were kept as unknown (-1); a reader's
    # FileRead says how many (readers/runlogs/runlayout.py `read_file`)
    out_of_range: array = field(default_factory=lambda: array("q", [0]))
    # how many logged points each kept point stands for (1 until the series passes SERIES_CAP), see `_thin`
    stride: array = field(default_factory=lambda: array("q", [1]))

    def append(self, step: int | float | None, value: float, line: int) -> None:
        if type(step) is int and -1 <= step < STEP_LIMIT and type(line) is int and 0 <= line < STEP_LIMIT:
            self.steps.append(step)          # the common case, without the checks below
            self.values.append(value)
            self.lines.append(line)
            if len(self.values) >= SERIES_CAP:
                self._thin()
            return
        s = -1
        if step is not None:
            try:
                s = int(step)
            except (OverflowError, ValueError):
                s = None
            if s is None or not -1 <= s < STEP_LIMIT:
                self.out_of_range[0] += 1
                s = -1
        self.steps.append(s)
        self.values.append(value)
        self.lines.append(min(max(int(line), 0), STEP_LIMIT - 1))
        if len(self.values) >= SERIES_CAP:
            self._thin()

    @staticmethod
    def plain(steps: list, lines: list) -> bool:
        """True when every step and line is an int that `append` stores as it is (its fast case)."""
        return bool(steps) and set(map(type, steps)) == {int} and set(map(type, lines)) == {int} \
            and min(steps) >= -1 and max(steps) < STEP_LIMIT and min(lines) >= 0 and max(lines) < STEP_LIMIT

    def extend(self, steps: list, values: list[float], lines: list[int], plain: bool | None = None) -> None:
        """Append many points at once (equal-length lists, in order) with exactly the result of calling
        `append` for each: the bulk path of a text log's metric dicts. Whole stretches of plain steps go in with
        ``array.extend``, cut where the series fills so that `_thin` runs at the same points as it would.
        `plain`: the caller's `Series.plain(steps, lines)` (one test for several series sharing the steps)."""
        if not values:
            return
        if not (self.plain(steps, lines) if plain is None else plain):
            for s, v, ln in zip(steps, values, lines):
                self.append(s, v, ln)
            return
        i, n = 0, len(values)
        while i < n:
            j = min(n, i + SERIES_CAP - len(self.values))
            self.steps.extend(steps[i:j])
            self.values.extend(values[i:j])
            self.lines.extend(lines[i:j])
            i = j
            if len(self.values) >= SERIES_CAP:
                self._thin()

    def _thin(self) -> None:
        """Halve the kept points so memory stays bounded (SERIES_CAP points, 24 bytes each). Of each pair the
        non-finite point is kept, else the one farther from the point kept before it: a spike, a NaN or a jump
        survives thinning; the stride says how many logs a kept point stands for."""
        st, va, li = self.steps, self.values, self.lines
        ns, nv, nl = array("q"), array("d"), array("q")
        prev = va[0]
        for i in range(0, len(va) - 1, 2):
            a, b = va[i], va[i + 1]
            k = i
            if b != b or b in (math.inf, -math.inf):
                k = i + 1
            elif a == a and a not in (math.inf, -math.inf) and abs(b - prev) > abs(a - prev):
                k = i + 1
            ns.append(st[k])
            nv.append(va[k])
            nl.append(li[k])
            prev = va[k]
        if len(va) % 2:
            ns.append(st[-1])
            nv.append(va[-1])
            nl.append(li[-1])
        for old, new in ((st, ns), (va, nv), (li, nl)):
            del old[:]
            old.extend(new)
        self.stride[0] *= 2

    def nonfinite(self) -> int:
        return sum(1 for v in self.values if not math.isfinite(v))


@dataclass(frozen=True)
class OomRecord:
    """A CUDA out-of-memory message, as PyTorch's caching allocator (or the CUDA runtime) printed it.

    Sizes are bytes, None when that PyTorch version's message does not carry them. `format` is
    ``legacy`` (torch <= 2.0: "... already allocated; ... free; ... reserved in total by PyTorch"),
    ``v2`` (torch >= 2.1: "GPU n has a total capacity of ..."), ``npu`` (torch_npu: "NPU out of memory. ... (NPU n;
    ... total capacity; ... already allocated; ... current active; ... free; ... reserved in total by PyTorch)"),
    or ``runtime`` (no sizes:
    "CUDA error: out of memory", CUBLAS_STATUS_ALLOC_FAILED). `procs` lists (pid, bytes) of every
    "Process P has X memory in use" entry; `this_process` is the "Including non-PyTorch memory, this
    process has X" figure. `frames` holds the function names and code lines of the traceback around the
    message (nearest first), `memory_label` the last DeepSpeed see_memory_usage label before it.
    Sources: reference/deepspeed/log_patterns.md §5, torch c10/cuda/CUDACachingAllocator.cpp.
    """

    file: str
    line: int
    step: int | None
    rank: int | None
    format: str
    exc: str | None = None
    requested: float | None = None
    gpu: int | None = None
    total: float | None = None
    free: float | None = None
    allocated: float | None = None
    reserved: float | None = None
    reserved_unallocated: float | None = None
    private_pools: float | None = None
    allowed: float | None = None
    this_process: float | None = None
    procs: tuple[tuple[int, float], ...] = ()
    frames: tuple[str, ...] = ()
    memory_label: str | None = None
    text: str = ""


@dataclass(frozen=True)
class OverflowRecord:
    """One DeepSpeed fp16 loss-scale line (deepspeed/runtime/fp16/loss_scaler.py, fused_optimizer.py).

    `kind`: ``reduce`` (scale halved: attempted -> new_scale), ``hysteresis`` (overflow absorbed by
    hysteresis, scale unchanged), ``bare`` (bf16 check_grad_overflow: no scale numbers), ``increase``
    (scale raised after a clean window, only the ZeRO-0 fused optimizer prints it).
    """

    file: str
    line: int
    step: int | None
    rank: int | None
    kind: str
    attempted: float | None = None
    new_scale: float | None = None
    hysteresis: int | None = None


@dataclass(frozen=True)
class NcclRecord:
    """An NCCL watchdog line (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, log_patterns.md §6).

    `kind`: ``timeout`` (Watchdog caught collective operation timeout), ``last_work`` ("Timeout at NCCL work:
    W[, last enqueued NCCL work: E, last completed NCCL work: C]" or "Exception ... detected by watchdog at
    work"; `op` holds "timeout" or "exception" there), ``failed`` ("Some NCCL operations have failed or timed
    out", "watchdog thread terminated", the ``WorkNCCL::checkTimeout`` frame), ``heartbeat`` (watchdog stuck),
    ``desync-missing`` / ``desync-started`` / ``desync-ended`` (the TORCH_NCCL_DESYNC_DEBUG report: `ranks`
    never joined / joined but did not finish collective `seq` / finished `seq` but never joined the next),
    ``error`` (ncclGetErrorString texts, NCCL WARN lines). Fields are None when the line (or a truncated paste of it) does not carry them.
    """

    file: str
    line: int
    step: int | None
    rank: int | None
    kind: str
    op: str | None = None
    seq: int | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    work: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    text: str = ""
    pg: str | None = None          # process group id as logPrefix() prints it (``PG 1``)
    pg_desc: str | None = None     # its description (``default_pg``) where printed
    ranks: tuple[int, ...] = ()    # desync report: the ranks named
    wall: float | None = None      # the line's wall clock (glog prefix), see FileEvidence.timing


@dataclass(frozen=True)
class KillRecord:
    """A process death that is not a Python exception: a signal, the OOM killer, a launcher's exit report.

    `kind`: kernel-oom | cgroup-oom | slurm-oom | shell-killed | shell-signaled | torchrun-exit | child-failed-root |
    child-failed | launcher-exit | launcher-kill | launcher-signalled | elastic-signalled (torchrun's agent got
    SIGHUP/SIGTERM/SIGINT) | signal | cpu-alloc | ray-oom (Ray's memory
    monitor) | loader-signal (a DataLoader worker's signal handler) | slurm-cancel (Slurm's "*** JOB N ... CANCELLED AT ...
    DUE TO ... ***") | trainer-signalled (Lightning's "Received SIGTERM") | interrupted (a KeyboardInterrupt: SIGINT);
    a failed in-process host allocation
    (c10's DefaultCPUAllocator, CPython/NumPy/Arrow MemoryError) is recorded as cpu-alloc but judged apart
    (analyzers/postmortem/hostalloc.py). `exitcode` as the launcher printed it (-9 = SIGKILL,
    -6 = SIGABRT, 137 = 128+9); `signal` the signal name when known. Source: log_patterns.md §8.
    """

    file: str
    line: int
    step: int | None
    kind: str
    exitcode: int | None = None
    signal: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    host: str | None = None
    bytes: float | None = None
    text: str = ""


@dataclass(frozen=True)
class DeviceError:
    """A CUDA runtime or library error that is not an allocator OOM: an illegal memory access, a device-side
    assert, a cuBLAS/cuDNN status, an ECC or launch failure, or the runtime's own "CUDA error: out of memory".

    `kind`: illegal-address | device-assert | cublas | cudnn | launch-failure | ecc | out-of-memory | other.
    `exc` is the Python class printed before it (``torch.AcceleratorError`` from torch 2.8, ``RuntimeError``
    before); `status` the CUDA/cuBLAS/cuDNN status text. For a device-side assert, `assert_site` is the kernel
    (``Indexing.cu indexSelectLargeIndex``) and `assert_cond` the failed condition (``srcIndex <
    srcSelectDimSize``) of the first assert line near it. Sources: readers/runlogs/logpatterns.py.
    """

    file: str
    line: int
    step: int | None
    rank: int | None
    kind: str
    exc: str | None = None
    status: str | None = None
    call: str | None = None
    assert_site: str | None = None
    assert_cond: str | None = None
    text: str = ""


@dataclass(frozen=True)
class XidRecord:
    """A kernel ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...`` line of a pasted ``dmesg`` / ``journalctl -k``.
    `when` is the line's timestamp as text (dmesg seconds since boot or the journal's date), `host` the
    journal's host name when the line carries one."""

    file: str
    line: int
    xid: int
    pci: str | None = None
    pid: int | None = None
    process: str | None = None
    host: str | None = None
    when: str | None = None
    wall: float | None = None
    text: str = ""


@dataclass(frozen=True)
class FlightRecord:
    """One rank's NCCL flight-recorder dump (TORCH_NCCL_TRACE_BUFFER_SIZE > 0 with TORCH_NCCL_DUMP_ON_TIMEOUT),
    summarised per process group: the last collective sequence number each state reached.

    `groups` maps a process-group name to {desc, ranks, last_enqueued, last_started, last_completed,
    pending: [{seq, op, state, sizes}]} (pending = the entries not completed, oldest first, at most 8).
    """

    file: str
    rank: int
    version: str | None
    groups: dict[str, Any]
    entries: int = 0


@dataclass(frozen=True)
class MemoryRecord:
    """DeepSpeed ``see_memory_usage`` output: a label, then MA/Max_MA/CA/Max_CA (GB as DeepSpeed prints
    them, i.e. 2^30 bytes rounded to 2 decimals) and host RAM used (GB) and percent."""

    file: str
    line: int
    step: int | None
    label: str | None
    ma: float | None = None
    max_ma: float | None = None
    ca: float | None = None
    max_ca: float | None = None
    cpu_used: float | None = None
    cpu_percent: float | None = None


@dataclass(frozen=True)
class Notice:
    """A line worth keeping that is not a metric: an exception, a traceback start, a warning of LLaMA-Factory
    or transformers, a resume message, a launcher banner. `kind` names it (exception, traceback, warning,
    attention-warning, resume, run-start, ...); `value` holds the parsed payload when there is one."""

    file: str
    line: int
    step: int | None
    kind: str
    text: str
    value: Any = None


@dataclass(frozen=True)
class Fact:
    """A run fact stated by a log (world size, total steps, trainable params, compute dtype, DeepSpeed
    version, a DeepSpeed config dump entry). The first occurrence in a file wins."""

    name: str
    value: Any
    file: str
    line: int


@dataclass(frozen=True)
class Restart:
    """A launch or resume boundary: a second "***** Running training *****", an HF resume message, a
    trainer_log.jsonl whose steps go back, an event file whose first step is not after the previous one's
    last, or a SessionLog START."""

    file: str
    line: int
    step: int | None
    kind: str
    detail: str


@dataclass(frozen=True)
class GpuMemory:
    """Per-GPU memory over a GPU recording (nvidia-smi table or CSV log, ``doctor gpus --record`` file, pasted
    per-card summary) as readers/gpus/smi.py reads it. MiB (2^20 bytes)."""

    file: str
    index: int
    name: str | None
    samples: int
    total_mib: float | None
    max_used_mib: float
    last_used_mib: float
    max_line: int


@dataclass(frozen=True)
class FileEvidence:
    """Everything one reader extracted from one file. Lists are capped at `MAX_RECORDS` per kind; `dropped`
    counts what was not kept, by kind."""

    read: FileRead
    series: tuple[Series, ...] = ()
    ooms: tuple[OomRecord, ...] = ()
    overflows: tuple[OverflowRecord, ...] = ()
    aborts: tuple[Notice, ...] = ()
    nccl: tuple[NcclRecord, ...] = ()
    kills: tuple[KillRecord, ...] = ()
    memory: tuple[MemoryRecord, ...] = ()
    notices: tuple[Notice, ...] = ()
    facts: tuple[Fact, ...] = ()
    restarts: tuple[Restart, ...] = ()
    gpus: tuple[GpuMemory, ...] = ()
    gpu_samples: tuple[Any, ...] = ()        # hardware.snapshot.Snapshot values of a GPU recording
    device_errors: tuple[DeviceError, ...] = ()
    xids: tuple[XidRecord, ...] = ()
    flight: tuple[FlightRecord, ...] = ()
    # who wrote the file: {rank, local_rank, node, host, gpu, source} from its path and its own lines
    origin: dict[str, Any] = field(default_factory=dict)
    # wall-clock and pace of the training loop in this file: {first_wall, last_wall, fail_wall, sec_per_step,
    # rate_samples} (seconds; wall = POSIX seconds, or seconds within the year when the prefix names no year)
    timing: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    last_step: int | None = None
    total_steps: int | None = None
    # HF step-dict lines counted but not parsed (a counted read of many rank logs, readers/runlogs/logs.py)
    counted_dicts: int = 0
    # package versions of an environment block pasted in a short file ({package: (version, 1-based line)},
    # readers/config/stack.py pasted_versions): what --env would give, read from the report itself
    env_versions: dict[str, Any] = field(default_factory=dict)
    # a short file that is the user's description of the failure, not a log (readers/runlogs/userwords.py
    # `read_words`: {symptom, words, phase, phase_words, step, after, text, line}); None for every log
    said: dict[str, Any] | None = None
    # what a short file's words state beside any symptom (readers/runlogs/statedwords.py): {versions {package:
    # {version, spec, line}}, setup {zero3, moe, map, nodes, lib_mismatch}}; empty for a long log
    stated: dict[str, Any] = field(default_factory=dict)
    # what the text-log reader kept of the file's own lines so that no analyzer reads it again (readers/runlogs/
    # logkept.py): the whole text of a file of at most 64 KiB (a paste; None for a longer one), and the world
    # sizes stated in its first 256 KiB ({tasks, worlds, addr}, logkept.head_statements)
    text: str | None = None
    head: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Evidence:
    """All files of one postmortem, in the order they were read (run directory first, then ``--log``)."""

    run_dir: str | None
    files: tuple[FileEvidence, ...] = ()
    skipped: tuple[FileRead, ...] = ()
    saved_args: str | None = None
    # (path, path of the file already read with the same content): inputs not read twice
    duplicates: tuple[tuple[str, str], ...] = ()

    def all(self, attr: str) -> Iterable[Any]:
        for f in self.files:
            yield from getattr(f, attr)

    def reads(self) -> list[FileRead]:
        return [f.read for f in self.files] + list(self.skipped)
