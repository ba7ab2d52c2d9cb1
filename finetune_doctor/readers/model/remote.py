"""Readers for the remote-code families LLaMA-Factory trains whose config.json field names differ from
transformers' own classes: Qwen (first generation), ChatGLM2/3 and GLM-4-9B, InternLM2/2.5, Baichuan/Baichuan2.

Each reads the fields of the family's own ``configuration_*.py`` on the hub and returns `ModelArch` fields. The
model code is never imported (``trust_remote_code`` stays ignored): the file is plain JSON.
"""

from __future__ import annotations

from typing import Any, Callable

from finetune_doctor.readers.model.configjson import ConfigView


def _llama_base(c: ConfigView) -> dict[str, Any]:
    heads = c.req("num_attention_heads", kind="num_heads")
    kv = c.opt_int("num_key_value_heads", kind="num_kv_heads")
    return {
        "hidden_size": c.req("hidden_size", kind="hidden_size"),
        "num_layers": c.req("num_hidden_layers", kind="num_layers"),
        "num_heads": heads,
        "num_kv_heads": kv if kv is not None else heads,
        "intermediate_size": c.req("intermediate_size", kind="intermediate_size"),
        "vocab_size": c.req("vocab_size", kind="vocab_size"),
        "head_dim": c.opt_int("head_dim", kind="head_dim"),
        "tie_word_embeddings": bool(c.get("tie_word_embeddings", default=False)),
        "max_position_embeddings": c.opt_int("max_position_embeddings"),
    }


def chatglm(c: ConfigView) -> dict[str, Any]:
    """ChatGLM2/3 and GLM-4-9B remote code (``modeling_chatglm.py``): fused ``query_key_value`` with
    ``add_qkv_bias``, ``multi_query_group_num`` KV groups of ``kv_channels``, ``dense_h_to_4h`` of width
    2 x ``ffn_hidden_size`` (SwiGLU), untied ``output_layer`` of ``padded_vocab_size`` rows."""
    if "inner_hidden_size" in c.cfg or "position_encoding_2d" in c.cfg:
        raise c.error("inner_hidden_size", "ChatGLM-6B (first generation) is not supported: its GLM blocks differ "
                                           "from ChatGLM2/3")
    heads = c.req("num_attention_heads", kind="num_heads")
    mqa = bool(c.get("multi_query_attention", default=False))
    bias = bool(c.get("add_bias_linear", default=False))
    return {
        "hidden_size": c.req("hidden_size", kind="hidden_size"),
        "num_layers": c.req("num_layers", "num_hidden_layers", kind="num_layers"),
        "num_heads": heads,
        "num_kv_heads": c.req("multi_query_group_num", kind="num_kv_heads") if mqa else heads,
        "intermediate_size": c.req("ffn_hidden_size", kind="intermediate_size"),
        "vocab_size": c.req("padded_vocab_size", "vocab_size", kind="vocab_size"),
        "head_dim": c.req("kv_channels", kind="head_dim"),
        "tie_word_embeddings": False,
        "qkv_bias": bool(c.get("add_qkv_bias", default=False)) or bias,
        "o_bias": bias,
        "mlp_bias": bias,
        "norm": "rmsnorm" if c.get("rmsnorm", default=True) else "layernorm",
        "final_norm": bool(c.get("post_layer_norm", default=True)),
        "max_position_embeddings": c.opt_int("seq_length", "max_position_embeddings"),
    }


def internlm2(c: ConfigView) -> dict[str, Any]:
    """InternLM2 / 2.5 remote code (``modeling_internlm2.py``): fused ``wqkv`` and ``wo`` share ``bias``."""
    d = _llama_base(c)
    bias = bool(c.get("bias", default=True))
    d.update(qkv_bias=bias, o_bias=bias)
    return d


def baichuan(c: ConfigView) -> dict[str, Any]:
    """Baichuan / Baichuan2 remote code: fused ``W_pack``, no biases, ``NormHead`` lm_head (same element count).

    The 13B checkpoints (hidden 5120, 40 layers) ship a modeling file with ALiBi instead of rotary
    embeddings (Baichuan2-13B ``modeling_baichuan.py`` ``_get_interleave``); their config.json has no
    ``max_position_embeddings`` field, which is how they are told apart.
    """
    d = _llama_base(c)
    alibi = "max_position_embeddings" not in c.cfg or (d["hidden_size"] == 5120 and d["num_layers"] == 40)
    d.update(positional="alibi" if alibi else "rope",
             max_position_embeddings=c.opt_int("max_position_embeddings", "model_max_length"))
    return d


def qwen1(c: ConfigView) -> dict[str, Any]:
    """Qwen (first generation) remote code (``modeling_qwen.py``): fused ``c_attn`` with bias, ``c_proj``
    biased unless ``no_bias``; ``intermediate_size`` counts both SwiGLU halves, so each of w1/w2 has half."""
    heads = c.req("num_attention_heads", kind="num_heads")
    no_bias = bool(c.get("no_bias", default=True))
    return {
        "hidden_size": c.req("hidden_size", kind="hidden_size"),
        "num_layers": c.req("num_hidden_layers", kind="num_layers"),
        "num_heads": heads,
        "num_kv_heads": heads,
        "intermediate_size": max(c.req("intermediate_size", kind="intermediate_size") // 2, 1),
        "vocab_size": c.req("vocab_size", kind="vocab_size"),
        "head_dim": c.opt_int("kv_channels", kind="head_dim"),
        "tie_word_embeddings": bool(c.get("tie_word_embeddings", default=False)),
        "qkv_bias": True,
        "o_bias": not no_bias,
        "mlp_bias": not no_bias,
        "max_position_embeddings": c.opt_int("seq_length", "max_position_embeddings"),
    }


REMOTE_READERS: dict[str, Callable[[ConfigView], dict[str, Any]]] = {
    "qwen": qwen1, "chatglm": chatglm, "internlm2": internlm2, "baichuan": baichuan,
}
