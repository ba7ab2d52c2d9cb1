"""What LLaMA-Factory, transformers and accelerate reject while parsing a training config, decided from the YAML.

``llamafactory-cli train config.yaml`` stops in its first second when the arguments contradict each other:
LLaMA-Factory 0.9.5 ``hparams/parser.py`` ``get_train_args`` (lines 316-413, ``_verify_model_args`` 180-202), the
``__post_init__`` of its argument classes (``finetuning_args.py:560-615``, ``data_args.py:147-189``,
``model_args.py:206-208, 346-351, 395-397``), transformers 5.6.0 ``TrainingArguments.__post_init__`` /
``_validate_args`` / ``_process_fsdp_args`` (training_args.py) and accelerate 1.11 ``DeepSpeedPlugin.__post_init__``
(utils/dataclasses.py). `check_launch` replays those checks on the typed values of one config and returns one
problem per failed check, in the shape of keyschema's ``lint.keys`` items (key, kind, message, suggestion,
replacement_key, fix, fix_value, condition), so that the rule files ``rules/<family>.yaml`` only select by `kind`:

=====================  ==================================================================================
kind                   family (rule)
=====================  ==================================================================================
``missing``            a key the run cannot start without (missing-required-key)
``conflict``           two options that exclude each other (conflicting-options)
``stage``              an option the stage does not take (option-needs-other-stage)
``method``             an option the fine-tuning method does not take (option-needs-other-method)
``zero3``              an option DeepSpeed ZeRO-3 (or DeepSpeed at all) cannot run (deepspeed-incompatible-option)
``distributed``        an option a torchrun (multi-GPU) launch cannot run (distributed-incompatible-option)
``interval``           logging/eval/save steps and strategies transformers refuses (invalid-step-setting)
``template``           a template LLaMA-Factory does not register (template-not-registered)
``dataset``            a dataset name its dataset_info.json does not define (dataset-not-defined)
=====================  ==================================================================================

The last two are checked by LLaMA-Factory after parsing, before the first step (``data/template.py``
``get_template_and_fix_tokenizer``, ``data/parser.py`` ``get_dataset_list``): they need only the config and the
dataset_info.json it names, which is read (never a dataset).

Each check is written from the source line it mirrors (cited at the check). Its sentence, which quotes what
LLaMA-Factory or transformers raises and says why, lives in its rule's message table (``by: item.check``): a
problem carries the check's name (``check``, one of `CHECK_KINDS`) and the values the sentence shows (``args``);
no sentence is written here. A check only judges values of
the type its source compares: a wrong type is keyschema's finding (invalid-value), not a second one here.
``condition`` is set where the verdict depends on the launch (``"torchrun launch"``: LLaMA-Factory runs torchrun
for more than one GPU or with FORCE_TORCHRUN=1).

Pure Python, no third-party import: `doctor lint` calls it.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Mapping

from finetune_doctor.errors import InputError
from finetune_doctor.numbers import parse_version, version_key
from finetune_doctor.readers.config.keyschema import load_schema
from finetune_doctor.run.values import split_arg

Problem = dict[str, Any]
_NOT_SET = object()


class _Cfg:
    """Values as LF's dataclasses would hold them: the config's value, else the schema's default."""

    def __init__(self, values: Mapping[str, Any], zero_stage: int | None, release: Any = None,
                 transformers: str | None = None):
        self.values = values
        tf = parse_version(transformers or "", parts=2)   # numbers.py, the one reader of release strings
        self.tf = tf if tf is not None and len(tf) == 2 else None   # the training machine's transformers
        self.keys = load_schema()["keys"]
        self.zero_stage = zero_stage
        self.release = release   # readers/lfrelease.Release: the LF release(s) judged for, None = 0.9.5's registry

    def __call__(self, key: str) -> Any:
        if key in self.values:
            return self.values[key]
        if key == "eval_strategy" and self.tf is not None and self.tf <= (4, 45) and "evaluation_strategy" in self.values:
            return self.values["evaluation_strategy"]   # its name up to transformers 4.45
        e = self.keys.get(key) or {}
        by_version = e.get("default_by_version")
        if by_version:   # transformers 5's default where 4 and 5 differ (report_to: 'none' vs None)
            newest = max(by_version, key=lambda v: version_key(v) or ((), 0))
            return by_version[newest]
        return e.get("default")

    def given(self, key: str) -> bool:
        return key in self.values

    @property
    def stage(self) -> Any:
        return self("stage")

    @property
    def method(self) -> Any:
        return self("finetuning_type")


def _c(key: str, kind: str, check: str, suggestion: str | None = None, *, args: Mapping[str, Any] | None = None,
       fix: str | None = None, fix_value: Any = None, condition: str | None = None) -> Problem:
    """A problem whose words live in its rule: `check` (one of CHECK_NAMES) is the case of the rule's message table
    (rules/missing-required-key.yaml, rules/conflicting-options.yaml) and `args` the values the case shows, as the
    user wrote them (str(): a float prints as written, not in the templates' rounded form). A `condition` names a
    launch (``torchrun launch``) or, for a template, the releases that decide it: facts/lint.py then makes the
    problem unverified-config-problem's, whose table has the template checks' cases too (``by: item.case``)."""
    assert CHECK_KINDS[check] == kind, (check, kind)
    return {"key": key, "kind": kind, "message": None, "suggestion": suggestion, "replacement_key": None,
            "fix": fix, "fix_value": fix_value, "condition": condition, "check": check,
            "args": {k: str(v) for k, v in (args or {}).items()}}


