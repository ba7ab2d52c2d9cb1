"""One predictive distribution for the interval and p_oom (issue #21, session 14; analyzers/memory/predictive.py).

The references are independent of the code under test: Student's t quantiles from the printed table (t_{0.95, 3} =
2.353, t_{0.95, 10} = 1.812: any statistics text, e.g. NIST/SEMATECH e-Handbook 1.4.2.3 'Critical values of the
Student's t distribution'), and the reported interval and budget of whole checks, against which the share is
recomputed from the reported quantities alone.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import predictive, uncertainty as u
from finetune_doctor.analyzers.memory.uncertainty import ErrorDist
from mixkit import random_mixtures


def _t(dof: int, scale: float = 0.1) -> ErrorDist:
    return ErrorDist("analytic", "default", 0.0, scale, dof, 10)


def test_share_above_a_printed_t_quantile_is_five_percent():
    """One component, no widths: D is total·e^ε with ε = 0.1·t_3. The printed t_{0.95,3} = 2.353 puts 5 % above
    10·e^(0.2353) GiB (the table's 4 digits: ±3e-5 in probability); t_{0.95,10} = 1.812 likewise for ν = 10."""
    for dof, tq in ((3, 2.353), (10, 1.812)):
        dp = predictive.build([(1.0, 10.0, None)], _t(dof))
        assert dp.share_above(10.0 * math.exp(0.1 * tq)) == pytest.approx(0.05, abs=1e-4)
        assert dp.interval()[1] == pytest.approx(10.0 * math.exp(0.1 * tq), rel=1e-4)
        assert dp.interval()[0] == pytest.approx(10.0 * math.exp(-0.1 * tq), rel=1e-4)
        assert dp.share_above(10.0) == pytest.approx(0.5, abs=1e-9)   # the median of a symmetric ε


def test_the_interval_is_the_distributions_5_and_95_percent_points_after_any_widths():
    """Random mixtures, error classes and end moves (the class's widths): D's 5 % and 95 % points are the ends it
    was built on (to 1e-6 relative), its share above them 95 % / 5 % (to 1e-6), monotone in the budget."""
    dists = [u.error_dist(m, s) for m in ("analytic", "simulated") for s in ("default", "moe", "zero")]
    for rng, comps in random_mixtures(14, 200):
        dist = rng.choice(dists)
        lo, hi = predictive.mixture_interval(comps, dist)
        final = (lo * math.exp(-rng.uniform(-0.3, 0.8)), hi * math.exp(rng.uniform(-0.3, 0.8)))
        if final[0] >= final[1]:
            continue
        dp = predictive.build(comps, dist, final)
        assert dp.quantile(0.05) == pytest.approx(final[0], rel=1e-6)
        assert dp.quantile(0.95) == pytest.approx(final[1], rel=1e-6)
        assert dp.share_above(final[1]) == pytest.approx(0.05, abs=1e-6)
        assert dp.share_above(final[0]) == pytest.approx(0.95, abs=1e-6)
        cards = sorted(rng.uniform(0.5, 150) for _ in range(6))
        shares = [dp.share_above(c) for c in cards]
        # non-increasing in the card, to the rounding of 1 − CDF (2e-16 where the CDF is 1 within a bit)
        assert all(a >= b - 1e-12 for a, b in zip(shares, shares[1:])), shares
        for c, s in zip(cards, shares):
            assert (s > 0.05) == (c < final[1]) or abs(c - final[1]) < 1e-6 * c


def test_p_over_reads_the_budget_in_shown_terms():
    """p_oom_model with need = ratio·total: P(need·e^ε > budget) = share of D above budget / ratio, per component
    (two budgets: the gpu-variant assumption's cards)."""
    dist = _t(3)
    comps = [(0.6, 30.0, 40.0), (0.4, 30.0, 80.0)]
    dp = predictive.build(comps, dist, (20.0, 50.0))
    ratio = 0.9
    got = dp.p_over([40.0, 80.0], ratio)
    one = predictive.build([(1.0, 30.0, None)], dist, (20.0, 50.0))
    want = 0.6 * one.share_above(40.0 / ratio) + 0.4 * one.share_above(80.0 / ratio)
    assert got == pytest.approx(want, abs=1e-12)
    assert dp.p_over([None, 80.0], ratio) is None
    assert predictive.threshold(40.0, 0.8) == pytest.approx(50.0)


CARDS = ["4xL40S", "4xL4", "2xA100-80GB", "8xH100-80GB", "4090", "A100-40GB", "2xA10G"]
MODELS = ["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct", "google/gemma-3-4b-pt",
          "Qwen/Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"]


def _config(rng: random.Random, tmp: Path) -> Path:
    ft = rng.choice(["lora", "full"])
    lines = [f"model_name_or_path: {rng.choice(MODELS)}", "stage: sft", "do_train: true", f"finetuning_type: {ft}",
             "dataset: alpaca_en_demo", "template: qwen", f"cutoff_len: {rng.choice([512, 2048, 4096, 8192])}",
             f"per_device_train_batch_size: {rng.choice([1, 2, 4])}", "gradient_accumulation_steps: 2",
             "bf16: true", "output_dir: saves/x"]
    if ft == "lora" and rng.random() < 0.3:
        lines.append("quantization_bit: 4")
    if rng.random() < 0.3:
        lines.append("deepspeed: examples/deepspeed/ds_z3_config.json")
    cfg = tmp / "run.yaml"
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return cfg


@pytest.mark.parametrize("seed", range(12))
def test_p_oom_is_the_share_of_the_intervals_distribution_for_many_configs(tmp_path, seed):
    """Whole estimates of random LF configs on random cards, the data not scanned (the sample lengths open, so
    most are mixtures): p_oom_model equals the share above the budget of the distribution rebuilt from the
    reported interval and components (to 1e-6); it is over 5 % exactly when the interval's upper end is above
    the threshold; p_oom = (1 − q)·p_oom_model + q/2; ``fits`` exactly when the upper end is under it."""
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.facts.mem import need_ratio, shape_of
    from finetune_doctor.settings import Options

    rng = random.Random(seed)
    cfg = _config(rng, tmp_path)
    gpu = rng.choice(CARDS)
    asm = assemble_config(str(cfg), (), Options(command="estimate", paths=(str(cfg),), gpu=gpu, offline=True))
    mem = asm.memory
    assert mem is not None and mem.interval_gib and mem.p_oom_model is not None
    comps = [c for c in mem.details["p_oom_components"] if c[0] > 0 and c[1] > 0] or [(1.0, mem.total, None)]
    budget = asm.hw.capacity_gib - (max(asm.hw.in_use_gib) if asm.hw.in_use_gib else 0.0)
    ratio = need_ratio(mem)
    thr = budget / ratio
    assert mem.details["oom_threshold_gib"] == pytest.approx(thr, rel=1e-9)
    dp = predictive.build(comps, u.core_dist(mem.method, shape_of(mem)), tuple(mem.interval_gib))
    if all(b == pytest.approx(budget) for _w, _t, b in mem.details["p_oom_components"] if b is not None):
        assert mem.p_oom_model == pytest.approx(dp.share_above(thr), abs=1e-6)
        assert (mem.p_oom_model > 0.05) == (mem.interval_gib[1] > thr)
        deciding = mem.details.get("deciding_assumption")
        if mem.verdict in ("fits", "at-risk") and not deciding and mem.details.get("alt_stack_fits") is not False:
            assert (mem.verdict == "fits") == (mem.interval_gib[1] <= thr)
    assert dp.quantile(0.05) == pytest.approx(mem.interval_gib[0], rel=1e-6)
    assert dp.quantile(0.95) == pytest.approx(mem.interval_gib[1], rel=1e-6)
    q = u.unexplained_share(mem.method)
    assert mem.p_oom == pytest.approx((1 - q) * mem.p_oom_model + q / 2, abs=1e-12)


def test_a_table_whose_core_is_the_outcome_spread_builds_the_interval_on_it(monkeypatch):
    """``one_distribution: {"core": "outcome"}`` (written by benchmarks/calibrate.py with widths fitted on that
    core): the interval of one prediction is the quantiles of model_dist (λ·s and τ, uncertainty.py `widened`)."""
    table = {**u.table(), "one_distribution": {"core": "outcome"}}
    monkeypatch.setattr(u, "table", lambda: table)
    u.error_dist.cache_clear()
    try:
        d = u.model_dist("analytic", "default/unquantized")
        a = u.assess(20.0, 40.0, "analytic", "default/unquantized", 19.0)
        assert a.interval_gib[1] == pytest.approx(20.0 * math.exp(d.quantile(0.95)), rel=1e-9)
        lam, tau = u.oom_spread()
        e = u.error_dist("analytic", "default/unquantized")
        assert d.scale == pytest.approx(math.hypot(lam * e.scale, tau), rel=1e-9)
    finally:
        u.error_dist.cache_clear()


def test_mixture_quantile_equals_a_plain_bisection():
    """The false-position search gives the plain bisection's quantile (to 1e-9 ln units) on random mixtures,
    one component included, at the interval's ends and the median."""
    dist = u.error_dist("analytic", "default")

    def bisect(comps, p):
        logs = [math.log(t) for _w, t in comps]
        lo, hi = min(logs) + dist.quantile(p) - 1e-6, max(logs) + dist.quantile(p) + 1e-6
        while hi - lo > 1e-12:
            mid = 0.5 * (lo + hi)
            if sum(w * dist.cdf(mid - lg) for (w, _t), lg in zip(comps, logs)) < p:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    for _rng, mix in random_mixtures(14, 60, most=5, high=400.0):
        comps = tuple((w, t) for w, t, _b in mix)
        for p in (0.05, 0.5, 0.95):
            assert predictive.mixture_quantile(comps, dist, p) == pytest.approx(bisect(comps, p), abs=1e-9)
