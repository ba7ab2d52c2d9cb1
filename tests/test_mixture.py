"""p_oom and the 90 % interval over the open assumptions (issue 21): a mixture over each open assumption's assumed
value and its evaluated alternatives, weighted by the table's ``assumption_weights`` (facts/assume.py `mixture`,
analyzers/memory/uncertainty.py `mixture_p_oom`, analyzers/memory/predictive.py `mixture_interval`).

References: the law of total probability (a mixture's tail is the weighted sum of its components' tails, its CDF
the weighted sum of theirs), evaluated against the single-component arithmetic of `assess`; the run of a real
LLaMA-Factory config (LF's examples/train_lora/llama3_lora_sft.yaml shape at cutoff_len 8192) re-run by the memory
model under the alternative the assumption names.
"""

from __future__ import annotations

import math

import pytest

from finetune_doctor.analyzers.memory import uncertainty as u
from finetune_doctor.analyzers.memory.predictive import mixture_interval
from finetune_doctor.facts import assume
from finetune_doctor.types import Assumption, Hardware

DIST = u.ErrorDist("analytic", "default", 0.05, 0.15, 6, 10)


def test_one_component_is_the_assessment():
    a = u.assess(40.0, None, "analytic", "default")
    lo, hi = mixture_interval([(1.0, 40.0, None)], a.dist)
    assert lo == pytest.approx(a.interval_gib[0], rel=1e-12) and hi == pytest.approx(a.interval_gib[1], rel=1e-12)
    assert u.mixture_p_oom([(1.0, 40.0, 44.0)], DIST) == pytest.approx(u.p_oom(40.0, 44.0, DIST))


def test_mixture_is_the_weighted_sum_and_its_interval_spans_the_components():
    comps = [(0.7, 60.0, 70.0), (0.3, 20.0, 70.0)]
    p = u.mixture_p_oom(comps, DIST)
    assert p == pytest.approx(0.7 * u.p_oom(60.0, 70.0, DIST) + 0.3 * u.p_oom(20.0, 70.0, DIST))
    assert u.p_oom(20.0, 70.0, DIST) < p < u.p_oom(60.0, 70.0, DIST)
    lo, hi = mixture_interval(comps, DIST)
    # the mixture CDF at the bounds is 5 % and 95 %
    cdf = lambda x: sum(w * DIST.cdf(math.log(x / t)) for w, t, _ in comps)  # noqa: E731
    assert cdf(lo) == pytest.approx(0.05, abs=1e-9) and cdf(hi) == pytest.approx(0.95, abs=1e-9)
    one_lo, one_hi = mixture_interval([(1.0, 60.0, None)], DIST)
    assert lo < 20.0 * math.exp(DIST.quantile(0.5)) < one_lo and hi <= one_hi   # reaches down to the short case


def _a(name: str, effect: dict[str, float]) -> Assumption:
    return Assumption(name=name, value="assumed", source="test", alternatives=tuple(effect), effect_gib=effect,
                      effect_verdict={k: "fits" for k in effect}, moves_verdict=True)


def test_components_multiply_independent_assumptions(monkeypatch):
    monkeypatch.setattr(u, "table", lambda: {"assumption_weights": {"default": 0.6, "sample-lengths": 0.5}})
    hw = Hardware(gpu="A100-80GB", num_gpus=1, capacity_gib=79.15, bf16=True, source="flag")
    items = [_a("sample-lengths", {"samples of 512 tokens": 25.0}), _a("launcher", {"accelerate": 55.0}),
             _a("cutoff-len", {"1024": 10.0}),            # not open: a value LF fills in for sure
             _a("lf-version", {})]                        # nothing evaluated: no component
    comps = assume.mixture(50.0, hw, items)
    assert sum(w for w, _t, _b in comps) == pytest.approx(1.0)
    got = sorted((round(w, 6), round(t, 6)) for w, t, _b in comps)
    assert got == sorted([(0.3, 50.0), (0.2, 55.0), (0.3, 25.0), (0.2, 27.5)])   # 25 · 55/50 = 27.5
    assert {b for _w, _t, b in comps} == {79.15}
    # the table's weight 1 (the default without weights): the assumed case alone
    monkeypatch.setattr(u, "table", lambda: {})
    assert assume.mixture(50.0, hw, items) == [(1.0, 50.0, 79.15)]


def test_a_gpu_variant_alternative_changes_the_budget(monkeypatch):
    monkeypatch.setattr(u, "table", lambda: {"assumption_weights": {"default": 0.5}})
    hw = Hardware(gpu="A100-80GB", num_gpus=1, capacity_gib=79.15, bf16=True, source="flag", in_use_gib=[1.0])
    comps = assume.mixture(50.0, hw, [_a("gpu-variant", {"A100-40GB": 50.0})], gpu_spec="A100")
    budgets = sorted(b for _w, _t, b in comps)
    from finetune_doctor.hardware.catalog import variants

    small = next(g.capacity_gib for g in variants("A100") if g.name == "A100-40GB")
    assert budgets == pytest.approx([small - 1.0, 79.15 - 1.0])


