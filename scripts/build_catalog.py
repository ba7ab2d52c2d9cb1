"""Turn a model's config.json into a bundled-catalog entry (``finetune_doctor/catalog/models.json``).

The catalog keeps, for each model, the fields of its real ``config.json`` that decide its shapes, precision and
attention layout, copied value for value; bookkeeping fields that change no tensor (token ids, dropout rates,
``transformers_version``, chat templates, remote-code maps) are left out. This script does that selection the
same way for every entry, and writes fine-tunes / instruct variants as *alias entries*: the id of the entry
whose architecture they share, plus the fields of their own config.json that differ from it.

    # a base entry, printed as JSON (review, then paste or --write)
    python scripts/build_catalog.py entry RAW.json --published 7.62 --basis "model card: 7.62B" [--card 7.6B]
    # an alias entry against an entry already in the catalog
    python scripts/build_catalog.py alias RAW.json --base Qwen/Qwen2.5-7B
    # either one, merged into models.json (replaces an entry with the same id)
    python scripts/build_catalog.py alias RAW.json --base Qwen/Qwen2.5-7B --write

RAW.json is ``{"id": ..., "source": <address of the config.json>, "config": {...the config.json...}}``; an
optional ``"read_from"`` names the copy it was read from when that is not the source itself.

An alias is refused (exit 1) when any field that sizes a tensor differs from the base entry (see
``SHAPE_KEYS``; compared as transformers reads them where it is installed, so an omitted field equals its
class default); such a model needs its own entry.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CATALOG = Path(__file__).resolve().parent.parent / "finetune_doctor" / "catalog" / "models.json"

# Fields that change no parameter, buffer or dtype: generation/tokeniser bookkeeping and training-time knobs.
_DROP_EXACT = {
    "_name_or_path", "transformers_version", "initializer_range", "use_cache", "auto_map", "chat_template",
    "id2label", "label2id", "task_specific_params", "_attn_implementation_autoset", "_commit_hash",
    "transformers.js_config", "output_attentions", "output_hidden_states", "return_dict", "torchscript",
    "use_return_dict", "is_encoder_decoder", "prefix", "problem_type", "finetuning_task", "tokenizer_class",
    "bad_words_ids", "begin_suppress_tokens", "suppress_tokens", "forced_bos_token_id", "forced_eos_token_id",
    "decoder_start_token_id", "sep_token_id", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "repetition_penalty", "temperature", "top_k", "top_p", "typical_p", "min_length", "max_length",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "remove_invalid_values",
    "exponential_decay_length_penalty", "chunk_size_feed_forward", "tf_legacy_loss", "pruned_heads",
    "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "is_decoder",
    "use_bfloat16", "architectures_note", "pretraining_tp", "keys_to_ignore_at_inference",
}
_NESTED = ("text_config", "vision_config", "audio_config", "llm_config", "thinker_config", "talker_config",
           "speech_config", "vision_tower_config", "mm_projector_config", "projector_config", "code2wav_config")


def _dropped(key: str) -> bool:
    k = key.lower()
    return (key in _DROP_EXACT or "dropout" in k or k.endswith("_token_id") or k.endswith("_token_ids")
            or k.endswith("_token_index") or k in ("bos_token_id", "eos_token_id", "pad_token_id"))


def select_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The catalog's copy of one config.json: every field except the bookkeeping ones (`_dropped`), with the
    same rule applied inside nested sub-configs (text_config, vision_config, audio_config, ...). Values are
    copied unchanged; key order follows the file."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if _dropped(k):
            continue
        if isinstance(v, dict) and (k in _NESTED or k.endswith("_config")) and k != "quantization_config":
            out[k] = select_fields(v)
        else:
            out[k] = v
    return out


# Fields that size a tensor (at the top level or inside text_config / vision_config / audio_config): an alias
# must agree with its base on all of them. vocab_size is deliberately absent: a vocabulary resize is written as
# an override (the embedding and head change size, nothing else).
SHAPE_KEYS = {
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "kv_channels", "num_layers", "ffn_hidden_size", "multi_query_group_num",
    "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts", "num_local_experts",
    "n_routed_experts", "n_shared_experts", "num_shared_experts", "first_k_dense_replace", "decoder_sparse_step",
    "mlp_only_layers", "moe_layer_freq", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "tie_word_embeddings", "attention_bias", "mlp_bias", "layer_types",
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "depth", "embed_dim", "num_heads", "patch_size", "out_hidden_size", "mlp_ratio", "image_size",
    "vision_use_head", "num_channels", "in_channels", "spatial_merge_size", "temporal_patch_size",
}


_MISSING = object()


def effective_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Every field of `cfg` as transformers reads it, class defaults filled in (``PretrainedConfig.to_dict``),
    or None when transformers is not installed or has no configuration class for the model_type. Used only to
    tell an explicit default from a real difference (``"attention_bias": false`` vs. no such key)."""
    try:
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return None
    mt = cfg.get("model_type")
    if mt not in CONFIG_MAPPING:
        return None
    try:
        return AutoConfig.for_model(mt, **{k: v for k, v in cfg.items() if k != "model_type"}).to_dict()
    except Exception:  # a config the class rejects: fall back to comparing the files' own fields
        return None


