#!/usr/bin/env python
"""Generate the launch-parity corpus: LLaMA-Factory training YAMLs on which the doctor and LLaMA-Factory are compared.

Sources (``Entry.source``):

* ``lf-example``: every training YAML of LLaMA-Factory's ``examples/`` (fixtures/llamafactory/examples, a copy of
  LF ff6d4d1's folder; the same files as /work/shared/reference/llamafactory/examples). Only training configs count
  (a ``stage`` or ``do_train`` key): the merge/inference YAMLs and accelerate's FSDP configs are not read by
  ``llamafactory-cli train``.
* ``case``: the users' configs of fixtures/cases (= /work/shared/cases), laid out as each user ran it
  (tests/casekit.py: the DeepSpeed file the YAML names put where it names it).
* ``fixture``: every other LLaMA-Factory training YAML under fixtures/, copied with the JSON files beside it.
* ``mutation:<family>``: generated edits of LF's own examples (the bases below), each a single line added, changed
  or removed so that the rest of the file stays as LF wrote it. Families:

  - ``type``: every key of the train parser (the key schema, LF 0.9.5 + transformers 5.x) given each kind of value
    it does not take, a negative number, zero, and an empty value;
  - ``choice``: every choice of every enum/Literal key, plus a misspelt and a wrongly-cased one;
  - ``pair``: each pair of the boolean flags below set together, on a LoRA and a full-tuning base;
  - ``stage``: stage-specific keys on every stage;
  - ``required``: each key of each stage's base removed;
  - ``deepspeed``: every stock DeepSpeed file, missing and malformed files, and each ZeRO-3 incompatibility;
  - ``check``: one trigger for each check of LF 0.9.5's ``get_train_args`` / the argument ``__post_init__``s and
    transformers 5.6's ``TrainingArguments._validate_args``, plus a near miss that must pass;
  - ``static``: template and dataset names (a misspelt one, one from another version).

Every entry is written into its own folder under ``--out`` (``config.yaml`` plus the files it names), next to a
shared LF-like root: ``examples/deepspeed/*.json`` and ``data/dataset_info.json`` (LF's demo datasets plus every
dataset name a base or case uses), as ``llamafactory-cli train`` runs from LF's repository root. ``index.json``
lists the entries. The generator is deterministic; ``tests/test_parity_lf.py`` calls `build` itself.

Usage::

    python scripts/gen_parity_corpus.py --out /tmp/parity      # writes the corpus, prints its size by source
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
LF_EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"
FIXTURES = ROOT / "fixtures"
SCHEMA = ROOT / "finetune_doctor" / "catalog" / "lf_keys.json"

# the mutation bases: LF's own examples, one per stage and method (PPO and KTO have none: derived below)
BASES = {
    "sft_lora": "train_lora/qwen3_lora_sft.yaml",
    "sft_full": "train_full/qwen3_full_sft.yaml",          # full tuning with ZeRO-3
    "sft_ds3": "train_lora/qwen3_lora_sft_ds3.yaml",
    "sft_qlora": "train_qlora/qwen3_lora_sft_otfq.yaml",
    "dpo": "train_lora/qwen3_lora_dpo.yaml",
    "rm": "train_lora/qwen3_lora_reward.yaml",
    "pt": "train_lora/qwen3_lora_pretrain.yaml",
}
DERIVED_BASES = {   # stage bases LF ships no example for: the LoRA SFT example with the stage's own keys
    "ppo": ("sft_lora", {"stage": "ppo", "reward_model": "saves/qwen3-4b/lora/reward", "reward_model_type": "lora"}),
    "kto": ("dpo", {"stage": "kto", "dataset": "kto_en_demo", "pref_loss": None}),
}
STAGES = ("pt", "sft", "rm", "ppo", "dpo", "kto")
STAGE_BASE = {"pt": "pt", "sft": "sft_lora", "rm": "rm", "ppo": "ppo", "dpo": "dpo", "kto": "kto"}

FLAGS = ("fp16", "bf16", "pure_bf16", "use_galore", "use_apollo", "use_badam", "use_unsloth", "use_dora",
         "use_rslora", "pissa_init", "neat_packing", "packing", "train_on_prompt", "mask_history", "streaming",
         "predict_with_generate", "do_eval", "do_predict", "load_best_model_at_end", "compute_accuracy",
         "use_llama_pro", "shift_attn", "resize_vocab", "create_new_adapter", "fp8", "tf32", "use_cpu",
         "galore_layerwise", "apollo_layerwise", "freeze_vision_tower", "disable_gradient_checkpointing",
         "enable_liger_kernel", "upcast_layernorm", "auto_find_batch_size")

STAGE_KEYS = {   # keys that belong to one stage (or family of stages), with a value that turns them on
    "pref_beta": 0.2, "pref_ftx": 0.5, "pref_loss": "orpo", "dpo_label_smoothing": 0.1, "simpo_gamma": 0.7,
    "kto_chosen_weight": 1.5, "kto_rejected_weight": 0.8, "ref_model": "Qwen/Qwen3-4B-Instruct-2507",
    "reward_model": "saves/qwen3-4b/lora/reward", "reward_model_type": "full", "ppo_epochs": 2,
    "ppo_score_norm": True, "ppo_target": 3.0, "ppo_whiten_rewards": True, "ppo_buffer_size": 2,
    "predict_with_generate": True, "neat_packing": True, "train_on_prompt": True, "mask_history": True,
    "packing": True, "compute_accuracy": True, "load_best_model_at_end": True, "do_predict": True,
    "ld_alpha": 0.5, "use_ref_model": True,
}

# values per kind, for keys that do not take that kind
KIND_VALUES = {"str": "not_a_value", "int": 7, "float": 0.5, "bool": True, "list": ["a", "b"],
               "dict": {"a": 1}}
EDGE_VALUES = {"negative": -3, "zero": 0, "empty": None}


@dataclass
class Entry:
    """One corpus config. `keys` are the keys the mutation touched (where a finding should point)."""

    id: str
    source: str
    text: str
    origin: str
    keys: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)   # relative path -> text, written next to config.yaml
    in_place: str | None = None  # a fixture: its path relative to the repository root


# ---------------------------------------------------------------------------------------------------------------
# YAML text edits that keep the rest of the file as written

def yaml_value(v: Any) -> str:
    """`v` as a YAML 1.1 flow scalar/collection that OmegaConf reads back with the same Python type."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if isinstance(v, int) or "e" in repr(v) or "." in repr(v) else f"{v}.0"
    if isinstance(v, list):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    plain = re.fullmatch(r"[A-Za-z_./][A-Za-z0-9_./\-]*", s) and s.lower() not in (
        "yes", "no", "on", "off", "true", "false", "null", "y", "n", "~")
    return s if plain else json.dumps(s)


