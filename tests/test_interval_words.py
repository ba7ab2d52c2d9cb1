"""The interval's words and figures are its own (session 14 read-through, mend B).

The shipped table's ``one_distribution.core`` is ``outcome``: the interval is made of uncertainty.py `model_dist`
(`core_dist`), not of the measurements' `error_dist`. The bias and spread FD606 quotes, and the basis it names, must
be that distribution's, and where a card is itself open, p_oom_model weighs several budgets: the text report must
not call it the share above one threshold. References: the quantiles are recomputed here from the reported
figures alone (the 16-84 % half-width that `ErrorDist.spread` defines, the 5-95 % that `LEVEL` defines).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.analyzers.memory import bands as mbands, uncertainty as u
from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
CASE22 = [str(ROOT / "fixtures" / "cases" / "022" / "config.yaml"), "model_name_or_path=Qwen/Qwen2-7B",
          "cutoff_len=4096", "--gpu", "8xA100-40GB", "--offline"]


def _json(args: list[str]) -> dict:
    r = CliRunner().invoke(main, ["check", *args, "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_the_shipped_table_builds_the_interval_on_the_outcome_spread():
    assert (u.table().get("one_distribution") or {}).get("core") == "outcome"


def test_fd606_quotes_the_spread_of_the_distribution_whose_quantiles_are_the_interval():
    """Case 022 on 8×A100-40GB (ZeRO-3, before the mend: "miss the measured peak by 29 %", the measurements'
    spread, beside an interval built on the outcome-fitted one, 21 %)."""
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.facts.mem import error_words, shape_of, verdict_facts
    from finetune_doctor.settings import Options

    rep = _json(CASE22)
    fd606 = next(f for f in rep["findings"] if f["code"] == "FD606")
    quoted = int(re.search(r"miss the measured peak by (\d+) % either way", fd606["message"]).group(1))
    asm = assemble_config(CASE22[0], tuple(CASE22[1:3]),
                          Options(command="check", paths=(CASE22[0],), gpu="8xA100-40GB", offline=True))
    mem = asm.memory
    core, measured = u.core_dist(mem.method, shape_of(mem)), u.error_dist(mem.method, shape_of(mem))
    assert quoted == round(100 * core.spread())
    assert abs(100 * measured.spread() - quoted) > 3   # the two spreads differ here (29 % against 21 %)
    assert error_words() in fd606["message"] and "the benchmarks' error" not in fd606["message"]
    # one prediction's interval, from the quoted figures alone: the distribution whose 16-84 % half-width is the
    # quoted spread and whose location is the quoted bias has 5-95 % points at the interval's ends (widths after)
    f = verdict_facts(mem, asm.hw, asm.run, None)
    assert f["error_spread_pct"] == pytest.approx(100 * core.spread(), rel=1e-12)
    assert f["error_bias_pct"] == pytest.approx(100 * core.mu, rel=1e-12)
    half = 0.5 * (core.quantile(0.8413447) - core.quantile(0.1586553))
    assert 100 * half == pytest.approx(f["error_spread_pct"], rel=1e-9)
    cls = mbands.run_class(asm.run, asm.hw.gpu)
    lo, hi = (mem.total * math.exp(core.quantile(p)) for p in (0.05, 0.95))
    assert mbands.widen((lo, hi), u.table(), cls) == pytest.approx(tuple(f["interval_gib"]), rel=1e-9)
    lo_m, hi_m = (mem.total * math.exp(measured.quantile(p)) for p in (0.05, 0.95))
    assert abs(mbands.widen((lo_m, hi_m), u.table(), cls)[1] / f["interval_gib"][1] - 1) > 0.02


def _text(args: list[str]) -> str:
    return " ".join(CliRunner().invoke(main, ["check", *args]).output.split())


def test_one_budget_the_line_says_the_share_above_the_threshold_is_p_oom_model():
    rep = _json(CASE22)
    m = rep["memory"]
    text = _text(CASE22)
    said = re.search(rf"([\d.]+) % of it above {m['oom_threshold_gib']:.2f} GiB", text)
    assert said and float(said.group(1)) == pytest.approx(100 * m["p_oom_model"], abs=0.51)   # printed rounded
    assert "that share is p_oom_model" in text and "no one share of the interval" not in text


def test_a_card_left_open_does_not_call_p_oom_model_the_share_above_one_threshold():
    """``--gpu 4xA100``: the variant (40 or 80 GB) is an open assumption, so p_oom_model averages two budgets;
    the line names the assumed card's threshold as that card's and says the probability is no one share."""
    args = [str(ROOT / "fixtures" / "trial15" / "cpt_deepspeed.yaml"), "--gpu", "4xA100", "--offline"]
    rep = _json(args)
    m = rep["memory"]
    assert any(a["name"] == "gpu-variant" for a in rep["assumptions"])   # the card is open
    text = _text(args)
    assert "that share is p_oom_model" not in text
    said = re.search(r"p_oom_model \(([\d.]+) %\) weighs the cards an open assumption may mean", text)
    assert said and float(said.group(1)) == pytest.approx(100 * m["p_oom_model"], abs=0.5)
    assert f"({m['oom_threshold_gib']:.2f} GiB on the card as assumed)" in text
