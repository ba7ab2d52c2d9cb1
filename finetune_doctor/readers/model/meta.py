"""The exact architecture: the transformers model built from its config on the meta device.

``torch.device("meta")`` plus ``AutoModelFor*.from_config`` allocates no memory and loads no weights; no remote
code runs (``trust_remote_code`` is never passed, so a model type transformers does not ship fails here and the
generic decoder's answer stands). The model class follows LLaMA-Factory's loader (model/loader.py:157-165 at
snapshot ff6d4d1): image-text-to-text types through ``AutoModelForImageTextToText``, audio-text ones
(``AutoModelForSeq2SeqLM``'s mapping, e.g. Qwen2-Audio) through that class, the rest through
``AutoModelForCausalLM``. From the built model come the exact parameter count, every ``*Linear`` module with its
shape, the routed-expert tensors and the vision tower's size, and what ``lora_target: all`` resolves to —
LLaMA-Factory's ``find_all_linear_modules`` (model_utils/misc.py:28-52): the last name component of every module
whose class name contains "Linear" but not "Embedding", skipping names that contain ``lm_head`` (``output_layer``
for chatglm, ``output`` for internlm2), the projector keys of a composite (vision-language) model and, with
``freeze_vision_tower`` (default true), its vision keys; for a composite model ``patch_target_modules``
(model_utils/visual.py:196-213) then turns those names into the full module names outside the vision tower,
projector and ``lora_conflict_keys``.

When it runs: only on request (``load_arch(exact=True)``), or with ``exact="auto"`` for a model type the generic
decoder is not verified on (`GENERIC_VERIFIED`, the types tests/test_model_parity.py checks), and only when torch
and transformers are importable. ``doctor lint`` never asks for it.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import replace
from typing import Any

from finetune_doctor.arch import ExactCounts, ModelArch
from finetune_doctor.readers.model.generic import with_note
from finetune_doctor.readers.model.verified import GENERIC_VERIFIED

# LLaMA-Factory's composite models (model_utils/visual.py:216-520 at ff6d4d1): model_type -> (projector keys,
# vision model keys, lora conflict keys). Defaults there: ["multi_modal_projector"], ["vision_tower"], [].
_QWEN_VL = (["visual.merger"], ["visual.patch_embed", "visual.blocks"], ["patch_embed"])
_QWEN3_VL = (["visual.merger"], ["visual.pos_embed", "visual.patch_embed", "visual.blocks",
                                 "visual.deepstack_merger_list"], ["patch_embed"])
_QWEN3_5 = (["model.visual.merger"], ["visual.pos_embed", "visual.patch_embed", "visual.blocks"], ["patch_embed"])
_DEFAULT = (["multi_modal_projector"], ["vision_tower"], [])
COMPOSITE: dict[str, tuple[list[str], list[str], list[str]]] = {
    "qwen2_vl": _QWEN_VL, "qwen2_5_vl": _QWEN_VL, "glm4v": _QWEN_VL, "glm4v_moe": _QWEN_VL, "glm_ocr": _QWEN_VL,
    "qwen3_vl": _QWEN3_VL, "qwen3_vl_moe": _QWEN3_VL, "qwen3_5": _QWEN3_5, "qwen3_5_moe": _QWEN3_5,
    "gemma3": _DEFAULT, "internvl": _DEFAULT, "interns1": _DEFAULT, "kimi_vl": _DEFAULT, "llava": _DEFAULT,
    "llava_next": _DEFAULT, "llava_next_video": _DEFAULT, "paligemma": _DEFAULT, "video_llava": _DEFAULT,
    "gemma3n": (["multi_modal_projector"], ["vision_tower", "audio_tower"], ["timm_model", "subsample_conv_projection"]),
    "gemma4": (["model.embed_vision", "model.embed_audio"], ["vision_tower", "audio_tower"],
               ["per_layer_projection_norm"]),
    "llama4": (["multi_modal_projector"], ["vision_model"], []),
    "mllama": (["multi_modal_projector"], ["vision_model"], []),
    "mistral3": (["model.multi_modal_projector"], ["vision_tower"], []),
    "qwen2_audio": (["multi_modal_projector"], ["audio_tower"], []),
}
_FORBIDDEN_HEAD = {"chatglm": "output_layer", "internlm2": "output"}



def meta_available() -> bool:
    """Whether torch and transformers can be imported (checked without importing them)."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def build_model(cfg: dict[str, Any]) -> Any:
    """The transformers model of config dict `cfg` on the meta device. Raises whatever transformers raises."""
    import torch
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    mt = str(cfg.get("model_type") or "")
    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "auto_map",
                                                       "quantization_config")}
    config = transformers.AutoConfig.for_model(mt, **kwargs)
    if mt in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        auto = transformers.AutoModelForImageTextToText
    elif mt in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:   # audio-text (Qwen2-Audio), loader.py:161
        auto = transformers.AutoModelForSeq2SeqLM
    else:
        auto = transformers.AutoModelForCausalLM
    with torch.device("meta"):
        return auto.from_config(config)


