"""A simulate probe's allocation trace replayed for the report: what the caching allocator would reserve on the
user's card, under the allocator settings the training process gets, and whether expandable segments change it.

Which settings the training process gets: analyzers/memory/launchenv.py (``llamafactory-cli train`` gives torchrun
workers ``expandable_segments:True``; a single-process run keeps the shell's variables), parsed as torch parses
them (probes/allocconf.py).

What the trace does not hold is added around the replay (bytes): the simulate probe's analytic terms (DeepSpeed's
partitions, 8-bit states: `SimResult.analytic`, allocated once at setup) and the analytic model's communication
buffers are taken off the card before the replay and added to its reserved and allocated figures; the CUDA
context, cuBLAS and NCCL (analyzers/memory/runtime.py) are outside the allocator. So the predicted device total is
peak reserved + analytic terms + buffers + runtime, what nvidia-smi shows (DESIGN.md ``memory.per_gpu_gib.total``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from finetune_doctor.analyzers.memory.launchenv import launch_env
from finetune_doctor.probes.allocconf import AllocatorConfig, alloc_conf_from_env, with_expandable
from finetune_doctor.probes.replay import ReplayResult, oom_message, replay_sim
from finetune_doctor.types import GIB, Confirmation


def launch_alloc_conf(run: Any, env: Mapping[str, str] | None = None,
                      torch_version: str | None = None) -> AllocatorConfig:
    """The allocator settings the training workers run with. Raises InputError when the variable torch would
    read does not parse (naming it)."""
    return alloc_conf_from_env(launch_env(run, env), torch_version)


@dataclass(frozen=True)
class ReplayView:
    """One replay as the report shows it (GiB unless said). `result` is the replay under `conf`; `outside_gib`
    the bytes added around it (analytic terms + buffers), `runtime_gib` the runtime; `total_gib` the predicted
    device total; `capacity_gib` the card's memory minus memory in use (None without a GPU); `oom` the first
    request that fails, in PyTorch's words (None when it fits or no GPU is known); `toggled` the same trace
    replayed with expandable segments switched (None when they are already on)."""

    result: ReplayResult
    conf: AllocatorConfig
    outside_gib: float
    runtime_gib: float
    total_gib: float
    capacity_gib: float | None
    oom: dict[str, Any] | None
    toggled: "ReplayView | None" = None

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_gib is None else self.total_gib <= self.capacity_gib

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        d = {"alloc_conf": self.conf.describe(), "variable": self.conf.variable,
             "expandable_segments": self.conf.expandable_segments,
             "peak_reserved_gib": round(r.peak_reserved_gib + self.outside_gib, 3),
             "peak_allocated_gib": round(r.peak_allocated_gib + self.outside_gib, 3),
             "fragmentation_gib": round(r.fragmentation / GIB, 3),
             "fragmentation_share": round(r.fragmentation / (r.peak_reserved + self.outside_gib * GIB), 4)
             if r.peak_reserved else 0.0,
             "peak_segment": r.peak_segment, "outside_trace_gib": round(self.outside_gib, 3),
             "runtime_gib": round(self.runtime_gib, 3), "total_gib": round(self.total_gib, 3),
             "capacity_gib": None if self.capacity_gib is None else round(self.capacity_gib, 3),
             "fits": self.fits, "depth": list(r.depth), "num_layers": r.num_layers, "requests": r.requests,
             "wall_s": round(r.wall_s, 3), "oom": self.oom}
        if self.toggled is not None:
            d["with_expandable_segments"] = self.toggled.as_dict()
        return d


def _outside(run: Any, hw: Any, sim: Any) -> tuple[float, float]:
    """(analytic terms + buffers, runtime) in GiB for `run` on `hw` (module docstring)."""
    from finetune_doctor.analyzers.memory import estimate

    est = estimate(run, hw)
    analytic = sum(getattr(sim, "analytic", {}).values()) / GIB
    return analytic + est.per_gpu.get("buffers", 0.0), est.details.get("runtime_gib", 0.0)


def _view(run: Any, hw: Any, sim: Any, conf: AllocatorConfig, outside: float, runtime: float) -> ReplayView:
    """Replay without a limit (the step's demand); when that passes the card, again with the card's limit, where
    the allocator frees its cache and retries before it fails (allocator.py rule 7): the run then either fits
    under pressure or fails at the first request PyTorch would fail."""
    cap = None
    if hw is not None and hw.capacity_gib:
        cap = hw.capacity_gib - (max(hw.in_use_gib) if hw.in_use_gib else 0.0)
    rep = replay_sim(sim, conf)
    total = rep.peak_reserved_gib + outside + runtime
    oom = None
    if cap is not None and total > cap:
        limited = replay_sim(sim, conf, capacity=max(int((cap - runtime - outside) * GIB), 0),
                             device_total=int(hw.capacity_gib * GIB), process_overhead=int(runtime * GIB))
        if limited.oom is None:
            # it fits by emptying the cache under pressure: what it reserves on the card is the limited peak
            rep, total = replace(limited, wall_s=rep.wall_s + limited.wall_s), limited.peak_reserved_gib + outside + runtime
        else:
            o, extra = limited.oom, int(outside * GIB)
            msg = oom_message(o.tried_to_allocate, o.allocated + extra,
                              o.allocated + o.reserved_unallocated + extra, o.free, o.total_capacity,
                              process_bytes=o.allocated + o.reserved_unallocated + extra + int(runtime * GIB))
            oom = {**o.as_dict(), "allocated_gib": round((o.allocated + extra) / GIB, 3), "message": msg,
                   "fragmentation_decides": o.reserved_unallocated >= o.tried_to_allocate}
            rep = replace(rep, wall_s=rep.wall_s + limited.wall_s)
    return ReplayView(rep, conf, outside, runtime, total, cap, oom)


def replay_probe(run: Any, hw: Any, sim: Any, *, env: Mapping[str, str] | None = None,
                 torch_version: str | None = None, toggle: bool = True) -> ReplayView:
    """Replay the traces of `sim` (a SimResult made with ``trace=True``) for `run` on `hw` under the allocator
    settings of the training workers (module docstring), and, with `toggle` when those leave expandable segments
    off, once more with them on (`ReplayView.toggled`). Raises ValueError when `sim` holds no trace, InputError
    for an allocator variable that does not parse."""
    conf = launch_alloc_conf(run, env, torch_version)
    outside, runtime = _outside(run, hw, sim)
    view = _view(run, hw, sim, conf, outside, runtime)
    if toggle and not conf.expandable_segments:
        view = with_toggled(view, run, hw, sim)
    return view


def with_toggled(view: ReplayView, run: Any, hw: Any, sim: Any) -> ReplayView:
    """`view` with the same trace replayed under expandable segments on (`ReplayView.toggled`)."""
    if view.conf.expandable_segments or view.toggled is not None:
        return view
    conf = with_expandable(view.conf, True)
    return replace(view, toggled=_view(run, hw, sim, conf, view.outside_gib, view.runtime_gib))


# the replay's allocated peak must be the simulation's tensor peak (the same trace, counted two ways) within this
# share: benchmarks/results/allocator_replay.md found the two within 1 % on every device row
AGREEMENT = 0.05


def untrusted(view: ReplayView, sim: Any) -> str | None:
    """Why the replay of `sim` cannot stand for the run, or None. ZeRO-3/FSDP runs are simulated with FSDP2 over
    a fake process group, whose trace keeps the full-size build and unsharded storages that DeepSpeed never holds
    (benchmarks/derive_reserve.py GRID); any replay whose allocated peak misses the tensor peak by more than
    `AGREEMENT` replays a different step than the one simulated."""
    spec = getattr(sim, "spec", None)
    if spec is not None and spec.sharded:
        return ("the ZeRO-3/FSDP stand-in's trace holds the unsharded parameters DeepSpeed does not keep, so its "
                "replay is not used (the tensor peak with the analytic reserve is)")
    replayed = view.result.peak_allocated + sum(getattr(sim, "analytic", {}).values())
    if sim.peak_bytes and abs(replayed / sim.peak_bytes - 1) > AGREEMENT:
        return (f"the replay's allocated peak ({replayed / GIB:.2f} GiB) misses the simulated tensor peak "
                f"({sim.peak_gib:.2f} GiB) by more than {100 * AGREEMENT:.0f} %, so its reserve is not used")
    return None


def expandable_confirmation(view: ReplayView) -> Confirmation:
    """The expandable-segments remedy confirmed by the replay: before = the replay under the workers' settings,
    after = the same trace with ``expandable_segments:True`` (GiB per GPU as DESIGN.md counts them)."""
    after = view.toggled or view
    parts = []
    if after.capacity_gib is not None:
        parts.append(("fits " if after.fits else "still exceeds ") + f"{after.capacity_gib:.1f}")
    if view.oom is not None:
        parts.append("without it PyTorch would report: " + view.oom["message"].split(". If reserved")[0])
    return Confirmation(by="replay", before_gib=view.total_gib, after_gib=after.total_gib,
                        note="; ".join(parts) or None)