def _key_line(text: str, key: str) -> re.Match | None:
    return re.search(rf"^{re.escape(key)}:[^\n]*$", text, re.M)


def set_key(text: str, key: str, value: Any) -> str:
    """Set top-level `key` to `value`: its line is replaced (a trailing comment dropped), else a line appended."""
    line = f"{key}: {yaml_value(value)}"
    m = _key_line(text, key)
    if m:
        return text[:m.start()] + line + text[m.end():]
    return text.rstrip("\n") + "\n" + line + "\n"


def drop_key(text: str, key: str) -> str:
    m = _key_line(text, key)
    if not m:
        return text
    end = m.end() + 1 if m.end() < len(text) else m.end()
    return text[:m.start()] + text[end:]


def edit(text: str, changes: dict[str, Any]) -> str:
    """Apply `changes` in order: a value of `DROP` removes the key."""
    for k, v in changes.items():
        text = drop_key(text, k) if v is DROP else set_key(text, k, v)
    return text


DROP = object()


def top_keys(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_.\-]*):", text, re.M)]


# ---------------------------------------------------------------------------------------------------------------
# bases and the schema

def load_bases() -> dict[str, str]:
    bases = {name: (LF_EXAMPLES / rel).read_text(encoding="utf-8") for name, rel in BASES.items()}
    for name, (parent, changes) in DERIVED_BASES.items():
        bases[name] = edit(bases[parent], {k: (DROP if v is None else v) for k, v in changes.items()})
    return bases


def train_keys() -> dict[str, dict]:
    """The keys `llamafactory-cli train` takes with LF 0.9.5 and transformers 5.x (key schema entries)."""
    keys = json.loads(SCHEMA.read_text(encoding="utf-8"))["keys"]
    out = {}
    for name, e in keys.items():
        if not e.get("init", True) or name.startswith("_") or e.get("only_when"):
            continue
        if e.get("group") not in ("model", "data", "training", "finetuning", "generating"):
            continue
        if "0.9.5" not in (e.get("lf_versions") or []):
            continue
        tf = e.get("transformers_versions")
        if e.get("origin") == "transformers" and tf and not any(v.startswith("5.") for v in tf):
            continue
        out[name] = e
    return out