CHECK_KINDS = {
    **dict.fromkeys(("output-dir", "model-name", "train-dataset", "ppo-reward-model", "streaming-max-steps",
                     "export-quantization-dataset", "eval-data", "eval-data-by-strategy", "trackio-project"),
                    "missing"),
    **dict.fromkeys(("fp16-and-bf16", "full-eval-dtypes", "mask-history-and-train-on-prompt", "two-optimizer-tuners",
                     "generate-and-accuracy", "val-size-without-dataset", "val-size-and-eval-dataset",
                     "val-size-streaming", "interleave-concat", "interleave-length", "max-samples-streaming",
                     "pixels-max-below-min", "fp8-and-quantization", "infer-backend-in-training",
                     "quantization-device-map-training", "fsdp-offload-alone", "fsdp-two-strategies",
                     "prefetch-without-workers"), "conflict"),
    **dict.fromkeys(("sft-only-generate", "sft-only-neat-packing", "sft-only-prompt-loss", "predict-without-generate",
                     "best-model-rm-ppo", "dpo-label-smoothing", "pissa-reference-model", "ppo-without-train",
                     "ppo-shift-attn", "ppo-unsloth-lora-reward", "ppo-kt-lora-reward", "ppo-logger",
                     "ppo-reward-model-type"), "stage"),
    **dict.fromkeys(("adapter-needs-lora", "lora-only-option", "llama-pro-full", "lora-with-full-optimizer",
                     "quantized-pissa", "quantized-resize-vocab", "quantized-new-adapter", "quantized-adapters"),
                    "method"),
    **dict.fromkeys(("zero3-pure-bf16", "zero3-unsloth", "zero3-kt", "zero3-generate", "zero3-pissa",
                     "galore-apollo-deepspeed"), "zero3"),
    **dict.fromkeys(("badam-layer-without-zero3", "layerwise-galore", "layerwise-apollo", "badam-ratio-distributed"),
                    "distributed"),
    **dict.fromkeys(("eval-steps-unset", "logging-steps-zero", "steps-not-finite", "steps-not-whole",
                     "scheduler-needs-eval", "warmup-steps-negative", "warmup-ratio-negative", "empty-cache-steps",
                     "best-model-strategies", "best-model-steps-mixed", "best-model-steps-ratio",
                     "best-model-steps-whole"), "interval"),
    # the lookups before the first step: the template's variants by what the judged release knows of the name
    # and whether a near name was found; the dataset's by what dataset_info.json lacks or where the folder is
    **dict.fromkeys(("template-unregistered", "template-misspelt", "template-removed", "template-removed-misspelt",
                     "template-later-release"), "template"),
    **dict.fromkeys(("dataset-info-missing", "dataset-undefined"), "dataset"),
    "dataset-dir-not-here": "not_here",
}
"""The launch checks whose message is a case of their rule's message table, with the kind of problem each gives
(the kind selects the rule by its ``for_each``: ``missing`` rules/missing-required-key.yaml, ``conflict``
conflicting-options, ``stage`` option-needs-other-stage, ``method`` option-needs-other-method, ``zero3``
deepspeed-incompatible-option, ``distributed`` distributed-incompatible-option, ``interval`` invalid-step-setting,
``template`` template-not-registered, ``dataset`` dataset-not-defined, ``not_here`` not-checked-here;
tests/test_launch_messages.py checks that each rule has a case for every check of its kind). Two rules also render
checks of another kind: unverified-config-problem a template check whose condition names a release (by
``item.case``, facts/lint.py), and dataset-not-defined ``dataset-dir-not-here`` under --strict."""

CHECK_NAMES = tuple(CHECK_KINDS)
"""The values of ``lint.keys[].check`` (facts/lint.py declares them, so the rule loader refuses a message case that
is none of them)."""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _where(c: _Cfg, *keys: str) -> str:
    """The first of `keys` the config sets (where a finding should point), else the first."""
    return next((k for k in keys if c.given(k)), keys[0])


def _names(v: Any) -> list[str] | None:
    """LF's ``split_arg`` (run/values.py, the one copy) of a string or list; None for anything else (not a list
    of names LF could read)."""
    return split_arg(v) if isinstance(v, (str, list)) else None


# --- missing ------------------------------------------------------------------------------------------------------

