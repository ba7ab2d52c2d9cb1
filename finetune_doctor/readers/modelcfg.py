"""Find a model's architecture without loading it: a local ``config.json``, the HF hub cache, or the catalog.

``load_arch`` resolves LLaMA-Factory's ``model_name_or_path`` the way a user means it, in this order:

1. a local directory holding ``config.json`` (absolute, else relative to the YAML's directory, else to the
   current directory), as ``transformers.AutoConfig.from_pretrained`` would read it;
2. the Hugging Face hub cache, read offline as files (``models--{org}--{name}/snapshots/<rev>/config.json``,
   the revision named by ``refs/main`` when present; layout documented in huggingface_hub
   ``docs/source/en/guides/manage-cache.md``), under ``$HF_HUB_CACHE``, ``$HF_HOME/hub``,
   ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub`` (huggingface_hub ``constants.py``);
3. the bundled catalog ``finetune_doctor/catalog/models.json`` by repo id, alias, or the last component of a
   path that does not exist (``/data/model/llama-2-7b`` finds ``meta-llama/Llama-2-7b-hf``).

It never imports model code, never contacts a hub and ignores ``trust_remote_code``: the file is plain JSON.
``arch_from_config`` maps each ``model_type``'s field names onto `ModelArch`, applying the defaults of the
matching transformers configuration class (or of the model's own remote-code configuration file) where a
``config.json`` leaves a field out. tests/test_modelcfg.py checks the result against the transformers model
built on the meta device for every catalog entry transformers can build.

This module imports no torch or transformers.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.arch import (
    ModelArch,
    qwen2_5_vl_vision_params,
    qwen2_vl_vision_params,
    qwen3_vl_vision_params,
    siglip_vision_params,
)
from finetune_doctor.errors import InputError
from finetune_doctor.types import SourceDoc

CATALOG_PATH = Path(__file__).resolve().parent.parent / "catalog" / "models.json"

# Name endings that do not change the architecture: chat/instruct tunes, HF-format exports, quantized
# re-uploads keep the base model's shapes. Stripped one at a time from the end when looking up the catalog.
_QUANT_SUFFIXES = ("gptq", "awq", "int4", "int8", "fp8", "bnb", "4bit", "8bit", "gguf", "mlx")
_NEUTRAL_SUFFIXES = (
    "instruct", "chat", "hf", "base", "it", "pt", "sft", "dpo", "rlhf", "4k", "8k", "32k", "128k",
    "ms", "full", "lora", "merged",
) + _QUANT_SUFFIXES


# ---------------------------------------------------------------------------------------------------------
# config.json reading
# ---------------------------------------------------------------------------------------------------------

def json_key_positions(text: str) -> dict[str, tuple[int, int]]:
    """(line, column), both 1-based, of every object key in a JSON text, by dotted path (``text_config.hidden_size``).

    Keys inside arrays are recorded under their enclosing object's path. The text must already parse as JSON.
    """
    pos: dict[str, tuple[int, int]] = {}
    stack: list[list[Any]] = []  # [kind, current key]
    line, line_start, i, n = 1, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line, line_start = line + 1, i + 1
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            k = j + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":" and stack and stack[-1][0] == "obj":
                key = json.loads(text[i:j + 1])
                stack[-1][1] = key
                prefix = [str(e[1]) for e in stack[:-1] if e[0] == "obj" and e[1] is not None]
                pos.setdefault(".".join(prefix + [key]), (line, i - line_start + 1))
            i = j
        elif ch == "{":
            stack.append(["obj", None])
        elif ch == "[":
            stack.append(["arr", None])
        elif ch in "}]" and stack:
            stack.pop()
        i += 1
    return pos


def read_config_json(path: str | os.PathLike[str]) -> tuple[dict[str, Any], SourceDoc]:
    """Parse one ``config.json``. Returns the dict and a `SourceDoc` (role ``model``) with key positions.

    Raises InputError (with file and line) when the file cannot be read, is not JSON, or is not an object.
    """
    p = str(path)
    try:
        text = Path(p).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read model config: {e}", file=p) from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"config.json is not valid JSON: {e.msg} (column {e.colno})", file=p, line=e.lineno) from None
    if not isinstance(cfg, dict):
        raise InputError(f"config.json must hold a JSON object, found {type(cfg).__name__}", file=p, line=1)
    return cfg, SourceDoc("model", p, json_key_positions(text))


# ---------------------------------------------------------------------------------------------------------
# model_type normalisation
# ---------------------------------------------------------------------------------------------------------

class _Cfg:
    """A config dict with the defaults of its transformers configuration class and a file name for errors."""

    def __init__(self, cfg: dict[str, Any], defaults: dict[str, Any], source: str, model_type: str):
        self.cfg, self.defaults, self.source, self.model_type = cfg, defaults, source, model_type

    def get(self, *names: str, default: Any = None) -> Any:
        for nm in names:
            if self.cfg.get(nm) is not None:
                return self.cfg[nm]
        for nm in names:
            if self.defaults.get(nm) is not None:
                return self.defaults[nm]
        return default

    def req(self, *names: str) -> int:
        v = self.get(*names)
        if v is None:
            raise InputError(f"config.json (model_type '{self.model_type}') has no '{names[0]}'", file=self.source)
        try:
            return int(v)
        except (TypeError, ValueError):
            raise InputError(f"config.json '{names[0]}' is not a number: {v!r}", file=self.source) from None

    def opt_int(self, *names: str) -> int | None:
        v = self.get(*names)
        return None if v is None else int(v)


# Defaults of the transformers configuration classes (transformers 5.x ``models/<type>/configuration_<type>.py``)
# for the fields that change parameter counts; tests/test_modelcfg.py compares them with the classes.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
                "sliding_window": 4096},
    "mixtral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
                "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False},
    "qwen2_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "tie_word_embeddings": False,
                  "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1},
    "qwen3": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "tie_word_embeddings": False,
              "attention_bias": False},
    "qwen3_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "tie_word_embeddings": False,
                  "attention_bias": False, "num_experts": 128, "num_experts_per_tok": 8,
                  "moe_intermediate_size": 768, "decoder_sparse_step": 1},
    "gemma": {"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "tie_word_embeddings": True,
              "attention_bias": False},
    "gemma2": {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
               "attention_bias": False, "sliding_window": 4096},
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096},
    "phi3": {"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
             "num_attention_heads": 32, "tie_word_embeddings": False},
    "glm": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
            "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "tie_word_embeddings": False,
            "attention_bias": True},
    "deepseek_v2": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "tie_word_embeddings": False, "attention_bias": False,
                    "moe_intermediate_size": 1407, "n_routed_experts": 64, "n_shared_experts": 2,
                    "first_k_dense_replace": 0, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v3": {"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
                    "num_attention_heads": 128, "tie_word_embeddings": False, "attention_bias": False,
                    "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                    "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    # remote-code families: defaults of their own configuration_*.py on the hub
    "internlm2": {"vocab_size": 103168, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "bias": True, "tie_word_embeddings": False},
    "baichuan": {"vocab_size": 125696, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "tie_word_embeddings": False},
    "qwen": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
             "num_attention_heads": 32, "no_bias": True, "tie_word_embeddings": False},
    "chatglm": {"padded_vocab_size": 65024, "hidden_size": 4096, "ffn_hidden_size": 13696, "num_layers": 28,
                "num_attention_heads": 32, "kv_channels": 128, "multi_query_attention": False,
                "multi_query_group_num": 1, "add_qkv_bias": False, "add_bias_linear": False, "rmsnorm": True,
                "post_layer_norm": True},
}
_DEFAULTS["yi"] = _DEFAULTS["llama"]
_DEFAULTS["deepseek"] = _DEFAULTS["llama"]
_DEFAULTS["glm4"] = _DEFAULTS["glm"]
# the VL text classes default to the 72B shapes; tie_word_embeddings lives on the wrapper (see _WRAPPER_TIE_DEFAULT)
_DEFAULTS["qwen2_vl_text"] = {"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568,
                              "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8}
_DEFAULTS["qwen2_5_vl_text"] = _DEFAULTS["qwen2_vl_text"]
_DEFAULTS["qwen3_vl_text"] = {k: v for k, v in _DEFAULTS["qwen3"].items() if k != "tie_word_embeddings"}
_DEFAULTS["qwen3_vl_moe_text"] = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
                                  "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                                  "head_dim": 128, "attention_bias": False, "num_experts": 60,
                                  "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "decoder_sparse_step": 1}

_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def _dtype(cfg: dict[str, Any], *more: dict[str, Any]) -> tuple[str, str | None]:
    """Checkpoint dtype from ``torch_dtype`` (transformers < 5) or ``dtype`` (transformers >= 5).

    transformers instantiates float32 when neither is set (``PreTrainedModel`` default dtype), so that is the
    answer for an absent field, with a note.
    """
    for d in (cfg, *more):
        v = d.get("torch_dtype") or d.get("dtype")
        if isinstance(v, str) and v not in ("auto",):
            v = v.replace("torch.", "").lower()
            return _DTYPE_ALIASES.get(v, v), None
    return "float32", "config.json names no torch_dtype/dtype; transformers loads it as float32"


def _base(c: _Cfg, *, kv_default: int | None = None, head_dim_default: int | None = None) -> dict[str, Any]:
    """Fields every LLaMA-shaped config names the same way."""
    heads = c.req("num_attention_heads")
    hidden = c.req("hidden_size")
    kv = c.opt_int("num_key_value_heads")
    hd = c.opt_int("head_dim")
    return {
        "hidden_size": hidden,
        "num_layers": c.req("num_hidden_layers"),
        "num_heads": heads,
        "num_kv_heads": kv if kv is not None else (kv_default or heads),
        "intermediate_size": c.req("intermediate_size"),
        "vocab_size": c.req("vocab_size"),
        "head_dim": hd if hd is not None else head_dim_default,
        "tie_word_embeddings": bool(c.get("tie_word_embeddings", default=False)),
        "max_position_embeddings": c.opt_int("max_position_embeddings"),
    }


def _sliding(c: _Cfg) -> int | None:
    if c.cfg.get("use_sliding_window") is False:
        return None
    # an explicit null turns the window off (Mistral-7B-v0.2+), so the class default applies only when absent
    sw = c.cfg["sliding_window"] if "sliding_window" in c.cfg else c.defaults.get("sliding_window")
    return int(sw) if isinstance(sw, (int, float)) and sw > 0 else None


def _llama(c: _Cfg) -> dict[str, Any]:
    """LLaMA / Yi / DeepSeek-LLM / DeepSeek-Coder (``modeling_llama.py``): optional ``attention_bias`` on q/k/v/o."""
    d = _base(c)
    bias = bool(c.get("attention_bias", default=False))
    d.update(qkv_bias=bias, o_bias=bias, mlp_bias=bool(c.get("mlp_bias", default=False)))
    return d


def _mistral(c: _Cfg) -> dict[str, Any]:
    d = _base(c)
    d["sliding_window"] = _sliding(c)
    return d


def _mixtral(c: _Cfg) -> dict[str, Any]:
    """Mixtral: every layer is sparse; ``intermediate_size`` is each expert's width; a bias-free router."""
    d = _base(c)
    d.update(num_experts=c.req("num_local_experts", "num_experts"), num_experts_per_tok=c.req("num_experts_per_tok"),
             moe_intermediate_size=d["intermediate_size"], sliding_window=_sliding(c))
    return d


