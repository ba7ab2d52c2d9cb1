"""A vision tower that `freeze_vision_tower` leaves partly trainable, per LLaMA-Factory release (rule FD058).

LLaMA-Factory freezes a composite model's vision tower by name: under ``freeze_vision_tower: true`` (the default)
every parameter whose name contains one of the model type's ``vision_model_keys`` gets ``requires_grad=False``
in full fine-tuning (model/adapter.py `_setup_full_tuning`, model/model_utils/visual.py `get_forbidden_modules`).
A tower parameter outside those keys silently trains. LLaMA-Factory 0.9.4 registers Qwen3-VL's keys without
``visual.pos_embed``, the tower's learned position embedding (an ``nn.Embedding``), so a full fine-tuning of
Qwen3-VL that asks for a frozen tower updates it (LlamaFactory PR #10139, released in 0.9.5).

Read from the released wheels (`pip download --no-deps llamafactory==X`), model/model_utils/visual.py:
0.9.3 registers none of these types; 0.9.4 (visual.py:357-378) registers ``qwen3_vl``, ``qwen3_vl_moe`` and
``qwen3_omni_moe_thinker`` with ``visual.patch_embed``, ``visual.blocks``, ``visual.deepstack_merger_list``
(and ``audio_tower``) only; 0.9.5 (visual.py:392-413) adds ``visual.pos_embed`` to all three, as the snapshot
does. LoRA adapts linear layers only and freeze tuning trains named decoder layers, so only `full` is affected.
"""

from __future__ import annotations

from typing import Any

# release -> model types whose registered vision keys leave the tower's position embedding trainable
POS_EMBED_UNFROZEN: dict[str, tuple[str, ...]] = {
    "0.9.4": ("qwen3_vl", "qwen3_vl_moe", "qwen3_omni_moe_thinker"),
}
FIXED_IN = "0.9.5"


def fact(asm: Any, model_type: str | None) -> dict[str, Any] | None:
    """``lint.vision_pos_embed_trains``: {model_type, releases (the judged releases that leave it trainable,
    "0.9.4"), scope (all | some of the judged releases), fixed_in}; None unless the LF release is known (given or
    read from --env), the model type is one of `POS_EMBED_UNFROZEN`'s for a judged release, the run is a full
    fine-tuning and ``freeze_vision_tower`` is not false (LF's default is true)."""
    release = getattr(asm, "release", None)
    values = getattr(getattr(asm, "doc", None), "values", None) or {}
    if release is None or not getattr(release, "known", False) or getattr(release, "older", False) or not model_type:
        return None
    if str(values.get("finetuning_type") or "lora") != "full" or values.get("freeze_vision_tower") is False:
        return None
    judged = [str(v) for v in release.versions]
    hit = [v for v in judged if model_type in POS_EMBED_UNFROZEN.get(v, ())]
    if not hit:
        return None
    return {"model_type": model_type, "releases": ", ".join(hit), "scope": "all" if hit == judged else "some",
            "fixed_in": FIXED_IN}
