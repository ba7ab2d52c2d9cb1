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
    token_budget, typical)."""
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
    if any(a.name == "config-complete" for a in found):
        # a config that lost its training section (facts/assumepartial.py): the weighed assumption replaces the
        # one recorded when the config was read (facts/cutpaste.py `assumption`)
        asm.assumptions[:] = [a for a in asm.assumptions if a.name != "config-complete"]
    asm.assumptions.extend(found)
    from finetune_doctor.facts.assumebase import settled

    asm.assumptions[:] = [settled(a) for a in asm.assumptions]   # the `!` is what `fold` reads
    from finetune_doctor.facts.launchray import renote_world

    renote_world(asm, opts.env_file)   # the world size the "GPUs unknown" note gives is the run's (trial 15)
    if mem is None:
        return {}
    verdict, deciding = assume.fold(base, mem.total, asm.assumptions)
    budget = assume.token_budget(asm.run, asm.hw, asm.counts) if tokens is None else None
    # the point figure of a run on unread data: the typical longest sample, 2048 tokens cut at cutoff_len (issue #23)
    typical = assume.typical_sample(asm.assumptions) if tokens is None else None
    out: dict[str, Any] = {"deciding_assumption": assume.deciding_facts(deciding, mem.total, base),
                           "token_budget": budget, "typical": typical}
    details = dict(mem.details)
    details["token_budget"] = budget
    details["typical"] = typical
    details["deciding_assumption"] = out["deciding_assumption"]
    asm.memory = replace(mem, verdict=verdict, details=details)
    old_pm = mem.p_oom_model
    out.update(mixed_p_oom(asm, opts))
    if deciding is None:
        out.update(redecided(asm, old_pm))
    if deciding is not None:
        out.update(verdict=verdict, verdict_reason="assumption")
        if deciding.name == "gpu-variant":
            asm.hw_worst = assumelaunch.smallest_variant(asm.hw, opts.gpu)
    return out


def mixed_p_oom(asm: Assembly, opts: Options) -> dict[str, Any]:
    """The 90 % interval of ``asm.memory`` over its open assumptions (facts/assume.py `mixture`, analyzers/memory/
    predictive.py `mixture_interval`, the class's widths), and p_oom and p_oom_model read on the one distribution
    whose 5-95 % that interval is (facts/bands.py `one_distribution`): a run that fits only if its samples are
    short does not keep the full-length case's p_oom. The assumed case's values stay in ``details``
    (``p_oom_assumed``, ``interval_assumed``, and the components for benchmarks/calibrate.py). Returns the ``mem``
    facts that change (p_oom, p_oom_model and their _pct, interval_*)."""
    from finetune_doctor.analyzers.memory import uncertainty
    from finetune_doctor.facts import assume, bands
    from finetune_doctor.facts.mem import error_words, shape_of

    mem = asm.memory
    comps = assume.mixture(mem.total, asm.hw, asm.assumptions, opts.gpu)
    details = {**mem.details, "p_oom_assumed": mem.p_oom, "interval_assumed": mem.interval_gib,
               "p_oom_components": comps, "p_oom_model_assumed": mem.p_oom_model}
    if len(comps) < 2:
        asm.memory = replace(mem, details=details)
        single = bands.single_interval(asm)   # the class's widths (facts/bands.py); {} without them
        return {**single, **bands.one_distribution(asm, comps)}
    from finetune_doctor.facts.mixshow import mixture_weights

    details["mixture_weights"] = mixture_weights(mem.total, asm.hw, asm.assumptions, opts.gpu)
    shape = shape_of(mem)
    interval = bands.mixed_interval(asm, opts.gpu, comps, uncertainty.core_dist(mem.method, shape))
    # the remedy planners rebuild the same interval for an edited run (engine/planners.py `judge_against`)
    details["p_oom_full_components"] = bands.full_components(asm, opts.gpu)
    # say what the interval is made of (trial 3: ds_z3_offload's 9.6 GiB spread a 60.6 GiB prediction to 7.8-85.1
    # GiB, labelled as the benchmarks' error alone)
    mixed = [a.name for a in asm.assumptions if a.name not in assume.NOT_OPEN and a.effect_gib
             and (a.name == "sample-lengths" or uncertainty.assumed_weight(a.name) < 1.0)]
    basis = bands.basis(asm, f"{error_words()}, mixed over the alternatives of {', '.join(mixed)}" if mixed else None)
    details["interval_basis"] = basis
    asm.memory = replace(mem, interval_gib=interval, details=details)
    out: dict[str, Any] = {"interval_gib": list(interval), "interval_lo_gib": interval[0],
                           "interval_hi_gib": interval[1], "interval_basis": basis}
    # p_oom_model and p_oom read on the distribution whose 5-95 % the interval is (facts/bands.py
    # `one_distribution`, issue #21 session 14: before, a second spread gave p_oom beside this interval)
    out.update(bands.one_distribution(asm, comps))
    return out


def redecided(asm: Assembly, old_pm: float | None) -> dict[str, Any]:
    """The verdict ``fits`` / ``at-risk`` read again on the one distribution's p_oom_model (facts/bands.py
    `one_distribution`) against uncertainty.P_OOM_TARGET, and at the assumed values (``p_oom_model_assumed``), so
    that ``fits`` implies the 90 % interval's upper end is under the budget in shown terms (issue #21, session 14). A run at risk for its stack (`old_pm`,
    the model's probability it was judged on, under the target) and an ``oom`` stay as they are. Returns the ``mem``
    facts that change (verdict, verdict_reason); empty when none does."""
    from finetune_doctor.analyzers.memory.uncertainty import P_OOM_TARGET

    mem = asm.memory
    pm = None if mem is None else mem.p_oom_model
    if pm is None or mem.verdict not in ("fits", "at-risk"):
        return {}
    if mem.verdict == "at-risk" and (old_pm is None or old_pm <= P_OOM_TARGET):
        return {}   # at risk for the stack (facts/mem.py `judged`), not for the error
    # fits also at the assumed value of every open assumption: a verdict holds across the plausible range or it is
    # at-risk (README "Verdicts that follow the unknowns"), and the remedies are judged the same way
    # (engine/planners.py `judge_against`)
    pa = mem.details.get("p_oom_model_assumed")
    verdict = "fits" if pm <= P_OOM_TARGET and (pa is None or pa <= P_OOM_TARGET) else "at-risk"
    if verdict == mem.verdict:
        return {}
    asm.memory = replace(mem, verdict=verdict)
    return {"verdict": verdict, "verdict_reason": "error" if verdict == "at-risk" else None}


def error_risk(mem: dict[str, Any]) -> str | None:
    """The case of rule predicted-tight-fit's (FD606) message for the final ``mem`` facts (``mem.error_risk``):
    None unless the verdict is at-risk for the error (``verdict_reason`` error; a run at risk for its stack,
    facts/mem.py `judged`, is not), else ``over`` where p_oom_model_pct (mixed over the open assumptions) is over
    the 5 % the message names (analyzers/memory/uncertainty.py P_OOM_TARGET), ``assumed`` where only the assumed
    values' is (`redecided`), each with ``-under`` where the 90 % interval's upper end (GiB) is under budget_gib
    (GiB): the probability then weighs other cards an open assumption may mean, past whose budget it reaches."""
    if mem.get("verdict_reason") != "error":
        return None
    from finetune_doctor.analyzers.memory.uncertainty import P_OOM_TARGET

    pct, hi, budget = mem.get("p_oom_model_pct"), mem.get("interval_hi_gib"), mem.get("budget_gib")
    case = "over" if pct is not None and pct > 100 * P_OOM_TARGET else "assumed"
    return f"{case}-under" if hi is not None and budget and hi < budget else case


def with_error_risk(mem: dict[str, Any]) -> dict[str, Any]:
    """The final ``mem`` facts (facts/config.py), with `error_risk` read on their verdict."""
    mem["error_risk"] = error_risk(mem)
    return mem
