import os
import sys
from pathlib import Path

# CPU-only test machines may still carry an NVIDIA library; tests never read real GPUs unless marked gpu.
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


# The error model the rule cases and remedy tests were written against (finetune_doctor/analyzers/
# uncertainty_table.json as committed on 2026-12-02, kept in fixtures/uncertainty/pinned_table.json). Those tests
# check the rules' and planners' logic (a remedy aims at p_oom <= 5 %, a finding fires between two thresholds);
# benchmarks/calibrate.py refits the live table whenever the memory model changes, and how wide it makes the
# interval must not decide whether that logic is tested. Tests of the calibration itself use the live table.
import json as _json

import pytest as _pytest


@_pytest.fixture
def pinned_error_model(monkeypatch):
    from finetune_doctor.analyzers.memory import uncertainty
    pinned = _json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "uncertainty" /
                          "pinned_table.json").read_text(encoding="utf-8"))
    monkeypatch.setattr(uncertainty, "table", lambda: pinned)
    uncertainty.error_dist.cache_clear()
    yield pinned
    uncertainty.error_dist.cache_clear()
