"""Check a DeepSpeed config dict against the vendored schema (readers/deepspeed/dsschema.py), as DeepSpeed would judge it.

What DeepSpeed's pydantic models (``extra="forbid"``) and ``runtime/config.py`` reject, what they accept with a
deprecation warning, and what they silently ignore, for a target DeepSpeed version; each finding is a `DSProblem`
(readers/deepspeed/dsproblem.py) with the upstream error text DeepSpeed or pydantic would print. Besides the problems, the
check records `fallbacks`: for every value DeepSpeed would reject, the value the run model uses instead
(DeepSpeed's default, or the section dropped), so that what reaches the memory model and the rules always has the
schema's type (readers/deepspeed/dsconfig.py applies them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from finetune_doctor.readers.deepspeed import dsschema as S
from finetune_doctor.readers import limits
from finetune_doctor.readers.deepspeed.dsproblem import (SRC_ACCELERATE, SRC_CONFIG, SRC_OFFLOAD, SRC_PRECISION, SRC_ZERO,
                                               Problems)

DROP = object()
"""A fallback that removes the key from the run model (a section of the wrong type)."""

MAX_UNKNOWN_PER_SECTION = 50
"""Unknown keys reported one by one per section; the rest are folded into one problem (check ``unknown_more``).
A real config has at most a handful of typos; a generated one with 200k keys must stay linear and readable."""

_SOURCES = {"zero_optimization": SRC_ZERO, "fp16": SRC_PRECISION, "bf16": SRC_PRECISION, "bfloat16": SRC_PRECISION,
            "zero_optimization.offload_param": SRC_OFFLOAD, "zero_optimization.offload_optimizer": SRC_OFFLOAD}
_ENUM_STAGE = "Input should be 0, 1, 2, 3 or 3"


@dataclass
class Checker:
    """The state of one check: the target version, the problems, the fallbacks and the unknown-key counts."""

    dsv: tuple[int, ...] | None
    out: Problems
    fallbacks: dict[str, Any] = field(default_factory=dict)
    unknown: dict[str, list[str]] = field(default_factory=dict)

    def add(self, key: str | None, kind: str, check: str, **kw: Any) -> None:
        self.out.add(key, kind, check, **kw)

    def fall_back(self, key: str, value: Any) -> None:
        self.fallbacks[key] = value

    def unknown_slot(self, section: str, key: str) -> bool:
        """True while `section` has had fewer than MAX_UNKNOWN_PER_SECTION unknown keys reported one by one."""
        seen = self.unknown.setdefault(section, [])
        seen.append(key)
        return len(seen) <= MAX_UNKNOWN_PER_SECTION


def check_schema(raw: Mapping[str, Any], dsv: tuple[int, ...] | None, out: Problems) -> dict[str, Any]:
    """Add to `out` every problem DeepSpeed's schema has with `raw`; returns the fallbacks (dotted key → value
    used instead, or DROP)."""
    ck = Checker(dsv, out)
    for key, val in raw.items():
        _check_top_key(ck, key, val)
    zo = raw.get("zero_optimization", DROP)
    if zo is DROP:
        ck.add("zero_optimization", "invalid", "missing_zero", source=SRC_ACCELERATE,
               detail="ValueError: Please specify the ZeRO optimization config in the DeepSpeed config.",
               fix="set", fix_key="zero_optimization.stage", fix_value=0)
    elif isinstance(zo, bool):
        stage = 1 if zo else 0
        ck.add("zero_optimization", "deprecated", "legacy_bool_zero", actual=zo, stage=stage,
               source="deepspeed/runtime/zero/config.py read_zero_config_deprecated",
               detail="DeepSpeedConfig: this format of ZeRO optimization setup is deprecated.")
        legacy: dict[str, Any] = {"stage": stage}
        size = raw.get("allgather_size", 500_000_000)
        if stage and isinstance(size, (int, float)) and not isinstance(size, bool) and 0 <= size <= limits.INT64_MAX:
            legacy["allgather_bucket_size"] = size
        ck.fall_back("zero_optimization", legacy)
    elif isinstance(zo, dict):
        _check_section(ck, "zero_optimization", zo, S.ZERO_FIELDS, pydantic=True)
        _check_zero_relations(ck, zo)
    for name, table in (("fp16", S.FP16_FIELDS), ("bf16", S.BF16_FIELDS), ("bfloat16", S.BF16_FIELDS)):
        sec = raw.get(name, DROP)
        if sec is DROP:
            continue
        if name == "bfloat16":
            ck.add(name, "deprecated", "legacy_bfloat16", source=SRC_PRECISION, fix="rename", fix_key="bf16")
        if isinstance(sec, dict):
            pyd = S.at_least(dsv, S.PRECISION_PYDANTIC_SINCE)
            _check_section(ck, name, sec, table, pydantic=pyd)
            if name == "fp16" and pyd:
                _check_fp16_relations(ck, sec)
    if "train_batch_size" not in raw and "train_micro_batch_size_per_gpu" not in raw:
        ck.add("train_micro_batch_size_per_gpu", "invalid", "no_batch_size", source=SRC_CONFIG,
               detail="AssertionError: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided",
               fix="set", fix_key="train_micro_batch_size_per_gpu", fix_value="auto")
    op = raw.get("gradient_allreduce_op")
    if op == "sum" and isinstance(zo, dict) and S.stage_value(zo.get("stage")) == 3:
        ck.add("gradient_allreduce_op", "invalid", "allreduce_sum_zero3", actual=op, source=SRC_CONFIG)
    _fold_unknown(ck)
    return ck.fallbacks


def _check_top_key(ck: Checker, key: str, val: Any) -> None:
    if key in S.TOP_REMOVED:
        _report_removed(ck, key, S.TOP_REMOVED[key])
        return
    if key not in S.TOP_KEYS:
        if not ck.unknown_slot("", key):
            return
        near = _close(key, S.TOP_KEYS_SORTED, 0.8)
        if near:
            ck.add(key, "ignored", "unknown_top", suggestion=near, actual=val, source=SRC_CONFIG, fix="rename",
                   fix_key=near)
        else:
            ck.add(key, "ignored", "unknown_top", actual=val, source=SRC_CONFIG)
        return
    since = S.TOP_SINCE.get(key)
    if since and ck.dsv is not None and not S.at_least(ck.dsv, since):
        ck.add(key, "ignored", "too_new_top", since=since, actual=val, source=SRC_CONFIG)
    if key in S.TOP_SECTIONS and not isinstance(val, dict) and not (key == "zero_optimization"
                                                                     and isinstance(val, bool)):
        model = S.section_model(key)
        pydantic = model != key and (key == "zero_optimization" or S.at_least(ck.dsv, S.PRECISION_PYDANTIC_SINCE))
        ck.add(key, "type", "not_object", actual=val, source=_SOURCES.get(key, SRC_CONFIG),
               detail=(f"TypeError: {model}() argument after ** must be a mapping, not {type(val).__name__}"
                       if pydantic else None))
        ck.fall_back(key, DROP)
    elif key in S.PARAMS_SECTIONS and "params" in val and not isinstance(val["params"], dict):
        ck.add(f"{key}.params", "type", "not_object", actual=val["params"], source=SRC_CONFIG)
        ck.fall_back(f"{key}.params", DROP)
    if key in S.TOP_SCALARS:
        _check_top_scalar(ck, key, val)


def _fold_unknown(ck: Checker) -> None:
    """One problem for the unknown keys of a section past the first MAX_UNKNOWN_PER_SECTION."""
    for section, keys in ck.unknown.items():
        extra = keys[MAX_UNKNOWN_PER_SECTION:]
        if not extra:
            continue
        first = extra[0]
        if section == "":
            ck.add(first, "ignored", "unknown_more", count=len(extra), source=SRC_CONFIG)
        else:
            ck.add(f"{section}.{first}", "unknown", "unknown_more", count=len(extra), source=_SOURCES.get(section),
                   detail=f"{S.section_model(section)}: {first} Extra inputs are not permitted [type=extra_forbidden]")


def _close(word: str, choices: tuple[str, ...], cutoff: float) -> str | None:
    import difflib   # only when a key is unknown: keeps the clean lint path's import cost down

    got = difflib.get_close_matches(word, choices, n=1, cutoff=cutoff)
    return got[0] if got else None


def _report_removed(ck: Checker, key: str, why: str, removed: str = "0.19.8") -> None:
    detail = f"deepspeed.runtime.config.DeepSpeedConfigError: {why}"
    if ck.dsv is None:
        ck.add(key, "deprecated", "removed_later", removed=removed, source=SRC_CONFIG, detail=detail, fix="delete")
    elif S.at_least(ck.dsv, removed):
        ck.add(key, "removed", "removed", removed=removed, source=SRC_CONFIG, detail=detail, fix="delete")


def _check_section(ck: Checker, prefix: str, sec: Mapping[str, Any], table: Mapping[str, S.FieldSpec],
                   pydantic: bool) -> None:
    for key, val in sec.items():
        dotted = f"{prefix}.{key}"
        spec_name = key if key in table else S.ZERO_BY_OTHER_NAME.get(key) if table is S.ZERO_FIELDS else None
        spec = table.get(spec_name) if spec_name else None
        if spec is None:
            _unknown_in_section(ck, prefix, key, val, table, pydantic)
            continue
        if spec.removed:
            if spec.since and ck.dsv is not None and not S.at_least(ck.dsv, spec.since):
                pass  # too old to know it at all: reported below as unknown
            elif ck.dsv is None or S.at_least(ck.dsv, spec.removed):
                _report_removed(ck, dotted, S.ZERO_REMOVED_WHY.get(key, "removed."), removed=spec.removed)
                continue
        if spec.since and ck.dsv is not None and not S.at_least(ck.dsv, spec.since):
            ck.add(dotted, "unknown", "too_new", since=spec.since, actual=val, source=_SOURCES.get(prefix),
                   detail=f"{S.section_model(prefix)}: {key} Extra inputs are not permitted [type=extra_forbidden]",
                   fix="delete")
            continue
        if spec.deprecated:
            _report_deprecated(ck, prefix, key, spec, sec, val)
        if val == "auto":
            continue  # HF/accelerate fill it, or the unfilled-auto check reports it
        _check_value(ck, dotted, val, spec, pydantic)
        sub = S.OFFLOAD_TABLES.get(key) if spec.kind == "section" else None
        if sub is not None and isinstance(val, dict):
            _check_section(ck, dotted, val, sub, pydantic=True)


def _unknown_in_section(ck: Checker, prefix: str, key: str, val: Any, table: Mapping[str, S.FieldSpec],
                        pydantic: bool) -> None:
    dotted = f"{prefix}.{key}"
    if not ck.unknown_slot(prefix, key):
        return
    if not pydantic:
        ck.add(dotted, "ignored", "unknown_plain", actual=val, source=SRC_CONFIG)
        return
    near = _close(key, tuple(sorted(table)), 0.75)
    model = S.section_model(prefix)
    ck.add(dotted, "unknown", "unknown_key", suggestion=near, actual=val, source=_SOURCES.get(prefix),
           fix="rename" if near else "delete", fix_key=f"{prefix}.{near}" if near else None,
           detail=(f"ValueError: `{dotted}` not found in kwargs. Please specify `{dotted}` without `auto` (set "
                   "to correct value) in the DeepSpeed config file or pass it in kwargs." if val == "auto" else
                   f"{model}: {key} Extra inputs are not permitted [type=extra_forbidden]"))


def _report_deprecated(ck: Checker, prefix: str, key: str, spec: S.FieldSpec, sec: Mapping[str, Any],
                       val: Any) -> None:
    dotted = f"{prefix}.{key}"
    new = spec.replaced_by
    new_spec = S.ZERO_FIELDS.get(new) if new else None
    if new and (new in sec or (new_spec and new_spec.other_name in sec)):
        ck.add(dotted, "invalid", "deprecated_both", replaced_by=f"{prefix}.{new}", source=SRC_ZERO,
               detail=f"AssertionError: Cannot provide deprecated parameter '{key}' and replacing parameter "
                      f"'{(new_spec.other_name if new_spec else None) or new}' together", fix="delete")
        return
    if key in ("cpu_offload", "cpu_offload_param"):
        # a false alias offloads nothing: removing it is the whole repair
        fix: dict[str, Any] = (dict(fix="rename", fix_key=f"{prefix}.{new}", fix_value={"device": "cpu"}) if val
                               else dict(fix="delete"))
    elif new:
        fix = dict(fix="rename", fix_key=f"{prefix}.{new}", fix_value=val)
    else:
        fix = dict(fix="delete")
    ck.add(dotted, "deprecated", "deprecated_alias", replaced_by=f"{prefix}.{new}" if new else None,
           suggestion=fix.get("fix_key"), actual=val, source=SRC_ZERO,
           detail=f"Config parameter {key} is deprecated" + (f" use {new} instead" if new else ""), **fix)


def _check_value(ck: Checker, dotted: str, val: Any, spec: S.FieldSpec, pydantic: bool) -> None:
    """Type, enum and bound of one value of a pydantic section, with pydantic's own words; a rejected value falls
    back to the field's default."""
    prefix, leaf = dotted.rsplit(".", 1)
    model = S.section_model(prefix)
    before = len(ck.out.items)

    def bad(kind: str, msg: str, ptype: str) -> None:
        ck.add(dotted, kind, "pydantic", actual=val, error=ptype, error_msg=msg, source=_SOURCES.get(prefix),
               detail=f"{model}: {leaf} {msg} [type={ptype}]")

    k = spec.kind
    if k in ("int", "stage"):
        _check_int(ck, dotted, val, spec, pydantic, bad)
    elif k == "float":
        x = S.lax_float(val)
        if x is None:
            bad("type", "Input should be a valid number", "float_type")
        elif dotted.endswith("fp16.loss_scale") and not math.isfinite(x):
            bad("invalid", "fp16.loss_scale must be a finite number (not inf/-inf/nan)", "value_error")
        elif not math.isfinite(x):
            bad("invalid", "Input should be a finite number", "finite_number")
        else:
            _check_bounds(x, spec, bad)
    elif k in ("bool", "optbool"):
        if not (val is None and k == "optbool") and S.lax_bool(val) is None:
            bad("type", "Input should be a valid boolean" + (", unable to interpret input"
                                                             if isinstance(val, (str, int)) else ""),
                "bool_parsing" if isinstance(val, (str, int)) else "bool_type")
    elif k == "device":
        if val not in ("none", "cpu", "nvme"):
            bad("invalid", "Input should be 'none', 'cpu' or 'nvme'", "enum")
    elif k == "section":
        if val is not None and not isinstance(val, dict):
            bad("type", f"Input should be a valid dictionary or instance of {S.section_model(dotted)}", "model_type")
    elif k == "path":
        if val is not None and not isinstance(val, str):
            bad("type", "Input should be a valid path", "path_type")
    if len(ck.out.items) > before:
        ck.fall_back(dotted, spec.default if leaf != "pin_memory" else S.pin_memory_default(ck.dsv))


