"""How the calibration harness reads a dev row before the doctor sizes it (issue #21, session 16;
benchmarks/results/calibrate_cal16.md).

References: the rows of benchmarks/data/calibration_rows_round11_reports_b.yaml as their collector wrote them (the
``zero_optimization`` keys at the top level of ``deepspeed``) and the outcomes their sources state (a 7B full run
with ZeRO-3 and parameters and optimizer offloaded trained on two 24 GB RTX 4090s; the same run with ZeRO-0 ran out),
and facts/assume.py `mixture` under the installed table's weights, the mixture a report is read on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import calib_data  # noqa: E402

# each test loads and sizes the benchmark harness's calibration rows (about 2 s of CPU each): outside the
# fast lane (pytest -m "not slow"), run by the whole suite and .ci/run
pytestmark = pytest.mark.slow

Z3_TRAINED = "r11r-b-dszero-dsmath7b-full-z3gc-offload-2x4090-trained"
Z0_OOM = "r11r-b-dszero-dsmath7b-full-z0-2x4090-oom"


def test_flat_zero_keys_are_nested_and_the_rest_kept():
    flat = {"stage": 3, "offload_param": {"device": "cpu"}, "_stock": "ds_z3_offload_config.json"}
    assert calib_data.zero_nested(flat) == {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                                            "_stock": "ds_z3_offload_config.json"}
    nested = {"zero_optimization": {"stage": 2}}
    assert calib_data.zero_nested(nested) is nested
    assert calib_data.zero_nested({"_stock": "ds_z3_config.json"}) == {"_stock": "ds_z3_config.json"}


def test_no_loaded_row_keeps_its_stage_at_the_top_level():
    rows = calib_data.load_rows()
    with_ds = [r for r in rows if r.get("deepspeed")]
    assert all("stage" not in r["deepspeed"] for r in with_ds)
    z3 = next(r for r in rows if r["id"] == Z3_TRAINED)
    assert z3["deepspeed"]["zero_optimization"]["stage"] == 3
    assert z3["deepspeed"]["zero_optimization"]["offload_param"]["device"] == "cpu"


def test_the_offloaded_zero3_row_is_sized_as_zero3_and_the_zero0_row_as_replicated(monkeypatch):
    """Read as written, both were sized as ZeRO-0: 162 GiB per card for the run that trained on 24 GB cards."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import calibrate

    rows = {r["id"]: r for r in calib_data.load_rows() if r["id"] in (Z3_TRAINED, Z0_OOM)}
    z3, z0 = calibrate.predict(rows[Z3_TRAINED]), calibrate.predict(rows[Z0_OOM])
    assert z3["run_class"] == "offload" and z3["shape"] == "zero"
    assert z3["need"] < z3["capacity"] < 24   # trained: the doctor's need fits the 4090 it ran on
    assert z0["run_class"] == "DDP" and z0["need"] > 4 * z0["capacity"]   # ran out: full Adam state replicated


@pytest.mark.parametrize("at_assumed", (False, True))
def test_a_scored_row_mixes_the_other_assumptions_as_the_report_does(at_assumed, monkeypatch):
    """calib_loso.components (what calib_loro.py and calib_cal16.py score) gives the report's mixture over a row's
    launcher (facts/assume.py `mixture` under the table's assumption weights), or the assumed value alone when
    OTHERS_AT_ASSUMED asks for the yardstick of before."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import calib_loso
    import calibrate

    from finetune_doctor.analyzers.memory.uncertainty import LOG_UNIFORM
    from finetune_doctor.facts.assume import mixture

    row = next(r for r in calib_data.load_rows() if r["id"] == "r3r-3914")
    pred = calibrate.predict(row)
    assert "launcher" in pred["open"] and not calib_data.samples_fill(row)
    monkeypatch.setattr(calib_loso, "OTHERS_AT_ASSUMED", at_assumed)
    got = calib_loso.components({"row": row, "pred": pred}, need=False)
    total, hw, assumptions, spec = pred["mix"]
    lengths_only = mixture(total, hw, assumptions, spec, weight=lambda n: 1.0, lengths_prior=LOG_UNIFORM)
    reported = mixture(total, hw, assumptions, spec, lengths_prior=LOG_UNIFORM)
    assert got == (lengths_only if at_assumed else reported)
    assert len(reported) > len(lengths_only) == 2   # 512 tokens and cutoff_len 1024; the launcher's alternatives