def _missing(c: _Cfg) -> list[Problem]:
    out = []
    if c.tf is not None and c.tf < (4, 49) and c.values.get("output_dir") is None:
        # output_dir had no default before transformers 4.49 (huggingface/transformers#35735)
        out.append(_c("output_dir", "missing", "output-dir", "set `output_dir` (e.g. saves/<model>/<method>/sft)",
                      args={"transformers": f"{c.tf[0]}.{c.tf[1]}"}))
    if c("model_name_or_path") is None:   # model_args.py:207-208
        out.append(_c("model_name_or_path", "missing", "model-name",
                      "set `model_name_or_path` to a hub id or a local folder"))
    if c("do_train") is True and c("dataset") is None:   # parser.py:359-360
        out.append(_c("dataset", "missing", "train-dataset",
                      "name the training data in `dataset` (dataset_info.json names)"))
    if c.stage == "ppo" and c("reward_model") is None:   # finetuning_args.py:580-581
        out.append(_c("reward_model", "missing", "ppo-reward-model",
                      "set `reward_model` to the output folder of an `rm` stage run"))
    if c("streaming") is True and _num(c("max_steps")) and c("max_steps") == -1:   # parser.py:356-357
        out.append(_c(_where(c, "max_steps", "streaming"), "missing", "streaming-max-steps", "set `max_steps`"))
    if c("export_quantization_bit") is not None and c("export_quantization_dataset") is None:  # model_args 396-397
        out.append(_c("export_quantization_bit", "missing", "export-quantization-dataset",
                      "set `export_quantization_dataset`, or remove `export_quantization_bit` from a training "
                      "config"))
    out += _eval_data(c)
    report = c("report_to")
    loggers = [report] if isinstance(report, str) else report if isinstance(report, list) else []
    if "trackio" in loggers and not c("project"):   # parser.py:132-137
        out.append(_c(_where(c, "project", "report_to"), "missing", "trackio-project", "set `project`"))
    return out


def _eval_data(c: _Cfg) -> list[Problem]:
    """parser.py:362-365, with transformers' rule that an eval strategy other than 'no' sets do_eval (5.6.0
    training_args.py __post_init__ "Auto-derived Values")."""
    val = c("val_size")
    if not _num(val) or c("eval_dataset") is not None or val >= 1e-6:
        return []
    strategy = c("eval_strategy")
    why = [k for k, on in (("do_eval", c("do_eval") is True), ("do_predict", c("do_predict") is True),
                           ("predict_with_generate", c("predict_with_generate") is True),
                           ("eval_strategy", isinstance(strategy, str) and strategy != "no")) if on]
    if not why:
        return []
    key = _where(c, *why)
    if key == "eval_strategy":
        return [_c(key, "missing", "eval-data-by-strategy", "set `val_size: 0.1` (a held-out share of `dataset`) "
                   "or `eval_dataset`", args={"strategy": strategy})]
    return [_c(key, "missing", "eval-data", "set `val_size: 0.1` (a held-out share of `dataset`) or `eval_dataset`")]


# --- conflicts ------------------------------------------------------------------------------------------------------

def _conflicts(c: _Cfg) -> list[Problem]:
    out = []
    if c("fp16") is True and c("bf16") is True:   # transformers 5.6.0 _validate_args
        out.append(_c("fp16", "conflict", "fp16-and-bf16",
                      "remove `fp16` and keep `bf16: true` (bf16 needs an Ampere or newer GPU)", fix="delete"))
    if c("fp16_full_eval") is True and c("bf16_full_eval") is True:
        out.append(_c("fp16_full_eval", "conflict", "full-eval-dtypes", "remove one of them", fix="delete"))
    if c("mask_history") is True and c("train_on_prompt") is True:   # data_args.py:182-183
        out.append(_c("mask_history", "conflict", "mask-history-and-train-on-prompt", "remove one of them"))
    tuners = [k for k in ("use_galore", "use_apollo", "use_badam") if c(k) is True]
    if len(tuners) > 1:   # finetuning_args.py:598-599
        out.append(_c(tuners[1], "conflict", "two-optimizer-tuners", f"keep one of {', '.join(tuners)}",
                      args={"first": tuners[0], "second": tuners[1]}))
    if c("predict_with_generate") is True and c("compute_accuracy") is True:   # parser.py:371-372
        out.append(_c("compute_accuracy", "conflict", "generate-and-accuracy", "remove `compute_accuracy`",
                      fix="delete"))
    val = c("val_size")
    if _num(val) and val > 1e-6:
        if c("dataset") is None:   # data_args.py:159-160
            out.append(_c("val_size", "conflict", "val-size-without-dataset", "remove `val_size` or set `dataset`"))
        if c("eval_dataset") is not None:   # data_args.py:162-163
            out.append(_c("val_size", "conflict", "val-size-and-eval-dataset",
                          "remove `val_size` (the eval_dataset is used)", fix="delete"))
        if c("streaming") is True and val < 1:   # data_args.py:176-177
            out.append(_c("val_size", "conflict", "val-size-streaming",
                          "give `val_size` as a number of samples (e.g. 1000)", args={"val_size": val}))
    out += _interleave(c)
    if c("streaming") is True and c("max_samples") is not None:   # data_args.py:179-180
        out.append(_c("max_samples", "conflict", "max-samples-streaming",
                      "remove `max_samples` (bound a stream with `max_steps`)", fix="delete"))
    for kind in ("image", "video"):   # model_args.py:346-351
        lo, hi = c(f"{kind}_min_pixels"), c(f"{kind}_max_pixels")
        if _num(lo) and _num(hi) and hi < lo:
            out.append(_c(_where(c, f"{kind}_max_pixels", f"{kind}_min_pixels"), "conflict", "pixels-max-below-min",
                          f"raise `{kind}_max_pixels` to at least {lo}", args={"kind": kind, "high": hi, "low": lo}))
    if c("fp8") is True and c("quantization_bit") is not None:   # parser.py:403-404
        out.append(_c("fp8", "conflict", "fp8-and-quantization", "remove `fp8`", fix="delete"))
    backend = c("infer_backend")
    if isinstance(backend, str) and backend != "huggingface":   # parser.py:406-407
        out.append(_c("infer_backend", "conflict", "infer-backend-in-training", "remove `infer_backend`",
                      fix="delete", args={"backend": backend}))
    if c("do_train") is True and c("quantization_device_map") == "auto":   # parser.py:374-375
        out.append(_c("quantization_device_map", "conflict", "quantization-device-map-training",
                      "remove `quantization_device_map`", fix="delete"))
    out += _fsdp(c)
    if c("dataloader_num_workers") == 0 and c("dataloader_prefetch_factor") is not None:   # transformers
        out.append(_c("dataloader_prefetch_factor", "conflict", "prefetch-without-workers",
                      "remove `dataloader_prefetch_factor` or set `dataloader_num_workers` above 0"))
    return out


