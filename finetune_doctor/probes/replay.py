"""Replay the simulate probe's allocation trace through the caching-allocator model (probes/allocator.py).

Input: an `AllocTrace` (every allocation and free of device tensors of one rank, in order, with bytes and stream,
and the probe's segment markers) recorded by `tracker.LiveBytesTracker(trace=True)` from the model build to the
end of the last step. Output: a frozen `ReplayResult`: peak reserved and allocated (bytes and GiB), the
fragmentation at the peak, and, given the bytes the allocator may use on the card, the first request that fails
(`OomReport`) with the figures and the words of PyTorch's OOM error.

Depth reduction: the probe simulates k and k+1 decoder layers of an L-layer model; both traces are replayed and
each figure (peak reserved, peak allocated, and the reserved/allocated maximum of every segment of the step) is
extrapolated affinely to L layers, as simulate extrapolates tensor bytes: every extra layer repeats the same
allocation pattern (its weights, activations, gradients), so the allocator's segments grow by a fixed amount per
layer. tests/test_probe_replay.py checks the extrapolated replay against a full-depth replay. Under depth reduction
the first failing request is the first segment of the step whose extrapolated reserved memory passes the
capacity; the request that fails is the largest new-segment request of that segment at depth k+1.

The OOM message (``DeviceCachingAllocator::malloc``, c10/cuda/CUDACachingAllocator.cpp, 2.2+ wording; sizes by
``format_size``: bytes up to 1 KiB, then KiB / MiB / GiB with two decimals, each unit used up to and including
1024 of it): "CUDA out of memory. Tried to allocate X. GPU N has a total capacity of T of which F is free.
[Including non-PyTorch memory, this process has P memory in use. ]Of the allocated memory A is allocated by
PyTorch, and R is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management
 (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)". "Tried to allocate" is the segment
size the allocator asked cudaMalloc for (``alloc_size``), not the tensor's bytes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from finetune_doctor.probes.allocator import CachingAllocator, OutOfMemory
from finetune_doctor.probes.allocconf import AllocatorConfig
from finetune_doctor.probes.trace import AllocTrace

GIB = float(1 << 30)


@dataclass(frozen=True)
class OomReport:
    """The first request that does not fit (bytes), as PyTorch's OOM error reports it. `tried_to_allocate` is the
    segment size asked of cudaMalloc; `allocated` / `reserved_unallocated` are the allocator's counters after it
    released what it could; `free` the device's free memory; `total_capacity` the card's total. `segment` names
    the moment of the step; `request` is the rounded tensor request."""

    request: int
    tried_to_allocate: int
    allocated: int
    reserved_unallocated: int
    free: int
    total_capacity: int
    segment: str
    message: str
    extrapolated: bool = False

    def gib(self, name: str) -> float:
        return getattr(self, name) / GIB

    def as_dict(self) -> dict[str, Any]:
        return {"tried_to_allocate_gib": round(self.tried_to_allocate / GIB, 3),
                "allocated_gib": round(self.allocated / GIB, 3),
                "reserved_unallocated_gib": round(self.reserved_unallocated / GIB, 3),
                "free_gib": round(self.free / GIB, 3), "total_capacity_gib": round(self.total_capacity / GIB, 3),
                "segment": self.segment, "extrapolated": self.extrapolated, "message": self.message}


@dataclass(frozen=True)
class ReplayResult:
    """Predicted allocator state of one rank over the simulated step (bytes).

    `peak_reserved` ≈ ``torch.cuda.max_memory_reserved``; `peak_allocated` ≈ ``max_memory_allocated`` over the
    training steps (block sizes, i.e. after the allocator's rounding); `fragmentation` = peak_reserved −
    peak_allocated and `fragmentation_share` = fragmentation / peak_reserved; `reserve_ratio` = peak_reserved /
    peak_allocated − 1 (the analytic model's reserve). `peak_segment` names where reserved memory peaked.
    `oom`: the first failing request when a capacity was given and the step does not fit, else None.
    `depth`: the depths replayed ((L,) or (k, k+1), extrapolated to `num_layers`). `segments`: per segment label,
    (max reserved, max allocated) bytes.
    """

    peak_reserved: int
    peak_allocated: int
    peak_segment: str
    config: AllocatorConfig
    depth: tuple[int, ...]
    num_layers: int
    requests: int
    wall_s: float
    oom: OomReport | None = None
    capacity: int | None = None
    segments: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)

    @property
    def peak_reserved_gib(self) -> float:
        return self.peak_reserved / GIB

    @property
    def peak_allocated_gib(self) -> float:
        return self.peak_allocated / GIB

    @property
    def fragmentation(self) -> int:
        return self.peak_reserved - self.peak_allocated

    @property
    def fragmentation_share(self) -> float:
        return self.fragmentation / self.peak_reserved if self.peak_reserved else 0.0

    @property
    def reserve_ratio(self) -> float:
        return self.peak_reserved / self.peak_allocated - 1 if self.peak_allocated else 0.0

    @property
    def extrapolated(self) -> bool:
        return len(self.depth) == 2

    def as_dict(self) -> dict[str, Any]:
        return {"peak_reserved_gib": round(self.peak_reserved_gib, 3),
                "peak_allocated_gib": round(self.peak_allocated_gib, 3),
                "fragmentation_gib": round(self.fragmentation / GIB, 3),
                "fragmentation_share": round(self.fragmentation_share, 4),
                "peak_segment": self.peak_segment, "alloc_conf": self.config.describe(),
                "depth": list(self.depth), "num_layers": self.num_layers, "extrapolated": self.extrapolated,
                "requests": self.requests, "wall_s": round(self.wall_s, 3),
                "capacity_gib": None if self.capacity is None else round(self.capacity / GIB, 3),
                "oom": None if self.oom is None else self.oom.as_dict()}


def format_size(nbytes: int) -> str:
    """c10's ``format_size``: "512 bytes", "1.50 KiB", "20.00 MiB", "2.25 GiB" (two decimals; a unit is used up to
    and including 1024 of it)."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1 << 20:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1 << 30:
        return f"{nbytes / (1 << 20):.2f} MiB"
    return f"{nbytes / (1 << 30):.2f} GiB"


def oom_message(tried: int, allocated: int, reserved: int, free: int, total: int, device: int = 0,
                process_bytes: int | None = None) -> str:
    """PyTorch's CUDA OOM error text for these figures (bytes); `process_bytes` adds NVML's per-process line."""
    proc = (f"Including non-PyTorch memory, this process has {format_size(process_bytes)} memory in use. "
            if process_bytes is not None else "")
    return (f"CUDA out of memory. Tried to allocate {format_size(tried)}. GPU {device} has a total capacity of "
            f"{format_size(total)} of which {format_size(free)} is free. {proc}Of the allocated memory "
            f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved - allocated)} is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def _label(seg: tuple) -> str:
    return "/".join(str(x) for x in seg)


