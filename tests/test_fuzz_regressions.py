"""Regression tests for the defects the fuzz suite (tests/test_fuzz_structured.py, tests/test_fuzz_corpus.py)
found, one test per defect, each on the smallest input that showed it (issue 17)."""

from __future__ import annotations

from array import array

from finetune_doctor.analyzers.curves import Curve
from finetune_doctor.analyzers.detectors import sparse_jumps


def _curve(values: list[float]) -> Curve:
    n = len(values)
    return Curve("grad_norm", array("q", range(0, 10 * n, 10)), array("d", values), array("q", range(1, n + 1)),
                 ((0, "trainer_state.json"),))


def test_sparse_jump_after_a_median_of_zeros_is_not_a_division_by_zero():
    # fuzz: trainer_state.json whose grad norms read 0, 0, 0.0625, 1.0 (ZeroDivisionError in `ratio`: v / 0)
    assert sparse_jumps(_curve([0.0, 0.0, 0.0625, 1.0, 0.0, 0.0]), 10.0) == []


def test_sparse_jump_over_a_positive_median_is_still_found():
    found = sparse_jumps(_curve([1.0, 1.1, 0.9, 50.0]), 10.0)
    assert [(s["step"], s["value"], s["baseline"]) for s in found] == [(30, 50.0, 1.0)]
    assert found[0]["ratio"] == 50.0
