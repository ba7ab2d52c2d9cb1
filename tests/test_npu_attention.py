"""SDPA on an Ascend NPU before transformers 4.57 materialises the attention scores (run/attention.py,
`npu_sdpa_materialises`): the run takes eager attention's saved-probability term, one half-precision copy per score.
"""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory.activations import activation_bytes_per_token_layer
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.attention import NPU_BOOL_MASK_FROM, npu_sdpa_materialises

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
