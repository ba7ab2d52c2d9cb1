"""Read the DeepSpeed JSON that a LLaMA-Factory YAML names with ``deepspeed:``, resolved as HF resolves it.

What happens to that file at run time (reference/deepspeed/hf_integration.md §1, checked against the installed
transformers 5.24 ``integrations/deepspeed.py`` and accelerate 1.15 ``utils/dataclasses.py`` / ``accelerator.py``):

1. ``TrainingArguments.__post_init__`` reads it with ``json.load`` (so comments and trailing commas fail, although
   DeepSpeed's own hjson reader would accept them) and ``trainer_config_process`` replaces ``"auto"`` in the keys
   HF owns (batch triple, ``gradient_clipping``, optimizer/scheduler params, ``fp16/bf16.enabled``); an explicit
   value that differs from the TrainingArguments value is collected as a mismatch.
2. accelerate's ``DeepSpeedPlugin`` inserts ``gradient_accumulation_steps: 1`` when the key is absent, requires a
   ``zero_optimization`` section, and ``set_mixed_precision`` writes missing ``fp16``/``bf16`` sections from the
   mixed-precision mode.
3. ``trainer_config_finalize`` (at ``trainer.train()``, *after* the model is loaded) fills the hidden-size keys
   and raises the mismatch ``ValueError``.
4. ``Accelerator._prepare_deepspeed`` fills what is left from its own kwargs and raises ``ValueError: `KEY` not found
   in kwargs`` for any other ``"auto"`` (tested here against accelerate 1.15: hf_integration.md's "silently dropped"
   holds only for ``zero.Init`` inside ``from_pretrained``, not for training).
5. ``deepspeed.initialize`` validates the pydantic sections (``extra="forbid"``) and the batch identity.

This module reproduces 1–4 without importing torch, transformers or deepspeed, and checks the JSON against a
vendored copy of DeepSpeed's config schema (reference/deepspeed/schema.md for DeepSpeed 0.19.8, per-tag ZeRO keys
from zero_fields_by_version.txt and misconfigs.md §12). `validate_with_deepspeed` adds the installed DeepSpeed's
own verdict when it is importable; the lint path never calls it.

Readers read and type; they do not judge. The `DSProblem` list records what the runtime itself would reject or
silently change, each with the upstream text; the rules in ``rules/deepspeed-*.yaml`` decide what to report.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from finetune_doctor.errors import InputError

NEWEST_DS = "0.19.8"
"""The newest DeepSpeed whose schema is vendored here. A version of None means "assume this one"."""


# ---------------------------------------------------------------------------------------------------------------
# Value types
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DSProblem:
    """One thing in the DeepSpeed JSON that the runtime rejects, ignores or silently changes.

    `key` is the dotted key path (``zero_optimization.stage``), None for the file as a whole; `line`/`column` are
    1-based positions in the JSON (None when the key is absent). `kind` is one of:

    * ``unknown``   a key a pydantic section rejects (``extra_forbidden``) for the target DeepSpeed version;
    * ``removed``   a key the target DeepSpeed removed and rejects (``DeepSpeedConfigError``);
    * ``type``      a value of the wrong type (pydantic error, or a plain getter that would crash/misread it);
    * ``invalid``   a value or structure the runtime rejects (bad enum, constraint, unfilled ``"auto"``, missing
      section/keys);
    * ``mismatch``  an explicit value that contradicts the YAML (`group` batch|precision|clipping|optimizer|
      scheduler); `silent` True when nothing raises and the YAML value is just not used;
    * ``deprecated`` a deprecated alias, or a key removed in a newer DeepSpeed when the version is unknown;
    * ``ignored``   a top-level key DeepSpeed never reads (`suggestion` set when it looks like a typo);
    * ``duplicate`` a key given twice (``json.load`` keeps the last value silently);
    * ``deepspeed`` an error raised by the installed DeepSpeed itself (`validate_with_deepspeed`).

    `expected` is the value HF/LF would use, `actual` the value written. `fix`/`fix_key`/`fix_value`/`fix_title`
    describe the mechanical edit that repairs it (``auto``: set `key` to "auto"; ``set``: set `fix_key` to
    `fix_value`; ``rename``: move the value of `key` to `fix_key`; ``delete``: remove `key`), or None.
    `detail` holds the exact upstream error text when there is one; `upstream` its most specific single line (for
    a mismatch, the ``- ds KEY=V vs hf ARG=V`` line HF prints).
    """

    def __post_init__(self) -> None:
        if self.upstream is None and self.detail:
            lines = [ln for ln in self.detail.splitlines() if ln.strip()]
            pick = next((ln for ln in lines if ln.startswith("- ds ")), lines[0] if lines else None)
            object.__setattr__(self, "upstream", pick)

    key: str | None
    kind: str
    message: str
    line: int | None = None
    column: int | None = None
    group: str | None = None
    expected: Any = None
    actual: Any = None
    suggestion: str | None = None
    silent: bool = False
    detail: str | None = None
    upstream: str | None = None
    fix: str | None = None
    fix_key: str | None = None
    fix_value: Any = None
    fix_title: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class DSConfig:
    """A DeepSpeed config as the training run will use it.

    * `path`: the resolved file (str), or None for an inline dict given as ``deepspeed:`` value.
    * `raw`: the JSON as written. `resolved`: `raw` after HF and accelerate filled every ``"auto"`` they fill and
      inserted what they insert (``gradient_accumulation_steps: 1``, missing ``fp16``/``bf16`` sections,
      ``zero_allow_untested_optimizer``); a value that needs information we lack (world size, hidden size, number of
      training steps) is None and its key is listed in `unresolved`; an ``"auto"`` nobody fills is replaced by the
      DeepSpeed default (what ``zero.Init`` would see) and reported as a problem.
    * `defaults`: DeepSpeed defaults of ``zero_optimization`` keys that matter for memory and are absent from the
      JSON, keyed relative to ``zero_optimization`` (``reduce_bucket_size``, ``offload_optimizer.pin_memory``);
      values from schema.md §2 (DeepSpeed 0.19.8 pydantic models) with the version-dependent ones resolved for
      `ds_version`.
    * `positions`: dotted key → (line, column), 1-based.
    * `filled`: dotted key → the value HF/accelerate wrote there. `explicit`: dotted leaf keys written with a value
      other than ``"auto"``.
    * `ds_version` / `transformers_version`: the versions the resolution assumed (None: newest known behaviour,
      DeepSpeed 0.19.8 / transformers 5.x). `notes`: version caveats and other facts worth a line in a report.
    * `hf_dtype` / `hf_dtype_4x`: ``HfTrainerDeepSpeedConfig.dtype()`` after HF's fill and before accelerate
      inserts missing sections — the dtype transformers 5.x / 4.x use for ``zero.Init`` and loading
      (hf_integration.md §2): 'bfloat16' | 'float16' | 'float32'; None when the YAML is unknown.
    """

    path: str | None
    raw: dict[str, Any]
    resolved: dict[str, Any]
    defaults: dict[str, Any]
    positions: dict[str, tuple[int, int]]
    problems: tuple[DSProblem, ...] = ()
    filled: dict[str, Any] = field(default_factory=dict)
    unresolved: tuple[str, ...] = ()
    explicit: tuple[str, ...] = ()
    ds_version: str | None = None
    transformers_version: str | None = None
    world_size: int | None = None
    hidden_size: int | None = None
    notes: tuple[str, ...] = ()
    hf_dtype: str | None = None
    hf_dtype_4x: str | None = None

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage DeepSpeed runs (0 when absent or not 0–3)."""
        return _stage_of(self.resolved)

    def get(self, dotted: str, default: Any = None) -> Any:
        """A resolved value by dotted path, falling back to `defaults` for zero_optimization keys.

        ZeRO keys are found under either of the names DeepSpeed accepts (``stage3_prefetch_bucket_size`` or its
        pydantic field name ``prefetch_bucket_size``).
        """
        parts = dotted.split(".")
        node: Any = self.resolved
        for i, part in enumerate(parts):
            if isinstance(node, dict) and part not in node and i == 1 and parts[0] == "zero_optimization":
                spec = ZERO_FIELDS.get(part)
                alt = spec.other_name if spec else _ZERO_BY_OTHER_NAME.get(part)
                part = alt if alt and alt in node else part
            if not isinstance(node, dict) or part not in node:
                if parts[0] == "zero_optimization" and len(parts) > 1:
                    rel = ".".join(parts[1:])
                    return self.defaults.get(rel, self.defaults.get(_ZERO_BY_OTHER_NAME.get(rel, ""), default))
                return default
            node = node[part]
        return node


# ---------------------------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------------------------