@dataclass
class _Run:
    """Raw figures of one replay (bytes): peaks over the training part, per-segment maxima, the first OOM."""

    peak_reserved: int = 0
    peak_allocated: int = 0
    peak_segment: str = "setup"
    requests: int = 0
    segments: dict[str, list[int]] = field(default_factory=dict)
    new_segment_requests: dict[str, int] = field(default_factory=dict)
    oom: Any = None
    oom_segment: str = ""


def _compact_setup(events: tuple[tuple, ...]) -> tuple[tuple, ...]:
    """The trace with its model build replaced by the allocations still alive when the first step starts, in
    their order: a model loaded straight into its final layout (quantized on load by bitsandbytes, partitioned at
    init by DeepSpeed ZeRO-3), where the simulate probe's stand-ins build the full-precision model first."""
    start = next((i for i, e in enumerate(events) if e[0] == "m" and e[1] and isinstance(e[1][0], int)), len(events))
    alive: dict[int, tuple] = {}
    for e in events[:start]:
        if e[0] == "a":
            alive[e[1]] = e
        elif e[0] == "f":
            alive.pop(e[1], None)
    return tuple(alive.values()) + events[start:]


def _replay_events(trace: AllocTrace, alloc: CachingAllocator, compact_setup: bool = False) -> _Run:
    run = _Run()
    live: dict[int, Any] = {}
    seg, training = "setup", False
    cur = run.segments.setdefault(seg, [0, 0])
    for ev in (_compact_setup(trace.events) if compact_setup else trace.events):
        kind = ev[0]
        if kind == "a":
            before = alloc.reserved
            try:
                live[ev[1]] = alloc.malloc(ev[2], ev[3])
            except OutOfMemory as err:
                run.oom, run.oom_segment = err.info, seg
                break
            run.requests += 1
            if alloc.reserved > before:   # this request made the allocator reserve more (a new segment or pages)
                run.new_segment_requests[seg] = max(run.new_segment_requests.get(seg, 0), alloc.round_size(ev[2]))
            if alloc.reserved > cur[0]:
                cur[0] = alloc.reserved
            if alloc.allocated > cur[1]:
                cur[1] = alloc.allocated
        elif kind == "f":
            b = live.pop(ev[1], None)
            if b is not None:
                alloc.free(b)
        elif kind == "e":   # torch.cuda.empty_cache() (probes/zerotrace.py: DeepSpeed calls it while it builds)
            alloc.empty_cache()
        else:
            seg = _label(ev[1])
            if not training and ev[1] and isinstance(ev[1][0], int):
                training = True
                alloc.peak_allocated = alloc.allocated   # torch.cuda.reset_peak_memory_stats at the first step
            cur = run.segments.setdefault(seg, [0, 0])
            cur[0], cur[1] = max(cur[0], alloc.reserved), max(cur[1], alloc.allocated)
    run.peak_reserved = alloc.peak_reserved
    run.peak_allocated = alloc.peak_allocated
    best = max(((v[0], k) for k, v in run.segments.items()), default=(0, "setup"))
    run.peak_segment = best[1]
    return run