def _qwen2(c: _Cfg) -> dict[str, Any]:
    """Qwen1.5 / Qwen2 / Qwen2.5 (``modeling_qwen2.py``): q/k/v always carry a bias, o_proj none."""
    d = _base(c)
    d.update(qkv_bias=True, sliding_window=_sliding(c))
    return d


def _sparse_layers(c: _Cfg, n_layers: int) -> tuple[int, ...]:
    """Dense layers of Qwen-MoE: ``mlp_only_layers`` plus those where ``(i + 1) % decoder_sparse_step != 0``
    (``modeling_qwen2_moe.py`` / ``modeling_qwen3_moe.py`` decoder layer constructor)."""
    step = int(c.get("decoder_sparse_step", default=1) or 1)
    only = set(int(x) for x in (c.get("mlp_only_layers", default=[]) or []))
    return tuple(i for i in range(n_layers) if i in only or (i + 1) % step != 0)


def _qwen2_moe(c: _Cfg) -> dict[str, Any]:
    d = _qwen2(c)
    d.update(num_experts=c.req("num_experts", "num_local_experts"), num_experts_per_tok=c.req("num_experts_per_tok"),
             moe_intermediate_size=c.req("moe_intermediate_size"),
             shared_expert_intermediate_size=int(c.get("shared_expert_intermediate_size", default=0) or 0),
             shared_expert_gate=True, dense_layers=_sparse_layers(c, d["num_layers"]))
    return d


