"""Families whose decoder layer is not LLaMA-shaped: what their config fields build, family by family.

`decoder_fields` (generic.py) reads the quantities every family shares; each function here then sets what that
family's modeling file builds differently from the same config: module names, fused projections, norm kinds,
non-gated MLPs, learned positions, per-kind attention shapes, interleaved MoE/dense or state-space layers. Each is
traced to ``transformers/models/<type>/modeling_<type>.py`` at transformers 5.24.0 (same layout in 5.6.0 unless
said otherwise) and checked against the meta-device build for the type's default config and resized ones
(tests/test_model_parity.py) and for the catalog's real configs (tests/test_modelcfg.py).
"""

from __future__ import annotations

from typing import Any, Callable

from finetune_doctor.arch import AttentionShape, MambaMixer
from finetune_doctor.readers.model.configjson import ConfigView

Fields = dict[str, Any]
Version = tuple[int, int]


def _flag(c: ConfigView, name: str, default: bool) -> bool:
    v = c.get(name)
    return default if v is None else bool(v)


def gpt2(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """GPT-2 (modeling_gpt2.py ``GPT2Block``): learned positions ``wpe`` of ``n_positions`` rows, LayerNorm with
    bias (ln_1, ln_2, ln_f), fused ``c_attn`` (h -> 3h) and ``c_proj``, an MLP ``c_fc`` (``n_inner`` or 4h) ->
    ``c_proj``, every projection with a bias and all of them ``Conv1D`` modules, not nn.Linear (LLaMA-Factory's
    ``find_all_linear_modules`` finds none of them); lm_head tied to wte (``tie_word_embeddings`` default true)."""
    h = d["hidden_size"]
    d.update(norm="layernorm", gated_mlp=False, qkv_bias=True, o_bias=True, mlp_bias=True, positional="learned",
             learned_positions=c.opt_int("n_positions", "max_position_embeddings", kind="other") or 1024,
             intermediate_size=c.opt_int("n_inner", kind="intermediate_size") or 4 * h,
             tie_word_embeddings=_flag(c, "tie_word_embeddings", True), linear_modules=False,
             module_names=(("qkv", "c_attn"), ("o_proj", "c_proj"), ("up_proj", "c_fc"), ("down_proj", "c_proj")))
    return d


def bloom(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """BLOOM (modeling_bloom.py ``BloomBlock``): ALiBi, no rotary; ``word_embeddings_layernorm`` after the
    embedding; LayerNorm with bias; fused ``query_key_value`` (h -> 3h) and ``dense`` with biases; MLP
    ``dense_h_to_4h`` (4h) -> ``dense_4h_to_h`` with biases; lm_head tied (``tie_word_embeddings`` default true)."""
    h = d["hidden_size"]
    d.update(norm="layernorm", gated_mlp=False, qkv_bias=True, o_bias=True, mlp_bias=True, positional="alibi",
             embedding_norm=True, intermediate_size=4 * h, num_kv_heads=d["num_heads"],
             tie_word_embeddings=_flag(c, "tie_word_embeddings", True),
             module_names=(("qkv", "query_key_value"), ("o_proj", "dense"), ("up_proj", "dense_h_to_4h"),
                           ("down_proj", "dense_4h_to_h")))
    return d


def falcon(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """Falcon (modeling_falcon.py ``FalconAttention``/``FalconDecoderLayer``): fused ``query_key_value`` of
    (heads + 2 kv) head widths under ``new_decoder_architecture`` (kv = ``num_kv_heads``), h + 2 head widths under
    ``multi_query``, else 3h; ``dense``; MLP ``dense_h_to_4h`` (``ffn_hidden_size``, default 4h) ->
    ``dense_4h_to_h``; ``bias`` on all of them; LayerNorm with bias: two per layer (ln_attn and ln_mlp when the new
    architecture runs ``num_ln_in_parallel_attn`` = 2, its default; input and post-attention norms when
    ``parallel_attn`` is false), else one; ALiBi when ``alibi``; lm_head tied by default."""
    h, heads = d["hidden_size"], d["num_heads"]
    new_arch = _flag(c, "new_decoder_architecture", False)
    if new_arch:
        kv = c.opt_int("num_kv_heads", kind="num_kv_heads") or heads
    elif _flag(c, "multi_query", True):
        kv = 1
    else:
        kv = heads
    parallel = _flag(c, "parallel_attn", True)
    n_ln = c.opt_int("num_ln_in_parallel_attn", kind="other") or (2 if new_arch else None)
    norms = 2 if (not parallel or (new_arch and n_ln == 2)) else 1
    bias = _flag(c, "bias", False)
    d.update(norm="layernorm", gated_mlp=False, num_kv_heads=kv, head_dim=h // heads, qkv_bias=bias, o_bias=bias,
             mlp_bias=bias, layer_norms=norms, positional="alibi" if _flag(c, "alibi", False) else "rope",
             intermediate_size=c.opt_int("ffn_hidden_size", kind="intermediate_size") or 4 * h,
             tie_word_embeddings=_flag(c, "tie_word_embeddings", True),
             module_names=(("qkv", "query_key_value"), ("o_proj", "dense"), ("up_proj", "dense_h_to_4h"),
                           ("down_proj", "dense_4h_to_h")))
    return d


def starcoder2(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """StarCoder2 (modeling_starcoder2.py): LayerNorm with bias, ``use_bias`` (default true) on q/k/v/o and on
    the non-gated MLP ``c_fc`` -> ``c_proj``; lm_head tied by default."""
    b = _flag(c, "use_bias", True)
    d.update(norm="layernorm", gated_mlp=False, qkv_bias=b, o_bias=b, mlp_bias=b,
             tie_word_embeddings=_flag(c, "tie_word_embeddings", True),
             module_names=(("up_proj", "c_fc"), ("down_proj", "c_proj")))
    return d


def cohere(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """Cohere / Cohere2 / Cohere2-MoE (modeling_cohere*.py): one ``input_layernorm`` per layer (attention and MLP
    run in parallel on it), ``CohereLayerNorm`` is a weight without bias, ``use_qk_norm`` adds the same norm over
    [heads, head_dim] of q and [kv heads, head_dim] of k; lm_head tied by default (``tie_word_embeddings`` true)."""
    d.update(norm="layernorm_nobias", layer_norms=1, qk_norm=_flag(c, "use_qk_norm", False), qk_norm_scope="all",
             tie_word_embeddings=_flag(c, "tie_word_embeddings", True))
    return d


def olmo(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """OLMo (first generation, modeling_olmo.py ``OlmoLayerNorm``): LayerNorm without any parameters."""
    d.update(norm="none")
    return d


def qk_norm_all(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """OLMo-2/3, FlexOlmo (modeling_olmo2.py ``Olmo2Attention``): RMSNorm over all heads of q (heads x head_dim)
    and of k (kv heads x head_dim), and the two norms after attention and MLP."""
    d.update(qk_norm=True, qk_norm_scope="all")
    return d


def glm4_moe(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """GLM-4.5/4.6/4.7 (modeling_glm4_moe.py ``Glm4MoeAttention``): ``attention_bias`` on q/k/v only, o_proj
    without; ``use_qk_norm`` adds per-head RMSNorms of head_dim on q and k."""
    bias = _flag(c, "attention_bias", False)
    d.update(qkv_bias=bias, o_bias=False, qk_norm=_flag(c, "use_qk_norm", False))
    return d


def llama4_text(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """Llama-4 text (configuration_llama4.py ``Llama4TextConfig.__post_init__``, modeling_llama4.py
    ``Llama4TextDecoderLayer``/``Llama4TextMoe``): MoE at ``moe_layers`` (default every
    ``interleave_moe_layer_step``-th layer, from step - 1), each with ``num_local_experts`` routed experts of width
    ``intermediate_size``, one shared expert of the same width and a ``Llama4Router`` (an nn.Linear subclass whose
    class name lacks "Linear"); the other layers a dense MLP of ``intermediate_size_mlp``. The experts are 3-D
    tensors in 4.x as well; ``use_qk_norm`` is a parameter-free L2 norm."""
    n = d["num_layers"]
    step = c.opt_int("interleave_moe_layer_step", kind="other") or 1
    moe = set(c.int_list("moe_layers")) if c.cfg.get("moe_layers") is not None else set(range(step - 1, n, step))
    width = c.opt_int("intermediate_size", kind="intermediate_size") or d["intermediate_size"]
    d.update(intermediate_size=c.opt_int("intermediate_size_mlp", kind="intermediate_size") or 16384,
             moe_intermediate_size=width, shared_expert_intermediate_size=width, first_k_dense=0,
             dense_layers=tuple(i for i in range(n) if i not in moe), experts_fused=True, router_linear=False,
             module_names=(), qk_norm=False)
    return d


def mimo_v2_flash(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """MiMo-V2-Flash (modeling_mimo_v2_flash.py ``MiMoV2FlashAttention``, configuration ``__post_init__``):
    sliding-window layers (``hybrid_layer_pattern`` 1 in the hub config; transformers' default pattern is full
    attention at layer 0 and every 6th) with twice the key/value heads (``swa_num_key_value_heads``) and a sink
    logit per head, full layers with ``num_key_value_heads``; keys of ``head_dim``, values of ``v_head_dim``; no
    o_proj bias; MoE on the layers ``moe_layer_freq`` marks 1 (default: all but the first), no shared expert."""
    n, heads = d["num_layers"], d["num_heads"]
    pattern = c.cfg.get("hybrid_layer_pattern")
    if isinstance(pattern, list) and len(pattern) == n:
        types = tuple("sliding_attention" if int(x) else "full_attention" for x in pattern)
    elif d.get("layer_types"):
        types = d["layer_types"]
    else:
        types = tuple("full_attention" if (i == 0 or (i + 1) % 6 == 0) else "sliding_attention" for i in range(n))
    kv = d["num_kv_heads"]
    hd = c.opt_int("head_dim", kind="head_dim") or 192
    vd = c.opt_int("v_head_dim", kind="head_dim") or 128
    shapes = (("full", AttentionShape(heads, kv, hd, vd, sinks=_flag(c, "add_full_attention_sink_bias", False))),
              ("sliding", AttentionShape(c.opt_int("swa_num_attention_heads", kind="num_heads") or heads,
                                         c.opt_int("swa_num_key_value_heads", kind="num_kv_heads") or 2 * kv,
                                         c.opt_int("swa_head_dim", kind="head_dim") or hd,
                                         c.opt_int("swa_v_head_dim", kind="head_dim") or vd,
                                         sinks=_flag(c, "add_swa_attention_sink_bias", True))))
    d.update(layer_types=types, attention_shapes=shapes, o_bias=False, head_dim=hd,
             shared_expert_intermediate_size=0, shared_expert_gate=False)
    return d


def dbrx(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """DBRX (modeling_dbrx.py ``DbrxBlock``): ``d_model``/``n_heads``/``n_layers`` at the top, ``kv_n_heads`` in
    ``attn_config`` and the experts in ``ffn_config`` (``moe_num_experts`` of width ``ffn_hidden_size``,
    ``moe_top_k``); fused ``Wqkv`` and ``out_proj`` without biases; weight-only LayerNorms (norm_1, norm_2, norm_f);
    every layer MoE with a ``router.layer`` nn.Linear and the experts as three 2-D parameters w1, v1, w2 of
    [experts x width, hidden] (not nn.Linear, in 4.x either)."""
    attn = c.cfg.get("attn_config") if isinstance(c.cfg.get("attn_config"), dict) else {}
    ffn = c.cfg.get("ffn_config") if isinstance(c.cfg.get("ffn_config"), dict) else {}
    sub_a = ConfigView(attn, {"kv_n_heads": 1}, c.source, c.model_type, c.positions, "attn_config")
    sub_f = ConfigView(ffn, {"ffn_hidden_size": 3584, "moe_num_experts": 4, "moe_top_k": 1}, c.source,
                       c.model_type, c.positions, "ffn_config")
    width = sub_f.req("ffn_hidden_size", kind="intermediate_size")
    d.update(norm="layernorm_nobias", num_kv_heads=sub_a.req("kv_n_heads", kind="num_kv_heads"),
             intermediate_size=width, num_experts=sub_f.req("moe_num_experts", kind="num_experts"),
             num_experts_per_tok=sub_f.req("moe_top_k", kind="num_experts_per_tok"), moe_intermediate_size=width,
             shared_expert_intermediate_size=0, first_k_dense=0, dense_layers=(), experts_fused=True,
             router_linear=True, qkv_bias=False, o_bias=False,
             module_names=(("qkv", "Wqkv"), ("o_proj", "out_proj")))
    return d


def jamba(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """Jamba (modeling_jamba.py ``JambaAttentionDecoderLayer``/``JambaMambaDecoderLayer``): attention where
    ``i % attn_layer_period == attn_layer_offset``, a Mamba mixer elsewhere (`MambaMixer`: inner width
    ``mamba_expand`` x hidden, ``mamba_d_state``, ``mamba_d_conv``, ``mamba_dt_rank``, ``mamba_conv_bias``,
    ``mamba_proj_bias``, ``mamba_inner_layernorms``); MoE where ``i % expert_layer_period == expert_layer_offset``
    (no shared expert), a dense MLP elsewhere; two RMSNorms per layer. `version`: the transformers release."""
    n, h = d["num_layers"], d["hidden_size"]
    ap, ao = c.opt_int("attn_layer_period") or 8, c.opt_int("attn_layer_offset") or 4
    ep, eo = c.opt_int("expert_layer_period") or 2, c.opt_int("expert_layer_offset") or 1
    dt = c.get("mamba_dt_rank", default="auto")
    d_rank = -(-h // 16) if dt == "auto" else c.opt_int("mamba_dt_rank", kind="other")
    mixer = MambaMixer(d_inner=(c.opt_int("mamba_expand") or 2) * h, d_state=c.opt_int("mamba_d_state") or 16,
                       d_conv=c.opt_int("mamba_d_conv") or 4, dt_rank=int(d_rank or 1),
                       conv_bias=_flag(c, "mamba_conv_bias", True), proj_bias=_flag(c, "mamba_proj_bias", False),
                       inner_norms=_flag(c, "mamba_inner_layernorms", True))
    d.update(layer_types=tuple("full_attention" if i % ap == ao else "mamba" for i in range(n)), mamba=mixer,
             dense_layers=tuple(i for i in range(n) if i % ep != eo) if d.get("num_experts") else (),
             first_k_dense=0, shared_expert_intermediate_size=0, moe_intermediate_size=d["intermediate_size"])
    return d


def fused_gate_up(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """GLM / GLM-4-0414 (modeling_glm.py, modeling_glm4.py ``GlmMLP``): gate and up are one ``gate_up_proj``
    Linear of twice the MLP width (same elements, one LoRA module)."""
    d.update(module_names=(("gate_up", "gate_up_proj"),))
    return d


def phi3(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """Phi-3 / Phi-4 (modeling_phi3.py ``Phi3Attention``/``Phi3MLP``): one ``qkv_proj`` Linear of (heads + 2 kv)
    head widths and one ``gate_up_proj``."""
    d.update(module_names=(("qkv", "qkv_proj"), ("gate_up", "gate_up_proj")))
    return d


def gemma4_text(c: ConfigView, d: Fields, version: Version = (5, 24)) -> Fields:
    """Gemma-4 text (transformers 5.24.0 configuration_gemma4.py ``__post_init__``, modeling_gemma4.py
    ``Gemma4TextAttention``/``Gemma4TextDecoderLayer``/``Gemma4TextRouter``): four RMSNorms per layer, q/k norms of
    the head width (the v norm has no scale); full-attention layers use ``global_head_dim`` (default 512) and, under
    ``attention_k_eq_v``, ``num_global_key_value_heads`` and no v_proj; with ``enable_moe_block`` every layer runs
    the dense MLP and ``num_experts`` fused experts of ``moe_intermediate_size`` (top ``top_k_experts``) side by
    side, a router with a scale vector, a per-expert scale and a ``proj`` Linear, and three more norms. Not
    modelled: per-layer input embeddings (``hidden_size_per_layer_input``) and KV-sharing layers
    (``num_kv_shared_layers``); the notes say so when a config has them."""
    heads, kv = d["num_heads"], d["num_kv_heads"]
    k_eq_v = _flag(c, "attention_k_eq_v", False)
    full_kv = (c.opt_int("num_global_key_value_heads", kind="num_kv_heads") if k_eq_v else None) or kv
    full = AttentionShape(heads, full_kv, c.opt_int("global_head_dim", kind="head_dim") or 512, shared_kv=k_eq_v)
    d.update(layer_norms=4, qk_norm=True, qk_norm_scope="head", attention_shapes=(("full", full),),
             tie_word_embeddings=_flag(c, "tie_word_embeddings", True), o_bias=d["qkv_bias"])
    n_exp = c.opt_int("num_experts", kind="num_experts") or 0
    if _flag(c, "enable_moe_block", False) and n_exp:
        h = d["hidden_size"]
        d.update(num_experts=n_exp, num_experts_per_tok=c.opt_int("top_k_experts", kind="num_experts_per_tok") or 1,
                 moe_intermediate_size=c.req("moe_intermediate_size", kind="intermediate_size"),
                 shared_expert_intermediate_size=0, first_k_dense=0, dense_layers=(), dense_mlp_in_moe=True,
                 router_params=h + n_exp, moe_norms=3, experts_fused=True, router_linear=True)
    else:
        d.update(num_experts=0, num_experts_per_tok=0)
    missing = [k for k in ("hidden_size_per_layer_input", "num_kv_shared_layers") if c.opt_int(k, kind="other")]
    if missing:
        d["_note"] = (f"Gemma-4 {' and '.join(missing)} are not counted by the generic decoder (per-layer input "
                      "embeddings, KV-sharing layers): the meta-device build gives the exact count")
    return d


FAMILIES: dict[str, Callable[[ConfigView, Fields, Version], Fields]] = {
    "gemma4_text": gemma4_text,
    "glm": fused_gate_up, "glm4": fused_gate_up, "glm4v_text": fused_gate_up, "phi3": phi3,
    "gpt2": gpt2, "bloom": bloom, "falcon": falcon, "starcoder2": starcoder2,
    "cohere": cohere, "cohere2": cohere, "cohere2_moe": cohere, "olmo": olmo,
    "olmo2": qk_norm_all, "olmo3": qk_norm_all, "flex_olmo": qk_norm_all,
    "glm4_moe": glm4_moe, "glm4v_moe_text": glm4_moe, "llama4_text": llama4_text, "mimo_v2_flash": mimo_v2_flash, "dbrx": dbrx, "jamba": jamba,
}
