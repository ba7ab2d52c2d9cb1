"""Weights as stored: quantization_config → QuantSpec → bytes, and what LLaMA-Factory does with each format.

Byte references are computed here from the buffers each library allocates (shapes written out below), not with
the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import compute_terms
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.quant import parse_quantization_config
from finetune_doctor.run.quantization import lf_treatment, stored_linear_bytes
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import GIB

LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "float16",
             "tie_word_embeddings": False}
# AutoAWQ's writer (awq/models/base.py save_quantized: quant_config with version "gemm")
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def _awq_gemm_bytes(i: int, o: int, g: int = 128) -> int:
    # WQLinear_GEMM buffers: qweight int32 [i, o/8], qzeros int32 [i/g, o/8], scales fp16 [i/g, o]
    return i * (o // 8) * 4 + (i // g) * (o // 8) * 4 + (i // g) * o * 2


def _gptq_bytes(i: int, o: int, bits: int, g: int) -> int:
    # QuantLinear buffers: qweight int32 [i*bits/32, o], qzeros int32 [i/g, o*bits/32], scales fp16 [i/g, o],
    # g_idx int32 [i]
    return (i * bits // 32) * o * 4 + (i // g) * (o * bits // 32) * 4 + (i // g) * o * 2 + i * 4


def test_awq_linear_bytes_equal_autoawq_buffers():
    arch = arch_from_config({**LLAMA3_8B, "quantization_config": AWQ}, "x", "s")
    lb = stored_linear_bytes(arch, arch.quant)
    h, kv, f = 4096, 1024, 14336
    per_layer = (_awq_gemm_bytes(h, h) * 2 + _awq_gemm_bytes(h, kv) * 2 + _awq_gemm_bytes(h, f) * 2
                 + _awq_gemm_bytes(f, h))
    assert lb.bytes == pytest.approx(32 * per_layer, rel=1e-12)


@pytest.mark.parametrize("bits,g", [(4, 128), (8, 32), (3, 64)])
def test_gptq_linear_bytes_equal_buffers(bits, g):
    arch = arch_from_config({**LLAMA3_8B, "num_hidden_layers": 1,
                             "quantization_config": {"quant_method": "gptq", "bits": bits, "group_size": g}}, "x", "s")
    lb = stored_linear_bytes(arch, arch.quant)
    h, kv, f = 4096, 1024, 14336
    ref = sum(_gptq_bytes(i, o, bits, g) for i, o in ((h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)))
    assert lb.bytes == pytest.approx(ref, rel=1e-12)


def test_fp8_block_and_per_tensor_and_mxfp4_and_bnb():
    fp8 = parse_quantization_config({"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3",
                                     "activation_scheme": "dynamic"})   # DeepSeek-V3 / Qwen3-*-FP8
    assert fp8.bytes_per_param(7168, 2048) == 1 + 4 / (128 * 128)
    assert parse_quantization_config({"quant_method": "fp8"}).bytes_per_param(10, 10) == 1.0
    mx = parse_quantization_config({"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    assert mx.bytes_per_param(2880, 2880) == 0.5 + 1 / 32          # 32 E2M1 elements share one E8M0 byte
    nf4 = parse_quantization_config({"quant_method": "bitsandbytes", "load_in_4bit": True,
                                     "bnb_4bit_use_double_quant": True, "bnb_4bit_quant_type": "nf4"})
    assert nf4.bytes_per_param(4096, 4096) == 0.5 + 1 / 64 + 4 / (64 * 256)
    int8 = parse_quantization_config({"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert int8.bytes_per_param(4096, 11008) == 1 + 4 / 4096
    hqq = parse_quantization_config({"quant_method": "hqq", "quant_config": {
        "weight_quant_params": {"nbits": 4, "group_size": 64}}})
    assert hqq.bytes_per_param(4096, 4096) == 0.5 + 4 / 64
    assert parse_quantization_config({"quant_method": "eetq"}).bytes_per_param(4096, 4096) == 1 + 2 / 4096
    ct = parse_quantization_config({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}}},
        "ignore": ["lm_head"]})
    assert ct.bytes_per_param(4096, 4096) == 0.5 + 2 / 128


def test_gpt_oss_mxfp4_quantizes_only_experts():
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 2,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 1000,
           "num_local_experts": 32, "num_experts_per_tok": 4, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    arch = arch_from_config(cfg, "openai/gpt-oss-20b", "s")
    lb = stored_linear_bytes(arch, arch.quant)
    experts = 2 * 32 * 3 * 2880 * 2880
    assert lb.quantized == experts
    t = lf_treatment(arch.quant)
    assert t.dequantized and not t.lora_only and t.zero3_ok


def test_gpt_oss_without_a_named_dtype_trains_in_bf16():
    """gpt-oss's config.json names no dtype; LF loads with torch_dtype='auto' and dequantizes MXFP4 (loader.py:154,
    quantization.py:107-112), so the weights are bf16: 2 bytes per parameter, not float32's 4 (LF#8872, where the
    doctor said "stored in float32" and predicted 88 GiB for a run the user trained in about 50 GB on an A100)."""
    arch, _ = load_arch("openai/gpt-oss-20b", offline=True)
    assert arch.dtype == "bfloat16"
    run = resolve_run({"finetuning_type": "lora", "lora_target": "all", "bf16": True}, arch, None)
    assert run.ptq_dequantized and run.weights_dtype == "bfloat16"
    c = count_params(run)
    assert compute_terms(run).weights == pytest.approx(2 * c.base + 4 * c.adapter, rel=1e-3)


def test_awq_run_weights_are_about_a_third_of_bf16_and_quantization_bit_is_ignored():
    """The issue's T4 case: Llama-3-8B-AWQ was sized as 15 GiB of bf16; stored, it is about 5.5 GiB."""
    arch = arch_from_config({**LLAMA3_8B, "quantization_config": AWQ}, "TechxGenus/Meta-Llama-3-8B-Instruct-AWQ", "s")
    run = resolve_run({"finetuning_type": "lora", "quantization_bit": 4, "fp16": True}, arch, None)
    assert run.ptq_method == "awq" and run.quantization_bit is None and run.quantization_bit_ignored
    assert run.ptq_lora_only and not run.ptq_dequantized and run.quantized
    w = compute_terms(run).weights / GIB
    linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    ref = (32 * (_awq_gemm_bytes(4096, 4096) * 2 + _awq_gemm_bytes(4096, 1024) * 2 + _awq_gemm_bytes(4096, 14336) * 2
                 + _awq_gemm_bytes(14336, 4096))
           + (arch.total_params() - linear) * 2 + count_params(run).adapter * 4) / GIB  # + fp32 LoRA adapters
    assert w == pytest.approx(ref, rel=0.01) and 5.0 < w < 6.0


