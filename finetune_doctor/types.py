"""Value types that cross module boundaries.

Every type here is a frozen dataclass so that readers, analyzers, the rules engine and the reporters can pass
them around without defensive copies. Nothing in this module imports anything heavier than the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = float(1 << 30)
"""Bytes in one GiB (2^30). Every memory figure the doctor prints is in GiB."""

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {"error": 3, "warning": 2, "info": 1}


@dataclass(frozen=True)
class Location:
    """Where a finding points: a file and a 1-based line/column, plus the key path it concerns.

    `key` is the dotted key path inside the document (``zero_optimization.stage`` for a DeepSpeed JSON,
    ``bf16`` for a LLaMA-Factory YAML). `line`/`column` are None when the key is absent from the file
    (the finding then points at the file as a whole, line 1).
    """

    file: str | None
    line: int | None = None
    column: int | None = None
    key: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column, "key": self.key}


@dataclass(frozen=True)
class Edit:
    """One change to one key of one file. `value` None together with `delete=True` removes the key."""

    file: str
    key: str
    value: Any = None
    delete: bool = False

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "key": self.key, "value": self.value}
        if self.delete:
            d["delete"] = True
        return d


@dataclass(frozen=True)
class Confirmation:
    """What a probe measured before and after a fix (DESIGN.md `fix.confirmed`)."""

    by: str | None  # "simulate" | "gpu" | None
    before_gib: float | None = None
    after_gib: float | None = None
    nan_free_steps: int | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {"by": self.by, "before_gib": _r(self.before_gib), "after_gib": _r(self.after_gib),
             "nan_free_steps": self.nan_free_steps}
        if self.note:
            d["note"] = self.note
        return d


@dataclass(frozen=True)
class Fix:
    """A prescription: edits plus their safety and, for memory fixes, their predicted effect.

    `safety` is "safe" (applied by ``--fix``) or "unsafe" (needs ``--unsafe-fixes``: it changes training
    semantics, e.g. the effective batch or numerics). `effect` holds ``total_gib_before``/``total_gib_after``
    when the estimator was re-run with the edits, and ``p_oom_before``/``p_oom_after`` (0-1) where the remedy
    planner computed them; `cost` is a short human note on throughput/semantics.
    """

    title: str
    edits: tuple[Edit, ...] = ()
    safety: str = "unsafe"
    effect: dict[str, float] | None = None
    cost: str | None = None
    confirmed: Confirmation | None = None
    alternatives: tuple["Fix", ...] = ()

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "title": self.title,
            "edits": [e.as_dict() for e in self.edits],
            "safety": self.safety,
            # probabilities (p_oom_*) keep three decimals, GiB two
            "effect": ({k: _r(v, 3 if k.startswith("p_") else 2) for k, v in self.effect.items()}
                       if self.effect else None),
            "confirmed": self.confirmed.as_dict() if self.confirmed else None,
        }
        if self.cost:
            d["cost"] = self.cost
        if self.alternatives:
            d["alternatives"] = [a.as_dict() for a in self.alternatives]
        return d


@dataclass(frozen=True)
class Finding:
    """One diagnosis. `code`/`name` are stable (DESIGN.md); `severity` is error|warning|info."""

    code: str
    name: str
    severity: str
    category: str
    message: str
    location: Location
    fix: Fix | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "category": self.category,
            "message": self.message,
            "location": self.location.as_dict(),
            "fix": self.fix.as_dict() if self.fix else None,
        }

    def sort_key(self) -> tuple:
        return (-SEVERITY_RANK.get(self.severity, 0), self.location.file or "", self.location.line or 0, self.code)


@dataclass(frozen=True)
class TimelineEvent:
    """One event of a run's history (postmortem). `kind` is one of DESIGN.md's timeline kinds."""

    step: int | None
    kind: str
    detail: str
    source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "detail": self.detail, "source": self.source}


@dataclass(frozen=True)
class Hardware:
    """The GPUs a run will use.

    `capacity_gib` is the usable device memory per GPU as ``torch.cuda.get_device_properties().total_memory``
    reports it (GiB); `num_gpus` counts GPUs per node times nodes; `source` is flag|nvml|none.
    `fp8` is whether the cards have fp8 matrix units (None when unknown); `notes` are remarks on how the value
    was read (a bare ``--gpu 24GB`` says how it was taken), for the report's notes.
    """

    gpu: str | None
    num_gpus: int | None
    capacity_gib: float | None
    bf16: bool | None
    source: str = "none"
    compute_capability: tuple[int, int] | None = None
    nnodes: int = 1
    host_ram_gib: float | None = None
    in_use_gib: tuple[float, ...] = ()
    fp8: bool | None = None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "num_gpus": self.num_gpus, "capacity_gib": _r(self.capacity_gib),
                "bf16": self.bf16, "source": self.source}


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted peak memory of one training process on its busiest GPU (DESIGN.md `memory`). All GiB.

    `per_gpu` maps weights/gradients/optimizer/activations/logits/buffers/runtime/total. `total` is what
    nvidia-smi would show; `peak_allocated` is what ``torch.cuda.max_memory_allocated`` would show.
    `host` is host RAM per node needed by offload and model loading.
    `verdict` (fits | at-risk | oom), `p_oom` (probability that the run runs out, all causes, 0-1) and `interval_gib`
    (the central 90 % predictive interval of `total`) come from the error model of analyzers/memory/uncertainty.py; None
    when no GPU is known (the interval is known without one). `p_oom_model` is the memory model's own probability
    that the peak passes the card (0-1), which decides the verdict; p_oom = (1 − q)·p_oom_model + q/2 with q
    (``details["p_oom_unexplained"]``) the share of outcomes no memory term explains (uncertainty.py, 'Two
    probabilities').
    """

    per_gpu: dict[str, float]
    peak_allocated: float
    host: float
    fits: bool | None
    headroom: float | None
    method: str = "analytic"
    phase: str = "backward"
    details: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None
    p_oom: float | None = None
    interval_gib: tuple[float, float] | None = None
    p_oom_model: float | None = None

    @property
    def total(self) -> float:
        return self.per_gpu["total"]

    @property
    def need(self) -> float:
        """What the run needs to complete (GiB): `total` with the allocator reserve it needs instead of the one it
        shows (analyzers/memory/reserve.py, 'Shown and needed'); `total` for an estimate that does not say."""
        v = self.details.get("need_gib")
        return self.total if v is None else float(v)

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_gpu_gib": {k: _r(v) for k, v in self.per_gpu.items()},
            "peak_allocated_gib": _r(self.peak_allocated),
            "host_gib": _r(self.host),
            "fits": self.fits,
            "headroom_gib": _r(self.headroom),
            "need_gib": _r(self.need),
            "method": self.method,
            "verdict": self.verdict,
            "p_oom": None if self.p_oom is None else round(float(self.p_oom), 3),
            # issue #21: the memory model's own probability (decides the verdict) and the unexplained share q
            "p_oom_model": None if self.p_oom_model is None else round(float(self.p_oom_model), 3),
            "p_oom_unexplained": (None if self.p_oom is None or self.details.get("p_oom_unexplained") is None
                                  else round(float(self.details["p_oom_unexplained"]), 3)),
            "interval_gib": None if self.interval_gib is None else [_r(v) for v in self.interval_gib],
            # honest verdicts (facts/assume.py): how long samples may be, and the assumption an at-risk names
            **{k: self.details[k] for k in ("token_budget", "deciding_assumption", "typical")
               if self.details.get(k)},
            # trial 15: what the interval and the probabilities are each of, and the interval's share above the card
            **{k: self.details[k] for k in ("interval_of", "p_oom_of", "interval_share_above_card")
               if k in self.details},
            # issue #21 session 14: the budget on the interval's scale, the one p_oom_model is the share above
            **({"oom_threshold_gib": _r(self.details["oom_threshold_gib"])}
               if self.details.get("oom_threshold_gib") is not None else {}),
            # trial 13: what a mixed p_oom averages over (facts/mixshow.py) and its value at the assumed values
            **({"mixture_weights": self.details["mixture_weights"],
                "p_oom_assumed": _r(self.details.get("p_oom_assumed"), 3),
                "p_oom_model_assumed": _r(self.details.get("p_oom_model_assumed"), 3)}
               if self.details.get("mixture_weights") and self.p_oom is not None else {}),
        }


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