CONFIG = """\
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 8192
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
output_dir: saves/llama3-8b/lora/sft
"""


def test_check_reports_the_mixture_when_the_table_weighs_alternatives(tmp_path, monkeypatch):
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    path = tmp_path / "train.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    opts = Options(command="check", paths=(str(path),), gpu="A100-80GB", offline=True)
    base = assemble_config(str(path), (), opts).memory
    # as committed the weights are whatever the calibration chose; force the assumed case alone (no prior on the
    # sample lengths, every weight 1), then a constant-weight mixture
    table = {k: v for k, v in u.table().items() if k != "sample_lengths_prior"}
    monkeypatch.setattr(u, "table", lambda: {**table, "assumption_weights": {"default": 1.0}})
    alone = assemble_config(str(path), (), opts)
    mem = alone.memory
    assert mem.p_oom == pytest.approx(mem.details["p_oom_assumed"]) and len(mem.details["p_oom_components"]) == 1
    sl = next(a for a in alone.assumptions if a.name == "sample-lengths")
    # the longest sample is evaluated at 512 tokens and every doubling below cutoff_len 8192
    assert list(sl.effect_gib) == [f"samples of {n} tokens" for n in (512, 1024, 2048, 4096)]
    totals = [sl.effect_gib[f"samples of {n} tokens"] for n in (512, 1024, 2048, 4096)]
    assert totals == sorted(totals) and totals[-1] < mem.total
    monkeypatch.setattr(u, "table", lambda: {**table, "assumption_weights": {"default": 1.0, "sample-lengths": 0.5}})
    mixed = assemble_config(str(path), (), opts).memory
    assert mixed.total == pytest.approx(mem.total) and mixed.verdict == mem.verdict
    from finetune_doctor.facts.mem import shape_of

    from finetune_doctor.analyzers.memory import predictive

    d = u.core_dist(mem.method, shape_of(mem))
    q = u.unexplained_share(mem.method)
    # p_oom is read on the one distribution whose 5-95 % is the reported interval (session 14, predictive.py): the
    # components' totals 0.5 / 0.125 each, each run out when its need (the run's ratio of need to total) passes
    # the card, i.e. its shown peak passes 79.15·total/need
    ratio = mem.need / mem.total
    assert ratio < 1.0
    comps = [(0.5, mem.total, 79.15)] + [(0.125, t, 79.15) for t in totals]
    dp = predictive.build(comps, d, tuple(mixed.interval_gib))
    assert mixed.p_oom_model == pytest.approx(dp.share_above(79.15 / ratio), abs=1e-9)
    assert mixed.p_oom == pytest.approx(u.all_cause(dp.share_above(79.15 / ratio), q), rel=1e-6)
    assert mixed.interval_gib[0] < mem.interval_gib[0] and mixed.interval_gib[1] <= mem.interval_gib[1] + 1e-6
    assert base.total == pytest.approx(mem.total)
    # the log-uniform prior on the longest sample: the assumed value and each evaluated length weigh the same
    monkeypatch.setattr(u, "table", lambda: {**table, "assumption_weights": {"default": 1.0},
                                             "sample_lengths_prior": {"form": "log-uniform"}})
    even = assemble_config(str(path), (), opts).memory
    comps = [(0.2, mem.total, 79.15)] + [(0.2, t, 79.15) for t in totals]
    want = u.all_cause(predictive.build(comps, d, tuple(even.interval_gib)).share_above(79.15 / ratio), q)
    assert even.p_oom == pytest.approx(want, rel=1e-6)


def test_length_weights_of_the_priors():
    # log-uniform: every doubling the same share, the assumed value (fills cutoff_len) one of them
    w0, ws = u.length_weights([512, 1024, 2048], u.LOG_UNIFORM)
    assert w0 == pytest.approx(0.25) and ws == {512: 0.25, 1024: 0.25, 2048: 0.25}
    assert u.length_weights([], u.LOG_UNIFORM) == (1.0, {})
    # lognormal with median 1024: half the mass at or below 1024, the rest above 2048 and between
    w0, ws = u.length_weights([512, 1024, 2048], (1024.0, 1.0))
    assert ws[512] + ws[1024] == pytest.approx(0.5)
    assert w0 == pytest.approx(1.0 - 0.5 * math.erfc(-math.log(2.0) / math.sqrt(2.0)))
    assert w0 + sum(ws.values()) == pytest.approx(1.0)


def test_seven_doublings_keep_every_length_above_a_tenth():
    # the ladder's longest case (cutoff_len 65536 and above): 7 evaluated lengths and the assumed value, 1/8 each, so
    # a run out of memory at cutoff_len alone keeps p_oom >= 0.125 and one that fits at 512 tokens p_oom <= 0.875
    lengths = [assume.SHORT_SAMPLE_TOKENS << k for k in range(assume.SAMPLE_LADDER_STEPS)]
    w0, ws = u.length_weights(lengths, u.LOG_UNIFORM)
    assert min([w0, *ws.values()]) == pytest.approx(1 / 8) and max(lengths) == 32768
