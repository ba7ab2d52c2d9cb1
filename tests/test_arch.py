"""Exact parameter counts of `ModelArch` against the transformers models themselves.

Each case builds a transformers configuration with ``AutoConfig.for_model``, instantiates the model on the meta
device (no memory, no weights, well under a second) and compares ``sum(p.numel())`` with what
`arch_from_config` + `ModelArch` compute from ``config.to_dict()``: the whole model, every decoder layer, the
embeddings and the vision tower. Tiny shapes keep the builds fast; the mid-size cases use real published
shapes (their full-size counts are also checked against the model cards in test_modelcfg.py).
"""

from __future__ import annotations

import pytest

from finetune_doctor.arch import ModelArch
from finetune_doctor.readers.model.vision import (
    qwen2_5_vl_vision_params,
    qwen2_vl_vision_params,
    qwen3_vl_vision_params,
    siglip_vision_params,
)
from finetune_doctor.readers.model.modelcfg import arch_from_config

from lazyskip import importorskip_when_run  # noqa: E402

torch = transformers = None
_needs_torch = importorskip_when_run("torch", "transformers", bind=globals())   # at the first test (lazyskip.py)

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=320)

# (model_type, config kwargs); every model type the normaliser knows that transformers ships itself
CASES = {
    "llama": ("llama", dict(TINY)),
    "llama-biases-head_dim": ("llama", dict(TINY, attention_bias=True, mlp_bias=True, head_dim=24,
                                            tie_word_embeddings=True)),
    "mistral-head_dim": ("mistral", dict(TINY, head_dim=32)),
    "mixtral": ("mixtral", dict(TINY, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2": ("qwen2", dict(TINY)),
    "qwen2-tied": ("qwen2", dict(TINY, tie_word_embeddings=True)),
    "qwen2_moe-sparse-step": ("qwen2_moe", dict(TINY, num_hidden_layers=4, num_experts=6, num_experts_per_tok=2,
                                                 moe_intermediate_size=40, shared_expert_intermediate_size=80,
                                                 decoder_sparse_step=2, mlp_only_layers=[3])),
    "qwen3": ("qwen3", dict(TINY, head_dim=32)),
    "qwen3_moe-mlp-only": ("qwen3_moe", dict(TINY, num_hidden_layers=4, num_experts=8, num_experts_per_tok=2,
                                              moe_intermediate_size=24, head_dim=32, mlp_only_layers=[0, 2])),
    "gemma": ("gemma", dict(TINY, head_dim=32)),
    "gemma2": ("gemma2", dict(TINY, head_dim=32)),
    "gemma3_text": ("gemma3_text", dict(TINY, head_dim=32)),
    "phi3": ("phi3", dict(TINY, pad_token_id=0)),
    "glm": ("glm", dict(TINY, head_dim=16, pad_token_id=0)),
    "glm4": ("glm4", dict(TINY, head_dim=16, pad_token_id=0)),
    "deepseek_v2-q_lora": ("deepseek_v2", dict(TINY, num_hidden_layers=4, q_lora_rank=48, kv_lora_rank=32,
                                                qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                                                n_routed_experts=6, n_shared_experts=2, num_experts_per_tok=2,
                                                moe_intermediate_size=24, first_k_dense_replace=1)),
    "deepseek_v2-lite-shape": ("deepseek_v2", dict(TINY, num_hidden_layers=3, q_lora_rank=None, kv_lora_rank=32,
                                                    qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                                                    n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                                                    moe_intermediate_size=24, first_k_dense_replace=1)),
    "deepseek_v3": ("deepseek_v3", dict(TINY, num_hidden_layers=4, q_lora_rank=48, kv_lora_rank=32,
                                                     qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                                                     n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                                                     n_group=2, topk_group=1, moe_intermediate_size=24,
                                                     first_k_dense_replace=2)),
    # mid-size, real shapes: Llama-3-8B, Qwen1.5-MoE-A2.7B, Gemma-2-27B (head_dim 128 != hidden/heads)
    "llama3-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)),
    "qwen1.5-moe-a2.7b": ("qwen2_moe", dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                                            num_attention_heads=16, num_key_value_heads=16, vocab_size=151936,
                                            num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
                                            shared_expert_intermediate_size=5632)),
    "gemma2-27b": ("gemma2", dict(hidden_size=4608, intermediate_size=36864, num_hidden_layers=46,
                                  num_attention_heads=32, num_key_value_heads=16, head_dim=128, vocab_size=256000)),
}


def _build(model_type: str, kwargs: dict, auto: str = "AutoModelForCausalLM"):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:  # older transformers releases lack the newest families
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    cfg = transformers.AutoConfig.for_model(model_type, **kwargs)
    with torch.device("meta"):
        model = getattr(transformers, auto).from_config(cfg)
    return cfg, model


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request):
    mt, kw = CASES[request.param]
    cfg, model = _build(mt, kw)
    arch = arch_from_config(cfg.to_dict(), request.param, "<transformers>")
    return arch, model


