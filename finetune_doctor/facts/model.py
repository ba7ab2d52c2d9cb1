"""``model``: the architecture and parameter counts of the model the config names (None when not resolved).

Counts are exact element counts (analyzers/memory/params.py) of the shapes read from the model's config.json
(readers/model/modelcfg.py); ``params_b`` is billions.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.memory.vision import max_image_tokens
from finetune_doctor.arch import BF16_FAMILIES
from finetune_doctor.facts.schema import F, Namespace

NAMESPACE = Namespace("model", __doc__.split("\n\n")[0], {
    "name": F("str", "model name as the config gives it, or the catalog id"),
    "model_type": F("str", "config.json model_type"),
    "multimodal": F("bool", "the model has towers or projectors beside its text decoder (ModelArch.extra_parts)"),
    "remote_code": F("bool", "its config.json maps its classes to the repository's own code (auto_map)"),
    "bf16_family": F("bool", "a family pre-trained in bf16 (arch.py BF16_FAMILIES, the one list)"),
    "dtype": F("str", "checkpoint dtype (config.json torch_dtype/dtype)"),
    "params_b": F("float", "parameters, billions"),
    "params": F("int", "parameters"),
    "trainable_params": F("int", "parameters that train (adapters included)"),
    "adapter_params": F("int", "LoRA/OFT adapter parameters"),
    "trainable_pct": F("float", "trainable share, percent"),
    "hidden_size": F("int", "hidden size"), "num_layers": F("int", "decoder layers"),
    "vocab_size": F("int", "vocabulary"), "num_heads": F("int", "attention heads"),
    "is_moe": F("bool", "mixture of experts"), "num_experts": F("int", "routed experts per MoE layer"),
    "expert_lora_params": F("int", "LoRA parameters on routed experts"),
    "max_position_embeddings": F("int", "context length the config declares"),
    "source": F("str", "where the config came from (path or URL)"),
    "source_kind": F("str", "local | model-config | hf-cache | modelscope-cache | openmind-cache | catalog | hub"),
    "quant_format": F("str", "quantization_config.quant_method of a pre-quantized checkpoint (None: not quantized)"),
    "notes": F("str", "reader notes"),
    "image_tokens_max": F("int", "language tokens of one image at image_max_pixels (Qwen-VL towers; None: no such "
                                 "tower), analyzers/memory/vision.py max_image_tokens"),
})


def assemble(run: Any, counts: Any) -> dict[str, Any]:
    """The ``model`` facts of a resolved run (run.Run) and its counts (analyzers.memory.params.ParamCounts)."""
    a = run.arch
    return {
        "name": a.name, "model_type": a.model_type, "bf16_family": a.model_type in BF16_FAMILIES,
        "multimodal": bool(a.extra_parts), "remote_code": isinstance(a.raw, dict) and "auto_map" in a.raw,
        "dtype": a.dtype, "params_b": counts.base / 1e9,
        "params": counts.base, "trainable_params": counts.trainable, "adapter_params": counts.adapter,
        "trainable_pct": 100.0 * counts.trainable / max(counts.base, 1),
        "hidden_size": a.hidden_size, "num_layers": a.num_layers, "vocab_size": a.vocab_size,
        "num_heads": a.num_heads, "is_moe": a.is_moe, "num_experts": a.num_experts,
        "expert_lora_params": counts.expert_lora_params, "max_position_embeddings": a.max_position_embeddings,
        "source": a.source, "notes": a.notes, "source_kind": getattr(a, "source_kind", None),
        "quant_format": getattr(getattr(a, "quant", None), "method", None),
        "image_tokens_max": max_image_tokens(a.raw, run.image_max_pixels) if isinstance(a.raw, dict) else None,
    }
