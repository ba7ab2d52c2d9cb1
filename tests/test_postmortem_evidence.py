"""Findings that say only what the evidence supports, and name it (issue #25): an OOM inside
``scaled_dot_product_attention`` with a mask, a pre-clip grad-norm spike the loss never felt, a NaN grad norm
under a falling loss, learning-rate advice without the method. Fixtures: fixtures/postmortem/evidence/ (HF
Trainer's metric dicts as ``Trainer.log`` prints them; torch >= 2.1's OOM message; Python 3.10/3.11 traceback
frames of transformers' qwen2 / qwen2_vl modeling and integrations/sdpa_attention.py)."""

from __future__ import annotations

import os

from pmhelp import diagnose_dir


FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem", "evidence")


def run(name: str, d: str | None = None):
    return diagnose_dir(d or os.path.join(FIX, name))


def test_oom_inside_sdpa_with_an_explicit_mask_names_the_mask_path_not_the_batch():
    f = run("sdpa_mask").findings[0]
    assert f.name == "cuda-oom"
    assert "explicit attention mask (the traceback shows `attention_mask`)" in f.message
    assert "a smaller batch does not cure one long sample" in f.message
    assert "per_device_train_batch_size" not in f.message


def test_one_huge_request_inside_sdpa_is_the_math_kernels_score_matrix():
    f = run("sdpa_math").findings[0]
    assert "one request of 48.00 GiB, 61 % of the card" in f.message and "explicit attention mask (" not in f.message


def test_a_clipped_grad_norm_spike_the_loss_never_felt_is_not_a_bad_batch():
    r = run("grad_spike_clipped")
    f = next(x for x in r.findings if x.name == "grad-norm-explosion")
    assert "did not reach the weights" in f.message and "check the batch" not in f.fix.title
    a = {x.name: x for x in r.assumptions}
    assert a["max-grad-norm"].value == 1.0


def test_a_spike_that_the_loss_felt_still_points_at_the_batch(tmp_path):
    src = open(os.path.join(FIX, "grad_spike_clipped", "train.log"), encoding="utf-8").read().splitlines()
    src[25] = src[25].replace("'loss': 1.3700", "'loss': 4.9100")        # the log after the spike
    (tmp_path / "train.log").write_text("\n".join(src) + "\n")
    f = next(x for x in run("", str(tmp_path)).findings if x.name == "grad-norm-explosion")
    assert "check the batch" in f.fix.title and "did not reach" not in f.message


def test_nan_grad_norm_under_a_falling_loss_is_not_training_going_non_finite():
    r = run("grad_nan_only")
    assert not any(f.name == "nan-loss" for f in r.findings)
    w = [e for e in r.timeline if e.kind == "warning"]
    assert w and "the logged norm, not the training, went non-finite" in w[0].detail


def test_learning_rate_without_the_method_states_both_and_the_assumption(tmp_path):
    lines = [f"{{'loss': {2.0 - 0.02 * s:.4f}, 'grad_norm': {0.8:.4f}, 'learning_rate': 0.01, 'epoch': {s / 100:.2f}}}"
             for s in range(1, 8)]
    lines += ["{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.01, 'epoch': 0.08}"] * 3
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    r = run("", str(tmp_path))
    f = next(x for x in r.findings if x.name == "learning-rate-too-high-confirmed")
    assert "100× the usual 1e-4 for LoRA, 1000× the usual 1e-5 for a full fine-tune" in f.message
    assert "give --config" in f.message
    assert [a.name for a in r.assumptions] == ["finetuning-method"]


def test_the_plot_draws_nan_hidden_zero_losses_as_gaps_with_a_marker(tmp_path, monkeypatch):
    import math

    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    lines = [f"{{'loss': {2.0 - 0.05 * s:.4f}, 'grad_norm': 0.8, 'learning_rate': 1e-05, 'epoch': {s / 100:.2f}}}"
             for s in range(1, 6)]
    lines += ["{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.06}"] * 3
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    diagnose_dir(tmp_path, plot=str(tmp_path / "p.png"))
    ax = next(a for a in figs[-1].axes if a.get_ylabel() == "loss")
    ys = list(ax.get_lines()[0].get_ydata())
    assert ys[:5] == [1.95, 1.9, 1.85, 1.8, 1.75] and all(math.isnan(y) for y in ys[5:])   # gaps, not zeros
    assert any("nan logged as 0.0 (3)" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(figs[-1])
