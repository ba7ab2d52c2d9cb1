"""``doctor gpus``: per-card memory from NVML or recorded files, and which card is in trouble and why.

Flow: samples (one NVML snapshot; a ``--watch``/``--record`` loop; or ``--from FILE ...`` read by readers/smi.py)
→ `build_facts` (the ``gpus`` namespace below) → rules with ``commands: [gpus]`` (uneven-gpu-memory FD501,
foreign-process-on-gpu FD502, multi-card-process FD503, near-capacity FD504) → `Report` with ``sections["gpus"]``.

The ``gpus`` facts namespace (all memory in GiB, 2^30 bytes; "peak" is the maximum over the samples taken)::

    gpus.origin            "nvml" (live) | "file" (--from)
    gpus.hosts             [host, ...] in order of first appearance (file stem for files without a host)
    gpus.samples / .gaps   samples read / samples that failed (NVML error mid-watch, error rows in a CSV)
    gpus.process_info      True when at least one card reported its processes
    gpus.thresholds        {uneven_gib, uneven_frac, headroom_frac, foreign_min_gib, context_max_gib, busy_gib}
    gpus.expected_alloc_gib  largest single allocation the memory model expects, or None (filled by callers that
                           have an estimate; near-capacity then uses it as its threshold when it is larger)
    gpus.cards[]           every card: {host, index, label ("GPU 3" / "node1 GPU 3"), name, model (catalog name),
                           capacity_gib (usable, as torch reports), total_gib (NVML framebuffer), used_gib (last),
                           peak_gib, headroom_gib (capacity - peak), headroom_threshold_gib, headroom_why,
                           util_gpu, temperature_c, power_w, in_job, job_gib, foreign_gib, mig_enabled,
                           mig[], ecc_uncorrected, retired_pages, remapped_rows_pending,
                           processes[] {pid, used_gib, name, cmdline, user, group, job}, location}
    gpus.job               {group, launcher, pids[], cards[] (labels), n_cards, total_gib, how} or None
    gpus.uneven[]          0 or 1 item for the job's cards: {n_cards, busiest{label,index,peak_gib},
                           lightest{...}, median_gib, spread_gib, spread_frac (of capacity), excess_gib
                           (busiest - median), rank0 (busiest is global rank 0's card), idle[] (visible cards
                           nobody uses), causes[] {key, title, evidence, score, config_key}, causes_text,
                           top_cause, fix_title, fix_key, fix_value, location}
    gpus.foreign[]         processes on the job's cards that the job did not start: {label, pid, used_gib,
                           cmdline, user, why, location}
    gpus.stray_contexts[]  per card: job processes whose own card is another one and that also hold a CUDA
                           context here: {label, index, host, pids[], n, each_gib, total_gib, owners (labels),
                           location}
    gpus.model_split[]     processes holding more than a context on several cards (device_map splits):
                           {pid, cards (labels), gib_per_card[]}

Who belongs to "the job": processes are grouped by the nearest launcher ancestor (torchrun, deepspeed,
accelerate, llamafactory-cli, mpirun, srun) or else their session (hardware/nvml.py); the job is the group that
mentions the ``--config`` file, else the one whose command line looks like training, spanning the most cards and
memory. A pid NVML lists but this host cannot see (another container) is foreign once the job is known.
Without process information (CSV logs, hidden by the driver) the job's cards are the busy ones (≥ busy_gib).
"""

from __future__ import annotations

import json
import re
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from finetune_doctor.engine.evaluate import planner
from finetune_doctor.engine.expr import unwrap
from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import Snapshot
from finetune_doctor.types import GIB, Edit, Fix, Hardware, Report, SourceDoc

THRESHOLDS = {
    # a spread of at least 2 GiB *and* 10 % of a card between the job's fullest and emptiest card: below that,
    # allocator caching and per-rank batch padding move cards by that much without anything being wrong
    "uneven_gib": 2.0,
    "uneven_frac": 0.10,
    # near-capacity: less than 5 % of the card left at the peak, unless the memory model expects a larger
    # single allocation (gpus.expected_alloc_gib), e.g. the fp32 logits of a long sequence
    "headroom_frac": 0.05,
    # processes smaller than this (Xorg, a monitoring agent) are not worth a finding
    "foreign_min_gib": 0.25,
    # a CUDA context with cuBLAS workspace is 0.3-0.6 GiB (cases/011: 398 MiB per stray rank); above 1 GiB a
    # process is using the card for tensors, not just a context
    "context_max_gib": 1.0,
    # without process information, a card with at least this much used counts as busy
    "busy_gib": 1.0,
}

# record/watch overhead budget: the sampler may use at most this fraction of one CPU core
OVERHEAD_BUDGET = 0.05
# a long watch keeps at most this many samples in memory (those holding a card's peak, gaps, the latest ones);
# the live view summarises the last LIVE_WINDOW of them so each refresh costs the same after hours
RETAIN_MAX = 4000
LIVE_WINDOW = 120

_TRAINING = re.compile(r"llamafactory|launcher\.py|train|torchrun|deepspeed|accelerate|finetun|sft\b|"
                       r"torch\.distributed", re.I)
_MULTIMODAL_TEMPLATE = re.compile(r"(?:^|_)(?:vl|v|vision|llava|mllama|pixtral|paligemma|internvl|minicpm_[ov]|"
                                  r"glm4v|kimi_vl|video|omni|gemma3n?|llama4|qwen2_audio|intern_vl)(?:_|$|\d)", re.I)
_MULTIMODAL_MODEL = re.compile(r"-VL-|VL-|-VL$|llava|vision|pixtral|paligemma|internvl|minicpm-v|glm-4v|omni|"
                               r"idefics|mllama", re.I)


