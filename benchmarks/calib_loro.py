#!/usr/bin/env python
"""Leave-one-ROUND-out: the yardstick for p_oom and the 90 % interval on the next held-out round (issue #21).

Why rounds, not sources. Every calibration round (benchmarks/calib_data.py: rounds 1-7 are dev) was collected by
other people at another time, from sources no earlier round used; the next held-out round is one more such round.
Leave-one-source-out (benchmarks/calib_loso.py) keeps a source's siblings of the same round in the fit — the same
collector's way of translating a framework into LLaMA-Factory keys, the same kind of thread — so it says how the
table does on a new page of a round it has seen, not on a new round. Held-out rounds scored worse than LOSO on dev
said (round 6: Brier 0.157 / coverage 80 %; round 7: 0.207 / 84 %; dev LOSO 0.139 / 88 %).

**Folds** (`FOLDS`): ``round`` — the error table (uncertainty.derive on the rows whose samples reach cutoff_len,
the prior (κ0, ν0) by leave-one-out log score as calibrate.fit chooses it) and the interval's class widths
(calib_widths.derive_widths) are fitted on the other dev rounds and round R's rows are scored with them;
``forward`` — fitted on the rounds before R only (what the held-out scoring did: round 6 was scored with a table
fitted on rounds 1-5); ``source`` — calib_loso's leave-one-source-out, for the comparison. Widths come from the
residuals of the training folds' rows, each taken against the table fitted without its own fold (calib_widths
`residuals`), as the shipped widths are.

**Scored as reported**: every row's mixture over its open assumptions (calib_loso.components: the sample lengths
under the log-uniform prior unless its samples reach cutoff_len, the other assumptions weighed as the report weighs
them since session 16, calib_loso.others_weight); the interval the mixture's, its upper end at cutoff_len, its lower end at the allocated share for an unknown counter,
then widened by the class's widths (analyzers/memory/bands.py); since session 14 p_oom = (1 − q)·p_oom_model + q/2
with p_oom_model the share above the budget of the one distribution whose 5-95 % is that interval (`one_p_model`,
analyzers/memory/predictive.py); the variant ``one: False`` scores the two computations of before (p_oom under the
widened t, uncertainty.oom_dist). The form (class key, robust, tails, λ, τ, q) is the shipped table's
(calib_classes.shipped_variant) unless a variant below changes one part.

**What else the page holds.** ``--experiments``: every choice tried (issue #21's brief, step 2), each scored by
leave-one-round-out with the rest as shipped — the prior on the longest sample, the other open assumptions' weight,
σ per class counted by its sources (`dist_by_sources`), λ and τ, and four maps of the memory model's own
probability into p_oom (`MAPS`: one q or two-sided shares, for all runs or per kind of report), each map's
parameters chosen for a round on the other rounds' runs (`apply_map`). ``--after VARIANTS`` (a pickle of
calib_loso.loso's results under round folds): the form calib_loso.choose picks, before → after, per class and per
kind of report, with `fit_report_shares`' map beside it, and — when the results carry per-fold sums — the form
chosen without each round and scored on it (`nested`).

Usage (CPU; the dev rows are assembled once, ~40 s on the shared machine, then kept in ``--cache``; the variants'
grid takes 15-30 min at load 10)::

    python benchmarks/calib_loro.py [--cache FILE] [--page FILE] [--experiments] [--after VARIANTS.pkl]

Writes benchmarks/results/calib_loro.md (``--page``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import calib_classes  # noqa: E402
import calib_loso  # noqa: E402
import calib_widths  # noqa: E402
from calib_data import samples_fill  # noqa: E402

PAGE = ROOT / "benchmarks" / "results" / "calib_loro.md"
FOLDS = ("round", "forward", "source")
# the held-out scores each round got once, before it became dev (benchmarks/calib_data.py; session notes 10 and 11):
# (Brier, runs, coverage, measurements)
HELD_OUT = {6: (0.157, None, 0.80, None), 7: (0.207, 35, 0.84, 32), 8: (0.131, 32, 0.94, 18),
            10: (0.257, 49, 0.60, 10), 11: (0.244, 32, 0.88, 8),
            12: (0.150, 20, 0.83, 12)}   # 10: rounds 9 and 10 scored together (calibrate_heldout.md)


def round_of(row: dict[str, Any]) -> int:
    return int(row.get("round") or 1)


def fold_key(fold: str, row: dict[str, Any]) -> Any:
    return row["source"] if fold == "source" else round_of(row)


def in_training(fold: str, key: Any, row: dict[str, Any]) -> bool:
    """Whether `row` may fit the table that scores fold `key` (module docstring, 'Folds')."""
    if fold == "forward":
        return round_of(row) < key
    return fold_key(fold, row) != key


def prepared(scored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dev rows with their mixture components (calib_loso.components), refused rows dropped."""
    return [{**s, "comps": calib_loso.components(s), "totals": calib_loso.components(s, need=False)}
            for s in scored if "error" not in s["pred"]]


def fold_tables(dev: list[dict[str, Any]], fold: str, v: dict[str, Any], kept: list[dict[str, Any]],
                derive_fn: Callable[..., dict[str, Any]] | None = None) -> dict[Any, tuple[Any, float, int]]:
    """fold key → (methods table, κ0, ν0) fitted on the fill rows `in_training` for that key (plus the kept
    simulated/measured rows). `derive_fn` (rows, robust) → methods stands in for uncertainty.derive."""
    from derive_uncertainty import choose_prior

    from finetune_doctor.analyzers.memory.uncertainty import derive

    derive_fn = derive_fn or derive
    if fold == "source" and derive_fn is derive:
        return calib_loso.fold_fits(dev, tuple(v["class_by"]), kept, v["robust"], fold="source")
    fitted = [s for s in dev if samples_fill(s["row"]) and s["cmp"] is not None]
    out = {}
    for key in sorted({fold_key(fold, s["row"]) for s in dev}, key=str):
        train = [{**calib_loso.eps_row(s, tuple(v["class_by"])), "src": s["row"]["source"]}
                 for s in fitted if in_training(fold, key, s["row"])] + kept
        if not any(r.get("method") == "analytic" for r in train):
            continue   # forward: round 1 has no earlier round
        (k0, nu0), _ = choose_prior(train, v["robust"])
        out[key] = (derive_fn(train, v["robust"]), k0, nu0)
    return out


