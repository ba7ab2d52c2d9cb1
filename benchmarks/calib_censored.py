#!/usr/bin/env python
"""The error model's class locations (and scales) fitted with the outcome runs as CENSORED evidence, scored by
leave-one-round-out beside the shipped form (issue #21, session 13; calib_maps.md's lead, `outcome_shift`).

**What is fitted.** The shipped error table fits each class's ε = ln(measured / predicted) on the measurements
alone (uncertainty.derive, the conjugate update of the pooled rows, BDA3 §3.3). A run with an outcome and a card
says something about ε too, only less: a run that trained at need N on a budget B says N·e^ε ≤ B, one that ran out
says N·e^ε > B (the need carries the allocator reserve it needs to complete, analyzers/memory/reserve.py 'Shown and
needed'). Both are censored observations of ε (Tobit: J. Tobin, 'Estimation of relationships for limited dependent
variables', Econometrica 26, 1958). Here each row's fold distribution d (fitted on the other rounds, as
calib_loro.score_fold builds it) is moved to location μ + δ and scale σ·m, and (δ, m) maximise the likelihood of

- every measurement (exact): the density of the measured peak under the row's mixture of open assumptions
  (calib_loso.mixture_logpdf over the row's totals, the interval's distribution d), and
- every other run with an outcome and a card (censored): log p if it ran out, log (1 − p) if it trained, with p the
  all-cause p_oom as reported (d widened by λ and τ, the unexplained share q; the mixture over open assumptions),

over the rows of the OTHER rounds only. Per fold: first one (δ0, m0) for all rows (the pooled values), then one
(δ̂_k, m̂_k) per group k, shrunk to the pooled values by the group's number of sources s_k:
δ_k = δ0 + s_k/(s_k + κ0)·(δ̂_k − δ0), ln m_k likewise, with κ0 the table's own prior weight of the pooled rows
(uncertainty_table.json ``prior.kappa0``, chosen by derive_uncertainty.py; not a new choice). The held-out round is
then scored with its group's (δ_k, m_k): p_oom moves; the interval is reported as shipped (as every candidate on
calib_maps.md) and its raw coverage under the moved distribution is printed beside it.

Likelihood parts (`PARTS`): both as above (the brief's fit); the censored runs alone; the measurements alone; every
outcome run censored with its measurement left out (the likelihood twin of calib_maps' `outcome_shift`). Groups (the
two keys a check has in hand): ``error class`` — the table's own class key (shape × weights, what the
table's fields would carry), ``run class`` — bands.run_class (QLoRA, ZeRO-3 full, FSDP, ...: where calib_maps.md saw
the shift go opposite ways), and ``all`` (the pooled values only).

Free choices (counted on the page, the running total is calib_maps.md's): the grid of δ (−0.4…0.4 by 0.025) and of
m (0.75, 1, 1.25, 1.5), the two likelihood parts weighted alike, four parts × three groupings.

The fit that passed the adoption rule (`ADOPTED`) is what `fit_table_shift` writes into the table when a refit asks
for it (benchmarks/calibrate.py --outcome-shift, field ``p_oom_shift``; not shipped in session 13: results page),
read at check time by analyzers/memory/uncertainty.py `outcome_shift` (p_oom and p_oom_model move; the interval
does not).

Usage (CPU; the dev rows cached by calib_classes.scored_dev)::

    python benchmarks/calib_censored.py [--cache FILE] [--page FILE]

Writes benchmarks/results/calib_censored.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import calib_classes  # noqa: E402
import calib_loro  # noqa: E402
import calib_loso  # noqa: E402

PAGE = ROOT / "benchmarks" / "results" / "calib_censored.md"
DELTAS = tuple(round(0.025 * k, 3) for k in range(-16, 17))
MULTS = (0.75, 1.0, 1.25, 1.5)
GRID = tuple((d, m) for d in DELTAS for m in MULTS)
P_FLOOR = 1e-6   # a censored term's probability is never taken below this (a log of 0 would end the fit)


def moved(d: Any, th: tuple[float, float]) -> Any:
    """ErrorDist `d` at location μ + δ and scale σ·m (th = (δ, m), ln units)."""
    return replace(d, mu=d.mu + th[0], scale=d.scale * th[1])


def p_all(r: dict[str, Any], d: Any, v: dict[str, Any]) -> float:
    """The all-cause p_oom of scored row `r` under class distribution `d` (calib_loro.score_fold's formula)."""
    from finetune_doctor.analyzers.memory.uncertainty import mixture_p_oom, widened

    return mixture_p_oom(r["comps"], replace(widened(d, v["tau"], v["factor"]), unexplained=v["q"]))


def exact(r: dict[str, Any]) -> float | None:
    """Row `r`'s measured peak on the total's scale (GiB) when it has one and the mixture to place it in."""
    x = calib_loso.measured_on_total(r) if r.get("cmp") else None
    return x if x is not None and x > 0 and r.get("totals") else None


def loglik(r: dict[str, Any], d: Any, v: dict[str, Any], censored: bool = False) -> float | None:
    """ln L of row `r` under `d` (module docstring): exact for a measurement, censored for an outcome run, None
    for a row that says nothing (no measurement, no outcome with a card). `censored`: every run with an outcome
    is taken as censored, its measurement (if any) left out."""
    x = None if censored else exact(r)
    if x is not None:
        return calib_loso.mixture_logpdf(x, r["totals"], d)
    if r.get("p") is None:
        return None
    p = p_all(r, d, v)
    return math.log(max(p if r["y"] == 1.0 else 1.0 - p, P_FLOOR))


def prepare(rows: list[dict[str, Any]], v: dict[str, Any]) -> list[dict[str, Any]]:
    """Each row's log-likelihood at every grid point (`GRID`) under its own fold distribution (fitted without its
    round), and its p_oom at every grid point for scoring. Rows that say nothing are dropped from the fit."""
    for r in rows:
        r["ll_at"] = {th: loglik(r, moved(r["dist"], th), v) for th in GRID}
        if r.get("p") is not None:
            r["p_at"] = {th: p_all(r, moved(r["dist"], th), v) for th in GRID}
            r["llc_at"] = {th: math.log(max(p if r["y"] == 1.0 else 1.0 - p, P_FLOOR)) for th, p in r["p_at"].items()}
    return [r for r in rows if r["ll_at"][(0.0, 1.0)] is not None]


def best(sub: list[dict[str, Any]], field: str = "ll_at") -> tuple[float, float]:
    """The grid point of the largest summed log-likelihood `field` over `sub`; (0, 1), the fit unmoved, for none."""
    if not sub:
        return (0.0, 1.0)
    return max(GRID, key=lambda th: sum(r[field][th] for r in sub))


def nearest(th: tuple[float, float]) -> tuple[float, float]:
    return min(GRID, key=lambda g: abs(g[0] - th[0]) + abs(math.log(g[1]) - math.log(th[1])))


def fit_fold(train: list[dict[str, Any]], group: Callable[[dict[str, Any]], Any] | None,
             kappa0: float, field: str = "ll_at") -> tuple[tuple[float, float], dict[Any, tuple[float, float]]]:
    """(pooled (δ0, m0), {group: (δ_k, m_k)}) by maximum likelihood on `train`, each group shrunk to the pooled
    values by its number of sources (module docstring). The shrunk values are snapped to the grid."""
    pooled = best(train, field)
    if group is None:
        return pooled, {}
    out = {}
    for k in sorted({group(r) for r in train}, key=str):
        sub = [r for r in train if group(r) == k]
        own = best(sub, field)
        s = len({r["source"] for r in sub})
        w = s / (s + kappa0)
        out[k] = nearest((pooled[0] + w * (own[0] - pooled[0]),
                          math.exp(math.log(pooled[1]) + w * (math.log(own[1]) - math.log(pooled[1])))))
    return pooled, out


def scored(rows: list[dict[str, Any]], fitrows: list[dict[str, Any]], group: Callable[[dict[str, Any]], Any] | None,
           kappa0: float, field: str = "ll_at") -> tuple[list[dict[str, Any]], dict[Any, Any]]:
    """Copies of `rows` with p set per fold by `fit_fold` on the other rounds' `fitrows`; fold → (pooled, groups)."""
    out = [dict(r) for r in rows]
    chosen = {}
    for key in sorted({r["fold"] for r in out}, key=str):
        train = [r for r in fitrows if calib_loro.in_training("round", key, r["row"])]
        pooled, per = fit_fold(train, group, kappa0, field)
        chosen[key] = (pooled, per)
        for r in out:
            if r["fold"] == key:
                th = per.get(group(r), pooled) if group else pooled
                r["th"] = th
                if r.get("p") is not None:
                    r["p"] = r["p_at"][th]
    return out, chosen


# the fit the adoption rule passed on this page (2026-12-07, dev rounds 1-8): every outcome run censored, per
# error class (the table's class key), shrunk to the pooled values by sources (`verdict_lines`); passed, not shipped
# (calibrate.py writes it only with --outcome-shift)
ADOPTED = ("every outcome censored, no measurement", "error class")


def fit_table_shift(scored: list[dict[str, Any]], v: dict[str, Any], kept: list[dict[str, Any]],
                    kappa0: float) -> dict[str, Any]:
    """The table's ``p_oom_shift`` (analyzers/memory/uncertainty.py `outcome_shift`): the `ADOPTED` fit over ALL
    the dev rounds' runs, each run's likelihood taken under its own round's fold distribution (calib_loro.score_fold,
    as calib_loro.fit_report_shares and the interval's widths see every round once). `scored`: calibrate.score_all
    output of the dev rows; `v`: the chosen form (calib_loro.variant_of); `kappa0`: the table's prior weight.
    Returns {"how", "pooled": {"delta", "mult", "sources"}, "classes": {class key: {...}}}."""
    rows = calib_loro.score_fold(calib_loro.prepared(scored), "round", v, kept)
    part, field = PARTS[ADOPTED[0]]
    fitrows = [r for r in prepare(rows, v) if part(r)]
    # the error class under the form being fitted (its class_by), which the refitted table's reader keys by; not the
    # installed table's, which a refit may be replacing
    group = ((lambda r: calib_loso.class_of(r["pred"], tuple(v["class_by"]))) if ADOPTED[1] == "error class"
             else GROUPS[ADOPTED[1]])
    return shift_field(fitrows, group, kappa0, field)


def shift_field(fitrows: list[dict[str, Any]], group: Callable[[dict[str, Any]], Any], kappa0: float,
                field: str = "llc_at") -> dict[str, Any]:
    """`fit_fold` on every row of `fitrows` (no round left out), as the table's ``p_oom_shift`` object."""
    pooled, per = fit_fold(fitrows, group, kappa0, field)

    def src(sub: list[dict[str, Any]]) -> int:
        return len({r["source"] for r in sub})

    return {"how": "location delta (ln units) and scale factor mult of p_oom's error distribution per error class, "
                   "maximum likelihood over the dev runs' outcomes as censored observations of eps under each run's "
                   f"leave-one-round-out distribution, shrunk to the pooled values by sources (kappa0 {kappa0:g}); "
                   "benchmarks/calib_censored.py fit_table_shift",
            "pooled": {"delta": pooled[0], "mult": pooled[1], "sources": src(fitrows)},
            "classes": {k: {"delta": th[0], "mult": th[1], "sources": src([r for r in fitrows if group(r) == k])}
                        for k, th in per.items()}}


def raw_coverage(rows: list[dict[str, Any]], moved_too: bool) -> tuple[float, int]:
    """Share of measurements inside the mixture's 90 % interval BEFORE the class widths (bands.widen), under the
    fold distribution as fitted or moved by the row's (δ, m): what the location shift alone does to the interval."""
    from finetune_doctor.analyzers.memory.predictive import mixture_interval

    hits = n = 0
    for r in rows:
        x = calib_loso.measured_on_total(r) if r.get("cmp") else None
        if x is None or not r.get("totals"):
            continue
        d = moved(r["dist"], r.get("th", (0.0, 1.0))) if moved_too else r["dist"]
        lo, hi = mixture_interval([(w, t, None) for w, t, _b in r["totals"]], d)
        hits += lo <= x <= hi
        n += 1
    return (hits / n if n else math.nan), n


# which rows the likelihood takes: the brief's fit takes both; each part alone is scored beside it, to show which
# part moves the location (calib_maps.md's `outcome_shift` fitted the outcomes alone, by Brier)
# (which rows, which log-likelihood: ``ll_at`` exact where measured else censored, ``llc_at`` censored always)
PARTS: dict[str, tuple[Callable[[dict[str, Any]], bool], str]] = {
    "measurements + outcomes": (lambda r: True, "ll_at"),
    "outcomes only (censored)": (lambda r: exact(r) is None, "ll_at"),
    "measurements only (exact)": (lambda r: exact(r) is not None, "ll_at"),
    "every outcome censored, no measurement": (lambda r: "llc_at" in r, "llc_at")}
GROUPS: dict[str, Callable[[dict[str, Any]], Any] | None] = {
    "all": None,
    "error class": lambda r: calib_loso.class_of(r["pred"], tuple(calib_classes.shipped_variant()["class_by"])),
    "run class": lambda r: r["cls"]}


# What session 13 (wt/cal13b) read from this page (written from its numbers; rerun the script to check)
FINDINGS = [
    "## What the numbers say (session 13, wt/cal13b)", "",
    "- **The fit the brief named (measurements exact + outcome runs censored) moves nothing**: the 458 exact rows "
    "pin the pooled location at δ0 = 0 (+0.025 in two folds) and the censored runs cannot outweigh them; per error "
    "class +0.0031 ± 0.0015 (worse), per run class −0.0002 ± 0.0022. Measurements say the location is right.",
    "- **The censored runs alone (the 262 outcome runs WITHOUT a measurement) pull the other way**: δ0 = +0.225 to "
    "+0.275 with m = 1.5 in every fold, +0.039 to +0.049 Brier (0 of 8 rounds better, 7 worse by more than their s.e.). 152 of those 262 ran out, "
    "mostly issue threads: they are published because they failed, so their likelihood learns why a run was "
    "published (as the kind-of-report map does), not ε. All 339 outcome runs WITH a measurement trained.",
    "- **Every outcome run censored, its measurement left out** (all 601 outcome runs, the likelihood twin of "
    "calib_maps.md's Brier-fitted `outcome_shift`): pooled δ0 = −0.075 to −0.125, m = 0.75 (the grid's edge) in "
    "every fold; pooled −0.0034 ± 0.0024 (as calib_maps' −0.0034 ± 0.0025 on the same rows), per error class "
    "shrunk by sources **−0.0077 ± 0.0035 = 2.17 paired s.e., 6 of 8 rounds better, none worse by more than its "
    "own s.e., no confident miss: it passes the adoption rule**, per run class −0.0050 ± 0.0036 (round 1 worse).",
    "- **Caveats the rule does not price.** (1) It is the best of 12 rows on this page and this part was added "
    "after the first nine rows were seen; 2.17 s.e. as the maximum of 12 correlated candidates is weak evidence. "
    "(2) Sensitivity, not chosen: δ grid to ±0.5 and m down to 0.5 → −0.0075 ± 0.0037 (2.01 s.e.); the "
    "shrinkage weight κ0 2 / 4 / 8 (the table's) / 16 / 32 sources → 1.62 / 1.80 / 2.17 / 2.49 / 2.94 s.e. (3) The "
    "class values are unstable across folds (large_vocab_logits/unquantized +0.175 in fold 8, −0.275 on all "
    "rounds; 11 sources). (4) p_oom and the verdict move while the interval stays the measurements' (error_dist): "
    "after a refit a run's p_oom no longer sits where its interval puts the budget — the interval-vs-p consistency "
    "another engineer (fixtrial15) works on. (5) The verdict (table below): 50 runs that trained move at-risk → "
    "fits, 5 fits → at-risk, 7 runs that ran out at-risk → fits (fits on runs that ran out 27 → 34; share of OOM "
    "among fits 10.2 % → 10.7 %).",
    "- The shipped row here scores 0.1363 (calib_maps.md: 0.1376): the dev rows were rescored at this branch's "
    "base (after wt/mem13a's merge); every row of this page is paired against the 0.1363 scoring.",
    "- **Free choices of this page**: 12 candidates (4 likelihood parts × 3 groupings) + the δ grid, the m grid, the "
    "two parts weighed alike = 15 (the probability floor never binds: q/2 = 0.1); the shrinkage weight is the "
    "table's κ0. Running total 39 + 15 = 54.",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", metavar="FILE")
    ap.add_argument("--page", metavar="FILE", default=str(PAGE))
    args = ap.parse_args(argv)
    import calibrate

    from finetune_doctor.analyzers.memory import uncertainty as u

    dev = calib_loro.prepared(calib_classes.scored_dev(args.cache))
    kept = calibrate.kept_rows()
    v = calib_classes.shipped_variant()
    tables = calib_loro.fold_tables(dev, "round", v, kept)
    rows = calib_loro.score_fold(dev, "round", v, kept, tables)
    shipped = [dict(r) for r in rows]
    kappa0 = float(u.prior()[0])
    fitrows = prepare(rows, v)
    n_meas = sum(1 for r in fitrows if exact(r) is not None)
    rounds = sorted({r["round"] for r in rows})
    cov0, m0 = raw_coverage(shipped, False)
    out = ["# Class locations fitted with the outcome runs as censored evidence, by leave-one-round-out", "",
           "`python benchmarks/calib_censored.py` (module docstring). Every number is dev: each round scored with "
           f"(δ, m) fitted on the other rounds' {n_meas} measurements (exact) and {len(fitrows) - n_meas} runs with "
           f"an outcome and a card and no measurement (censored); shrinkage κ0 = {kappa0:g} sources (the table's "
           f"prior). Per round: {' / '.join(map(str, rounds))}. Raw coverage: the mixture's 90 % interval before the "
           "class widths (shipped: {:.1%} of {}).".format(cov0, m0), "",
           "| fit, keyed by | Brier | − shipped, paired (± s.e.) | gain / s.e. | rounds better | rounds worse by more "
           "than their s.e. | mean of rounds | reliability | resolution | per round | thread / doc | "
           "p≥0.9 trained / p≤0.1 OOM | mean ln p(outcome) | raw coverage, moved | chosen per fold |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
           row_line("shipped (the fold tables as fitted)", shipped, shipped, {}, rounds)]
    results = {}
    for pname, (part, field) in PARTS.items():
        for gname, g in GROUPS.items():
            cand, chosen = scored(rows, [r for r in fitrows if part(r)], g, kappa0, field)
            results[f"{pname}, {gname}"] = (cand, chosen)
            out.append(row_line(f"{pname}, {gname}", cand, shipped, chosen, rounds))
            print(out[-1], flush=True)
    out += ["", *verdict_lines(results, shipped, rounds), "", *verdict_moves(results[", ".join(ADOPTED)][0], v), "", *FINDINGS]
    Path(args.page).write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"wrote {args.page}")
    return 0


def verdict_moves(cand: list[dict[str, Any]], v: dict[str, Any]) -> list[str]:
    """What the adopted fit does to the VERDICT, which the Brier does not score: uncertainty.assess calls a run
    ``fits`` when the memory model's own p (q left out) is ≤ 5 % and its need is within the budget, ``oom`` when
    the need exceeds the budget, else ``at-risk``; counted per outcome, leave-one-round-out, shipped → moved."""
    from finetune_doctor.analyzers.memory.uncertainty import P_OOM_TARGET

    def verdict(r: dict[str, Any], th: tuple[float, float]) -> str:
        if sum(w for w, n, b in r["comps"] if n > b) > 0.5:
            return "oom"
        pm = p_all(r, moved(r["dist"], th), {**v, "q": 0.0})
        return "fits" if pm <= P_OOM_TARGET else "at-risk"

    counts: dict[tuple[str, str, str], int] = {}
    for r in cand:
        if r.get("p") is None:
            continue
        key = ("ran out" if r["y"] else "trained", verdict(r, (0.0, 1.0)), verdict(r, r["th"]))
        counts[key] = counts.get(key, 0) + 1
    out = [f"## The verdict under the adopted fit ({', '.join(ADOPTED)}), leave-one-round-out", "",
           "Not scored by the Brier: the verdict reads the memory model's own p (uncertainty.assess; `oom` here is "
           "the mixture's weight over the budget > 0.5, an approximation of the report's). Runs per outcome, "
           "shipped verdict → moved verdict:", "", "| outcome | shipped | moved | runs |", "|---|---|---|---|"]
    out += [f"| {o} | {a} | {b} | {n} |" for (o, a, b), n in sorted(counts.items())]
    return out


def per_round_paired(cand: list[dict[str, Any]], base: list[dict[str, Any]], k: int) -> tuple[float, float]:
    """(mean, s.e.) of the paired difference of squared errors on round `k`'s runs."""
    import statistics

    d = [(c["p"] - c["y"]) ** 2 - (b["p"] - b["y"]) ** 2 for c, b in zip(cand, base)
         if c["p"] is not None and c["round"] == k]
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    return statistics.mean(d), se


def row_line(gname: str, cand: list[dict[str, Any]], shipped: list[dict[str, Any]], chosen: dict[Any, Any],
             rounds: list[int]) -> str:
    import calib_maps   # the page only: importing it adds its logistic map to calib_loro.MAPS

    sc = calib_loro.scores(cand)
    dm, dse, better, nk = calib_maps.paired(cand, shipped)
    worse = [k for k in rounds if (lambda m, s: m > s)(*per_round_paired(cand, shipped, k))]
    mb, _ = calib_loro.mean_over_rounds(cand)
    dec = calib_loro.decomposition(cand)
    per = " / ".join(f"{calib_loro.scores([r for r in cand if r['round'] == k])['brier']:.3f}" for k in rounds)
    kinds = " / ".join(f"{calib_loro.scores([r for r in cand if calib_loro.source_kind(r) == k])['brier']:.3f}"
                       for k in ("thread", "documentation"))
    cov, n = raw_coverage(cand, True)
    # each fold's pooled (δ0, m0), then the last fold's groups (the others are on the page's second table)
    pick = "pooled " + ", ".join(f"{f}: {c[0]}" for f, c in sorted(chosen.items(), key=lambda kv: str(kv[0])))
    if chosen and chosen[max(chosen, key=str)][1]:
        pick += "; fold " + str(max(chosen, key=str)) + ": " + ", ".join(
            f"{k} {th}" for k, th in chosen[max(chosen, key=str)][1].items())
    return (f"| {gname} | {sc['brier']:.4f} | {dm:+.4f} ± {dse:.4f} | {(-dm / dse if dse else 0):+.2f} | "
            f"{better} of {nk} | {', '.join(map(str, worse)) or 'none'} | {mb:.4f} | {dec['rel']:.4f} | "
            f"{dec['res']:.4f} | {per} | {kinds} | {len(sc['sure_trained'])} / {len(sc['sure_oom'])} | {sc['log_outc']:.4f} | "
            f"{cov:.1%} of {n} | {pick} |")


def verdict_lines(results: dict[str, Any], shipped: list[dict[str, Any]], rounds: list[int]) -> list[str]:
    """The adoption rule (calib_maps.md's): a LORO gain ≥ 2 paired s.e. and no round worse by more than its own
    s.e., applied to each fit."""
    import calib_maps

    out = ["## Adoption rule: gain ≥ 2 paired s.e. and no round worse by more than its own s.e.", ""]
    for gname, (cand, _ch) in results.items():
        dm, dse, _b, _n = calib_maps.paired(cand, shipped)
        worse = [f"{k} ({m:+.4f} ± {s:.4f})" for k in rounds for m, s in [per_round_paired(cand, shipped, k)]
                 if m > s]
        ok = dse > 0 and -dm >= 2 * dse and not worse
        out.append(f"- {gname}: {dm:+.4f} ± {dse:.4f} ({(-dm / dse if dse else 0):+.2f} s.e.); rounds worse by more than their s.e.: "
                   f"{', '.join(worse) or 'none'} → {'ADOPT' if ok else 'not adopted'}")
    return out


if __name__ == "__main__":
    sys.exit(main())