# -- entry point -------------------------------------------------------------------------------------------------
def run(opts: Any, watch: float | None = None, record: str | None = None, interval: float = 1.0,
        count: int | None = None, from_files: Sequence[str] = (), config: str | None = None, *,
        source: Any = None, console: Any = None, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic) -> Report:
    """Run ``doctor gpus`` and return its Report (findings from the ``gpus`` rules; ``sections["gpus"]``).

    `source` replaces NVML (tests pass a `FakeAdapter`); `console` is the rich Console of the live view
    (default: stderr, so ``--format json`` on stdout stays clean); `sleep`/`clock` drive the sampling schedule.
    Raises InputError for bad files, a missing driver without ``--from``, or bad ``--watch``/``--interval``/
    ``--count`` values.
    """
    from finetune_doctor.engine.judge import judge

    if watch is not None and watch <= 0:
        raise InputError("--watch needs a positive number of seconds", file="--watch")
    if interval <= 0:
        raise InputError("--interval needs a positive number of seconds", file="--interval")
    if count is not None and count < 1:
        raise InputError("--count needs at least 1 sample", file="--count")
    if from_files and (watch or record):
        raise InputError("--from reads recorded files; it cannot be combined with --watch or --record", file="--from")

    cfg = _load_config(config) if config else None
    spec_hw = None
    if getattr(opts, "gpu", None):
        from finetune_doctor.hardware.catalog import parse_gpu_spec

        spec_hw = parse_gpu_spec(opts.gpu, getattr(opts, "nnodes", None))

    notes: list[str] = []
    sources: dict[str, SourceDoc] = {}
    loop_stats: dict[str, Any] | None = None
    if from_files:
        from finetune_doctor.readers.smi import read_gpu_file

        samples: list[Snapshot] = []
        for path in from_files:
            rec = read_gpu_file(path)
            samples.extend(rec.samples)
            notes.extend(rec.notes)
        sources["record"] = SourceDoc("record", from_files[0])
        origin = "file"
    else:
        src = source if source is not None else _open_nvml()
        try:
            if watch is None and record is None and count is None:
                samples = [_one(src)]
            else:
                period = interval if record is not None or watch is None else watch
                samples, loop_stats = _loop(src, period, count, record, watch is not None, cfg, spec_hw,
                                            console, sleep, clock)
                notes.extend(loop_stats.pop("notes"))
        finally:
            src.close()
        origin = "nvml"
    if cfg is not None:
        sources["config"] = cfg.source
        notes.extend(cfg.notes)

    facts = build_facts(samples, cfg=cfg, spec=spec_hw, origin=origin)
    findings = judge("gpus", {"gpus": facts}, sources, opts)
    notes.extend(facts.pop("notes"))
    data = section_data(facts, loop_stats)
    hw = _hardware(samples, spec_hw, record=origin == "file")
    inputs = {"config": config, "deepspeed": None, "run_dir": None, "from": list(from_files) or None,
              "record": record}
    return Report(command="gpus", inputs=inputs, findings=tuple(findings), hardware=hw, sections={"gpus": data},
                  notes=tuple(dict.fromkeys(notes)))


def _list(opts: Any, name: str) -> list[str] | None:
    v = getattr(opts, name, None)
    return list(v) if v else None


def _open_nvml() -> Any:
    from finetune_doctor.hardware.nvml import NVMLUnavailable, open_adapter

    try:
        return open_adapter()
    except NVMLUnavailable as err:
        raise InputError(f"{err}", file="nvml") from None


def _one(src: Any) -> Snapshot:
    from finetune_doctor.hardware.nvml import NVMLQueryError

    try:
        return src.snapshot()
    except NVMLQueryError as err:
        raise InputError(f"{err}", file="nvml") from None


def _hardware(samples: list[Snapshot], spec: Hardware | None, record: bool = False) -> Hardware | None:
    """The report's hardware: the --gpu spec, else the cards sampled. `record`: the samples were read from a
    file (--from), so ``source`` is ``"record"``, not ``"nvml"`` -- nothing was asked of a driver here."""
    if spec is not None:
        return spec
    from dataclasses import replace

    from finetune_doctor.hardware.nvml import hardware_from_snapshot

    per_host: dict[str, Snapshot] = {}
    for s in samples:
        if s.cards:
            per_host[s.host or "localhost"] = s
    # the cards NVML lists, not what CUDA_VISIBLE_DEVICES of this shell would show
    hws = [h for h in (hardware_from_snapshot(s, env={}) for s in per_host.values()) if h is not None]
    if record:
        hws = [replace(h, source="record") for h in hws]
    if not hws:
        return None
    if len(hws) == 1:
        return hws[0]
    smallest = min(hws, key=lambda h: h.capacity_gib if h.capacity_gib is not None else float("inf"))
    return replace(smallest, num_gpus=sum(h.num_gpus or 0 for h in hws), nnodes=len(hws),
                   in_use_gib=tuple(x for h in hws for x in h.in_use_gib))