def score_fold(dev: list[dict[str, Any]], fold: str, v: dict[str, Any], kept: list[dict[str, Any]],
               tables: dict[Any, tuple[Any, float, int]] | None = None,
               dist_fn: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """Per dev row scored by its fold (module docstring): the calib_classes.loso_rows fields (id, source, cls,
    row, pred, cmp, dist, comps, totals, inside, p, y) plus ``fold`` and, for a measurement, ``inside_after``
    (the interval widened by the class widths fitted on the training folds). `dist_fn` (methods, class, κ0, ν0)
    stands in for uncertainty.dist_from; `v["q_of"]` (row → q), when given, replaces the one q."""
    from finetune_doctor.analyzers.memory import bands
    from finetune_doctor.analyzers.memory.predictive import mixture_interval
    from finetune_doctor.analyzers.memory.uncertainty import dist_from, mixture_p_oom, widened

    tables = tables if tables is not None else fold_tables(dev, fold, v, kept)
    dist_fn = dist_fn or (lambda m, c, k0, nu0: dist_from(m, "analytic", c, k0, nu0))
    rows = []
    for s in dev:
        r, p = s["row"], s["pred"]
        key = fold_key(fold, r)
        if key not in tables:
            continue
        methods, k0, nu0 = tables[key]
        d = calib_loso.with_tails(dist_fn(methods, calib_loso.class_of(p, tuple(v["class_by"])), k0, nu0),
                                  v["tails"])
        if v.get("core") == "outcome":   # the one distribution's core is p_oom's spread (uncertainty.core_dist)
            d = widened(d, v["tau"], v["factor"])
        x, tot = calib_loso.measured_on_total(s), s["totals"]
        inside = None
        if x is not None and tot:
            lo, hi = mixture_interval([(w, t, None) for w, t, _b in tot], d)
            inside = lo <= x <= hi
        pr = y = None
        if r.get("outcome") and r.get("gpu") and s["comps"]:
            q = v["q_of"](r) if v.get("q_of") else v["q"]
            if not v.get("one", True):   # two computations (before session 14): p_oom under a second spread
                pr = mixture_p_oom(s["comps"], replace(widened(d, v["tau"], v["factor"]), unexplained=q))
            y = 1.0 if r["outcome"] == "oom" else 0.0
        rows.append({"id": r["id"], "source": r["source"], "fold": key, "round": round_of(r),
                     "cls": p.get("run_class") or calib_classes.run_class(r), "row": r, "pred": p, "cmp": s["cmp"],
                     "dist": d, "comps": s["comps"], "totals": tot, "inside": inside, "p": pr, "y": y,
                     "q": v["q_of"](r) if v.get("q_of") else v["q"]})
    calib_widths.residuals(rows)
    widths: dict[Any, dict[str, Any]] = {}
    for k in sorted({r["fold"] for r in rows}, key=str):
        train = [o for o in rows if "r_lo" in o and in_training(fold, k, o["row"])]
        widths[k] = ({"interval_widths": calib_widths.derive_widths(train, floor=v.get("width_floor"))}
                     if train else {})
    if v.get("one", True):
        for r in rows:
            if r["y"] is not None:
                pm = one_p_model(r, widths[r["fold"]])
                r["p"] = None if pm is None else (1 - r["q"]) * pm + r["q"] / 2
    for r in rows:
        if "r_lo" not in r:
            continue
        lo, hi = bands.widen(r["base"], widths[r["fold"]], r["cls"])
        x = calib_loso.measured_on_total(r)
        r["after"], r["inside_after"] = (lo, hi), lo <= x <= hi
        if not r["inside_after"]:
            r["inside_after_side"] = "below" if x < lo else "above"
    return rows


def one_p_model(r: dict[str, Any], widths: dict[str, Any]) -> float | None:
    """p_oom_model of scored row `r` as the doctor reports it since session 14: the share above the budget (in
    shown terms) of the one distribution whose 5-95 % is the row's reported interval (the mixture of its totals
    under r["dist"], the upper end at cutoff_len, the class's `widths`; facts/bands.py `final_interval`,
    analyzers/memory/predictive.py). None without totals or components."""
    from finetune_doctor.analyzers.memory import bands, predictive
    from finetune_doctor.analyzers.memory.predictive import mixture_interval

    tot, comps = r["totals"], r["comps"]
    if not tot or not comps or not tot[0][1]:
        return None
    d = r["dist"]
    lo, hi = mixture_interval([(w, t, None) for w, t, _b in tot], d)
    full = calib_widths._full_length_totals(r)
    if full:
        hi = max(hi, mixture_interval(full, d)[1])
    final = bands.widen((lo, hi), widths, r["cls"])
    return predictive.build(tot, d, final).p_over([b for _w, _t, b in comps], comps[0][1] / tot[0][1])


def scores(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Brier (runs, OOM), coverage of the widened interval (measurements), confident misses of rows `rs`."""
    out = [r for r in rs if r["p"] is not None]
    meas = [r for r in rs if r.get("inside_after") is not None]
    return {"brier": statistics.mean((r["p"] - r["y"]) ** 2 for r in out) if out else math.nan,
            "n": len(out), "oom": sum(1 for r in out if r["y"] == 1.0),
            "cover": statistics.mean(bool(r["inside_after"]) for r in meas) if meas else math.nan,
            "m": len(meas), "below": sum(1 for r in meas if r.get("inside_after_side") == "below"),
            "above": sum(1 for r in meas if r.get("inside_after_side") == "above"),
            "sure_trained": [r["id"] for r in out if r["y"] == 0 and r["p"] >= 0.9],
            "sure_oom": [r["id"] for r in out if r["y"] == 1 and r["p"] <= 0.1],
            "log_outc": statistics.mean(math.log(min(max(r["p"] if r["y"] else 1 - r["p"], 1e-4), 1.0))
                                        for r in out) if out else math.nan}


def cell(sc: dict[str, Any]) -> str:
    b = "—" if math.isnan(sc["brier"]) else f"{sc['brier']:.3f} ({sc['n']}, {sc['oom']} OOM)"
    c = "—" if math.isnan(sc["cover"]) else f"{sc['cover']:.0%} of {sc['m']} ({sc['below']}↓ {sc['above']}↑)"
    return f"{b} | {c} | {len(sc['sure_trained'])} / {len(sc['sure_oom'])}"


def mean_over_rounds(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(Brier, coverage) averaged over rounds with each round alike: what one more round is expected to score."""
    per = [scores([r for r in rows if r["round"] == k]) for k in sorted({r["round"] for r in rows})]
    b = [s["brier"] for s in per if not math.isnan(s["brier"])]
    c = [s["cover"] for s in per if not math.isnan(s["cover"])]
    return statistics.mean(b), statistics.mean(c)


def round_table(by_fold: dict[str, list[dict[str, Any]]]) -> list[str]:
    head = "| round | " + " | ".join(f"{f}: Brier (runs) | {f}: coverage | {f}: p≥0.9 trained / p≤0.1 OOM"
                                      for f in by_fold) + " | held-out score when it was new |"
    out = [head, "|---|" + "---|---|---|" * len(by_fold) + "---|"]
    rounds = sorted({r["round"] for rows in by_fold.values() for r in rows})
    for k in [*rounds, "all dev"]:
        cells = [cell(scores([r for r in rows if k == "all dev" or r["round"] == k])) for rows in by_fold.values()]
        ho = HELD_OUT.get(k) if isinstance(k, int) else None
        hs = f"Brier {ho[0]:.3f}, coverage {ho[2]:.0%}" if ho else ""
        out.append(f"| {k} | " + " | ".join(cells) + f" | {hs} |")
    means = [mean_over_rounds(rows) for rows in by_fold.values()]
    out.append("| mean of rounds | " + " | ".join(f"{b:.3f} | {c:.0%} | " for b, c in means) + " |")
    return out


DECOMP_BINS = 10


def decomposition(rs: list[dict[str, Any]], bins: int = DECOMP_BINS) -> dict[str, float]:
    """Murphy's decomposition of the Brier score of runs `rs` (those with ``p``) over `bins` equal-width bins of p:
    Brier = reliability − resolution + uncertainty + within-bin (the spread of p inside a bin, small for narrow
    bins). reliability = Σ n_k (p̄_k − ō_k)² / N (0 when each bin's mean p is its share that ran out: what a
    calibration map can lower), resolution = Σ n_k (ō_k − ō)² / N (how far the bins' outcome rates sit from the
    base rate: what only a sharper memory model raises), uncertainty = ō(1 − ō). Source: A. H. Murphy, 'A new
    vector partition of the probability score', J. Appl. Meteor. 12 (1973) 595-600."""
    out = [r for r in rs if r.get("p") is not None]
    n = len(out)
    if not n:
        return {"brier": math.nan, "rel": math.nan, "res": math.nan, "unc": math.nan, "within": math.nan, "n": 0}
    base = sum(r["y"] for r in out) / n
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in out:
        groups[min(int(r["p"] * bins), bins - 1)].append(r)
    rel = res = 0.0
    for g in groups.values():
        pbar, obar = statistics.mean(r["p"] for r in g), statistics.mean(r["y"] for r in g)
        rel += len(g) * (pbar - obar) ** 2 / n
        res += len(g) * (obar - base) ** 2 / n
    brier = statistics.mean((r["p"] - r["y"]) ** 2 for r in out)
    unc = base * (1 - base)
    return {"brier": brier, "rel": rel, "res": res, "unc": unc, "within": brier - (rel - res + unc), "n": n}


def decomposition_lines(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any] = lambda r: r["round"],
                        label: str = "round") -> list[str]:
    """One line per value of `key` (rounds by default) and for all runs: Brier = reliability − resolution +
    uncertainty + within-bin (`decomposition`)."""
    out = [f"| {label} | runs (OOM) | Brier | reliability | resolution | uncertainty | within-bin |",
           "|---|---|---|---|---|---|---|"]
    keys = sorted({key(r) for r in rows if r.get("p") is not None}, key=str)
    for k in [*keys, "all dev"]:
        rs = [r for r in rows if r.get("p") is not None and (k == "all dev" or key(r) == k)]
        d = decomposition(rs)
        out.append(f"| {k} | {d['n']} ({sum(1 for r in rs if r['y'] == 1.0)}) | {d['brier']:.3f} | {d['rel']:.3f} | "
                   f"{d['res']:.3f} | {d['unc']:.3f} | {d['within']:+.3f} |")
    return out


def tracking_lines(by_fold: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Which yardstick said what the held-out scoring of rounds 6 and 7 found (`HELD_OUT`)."""
    out = ["Which yardstick tracked the held-out scores (each round's rows as they are now, with today's memory "
           "model; the held-out score was taken with the memory model of its day):", ""]
    for k, (b, _n, c, _m) in sorted(HELD_OUT.items()):
        parts = []
        for f, rows in by_fold.items():
            sc = scores([r for r in rows if r["round"] == k])
            parts.append(f"{f} {sc['brier']:.3f} / {sc['cover']:.0%}")
        out.append(f"- round {k}: held out Brier {b:.3f} / coverage {c:.0%}; as dev now: " + ", ".join(parts))
    return out


def class_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| class | Brier (runs) | coverage | p≥0.9 trained / p≤0.1 OOM | rounds with rows |", "|---|---|---|---|---|"]
    for c in (*calib_classes.CLASSES, "all dev"):
        rs = rows if c == "all dev" else [r for r in rows if r["cls"] == c]
        if rs:
            out.append(f"| {c} | {cell(scores(rs))} | {len({r['round'] for r in rs})} |")
    return out


def kind_of(r: dict[str, Any]) -> str:
    """The KIND of a large Brier term (issue #21's brief): an OOM the memory model sees fit, a trained run it sees
    out, and what the doctor did not know (calib_classes.kind_of_miss)."""
    # which way p leans, not only the outcome: a run that trained at p 0.25 was not called out (session 13)
    if r["y"] == 1:
        side = "ran out, model says fits" if r["p"] < 0.5 else "ran out, p short of 1"
    else:
        side = "trained, model says out" if r["p"] >= 0.5 else "trained, p not near 0"
    return f"{side}; {calib_classes.kind_of_miss(r)}"


def top_lines(rows: list[dict[str, Any]], k: int = 30) -> list[str]:
    rs = sorted((r for r in rows if r["p"] is not None), key=lambda r: -(r["p"] - r["y"]) ** 2)
    tot = sum((r["p"] - r["y"]) ** 2 for r in rs)
    out = [f"The {k} largest Brier terms under leave-one-round-out ({sum((r['p'] - r['y']) ** 2 for r in rs[:k]):.1f}"
           f" of the sum {tot:.1f} over {len(rs)} runs):", "",
           "| run | round | class | source type | outcome | p_oom | (p − y)² | need / budget GiB | kind |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rs[:k]:
        need = r["pred"].get("need") or r["pred"].get("total")
        out.append(f"| {r['id']} | {r['round']} | {r['cls']} | {r['row'].get('source_type')} | {r['row']['outcome']} "
                   f"| {r['p']:.3f} | {(r['p'] - r['y']) ** 2:.2f} | {need:.1f} / {r['pred'].get('capacity') or 0:.1f} "
                   f"| {kind_of(r)} |")
    return out


def parts_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The Brier sum by source type and outcome band (calib_classes.brier_parts_lines, by round folds)."""
    rs = [r for r in rows if r["p"] is not None]
    tot = sum((r["p"] - r["y"]) ** 2 for r in rs)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rs:
        band = "p ≤ 0.15" if r["p"] <= 0.15 else "p ≥ 0.85" if r["p"] >= 0.85 else "0.15-0.85"
        groups[f"{r['row'].get('source_type')}, {r['row']['outcome']}, {band}"].append(r)
    out = ["| source type, outcome, p band | runs | share of the Brier sum | adds to the Brier score |",
           "|---|---|---|---|"]
    for g, sub in sorted(groups.items(), key=lambda kv: -sum((r["p"] - r["y"]) ** 2 for r in kv[1])):
        c = sum((r["p"] - r["y"]) ** 2 for r in sub)
        out.append(f"| {g} | {len(sub)} | {c / tot:.0%} | {c / len(rs):.3f} |")
    return out




# -- calibration maps of the memory model's own probability, each chosen per fold on the other folds' runs ------------
#
# p_model is the memory model's probability P(need·e^ε > budget) of a row under its fold's table (no q). A map turns
# it into the all-cause p_oom. The map's free parameters are chosen for fold R on the runs of the folds that fit R's
# table (`in_training`), by their Brier score, and R's runs are scored with them: every choice by the same folds.

Q_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def add_p_model(rows: list[dict[str, Any]], v: dict[str, Any]) -> None:
    """Add ``pm`` (the memory model's own probability under the row's fold table, widened by λ and τ) to every
    run with an outcome."""
    from finetune_doctor.analyzers.memory.uncertainty import mixture_p_oom, widened

    for r in rows:
        if r["p"] is not None:
            r["pm"] = mixture_p_oom(r["comps"], replace(widened(r["dist"], v["tau"], v["factor"]), unexplained=0.0))


def source_kind(r: dict[str, Any]) -> str:
    """Threads (a user's run, published because of its outcome) or documentation (framework and vendor tables)."""
    return "thread" if r["row"].get("source_type") == "issue-thread" else "documentation"


def symmetric(pm: float, q: float) -> float:
    return (1.0 - q) * pm + q / 2.0


def two_sided(pm: float, a: float, b: float) -> float:
    """a: the share of runs that run out whatever the memory model says; b: the share that train whatever it says."""
    return a + (1.0 - a - b) * pm


MAPS: dict[str, tuple[Callable[[float, tuple[float, ...]], float], list[tuple[float, ...]]]] = {
    "symmetric q": (lambda pm, th: symmetric(pm, th[0]), [(q,) for q in Q_GRID]),
    "two-sided (a, b)": (lambda pm, th: two_sided(pm, th[0], th[1]),
                         [(a, b) for a in (0.0, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25) for b in
                          (0.0, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25)]),
}


def apply_map(rows: list[dict[str, Any]], fold: str, name: str, by_kind: bool = False,
              group: Callable[[dict[str, Any]], Any] | None = None) -> dict[Any, Any]:
    """Set every run's ``p`` by map `name` (`MAPS`) with parameters chosen per fold on the training folds' runs
    (per source kind when `by_kind`, per value of `group(run)` when given: a group with no training run takes the
    parameters of all training runs); returns fold → {group: chosen parameters}."""
    f, grid = MAPS[name]
    gf = group or (source_kind if by_kind else (lambda r: None))
    runs = [r for r in rows if r.get("pm") is not None]
    chosen: dict[Any, Any] = {}
    for key in sorted({r["fold"] for r in runs}, key=str):
        train = [r for r in runs if in_training(fold, key, r["row"])]
        pick = {}
        for k in {gf(r) for r in runs}:
            sub = [r for r in train if gf(r) == k] or train
            pick[k] = min(grid, key=lambda th: sum((f(r["pm"], th) - r["y"]) ** 2 for r in sub)) if sub else grid[0]
        chosen[key] = pick
        for r in runs:
            if r["fold"] == key:
                r["p"] = f(r["pm"], pick[gf(r)])
    return chosen


# -- per-class spread by how many sources the class has ----------------------------------------------------------------

def derive_with_sources(rows: list[dict[str, Any]], robust: bool) -> dict[str, Any]:
    """uncertainty.derive with each class's count of distinct sources (``sources``; rows carry ``src``)."""
    from finetune_doctor.analyzers.memory.uncertainty import derive

    out = derive(rows, robust)
    srcs: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        srcs[str(r["method"]), str(r["shape"])].add(str(r.get("src") or r.get("id")))
    for method, m in out.items():
        for c, st in m["classes"].items():
            st["sources"] = len(srcs[method, c])
    return out


def dist_by_sources(methods: dict[str, Any], cls: str, k0: float, nu0: int) -> Any:
    """uncertainty.dist_from with the class's rows counted as its sources (rows of one page share their error): a
    class measured by few sources is pulled towards the pooled rows, and never narrower than as counted by rows."""
    from finetune_doctor.analyzers.memory.uncertainty import dist_from

    d = dist_from(methods, "analytic", cls, k0, nu0)
    c = methods["analytic"]["classes"].get(cls)
    if not c or int(c.get("sources") or c["n"]) >= int(c["n"]):
        return d
    thin = {**methods["analytic"], "classes": {**methods["analytic"]["classes"], cls: {**c, "n": int(c["sources"])}}}
    e = dist_from({"analytic": thin}, "analytic", cls, k0, nu0)
    return e if e.scale > d.scale else d


# -- the choices tried (issue #21's brief, step 2), each scored by leave-one-round-out -------------------------------

LENGTH_PRIORS: tuple[Any, ...] = ("log-uniform", (2048.0, 1.0), (8192.0, 1.0), (8192.0, 2.0), (32768.0, 1.0))
OTHER_WEIGHTS = (1.0, 0.9, 0.75, 0.5)
SPREADS = ((0.5, 0.05), (0.75, 0.05), (1.0, 0.05), (0.5, 0.1))
# the two-sided map with both shares at least 0.1: no p_oom under 0.1 on a run the memory model sees fit and none
# over 0.9 on one it sees out (issue #21's confident-miss bar, held as a constraint rather than hoped for)
BOUNDED = (0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
MAPS["two-sided, both ≥ 0.1"] = (lambda pm, th: two_sided(pm, th[0], th[1]),
                                 [(a, b) for a in BOUNDED for b in BOUNDED if a + b < 0.9])


def reweighed(scored: list[dict[str, Any]], prior: Any, w_other: float) -> list[dict[str, Any]]:
    """`prepared` with the mixture rebuilt under `prior` (the sample lengths) and `w_other` (the assumed value's
    weight of every other open assumption): calib_loso.components with those two in place of its constants."""
    from finetune_doctor.facts.assume import mixture

    def comps(s: dict[str, Any], need: bool) -> Any:
        p = s["pred"]
        if "mix" not in p or (need and not p.get("capacity")):
            return None
        total, hw, assumptions, spec = p["mix"]
        if samples_fill(s["row"]):
            assumptions = [a for a in assumptions if a.name != "sample-lengths"]
        out = mixture(total, hw, assumptions, spec, weight=lambda n: w_other, lengths_prior=prior)
        if not out or not need:
            return out or None
        if any(b is None for _w, _t, b in out):
            return None
        ratio = p["need"] / total if p.get("need") and total else 1.0
        return [(w, t * ratio, b) for w, t, b in out]
    return [{**s, "comps": comps(s, True), "totals": comps(s, False)} for s in scored if "error" not in s["pred"]]


def experiment_row(name: str, rows: list[dict[str, Any]]) -> str:
    sc = scores(rows)
    mb, mc = mean_over_rounds(rows)
    return (f"| {name} | {sc['brier']:.4f} | {mb:.4f} | {sc['cover']:.1%} | {mc:.1%} | {len(sc['sure_trained'])} / "
            f"{len(sc['sure_oom'])} |")


def experiments(scored: list[dict[str, Any]], kept: list[dict[str, Any]], v: dict[str, Any]) -> list[str]:
    """Every choice tried, one line each, scored by leave-one-round-out (the map's parameters chosen per fold on
    the other rounds, `apply_map`): the prior on the longest sample, the other assumptions' weight, σ per class by
    its sources, λ and τ, and the maps of p_oom_model (one q, two-sided, each for all runs or per kind of report)."""
    out = ["| choice (everything else as shipped) | LORO Brier, all runs | mean of rounds | LORO coverage | mean of "
           "rounds | p≥0.9 trained / p≤0.1 OOM |", "|---|---|---|---|---|---|"]
    dev = prepared(scored)
    tables = fold_tables(dev, "round", v, kept)
    out.append(experiment_row("as shipped", score_fold(dev, "round", v, kept, tables)))
    for prior in LENGTH_PRIORS[1:]:
        rows = score_fold(reweighed(scored, prior, 1.0), "round", v, kept, tables)
        out.append(experiment_row(f"prior on the longest sample: lognormal, median {prior[0]:.0f}, log-sd {prior[1]:g}",
                                  rows))
    for w in OTHER_WEIGHTS[1:]:
        rows = score_fold(reweighed(scored, "log-uniform", w), "round", v, kept, tables)
        out.append(experiment_row(f"other open assumptions: assumed value's weight {w:g}", rows))
    shrunk = fold_tables(dev, "round", v, kept, derive_with_sources)
    out.append(experiment_row("σ per class counted by its sources (never narrower)",
                              score_fold(dev, "round", v, kept, shrunk, dist_by_sources)))
    for lam, tau in SPREADS:
        if (lam, tau) == (v["factor"], v["tau"]):
            continue
        out.append(experiment_row(f"p_oom's spread λ {lam:g}, τ {tau:g}",
                                  score_fold(dev, "round", {**v, "factor": lam, "tau": tau}, kept, tables)))
    rows = score_fold(dev, "round", v, kept, tables)
    add_p_model(rows, v)
    for name in MAPS:
        for by_kind in (False, True):
            chosen = apply_map(rows, "round", name, by_kind)
            last = chosen[max(chosen, key=str)]
            picked = "; ".join(f"{k or 'all'} {tuple(round(x, 3) for x in th)}" for k, th in sorted(
                last.items(), key=lambda kv: str(kv[0])))
            out.append(experiment_row(f"map {name}, {'per kind of report' if by_kind else 'one for all runs'} "
                                      f"(round {max(chosen, key=str)}'s fold chose: {picked})", rows))
    return out


def fit_report_shares(scored: list[dict[str, Any]], v: dict[str, Any], kept: list[dict[str, Any]]) -> dict[str, Any]:
    """The table's ``p_oom_by_report`` (analyzers/memory/uncertainty.py `by_report`): per kind of report (thread,
    documentation) the (a, b) of the two-sided map with both shares at least 0.1 (`MAPS`) with the lowest Brier over
    the dev runs of that kind, each run's p_oom_model taken under its own round's fold (`score_fold`): the shares
    see every round once, through the rounds' left-out predictions, as the interval's widths do."""
    rows = score_fold(prepared(scored), "round", v, kept)
    add_p_model(rows, v)
    f, grid = MAPS["two-sided, both ≥ 0.1"]
    out: dict[str, Any] = {"how": "per kind of report, the two-sided map p = a + (1 - a - b)·p_oom_model with a, b "
                                  ">= 0.1 of lowest Brier over the dev runs' leave-one-round-out p_oom_model "
                                  "(benchmarks/calib_loro.py fit_report_shares)"}
    for kind in ("thread", "documentation"):
        sub = [r for r in rows if r.get("pm") is not None and source_kind(r) == kind]
        if sub:
            a, b = min(grid, key=lambda th: sum((f(r["pm"], th) - r["y"]) ** 2 for r in sub))
            out[kind] = {"oom": a, "trained": b, "runs": len(sub)}
    return out


def kind_lines(by_name: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Brier per kind of report (`source_kind`) under each scoring of `by_name`."""
    out = ["| kind of report | " + " | ".join(by_name) + " |", "|---|" + "---|" * len(by_name)]
    for kind in ("thread", "documentation"):
        cells = []
        for rows in by_name.values():
            sc = scores([r for r in rows if source_kind(r) == kind])
            cells.append(f"{sc['brier']:.3f} ({sc['n']}, {sc['oom']} OOM)")
        out.append(f"| {kind} | " + " | ".join(cells) + " |")
    return out


# What session 12 read from this page (written from its numbers, not generated; rerun the script to check them)
FINDINGS = [
    "## What the numbers say (session 12)", "",
    "- **Which yardstick tracks a new round.** Round 6's held-out score (Brier 0.157, coverage 80 %) is what "
    "leave-one-round-out gives it now (0.155, 79 %); leave-one-source-out said 0.149 and 85 %. Round 7's held-out "
    "score (0.207, 84 %) is tracked by none (0.143-0.144, 91-94 %), not even by `forward`, which fits on the same "
    "rounds 1-6 as that scoring did: the gap is the memory model, not the yardstick — round 7 was studied after it "
    "was scored and its misses fixed (torchtune's FSDP without mixed precision, gsm8k's longest sample; memory error "
    "19.2 % → 13.1 % median, 4 → 1 runs that trained called oom: memory_round7_dev.md). A yardstick on dev rows cannot see "
    "what the next round will find missing in the memory model.",
    "- **Where the Brier is.** Under leave-one-round-out 57 % of the Brier sum is issue threads that ran out (24 "
    "of them at p ≤ 0.15: the memory model sees them fit, three offload runs at a quarter of their card or "
    "less), 20 % documentation runs that trained at 0.15-0.85 (runs published near their "
    "card's edge, and other frameworks' recipes the rows translate into LLaMA-Factory keys), and the handful of "
    "runs that trained at p ≈ 0.9 (unsloth's gpt-oss, open-r1's recipe) are mostly translations. None of these is a "
    "spread to fit: they are terms and translations (#23, the collectors) or causes no memory term sees.",
    "- **What calibration moves.** Nothing that keeps one p_oom for every run moves the leave-one-round-out Brier "
    "by more than 0.002 (the prior on the longest sample, the other assumptions' weight, σ per class counted by "
    "its sources, λ and τ, the two-sided map; the table above): one s.e. is 0.010. The grid of calib_loso chose "
    "the shipped form again but for τ (0.05 → 0.10); chosen without each round and scored on it (`nested`) the grid's "
    "form scores 0.142, so the choice among the grid buys nothing a new round would see. The interval is where it "
    "should be under leave-one-round-out "
    "(90 %, every class 86-92 %, rounds 79-96 %).",
    "- **By kind of report.** Why a run was published is most of what decides its outcome here: 53 % of the dev "
    "threads ran out, 6 % of the documentation rows. A map per kind (p_oom_by_report, both shares ≥ 0.1) scores "
    "0.115 under leave-one-round-out (mean of rounds 0.107) with no confident miss; on threads alone it is 0.206 "
    "(0.234 with one q). The doctor cannot know why a user's run will be published, so its p_oom keeps one q and "
    "calibrate.py scores the map beside it; a round heavy in threads will stay above 0.12 either way.",
]


def nested(results: list[dict[str, Any]]) -> list[str]:
    """The form's choice made without each round (calib_loso.choose's objective over the other rounds' sums in each
    variant's ``by_fold``), then scored on that round: the honest price of choosing among calib_loso's grid, which
    the 'chosen by LORO' columns (chosen on every round's scores) do not pay. Coverage here is the fold's mixture
    interval before the class widths (the objective's), not the page's."""
    lo_band, hi_band = calib_loso.COVER_BAND
    folds = sorted({k for r in results for k in r.get("by_fold", {})}, key=str)
    out = ["| round left out | variant chosen on the other rounds | its Brier on the round (runs) | coverage before "
           "widths |", "|---|---|---|---|"]
    tot = [0.0, 0, 0, 0]
    for k in folds:
        def obj(r: dict[str, Any]) -> tuple[float, float]:
            acc = [sum(v[i] for f, v in r["by_fold"].items() if f != k) for i in range(6)]
            cov = acc[2] / acc[3] if acc[3] else math.nan
            return cov, (acc[4] / acc[3] if acc[3] else 0.0) + (acc[5] / acc[1] if acc[1] else 0.0)
        scored = [(r, *obj(r)) for r in results if r.get("by_fold")]
        band = [x for x in scored if lo_band <= x[1] <= hi_band]
        best = (max(band, key=lambda x: x[2]) if band
                else min(scored, key=lambda x: (round(abs(x[1] - 0.90), 6), -x[2])))[0]
        sq, n, ins, m = best["by_fold"].get(k, [0.0] * 6)[:4]
        tot = [tot[0] + sq, tot[1] + int(n), tot[2] + ins, tot[3] + int(m)]
        out.append(f"| {k} | {describe(variant_of(best))} | {sq / n if n else math.nan:.3f} ({int(n)}) | "
                   f"{ins / m if m else math.nan:.0%} of {int(m)} |")
    out.append(f"| all | | {tot[0] / max(tot[1], 1):.3f} ({tot[1]}) | {tot[2] / max(tot[3], 1):.0%} of {tot[3]} |")
    return out


def variant_of(chosen: dict[str, Any]) -> dict[str, Any]:
    """calib_loso's variant record `chosen` as the fields `score_fold` reads."""
    if chosen.get("contamination"):
        tails: tuple[str, Any] = ("wide", tuple(chosen["contamination"]))
    else:
        tails = ("cap", int(chosen["max_dof"])) if chosen.get("max_dof") else ("t", None)
    return {"class_by": tuple(chosen["class_by"]), "robust": bool(chosen.get("robust")), "tails": tails,
            "factor": float(chosen["factor"]), "tau": float(chosen["tau"]), "q": float(chosen.get("unexplained") or 0.0),
            # the one distribution's core and width floor when the record carries them (calibrate.py's refit)
            "core": chosen.get("core") or "measured", "width_floor": chosen.get("width_floor")}


def describe(v: dict[str, Any]) -> str:
    return (f"classes keyed by {' × '.join(v['class_by'])}, robust {v['robust']}, tails {v['tails']}, λ {v['factor']}, "
            f"τ {v['tau']}, q {v['q']}" + (f"; one distribution, core {v.get('core') or 'measured'}, width floor "
                                             f"{v.get('width_floor')}" if v.get("one", True) else ""))


ONE_DISTRIBUTION_WORDS = [
    "Before session 14 the interval and p_oom were two computations (the interval the measurements' mixture widened "
    "by the class's widths, p_oom the same mixture under the outcome-fitted spread λ·s, τ), so a report could show "
    "an interval wholly under the card beside p_oom 0.3, or `fits` beside an interval reaching past the card. Since "
    "then p_oom_model is the share above the budget (in shown terms, budget·total/need) of the ONE distribution "
    "whose 5-95 % is the reported interval (analyzers/memory/predictive.py), p_oom = (1 − q)·p_oom_model + q/2; the "
    "table above scores that form as shipped on this branch (the measurements' spread as the core). Every row "
    "below is leave-one-round-out on dev rounds 1-10 (benchmarks/calib_onedist.py), the same folds and runs; "
    "coverage is of the reported interval (the measurements' 468)."]
ONE_DISTRIBUTION_VERDICT = [
    "What was adopted (the rule: LORO Brier and coverage both better, or one better and the other within 1 s.e.):",
    "",
    "- **One distribution** (required by the brief, not a candidate): Brier 0.1428 → 0.1458 (paired +0.0030 ± "
    "0.0025, within 1 s.e.), coverage unchanged; no confident miss. Shipped in the code.",
    "- **Core = p_oom's spread, class widths refitted on its intervals**: against the measurements' core Brier "
    "0.1458 → 0.1440 (paired −0.0018 ± 0.0014) and coverage 89.3 % → 89.5 %, mean over rounds 0.1636 / 87.5 % → "
    "0.1620 / 87.7 %: both better.",
    "- **Widths floored at 0** (the interval only widens): with the measurements' core Brier 0.1436, coverage "
    "91.5 %; with p_oom's spread as the core Brier 0.1419, coverage 91.9 % of 468 (mean over rounds 0.1590 / "
    "89.3 %), better than the two computations of before (0.1428 / 89.3 %, mean 0.1612 / 87.5 %). Signed widths "
    "let a class whose measurements sat under the prediction (ZeRO-2's upper width −0.48) pull the distribution's "
    "upper half under the card: two ZeRO-2 runs that ran out at 78-82 % of their card got p_oom exactly 0.1 under "
    "leave-one-source-out. **Adopted together with the core**: benchmarks/calibrate.py writes "
    "``one_distribution: {core: outcome, width_floor: 0}`` and fits ``interval_widths`` on that core with that "
    "floor at the next refit (uncertainty.py `core_dist`); a table without the field keeps the measurements' "
    "core and signed widths (this branch's shipped table). The round table at the top of this page is that form "
    "(`--core outcome`).",
    "- **Translation term** for rows not run with LLaMA-Factory (an extra spread in quadrature, size chosen per "
    "fold on the other rounds): the folds chose 0 in 9 of 10 rounds; Brier 0.1463 against 0.1458, coverage "
    "unchanged: **not adopted**.",
    "- **Student t core without the contamination component** (the fitted dof's heavier tail alone): Brier 0.1669, "
    "8 confident misses on runs that trained and 5 on runs that ran out: **not adopted**.",
    "- **q other than 0.2**, or chosen per fold: worse Brier or confident misses (q < 0.2 puts runs that ran out at "
    "p ≤ 0.1): **not adopted**.",
    "- **The reverse** (the interval the quantiles of p_oom's spread without class widths): Brier as before, "
    "coverage over rounds 87.5 % → 83.7 %: **not adopted**.",
    "- Per-framework translation rules (Lightning bf16-true, HF Trainer on a bf16-loaded model, xtuner, SPIN): "
    "not tried here — they change memory terms (session 14's mem14), and the largest round 9-10 misses are "
    "predictions at a third of the card for runs that ran out (top of the table above), which no calibration term "
    "reaches without widening every run."]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", metavar="FILE")
    ap.add_argument("--page", metavar="FILE", default=str(PAGE))
    ap.add_argument("--experiments", action="store_true", help="add the choices tried (about 3 minutes)")
    ap.add_argument("--after", metavar="VARIANTS", help="a pickle of calib_loso.loso's results under round folds: "
                    "score the variant calib_loso.choose picks from them beside the shipped form")
    ap.add_argument("--core", choices=("table", "outcome"), default="table",
                    help="the one distribution's core and width floor: the installed table's, or p_oom's spread with "
                         "widths floored at 0 (what calibrate.py writes at the next refit)")
    ap.add_argument("--one-distribution", action="store_true",
                    help="add session 14's variants (benchmarks/calib_onedist.py, about 2 minutes)")
    args = ap.parse_args(argv)
    import pickle

    import calibrate

    scored = calib_classes.scored_dev(args.cache)
    dev = prepared(scored)
    kept = calibrate.kept_rows()
    v = calib_classes.shipped_variant()
    if args.core == "outcome":
        v = {**v, "core": "outcome", "width_floor": 0.0}
    by_fold = {f: score_fold(dev, f, v, kept) for f in FOLDS}
    dev_rounds = sorted({round_of(s["row"]) for s in dev})
    lines = [f"# Leave-one-round-out Brier, coverage and confident misses (dev rounds {dev_rounds[0]}-{dev_rounds[-1]})",
             "",
             "`python benchmarks/calib_loro.py` (module docstring). The shipped form, refitted per fold: "
             f"{describe(v)}; the interval widened by class widths fitted on the training folds. Every number is dev.",
             "", "Columns per yardstick: Brier of the all-cause p_oom (runs with an outcome and a card), coverage of "
             "the 90 % interval (↓ below its lower end, ↑ above its upper end), confident misses. `round`: fitted on "
             "the other rounds; `forward`: on the earlier rounds only (round 1 has none); `source`: "
             "leave-one-source-out.", "", *round_table(by_fold), "", *tracking_lines(by_fold), "",
             "## Brier decomposition, leave-one-round-out", "",
             f"Murphy's partition over {DECOMP_BINS} equal bins of p_oom (`decomposition`): reliability is what a "
             "calibration map can remove, resolution what only a sharper memory model adds.", "",
             *decomposition_lines(by_fold["round"]), "", *decomposition_lines(by_fold["round"], lambda r: r["cls"],
                                                                              "class"), "",
             "## Per class of run, leave-one-round-out", "", *class_table(by_fold["round"]), "",
             "## Where the leave-one-round-out Brier comes from", "", *parts_lines(by_fold["round"]), "",
             *top_lines(by_fold["round"])]
    if args.after:
        with open(args.after, "rb") as fh:
            results = pickle.load(fh)
        va = variant_of(calib_loso.choose(results))
        after = {"shipped": by_fold["round"], "chosen by LORO": score_fold(dev, "round", va, kept)}
        kinded = score_fold(dev, "round", va, kept)
        add_p_model(kinded, va)
        apply_map(kinded, "round", "two-sided, both ≥ 0.1", by_kind=True)
        after["by kind of report"] = kinded
        if any(r.get("by_fold") for r in results):
            lines += ["", "## The form chosen without the round it is scored on", "", *nested(results)]
        lines += ["", "## Before → after: the form chosen by leave-one-round-out", "",
                  f"Chosen (calib_loso.choose over its grid, folds = rounds): {describe(va)}. `by kind of report`: "
                  "that form's p_oom_model through p_oom_by_report's map (analyzers/memory/uncertainty.py `by_report`), "
                  "its shares chosen for each round on the other rounds' runs (`apply_map`) — what calibrate.py "
                  "scores beside the doctor's p_oom; the interval is the same in all three.", "",
                  *round_table(after), "", "Per class, after (the chosen form; the doctor's p_oom):", "",
                  *class_table(after["chosen by LORO"]), "", "Per kind of report (Brier, runs):", "",
                  *kind_lines(after), "", *FINDINGS]
    if args.one_distribution:
        import calib_onedist

        lines += ["", "## One distribution and the robustness candidates (issue #21, session 14)", "",
                  *ONE_DISTRIBUTION_WORDS, "", *calib_onedist.onedist_lines(dev, kept), "", *ONE_DISTRIBUTION_VERDICT]
    if args.experiments:
        lines += ["", "## The choices tried, each by leave-one-round-out", "", *experiments(scored, kept, v)]
    Path(args.page).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(round_table(by_fold)))
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