def parse_version(v: str | None) -> tuple[int, ...] | None:
    """``"0.19.8"``, ``"0.16.9+cu121"``, ``"5.0.0.dev0"`` → (0, 19, 8) etc.; None for None or garbage."""
    if not v:
        return None
    out = []
    for part in str(v).split("+")[0].split("."):
        digits = ""
        for ch in part:
            if ch.isdigit():
                digits += ch
            else:
                break
        if not digits:
            break
        out.append(int(digits))
    return tuple(out) if out else None


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution, read from its ``*.dist-info`` directory name (None if absent).

    Neither imports the package nor walks every distribution's metadata the way ``importlib.metadata.version``
    does (≈70 ms on a large environment, most of the lint budget): one directory listing per ``sys.path`` entry,
    cached. pip writes a dist-info for every install, editable ones included (PEP 660); an egg-style install is
    not seen and counts as "version unknown".
    """
    want = dist.lower().replace("-", "_").replace(".", "_")
    for entry in sys.path:
        for name in _listing(entry or "."):
            if not name.endswith(".dist-info"):
                continue
            stem = name[: -len(".dist-info")]
            pkg, _, ver = stem.rpartition("-")
            if pkg.lower().replace("-", "_").replace(".", "_") == want and ver:
                return ver
    return None


@functools.lru_cache(maxsize=64)
def _listing(path: str) -> tuple[str, ...]:
    try:
        return tuple(os.listdir(path))
    except OSError:
        return ()


def _ge(version: tuple[int, ...] | None, ref: str) -> bool:
    """True when `version` is at least `ref`; an unknown version counts as the newest known."""
    if version is None:
        return True
    return version >= parse_version(ref)  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------------------------
# Vendored schema (DeepSpeed 0.19.8 pydantic models, reference/deepspeed/schema.md §2; first/last tags per key from
# zero_fields_by_version.txt and misconfigs.md §12). `since`/`removed` are the first version that accepts / rejects.
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _F:
    kind: str                    # int | float | bool | optbool | stage | device | section | path | any
    default: Any = None
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    since: str | None = None
    removed: str | None = None
    replaced_by: str | None = None   # deprecated alias → the key DeepSpeed maps it to
    deprecated: bool = False
    other_name: str | None = None    # the pydantic field name when the JSON name is its alias (both accepted)


_MAXSIZE = sys.maxsize
# Lower bound used where the reference only says "absent at v0.9.5, present at v0.12.6": no false error.
_BETWEEN_0_9_5_AND_0_12_6 = "0.9.6"

ZERO_FIELDS: dict[str, _F] = {
    "stage": _F("stage", 0),
    "contiguous_gradients": _F("bool", True),
    "reduce_scatter": _F("bool", True),
    "reduce_bucket_size": _F("int", 500_000_000, gt=0),
    "use_multi_rank_bucket_allreduce": _F("bool", True, since="0.12.4"),
    "allgather_partitions": _F("bool", True),
    "allgather_bucket_size": _F("int", 500_000_000, ge=0),
    "overlap_comm": _F("optbool", None),
    "compute_grad_norm": _F("bool", True, since="0.19.7"),
    "load_from_fp32_weights": _F("bool", True),
    "elastic_checkpoint": _F("bool", False),
    "offload_param": _F("section", None),
    "offload_optimizer": _F("section", None),
    "zenflow": _F("section", None, since="0.17.5"),
    "sub_group_size": _F("int", 1_000_000_000, ge=0),
    "cpu_offload_param": _F("optbool", None, deprecated=True, replaced_by="offload_param"),
    "cpu_offload_use_pin_memory": _F("optbool", None, deprecated=True),
    "cpu_offload": _F("optbool", None, deprecated=True, replaced_by="offload_optimizer"),
    "stage3_prefetch_bucket_size": _F("int", 50_000_000, ge=0, other_name="prefetch_bucket_size"),
    "stage3_param_persistence_threshold": _F("int", 100_000, ge=0, other_name="param_persistence_threshold"),
    "stage3_model_persistence_threshold": _F("int", _MAXSIZE, ge=0, other_name="model_persistence_threshold"),
    "stage3_max_live_parameters": _F("int", 1_000_000_000, ge=0, other_name="max_live_parameters"),
    "stage3_max_reuse_distance": _F("int", 1_000_000_000, ge=0, other_name="max_reuse_distance"),
    "stage3_gather_16bit_weights_on_model_save": _F("bool", False, other_name="gather_16bit_weights_on_model_save"),
    "stage3_module_granularity_threshold": _F("int", 0, since="0.16.0", other_name="module_granularity_threshold"),
    "stage3_use_all_reduce_for_fetch_params": _F("bool", False, since="0.14.3",
                                                 other_name="use_all_reduce_for_fetch_params"),
    "stage3_allgather_sequential": _F("bool", False, since="0.18.5", other_name="allgather_sequential"),
    "stage3_gather_fp16_weights_on_model_save": _F("bool", False, deprecated=True,
                                                   replaced_by="stage3_gather_16bit_weights_on_model_save"),
    "ignore_unused_parameters": _F("bool", True),
    "legacy_stage1": _F("bool", False),
    "round_robin_gradients": _F("bool", False),
    "parameter_alignment": _F("bool", False, since="0.19.7"),
    "zero_hpz_partition_size": _F("int", 1, ge=0, since="0.10.0"),
    "zero_quantized_weights": _F("bool", False, since="0.10.0"),
    "zero_quantized_nontrainable_weights": _F("bool", False, since="0.10.2"),
    "zero_quantized_gradients": _F("bool", False, since="0.10.0"),
    "memory_efficient_linear": _F("bool", True),
    "pipeline_loading_checkpoint": _F("bool", False, since=_BETWEEN_0_9_5_AND_0_12_6),
    "override_module_apply": _F("bool", True, since=_BETWEEN_0_9_5_AND_0_12_6),
    "log_trace_cache_warnings": _F("bool", False, since="0.16.4"),
    "enable_sanity_checks": _F("bool", False, since="0.17.6"),
    "save_muon_momentum_buffer_in_memory": _F("bool", False, since="0.18.9"),
    "leaf_module": _F("section", None, since="0.18.0"),
    # removed in 0.19.8 (runtime/config.py _REMOVED_ZERO_CONFIG_KEYS → DeepSpeedConfigError)
    "mics_shard_size": _F("int", -1, removed="0.19.8"),
    "mics_hierarchical_params_gather": _F("bool", False, removed="0.19.8"),
    "zeropp_loco_param": _F("section", None, since="0.16.2", removed="0.19.8"),
}
_ZERO_BY_OTHER_NAME = {f.other_name: name for name, f in ZERO_FIELDS.items() if f.other_name}

OFFLOAD_PARAM_FIELDS: dict[str, _F] = {
    "device": _F("device", "none"),
    "nvme_path": _F("path", None),
    "buffer_count": _F("int", 5, ge=0),
    "buffer_size": _F("int", 100_000_000, ge=0),
    "max_in_cpu": _F("int", 1_000_000_000, ge=0),
    "pin_memory": _F("bool", True),          # False before 0.19.5 (PR #8207), see _pin_memory_default
}
OFFLOAD_OPTIMIZER_FIELDS: dict[str, _F] = {
    "device": _F("device", "none"),
    "nvme_path": _F("path", None),
    "buffer_count": _F("int", 4, ge=0),
    "pin_memory": _F("bool", True),
    "pipeline_read": _F("bool", False),
    "pipeline_write": _F("bool", False),
    "fast_init": _F("bool", False),
    "ratio": _F("float", 1.0, ge=0.0, le=1.0),
    "super_offload": _F("bool", False),
    "cpuadam_cores_perc": _F("float", 0.8, ge=0.0, le=1.0),
}
FP16_FIELDS: dict[str, _F] = {
    "enabled": _F("bool", False),
    "auto_cast": _F("bool", False),
    "loss_scale": _F("float", 0.0, ge=0.0),
    "initial_scale_power": _F("int", 16),
    "loss_scale_window": _F("int", 1000),
    "hysteresis": _F("int", 2),
    "consecutive_hysteresis": _F("bool", False),
    "min_loss_scale": _F("int", 1),
    "fp16_master_weights_and_grads": _F("bool", False),
}
BF16_FIELDS: dict[str, _F] = {
    "enabled": _F("bool", False),
    "immediate_grad_update": _F("bool", False),
    "check_grad_overflow": _F("bool", True),
    "bf16_master_weights_and_grads": _F("bool", False),
    "bf16_optimizer_states": _F("bool", False),
}
# fp16/bf16 became pydantic models (extra="forbid") in 0.17.1; before that they were plain getters.
PRECISION_PYDANTIC_SINCE = "0.17.1"
# pydantic v2 (DeepSpeed >= 0.15) rejects non-integral floats for int fields; v1 truncated them silently.
PYDANTIC_V2_SINCE = "0.15.0"

# Top-level keys DeepSpeed 0.19.8 reads (schema.md §1, recorded by instrumenting the dict), plus the keys
# config.py tests with `in`. Plain getters: no coercion, unknown keys silently ignored.
TOP_KEYS = frozenset("""
bf16 bfloat16 checkpoint comet comms_logger communication_data_type compile csv_monitor data_efficiency data_types
dataloader_drop_last datastates_ckpt disable_allgather disable_python_gc dump_state expert_parallel fp16
gradient_accumulation_steps gradient_allreduce_op gradient_clipping gradient_predivide_factor hybrid_engine log_level
managed_gradient_accumulation memory_breakdown pipeline prescale_gradients seq_parallel_communication_data_type
sequence_parallel_size steps_per_print tensor_parallel tensorboard timers torch_autocast train_batch_size
train_micro_batch_size_per_gpu use_data_before_expert_parallelism vocabulary_size wall_clock_breakdown wandb
weight_quantization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer zero_optimization optimizer scheduler
activation_checkpointing flops_profiler autotuning aio
""".split())
# Removed in 0.19.8: DeepSpeedConfigError (runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS).
TOP_REMOVED = {
    "amp": "NVIDIA Apex AMP integration has been removed. Use DeepSpeed 'fp16', 'bf16', or 'torch_autocast' instead.",
    "nebula": "Nebula checkpointing has been removed.",
    "compression_training": "The DeepSpeed compression library has been removed.",
    "quantize_training": "Mixture-of-Quantization (MoQ) / 'quantize_training' has been removed.",
    "sparse_gradients": "Sparse compression of dense torch.nn.Embedding gradients has been removed.",
    "eigenvalue": "Eigenvalue-based Mixture-of-Quantization (MoQ) has been removed.",
    "sparse_attention": "DeepSpeed Sparse Attention has been removed.",
    "elasticity": "Elastic training has been removed.",
    "graph_harvesting": "Graph harvesting has been removed.",
    "curriculum_learning": "Legacy top-level 'curriculum_learning' has been removed.",
    "progressive_layer_drop": "Progressive Layer Dropping has been removed.",
}
ZERO_REMOVED_WHY = {
    "mics_shard_size": "MiCS ZeRO-3 sharding has been removed.",
    "mics_hierarchical_params_gather": "MiCS ZeRO-3 sharding has been removed.",
    "zeropp_loco_param": "LoCo-Zero++ has been removed (standard ZeRO++ quantized gradients remain).",
}
TOP_SINCE = {"log_level": "0.19.3"}
# Plain-getter scalars worth type-checking: a string or a wrong type here crashes or is misread at run time.
TOP_SCALARS: dict[str, str] = {
    "train_batch_size": "posint", "train_micro_batch_size_per_gpu": "posint", "gradient_accumulation_steps": "posint",
    "gradient_clipping": "nonneg", "steps_per_print": "int", "gradient_predivide_factor": "nonneg",
    "zero_allow_untested_optimizer": "bool", "zero_force_ds_cpu_optimizer": "bool", "prescale_gradients": "bool",
    "wall_clock_breakdown": "bool", "memory_breakdown": "bool", "dataloader_drop_last": "bool",
}

# Keys HF (trainer_config_process / _finalize) and accelerate (_prepare_deepspeed, set_mixed_precision) fill when
# they hold "auto". Any other "auto" makes accelerate raise at prepare().
HF_AUTO_KEYS = frozenset({
    "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "gradient_clipping",
    "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr", "scheduler.params.total_num_steps",
    "scheduler.params.warmup_num_steps", "fp16.enabled", "bf16.enabled",
    "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
})

# zero_optimization keys whose DeepSpeed defaults matter for memory (recorded in DSConfig.defaults when absent).
MEMORY_ZERO_KEYS = ("stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
                    "allgather_bucket_size", "overlap_comm", "sub_group_size", "stage3_prefetch_bucket_size",
                    "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
                    "stage3_max_live_parameters", "stage3_max_reuse_distance", "round_robin_gradients",
                    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients")

# HF TrainingArguments defaults for the keys HF compares (lf_args.json, transformers 4.57/5.x).
HF_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_grad_norm": 1.0,
               "learning_rate": 5e-05, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-08,
               "weight_decay": 0.0, "fp16": False, "bf16": False, "fp16_full_eval": False, "bf16_full_eval": False,
               "auto_find_batch_size": False, "save_on_each_node": False, "half_precision_backend": "auto",
               "max_steps": -1, "warmup_steps": 0, "warmup_ratio": 0.0}

_UNKNOWN = object()
_MISMATCH_HEAD = ("Please correct the following DeepSpeed config values that mismatch TrainingArguments values:")
_MISMATCH_TAIL = "The easiest method is to set these DeepSpeed config values to 'auto'."


# ---------------------------------------------------------------------------------------------------------------
# Path resolution and parsing
# ---------------------------------------------------------------------------------------------------------------

def resolve_ds_path(value: Any, yaml_path: str | os.PathLike[str], yaml_line: int | None = None,
                    cwd: str | os.PathLike[str] | None = None) -> Path:
    """Find the DeepSpeed JSON named by a YAML's ``deepspeed:`` value.

    HF opens the value as a path relative to the process cwd (``llamafactory-cli train`` is normally run from the
    LLaMA-Factory root, so LF's YAMLs say ``examples/deepspeed/ds_z3_config.json``). We try, in order: `cwd`
    (default: the current directory), the YAML's directory, then each parent of the YAML's directory — so a YAML
    under ``examples/train_lora/`` finds ``examples/deepspeed/...`` from the checkout root. An absolute path is
    used as is. Returns the first existing file.

    Raises InputError naming the YAML file, the line of its ``deepspeed:`` key and every path tried.
    """
    text = str(value).strip()
    if not text:
        raise InputError("deepspeed: is empty; give the path of a DeepSpeed JSON", file=str(yaml_path),
                         line=yaml_line)
    p = Path(text)
    tried: list[Path] = []
    if p.is_absolute():
        tried.append(p)
    else:
        bases = [Path(cwd) if cwd is not None else Path.cwd()]
        ydir = Path(yaml_path).resolve().parent
        bases.append(ydir)
        bases.extend(ydir.parents)
        seen: set[Path] = set()
        for b in bases:
            cand = (b / p)
            key = cand.resolve() if cand.exists() else cand.absolute()
            if key in seen:
                continue
            seen.add(key)
            tried.append(cand)
    for cand in tried:
        if cand.is_file():
            return cand
        if cand.is_dir():
            raise InputError(f"deepspeed: {text!r} is a directory, expected a JSON file", file=str(yaml_path),
                             line=yaml_line)
    shown = ", ".join(str(t) for t in tried[:6]) + (f" (+{len(tried) - 6} parents)" if len(tried) > 6 else "")
    raise InputError(f"DeepSpeed config {text!r} not found (tried: {shown})", file=str(yaml_path), line=yaml_line)


def read_ds_json(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, tuple[int, int]], list[str]]:
    """Parse a DeepSpeed JSON as HF does (``json.load``); returns (dict, positions, duplicate dotted keys).

    Positions come from parsing the same text with ruamel.yaml's round-trip loader (JSON is YAML 1.2 flow
    syntax) after ``json.loads`` accepted it; 1-based (line, column) of each key, dotted paths.
    Raises InputError (file, line) for unreadable, empty, non-JSON or non-object files.
    """
    p = Path(path)
    try:
        raw_bytes = p.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read DeepSpeed config: {err.strerror}", file=str(path)) from None
    try:
        # accelerate's HfDeepSpeedConfig opens the file with encoding="utf-8", so a BOM reaches json.load and
        # fails there ("Unexpected UTF-8 BOM"); decoding without -sig keeps that behaviour
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"DeepSpeed config is not UTF-8 text (byte {err.start})", file=str(path)) from None
    return parse_ds_text(text, str(path))


def parse_ds_text(text: str, path: str) -> tuple[dict[str, Any], dict[str, tuple[int, int]], list[str]]:
    """`read_ds_json` on text already read."""
    if not text.strip():
        raise InputError("empty DeepSpeed config", file=path, line=1)
    dups: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                dups.append(k)
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as err:
        hint = ""
        if "Expecting property name" in err.msg or "Expecting value" in err.msg:
            hint = (" — HF/LLaMA-Factory read the DeepSpeed config with json.load, so comments and trailing commas "
                    "are not allowed (DeepSpeed's own hjson reader would accept them)")
        raise InputError(f"malformed DeepSpeed JSON: {err.msg} (column {err.colno}){hint}", file=path,
                         line=err.lineno) from None
    if not isinstance(data, dict):
        raise InputError(f"a DeepSpeed config must be a JSON object, found {type(data).__name__}", file=path, line=1)
    positions = _json_positions(text)
    dup_paths = _dup_paths(data, dups, positions)
    return data, positions, dup_paths


def _json_positions(text: str) -> dict[str, tuple[int, int]]:
    from finetune_doctor.readers import yamlnodes

    if yamlnodes.available():
        # libyaml composes JSON (a YAML subset) with key marks ~20x faster than ruamel's round-trip parser
        try:
            return yamlnodes.key_positions(text)
        except yamlnodes.ParseError:
            return {}
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    y = YAML(typ="rt")
    y.allow_duplicate_keys = True
    try:
        doc = y.load(text)
    except Exception:  # JSON that YAML cannot read (rare escapes): positions are a convenience only
        return {}
    out: dict[str, tuple[int, int]] = {}

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, CommentedMap):
            return
        for k in node:
            path = f"{prefix}.{k}" if prefix else str(k)
            try:
                line, col = node.lc.key(k)
                out[path] = (line + 1, col + 1)
            except (KeyError, TypeError, AttributeError):
                pass
            walk(node[k], path)

    walk(doc, "")
    return out


def _dup_paths(data: dict[str, Any], dups: list[str], positions: Mapping[str, tuple[int, int]]) -> list[str]:
    # json's hook does not tell the parent; a duplicated name is reported at every path that ends with it.
    if not dups:
        return []
    names = set(dups)
    return sorted({p for p in list(positions) + list(_leaf_paths(data)) if p.rsplit(".", 1)[-1] in names})


# ---------------------------------------------------------------------------------------------------------------
# Loading and resolution
# ---------------------------------------------------------------------------------------------------------------

def load_ds_config(value: Any, yaml_path: str | os.PathLike[str], yaml_line: int | None, lf: Mapping[str, Any],
                   world_size: int | None, hidden_size: int | None, *, ds_version: str | None | object = _UNKNOWN,
                   transformers_version: str | None | object = _UNKNOWN,
                   cwd: str | os.PathLike[str] | None = None) -> DSConfig:
    """Read, resolve and check the DeepSpeed config named by ``deepspeed:`` in a LLaMA-Factory YAML.

    `value` is the YAML value (a path, or a dict for an inline config); `yaml_path`/`yaml_line` locate the
    ``deepspeed:`` key for error messages; `lf` holds the merged, typed YAML keys (HF defaults fill what is
    absent: per_device_train_batch_size 8, gradient_accumulation_steps 1, max_grad_norm 1.0, ...);
    `world_size` is the number of training processes (GPUs × nodes; None if unknown: train_batch_size then stays
    unresolved); `hidden_size` is the model's ``hidden_size`` (None if unknown: the hidden-size "auto" keys stay
    unresolved). `ds_version`/`transformers_version` default to the installed versions read from package metadata
    (no import); pass None for "newest known behaviour".

    Resolution follows transformers ``HfTrainerDeepSpeedConfig.trainer_config_process``/``_finalize`` (5.x rules;
    4.x differences recorded in `notes`) and accelerate's ``DeepSpeedPlugin``/``_prepare_deepspeed``
    (hf_integration.md §1–2). Raises InputError for a missing, unreadable or malformed file.
    """
    if ds_version is _UNKNOWN:
        ds_version = installed_version("deepspeed")
    if transformers_version is _UNKNOWN:
        transformers_version = installed_version("transformers")
    if isinstance(value, Mapping):
        raw = copy.deepcopy(dict(value))
        path, positions, dup_paths = None, {}, []
    else:
        p = resolve_ds_path(value, yaml_path, yaml_line, cwd=cwd)
        raw, positions, dup_paths = read_ds_json(p)
        path = str(p)
    return build_ds_config(raw, path, positions, lf, world_size, hidden_size, ds_version=ds_version,  # type: ignore[arg-type]
                           transformers_version=transformers_version, dup_paths=dup_paths)  # type: ignore[arg-type]


def build_ds_config(raw: dict[str, Any], path: str | None, positions: Mapping[str, tuple[int, int]],
                    lf: Mapping[str, Any], world_size: int | None, hidden_size: int | None, *,
                    ds_version: str | None = None, transformers_version: str | None = None,
                    dup_paths: list[str] | tuple[str, ...] = ()) -> DSConfig:
    """`load_ds_config` on an already parsed dict (used by tests and by inline ``deepspeed:`` dicts)."""
    dsv = parse_version(ds_version)
    tfv = parse_version(transformers_version)
    pos = dict(positions)
    problems: list[DSProblem] = []
    notes: list[str] = []

    def add(key: str | None, kind: str, message: str, **kw: Any) -> None:
        line, col = _locate(pos, key)
        problems.append(DSProblem(key, kind, message, line, col, **kw))

    add.problems = problems  # type: ignore[attr-defined]  # read back by _reported_unknown

    for d in dup_paths:
        add(d, "duplicate", f"{d} is given more than once; json.load keeps the last value and drops the others "
                            "silently (DeepSpeed's own reader would raise 'Duplicate keys in DeepSpeed config').",
            detail="ValueError: Duplicate keys in DeepSpeed config")

    _check_schema(raw, dsv, add)
    resolved, filled, unresolved, dtypes = _resolve(raw, lf, world_size, hidden_size, dsv, tfv, add, notes)
    explicit = tuple(k for k, v in _leaf_items(raw) if v != "auto")
    defaults = _defaults(raw, resolved, dsv)
    if ds_version is None:
        notes.append(f"DeepSpeed version unknown: defaults and schema of DeepSpeed {NEWEST_DS} assumed")
    if "gradient_clipping" not in raw:
        gc = 1.0 if _ge(dsv, "0.19.3") else 0.0
        notes.append(f"gradient_clipping absent: HF does not fill it; DeepSpeed's default is 0.0 (no clipping) up to "
                     f"0.19.2 and 1.0 from 0.19.3 (PR #8068) — {gc} for this DeepSpeed")
    return DSConfig(path=path, raw=raw, resolved=resolved, defaults=defaults, positions=pos,
                    problems=tuple(problems), filled=filled, unresolved=tuple(unresolved), explicit=explicit,
                    ds_version=ds_version, transformers_version=transformers_version, world_size=world_size,
                    hidden_size=hidden_size, notes=tuple(notes), hf_dtype=dtypes[0], hf_dtype_4x=dtypes[1])


def _close(word: str, choices: list[str], n: int = 1, cutoff: float = 0.8) -> list[str]:
    import difflib   # only when a key is unknown: keeps the clean lint path's import cost down

    return difflib.get_close_matches(word, choices, n=n, cutoff=cutoff)


def _locate(pos: Mapping[str, tuple[int, int]], key: str | None) -> tuple[int | None, int | None]:
    k = key
    while k:
        if k in pos:
            return pos[k]
        k = k.rsplit(".", 1)[0] if "." in k else ""
    return (None, None)


# ---------------------------------------------------------------------------------------------------------------
# Schema checks (what DeepSpeed's pydantic models and config.py reject)
# ---------------------------------------------------------------------------------------------------------------

def _check_schema(raw: dict[str, Any], dsv: tuple[int, ...] | None, add: Any) -> None:
    for key, val in raw.items():
        if key in TOP_REMOVED:
            _report_removed(key, TOP_REMOVED[key], dsv, add)
        elif key in TOP_KEYS:
            since = TOP_SINCE.get(key)
            if since and dsv is not None and not _ge(dsv, since):
                add(key, "ignored", f"{key} is read only from DeepSpeed {since}; DeepSpeed "
                                    f"{_vs(dsv)} ignores it.")
            if key in TOP_SCALARS:
                _check_top_scalar(key, val, add)
        else:
            near = _close(key, sorted(TOP_KEYS), n=1, cutoff=0.8)
            if near:
                add(key, "ignored", f"{key} is not a DeepSpeed key and is ignored silently; did you mean "
                                    f"{near[0]}?", suggestion=near[0], actual=val, fix="rename", fix_key=near[0],
                    fix_title=f"Rename {key} to {near[0]}")
            else:
                add(key, "ignored", f"{key} is not a DeepSpeed key; DeepSpeed never reads it.", actual=val)

    zo = raw.get("zero_optimization", _UNKNOWN)
    if zo is _UNKNOWN:
        add("zero_optimization", "invalid",
            "no zero_optimization section: accelerate refuses the config before training starts.",
            detail="ValueError: Please specify the ZeRO optimization config in the DeepSpeed config.",
            fix="set", fix_key="zero_optimization.stage", fix_value=0,
            fix_title='Add "zero_optimization": {"stage": 0}')
    elif isinstance(zo, bool):
        add("zero_optimization", "deprecated", "zero_optimization given as a boolean is the legacy form: DeepSpeed "
                                               "reads it as stage 1 with a deprecation warning.", actual=zo)
    elif not isinstance(zo, dict):
        add("zero_optimization", "type", f"zero_optimization must be an object, found {_jtype(zo)}.", actual=zo)
    else:
        _check_section("zero_optimization", zo, ZERO_FIELDS, dsv, add, pydantic=True)
        _check_zero_relations(zo, dsv, add)

    for name, fields in (("fp16", FP16_FIELDS), ("bf16", BF16_FIELDS), ("bfloat16", BF16_FIELDS)):
        sec = raw.get(name, _UNKNOWN)
        if sec is _UNKNOWN:
            continue
        if name == "bfloat16":
            add(name, "deprecated", "bfloat16 is the legacy name of bf16; under HF/accelerate a bf16 section is "
                                    "always written (set_mixed_precision), and DeepSpeed reads bf16 first, so this "
                                    "section has no effect.", fix="rename", fix_key="bf16",
                fix_title="Rename bfloat16 to bf16")
        if not isinstance(sec, dict):
            add(name, "type", f"{name} must be an object, found {_jtype(sec)}.", actual=sec)
            continue
        pyd = _ge(dsv, PRECISION_PYDANTIC_SINCE)
        _check_section(name, sec, fields, dsv, add, pydantic=pyd)
        if name == "fp16" and pyd:
            _check_fp16_relations(sec, dsv, add)

    if "train_batch_size" not in raw and "train_micro_batch_size_per_gpu" not in raw:
        add("train_micro_batch_size_per_gpu", "invalid",
            "neither train_batch_size nor train_micro_batch_size_per_gpu is set; HF fills neither when absent and "
            "DeepSpeed stops at initialize.",
            detail="AssertionError: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided",
            fix="set", fix_key="train_micro_batch_size_per_gpu", fix_value="auto",
            fix_title='Add "train_micro_batch_size_per_gpu": "auto" (and "train_batch_size": "auto")')
    op = raw.get("gradient_allreduce_op")
    if op == "sum" and isinstance(zo, dict) and _stage_value(zo.get("stage")) == 3:
        add("gradient_allreduce_op", "invalid", "gradient_allreduce_op 'sum' is not allowed with ZeRO-3.", actual=op)


def _report_removed(key: str, why: str, dsv: tuple[int, ...] | None, add: Any, removed: str = "0.19.8") -> None:
    if dsv is None:
        add(key, "deprecated", f"{key}: {why} DeepSpeed {removed} rejects it (DeepSpeedConfigError); older versions "
                               f"accept it.", fix="delete", fix_title=f"Remove {key}",
            detail=f"deepspeed.runtime.config.DeepSpeedConfigError: {why}")
    elif _ge(dsv, removed):
        add(key, "removed", f"{key}: {why} DeepSpeed {_vs(dsv)} rejects the config.", fix="delete",
            fix_title=f"Remove {key}", detail=f"deepspeed.runtime.config.DeepSpeedConfigError: {why}")


def _check_section(prefix: str, sec: Mapping[str, Any], fields: Mapping[str, _F], dsv: tuple[int, ...] | None,
                   add: Any, pydantic: bool) -> None:
    for key, val in sec.items():
        dotted = f"{prefix}.{key}"
        spec_name = key if key in fields else _ZERO_BY_OTHER_NAME.get(key) if fields is ZERO_FIELDS else None
        spec = fields.get(spec_name) if spec_name else None
        if spec is None:
            if not pydantic:
                add(dotted, "ignored", f"{dotted} is not a DeepSpeed key; DeepSpeed {_vs(dsv)} reads {prefix} with "
                                       "plain getters and ignores it.", actual=val)
                continue
            near = _close(key, sorted(fields), n=1, cutoff=0.75)
            hint = f"; did you mean {near[0]}?" if near else "."
            if val == "auto":   # DeepSpeed drops "auto" before validating, but accelerate refuses it first
                hint += (' With the value "auto" DeepSpeed would drop it silently, but accelerate stops at prepare() '
                         "because nobody fills it.")
            add(dotted, "unknown", f"{dotted} is not a key of DeepSpeed's {prefix} section{hint}",
                suggestion=near[0] if near else None, actual=val,
                fix="rename" if near else "delete", fix_key=f"{prefix}.{near[0]}" if near else None,
                fix_title=(f"Rename {key} to {near[0]}" if near else f"Remove {dotted}"),
                detail=(f"ValueError: `{dotted}` not found in kwargs. Please specify `{dotted}` without `auto` (set "
                        "to correct value) in the DeepSpeed config file or pass it in kwargs." if val == "auto" else
                        f"{_section_model(prefix)}: {key} Extra inputs are not permitted [type=extra_forbidden]"))
            continue
        if spec.removed:
            if spec.since and dsv is not None and not _ge(dsv, spec.since):
                pass  # too old to know it at all: reported below as unknown
            elif dsv is None or _ge(dsv, spec.removed):
                _report_removed(dotted, ZERO_REMOVED_WHY.get(key, "removed."), dsv, add, removed=spec.removed)
                continue
        if spec.since and dsv is not None and not _ge(dsv, spec.since):
            add(dotted, "unknown", f"{dotted} exists only from DeepSpeed {spec.since}; DeepSpeed {_vs(dsv)} rejects "
                                   "it.", actual=val, fix="delete", fix_title=f"Remove {dotted} (or upgrade DeepSpeed)",
                detail=f"{_section_model(prefix)}: {key} Extra inputs are not permitted [type=extra_forbidden]")
            continue
        if spec.deprecated:
            _report_deprecated(prefix, key, spec, sec, val, add)
        if val == "auto":
            continue  # HF/accelerate fill it, or the unfilled-auto check reports it
        _check_value(dotted, val, spec, dsv, add, pydantic)
        if spec.kind == "section" and isinstance(val, dict):
            sub = {"offload_param": OFFLOAD_PARAM_FIELDS, "offload_optimizer": OFFLOAD_OPTIMIZER_FIELDS}.get(key)
            if sub is not None:
                _check_section(dotted, val, sub, dsv, add, pydantic=True)


def _report_deprecated(prefix: str, key: str, spec: _F, sec: Mapping[str, Any], val: Any, add: Any) -> None:
    dotted = f"{prefix}.{key}"
    new = spec.replaced_by
    if new and (new in sec or (ZERO_FIELDS.get(new) and ZERO_FIELDS[new].other_name in sec)):
        add(dotted, "invalid", f"{dotted} is the deprecated form of {prefix}.{new}, and both are given.",
            detail=f"AssertionError: Cannot provide deprecated parameter '{key}' and replacing parameter "
                   f"'{ZERO_FIELDS[new].other_name or new}' together", fix="delete", fix_title=f"Remove {dotted}")
        return
    if key == "cpu_offload":
        what = ("DeepSpeed maps it to offload_optimizer.device=cpu with a warning, but HF/accelerate only look at "
                "offload_optimizer.device, so they do not wrap the optimizer in DeepSpeedCPUAdam")
        fix = dict(fix="rename", fix_key=f"{prefix}.offload_optimizer", fix_value={"device": "cpu"} if val else None,
                   fix_title='Replace cpu_offload with "offload_optimizer": {"device": "cpu"}')
    elif key == "cpu_offload_param":
        what = "DeepSpeed maps it to offload_param.device=cpu with a warning"
        fix = dict(fix="rename", fix_key=f"{prefix}.offload_param", fix_value={"device": "cpu"} if val else None,
                   fix_title='Replace cpu_offload_param with "offload_param": {"device": "cpu"}')
    elif new:
        what = f"DeepSpeed maps it to {new} with a warning"
        fix = dict(fix="rename", fix_key=f"{prefix}.{new}", fix_value=val, fix_title=f"Rename {key} to {new}")
    else:
        what = "DeepSpeed accepts it with a warning and it has no replacement"
        fix = dict(fix="delete", fix_title=f"Remove {dotted}")
    add(dotted, "deprecated", f"{dotted} is deprecated: {what}.", suggestion=fix.get("fix_key"), actual=val,
        detail=f"Config parameter {key} is deprecated" + (f" use {new} instead" if new else ""), **fix)


def _check_value(dotted: str, val: Any, spec: _F, dsv: tuple[int, ...] | None, add: Any, pydantic: bool) -> None:
    model = _section_model(dotted.rsplit(".", 1)[0])
    leaf = dotted.rsplit(".", 1)[-1]

    def bad(kind: str, msg: str, ptype: str) -> None:
        add(dotted, kind, f"{dotted}: {msg}", actual=val, detail=f"{model}: {leaf} {msg} [type={ptype}]")

    k = spec.kind
    if k in ("int", "stage"):
        n = _lax_int(val)
        if n is None:
            if isinstance(val, float) and math.isfinite(val) and not val.is_integer():
                if k == "stage":
                    bad("invalid", "Input should be 0, 1, 2, 3 or 3", "enum")
                elif pydantic and _ge(dsv, PYDANTIC_V2_SINCE):
                    bad("type", "Input should be a valid integer, got a number with a fractional part",
                        "int_from_float")
                return
            if k == "stage":
                bad("invalid", "Input should be 0, 1, 2, 3 or 3", "enum")
            elif isinstance(val, str):
                bad("type", "Input should be a valid integer, unable to parse string as an integer", "int_parsing")
            else:
                bad("type", "Input should be a valid integer", "int_type")
            return
        if k == "stage":
            if n not in (0, 1, 2, 3):
                bad("invalid", "Input should be 0, 1, 2, 3 or 3", "enum")
            return
        _check_bounds(n, spec, bad)
    elif k == "float":
        x = _lax_float(val)
        if x is None:
            bad("type", "Input should be a valid number", "float_type")
            return
        if dotted.endswith("fp16.loss_scale") and not math.isfinite(x):
            bad("invalid", "fp16.loss_scale must be a finite number (not inf/-inf/nan)", "value_error")
            return
        _check_bounds(x, spec, bad)
    elif k in ("bool", "optbool"):
        if val is None and k == "optbool":
            return
        if _lax_bool(val) is None:
            bad("type", "Input should be a valid boolean" + (", unable to interpret input"
                                                             if isinstance(val, (str, int)) else ""),
                "bool_parsing" if isinstance(val, (str, int)) else "bool_type")
    elif k == "device":
        if val not in ("none", "cpu", "nvme"):
            bad("invalid", "Input should be 'none', 'cpu' or 'nvme'", "enum")
    elif k == "section":
        if val is not None and not isinstance(val, dict):
            bad("type", "Input should be a valid dictionary", "model_type")
    elif k == "path":
        if val is not None and not isinstance(val, str):
            bad("type", "Input should be a valid path", "path_type")


def _check_bounds(x: float, spec: _F, bad: Any) -> None:
    if spec.gt is not None and not x > spec.gt:
        bad("invalid", f"Input should be greater than {_num_str(spec.gt)}", "greater_than")
    elif spec.ge is not None and not x >= spec.ge:
        bad("invalid", f"Input should be greater than or equal to {_num_str(spec.ge)}", "greater_than_equal")
    elif spec.le is not None and not x <= spec.le:
        bad("invalid", f"Input should be less than or equal to {_num_str(spec.le)}", "less_than_equal")


def _check_zero_relations(zo: Mapping[str, Any], dsv: tuple[int, ...] | None, add: Any) -> None:
    stage = _stage_value(zo.get("stage", 0))
    raw_stage = zo.get("stage")
    if stage is not None and raw_stage != "auto" and (isinstance(raw_stage, (str, bool, float))):
        # HfDeepSpeedConfig keeps the raw value and tests `_stage == 3`; DeepSpeed's enum coerces it
        add("zero_optimization.stage", "type",
            f"zero_optimization.stage is {_show(raw_stage)}, not the integer {stage}: DeepSpeed coerces it, but "
            "transformers compares the raw value with 3, so is_deepspeed_zero3_enabled() is False"
            + (" — no zero.Init partitioning at load and none of LLaMA-Factory's ZeRO-3 handling, while DeepSpeed "
               "runs stage 3." if stage == 3 else "."),
            actual=raw_stage, expected=stage, fix="set", fix_key="zero_optimization.stage", fix_value=stage,
            fix_title=f"Write the stage as the integer {stage}")
    oo = zo.get("offload_optimizer")
    if isinstance(oo, dict) and stage is not None and stage != 3:
        r = _lax_float(oo.get("ratio", 1.0))
        if r is not None and r < 1.0:
            add("zero_optimization.offload_optimizer.ratio", "invalid",
                f"offload_optimizer.ratio={_num_str(r)} (partial offload) needs ZeRO stage 3; this config uses "
                f"stage {stage}.", actual=oo.get("ratio"),
                detail="Assertion failed, Partial offloading only supported for ZeRO Stage 3. [type=assertion_error]")
    if stage == 3 and "compute_grad_norm" in zo and _lax_bool(zo["compute_grad_norm"]) is False and _ge(dsv, "0.19.7"):
        add("zero_optimization.compute_grad_norm", "invalid", "compute_grad_norm=false works only with ZeRO 1 or 2.",
            actual=zo["compute_grad_norm"],
            detail="Value error, compute_grad_norm=false is supported only with ZeRO Stage 1 or 2")
    for sec in ("offload_optimizer", "offload_param"):
        o = zo.get(sec)
        if isinstance(o, dict) and o.get("device") == "nvme" and not o.get("nvme_path"):
            add(f"zero_optimization.{sec}.device", "invalid",
                f"{sec}.device is nvme but nvme_path is not set: the config validates, the swapper fails at "
                "initialize.", actual="nvme")


def _check_fp16_relations(sec: Mapping[str, Any], dsv: tuple[int, ...] | None, add: Any) -> None:
    # validators of DeepSpeedFP16Config (precision_config.py): loss_scale_window / min_loss_scale > 0 under dynamic
    # scaling (0.19.3+), bools rejected for them.
    if not _ge(dsv, "0.19.3"):
        return
    for k in ("loss_scale_window", "min_loss_scale"):
        if isinstance(sec.get(k), bool):
            add(f"fp16.{k}", "type", f"fp16.{k} must be an integer, not bool.", actual=sec[k],
                detail=f"Value error, fp16.{k} must be an integer, not bool")
    enabled = sec.get("enabled")
    loss_scale = _lax_float(sec.get("loss_scale", 0))
    if enabled is True and loss_scale == 0:  # "auto" is judged after resolution by DeepSpeed itself
        for k, default in (("loss_scale_window", 1000), ("min_loss_scale", 1)):
            n = _lax_int(sec.get(k, default))
            if n is not None and n <= 0:
                msg = f"fp16.{k} must be > 0 when dynamic loss scaling is enabled (loss_scale=0)"
                add(f"fp16.{k}", "invalid", msg + ".", actual=sec.get(k), detail=f"Value error, {msg}")


# ---------------------------------------------------------------------------------------------------------------
# Resolution: what HF and accelerate do to the dict before DeepSpeed sees it
# ---------------------------------------------------------------------------------------------------------------

def _resolve(raw: dict[str, Any], lf: Mapping[str, Any], world_size: int | None, hidden_size: int | None,
             dsv: tuple[int, ...] | None, tfv: tuple[int, ...] | None, add: Any,
             notes: list[str]) -> tuple[dict[str, Any], dict[str, Any], list[str], tuple[str | None, str | None]]:
    cfg = copy.deepcopy(raw)
    filled: dict[str, Any] = {}
    unresolved: list[str] = []
    hf_lines: list[tuple[str, str, str, Any, Any]] = []   # (ds key, hf key, group, ds value, hf value)

    have_yaml = bool(lf)   # linting a DeepSpeed JSON alone: nothing to fill from or compare with

    def a(k: str) -> Any:
        if not have_yaml:
            return _UNKNOWN
        v = lf.get(k)
        return HF_DEFAULTS.get(k) if v is None else v

    if not have_yaml:
        notes.append("no LLaMA-Factory YAML: the values HF takes from it are unresolved and not compared")

    def fill_match(key: str, hf_val: Any, hf_key: str, group: str, must_match: bool = True) -> None:
        node, leaf = _find_node(cfg, key)
        if node is None:
            return
        cur = node.get(leaf)
        if cur == "auto":
            if hf_val is _UNKNOWN:
                node[leaf] = None
                unresolved.append(key)
            else:
                node[leaf] = hf_val
                filled[key] = hf_val
            return
        if must_match and cur is not None and hf_val is not _UNKNOWN and cur != hf_val:
            hf_lines.append((key, hf_key, group, cur, hf_val))

    # --- trainer_config_process (transformers integrations/deepspeed.py) ---
    afbs = a("auto_find_batch_size") is True
    mbs, gas = a("per_device_train_batch_size"), a("gradient_accumulation_steps")
    tbs = _UNKNOWN
    if world_size is not None and isinstance(mbs, int) and isinstance(gas, int):
        tbs = world_size * mbs * gas
    fill_match("train_micro_batch_size_per_gpu", mbs, "per_device_train_batch_size", "batch", not afbs)
    fill_match("gradient_accumulation_steps", gas, "gradient_accumulation_steps", "batch")
    fill_match("train_batch_size", tbs, "train_batch_size (calculated)", "batch", not afbs)
    fill_match("gradient_clipping", a("max_grad_norm"), "max_grad_norm", "clipping")
    lr = a("learning_rate")
    fill_match("optimizer.params.lr", lr, "learning_rate", "optimizer")
    betas = [a("adam_beta1"), a("adam_beta2")]
    fill_match("optimizer.params.betas", _UNKNOWN if _UNKNOWN in betas else betas, "adam_beta1+adam_beta2",
               "optimizer")
    fill_match("optimizer.params.eps", a("adam_epsilon"), "adam_epsilon", "optimizer")
    fill_match("optimizer.params.weight_decay", a("weight_decay"), "weight_decay", "optimizer")
    fill_match("scheduler.params.warmup_min_lr", 0, "warmup_min_lr", "scheduler", must_match=False)  # not an arg
    fill_match("scheduler.params.warmup_max_lr", lr, "learning_rate", "scheduler")
    if a("save_on_each_node") is True:
        ck = cfg.setdefault("checkpoint", {})
        if isinstance(ck, dict):
            ck["use_node_local_storage"] = True
            filled["checkpoint.use_node_local_storage"] = True
    fp16_flag = _flag(a("fp16"), a("fp16_full_eval"))
    bf16_flag = _flag(a("bf16"), a("bf16_full_eval"))
    fill_match("fp16.enabled", fp16_flag, "fp16|fp16_full_eval", "precision")
    fill_match("bf16.enabled", bf16_flag, "bf16|bf16_full_eval", "precision")
    # HfTrainerDeepSpeedConfig.dtype(), fixed here, before accelerate inserts missing fp16/bf16 sections:
    # 5.x bf16 if is_true(bf16.enabled), fp16 if is_true(fp16.enabled), else fp32; 4.x fp32 only if
    # is_false(fp16.enabled), else fp16
    dtypes: tuple[str | None, str | None] = (None, None)
    if have_yaml:
        b_true = _is_true(cfg, "bf16.enabled")
        dtypes = ("bfloat16" if b_true else "float16" if _is_true(cfg, "fp16.enabled") else "float32",
                  "bfloat16" if b_true else "float32" if _is_false(cfg, "fp16.enabled") else "float16")
    if fp16_flag is True and str(a("half_precision_backend")) == "apex":
        notes.append("transformers 4.x fills fp16.enabled with False when half_precision_backend is apex "
                     "(fp16|fp16_full_eval+fp16_backend(amp)); 5.x fills True")

    # --- trainer_config_finalize: hidden-size keys, scheduler steps ---
    zo = cfg.get("zero_optimization")
    stage3 = isinstance(zo, dict) and zo.get("stage") == 3     # HfDeepSpeedConfig._stage compares the raw value
    if isinstance(zo, dict):
        h = hidden_size
        pre_445 = tfv is not None and tfv < (4, 45)
        vals: dict[str, Any] = {
            "reduce_bucket_size": h * h if h else _UNKNOWN,
            # transformers <= 4.44 wrote the float 0.9*h*h (ZeRO-3 only; accelerate writes int() otherwise)
            "stage3_prefetch_bucket_size": (0.9 * h * h if (pre_445 and stage3) else int(0.9 * h * h)) if h else _UNKNOWN,
            "stage3_param_persistence_threshold": 10 * h if h else _UNKNOWN,
        }
        # HF fills the stage-3 keys only for ZeRO-3; accelerate's _prepare_deepspeed fills all three otherwise.
        for k, v in vals.items():
            fill_match(f"zero_optimization.{k}", v, "hidden_size", "zero", must_match=False)
        pf = zo.get("stage3_prefetch_bucket_size")
        if stage3 and isinstance(pf, float) and not pf.is_integer() and "zero_optimization.stage3_prefetch_bucket_size" in filled:
            msg = ("Input should be a valid integer, got a number with a fractional part")
            if _ge(dsv, PYDANTIC_V2_SINCE):
                add("zero_optimization.stage3_prefetch_bucket_size", "type",
                    f"transformers {_vs(tfv)} fills stage3_prefetch_bucket_size \"auto\" with 0.9·hidden² = {pf} "
                    f"(a float; fixed in 4.45, PR #33402) and DeepSpeed {_vs(dsv)} rejects it.",
                    actual="auto", expected=int(pf), fix="set", fix_key="zero_optimization.stage3_prefetch_bucket_size",
                    fix_value=int(pf), fix_title=f"Set stage3_prefetch_bucket_size to {int(pf)}",
                    detail=f"DeepSpeedZeroConfig: stage3_prefetch_bucket_size {msg} [type=int_from_float]")
    n_steps = a("max_steps")
    n_steps = n_steps if isinstance(n_steps, int) and n_steps > 0 else _UNKNOWN
    fill_match("scheduler.params.total_num_steps", n_steps, "num_training_steps (calculated)", "scheduler")
    warm = _UNKNOWN
    if n_steps is not _UNKNOWN:
        ws, wr = a("warmup_steps"), a("warmup_ratio")
        w = ws if isinstance(ws, int) and ws > 0 else math.ceil(n_steps * float(wr or 0.0))
        warm = max(1, w)
    fill_match("scheduler.params.warmup_num_steps", warm, "warmup_steps", "scheduler")

    # --- accelerate DeepSpeedPlugin.__post_init__ / set_mixed_precision ---
    # the plugin overwrites steps_per_print (even an explicit one) "to stop deepspeed from logging @ stdout",
    # which is why DeepSpeed's own step lines never appear in LLaMA-Factory logs
    cfg["steps_per_print"] = math.inf
    filled["steps_per_print"] = math.inf
    if "gradient_accumulation_steps" not in cfg:
        cfg["gradient_accumulation_steps"] = 1
        filled["gradient_accumulation_steps"] = 1
        if isinstance(gas, int) and not isinstance(gas, bool) and gas != 1:
            crash = "train_batch_size" in raw
            add("gradient_accumulation_steps", "mismatch",
                f"gradient_accumulation_steps is absent: accelerate inserts 1 while the YAML asks for {gas}"
                + (f", so train_batch_size ({_show(cfg.get('train_batch_size'))}) no longer equals micro × 1 × world "
                   "and DeepSpeed stops at initialize." if crash else
                   f"; DeepSpeed then steps the optimizer every micro-batch (\"Gradient accumulation steps mismatch: "
                   f"GradientAccumulationPlugin has {gas}, DeepSpeed config has 1. Using DeepSpeed's value.\")."),
                group="batch", expected=gas, actual=None, silent=not crash,
                detail=("AssertionError: Check batch related parameters. train_batch_size is not equal to "
                        "micro_batch_per_gpu * gradient_acc_step * world_size") if crash else None,
                fix="set", fix_key="gradient_accumulation_steps", fix_value="auto",
                fix_title='Add "gradient_accumulation_steps": "auto"')
    mixed = None if not have_yaml else ("fp16" if a("fp16") else ("bf16" if a("bf16") else "no"))
    for name, on in (("fp16", mixed == "fp16"), ("bf16", mixed == "bf16")):
        if name not in cfg and mixed is not None:
            cfg[name] = {"enabled": on, "auto_cast": True} if (on and name == "fp16") else {"enabled": on}
            filled[f"{name}.enabled"] = on
    if "optimizer" not in cfg:
        # HF builds the torch optimizer itself; accelerate then allows it (_prepare_deepspeed)
        cfg["zero_allow_untested_optimizer"] = True
    # --- accelerate _prepare_deepspeed: the remaining "auto"s it knows ---
    node, leaf = _find_node(cfg, "zero_optimization.stage3_gather_16bit_weights_on_model_save")
    if node is not None and node.get(leaf) == "auto":
        node[leaf] = False
        filled["zero_optimization.stage3_gather_16bit_weights_on_model_save"] = False
    if cfg.get("gradient_clipping") == "auto":   # only reachable when HF did not run (never under the Trainer)
        cfg["gradient_clipping"] = 1.0

    # mismatches, in HF's order, each with the exact line HF prints
    for key, hf_key, group, ds_val, hf_val in hf_lines:
        line = f"- ds {key}={ds_val} vs hf {hf_key}={hf_val}"
        _add_mismatch(add, key, hf_key, group, ds_val, hf_val, line)

    # precision: silent disable, both enabled
    for name, flag in (("fp16", fp16_flag), ("bf16", bf16_flag)):
        sec = raw.get(name)
        if isinstance(sec, dict) and "enabled" not in sec and flag is True:
            add(f"{name}.enabled", "mismatch",
                f"the {name} section has no \"enabled\" key, so HF does not fill it and DeepSpeed keeps {name} off "
                f"although the YAML sets {name}: true — the run trains in fp32 (or the other half type) silently.",
                group="precision", expected=True, actual=None, silent=True, fix="set", fix_key=f"{name}.enabled",
                fix_value="auto", fix_title=f'Add "enabled": "auto" to the {name} section')
    f16 = _lax_bool((cfg.get("fp16") or {}).get("enabled")) if isinstance(cfg.get("fp16"), dict) else None
    b16 = _lax_bool((cfg.get("bf16") or {}).get("enabled")) if isinstance(cfg.get("bf16"), dict) else None
    precision_mismatch = any(g == "precision" for _, _, g, _, _ in hf_lines)
    if f16 and b16 and not precision_mismatch and ("fp16.enabled" not in filled or "bf16.enabled" not in filled):
        add("bf16.enabled" if "bf16.enabled" not in filled else "fp16.enabled", "mismatch",
            "fp16.enabled and bf16.enabled are both true; DeepSpeed accepts only one half-precision mode.",
            group="precision", actual=True, expected=None, fix="auto",
            fix_title='Set fp16.enabled and bf16.enabled to "auto" (DeepSpeed follows the YAML bf16/fp16 flags)',
            detail="AssertionError: bfloat16 and fp16 modes cannot be simultaneously enabled")

    # every "auto" left is one accelerate cannot fill: ValueError at prepare(); zero.Init would see the DS default
    reported = _reported_unknown(add)
    for key, val in list(_leaf_items(cfg)):
        if val != "auto" or key in unresolved or key in reported:
            continue
        default = _ds_default(key, dsv)
        node, leaf = _find_node(cfg, key)
        if node is not None:
            node[leaf] = default
        add(key, "invalid",
            f"{key} is \"auto\", which neither HF nor accelerate fills: accelerate stops at prepare() (DeepSpeed's "
            f"default would be {_show(default)}).",
            actual="auto", expected=default,
            detail=(f"ValueError: `{key}` not found in kwargs. Please specify `{key}` without `auto` (set to correct "
                    "value) in the DeepSpeed config file or pass it in kwargs."),
            fix="set" if default is not None else None, fix_key=key, fix_value=default,
            fix_title=(f"Set {key} to {_show(default)}, DeepSpeed's default" if default is not None
                       else f"Set {key} to a value"))
    return cfg, filled, unresolved, dtypes


def _is_true(cfg: dict[str, Any], key: str) -> bool:
    node, leaf = _find_node(cfg, key)
    v = node.get(leaf) if node is not None else None
    return False if v is None else bool(v)


def _is_false(cfg: dict[str, Any], key: str) -> bool:
    node, leaf = _find_node(cfg, key)
    v = node.get(leaf) if node is not None else None
    return False if v is None else not bool(v)


def _reported_unknown(add: Any) -> set[str]:
    """Keys already reported as unknown/removed (an unknown key set to "auto" is one problem, not two)."""
    return {p.key for p in getattr(add, "problems", ()) if p.kind in ("unknown", "removed", "deprecated") and p.key}


def _flag(*vals: Any) -> Any:
    """HF's ``a or b`` over TrainingArguments flags, _UNKNOWN when the YAML is unknown."""
    if any(v is _UNKNOWN for v in vals):
        return _UNKNOWN
    return bool(any(vals))


