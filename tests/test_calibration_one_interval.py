"""The interval and p_oom a report prints are the numbers benchmarks/calibrate.py scores (issue #21, session 16:
one quantile, analyzers/memory/predictive.py `mixture_interval`, for the report and for the calibration).

References: four dev rows of benchmarks/data/calibration_rows*.yaml whose sample lengths are open (their samples
do not reach cutoff_len, calib_data.samples_fill), each with another open assumption beside them or not; each is
assembled as `doctor estimate` does (calibrate.predict: the report's ``mem.interval_gib`` and ``mem.p_oom``) and
rescored as calibrate.py scores a row (calibrate.reweigh under the installed table's assumption weights and prior
on the longest sample). The two are computed by different code paths (facts/verdict.py `mixed_p_oom` against
facts/bands.py `final_interval` over facts/assume.py `mixture` with explicit weights); they must agree exactly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# each test loads and sizes the benchmark harness's calibration rows (about 2 s of CPU each): outside the
# fast lane (pytest -m "not slow"), run by the whole suite and .ci/run
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

# (row id, the open assumptions the doctor reports for it): the first has no second assumption, the others one or
# two whose alternatives the table weighs (assumption_weights default 0.75)
ROWS = (("r4r-3052-a100-40g", ["sample-lengths"]),
        ("r3r-3914", ["launcher", "sample-lengths"]),
        ("r5r-ff33-1024", ["checkpoint-dtype", "sample-lengths"]),
        ("r6r-oi25-4xa100", ["launcher", "sample-lengths", "torch-version"]))


@pytest.mark.parametrize("row_id,opened", ROWS)
def test_the_printed_interval_is_the_scored_interval(row_id, opened, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import calibrate
    from calib_data import load_rows, samples_fill

    from finetune_doctor.analyzers.memory import uncertainty as u

    row = next(r for r in load_rows() if r["id"] == row_id)
    assert row["split"] == "dev" and not samples_fill(row)
    pred = calibrate.predict(row)
    assert pred["open"] == opened
    scored = calibrate.reweigh(row, pred, u.table()["assumption_weights"], u.lengths_prior())
    lo, hi = pred["interval"]
    assert 0 < lo < pred["total"] < hi   # a real interval around the prediction, not a point
    assert scored["interval"] == (lo, hi)   # the same floats: one quantile, one mixture
    assert scored["p_oom"] == pred["p_oom"]
    q = u.unexplained_share()
    assert q / 2 < pred["p_oom"] < 1 - q / 2