@dataclass(frozen=True)
class Assumption:
    """A value the doctor used but did not read from the user's inputs (docs/DESIGN.md, "Honest verdicts").

    `name` is a stable kebab-case id (``sample-lengths``, ``gpu-variant``, ``launcher``, ``lf-version``, ...);
    `value` what was used, `source` why (``catalog alias``, ``folder name``, ``LF default``, ...);
    `alternatives` the other plausible values; `effect_gib` maps each alternative to the predicted per-GPU total
    (GiB) under it and `effect_verdict` to the verdict under it (fits | at-risk | oom), both empty when the
    alternative was not evaluated; `resolve_with` the flag, file or machine that removes the assumption.
    `moves_verdict` is True when some alternative gives another verdict than the one reported.
    """

    name: str
    value: Any
    source: str
    alternatives: tuple[Any, ...] = ()
    effect_gib: dict[str, float] = field(default_factory=dict)
    effect_verdict: dict[str, str] = field(default_factory=dict)
    resolve_with: str = ""
    moves_verdict: bool = False
    # the config files it was made for, when one report covers several (`doctor lint DIR`); empty for one file
    files: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "alternatives": list(self.alternatives),
            "effect": {"total_gib": {str(k): _r(v) for k, v in self.effect_gib.items()},
                       "verdict": {str(k): v for k, v in self.effect_verdict.items()}},
            "resolve_with": self.resolve_with,
            "moves_verdict": self.moves_verdict,
        }
        if self.files:
            d["files"] = list(self.files)
        return d