def _add_mismatch(add: Any, key: str, hf_key: str, group: str, ds_val: Any, hf_val: Any, line: str) -> None:
    what = {
        "batch": "HF raises at trainer.train(), after the model has loaded",
        "clipping": "HF raises at trainer.train(); under DeepSpeed only DeepSpeed's gradient_clipping clips",
        "optimizer": "HF raises at trainer.train()",
        "scheduler": "HF raises at trainer.train()",
        "precision": "HF raises at trainer.train() (accelerate may refuse first: \"`--mixed_precision` arg cannot be "
                     "set to ...\")",
    }[group]
    add(key, "mismatch", f"{key}={_show(ds_val)} in the DeepSpeed config but {hf_key}={_show(hf_val)} from the YAML; "
                         f"{what}.",
        group=group, expected=hf_val, actual=ds_val, fix="auto", fix_title=f'Set {key} to "auto"',
        detail=f"ValueError: {_MISMATCH_HEAD}\n{line}\n{_MISMATCH_TAIL}")


def _ds_default(key: str, dsv: tuple[int, ...] | None) -> Any:
    parts = key.split(".")
    if parts[0] == "zero_optimization" and len(parts) == 2:
        spec = ZERO_FIELDS.get(parts[1]) or ZERO_FIELDS.get(_ZERO_BY_OTHER_NAME.get(parts[1], ""))
        return spec.default if spec else None
    if parts[0] == "zero_optimization" and len(parts) == 3:
        table = {"offload_param": OFFLOAD_PARAM_FIELDS, "offload_optimizer": OFFLOAD_OPTIMIZER_FIELDS}.get(parts[1])
        spec = table.get(parts[2]) if table else None
        if spec and parts[2] == "pin_memory":
            return _pin_memory_default(dsv)
        return spec.default if spec else None
    if parts[0] in ("fp16", "bf16") and len(parts) == 2:
        spec = (FP16_FIELDS if parts[0] == "fp16" else BF16_FIELDS).get(parts[1])
        return spec.default if spec else None
    return None