def _qwen3(c: _Cfg) -> dict[str, Any]:
    """Qwen3 (``modeling_qwen3.py``): per-head RMSNorm on q and k, ``head_dim`` default 128, optional biases."""
    d = _base(c, head_dim_default=128)
    bias = bool(c.get("attention_bias", default=False))
    d.update(qkv_bias=bias, o_bias=bias, qk_norm=True, sliding_window=_sliding(c))
    return d


def _qwen3_moe(c: _Cfg) -> dict[str, Any]:
    d = _base(c)
    bias = bool(c.get("attention_bias", default=False))
    d.update(qkv_bias=bias, o_bias=bias, qk_norm=True,
             num_experts=c.req("num_experts", "num_local_experts"), num_experts_per_tok=c.req("num_experts_per_tok"),
             moe_intermediate_size=c.req("moe_intermediate_size"), dense_layers=_sparse_layers(c, d["num_layers"]))
    return d


def _gemma(c: _Cfg) -> dict[str, Any]:
    """Gemma 1: tied embeddings, ``head_dim`` 256 by default, two norms per layer."""
    return _base(c)


def _gemma2(c: _Cfg) -> dict[str, Any]:
    """Gemma 2: pre/post norms around both attention and MLP (4 per layer); local layers use a window."""
    d = _base(c)
    d.update(layer_norms=4, sliding_window=_sliding(c))
    return d


def _gemma3_text(c: _Cfg) -> dict[str, Any]:
    d = _gemma2(c)
    d["qk_norm"] = True
    return d


