"""Multimodal wrappers: a text decoder inside a model that adds vision or audio towers and projectors.

Each `Wrapper` names the text config's default model_type, the towers (part name, config key, element-count
function of vision.py), the projector, the class default of ``tie_word_embeddings`` and the sub-config defaults
transformers fills in when a config.json leaves a sub-config out (``sub_configs_defaults`` of each
``configuration_<type>.py``, transformers 5.24.0). LLaMA-Factory freezes towers and projectors by default
(``freeze_vision_tower`` and ``freeze_multi_modal_projector`` default to true), so they are counted in
`ModelArch.extra_params`, outside the decoder layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from finetune_doctor.readers.model.vision import (
    clip_vision_params,
    gemma4_vision_params,
    glm4v_vision_params,
    llama4_vision_params,
    llava_projector_params,
    mistral3_projector_params,
    pixtral_vision_params,
    qwen2_5_vl_vision_params,
    qwen2_audio_encoder_params,
    qwen2_vl_vision_params,
    qwen3_5_vision_params,
    qwen3_vl_vision_params,
    siglip_vision_params,
)

Version = tuple[int, int]
Projector = Callable[[dict[str, Any], int, dict[str, Any]], int]


@dataclass(frozen=True)
class Wrapper:
    """How one multimodal model_type wraps its text decoder (see the module docstring).

    `towers` are ``(part, config key, params(sub_config))``; `projector` is ``params(first tower's config, text
    hidden, wrapper config)``; `tie` the wrapper class's ``tie_word_embeddings`` default (None: the text config
    decides); `tie_from_text` the first transformers version whose wrapper config adopts a true
    ``text_config.tie_word_embeddings`` when the top level leaves it false (a backward-compatibility rule of the
    config classes), None when no version does; `newline` a learned ``image_newline`` vector of the text width.
    """

    text_type: str
    towers: tuple[tuple[str, str, Callable[[dict[str, Any]], int]], ...] = ()
    projector: Projector | None = None
    tie: bool | None = None
    tie_from_text: Version | None = None
    tower_defaults: dict[str, Any] = field(default_factory=dict)   # used when the tower's key is absent
    text_defaults: dict[str, Any] = field(default_factory=dict)    # used when text_config is absent
    newline: bool = False
    fill_partial: bool = False   # tower_defaults also fill a partial sub-config (Gemma3Config's SigLIP defaults)


def _gemma3_projector(vc: dict[str, Any], h: int, _cfg: dict[str, Any]) -> int:
    """Gemma3MultiModalProjector: ``mm_input_projection_weight`` [vision, text] and an RMSNorm of the vision width."""
    return int(vc.get("hidden_size", 1152)) * (h + 1)


def _paligemma_projector(vc: dict[str, Any], _h: int, cfg: dict[str, Any]) -> int:
    """PaliGemmaMultiModalProjector: one Linear with bias from the SigLIP width to ``projection_dim`` (2048)."""
    out = int(cfg.get("projection_dim") or 2048)
    return int(vc.get("hidden_size", 1152)) * out + out


def _audio_projector(ac: dict[str, Any], h: int, _cfg: dict[str, Any]) -> int:
    """Qwen2AudioMultiModalProjector: one Linear with bias from the encoder's ``d_model`` to the text width."""
    return int(ac.get("d_model", 1280)) * h + h


def _gemma4_projector(vc: dict[str, Any], h: int, _cfg: dict[str, Any]) -> int:
    """Gemma4MultimodalEmbedder ``embed_vision``: a norm without scale and ``embedding_projection`` (vision width
    -> text width, no bias)."""
    return int(vc.get("hidden_size", 768)) * h


def _llama4_projector(vc: dict[str, Any], h: int, _cfg: dict[str, Any]) -> int:
    """Llama4MultiModalProjector: linear_1 from ``vision_output_dim`` to the text width, no bias."""
    return int(vc.get("vision_output_dim", 7680)) * h