def _interleave(c: _Cfg) -> list[Problem]:
    """data_args.py:165-174."""
    probs = c("interleave_probs")
    if probs is None:
        return []
    if c("mix_strategy") == "concat":
        return [_c("interleave_probs", "conflict", "interleave-concat",
                   "set `mix_strategy: interleave_under` (or interleave_over)")]
    parts = _names(probs)
    out = []
    for key, what in (("dataset", "dataset"), ("eval_dataset", "eval dataset")):
        names = _names(c(key))
        if parts is not None and names is not None and len(names) != len(parts):
            out.append(_c("interleave_probs", "conflict", "interleave-length", f"give one weight per name in `{key}`",
                          args={"weights": len(parts), "names": len(names), "key": key, "what": what}))
    return out


def _fsdp(c: _Cfg) -> list[Problem]:
    """transformers 5.6.0 training_args.py _process_fsdp_args."""
    fsdp = c("fsdp")
    opts = fsdp.split() if isinstance(fsdp, str) else fsdp if isinstance(fsdp, list) else []
    if opts == ["offload"]:
        return [_c("fsdp", "conflict", "fsdp-offload-alone", "write `fsdp: full_shard offload`")]
    if "full_shard" in opts and "shard_grad_op" in opts:
        return [_c("fsdp", "conflict", "fsdp-two-strategies", "keep one sharding strategy")]
    return []


# --- stage and method ---------------------------------------------------------------------------------------------

def _stage(c: _Cfg) -> list[Problem]:
    out = []
    stage = c.stage
    if not isinstance(stage, str):
        return out
    if stage != "sft":   # parser.py:316-324
        for key, check in (("predict_with_generate", "sft-only-generate"), ("neat_packing", "sft-only-neat-packing"),
                           ("train_on_prompt", "sft-only-prompt-loss"), ("mask_history", "sft-only-prompt-loss")):
            if c(key) is True:
                out.append(_c(key, "stage", check, f"remove `{key}`", fix="delete", args={"stage": stage}))
    if stage == "sft" and c("do_predict") is True and c("predict_with_generate") is not True:   # parser.py:326-327
        out.append(_c("do_predict", "stage", "predict-without-generate", "add `predict_with_generate: true`"))
    if stage in ("rm", "ppo") and c("load_best_model_at_end") is True:   # parser.py:329-330
        out.append(_c("load_best_model_at_end", "stage", "best-model-rm-ppo", "remove `load_best_model_at_end`",
                      fix="delete", args={"stage": stage}))
    if stage == "ppo":
        out += _ppo(c)
    pref = c("pref_loss")
    if stage == "dpo" and pref != "sigmoid" and _num(c("dpo_label_smoothing")) and c("dpo_label_smoothing") > 1e-6:
        out.append(_c("dpo_label_smoothing", "stage", "dpo-label-smoothing",   # finetuning_args.py:589-590
                      "remove `dpo_label_smoothing`", fix="delete", args={"pref_loss": pref}))
    if c("pissa_init") is True and (stage in ("ppo", "kto") or (stage == "dpo" and pref not in ("orpo", "simpo"))):
        out.append(_c("pissa_init", "stage", "pissa-reference-model",   # finetuning_args.py:601-602 (use_ref_model:
                      "remove `pissa_init`", fix="delete", args={"stage": stage}))   # dpo without orpo/simpo)
    return out


def _ppo(c: _Cfg) -> list[Problem]:
    """parser.py:332-348 and finetuning_args.py:583-587."""
    out = []
    if c("do_train") is not True:
        out.append(_c("do_train", "stage", "ppo-without-train", "set `do_train: true`", fix="set", fix_value=True))
    if c("shift_attn") is True:
        out.append(_c("shift_attn", "stage", "ppo-shift-attn", "remove `shift_attn`", fix="delete"))
    rtype = c("reward_model_type")
    if rtype == "lora" and c("use_unsloth") is True:
        out.append(_c("use_unsloth", "stage", "ppo-unsloth-lora-reward",
                      "set `reward_model_type: full`, or remove `use_unsloth`"))
    if rtype == "lora" and c("use_kt") is True:
        out.append(_c("use_kt", "stage", "ppo-kt-lora-reward", "set `reward_model_type: full`, or remove `use_kt`"))
    report = c("report_to")
    loggers = [report] if isinstance(report, str) else report if isinstance(report, list) else []
    bad = [x for x in loggers if x not in ("wandb", "tensorboard", "trackio", "none", "all")]
    if bad:
        out.append(_c("report_to", "stage", "ppo-logger", "use wandb, tensorboard or trackio",
                      args={"loggers": ", ".join(map(str, bad))}))
    method = c.method
    for t in ("lora", "oft"):
        if rtype == t and method != t and c("reward_model") is not None:
            out.append(_c(_where(c, "reward_model_type", "finetuning_type"), "stage", "ppo-reward-model-type",
                          "set `reward_model_type: full`", args={"reward_type": t, "method": method}))
    return out


