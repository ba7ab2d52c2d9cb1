"""On-the-fly quantization of an MoE whose routed experts are fused 3-D parameters (transformers 5, gpt-oss in 4.x):
transformers swaps only ``nn.Linear`` modules for bitsandbytes' (integrations/bitsandbytes.py:184 at 5.6.0), so
the experts stay 16-bit (analyzers/memory/qlora.py `fused_experts_left_unquantized`, bitsandbytes#1849); under
transformers 4.x the same experts are ``nn.Linear`` modules and are quantized. Hand-computed sizes."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import estimate
from finetune_doctor.analyzers.memory.qlora import dequant_transient_bytes
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.run import resolve_run

GIB = 2 ** 30
# Qwen3-30B-A3B's shapes cut to 2 layers (hidden 2048, 32 q / 4 kv heads of 128, 128 experts of width 768)
CONFIG = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 32,
          "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
          "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "torch_dtype": "bfloat16",
          "tie_word_embeddings": False, "max_position_embeddings": 40960, "decoder_sparse_step": 1,
          "mlp_only_layers": []}
V5 = arch_from_config(CONFIG, "qwen3-moe-shaped", "test", transformers_major=5)
V4 = arch_from_config(CONFIG, "qwen3-moe-shaped", "test", transformers_major=4)
BASE = {"stage": "sft", "finetuning_type": "lora", "quantization_bit": 4, "bf16": True, "cutoff_len": 1024,
        "lora_rank": 8, "lora_target": "all"}

ATTN = 2 * (2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048)        # q, k, v, o of both layers
EXPERTS = 2 * 128 * 3 * 2048 * 768                               # gate, up, down of 128 experts, both layers
NF4 = 0.5 + 1 / 64 + 4 / (64 * 256)


def _frozen_weight_bytes(arch, cfg) -> float:
    """The weights term less the fp32 adapter (which differs by layout: fused experts take no LoRA)."""
    from finetune_doctor.analyzers.memory.params import count_params

    run = resolve_run(cfg, arch, None)
    return estimate(run, None).per_gpu["weights"] * GIB - count_params(run).adapter * 4


def test_transformers5_fused_experts_stay_bf16_under_bnb():
    rest = V5.total_params() - ATTN - EXPERTS          # embeddings, head, norms, router
    assert _frozen_weight_bytes(V5, BASE) == pytest.approx(ATTN * NF4 + EXPERTS * 2 + rest * 2, rel=1e-9)


def test_transformers4_expert_linears_are_quantized():
    rest = V4.total_params() - ATTN - EXPERTS
    assert _frozen_weight_bytes(V4, BASE) == pytest.approx((ATTN + EXPERTS) * NF4 + rest * 2, rel=1e-9)


def test_unsloth_quantizes_fused_experts_itself():
    rest = V5.total_params() - ATTN - EXPERTS
    cfg = {**BASE, "use_unsloth": True}
    assert _frozen_weight_bytes(V5, cfg) == pytest.approx((ATTN + EXPERTS) * NF4 + rest * 2, rel=1e-9)


def test_no_dequantised_copy_of_an_unquantized_expert():
    # the largest 4-bit linear left is q_proj/o_proj (2048 x 4096), in bf16 with no cast: 16 MiB; an expert's
    # 2048 x 768 would be smaller anyway, so under transformers 4 the same q/o sets it
    assert dequant_transient_bytes(resolve_run(BASE, V5, None)) == 2048 * 4096 * 2
    assert dequant_transient_bytes(resolve_run(BASE, V4, None)) == 2048 * 4096 * 2


def _fsdp_weights(arch) -> float:
    """FSDP1 full shard over 2 GPUs, LoRA on q/v only (the same adapter in both layouts): the weights term."""
    from finetune_doctor.analyzers.memory.fsdp import fsdp_terms
    from finetune_doctor.analyzers.memory.params import count_params
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
    from finetune_doctor.run.engines import LaunchInputs

    acc = accelerate_config_from_values(
        {"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 2,
         "fsdp_config": {"fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                         "fsdp_sharding_strategy": "FULL_SHARD"}}, "acc.yaml")
    run = resolve_run({**BASE, "lora_target": "q_proj,v_proj"}, arch, parse_gpu_spec("2xA100-80GB"),
                      launch=LaunchInputs(acc))
    assert run.fsdp_version == 1
    return fsdp_terms(run, count_params(run), 1024)["weights"]


def test_fsdp_shards_the_unquantized_experts_at_two_bytes():
    # each layer's elements are even, so FULL_SHARD over 2 ranks keeps exactly half of every flat parameter; the
    # experts move from the packed 0.5 B (sharded) plus the unsharded quant state (1/64 + 4/16384 B) to 2 B (sharded)
    want = EXPERTS * (2.0 / 2 - (0.5 / 2 + (NF4 - 0.5)))
    assert _fsdp_weights(V5) - _fsdp_weights(V4) == pytest.approx(want, rel=1e-6)


def _qwen3_moe_check(tmp_path, env: str | None, extra: str = ""):
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen3-30B-A3B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "quantization_bit: 4\nlora_target: all\ncutoff_len: 1024\nper_device_train_batch_size: 1\n"
                   f"bf16: true\ndataset: alpaca_en_demo\ntemplate: qwen3\noutput_dir: out\n{extra}",
                   encoding="utf-8")
    env_path = None
    if env:
        env_path = tmp_path / "freeze.txt"
        env_path.write_text(env, encoding="utf-8")
    opts = Options(command="estimate", paths=(str(cfg),), gpu="1xA100-80GB", offline=True,
                   env_file=str(env_path) if env_path else None)
    asm = assemble_config(str(cfg), (), opts)
    return asm, {a.name: a for a in asm.assumptions}


def test_unknown_transformers_weighs_the_fused_layout(tmp_path):
    asm, got = _qwen3_moe_check(tmp_path, None)
    a = got["moe-expert-layout"]
    (label,) = a.alternatives
    five, _ = _qwen3_moe_check(tmp_path, "transformers==5.6.0\n")
    # the alternative is the run as a stated transformers 5 sizes it (the experts' 29 B parameters at 2 B, not
    # 0.52 B: some 40 GiB more)
    assert a.effect_gib[label] == pytest.approx(five.memory.total, rel=0.01)
    assert a.effect_gib[label] - asm.memory.total > 35


def test_stated_transformers_or_unsloth_leave_nothing_to_weigh(tmp_path):
    assert "moe-expert-layout" not in _qwen3_moe_check(tmp_path, "transformers==4.57.1\n")[1]
    assert "moe-expert-layout" not in _qwen3_moe_check(tmp_path, None, "use_unsloth: true\n")[1]