def _check_int(ck: Checker, dotted: str, val: Any, spec: S.FieldSpec, pydantic: bool, bad: Any) -> None:
    stage = spec.kind == "stage"
    n = S.lax_int(val)
    if n is None:
        if isinstance(val, float) and not math.isfinite(val):
            bad("invalid", _ENUM_STAGE, "enum") if stage else bad("invalid", "Input should be a finite number",
                                                                   "finite_number")
        elif isinstance(val, float) and not val.is_integer():
            if stage:
                bad("invalid", _ENUM_STAGE, "enum")
            elif pydantic and S.at_least(ck.dsv, S.PYDANTIC_V2_SINCE):
                bad("type", "Input should be a valid integer, got a number with a fractional part", "int_from_float")
            else:
                ck.fall_back(dotted, int(val))   # pydantic v1 truncated it
        elif stage:
            bad("invalid", _ENUM_STAGE, "enum")
        elif isinstance(val, str):
            too_long = val.strip().lstrip("+-").isdigit()
            bad("type", "Unable to parse input string as an integer, exceeded maximum size" if too_long else
                "Input should be a valid integer, unable to parse string as an integer",
                "int_parsing_size" if too_long else "int_parsing")
        else:
            bad("type", "Input should be a valid integer", "int_type")
        return
    if isinstance(val, float) and abs(val) > limits.INT64_MAX:
        # pydantic-core converts floats to integers through i64 only
        bad("invalid", "Unable to parse input string as an integer, exceeded maximum size", "int_parsing_size")
        return
    if stage:
        if n not in (0, 1, 2, 3):
            bad("invalid", _ENUM_STAGE, "enum") if abs(n) <= limits.INT64_MAX else bad(
                "invalid", "Unable to parse input string as an integer, exceeded maximum size", "int_parsing_size")
        return
    if abs(n) > limits.INT64_MAX:
        ck.add(dotted, "invalid", "int64_range", actual=val, expected=limits.INT64_MAX,
               source="torch tensor sizes (int64)")
        return
    _check_bounds(n, spec, bad)


