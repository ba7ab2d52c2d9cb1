"""What kind of file a YAML/JSON given as CONFIG is: which LLaMA-Factory command reads it, or which flag takes it.

LLaMA-Factory reads one YAML per command, each with its own parser (LF ``hparams/parser.py``): ``train`` (model,
data, training, finetuning and generating arguments), ``export`` (``llamafactory-cli export``: the infer parser plus
``export_dir``), ``chat`` / ``webchat`` / ``api`` (the infer parser: model, data, finetuning, generating and the
engine's arguments, ``infer_backend``), ``eval`` (``EvaluationArguments``: ``task``, ``n_shot``, ``save_dir``), and,
with ``USE_V1=1``, v1's own parser (``v1/config/arg_parser.py``: ``model``, ``peft_config``, ``dist_config``,
``micro_batch_size``...). Other files that sit beside them are not configs LF parses: accelerate configs, DeepSpeed
JSONs, dataset registries (``dataset_info.json``) and v1 dataset YAMLs.

`kind_of(values)` decides from the keys (and ``USE_V1`` in the environment or the launch line). Kinds:

=================  =====================================================================
``train``          ``llamafactory-cli train`` (v0)
``train-v1``       ``USE_V1=1 llamafactory-cli sft|dpo|rm|train`` (v1 argument classes)
``export-v1``      a v1 config that merges an adapter (``peft_config.export_dir``)
``export``         ``llamafactory-cli export``: merge and/or quantize, write ``export_dir``
``chat``           ``llamafactory-cli chat|webchat|api`` (``infer_backend``: huggingface, vllm, sglang, kt)
``eval``           ``llamafactory-cli eval`` (MMLU/C-Eval/CMMLU style benchmark)
``accelerate``     an accelerate config: ``--accelerate-config FILE``
``deepspeed``      a DeepSpeed JSON: named by the YAML's ``deepspeed:`` key
``dataset_info``   a dataset registry: read from the YAML's ``dataset_dir``
``v1-dataset``     a v1 dataset YAML: named by the v1 YAML's ``train_dataset`` / ``eval_dataset``
``special-tokens`` token -> description pairs: named by ``new_special_tokens_config`` (LF main model_args.py)
``hf-training-args`` transformers' TrainingArguments as a trainer dumps it (training_args.json): not LF's input
=================  =====================================================================

Pure Python: `doctor lint` calls it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping   # not typing.Mapping: a slower isinstance (one per top-level value of every file)
from typing import Any

from finetune_doctor.readers.lfenv import env_enabled

# v1-only top-level keys (v1/config/*.py at the snapshot), none of which a v0 parser declares
V1_KEYS = frozenset({"model", "model_class", "peft_config", "quant_config", "kernel_config", "dist_config",
                     "init_config", "optim_config", "lr_scheduler_config", "micro_batch_size", "global_batch_size",
                     "train_dataset", "batching_strategy", "batching_workers", "sample_backend",
                     "enable_activation_checkpointing", "cp_size", "cp_mode", "dp_size", "mp_replicate_size",
                     "mp_shard_size", "dist_timeout", "save_epochs", "save_ckpt_as_hf", "custom_chat_template"})
# keys only LF's EvaluationArguments declares (hparams/evaluation_args.py)
EVAL_KEYS = frozenset({"task", "task_dir", "n_shot", "lang", "save_dir", "download_mode"})
TRAIN_MARKERS = frozenset({"stage", "do_train", "do_eval", "do_predict", "output_dir", "dataset",
                           "per_device_train_batch_size", "finetuning_type", "learning_rate"})
ACCELERATE_KEYS = frozenset({"compute_environment", "distributed_type", "num_processes", "num_machines",
                             "machine_rank", "mixed_precision", "fsdp_config", "deepspeed_config", "main_process_port",
                             "rdzv_backend", "same_network", "use_cpu", "downcast_bf16", "main_training_function",
                             "tpu_env", "gpu_ids", "megatron_lm_config", "dynamo_config"})
DS_KEYS = frozenset({"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                     "zero_allow_untested_optimizer", "gradient_clipping", "steps_per_print", "wall_clock_breakdown"})
# keys transformers' TrainingArguments.to_json_string() writes (training_args.json beside a checkpoint, trainer
# dumps pasted in issues) that no one writes into a LLaMA-Factory YAML: deprecated aliases and logging plumbing
HF_DUMP_MARKERS = frozenset({"per_gpu_train_batch_size", "per_gpu_eval_batch_size", "log_level_replica",
                             "log_on_each_node", "logging_nan_inf_filter", "prediction_loss_only", "eval_delay",
                             "torch_empty_cache_steps", "_n_gpu", "past_index", "half_precision_backend",
                             "save_on_each_node", "jit_mode_eval", "mp_parameters", "ignore_data_skip"})
LF_ONLY = frozenset({"model_name_or_path", "stage", "finetuning_type", "dataset", "template", "cutoff_len"})
_DATASET_ENTRY = frozenset({"file_name", "hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name",
                            "formatting", "columns", "tags", "ranking", "subset", "split", "folder", "num_samples"})
_V1_DATASET_ENTRY = frozenset({"path", "source", "converter", "size", "split", "weight", "streaming"})

NOT_LF = {
    "accelerate": "an accelerate config, not a LLaMA-Factory config: pass it as --accelerate-config FILE (with the "
                  "training YAML as CONFIG), or give the launch line with --launch FILE",
    "deepspeed": "a DeepSpeed config, not a LLaMA-Factory config: the training YAML names it with `deepspeed: PATH`; "
                 "`doctor lint` checks it on its own",
    "dataset_info": "a dataset registry (dataset_info.json), not a LLaMA-Factory config: LLaMA-Factory reads it from "
                    "the training YAML's `dataset_dir`; `doctor data CONFIG.yaml` reads it",
    "v1-dataset": "a LLaMA-Factory v1 dataset YAML, not a run config: the v1 training YAML names it with "
                  "`train_dataset: PATH`",
    "special-tokens": "special-token descriptions, not a run config: the training YAML names the file with "
                      "`new_special_tokens_config: PATH`",
    "hf-training-args": "a dump of transformers' TrainingArguments (the training_args.json a trainer writes, "
                        "TrainingArguments.to_json_string()), not a LLaMA-Factory config: it records the trainer "
                        "settings of a run that already started, without the model, dataset or method; check the "
                        "YAML given to `llamafactory-cli train`, or give the run folder to `doctor postmortem`",
}
COMMANDS = {"train": "llamafactory-cli train", "train-v1": "USE_V1=1 llamafactory-cli sft",
            "export-v1": "USE_V1=1 llamafactory-cli merge", "export": "llamafactory-cli export",
            "chat": "llamafactory-cli chat/webchat/api", "eval": "llamafactory-cli eval"}


def v1_hits(keys: set[str]) -> set[str]:
    """The keys that are v1's own, or a one-letter slip of one (``modl``, ``peft_confg``) that no v0 key is."""
    exact = keys & V1_KEYS
    slips = {k for k in keys - exact - TRAIN_MARKERS - {"model_name_or_path"} if len(k) > 3 and _v1_slip(k)}
    return exact | slips