# ---------------------------------------------------------------------------------------------------------------
# the families

def _mut(family: str, base: str, label: str, text: str, keys: tuple[str, ...], **kw: Any) -> Entry:
    return Entry(id=f"{family}/{base}/{label}", source=f"mutation:{family}", text=text, origin=BASES.get(base, base),
                 keys=keys, **kw)


def fam_type(bases: dict[str, str], keys: dict[str, dict]) -> Iterator[Entry]:
    for name, e in keys.items():
        accepts = set(e.get("accepts") or ["any"])
        if "any" in accepts:
            accepts = set()
        values: dict[str, Any] = {}
        for kind, v in KIND_VALUES.items():
            if kind not in accepts and not (kind == "int" and "float" in accepts):
                values[kind] = v
        if accepts & {"int", "float"}:
            values.update(negative=-3, zero=0)
        values["empty"] = None
        for label, v in values.items():
            if v == e.get("default") and type(v) is type(e.get("default")):
                continue
            yield _mut("type", "sft_lora", f"{name}={label}", set_key(bases["sft_lora"], name, v), (name,))


def fam_choice(bases: dict[str, str], keys: dict[str, dict]) -> Iterator[Entry]:
    for name, e in keys.items():
        choices = [c for c in (e.get("choices") or []) if isinstance(c, (str, int, float)) and c is not None]
        if not choices:
            continue
        strs = [c for c in choices if isinstance(c, str)]
        for c in choices:
            yield _mut("choice", "sft_lora", f"{name}={c}", set_key(bases["sft_lora"], name, c), (name,))
        if strs:
            yield _mut("choice", "sft_lora", f"{name}=misspelt", set_key(bases["sft_lora"], name, strs[0] + "x"),
                       (name,))
            upper = next((c.upper() for c in strs if c.upper() != c and c.upper() not in strs), None)
            if upper:
                yield _mut("choice", "sft_lora", f"{name}=upper", set_key(bases["sft_lora"], name, upper), (name,))
    for stage in STAGES:   # every stage on every stage's base
        for base in ("sft_lora", "sft_full", "dpo", "rm"):
            yield _mut("choice", base, f"stage={stage}", set_key(bases[base], "stage", stage), ("stage",))
    for ft in ("lora", "oft", "freeze", "full", "qlora", "LoRA"):
        for base in ("sft_lora", "sft_full", "sft_qlora", "dpo", "ppo"):
            yield _mut("choice", base, f"finetuning_type={ft}", set_key(bases[base], "finetuning_type", ft),
                       ("finetuning_type",))


def fam_pair(bases: dict[str, str]) -> Iterator[Entry]:
    for base in ("sft_lora", "sft_full"):
        for flag in FLAGS:
            yield _mut("pair", base, flag, set_key(bases[base], flag, True), (flag,))
        for a, b in itertools.combinations(FLAGS, 2):
            text = edit(bases[base], {a: True, b: True})
            yield _mut("pair", base, f"{a}+{b}", text, (a, b))


def fam_stage(bases: dict[str, str]) -> Iterator[Entry]:
    for stage in STAGES:
        base = STAGE_BASE[stage]
        for key, v in STAGE_KEYS.items():
            yield _mut("stage", stage, f"{key}", set_key(bases[base], key, v), (key,))


def fam_required(bases: dict[str, str]) -> Iterator[Entry]:
    for base, text in bases.items():
        for key in top_keys(text):
            yield _mut("required", base, f"-{key}", drop_key(text, key), (key,))


def _ds(zero: dict | None = None, **top: Any) -> str:
    d: dict[str, Any] = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                         "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                         "zero_allow_untested_optimizer": True, "fp16": {"enabled": "auto"},
                         "bf16": {"enabled": "auto"}}
    if zero is not None:
        d["zero_optimization"] = zero
    d.update(top)
    return json.dumps(d, indent=2) + "\n"


