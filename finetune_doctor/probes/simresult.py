"""The simulate probe's result: peak live tensor bytes of one rank, by category and by segment of the step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from finetune_doctor.probes.spec import ProbeSpec

GIB = float(1 << 30)


@dataclass(frozen=True)
class SimResult:
    """Peak live tensor bytes of one rank over the simulated steps.

    `peak_bytes` is the analogue of ``torch.cuda.max_memory_allocated`` (bytes; simulated + analytic parts);
    `by_category` splits it at the peak moment (keys of `tracker.CATEGORIES`); `analytic` is the net change the
    analytic terms make to each category against the simulation (negative where they replace simulated bytes:
    ZeRO-2's gradient partition for the replica's gradients, the ZeRO-3 stand-in's fp32 shards moved from weights
    to optimizer) — the bytes the allocation trace does not hold; `analytic_part` is how many bytes of each
    category's figure come from analytic terms (0 ≤ analytic_part ≤ by_category); `segment` names the moment
    (``step 2, backward, layer 1 of 28``).
    `depth` lists the depths built (one entry: full depth; two: k and k+1, extrapolated to `num_layers`).
    `step_peaks` holds the peak of each optimizer step. `notes` say what was modelled rather than run.
    `segments` maps each segment's description to its peak bytes by category (analytic terms included), for
    calibration and diagnosis. `per_rank` maps each simulated rank to its peak bytes: data-parallel ranks run the
    same step on equal partitions, except that FSDP2 pads the last shards (``torch.chunk`` semantics), so rank 0
    holds the largest and is the one simulated by default. `traces`: with ``simulate(trace=True)``, the
    allocation trace of each depth built (`replay.AllocTrace`), for the allocator replay.
    """

    peak_bytes: int
    by_category: dict[str, int]
    segment: str
    analytic: dict[str, int]
    depth: tuple[int, ...]
    num_layers: int
    rank: int
    world_size: int
    steps: int
    step_peaks: tuple[int, ...]
    wall_s: float
    notes: tuple[str, ...]
    params: dict[str, int] = field(default_factory=dict)
    host_bytes: int = 0
    spec: ProbeSpec | None = None
    segments: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    per_rank: dict[int, int] = field(default_factory=dict)
    traces: tuple[Any, ...] = field(default=(), repr=False)
    analytic_part: dict[str, int] = field(default_factory=dict)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    @property
    def extrapolated(self) -> bool:
        return len(self.depth) == 2

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": "simulated",
            "peak_allocated_gib": round(self.peak_gib, 3),
            "by_category_gib": {k: round(v / GIB, 3) for k, v in self.by_category.items() if v},
            # "of which analytic": the analytic bytes inside each category's figure; the net change against the
            # simulation (negative where simulated bytes were replaced) is kept apart
            "analytic_gib": {k: round(v / GIB, 3) for k, v in self.analytic_part.items() if v},
            "analytic_net_gib": {k: round(v / GIB, 3) for k, v in self.analytic.items() if v},
            "segment": self.segment,
            "depth": list(self.depth),
            "num_layers": self.num_layers,
            "extrapolated": self.extrapolated,
            "rank": self.rank,
            "world_size": self.world_size,
            "steps": self.steps,
            "step_peaks_gib": [round(p / GIB, 3) for p in self.step_peaks],
            "host_gib": round(self.host_bytes / GIB, 3),
            "params": dict(self.params),
            "wall_s": round(self.wall_s, 2),
            "per_rank_gib": {str(k): round(v / GIB, 3) for k, v in self.per_rank.items()},
            "notes": list(self.notes),
        }
