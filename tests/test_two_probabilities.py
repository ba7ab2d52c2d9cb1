"""Two probabilities of OOM (issue #21, README 'Two probabilities'): the all-cause `p_oom`, calibrated on reported
outcomes with the unexplained share q (p_oom = (1 − q)·p_oom_model + q/2), and the memory model's own `p_oom_model`,
which decides the verdict and what remedies aim at. These tests run with q = 0.2, where the all-cause probability
cannot go below 10 %: a fit must still be called `fits`, and the JSON and text must say both without contradiction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.analyzers.memory import uncertainty
from finetune_doctor.cli import main

QWEN7 = """model_name_or_path: Qwen/Qwen2.5-7B
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048
output_dir: saves/qwen2.5-7b/lora/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""


@pytest.fixture
def q_at_20_percent(monkeypatch):
    """The shipped error table with its unexplained share set to 0.2 (in the calibration's grid since #21)."""
    shipped = json.loads(uncertainty.TABLE.read_text(encoding="utf-8"))
    table = {**shipped, "p_oom_unexplained": 0.2}
    monkeypatch.setattr(uncertainty, "table", lambda: table)
    uncertainty.error_dist.cache_clear()
    yield table
    uncertainty.error_dist.cache_clear()


def _check(tmp_path: Path, *args: str) -> tuple[dict, str]:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(QWEN7, encoding="utf-8")
    base = ["check", str(cfg), "--no-data", "--offline", "--gpu", "A100-80GB", *args]
    j = CliRunner().invoke(main, [*base, "--format", "json"])
    assert j.exit_code in (0, 1), j.output
    t = CliRunner().invoke(main, base)
    return json.loads(j.output), " ".join(t.output.split())


@pytest.mark.usefixtures("q_at_20_percent")
def test_json_and_text_carry_both_probabilities_and_a_roomy_run_fits(tmp_path):
    d, text = _check(tmp_path)
    mem = d["memory"]
    # a 7B LoRA at 2,048 tokens on an 80 GB card: the memory model puts well under 5 % on it running out
    assert mem["p_oom_unexplained"] == 0.2
    assert mem["p_oom_model"] is not None and mem["p_oom_model"] < 0.01
    assert mem["verdict"] == "fits"
    # the all-cause probability is the memory model's with the unexplained share: never below q/2 = 10 %
    assert mem["p_oom"] == pytest.approx(0.8 * mem["p_oom_model"] + 0.1, abs=2e-3)
    assert mem["p_oom"] >= 0.1 > uncertainty.P_OOM_TARGET
    # the text names which is which: the verdict's figure is the memory model's, the other is all causes
    assert "verdict fits · the memory model puts < 1 % on running out" in text
    assert (f"probability of OOM from any cause {round(100 * mem['p_oom'])} % (runs reported like this one ran out "
            "for reasons no memory term sees 10 % of the time: half of p_oom_unexplained q = 20 %, the share whose "
            "outcome no memory term explains)") in " ".join(text.split())
    assert "predicted-tight-fit" not in text


@pytest.mark.usefixtures("q_at_20_percent")
def test_at_q_zero_the_text_keeps_one_probability(tmp_path, monkeypatch):
    shipped = json.loads(uncertainty.TABLE.read_text(encoding="utf-8"))
    monkeypatch.setattr(uncertainty, "table", lambda: {**shipped, "p_oom_unexplained": 0.0})
    uncertainty.error_dist.cache_clear()
    d, text = _check(tmp_path)
    assert d["memory"]["p_oom"] == d["memory"]["p_oom_model"] and d["memory"]["p_oom_unexplained"] == 0.0
    assert "verdict fits · probability of OOM < 1 %" in text and "memory model puts" not in text


def test_the_tight_fit_message_says_which_probability():
    from finetune_doctor.engine.evaluate import _message
    from finetune_doctor.engine.expr import Evaluator
    from finetune_doctor.engine.loader import load_rules

    rule = next(r for r in load_rules() if r.name == "predicted-tight-fit")
    mem = {"headroom_gib": 2.0, "need_gib": 20.0, "budget_gib": 22.0, "peak_moment": "optimizer step",
           "total": 20.0, "error_label": "dense runs: measured on 9 runs", "error_spread_pct": 14.0,
           "error_bias_pct": 0.0, "interval_lo_gib": 15.1, "interval_hi_gib": 26.5,
           "interval_basis": "the benchmarks' error", "p_oom_pct": 15.6, "p_oom_text": "15.6",
           "p_oom_model_pct": 7.0, "p_oom_model_text": "7.0", "p_oom_model_assumed_text": "7.0",
           "p_oom_other_pct": 10.0, "verdict_reason": "error", "alt_stack_fits": None, "error_rows": 9}
    from finetune_doctor.facts.verdict import error_risk

    mem["error_risk"] = error_risk(mem)   # the case the message reads, as facts/config.py assembles it
    text = _message(rule, Evaluator({"mem": mem, "hw": {"gpu": "RTX-4090"}, "run": {"optim": "adamw_torch"}}))
    assert "with 7.0 % probability by the memory model, over the 5 % the doctor accepts" in text
    assert ("Runs reported like this one also ran out for reasons no memory term sees about 10.0 % of the time "
            "(all causes: 15.6 %).") in text
    # q = 0: one probability, no second sentence
    text = _message(rule, Evaluator({"mem": {**mem, "p_oom_other_pct": 0.0, "p_oom_pct": 7.0, "p_oom_text": "7.0"},
                                     "hw": {"gpu": "RTX-4090"}, "run": {"optim": "adamw_torch"}}))
    assert "with 7.0 % probability by the memory model" in text and "all causes" not in text