def _shape_diffs(base: dict[str, Any], other: dict[str, Any], where: str = "", both_only: bool = False) -> list[str]:
    diffs = []
    for k in sorted(SHAPE_KEYS | set(_NESTED)):
        a, b = base.get(k), other.get(k)
        if k in _NESTED:
            if isinstance(a, dict) or isinstance(b, dict):
                diffs += _shape_diffs(a or {}, b or {}, f"{where}{k}.", both_only)
            continue
        if both_only and (k not in base or k not in other):
            continue
        if a != b:
            diffs.append(f"{where}{k}: base {a!r}, this {b!r}")
    return diffs


def shape_diffs(base_cfg: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """The `SHAPE_KEYS` on which two catalog configs disagree, compared as transformers reads them when it can
    (so an omitted field equals its class default), else -- remote-code types, whose defaults live in the
    hub's modeling file -- on the fields both files set."""
    eb, ec = effective_config(base_cfg), effective_config(cfg)
    if eb is not None and ec is not None:
        return _shape_diffs(eb, ec)
    return _shape_diffs(base_cfg, cfg, both_only=True)


def overrides_against(base_cfg: dict[str, Any], cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(fields of `cfg` whose value differs from the base, keys `base_cfg` has that `cfg` lacks). Both are
    catalog copies (`select_fields` output). A field the base's copy does not carry counts as equal when it
    equals the base's class default (see `effective_config`). A differing nested sub-config is overridden
    whole."""
    eff = effective_config(base_cfg) or {}
    over = {}
    for k, v in cfg.items():
        if k in base_cfg:
            if base_cfg[k] != v:
                over[k] = v
        elif eff.get(k, _MISSING) != v:
            over[k] = v
    return over, sorted(k for k in base_cfg if k not in cfg)


def make_entry(raw: dict[str, Any], *, published: float, basis: str, card: str | None = None,
               exact: int | None = None, aliases: list[str] | None = None) -> dict[str, Any]:
    """A base entry from a RAW record (see module docstring); `published` in billions."""
    e: dict[str, Any] = {"id": raw["id"], "aliases": aliases or [], "source": raw["source"]}
    if raw.get("read_from") and raw["read_from"] != raw["source"]:
        e["read_from"] = raw["read_from"]
    e["card_params"] = card or f"{published}B"
    e["published_params"] = published
    e["published_basis"] = basis
    if exact is not None:
        e["published_exact"] = exact
    e["config"] = select_fields(raw["config"])
    return e


def make_alias(raw: dict[str, Any], base: dict[str, Any], aliases: list[str] | None = None) -> dict[str, Any]:
    """An alias entry of RAW against the catalog entry `base`; ValueError when a shape field differs."""
    cfg = select_fields(raw["config"])
    diffs = shape_diffs(base["config"], cfg)
    if diffs:
        raise ValueError(f"{raw['id']} is not the architecture of {base['id']}: " + "; ".join(diffs))
    over, missing = overrides_against(base["config"], cfg)
    # A remote-code file may spell a sizing field twice (num_layers and num_hidden_layers); one the base's file
    # does not carry cannot be compared, so it is named in the basis instead of overriding anything.
    extra = {k: over.pop(k) for k in list(over) if k in SHAPE_KEYS and k not in base["config"]}
    shared = [k for k in sorted(SHAPE_KEYS) if k in cfg and (effective_config(cfg) is not None or k in base["config"])]
    basis = (f"its config.json has the same {', '.join(shared)}"
             f"{' (and nested sub-configs)' if any(k in cfg for k in _NESTED) else ''} as {base['id']}")
    if missing:
        basis += f"; it leaves out {', '.join(missing)}, which the base's file sets"
    if extra:
        basis += "; it also sets " + ", ".join(f"{k}={v!r}" for k, v in extra.items()) + ", which the base's file does not"
    e: dict[str, Any] = {"id": raw["id"], "aliases": aliases or [], "same_architecture_as": base["id"],
                         "source": raw["source"]}
    if raw.get("read_from") and raw["read_from"] != raw["source"]:
        e["read_from"] = raw["read_from"]
    e["basis"] = basis
    e["config_overrides"] = over
    return e


def load_catalog(path: Path = CATALOG) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def dumps(value: Any, level: int = 0) -> str:
    """The catalog's layout: one-space indents, objects one key a line, lists of plain values on one line."""
    pad = " " * (level + 1)
    if isinstance(value, dict) and value:
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(pad + dumps(v, level + 1) for v in value) + "\n" + " " * level + "]"
    return json.dumps(value, ensure_ascii=False)


def write_catalog(data: dict[str, Any], path: Path = CATALOG) -> None:
    """Write atomically: a half-written catalog would break every lookup."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps(data) + "\n", encoding="utf-8")
    tmp.replace(path)


def upsert(data: dict[str, Any], entry: dict[str, Any]) -> None:
    models = data["models"]
    for i, e in enumerate(models):
        if e["id"] == entry["id"]:
            models[i] = entry
            return
    models.append(entry)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pe = sub.add_parser("entry")
    pe.add_argument("raw")
    pe.add_argument("--published", type=float, required=True, help="published parameter count, billions")
    pe.add_argument("--basis", required=True, help="where the published count is stated")
    pe.add_argument("--card")
    pe.add_argument("--exact", type=int)
    pa = sub.add_parser("alias")
    pa.add_argument("raw")
    pa.add_argument("--base", required=True)
    for p in (pe, pa):
        p.add_argument("--alias", action="append", default=[], help="another name for the same checkpoint")
        p.add_argument("--write", action="store_true", help="merge into models.json")
    args = ap.parse_args(argv)
    raw = json.loads(Path(args.raw).read_text(encoding="utf-8"))
    data = load_catalog()
    try:
        if args.cmd == "entry":
            entry = make_entry(raw, published=args.published, basis=args.basis, card=args.card, exact=args.exact,
                               aliases=args.alias)
        else:
            base = next((e for e in data["models"] if e["id"] == args.base), None)
            if base is None or "config" not in base:
                print(f"build_catalog: no base entry {args.base!r} with a config", file=sys.stderr)
                return 1
            entry = make_alias(raw, base, aliases=args.alias)
    except ValueError as e:
        print(f"build_catalog: {e}", file=sys.stderr)
        return 1
    if args.write:
        upsert(data, entry)
        write_catalog(data)
    else:
        print(dumps(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