def _pin_memory_default(dsv: tuple[int, ...] | None) -> bool:
    # offload_*.pin_memory default False up to 0.19.4, True from 0.19.5 (PR #8207; schema.md §2 version notes)
    return _ge(dsv, "0.19.5")


def _defaults(raw: Mapping[str, Any], resolved: Mapping[str, Any], dsv: tuple[int, ...] | None) -> dict[str, Any]:
    zo_raw = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    zo_res = resolved.get("zero_optimization") if isinstance(resolved.get("zero_optimization"), dict) else {}
    present = set(zo_raw) | {ZERO_FIELDS[n].other_name for n in zo_raw if n in ZERO_FIELDS and ZERO_FIELDS[n].other_name}
    present |= {_ZERO_BY_OTHER_NAME[n] for n in zo_raw if n in _ZERO_BY_OTHER_NAME}
    out: dict[str, Any] = {}
    for k in MEMORY_ZERO_KEYS:
        if k in present:
            continue
        if k == "overlap_comm":   # validator overlap_comm_valid: None → True for stage 3, else False
            out[k] = _stage_of(resolved) == 3
        else:
            out[k] = ZERO_FIELDS[k].default
    for sec, table in (("offload_optimizer", OFFLOAD_OPTIMIZER_FIELDS), ("offload_param", OFFLOAD_PARAM_FIELDS)):
        o = zo_res.get(sec)
        if isinstance(o, dict):
            for k, spec in table.items():
                if k not in o and k not in ("nvme_path",):
                    out[f"{sec}.{k}"] = _pin_memory_default(dsv) if k == "pin_memory" else spec.default
    return out


