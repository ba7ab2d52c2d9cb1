"""What is wrong in a DeepSpeed config, as data: the `DSProblem` value the DeepSpeed readers return.

A problem names the key, the kind and the check that found it, the values involved and the upstream source of the
check (DeepSpeed's or HF's file and, where the runtime prints one, its exact error text). It holds no prose of our
own: the rules in ``rules/deepspeed-*.yaml`` word the message and the fix title from these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

# Where each family of checks comes from (the upstream code that raises, warns or silently changes the value).
SRC_ZERO = "deepspeed/runtime/zero/config.py DeepSpeedZeroConfig"
SRC_OFFLOAD = "deepspeed/runtime/zero/offload_config.py"
SRC_PRECISION = "deepspeed/runtime/precision_config.py"
SRC_CONFIG = "deepspeed/runtime/config.py DeepSpeedConfig"
SRC_HF = "transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig"
SRC_ACCELERATE = "accelerate utils/dataclasses.py DeepSpeedPlugin / accelerator.py _prepare_deepspeed"
SRC_JSON = "transformers integrations/deepspeed.py HfDeepSpeedConfig (json.load)"

# Every check a DeepSpeed reader emits (DSProblem.check): the values rules/deepspeed-*.yaml's message tables may name
# (facts/ds.py declares them; tests/test_ds_rules.py pins this list against the readers' source).
DS_CHECKS = (
    "unknown_key", "unknown_more", "too_new", "removed", "missing_zero", "not_object", "no_batch_size",
    "allreduce_sum_zero3", "deprecated_both", "pydantic", "fp16_relation", "stage_not_int", "partial_offload",
    "compute_grad_norm_zero3", "nvme_no_path", "int64_range", "top_bool", "top_number", "top_integer",
    "top_positive", "top_negative", "prefetch_float", "unfilled_auto", "deepspeed", "mismatch", "gas_absent",
    "precision_no_enabled", "both_halves", "unknown_top", "removed_later", "legacy_bool_zero", "legacy_bfloat16",
    "deprecated_alias", "duplicate", "unknown_plain", "too_new_top",
)


@dataclass(frozen=True)
class DSProblem:
    """One thing in the DeepSpeed JSON that the runtime rejects, ignores or silently changes.

    `key` is the dotted key path (``zero_optimization.stage``), None for the file as a whole; `line`/`column` are
    1-based positions in the JSON (None when the key is absent). `kind` is what rules select on:

    * ``unknown``   a key a pydantic section rejects (``extra_forbidden``) for the target DeepSpeed version;
    * ``removed``   a key the target DeepSpeed removed and rejects (``DeepSpeedConfigError``);
    * ``type``      a value of the wrong type (pydantic error, or a plain getter that would crash/misread it);
    * ``invalid``   a value or structure the runtime rejects (bad enum, constraint, unfilled ``"auto"``, missing
      section/keys, a number out of range);
    * ``mismatch``  an explicit value that contradicts the YAML (`group` batch|precision|clipping|optimizer|
      scheduler); `silent` True when nothing raises and the YAML value is just not used;
    * ``deprecated`` a deprecated alias, or a key removed in a newer DeepSpeed when the version is unknown;
    * ``ignored``   a key DeepSpeed never reads (`suggestion` set when it looks like a typo);
    * ``duplicate`` a key given twice (``json.load`` keeps the last value silently);
    * ``deepspeed`` an error raised by the installed DeepSpeed itself (`validate_with_deepspeed`).

    `check` names the exact check within the kind (``unknown_key``, ``pydantic``, ``mismatch``, ...: the list is in
    rules/deepspeed-*.yaml, which word each). The values involved: `actual` (as written), `expected` (what HF/LF
    would use, or DeepSpeed's default), `suggestion` (a did-you-mean key), `hf_key` (the TrainingArguments field a
    mismatch compares with), `replaced_by` (the key a deprecated alias maps to), `since`/`removed` (the DeepSpeed
    version that added/removed the key), `stage`, `count` (keys folded into one problem), `version` (the installed DeepSpeed whose verdict a
    ``deepspeed`` problem is), `error` and
    `error_msg` (pydantic's error type and text). `source` is the upstream code of the check; `detail` the exact
    upstream error text, `upstream` its most specific single line (for a mismatch the ``- ds KEY=V vs hf ARG=V``
    line HF prints). `fix`/`fix_key`/`fix_value` describe the mechanical edit that repairs it (``auto``: set `key`
    to "auto"; ``set``: set `fix_key` to `fix_value`; ``rename``: move the value of `key` to `fix_key`;
    ``delete``: remove `key`), or None.
    """

    key: str | None
    kind: str
    check: str
    line: int | None = None
    column: int | None = None
    group: str | None = None
    expected: Any = None
    actual: Any = None
    suggestion: str | None = None
    hf_key: str | None = None
    replaced_by: str | None = None
    since: str | None = None
    removed: str | None = None
    stage: int | None = None
    count: int | None = None
    version: str | None = None
    error: str | None = None
    error_msg: str | None = None
    silent: bool = False
    source: str | None = None
    detail: str | None = None
    upstream: str | None = None
    fix: str | None = None
    fix_key: str | None = None
    fix_value: Any = None

    def __post_init__(self) -> None:
        if self.upstream is None and self.detail:
            lines = [ln for ln in self.detail.splitlines() if ln.strip()]
            pick = next((ln for ln in lines if ln.startswith("- ds ")), lines[0] if lines else None)
            object.__setattr__(self, "upstream", pick)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


FIELDS = tuple(f.name for f in fields(DSProblem))


def locate(positions: Mapping[str, tuple[int, int]], key: str | None) -> tuple[int | None, int | None]:
    """The position of `key`, else of its nearest present parent, else (None, None)."""
    k = key
    while k:
        if k in positions:
            return positions[k]
        k = k.rsplit(".", 1)[0] if "." in k else ""
    return (None, None)


@dataclass
class Problems:
    """The problems found so far, each placed at its key's line; `keys(kinds)` says which keys were reported."""

    positions: Mapping[str, tuple[int, int]]
    items: list[DSProblem] = field(default_factory=list)

    def add(self, key: str | None, kind: str, check: str, **kw: Any) -> None:
        line, col = locate(self.positions, key)
        self.items.append(DSProblem(key, kind, check, line, col, **kw))

    def keys(self, *kinds: str) -> set[str]:
        return {p.key for p in self.items if p.kind in kinds and p.key}