def _phi3(c: _Cfg) -> dict[str, Any]:
    """Phi-3 / Phi-3.5 / Phi-4 (``modeling_phi3.py``): fused ``qkv_proj`` and ``gate_up_proj``, no biases."""
    d = _base(c)
    d["sliding_window"] = _sliding(c)
    return d


def _glm(c: _Cfg) -> dict[str, Any]:
    """GLM-4 in transformers' own format (``modeling_glm.py``): q/k/v with bias, fused gate_up."""
    d = _base(c)
    d.update(qkv_bias=bool(c.get("attention_bias", default=True)))
    return d


def _glm4(c: _Cfg) -> dict[str, Any]:
    """GLM-4-0414 (``modeling_glm4.py``): as ``glm`` plus post-attention and post-MLP norms (4 per layer)."""
    d = _glm(c)
    d["layer_norms"] = 4
    return d


def _chatglm(c: _Cfg) -> dict[str, Any]:
    """ChatGLM2/3 and GLM-4-9B remote code (``modeling_chatglm.py``): fused ``query_key_value`` with
    ``add_qkv_bias``, ``multi_query_group_num`` KV groups of ``kv_channels``, ``dense_h_to_4h`` of width
    2 x ``ffn_hidden_size`` (SwiGLU), untied ``output_layer`` of ``padded_vocab_size`` rows."""
    if "inner_hidden_size" in c.cfg or "position_encoding_2d" in c.cfg:
        raise InputError("ChatGLM-6B (first generation) is not supported: its GLM blocks differ from ChatGLM2/3",
                         file=c.source)
    heads = c.req("num_attention_heads")
    mqa = bool(c.get("multi_query_attention", default=False))
    bias = bool(c.get("add_bias_linear", default=False))
    return {
        "hidden_size": c.req("hidden_size"),
        "num_layers": c.req("num_layers", "num_hidden_layers"),
        "num_heads": heads,
        "num_kv_heads": c.req("multi_query_group_num") if mqa else heads,
        "intermediate_size": c.req("ffn_hidden_size"),
        "vocab_size": c.req("padded_vocab_size", "vocab_size"),
        "head_dim": c.req("kv_channels"),
        "tie_word_embeddings": False,
        "qkv_bias": bool(c.get("add_qkv_bias", default=False)) or bias,
        "o_bias": bias,
        "mlp_bias": bias,
        "norm": "rmsnorm" if c.get("rmsnorm", default=True) else "layernorm",
        "final_norm": bool(c.get("post_layer_norm", default=True)),
        "max_position_embeddings": c.opt_int("seq_length", "max_position_embeddings"),
    }


def _internlm2(c: _Cfg) -> dict[str, Any]:
    """InternLM2 / 2.5 remote code (``modeling_internlm2.py``): fused ``wqkv`` and ``wo`` share ``bias``."""
    d = _base(c)
    bias = bool(c.get("bias", default=True))
    d.update(qkv_bias=bias, o_bias=bias)
    return d


def _baichuan(c: _Cfg) -> dict[str, Any]:
    """Baichuan / Baichuan2 remote code: fused ``W_pack``, no biases, ``NormHead`` lm_head (same element count).

    The 13B checkpoints (hidden 5120, 40 layers) ship a modeling file with ALiBi instead of rotary
    embeddings (Baichuan2-13B ``modeling_baichuan.py`` ``_get_interleave``); their config.json has no
    ``max_position_embeddings`` field, which is how they are told apart.
    """
    d = _base(c)
    alibi = "max_position_embeddings" not in c.cfg or (d["hidden_size"] == 5120 and d["num_layers"] == 40)
    d.update(positional="alibi" if alibi else "rope",
             max_position_embeddings=c.opt_int("max_position_embeddings", "model_max_length"))
    return d


def _qwen1(c: _Cfg) -> dict[str, Any]:
    """Qwen (first generation) remote code (``modeling_qwen.py``): fused ``c_attn`` with bias, ``c_proj``
    biased unless ``no_bias``; ``intermediate_size`` counts both SwiGLU halves, so each of w1/w2 has half."""
    heads = c.req("num_attention_heads")
    hidden = c.req("hidden_size")
    no_bias = bool(c.get("no_bias", default=True))
    return {
        "hidden_size": hidden,
        "num_layers": c.req("num_hidden_layers"),
        "num_heads": heads,
        "num_kv_heads": heads,
        "intermediate_size": c.req("intermediate_size") // 2,
        "vocab_size": c.req("vocab_size"),
        "head_dim": c.opt_int("kv_channels"),
        "tie_word_embeddings": bool(c.get("tie_word_embeddings", default=False)),
        "qkv_bias": True,
        "o_bias": not no_bias,
        "mlp_bias": not no_bias,
        "max_position_embeddings": c.opt_int("seq_length", "max_position_embeddings"),
    }


