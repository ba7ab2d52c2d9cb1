"""Vision tokens per image and the vision tower's memory, for the Qwen2-VL family of ViTs (14-pixel patches
merged 2 × 2 into one language token).

How many pixels reach the tower:

1. LLaMA-Factory shrinks an image above ``image_max_pixels`` (default 768·768) and enlarges one below
   ``image_min_pixels`` (default 32·32) by the square root of the ratio (LF data/mm_plugin.py:219-230,
   hparams/model_args.py:305-330; videos: ``video_max_pixels`` 256·256, ``video_min_pixels`` 16·16, per frame).
2. The processor's ``smart_resize`` rounds each side to a multiple of ``patch × merge`` = 28 and keeps the area
   within its own ``[min_pixels, max_pixels]`` (transformers 5.6.0
   ``models/qwen2_vl/image_processing_qwen2_vl.py:62-88``; the checkpoints' preprocessor_config.json set
   ``max_pixels`` 12845056, Qwen/Qwen2-VL-7B-Instruct).
3. The tower sees ``(h/14)·(w/14)`` patches (× frames/2 for video, ``temporal_patch_size`` 2) and the language model
   ``patches / merge²`` tokens: ``tokens ≈ pixels / 28²``.

The tower's attention runs per image (``cu_seqlens``; ``modeling_qwen2_vl.py:395-440``): FlashAttention on the
packed sequence, otherwise one attention per image chunk, whose eager path materialises ``heads × n² `` fp32
scores and their cast for an image of ``n`` patches.

What the tower holds: LLaMA-Factory freezes it by default (``freeze_vision_tower: true``, hparams/
finetuning_args.py:546), so nothing in it requires grad and autograd keeps nothing: its cost is the working set of
one block over all the micro-batch's patches at the start of the forward (`tower_working_bytes`). When it trains,
each block keeps its input for the checkpointed backward (`tower_saved_bytes`).
"""

from __future__ import annotations

import math

from finetune_doctor.readers.model.wrappers import vision_config

PATCH = 14
MERGE = 2
FACTOR = PATCH * MERGE
PROCESSOR_MAX_PIXELS = 12845056      # Qwen2-VL-7B-Instruct preprocessor_config.json
PROCESSOR_MIN_PIXELS = 3136
LF_DEFAULTS = {"image_max_pixels": 768 * 768, "image_min_pixels": 32 * 32,
               "video_max_pixels": 256 * 256, "video_min_pixels": 16 * 16}


def lf_resize(width: int, height: int, max_pixels: int, min_pixels: int) -> tuple[int, int]:
    """Image size after LLaMA-Factory's own resize (mm_plugin.py:219-230)."""
    if width * height > max_pixels:
        f = math.sqrt(max_pixels / (width * height))
        # a side of an extreme aspect ratio rounds to 0 here (LF's own resize would then fail in Pillow): keep it 1
        # so that the count stays bounded (issue 27: a 4294967295 x 1 header divided by zero)
        width, height = max(int(width * f), 1), max(int(height * f), 1)
    if width * height < min_pixels:
        f = math.sqrt(min_pixels / (width * height))
        width, height = int(width * f), int(height * f)
    return max(width, 1), max(height, 1)


def smart_resize(height: int, width: int, min_pixels: int = PROCESSOR_MIN_PIXELS,
                 max_pixels: int = PROCESSOR_MAX_PIXELS, factor: int = FACTOR) -> tuple[int, int]:
    """The processor's resize (image_processing_qwen2_vl.py:62-88): sides multiples of `factor`, area within
    ``[min_pixels, max_pixels]``. Returns (height, width) in pixels."""
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def qwen_lf_resize(width: int, height: int) -> tuple[int, int]:
    """LLaMA-Factory's extra step for the Qwen-VL plugins after `lf_resize` (mm_plugin.py:2260-2275, the
    ``Qwen2VLPlugin._preprocess_image`` override): a side under 28 px is raised to 28, and an aspect ratio over
    200 is cut to 180 (the processor's smart_resize refuses ratios over 200)."""
    if min(width, height) < 28:
        width, height = max(width, 28), max(height, 28)
    if width > 200 * height:
        width = height * 180
    if height > 200 * width:
        height = width * 180
    return width, height


