"""``doctor gpus``: per-card memory from NVML or recorded files, and which card is in trouble and why.

Flow: samples (one NVML snapshot; a ``--watch``/``--record`` loop, hardware/sampler.py; or ``--from FILE ...``
streamed by readers/gpus/smi.py) → a `SampleAccumulator` → `build_facts` (the ``gpus`` namespace,
analyzers/gpus/gpu_cards.py) → rules with ``commands: [gpus]`` (uneven-gpu-memory FD501, foreign-process-on-gpu FD502,
multi-card-process FD503, near-capacity FD504) → `Report` with ``sections["gpus"]``.

The pipeline never draws: during a watch it hands the section data of the latest samples to a `progress`
callback, and the cli's live view (reporters/live.py) draws it.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Sequence

from finetune_doctor.analyzers.gpus.gpu_cards import SampleAccumulator, build_facts
from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.hardware.nvml import NVMLQueryError, NVMLUnavailable, hardware_from_snapshot, open_adapter
from finetune_doctor.hardware.sampler import OVERHEAD_BUDGET, sample_loop
from finetune_doctor.hardware.snapshot import Snapshot
from finetune_doctor.readers.gpus.gpu_config import ConfigInfo, load_config
from finetune_doctor.readers.gpus.smi import open_gpu_file
from finetune_doctor.types import Hardware, Report, SourceDoc

__all__ = ["OVERHEAD_BUDGET", "LIVE_WINDOW", "run", "section_data", "build_facts"]

# the live view summarises the last LIVE_WINDOW samples, so each refresh costs the same after hours
LIVE_WINDOW = 120


def run(opts: Any, watch: float | None = None, record: str | None = None, interval: float = 1.0,
        count: int | None = None, from_files: Sequence[str] = (), config: str | None = None, *,
        source: Any = None, progress: Callable[[dict[str, Any]], None] | None = None,
        sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Report:
    """Run ``doctor gpus`` and return its Report (findings from the ``gpus`` rules; ``sections["gpus"]``).

    `source` replaces NVML (tests pass a `FakeAdapter`); `progress` receives the section data of the last
    LIVE_WINDOW samples after each sample of a watch/record loop (the live view); `sleep`/`clock` drive the
    sampling schedule. Raises InputError for bad files, a missing driver without ``--from``, or bad
    ``--watch``/``--interval``/``--count`` values.
    """
    if watch is not None and watch <= 0:
        raise InputError("--watch needs a positive number of seconds", file="--watch")
    if interval <= 0:
        raise InputError("--interval needs a positive number of seconds", file="--interval")
    if count is not None and count < 1:
        raise InputError("--count needs at least 1 sample", file="--count")
    if from_files and (watch or record):
        raise InputError("--from reads recorded files; it cannot be combined with --watch or --record", file="--from")
    cfg = load_config(config) if config else None
    spec_hw = parse_gpu_spec(opts.gpu, getattr(opts, "nnodes", None)) if getattr(opts, "gpu", None) else None
    notes: list[str] = list(spec_hw.notes) if spec_hw else []
    sources: dict[str, SourceDoc] = {}
    acc = SampleAccumulator()
    last: dict[str, Snapshot] = {}
    loop_stats: dict[str, Any] | None = None

    def take(snap: Snapshot) -> None:
        acc.add(snap)
        if snap.cards:
            last[snap.host or "localhost"] = snap

    if from_files:
        for path in from_files:
            stream = open_gpu_file(path)
            for snap in stream:
                take(snap)
            notes.extend(stream.notes)
        sources["record"] = SourceDoc("record", from_files[0])
        origin = "file"
    else:
        loop_stats = _sample(opts, source, watch, record, interval, count, cfg, spec_hw, take, progress, sleep, clock)
        if loop_stats is not None:
            notes.extend(loop_stats.pop("notes"))
        origin = "nvml"
    if cfg is not None:
        sources["config"] = cfg.source
        notes.extend(cfg.notes)
    facts = build_facts(acc, cfg=cfg, spec=spec_hw, origin=origin)
    findings = judge("gpus", {"gpus": facts}, sources, opts)
    notes.extend(facts.pop("notes"))
    hw = _hardware(list(last.values()), spec_hw, record=origin == "file")
    inputs = {"config": config, "deepspeed": None, "run_dir": None, "from": list(from_files) or None,
              "record": record}
    return Report(command="gpus", inputs=inputs, findings=tuple(findings), hardware=hw,
                  sections={"gpus": section_data(facts, loop_stats)}, notes=tuple(dict.fromkeys(notes)))


def _sample(opts: Any, source: Any, watch: float | None, record: str | None, interval: float, count: int | None,
            cfg: ConfigInfo | None, spec: Hardware | None, take: Callable[[Snapshot], None],
            progress: Callable[[dict[str, Any]], None] | None, sleep: Callable[[float], None],
            clock: Callable[[], float]) -> dict[str, Any] | None:
    """Take one NVML snapshot, or run the watch/record loop; returns the loop's statistics or None."""
    try:
        src = source if source is not None else open_adapter()
    except NVMLUnavailable as err:
        raise InputError(f"{err}", file="nvml") from None
    try:
        if watch is None and record is None and count is None:
            try:
                take(src.snapshot())
            except NVMLQueryError as err:
                raise InputError(f"{err}", file="nvml") from None
            return None
        window: deque[Snapshot] = deque(maxlen=LIVE_WINDOW)

        def each(snap: Snapshot) -> None:
            take(snap)
            if progress is not None:
                window.append(snap)
                facts = build_facts(window, cfg=cfg, spec=spec, origin="nvml")
                facts.pop("notes")
                progress(section_data(facts, None))

        period = interval if record is not None or watch is None else watch
        return sample_loop(src, period, count, record, socket.gethostname(), each, sleep, clock)
    finally:
        src.close()


def _hardware(samples: list[Snapshot], spec: Hardware | None, record: bool = False) -> Hardware | None:
    """The report's hardware: the --gpu spec, else the cards sampled. `record`: the samples were read from a
    file (--from), so ``source`` is ``"record"``, not ``"nvml"`` -- nothing was asked of a driver here."""
    if spec is not None:
        return spec
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