# ---------------------------------------------------------------------------------------------------------------
# Facts for rules
# ---------------------------------------------------------------------------------------------------------------

def ds_facts(cfg: DSConfig) -> dict[str, Any]:
    """The ``ds`` fact namespace that rules read.

    It is the resolved config tree (``ds.zero_optimization.stage``, ``ds.bf16.enabled``, ...) plus these derived
    keys, none of which is a DeepSpeed key:

    ========================== ============================================================================
    ``path``                   the JSON file (None for an inline dict)
    ``problems``               list of `DSProblem` dicts, each with ``location`` {file, line, column, key}
    ``zero_stage``             ZeRO stage DeepSpeed runs, 0–3 (0 when absent/invalid)
    ``offload_optimizer_device`` / ``offload_param_device``  'cpu' | 'nvme' | None, as written (deprecated
                               cpu_offload / cpu_offload_param aliases map to 'cpu', as DeepSpeed maps them)
    ``offload_optimizer_active`` / ``offload_param_active``  whether the stage honours that offload
                               (optimizer: stage ≥ 1; param: stage 3 — misconfigs.md §9)
    ``ignored_offloads``       list of {key, device, stage, message, location} for offloads the stage ignores
    ``overlap_comm``           effective overlap_comm (explicit value, else True only for stage 3)
    ``reduce_bucket_size`` / ``allgather_bucket_size``  effective values (elements; None when unresolved)
    ``overlap_comm_buffer_gib`` HF docs' upper bound for overlap_comm with ZeRO-1/2: 4.5 × (reduce + allgather
                               bucket) elements × 2 bytes (fp16/bf16), in GiB; None when not applicable
    ``overlap_comm_known_bad`` True if the DeepSpeed version is in 0.17.2–0.19.2 (ZeRO-1/2 overlap gradient
                               corruption, misconfigs.md §6), False if outside, None if unknown
    ``fp16_enabled`` / ``bf16_enabled``  resolved booleans as DeepSpeed parses them
    ``gradient_clipping``      resolved value, or DeepSpeed's version default when absent
    ``explicit``               dotted keys written with a non-"auto" value
    ``unresolved``             dotted keys whose value needs facts we lack (world/hidden size, steps)
    ``defaults``               `DSConfig.defaults` (zero_optimization keys absent from the JSON)
    ``version``                DeepSpeed version assumed (None: newest known, 0.19.8)
    ``hf_dtype`` / ``hf_dtype_4x`` dtype HF uses for zero.Init/loading (transformers 5.x / 4.x rule,
                               hf_integration.md §2): 'bfloat16' | 'float16' | 'float32' (None: no YAML)
    ``notes``                  version caveats (list of str)
    ========================== ============================================================================
    """
    res = cfg.resolved
    zo = res.get("zero_optimization") if isinstance(res.get("zero_optimization"), dict) else {}
    raw_zo = cfg.raw.get("zero_optimization") if isinstance(cfg.raw.get("zero_optimization"), dict) else {}
    stage = cfg.zero_stage
    file = cfg.path or "<inline deepspeed>"

    def loc(key: str | None) -> dict[str, Any]:
        line, col = _locate(cfg.positions, key)
        return {"file": file, "line": line or (1 if cfg.path else None), "column": col, "key": key}

    def device(sec: str, alias: str) -> str | None:
        o = zo.get(sec)
        d = o.get("device") if isinstance(o, dict) else None
        if d in ("cpu", "nvme"):
            return d
        if _lax_bool(raw_zo.get(alias)) and not isinstance(o, dict):
            return "cpu"
        return None

    oo, op = device("offload_optimizer", "cpu_offload"), device("offload_param", "cpu_offload_param")
    ignored = []
    if op and stage != 3:
        key = "zero_optimization.offload_param" if "offload_param" in raw_zo else "zero_optimization.cpu_offload_param"
        ignored.append({"key": key, "device": op, "stage": stage, "location": loc(key),
                        "message": f"offload_param (device {op}) is honoured only by ZeRO stage 3; with stage "
                                   f"{stage} DeepSpeed ignores it and parameters stay on the GPU"})
    if oo and stage == 0:
        key = ("zero_optimization.offload_optimizer" if "offload_optimizer" in raw_zo
               else "zero_optimization.cpu_offload")
        ignored.append({"key": key, "device": oo, "stage": 0, "location": loc(key),
                        "message": f"offload_optimizer (device {oo}) needs a ZeRO stage of 1 or more; with stage 0 "
                                   "there is no ZeRO optimizer and the optimizer states stay on the GPU"})
    overlap = _lax_bool(zo.get("overlap_comm")) if zo.get("overlap_comm") is not None else None
    overlap = (stage == 3) if overlap is None else overlap
    rb, ab = cfg.get("zero_optimization.reduce_bucket_size"), cfg.get("zero_optimization.allgather_bucket_size")
    buf = None
    if overlap and stage in (1, 2) and isinstance(rb, (int, float)) and isinstance(ab, (int, float)):
        buf = 4.5 * (float(rb) + float(ab)) * 2 / float(1 << 30)
    dsv = parse_version(cfg.ds_version)
    bad = None if dsv is None else (parse_version("0.17.2") <= dsv <= parse_version("0.19.2"))  # type: ignore[operator]
    f16 = _lax_bool((res.get("fp16") or {}).get("enabled")) if isinstance(res.get("fp16"), dict) else False
    b16 = _lax_bool((res.get("bf16") or {}).get("enabled")) if isinstance(res.get("bf16"), dict) else False
    gc = res.get("gradient_clipping")
    if "gradient_clipping" not in cfg.raw:
        gc = 1.0 if _ge(dsv, "0.19.3") else 0.0

    facts: dict[str, Any] = copy.deepcopy(res)
    facts.update({
        "path": cfg.path,
        "problems": problem_dicts(cfg, cfg.problems),
        "zero_stage": stage,
        "offload_optimizer_device": oo,
        "offload_param_device": op,
        "offload_optimizer_active": bool(oo) and stage >= 1,
        "offload_param_active": bool(op) and stage == 3,
        "ignored_offloads": ignored,
        "overlap_comm": bool(overlap),
        "reduce_bucket_size": rb,
        "allgather_bucket_size": ab,
        "overlap_comm_buffer_gib": buf,
        "overlap_comm_known_bad": bad,
        "fp16_enabled": bool(f16),
        "bf16_enabled": bool(b16),
        "gradient_clipping": gc,
        "explicit": list(cfg.explicit),
        "unresolved": list(cfg.unresolved),
        "defaults": dict(cfg.defaults),
        "version": cfg.ds_version,
        "hf_dtype": cfg.hf_dtype,
        "hf_dtype_4x": cfg.hf_dtype_4x,
        "notes": list(cfg.notes),
    })
    return facts


