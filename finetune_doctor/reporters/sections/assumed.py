"""Text rendering of what a report assumed (``Report.assumptions``, facts/assume.py) and of the memory verdict's
dependence on it: the "Assumed" section (verdict-moving assumptions first, one compact line each) and the token
budget line beside cutoff_len (``memory.token_budget``)."""

from __future__ import annotations

from typing import Any, Iterable


def budget_line(tb: dict[str, Any] | None) -> str | None:
    """One sentence: how long the samples may be (``training fits (the memory model's probability of OOM <= 5 %) as long as no sample exceeds 6,100 tokens
    (12,200 per micro batch of 2) (cutoff_len 8,192)``); None without a budget."""
    if not tb or all((b or {}).get("fits_at_cutoff", True) for b in (tb.get("train"), tb.get("eval"))):
        return None   # nothing to say: every sample may fill cutoff_len
    parts = []
    for what, b in (("training", tb.get("train")), ("the first evaluation", tb.get("eval"))):
        if not b:
            continue
        if b.get("fits_at_cutoff"):
            parts.append(f"{what} fits even if every sample fills cutoff_len")
        elif not b.get("tokens_per_sample"):
            # the budget is the length at which the verdict is `fits` (p_oom_model <= 5 %): a run predicted under its card
            # can still miss it through the prediction's error alone, so say which it is
            parts.append(f"{what} stays above the memory model's 5 % probability of OOM even with one-token samples")
        else:
            parts.append(f"{what} fits (the memory model's probability of OOM <= 5 %) as long as no sample exceeds "
                         f"{b['tokens_per_sample']:,} tokens "
                         f"({b['tokens_per_micro_batch']:,} per micro batch of {b['micro_batch']})"
                         + _band_note(b, tb.get("budget_gib"), tb["cutoff_len"]))
    return f"{'; '.join(parts)} (cutoff_len {tb['cutoff_len']:,})" if parts else None


def _band_note(b: dict[str, Any], budget: float | None, cutoff: int) -> str:
    """Why the limit is far below what the card holds, when it is: what the run needs at the limit (GiB) is the most the
    card takes at a 5 % probability of OOM, and the point estimate alone reaches the card only at longer samples
    (facts/assume.py `token_budget`). Empty when the two limits are close (within 25 %) or not known."""
    # one figure throughout: what the run needs, which the card limit and the verdict judge (trial 16: "the
    # estimate is 54.3 GiB" was the shown total while "stays under the card" was the need, beside a table at 108 %)
    card, need = b.get("card_tokens_per_sample"), b.get("need_gib", b.get("total_gib"))
    if not budget or need is None or not card or card <= 1.25 * b["tokens_per_sample"]:
        return ""
    card_text = (f"what it needs reaches the card only at {card:,} tokens" if card < cutoff else
                 "what it needs stays under the card even at cutoff_len (the table's total adds the allocator "
                 "cache freed before an OOM)")
    return (f": set by the prediction's error for this kind of run, not by the card — there the run needs "
            f"{need:.1f} GiB of {budget:.1f}, and {card_text}")


def deciding_line(d: dict[str, Any] | None) -> str | None:
    """Why the verdict is at-risk when an open assumption decides it (the Assumed section says how to remove it),
    None otherwise."""
    if not d:
        return None
    alt = d.get("alternative")
    tail = ""
    if alt and d.get("alternative_total_gib") is not None:
        tail = f", {d['alternative_total_gib']:.1f} GiB ({d.get('alternative_verdict')}) with {alt}"
    return (f"at-risk on {d['name']}: {d['total_gib']:.1f} GiB ({d.get('verdict_assumed')}) as assumed "
            f"({d['value']}){tail}")