def _deepseek_moe_fields(c: _Cfg, n_layers: int, dense_width: int) -> dict[str, Any]:
    """DeepSeek MoE layout (``modeling_deepseek_v2.py``): layer i is sparse when ``n_routed_experts`` is set,
    ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``; shared experts form one MLP of width
    ``moe_intermediate_size * n_shared_experts``."""
    n_exp = int(c.get("n_routed_experts", default=0) or 0)
    if not n_exp:
        return {}
    k = int(c.get("first_k_dense_replace", default=0) or 0)
    freq = int(c.get("moe_layer_freq", default=1) or 1)
    moe_w = c.req("moe_intermediate_size")
    return {
        "num_experts": n_exp,
        "num_experts_per_tok": c.req("num_experts_per_tok"),
        "moe_intermediate_size": moe_w,
        "shared_expert_intermediate_size": moe_w * int(c.get("n_shared_experts", default=0) or 0),
        "first_k_dense": k,
        "dense_layers": tuple(i for i in range(k, n_layers) if i % freq != 0),
        "intermediate_size": dense_width,
    }


def _deepseek(c: _Cfg) -> dict[str, Any]:
    """DeepSeek-MoE-16B (``model_type: deepseek``): LLaMA attention plus the DeepSeek MoE layout."""
    d = _llama(c)
    d.update(_deepseek_moe_fields(c, d["num_layers"], d["intermediate_size"]))
    return d


def _deepseek_v2(c: _Cfg) -> dict[str, Any]:
    """DeepSeek-V2 / V2-Lite / V3 (``modeling_deepseek_v2.py``, ``modeling_deepseek_v3.py``): multi-head latent
    attention (``q_lora_rank`` null means a plain q_proj), MoE with shared experts after the first
    ``first_k_dense_replace`` dense layers. V3's per-expert ``e_score_correction_bias`` is a buffer in
    transformers (``DeepseekV3TopkRouter``), not a parameter, so it is not counted; V3's multi-token-prediction
    layer (``num_nextn_predict_layers``) is in the checkpoint but not in the transformers model, and not counted."""
    d = _base(c)
    nope, rope = c.req("qk_nope_head_dim"), c.req("qk_rope_head_dim")
    q_rank = c.cfg["q_lora_rank"] if "q_lora_rank" in c.cfg else c.defaults.get("q_lora_rank")
    d.update(q_lora_rank=int(q_rank) if q_rank else None, kv_lora_rank=c.req("kv_lora_rank"),
             qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=c.req("v_head_dim"),
             head_dim=nope + rope, qkv_bias=False)
    d.update(_deepseek_moe_fields(c, d["num_layers"], d["intermediate_size"]))
    return d


_NORMALISERS: dict[str, Callable[[_Cfg], dict[str, Any]]] = {
    "llama": _llama, "yi": _llama, "mistral": _mistral, "mixtral": _mixtral,
    "qwen": _qwen1, "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
    "qwen2_vl_text": _qwen2, "qwen2_5_vl_text": _qwen2, "qwen3_vl_text": _qwen3, "qwen3_vl_moe_text": _qwen3_moe,
    "gemma": _gemma, "gemma2": _gemma2, "gemma3_text": _gemma3_text,
    "phi3": _phi3, "glm": _glm, "glm4": _glm4, "chatglm": _chatglm, "internlm2": _internlm2,
    "baichuan": _baichuan, "deepseek": _deepseek, "deepseek_v2": _deepseek_v2,
    "deepseek_v3": _deepseek_v2,
}

# Multimodal wrappers: (text model_type, vision parameter function, projector params(vision_cfg, text_hidden))
_WRAPPERS: dict[str, tuple[str, Callable[[dict[str, Any]], int] | None, Callable[[dict[str, Any], int], int] | None]] = {
    "qwen2_vl": ("qwen2_vl_text", qwen2_vl_vision_params, None),
    "qwen2_5_vl": ("qwen2_5_vl_text", qwen2_5_vl_vision_params, None),
    "qwen3_vl": ("qwen3_vl_text", qwen3_vl_vision_params, None),
    "qwen3_vl_moe": ("qwen3_vl_moe_text", qwen3_vl_vision_params, None),
    # Gemma3MultiModalProjector: mm_input_projection_weight [vision_hidden, text_hidden] + RMSNorm(vision_hidden)
    "gemma3": ("gemma3_text", siglip_vision_params,
               lambda vc, h: int(vc.get("hidden_size", 1152)) * (h + 1)),
}

_WRAPPER_TIE_DEFAULT = {"gemma3": True, "qwen3_vl": False, "qwen3_vl_moe": False}

# transformers 5 fills these into a wrapper's vision_config when config.json leaves them out
_VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
               "image_size": 896, "patch_size": 14, "vision_use_head": False},
}