def fam_deepspeed(bases: dict[str, str]) -> Iterator[Entry]:
    stock = sorted(p.name for p in (LF_EXAMPLES / "deepspeed").glob("*.json"))
    own = {
        "z3": _ds({"stage": 3, "overlap_comm": False, "contiguous_gradients": True}),
        "z2": _ds({"stage": 2, "overlap_comm": False}),
        "z1": _ds({"stage": 1}),
        "z0": _ds({"stage": 0}),
        "no_zero": _ds(None),
        "z3_offload": _ds({"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                           "offload_param": {"device": "cpu", "pin_memory": True}}),
        "stage_str": _ds({"stage": "3"}),
        "fp16_on": _ds({"stage": 2}, fp16={"enabled": True}),
        "bf16_off": _ds({"stage": 2}, bf16={"enabled": False}),
        "micro_fixed": _ds({"stage": 2}, train_micro_batch_size_per_gpu=4),
        "bad_json": '{"zero_optimization": {"stage": 2},\n',
        "empty": "{}\n",
        "list": "[1, 2]\n",
    }
    for base in ("sft_lora", "sft_full"):
        for name in stock:
            yield _mut("deepspeed", base, f"stock={name}",
                       set_key(bases[base], "deepspeed", f"examples/deepspeed/{name}"), ("deepspeed",))
        yield _mut("deepspeed", base, "missing", set_key(bases[base], "deepspeed", "configs/ds_z3.json"),
                   ("deepspeed",))
        yield _mut("deepspeed", base, "typo", set_key(bases[base], "deepspeed", "examples/deepspeed/ds_z3.json"),
                   ("deepspeed",))
        for label, body in own.items():
            yield _mut("deepspeed", base, f"own={label}", set_key(bases[base], "deepspeed", "ds_config.json"),
                       ("deepspeed",), files={"ds_config.json": body})
        for flag in ("pure_bf16", "use_unsloth", "pissa_init", "use_badam", "use_galore", "use_apollo",
                     "use_kt", "quantization_bit", "predict_with_generate", "fp16", "use_dora"):
            value: Any = 4 if flag == "quantization_bit" else True
            for z in ("z3", "z2"):
                text = edit(bases[base], {"deepspeed": "ds_config.json", flag: value})
                yield _mut("deepspeed", base, f"{z}+{flag}", text, ("deepspeed", flag), files={"ds_config.json": own[z]})
    z3 = edit(bases["sft_lora"], {"deepspeed": "ds_config.json", "predict_with_generate": True, "val_size": 0.1,
                                  "do_train": False, "do_predict": True})
    yield _mut("deepspeed", "sft_lora", "z3+predict", z3, ("deepspeed", "predict_with_generate"),
               files={"ds_config.json": own["z3"]})


# (label, base, changes, keys): each check of LF 0.9.5 hparams/ and transformers 5.6.0 _validate_args, and near
# misses. The verdicts come from LF; this table only says what to try.
CHECKS: list[tuple[str, str, dict[str, Any]]] = [
    ("logging_steps=0", "sft_lora", {"logging_steps": 0}),
    ("logging_steps=0+strategy_no", "sft_lora", {"logging_steps": 0, "logging_strategy": "no"}),
    ("logging_steps=0.5", "sft_lora", {"logging_steps": 0.5}),
    ("logging_steps=10.5", "sft_lora", {"logging_steps": 10.5}),
    ("save_steps=500.5", "sft_lora", {"save_steps": 500.5}),
    ("save_steps=0.2", "sft_lora", {"save_steps": 0.2}),
    ("eval_steps=2.5", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 2.5}),
    ("eval_steps_none+logging0", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "logging_steps": 0}),
    ("eval_steps_none", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps"}),
    ("eval_strategy_no_data", "sft_lora", {"eval_strategy": "steps", "eval_steps": 100}),
    ("eval_strategy_epoch_no_data", "sft_lora", {"eval_strategy": "epoch"}),
    ("do_eval_no_data", "sft_lora", {"do_eval": True}),
    ("eval_with_val_size", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 100}),
    ("eval_with_eval_dataset", "sft_lora", {"eval_dataset": "alpaca_en_demo", "eval_strategy": "steps",
                                            "eval_steps": 100}),
    ("val_size+eval_dataset", "sft_lora", {"eval_dataset": "alpaca_en_demo", "val_size": 0.1}),
    ("val_size_no_dataset", "sft_lora", {"dataset": DROP, "do_train": False, "val_size": 0.1}),
    ("best_mismatch_strategy", "sft_lora", {"val_size": 0.1, "eval_strategy": "epoch", "load_best_model_at_end": True}),
    ("best_not_multiple", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 300,
                                       "load_best_model_at_end": True}),
    ("best_multiple", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 250,
                                   "load_best_model_at_end": True}),
    ("best_ratio_mix", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 0.1,
                                    "load_best_model_at_end": True}),
    ("best_ratio_both", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 0.1,
                                     "save_steps": 0.3, "load_best_model_at_end": True}),
    ("best_ratio_multiple", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 0.1,
                                         "save_steps": 0.2, "load_best_model_at_end": True}),
    ("best_save_best", "sft_lora", {"val_size": 0.1, "eval_strategy": "steps", "eval_steps": 300,
                                    "save_strategy": "best", "load_best_model_at_end": True}),
    ("best_no_eval", "sft_lora", {"load_best_model_at_end": True}),
    ("plateau_no_eval", "sft_lora", {"lr_scheduler_type": "reduce_lr_on_plateau"}),
    ("plateau_eval", "sft_lora", {"lr_scheduler_type": "reduce_lr_on_plateau", "val_size": 0.1,
                                  "eval_strategy": "epoch"}),
    ("warmup_negative", "sft_lora", {"warmup_steps": -1}),
    ("warmup_ratio_negative", "sft_lora", {"warmup_ratio": -0.1}),
    ("prefetch_no_workers", "sft_lora", {"dataloader_num_workers": 0, "dataloader_prefetch_factor": 2}),
    ("prefetch_workers", "sft_lora", {"dataloader_prefetch_factor": 2}),
    ("empty_cache_0", "sft_lora", {"torch_empty_cache_steps": 0}),
    ("empty_cache_1.5", "sft_lora", {"torch_empty_cache_steps": 1.5}),
    ("fp16+bf16", "sft_lora", {"fp16": True}),
    ("fp16+bf16_full", "sft_full", {"fp16": True}),
    ("fp16_eval+bf16_eval", "sft_lora", {"fp16_full_eval": True, "bf16_full_eval": True}),
    ("interleave_concat", "sft_lora", {"interleave_probs": "0.5,0.5"}),
    ("interleave_len", "sft_lora", {"mix_strategy": "interleave_under", "interleave_probs": "0.2,0.3,0.5"}),
    ("interleave_ok", "sft_lora", {"mix_strategy": "interleave_under", "interleave_probs": "0.5,0.5"}),
    ("streaming_frac_val", "sft_lora", {"streaming": True, "max_samples": DROP, "max_steps": 100, "val_size": 0.1}),
    ("streaming_int_val", "sft_lora", {"streaming": True, "max_samples": DROP, "max_steps": 100, "val_size": 10}),
    ("streaming_max_samples", "sft_lora", {"streaming": True, "max_steps": 100}),
    ("streaming_no_max_steps", "sft_lora", {"streaming": True, "max_samples": DROP}),
    ("mask_history+train_on_prompt", "sft_lora", {"mask_history": True, "train_on_prompt": True}),
    ("image_pixels", "sft_lora", {"image_max_pixels": 1000, "image_min_pixels": 2000}),
    ("video_pixels", "sft_lora", {"video_max_pixels": 1000, "video_min_pixels": 2000}),
    ("export_quant", "sft_lora", {"export_quantization_bit": 4}),
    ("reward_lora_full", "ppo", {"finetuning_type": "full"}),
    ("reward_oft_lora", "ppo", {"reward_model_type": "oft"}),
    ("reward_full_full", "ppo", {"finetuning_type": "full", "reward_model_type": "full"}),
    ("ppo_no_reward", "ppo", {"reward_model": DROP}),
    ("ppo_no_train", "ppo", {"do_train": False}),
    ("ppo_shift_attn", "ppo", {"shift_attn": True}),
    ("ppo_report_mlflow", "ppo", {"report_to": "mlflow"}),
    ("ppo_report_tensorboard", "ppo", {"report_to": "tensorboard"}),
    ("ppo_unsloth_lora_rm", "ppo", {"use_unsloth": True}),
    ("ppo_best", "ppo", {"load_best_model_at_end": True, "val_size": 0.1, "eval_strategy": "steps",
                         "eval_steps": 250}),
    ("rm_best", "rm", {"load_best_model_at_end": True, "val_size": 0.1, "eval_strategy": "steps",
                       "eval_steps": 250}),
    ("dpo_smoothing_orpo", "dpo", {"pref_loss": "orpo", "dpo_label_smoothing": 0.1}),
    ("dpo_smoothing_sigmoid", "dpo", {"dpo_label_smoothing": 0.1}),
    ("llama_pro_full", "sft_full", {"use_llama_pro": True}),
    ("llama_pro_freeze", "sft_full", {"finetuning_type": "freeze", "use_llama_pro": True}),
    ("lora+galore", "sft_lora", {"use_galore": True}),
    ("galore+apollo", "sft_full", {"use_galore": True, "use_apollo": True, "deepspeed": DROP}),
    ("pissa_dpo", "dpo", {"pissa_init": True}),
    ("pissa_orpo", "dpo", {"pissa_init": True, "pref_loss": "orpo"}),
    ("pissa_kto", "kto", {"pissa_init": True}),
    ("loraplus_full", "sft_full", {"loraplus_lr_ratio": 16.0}),
    ("rslora_full", "sft_full", {"use_rslora": True}),
    ("dora_freeze", "sft_full", {"finetuning_type": "freeze", "use_dora": True}),
    ("pissa_full", "sft_full", {"pissa_init": True, "deepspeed": DROP}),
    ("predict_not_sft", "dpo", {"predict_with_generate": True}),
    ("neat_not_sft", "pt", {"neat_packing": True}),
    ("train_on_prompt_not_sft", "rm", {"train_on_prompt": True}),
    ("mask_history_not_sft", "dpo", {"mask_history": True}),
    ("do_predict_no_generate", "sft_lora", {"do_predict": True, "val_size": 0.1}),
    ("do_predict_generate", "sft_lora", {"do_predict": True, "predict_with_generate": True, "val_size": 0.1,
                                         "do_train": False}),
    ("predict_while_training", "sft_lora", {"predict_with_generate": True}),
    ("predict_compute_accuracy", "sft_lora", {"predict_with_generate": True, "compute_accuracy": True,
                                              "val_size": 0.1}),
    ("no_dataset", "sft_lora", {"dataset": DROP}),
    ("no_dataset_eval_only", "sft_lora", {"dataset": DROP, "do_train": False, "eval_dataset": "alpaca_en_demo",
                                          "do_eval": True}),
    ("quant_device_map", "sft_qlora", {"quantization_device_map": "auto"}),
    ("quant_freeze", "sft_qlora", {"finetuning_type": "freeze"}),
    ("quant_oft", "sft_qlora", {"finetuning_type": "oft"}),
    ("quant_pissa", "sft_qlora", {"pissa_init": True}),
    ("quant_resize_vocab", "sft_qlora", {"resize_vocab": True}),
    ("quant_new_adapter", "sft_qlora", {"adapter_name_or_path": "saves/a", "create_new_adapter": True}),
    ("quant_two_adapters", "sft_qlora", {"adapter_name_or_path": "saves/a,saves/b"}),
    ("quant_one_adapter", "sft_qlora", {"adapter_name_or_path": "saves/a"}),
    ("adapter_full", "sft_full", {"adapter_name_or_path": "saves/a"}),
    ("adapter_freeze", "sft_full", {"finetuning_type": "freeze", "adapter_name_or_path": "saves/a"}),
    ("fp8_quant", "sft_qlora", {"fp8": True}),
    ("infer_backend_vllm", "sft_lora", {"infer_backend": "vllm"}),
    ("trackio_no_project", "sft_lora", {"report_to": "trackio", "project": ""}),
    ("galore_layerwise", "sft_full", {"use_galore": True, "galore_layerwise": True, "deepspeed": DROP}),
    ("galore_plain", "sft_full", {"use_galore": True, "deepspeed": DROP}),
    ("apollo_layerwise", "sft_full", {"use_apollo": True, "apollo_layerwise": True, "deepspeed": DROP}),
    ("badam_ratio", "sft_full", {"use_badam": True, "badam_mode": "ratio", "deepspeed": DROP}),
    ("badam_layer_no_z3", "sft_full", {"use_badam": True, "deepspeed": DROP}),
    ("badam_layer_z3", "sft_full", {"use_badam": True}),
    ("galore_deepspeed", "sft_full", {"use_galore": True}),
    ("pure_bf16_z3", "sft_full", {"pure_bf16": True, "bf16": DROP}),
    ("unsloth_z3", "sft_full", {"use_unsloth": True}),
    ("no_model", "sft_lora", {"model_name_or_path": DROP}),
    ("model_empty", "sft_lora", {"model_name_or_path": None}),
    ("tf32_true", "sft_lora", {"tf32": True}),
    ("torch_compile", "sft_lora", {"torch_compile": True}),
    ("max_steps_0", "sft_lora", {"max_steps": 0}),
    ("epochs_0", "sft_lora", {"num_train_epochs": 0}),
    ("fsdp+deepspeed", "sft_full", {"fsdp": "full_shard"}),
    ("fsdp_both", "sft_lora", {"fsdp": "full_shard shard_grad_op"}),
    ("micro_batch_-8", "sft_lora", {"per_device_train_batch_size": -8}),
    ("grad_accum_0", "sft_lora", {"gradient_accumulation_steps": 0}),
    ("cutoff_len_-1", "sft_lora", {"cutoff_len": -1}),
    ("lora_rank_0", "sft_lora", {"lora_rank": 0}),
    ("learning_rate_abc", "sft_lora", {"learning_rate": "abc"}),
    ("stage_sft2", "sft_lora", {"stage": "sft2"}),
    ("no_precision", "sft_lora", {"bf16": DROP}),
    ("pure_bf16_only", "sft_lora", {"bf16": DROP, "pure_bf16": True}),
]