def replay(trace: AllocTrace, config: AllocatorConfig | None = None, *, capacity: int | None = None,
           memory_fraction: float | None = None, device_total: int | None = None, device: int = 0,
           process_overhead: int | None = None, num_layers: int | None = None,
           compact_setup: bool = False) -> ReplayResult:
    """Replay one trace through the allocator model.

    `capacity`: bytes the allocator may reserve on the card (its total minus the CUDA context, NCCL and other
    processes); None replays without a limit. `device_total`: the card's total bytes for the message (defaults to
    `capacity`); `process_overhead`: non-PyTorch bytes of the process (context), which adds the message's
    per-process line. `compact_setup`: replace the model build by the tensors alive at the first step, in order
    (`_compact_setup`). Raises nothing for a full card: the result's `oom` says where it failed.
    """
    t0 = time.perf_counter()
    config = config or AllocatorConfig()
    alloc = CachingAllocator(config, capacity, memory_fraction)
    run = _replay_events(trace, alloc, compact_setup)
    oom = None
    if run.oom is not None:
        info = run.oom
        total = device_total or capacity or 0
        free = info.device_free
        oom = OomReport(info.request, info.alloc_size, info.allocated, info.reserved - info.allocated, free, total,
                        run.oom_segment, oom_message(info.alloc_size, info.allocated, info.reserved, free, total,
                                                     device, None if process_overhead is None
                                                     else info.reserved + process_overhead))
    return ReplayResult(run.peak_reserved, run.peak_allocated, run.peak_segment, config, (trace.n_layers,),
                        num_layers or trace.n_layers, run.requests, time.perf_counter() - t0, oom, capacity,
                        {k: (v[0], v[1]) for k, v in run.segments.items()})


def replay_depths(traces: Sequence[AllocTrace], num_layers: int, config: AllocatorConfig | None = None, *,
                  capacity: int | None = None, memory_fraction: float | None = None,
                  device_total: int | None = None, device: int = 0,
                  process_overhead: int | None = None, compact_setup: bool = False) -> ReplayResult:
    """Replay the probe's traces at `num_layers` layers: one full-depth trace as is; traces at k and k+1 layers
    through the full-depth trace `tracedepth.synthesize` makes of them (the repeated-layer pattern; module
    docstring). Raises ValueError for other depth combinations."""
    t0 = time.perf_counter()
    if len(traces) == 1:
        full, depth = traces[0], (traces[0].n_layers,)
    else:
        full, depth = _synthesized(traces[0], traces[1], num_layers), (traces[0].n_layers, traces[1].n_layers)
    r = replay(full, config, capacity=capacity, memory_fraction=memory_fraction, device_total=device_total,
               device=device, process_overhead=process_overhead, num_layers=num_layers,
               compact_setup=compact_setup)
    return replace(r, depth=depth, wall_s=time.perf_counter() - t0)


# the last full-depth trace synthesized: a probe replays one simulation several times (the settings as launched,
# expandable segments on, under the card's limit), and the synthesis is the same each time
_LAST_SYNTH: list[tuple[AllocTrace, AllocTrace, int, AllocTrace]] = []


def _synthesized(a: AllocTrace, b: AllocTrace, num_layers: int) -> AllocTrace:
    """`tracedepth.synthesize(a, b, num_layers)`, reused while the same two traces are replayed."""
    from finetune_doctor.probes.tracedepth import synthesize

    if _LAST_SYNTH and _LAST_SYNTH[0][0] is a and _LAST_SYNTH[0][1] is b and _LAST_SYNTH[0][2] == num_layers:
        return _LAST_SYNTH[0][3]
    full = synthesize(a, b, num_layers)
    _LAST_SYNTH[:] = [(a, b, num_layers, full)]
    return full


def replay_sim(sim: Any, config: AllocatorConfig | None = None, *, capacity: int | None = None,
               memory_fraction: float | None = None, device_total: int | None = None, device: int = 0,
               process_overhead: int | None = None) -> ReplayResult:
    """Replay the traces of a `SimResult` made with ``simulate(spec, trace=True)`` (extrapolated to its
    `num_layers` when it was simulated depth-reduced). The model build is replayed as traced for plain loads
    (the gpu probe builds exactly so); quantized, DeepSpeed and sharded runs replay it compacted
    (`_compact_setup`), since their stand-ins build the full-precision model first. Raises ValueError when the
    result holds no trace."""
    if not sim.traces:
        raise ValueError("the simulation kept no allocation trace: call simulate(spec, trace=True)")
    spec = getattr(sim, "spec", None)
    compact = bool(spec is not None and (spec.quantization_bit or spec.deepspeed or spec.sharded))
    return replay_depths(sim.traces, sim.num_layers, config, capacity=capacity, memory_fraction=memory_fraction,
                         device_total=device_total, device=device, process_overhead=process_overhead,
                         compact_setup=compact)