def _method(c: _Cfg) -> list[Problem]:
    out = []
    method = c.method
    if not isinstance(method, str):
        return out
    if c("adapter_name_or_path") is not None and method != "lora":   # parser.py:185-186
        out.append(_c("adapter_name_or_path", "method", "adapter-needs-lora",
                      "merge the adapter into the model first (llamafactory-cli export), or train LoRA",
                      args={"method": method}))
    if method != "lora":   # finetuning_args.py:604-615
        for key, test in (("loraplus_lr_ratio", lambda v: v is not None), ("use_rslora", lambda v: v is True),
                          ("use_dora", lambda v: v is True), ("pissa_init", lambda v: v is True)):
            if test(c(key)):
                out.append(_c(key, "method", "lora-only-option", f"remove `{key}`", fix="delete",
                              args={"method": method}))
    if c("use_llama_pro") is True and method == "full":   # finetuning_args.py:592-593
        out.append(_c("use_llama_pro", "method", "llama-pro-full", "set `finetuning_type: freeze`"))
    tuners = [k for k in ("use_galore", "use_apollo", "use_badam") if c(k) is True]
    if method == "lora" and tuners:   # finetuning_args.py:595-596
        out.append(_c(tuners[0], "method", "lora-with-full-optimizer",
                      "set `finetuning_type: full`, or remove " + ", ".join(f"`{t}`" for t in tuners)))
    if c("quantization_bit") is not None:   # parser.py:188-202 (FD704 reports full/freeze)
        adapters = _names(c("adapter_name_or_path"))
        for key, on, check in (
                ("pissa_init", c("pissa_init") is True, "quantized-pissa"),
                ("resize_vocab", c("resize_vocab") is True, "quantized-resize-vocab"),
                ("create_new_adapter", adapters is not None and c("create_new_adapter") is True,
                 "quantized-new-adapter"),
                ("adapter_name_or_path", adapters is not None and len(adapters) != 1, "quantized-adapters")):
            if on and method in ("lora", "oft"):
                out.append(_c(key, "method", check, f"remove `{key}` or `quantization_bit`"))
    return out


# --- DeepSpeed and launch -----------------------------------------------------------------------------------------

def zero_stage_of(values: Mapping[str, Any], config_path: str | None) -> int | None:
    """The ZeRO stage ``is_deepspeed_zero3_enabled`` sees: ``zero_optimization.stage`` of the DeepSpeed JSON the
    config names (transformers integrations/deepspeed.py ``HfDeepSpeedConfig``; only the integer 3 counts as
    ZeRO-3), read from the working directory or the config's folder. None without DeepSpeed or when the file is
    unreadable (deepspeed-file-missing / the DeepSpeed reader report that)."""
    ds = values.get("deepspeed")
    data: Any = None
    if isinstance(ds, Mapping):
        data = ds
    elif isinstance(ds, str) and ds:
        bases = [os.getcwd()] + ([os.path.dirname(os.path.abspath(config_path))] if config_path else [])
        for base in bases:
            path = os.path.join(base, ds)
            if os.path.isfile(path):
                # the JSON reader only when a file is there: a config without `deepspeed:` needs none (issue #22)
                from finetune_doctor.readers.deepspeed.dsjson import read_json

                try:   # the DeepSpeed reader's limits (depth, size, numbers): a hostile file cannot recurse here
                    data = read_json(path).values
                except InputError:
                    return None
                break
    if not isinstance(data, Mapping):
        return None
    zo = data.get("zero_optimization")
    stage = zo.get("stage") if isinstance(zo, Mapping) else None
    return stage if isinstance(stage, int) and not isinstance(stage, bool) else 0


def _deepspeed(c: _Cfg) -> list[Problem]:
    out = []
    if c("deepspeed") and c.zero_stage is not None:
        if c.zero_stage == 3:   # parser.py:367-413
            for key, check in (("pure_bf16", "zero3-pure-bf16"), ("use_unsloth", "zero3-unsloth"),
                               ("use_kt", "zero3-kt"), ("predict_with_generate", "zero3-generate"),
                               ("pissa_init", "zero3-pissa")):
                if c(key) is True:
                    out.append(_c(key, "zero3", check, f"remove `{key}`, or use a ZeRO-2 DeepSpeed config",
                                  args={"deepspeed": c("deepspeed")}))
        tuners = [k for k in ("use_galore", "use_apollo") if c(k) is True]
        if tuners:   # parser.py:400-401
            out.append(_c(tuners[0], "zero3", "galore-apollo-deepspeed",
                          "remove `deepspeed` (GaLore/APOLLO save their memory without it)"))
    if c("use_badam") is True and c("badam_mode") != "ratio" and c.zero_stage != 3:   # parser.py:394-398
        out.append(_c("use_badam", "distributed", "badam-layer-without-zero3",
                      "add a ZeRO-3 DeepSpeed config (examples/deepspeed/ds_z3_config.json), or train on one GPU",
                      condition="torchrun launch"))
    return out


