"""Leave-one-round-out, the yardstick for the next held-out round (benchmarks/calib_loro.py, calib_loso.FOLD), and
p_oom given the kind of report (analyzers/memory/uncertainty.py `by_report`; issue #21, session 12)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import uncertainty as u

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def _table(monkeypatch, extra):
    t = {**u.table(), **extra}
    monkeypatch.setattr(u, "table", lambda: t)


def test_report_kind_reads_the_source_type():
    assert u.report_kind("issue-thread") == "thread"
    assert u.report_kind("framework-doc") == "documentation"
    assert u.report_kind("vendor-doc") == "documentation"
    assert u.report_kind(None) == "documentation"


def test_by_report_is_the_two_sided_map_of_the_kind(monkeypatch):
    _table(monkeypatch, {"p_oom_by_report": {"thread": {"oom": 0.35, "trained": 0.1},
                                             "documentation": {"oom": 0.1, "trained": 0.5}}})
    # a + (1 - a - b)·p: a thread the memory model sees fit still ran out 35 % of the time
    assert u.by_report(0.0, "thread") == pytest.approx(0.35)
    assert u.by_report(1.0, "thread") == pytest.approx(0.9)
    assert u.by_report(0.5, "documentation") == pytest.approx(0.1 + 0.4 * 0.5)
    assert u.by_report(1.0, "documentation") == pytest.approx(0.5)


def test_by_report_is_none_without_shares_and_refuses_shares_that_sum_to_one(monkeypatch):
    _table(monkeypatch, {"p_oom_by_report": None})
    assert u.by_report(0.3, "thread") is None
    _table(monkeypatch, {"p_oom_by_report": {"thread": {"oom": 0.6, "trained": 0.4}}})
    with pytest.raises(ValueError, match="thread"):
        u.by_report(0.3, "thread")


def test_the_doctors_p_oom_keeps_one_q_whatever_the_report_shares(monkeypatch):
    # p_oom_by_report is for scoring published runs; the all-cause p_oom a check prints stays (1 - q)·p + q/2
    _table(monkeypatch, {"p_oom_by_report": {"thread": {"oom": 0.35, "trained": 0.1}}, "p_oom_unexplained": 0.2})
    assert u.all_cause(0.0, u.unexplained_share()) == pytest.approx(0.1)


def test_folds_are_rounds_by_default():
    import calib_loso

    assert calib_loso.FOLD == "round"
    assert calib_loso.fold_of({"source": "a", "round": 6}) == "6"
    assert calib_loso.fold_of({"source": "a"}) == "1"   # absent round = 1 (calib_data)
    assert calib_loso.fold_of({"source": "a", "round": 6}, "source") == "a"


def _row(i, rnd, eps, source=None):
    r = {"id": f"r{i}", "source": source or f"s{i}", "round": rnd, "source_type": "framework-doc", "samples": "fill"}
    return {"row": r, "cmp": {"eps": eps}, "pred": {"cls": "default/unquantized"}}


def test_a_round_is_scored_by_a_table_fitted_without_any_of_its_rows():
    import calib_loso

    # round 2's three sources all sit at ε = 0.9; the others at 0. Left out by round, round 2's table has never seen
    # ε = 0.9 (mean 0); left out by source, each of its rows is fitted with its two round-2 siblings
    scored = [_row(i, 1, 0.0) for i in range(6)] + [_row(10 + i, 2, 0.9) for i in range(3)]
    by_round = calib_loso.fold_fits(scored, ("shape",), [], fold="round")
    by_source = calib_loso.fold_fits(scored, ("shape",), [], fold="source")
    mean = lambda fit: fit[0]["analytic"]["classes"]["default"]["mean"]   # noqa: E731
    assert mean(by_round["2"]) == pytest.approx(0.0)
    assert mean(by_source["s10"]) > 0.2


def test_map_parameters_of_a_round_are_chosen_without_its_runs():
    import calib_loro

    # round 1's runs all ran out at p_model 0; round 2's trained at p_model 0. The shares chosen for round 2 come
    # from round 1 alone (a high floor), and those for round 1 from round 2 (the lowest floor)
    rows = ([{"row": {"round": 1, "source_type": "issue-thread"}, "fold": 1, "pm": 0.0, "y": 1.0, "p": 0.5}] * 4
            + [{"row": {"round": 2, "source_type": "issue-thread"}, "fold": 2, "pm": 0.0, "y": 0.0, "p": 0.5}] * 4)
    chosen = calib_loro.apply_map(rows, "round", "two-sided, both ≥ 0.1")
    assert chosen[2][None][0] == max(calib_loro.BOUNDED)
    assert chosen[1][None][0] == min(calib_loro.BOUNDED)
    assert all(0.1 <= r["p"] <= 0.9 for r in rows)


def test_calibrate_scores_the_kind_of_report_beside_the_doctors_p_oom():
    import calibrate

    def s(i, outcome, p, by):
        return {"row": {"id": f"r{i}", "outcome": outcome, "gpu": "A100-80GB", "source_type": "issue-thread"},
                "pred": {"p_oom": p, "p_oom_by_report": by}, "cmp": None}
    scored = [s(0, "oom", 0.1, 0.4), s(1, "trained", 0.1, 0.37), s(2, "oom", 0.8, 0.85)]
    sm = calibrate.summary(scored)
    assert sm["brier"] == pytest.approx((0.81 + 0.01 + 0.04) / 3)
    assert sm["brier_by_report"] == pytest.approx((0.36 + 0.1369 + 0.0225) / 3)
    assert sm["by_report_misses"] == 0
    # a table without p_oom_by_report: nothing scored beside it, and no line printed for it
    sm = calibrate.summary([{**x, "pred": {**x["pred"], "p_oom_by_report": None}} for x in scored])
    assert sm["brier_by_report"] is None
    assert not any("kind of report" in line for line in calibrate.summary_lines("dev", sm))


def test_nested_choice_never_sees_the_round_it_scores():
    import calib_loro

    def variant(name, f1, f2):
        # by_fold: Σ squared error, runs, inside, measurements, Σ log density, Σ outcome log-likelihood
        return {"class_by": ["shape"], "robust": False, "factor": 1.0, "tau": 0.0, "max_dof": None,
                "contamination": None, "unexplained": {"a": 0.1, "b": 0.2}[name], "by_fold": {"1": f1, "2": f2}}
    # a is the better variant on round 2's rows only, b on round 1's only; both cover 90 % everywhere
    a = variant("a", [4.0, 10, 9, 10, -20.0, -9.0], [1.0, 10, 9, 10, -1.0, -1.0])
    b = variant("b", [1.0, 10, 9, 10, -1.0, -1.0], [4.0, 10, 9, 10, -20.0, -9.0])
    lines = calib_loro.nested([a, b])
    # round 1 is scored with what round 2 prefers (a: Brier 0.4 there), round 2 with b (0.4): never its own best
    assert "| 1 | " in lines[2] and "q 0.1" in lines[2] and "0.400 (10)" in lines[2]
    assert "| 2 | " in lines[3] and "q 0.2" in lines[3] and "0.400 (10)" in lines[3]
    assert "0.400 (20)" in lines[-1]