def fam_check(bases: dict[str, str]) -> Iterator[Entry]:
    for label, base, changes in CHECKS:
        keys = tuple(k for k in changes)
        yield _mut("check", base, label, edit(bases[base], changes), keys)
    for label, base, changes in CHECKS:   # the same triggers on a second base where the base is not specific
        if base != "sft_lora" or any(k in changes for k in ("dataset", "model_name_or_path")):
            continue
        yield _mut("check", "sft_full", label, edit(bases["sft_full"], changes), tuple(changes))


def fam_static(bases: dict[str, str]) -> Iterator[Entry]:
    for t in ("qwen3_nothink", "qwen3", "qwen", "llama3", "qwen2.5", "llama-3", "chatml_qwen", "baichuan",
              "qwen3_NOTHINK", "default", "empty", "alpaca", "vicuna"):
        yield _mut("static", "sft_lora", f"template={t}", set_key(bases["sft_lora"], "template", t), ("template",))
    for d in ("identity,alpaca_en_demo", "alpaca_en_demo", "identity,alpaca_en_dem", "alpaca-en-demo",
              "my_private_data", "identity, alpaca_en_demo"):
        yield _mut("static", "sft_lora", f"dataset={d}", set_key(bases["sft_lora"], "dataset", d), ("dataset",))
    yield _mut("static", "sft_lora", "eval_dataset=missing",
               edit(bases["sft_lora"], {"eval_dataset": "my_eval_set", "eval_strategy": "epoch"}), ("eval_dataset",))
    yield _mut("static", "sft_lora", "dataset_dir=missing",
               set_key(bases["sft_lora"], "dataset_dir", "nowhere/data"), ("dataset_dir", "dataset"))