def _distributed(c: _Cfg) -> list[Problem]:
    """parser.py:387-398: under torchrun (more than one GPU, or FORCE_TORCHRUN=1; always with DeepSpeed)."""
    out = []
    for tuner, key, check in (("use_galore", "galore_layerwise", "layerwise-galore"),
                              ("use_apollo", "apollo_layerwise", "layerwise-apollo")):
        if c(tuner) is True and c(key) is True:
            out.append(_c(key, "distributed", check, f"set `{key}: false` for multi-GPU training",
                          fix="set", fix_value=False, condition="torchrun launch"))
    if c("use_badam") is True and c("badam_mode") == "ratio":
        out.append(_c("badam_mode", "distributed", "badam-ratio-distributed", "set `badam_mode: layer`",
                      fix="set", fix_value="layer", condition="torchrun launch"))
    return out


# --- steps and strategies (transformers 5.6.0 training_args.py __post_init__ / _validate_args) --------------------

def _interval(c: _Cfg) -> list[Problem]:
    out = []
    ls, es, ss = c("logging_strategy"), c("eval_strategy"), c("save_strategy")
    if not all(isinstance(s, str) for s in (ls, es, ss)):
        return out
    steps = {k: c(k) for k in ("logging_steps", "eval_steps", "save_steps")}
    if es == "steps" and (steps["eval_steps"] is None or steps["eval_steps"] == 0):
        if _num(steps["logging_steps"]) and steps["logging_steps"] > 0:
            steps["eval_steps"] = steps["logging_steps"]   # "using `logging_steps` to initialize `eval_steps`"
        elif _num(steps["logging_steps"]):
            out.append(_c(_where(c, "eval_steps", "logging_steps", "eval_strategy"), "interval", "eval-steps-unset",
                          "set `eval_steps`"))
            return out
    if ls == "steps" and steps["logging_steps"] == 0 and _num(steps["logging_steps"]):
        out.append(_c("logging_steps", "interval", "logging-steps-zero",
                      "log every N steps (e.g. `logging_steps: 10`), or set `logging_strategy: no`",
                      fix="set", fix_value=10))
    for key, strat in (("logging_steps", ls), ("eval_steps", es), ("save_steps", ss)):
        v = steps[key]
        if strat == "steps" and _num(v) and v == math.inf:
            # transformers 5.6.0 training_args.py:1692 (__post_init__) compares `{key} != int({key})` above 1:
            # int(inf) raises OverflowError there, so the run never starts
            out.append(_c(key, "interval", "steps-not-finite", f"write a whole step count, e.g. `{key}: 500`",
                          args={"value": v}))
            continue
        if strat == "steps" and _num(v) and v > 1 and v != int(v):
            out.append(_c(key, "interval", "steps-not-whole", f"write `{key}: {int(v)}`", fix="set",
                          fix_value=int(v), args={"value": v}))
    if c("load_best_model_at_end") is True and ss != "best":
        out += _best_model(c, es, ss, steps)
    sched = c("lr_scheduler_type")
    if sched in ("reduce_lr_on_plateau", "greedy") and es == "no":
        out.append(_c("lr_scheduler_type", "interval", "scheduler-needs-eval",
                      "set `eval_strategy: epoch` (with eval data), or another scheduler", args={"scheduler": sched}))
    warm = c("warmup_steps")
    if c("warmup_ratio") is None and _num(warm) and warm < 0:
        out.append(_c("warmup_steps", "interval", "warmup-steps-negative", "set `warmup_steps: 0` or a positive count",
                      fix="set", fix_value=0, args={"value": warm}))
    ratio = c("warmup_ratio")
    if _num(ratio) and ratio < 0:   # warmup_ratio is copied into warmup_steps (5.6.0 __post_init__)
        out.append(_c("warmup_ratio", "interval", "warmup-ratio-negative", "set `warmup_ratio: 0.1` or remove it",
                      args={"value": ratio}))
    empty = c("torch_empty_cache_steps")
    if empty is not None and not (isinstance(empty, int) and empty > 0):   # True passes: bool is an int there
        out.append(_c("torch_empty_cache_steps", "interval", "empty-cache-steps",
                      "remove it or give a positive whole number", args={"value": empty}))
    return out


def _best_model(c: _Cfg, es: str, ss: str, steps: dict[str, Any]) -> list[Problem]:
    """transformers 5.6.0 _validate_args: load_best_model_at_end needs matching save and eval schedules."""
    key = "load_best_model_at_end"
    if es != ss:
        return [_c(_where(c, "save_strategy", "eval_strategy", key), "interval", "best-model-strategies",
                   f"set `save_strategy: {es}` (or best)", args={"eval_strategy": es, "save_strategy": ss})]
    ev, sv = steps["eval_steps"], steps["save_steps"]
    if es != "steps" or not (_num(ev) and _num(sv)) or ev == 0:
        return []
    ev_i, sv_i = (int(ev) if ev > 1 else ev), (int(sv) if sv > 1 else sv)
    if (ev_i < 1) != (sv_i < 1):
        check = "best-model-steps-mixed"
    elif ev_i < 1 and round(sv_i * 1_000_000) % round(ev_i * 1_000_000) != 0:
        check = "best-model-steps-ratio"
    elif ev_i >= 1 and sv_i % ev_i != 0:
        check = "best-model-steps-whole"
    else:
        return []
    return [_c(_where(c, "save_steps", "eval_steps"), "interval", check,
               "make `save_steps` a multiple of `eval_steps`" + (f" (e.g. {ev_i * max(1, round(sv_i / ev_i))})"
                                                                 if isinstance(ev_i, int) else ""),
               args={"save_steps": sv, "eval_steps": ev})]


