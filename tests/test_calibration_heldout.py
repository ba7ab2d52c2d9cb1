"""calibrate.py keeps the held-out history (benchmarks/calib_heldout.py; issue #21, session 13): a round's test half
is written to calibrate_heldout.md the first time it is scored and never rewritten, and calibrate.md names every
kept round whatever run wrote it. The Brier decomposition of benchmarks/calib_loro.py is checked on hand sums."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import calib_heldout  # noqa: E402


def _page(brier: str, cover: str) -> str:
    """A calibrate.md as calibrate.report lays it out (a test half then a dev half)."""
    return ("# Calibration of p_oom and the 90 % interval on held-out rows\n\nintro\n\n## Rows\n\n| half |\n\n"
            "## test half\n\n"
            f"- fitted table: Brier {brier} over 22 runs (7 OOM; answering 0.5 scores 0.250); inside the 90 % interval "
            f"{cover} of 14 measurements; memory |error| median 11.0%, max 40.0%\n"
            "- fitted table: p >= 0.9 on runs that trained: 0 ; p <= 0.1 on runs that ran out: 0 \n\n"
            "Rows (fitted table):\n\n| row |\n\n## dev half\n\n- fitted table: Brier 0.140 over 600 runs\n")


def test_a_round_is_kept_once_and_a_later_scoring_never_rewrites_it(tmp_path):
    page = tmp_path / "calibrate_heldout.md"
    assert calib_heldout.record(page, 9, _page("0.118", "90%"), "abc1234", "2026-12-08")
    text = page.read_text(encoding="utf-8")
    assert calib_heldout.rounds(text) == [9]
    assert "scored once on 2026-12-08 at abc1234" in text and "Brier 0.118 over 22 runs" in text
    # the dev half is not part of the held-out section
    assert "600 runs" not in text
    # a second run over the same round (now a dev figure) leaves the first scoring as it was
    assert not calib_heldout.record(page, 9, _page("0.101", "93%"), "def5678", "2026-12-09")
    assert page.read_text(encoding="utf-8") == text
    # the next round is appended after it
    assert calib_heldout.record(page, 10, _page("0.135", "86%"), "0badc0d", "2026-12-10")
    assert calib_heldout.rounds(page.read_text(encoding="utf-8")) == [9, 10]


def test_a_page_without_a_test_half_records_nothing(tmp_path):
    page = tmp_path / "h.md"
    dev_only = _page("0.118", "90%").replace("## test half", "## dev half")
    assert not calib_heldout.record(page, 9, dev_only, "abc1234", "2026-12-08")
    assert not page.exists()


def test_calibrate_md_carries_every_kept_round_above_its_rows(tmp_path):
    page = tmp_path / "h.md"
    calib_heldout.record(page, 9, _page("0.118", "90%"), "abc1234", "2026-12-08")
    calib_heldout.record(page, 10, _page("0.135", "86%"), "0badc0d", "2026-12-10")
    fresh = "# Calibration\n\nintro\n\n## Rows\n\n| half |\n\n## dev half\n\n- fitted table: Brier 0.140\n"
    md = calib_heldout.with_history(fresh, page)
    head, rows = md.split("\n## Rows\n")
    assert "## Held-out history" in head
    assert "| 9 | scored once on 2026-12-08 at abc1234 | Brier 0.118 over 22 runs" in head
    assert "| 10 | scored once on 2026-12-10 at 0badc0d | Brier 0.135 over 22 runs" in head
    assert "Held-out history" not in rows
    # no kept round: the page is left as it was
    assert calib_heldout.with_history(fresh, tmp_path / "missing.md") == fresh


def test_the_committed_history_holds_rounds_2_to_12_as_each_was_scored_once():
    text = calib_heldout.PAGE.read_text(encoding="utf-8")
    # rounds 9 and 10 were scored together, under round 10's heading (session 13, 5ddeed0)
    assert calib_heldout.rounds(text) == [2, 3, 4, 5, 6, 7, 8, 10, 11, 12]
    lines = "\n".join(calib_heldout.history_lines())
    # the held-out scores the session notes and commits recorded (d94b349, f939d2f, e651b04)
    for rnd, brier, runs, cover in ((6, "0.157", 111, "80%"), (7, "0.207", 35, "84%"), (8, "0.131", 32, "94%"),
                                    (10, "0.257", 49, "60%"), (11, "0.244", 32, "88%"),
                                    (12, "0.150", 20, "83%")):
        row = next(x for x in lines.splitlines() if x.startswith(f"| {rnd} |"))
        assert f"Brier {brier} over {runs} runs" in row and f"interval {cover} of" in row
    # and calibrate.md, as the script last wrote it, names them
    doc = (ROOT / "benchmarks" / "results" / "calibrate.md").read_text(encoding="utf-8")
    assert "## Held-out history" in doc and "| 8 | scored once at e651b04 | Brier 0.131 over 32 runs" in doc


def test_brier_decomposition_adds_up_on_hand_sums():
    import calib_loro

    # bin 0.1-0.2: p 0.1, 0.1 with one OOM of two; bin 0.8-0.9: p 0.8, 0.8 with both OOM
    rows = [{"p": 0.1, "y": 1.0}, {"p": 0.1, "y": 0.0}, {"p": 0.8, "y": 1.0}, {"p": 0.8, "y": 1.0}]
    d = calib_loro.decomposition(rows)
    brier = (0.81 + 0.01 + 0.04 + 0.04) / 4
    base = 0.75
    rel = (2 * (0.1 - 0.5) ** 2 + 2 * (0.8 - 1.0) ** 2) / 4
    res = (2 * (0.5 - base) ** 2 + 2 * (1.0 - base) ** 2) / 4
    assert d["brier"] == pytest.approx(brier)
    assert d["rel"] == pytest.approx(rel) and d["res"] == pytest.approx(res)
    assert d["unc"] == pytest.approx(base * (1 - base))
    # p is constant within each bin here, so the partition is exact
    assert d["within"] == pytest.approx(0.0, abs=1e-12)
