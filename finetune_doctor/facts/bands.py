"""The 90 % interval of a check or estimate, widened for what the doctor does not know (analyzers/memory/bands.py):
per class of run, and downward only for unknown sample lengths. facts/verdict.py `_mixed` calls it."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from finetune_doctor.analyzers.memory import bands, uncertainty


def _class(asm: Any) -> str:
    return bands.run_class(asm.run, asm.hw.gpu if asm.hw is not None else None)


def mixed_interval(asm: Any, gpu_spec: str | None, comps: list[tuple[float, float, float | None]],
                   dist: uncertainty.ErrorDist) -> tuple[float, float]:
    """The interval (GiB) of `asm.memory` over the mixture `comps` (facts/assume.py `mixture`) under `dist`: its
    upper end at the samples' cutoff_len when their lengths are open, then the class's widths (analyzers/memory/
    bands.py); the mixture's interval alone when the table carries no widths."""
    from finetune_doctor.facts import assume

    table = uncertainty.table()
    interval = uncertainty.mixture_interval(comps, dist)
    if bands.widths(table, None) is None:
        return interval
    rest = [a for a in asm.assumptions if a.name != "sample-lengths"]
    if len(rest) != len(asm.assumptions):
        full = assume.mixture(asm.memory.total, asm.hw, rest, gpu_spec)
        interval = bands.upper_at_cutoff(interval, uncertainty.mixture_interval(full, dist), table)
    return bands.widen(interval, table, _class(asm))


def basis(asm: Any, text: str | None) -> str:
    """What the interval is made of, in words (``mem.interval_basis``): `text` (None: the benchmarks' error alone,
    facts/mem.py BENCHMARK_ERROR), and, once the table carries widths, the class of run whose spread across sources
    widened it."""
    from finetune_doctor.facts.mem import BENCHMARK_ERROR

    text = text or BENCHMARK_ERROR
    if bands.widths(uncertainty.table(), None) is None:
        return text
    return f"{text}, widened by the spread of {_class(asm)} runs across sources"


def single_interval(asm: Any) -> dict[str, Any]:
    """With nothing open (one component): `asm.memory`'s interval widened by its class's widths, written back to
    `asm.memory`; returns the ``mem`` facts that change (none when the table carries no widths)."""
    table, mem = uncertainty.table(), asm.memory
    if mem is None or not mem.interval_gib or bands.widths(table, None) is None:
        return {}
    iv = bands.widen(tuple(mem.interval_gib), table, _class(asm))
    asm.memory = replace(mem, interval_gib=iv, details={**mem.details, "interval_basis": basis(asm, None)})
    return {"interval_gib": list(iv), "interval_lo_gib": iv[0], "interval_hi_gib": iv[1],
            "interval_basis": basis(asm, None)}


def share_above(comps: list[tuple[float, float, float | None]], dist: uncertainty.ErrorDist,
                final: tuple[float, float], budget: float | None) -> float | None:
    """The share (0-1) of the distribution the reported 90 % interval `final` (GiB) is the central 90 % of that
    lies above `budget` (GiB): what the interval itself says of the card (trial 15 case 04: [6.61, 64.59] on a
    44.39 GiB card beside p_oom_model 0.032, with no statement of what either is of). None without a budget.

    The interval is the mixture `comps` (weight, total GiB, budget) of the peak total·e^ε under `dist`
    (uncertainty.py `mixture_interval`), its ends then moved by the class's widths and the full-length upper end
    (`mixed_interval`, `single_interval`). The distribution with exactly those ends is the mixture mapped by T,
    piecewise linear in ln units through three points: the mixture's 5 % point to `final`'s lower end, its median m
    to m' (m itself, or the middle of `final` in ln units where a negative width put m outside it) and its 95 %
    point to `final`'s upper end. So P(peak > budget) = 1 − F_mix(T⁻¹(budget)): a card at the interval's upper end
    gets exactly 5 %, above it less, at its lower end 95 %, below it more; monotone in `budget`."""
    comp = [(w, t) for w, t, _b in comps if w > 0 and t > 0]
    if budget is None or budget <= 0 or not comp:
        return None
    lm = math.log(uncertainty.mixture_interval(comps, dist, level=0.0)[0])
    lo_m, hi_m = (math.log(v) for v in uncertainty.mixture_interval(comps, dist))
    lo_f, hi_f = math.log(final[0]), math.log(final[1])
    mid = lm if lo_f < lm < hi_f else 0.5 * (lo_f + hi_f)
    lb = math.log(budget)
    if lb >= mid:
        x = lm + (lb - mid) * (hi_m - lm) / (hi_f - mid) if hi_f > mid and hi_m > lm else lb - mid + lm
    else:
        x = lm - (mid - lb) * (lm - lo_m) / (mid - lo_f) if mid > lo_f and lm > lo_m else lb - mid + lm
    return min(max(1.0 - sum(w * dist.cdf(x - math.log(t)) for w, t in comp), 0.0), 1.0)


def what_each_is_of(asm: Any, comps: list[tuple[float, float, float | None]] | None = None) -> dict[str, Any]:
    """The ``mem`` facts (and ``asm.memory.details``) that say what the interval and the probabilities are each of
    (trial 15: they read as contradicting each other): ``interval_of`` / ``p_oom_of`` in words and
    ``interval_share_above_card`` (`share_above`). The interval is of the peak nvidia-smi shows (``total``: the
    allocator's reserve included) under the benchmarks' error and the class's widths; p_oom_model of what the run
    needs to complete (``need``: the allocator frees its cache first) under the spread fitted on outcomes
    (uncertainty.py `model_dist`). Empty without a memory estimate or an interval."""
    from finetune_doctor.facts.assumebase import budget_gib
    from finetune_doctor.facts.mem import shape_of

    mem = asm.memory
    if mem is None or not mem.interval_gib:
        return {}
    budget = budget_gib(asm.hw)
    comps = comps if comps and len(comps) > 0 else [(1.0, mem.total, budget)]
    share = share_above(comps, uncertainty.error_dist(mem.method, shape_of(mem)), tuple(mem.interval_gib), budget)
    need = mem.need if mem.need is not None else mem.total
    out = {"interval_of": f"the peak nvidia-smi would show (memory.per_gpu_gib.total, {mem.total:.2f} GiB, the "
                          "allocator's reserve included), under the benchmarks' error and its class's widths",
           "p_oom_of": None if budget is None else (
               f"what the run needs to complete ({need:.2f} GiB: the allocator frees its cache before an OOM) "
               f"against the {budget:.2f} GiB budget, with the spread fitted on outcomes (p_oom_model), plus the "
               "unexplained share (p_oom)"),
           "interval_share_above_card": None if share is None else round(share, 3)}
    asm.memory = replace(mem, details={**mem.details, **out})
    return out
