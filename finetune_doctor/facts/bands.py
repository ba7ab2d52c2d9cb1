"""The 90 % interval of a check or estimate, widened for what the doctor does not know (analyzers/memory/bands.py):
per class of run, and downward only for unknown sample lengths. facts/verdict.py `_mixed` calls it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from finetune_doctor.analyzers.memory import bands, predictive, uncertainty


def _class(asm: Any) -> str:
    return bands.run_class(asm.run, asm.hw.gpu if asm.hw is not None else None)


def mixed_interval(asm: Any, gpu_spec: str | None, comps: list[tuple[float, float, float | None]],
                   dist: uncertainty.ErrorDist) -> tuple[float, float]:
    """The interval (GiB) of `asm.memory` over the mixture `comps` (facts/assume.py `mixture`) under `dist`: its
    upper end at the samples' cutoff_len when their lengths are open, then the class's widths (analyzers/memory/
    bands.py); the mixture's interval alone when the table carries no widths."""
    return final_interval(comps, full_components(asm, gpu_spec), dist, _class(asm))


def full_components(asm: Any, gpu_spec: str | None) -> list[tuple[float, float, float | None]] | None:
    """The mixture (weight, total GiB, budget GiB) over the open assumptions other than the sample lengths (the
    samples at cutoff_len: the interval's upper end, analyzers/memory/bands.py `upper_at_cutoff`); None when the
    sample lengths are not open."""
    from finetune_doctor.facts import assume

    rest = [a for a in asm.assumptions if a.name != "sample-lengths"]
    return assume.mixture(asm.memory.total, asm.hw, rest, gpu_spec) if len(rest) != len(asm.assumptions) else None


def final_interval(comps: list[tuple[float, float, Any]], full: list[tuple[float, float, Any]] | None,
                   dist: uncertainty.ErrorDist, cls: str | None) -> tuple[float, float]:
    """The reported 90 % interval (GiB) of the mixture `comps` (weight, total GiB, budget) under `dist`: its upper
    end raised to the mixture `full`'s (the samples at cutoff_len; None when their lengths are not open), then the
    widths of class `cls` (analyzers/memory/bands.py); the mixture's own interval when the table has no widths.
    benchmarks/calibrate.py `reweigh` scores the same function."""
    table = uncertainty.table()
    interval = predictive.mixture_interval(comps, dist)
    if bands.widths(table, None) is None:
        return interval
    if full:
        interval = bands.upper_at_cutoff(interval, predictive.mixture_interval(full, dist), table)
    return bands.widen(interval, table, cls)


def basis(asm: Any, text: str | None) -> str:
    """What the interval is made of, in words (``mem.interval_basis``): `text` (None: the interval's error alone,
    facts/mem.py `error_words`), and, once the table carries widths, the class of run whose spread across sources
    widened it."""
    from finetune_doctor.facts.mem import error_words

    text = text or error_words()
    if bands.widths(uncertainty.table(), None) is None:
        return text
    return f"{text}, widened by the spread of {_class(asm)} runs across sources"


def single_interval(asm: Any) -> dict[str, Any]:
    """With nothing open (one component): `asm.memory`'s interval widened by its class's widths, written back to
    `asm.memory`; returns the ``mem`` facts that change (none when the table carries no widths)."""
    table, mem = uncertainty.table(), asm.memory
    if mem is None or not mem.interval_gib or bands.widths(table, None) is None:
        return {}
    if mem.details.get("interval_widened"):   # facts/mem.py `judged` widened it with the run's class
        asm.memory = replace(mem, details={**mem.details, "interval_basis": basis(asm, None)})
        return {"interval_basis": basis(asm, None)}
    iv = bands.widen(tuple(mem.interval_gib), table, _class(asm))
    asm.memory = replace(mem, interval_gib=iv, details={**mem.details, "interval_basis": basis(asm, None)})
    return {"interval_gib": list(iv), "interval_lo_gib": iv[0], "interval_hi_gib": iv[1],
            "interval_basis": basis(asm, None)}