def test_fp8_checkpoint_is_dequantized_to_the_checkpoint_dtype():
    cfg = {**LLAMA3_8B, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    run = resolve_run({"finetuning_type": "full", "bf16": True}, arch_from_config(cfg, "x", "s"), None)
    assert run.ptq_dequantized and not run.quantized and run.weights_dtype == "bfloat16"
    assert run.linear_weight_bytes is None and not run.ptq_lora_only


def test_a_name_suffix_with_one_usual_layout_sizes_the_weights_as_an_assumption(tmp_path):
    """Issue #21, trial 2: an AWQ 70B named by its repo id was headlined at its bf16 size (131.8 GiB). An ending
    with one usual stored layout (-AWQ: AWQ 4-bit g128) sizes the weights so, marked `from_name`; the report
    names it as the ``weights-quantization`` assumption (tests/test_check_named.py)."""
    arch, doc = load_arch("TechxGenus/Meta-Llama-3-8B-Instruct-AWQ", base_dir=str(tmp_path))
    assert doc is None and arch.quant is not None and arch.quant.from_name
    assert (arch.quant.method, arch.quant.bits, arch.quant.group_size) == ("awq", 4, 128)
    run = resolve_run({"finetuning_type": "lora"}, arch, None)
    assert not run.quantization_unknown and run.quantized and run.ptq_method == "awq"
    assert "weights sized as awq 4-bit g128" in arch.notes and "(an assumption)" in arch.notes
    # -GPTQ-Int8 and -bnb-4bit too; an -FP8 ending has no one layout (and LF dequantizes FP8): unknown, as before
    gptq, _ = load_arch("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", base_dir=str(tmp_path))
    assert (gptq.quant.method, gptq.quant.bits, gptq.quant.from_name) == ("gptq", 8, True)
    bnb, _ = load_arch("unsloth/Meta-Llama-3.1-8B-bnb-4bit", base_dir=str(tmp_path))
    assert (bnb.quant.method, bnb.quant.bits, bnb.quant.from_name) == ("bitsandbytes", 4, True)
    fp8, _ = load_arch("neuralmagic/Meta-Llama-3-8B-Instruct-FP8", base_dir=str(tmp_path))
    assert fp8.quant.method == "unknown" and not fp8.quant.from_name
    run = resolve_run({"finetuning_type": "lora"}, fp8, None)
    assert run.quantization_unknown and not run.quantized and run.weights_dtype == fp8.dtype
    assert "quantization unknown" in fp8.notes


def test_rule_facts_for_pre_quantized_checkpoints():
    import yaml

    from finetune_doctor.engine.expr import Evaluator  # the rule language the rule files use

    rules = Path(__file__).resolve().parent.parent / "rules"
    arch = arch_from_config({**LLAMA3_8B, "quantization_config": AWQ}, "x", "s")
    cfg = {"finetuning_type": "full", "quantization_bit": 4}
    run = resolve_run(cfg, arch, None)
    # every namespace is present in the pipeline (None when not computed): quantization-unknown reads mem
    ev = Evaluator({"cfg": cfg, "run": run.facts(), "model": {"dtype": arch.dtype, "name": "x"}, "mem": None})
    for name, expect in (("quantization-needs-lora", True), ("quantization-bit-ignored", True),
                         ("quantization-unknown", False)):
        rule = yaml.safe_load((rules / f"{name}.yaml").read_text())
        assert ev.truth(rule["when"]) is expect, name
        msg = rule["message"]   # a plain template, or {text, suffix: {text, when}} (README: rule messages)
        for text in [msg] if isinstance(msg, str) else [msg["text"], msg.get("suffix", {}).get("text", "")]:
            assert "{" not in ev.render(text)
