"""The config-driven generic decoder: any ``config.json`` onto `ModelArch`, without torch or model code.

One reader serves every family. It takes each quantity under every spelling the families use (hidden size as
``hidden_size``/``n_embd``/``d_model``/``dim``; experts as ``num_experts``/``num_local_experts``/
``n_routed_experts``/``moe_num_experts``; ...), then applies the few traits that field names do not reveal
(`TRAITS`: which families put a bias on q/k/v, norm q and k per head, gate the shared expert, ...), each traced to
the family's ``modeling_<type>.py`` in transformers 5.x. Layouts covered: dense, GQA/MQA, MLA (``kv_lora_rank``,
``q_lora_rank``), MoE with shared experts and dense layers placed by ``first_k_dense_replace``,
``decoder_sparse_step``, ``mlp_only_layers``, ``moe_layer_freq`` or ``mlp_layer_types``, hybrid layers
(``layer_types``: sliding, full and linear attention such as Gated DeltaNet), attention sinks, tied embeddings,
and ``text_config``/``vision_config`` nesting. Families whose layer is not LLaMA-shaped (GPT-2, BLOOM, Falcon,
StarCoder2, Cohere, OLMo, DBRX, Jamba's Mamba layers, Llama-4's interleaved MoE, MiMo-V2-Flash, Gemma-4) are
finished by ``families.py``; multimodal wrappers (towers, projectors, tie rules) are ``wrappers.py``. The
remote-code families LLaMA-Factory trains (Qwen(1), ChatGLM2/3, InternLM2, Baichuan) keep their own small readers
in ``remote.py``. Where transformers releases build a type differently (5.6.0, LLaMA-Factory's test pin, against
5.24.0), the reader follows the release the run uses (`transformers_version`).

tests/test_model_parity.py compares the result with the transformers model built on the meta device for every
causal-LM and image-text-to-text type transformers registers (types it does not model are listed there).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from finetune_doctor.arch import LinearAttention, ModelArch
from finetune_doctor.quant import parse_quantization_config
from finetune_doctor.readers.model.configjson import ConfigView
from finetune_doctor.readers.model.defaults import DEFAULTS, defaults_for
from finetune_doctor.readers.model.errors import ModelConfigInvalid
from finetune_doctor.readers.model.families import FAMILIES
from finetune_doctor.readers.model.remote import REMOTE_READERS
from finetune_doctor.readers.model.verified import GENERIC_VERIFIED
from finetune_doctor.readers.model.wrappers import VISION_CLASS_DEFAULTS, WRAPPERS, Version, tie_word_embeddings

# Architectures whose memory the generic decoder cannot size even from their config.json, and what it leaves out.
# MOSS-VL (LF main, template moss_vl; remote code) attends from the text decoder to the video frames through
# frame-level causal cross-attention (LF data/mm_plugin.py MossVLPlugin builds that mask): those layers are not
# LLaMA-shaped and not described by standard config fields, so only the self-attention decoder would be counted.
NOT_SIZED = {
    "moss_vl": "MOSS-VL's cross-attention from the text decoder to the vision frames (remote code) is not sized by "
               "the doctor's generic decoder: memory for this model is not judged beyond its text decoder",
}
NOT_SIZED_NAMES = {"moss-vl": "moss_vl"}   # a name that says the family when no config.json is at hand


def not_sized(model_type: str | None = None, name: str | None = None) -> str | None:
    """The one line saying what the doctor does not judge for a model it cannot size (`NOT_SIZED`), by its
    model_type or, without a config.json, by a name (``OpenMOSS-Team/MOSS-VL-Instruct-0708``); else None."""
    if model_type and model_type.lower() in NOT_SIZED:
        return NOT_SIZED[model_type.lower()]
    low = (name or "").lower().replace("_", "-")
    return next((NOT_SIZED[mt] for key, mt in NOT_SIZED_NAMES.items() if key in low), None)


# Spellings of each quantity, most common first.
HIDDEN = ("hidden_size", "n_embd", "d_model", "dim", "model_dim")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads")
HEAD_DIM = ("head_dim", "kv_channels", "attention_head_dim", "d_head")
FFN = ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", "d_ff")
VOCAB = ("vocab_size", "padded_vocab_size", "n_vocab")
EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
TOPK = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k", "top_k")
EXPERT_FFN = ("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size")
SHARED_COUNT = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")

# Family traits that field names do not reveal (transformers 5.x modeling files):
#   qkv_bias     q/k/v carry a bias whatever attention_bias says (Qwen2 family: modeling_qwen2.py)
#   qk_norm      per-head RMSNorm on q and k (Qwen3, Gemma 3, Qwen3-Next, Qwen3.5: q_norm/k_norm of head_dim)
#   norms        norm modules per layer (Gemma 2/3, GLM-4-0414: pre and post norms around attention and MLP)
#   shared_gate  a 1-output sigmoid gate on the shared expert (Qwen2-MoE, Qwen3-Next, Qwen3.5-MoE)
#   sparse_step  MoE placement by ``decoder_sparse_step``/``mlp_only_layers`` (Qwen MoE family)
#   out_gate     q_proj doubled for a per-head output gate (Qwen3-Next, Qwen3.5 full-attention layers)
#   sinks        one learned sink logit per head (gpt-oss ``self_attn.sinks``)
#   router_bias  router and experts carry biases (gpt-oss ``GptOssTopKRouter``/``GptOssExperts``)
#   split_linear Gated DeltaNet with four input projections (Qwen3.5) instead of two (Qwen3-Next)
#   bias_qkv_only attention_bias puts a bias on q/k/v but not on o_proj (GLM: modeling_glm.py GlmAttention)
#   fused_always experts were never separate nn.Linear modules, in 4.x either (gpt-oss GptOssExperts)
TRAITS: dict[str, dict[str, Any]] = {
    "qwen2": {"qkv_bias": True}, "qwen2_moe": {"qkv_bias": True, "shared_gate": True, "sparse_step": True},
    "qwen2_vl_text": {"qkv_bias": True}, "qwen2_5_vl_text": {"qkv_bias": True},
    "qwen3": {"qk_norm": True}, "qwen3_vl_text": {"qk_norm": True},
    "qwen3_moe": {"qk_norm": True, "sparse_step": True}, "qwen3_vl_moe_text": {"qk_norm": True, "sparse_step": True},
    "qwen3_next": {"qk_norm": True, "sparse_step": True, "shared_gate": True, "out_gate": True},
    "qwen3_5_text": {"qk_norm": True, "out_gate": True, "split_linear": True},
    "qwen3_5_moe_text": {"qk_norm": True, "sparse_step": True, "shared_gate": True, "out_gate": True,
                         "split_linear": True},
    "gemma2": {"norms": 4}, "gemma3_text": {"norms": 4, "qk_norm": True},
    "glm": {"bias_qkv_only": True}, "glm4": {"norms": 4, "bias_qkv_only": True},
    # GLM-4.1V's text model keeps GLM-4-0414's four norms a layer (modeling_glm4v.py Glm4vTextDecoderLayer);
    # GLM-4.5V's is GLM-4.5-Air's decoder (two norms, q/k/v bias only)
    "glm4v_text": {"norms": 4, "bias_qkv_only": True}, "glm4v_moe_text": {"bias_qkv_only": True},
    "gpt_oss": {"sinks": True, "router_bias": True, "qkv_bias": True, "o_bias": True, "fused_always": True},
    "smollm3": {}, "mixtral": {"moe_width_is_ffn": True}, "jamba": {"moe_width_is_ffn": True},
}
for _t in ("qwen2_vl_text", "qwen2_5_vl_text"):
    TRAITS[_t].setdefault("qkv_bias", True)

# transformers 5 fused the routed experts of every in-library MoE into 3-D parameters (``*Experts`` modules with
# ``gate_up_proj``/``down_proj`` tensors) and replaced the ``gate`` nn.Linear router by ``*TopKRouter``; in 4.x
# each expert was an MLP of nn.Linear modules (e.g. 4.57 ``Qwen3MoeSparseMoeBlock.experts = nn.ModuleList``).
FUSED_FROM_MAJOR = 5

_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


# Quantization formats whose unconverted tensors (attention, router, embeddings, lm_head) ship in bfloat16 and
# whose transformers quantizer loads in bfloat16 when no dtype is named: MXFP4 (gpt-oss model card, arXiv:2508.10925
# §2: "MoE weights in MXFP4, the rest in BF16"; transformers quantizers/quantizer_mxfp4.py ``update_dtype``).
_BF16_WHEN_UNNAMED = frozenset({"mxfp4"})


def checkpoint_dtype(cfg: dict[str, Any], *more: dict[str, Any]) -> tuple[str, str | None]:
    """Checkpoint dtype from ``torch_dtype`` (transformers < 5) or ``dtype`` (transformers >= 5).

    LLaMA-Factory loads with ``torch_dtype="auto"`` (model/loader.py:154 at ff6d4d1): the config's dtype, else the
    dtype of the checkpoint's first floating-point tensor (transformers modeling_utils.py ``_get_dtype``). Without
    a named dtype the weights themselves decide, which only their files tell: float32 is then the conservative
    answer, with a note, except for an MXFP4 checkpoint (bfloat16, `_BF16_WHEN_UNNAMED`).
    """
    for d in (cfg, *more):
        v = d.get("torch_dtype") or d.get("dtype")
        if isinstance(v, str) and v not in ("auto",):
            v = v.replace("torch.", "").lower()
            return _DTYPE_ALIASES.get(v, v), None
    q = cfg.get("quantization_config")
    method = str(q.get("quant_method") or "").lower() if isinstance(q, dict) else ""
    if method in _BF16_WHEN_UNNAMED:
        return "bfloat16", (f"config.json names no dtype; its {method.upper()} checkpoint keeps the unquantized "
                            "tensors in bfloat16, which LLaMA-Factory's torch_dtype='auto' load takes")
    return "float32", ("config.json names no torch_dtype/dtype; LLaMA-Factory's torch_dtype='auto' load then takes "
                       "the dtype of the checkpoint's first floating-point tensor, assumed float32 here")


def _sliding(c: ConfigView) -> int | None:
    if c.cfg.get("use_sliding_window") is False:
        return None
    # an explicit null turns the window off (Mistral-7B-v0.2+), so the class default applies only when absent
    sw = c.cfg["sliding_window"] if "sliding_window" in c.cfg else c.defaults.get("sliding_window")
    return int(sw) if isinstance(sw, (int, float)) and not isinstance(sw, bool) and 0 < sw < 1 << 40 else None


def _bool(c: ConfigView, *names: str, default: bool = False) -> bool:
    return bool(c.get(*names, default=default))


def _moe_fields(c: ConfigView, mt: str, n_layers: int, ffn: int) -> dict[str, Any]:
    """Experts, their width, shared experts and which layers stay dense, under every key spelling."""
    tr = TRAITS.get(mt, {})
    n_exp = c.opt_int(*EXPERTS, kind="num_experts") or 0
    if n_exp <= 1 and not c.has("n_routed_experts"):
        return {}
    topk = c.opt_int(*TOPK, kind="num_experts_per_tok") or min(2, n_exp)
    width = c.opt_int(*EXPERT_FFN, kind="intermediate_size")
    if width is None or tr.get("moe_width_is_ffn"):
        width = ffn
    shared = c.opt_int("shared_expert_intermediate_size", kind="intermediate_size") or 0
    if not shared:
        shared = width * (c.opt_int(*SHARED_COUNT, kind="num_experts") or 0)
    first_k = c.opt_int("first_k_dense_replace", "first_k_dense") or 0
    dense: set[int] = set(c.int_list("mlp_only_layers"))
    mlp_types = c.str_list("mlp_layer_types")
    if mlp_types:
        dense |= {i for i, t in enumerate(mlp_types) if t.lower() in ("dense", "mlp")}
    elif isinstance(c.cfg.get("moe_layer_freq"), list):
        # a per-layer list (MiMo-V2-Flash's hub config): 1 marks a MoE layer, 0 a dense one
        dense |= {i for i, f in enumerate(c.int_list("moe_layer_freq")) if not f}
    else:
        step = c.opt_int("decoder_sparse_step")
        freq = c.opt_int("moe_layer_freq")
        if tr.get("sparse_step") or (step and not freq):
            s = max(step or 1, 1)
            dense |= {i for i in range(n_layers) if (i + 1) % s != 0}
        elif freq and freq > 1:
            dense |= {i for i in range(first_k, n_layers) if i % freq != 0}
    return {
        "num_experts": n_exp, "num_experts_per_tok": topk, "moe_intermediate_size": width,
        "shared_expert_intermediate_size": shared,
        "shared_expert_gate": bool(tr.get("shared_gate") and shared),
        "first_k_dense": first_k, "dense_layers": tuple(sorted(i for i in dense if first_k <= i < n_layers)),
        "router_bias": bool(tr.get("router_bias")),
    }


def _linear_attention(c: ConfigView, mt: str) -> LinearAttention | None:
    if not c.has("linear_num_value_heads", "linear_num_key_heads"):
        return None
    return LinearAttention(
        num_k_heads=c.req("linear_num_key_heads", kind="num_heads"),
        num_v_heads=c.req("linear_num_value_heads", kind="num_heads"),
        k_head_dim=c.req("linear_key_head_dim", kind="head_dim"),
        v_head_dim=c.req("linear_value_head_dim", kind="head_dim"),
        conv_kernel=c.opt_int("linear_conv_kernel_dim", kind="other") or 4,
        split=bool(TRAITS.get(mt, {}).get("split_linear")))


def _layer_types(c: ConfigView, n_layers: int) -> tuple[str, ...]:
    types = c.str_list("layer_types")
    if not types and c.has("linear_num_value_heads", "linear_num_key_heads"):
        # Qwen3-Next / Qwen3.5 without a list: full attention every `full_attention_interval` (default 4) layers,
        # Gated DeltaNet between (configuration_qwen3_next.py / configuration_qwen3_5.py __post_init__)
        k = c.opt_int("full_attention_interval", kind="other") or 4
        return tuple("full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n_layers))
    if not types:
        return ()
    if len(types) != n_layers:
        raise c.error("layer_types", f"config.json 'layer_types' lists {len(types)} layers, not num_hidden_layers "
                                     f"({n_layers})")
    return tuple(types)


# MoE families whose router stayed an nn.Linear (``gate``, ``router``, GraniteMoE's ``router.layer``) into 5.x while
# the experts were fused: LoRA `all` wraps it. So in transformers 5.6.0 (modeling_aria.py, modeling_deepseek_v2.py,
# modeling_jamba.py, modeling_granitemoe*.py), a ``*TopKRouter`` parameter in 5.24.0: model_type -> the first release
# checked with the parameter.
ROUTER_LINEAR_BEFORE: dict[str, tuple[int, int]] = dict.fromkeys(
    ("aria_text", "deepseek_v2", "jamba", "granitemoe", "granitemoeshared"), (5, 24))


def decoder_fields(c: ConfigView, mt: str, transformers_major: int | None = None,
                   version: tuple[int, int] | None = None) -> dict[str, Any]:
    """`ModelArch` fields of one decoder config (a text config), read generically. Raises ModelConfigInvalid."""
    tr = TRAITS.get(mt, {})
    hidden = c.req(*HIDDEN, kind="hidden_size")
    heads = c.req(*HEADS, kind="num_heads")
    kv = c.opt_int(*KV_HEADS, kind="num_kv_heads")
    if kv is None and c.get("multi_query", "multi_query_attention") is True:
        kv = 1
    if kv is not None and kv > heads:
        raise c.error(c._which(KV_HEADS), f"config.json has {kv} key/value heads, more than its {heads} attention heads")
    # without head_dim transformers takes hidden_size // num_attention_heads, floored (e.g. modeling_llama.py
    # LlamaAttention; Glm4MoeConfig's defaults 4096 / 96 give 42), and so does `ModelArch.hd`
    hd = c.opt_int(*HEAD_DIM, kind="head_dim")
    n_layers = c.req(*LAYERS, kind="num_layers")
    ffn = c.opt_int(*FFN, kind="intermediate_size")
    if ffn is None:
        ffn = 4 * hidden
    attn_bias = _bool(c, "attention_bias", "bias", "use_bias")
    # Seed-OSS sizes o_proj's bias by its own flag (modeling_seed_oss.py SeedOssAttention: attention_out_bias)
    out_bias = c.cfg.get("attention_out_bias")
    d: dict[str, Any] = {
        "hidden_size": hidden, "num_layers": n_layers, "num_heads": heads,
        "num_kv_heads": kv if kv is not None else heads, "intermediate_size": ffn,
        "vocab_size": c.req(*VOCAB, kind="vocab_size"), "head_dim": hd,
        "tie_word_embeddings": _bool(c, "tie_word_embeddings", "tie_embeddings"),
        "max_position_embeddings": c.opt_int("max_position_embeddings", "n_positions", "seq_length"),
        "qkv_bias": bool(tr.get("qkv_bias")) or attn_bias or _bool(c, "qkv_bias"),
        "o_bias": bool(tr.get("o_bias")) or (bool(out_bias) if isinstance(out_bias, bool)
                                             else attn_bias and not tr.get("bias_qkv_only")),
        "mlp_bias": _bool(c, "mlp_bias"),
        "qk_norm": bool(tr.get("qk_norm")), "layer_norms": int(tr.get("norms", 2)),
        "sliding_window": _sliding(c), "layer_types": _layer_types(c, n_layers),
        "attn_output_gate": bool(tr.get("out_gate")), "attention_sinks": bool(tr.get("sinks")),
        "linear_attention": _linear_attention(c, mt),
    }
    if c.has("kv_lora_rank"):
        nope, rope = c.req("qk_nope_head_dim", kind="head_dim"), c.req("qk_rope_head_dim", kind="head_dim")
        q_rank = c.cfg["q_lora_rank"] if "q_lora_rank" in c.cfg else c.defaults.get("q_lora_rank")
        d.update(q_lora_rank=c.opt_int("q_lora_rank", kind="rank") if q_rank else None,
                 kv_lora_rank=c.req("kv_lora_rank", kind="rank"), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                 v_head_dim=c.req("v_head_dim", kind="head_dim"), head_dim=nope + rope, qkv_bias=False)
    d.update(_moe_fields(c, mt, n_layers, ffn))
    if d.get("num_experts"):
        fused = bool(tr.get("fused_always")) or (transformers_major or 4) >= FUSED_FROM_MAJOR
        linear = not fused or (mt in ROUTER_LINEAR_BEFORE and version is not None
                               and version < ROUTER_LINEAR_BEFORE[mt])
        d.update(experts_fused=fused, router_linear=linear)
    return d


NEWEST: Version = (5, 24)   # the newest transformers the tables here were checked against


def transformers_version(v: int | str | tuple[int, ...] | None) -> Version:
    """(major, minor) of the transformers the run uses from a major number (its newest minor), a version string
    ("5.6.0") or a tuple; None: the newest checked (`NEWEST`)."""
    if v is None:
        return NEWEST
    if isinstance(v, int):
        return (v, 999) if v != NEWEST[0] else NEWEST
    if isinstance(v, str):
        parts = [int("".join(ch for ch in x if ch.isdigit()) or 0) for x in v.split(".")[:2]]
        return (parts[0], parts[1] if len(parts) > 1 else 0)
    return (int(v[0]), int(v[1]) if len(v) > 1 else 0)


def arch_from_config(cfg: dict[str, Any], name: str, source: str, *,
                     positions: dict[str, tuple[int, int]] | None = None,
                     transformers_major: int | str | None = None) -> ModelArch:
    """Normalise one ``config.json`` dict into a `ModelArch` (the generic decoder).

    `name` is what the user called the model; `source` where the dict came from (a path or URL; the file of any
    error); `positions` the key positions of that file (for the line of an error); `transformers_major` the
    transformers the run uses, a major number or a version string (MoE experts are nn.Linear modules before 5; unknown: 4.x, the
    layout LLaMA-Factory's MoE reports were made with). Multimodal wrappers count their vision tower and projector
    in `ModelArch.extra_params` (frozen by default in LLaMA-Factory: ``freeze_vision_tower`` and
    ``freeze_multi_modal_projector`` both default to true).

    Raises ModelConfigInvalid (an InputError naming the file, line and key) when a required field is missing, of
    the wrong type or out of range.
    """
    if not isinstance(cfg, dict):
        raise ModelConfigInvalid("model config must be a JSON object", file=source, missing="a readable config.json")
    try:
        return _arch_from_config(cfg, name, source, positions or {}, transformers_major)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as e:  # e.g. "depth": "32"
        if isinstance(e, ModelConfigInvalid):
            raise
        raise ModelConfigInvalid(f"config.json has a field of an unexpected type: {e}", file=source,
                                 missing="a readable config.json") from None


# where a multimodal config.json nests its text decoder: transformers' own classes use ``text_config``; remote-code
# InternVL-Chat (model_type internvl_chat, configuration_internvl_chat.py) uses ``llm_config``, DeepSeek-VL / Janus
# ``language_config`` (trial 9: an InternVL3 config was refused for the top level's missing hidden_size)
NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config")


def nested_text_key(cfg: dict[str, Any]) -> str | None:
    """The first of NESTED_TEXT_KEYS that `cfg` holds as an object, else None."""
    return next((k for k in NESTED_TEXT_KEYS if isinstance(cfg.get(k), dict)), None)


def _split_wrapper(cfg: dict[str, Any], mt: str, notes: list[str], version: Version
                   ) -> tuple[dict[str, Any], str, str, list[tuple[str, int]]]:
    """(text config, its model_type, its dotted prefix in the file, tower/projector parts) of a wrapper."""
    key = nested_text_key(cfg)
    nested = cfg[key] if key else {}
    # Older Qwen2-VL / Qwen2.5-VL / PaliGemma files keep text fields at the top level; newer ones nest text_config.
    top = {k: v for k, v in cfg.items() if k not in NESTED_TEXT_KEYS + ("vision_config", "audio_config")}
    prefix = key or ""
    parts: list[tuple[str, int]] = []
    w = WRAPPERS.get(mt)
    if w is not None and isinstance(cfg.get("audio_config"), dict) and not any(k == "audio_config"
                                                                             for _, k, _ in w.towers):
        notes.append(f"'{mt}' audio tower (audio_config) is not counted by the generic decoder: the meta-device "
                     "build gives the exact count")
    if w is None:
        text_mt = str(nested.get("model_type") or "").lower()
        notes.append(f"multimodal model_type '{mt}': only its text model ('{text_mt or '?'}') is counted; "
                     "the vision tower is not")
        return {**top, **nested}, text_mt, prefix, parts
    text_cfg = {**(w.text_defaults if not nested else {}), **top, **nested}
    text_mt = str(nested.get("model_type") or w.text_type).lower()
    text_cfg["tie_word_embeddings"] = tie_word_embeddings(w, cfg, text_cfg, version)
    hidden = int(text_cfg.get("hidden_size") or defaults_for(text_mt, version).get("hidden_size") or 0)
    first: dict[str, Any] | None = None
    for part, key, fn in w.towers:
        sub = cfg.get(key)
        # an absent sub-config takes the wrapper's own defaults; a given one the tower class's (Gemma 3: both)
        tc = dict(w.tower_defaults) if not isinstance(sub, dict) else (
            {**w.tower_defaults, **sub} if w.fill_partial else dict(sub))
        # a tower config of a known class takes that class's defaults for what it leaves out (pixtral in llava)
        tc = {**VISION_CLASS_DEFAULTS.get(str(tc.get("model_type") or ""), {}), **tc}
        first = tc if first is None else first
        parts.append((part, fn(tc)))
    if w.projector is not None:
        parts.append(("projector", w.projector(first or {}, hidden, cfg)))
    if w.newline:
        parts.append(("image_newline", hidden))
    return text_cfg, text_mt, prefix, parts


def _arch_from_config(cfg: dict[str, Any], name: str, source: str, positions: dict[str, tuple[int, int]],
                      transformers_major: int | str | None) -> ModelArch:
    mt = str(cfg.get("model_type") or "").lower()
    version = transformers_version(transformers_major)
    notes: list[str] = [n for n in (not_sized(mt),) if n]
    parts: list[tuple[str, int]] = []
    text_cfg, text_mt, prefix = cfg, mt, ""
    if mt in WRAPPERS or (mt not in REMOTE_READERS and nested_text_key(cfg)):
        text_cfg, text_mt, prefix, parts = _split_wrapper(cfg, mt, notes, version)
    c = ConfigView(text_cfg, defaults_for(text_mt, version), source, text_mt, positions, prefix)
    if text_mt in REMOTE_READERS:
        fields = REMOTE_READERS[text_mt](c)
    else:
        if text_mt not in DEFAULTS and text_mt not in TRAITS and text_mt not in GENERIC_VERIFIED \
                and text_mt not in FAMILIES:
            notes.append(f"model_type '{text_mt or '(none)'}' is not one the doctor has verified: read by the generic "
                         "decoder from its field names as LLaMA-shaped (q/k/v/o, gated MLP, RMSNorm)")
        major = version[0] if transformers_major is not None else None
        fields = decoder_fields(c, text_mt, major, version)
        if text_mt in FAMILIES:
            fields = FAMILIES[text_mt](c, fields, version)
            if fields.get("_note"):
                notes.append(fields.pop("_note"))
    if text_mt == "qwen":
        dtype, dnote = _qwen1_dtype(cfg)
    else:
        dtype, dnote = checkpoint_dtype(cfg, text_cfg)
    if dnote:
        notes.append(dnote)
    quant = parse_quantization_config(cfg.get("quantization_config") or text_cfg.get("quantization_config"))
    extra = sum(n for _, n in parts)
    arch = ModelArch(name=name, model_type=mt or text_mt, dtype=dtype, extra_params=extra, extra_parts=tuple(parts),
                     source=source, notes="; ".join(notes), raw=dict(cfg), quant=quant, **fields)
    return arch


def _qwen1_dtype(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """Qwen (first generation) picks its own precision from the ``bf16``/``fp16``/``fp32`` flags; with none
    set it takes bf16 where the GPU supports it (``modeling_qwen.py`` ``QWenLMHeadModel.__init__``)."""
    for flag, dt in (("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")):
        if cfg.get(flag):
            return dt, None
    if cfg.get("torch_dtype") or cfg.get("dtype"):
        return checkpoint_dtype(cfg)
    return "bfloat16", "Qwen config sets none of bf16/fp16/fp32: its modeling code picks bf16 where supported"


def with_note(arch: ModelArch, note: str) -> ModelArch:
    """`arch` with `note` put before its existing notes."""
    return replace(arch, notes="; ".join(x for x in (note, arch.notes) if x))
