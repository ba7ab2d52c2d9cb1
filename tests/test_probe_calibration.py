"""A slice of benchmarks/calibration.py: the analytic estimator's tensor bytes against the simulate probe, within
the 3% bar, for one config per finetuning type and one sharded over 8 ranks (Qwen2.5-7B from the catalog). The
full grid and the configs outside the bar are in benchmarks/results/calibration.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lazyskip import importorskip_when_run  # noqa: E402

_needs_torch = importorskip_when_run("torch", "transformers")   # at the first test (lazyskip.py)

_needs_peft = importorskip_when_run("peft")   # at the first test (lazyskip.py)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import calibration  # noqa: E402

from finetune_doctor.readers.model.modelcfg import load_arch  # noqa: E402

# every test here builds and runs torch models (seconds each): outside the fast lane (pytest -m "not slow")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def arch():
    return load_arch("Qwen/Qwen2.5-7B")[0]


@pytest.mark.parametrize("label, cfg, stage, world", calibration.grid(small=True), ids=lambda x: x if isinstance(x, str) else "")
def test_analytic_and_simulated_tensor_bytes_agree_within_3_percent(label, cfg, stage, world, arch):
    r = calibration.compare(label, cfg, stage, world, arch)
    assert abs(r["ratio"] - 1) <= calibration.BAR, (r["analytic"], r["simulate"], r["terms"])
    # the per-term comparison is computed at real moments of step 2 (every term found)
    assert all(s == s for _, _, s in r["terms"])