@functools.lru_cache(maxsize=4096)
def _v1_slip(key: str) -> bool:
    """Whether `key` is within difflib's 0.85 ratio of a v1 key. Memoized per key: a lint of many configs asks
    about the same few dozen keys again and again (a fifth of a 95-file lint before, issue #22).

    difflib is imported only when a v1 key passes the bound ``SequenceMatcher.quick_ratio`` gives (twice the
    letters the two words share, counted with multiplicity, over their total length; the ratio never exceeds
    it, CPython ``Lib/difflib.py``), so the answer is difflib's and a key near no v1 key costs no import."""
    n = len(key)
    letters: dict[str, int] | None = None
    near = []
    for k, m, theirs, lacking in _v1_letters():
        if 2.0 * min(n, m) / (n + m) < 0.85:   # real_quick_ratio, the length bound, first: no counting
            continue
        # a letter of `key` that `k` lacks is shared with nothing: the shared count is at most the length of `key`
        # without those letters (`str.translate` deletes them in C), a bound that rules out most pairs uncounted
        if 2.0 * min(n - len(key.translate(lacking)), m) / (n + m) < 0.85:
            continue
        if letters is None:
            letters = {}
            for ch in key:
                letters[ch] = letters.get(ch, 0) + 1
        # the letters both share, with multiplicity (what `Counter & Counter` sums, without building one)
        shared = sum(min(c, theirs.get(ch, 0)) for ch, c in letters.items())
        if 2.0 * shared / (n + m) >= 0.85:
            near.append(k)
    if not near:
        return False
    import difflib

    return bool(difflib.get_close_matches(key, near, n=1, cutoff=0.85))


