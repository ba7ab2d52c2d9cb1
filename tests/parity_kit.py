"""Shared by tests/test_model_parity.py and benchmarks: the generic decoder against the meta-device build.

`configs(mt)` gives a model type's default config dict and two resized ones (fewer layers, another vocabulary
and MLP width); `compare(mt, cfg)` builds both and returns (generic total, meta total, generic LoRA-all,
meta LoRA-all) at rank 8.
"""

from __future__ import annotations

import copy
from typing import Any

RANK = 8


LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")


def _resize(d: dict[str, Any], layers: int, vocab: int, ffn_scale: float) -> dict[str, Any]:
    d = copy.deepcopy(d)
    key = next((k for k in LAYER_KEYS if isinstance(d.get(k), int)), "num_hidden_layers")
    old = d.get(key)
    if isinstance(old, int) and old > layers:
        # also under the canonical name: transformers 5 FalconConfig no longer maps the hub's n_layer onto
        # num_hidden_layers (it keeps its default 32), GPT-2 and DBRX map num_hidden_layers onto theirs
        d[key] = d["num_hidden_layers"] = layers
        for k, v in list(d.items()):
            if isinstance(v, list) and len(v) == old:
                d[k] = v[:layers]
        for k in ("mlp_only_layers",):
            if isinstance(d.get(k), list):
                d[k] = [i for i in d[k] if i < layers]
    if isinstance(d.get("vocab_size"), int):
        d["vocab_size"] = vocab
        for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if isinstance(d.get(k), int) and d[k] >= vocab:
                d[k] = vocab - 1
    for k in ("intermediate_size", "moe_intermediate_size", "intermediate_size_mlp", "n_inner", "ffn_hidden_size"):
        if isinstance(d.get(k), int) and d[k] > 16:
            d[k] = int(d[k] * ffn_scale) // 16 * 16
    return d


def configs(mt: str) -> list[tuple[str, dict[str, Any]]]:
    import transformers

    base = transformers.AutoConfig.for_model(mt).to_dict()
    out = [("default", base)]
    for tag, layers, vocab, scale in (("resized-a", 2, 1000, 0.5), ("resized-b", 3, 2048, 1.5)):
        d = copy.deepcopy(base)
        if isinstance(d.get("text_config"), dict):
            d["text_config"] = _resize(d["text_config"], layers, vocab, scale)
        else:
            d = _resize(d, layers, vocab, scale)
        out.append((tag, d))
    return out


def resized(cfg: dict[str, Any], layers: int, vocab: int = 1000, ffn_scale: float = 0.5) -> dict[str, Any]:
    """A real config cut to `layers` decoder layers with another vocabulary and MLP width (text_config when
    nested): the same family at another size."""
    d = copy.deepcopy(cfg)
    if isinstance(d.get("text_config"), dict):
        d["text_config"] = _resize(d["text_config"], layers, vocab, ffn_scale)
        if isinstance(d.get("vocab_size"), int):
            d["vocab_size"] = vocab
    else:
        d = _resize(d, layers, vocab, ffn_scale)
    return d


def compare(mt: str, cfg: dict[str, Any]) -> tuple[int, int, int, int]:
    import transformers

    from finetune_doctor.analyzers.memory.params import lora_params
    from finetune_doctor.readers.model.generic import arch_from_config
    from finetune_doctor.readers.model.meta import build_model, exact_counts, lora_trainable

    cfg = {**cfg, "model_type": mt}
    model = build_model(cfg)
    ex = exact_counts(model, mt)
    # the installed version: class defaults and tie rules that differ between releases follow it
    arch = arch_from_config(cfg, mt, "<parity>", transformers_major=transformers.__version__)
    lora_g = lora_params(arch, ("all",), RANK)[0]
    return arch.total_params(), ex.total, lora_g, lora_trainable(ex, ("all",), RANK)
