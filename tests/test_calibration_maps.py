"""The calibration choices of benchmarks/calib_maps.py (issue #21, session 13): every parameter of a round is chosen
on the other rounds' runs, and the paired comparison is over the same runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from finetune_doctor.analyzers.memory.uncertainty import ErrorDist  # noqa: E402


def _runs(rnd: int, y: float, k: int = 4) -> list[dict]:
    d = ErrorDist(method="analytic", shape="x", mu=0.0, scale=0.1, dof=30, n=10)
    # every run predicted exactly at its budget: p_model 0.5, so its outcome alone says which way ε leaned
    return [{"row": {"round": rnd}, "fold": rnd, "round": rnd, "dist": d, "comps": [(1.0, 10.0, 10.0)],
             "pm": 0.5, "p": 0.5, "y": y} for _ in range(k)]


def test_outcome_shift_of_a_round_is_chosen_on_the_other_rounds_only():
    import calib_maps

    # round 1's runs all trained at the edge (ε was below 0), round 2's all ran out there (above)
    rows = _runs(1, 0.0) + _runs(2, 1.0)
    v = {"tau": 0.0, "factor": 1.0, "q": 0.0}
    chosen = calib_maps.outcome_shift(rows, v, None)
    # round 2 is scored with what round 1's outcomes say (the lowest shift), round 1 with round 2's (the highest)
    assert chosen[2][None] == (min(calib_maps.SHIFTS), 1.0)
    assert chosen[1][None] == (max(calib_maps.SHIFTS), 1.0)
    # so each round is scored against its own outcomes: its runs' p moves the wrong way
    assert all(r["p"] > 0.5 for r in rows if r["round"] == 1)
    assert all(r["p"] < 0.5 for r in rows if r["round"] == 2)


def test_paired_difference_is_per_run_and_counts_the_rounds_that_improve():
    import calib_maps

    base = [{"round": 1, "p": 0.5, "y": 1.0}, {"round": 1, "p": 0.5, "y": 0.0},
            {"round": 2, "p": 0.2, "y": 0.0}, {"round": 2, "p": 0.2, "y": 0.0}]
    new = [{**base[0], "p": 0.7}, {**base[1], "p": 0.3}, {**base[2], "p": 0.4}, {**base[3], "p": 0.4}]
    mean, se, better, rounds = calib_maps.paired(new, base)
    diffs = [0.09 - 0.25, 0.09 - 0.25, 0.16 - 0.04, 0.16 - 0.04]
    assert mean == pytest.approx(sum(diffs) / 4)
    assert se > 0
    assert (better, rounds) == (1, 2)