def test_total_params_equals_transformers(built):
    arch, model = built
    assert arch.total_params() == _numel(model)


def test_every_layer_and_the_embeddings_equal_transformers(built):
    arch, model = built
    layers = model.model.layers
    assert arch.num_layers == len(layers)
    assert [arch.layer_params(i) for i in range(len(layers))] == [_numel(layer) for layer in layers]
    assert arch.embedding_params() == model.model.embed_tokens.weight.numel()
    assert arch.lm_head_params() == (0 if arch.tie_word_embeddings else model.lm_head.weight.numel())
    assert sum(arch.breakdown().values()) == arch.total_params()


def test_active_params_count_only_routed_experts_per_token():
    """Mixtral: each token sees `num_experts_per_tok` of the routed experts, all the rest of the model."""
    cfg, model = _build("mixtral", dict(TINY, num_local_experts=4, num_experts_per_tok=1))
    arch = arch_from_config(cfg.to_dict(), "mixtral", "<t>")
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert arch.active_params() == _numel(model) - experts + experts // 4


def test_dense_and_sparse_layers_follow_decoder_sparse_step():
    cfg, model = _build(*CASES["qwen2_moe-sparse-step"])
    arch = arch_from_config(cfg.to_dict(), "q", "<t>")
    # layers 0 and 2 fail (i + 1) % 2 == 0; layer 3 is in mlp_only_layers; only layer 1 is sparse
    assert [arch.is_dense_layer(i) for i in range(4)] == [True, False, True, True]
    assert [hasattr(layer.mlp, "experts") for layer in model.model.layers] == [False, True, False, False]


def test_with_layers_scales_the_stack_only():
    arch = arch_from_config(transformers.AutoConfig.for_model("qwen2", **TINY).to_dict(), "q", "<t>")
    one = arch.with_layers(1)
    assert arch.total_params() - one.total_params() == 2 * arch.layer_params(0)


# ---- vision towers -----------------------------------------------------------------------------------------

VISION_TINY = {
    "gemma3": dict(text_config=dict(TINY, head_dim=16),
                   vision_config=dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                                      num_attention_heads=4, image_size=56, patch_size=14, vision_use_head=False),
                   mm_tokens_per_image=4),
    "qwen2_vl": dict(TINY, vision_config=dict(depth=2, embed_dim=32, mlp_ratio=4, num_heads=4, hidden_size=64,
                                              patch_size=14, spatial_merge_size=2, temporal_patch_size=2)),
    "qwen2_5_vl": dict(TINY, vision_config=dict(depth=2, hidden_size=32, intermediate_size=56, num_heads=4,
                                                out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                                                temporal_patch_size=2, fullatt_block_indexes=[1])),
    "qwen3_vl": dict(text_config=dict(TINY, head_dim=16),
                     vision_config=dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=4,
                                        out_hidden_size=64, patch_size=16, spatial_merge_size=2,
                                        temporal_patch_size=2, num_position_embeddings=64,
                                        deepstack_visual_indexes=[0, 2])),
    "qwen3_vl_moe": dict(text_config=dict(TINY, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=24, decoder_sparse_step=1),
                         vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4,
                                            out_hidden_size=64, patch_size=16, num_position_embeddings=64,
                                            deepstack_visual_indexes=[1])),
}


@pytest.mark.parametrize("mt", sorted(VISION_TINY))
def test_multimodal_total_and_vision_tower_equal_transformers(mt):
    cfg, model = _build(mt, VISION_TINY[mt], "AutoModelForImageTextToText")
    arch = arch_from_config(cfg.to_dict(), mt, "<t>")
    assert arch.total_params() == _numel(model)
    inner = model.model
    vision = _numel(inner.vision_tower) if hasattr(inner, "vision_tower") else _numel(inner.visual)
    projector = _numel(inner.multi_modal_projector) if hasattr(inner, "multi_modal_projector") else 0
    assert dict(arch.extra_parts)["vision_tower"] == vision
    assert dict(arch.extra_parts).get("projector", 0) == projector
    assert arch.extra_params == vision + projector


def test_siglip_with_attention_pooling_head():
    """Gemma-3 drops SigLIP's head (vision_use_head false); other SigLIP users keep it."""
    vc = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4, image_size=56,
              patch_size=14)
    cfg = transformers.SiglipVisionConfig(**vc)
    with torch.device("meta"):
        with_head = transformers.SiglipVisionModel(cfg)
    assert siglip_vision_params({**vc, "vision_use_head": True}) == _numel(with_head)
    assert siglip_vision_params({**vc, "vision_use_head": False}) == _numel(with_head) - _numel(with_head.head)