def _check_bounds(x: float, spec: S.FieldSpec, bad: Any) -> None:
    if spec.gt is not None and not x > spec.gt:
        bad("invalid", f"Input should be greater than {_num(spec.gt)}", "greater_than")
    elif spec.ge is not None and not x >= spec.ge:
        bad("invalid", f"Input should be greater than or equal to {_num(spec.ge)}", "greater_than_equal")
    elif spec.le is not None and not x <= spec.le:
        bad("invalid", f"Input should be less than or equal to {_num(spec.le)}", "less_than_equal")


def _check_zero_relations(ck: Checker, zo: Mapping[str, Any]) -> None:
    stage = S.stage_value(zo.get("stage", 0))
    raw_stage = zo.get("stage")
    if stage is not None and raw_stage != "auto" and isinstance(raw_stage, (str, bool, float)):
        # HfDeepSpeedConfig keeps the raw value and tests `_stage == 3`; DeepSpeed's enum coerces it
        ck.add("zero_optimization.stage", "type", "stage_not_int", actual=raw_stage, expected=stage, stage=stage,
               source="transformers integrations/deepspeed.py HfDeepSpeedConfig.is_zero3", fix="set",
               fix_key="zero_optimization.stage", fix_value=stage)
        ck.fall_back("zero_optimization.stage", stage)
    oo = zo.get("offload_optimizer")
    if isinstance(oo, dict) and stage is not None and stage != 3:
        r = S.lax_float(oo.get("ratio", 1.0))
        if r is not None and r < 1.0:
            ck.add("zero_optimization.offload_optimizer.ratio", "invalid", "partial_offload", actual=oo.get("ratio"),
                   stage=stage, source=SRC_ZERO,
                   detail="Assertion failed, Partial offloading only supported for ZeRO Stage 3. "
                          "[type=assertion_error]")
    if (stage == 3 and "compute_grad_norm" in zo and S.lax_bool(zo["compute_grad_norm"]) is False
            and S.at_least(ck.dsv, "0.19.7")):
        ck.add("zero_optimization.compute_grad_norm", "invalid", "compute_grad_norm_zero3",
               actual=zo["compute_grad_norm"], stage=3, source=SRC_ZERO,
               detail="Value error, compute_grad_norm=false is supported only with ZeRO Stage 1 or 2")
    for sec in ("offload_optimizer", "offload_param"):
        o = zo.get(sec)
        if isinstance(o, dict) and o.get("device") == "nvme" and not o.get("nvme_path"):
            ck.add(f"zero_optimization.{sec}.device", "invalid", "nvme_no_path", actual="nvme",
                   source="deepspeed/runtime/swap_tensor (AsyncPartitionedParameterSwapper)")


