#!/usr/bin/env python
"""Leave-one-round-out on dev rounds 1-10 of "one distribution" (issue #21, session 14; analyzers/memory/predictive.py)
and of the robustness candidates tried beside it. Every number is dev; folds are whole calibration rounds
(benchmarks/calib_loro.py, fold ``round``: the error table, its prior and the class widths fitted on the other rounds).

Variants (each scored on the same folds as calib_loro.py's shipped form):

* ``two computations`` — calib_loro.py's scoring as shipped before session 14: p_oom under the outcome-fitted
  spread (λ, τ, q), the interval the measurement mixture widened by the class's widths.
* ``one distribution, q`` — p_oom_model the share of D (predictive.py: the mixture T-mapped onto the widened
  interval) above the budget in shown terms, p_oom = (1 − q)·p_oom_model + q/2; the interval is unchanged (it is
  D's 5-95 %). ``q per fold`` chooses q from `Q_GRID` on the training rounds' Brier.
* ``interval of the p_oom spread`` — the reverse unification: the interval the quantiles of the outcome-fitted
  spread (no class widths); p_oom as shipped.
* ``translation term`` — one distribution with an extra spread for rows whose framework is not LLaMA-Factory
  (`TRANSLATION_GRID`, ln units, added in quadrature to the core's scale, as an assumption the calibration sees),
  its size chosen per fold on the training rounds.
* ``core the p_oom spread`` — one distribution whose core is the outcome-fitted spread (λ, τ) T-mapped onto the
  shipped interval; ``widths refitted`` — the same core with the class widths refitted (split-conformal, as
  calib_widths.py) on that core's own intervals, so interval and p_oom both change.
* ``t tails`` — one distribution with the core a Student t of the fitted dof and no contamination component
  (the brief's "heavier tail" candidate; the shipped core already carries a 30 % normal of scale 0.5).

Usage: ``python benchmarks/calib_onedist.py --cache FILE [--page FILE]`` (the dev rows as calib_loro.py caches them).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import calib_classes  # noqa: E402
import calib_loro  # noqa: E402
import calib_loso  # noqa: E402
import calib_widths  # noqa: E402

Q_GRID = (0.1, 0.15, 0.2, 0.25, 0.3)
TRANSLATION_GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
LF = "llama-factory"


def is_lf(row: dict[str, Any]) -> bool:
    return LF in str(row.get("framework") or "").lower().replace(" ", "-")


def fold_widths(rows: list[dict[str, Any]], floor: float | None = None) -> dict[Any, dict[str, Any]]:
    """fold → the table's ``interval_widths`` fitted on the other rounds' measured rows (as score_fold does);
    `floor` (ln units): no width below it (0: the interval only ever widens, calib_widths.derive_widths)."""
    out = {}
    for k in {r["fold"] for r in rows}:
        train = [o for o in rows if "r_lo" in o and calib_loro.in_training("round", k, o["row"])]
        out[k] = {"interval_widths": calib_widths.derive_widths(train, floor=floor)} if train else {}
    return out


def final_interval(r: dict[str, Any], d: Any, widths: dict[str, Any]) -> tuple[float, float] | None:
    """The reported interval of row `r` (GiB): the mixture of its totals under `d`, upper end at cutoff_len, then
    the class's widths (analyzers/memory/bands.py)."""
    from finetune_doctor.analyzers.memory import bands
    from finetune_doctor.analyzers.memory.predictive import mixture_interval

    tot = r["totals"]
    if not tot:
        return None
    lo, hi = mixture_interval([(w, t, None) for w, t, _b in tot], d)
    full = calib_widths._full_length_totals(r)
    if full:
        hi = max(hi, mixture_interval(full, d)[1])
    return bands.widen((lo, hi), widths, r["cls"])


def one_p_model(r: dict[str, Any], d: Any, widths: dict[str, Any]) -> float | None:
    """p_oom_model of row `r` as the share of its one distribution (core `d`) above the budget (calib_loro.py
    `one_p_model`, what the doctor reports)."""
    if r["y"] is None:
        return None
    return calib_loro.one_p_model({**r, "dist": d}, widths)


def brier(rows: list[dict[str, Any]], key: str = "p") -> float:
    out = [(r[key] - r["y"]) ** 2 for r in rows if r.get(key) is not None]
    return statistics.mean(out) if out else math.nan


def per_fold_choice(rows: list[dict[str, Any]], grid: tuple[float, ...],
                    p_of: Callable[[dict[str, Any], float], float | None]) -> None:
    """Set r["p"] by the grid value with the lowest Brier on the other rounds' rows (nested, honest LORO)."""
    cache = {g: {id(r): p_of(r, g) for r in rows} for g in grid}
    for k in {r["fold"] for r in rows}:
        def train_brier(g: float) -> float:
            vals = [(cache[g][id(o)] - o["y"]) ** 2 for o in rows
                    if o["fold"] != k and cache[g][id(o)] is not None]
            return statistics.mean(vals) if vals else math.inf
        best = min(grid, key=train_brier)
        for r in rows:
            if r["fold"] == k:
                r["p"], r["choice"] = cache[best][id(r)], best


