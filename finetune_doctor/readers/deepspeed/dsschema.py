"""DeepSpeed's config schema, vendored: the keys, types, defaults and bounds DeepSpeed 0.19.8 checks, per version.

Sources: reference/deepspeed/schema.md §1-2 (generated from the installed DeepSpeed 0.19.8 pydantic models:
``deepspeed/runtime/zero/config.py`` DeepSpeedZeroConfig, ``runtime/zero/offload_config.py``,
``runtime/precision_config.py``), the first/last tag of every ZeRO key from zero_fields_by_version.txt and
misconfigs.md §12 (removed keys, ``runtime/config.py`` ``_REMOVED_*_CONFIG_KEYS``). The tables are checked against
the installed DeepSpeed by tests/test_dsconfig.py when it is importable.

Also here: the version helpers (`parse_version`, `installed_version`) and pydantic v2's lax coercions
(`lax_int`, `lax_float`, `lax_bool`), which the checks and the resolution share. Pure data and small functions:
no import of deepspeed, pydantic or torch.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from finetune_doctor.readers import limits

NEWEST_DS = "0.19.8"
"""The newest DeepSpeed whose schema is vendored here. A version of None means "assume this one"."""


# ---------------------------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------------------------

def parse_version(v: str | None) -> tuple[int, ...] | None:
    """``"0.19.8"``, ``"0.16.9+cu121"``, ``"5.0.0.dev0"`` → (0, 19, 8) etc. (every dotted number); None for None or
    garbage. numbers.parse_version reads it (the one reader of release strings)."""
    from finetune_doctor.numbers import parse_version as read

    return read(str(v), parts=None) if v else None


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution (None if absent): readers/dists.py, the one home of that answer."""
    from finetune_doctor.readers.dists import installed_version as found

    return found(dist)


def at_least(version: tuple[int, ...] | None, ref: str) -> bool:
    """True when `version` is at least `ref`; an unknown version counts as the newest known."""
    if version is None:
        return True
    return version >= parse_version(ref)  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------------------------
# Vendored schema (DeepSpeed 0.19.8 pydantic models, reference/deepspeed/schema.md §2; first/last tags per key from
# zero_fields_by_version.txt and misconfigs.md §12). `since`/`removed` are the first version that accepts / rejects.
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FieldSpec:
    """One field of a DeepSpeed pydantic section: its kind, default, bounds and version range."""

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

ZERO_FIELDS: dict[str, FieldSpec] = {
    "stage": FieldSpec("stage", 0),
    "contiguous_gradients": FieldSpec("bool", True),
    "reduce_scatter": FieldSpec("bool", True),
    "reduce_bucket_size": FieldSpec("int", 500_000_000, gt=0),
    "use_multi_rank_bucket_allreduce": FieldSpec("bool", True, since="0.12.4"),
    "allgather_partitions": FieldSpec("bool", True),
    "allgather_bucket_size": FieldSpec("int", 500_000_000, ge=0),
    "overlap_comm": FieldSpec("optbool", None),
    "compute_grad_norm": FieldSpec("bool", True, since="0.19.7"),
    "load_from_fp32_weights": FieldSpec("bool", True),
    "elastic_checkpoint": FieldSpec("bool", False),
    "offload_param": FieldSpec("section", None),
    "offload_optimizer": FieldSpec("section", None),
    "zenflow": FieldSpec("section", None, since="0.17.5"),
    "sub_group_size": FieldSpec("int", 1_000_000_000, ge=0),
    "cpu_offload_param": FieldSpec("optbool", None, deprecated=True, replaced_by="offload_param"),
    "cpu_offload_use_pin_memory": FieldSpec("optbool", None, deprecated=True),
    "cpu_offload": FieldSpec("optbool", None, deprecated=True, replaced_by="offload_optimizer"),
    "stage3_prefetch_bucket_size": FieldSpec("int", 50_000_000, ge=0, other_name="prefetch_bucket_size"),
    "stage3_param_persistence_threshold": FieldSpec("int", 100_000, ge=0, other_name="param_persistence_threshold"),
    "stage3_model_persistence_threshold": FieldSpec("int", _MAXSIZE, ge=0, other_name="model_persistence_threshold"),
    "stage3_max_live_parameters": FieldSpec("int", 1_000_000_000, ge=0, other_name="max_live_parameters"),
    "stage3_max_reuse_distance": FieldSpec("int", 1_000_000_000, ge=0, other_name="max_reuse_distance"),
    "stage3_gather_16bit_weights_on_model_save": FieldSpec("bool", False, other_name="gather_16bit_weights_on_model_save"),
    "stage3_module_granularity_threshold": FieldSpec("int", 0, since="0.16.0", other_name="module_granularity_threshold"),
    "stage3_use_all_reduce_for_fetch_params": FieldSpec("bool", False, since="0.14.3",
                                                 other_name="use_all_reduce_for_fetch_params"),
    "stage3_allgather_sequential": FieldSpec("bool", False, since="0.18.5", other_name="allgather_sequential"),
    "stage3_gather_fp16_weights_on_model_save": FieldSpec("bool", False, deprecated=True,
                                                   replaced_by="stage3_gather_16bit_weights_on_model_save"),
    "ignore_unused_parameters": FieldSpec("bool", True),
    "legacy_stage1": FieldSpec("bool", False),
    "round_robin_gradients": FieldSpec("bool", False),
    "parameter_alignment": FieldSpec("bool", False, since="0.19.7"),
    "zero_hpz_partition_size": FieldSpec("int", 1, ge=0, since="0.10.0"),
    "zero_quantized_weights": FieldSpec("bool", False, since="0.10.0"),
    "zero_quantized_nontrainable_weights": FieldSpec("bool", False, since="0.10.2"),
    "zero_quantized_gradients": FieldSpec("bool", False, since="0.10.0"),
    "memory_efficient_linear": FieldSpec("bool", True),
    "pipeline_loading_checkpoint": FieldSpec("bool", False, since=_BETWEEN_0_9_5_AND_0_12_6),
    "override_module_apply": FieldSpec("bool", True, since=_BETWEEN_0_9_5_AND_0_12_6),
    "log_trace_cache_warnings": FieldSpec("bool", False, since="0.16.4"),
    "enable_sanity_checks": FieldSpec("bool", False, since="0.17.6"),
    "save_muon_momentum_buffer_in_memory": FieldSpec("bool", False, since="0.18.9"),
    "leaf_module": FieldSpec("section", None, since="0.18.0"),
    # removed in 0.19.8 (runtime/config.py _REMOVED_ZERO_CONFIG_KEYS → DeepSpeedConfigError)
    "mics_shard_size": FieldSpec("int", -1, removed="0.19.8"),
    "mics_hierarchical_params_gather": FieldSpec("bool", False, removed="0.19.8"),
    "zeropp_loco_param": FieldSpec("section", None, since="0.16.2", removed="0.19.8"),
}
ZERO_BY_OTHER_NAME = {f.other_name: name for name, f in ZERO_FIELDS.items() if f.other_name}