def _check_fp16_relations(ck: Checker, sec: Mapping[str, Any]) -> None:
    # validators of DeepSpeedFP16Config (precision_config.py): loss_scale_window / min_loss_scale > 0 under dynamic
    # scaling (0.19.3+), bools rejected for them.
    if not S.at_least(ck.dsv, "0.19.3"):
        return
    for k in ("loss_scale_window", "min_loss_scale"):
        if isinstance(sec.get(k), bool):
            msg = f"fp16.{k} must be an integer, not bool"
            ck.add(f"fp16.{k}", "type", "fp16_relation", actual=sec[k], error="value_error", error_msg=msg,
                   source=SRC_PRECISION, detail=f"Value error, {msg}")
            ck.fall_back(f"fp16.{k}", S.FP16_FIELDS[k].default)
    enabled = sec.get("enabled")
    loss_scale = S.lax_float(sec.get("loss_scale", 0))
    if enabled is True and loss_scale == 0:  # "auto" is judged after resolution by DeepSpeed itself
        for k, default in (("loss_scale_window", 1000), ("min_loss_scale", 1)):
            n = S.lax_int(sec.get(k, default))
            if n is not None and n <= 0:
                msg = f"fp16.{k} must be > 0 when dynamic loss scaling is enabled (loss_scale=0)"
                ck.add(f"fp16.{k}", "invalid", "fp16_relation", actual=sec.get(k), error="value_error", error_msg=msg,
                       source=SRC_PRECISION, detail=f"Value error, {msg}")
                ck.fall_back(f"fp16.{k}", default)