def exact_counts(model: Any, model_type: str, freeze_vision_tower: bool = True) -> ExactCounts:
    """`ExactCounts` of a built model (see the module docstring for the LoRA ``all`` rule)."""
    import transformers

    forbidden = {"lm_head"}
    if model_type in _FORBIDDEN_HEAD:
        forbidden.add(_FORBIDDEN_HEAD[model_type])
    proj, vision_keys, conflict = COMPOSITE.get(model_type, ([], [], []))
    composite = model_type in COMPOSITE
    forbidden.update(proj)
    if freeze_vision_tower:
        forbidden.update(vision_keys)
    linears: list[tuple[str, int, int]] = []
    names: set[str] = set()
    experts: list[tuple[str, tuple[int, ...]]] = []
    for qual, mod in model.named_modules():
        cls = type(mod).__name__
        if "Linear" in cls and "Embedding" not in cls:
            w = getattr(mod, "weight", None)
            fin = int(getattr(mod, "in_features", 0) or (w.shape[1] if w is not None and w.dim() == 2 else 0))
            fout = int(getattr(mod, "out_features", 0) or (w.shape[0] if w is not None and w.dim() == 2 else 0))
            linears.append((qual, fin, fout))
            if not any(f in qual for f in forbidden):
                names.add(qual.rsplit(".", 1)[-1])
        if cls.endswith("Experts") and ".layers.0." in qual + ".":
            experts.extend((f"{qual}.{n}", tuple(p.shape)) for n, p in mod.named_parameters(recurse=False))
    all_modules: list[str] = []
    block = forbidden | set(conflict) | set(vision_keys if freeze_vision_tower else [])
    for qual, _, _ in linears:
        leaf = qual.rsplit(".", 1)[-1]
        if leaf not in names:
            continue
        if composite and any(f in qual for f in block):
            continue
        if "lm_head" in qual:
            continue
        all_modules.append(qual)
    vision = 0
    for attr in ("visual", "vision_tower", "vision_model", "image_tower", "video_tower", "audio_tower",
                 "multi_modal_projector", "embed_vision", "embed_audio"):
        for holder in (model, getattr(model, "model", None)):
            sub = getattr(holder, attr, None) if holder is not None else None
            if sub is not None and hasattr(sub, "parameters"):
                vision += sum(p.numel() for p in sub.parameters())
                break
    return ExactCounts(total=sum(p.numel() for p in model.parameters()), vision=vision, linears=tuple(linears),
                       lora_all=tuple(sorted(names)), lora_all_modules=tuple(all_modules), experts=tuple(experts),
                       composite=composite, forbidden=tuple(sorted(block)),
                       source=f"transformers {transformers.__version__} meta-device build")


def lora_trainable(exact: ExactCounts, targets: tuple[str, ...], rank: int) -> int:
    """LoRA parameters (elements) for `targets` at `rank` on the built model: r·(in + out) per wrapped module.

    ``all`` wraps `ExactCounts.lora_all_modules`; explicit names follow peft's ``check_target_module_exists``
    (module name equal to the target or ending in ``.target``) for a plain model and LLaMA-Factory's
    substring rule outside the vision tower for a composite one (``patch_target_modules``).
    """
    if not targets or "all" in targets:
        chosen = set(exact.lora_all_modules)
    elif exact.composite:
        chosen = {q for q, _, _ in exact.linears if any(t in q for t in targets)
                  and not any(f in q for f in exact.forbidden)}
    else:
        chosen = {q for q, _, _ in exact.linears if any(q == t or q.endswith("." + t) for t in targets)}
    return sum(rank * (i + o) for q, i, o in exact.linears if q in chosen)


def maybe_exact(arch: ModelArch, force: bool = False) -> ModelArch:
    """`arch` with `ModelArch.exact` filled by the meta-device build where that is wanted and possible.

    Never raises: a missing extra or a build that transformers refuses leaves `arch` as it was, with a note
    when the build was asked for explicitly (`force`).
    """
    if not force and arch.model_type in GENERIC_VERIFIED:
        return arch
    if not meta_available():
        return with_note(arch, "exact counts need the torch + transformers extra") if force else arch
    cfg = dict(arch.raw or {})
    if not cfg.get("model_type"):
        return arch
    t0 = time.perf_counter()
    try:
        model = build_model(cfg)
        ex = exact_counts(model, str(cfg["model_type"]))
    except Exception as e:  # noqa: BLE001 - any transformers failure leaves the generic answer
        return with_note(arch, f"meta-device build failed ({type(e).__name__}); generic decoder counts used")
    note = f"parameter counts from the {ex.source} ({time.perf_counter() - t0:.1f} s)"
    return with_note(replace(arch, exact=ex), note)