OFFLOAD_PARAM_FIELDS: dict[str, FieldSpec] = {
    "device": FieldSpec("device", "none"),
    "nvme_path": FieldSpec("path", None),
    "buffer_count": FieldSpec("int", 5, ge=0),
    "buffer_size": FieldSpec("int", 100_000_000, ge=0),
    "max_in_cpu": FieldSpec("int", 1_000_000_000, ge=0),
    "pin_memory": FieldSpec("bool", True),          # False before 0.19.5 (PR #8207), see _pin_memory_default
}
OFFLOAD_OPTIMIZER_FIELDS: dict[str, FieldSpec] = {
    "device": FieldSpec("device", "none"),
    "nvme_path": FieldSpec("path", None),
    "buffer_count": FieldSpec("int", 4, ge=0),
    "pin_memory": FieldSpec("bool", True),
    "pipeline_read": FieldSpec("bool", False),
    "pipeline_write": FieldSpec("bool", False),
    "fast_init": FieldSpec("bool", False),
    "ratio": FieldSpec("float", 1.0, ge=0.0, le=1.0),
    "super_offload": FieldSpec("bool", False),
    "cpuadam_cores_perc": FieldSpec("float", 0.8, ge=0.0, le=1.0),
}
OFFLOAD_TABLES: dict[str, dict[str, FieldSpec]] = {"offload_param": OFFLOAD_PARAM_FIELDS,
                                                  "offload_optimizer": OFFLOAD_OPTIMIZER_FIELDS}
