"""The CLIP vision tower of LLaVA-1.5 (``model_type: llava`` with a ``clip_vision_model`` vision_config): a
fixed-size image, so its tokens and activations do not depend on ``image_max_pixels``.

* Every image is resized and cropped to ``image_size`` (336 for LLaVA-1.5) by CLIPImageProcessor, whatever LF's
  own bound left of it, so the tower sees ``(image_size / patch_size)²`` patches plus the class token
  (transformers ``models/clip/modeling_clip.py`` ``CLIPVisionEmbeddings``: ``num_positions = num_patches + 1``).
* The language model receives ``(image_size / patch_size)²`` = 576 tokens per image under
  ``vision_feature_select_strategy: default`` (the class token dropped, ``models/llava/modeling_llava.py``
  ``get_image_features``: ``selected_image_feature[:, 1:]``), 577 under ``full``.
* LLaVA calls the tower with ``output_hidden_states=True`` and takes layer ``vision_feature_layer`` (-2), so all
  ``num_hidden_layers + 1`` hidden states of the micro-batch's images are alive when the tower returns.

LLaVA-NeXT's any-resolution tiling (several 336-px crops per image) is not covered here (None).
"""

from __future__ import annotations

from finetune_doctor.readers.model.wrappers import vision_config


def clip_shape(raw: dict) -> tuple[int, int, int, int, int] | None:
    """(layers, width, mlp width, patches per image including the class token, language tokens per image) of a
    LLaVA-1.5 CLIP tower, or None for any other model or a config.json with non-numeric shapes."""
    if not isinstance(raw, dict) or raw.get("model_type") != "llava":
        return None
    vc = vision_config(raw) or {}
    if str(vc.get("model_type") or "clip_vision_model") != "clip_vision_model":
        return None
    try:   # CLIPVisionConfig's class defaults for what the file leaves out (configuration_clip.py)
        layers, d = int(vc.get("num_hidden_layers", 12)), int(vc.get("hidden_size", 768))
        mlp = int(vc.get("intermediate_size", 3072))
        grid = int(vc.get("image_size", 224)) // int(vc.get("patch_size", 32))
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if min(layers, d, mlp, grid) <= 0:
        return None
    tokens = grid * grid + (1 if raw.get("vision_feature_select_strategy") == "full" else 0)
    return layers, d, mlp, grid * grid + 1, tokens


def clip_image_tokens(raw: dict) -> int | None:
    """Language tokens of one image for a LLaVA-1.5 CLIP tower (576 for 336-px images and 14-px patches), or
    None (`clip_shape`)."""
    shape = clip_shape(raw)
    return None if shape is None else shape[4]


def clip_terms(raw: dict, images: int, trains: bool, e: float = 2.0) -> tuple[float, float, int]:
    """(working bytes at the tower's peak, bytes kept for backward, patches per image) for `images` images of
    one micro-batch; zeros when `raw` is not a LLaVA-1.5 CLIP tower.

    Per patch (D the width, M the MLP width, e the compute bytes; transformers ``models/clip/modeling_clip.py``
    ``CLIPEncoderLayer``/``CLIPMLP`` with ``quick_gelu`` = ``x·sigmoid(1.702x)``): the ``layers + 1`` hidden
    states the encoder returns (``output_hidden_states=True``), beside the largest block temporaries: the MLP's
    ``layer_norm2`` output, ``fc1`` output and QuickGELU's scaled input, sigmoid and product (``e·D + 4e·M``), or
    attention's norm output, q, k, v and context (``5e·D``). A trained tower under gradient checkpointing keeps
    each layer's input (``layers × e·D``), which the hidden states above already hold."""
    shape = clip_shape(raw)
    if shape is None or images <= 0:
        return 0.0, 0.0, 0
    layers, d, mlp, patches, _tok = shape
    n = images * patches
    work = n * ((layers + 1) * e * d + max(e * d + 4 * e * mlp, 5 * e * d))
    return work, (n * layers * e * d if trains else 0.0), patches
