"""Choosing the error model's form on the dev half by leave-one-source-out (benchmarks/calibrate.py calls it).

A **variant** is (``class_by``, λ, τ): which parts of a run's error class (analyzers/memory/uncertainty.py
`error_class`: the shape class, and whether the base weights are stored quantized) the analytic method's classes
are keyed by, and how p_oom's spread follows from the interval's: scale √((λ·s)² + τ²) (uncertainty.py `widened`;
τ an independent spread of the usable budget, λ < 1 a p_oom sharper than the interval fitted on measurements that
carry translation and counter errors an outcome does not).

**Leave-one-source-out.** For each dev source S, the table is fitted (`uncertainty.derive`, the prior (κ0, ν0)
chosen by leave-one-out log score as in derive_uncertainty.choose_prior) on the dev measurements of every *other*
source plus the kept simulated/measured rows, and S's rows are scored with it: its measurements for the 90 %
interval (ε inside the 5 %–95 % quantiles of its class's predictive t), its runs with an outcome and a card for
the Brier score of p_oom = P(ε > ln(capacity / total)) under the widened t. Whole sources are left out because the
rows of one page share its framework, counter and translation: leaving out one row at a time would let a page's
siblings vouch for it. Predictions (total, capacity, class) do not depend on the table, so each row is assembled
once (calibrate.score_all) and only the error model is refitted per fold.

**Objective** (stated before any run): the lowest LOSO Brier among the variants whose LOSO coverage lies in
85–95 %; when none does, the coverage closest to 90 %, then the lowest Brier. Ties go to the simpler variant
(fewer class parts, λ nearer 1, smaller τ), the order of `VARIANTS`. The table prints each Brier with its
standard error over the runs (± one s.e.): differences well inside it are not evidence for a variant.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

CLASS_BYS: tuple[tuple[str, ...], ...] = (("shape",), ("weights",), ("shape", "weights"))
FACTORS = (1.0, 0.75, 0.5)
TAUS = (0.0, 0.05, 0.10, 0.20)
VARIANTS = [(by, lam, tau) for by in CLASS_BYS for lam in FACTORS for tau in TAUS]
COVER_BAND = (0.85, 0.95)


def class_of(pred: dict[str, Any], by: tuple[str, ...]) -> str:
    """The key of a prediction's error class (``pred["cls"]``, uncertainty.error_class) under `by`."""
    shape, _, weights = str(pred["cls"]).partition("/")
    parts = {"shape": shape, "weights": weights}
    return "/".join(parts[b] for b in by)


def eps_row(s: dict[str, Any], by: tuple[str, ...]) -> dict[str, Any]:
    return {"method": "analytic", "shape": class_of(s["pred"], by), "eps": s["cmp"]["eps"],
            "source": s["row"]["source"]}


def fold_scores(scored: list[dict[str, Any]], by: tuple[str, ...], kept: list[dict[str, Any]]) -> list[dict]:
    """Per dev row, what its source's fold says: {id, source, eps, q05, q95, outcome, total, capacity, dist}."""
    from derive_uncertainty import choose_prior

    from finetune_doctor.analyzers.memory.uncertainty import derive, dist_from

    out = []
    for src in sorted({s["row"]["source"] for s in scored}):
        train = [eps_row(s, by) for s in scored if s["row"]["source"] != src and s["cmp"] is not None] + kept
        (k0, nu0), _ = choose_prior(train)
        methods = derive(train)
        for s in scored:
            r, p = s["row"], s["pred"]
            if r["source"] != src or "error" in p:
                continue
            d = dist_from(methods, "analytic", class_of(p, by), k0, nu0)
            out.append({"id": r["id"], "source": src, "eps": s["cmp"]["eps"] if s["cmp"] else None,
                        "q05": d.quantile(0.05), "q95": d.quantile(0.95), "dist": d,
                        "outcome": r.get("outcome") if r.get("gpu") else None,
                        "total": p["total"], "capacity": p.get("capacity")})
    return out


def score_variant(folds: list[dict], tau: float, factor: float = 1.0) -> dict[str, Any]:
    """LOSO Brier, coverage and confident misses of one (λ, τ) over `fold_scores`' rows."""
    from finetune_doctor.analyzers.memory.uncertainty import p_oom, widened

    meas = [f for f in folds if f["eps"] is not None]
    inside = [f["q05"] <= f["eps"] <= f["q95"] for f in meas]
    outc = [(p_oom(f["total"], f["capacity"], widened(f["dist"], tau, factor)), 1.0 if f["outcome"] == "oom" else 0.0, f["id"])
            for f in folds if f["outcome"] and f["capacity"]]
    terms = [(p - y) ** 2 for p, y, _ in outc]
    return {"brier": statistics.mean(terms) if terms else math.nan,
            "brier_se": statistics.stdev(terms) / math.sqrt(len(terms)) if len(terms) > 1 else math.nan,
            "coverage": sum(inside) / len(inside) if inside else math.nan, "n_outcomes": len(outc),
            "n_meas": len(meas), "sure_oom_but_trained": [i for p, y, i in outc if y == 0 and p >= 0.9],
            "sure_fits_but_oom": [i for p, y, i in outc if y == 1 and p <= 0.1]}


def loso(scored: list[dict[str, Any]], kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every variant's LOSO numbers over the dev rows `scored` (calibrate.score_all output, dev half only)."""
    dev = [s for s in scored if s["row"]["split"] == "dev"]
    if len(dev) != len(scored):
        raise ValueError("leave-one-source-out runs on the dev half only")
    out = []
    for by in CLASS_BYS:
        folds = fold_scores(dev, by, kept)
        for lam in FACTORS:
            for tau in TAUS:
                out.append({"class_by": list(by), "factor": lam, "tau": tau, **score_variant(folds, tau, lam)})
    return out


def choose(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The variant the module docstring's objective picks from `loso`'s results."""
    lo, hi = COVER_BAND
    inband = [r for r in results if lo <= r["coverage"] <= hi]
    if inband:
        return min(inband, key=lambda r: r["brier"])
    return min(results, key=lambda r: (round(abs(r["coverage"] - 0.90), 6), r["brier"]))


def table_lines(results: list[dict[str, Any]], chosen: dict[str, Any]) -> list[str]:
    out = ["| classes keyed by | λ | τ | LOSO Brier | LOSO coverage of the 90 % interval | p ≥ 0.9, trained | "
           "p ≤ 0.1, OOM | chosen |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {' × '.join(r['class_by'])} | {r['factor']:.2f} | {r['tau']:.2f} | {r['brier']:.3f} ± {r['brier_se']:.3f} ({r['n_outcomes']} runs) | "
                   f"{r['coverage']:.0%} ({r['n_meas']}) | {len(r['sure_oom_but_trained'])} | "
                   f"{len(r['sure_fits_but_oom'])} | {'**yes**' if r is chosen else ''} |")
    return out