def test_full_size_vision_towers_match_published_shapes():
    """Real vision configs, built on meta: Qwen2-VL-7B, Qwen2.5-VL-7B, Qwen3-VL and Gemma-3's SigLIP (417M in the
    Gemma 3 technical report, Table 1)."""
    q2 = dict(depth=32, embed_dim=1280, mlp_ratio=4, num_heads=16, hidden_size=3584, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2)
    q25 = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, patch_size=14,
               spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[7, 15, 23, 31])
    q3 = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=4096, patch_size=16,
              spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
              deepstack_visual_indexes=[8, 16, 24])
    small_text = dict(TINY, hidden_size=3584)
    for mt, vc, fn in (("qwen2_vl", q2, qwen2_vl_vision_params), ("qwen2_5_vl", q25, qwen2_5_vl_vision_params)):
        _, model = _build(mt, dict(small_text, vision_config=vc), "AutoModelForImageTextToText")
        assert fn(vc) == _numel(model.model.visual)
    _, model = _build("qwen3_vl", dict(text_config=dict(TINY, hidden_size=4096, head_dim=16), vision_config=q3),
                      "AutoModelForImageTextToText")
    assert qwen3_vl_vision_params(q3) == _numel(model.model.visual)
    siglip = dict(hidden_size=1152, image_size=896, intermediate_size=4304, num_attention_heads=16,
                  num_hidden_layers=27, patch_size=14, vision_use_head=False)
    n = siglip_vision_params(siglip)
    assert abs(n / 417e6 - 1) < 0.005


def test_modelarch_fields_are_frozen_and_defaults_keep_llama_counts():
    arch = ModelArch("x", "llama", hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=16,
                     vocab_size=10)
    # q,k,v,o 4*64 + gate/up/down 3*128 + 2 norms + final norm + embed + lm_head
    assert arch.total_params() == 4 * 64 + 3 * 128 + 2 * 8 + 8 + 2 * 80
    with pytest.raises(Exception):
        arch.hidden_size = 9  # type: ignore[misc]


@pytest.mark.parametrize("mt", ["qwen2_vl", "qwen3_vl", "gemma3"])
@pytest.mark.parametrize("top,txt", [(None, None), (True, None), (False, None), (None, True), (None, False),
                                     (True, True), (False, False)])
def test_wrapper_lm_head_tying_follows_transformers(mt, top, txt):
    """Which flag ties a multimodal wrapper's lm_head: the top-level one when set, else a per-class default."""
    kw = {k: v for k, v in VISION_TINY[mt].items()}
    text = dict(kw.pop("text_config", {k: v for k, v in kw.items() if k != "vision_config"}))
    kw = {"vision_config": kw["vision_config"], "text_config": text}
    if txt is not None:
        text["tie_word_embeddings"] = txt
    if top is not None:
        kw["tie_word_embeddings"] = top
    cfg, model = _build(mt, kw, "AutoModelForImageTextToText")
    raw = {"model_type": mt, **({"tie_word_embeddings": top} if top is not None else {}),
           "text_config": text, "vision_config": kw["vision_config"]}
    # the tie rules of the wrapper configs differ between releases (qwen2_vl adopts a true text flag in 5.24, not
    # in 5.6): the reader follows the installed one
    assert arch_from_config(raw, mt, "<t>", transformers_major=transformers.__version__).total_params() \
        == _numel(model)


def test_active_params_scopes_leave_out_towers_and_embeddings():
    """Each scope removes exactly its part of the meta-device model: the vision tower and merger ("text"), the
    input embedding ("no_input_embedding"), both embedding tables ("non_embedding")."""
    cfg, model = _build("qwen3_vl_moe", VISION_TINY["qwen3_vl_moe"], "AutoModelForImageTextToText")
    arch = arch_from_config(cfg.to_dict(), "q", "<t>")
    inner = model.model
    vision = _numel(inner.visual)
    embed = inner.language_model.embed_tokens.weight.numel()
    head = 0 if arch.tie_word_embeddings else model.lm_head.weight.numel()
    full = arch.active_params()
    assert arch.active_params("text") == full - vision
    assert arch.active_params("no_input_embedding") == full - embed
    assert arch.active_params("non_embedding") == full - vision - embed - head
    with pytest.raises(ValueError, match="scope"):
        arch.active_params("vision")


@pytest.mark.parametrize("case", ["qwen2_moe-sparse-step", "qwen3_moe-mlp-only", "deepseek_v3", "llama"])
def test_groups_in_counts_the_layers_of_a_range(case):
    """`groups_in` (the helper for per-layer loops) equals walking the layers one by one."""
    mt, kw = CASES[case]
    cfg, _ = _build(mt, kw)
    arch = arch_from_config(cfg.to_dict(), case, "<t>")
    L = arch.num_layers
    for lo, hi in ((0, L), (1, L), (0, 1), (L - 2, L), (2, 2), (-3, L + 5)):
        walked: dict = {}
        for i in range(max(lo, 0), min(hi, L)):
            k = (arch.attention_kind(i), arch.mlp_kind(i))
            walked[k] = walked.get(k, 0) + 1
        assert dict(arch.groups_in(lo, hi)) == walked, (lo, hi)
        assert sum(n * arch.kind_linear_params(k) for k, n in arch.groups_in(lo, hi)) == sum(
            sum(lin.params for lin in arch.layer_linears(i)) for i in range(max(lo, 0), min(hi, L)))