# PixtralVisionConfig's class defaults (transformers 5.6.0 pixtral/configuration_pixtral.py lines 43-49; head_dim is
# hidden_size // num_attention_heads, line 56): what a ``vision_config`` of model_type 'pixtral' takes for the fields
# it leaves out. mistral-community/pixtral-12b's llava file names none of the widths (issue 21, trial 10 case 04).
VISION_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "pixtral": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                "num_channels": 3, "image_size": 1024, "patch_size": 16},
}


def _llava_tower(vc: dict[str, Any]) -> int:
    """LlavaConfig builds its tower from ``vision_config.model_type`` (transformers llava/configuration_llava.py
    line 67-68: CLIP when the file names none): the Pixtral encoder for 'pixtral' (mistral-community/pixtral-12b,
    ``PixtralVisionModel``), CLIP's vision transformer otherwise."""
    if str(vc.get("model_type") or "") == "pixtral":
        return pixtral_vision_params(vc)
    return clip_vision_params(vc)


_CLIP_LLAVA = {"intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14, "image_size": 336,
               "num_hidden_layers": 24, "num_attention_heads": 16}
_SIGLIP_GEMMA3 = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
                  "image_size": 896, "patch_size": 14, "vision_use_head": False}
_SIGLIP_PALIGEMMA = {"intermediate_size": 4096, "hidden_size": 1152, "patch_size": 14, "image_size": 224,
                     "num_hidden_layers": 27, "num_attention_heads": 16, "vision_use_head": False}
_QWEN_TIE = (5, 24)   # qwen2_vl/qwen2_5_vl adopt the text config's tie flag in 5.24.0, not in 5.6.0

# The Qwen vision towers' class defaults (transformers 5.6.0 configuration_qwen2_vl.py Qwen2VLVisionConfig,
# configuration_qwen2_5_vl.py Qwen2_5_VLVisionConfig, configuration_qwen3_vl.py Qwen3VLVisionConfig): hub files saved
# by newer transformers write only the fields that differ (Qwen/Qwen2.5-VL-3B-Instruct's vision_config names no
# depth, heads or MLP width), and transformers fills the rest from these
QWEN_VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_vl": {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "mlp_ratio": 4, "num_heads": 16,
                 "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    "qwen2_5_vl": {"depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
                   "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
    "qwen3_vl": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
                 "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
                 "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]},
}
QWEN_VISION_DEFAULTS["qwen3_vl_moe"] = QWEN_VISION_DEFAULTS["qwen3_vl"]