# ---------------------------------------------------------------------------------------------------------------
# real configs

def _is_training(text: str) -> bool:
    return bool(re.search(r"^(stage|do_train):", text, re.M))


def _repeats_a_key(text: str) -> bool:
    """Whether a top-level key appears twice, or the file is no YAML: such a file stops at LF's YAML loader (OmegaConf refuses it from
    0.9.4 on; safe_load keeps the last value before), before the argument parser this corpus compares, and its
    judgement per release is tests/test_duplicate_key.py's (FD046/FD047, trial 8's LF #8150). The doctor's own
    YAML reader says so (readers/config/yamlcfg.py `parse_yaml_text`, which lists each repeat)."""
    from finetune_doctor.errors import InputError
    from finetune_doctor.readers.config.yamlcfg import parse_yaml_text

    repeats: list[dict] = []
    try:
        parse_yaml_text(text, "<corpus>", repeats)
    except InputError:
        # not YAML at all (trial 18's LF#8641 paste ends in a bare word): LF's loader refuses it before the parser
        # too, and tests/test_trial18.py judges it (FD022)
        return True
    return bool(repeats)


def real_entries() -> Iterator[Entry]:
    for p in sorted(LF_EXAMPLES.rglob("*.yaml")):
        text = p.read_text(encoding="utf-8")
        if _is_training(text):
            rel = p.relative_to(LF_EXAMPLES).as_posix()
            yield Entry(id=f"lf-example/{rel}", source="lf-example", text=text, origin=f"examples/{rel}")
    for case in sorted(p for p in (FIXTURES / "cases").iterdir() if (p / "config.yaml").is_file()):
        yield Entry(id=f"case/{case.name}", source="case", text=(case / "config.yaml").read_text(encoding="utf-8"),
                    origin=f"fixtures/cases/{case.name}/config.yaml")
    for p in sorted(FIXTURES.rglob("*.yaml")):
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith(("fixtures/llamafactory/", "fixtures/cases/")):
            continue
        text = p.read_text(encoding="utf-8")
        if not _is_training(text) or _repeats_a_key(text):
            continue
        yield Entry(id=f"fixture/{rel}", source="fixture", text=text, origin=rel, in_place=rel)