def arch_from_config(cfg: dict[str, Any], name: str, source: str) -> ModelArch:
    """Normalise one ``config.json`` dict into a `ModelArch`.

    `name` is what the user called the model; `source` where the dict came from (a path or URL; used as the
    file of any InputError). Known ``model_type`` values: see ``_NORMALISERS`` and ``_WRAPPERS`` above; any
    other type with LLaMA field names is read as LLaMA-shaped, with a note saying so. Multimodal wrappers
    count their vision tower and projector in `ModelArch.extra_params` (frozen by default in LLaMA-Factory:
    ``freeze_vision_tower`` and ``freeze_multi_modal_projector`` both default to true).

    Raises InputError when a required field is missing or the type is known not to be supported.
    """
    if not isinstance(cfg, dict):
        raise InputError("model config must be a JSON object", file=source)
    try:
        return _arch_from_config(cfg, name, source)
    except (TypeError, ValueError, AttributeError) as e:  # a field of the wrong JSON type, e.g. "depth": "32"
        raise InputError(f"config.json has a field of an unexpected type: {e}", file=source) from None


def _arch_from_config(cfg: dict[str, Any], name: str, source: str) -> ModelArch:
    mt = str(cfg.get("model_type") or "").lower()
    notes: list[str] = []
    extra, parts = 0, []
    text_cfg, text_mt = cfg, mt
    if mt in _WRAPPERS or (mt not in _NORMALISERS and isinstance(cfg.get("text_config"), dict)):
        # Older Qwen2-VL / Qwen2.5-VL files keep text fields at the top level; newer ones nest text_config.
        nested = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
        text_cfg = {**{k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}, **nested}
        if mt in _WRAPPERS:
            text_mt, vis_fn, proj_fn = _WRAPPERS[mt]
            # transformers ties the wrapper's lm_head by the top-level flag; absent, by the wrapper class default
            # (qwen2_vl / qwen2_5_vl take the text config's value instead)
            if cfg.get("tie_word_embeddings") is not None:
                text_cfg["tie_word_embeddings"] = cfg["tie_word_embeddings"]
            elif mt in _WRAPPER_TIE_DEFAULT:
                text_cfg["tie_word_embeddings"] = _WRAPPER_TIE_DEFAULT[mt]
            vc = {**_VISION_DEFAULTS.get(mt, {}), **(cfg.get("vision_config") or {})}
            if vis_fn is not None:
                v = vis_fn(vc)
                parts.append(("vision_tower", v))
                extra += v
            if proj_fn is not None:
                hidden = int(text_cfg.get("hidden_size") or _DEFAULTS[text_mt]["hidden_size"])
                p = proj_fn(vc, hidden)
                parts.append(("projector", p))
                extra += p
        else:
            text_mt = str(nested.get("model_type") or "").lower()
            notes.append(f"multimodal model_type '{mt}': only its text model ('{text_mt or '?'}') is counted; "
                         "the vision tower is not")
    if text_mt in _NORMALISERS:
        fn = _NORMALISERS[text_mt]
    else:
        fn = _llama
        notes.append(f"model_type '{text_mt or '(none)'}' is not one the doctor knows; read as LLaMA-shaped "
                     "(q/k/v/o, gated MLP, RMSNorm)")
    c = _Cfg(text_cfg, _DEFAULTS.get(text_mt, {}), source, text_mt)
    fields = fn(c)
    if text_mt == "qwen":
        dtype, dnote = _qwen1_dtype(cfg)
    else:
        dtype, dnote = _dtype(cfg, text_cfg)
    if dnote:
        notes.append(dnote)
    return ModelArch(name=name, model_type=mt or text_mt, dtype=dtype, extra_params=extra,
                     extra_parts=tuple(parts), source=source, notes="; ".join(notes), raw=dict(cfg), **fields)