def video_smart_resize(frames: int, height: int, width: int, min_pixels: int, max_pixels: int, factor: int = 32,
                       temporal: int = 2) -> tuple[int, int]:
    """Qwen3-VL's video resize (transformers 5.6.0 ``models/qwen3_vl/video_processing_qwen3_vl.py:35-62``, which
    LF's Qwen3VLPlugin calls, mm_plugin.py:2608-2628): like `smart_resize`, but the pixel bounds hold for all
    ``frames`` (rounded up to a multiple of ``temporal``) together. Returns (height, width) in pixels."""
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    t = -(-frames // temporal) * temporal
    if t * h * w > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif t * h * w < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def image_patches(width: int, height: int, max_pixels: int = LF_DEFAULTS["image_max_pixels"],
                  min_pixels: int = LF_DEFAULTS["image_min_pixels"], *, patch: int = PATCH, merge: int = MERGE,
                  proc_min: int = PROCESSOR_MIN_PIXELS, proc_max: int = PROCESSOR_MAX_PIXELS) -> int:
    """Patches the tower sees for one `width` × `height` image (merge² of them make one language token):
    LF's resize, its Qwen-VL step (`qwen_lf_resize`), then the processor's smart_resize to multiples of
    ``patch × merge`` within ``[proc_min, proc_max]`` (Qwen2-VL: 14 × 2; Qwen3-VL: 16 × 2)."""
    w, h = qwen_lf_resize(*lf_resize(width, height, max_pixels, min_pixels))
    hh, ww = smart_resize(h, w, proc_min, proc_max, patch * merge)
    return (hh // patch) * (ww // patch)


def image_tokens(width: int, height: int, max_pixels: int = LF_DEFAULTS["image_max_pixels"],
                 min_pixels: int = LF_DEFAULTS["image_min_pixels"], *, patch: int = PATCH, merge: int = MERGE,
                 proc_min: int = PROCESSOR_MIN_PIXELS, proc_max: int = PROCESSOR_MAX_PIXELS) -> int:
    """Language-model tokens of one image: patches / merge² (LF mm_plugin.py:2581-2586: ``image_grid_thw.prod()
    // merge_size²`` ``<|image_pad|>`` tokens, between ``<|vision_start|>`` and ``<|vision_end|>``, which are not
    counted here)."""
    return image_patches(width, height, max_pixels, min_pixels, patch=patch, merge=merge, proc_min=proc_min,
                         proc_max=proc_max) // (merge * merge)


def max_patches_per_image(max_pixels: int) -> int:
    """The most patches one image can bring at `max_pixels` (an image at least that large): the bound to use when
    the images are not known. ``min(max_pixels, processor max) / 14²``."""
    return max(int(min(max_pixels, PROCESSOR_MAX_PIXELS) // (PATCH * PATCH)), 0)


def max_video_patches(max_pixels: int, frames: int, temporal: int = 2) -> tuple[int, int]:
    """(patches of one video, patches of one attention chunk) for a video of `frames` frames, each at most
    `max_pixels` (LLaMA-Factory's ``video_max_pixels``, applied per frame: mm_plugin.py ``_regularize_videos``).
    The processor stacks ``temporal_patch_size`` = 2 frames into one patch (frames rounded up to a multiple of it),
    so the grid is ``ceil(frames / 2) × (h/14) × (w/14)``; the tower's ``cu_seqlens`` repeat ``h·w`` once per
    temporal slice (transformers ``models/qwen2_vl/modeling_qwen2_vl.py``, ``Qwen2VisionTransformerPretrainedModel.
    forward``: ``repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0])``), so attention runs over one
    slice's patches at a time. Example: 128 frames at 256·256 → 64 × 334 = 21,376 patches, chunks of 334."""
    per_frame = max_patches_per_image(max_pixels)
    slices = -(-max(int(frames), 0) // temporal)
    return slices * per_frame, per_frame


def max_image_tokens(raw: dict, max_pixels: int) -> int | None:
    """Language tokens of one image at the bound `max_pixels` (LLaMA-Factory's ``image_max_pixels``) for a model
    with a Qwen-VL-style vision tower: ``min(max_pixels, processor max) / patch² / merge²`` (28² = 784 pixels per
    token for Qwen2-VL/2.5-VL; the tower's own ``patch_size``, e.g. 16 for Qwen3-VL). The processor's cap is
    Qwen2-VL's preprocessor_config.json (`PROCESSOR_MAX_PIXELS`). None for a model without such a tower."""
    if _vision_shape(raw) is None:
        return None
    vc = vision_config(raw) or {}
    try:
        patch = int(vc.get("patch_size") or vc.get("spatial_patch_size") or PATCH)
        merge = int(vc.get("spatial_merge_size") or MERGE)
    except (TypeError, ValueError):
        patch, merge = PATCH, MERGE
    if patch <= 0 or merge <= 0:
        return None
    return int(min(int(max_pixels), PROCESSOR_MAX_PIXELS) // (patch * patch)) // (merge * merge)


def _vision_shape(raw: dict) -> tuple[int, int, int, int, int] | None:
    """(depth, width, heads, mlp width, mlp matrices) of a Qwen2-VL-style vision_config, or None. The Qwen VL
    wrappers' class defaults fill the fields a config.json leaves out (readers/model/wrappers.py `vision_config`)."""
    vc = vision_config(raw)
    if not isinstance(vc, dict) or "depth" not in vc:
        return None
    try:
        width = int(vc.get("embed_dim") or vc.get("hidden_size") or 0)
        if vc.get("intermediate_size"):              # Qwen2.5-VL: gated SiLU MLP
            mlp, mats = int(vc["intermediate_size"]), 3
        else:                                        # Qwen2-VL: fc1 -> QuickGELU -> fc2
            mlp, mats = int(width * float(vc.get("mlp_ratio") or 4)), 2
        depth, heads = int(vc["depth"]), int(vc.get("num_heads") or 16)
    except (TypeError, ValueError, OverflowError):   # a config.json with non-numeric shapes: no vision term
        return None
    if min(width, mlp, depth, heads) <= 0:
        return None
    return depth, width, heads, mlp, mats


def tower_working_bytes(raw: dict, patches: int, per_image: int, eager: bool, e: float = 2.0,
                        fp16: bool = False) -> float:
    """Bytes one vision block holds at its peak while it runs over `patches` patches (all images of a
    micro-batch), the tower frozen (no autograd graph), plus the fp32 pixel values (3 × 2 × 14² per patch) and the
    rotary tables. 0 when `raw` has no Qwen2-VL-style vision_config.

    Op by op (transformers 5.6.0 ``models/qwen2_vl/modeling_qwen2_vl.py``), D the width, e the compute bytes:

    * attention (``VisionAttention.forward`` :395-460, ``apply_rotary_pos_emb_vision`` :257-268): the block input
      and ``norm1``'s output (e·D each), the fused qkv output (3e·D; q, k and v are views of it), then the rotary
      embedding in fp32: ``q.float()``, ``k.float()``, ``q_embed`` and, while ``k_embed`` is summed, ``k·cos``,
      ``rotate_half(k)·sin`` and the sum (six 4·D tensors): ``(5e + 24)·D``;
    * the MLP (``VisionMlp``: fc1, QuickGELU ``x·sigmoid(1.702x)``, fc2; Qwen2.5-VL's gated SiLU MLP): the block
      input, ``norm2``'s output and three (gated: four) intermediate tensors of the MLP width;
    * the rotary tables cos and sin, fp32 ``[patches, head_dim]`` each, live through the tower;
    * with eager attention the peak moves to the softmax of the largest image (`per_image` patches): the block
      input, ``norm1``'s output, the qkv output and the rotated q and k in e bytes (``7e·D``) beside ``heads × n²``
      scores (e bytes), their fp32 copy and its softmax: ATen's ``softmax(x, dtype=float32)`` converts the input
      first unless it is fp16 on CUDA (aten/src/ATen/native/SoftMax.cpp ``softmax``: the ``half_to_float`` kernel is
      taken for ``ScalarType::Half`` only), so ``e + 4 + 4`` bytes per score in bf16, ``max(e + 4, 2e + 4)`` in fp16;
      the larger of this and the rotary peak.

    Checked against a real CPU forward of the tower's blocks under the live-bytes tracker
    (tests/test_memory_terms_upstream.py).
    """
    shape = _vision_shape(raw)
    if shape is None or patches <= 0:
        return 0.0
    _depth, d, heads, mlp, mats = shape
    hd = d // heads
    attn = (5 * e + 24) * d
    ffn = 2 * e * d + (mats + 1) * e * mlp       # QuickGELU: fc1, sigmoid, product; gated: gate, up, act, product
    block = patches * max(attn, ffn)
    if eager:
        per_score = max(e + 4, 2 * e + 4) if fp16 else e + 8
        block = max(block, patches * 7 * e * d + heads * float(per_image) ** 2 * per_score)
    return block + patches * (2 * 4 * hd + 3 * 2 * PATCH * PATCH * 4.0)


def tower_saved_bytes(raw: dict, patches: int, e: float = 2.0) -> float:
    """Bytes the vision blocks keep for backward when the tower trains under gradient checkpointing: each block's
    input (patches × width × e)."""
    shape = _vision_shape(raw)
    if shape is None or patches <= 0:
        return 0.0
    depth, d, _h, _m, _k = shape
    return depth * patches * d * e


def vision_terms(run) -> tuple[float, float, int]:  # run: finetune_doctor.run.Run
    """(working bytes of one vision block at the start of the forward, bytes the tower keeps for backward,
    patches per image) for `run`, bounded by ``image_max_pixels`` with one image per sample (the images are
    not read here: an image smaller than the bound brings fewer patches). Zeros for a model without a
    Qwen2-VL-style vision_config, and for a run no image reaches (``run.media_inputs`` False). The tower keeps activations only when it trains (``freeze_vision_tower:
    false`` with full fine-tuning, LF model/adapter.py); LoRA never adapts it while frozen."""
    raw = run.arch.raw
    # no image reaches the tower under a text template or with data read here that holds none (run.media_inputs)
    if not getattr(run, "media_inputs", True):
        return 0.0, 0.0, 0
    if _vision_shape(raw) is None:   # LLaVA-1.5's fixed-size CLIP tower (clipvision.py), else no vision term
        from finetune_doctor.analyzers.memory.clipvision import clip_terms

        e = 4.0 if run.compute_dtype == "float32" and run.autocast is None else 2.0
        trains = not run.freeze_vision_tower and run.finetuning_type == "full"
        return clip_terms(raw, max(run.micro_batch, 1) * (2 if run.pairwise else 1), trains, e)
    per_image = max_patches_per_image(run.image_max_pixels)
    per_sample, chunk = per_image, per_image
    frames = int(getattr(run, "video_frames", 0) or 0)
    if frames > 0:   # the alternative of a video sample (facts/assume.py `_terms`)
        per_sample, chunk = max_video_patches(run.video_max_pixels, frames)
    patches = per_sample * max(run.micro_batch, 1) * (2 if run.pairwise else 1)
    e = 4.0 if run.compute_dtype == "float32" and run.autocast is None else 2.0
    work = tower_working_bytes(raw, patches, chunk, run.attention == "eager", e,
                               fp16=run.compute_dtype == "float16")
    trains = not run.freeze_vision_tower and run.finetuning_type == "full"
    return work, (tower_saved_bytes(raw, patches, e) if trains else 0.0), per_image
