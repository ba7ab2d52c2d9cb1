"""QLoRA's fp32 residual stream (analyzers/memory/qlora_residual.py): bitsandbytes' Linear4bit returns its input's
dtype (``.to(inp_dtype)``, nn/modules.py in every wheel 0.41.1-0.48.2; 8-bit's MatMul8bitLt alike), so an fp32 norm output (LLaMA's RMSNorm with
``upcast_layernorm``'s fp32 weight, or nn.LayerNorm under CUDA autocast) makes the MLP's output and every later
residual add fp32. Expected values are computed here by hand from that chain, not read back from the estimator."""

from __future__ import annotations

import sys
from pathlib import Path

from finetune_doctor.analyzers.memory.activations import (
    activation_bytes_per_token_layer, activation_terms, final_hidden_bytes, residual_bytes)
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.qlora_residual import fp32_residual
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.run import resolve_run

ROOT = Path(__file__).resolve().parents[1]
H, L, I, T = 512, 4, 1408, 3000


def arch(model_type: str = "llama", **kw):
    cfg = {"model_type": model_type, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": 8,
           "num_key_value_heads": 4, "intermediate_size": I, "vocab_size": 32000, "torch_dtype": "bfloat16",
           "max_position_embeddings": 32768, "tie_word_embeddings": False, **kw}
    return arch_from_config(cfg, f"tiny-{model_type}", "test")


QLORA = {"bf16": True, "finetuning_type": "lora", "quantization_bit": 4, "lora_target": "all",
         "per_device_train_batch_size": 1, "cutoff_len": T}


def run(model_type: str = "llama", **kw):
    return resolve_run({**QLORA, **kw}, arch(model_type), None)


def test_upcast_layernorm_makes_a_4bit_llama_residual_fp32():
    plain, upcast = run(), run(upcast_layernorm=True)
    assert not fp32_residual(plain) and residual_bytes(plain) == 2.0
    assert fp32_residual(upcast) and residual_bytes(upcast) == 4.0
    assert final_hidden_bytes(upcast) == 4.0


def test_checkpointed_inputs_of_all_layers_but_the_first_are_fp32():
    """Reentrant checkpointing keeps each layer's input: layers 1..L-1 receive the fp32 stream (2 more bytes per
    element), layer 0 the bf16 embedding output; the final norm's kept input is fp32 too (2 more bytes)."""
    plain, upcast = run(upcast_layernorm=True, quantization_bit=None), run(upcast_layernorm=True)
    a_plain = activation_terms(plain, count_params(plain), T)
    a_up = activation_terms(upcast, count_params(upcast), T)
    layers_part = T * H * (4 - 2) * (L - 1)
    final_part = T * H * (4 - 2)
    assert a_up.saved - a_plain.saved == layers_part + final_part == 12_288_000


def test_the_mlp_of_a_promoted_layer_saves_gate_silu_and_up_in_fp32():
    """gate and up return fp32 (their input is the fp32 norm output), SiLU and up stay fp32 for the product's
    backward: 3 tensors of I elements at 4 bytes instead of 2, against the same LoRA run on a 16-bit model."""
    lora16 = run(upcast_layernorm=True, quantization_bit=None)
    qlora = run(upcast_layernorm=True)
    assert activation_bytes_per_token_layer(qlora) - activation_bytes_per_token_layer(lora16) == 3 * I * 2 == 8448


def test_norms_that_return_the_input_dtype_do_not_promote():
    """Gemma's RMSNorm ends with ``output.type_as(x)`` (modeling_gemma.py:73-78); liger's returns X's dtype."""
    assert residual_bytes(run("gemma2", upcast_layernorm=True)) == 2.0
    assert not fp32_residual(run(upcast_layernorm=True, enable_liger_kernel=True))


def test_layernorm_under_autocast_promotes_without_upcast():
    """nn.LayerNorm runs in fp32 under CUDA autocast (torch's autocast op reference), so a 4-bit Falcon's
    stream is fp32 with no upcast key; the same model without quantization keeps autocast's bf16 outputs."""
    assert fp32_residual(run("falcon")) and residual_bytes(run("falcon")) == 4.0
    assert residual_bytes(run("falcon", quantization_bit=None)) == 2.0


def test_8bit_promotes_too_and_unsloth_does_not():
    """MatMul8bitLt returns its output in A's dtype (0.48.2 autograd/_functions.py:227); unsloth's kernels replace
    bitsandbytes' forward; HQQ is not bitsandbytes."""
    assert fp32_residual(run(upcast_layernorm=True, quantization_bit=8))
    assert not fp32_residual(run(upcast_layernorm=True, use_unsloth=True))
    assert not fp32_residual(run(upcast_layernorm=True, quantization_method="hqq"))


