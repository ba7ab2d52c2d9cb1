"""liger-kernel as LLaMA-Factory applies it: which patches a run gets (run/savers.py), the fused linear
cross-entropy's terms (analyzers/memory/logits.py) against liger's own chunk rule and against the simulate probe,
and the real report it was built for (hiyouga/LlamaFactory#7055)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.analyzers.memory import estimate
from finetune_doctor.analyzers.memory.logits import flce_chunk_tokens, flce_terms, logit_terms
from finetune_doctor.cli import main
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import Hardware

# every test here builds and runs torch models (seconds each): outside the fast lane (pytest -m "not slow")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ISSUE_7055 = ROOT / "fixtures" / "savers" / "lf_issue_7055" / "config.yaml"


def tiny(model_type: str = "llama", **kw):
    """A small decoder with a large vocabulary, so that the logits matter (llama-style config.json)."""
    cfg = {"model_type": model_type, "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 4, "intermediate_size": 1408, "vocab_size": 32000, "torch_dtype": "bfloat16",
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, **kw}
    return arch_from_config(cfg, f"tiny-{model_type}", "test")


def run_of(cfg, arch=None, hw=None):
    return resolve_run({"bf16": True, "enable_liger_kernel": True, **cfg}, arch or tiny(), hw)


@pytest.mark.parametrize("model_type, stage, extra, flce, off", [
    ("llama", "sft", {}, True, None),
    ("qwen2", "pt", {}, True, None),
    ("llama", "dpo", {}, False, "stage"),          # loader.py:142 require_logits
    ("llama", "kto", {}, False, "stage"),
    ("llama", "rm", {}, False, "stage"),
    ("llama", "sft", {"use_dft_loss": True}, False, "loss"),     # compute_loss_func pops the labels
    ("llama", "sft", {"label_smoothing_factor": 0.1}, False, "label_smoothing"),
    ("granite", "sft", {}, False, "patch"),        # liger's granite patch: cross_entropy only
])
def test_fused_loss_only_where_lf_and_liger_run_it(model_type, stage, extra, flce, off):
    r = run_of({"stage": stage, **extra}, tiny(model_type))
    assert r.liger_kernel and r.liger_flce is flce and r.liger_flce_off == off


def test_model_type_without_lf_patch_patches_nothing():
    r = run_of({}, tiny("qwen2_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256))
    assert r.liger_unpatched and not (r.liger_kernel or r.liger_flce or r.liger_rms_norm or r.liger_swiglu)
    assert logit_terms(r, 4096).forward == logit_terms(r.with_(liger_unpatched=False), 4096).forward


def test_glm4_keeps_its_own_rope_and_gemma_fuses_geglu():
    assert not run_of({}, tiny("glm4")).liger_rope
    g = run_of({}, tiny("gemma2", head_dim=64))
    assert g.liger_swiglu and g.liger_rms_norm and g.liger_rope


def test_chunk_rule_is_liger_s():
    # liger's own worked example (ops/fused_linear_cross_entropy.py:61-63): BT = 4096*4, V = 32000, H = 4096 ->
    # inc_factor 8, chunk_size 2048
    assert flce_chunk_tokens(4096 * 4, 4096, 32000) == 2048
    # next power of two of ceil(BT / ceil(V/H)): 51200 tokens, Qwen2.5-14B (H 5120, V 152064): 30 -> 2048
    assert flce_chunk_tokens(51200, 5120, 152064) == 2048
    assert flce_chunk_tokens(100, 4096, 4096) == 100   # one chunk, sliced at BT


def test_fused_loss_terms_are_byte_exact_for_lora():
    r = run_of({"finetuning_type": "lora", "cutoff_len": 2048, "per_device_train_batch_size": 2})
    T, H, V = 4096, 512, 32000
    chunk = flce_chunk_tokens(T, H, V)   # 64 rows
    t = flce_terms(r, T, 2.0)
    # grad_input (bf16) + fp32 loss_1d + bool mask + int64 shifted labels + one chunk of logits and its @W
    assert t.forward == T * H * 2 + T * (4 + 1 + 8) + chunk * (V + H) * 2
    assert t.backward == T * H * 2        # lm_head frozen: no grad_weight
    full = run_of({"finetuning_type": "full", "cutoff_len": 2048, "per_device_train_batch_size": 2})
    tf = flce_terms(full, T, 4.0)
    # full tuning in fp32: grad_weight zeros_like(weight) in fp32, updated in place by addmm (torch >= 2.8)
    assert tf.backward == T * H * 4 + V * H * 4


def test_older_torch_pays_the_mm_float_temporaries():
    full = run_of({"finetuning_type": "full"})
    old = full.with_(flce_addmm_out_dtype=False)
    T, H, V = 4096, 512, 32000
    assert flce_terms(old, T, 4.0).forward - flce_terms(full, T, 4.0).forward == V * H * (2 + 4)


def _estimate_json(*args: str) -> dict:
    res = CliRunner().invoke(main, ["estimate", str(ISSUE_7055), "--format", "json", *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


def test_issue_7055_long_context_lora_with_liger_is_not_an_oom(monkeypatch):
    """hiyouga/LlamaFactory#7055: Qwen2.5-14B LoRA, ZeRO-3 offload, liger on, cutoff 12800 × micro batch 4 on
    2 × A100-80GB (torch 2.4.0, transformers 4.44.0) trained, at 72782 MiB on the busier card. Without liger's
    fused loss the estimate had 101.5 GiB of logits (14 B per token and vocabulary entry, the pre-4.49 shifted
    copy included) and called it an OOM; since session 11 it has 87.0 GiB: transformers before 4.46 upcasts inside
    the forward, so the half-precision logits are a temporary freed at once (12 B; analyzers/memory/logits.py)."""
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    stack = ["--gpu", "2xA100-80GB", "--torch", "2.4.0", "--transformers", "4.44.0"]
    on = _estimate_json(*stack)
    off = _estimate_json(*stack, "enable_liger_kernel=false")
    assert off["memory"]["per_gpu_gib"]["logits"] == pytest.approx(4 * 12800 * 152064 * 12 / 2**30, abs=0.1)
    assert off["memory"]["fits"] is False
    # the run trained: no moment of the training step may exceed what nvidia-smi showed on the busier card, and
    # liger's fused loss leaves no logits in them
    steps = {k: v for k, v in on["breakdown"]["moments_gib"].items() if "of step" in k}
    assert max(steps.values()) < 72782 / 1024
    assert max(steps.values()) < off["breakdown"]["moments_gib"]["loss of step 2"] - 60
    # evaluating every 200 steps, liger materialises the logits again (its fused loss runs in training mode only):
    # 4 eval sequences filling cutoff_len are 4 x 12800 x 152064 x 12 B (transformers 4.44 upcasts the logits inside
    # the forward, the half-precision ones a freed temporary, and copies the shifted ones), the moment the doctor warns
    # about; real eval batches pad only to their longest sample
    ev = on["breakdown"]["moments_gib"]["first evaluation, at step 200"]
    assert ev > max(steps.values())
    assert on["memory"]["per_gpu_gib"]["logits"] == pytest.approx(4 * 12800 * 152064 * 12 / 2**30, abs=0.01)


def test_issue_7055_resolves_the_qwen2_patch():
    arch, _ = load_arch("Qwen/Qwen2.5-14B-Instruct")
    hw = Hardware(gpu="A100-80GB", num_gpus=2, capacity_gib=79.15, bf16=True, source="flag")
    r = resolve_run({"enable_liger_kernel": True, "stage": "sft", "bf16": True, "finetuning_type": "lora",
                     "per_device_train_batch_size": 4, "cutoff_len": 12800}, arch, hw)
    assert (r.liger_flce, r.liger_rms_norm, r.liger_swiglu, r.liger_rope) == (True, True, True, True)
    assert estimate(r, hw).per_gpu["logits"] < 1.0


# ---- fake-mode simulation with the liger stand-ins (probes/liger.py) against the analytic terms -----------------

def _compare(cfg):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run

    hw = Hardware(gpu="H100-80GB", num_gpus=1, capacity_gib=79.1, bf16=True, source="flag",
                  compute_capability=(9, 0))
    r = run_of(cfg, hw=hw)
    est = estimate(r, hw)
    sim = simulate(spec_from_run(r))
    analytic = est.peak_allocated - est.per_gpu.get("buffers", 0.0)
    return analytic, sim


BASE = {"per_device_train_batch_size": 2, "cutoff_len": 2048}


@pytest.mark.slow
@pytest.mark.parametrize("label, cfg", [
    ("lora GC", {**BASE, "finetuning_type": "lora"}),
    ("lora no GC", {**BASE, "finetuning_type": "lora", "disable_gradient_checkpointing": True}),
    ("full GC", {**BASE, "finetuning_type": "full"}),
    ("full no GC", {**BASE, "finetuning_type": "full", "disable_gradient_checkpointing": True}),
    ("freeze first layer", {**BASE, "finetuning_type": "freeze", "freeze_trainable_layers": -1}),
    ("oft", {**BASE, "finetuning_type": "oft"}),
])
def test_fused_loss_analytic_agrees_with_simulation_within_3_percent(label, cfg):
    analytic, sim = _compare(cfg)
    assert analytic / sim.peak_gib == pytest.approx(1.0, abs=0.03), (analytic, sim.peak_gib, sim.segment)
    assert any("liger-kernel simulated by stand-ins" in n for n in sim.notes)
    # the logits are never materialised: the loss's bytes stay far below HF's T·V·(2 + 4 + 4) of logits
    T, V = 2 * 2048, 32000
    assert sim.by_category.get("logits", 0) < 0.15 * T * V * 10


@pytest.mark.slow
def test_stand_ins_compute_the_same_loss_and_gradients_as_torch():
    """On real CPU tensors the stand-ins are a correct step: the fused loss equals lm_head + cross-entropy, and
    the RMSNorm and SwiGLU stand-ins match their eager formulas in value and gradient."""
    torch = pytest.importorskip("torch")
    from finetune_doctor.probes.liger import _functions

    FLCE, RMS, SILU = _functions()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 16, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (37,), generator=g)
    t[3] = -100
    loss = FLCE.apply(x, w, t, True)
    loss.backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(x2 @ w2.t(), t, ignore_index=-100)
    ref.backward()
    assert torch.allclose(loss.double(), ref, atol=1e-6)
    assert torch.allclose(x.grad, x2.grad) and torch.allclose(w.grad, w2.grad)
    a = torch.randn(5, 7, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(5, 7, dtype=torch.float64, generator=g, requires_grad=True)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    SILU.apply(a * 1, b * 1).sum().backward()
    (torch.nn.functional.silu(a2) * b2).sum().backward()
    assert torch.allclose(a.grad, a2.grad) and torch.allclose(b.grad, b2.grad)
    h = torch.randn(6, 8, dtype=torch.float64, generator=g, requires_grad=True)
    nw = torch.randn(8, dtype=torch.float64, generator=g, requires_grad=True)
    h2, nw2 = h.detach().clone().requires_grad_(), nw.detach().clone().requires_grad_()
    RMS.apply(h * 1, nw, 1e-6, 0.0).sum().backward()
    (nw2 * h2 * torch.rsqrt(h2.pow(2).mean(-1, keepdim=True) + 1e-6)).sum().backward()
    assert torch.allclose(h.grad, h2.grad) and torch.allclose(nw.grad, nw2.grad)
