"""The error model's class locations fitted with outcome runs as censored evidence (benchmarks/calib_censored.py,
issue #21) and the table field the report reads (uncertainty.outcome_shift): three-row toys computed by hand."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from finetune_doctor.analyzers.memory import uncertainty as u  # noqa: E402
from finetune_doctor.analyzers.memory.uncertainty import ErrorDist  # noqa: E402

NO_WIDENING = {"tau": 0.0, "factor": 1.0, "q": 0.0}


def _run(margin: float, y: float | None, source: str) -> dict:
    """A run whose budget is e^margin times its need (ln(budget / need) = margin), under ε ~ t(1000, 0, 0.05)."""
    d = ErrorDist(method="analytic", shape="zero/unquantized", mu=0.0, scale=0.05, dof=1000, n=30)
    return {"row": {"round": 1}, "fold": 1, "round": 1, "source": source, "dist": d,
            "comps": [(1.0, 10.0, 10.0 * math.exp(margin))], "totals": [(1.0, 10.0, None)],
            "p": None if y is None else 0.5, "y": y, "cls": "ZeRO-3 LoRA"}


def test_two_censored_runs_place_the_location_between_their_bounds_and_a_run_without_outcome_says_nothing():
    import calib_censored as cc

    # trained 10 % over its budget's need (ε < −0.1) and ran out 30 % under it (ε > −0.3): the likelihood
    # P(ε < −0.1)·P(ε > −0.3) of a symmetric ε peaks at the midpoint δ = −0.2, and is larger the narrower ε is
    rows = [_run(-0.1, 0.0, "a"), _run(-0.3, 1.0, "b"), _run(0.5, None, "c")]
    fit = cc.prepare(rows, NO_WIDENING)
    assert [r["source"] for r in fit] == ["a", "b"]
    assert all(r["ll_at"] == r["llc_at"] for r in fit)   # no measurement: the exact part is empty
    pooled, per = cc.fit_fold(fit, None, 8.0, "llc_at")
    assert pooled == (-0.2, min(cc.MULTS)) and per == {}
    # the trained run's p at the fitted point: P(ε > −0.1) for ε ~ t(1000, −0.2, 0.05·0.75), z = 0.1 / 0.0375
    p = fit[0]["p_at"][pooled]
    assert p == pytest.approx(1.0 - u.t_cdf(0.1 / 0.0375, 1000), rel=1e-9) and 0.0038 < p < 0.0040


def test_each_class_is_shrunk_to_the_pooled_values_by_its_number_of_sources():
    import calib_censored as cc

    def peaked(at: float, source: str, cls: str) -> dict:
        # a log-likelihood peaked at δ = `at`, m = 1 (quadratic), so the fit's answers follow by hand
        return {"source": source, "cls": cls,
                "llc_at": {th: -((th[0] - at) ** 2) - math.log(th[1]) ** 2 for th in cc.GRID}}

    rows = [peaked(0.2, "s1", "A"), peaked(-0.2, "s2", "B"), peaked(-0.2, "s3", "B")]
    pooled, per = cc.fit_fold(rows, lambda r: r["cls"], 3.0, "llc_at")
    # pooled: the sum of the three quadratics peaks at their mean −0.0667; the grid's nearest is −0.075
    assert pooled == (-0.075, 1.0)
    # A: 1 source, w = 1/(1 + 3) = 0.25: −0.075 + 0.25·(0.2 + 0.075) = −0.00625 → 0.0
    # B: 2 sources, w = 2/5 = 0.4: −0.075 + 0.4·(−0.2 + 0.075) = −0.125
    assert per == {"A": (0.0, 1.0), "B": (-0.125, 1.0)}
    field = cc.shift_field(rows, lambda r: r["cls"], 3.0)
    assert field["pooled"] == {"delta": -0.075, "mult": 1.0, "sources": 3}
    assert field["classes"]["B"] == {"delta": -0.125, "mult": 1.0, "sources": 2}
    # no run with an outcome (a refit whose rows were all refused): the distribution is left as fitted
    assert cc.shift_field([], lambda r: r["cls"], 3.0)["pooled"] == {"delta": 0.0, "mult": 1.0, "sources": 0}


TABLE = {"methods": {"analytic": {"pooled": {"n": 30, "mean": 0.0, "var": 0.1 ** 2},
                                  "classes": {"zero": {"n": 30, "mean": 0.0, "var": 0.1 ** 2},
                                              "default": {"n": 30, "mean": 0.0, "var": 0.1 ** 2}}}},
         "prior": {"kappa0": 1, "nu0": 1}, "p_oom_scale_factor": 0.5, "p_oom_extra_scale": 0.1,
         "p_oom_unexplained": 0.2}


def _with_table(monkeypatch, table: dict) -> None:
    monkeypatch.setattr(u, "table", lambda: table)
    u.error_dist.cache_clear()


def test_the_report_reads_the_class_shift_else_the_pooled_one_and_without_the_field_nothing_moves(monkeypatch):
    try:
        _with_table(monkeypatch, TABLE)
        d0 = u.model_dist("analytic", "zero")
        a0 = u.assess(10.0, 10.0, "analytic", "zero")
        assert u.outcome_shift("zero") == (0.0, 1.0)
        shifted = {**TABLE, "p_oom_shift": {"pooled": {"delta": 0.05, "mult": 1.0},
                                            "classes": {"zero": {"delta": -0.1, "mult": 0.75}}}}
        _with_table(monkeypatch, shifted)
        e = u.error_dist("analytic", "zero")
        d = u.model_dist("analytic", "zero")
        # location moved by δ; scale √((λ·s·m)² + τ²) with λ 0.5, τ 0.1, m 0.75
        assert d.mu == pytest.approx(e.mu - 0.1)
        assert d.scale == pytest.approx(math.sqrt((0.5 * e.scale * 0.75) ** 2 + 0.1 ** 2))
        assert d0.mu == pytest.approx(e.mu) and d0.scale == pytest.approx(math.sqrt((0.5 * e.scale) ** 2 + 0.01))
        # a run predicted at its budget: p_oom_model = P(ε > 0) = 1 − F(−μ/s) by hand, all-cause (1 − q)·pm + q/2
        a = u.assess(10.0, 10.0, "analytic", "zero")
        pm = 1.0 - u.t_cdf((0.0 - d.mu) / d.scale, d.dof)
        assert a.p_oom_model == pytest.approx(pm) and a.p_oom == pytest.approx(0.8 * pm + 0.1)
        assert a.p_oom_model < a0.p_oom_model   # the shift down lowers it
        # the interval is the measurements' (error_dist): unchanged by the outcome fit
        assert a.interval_gib == pytest.approx(a0.interval_gib)
        # a class without its own values takes the pooled ones
        assert u.outcome_shift("default") == (0.05, 1.0)
        assert u.model_dist("analytic", "default").mu == pytest.approx(u.error_dist("analytic", "default").mu + 0.05)
    finally:
        u.error_dist.cache_clear()