def _qwen1_dtype(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """Qwen (first generation) picks its own precision from the ``bf16``/``fp16``/``fp32`` flags; with none
    set it takes bf16 where the GPU supports it (``modeling_qwen.py`` ``QWenLMHeadModel.__init__``)."""
    for flag, dt in (("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")):
        if cfg.get(flag):
            return dt, None
    if cfg.get("torch_dtype") or cfg.get("dtype"):
        return _dtype(cfg)
    return "bfloat16", "Qwen config sets none of bf16/fp16/fp32: its modeling code picks bf16 where supported"


# ---------------------------------------------------------------------------------------------------------
# the bundled catalog
# ---------------------------------------------------------------------------------------------------------

def _norm(s: str) -> str:
    # ModelScope's snapshot_download writes "Qwen2.5-7B" as "Qwen2___5-7B" on disk
    return s.strip().strip("/").replace("___", ".").lower().replace("_", "-")


def _stem(s: str) -> str:
    """Lower-cased last path component with architecture-neutral endings removed."""
    base = _norm(s).rsplit("/", 1)[-1]
    changed = True
    while changed:
        changed = False
        for suf in _NEUTRAL_SUFFIXES:
            if base.endswith("-" + suf) and len(base) > len(suf) + 1:
                base = base[: -len(suf) - 1]
                changed = True
    return base


@lru_cache(maxsize=1)
def catalog_entries() -> tuple[dict[str, Any], ...]:
    """The bundled catalog (``catalog/models.json``): one dict per model with ``id``, ``aliases``, ``source``,
    ``published_params`` (billions), ``published_basis`` and the ``config`` fields copied from its config.json."""
    try:
        data = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:  # a broken install, not user input
        raise RuntimeError(f"bundled model catalog unreadable: {CATALOG_PATH}: {e}") from e
    return tuple(data["models"])


def catalog_names() -> list[str]:
    """Repo ids of every catalog entry, in catalog order (for did-you-mean and the docs)."""
    return [e["id"] for e in catalog_entries()]


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", _stem(s))


@lru_cache(maxsize=1)
def _catalog_index() -> tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, set[int]]]:
    by_id: dict[str, int] = {}
    by_name: dict[str, int] = {}
    by_stem: dict[str, int] = {}
    by_squash: dict[str, set[int]] = {}
    for i, e in enumerate(catalog_entries()):
        for n in [e["id"], *e.get("aliases", [])]:
            if "/" in n:
                by_id.setdefault(_norm(n), i)
            by_name.setdefault(_norm(n).rsplit("/", 1)[-1], i)
            by_stem.setdefault(_stem(n), i)
            by_squash.setdefault(_squash(n), set()).add(i)
    return by_id, by_name, by_stem, by_squash


def find_in_catalog(name: str) -> tuple[dict[str, Any], str] | None:
    """The catalog entry for a repo id or name, and how it matched: ``id`` (a repo id or aliased repo id,
    case-insensitive), ``name`` (the last path component equals an entry's or alias's name), ``stem`` (equal
    after dropping architecture-neutral endings such as -Instruct, -Chat, -hf, -it, -GPTQ) or ``loose`` (equal
    letters and digits once separators are dropped, ``qwen25_7b`` for Qwen2.5-7B, when only one entry fits).
    None when absent."""
    by_id, by_name, by_stem, by_squash = _catalog_index()
    entries = catalog_entries()
    n = _norm(name)
    if n in by_id:
        return entries[by_id[n]], "id"
    base = n.rsplit("/", 1)[-1]
    if base in by_name:
        return entries[by_name[base]], "name"
    st = _stem(name)
    if st in by_stem:
        return entries[by_stem[st]], "stem"
    hits = by_squash.get(_squash(name), set())
    if len(hits) == 1:
        return entries[next(iter(hits))], "loose"
    return None


def did_you_mean(name: str, n: int = 3) -> list[str]:
    """Up to `n` catalog ids whose names are closest to `name` (difflib ratio >= 0.6)."""
    _, by_name, by_stem, _ = _catalog_index()
    ids = catalog_names()
    keys = {**by_stem, **by_name}
    out: list[str] = []
    for k in difflib.get_close_matches(_stem(name), list(keys), n=n * 3, cutoff=0.6):
        i = ids[keys[k]]
        if i not in out:
            out.append(i)
    return out[:n]


def catalog_arch(entry: dict[str, Any], name: str | None = None, how: str = "id") -> ModelArch:
    """`ModelArch` of one catalog entry; `name`/`how` record what the user wrote and how it matched."""
    arch = arch_from_config(entry["config"], entry["id"], f"bundled catalog: {entry['source']}")
    note = f"shapes from the bundled catalog entry {entry['id']}"
    if how != "id" or (name and _norm(name) != _norm(entry["id"])):
        note += f", matched by name from '{name}' (not read from your checkpoint)"
    if name and any(q in _norm(name).rsplit("/", 1)[-1].split("-") for q in _QUANT_SUFFIXES):
        note += "; the name suggests a quantized checkpoint: these are the unquantized base shapes"
    notes = "; ".join(x for x in (note, arch.notes) if x)
    return replace(arch, published_params=entry.get("published_params"), notes=notes)