_BATCH_ASSERT = {"train_batch_size": "Train batch size", "train_micro_batch_size_per_gpu": "Micro batch size per gpu",
                 "gradient_accumulation_steps": "Gradient accumulation steps"}


def _check_top_scalar(ck: Checker, key: str, val: Any) -> None:
    """The plain-getter scalars of runtime/config.py: no coercion, so a wrong type crashes or is misread."""
    want = S.TOP_SCALARS[key]
    if val == "auto" or val is None:
        return
    if want == "bool":
        if not isinstance(val, bool):
            lax = S.lax_bool(val)
            ck.add(key, "type", "top_bool", actual=val, expected=bool(val), source=SRC_CONFIG,
                   fix="set" if lax is not None else None, fix_key=key, fix_value=lax)
        return
    if not isinstance(val, (int, float)) or isinstance(val, bool):
        ck.add(key, "type", "top_number", actual=val, source=SRC_CONFIG,
               detail="TypeError: '>' not supported between instances of 'str' and 'int'" if isinstance(val, str)
               else None)
        ck.fall_back(key, None)
        return
    if want == "nonneg":
        if val < 0:
            ck.add(key, "invalid", "top_negative", actual=val, source=SRC_CONFIG)
    elif isinstance(val, float) and not (math.isfinite(val) and val.is_integer()):
        ck.add(key, "type", "top_integer", actual=val, source=SRC_CONFIG)
        ck.fall_back(key, None)
    elif abs(val) > limits.INT64_MAX:
        ck.add(key, "invalid", "int64_range", actual=val, expected=limits.INT64_MAX,
               source="torch tensor sizes (int64)")
        ck.fall_back(key, None)
    elif want == "posint" and val <= 0:
        ck.add(key, "invalid", "top_positive", actual=val, source=SRC_CONFIG,
               detail=f"AssertionError: {_BATCH_ASSERT[key]}: {val} has to be greater than 0")
        ck.fall_back(key, None)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
