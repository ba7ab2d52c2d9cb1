"""SDPA on an Ascend NPU before transformers 4.57 materialises the attention scores (run/attention.py,
`npu_sdpa_materialises`): the run takes eager attention's saved-probability term, one half-precision copy per score.
"""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory.activations import activation_bytes_per_token_layer
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.attention import LF_NPU_FA2_FROM, NPU_BOOL_MASK_FROM, lf_drops_fa2_on_npu, npu_sdpa_materialises

L3 = "meta-llama/Meta-Llama-3-8B"
CFG = {"bf16": True, "finetuning_type": "lora", "cutoff_len": 1024, "per_device_train_batch_size": 2}


def _run(gpus: str, transformers: str | None, **cfg):
    arch, _ = load_arch(L3)
    return resolve_run({**CFG, **cfg}, arch, parse_gpu_spec(gpus), stack={"transformers": transformers})


@pytest.mark.parametrize("gpus, version, want", [
    ("8x910B", (4, 48, 3), True),
    ("8x910B", (4, 56, 2), True),
    ("8x910B", (4, 57, 0), False),      # the boolean mask reaches FlashAttentionScore (transformers#41143)
    ("8x910B", None, False),            # unknown: taken as current; the transformers assumption names the version
    ("Ascend-910C", (4, 51, 0), True),
    ("8xA100-80GB", (4, 48, 3), False),
])
def test_which_runs_take_the_composite_path(gpus, version, want):
    assert NPU_BOOL_MASK_FROM == (4, 57)
    assert npu_sdpa_materialises(parse_gpu_spec(gpus), version) is want


def test_an_old_transformers_on_a_910b_runs_sdpa_as_eager_with_half_probabilities():
    old = _run("8x910B", "4.48.3")
    assert (old.attention, old.attention_saved) == ("eager", "half")
    assert any("torch_npu's composite path" in n for n in old.notes)
    for run in (_run("8x910B", "4.57.0"), _run("8xA100-80GB", "4.48.3")):
        assert run.attention == "sdpa" and not any("composite path" in n for n in run.notes)
    # fa2 and an explicit eager are left as asked
    assert _run("8x910B", "4.48.3", flash_attn="fa2").attention == "fa2"
    assert _run("8x910B", "4.48.3", flash_attn="disabled").attention_saved == "fp32+cast"


def test_the_probabilities_per_token_and_layer_by_hand():
    old, new = _run("8x910B", "4.48.3"), _run("8x910B", "4.57.0")
    # eager keeps e·heads·seq bytes per token (one bf16 probability row per head), SDPA a 4-byte log-sum-exp per
    # head: 2 × 32 × 1024 − 4 × 32 = 65,408 B more per token and layer for Llama-3-8B at cutoff 1024
    diff = activation_bytes_per_token_layer(old, 3, False) - activation_bytes_per_token_layer(new, 3, False)
    assert diff == 2 * 32 * 1024 - 4 * 32 == 65408


def _run_lf(gpus: str, llamafactory: str | None, transformers: str | None, **cfg):
    arch, _ = load_arch(L3)
    sources = (("llamafactory", llamafactory, "--env"),) if llamafactory else ()
    return resolve_run({**CFG, **cfg}, arch, parse_gpu_spec(gpus), stack={"transformers": transformers},
                       stack_sources=sources)


@pytest.mark.parametrize("gpus, lf, want", [
    ("8x910B", (0, 9, 0), True),
    ("8x910B", (0, 9, 3), True),        # 0.9.3 model_utils/attention.py:59-62: flash_attn package only
    ("8x910B", (0, 9, 4), False),       # 0.9.4 :72-76 accepts is_torch_npu_available() (LlamaFactory#9397)
    ("8x910B", None, False),            # unknown: taken as current
    ("8xA100-80GB", (0, 9, 0), False),  # a CUDA card with flash_attn installed keeps fa2 in every release
])
def test_which_lf_releases_drop_fa2_on_an_npu(gpus, lf, want):
    assert LF_NPU_FA2_FROM == (0, 9, 4)
    assert lf_drops_fa2_on_npu(parse_gpu_spec(gpus), lf) is want


def test_fa2_under_lf_093_on_a_910b_is_transformers_default_and_with_an_old_transformers_keeps_probabilities():
    # LF 0.9.3 + transformers 4.51: fa2 → SDPA (transformers' default) → torch_npu's composite path → eager's term
    old = _run_lf("8x910B", "0.9.3", "4.51.3", flash_attn="fa2")
    assert (old.attention, old.attention_saved) == ("eager", "half")
    assert any("LLaMA-Factory 0.9.3" in n and "transformers' default (sdpa)" in n for n in old.notes)
    # the same transformers under LF 0.9.4 keeps fa2; LF 0.9.3 with transformers 4.57 runs the fused SDPA
    assert _run_lf("8x910B", "0.9.4", "4.51.3", flash_attn="fa2").attention == "fa2"
    assert _run_lf("8x910B", "0.9.3", "4.57.0", flash_attn="fa2").attention == "sdpa"
    # a CUDA card under the old LF keeps fa2, and sdpa/auto are not touched by the LF release
    assert _run_lf("8xA100-80GB", "0.9.3", "4.51.3", flash_attn="fa2").attention == "fa2"
    assert _run_lf("8x910B", "0.9.3", "4.57.0", flash_attn="sdpa").attention == "sdpa"


def test_fa2_dropped_on_an_npu_costs_the_probabilities_by_hand():
    # Llama-3-8B at cutoff 1024 on a 910B, LF 0.9.3, transformers 4.51: eager keeps one bf16 probability per head
    # and key, flash attention a 4-byte log-sum-exp per head: 2 × 32 × 1024 − 4 × 32 = 65,408 B per token and layer
    old = _run_lf("8x910B", "0.9.3", "4.51.3", flash_attn="fa2")
    new = _run_lf("8x910B", "0.9.4", "4.51.3", flash_attn="fa2")
    diff = activation_bytes_per_token_layer(old, 3, False) - activation_bytes_per_token_layer(new, 3, False)
    assert diff == 2 * 32 * 1024 - 4 * 32 == 65408