def vision_config(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint's ``vision_config`` as transformers builds it: for the Qwen2-VL / Qwen2.5-VL / Qwen3-VL
    wrappers (top-level ``model_type``) the fields the file leaves out take the class defaults
    (`QWEN_VISION_DEFAULTS`); other models' dict as written. None when there is no vision_config dict."""
    vc = raw.get("vision_config") if isinstance(raw, dict) else None
    if not isinstance(vc, dict):
        return None
    return {**QWEN_VISION_DEFAULTS.get(str(raw.get("model_type") or ""), {}), **vc}


WRAPPERS: dict[str, Wrapper] = {
    "qwen2_vl": Wrapper("qwen2_vl_text", (("vision_tower", "vision_config", qwen2_vl_vision_params),),
                        tie=False, tie_from_text=_QWEN_TIE),
    "qwen2_5_vl": Wrapper("qwen2_5_vl_text", (("vision_tower", "vision_config", qwen2_5_vl_vision_params),),
                          tie=False, tie_from_text=_QWEN_TIE),
    "qwen3_vl": Wrapper("qwen3_vl_text", (("vision_tower", "vision_config", qwen3_vl_vision_params),), tie=False),
    "qwen3_vl_moe": Wrapper("qwen3_vl_moe_text", (("vision_tower", "vision_config", qwen3_vl_vision_params),),
                            tie=False),
    "qwen3_5": Wrapper("qwen3_5_text", (("vision_tower", "vision_config", qwen3_5_vision_params),), tie=False),
    "qwen3_5_moe": Wrapper("qwen3_5_moe_text", (("vision_tower", "vision_config", qwen3_5_vision_params),),
                           tie=False),
    "gemma3": Wrapper("gemma3_text", (("vision_tower", "vision_config", siglip_vision_params),), _gemma3_projector,
                      tie=True, tower_defaults=_SIGLIP_GEMMA3, fill_partial=True),
    "gemma4": Wrapper("gemma4_text", (("vision_tower", "vision_config", gemma4_vision_params),), _gemma4_projector,
                      tie=True),
    "llava": Wrapper("llama", (("vision_tower", "vision_config", _llava_tower),), llava_projector_params,
                     tie=False, tie_from_text=(5, 0), tower_defaults=_CLIP_LLAVA),
    "llava_next": Wrapper("llama", (("vision_tower", "vision_config", clip_vision_params),), llava_projector_params,
                          tie=False, tower_defaults=_CLIP_LLAVA, newline=True),
    "video_llava": Wrapper("llama", (("image_tower", "vision_config", clip_vision_params),
                                     ("video_tower", "vision_config", clip_vision_params)), llava_projector_params,
                           tie=False, tower_defaults={**_CLIP_LLAVA, "image_size": 224}),
    "paligemma": Wrapper("gemma", (("vision_tower", "vision_config", siglip_vision_params),), _paligemma_projector,
                         tie=True, tower_defaults=_SIGLIP_PALIGEMMA,
                         text_defaults={"hidden_size": 2048, "num_hidden_layers": 18, "intermediate_size": 16384,
                                        "num_attention_heads": 8, "num_key_value_heads": 1}),
    "qwen2_audio": Wrapper("qwen2", (("audio_tower", "audio_config", qwen2_audio_encoder_params),),
                           _audio_projector, tie=False),
    "mistral3": Wrapper("mistral", (("vision_tower", "vision_config", pixtral_vision_params),),
                        mistral3_projector_params, tie=True,
                        tower_defaults={"intermediate_size": 4096, "hidden_size": 1024, "patch_size": 14,
                                        "image_size": 1540, "num_hidden_layers": 24, "num_attention_heads": 16,
                                        "head_dim": 64},
                        text_defaults={"head_dim": 128, "hidden_size": 5120, "intermediate_size": 32768,
                                       "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
                                       "sliding_window": None, "vocab_size": 131072}),
    "llama4": Wrapper("llama4_text", (("vision_tower", "vision_config", llama4_vision_params),), _llama4_projector,
                      tie=False),
    # GLM-4.1V / GLM-4.5V (configuration_glm4v.py, configuration_glm4v_moe.py: tie_word_embeddings false); the
    # merger is part of the tower's count
    "glm4v": Wrapper("glm4v_text", (("vision_tower", "vision_config", glm4v_vision_params),), tie=False),
    "glm4v_moe": Wrapper("glm4v_moe_text", (("vision_tower", "vision_config", glm4v_vision_params),), tie=False),
}


def tie_word_embeddings(w: Wrapper, cfg: dict[str, Any], text_cfg: dict[str, Any], version: Version) -> bool:
    """Whether the wrapper's lm_head is tied: the top-level flag when the config sets it true; a false or absent
    one gives way to a true ``text_config`` flag in the versions that adopt it (`Wrapper.tie_from_text`); else
    the top-level flag or the class default (the text config's own when the class has none)."""
    top = cfg.get("tie_word_embeddings")
    nested = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    if w.tie is None:
        return bool(top if top is not None else text_cfg.get("tie_word_embeddings", False))
    if not top and w.tie_from_text is not None and version >= w.tie_from_text and nested.get("tie_word_embeddings"):
        return True
    return bool(w.tie if top is None else top)
