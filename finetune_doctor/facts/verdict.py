"""The assumptions of a config's assembly folded into its memory verdict: `record_assumptions` asks facts/assume.py
for every value the estimate assumed, folds the open ones into the verdict (``at-risk`` naming the deciding one)
and mixes p_oom and the 90 % interval over them (`mixed_p_oom`); `lint_assumptions` copies them into the ``lint`` facts,
verdict-moving first. Split from facts/config.py at the 800-line cap (issue #22).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from finetune_doctor.facts.assembly import Assembly
from finetune_doctor.settings import Options


def lint_assumptions(asm: Assembly) -> Assembly:
    """Copy the assumptions into ``lint.assumptions`` (for assumption-moves-verdict), verdict-moving first."""
    asm.facts["lint"]["assumptions"] = [{**a.as_dict(), "effect_text": effect_text(a)}
                                        for a in sort_assumptions(asm.assumptions)]
    return asm


def effect_text(a: Any) -> str:
    """``A100-40GB: 92.1 GiB, oom; ...``: each evaluated alternative of an Assumption, for rule messages."""
    return "; ".join(f"{k}: {v:.1f} GiB" + (f", {a.effect_verdict[k]}" if k in a.effect_verdict else "")
                     for k, v in a.effect_gib.items())


def sort_assumptions(items: Iterable[Any]) -> list[Any]:
    """Verdict-moving assumptions first, each group in the order they were found (docs/DESIGN.md)."""
    return sorted(items, key=lambda a: not a.moves_verdict)


def record_assumptions(asm: Assembly, opts: Options, tokens: int | None,
                       alt: dict[str, Any] | None) -> dict[str, Any]:
    """Record what the estimate assumed (facts/assume.py) into ``asm.assumptions`` and fold the open ones into the
    memory verdict; returns the ``mem`` facts that say so (verdict, verdict_reason, deciding_assumption,
    token_budget)."""
    from finetune_doctor.facts import assume, assumelaunch

    mem = asm.memory
    base = mem.verdict if mem is not None else None
    found = assume.collect(asm, opts, tokens=tokens, base_verdict=base, alt_stack=alt)
    if (asm.run is not None and asm.run.world_size > 1) or any(a.name == "launcher" for a in found):
        # the launcher recorded when the config was read (facts/kinds.py `launcher_assumption`, asked before the
        # ranks were known) is asked again of the same producer with the resolved run (facts/assumelaunch.py
        # `launch_assumptions`), whose answer replaces it: weighed (over several ranks, or over GPU counts when none
        # was read), or none once the launch is read
        asm.assumptions[:] = [a for a in asm.assumptions if a.name != "launcher"]
    asm.assumptions.extend(found)
    from finetune_doctor.facts.assumebase import settled

    asm.assumptions[:] = [settled(a) for a in asm.assumptions]   # the `!` is what `fold` reads
    from finetune_doctor.facts.launchray import renote_world

    renote_world(asm, opts.env_file)   # the world size the "GPUs unknown" note gives is the run's (trial 15)
    if mem is None:
        return {}
    verdict, deciding = assume.fold(base, mem.total, asm.assumptions)
    budget = assume.token_budget(asm.run, asm.hw, asm.counts) if tokens is None else None
    out: dict[str, Any] = {"deciding_assumption": assume.deciding_facts(deciding, mem.total, base),
                           "token_budget": budget}
    details = dict(mem.details)
    details["token_budget"] = budget
    details["deciding_assumption"] = out["deciding_assumption"]
    asm.memory = replace(mem, verdict=verdict, details=details)
    out.update(mixed_p_oom(asm, opts))
    if deciding is not None:
        out.update(verdict=verdict, verdict_reason="assumption")
        if deciding.name == "gpu-variant":
            asm.hw_worst = assumelaunch.smallest_variant(asm.hw, opts.gpu)
    return out


def mixed_p_oom(asm: Assembly, opts: Options) -> dict[str, Any]:
    """p_oom and the 90 % interval of ``asm.memory`` over its open assumptions (facts/assume.py `mixture`,
    analyzers/memory/uncertainty.py `mixture_p_oom`/`mixture_interval`): a run that fits only if its samples are
    short does not keep the full-length case's p_oom. The assumed case's values stay in ``details``
    (``p_oom_assumed``, ``interval_assumed``, and the components for benchmarks/calibrate.py). Returns the ``mem``
    facts that change (p_oom, p_oom_model and their _pct, interval_*); empty when nothing is open."""
    from finetune_doctor.analyzers.memory import uncertainty
    from finetune_doctor.facts import assume, bands
    from finetune_doctor.facts.mem import BENCHMARK_ERROR, need_ratio, pct_fields, shape_of

    mem = asm.memory
    comps = assume.mixture(mem.total, asm.hw, asm.assumptions, opts.gpu)
    details = {**mem.details, "p_oom_assumed": mem.p_oom, "interval_assumed": mem.interval_gib,
               "p_oom_components": comps, "p_oom_model_assumed": mem.p_oom_model}
    if len(comps) < 2:
        asm.memory = replace(mem, details=details)
        single = bands.single_interval(asm)   # the class's widths (facts/bands.py); {} without them
        return {**single, **bands.what_each_is_of(asm, comps)}
    from finetune_doctor.facts.mixshow import mixture_weights

    details["mixture_weights"] = mixture_weights(mem.total, asm.hw, asm.assumptions, opts.gpu)
    shape = shape_of(mem)
    interval = bands.mixed_interval(asm, opts.gpu, comps, uncertainty.error_dist(mem.method, shape))
    mixed_p: dict[str, Any] = {}
    if mem.p_oom is not None and all(b is not None for _w, _t, b in comps):
        # on each component's need, not the reserve it shows (uncertainty.assess `need_gib`); Σw·((1−q)·P + q/2)
        need_comps = [(w, t * need_ratio(mem), b) for w, t, b in comps]
        pm = uncertainty.mixture_p_oom(need_comps, uncertainty.model_dist(mem.method, shape))   # type: ignore[arg-type]
        mixed_p = {"p_oom": uncertainty.all_cause(pm, uncertainty.unexplained_share(mem.method)), "p_oom_model": pm}
    # say what the interval is made of (trial 3: ds_z3_offload's 9.6 GiB spread a 60.6 GiB prediction to 7.8-85.1
    # GiB, labelled as the benchmarks' error alone)
    mixed = [a.name for a in asm.assumptions if a.name not in assume.NOT_OPEN and a.effect_gib
             and (a.name == "sample-lengths" or uncertainty.assumed_weight(a.name) < 1.0)]
    basis = bands.basis(asm, f"{BENCHMARK_ERROR}, mixed over the alternatives of {', '.join(mixed)}" if mixed else None)
    details["interval_basis"] = basis
    asm.memory = replace(mem, interval_gib=interval, details=details, **mixed_p)
    out: dict[str, Any] = {"interval_gib": list(interval), "interval_lo_gib": interval[0],
                           "interval_hi_gib": interval[1], "interval_basis": basis}
    if mixed_p:
        out.update(pct_fields(mixed_p["p_oom"], mem.p_oom, mixed_p["p_oom_model"], mem.p_oom_model))
    out.update(bands.what_each_is_of(asm, comps))   # of the same mixture the interval is (trial 15)
    return out
