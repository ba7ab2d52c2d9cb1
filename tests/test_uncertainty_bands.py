"""The interval's widths per class of run and for unknown sample lengths (analyzers/memory/bands.py, facts/bands.py)
and their derivation from leave-one-source-out residuals (benchmarks/calib_widths.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from finetune_doctor.analyzers.memory import bands
from finetune_doctor.analyzers.memory import uncertainty as u

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"

WIDTHS = {"classes": {"ZeRO-3 full": {"below": -0.036, "above": 0.365, "rows": 33, "sources": 23},
                      "DDP": {"below": -0.403, "above": -0.054, "rows": 15, "sources": 15}},
          "pooled": {"below": -0.086, "above": 0.094, "rows": 408, "sources": 246}}


def _run(**kw):
    base = {"offload_optimizer": None, "offload_param": None, "fsdp_offload_params": False, "quantization_bit": None,
            "deepspeed": False, "zero_stage": 0, "finetuning_type": "lora", "fsdp": False, "engine": "ddp",
            "world_size": 1}
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("kw,gpu,cls", [
    ({"deepspeed": True, "zero_stage": 3, "finetuning_type": "full", "world_size": 8}, "H100-80GB", "ZeRO-3 full"),
    ({"deepspeed": True, "zero_stage": 3, "world_size": 8}, "A100-80GB", "ZeRO-3 LoRA"),
    ({"deepspeed": True, "zero_stage": 1, "world_size": 2}, "A100-80GB", "ZeRO-2"),
    ({"deepspeed": True, "zero_stage": 3, "offload_param": "cpu", "world_size": 2}, "A100-80GB", "offload"),
    # DeepSpeed's own spelling of "no offload" ("none") is not an offload (calibrate.engine_of agrees)
    ({"deepspeed": True, "zero_stage": 2, "offload_optimizer": "none", "world_size": 2}, "A10", "ZeRO-2"),
    ({"fsdp": True, "engine": "fsdp", "world_size": 4, "fsdp_offload_params": True}, "A100-40GB", "offload"),
    ({"fsdp": True, "engine": "fsdp", "world_size": 4}, "A100-40GB", "FSDP"),
    ({"quantization_bit": 4, "deepspeed": True, "zero_stage": 3, "world_size": 2}, "RTX-4090", "QLoRA"),
    ({"world_size": 4}, "RTX-3090", "DDP"),
    ({}, "T4-16GB", "single"),
    ({"deepspeed": True, "zero_stage": 3, "world_size": 8}, "Ascend-910B-64GB", "NPU"),
])
def test_run_class_first_that_applies(kw, gpu, cls):
    assert bands.run_class(_run(**kw), gpu) == cls
    assert cls in bands.RUN_CLASSES


def test_no_widths_in_the_table_changes_nothing():
    iv = (10.0, 20.0)
    assert bands.widths({}, "DDP") is None
    assert bands.widen(iv, {}, "DDP") == iv
    assert bands.upper_at_cutoff(iv, (12.0, 30.0), {}) == iv
    # the shipped table of session 10 has none: a check's interval is the mixture's, as before
    if "interval_widths" not in u.table():
        assert bands.widen(iv, u.table(), "ZeRO-3 full") == iv


def test_widen_by_the_class_else_pooled():
    t = {"interval_widths": WIDTHS}
    lo, hi = bands.widen((40.0, 60.0), t, "ZeRO-3 full")
    assert lo == pytest.approx(40.0 * math.exp(0.036)) and hi == pytest.approx(60.0 * math.exp(0.365))
    # a class the table does not list (fewer sources than the derivation's minimum) takes the pooled widths
    lo, hi = bands.widen((40.0, 60.0), t, "NPU")
    assert lo == pytest.approx(40.0 * math.exp(0.086)) and hi == pytest.approx(60.0 * math.exp(0.094))
    # negative widths narrow, but the ends never cross
    t2 = {"interval_widths": {"classes": {"X": {"below": -1.0, "above": -1.0}}, "pooled": None}}
    lo, hi = bands.widen((10.0, 11.0), t2, "X")
    # lo 10·e = 27.2 over hi 11/e = 4.0: both at their geometric mean √110
    assert lo == hi == pytest.approx(math.sqrt(110.0))


def test_unknown_lengths_widen_downward_only():
    t = {"interval_widths": WIDTHS}
    # the mixture over lengths pulls both ends down; the upper end goes back to the one at cutoff_len
    assert bands.upper_at_cutoff((8.0, 25.0), (14.0, 31.0), t) == (8.0, 31.0)
    # never narrower than the mixture's own upper end
    assert bands.upper_at_cutoff((8.0, 35.0), (14.0, 31.0), t) == (8.0, 35.0)
    assert bands.upper_at_cutoff((8.0, 25.0), None, t) == (8.0, 25.0)


def _check_interval(monkeypatch, config: Path, gpu: str, table: dict) -> list[float]:
    from casekit import run_json

    monkeypatch.setattr(u, "table", lambda: table)
    u.error_dist.cache_clear()
    try:
        _rc, rep = run_json("check", str(config), "--gpu", gpu, "--offline", "--no-data")
    finally:
        u.error_dist.cache_clear()
    return rep["memory"]["interval_gib"], rep


def test_check_reports_the_widened_interval(monkeypatch):
    """The same config with and without the table's widths: the upper end rises by the class's above-width times
    the rise to cutoff_len's upper end (the data is not scanned here); the verdict holds and p_oom, read on the
    same distribution as the interval since session 14 (facts/bands.py `one_distribution`), does not fall."""
    cfg = EXAMPLES / "train_lora" / "qwen3_lora_sft.yaml"
    # the table without widths (the shipped one carries them since the refit of 2026-12-07)
    bare = {k: v for k, v in u.table().items() if k != "interval_widths"}
    base_iv, base = _check_interval(monkeypatch, cfg, "A100-80GB", bare)
    wide = {**bare, "interval_widths": {"classes": {}, "pooled": {"below": 0.2, "above": 0.3}}}
    iv, rep = _check_interval(monkeypatch, cfg, "A100-80GB", wide)
    assert rep["memory"]["verdict"] == base["memory"]["verdict"]
    assert rep["memory"]["p_oom"] >= base["memory"]["p_oom"]   # a higher upper end puts more mass above the card
    assert rep["memory"]["p_oom_model"] == pytest.approx(rep["memory"]["interval_share_above_card"], abs=1e-3)
    assert iv[0] == pytest.approx(base_iv[0] * math.exp(-0.2), rel=1e-3)
    # at least the class's width above; more where the samples' lengths were open (the upper end at cutoff_len)
    assert iv[1] >= base_iv[1] * math.exp(0.3) * (1 - 1e-3)
    # the text says what widened it; without widths it is as before
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    args = ["check", str(cfg), "--gpu", "A100-80GB", "--offline", "--no-data"]
    words = {}
    for name, t in (("bare", bare), ("wide", wide)):
        monkeypatch.setattr(u, "table", lambda t=t: t)
        words[name] = " ".join(CliRunner().invoke(main, args).output.split())
    assert "widened by the spread of single runs across sources" in words["wide"]
    assert "widened by the spread" not in words["bare"]


def test_calib_widths_conformal_rank():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calib_widths as cw

    vals = [(float(i), 1.0) for i in range(1, 20)]
    assert cw.weighted_quantile(vals, 1.0) == 19.0
    assert cw.weighted_quantile(vals, 0.5) == 10.0
    rows = [{"source": f"s{i % 9}", "cls": "single", "r_lo": -0.1 * i, "r_hi": 0.01 * i} for i in range(1, 41)]
    rows += [{"source": "other", "cls": "NPU", "r_lo": 0.5, "r_hi": 0.5}]
    w = cw.derive_widths(rows)
    # 40 rows of one class from 9 sources: level min(1, 0.95 · 41/40) = 0.974 → the 39th smallest
    assert w["classes"]["single"]["above"] == pytest.approx(0.39)
    assert w["classes"]["single"]["below"] == pytest.approx(-0.2)
    # a class of one source is left to the pooled widths
    assert "NPU" not in w["classes"] and w["pooled"]["rows"] == 41
    # leaving a source out removes its rows from every width
    assert cw.derive_widths(rows, "other")["pooled"]["rows"] == 40


def test_an_unknown_counter_reaches_down_to_allocated():
    """calibrate.compare: a source that does not say what it counted is inside when its figure lies between the
    interval's lower end at the allocated counter's share and its upper end; a named counter keeps its own scale."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calibrate

    pred = {"total": 40.0, "peak_allocated": 30.0, "runtime": 2.0, "interval": (32.0, 50.0)}
    row = {"measured": {"kind": "unknown", "value": 26.0, "unit": "GiB"}, "gpu": "1xA100-80GB"}
    c = calibrate.compare(row, pred)
    # 26 GiB is under 32 but over 32 · 30/40 = 24: an allocated figure the total's interval holds
    assert c["inside"] is True and c["predicted"] == 40.0
    assert calibrate.compare({**row, "measured": {**row["measured"], "value": 23.0}}, pred)["inside"] is False
    assert calibrate.compare({**row, "measured": {**row["measured"], "value": 51.0}}, pred)["inside"] is False
    # nvidia-smi says what it counts: the total's interval as it is
    smi = {**row, "measured": {"kind": "nvidia-smi", "value": 26.0, "unit": "GiB"}}
    assert calibrate.compare(smi, pred)["inside"] is False
