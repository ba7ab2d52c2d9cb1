"""ProbeSpec: built from a resolved Run as LLaMA-Factory runs it, JSON round trip, and the stand-in config
(built from ModelArch fields) has the parameter count transformers builds for the real architecture."""

from __future__ import annotations

import json

import pytest

from finetune_doctor.arch import ModelArch
from finetune_doctor.probes.spec import ProbeSpec, spec_from_run, standin_config
from finetune_doctor.run import resolve_run

QWEN2_7B = ModelArch(name="Qwen2-7B", model_type="qwen2", hidden_size=3584, num_layers=28, num_heads=28,
                     num_kv_heads=4, intermediate_size=18944, vocab_size=152064, qkv_bias=True, dtype="bfloat16")


def test_spec_from_run_follows_lf_precision_and_lora_defaults():
    run = resolve_run({"finetuning_type": "lora", "bf16": True, "cutoff_len": 4096,
                       "per_device_train_batch_size": 2}, QWEN2_7B, None)
    spec = spec_from_run(run)
    # LF_FACTS §2: weights in the checkpoint dtype, trainable (adapters) upcast to fp32, bf16 autocast
    assert (spec.weights_dtype, spec.trainable_dtype, spec.autocast) == ("bfloat16", "float32", "bfloat16")
    # LF_FACTS §3: lora_target all, rank 8, alpha 2 x rank, GC on, use_reentrant_gc True
    assert spec.lora_target == ("all",) and spec.lora_rank == 8 and spec.lora_alpha_value == 16
    assert spec.gradient_checkpointing and spec.use_reentrant
    assert (spec.seq_len, spec.micro_batch, spec.num_layers) == (4096, 2, 28)
    assert spec.model_config["hidden_size"] == 3584 and spec.model_type == "qwen2"


def test_pure_bf16_keeps_trainable_params_in_checkpoint_dtype():
    run = resolve_run({"finetuning_type": "full", "pure_bf16": True}, QWEN2_7B, None)
    spec = spec_from_run(run)
    assert spec.trainable_dtype == "bfloat16" and spec.autocast is None


def test_pairwise_stage_doubles_the_batch():
    run = resolve_run({"stage": "dpo", "finetuning_type": "full", "bf16": True,
                       "per_device_train_batch_size": 3}, QWEN2_7B, None)
    spec = spec_from_run(run)
    assert spec.pairwise and spec.batch == 6 and spec.ref_model   # full DPO keeps a reference copy


def test_json_round_trip_is_identity():
    run = resolve_run({"finetuning_type": "lora", "lora_target": "q_proj,v_proj", "bf16": True}, QWEN2_7B, None)
    spec = spec_from_run(run)
    back = ProbeSpec.from_dict(json.loads(json.dumps(spec.as_dict())))
    assert back == spec and back.lora_target == ("q_proj", "v_proj")


@pytest.mark.parametrize("arch", [
    QWEN2_7B,
    ModelArch(name="llama", model_type="llama", hidden_size=512, num_layers=3, num_heads=8, num_kv_heads=2,
              intermediate_size=1024, vocab_size=1000),
    ModelArch(name="qwen3", model_type="qwen3", hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
              head_dim=128, intermediate_size=512, vocab_size=500, qk_norm=True, tie_word_embeddings=True),
    ModelArch(name="moe", model_type="qwen3_moe", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
              intermediate_size=256, vocab_size=300, qk_norm=True, num_experts=4, num_experts_per_tok=2,
              moe_intermediate_size=64),
], ids=["qwen2-7b", "llama", "qwen3-tied", "qwen3-moe"])
def test_standin_config_builds_the_same_parameter_count(arch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = standin_config(arch)
    mt = cfg.pop("model_type")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(mt, **cfg))
    built = sum(p.numel() for p in model.parameters())
    assert built == arch.total_params()