# --- names looked up before the first step -------------------------------------------------------------------------

def _template_of_model(model: Any, names: Any) -> list[str]:
    """[the longest registered template whose letters and digits begin the model's own name], or [] (names of
    four characters or fewer are too generic to match on)."""
    if not isinstance(model, str) or not model.strip("/"):
        return []
    base = re.sub(r"[^a-z0-9]", "", model.rstrip("/").rsplit("/", 1)[-1].lower())
    hits = [t for t in names if len(re.sub(r"[^a-z0-9]", "", t)) > 4 and base.startswith(re.sub(r"[^a-z0-9]", "", t))]
    return [max(hits, key=len)] if hits else []


def _template(c: _Cfg) -> list[Problem]:
    """LF 0.9.5 data/template.py:628-641: a template name must be registered (``TEMPLATES``)."""
    name = c("template")
    if not isinstance(name, str):
        return []
    rel = c.release
    if rel is not None and rel.has_template(name):
        lacking = [v for v in rel.versions if v not in rel.template_versions(name)]
        if not lacking or not rel.known:
            return []   # registered by the release judged for (moss_vl on main, a template 0.8 had)
        # a development build judged by both neighbours ("0.9.4.dev0": a commit between 0.9.3 and 0.9.4, LF's
        # extras/env.py VERSION being bumped to the next X.Y.Z.dev0 right after each release) and only the later
        # one registers it: whether the build has it is the commit's to say (trial 9: qwen3_vl on 0.9.4.dev0)
        from finetune_doctor.readers.config.keyschema import _unsure

        return [_c("template", "template", "template-unregistered",
                   "pass --env FILE from the training machine, or upgrade to a release that registers it",
                   condition=_unsure(rel, lacking),
                   args={"name": name, "who": f"LLaMA-Factory {', '.join(lacking)}"})]
    # the chat-template registry (~35 templates built at import, ~1 ms) only for a name the release lacks (#22)
    from finetune_doctor.analyzers.data.templates import LF_TEMPLATE_NAMES

    if rel is None and name in LF_TEMPLATE_NAMES:
        return []
    who, cond, first, span = "LLaMA-Factory 0.9.5", None, None, None
    names = sorted(LF_TEMPLATE_NAMES)
    if rel is not None:
        who = rel.label
        elsewhere = rel.template_versions(name)
        if elsewhere:
            span = f"{elsewhere[0]}{'-' + elsewhere[-1] if len(elsewhere) > 1 else ''}"
            if rel.known:   # the release in use lacks it: the sentence says which ones have it
                first = _first_after(elsewhere, rel)
            else:           # the LF version is not known: the verdict is that of the release in use
                cond = f"LLaMA-Factory {', '.join(v for v in rel.versions if v not in elsewhere)}; registered in {span}"
        if rel.known:   # a rename must land on a template the same release registers (trial 4: qwen3_vl on 0.9.3)
            names = [t for t in names if rel.has_template(t)]
    args = {"name": name, "who": who, **({"span": span} if span else {})}
    if first is not None:
        # a later release registers the name: upgrading is the fix; a different template would train another format
        return [_c("template", "template", "template-later-release",
                   f"upgrade LLaMA-Factory to >= {first}, the first release that registers `{name}`",
                   args={**args, "first": first}, condition=cond)]
    # a near-identical spelling first (qwen3_NOTHINK -> qwen3_nothink); then, as LF names most templates after the
    # model family (gpt-oss -> gpt_oss, GLM-4.5V -> glm4_5v), the registered name the model's own name starts
    # with; then a looser spelling -- never the name itself (it would write the same value)
    import difflib   # here, not at the top: a registered template (nearly every lint) needs no suggestion

    names = [t for t in names if t != name]
    near = (difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.85)
            or _template_of_model(c("model_name_or_path"), names)
            or difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.75))
    if rel is not None and rel.known and span:   # registered only by earlier releases: the sentence names them
        check = "template-removed-misspelt" if near else "template-removed"
    else:
        check = "template-misspelt" if near else "template-unregistered"
    cond = _renamed_in_dev_cycle(rel, name, near[0] if near else None) or cond
    return [_c("template", "template", check,
               f"write `template: {near[0]}`" if near else "use a template name from LLaMA-Factory's data/template.py",
               fix="set" if near else None, fix_value=near[0] if near else None, condition=cond,
               args={**args, **({"near": near[0]} if near else {})})]


