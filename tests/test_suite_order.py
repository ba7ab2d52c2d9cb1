"""The order test files are handed to pytest-xdist's workers (tests/conftest.py `file_order`): the whole suite's
and the fast lane's wall time depend on the long files starting first, whatever their number of tests."""

from __future__ import annotations

from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent


def test_every_file_the_order_names_exists():
    # a renamed or split file would silently fall back to the order by test count
    named = set(conftest._HEAVY_FIRST) | set(conftest._SLOW_FAST_LANE_S)
    assert sorted(n for n in named if not (TESTS / n).is_file()) == []


def test_a_long_file_with_few_tests_starts_before_short_files_with_many():
    counts = {str(TESTS / "test_rule_registry.py"): 523, str(TESTS / "test_probe_progress.py"): 5,
              str(TESTS / "test_v1_slip.py"): 1, str(TESTS / "test_context.py"): 7,
              str(TESTS / "test_parity_lf.py"): 6, str(TESTS / "test_catalog_provenance.py"): 335}
    assert [Path(p).name for p in conftest.file_order(counts)] == [
        "test_parity_lf.py",            # a named heavy file (slow lane) first
        "test_probe_progress.py",       # 8.8 CPU s measured, 5 tests
        "test_context.py",              # 3.1 CPU s, 7 tests
        "test_rule_registry.py",        # 2.1 CPU s, 523 tests
        "test_catalog_provenance.py",   # 0.9 CPU s, 335 tests
        "test_v1_slip.py"]              # an unnamed file: after every named one
