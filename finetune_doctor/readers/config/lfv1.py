"""LLaMA-Factory v1 configs (``USE_V1=1 llamafactory-cli sft config.yaml``): what v1's own parser rejects.

v1 parses a YAML with ``HfArgumentParser([ModelArguments, DataArguments, TrainingArguments, SampleArguments])``
``.parse_dict(args, allow_extra_keys=is_env_enabled("ALLOW_EXTRA_KEYS"))`` (LF main ``v1/config/arg_parser.py``
L35-52; note ALLOW_EXTRA_KEYS, not v0's ALLOW_EXTRA_ARGS, with ``is_env_enabled`` of ``v1/utils/env.py`` L28-30:
true/yes/on/t/y/1). Then the dataclasses' ``__post_init__`` run:

* ``ModelArguments`` (``v1/config/model_args.py`` L63-73): ``flash_attn`` must be one of ``AttentionFunction``
  (eager, sdpa, flash_attention_2: ``v1/utils/types.py``), else ValueError "Unsupported `flash_attn`";
  ``init_config``, ``peft_config``, ``kernel_config``, ``quant_config`` go through ``get_plugin_config``.
* ``get_plugin_config`` (``v1/config/arg_utils.py`` L80-103): None stays None; a string starting with ``{`` is
  parsed as JSON; anything else that is not a mapping fails (``.items()`` of a str or list: AttributeError); a
  mapping without ``name`` raises "Plugin configuration must have a 'name' field.".
* ``TrainingArguments`` (``v1/config/training_args.py`` L170-198): ``dist_config``, ``optim_config``,
  ``lr_scheduler_config`` through ``get_plugin_config``; ``batching_strategy: dynamic_batching`` needs
  ``max_steps`` > 0 and refuses ``save_epochs``.

`check_v1(values)` returns one problem per rejection in the shape of keyschema's ``lint.keys`` items. Kinds:
``unknown`` (a key no v1 class declares; the v0 spelling named when there is one), ``v1_parse`` (a
``__post_init__`` rejection) and ``invalid_value`` (a plugin name v1 does not register: it fails when the plugin is
looked up, after parsing), ``v1_start`` (a refusal when v1 builds its engine) and ``v1_init`` (one at trainer init:
FlashAttention-2 required, `_needs_flash_attention`). The field list and plugin names come from the catalog (scripts/build_lf_releases.py,
read from the snapshot's ``v1/config`` and ``v1/plugins``). Pure Python: `doctor lint` calls it.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Mapping

from finetune_doctor.readers.config.lfrelease import v1_catalog, v1_releases
from finetune_doctor.readers.lfenv import env_enabled

Problem = dict[str, Any]
PLUGIN_KEYS = {"init_config": "InitPlugin", "peft_config": "PeftPlugin", "kernel_config": "KernelPlugin",
               "quant_config": "QuantizationPlugin", "dist_config": "DistributedPlugin",
               "optim_config": "OptimizerPlugin", "lr_scheduler_config": None}
# the v0 key a v1 user most likely carried over, and where v1 takes it
V0_TO_V1 = {
    "model_name_or_path": ("model", "the model is `model`"),
    "per_device_train_batch_size": ("micro_batch_size", "the per-GPU batch is `micro_batch_size`"),
    "dataset": ("train_dataset", "v1 reads a dataset YAML: `train_dataset: data/xxx.yaml`"),
    "eval_dataset": ("eval_dataset", None),
    "deepspeed": ("dist_config", "DeepSpeed is `dist_config: {name: deepspeed, config_file: PATH}`"),
    "finetuning_type": ("peft_config", "LoRA/freeze is `peft_config: {name: lora, r: 16, ...}`"),
    "lora_rank": ("peft_config", "the LoRA rank is `peft_config.r`"),
    "lora_alpha": ("peft_config", "`peft_config.lora_alpha`"),
    "lora_target": ("peft_config", "`peft_config.target_modules`"),
    "quantization_bit": ("quant_config", "`quant_config: {name: bnb, quantization_bit: 4}`"),
    "enable_liger_kernel": ("kernel_config", "`kernel_config: {name: liger_kernel}`"),
    "gradient_checkpointing": ("enable_activation_checkpointing", None),
    "disable_gradient_checkpointing": ("enable_activation_checkpointing", "inverted: `enable_activation_checkpointing`"),
    "gradient_accumulation_steps": ("global_batch_size", "v1 derives accumulation from `global_batch_size`"),
    "template": ("custom_chat_template", "v1 uses the tokenizer's chat template (or `custom_chat_template`)"),
    "stage": (None, "the stage is the command: `llamafactory-cli sft|dpo|rm`"),
    "do_train": (None, "v1 has no do_train: the command trains"),
    "optim": ("optim_config", "`optim_config: {name: muon, ...}`"),
}
FLASH_ATTN = ("eager", "sdpa", "flash_attention_2")


def extra_keys_allowed(env: Mapping[str, str] | None = None) -> bool:
    """v1's ``is_env_enabled("ALLOW_EXTRA_KEYS")`` (readers/lfenv.py, v1's wider set of true values)."""
    return env_enabled("ALLOW_EXTRA_KEYS", env, v1=True)


def _p(key: str, kind: str, message: str, suggestion: str | None = None, *, replacement: str | None = None,
       fix: str | None = None, fix_value: Any = None, condition: str | None = None) -> Problem:
    return {"key": key, "kind": kind, "message": message, "suggestion": suggestion, "replacement_key": replacement,
            "fix": fix, "fix_value": fix_value, "condition": condition}


def check_v1(values: Mapping[str, Any], env: Mapping[str, str] | None = None, release: Any = None
             ) -> list[Problem]:
    """v1's parse-time rejections of one config (module docstring), in key order. `release` (lfrelease.Release)
    narrows the fields and plugins to the v1 of the releases it names when it is known (``--llamafactory``,
    ``--env``, the llamafactory installed here): v1 changed between 0.9.4, 0.9.5 and main (catalog ``v1.fields_in``,
    ``v1.plugins_in``, scripts/build_lf_releases.py). Never raises."""
    cat = v1_catalog()
    fields = cat["fields"]
    out: list[Problem] = []
    lenient = extra_keys_allowed(env)
    sel = _v1_selection(release)
    for raw in values:
        key = str(raw)
        if key in fields:
            if sel and not sel & _in(cat.get("fields_in", {}).get(key)):
                out.append(_not_in_release(key, cat["fields_in"].get(key), release, lenient))
            continue
        out.append(_unknown(key, fields, lenient))
    out += _post_init(values, cat, sel)
    dist = values.get("dist_config")
    if isinstance(dist, Mapping) and dist.get("name") == "deepspeed" and not dist.get("config_file"):
        # v1 reads the file when it builds the engine, after the model is loaded (plugins/trainer_plugins/
        # distributed/interface.py L69, deepspeed.py L60): "DeepSpeed config_file is required"
        out.append(_p("dist_config", "v1_start",
                      "`dist_config: {name: deepspeed}` names no `config_file`: v1 stops at start-up with "
                      "\"DeepSpeed config_file is required.\"",
                      suggestion="add `config_file:` with the DeepSpeed JSON "
                                 "(e.g. examples/deepspeed/ds_z3_config.json)"))
    out += _needs_flash_attention(values)
    return out


# v1's attention default (v1/config/model_args.py ``flash_attn``: AttentionFunction.SDPA) and the one value its
# trainer accepts for sequence parallelism and padding-free batching
V1_FLASH_ATTN_DEFAULT = "sdpa"
V1_FA2 = "flash_attention_2"


def _needs_flash_attention(values: Mapping[str, Any]) -> list[Problem]:
    """v1's trainer-init refusals of a run without FlashAttention-2 (LF main v1/core/base_trainer.py L149-160 and
    L165-169 at ff6d4d1; 0.9.5's wheel L141-161, where cp_size sits in dist_config): Ulysses context parallelism (``cp_size`` > 1) stops
    with "Sequence parallelism requires flash attention. Please set `flash_attn: flash_attention_2`." and
    ``batching_strategy: padding_free`` with "`padding_free` requires `flash_attn: flash_attention_2`.". Both come
    after the model is loaded. Each problem points at ``flash_attn`` when the config sets it, else at the key that
    asks for it."""
    attn = str(values.get("flash_attn") or V1_FLASH_ATTN_DEFAULT)
    if attn not in ("eager", "sdpa"):   # flash_attention_2 passes; any other value v1's parser refuses (v1_parse)
        return []
    out: list[Problem] = []
    said = f"`flash_attn: {attn}`" if "flash_attn" in values else f"v1's default attention ({attn})"
    fix = "set `flash_attn: flash_attention_2` (flash-attn installed on the training machine)"
    # main reads cp_size/cp_mode at the top level, 0.9.5 inside dist_config (its base_trainer.py L141)
    dist = values.get("dist_config") if isinstance(values.get("dist_config"), Mapping) else {}
    where = "cp_size" if "cp_size" in values else "dist_config"
    cp = values.get("cp_size", dist.get("cp_size", 1))
    mode = values.get("cp_mode") or dist.get("cp_mode") or "ulysses"
    if isinstance(cp, int) and not isinstance(cp, bool) and cp > 1:
        out.append(_p("flash_attn" if "flash_attn" in values else where, "v1_init",
                      f"`cp_size: {cp}` (context parallelism, {mode}) with {said}: "
                      "v1 stops at trainer init with \"Sequence parallelism requires flash attention. Please set "
                      "`flash_attn: flash_attention_2`.\"", suggestion=fix))
    if str(values.get("batching_strategy") or "") == "padding_free":
        out.append(_p("flash_attn" if "flash_attn" in values else "batching_strategy", "v1_init",
                      f"`batching_strategy: padding_free` with {said}: v1 stops at trainer init with "
                      "\"`padding_free` requires `flash_attn: flash_attention_2`.\"", suggestion=fix))
    return out


def no_v1(values: Mapping[str, Any], release: Any) -> Problem | None:
    """The one problem of a v1 config judged for a release that has no v1 (`release` a lfrelease.Release read from
    --llamafactory or --env; the llamafactory merely installed here does not decide it), else None. Such a release
    ignores ``USE_V1=1`` and its v0 parser meets v1 keys (``model``, ``micro_batch_size``, ...) it does not declare,
    stopping with "Some keys are not used by the HfArgumentParser"."""
    if release is None or not release.known or release.source == "installed here" or release.has_v1:
        return None
    since = v1_releases()
    key = next((str(k) for k in values if str(k) in ("model", "micro_batch_size", "train_dataset", "peft_config",
                                                     "dist_config")), next((str(k) for k in values), "model"))
    return _p(key, "v1_release",
              f"This is a LLaMA-Factory v1 config (`USE_V1=1 llamafactory-cli sft`), but {release.label} has no "
              f"v1: v1 ships from {since[0] if since else 'a later release'} on. That release ignores USE_V1 and "
              "its v0 parser stops on the v1 keys (\"Some keys are not used by the HfArgumentParser\").",
              suggestion=f"upgrade LLaMA-Factory to {since[0] if since else 'a release with v1'} or later, or write "
                         "the config with v0 keys (model_name_or_path, per_device_train_batch_size, dataset, ...)")


def _v1_selection(release: Any) -> frozenset[int]:
    """Indices of the v1-shipping releases `release` stands for when it was read (empty: judge for main's v1)."""
    if release is None or not getattr(release, "known", False):
        return frozenset()
    from finetune_doctor.readers.config.lfrelease import v1_releases_indices

    return frozenset(release.indices) & v1_releases_indices()


def _in(ranges: Any) -> frozenset[int]:
    from finetune_doctor.readers.config.lfrelease import parse_ranges

    return parse_ranges(ranges) if ranges else frozenset()


def _versions(ranges: Any) -> str:
    from finetune_doctor.readers.config.lfrelease import load

    allv = load()["versions"]
    return ", ".join(allv[i] for i in sorted(_in(ranges)))


def _not_in_release(key: str, ranges: Any, release: Any, lenient: bool) -> Problem:
    fate = ("v1 drops it silently because ALLOW_EXTRA_KEYS is set, so it has no effect" if lenient else
            "v1's parser stops with \"Some keys are not used by the HfArgumentParser\"")
    return _p(key, "unknown", f"`{key}` is not a v1 key of {release.label} (the v1 of {_versions(ranges)} "
                              f"declares it): {fate}.",
              suggestion=f"upgrade LLaMA-Factory to {_versions(ranges).split(', ')[0]} or later, or remove `{key}`",
              condition="ALLOW_EXTRA_KEYS is set" if lenient else None)


def _unknown(key: str, fields: Mapping[str, Any], lenient: bool) -> Problem:
    fate = ("v1 drops it silently because ALLOW_EXTRA_KEYS is set, so it has no effect" if lenient else
            "v1's parser stops with \"Some keys are not used by the HfArgumentParser\"")
    cond = "ALLOW_EXTRA_KEYS is set" if lenient else None
    if key in V0_TO_V1:
        new, how = V0_TO_V1[key]
        hint = (f" {how}." if how.startswith("v1") else f" In v1, {how}.") if how else f" In v1 it is `{new}`."
        return _p(key, "unknown", f"`{key}` is a LLaMA-Factory v0 key, not a v1 one: {fate}.{hint}",
                  suggestion=how or f"write `{new}`", replacement=new if new and not how else None,
                  fix="rename" if new and not how else None, condition=cond)
    near = difflib.get_close_matches(key.lower().replace("-", "_"), list(fields), n=1, cutoff=0.8)
    if near:
        return _p(key, "unknown", f"Unknown v1 key `{key}`: {fate}. Did you mean `{near[0]}`?",
                  suggestion=f"did you mean `{near[0]}`?", condition=cond)
    return _p(key, "unknown", f"Unknown v1 key `{key}`: {fate}.", suggestion=f"remove `{key}`", condition=cond)


def _post_init(values: Mapping[str, Any], cat: Mapping[str, Any], sel: frozenset[int] = frozenset()
               ) -> list[Problem]:
    out: list[Problem] = []
    fa = values.get("flash_attn", "sdpa")
    if "flash_attn" in values and (not isinstance(fa, str) or fa not in FLASH_ATTN):
        v0 = {"fa2": "flash_attention_2", "disabled": "eager", "auto": "sdpa", "sdpa": "sdpa"}
        fix = v0.get(str(fa)) if isinstance(fa, str) else None
        out.append(_p("flash_attn", "v1_parse", f"`flash_attn: {fa}` is not a v1 attention function: v1 stops with "
                                                f"\"Unsupported `flash_attn`\" (it takes {', '.join(FLASH_ATTN)}"
                                                f"{'; ' + repr(fa) + ' is the v0 spelling' if fix else ''}).",
                      suggestion=f"write `flash_attn: {fix}`" if fix else f"use one of {', '.join(FLASH_ATTN)}",
                      fix="set" if fix else None, fix_value=fix))
    plugins = dict(cat.get("plugins", {}))
    if sel:   # the plugins the named releases' v1 registers
        plugins = {fam: [n for n, r in names.items() if sel & _in(r)]
                   for fam, names in (cat.get("plugins_in") or {}).items()}
    for key, family in PLUGIN_KEYS.items():
        if key in values:
            # a family a release registers nothing in is not judged: 0.9.4 reads dist_config without a registry
            names = (plugins.get(family) or None) if family else None
            out += _plugin(key, values[key], names)
    strategy = values.get("batching_strategy")
    if str(strategy) == "dynamic_batching":
        steps = values.get("max_steps")
        if steps is None or (isinstance(steps, (int, float)) and not isinstance(steps, bool) and steps <= 0):
            out.append(_p("max_steps", "v1_parse",
                          "`batching_strategy: dynamic_batching` without a positive `max_steps`: v1 stops with "
                          "\"`dynamic_batching` requires `max_steps` because it is step-driven.\"",
                          suggestion="set `max_steps`"))
        if values.get("save_epochs") is not None:
            out.append(_p("save_epochs", "v1_parse", "`save_epochs` with `batching_strategy: dynamic_batching`: v1 "
                                                     "stops with \"`save_epochs` is not supported with "
                                                     "`dynamic_batching`; use `save_steps` instead.\"",
                          suggestion="use `save_steps`", fix="delete"))
    return out


def _plugin(key: str, value: Any, names: list[str] | None) -> list[Problem]:
    if value is None:
        return []
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError as err:
            return [_p(key, "v1_parse", f"`{key}` is a string that starts with `{{` but is not JSON ({err}): v1's "
                                        "get_plugin_config stops on it.", suggestion=f"write `{key}` as a mapping")]
    if not isinstance(value, Mapping):
        return [_p(key, "v1_parse", f"`{key}` must be a mapping with a `name` (e.g. `{key}: {{name: ...}}`); v1's "
                                    f"get_plugin_config fails on {type(value).__name__} values while parsing.",
                   suggestion=f"write `{key}: {{name: {value if isinstance(value, str) else '...'}}}`")]
    if "name" not in value:
        return [_p(key, "v1_parse", f"`{key}` has no `name`: v1 stops with \"Plugin configuration must have a "
                                    "'name' field.\"", suggestion=f"add `name:` under `{key}`")]
    if names:
        # kernel_config names a comma-separated list ("auto, flash-linear-attention"); auto picks for the device
        wanted = [n.strip() for n in str(value["name"]).split(",")] if key == "kernel_config" else [str(value["name"])]
        bad = [n for n in wanted if n not in names and n != "auto"]
        if bad:
            return [_p(f"{key}.name", "invalid_value",
                       f"`{key}.name: {', '.join(bad)}` is not a plugin v1 registers ("
                       f"{', '.join(dict.fromkeys(names + (['auto'] if key == 'kernel_config' else [])))}"
                       "): the parser takes it, and the run fails when the plugin is looked up.",
                       suggestion=f"use one of {', '.join(names)}")]
    return []


def to_v0(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The v0 keys whose run is the one v1 trains for `values`, and notes on what v1 does that v0 keys cannot say.

    Mapping (LF main v1 sources): ``model`` -> model_name_or_path; ``peft_config`` lora (r, lora_alpha,
    target_modules) / freeze (freeze_trainable_layers, freeze_trainable_modules) -> finetuning_type and its keys,
    none -> full (``v1/plugins/model_plugins/peft.py``); ``quant_config`` bnb + quantization_bit -> on-the-fly bnb
    (``quantization.py``); ``micro_batch_size`` -> per_device_train_batch_size; ``global_batch_size`` kept for the
    caller to derive accumulation; ``bf16`` (default true in v1) -> bf16; ``enable_activation_checkpointing``
    (default true) -> gradient checkpointing (full tuning keeps fp32 weights as v0's upcast does: v1
    ``core/model_engine.py`` L203-207 casts the model to float32; FSDP2 gathers them in bf16, ``fsdp2.py``
    ``get_mp_policy``); ``flash_attn`` eager/sdpa/flash_attention_2 -> disabled/sdpa/fa2;
    ``kernel_config: liger_kernel`` -> enable_liger_kernel; ``dist_config: deepspeed`` -> deepspeed: config_file;
    ``optim_config: muon`` -> use_muon; Ulysses ``cp_size`` -> cutoff_len / cp_size (each rank's slice). FSDP2
    and EP are returned in the notes and the ``_v1`` entry (engine, ep_size, cp_size) for the run resolver.
    """
    v: dict[str, Any] = {"stage": "sft", "do_train": True, "finetuning_type": "full", "template": "default"}
    notes: list[str] = []
    v["model_name_or_path"] = values.get("model", "Qwen/Qwen3-4B-Instruct-2507")
    if "model" not in values:
        notes.append("v1 `model` not set: v1's default Qwen/Qwen3-4B-Instruct-2507 is used")
    peft = values.get("peft_config") if isinstance(values.get("peft_config"), Mapping) else None
    if peft:
        v["_peft"] = dict(peft)   # the export keys of a v1 merge (export_dir, export_size, infer_dtype)
    if peft and peft.get("name") == "lora":
        v["finetuning_type"] = "lora"
        v["lora_rank"] = int(peft.get("r", 8)) if isinstance(peft.get("r", 8), int) else 8
        if isinstance(peft.get("lora_alpha"), int):
            v["lora_alpha"] = peft["lora_alpha"]
        tm = peft.get("target_modules", "all")
        v["lora_target"] = ",".join(tm) if isinstance(tm, list) else str(tm)
    elif peft and peft.get("name") == "freeze":
        v["finetuning_type"] = "freeze"
        for k in ("freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules"):
            if peft.get(k) is not None:
                v[k] = peft[k]
    quant = values.get("quant_config") if isinstance(values.get("quant_config"), Mapping) else None
    if quant and quant.get("name") in ("bnb", "auto") and quant.get("quantization_bit") in (4, 8):
        if v["finetuning_type"] == "lora":
            v["quantization_bit"] = quant["quantization_bit"]
            v["quantization_method"] = "bnb"
        else:   # v0 refuses this pair; what v1 does with it is not modelled
            notes.append("quant_config without a LoRA peft_config: estimated unquantized")
    for src, dst in (("micro_batch_size", "per_device_train_batch_size"), ("cutoff_len", "cutoff_len"),
                     ("learning_rate", "learning_rate"), ("max_steps", "max_steps"), ("output_dir", "output_dir"),
                     ("trust_remote_code", "trust_remote_code")):
        if src in values:
            v[dst] = values[src]
    v.setdefault("per_device_train_batch_size", 1)
    v.setdefault("cutoff_len", 2048)
    v["bf16"] = values.get("bf16", True) is not False
    if values.get("enable_activation_checkpointing", True) is False:
        v["disable_gradient_checkpointing"] = True
    fa = values.get("flash_attn", "sdpa")
    v["flash_attn"] = {"eager": "disabled", "sdpa": "sdpa", "flash_attention_2": "fa2"}.get(str(fa), "auto")
    kernel = values.get("kernel_config") if isinstance(values.get("kernel_config"), Mapping) else None
    if kernel and "liger_kernel" in str(kernel.get("name")):
        v["enable_liger_kernel"] = True
    optim = values.get("optim_config") if isinstance(values.get("optim_config"), Mapping) else None
    if optim and optim.get("name") == "muon":
        v["use_muon"] = True
    if optim is None:
        # v1 builds torch.optim.AdamW(params, lr) itself (core/base_trainer.py `_init_optimizer`), not transformers'
        # default: torch's own default implementation, which is transformers' adamw_torch, whatever the torch
        v["optim"] = "adamw_torch"
    dist = values.get("dist_config") if isinstance(values.get("dist_config"), Mapping) else None
    engine = "ddp"
    if dist and dist.get("name") == "deepspeed" and dist.get("config_file"):
        v["deepspeed"] = dist["config_file"]
        engine = "deepspeed"
    elif dist and dist.get("name") in ("fsdp2", "fsdpturbo"):
        engine = "fsdp2"
    if dist is None:
        notes.append("v1 with no dist_config: each rank holds a full replica (DDP)")
    ep = dist.get("ep_size") if dist else None
    cp = values.get("cp_size", 1)
    v["_v1"] = {"engine": engine, "ep_size": ep if isinstance(ep, int) else 1, "cp_size": cp if isinstance(cp, int)
                else 1, "batching": str(values.get("batching_strategy", "normal")),
                "dist": dist.get("name") if dist else None}
    if isinstance(cp, int) and not isinstance(cp, bool) and cp > 1 and isinstance(v["cutoff_len"], int):
        # padding_and_split_data (sequence_parallel.py) pads each batch to a multiple of cp and gives every rank
        # of the CP group its slice: activations and logits per rank follow cutoff_len / cp
        v["cutoff_len"] = -(-v["cutoff_len"] // cp)
        notes.append(f"v1 Ulysses context parallel cp_size {cp}: each rank holds {v['cutoff_len']} of the "
                     f"sequence's tokens (v1 plugins/model_plugins/parallelization/sequence_parallel.py), estimated "
                     "as that length")
    if values.get("train_dataset"):
        notes.append(f"v1 dataset YAML {values['train_dataset']} is not scanned: token lengths are taken at "
                     "cutoff_len")
    if str(values.get("batching_strategy", "normal")) != "normal":
        notes.append(f"v1 batching_strategy {values.get('batching_strategy')}: tokens per micro-batch follow the "
                     "packer, estimated at micro_batch_size x cutoff_len")
    return v, notes


def _pos_int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def batch_layout(values: Mapping[str, Any], world: int) -> dict[str, Any]:
    """How v1 lays a run of `world` processes out at start-up, and where it stops.

    Returns ``{"dp": int | None, "micro": int | None, "global": int | None, "accum": int | None, "error": str |
    None, "key": str | None}``: ``accum`` is v1's ``num_micro_batch`` (the gradient accumulation), ``error`` the
    message v1 raises and ``key`` the config key it is about. Never raises.

    Source (LF main at the snapshot): ``v1/accelerator/interface.py`` L70-99 ``DistributedStrategy.__post_init__``
    -- only a distributed launch (``RANK`` set, ``accelerator/helper.py`` L75-77) is checked; there
    ``world % mp_replicate_size``, ``mp_replicate_size * mp_shard_size == world`` when mp_shard_size is given,
    ``world % cp_size`` and ``dp_size * cp_size == world`` when dp_size is given, else ``dp = world // cp_size``;
    one process gives dp 1. Then ``v1/core/utils/batching.py`` L184-195 ``BatchGenerator.__init__``: no
    ``global_batch_size`` -> one micro-batch per step; ``global_batch_size % (dp * micro_batch_size) == 0`` ->
    ``num_micro_batch = global // dp // micro``; otherwise ValueError. A micro_batch_size of 0 with a global batch
    is Python's ZeroDivisionError there. Then, for ``dist_config: {name: fsdpturbo}``, the expert-parallel size
    (`_expert_layout`). Values of the wrong type are left to the parse checks (no layout).
    """
    mbs, gbs = _pos_int(values.get("micro_batch_size", 1)), values.get("global_batch_size")
    gbs = None if gbs is None else _pos_int(gbs)
    out: dict[str, Any] = {"dp": None, "micro": mbs, "global": gbs, "accum": None, "error": None, "key": None}
    if mbs is None or (values.get("global_batch_size") is not None and gbs is None):
        return out
    dp = 1
    if world > 1:
        rep, shard = _pos_int(values.get("mp_replicate_size", 1)), values.get("mp_shard_size")
        cp, dpv = _pos_int(values.get("cp_size", 1)), values.get("dp_size")
        if rep is None or cp is None or (shard is not None and _pos_int(shard) is None) or \
                (dpv is not None and _pos_int(dpv) is None) or rep == 0 or cp == 0:
            return out
        if shard is None and world % rep:
            return {**out, "key": "mp_replicate_size", "error": f"world_size ({world}) must be divisible by "
                                                                 f"mp_replicate_size ({rep})."}
        if shard is not None and rep * shard != world:
            return {**out, "key": "mp_shard_size", "error": "mp_replicate_size * mp_shard_size must equal to "
                                                            f"world_size, got {rep} * {shard} != {world}."}
        if dpv is None and world % cp:
            return {**out, "key": "cp_size", "error": f"world_size ({world}) must be divisible by cp_size ({cp})."}
        if dpv is not None and dpv * cp != world:
            return {**out, "key": "dp_size", "error": "dp_size * cp_size must equal to world_size, got "
                                                      f"{dpv} * {cp} != {world}."}
        dp = dpv if dpv is not None else world // cp
    out["dp"] = dp
    if gbs is None:
        out["accum"] = 1
    elif dp * mbs == 0:
        return {**out, "key": "micro_batch_size", "error": "integer modulo by zero (ZeroDivisionError: "
                                                           "global_batch_size % (dp_size * micro_batch_size 0))"}
    elif gbs % (dp * mbs):
        return {**out, "key": "global_batch_size",
                "error": "Global batch size must be divisible by DP size and micro batch size. "
                         f"Got {gbs} % ({dp} * {mbs}) != 0."}
    else:
        out["accum"] = gbs // dp // mbs
    return {**out, **_expert_layout(values.get("dist_config"), dp)}


def _expert_layout(dist: Any, dp: int) -> dict[str, Any]:
    """The fsdpturbo plugin's expert-parallel check when it shards the model, after the batch generator (v1
    ``plugins/trainer_plugins/distributed/fsdpturbo.py`` L54-62 ``FSDPTurboParallelState.initialize``): ``ep_size``
    (default 1) must be positive and divide the data-parallel size -- on one process too, where dp is 1."""
    if not isinstance(dist, Mapping) or dist.get("name") != "fsdpturbo":
        return {}
    ep = dist.get("ep_size", 1)
    if not isinstance(ep, int) or isinstance(ep, bool):
        return {}
    if ep < 1:
        return {"key": "dist_config.ep_size", "error": f"ep_size must be positive, got {ep}."}
    if dp % ep:
        return {"key": "dist_config.ep_size", "error": f"dp_size must be divisible by ep_size, got {dp} % {ep} != 0."}
    return {}