def scored(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sc = calib_loro.scores(rows)
    sc["mean"] = calib_loro.mean_over_rounds(rows)
    return sc


def line(name: str, rows: list[dict[str, Any]], note: str = "") -> str:
    sc = scored(rows)
    se = _brier_se(rows)
    return (f"| {name} | {sc['brier']:.4f} ± {se:.4f} ({sc['n']}) | {sc['cover']:.1%} of {sc['m']} "
            f"({sc['below']}↓ {sc['above']}↑) | {sc['mean'][0]:.4f} / {sc['mean'][1]:.1%} | "
            f"{len(sc['sure_trained'])} / {len(sc['sure_oom'])} | {note} |")


def _brier_se(rows: list[dict[str, Any]]) -> float:
    v = [(r["p"] - r["y"]) ** 2 for r in rows if r.get("p") is not None]
    return statistics.stdev(v) / math.sqrt(len(v)) if len(v) > 1 else math.nan


def cover_with(rows: list[dict[str, Any]], iv_of: Callable[[dict[str, Any]], tuple[float, float] | None]) -> None:
    """Set inside_after (and its side) on measured rows from `iv_of`."""
    for r in rows:
        if r.get("inside_after") is None:
            continue
        iv = iv_of(r)
        x = calib_loso.measured_on_total(r)
        c, p = r["cmp"], r["pred"]
        lo, hi = iv
        if c and c["kind"] == "unknown" and p.get("total"):
            lo *= min(1.0, float(p.get("peak_allocated") or p["total"]) / p["total"])
        r["inside_after"] = lo <= x <= hi
        r.pop("inside_after_side", None)
        if not r["inside_after"]:
            r["inside_after_side"] = "below" if x < lo else "above"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", metavar="FILE", required=True)
    ap.add_argument("--page", metavar="FILE")
    args = ap.parse_args(argv)
    import calibrate

    dev = calib_loro.prepared(calib_classes.scored_dev(args.cache))
    text = "\n".join(onedist_lines(dev, calibrate.kept_rows()))
    print(text)
    if args.page:
        Path(args.page).write_text(text + "\n", encoding="utf-8")
    return 0


def onedist_lines(dev: list[dict[str, Any]], kept: list[dict[str, Any]]) -> list[str]:
    """The variants' table (module docstring) and the paired differences, as markdown lines."""
    from finetune_doctor.analyzers.memory.uncertainty import widened

    v = {**calib_classes.shipped_variant(), "core": "measured"}
    tables = calib_loro.fold_tables(dev, "round", v, kept)
    base = calib_loro.score_fold(dev, "round", {**v, "one": False, "core": "measured"}, kept, tables=tables)
    widths = fold_widths(base)
    out = ["| variant | LORO Brier ± s.e. (runs) | LORO coverage | mean of rounds Brier / coverage | "
           "p≥0.9 trained / p≤0.1 OOM | note |", "|---|---|---|---|---|---|",
           line("two computations (shipped before)", base, f"λ {v['factor']}, τ {v['tau']}, q {v['q']}")]
    for r in base:
        r["pm1"] = one_p_model(r, r["dist"], widths[r["fold"]])
    for q in Q_GRID:
        rows = [{**r, "p": None if r["pm1"] is None else (1 - q) * r["pm1"] + q / 2} for r in base]
        out.append(line(f"one distribution, q {q}", rows))
    rows = [dict(r) for r in base]
    per_fold_choice(rows, Q_GRID, lambda r, q: None if r["pm1"] is None else (1 - q) * r["pm1"] + q / 2)
    out.append(line("one distribution, q per fold", rows,
                    "q chosen " + ", ".join(f"R{k}:{c}" for k, c in sorted({(r['fold'], r['choice']) for r in rows}))))
    # the reverse: the interval of the p_oom spread
    rev = [dict(r) for r in base]
    cover_with(rev, lambda r: _spread_interval(r, widened(r["dist"], v["tau"], v["factor"])))
    out.append(line("interval of the p_oom spread (reverse)", rev, "p as shipped; interval without class widths"))
    q0 = v["q"]
    # translation-uncertainty term for rows not run with LLaMA-Factory
    cache_t: dict[tuple[int, float], float | None] = {}

    def p_trans(r: dict[str, Any], s: float) -> float | None:
        key = (id(r), s)
        if key not in cache_t:
            d = r["dist"] if is_lf(r["row"]) or s == 0 else replace(r["dist"], scale=math.hypot(r["dist"].scale, s))
            pm = one_p_model(r, d, widths[r["fold"]])
            cache_t[key] = None if pm is None else (1 - q0) * pm + q0 / 2
        return cache_t[key]

    rows = [dict(r) for r in base]
    per_fold_choice(rows, TRANSLATION_GRID, p_trans)
    # the interval of a non-LF measured row carries the same term (it is the same distribution)
    choice = {r["fold"]: r["choice"] for r in rows}
    cover_with(rows, lambda r: final_interval(r, r["dist"] if is_lf(r["row"]) or not choice.get(r["fold"]) else
                                              replace(r["dist"], scale=math.hypot(r["dist"].scale,
                                                                                  choice[r["fold"]])),
                                              widths[r["fold"]]))
    out.append(line(f"one distribution + translation term (q {q0})", rows,
                    "size per fold " + ", ".join(f"R{k}:{c}" for k, c in sorted(choice.items()))))
    # Student-t core without the contamination component
    rows = [dict(r) for r in base]
    for r in rows:
        d = replace(r["dist"], wide_weight=0.0, wide_scale=0.0)
        pm = one_p_model(r, d, widths[r["fold"]])
        r["p"] = None if pm is None else (1 - q0) * pm + q0 / 2
    out.append(line(f"one distribution, t core without contamination (q {q0})", rows,
                    "interval as shipped (its widths are fitted on the contaminated core)"))
    # D's core the outcome-fitted spread (λ, τ) T-mapped onto the shipped interval
    rows = [dict(r) for r in base]
    for r in rows:
        pm = one_p_model(r, widened(r["dist"], v["tau"], v["factor"]), widths[r["fold"]])
        r["p"] = None if pm is None else (1 - q0) * pm + q0 / 2
    out.append(line(f"one distribution, core the p_oom spread (λ {v['factor']}, τ {v['tau']}, q {q0})", rows,
                    "interval as shipped"))
    # D's core the outcome-fitted spread, its class widths refitted (conformal) on that core's intervals
    spread = [{**r, "dist": widened(r["dist"], v["tau"], v["factor"])} for r in base]
    for r in spread:
        for k in ("base", "r_lo", "r_hi"):
            r.pop(k, None)
    calib_widths.residuals(spread)
    w2 = fold_widths(spread)
    for r in spread:
        pm = one_p_model(r, r["dist"], w2[r["fold"]])
        r["p"] = None if pm is None else (1 - q0) * pm + q0 / 2
    cover_with(spread, lambda r: final_interval(r, r["dist"], w2[r["fold"]]))
    out.append(line(f"one distribution of the p_oom spread, widths refitted on it (q {q0})", spread,
                    "interval and p from the same refitted D"))
    # widths that only widen (never below 0), for both cores: a class whose measurements sat under the prediction
    # (ZeRO-2: above −0.48 in the shipped table) no longer pulls the distribution's upper half under the card
    for name, src in (("measurements' spread", base), ("p_oom spread, widths refitted", spread)):
        wf = fold_widths(src, floor=0.0)
        rows = [dict(r) for r in src]
        for r in rows:
            pm = one_p_model(r, r["dist"], wf[r["fold"]])
            r["p"] = None if pm is None else (1 - q0) * pm + q0 / 2
        cover_with(rows, lambda r, wf=wf: final_interval(r, r["dist"], wf[r["fold"]]))
        out.append(line(f"one distribution ({name}), widths floored at 0 (q {q0})", rows, "interval only widens"))
        floored = rows
    q02 = [{**r, "p": None if r["pm1"] is None else (1 - q0) * r["pm1"] + q0 / 2} for r in base]
    out += ["", "Paired differences of the per-run squared error (LORO, same runs; negative: the first is better):",
            "", f"- one distribution (p_oom spread, widths refitted) − one distribution (measurements' spread): "
            f"{_paired(spread, q02)}", f"- one distribution (measurements' spread) − two computations: "
            f"{_paired(q02, base)}", f"- one distribution (p_oom spread, widths refitted) − two computations: "
            f"{_paired(spread, base)}",
            f"- one distribution (p_oom spread, widths refitted, floored at 0) − two computations: "
            f"{_paired(floored, base)}",
            f"- one distribution (p_oom spread, widths refitted, floored at 0) − the same, signed widths: "
            f"{_paired(floored, spread)}"]
    return out


def _paired(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    """Mean ± s.e. of the per-run difference of squared errors between two scorings of the same rows."""
    pb = {r["id"]: r for r in b if r.get("p") is not None}
    d = [(r["p"] - r["y"]) ** 2 - (pb[r["id"]]["p"] - r["y"]) ** 2 for r in a if r.get("p") is not None
         and r["id"] in pb]
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    return f"{statistics.mean(d):+.4f} ± {se:.4f} ({len(d)} runs)"


def _spread_interval(r: dict[str, Any], d: Any) -> tuple[float, float]:
    from finetune_doctor.analyzers.memory.predictive import mixture_interval

    lo, hi = mixture_interval([(w, t, None) for w, t, _b in r["totals"]], d)
    full = calib_widths._full_length_totals(r)
    if full:
        hi = max(hi, mixture_interval(full, d)[1])
    return lo, hi


if __name__ == "__main__":
    sys.exit(main())