def problem_dicts(cfg: DSConfig, problems: Any) -> list[dict[str, Any]]:
    """`DSProblem`s as the dicts of ``ds.problems``: every field plus ``location`` {file, line, column, key}.

    Use it for the problems `validate_with_deepspeed` returns, so they read like the others in rules.
    """
    file = cfg.path or "<inline deepspeed>"
    out = []
    for p in problems:
        line, col = _locate(cfg.positions, p.key)
        out.append(dict(p.as_dict(), location={"file": file, "line": line or (1 if cfg.path else None),
                                               "column": col, "key": p.key}))
    return out


# ---------------------------------------------------------------------------------------------------------------
# The installed DeepSpeed's own verdict (check command only; imports torch + deepspeed, ~2.5 s)
# ---------------------------------------------------------------------------------------------------------------

def validate_with_deepspeed(cfg: DSConfig) -> list[DSProblem] | None:
    """Validate with the installed DeepSpeed's config models; None when deepspeed is not importable.

    Two passes (schema.md §3): the pydantic section models (``DeepSpeedZeroConfig``, ``DeepSpeedFP16Config``,
    ``DeepSpeedBF16Config``) on the JSON as written — they report every field error at once — then
    ``DeepSpeedConfig`` on the resolved dict with ``deepspeed.comm.get_world_size/get_rank`` patched to the run's
    world size, which adds the batch identity, removed keys and the other config.py assertions (it stops at the
    first). Returns only problems that the vendored checks in `load_ds_config` did not already report for the same
    key, each of kind ``deepspeed`` with the DeepSpeed message in `detail`.
    """
    import contextlib
    import io

    # DeepSpeed's logger writes to stdout (utils/logging.py StreamHandler(sys.stdout)), e.g. "Setting accelerator to
    # CPU" on a GPU-less box; stdout carries the report (--format json), so everything it prints here is swallowed.
    # A logger first created inside this block stays bound to the buffer for the rest of the process.
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        return _validate_with_deepspeed(cfg)


