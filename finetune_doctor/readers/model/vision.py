"""Parameter counts of the vision towers of multimodal checkpoints (element counts).

Each function takes the checkpoint's ``vision_config`` dict (config.json field names). Shapes follow the
transformers modules named in each docstring; tests/test_arch.py checks every function against
``sum(p.numel())`` of those modules built on the meta device.
"""

from __future__ import annotations

from typing import Any

def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def siglip_vision_params(vc: dict[str, Any]) -> int:
    """SigLIP vision encoder (transformers ``siglip/modeling_siglip.py`` ``SiglipVisionTransformer``).

    Patch conv with bias, learned position embeddings for ``(image_size // patch_size)**2`` patches, pre-LN
    encoder layers (LayerNorm with bias, q/k/v/out with bias, fc1/fc2 MLP with bias), a post LayerNorm and,
    when ``vision_use_head`` (default true), the attention-pooling head. Gemma-3 sets ``vision_use_head: false``.
    """
    e, i = int(vc.get("hidden_size", 768)), int(vc.get("intermediate_size", 3072))
    layers = int(vc.get("num_hidden_layers", 12))
    c, p, size = int(vc.get("num_channels", 3)), int(vc.get("patch_size", 16)), int(vc.get("image_size", 224))
    n = c * p * p * e + e + (size // p) ** 2 * e
    per_layer = 2 * 2 * e + 4 * _linear(e, e) + _linear(e, i) + _linear(i, e)
    n += layers * per_layer + 2 * e
    if vc.get("vision_use_head", True):
        n += e + _linear(e, 3 * e) + _linear(e, e) + 2 * e + _linear(e, i) + _linear(i, e)
    return n


def qwen2_vl_vision_params(vc: dict[str, Any]) -> int:
    """Qwen2-VL ViT with its patch merger (transformers ``qwen2_vl/modeling_qwen2_vl.py``
    ``Qwen2VisionTransformerPretrainedModel``).

    ``embed_dim`` is the ViT width and ``hidden_size`` the language model width the merger projects to.
    Conv3d patch embedding without bias over ``temporal_patch_size x patch_size^2`` pixels; blocks of
    LayerNorm(+bias), fused qkv with bias, proj with bias, fc1/fc2 MLP (``mlp_ratio``) with bias; merger =
    LayerNorm(embed_dim) then Linear(m^2 E, m^2 E) and Linear(m^2 E, hidden_size), both with bias.
    """
    e = int(vc.get("embed_dim", 1280))
    out = int(vc.get("hidden_size", 3584))
    r = int(round(float(vc.get("mlp_ratio", 4)) * e))
    depth = int(vc.get("depth", 32))
    c = int(vc.get("in_channels", vc.get("in_chans", 3)))
    p, t = int(vc.get("patch_size", 14)), int(vc.get("temporal_patch_size", 2))
    m2 = int(vc.get("spatial_merge_size", 2)) ** 2
    n = c * t * p * p * e
    n += depth * (2 * 2 * e + _linear(e, 3 * e) + _linear(e, e) + _linear(e, r) + _linear(r, e))
    n += 2 * e + _linear(m2 * e, m2 * e) + _linear(m2 * e, out)
    return n


def qwen2_5_vl_vision_params(vc: dict[str, Any]) -> int:
    """Qwen2.5-VL window-attention ViT with merger (transformers ``qwen2_5_vl/modeling_qwen2_5_vl.py``).

    Same layout as Qwen2-VL but with RMSNorm (weight only), a gated SiLU MLP of gate/up/down with bias and
    width ``intermediate_size``; the ViT width is ``hidden_size`` and the merger output ``out_hidden_size``.
    """
    e, i = int(vc.get("hidden_size", 1280)), int(vc.get("intermediate_size", 3420))
    out = int(vc.get("out_hidden_size", 3584))
    depth = int(vc.get("depth", 32))
    c = int(vc.get("in_channels", vc.get("in_chans", 3)))
    p, t = int(vc.get("patch_size", 14)), int(vc.get("temporal_patch_size", 2))
    m2 = int(vc.get("spatial_merge_size", 2)) ** 2
    n = c * t * p * p * e
    n += depth * (2 * e + _linear(e, 3 * e) + _linear(e, e) + 2 * _linear(e, i) + _linear(i, e))
    n += e + _linear(m2 * e, m2 * e) + _linear(m2 * e, out)
    return n


def qwen3_vl_vision_params(vc: dict[str, Any]) -> int:
    """Qwen3-VL ViT with merger and DeepStack mergers (transformers ``qwen3_vl/modeling_qwen3_vl.py``).

    Conv3d patch embedding with bias, learned position embeddings (``num_position_embeddings``), blocks of
    LayerNorm(+bias), qkv/proj with bias and a fc1/fc2 MLP with bias; the final merger normalises the ViT
    width before the 2x2 shuffle, each of the ``len(deepstack_visual_indexes)`` DeepStack mergers normalises
    after it (LayerNorm over m^2 E).
    """
    e, i = int(vc.get("hidden_size", 1152)), int(vc.get("intermediate_size", 4304))
    out = int(vc.get("out_hidden_size", 3584))
    depth = int(vc.get("depth", 27))
    c = int(vc.get("in_channels", 3))
    p, t = int(vc.get("patch_size", 16)), int(vc.get("temporal_patch_size", 2))
    m2 = int(vc.get("spatial_merge_size", 2)) ** 2
    npos = int(vc.get("num_position_embeddings", 2304))
    n = c * t * p * p * e + e + npos * e
    n += depth * (2 * 2 * e + _linear(e, 3 * e) + _linear(e, e) + _linear(e, i) + _linear(i, e))
    mlp = _linear(m2 * e, m2 * e) + _linear(m2 * e, out)
    n += 2 * e + mlp
    n += len(vc.get("deepstack_visual_indexes", [8, 16, 24]) or []) * (2 * m2 * e + mlp)
    return n


def qwen3_5_vision_params(vc: dict[str, Any]) -> int:
    """Qwen3.5 ViT with its merger (transformers ``qwen3_5/modeling_qwen3_5.py`` ``Qwen3_5VisionModel``): the
    Qwen3-VL tower without DeepStack mergers (the class builds none, whatever ``deepstack_visual_indexes`` says)."""
    return qwen3_vl_vision_params({**vc, "deepstack_visual_indexes": []})


def clip_vision_params(vc: dict[str, Any]) -> int:
    """CLIP vision encoder (transformers ``clip/modeling_clip.py`` ``CLIPVisionTransformer``; defaults of
    ``CLIPVisionConfig``): class embedding, patch conv without bias, learned positions for
    ``(image_size // patch_size)**2 + 1`` tokens, ``pre_layrnorm``, encoder layers (two LayerNorms with bias,
    q/k/v/out_proj with bias, fc1/fc2 with bias) and ``post_layernorm``."""
    e, i = int(vc.get("hidden_size", 768)), int(vc.get("intermediate_size", 3072))
    layers = int(vc.get("num_hidden_layers", 12))
    c, p, size = int(vc.get("num_channels", 3)), int(vc.get("patch_size", 32)), int(vc.get("image_size", 224))
    n = e + c * p * p * e + ((size // p) ** 2 + 1) * e + 2 * e
    n += layers * (2 * 2 * e + 4 * _linear(e, e) + _linear(e, i) + _linear(i, e))
    return n + 2 * e


def llava_projector_params(vc: dict[str, Any], text_hidden: int, cfg: dict[str, Any]) -> int:
    """``LlavaMultiModalProjector`` (llava, llava_next, video_llava): linear_1 from the vision width times the
    number of ``vision_feature_layer`` entries to the text width, GELU, linear_2 text -> text, both with
    ``multimodal_projector_bias`` (default true)."""
    layers = cfg.get("vision_feature_layer", -2)
    k = len(layers) if isinstance(layers, list) else 1
    b = bool(cfg.get("multimodal_projector_bias", True))
    e = int(vc.get("hidden_size", 768))
    return _linear(e * k, text_hidden, b) + _linear(text_hidden, text_hidden, b)


def pixtral_vision_params(vc: dict[str, Any]) -> int:
    """Pixtral vision encoder (transformers ``pixtral/modeling_pixtral.py`` ``PixtralVisionModel``; defaults of
    ``PixtralVisionConfig``): patch conv without bias, ``ln_pre`` RMSNorm, layers of two RMSNorms, q/k/v/o
    without bias (``num_attention_heads`` x ``head_dim``) and a gated MLP gate/up/down without bias."""
    e, i = int(vc.get("hidden_size", 1024)), int(vc.get("intermediate_size", 4096))
    heads = int(vc.get("num_attention_heads", 16))
    hd = int(vc.get("head_dim") or e // heads)
    c, p = int(vc.get("num_channels", 3)), int(vc.get("patch_size", 16))
    layers = int(vc.get("num_hidden_layers", 24))
    return c * p * p * e + e + layers * (2 * e + 4 * e * heads * hd + 3 * e * i)


def mistral3_projector_params(vc: dict[str, Any], text_hidden: int, cfg: dict[str, Any]) -> int:
    """``Mistral3MultiModalProjector``: RMSNorm over the vision width, the patch merger (``merging_layer``:
    vision width x ``spatial_merge_size``^2 -> vision width, no bias), linear_1 (vision width x feature layers ->
    text width) and linear_2 (text -> text), both with ``multimodal_projector_bias`` (default false)."""
    e = int(vc.get("hidden_size", 1024))
    m2 = int(cfg.get("spatial_merge_size", 2)) ** 2
    layers = cfg.get("vision_feature_layer", -1)
    k = len(layers) if isinstance(layers, list) else 1
    b = bool(cfg.get("multimodal_projector_bias", False))
    return e + e * m2 * e + _linear(e * k, text_hidden, b) + _linear(text_hidden, text_hidden, b)


def llama4_vision_params(vc: dict[str, Any]) -> int:
    """Llama-4 vision model (transformers ``llama4/modeling_llama4.py`` ``Llama4VisionModel``; defaults of
    ``Llama4VisionConfig``): unfolded patch Linear without bias, class embedding, learned positions for
    ``(image_size // patch_size)**2 + 1`` tokens, LayerNorms before and after, encoder layers (q/k/v/o and
    fc1/fc2 with bias, two LayerNorms) and the pixel-shuffle adapter MLP (fc1: ``intermediate_size`` ->
    ``projector_input_dim``, fc2: ``projector_output_dim`` square, no biases)."""
    e, i = int(vc.get("hidden_size", 768)), int(vc.get("intermediate_size", 5632))
    layers = int(vc.get("num_hidden_layers", 34))
    c, p, size = int(vc.get("num_channels", 3)), int(vc.get("patch_size", 14)), int(vc.get("image_size", 448))
    pin, pout = int(vc.get("projector_input_dim", 4096)), int(vc.get("projector_output_dim", 4096))
    n = c * p * p * e + e + ((size // p) ** 2 + 1) * e + 2 * 2 * e
    n += layers * (4 * _linear(e, e) + _linear(e, i) + _linear(i, e) + 2 * 2 * e)
    return n + i * pin + pout * pout


def qwen2_audio_encoder_params(ac: dict[str, Any]) -> int:
    """Qwen2-Audio's Whisper-style encoder (transformers ``qwen2_audio/modeling_qwen2_audio.py``
    ``Qwen2AudioEncoder``; defaults of its ``sub_configs_defaults``): two conv1d (kernel 3, bias) from the mel bins,
    learned positions of ``max_source_positions``, layers of self-attention (k_proj without bias, q/v/out_proj with
    bias), two LayerNorms and fc1/fc2 with bias, and a final LayerNorm."""
    d, f = int(ac.get("d_model", 1280)), int(ac.get("encoder_ffn_dim", 5120))
    mel, layers = int(ac.get("num_mel_bins", 128)), int(ac.get("encoder_layers", 32))
    n = mel * d * 3 + d + d * d * 3 + d + int(ac.get("max_source_positions", 1500)) * d
    n += layers * (d * d + 3 * _linear(d, d) + 2 * 2 * d + _linear(d, f) + _linear(f, d))
    return n + 2 * d


def gemma4_vision_params(vc: dict[str, Any]) -> int:
    """Gemma-4 vision encoder (transformers ``gemma4/modeling_gemma4.py`` ``Gemma4VisionModel``, 5.24.0): patch
    embedder (``input_proj`` Linear 3·p² -> hidden without bias, a [2, ``position_embedding_size``, hidden]
    position table), layers of q/k/v/o without bias (heads x ``head_dim``), q/k RMSNorms of ``head_dim`` (the
    v norm has no scale), a gated MLP gate/up/down and four RMSNorms; the pooler holds no parameters."""
    e, i = int(vc.get("hidden_size", 768)), int(vc.get("intermediate_size", 3072))
    heads = int(vc.get("num_attention_heads", 12))
    hd = int(vc.get("head_dim") or 64)
    p, pos = int(vc.get("patch_size", 16)), int(vc.get("position_embedding_size", 10240))
    layers = int(vc.get("num_hidden_layers", 16))
    n = 3 * p * p * e + 2 * pos * e
    return n + layers * (4 * e * heads * hd + 2 * hd + 3 * e * i + 4 * e)


def glm4v_vision_params(vc: dict[str, Any]) -> int:
    """GLM-4.1V / GLM-4.5V vision tower with its merger (transformers ``glm4v/modeling_glm4v.py``
    ``Glm4vVisionModel``, 5.6.0; ``glm4v_moe`` reuses it). Width E = ``hidden_size``, merger width
    O = ``out_hidden_size``, merger MLP width I = ``intermediate_size``, m = ``spatial_merge_size``.

    Conv3d patch embedding with bias over ``temporal_patch_size x patch_size^2`` pixels; a learned position table
    of ``(image_size // patch_size)^2`` rows; ``depth`` blocks of two RMSNorms, a fused qkv (bias only with
    ``attention_bias``), proj without bias and a gated MLP gate/up/down of width O (the block MLP is sized by
    ``out_hidden_size``, not ``intermediate_size``), no biases; RMSNorms after the patch conv and after the blocks;
    a Conv2d m x m downsample E -> O with bias; the merger: proj O -> O, a LayerNorm (weight and bias) and a gated
    MLP O -> I -> O, no biases. Checked against the zai-org/GLM-4.5V safetensors census (858,681,856 vision
    elements: 107,710,933,120 stored less the text model and its 45 x 128 router-bias buffers) and transformers'
    meta build of both catalogue entries (tests/test_catalog_glm.py)."""
    e, o = int(vc.get("hidden_size", 1536)), int(vc.get("out_hidden_size", 4096))
    i = int(vc.get("intermediate_size", 13696))
    depth = int(vc.get("depth", 24))
    c = int(vc.get("in_channels", 3))
    p, t = int(vc.get("patch_size", 14)), int(vc.get("temporal_patch_size", 2))
    m = int(vc.get("spatial_merge_size", 2))
    npos = (int(vc.get("image_size", 336)) // p) ** 2
    qkv_bias = bool(vc.get("attention_bias", False))
    n = c * t * p * p * e + e + npos * e
    n += depth * (2 * e + _linear(e, 3 * e, qkv_bias) + _linear(e, e, False) + 3 * e * o)
    n += 2 * e + (o * e * m * m + o)
    return n + o * o + 2 * o + 3 * o * i