@dataclass(frozen=True)
class Report:
    """Everything one command found, ready for any reporter (DESIGN.md JSON schema v1).

    `run` is the resolved run summary (the JSON `run` object), `sections` holds command-specific extras that
    the text reporter renders and the JSON reporter emits under their own keys (``data``, ``gpus``, ``sweep``,
    ``probe``, ``read``): additions to schema v1 that leave every v1 key as it is.
    """

    command: str
    inputs: dict[str, Any]
    findings: tuple[Finding, ...] = ()
    run: dict[str, Any] | None = None
    hardware: Hardware | None = None
    memory: MemoryEstimate | None = None
    timeline: tuple[TimelineEvent, ...] = ()
    sections: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    assumptions: tuple[Assumption, ...] = ()

    def summary(self) -> dict[str, int]:
        out = {s: 0 for s in SEVERITIES}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    def worst(self) -> str | None:
        ranks = [SEVERITY_RANK.get(f.severity, 0) for f in self.findings]
        if not ranks:
            return None
        best = max(ranks)
        return next(s for s, r in SEVERITY_RANK.items() if r == best)


@dataclass(frozen=True)
class SourceDoc:
    """A file that was read, with the 1-based (line, column) of every key path in it.

    `positions` maps dotted key paths (``zero_optimization.stage``) to (line, column). `role` says what the
    file is to the run: config | deepspeed | model | log | run_dir | dataset | record.
    """

    role: str
    path: str
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def locate(self, key: str | None) -> Location:
        if key and key in self.positions:
            line, col = self.positions[key]
            return Location(self.path, line, col, key)
        if key and "." in key:
            # an absent nested key: point at its nearest present parent
            parent = key.rsplit(".", 1)[0]
            while parent:
                if parent in self.positions:
                    line, col = self.positions[parent]
                    return Location(self.path, line, col, key)
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
        return Location(self.path, 1 if self.role in ("config", "deepspeed") else None, None, key)