def assumption_lines(items: Iterable[Any], verdict: str | None = None) -> list[tuple[str, bool]]:
    """(line, moves the verdict) per assumption, verdict-moving first: ``name: value — alternative: GiB verdict;
    … (resolve with …)``. `verdict` is the report's memory verdict (None: not known)."""
    out = []
    for a in sorted(items, key=lambda a: not a.moves_verdict):
        sized, unsized, said = [], [], set()
        for alt in a.alternatives:
            g, v = a.effect_gib.get(alt), a.effect_verdict.get(alt)
            if g is None:
                unsized.append(str(alt))
            else:
                # each reason once per line, at its first alternative (trial 17: one clause per ladder rung)
                why = _not_deciding(a, alt, v, verdict)
                sized.append(f"{alt}: {g:.1f} GiB" + (f" {v}" if v else "") + ("" if why in said else why))
                said.add(why)
        # alternatives the memory model was not re-run for carry no number: name a few, not every release
        if unsized:
            more = f", +{len(unsized) - _UNSIZED_SHOWN} more" if len(unsized) > _UNSIZED_SHOWN else ""
            unsized_text = f"{', '.join(unsized[:_UNSIZED_SHOWN])}{more}"
        eff = f" — if {'; '.join(sized)}" if sized else ""
        if unsized:
            eff += f"{';' if sized else ' —'} also possible, not sized: {unsized_text}"
        # compact: only what moves the verdict says how to remove it
        tail = f" (resolve with {a.resolve_with})" if a.moves_verdict and a.resolve_with else ""
        # a report over several configs (`doctor lint DIR`) says which file each assumption is about
        files = list(getattr(a, "files", ()))
        where = (f" [{', '.join(files[:_UNSIZED_SHOWN])}" + (f", +{len(files) - _UNSIZED_SHOWN} more" if
                 len(files) > _UNSIZED_SHOWN else "") + "]") if files else ""
        out.append((f"{'!' if a.moves_verdict else '-'} {a.name}: {a.value}{where}{eff}{tail}", a.moves_verdict))
    return out


# why an alternative whose verdict differs from the report's carries no `!` (trial 15; trial 17, LF#7147: "eval-batch:
# 8 — if 1: 9.0 GiB fits" and "transformers 4.48.3: 43.0 GiB oom" beside an at-risk headline, neither marked nor
# explained), keyed by the reason `_unmarked_reason` finds
_UNMARKED = {
    "unnamed": " (weighed, not deciding: no input names it)",
    "sure-default": " (weighed, not deciding: the default transformers or LLaMA-Factory applies to a whole file "
                    "until the key is set)",
    "same-as-assumed": " (as at the assumed value: another assumption makes the headline at-risk)",
}


def _not_deciding(a: Any, alt: str, alt_verdict: str | None, verdict: str | None) -> str:
    """The clause after an alternative whose verdict differs from the report's `verdict` while its assumption
    carries no `!` (`_UNMARKED`), empty otherwise: a differing verdict listed without `!` always says why."""
    reason = _unmarked_reason(a, alt, alt_verdict, verdict)
    return _UNMARKED[reason] if reason else ""


def _unmarked_reason(a: Any, alt: str, alt_verdict: str | None, verdict: str | None) -> str | None:
    """Which `_UNMARKED` reason applies: an alternative that never decides (facts/assumebase.py `UNNAMED`,
    `SHOWN_ONLY`), a sure default (`NEVER_OPENS`: weighed, never opening), or, under an at-risk verdict that
    another assumption opened, an alternative whose verdict is the one at the assumed value (`opens_verdict`
    compares with that one). None where the verdicts agree or the assumption moves the verdict."""
    from finetune_doctor.facts.assumebase import NEVER_OPENS, not_deciding

    if verdict is None or alt_verdict is None or alt_verdict == verdict:
        return None
    if alt in not_deciding(a.name):
        return "unnamed"
    if a.moves_verdict:
        return None
    if a.name in NEVER_OPENS:
        return "sure-default"
    return "same-as-assumed" if verdict == "at-risk" else None


# how many alternatives without a sized effect the text names before "+N more" (the JSON lists them all)
_UNSIZED_SHOWN = 3
