"""Checkpointing and the other savers LLaMA-Factory applies (run/savers.py, analyzers/memory/activations.py):
unsloth's offloaded checkpoints and their host RAM, reentrant or not, frozen layers above trainable ones,
upcasting, shift short attention, fp8, KTransformers' CPU experts."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import activation_bytes_per_token_layer, estimate
from finetune_doctor.analyzers.memory.activations import (
    activation_terms, offloaded_checkpoint_bytes, residual_bytes)
from finetune_doctor.analyzers.memory.params import count_params, kt_expert_params
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import GIB, Hardware


def tiny(**kw):
    cfg = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 4, "intermediate_size": 1408, "vocab_size": 32000, "torch_dtype": "bfloat16",
           "max_position_embeddings": 32768, "tie_word_embeddings": False, **kw}
    return arch_from_config(cfg, "tiny-llama", "test")


ARCH = tiny()
BASE = {"bf16": True, "finetuning_type": "lora", "per_device_train_batch_size": 1, "cutoff_len": 3000}


def test_unsloth_checkpoints_move_to_pinned_host_memory():
    """checkpointing.py:75 moves each layer input to the CPU with a non-blocking copy (pinned), which the
    caching host allocator rounds up to a power of two (CachingHostAllocator.h:300-309)."""
    r = resolve_run({**BASE, "use_unsloth_gc": True}, ARCH, None)
    plain = resolve_run(BASE, ARCH, None)
    T = 3000
    per_layer = T * 512 * 2                                      # 3,072,000 B -> 4 MiB pinned block
    assert offloaded_checkpoint_bytes(r, T, 4) == 4 * (1 << 22) != 4 * per_layer
    a, b = activation_terms(r, count_params(r), T), activation_terms(plain, count_params(plain), T)
    assert b.saved - a.saved == 4 * per_layer                    # the GPU no longer keeps the layer inputs
    assert a.host == 4 * (1 << 22) and b.host == 0.0
    # host RAM per node: one set per process
    hw = Hardware(gpu="A100-80GB", num_gpus=8, capacity_gib=79.15, bf16=True, source="flag")
    r8, p8 = (resolve_run(c, ARCH, hw) for c in ({**BASE, "use_unsloth_gc": True}, BASE))
    assert (estimate(r8, hw).host - estimate(p8, hw).host) * GIB == pytest.approx(8 * 4 * (1 << 22))


def test_use_unsloth_offloads_its_checkpoints_too():
    # LF loads unsloth with use_gradient_checkpointing="unsloth" (model_utils/unsloth.py:47, :77)
    r = resolve_run({**BASE, "use_unsloth": True}, ARCH, None)
    assert r.use_unsloth and activation_terms(r, count_params(r), 3000).host > 0


def test_reentrant_default_and_forced_off_under_kt():
    assert resolve_run(BASE, ARCH, None).use_reentrant_gc is True
    assert resolve_run({**BASE, "use_reentrant_gc": False}, ARCH, None).use_reentrant_gc is False
    moe = tiny(model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256)
    assert resolve_run({**BASE, "use_kt": True}, moe, None).use_reentrant_gc is False


def test_disable_gradient_checkpointing_keeps_every_layer():
    on = resolve_run(BASE, ARCH, None)
    off = resolve_run({**BASE, "disable_gradient_checkpointing": True}, ARCH, None)
    T = 3000
    a_on, a_off = activation_terms(on, count_params(on), T), activation_terms(off, count_params(off), T)
    per = activation_bytes_per_token_layer(off)
    assert a_off.saved - a_on.saved == T * 4 * per - T * 4 * 512 * residual_bytes(on)


def test_frozen_layers_above_the_trainable_ones_keep_their_activations():
    """LF checkpoints only layers with trainable parameters (checkpointing.py:100-123): with the first layer
    trainable, the three frozen layers above run unchecked and keep what they save."""
    first = resolve_run({"bf16": True, "finetuning_type": "freeze", "freeze_trainable_layers": -1,
                         "per_device_train_batch_size": 1, "cutoff_len": 3000}, ARCH, None)
    last = resolve_run({"bf16": True, "finetuning_type": "freeze", "freeze_trainable_layers": 1,
                        "per_device_train_batch_size": 1, "cutoff_len": 3000}, ARCH, None)
    T = 3000
    frozen = activation_bytes_per_token_layer(first, 1, frozen=True)
    assert frozen > 0
    diff = activation_terms(first, count_params(first), T).saved - activation_terms(last, count_params(last), T).saved
    assert diff == T * 3 * frozen


def test_badam_peak_is_the_lowest_block():
    r = resolve_run({"finetuning_type": "full", "use_badam": True, "per_device_train_batch_size": 1,
                     "cutoff_len": 3000}, ARCH, None)
    t = activation_terms(r, count_params(r), 3000)
    assert t.saved > 3000 * 3 * activation_bytes_per_token_layer(r, 1, frozen=True)


def test_shift_attn_applies_to_llama_on_transformers_4_45_to_4_47_only():
    eager = {**BASE, "flash_attn": "disabled", "shift_attn": True}
    on = resolve_run(eager, ARCH, None, stack={"transformers": "4.46.3"})
    new = resolve_run(eager, ARCH, None)            # today's transformers: LF's patch raises
    assert on.shift_attn and not new.shift_attn and new.shift_attn_version_error
    qwen = tiny(model_type="qwen2")
    q = resolve_run(eager, qwen, None, stack={"transformers": "4.46.3"})
    assert q.shift_attn_unsupported and not q.shift_attn
    # eager attention keeps fp32 probabilities and their cast per head over the group (a quarter of the row)
    off = resolve_run({**eager, "shift_attn": False}, ARCH, None, stack={"transformers": "4.46.3"})
    d = activation_bytes_per_token_layer(off) - activation_bytes_per_token_layer(on)
    assert d == (4 + 2) * 8 * (3000 - 750)


def test_upcast_layernorm_with_liger_keeps_the_residual_dtype():
    # liger's RMSNorm returns Y in X's dtype (rms_norm.py:449): an fp32 norm weight does not promote the output
    r = resolve_run({**BASE, "upcast_layernorm": True, "enable_liger_kernel": True}, ARCH, None)
    hf = resolve_run({**BASE, "upcast_layernorm": True}, ARCH, None)
    assert activation_bytes_per_token_layer(r) < activation_bytes_per_token_layer(hf)


@pytest.mark.parametrize("backend, expect", [(None, "torchao"), ("auto", "torchao"), ("te", "te")])
def test_fp8_backend_resolution_and_no_memory_change(backend, expect):
    cfg = {**BASE, "fp8": True, **({"fp8_backend": backend} if backend else {})}
    r = resolve_run(cfg, ARCH, None)
    assert r.fp8 and r.fp8_backend == expect
    # LF's FP8 path converts the decoder's linears' matmuls; parameters, states and saved inputs keep their dtype
    assert estimate(r).peak_allocated == estimate(resolve_run(BASE, ARCH, None)).peak_allocated


def test_ktransformers_moves_routed_experts_to_the_host():
    arch, _ = load_arch("Qwen/Qwen3-30B-A3B")
    cfg = {"bf16": True, "finetuning_type": "lora", "lora_target": "all", "per_device_train_batch_size": 1,
           "cutoff_len": 2048}
    kt = resolve_run({**cfg, "use_kt": True}, arch, None)
    gpu = resolve_run(cfg, arch, None)
    ckt, cgpu = count_params(kt), count_params(gpu)
    experts = kt_expert_params(arch)
    assert ckt.kt_expert_params == experts > 0.8 * arch.total_params()
    assert cgpu.frozen - ckt.frozen == experts
    assert ckt.adapter == cgpu.adapter - cgpu.expert_lora_params
    e_kt, e_gpu = estimate(kt), estimate(gpu)
    # off the GPU: the bf16 expert weights and their fp32 LoRA
    assert e_gpu.per_gpu["weights"] - e_kt.per_gpu["weights"] == pytest.approx(
        (experts * 2 + cgpu.expert_lora_params * 4) / GIB)
    # the host holds the bf16 experts and their LoRA with fp32 gradients and AdamW states
    assert (e_kt.host - e_gpu.host) * GIB >= experts * 2 + cgpu.expert_lora_params * 16


@pytest.mark.parametrize("layout", ["dense", "moe-dense-first", "moe-mlp-only", "sliding-mixed"])
def test_per_kind_activation_bytes_equal_the_per_layer_ones(layout):
    # activation_terms takes each layer kind's bytes once (layers_bytes_per_token); every layer must still get
    # what activation_bytes_per_token_layer gives it, trainable or frozen, under the settings that read the
    # layer's linears (LoRA targets, dropout, DoRA) or its MLP (experts)
    from finetune_doctor.analyzers.memory.activations import layers_bytes_per_token

    arch = {"dense": ARCH,
            "moe-dense-first": tiny(model_type="deepseek_v3", num_hidden_layers=5, n_routed_experts=8,
                                    num_experts_per_tok=2, moe_intermediate_size=256, n_shared_experts=1,
                                    first_k_dense_replace=2, kv_lora_rank=64, q_lora_rank=96,
                                    qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32),
            "moe-mlp-only": tiny(model_type="qwen3_moe", num_hidden_layers=5, num_experts=8, num_experts_per_tok=2,
                                 moe_intermediate_size=256, mlp_only_layers=[1, 3], decoder_sparse_step=1),
            "sliding-mixed": tiny(model_type="gemma3_text", num_hidden_layers=6, head_dim=64, sliding_window=512,
                                  layer_types=["sliding_attention"] * 5 + ["full_attention"]),
            }[layout]
    L = arch.num_layers
    kinds = {(arch.attention_kind(i), arch.mlp_kind(i)) for i in range(L)}
    assert len(kinds) == (1 if layout == "dense" else 2), kinds     # the layouts really mix kinds
    for extra in ({}, {"lora_target": "q_proj,v_proj", "lora_dropout": 0.1}, {"use_dora": True},
                  {"finetuning_type": "freeze", "freeze_trainable_layers": 2}, {"finetuning_type": "full"}):
        r = resolve_run({**BASE, **extra}, arch, None)
        for frozen in (False, True):
            assert layers_bytes_per_token(r, range(L), frozen) == \
                [activation_bytes_per_token_layer(r, i, frozen) for i in range(L)], (extra, frozen)
