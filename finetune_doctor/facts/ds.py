"""``ds``: the DeepSpeed config the run uses, resolved the way HF's integration resolves its "auto" values.

The namespace is the resolved config tree itself (``ds.zero_optimization.stage``, ``ds.bf16.enabled``: every
DeepSpeed top-level key is declared open) plus the derived fields below, which are not DeepSpeed keys
(readers/dsconfig.py `ds_facts` computes them). None when the config names no ``deepspeed:`` file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.facts.schema import LOCATION, OPEN, F, Namespace
from finetune_doctor.readers import dsconfig
from finetune_doctor.types import Hardware

PROBLEM_ITEM = {
    "kind": F("str", "unknown_key | removed | deprecated | wrong_type | out_of_range | mismatch | ..."),
    "key": F("str", "dotted DeepSpeed key"), "message": F("str", "what is wrong"),
    "detail": F("str", "more detail"), "group": F("str", "mismatch group: batch | precision | ..."),
    "expected": F("any", "the value HF expects"), "actual": F("any", "the value in the file"),
    "suggestion": F("str", "did-you-mean key"), "upstream": F("str", "DeepSpeed's or HF's own message"),
    "fix": F("str", "fix kind"), "fix_key": F("str", "key the fix edits"), "fix_value": F("any", "value written"),
    "fix_title": F("str", "title of the fix"), "silent": F("bool", "DeepSpeed accepts it without a word"),
    "line": F("int", "1-based line"), "column": F("int", "1-based column"), "location": LOCATION(),
}
IGNORED_OFFLOAD_ITEM = {
    "key": F("str", "the offload key"), "device": F("str", "cpu | nvme"), "stage": F("int", "ZeRO stage"),
    "message": F("str", "why the stage ignores it"), "location": LOCATION(),
}
DERIVED = {
    "path": F("str", "the JSON file (None for an inline dict)"),
    "stock": F("bool", "the file is LLaMA-Factory's bundled stock copy, not the user's"),
    "problems": F("list", "problems found in the JSON", items=PROBLEM_ITEM),
    "zero_stage": F("int", "ZeRO stage DeepSpeed runs, 0-3"),
    "offload_optimizer_device": F("str", "cpu | nvme | None, as written"),
    "offload_param_device": F("str", "cpu | nvme | None, as written"),
    "offload_optimizer_active": F("bool", "the stage honours the optimizer offload (stage >= 1)"),
    "offload_param_active": F("bool", "the stage honours the parameter offload (stage 3)"),
    "ignored_offloads": F("list", "offloads the stage ignores", items=IGNORED_OFFLOAD_ITEM),
    "overlap_comm": F("bool", "effective overlap_comm"),
    "reduce_bucket_size": F("number", "effective reduce bucket, elements"),
    "allgather_bucket_size": F("number", "effective allgather bucket, elements"),
    "overlap_comm_buffer_gib": F("float", "HF docs' upper bound of overlap_comm buffers with ZeRO-1/2, GiB"),
    "overlap_comm_known_bad": F("bool", "DeepSpeed version in 0.17.2-0.19.2 (ZeRO-1/2 overlap corruption)"),
    "fp16_enabled": F("bool", "fp16 as DeepSpeed parses it"), "bf16_enabled": F("bool", "bf16 likewise"),
    "gradient_clip": F("float", "gradient clipping in effect"),
    "explicit": F("list", "dotted keys written with a non-auto value"),
    "unresolved": F("list", "dotted keys whose value needs facts we lack"),
    "defaults": OPEN("zero_optimization keys absent from the JSON, with DeepSpeed's defaults"),
    "version": F("str", "DeepSpeed version assumed (None: newest known)"),
    "hf_dtype": F("str", "dtype HF uses for zero.Init/loading (transformers 5.x rule)"),
    "hf_dtype_4x": F("str", "the same under transformers 4.x"),
    "notes": F("list", "version caveats"),
    "_note": F("str", "a reader note"),
}


def _namespace() -> Namespace:
    fields = {k: OPEN(f"DeepSpeed config section/key {k}", type="any") for k in sorted(dsconfig.TOP_KEYS)}
    fields.update(DERIVED)
    return Namespace("ds", __doc__.split("\n\n")[0], fields)


NAMESPACE = _namespace()

STOCK_DS = Path(__file__).resolve().parent.parent / "catalog" / "lf_deepspeed"
_HINT = " (pass deepspeed=PATH after the config to point at it)"


def stock_ds_file(value: Any) -> Path | None:
    """LLaMA-Factory's stock DeepSpeed file that a ``deepspeed: examples/deepspeed/NAME.json`` value names, bundled
    in catalog/lf_deepspeed (the files of examples/deepspeed at the snapshot commit), or None."""
    if not isinstance(value, str):
        return None
    norm = value.replace("\\", "/")
    if "examples/deepspeed/" not in norm:
        return None
    cand = STOCK_DS / norm.rsplit("/", 1)[-1]
    return cand if cand.is_file() else None


def load(values: dict[str, Any], config_path: str, line: int | None, hw: Hardware | None, hidden: int | None,
         notes: list[str], *, overridden: bool = False) -> tuple[Any, bool]:
    """The DeepSpeed config that `values` name and whether it is LLaMA-Factory's stock copy (not the user's file).

    Returns (None, False) without a ``deepspeed:`` key. A path that does not resolve falls back to the stock copy of
    the same name; otherwise raises InputError (its message says "not found" for a missing file).
    """
    value = values.get("deepspeed")
    if not value:
        return None, False
    world = hw.num_gpus if hw and hw.num_gpus else None
    try:
        return dsconfig.load_ds_config(value, config_path, line, values, world, hidden), False
    except InputError as err:
        stock = stock_ds_file(value)
        if stock is None or "not found" not in err.message:
            if "not found" in err.message and not overridden and _HINT not in err.message:
                err.message += _HINT
            raise
    notes.append(f"{value} is not on disk here: read LLaMA-Factory's stock copy of it")
    return dsconfig.load_ds_config(str(stock), config_path, line, values, world, hidden), True


def missing(value: Any, err: InputError) -> dict[str, Any]:
    """The ``lint.ds_missing`` fact for a ``deepspeed:`` path that did not resolve."""
    return {"value": value, "message": err.message.replace(_HINT, "")}


def load_alone(path: str) -> Any:
    """A DeepSpeed JSON read on its own (``doctor lint ds.json``), with no training config to resolve against."""
    return dsconfig.load_ds_config(str(Path(path).resolve()), str(path), None, {}, None, None)


def assemble(ds: Any, stock: bool = False) -> dict[str, Any] | None:
    """The ``ds`` facts of a read DeepSpeed config (None without one)."""
    if ds is None:
        return None
    facts = dsconfig.ds_facts(ds)
    facts["stock"] = stock
    return facts


def validate_with_deepspeed(ds: Any, facts: dict[str, Any]) -> bool:
    """Add to `facts` the problems DeepSpeed's own config models find (imports deepspeed: ~3 s, so only on
    request). Returns False when deepspeed is not installed (nothing was validated)."""
    extra = dsconfig.validate_with_deepspeed(ds)
    if extra is None:
        return False
    if extra:
        facts["problems"] = list(facts.get("problems") or []) + [
            p if isinstance(p, dict) else {k: getattr(p, k, None) for k in ("key", "kind", "message", "line")}
            for p in extra]
    return True