def build_entries() -> list[Entry]:
    bases = load_bases()
    keys = train_keys()
    out = list(real_entries())
    # the hand-written families first: a text two families produce keeps the more specific id
    for fam in (fam_check(bases), fam_static(bases), fam_deepspeed(bases), fam_stage(bases), fam_required(bases),
                fam_pair(bases), fam_choice(bases, keys), fam_type(bases, keys)):
        out.extend(fam)
    seen: dict[str, Entry] = {}
    for e in out:   # the same text from two families is one config
        seen.setdefault(e.text + json.dumps(e.files, sort_keys=True) + (e.in_place or ""), e)
    return list(seen.values())


# ---------------------------------------------------------------------------------------------------------------
# writing

def dataset_names(texts: list[str]) -> list[str]:
    names: set[str] = set()
    for t in texts:
        for m in re.finditer(r"^(?:eval_)?dataset:\s*([^#\n]+)", t, re.M):
            names.update(n.strip().strip("'\"") for n in m.group(1).split(",") if n.strip())
    return sorted(names)


def write_root(out: Path, names: list[str]) -> None:
    """The LF-like launch root shared by every entry: examples/deepspeed and data/dataset_info.json."""
    shutil.copytree(LF_EXAMPLES / "deepspeed", out / "_lf" / "examples" / "deepspeed", dirs_exist_ok=True)
    info = json.loads((FIXTURES / "llamafactory" / "data_examples" / "dataset_info.excerpt.json")
                      .read_text(encoding="utf-8"))
    for n in names:
        info.setdefault(n, {"file_name": f"{n}.json"})
    (out / "_lf" / "data").mkdir(parents=True, exist_ok=True)
    (out / "_lf" / "data" / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def build(out: Path) -> list[dict[str, Any]]:
    """Write the corpus under `out`; returns the index (one dict per entry with its folder and config path)."""
    out.mkdir(parents=True, exist_ok=True)
    entries = build_entries()
    base_texts = [e.text for e in entries if not e.source.startswith("mutation:")] + list(load_bases().values())
    write_root(out, dataset_names(base_texts))
    index = []
    for i, e in enumerate(entries):
        d = out / f"e{i:05d}"
        d.mkdir(exist_ok=True)
        if e.in_place:
            # the fixture with the JSON files beside it, launched from an LF-like root (its repository-relative
            # paths, fixtures/..., resolve through a link to this repository's fixtures/)
            src = ROOT / e.in_place
            for sib in src.parent.glob("*.json"):
                shutil.copy(sib, d / sib.name)
            config = d / "config.yaml"
            shutil.copy(src, config)
            for name, target in (("examples", out / "_lf" / "examples"), ("data", out / "_lf" / "data"),
                                 ("fixtures", FIXTURES)):
                (d / name).symlink_to(target, target_is_directory=True)
            cwd = d
        elif e.source == "case":
            sys.path.insert(0, str(ROOT / "tests"))
            from casekit import lay_out  # the cases' own layout (tests/casekit.py)

            config = lay_out(Path(e.origin).parent.name, d)
            (d / "data").exists() or (d / "data").symlink_to(out / "_lf" / "data", target_is_directory=True)
            cwd = d
        else:
            for name in ("examples", "data"):
                (d / name).symlink_to(out / "_lf" / name, target_is_directory=True)
            config = d / "config.yaml"
            config.write_text(e.text, encoding="utf-8")
            for rel, body in e.files.items():
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                (d / rel).write_text(body, encoding="utf-8")
            cwd = d
        index.append({**{k: v for k, v in asdict(e).items() if k not in ("text", "files")},
                      "keys": list(e.keys), "config": str(config), "cwd": str(cwd)})
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    return index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write the corpus into (created)")
    args = ap.parse_args(argv)
    index = build(Path(args.out))
    by = Counter(e["source"] for e in index)
    print(f"{len(index)} configs: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