# -- watch / record loop -----------------------------------------------------------------------------------------
def _loop(src: Any, period: float, count: int | None, record: str | None, live: bool, cfg: "ConfigInfo | None",
          spec: Hardware | None, console: Any, sleep: Callable[[float], None],
          clock: Callable[[], float] = time.monotonic) -> tuple[list[Snapshot], dict]:
    """Sample at a fixed rate until `count` samples or Ctrl-C; returns (samples, recorder statistics).

    Ticks are scheduled at t0 + k·period (not "sleep period after each sample"), so the rate does not drift by
    the sampling time; a sample that overruns its tick skips the missed ticks and counts them. The CPU time of
    taking and writing each sample is measured (``time.process_time``); when its mean exceeds OVERHEAD_BUDGET of
    the period after 5 samples, the period is widened to stay within the budget and a note says so. An NVML
    error mid-watch becomes a gap sample and the loop goes on.
    """
    from finetune_doctor.hardware.nvml import NVMLQueryError, NVMLUnavailable
    from finetune_doctor.hardware.record import open_recorder

    host = socket.gethostname()
    rec = open_recorder(record, host, period) if record else None
    samples = _Retained()
    cpu: list[float] = []
    wall: list[float] = []
    notes: list[str] = []
    missed = 0
    view = None
    if live:
        from rich.console import Console
        from rich.live import Live

        from finetune_doctor.reporters.sections.gpus import render

        # transient: the live table gives way to the final report instead of printing the cards twice
        view = Live(console=console or Console(stderr=True), refresh_per_second=4, transient=True)
        view.start()
    t_next = clock()
    requested = period
    try:
        while count is None or samples.taken < count:
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                snap = src.snapshot()
            except (NVMLQueryError, NVMLUnavailable) as err:
                last_host = next((x.host for x in reversed(samples) if x.host), None)
                snap = Snapshot(time=time.time(), host=last_host or getattr(src, "host", None) or host, gap=str(err))
            if rec is not None:
                rec.write(snap)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            samples.append(snap)
            if view is not None:
                facts = build_facts(samples[-LIVE_WINDOW:], cfg=cfg, spec=spec, origin="nvml")
                facts.pop("notes")
                view.update(render(section_data(facts, None)))
            if count is not None and samples.taken >= count:
                break
            if len(cpu) >= 5 and statistics.fmean(cpu) > OVERHEAD_BUDGET * period:
                period = statistics.fmean(cpu) / OVERHEAD_BUDGET
                notes.append(f"sampling took {statistics.fmean(cpu) * 1e3:.1f} ms of CPU per sample; interval "
                             f"widened from {requested:g} s to {period:.2f} s to stay under "
                             f"{OVERHEAD_BUDGET:.0%} of one core")
            t_next += period
            now = clock()
            if now > t_next:
                skipped = int((now - t_next) // period) + 1
                missed += skipped
                t_next += skipped * period
            sleep(max(0.0, t_next - now))
    except KeyboardInterrupt:
        notes.append(f"stopped by Ctrl-C after {samples.taken} samples")
    finally:
        if view is not None:
            view.stop()
        if rec is not None:
            rec.close()
    gaps = samples.gaps
    if gaps:
        notes.append(f"{gaps} of {samples.taken} samples failed (NVML errors); they are marked as gaps"
                     + (f" in {record}" if record else ""))
    if samples.dropped:
        notes.append(f"{samples.dropped} of {samples.taken} samples were summarised away (kept: each card's peak, "
                     f"gaps and the latest {RETAIN_MAX // 4})" + (f"; {record} has them all" if record else ""))
    stats = {
        "file": record, "interval_s": round(requested, 3), "effective_interval_s": round(period, 3),
        "samples": samples.taken, "gaps": gaps, "missed_ticks": missed,
        "cpu_ms_mean": round(statistics.fmean(cpu) * 1e3, 3) if cpu else None,
        "cpu_ms_max": round(max(cpu) * 1e3, 3) if cpu else None,
        "wall_ms_mean": round(statistics.fmean(wall) * 1e3, 3) if wall else None,
        "overhead_pct": round(100 * statistics.fmean(cpu) / period, 3) if cpu else None,
        "notes": notes,
    }
    return list(samples), stats


class _Retained(list):
    """The samples of a watch, bounded: past RETAIN_MAX it keeps gaps, the samples that hold some card's peak
    (the facts are peaks, so they stay exact) and the latest RETAIN_MAX // 4."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = self.gaps = self.dropped = 0
        self._peak: dict[tuple[str | None, int], int] = {}

    def append(self, snap: Snapshot) -> None:  # type: ignore[override]
        self.taken += 1
        self.gaps += snap.gap is not None
        for c in snap.cards:
            key = (snap.host, c.index)
            if c.used_bytes is not None and c.used_bytes > self._peak.get(key, -1):
                self._peak[key] = c.used_bytes
        super().append(snap)
        if len(self) > RETAIN_MAX:
            keep_tail = RETAIN_MAX // 4
            head = [s for s in self[:-keep_tail] if s.gap is not None or any(
                c.used_bytes is not None and c.used_bytes == self._peak.get((s.host, c.index)) for c in s.cards)]
            self.dropped += len(self) - keep_tail - len(head)
            self[:] = head + self[-keep_tail:]


# -- the run's config, for ranking causes ------------------------------------------------------------------------
@dataclass
class ConfigInfo:
    """The LLaMA-Factory YAML given with ``--config``: values, key positions and its DeepSpeed JSON if readable."""

    path: str
    values: dict[str, Any]
    source: SourceDoc
    ds: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _load_config(path: str) -> ConfigInfo:
    try:
        from finetune_doctor.readers.yamlcfg import load_config
    except ImportError:  # the shared YAML reader is another module's; fall back to a plain ruamel read
        load_config = None
    if load_config is not None:
        doc = load_config(path)
        values, source = dict(doc.values), doc.source()
    else:
        values, source = _plain_yaml(path)
    info = ConfigInfo(path, values, source)
    ds = values.get("deepspeed")
    if isinstance(ds, str) and ds.strip():
        for cand in (Path(ds), Path(path).parent / ds):
            if cand.is_file():
                try:
                    info.ds = json.loads(cand.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as err:
                    info.notes.append(f"{cand}: cannot read the DeepSpeed config ({err}); ZeRO save cost not ranked")
                break
        else:
            info.notes.append(f"{path}: deepspeed file {ds} not found; ZeRO save cost not ranked")
    elif isinstance(ds, dict):
        info.ds = ds
    return info


def _plain_yaml(path: str) -> tuple[dict[str, Any], SourceDoc]:
    from ruamel.yaml import YAML

    try:
        data = YAML(typ="rt").load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
    except Exception as err:  # ruamel raises several parser error types
        mark = getattr(err, "problem_mark", None)
        raise InputError(f"malformed YAML: {getattr(err, 'problem', err)}", file=path,
                         line=None if mark is None else mark.line + 1) from None
    if not isinstance(data, dict):
        raise InputError("a LLaMA-Factory config must be a mapping", file=path, line=1)
    pos = {str(k): (data.lc.key(k)[0] + 1, data.lc.key(k)[1] + 1) for k in data}
    return {str(k): v for k, v in data.items()}, SourceDoc("config", path, pos)


# -- facts -------------------------------------------------------------------------------------------------------
def build_facts(samples: Sequence[Snapshot], cfg: ConfigInfo | None = None, spec: Hardware | None = None,
                origin: str = "nvml", expected_alloc_gib: float | None = None) -> dict[str, Any]:
    """The ``gpus`` facts namespace (module docstring) from the samples of one or several hosts.

    `spec` (a parsed ``--gpu``) supplies the capacity of cards whose name the catalog does not know;
    `expected_alloc_gib` raises the near-capacity threshold. The returned dict also holds ``notes`` (reading
    remarks for the report), which callers pop before handing the facts to rules.
    """
    from finetune_doctor.hardware.catalog import match_card

    t = THRESHOLDS
    notes: list[str] = []
    hosts: list[str] = []
    acc: dict[tuple[str, int], dict[str, Any]] = {}
    gaps = 0
    for s in samples:
        host = s.host or "localhost"
        if s.gap is not None:
            gaps += 1
            continue
        if host not in hosts:
            hosts.append(host)
        notes.extend(s.notes)
        for c in s.cards:
            a = acc.setdefault((host, c.index), {"host": host, "index": c.index, "procs": {}, "peak": None,
                                                 "peak_line": None, "peak_source": None, "proc_info": False,
                                                 "proc_note": None})
            a["last"] = c
            used = c.used_bytes
            if used is not None and (a["peak"] is None or used > a["peak"]):
                a["peak"], a["peak_line"], a["peak_source"] = used, c.line, s.source
            if c.processes is not None:
                a["proc_info"] = True
                for p in c.processes:
                    old = a["procs"].get(p.pid)
                    if old is None or (p.used_bytes or 0) > (old.used_bytes or 0):
                        a["procs"][p.pid] = p
            elif c.process_note:
                a["proc_note"] = c.process_note
    multi = len(hosts) > 1
    if gaps and origin == "file":
        notes.append(f"{gaps} of {len(samples)} recorded samples are gaps (NVML errors while recording)")

    def label(host: str, idx: int) -> str:
        return f"{host} GPU {idx}" if multi else f"GPU {idx}"

    cards: list[dict[str, Any]] = []
    for (host, idx), a in acc.items():
        c = a["last"]
        model = match_card(c.name, c.total_bytes) if c.name else None
        if model is not None:
            cap = model.capacity_gib
        elif spec is not None and spec.capacity_gib:
            cap = spec.capacity_gib
        elif c.total_bytes is not None:
            cap = (c.total_bytes - (c.reserved_bytes or 0)) / GIB
        else:
            cap = None
        peak = None if a["peak"] is None else a["peak"] / GIB
        headroom = None if cap is None or peak is None else cap - peak
        if c.mig_enabled and c.mig:
            # each MIG instance is its own CUDA device: the fullest instance is the one that runs out
            fullest = min((m for m in c.mig if m.total_bytes), key=lambda m: m.total_bytes - (m.used_bytes or 0),
                          default=None)
            if fullest is not None:
                cap = fullest.total_bytes / GIB
                headroom = (fullest.total_bytes - (fullest.used_bytes or 0)) / GIB
        loc = {"file": a["peak_source"], "line": a["peak_line"], "column": None, "key": label(host, idx)}
        cards.append({
            "host": host, "index": idx, "label": label(host, idx), "name": c.name,
            "model": model.name if model else (spec.gpu if spec else None),
            "capacity_gib": _r(cap), "total_gib": _r(_gib(c.total_bytes)), "used_gib": _r(_gib(c.used_bytes)),
            "peak_gib": _r(peak), "headroom_gib": _r(headroom),
            "util_gpu": c.util_gpu, "temperature_c": c.temperature_c, "power_w": c.power_w,
            "power_limit_w": c.power_limit_w, "mig_enabled": c.mig_enabled,
            "mig": [{"gi": m.gi, "ci": m.ci, "name": m.name, "used_gib": _r(_gib(m.used_bytes)),
                     "total_gib": _r(_gib(m.total_bytes))} for m in c.mig],
            "ecc_uncorrected": c.ecc_uncorrected, "retired_pages": c.retired_pages,
            "retired_pending": c.retired_pending, "remapped_rows_pending": c.remapped_rows_pending,
            "process_info": a["proc_info"], "process_note": a["proc_note"],
            "_procs": list(a["procs"].values()), "location": loc,
        })
    cards.sort(key=lambda d: (hosts.index(d["host"]), d["index"]))
    by_key = {(d["host"], d["index"]): d for d in cards}
    process_info = any(d["process_info"] for d in cards)
    if not process_info and cards:
        why = next((d["process_note"] for d in cards if d["process_note"]), "no process information")
        notes.append(f"process information unavailable ({why}): foreign processes and stray CUDA contexts "
                     "cannot be checked")

    # processes: one entry per (host, card, pid)
    procs: list[dict[str, Any]] = []
    for d in cards:
        for p in d.pop("_procs"):
            procs.append({"host": d["host"], "card": d["index"], "label": d["label"], "pid": p.pid,
                          "used_gib": _r(_gib(p.used_bytes)), "name": p.name, "cmdline": _short(p.cmdline),
                          "user": p.user, "group": p.group, "mig": p.mig,
                          "visible": p.cmdline is not None or p.group is not None, "_cmd": p.cmdline or p.name or ""})

    job = _find_job(procs, cfg)
    if job is not None:
        for p in procs:
            p["job"] = (p["host"], p["group"] if p["group"] is not None else -p["pid"]) in job["_keys"]
    else:
        for p in procs:
            p["job"] = None

    # each process's own card: where it holds the most (a rank's tensors live on its own card)
    per_pid: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in procs:
        per_pid.setdefault((p["host"], p["pid"]), []).append(p)
    own = {k: (k[0], max(ps, key=lambda q: q["used_gib"] or 0)["card"]) for k, ps in per_pid.items()}
    if procs and job is None:
        notes.append("the processes' owners are unknown (no command lines: pids not visible from this host, "
                     "psutil missing, or a file without them): foreign processes cannot be told apart")
    if job is not None:
        job_cards = {own[(p["host"], p["pid"])] for p in procs if p["job"]}
    else:
        job_cards = {(d["host"], d["index"]) for d in cards if (d["peak_gib"] or 0) >= t["busy_gib"]}
    for d in cards:
        key = (d["host"], d["index"])
        on = [p for p in procs if (p["host"], p["card"]) == key]
        d["in_job"] = key in job_cards
        d["job_gib"] = _r(sum(p["used_gib"] or 0 for p in on if p["job"])) if job else None
        d["foreign_gib"] = _r(sum(p["used_gib"] or 0 for p in on if p["job"] is False)) if job else None
        d["processes"] = [{k: p[k] for k in ("pid", "used_gib", "name", "cmdline", "user", "group", "job", "mig")}
                          for p in on]
        cap = d["capacity_gib"]
        pct = t["headroom_frac"] * cap if cap else None
        if expected_alloc_gib and (pct is None or expected_alloc_gib > pct):
            d["headroom_threshold_gib"] = _r(expected_alloc_gib)
            d["headroom_why"] = "the largest single allocation the memory model expects"
        else:
            d["headroom_threshold_gib"] = _r(pct)
            d["headroom_why"] = f"{t['headroom_frac']:.0%} of the card"

    # several cards per pid: stray contexts (small) and model splits (large)
    stray: dict[tuple[str, int], list[dict[str, Any]]] = {}
    split: list[dict[str, Any]] = []
    for (host, pid), (_, own_idx) in own.items():
        mine = per_pid[(host, pid)]
        if len(mine) < 2 or any(p["used_gib"] is None for p in mine):
            continue
        big = [p for p in mine if p["used_gib"] > t["context_max_gib"]]
        if len(big) >= 2:
            split.append({"pid": pid, "cards": [p["label"] for p in big], "gib_per_card": [p["used_gib"] for p in big]})
        for p in mine:
            if p["card"] != own_idx and p["used_gib"] <= t["context_max_gib"] and p["job"] is not False:
                stray.setdefault((host, p["card"]), []).append({**p, "owner": by_key[(host, own_idx)]["label"]})
    stray_items = []
    for (host, idx), ps in sorted(stray.items(), key=lambda kv: (hosts.index(kv[0][0]), kv[0][1])):
        d = by_key[(host, idx)]
        owners = _ranges([p["owner"] for p in ps])
        subject = (f"{len(ps)} processes whose own cards are elsewhere ({owners}) also hold" if len(ps) > 1
                   else f"1 process whose own card is elsewhere ({owners}) also holds")
        stray_items.append({
            "subject": subject,
            "label": d["label"], "index": idx, "host": host, "pids": [p["pid"] for p in ps], "n": len(ps),
            "each_gib": _r(max(p["used_gib"] for p in ps)), "total_gib": _r(sum(p["used_gib"] for p in ps)),
            "owners": _ranges([p["owner"] for p in ps]), "location": d["location"]})

    foreign = []
    if job is not None:
        # under MIG, instances are isolated: a process in another instance takes nothing from the job's
        job_migs = {(p["host"], p["card"], p["mig"]) for p in procs if p["job"]}
        for p in procs:
            shares = p["mig"] is None or (p["host"], p["card"], p["mig"]) in job_migs
            if p["job"] is False and (p["host"], p["card"]) in job_cards and shares:
                why = ("not visible from this host: another container or user namespace"
                       if not p["visible"] else f"not started by the job's launcher ({job['launcher']})")
                cmd = p["cmdline"] or p["name"] or "command unknown"
                foreign.append({"label": p["label"], "pid": p["pid"], "used_gib": p["used_gib"], "cmdline": cmd,
                                "user": p["user"], "why": why,
                                "who": cmd + (f", user {p['user']}" if p["user"] else ""),
                                "held_text": (f"holding {p['used_gib']:.2f} GiB" if p["used_gib"] is not None
                                              else "memory not reported by the driver"),
                                "location": by_key[(p["host"], p["card"])]["location"]})

    jc = [d for d in cards if d["in_job"]]
    uneven = _uneven(jc, cards, cfg, stray_items, split, foreign, samples, hosts, job is not None)
    job_out = None
    if job is not None:
        job_out = {k: v for k, v in job.items() if not k.startswith("_")}
        job_out["cards"] = [d["label"] for d in jc]
        job_out["n_cards"] = len(jc)
    for p in procs:
        p.pop("_cmd", None)
    return {
        "origin": origin, "hosts": hosts, "samples": len(samples), "gaps": gaps,
        "driver": next((s.driver for s in samples if s.driver), None),
        "cuda_driver": next((s.cuda_driver for s in samples if s.cuda_driver), None),
        "span_s": _span(samples), "process_info": process_info, "thresholds": dict(t),
        "expected_alloc_gib": expected_alloc_gib, "cards": cards, "job": job_out,
        "uneven": [uneven] if uneven else [], "foreign": foreign, "stray_contexts": stray_items,
        "model_split": split, "config": cfg.path if cfg else None, "notes": list(dict.fromkeys(notes)),
    }


def _find_job(procs: list[dict[str, Any]], cfg: ConfigInfo | None) -> dict[str, Any] | None:
    """The process group most likely to be the training job, or None when no process is visible."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in procs:
        if not p["visible"]:
            continue
        key = (p["host"], p["group"] if p["group"] is not None else -p["pid"])
        groups.setdefault(key, []).append(p)
    if not groups:
        return None
    # one job may span hosts (one launcher per node): groups whose command lines match across hosts join it
    stem = Path(cfg.path).name if cfg else None

    def score(members: list[dict[str, Any]]) -> tuple:
        cmds = " ".join(m["_cmd"] for m in members)
        return (bool(stem and stem in cmds), bool(_TRAINING.search(cmds)),
                len({(m["host"], m["card"]) for m in members}), sum(m["used_gib"] or 0 for m in members))

    best_key = max(groups, key=lambda k: score(groups[k]))
    best = groups[best_key]
    keys = {best_key}
    sig = _signature(best)
    for k, members in groups.items():
        if k[0] != best_key[0] and _signature(members) == sig:
            keys.add(k)
    members = [p for k in keys for p in groups[k]]
    launcher = best_key[1]
    how = ("matches --config" if score(best)[0] else "looks like training" if score(best)[1]
           else "largest group of processes")
    return {"group": launcher if launcher > 0 else None,
            "launcher": f"pid {launcher}" if launcher > 0 else f"pid {-launcher}",
            "pids": sorted({m["pid"] for m in members}), "total_gib": _r(sum(m["used_gib"] or 0 for m in members)),
            "how": how, "_keys": keys}


def _signature(members: list[dict[str, Any]]) -> str:
    cmd = max((m["_cmd"] for m in members), key=len, default="")
    return re.sub(r"\d+", "#", cmd)[:200]


def _uneven(jc: list[dict[str, Any]], cards: list[dict[str, Any]], cfg: ConfigInfo | None,
            stray: list[dict[str, Any]], split: list[dict[str, Any]], foreign: list[dict[str, Any]],
            samples: Sequence[Snapshot], hosts: list[str], job_known: bool) -> dict[str, Any] | None:
    # MIG cards are split into separate devices: not data-parallel peers of whole cards
    ranked = [d for d in jc if d["peak_gib"] is not None and not d["mig_enabled"]]
    if len(ranked) < 2:
        return None
    busiest = max(ranked, key=lambda d: d["peak_gib"])
    lightest = min(ranked, key=lambda d: d["peak_gib"])
    median = statistics.median(d["peak_gib"] for d in ranked)
    caps = [d["capacity_gib"] for d in ranked if d["capacity_gib"]]
    cap = min(caps) if caps else None
    spread = busiest["peak_gib"] - lightest["peak_gib"]
    # global rank 0 runs on the first visible card of the first node. When the job's processes are known, that
    # is its lowest-index card there (CUDA_VISIBLE_DEVICES may start elsewhere); from memory alone (a partial
    # paste may list only some cards) only card 0 can be taken as rank 0's
    first = [d["index"] for d in ranked if d["host"] == hosts[0]]
    rank0 = busiest["host"] == hosts[0] and bool(first) and (
        busiest["index"] == min(first) if job_known else busiest["index"] == 0)
    idle = [d["label"] for d in cards if not d["in_job"] and (d["peak_gib"] or 0) < THRESHOLDS["busy_gib"]]
    moved = _busiest_moved(samples, {(d["host"], d["index"]) for d in ranked})
    causes = _causes(busiest, median, rank0, moved, cfg, stray, split, foreign)
    top = causes[0] if causes else None
    fix_title, fix_key, fix_value = _fix_for(top, cfg)
    loc = busiest["location"]
    if cfg is not None and top and top.get("config_key"):
        pos = cfg.source.positions.get(top["config_key"])
        loc = {"file": cfg.path, "line": pos[0] if pos else None, "column": pos[1] if pos else None,
               "key": top["config_key"]}
    text = "; ".join(f"{i + 1}) {c['title']} ({c['evidence']})" for i, c in enumerate(causes)) or \
        "no cause stands out; pass --config to rank causes from the run's YAML"
    return {
        "n_cards": len(ranked),
        "busiest": {k: busiest[k] for k in ("label", "index", "host", "peak_gib", "capacity_gib")},
        "lightest": {k: lightest[k] for k in ("label", "index", "host", "peak_gib", "capacity_gib")},
        "median_gib": _r(median), "spread_gib": _r(spread), "spread_frac": _r(spread / cap, 3) if cap else None,
        "excess_gib": _r(busiest["peak_gib"] - median), "rank0": rank0, "idle": idle,
        "idle_text": f" {len(idle)} visible card(s) unused: {', '.join(idle)}." if idle else "",
        "moved": moved, "causes": causes, "causes_text": text, "top_cause": top["key"] if top else None,
        "fix_title": fix_title, "fix_key": fix_key, "fix_value": fix_value, "location": loc,
    }


def _busiest_moved(samples: Sequence[Snapshot], keys: set[tuple[str, int]]) -> bool:
    """True when different cards were the fullest in different samples (a data-dependent peak)."""
    winners = set()
    for s in samples:
        cards = [c for c in s.cards if ((s.host or "localhost"), c.index) in keys and c.used_bytes is not None]
        if len(cards) >= 2:
            top = max(cards, key=lambda c: c.used_bytes)
            second = sorted((c.used_bytes for c in cards), reverse=True)[1]
            if top.used_bytes - second > 0.5 * GIB:  # ignore near-ties
                winners.add(((s.host or "localhost"), top.index))
    return len(winners) > 1


def _cfg_get(cfg: ConfigInfo | None, key: str) -> Any:
    return None if cfg is None else cfg.values.get(key)


def _causes(busiest: dict[str, Any], median: float, rank0: bool, moved: bool, cfg: ConfigInfo | None,
            stray: list[dict[str, Any]], split: list[dict[str, Any]], foreign: list[dict[str, Any]]) -> list[dict]:
    """Likely causes of the imbalance, best first: each with the evidence that points to it and a score.

    Scores are ordinal (which explanation fits the evidence better), not probabilities. Sources of the patterns:
    stray ranks on cuda:0 (cases/011: four 398 MiB contexts next to the model on GPU 0); rank-0-only work such
    as ZeRO-3 16-bit consolidation on save (DeepSpeed ``stage3_gather_16bit_weights_on_model_save``) and eval;
    data-dependent per-rank peaks of multimodal batches (cases/037, hiyouga/LlamaFactory#7110: the heavy card is
    gpu6, not gpu0); model split by ``device_map`` across cards (one pid with tensors on several cards).
    """
    excess = busiest["peak_gib"] - median
    out: list[dict[str, Any]] = []
    here = [s for s in stray if (s["host"], s["index"]) == (busiest["host"], busiest["index"])]
    if here:
        s = here[0]
        share = s["total_gib"] / excess if excess > 0 else 0
        out.append({"key": "multi-card-process", "score": 5 if share >= 0.5 else 3 if share >= 0.2 else 1,
                    "config_key": None,
                    "title": f"{s['subject']} a CUDA context on {s['label']}",
                    "evidence": f"{s['total_gib']:.2f} GiB together, {min(share, 9.99):.0%} of the excess"})
    f_here = [f for f in foreign if f["label"] == busiest["label"] and (f["used_gib"] or 0) > 0]
    if f_here:
        tot = sum(f["used_gib"] for f in f_here)
        out.append({"key": "foreign-process", "score": 5 if tot >= 0.5 * excess else 2, "config_key": None,
                    "title": f"a process outside the job uses {busiest['label']}",
                    "evidence": f"pid {', '.join(str(f['pid']) for f in f_here)}: {tot:.2f} GiB"})
    if split or _cfg_get(cfg, "device_map") or _cfg_get(cfg, "quantization_device_map"):
        key = "quantization_device_map" if _cfg_get(cfg, "quantization_device_map") else \
            "device_map" if _cfg_get(cfg, "device_map") else None
        ev = (f"pid {split[0]['pid']} holds tensors on {', '.join(split[0]['cards'])}" if split
              else f"{key} is set in the config")
        out.append({"key": "device-map", "score": 4 if split else 1, "config_key": key,
                    "title": "the model is split across cards by device_map (first card holds the embeddings, "
                             "last the lm_head)", "evidence": ev})
    multimodal, mm_key = _multimodal(cfg)
    if rank0:
        ev = []
        key = None
        score = 2
        for k in ("eval_dataset", "val_size", "eval_strategy", "evaluation_strategy", "do_eval"):
            v = _cfg_get(cfg, k)
            if v not in (None, False, 0, 0.0, "no", ""):
                ev.append(f"{k}: {v}")
                key = key or k
        if ev:
            score += 1
        z = (cfg.ds or {}).get("zero_optimization", {}) if cfg else {}
        if isinstance(z, dict) and z.get("stage") == 3 and z.get("stage3_gather_16bit_weights_on_model_save"):
            ev.append("ZeRO-3 gathers the full 16-bit weights when saving")
            key = key or "deepspeed"
            score += 1
        for k in ("predict_with_generate", "load_best_model_at_end", "compute_accuracy"):
            if _cfg_get(cfg, k):
                ev.append(f"{k}: true")
                key = key or k
                score += 1
        if cfg is None:
            ev.append("the fullest card is rank 0's; pass --config to check eval/save settings")
        out.append({"key": "rank0-work", "score": score, "config_key": key,
                    "title": "rank 0 does extra work (evaluation, metrics, checkpoint consolidation, logging)",
                    "evidence": "; ".join(ev) or "the fullest card is rank 0's"})
    if multimodal:
        out.append({"key": "multimodal", "score": (4 if not rank0 else 2) + (1 if moved else 0), "config_key": mm_key,
                    "title": "multimodal batches: the rank that draws the most or largest images peaks highest",
                    "evidence": f"{mm_key}: {_cfg_get(cfg, mm_key)}" + ("; the fullest card changed between "
                                                                         "samples" if moved else "")})
    elif moved or (not rank0 and not out):
        out.append({"key": "variable-length", "score": 2 if moved else 1, "config_key":
                    "cutoff_len" if _cfg_get(cfg, "cutoff_len") is not None else None,
                    "title": "per-rank batches of different lengths: the rank with the longest batch peaks highest",
                    "evidence": "the fullest card changed between samples" if moved
                    else f"{busiest['label']} is not rank 0's card"})
    out.sort(key=lambda c: -c["score"])
    return out


def _multimodal(cfg: ConfigInfo | None) -> tuple[bool, str | None]:
    if cfg is None:
        return False, None
    for k in ("image_max_pixels", "video_max_pixels", "image_dir", "media_dir", "freeze_vision_tower"):
        if k in cfg.values:
            return True, k
    tpl = _cfg_get(cfg, "template")
    if isinstance(tpl, str) and _MULTIMODAL_TEMPLATE.search(tpl):
        return True, "template"
    model = _cfg_get(cfg, "model_name_or_path")
    if isinstance(model, str) and _MULTIMODAL_MODEL.search(model):
        return True, "model_name_or_path"
    return False, None


def _fix_for(top: dict[str, Any] | None, cfg: ConfigInfo | None) -> tuple[str, str | None, Any]:
    """A prescription for the top cause: (title, config key to edit or None, new value)."""
    if top is None:
        return ("Find what the fullest card does that the others do not", None, None)
    k = top["key"]
    if k == "multi-card-process":
        return ("Make every rank call torch.cuda.set_device(LOCAL_RANK) before any CUDA work; look for .cuda(), "
                "device='cuda' or torch.cuda calls without an index in custom code run before the trainer", None, None)
    if k == "foreign-process":
        return ("Stop the other process or exclude the card with CUDA_VISIBLE_DEVICES", None, None)
    if k == "device-map":
        return ("Launch one process per card (llamafactory-cli train, or torchrun) instead of splitting one "
                "model with device_map", None, None)
    if k == "multimodal":
        cur = _cfg_get(cfg, "image_max_pixels")
        # LLaMA-Factory's default image_max_pixels is 768*768 = 589824 (LF_FACTS.md §4)
        cur = cur if isinstance(cur, (int, float)) and cur > 0 else 589824
        new = int(cur // 2)
        return (f"Cap the image size: image_max_pixels {int(cur)} -> {new} (fewer visual tokens per image)",
                "image_max_pixels", new)
    if k == "rank0-work":
        return ("Watch what rank 0 does when its card peaks (a ZeRO-3 save consolidating 16-bit weights, evaluation "
                "keeping predictions on the GPU until eval_accumulation_steps moves them, logging) and budget the "
                "busiest card for it", None, None)
    return ("Budget for the longest batch on every rank (cutoff_len), or sort batches by length", None, None)


@planner("gpus-uneven")
def _plan_uneven(ctx: Any, rule: Any, ev: Any) -> Fix:
    """The fix of uneven-gpu-memory: the top cause's prescription, with its YAML edit when --config was given."""
    item = unwrap(ev.eval("item")) or {}
    edits: tuple[Edit, ...] = ()
    doc = ctx.sources.get("config")
    if item.get("fix_key") and doc is not None:
        edits = (Edit(doc.path, item["fix_key"], item.get("fix_value")),)
    return Fix(title=item.get("fix_title") or rule.fix.title, edits=edits, safety=rule.fix.safety)


# -- section data for the reporters ------------------------------------------------------------------------------
def section_data(facts: dict[str, Any], recorder: dict[str, Any] | None) -> dict[str, Any]:
    """JSON-ready ``sections["gpus"]``: the cards, the job, the imbalance summary, and recorder statistics."""
    u = facts["uneven"][0] if facts["uneven"] else None
    return {
        "origin": facts["origin"], "hosts": facts["hosts"], "driver": facts["driver"],
        "cuda_driver": facts["cuda_driver"], "samples": facts["samples"], "gaps": facts["gaps"],
        "span_s": facts["span_s"], "process_info": facts["process_info"],
        "cards": [{k: v for k, v in d.items() if k not in ("location",)} for d in facts["cards"]],
        "job": facts["job"],
        "imbalance": None if u is None else {k: u[k] for k in ("busiest", "lightest", "median_gib", "spread_gib",
                                                                "spread_frac", "excess_gib", "causes", "idle")},
        "stray_contexts": [{k: v for k, v in s.items() if k != "location"} for s in facts["stray_contexts"]],
        "foreign": [{k: v for k, v in f.items() if k != "location"} for f in facts["foreign"]],
        "recorder": recorder,
    }


# -- small helpers -----------------------------------------------------------------------------------------------
def _gib(b: int | None) -> float | None:
    return None if b is None else b / GIB


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def _short(cmd: str | None, n: int = 160) -> str | None:
    if cmd is None:
        return None
    return cmd if len(cmd) <= n else cmd[: n - 3] + "..."


def _span(samples: Sequence[Snapshot]) -> float | None:
    ts = [s.time for s in samples if s.time is not None]
    return round(max(ts) - min(ts), 3) if len(ts) >= 2 else None


def _ranges(labels: list[str]) -> str:
    """'GPU 1', 'GPU 2', 'GPU 3', 'GPU 5' → 'GPU 1-3, 5' (labels of one host)."""
    nums = []
    prefix = None
    for lab in labels:
        m = re.match(r"^(.*GPU )(\d+)$", lab)
        if not m:
            return ", ".join(labels)
        prefix = m.group(1)
        nums.append(int(m.group(2)))
    nums = sorted(set(nums))
    parts = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return f"{prefix}{', '.join(parts)}"