def _renamed_in_dev_cycle(rel: Any, name: str, near: str | None) -> str | None:
    """The condition under which a template neither neighbour of a development build registers may still have been
    registered by the build: `near`, the name suggested for it, is new in the next release (the previous one lacks
    it), so it arrived between the two, and a commit of that cycle may have spelt it `name` before a rename. Trial
    17 (LF PR #8876, on 0.9.4.dev0): the PR registered `glm45v` and trained on it; 0.9.4 ships it as `glm4_5v`,
    0.9.3 has neither. None when `rel` is not a build between two releases (readers/config/lfrelease.py: `note`
    set) or the near name is not new in the next one."""
    if near is None or rel is None or not rel.known or not rel.note or len(rel.versions) < 2:
        return None
    if rel.versions[-1] not in rel.template_versions(near) or rel.versions[0] in rel.template_versions(near):
        return None
    return (f"LLaMA-Factory {rel.versions[0]}-{rel.versions[-1]}, where `{near}` arrived ({rel.given} is a build "
            f"between {rel.versions[0]} and {rel.versions[-1]}, and a commit before the release may have registered "
            f"`{name}`, so its commit decides)")


def _first_after(elsewhere: list[str], rel: Any) -> str | None:
    """The first catalogued release after every one of `rel` that registers the template (`elsewhere`, the releases
    that do, readers/config/lfrelease.py), or None (it was registered only before: a removed name)."""
    from finetune_doctor.readers.config.lfrelease import load

    allv = load()["versions"]
    last = max(allv.index(v) for v in rel.versions)
    after = [allv.index(v) for v in elsewhere if allv.index(v) > last]
    return allv[min(after)] if after else None


def _datasets(c: _Cfg, config_path: str | None) -> list[Problem]:
    """LF 0.9.5 data/parser.py:95-126: every name must be a key of dataset_dir/dataset_info.json (opened from the
    working directory). A `dataset_dir` the config sets and that resolves nowhere is reported; LF's default
    ``data`` that is not here is not (a linter may run outside the folder training launches from), nor an
    absolute folder that does not exist on this machine (it names the training machine's disk)."""
    from finetune_doctor.errors import InputError

    ddir = c("dataset_dir")
    names = [(k, n) for k in ("dataset", "eval_dataset") for n in (_names(c(k)) or [])]
    if not names or not isinstance(ddir, str) or ddir == "ONLINE" or ddir.startswith("REMOTE:"):
        return []
    # LF opens dataset_dir from the working directory; the config's own folder is the one other place a run
    # launched next to its config would see (not find_dataset_dir's walk up the parents: a folder named data
    # above the config may be anything)
    bases = [os.getcwd()] + ([os.path.dirname(os.path.abspath(config_path))] if config_path else [])
    try:
        found = next((os.path.join(b, ddir) for b in bases
                      if os.path.isfile(os.path.join(b, ddir, "dataset_info.json"))), None)
        if found is None:
            raise InputError("no dataset_info.json")
        # the data readers are imported only once a dataset_info.json is found: most lints never open one
        from finetune_doctor.readers.data.datasets import load_dataset_info

        info, _lines = load_dataset_info(os.path.join(found, "dataset_info.json"))
    except InputError:
        if not c.given("dataset_dir"):
            return []
        if not any(os.path.isdir(os.path.join(b, ddir)) for b in bases):
            # a folder found nowhere, absolute or relative: the training machine may hold it, so it is not checked
            # here (not-checked-here, info) unless --strict (dataset-not-defined); an absolute one was passed over
            # without a word before, so --strict missed LF's "Cannot open" (parity, trial 7's LF #9191 config)
            return [_c("dataset_dir", "not_here", "dataset-dir-not-here", "point `dataset_dir` at the folder holding "
                       "dataset_info.json", condition="not on this machine", args={"dir": ddir})]
        # a folder that exists here without dataset_info.json is wrong anywhere
        return [_c("dataset_dir", "dataset", "dataset-info-missing",
                   "point `dataset_dir` at the folder holding dataset_info.json", args={"dir": ddir})]
    out = []
    for key, name in names:
        if name not in info:
            shown = os.path.relpath(found) if not os.path.isabs(ddir) else found
            out.append(_c(key, "dataset", "dataset-undefined",
                          f"add `{name}` to dataset_info.json or correct the name in `{key}`",
                          args={"name": name, "folder": shown}))
    return out


CHECKS: tuple[Callable[[_Cfg], list[Problem]], ...] = (_missing, _conflicts, _stage, _method, _deepspeed,
                                                       _distributed, _interval, _template)


def check_launch(values: Mapping[str, Any], config_path: str | None = None, release: Any = None,
                 transformers: str | None = None) -> list[Problem]:
    """The parse-time rejections of one LLaMA-Factory training config (module docstring), in check order.

    `values` is the typed mapping keyschema reads (readers/config/yamlcfg.py); `config_path` locates a relative
    ``deepspeed:`` file next to the config when it is not under the working directory. Never raises: a check
    whose inputs have types its source would not compare is skipped (keyschema reports the type). `release`
    (readers/lfrelease.Release) judges the template against that release's registry (None: 0.9.5's);
    `transformers` (the training machine's version, when known) adds the checks of older transformers.
    """
    c = _Cfg(values, zero_stage_of(values, config_path), release, transformers)
    out: list[Problem] = []
    for check in (*CHECKS, lambda cfg: _datasets(cfg, config_path)):
        try:
            out.extend(check(c))
        except (TypeError, ValueError, AttributeError):   # a value of a type LF's own check would trip on
            continue
    return out