FP16_FIELDS: dict[str, FieldSpec] = {
    "enabled": FieldSpec("bool", False),
    "auto_cast": FieldSpec("bool", False),
    "loss_scale": FieldSpec("float", 0.0, ge=0.0),
    "initial_scale_power": FieldSpec("int", 16),
    "loss_scale_window": FieldSpec("int", 1000),
    "hysteresis": FieldSpec("int", 2),
    "consecutive_hysteresis": FieldSpec("bool", False),
    "min_loss_scale": FieldSpec("int", 1),
    "fp16_master_weights_and_grads": FieldSpec("bool", False),
}
BF16_FIELDS: dict[str, FieldSpec] = {
    "enabled": FieldSpec("bool", False),
    "immediate_grad_update": FieldSpec("bool", False),
    "check_grad_overflow": FieldSpec("bool", True),
    "bf16_master_weights_and_grads": FieldSpec("bool", False),
    "bf16_optimizer_states": FieldSpec("bool", False),
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
TOP_KEYS_SORTED = tuple(sorted(TOP_KEYS))
TOP_SINCE = {"log_level": "0.19.3"}
# Top-level keys DeepSpeed reads as objects: a string, list, number or null there makes DeepSpeedConfig raise
# (TypeError from a pydantic section's ``Model(**value)``, AttributeError from ``value.get``/``.keys()``, or a
# ValidationError). Found by feeding "x", [1] and 5 to DeepSpeedConfig 0.19.8 (tests/test_ds_hostile.py repeats it).
# zero_optimization also takes the legacy boolean (get_zero_config → read_zero_config_deprecated).
TOP_SECTIONS = frozenset("""
bf16 bfloat16 checkpoint comet comms_logger compile csv_monitor data_efficiency data_types expert_parallel fp16
hybrid_engine pipeline tensor_parallel tensorboard torch_autocast wandb weight_quantization zero_optimization optimizer
scheduler activation_checkpointing flops_profiler autotuning aio
""".split())
# Sections whose ``params`` DeepSpeed hands to a constructor as keyword arguments (runtime/config.py
# get_optimizer_params / get_scheduler_params): it must be an object too.
PARAMS_SECTIONS = ("optimizer", "scheduler")
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

def stage_value(v: Any) -> int | None:
    """The ZeRO stage `v` coerces to (pydantic's enum over lax ints), or None when DeepSpeed rejects it."""
    n = lax_int(v)
    return n if n in (0, 1, 2, 3) else None


def stage_of(resolved: Mapping[str, Any]) -> int:
    """The ZeRO stage DeepSpeed runs for a config dict: 0 when absent or invalid, 0/1 for the legacy boolean."""
    zo = resolved.get("zero_optimization")
    if isinstance(zo, bool):
        return 1 if zo else 0          # legacy boolean form → stage 1
    if not isinstance(zo, dict):
        return 0
    return stage_value(zo.get("stage", 0)) or 0


def lax_int(v: Any) -> int | None:
    """pydantic v2 lax int: ints, bools, integral floats, integer strings."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and v.is_integer() else None
    if isinstance(v, str):
        s = v.strip().replace("_", "")
        # a digit string longer than Python converts is one pydantic refuses too (int_parsing_size)
        if s.lstrip("+-").isdigit() and len(s) <= limits.MAX_INT_DIGITS:
            return int(s)
    return None


def lax_float(v: Any) -> float | None:
    """pydantic v2 lax float: numbers, bools and numeric strings; an int too large for a float is ±inf."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, float):
        return v
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def lax_bool(v: Any) -> bool | None:
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


def section_model(prefix: str) -> str:
    """The pydantic model DeepSpeed validates the section at dotted `prefix` with (the prefix itself if none)."""
    return {"zero_optimization": "DeepSpeedZeroConfig", "fp16": "DeepSpeedFP16Config", "bf16": "DeepSpeedBF16Config",
            "bfloat16": "DeepSpeedBF16Config", "zero_optimization.offload_param": "DeepSpeedZeroOffloadParamConfig",
            "zero_optimization.offload_optimizer": "DeepSpeedZeroOffloadOptimizerConfig",
            "zero_optimization.zenflow": "ZenFlowConfig",
            "zero_optimization.leaf_module": "DeepSpeedZeroLeafModuleConfig"}.get(prefix, prefix)




def pin_memory_default(dsv: tuple[int, ...] | None) -> bool:
    """offload_*.pin_memory default: False up to 0.19.4, True from 0.19.5 (PR #8207; schema.md §2 version notes)."""
    return at_least(dsv, "0.19.5")


def ds_default(key: str, dsv: tuple[int, ...] | None) -> Any:
    """DeepSpeed's default for a dotted key of a pydantic section (zero_optimization, its offload blocks,
    fp16/bf16), None when the key has none or is not one of those."""
    parts = key.split(".")
    spec = None
    if parts[0] == "zero_optimization" and len(parts) == 2:
        spec = ZERO_FIELDS.get(parts[1]) or ZERO_FIELDS.get(ZERO_BY_OTHER_NAME.get(parts[1], ""))
    elif parts[0] == "zero_optimization" and len(parts) == 3:
        table = OFFLOAD_TABLES.get(parts[1])
        spec = table.get(parts[2]) if table else None
        if spec and parts[2] == "pin_memory":
            return pin_memory_default(dsv)
    elif parts[0] in ("fp16", "bf16") and len(parts) == 2:
        spec = (FP16_FIELDS if parts[0] == "fp16" else BF16_FIELDS).get(parts[1])
    return spec.default if spec else None


def version_text(v: tuple[int, ...] | None) -> str:
    """``0.19.8`` for a parsed version; the newest vendored one marked "(assumed)" for None."""
    return ".".join(str(x) for x in v) if v else f"{NEWEST_DS} (assumed)"


def json_type(v: Any) -> str:
    """The JSON type name of a parsed value: null | boolean | number | string | array | object."""
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
