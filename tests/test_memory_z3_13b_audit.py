"""benchmarks/memory_z3_13b_audit.py: which rows count as measured at the card, and the class medians with and
without the pairwise (ms-swift DPO) and at-card rows, on hand-made rows whose medians are counted by hand."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import memory_z3_13b_audit as a  # noqa: E402


def _item(err, of_card=0.5, outcome="trained", pairwise=False, engine="ZeRO-3", stated=False):
    return {"err": err, "of_card": of_card, "outcome": outcome, "pairwise": pairwise, "engine": engine,
            "engine_stated": stated}


def test_at_card_needs_the_share_and_a_run_that_did_not_fail():
    assert a.at_card(_item(-0.5, of_card=0.94))
    assert a.at_card(_item(-0.5, of_card=0.90, outcome=None))
    assert not a.at_card(_item(-0.5, of_card=0.89))
    assert not a.at_card(_item(-0.5, of_card=0.95, outcome="oom"))     # an OOM at the card is the card, not a need
    assert not a.at_card(_item(-0.5, of_card=None))                      # no card known


def test_medians_with_and_without_the_rows_set_apart():
    items = [_item(-0.40, of_card=0.94), _item(-0.20), _item(0.05, stated=True), _item(1.50, pairwise=True),
             _item(3.00, pairwise=True), _item(-0.60, engine="ZeRO-3+offload")]
    got = {name: (n, m) for name, n, m in a.medians(items)}
    # no offload: |errors| 0.40 0.20 0.05 1.50 3.00 -> median 0.40
    assert got["ZeRO-3 (no offload), all rows"] == (5, 0.40)
    # without the two pairwise rows: 0.40 0.20 0.05 -> 0.20
    assert got["ZeRO-3 (no offload), without the pairwise (ms-swift DPO) rows"] == (3, 0.20)
    # without the at-card row: 0.20 0.05 1.50 3.00 -> (0.20 + 1.50) / 2
    n, m = got["ZeRO-3 (no offload), without the rows at the card"]
    assert n == 4 and abs(m - 0.85) < 1e-12
    assert got["ZeRO-3 (no offload), without either"] == (2, (0.20 + 0.05) / 2)
    assert got["ZeRO-3 (no offload), fully stated"] == (1, 0.05)
    # with offload: 0.40 0.20 0.05 1.50 3.00 0.60 -> (0.40 + 0.60) / 2
    n, m = got["ZeRO-3 with or without offload, all rows"]
    assert n == 6 and abs(m - 0.50) < 1e-12