@functools.lru_cache(maxsize=1)
def _v1_letters() -> tuple[tuple[str, int, Any, Any], ...]:
    """Each v1 key with its length, letter counts (a dict: letter -> count) and a `str.translate` table that keeps
    only the letters it lacks, for `_v1_slip`'s bounds."""
    from collections import Counter

    return tuple((k, len(k), dict(Counter(k)), str.maketrans({ch: None for ch in set(k)})) for k in sorted(V1_KEYS))


def is_v1(values: Mapping[str, Any], env: Mapping[str, str] | None = None, launch_env: Mapping[str, str] | None = None
          ) -> bool:
    """A v1 config: ``USE_V1`` enabled in the environment or the launch line, or two of v1's own keys (no v0
    parser declares any of them, so a v0 key beside them is a v1 user's slip) making at least half of the
    run-defining keys."""
    if env_enabled("USE_V1", env) or (launch_env is not None and env_enabled("USE_V1", launch_env)):
        return True
    hits = v1_hits(set(map(str, values)))
    if len(hits) >= 2 and len(hits) * 2 >= len(hits | (TRAIN_MARKERS & set(map(str, values)))):
        return True
    return False


def kind_of(values: Any, *, suffix: str = ".yaml", env: Mapping[str, str] | None = None,
            launch_env: Mapping[str, str] | None = None) -> str | None:
    """The kind of one parsed file (module docstring), None when it is none of them. Never raises."""
    if not isinstance(values, Mapping) or not values:
        return None
    keys = set(map(str, values))
    if keys & DS_KEYS or (suffix == ".json" and any(
            isinstance(values.get(k), Mapping) and {"enabled", "loss_scale"} & set(values[k])
            for k in ("fp16", "bf16"))):
        return "deepspeed"
    if len(keys & ACCELERATE_KEYS) >= 2 and "model_name_or_path" not in keys:
        return "accelerate"
    if len(keys & HF_DUMP_MARKERS) >= 3 and not keys & LF_ONLY:
        return "hf-training-args"
    if is_v1(values, env, launch_env):
        peft = values.get("peft_config")
        if isinstance(peft, Mapping) and peft.get("export_dir"):
            return "export-v1"
        return "train-v1"
    if all(isinstance(v, str) for v in values.values()) and all(
            k.startswith("<") and k.endswith(">") for k in keys):
        return "special-tokens"
    entries = [v for v in values.values() if isinstance(v, Mapping)]
    if entries and len(entries) == len(values) and "model_name_or_path" not in keys:
        fields = set().union(*(set(map(str, e)) for e in entries))
        if fields & {"file_name", "hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name"} \
                and fields <= _DATASET_ENTRY | {"load_from"}:
            return "dataset_info"
        if "path" in fields and fields <= _V1_DATASET_ENTRY | {"name", "num_samples"}:
            return "v1-dataset"
    if "model_name_or_path" not in keys and len(keys & TRAIN_MARKERS) < 2 and not keys & EVAL_KEYS:
        return None
    if keys & {"stage", "do_train"}:
        return "train"
    if "export_dir" in keys:
        return "export"
    if keys & EVAL_KEYS and "task" in keys:
        return "eval"
    if "infer_backend" in keys or not keys & TRAIN_MARKERS:
        return "chat"
    return "train"


def kind_of_file(path: str) -> str | None:
    """`kind_of` of a file read leniently, for a file that is only named, not judged (a skipped lint input, a
    config handed to postmortem): None when it cannot be read or parsed, or is no kind LF knows of."""
    import json

    from finetune_doctor.readers.textfile import read_text

    try:
        text = read_text(path, "file")
        if path.lower().endswith(".json"):
            values = json.loads(text)
        else:
            # the reader every lint input goes through (libyaml when present; a duplicate key is no kind): ruamel's
            # pure-Python parser cost ~15 ms a file and its import ~30 ms (issue #22)
            from finetune_doctor.readers.config.yamlcfg import parse_yaml_text

            values, _ = parse_yaml_text(text, path, [])   # a repeated key: LF 0.8.0-0.9.3 keep the last
    except Exception:   # not ours to judge: an unreadable or malformed file is only left unnamed
        return None
    import os

    return kind_of(values, suffix=os.path.splitext(path)[1].lower())
