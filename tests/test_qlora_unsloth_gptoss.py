"""gpt-oss's MXFP4 checkpoint under ``use_unsloth`` + ``quantization_bit: 4`` (run/quantization.py
`unsloth_nf4_copy`): LLaMA-Factory hands the load to unsloth, whose mapper (from 2025.8.2) swaps the checkpoint for
its bitsandbytes NF4 copy with per-expert 4-bit linears; LF's own load (or an unsloth before 2025.8.2) dequantises
the MXFP4 experts to bf16 and ignores quantization_bit. With no unsloth release stated, the NF4 copy is taken and
LF's own load is weighed as the ``unsloth-gpt-oss`` assumption (facts/assumestack.py). Hand-computed sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import estimate
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.run import resolve_run
from finetune_doctor.run.quantization import unsloth_nf4_copy

GIB = 2 ** 30
# gpt-oss-20b's shapes (openai/gpt-oss-20b config.json) cut to 2 layers; the checkpoint's quantization_config as
# published: MXFP4 experts, attention, router, embeddings and head left in bf16
CONFIG = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 2, "num_attention_heads": 64,
          "head_dim": 64, "num_key_value_heads": 8, "intermediate_size": 2880, "num_local_experts": 32,
          "num_experts_per_tok": 4, "vocab_size": 201088, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
          "max_position_embeddings": 131072, "layer_types": ["sliding_attention", "full_attention"],
          "sliding_window": 128,
          "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
              "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
ARCH = arch_from_config(CONFIG, "gpt-oss-shaped", "test")
BASE = {"stage": "sft", "finetuning_type": "lora", "quantization_bit": 4, "use_unsloth": True, "fp16": True,
        "cutoff_len": 1024, "lora_rank": 8, "lora_target": "all"}

# by hand, per layer: q 2880x4096, k and v 2880x512, o 4096x2880; 32 experts x (gate, up, down) 2880x2880
LINEAR = 2 * (2 * 2880 * 4096 + 2 * 2880 * 512 + 32 * 3 * 2880 * 2880)          # 1,645,608,960
NF4 = 0.5 + 1 / 64 + 4 / (64 * 256)       # packed nibble + uint8 absmax per 64 + fp32 absmax per 256 blocks
# LoRA r8 on q, k, v, o (the experts are fused 3-D tensors, no target): r x (in + out) each, fp32
ADAPTER = 2 * 8 * ((2880 + 4096) + 2 * (2880 + 512) + (4096 + 2880))


def _weights(stack: dict[str, str]) -> float:
    run = resolve_run(BASE, ARCH, None, stack=stack)
    return estimate(run, None).per_gpu["weights"] * GIB


def test_nf4_copy_counts_every_decoder_linear_at_four_bits():
    other = ARCH.total_params() - LINEAR          # embeddings, head, norms, router, biases, sinks: 16-bit
    want = LINEAR * NF4 + other * 2 + ADAPTER * 4
    assert _weights({"unsloth": "2025.8.5"}) == pytest.approx(want, rel=1e-9)
    assert _weights({}) == pytest.approx(want, rel=1e-9)      # unknown release: the mapper's copy is taken


def test_lf_own_load_and_old_unsloth_dequantise_to_bf16():
    want = ARCH.total_params() * 2 + ADAPTER * 4
    assert _weights({"unsloth": "2025.8.1"}) == pytest.approx(want, rel=1e-9)   # before the mapper knew gpt-oss
    run = resolve_run({**BASE, "use_unsloth": False}, ARCH, None)
    assert run.ptq_method == "mxfp4" and run.quantization_bit is None
    assert estimate(run, None).per_gpu["weights"] * GIB == pytest.approx(want, rel=1e-9)


def test_only_four_bit_unsloth_loads_of_mxfp4_gpt_oss_are_swapped():
    assert unsloth_nf4_copy(ARCH, BASE, None)
    assert not unsloth_nf4_copy(ARCH, {**BASE, "quantization_bit": 8}, None)
    assert not unsloth_nf4_copy(ARCH, {**BASE, "quantization_bit": None}, None)
    assert not unsloth_nf4_copy(ARCH, {**BASE, "use_unsloth": False}, None)
    assert not unsloth_nf4_copy(ARCH, BASE, (2025, 8, 1))
    plain = arch_from_config({k: v for k, v in CONFIG.items() if k != "quantization_config"}, "bf16 copy", "test")
    assert not unsloth_nf4_copy(plain, BASE, None)       # an unquantized gpt-oss: bitsandbytes as LF runs it


def _assumption_names(tmp_path: Path, env: str | None) -> dict[str, object]:
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: openai/gpt-oss-20b\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "quantization_bit: 4\nuse_unsloth: true\nlora_target: all\ncutoff_len: 1024\n"
                   "per_device_train_batch_size: 1\nfp16: true\ndataset: alpaca_en_demo\ntemplate: gpt\n"
                   "output_dir: out\n", encoding="utf-8")
    env_path = None
    if env:
        env_path = tmp_path / "freeze.txt"
        env_path.write_text(env, encoding="utf-8")
    opts = Options(command="estimate", paths=(str(cfg),), gpu="1xT4-16GB", offline=True,
                   env_file=str(env_path) if env_path else None)
    asm = assemble_config(str(cfg), (), opts)
    return {a.name: a for a in asm.assumptions}


def test_unknown_release_weighs_lf_own_load(tmp_path):
    got = _assumption_names(tmp_path, None)
    a = got["unsloth-gpt-oss"]
    (label,) = a.alternatives
    assert label.startswith("unsloth 2025.8.1 or older")
    # the dequantised 20.9 B parameters alone (39 GiB) are over a T4's 14.75 GiB
    assert a.effect_gib[label] > 39 and a.effect_verdict[label] == "oom"
    assert a.moves_verdict


def test_stated_release_leaves_nothing_to_assume(tmp_path):
    got = _assumption_names(tmp_path, "unsloth==2025.8.5\ntorch==2.8.0\ntransformers==4.56.0\n")
    assert "unsloth-gpt-oss" not in got