def _validate_with_deepspeed(cfg: DSConfig) -> list[DSProblem] | None:
    try:
        import logging

        import deepspeed  # noqa: F401  (heavy: torch + deepspeed)
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    except Exception:  # ImportError, or a broken install raising anything at import
        return None
    from pydantic import ValidationError

    version = getattr(deepspeed, "__version__", None)
    known = {p.key for p in cfg.problems if p.kind in ("unknown", "removed", "type", "invalid", "deprecated")}
    static_errors = any(p.kind in ("unknown", "removed", "type", "invalid") or (p.kind == "mismatch" and not p.silent)
                        for p in cfg.problems)
    out: list[DSProblem] = []

    def add(key: str | None, detail: str) -> None:
        if key in known:
            return
        line, col = _locate(cfg.positions, key)
        out.append(DSProblem(key, "deepspeed", f"DeepSpeed {version} rejects the config: {detail.splitlines()[0]}",
                             line, col, detail=detail))

    ds_logger = logging.getLogger("DeepSpeed")
    old_level = ds_logger.level
    ds_logger.setLevel(logging.ERROR)   # deprecation warnings would land in the report's stdout
    try:
        for name, model in (("zero_optimization", DeepSpeedZeroConfig), ("fp16", DeepSpeedFP16Config),
                            ("bf16", DeepSpeedBF16Config)):
            sec = cfg.raw.get(name)
            if not isinstance(sec, dict):
                continue
            try:
                model(**sec)
            except ValidationError as err:
                for e in err.errors():
                    path = ".".join(str(x) for x in e.get("loc", ()))
                    key = f"{name}.{path}" if path else name
                    add(key, f"{e.get('msg')} [type={e.get('type')}]")
            except Exception as err:  # DeepSpeed asserts inside validators (deprecated + new together)
                add(name, f"{type(err).__name__}: {err}")
        if not out and not static_errors:   # DeepSpeed's verdict on a config the vendored checks accept
            err = _full_config_error(cfg)
            if err is not None:
                add(None, err)
    finally:
        ds_logger.setLevel(old_level)
    return out