def share_above(comps: list[tuple[float, float, float | None]], dist: uncertainty.ErrorDist,
                final: tuple[float, float], budget: float | None) -> float | None:
    """The share (0-1) above `budget` (GiB) of the distribution whose central 90 % is the reported interval `final`
    (GiB): the one predictive distribution of the peak (analyzers/memory/predictive.py: the mixture `comps` (weight,
    total GiB, budget) of total·e^ε under `dist`, T-mapped onto `final`). A card at the interval's upper end gets
    5 %, at its lower end 95 %; monotone in `budget`. None without a budget."""
    comp = [(w, t, b) for w, t, b in comps if w > 0 and t > 0]
    if budget is None or budget <= 0 or not comp:
        return None
    return predictive.build(comp, dist, final).share_above(budget)


def one_distribution(asm: Any, comps: list[tuple[float, float, float | None]] | None = None) -> dict[str, Any]:
    """p_oom_model, p_oom and the words of what each is of, from the ONE predictive distribution of the peak whose
    5-95 % quantiles are the reported interval (analyzers/memory/predictive.py; issue #21, session 14):
    p_oom_model = Σ w_i·P(need_i·e^ε > budget_i) read on that distribution (the share above the budget in shown
    terms, ``oom_threshold_gib`` = budget·total/need), p_oom = (1 − q)·p_oom_model + q/2 (uncertainty.py
    `all_cause`). The values at the assumed value of every open assumption (``*_assumed``) are the same reading
    of the assumed case's own distribution. Writes them to `asm.memory`; returns the ``mem`` facts that change.
    Empty without a memory estimate or an interval."""
    from finetune_doctor.facts.assumebase import budget_gib
    from finetune_doctor.facts.mem import error_words, need_ratio, pct_fields, shape_of

    mem = asm.memory
    if mem is None or not mem.interval_gib:
        return {}
    budget = budget_gib(asm.hw)
    comps = [c for c in (comps or []) if c[0] > 0 and c[1] > 0] or [(1.0, mem.total, budget)]
    dist = uncertainty.core_dist(mem.method, shape_of(mem))
    ratio = need_ratio(mem)
    dp = predictive.build(comps, dist, tuple(mem.interval_gib))
    pm = dp.p_over([b for _w, _t, b in comps], ratio)
    assumed_iv = mem.details.get("interval_assumed")
    pm_a = pm
    if len(comps) > 1 and assumed_iv and budget is not None:
        final_a = tuple(assumed_iv) if mem.details.get("interval_widened") else \
            bands.widen(tuple(assumed_iv), uncertainty.table(), _class(asm))
        pm_a = predictive.build([(1.0, mem.total, budget)], dist, final_a).p_over([budget], ratio)
    q = uncertainty.unexplained_share(mem.method)
    p = None if pm is None else uncertainty.all_cause(pm, q)
    p_a = None if pm_a is None else uncertainty.all_cause(pm_a, q)
    need = mem.need if mem.need is not None else mem.total
    thr = None if budget is None else predictive.threshold(budget, ratio)
    words = {"interval_of": f"the peak nvidia-smi would show (memory.per_gpu_gib.total, {mem.total:.2f} GiB, the "
                            f"allocator's reserve included), under {error_words()} and its class's widths",
             "p_oom_of": None if budget is None else (
                 f"the same distribution's share above {thr:.2f} GiB, the {budget:.2f} GiB budget as that peak shows "
                 f"when the run needs it all ({need:.2f} GiB needed: the allocator frees its cache before an OOM) "
                 "(p_oom_model), plus the unexplained share (p_oom)"),
             "interval_share_above_card": None if pm is None else round(pm, 3), "oom_threshold_gib": thr}
    # the card itself open (a gpu-variant alternative): p_oom_model weighs several budgets, so no one threshold is
    # what it is the share above (reporters/text.py words the line by this)
    budgets = {round(b, 6) for _w, _t, b in comps if b is not None}
    details = {**mem.details, **words, "p_oom_assumed": p_a, "p_oom_model_assumed": pm_a,
               "oom_thresholds_differ": len(budgets) > 1}
    asm.memory = replace(mem, details=details, **({} if pm is None else {"p_oom": p, "p_oom_model": pm}))
    out = dict(words)
    if pm is not None:
        out.update(pct_fields(p, p_a, pm, pm_a))
    return out