def test_8bit_backward_dequantises_the_largest_linear_once_in_the_input_dtype():
    """MatMul8bitLt.backward: ``state.CB.to(ctx.dtype_A, copy=True)`` — one out x in copy at 2 bytes under bf16
    autocast; the largest linear of the tiny model is gate/up/down, 512 x 1408. 4-bit holds its state-dtype weight
    (bf16 = the autocast dtype here, so no second cast)."""
    from finetune_doctor.analyzers.memory.qlora import dequant_transient_bytes

    assert dequant_transient_bytes(run(quantization_bit=8)) == 512 * 1408 * 2 == 1_441_792
    assert dequant_transient_bytes(run()) == 512 * 1408 * 2
    assert dequant_transient_bytes(run(quantization_bit=None)) == 0.0


def test_8bit_keeps_its_input_whatever_the_release():
    """MatMul8bitLt keeps ``ctx.tensors = (CAt, subA, A)`` in every release read (0.41.1 :431 ... 0.48.2 :239): with
    non-reentrant checkpointing every checkpointed layer keeps its 8-bit linears' inputs, as 4-bit < 0.43.2 does."""
    from finetune_doctor.analyzers.memory.qlora import keeps_input, saved_input_terms

    eight = run(quantization_bit=8, use_reentrant_gc=False)
    four = run(use_reentrant_gc=False)
    assert keeps_input(eight) and not keeps_input(four)      # 4-bit: no release named, 0.48.2 taken
    saved, _ = saved_input_terms(eight, T, range(0, L), range(L, L))
    # per layer: q/k/v's input (h), o_proj's (heads x head_dim = 512), gate/up's (h), down_proj's (I), 2 bytes each
    assert saved == T * L * 2 * (H + 512 + H + I) == 70_656_000
    assert saved_input_terms(four, T, range(0, L), range(L, L)) == (0.0, 0.0)


def test_trl_prepared_rows_get_upcast_layernorm_only_when_unsharded():
    """benchmarks/calib_data.py: TRL's SFTTrainer prepares an unsharded 4-bit model (fp32 norms, 16-bit head under
    bf16), which is LF's upcast_layernorm; under FSDP/ZeRO-3 it skips that preparation."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calib_data
    import parsecache
    from calib_data import config_for

    rows = {r["id"]: r for r in parsecache.calibration_rows(calib_data)}   # load_rows(), kept between processes
    assert config_for(rows["r4m-fms-mistral-7b-qlora-1x4"]).get("upcast_layernorm") is True
    assert "upcast_layernorm" not in config_for(rows["r4m-fms-mistral-7b-qlora-2x4"])   # FSDP: sharded
    assert "upcast_layernorm" not in config_for(rows["r4m-fms-mistral-7b-lora-1x4"])    # not quantized
    assert "upcast_layernorm" not in config_for(rows["peft-ds-z3-qlora-70b"])           # ZeRO-3: sharded


def test_lit_gpt_resource_table_rows_run_bnb_041_with_lora_dropout_and_keep_every_input_by_hand():
    """benchmarks/calib_data.py: the lit-gpt resource-table QLoRA rows (finetune/lora.py, 2023-10) state torch 2.1.0
    and bitsandbytes 0.41.1 (their notes; now their ``stack``) and run lit-gpt's ``lora_dropout = 0.05``
    (FRAMEWORK_CONFIG "lit-gpt"). 0.41.1's MatMul4Bit keeps its input (``ctx.tensors = (A, B)``, :523), there is no
    activation checkpointing, and the dropout hands lora_A a new tensor, so every 4-bit linear's input is kept in
    every layer: Llama-2-7B at the row's 1,304 tokens, bf16,
    (q/k/v's h 4096 + o_proj's 32 x 128 + gate/up's h 4096 + down_proj's I 11008) x 2 B x 1304 x 32 layers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calib_data
    import parsecache
    from calib_data import config_for, pins_for

    from finetune_doctor.analyzers.memory.qlora import keeps_input, saved_input_terms
    from finetune_doctor.readers.model.modelcfg import load_arch

    rows = {r["id"]: r for r in parsecache.calibration_rows(calib_data)}
    row = rows["litgpt-rt-7b-nf4"]
    assert pins_for(row) == {"torch": "2.1.0", "bitsandbytes": "0.41.1"}
    cfg = config_for(row)
    assert cfg["lora_dropout"] == 0.05 and cfg["disable_gradient_checkpointing"] is True
    llama2, _ = load_arch("meta-llama/Llama-2-7b-hf")
    r = resolve_run(cfg, llama2, None, stack_sources=(("bitsandbytes", "0.41.1", "row"),))
    assert keeps_input(r) and not r.gradient_checkpointing
    saved, recompute = saved_input_terms(r, 1304, range(0, 32), range(32, 32))
    assert (saved, recompute) == ((4096 + 32 * 128 + 4096 + 11008) * 2 * 1304 * 32, 0.0)
    assert saved == 1_944_190_976            # 1.81 GiB the 0.48.2 default left out