def _full_config_error(cfg: DSConfig) -> str | None:
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    d = copy.deepcopy(cfg.resolved)
    for key in cfg.unresolved:           # let DeepSpeed derive what we could not fill
        node, leaf = _find_node(d, key)
        if node is not None:
            node.pop(leaf, None)
    world = cfg.world_size or 1
    saved = (dist.get_world_size, dist.get_rank)
    dist.get_world_size = lambda *a, **k: world  # type: ignore[assignment]
    dist.get_rank = lambda *a, **k: 0  # type: ignore[assignment]
    try:
        DeepSpeedConfig(d)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    finally:
        dist.get_world_size, dist.get_rank = saved  # type: ignore[assignment]
    return None


# ---------------------------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------------------------

def _find_node(cfg: dict[str, Any], dotted: str) -> tuple[dict[str, Any] | None, str]:
    """HF's find_config_node: the dict holding the last part of `dotted`, or None if a parent is missing."""
    parts = dotted.split(".")
    node: Any = cfg
    for p in parts[:-1]:
        node = node.get(p) if isinstance(node, dict) else None
        if node is None:
            return None, parts[-1]
    return (node, parts[-1]) if isinstance(node, dict) else (None, parts[-1])


def _leaf_items(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            yield from _leaf_items(v, path)
        else:
            yield path, v


def _leaf_paths(d: Mapping[str, Any]) -> Iterator[str]:
    for k, _ in _leaf_items(d):
        yield k


def _stage_value(v: Any) -> int | None:
    n = _lax_int(v)
    return n if n in (0, 1, 2, 3) else None


def _stage_of(resolved: Mapping[str, Any]) -> int:
    zo = resolved.get("zero_optimization")
    if isinstance(zo, bool):
        return 1 if zo else 0          # legacy boolean form → stage 1
    if not isinstance(zo, dict):
        return 0
    return _stage_value(zo.get("stage", 0)) or 0


def _lax_int(v: Any) -> int | None:
    """pydantic v2 lax int: ints, bools, integral floats, integer strings."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and v.is_integer() else None
    if isinstance(v, str):
        s = v.strip().replace("_", "")
        if s.lstrip("+-").isdigit():
            return int(s)
    return None


def _lax_float(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def _lax_bool(v: Any) -> bool | None:
    """pydantic v2 lax bool: bools, 0/1, and the usual true/false strings; None when it would reject."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return bool(v) if v in (0, 1) else None
    if isinstance(v, float):
        return bool(v) if v in (0.0, 1.0) else None
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return None


def _check_top_scalar(key: str, val: Any, add: Any) -> None:
    want = TOP_SCALARS[key]
    if val == "auto" or val is None:
        return
    if want == "bool":
        if not isinstance(val, bool):
            add(key, "type", f"{key} must be a JSON boolean; DeepSpeed reads it as written, so {_show(val)} counts as "
                             f"{bool(val)}.", actual=val, fix="set", fix_key=key,
                fix_value=_lax_bool(val) if _lax_bool(val) is not None else None,
                fix_title=f"Write {key} as true/false")
        return
    number = isinstance(val, (int, float)) and not isinstance(val, bool)
    if not number:
        add(key, "type", f"{key} must be a number, found {_jtype(val)} {_show(val)}; DeepSpeed compares it with "
                         "numbers and fails with TypeError.", actual=val,
            detail="TypeError: '>' not supported between instances of 'str' and 'int'" if isinstance(val, str) else None)
        return
    if want in ("posint", "int") and not float(val).is_integer():
        add(key, "type", f"{key} must be an integer, found {val}.", actual=val)
    elif want == "posint" and val <= 0:
        detail = {"train_batch_size": f"AssertionError: Train batch size: {val} has to be greater than 0",
                  "train_micro_batch_size_per_gpu": f"AssertionError: Micro batch size per gpu: {val} has to be "
                                                    "greater than 0",
                  "gradient_accumulation_steps": f"AssertionError: Gradient accumulation steps: {val} has to be "
                                                 "greater than 0"}[key]
        add(key, "invalid", f"{key} must be greater than 0, found {val}.", actual=val, detail=detail)
    elif want == "nonneg" and val < 0:
        add(key, "invalid", f"{key} must not be negative, found {val}.", actual=val)


def _section_model(prefix: str) -> str:
    return {"zero_optimization": "DeepSpeedZeroConfig", "fp16": "DeepSpeedFP16Config", "bf16": "DeepSpeedBF16Config",
            "bfloat16": "DeepSpeedBF16Config", "zero_optimization.offload_param": "DeepSpeedZeroOffloadParamConfig",
            "zero_optimization.offload_optimizer": "DeepSpeedZeroOffloadOptimizerConfig"}.get(prefix, prefix)


def _jtype(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _show(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


def _num_str(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _vs(v: tuple[int, ...] | None) -> str:
    return ".".join(str(x) for x in v) if v else f"{NEWEST_DS} (assumed)"
