"""Typed reading of LLaMA-Factory key values for the run, and the guard on the sizes the memory model multiplies by."""

from __future__ import annotations

import math
from typing import Any


def split_arg(v: Any) -> list[str] | None:
    """LLaMA-Factory's ``split_arg`` (hparams/data_args.py:148-151, finetuning_args.py:580-583), the one copy here:
    a comma string is split at every comma and each item stripped, empty items kept as LF keeps them
    (``"a,,b"`` → ``["a", "", "b"]``: LF then looks up a dataset called ``""``); a list's items as strings; None
    stays None; another scalar is one item."""
    if v is None:
        return None
    if isinstance(v, str):
        return [s.strip() for s in v.split(",")]
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [str(v)]


def split_list(v: Any) -> tuple[str, ...]:
    """`split_arg`'s non-empty items, stripped, as the memory model counts module names (an empty item names no
    module: LF hands it to PEFT, which matches nothing with it)."""
    return tuple(s.strip() for s in split_arg(v) or () if s.strip())


def as_bool(v: Any, default: bool = False) -> bool:
    """A boolean key's value as the run reads it (the one copy): YAML booleans as they are, the strings true, 1,
    yes, on (any case) as True, any other string as False; `default` when unset."""
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


# LLaMA-Factory's defaults for the sizes of one micro-batch: cutoff_len (data_args.py) and HF's
# per_device_train_batch_size (training_args.py); the run and the data scan read them from here
DEFAULT_CUTOFF_LEN = 2048
DEFAULT_MICRO_BATCH = 8


def packing_of(cfg: Any, stage: str) -> tuple[bool, bool, bool]:
    """(packing, packing given in the config, neat_packing) as LLaMA-Factory settles them: ``packing`` unset is on
    for ``stage: pt`` (parser.py), ``neat_packing`` implies packing (data_args.py). The one copy: the run
    (run/resolve.py) and the data scan (analyzers/data/dataargs.py) both call it."""
    neat = as_bool(cfg.get("neat_packing"))
    given = cfg.get("packing")
    explicit = as_bool(given) or neat
    return (explicit if (given is not None or neat) else stage == "pt"), explicit, neat


def as_int(v: Any, default: int) -> int:
    """An integer key's value; `default` when unset or not a number (the key-schema rules report a wrong type)."""
    if v is None or isinstance(v, bool):
        return default
    if isinstance(v, float) and not math.isfinite(v):
        return default
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return default


class InvalidRunValue(ValueError):
    """A value the memory model would compute with makes no sense there (a micro batch of -8, cutoff_len 0, an
    infinite or non-integer size). `key` is the YAML key; the key-schema rules report it as a finding, and no
    estimate is made from it."""

    def __init__(self, key: str, value: Any, why: str):
        super().__init__(f"{key}={value!r} {why}")
        self.key, self.value, self.why = key, value, why


# Keys the memory model multiplies by: each must be an integer in [low, high] when set (LLaMA-Factory passes them
# to transformers' TrainingArguments / the data collator, where 0 or a negative value fails or divides by zero).
POSITIVE_INT_KEYS = {"per_device_train_batch_size": (1, 1 << 20), "gradient_accumulation_steps": (1, 1 << 20),
                     "cutoff_len": (1, 1 << 24), "lora_rank": (1, 1 << 16),
                     "per_device_eval_batch_size": (1, 1 << 20)}


def check_sizes(cfg: dict[str, Any]) -> None:
    """Raise InvalidRunValue for the first key of POSITIVE_INT_KEYS whose value is not an integer in range."""
    for key, (low, high) in POSITIVE_INT_KEYS.items():
        v = cfg.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise InvalidRunValue(key, v, "is not an integer")
        if not low <= v <= high:
            raise InvalidRunValue(key, v, f"is outside {low}..{high}")