# ---------------------------------------------------------------------------------------------------------
# HF hub cache
# ---------------------------------------------------------------------------------------------------------

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def hub_cache_dirs(hf_home: str | None = None, cache_dir: str | None = None) -> list[Path]:
    """Hub cache folders to look in, in order: `cache_dir` (LLaMA-Factory ``cache_dir``), `hf_home`/hub,
    ``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``."""
    cands: list[str] = []
    if cache_dir:
        cands.append(cache_dir)
    if hf_home:
        cands.append(os.path.join(hf_home, "hub"))
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        cands.append(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        cands.append(os.path.join(env["HF_HOME"], "hub"))
    if env.get("XDG_CACHE_HOME"):
        cands.append(os.path.join(env["XDG_CACHE_HOME"], "huggingface", "hub"))
    cands.append(os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub"))
    out: list[Path] = []
    for c in cands:
        p = Path(os.path.expanduser(c))
        if p not in out:
            out.append(p)
    return out


def hub_cache_config(repo_id: str, hf_home: str | None = None, cache_dir: str | None = None) -> Path | None:
    """``config.json`` of `repo_id` in the first hub cache that has it: the snapshot ``refs/main`` names,
    else the most recently modified snapshot holding one. Repo folder names are matched exactly, then
    case-insensitively (the hub itself resolves ids case-insensitively)."""
    if not _REPO_ID.match(repo_id):
        return None
    folder = "models--" + repo_id.replace("/", "--")
    for root in hub_cache_dirs(hf_home, cache_dir):
        if not root.is_dir():
            continue
        repo = root / folder
        if not repo.is_dir():
            low = folder.lower()
            try:
                repo = next((d for d in root.iterdir() if d.name.lower() == low and d.is_dir()), repo)
            except OSError:
                continue
        snaps = repo / "snapshots"
        if not snaps.is_dir():
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            rev = ref.read_text(encoding="utf-8", errors="replace").strip()
            if rev and (snaps / rev / "config.json").is_file():
                return snaps / rev / "config.json"
        found = [s / "config.json" for s in snaps.iterdir() if (s / "config.json").is_file()]
        if found:
            return max(found, key=lambda p: p.stat().st_mtime)
    return None


# ---------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------

def _local_candidates(name: str, base_dir: str | None) -> list[Path]:
    p = Path(os.path.expanduser(name))
    if p.is_absolute():
        return [p]
    out = []
    if base_dir:
        out.append(Path(base_dir) / p)
    out.append(Path.cwd() / p)
    return out


def load_arch(model_name_or_path: str, *, base_dir: str | None = None, hf_home: str | None = None,
              cache_dir: str | None = None, _depth: int = 0) -> tuple[ModelArch, SourceDoc | None]:
    """Architecture of LLaMA-Factory's ``model_name_or_path``; see the module docstring for the search order.

    `base_dir` is the directory of the YAML that names the model (relative paths are tried there first);
    `hf_home` and `cache_dir` add hub caches to search before the environment's. A directory holding only a
    PEFT ``adapter_config.json`` is sized as its ``base_model_name_or_path``. Returns the arch and the
    `SourceDoc` of the config.json read (None for a catalog match; the arch's `notes` then say how it matched).

    Raises InputError: a config.json that is malformed or lacks a required field (file and line), or a name
    found nowhere (the message lists where it looked and the closest catalog names).
    """
    name = str(model_name_or_path or "").strip()
    if not name:
        raise InputError("model_name_or_path is empty")
    looked: list[str] = []
    for cand in _local_candidates(name, base_dir):
        if cand.is_file() and cand.name == "config.json":
            return _from_file(cand, name, "")
        if cand.is_dir():
            cfgp = cand / "config.json"
            if cfgp.is_file():
                return _from_file(cfgp, name, "")
            base = _adapter_base(cand)
            if base and base != name and _depth < 3:
                arch, doc = load_arch(base, base_dir=base_dir, hf_home=hf_home, cache_dir=cache_dir, _depth=_depth + 1)
                note = f"{cand} is a PEFT adapter; sized as its base model '{base}' (adapter_config.json)"
                return replace(arch, notes="; ".join(x for x in (note, arch.notes) if x)), doc
            looked.append(f"{cand} has no config.json")
    if not looked:
        looked.append(f"no config.json at {' or '.join(str(c) for c in _local_candidates(name, base_dir))}")
    if _REPO_ID.match(name):
        hit = hub_cache_config(name, hf_home, cache_dir)
        if hit is not None:
            return _from_file(hit, name, "read from the HF hub cache (offline)")
        looked.append("not in the HF cache")
    found = find_in_catalog(name)
    if found is not None:
        entry, how = found
        return catalog_arch(entry, name, how), None
    looked.append("not in the bundled catalog")
    sugg = did_you_mean(name)
    hint = f" (did you mean {', '.join(sugg)}?)" if sugg else ""
    raise InputError(f"unknown model '{name}': {', '.join(looked)}{hint}")


def _adapter_base(d: Path) -> str | None:
    """``base_model_name_or_path`` of a PEFT adapter directory, or None."""
    f = d / "adapter_config.json"
    if not f.is_file():
        return None
    try:
        v = json.loads(f.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return v if isinstance(v, str) and v.strip() else None


def _from_file(path: Path, name: str, note: str) -> tuple[ModelArch, SourceDoc]:
    cfg, doc = read_config_json(path)
    arch = arch_from_config(cfg, name, str(path))
    if note:
        arch = replace(arch, notes="; ".join(x for x in (note, arch.notes) if x))
    return arch, doc
