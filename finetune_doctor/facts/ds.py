"""``ds``: the DeepSpeed config the run uses, resolved the way HF's integration resolves its "auto" values.

The namespace is the resolved config tree itself (``ds.zero_optimization.stage``, ``ds.bf16.enabled``: every
DeepSpeed top-level key is declared open) plus the derived fields below, which are not DeepSpeed keys and are
computed here from the reader's `DSConfig` (readers/deepspeed/dsconfig.py). None when the config names no ``deepspeed:`` file.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from finetune_doctor.errors import InputError
from finetune_doctor.facts.schema import LOCATION, OPEN, F, Namespace
from finetune_doctor.types import Hardware

if TYPE_CHECKING:   # the reader itself is imported by the functions that read a DeepSpeed JSON (below)
    from finetune_doctor.readers.deepspeed import dsconfig

# The DeepSpeed schema and problem modules (dsschema: ~76 key specs; dsproblem: a 25-field dataclass; ~2 ms of a
# one-file lint) are imported by the functions that read a JSON and by the declarations below on first use
# (`__getattr__`): a config without ``deepspeed:`` never needs them (issue #22).
_DECLARED = ("PROBLEM_ITEM", "IGNORED_OFFLOAD_ITEM", "DERIVED", "NAMESPACE")


def __getattr__(name: str) -> Any:
    """The field declarations (`_DECLARED`), built once on first use; AttributeError for any other name."""
    if name not in _DECLARED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _declarations()[name]


@lru_cache(maxsize=1)
def _declarations() -> dict[str, Any]:
    """PROBLEM_ITEM, IGNORED_OFFLOAD_ITEM, DERIVED and NAMESPACE (the ``ds`` namespace the rule loader checks)."""
    from finetune_doctor.readers.deepspeed.dsproblem import DS_CHECKS

    PROBLEM_ITEM = {
        "kind": F("str",
                  "unknown | removed | type | invalid | mismatch | deprecated | ignored | duplicate | deepspeed"),
        "check": F("str", "the check within the kind (rules/deepspeed-*.yaml word each)", values=DS_CHECKS),
        "key": F("str", "dotted DeepSpeed key"), "section": F("str", "the dotted parent of key ('' at the top)"),
        "leaf": F("str", "the last part of key"),
        "group": F("str", "mismatch group: batch | precision | clipping | optimizer | scheduler"),
        "expected": F("any", "the value HF expects, or DeepSpeed's default"),
        "actual": F("any", "the value in the file"),
        "actual_text": F("str", "actual as JSON text, printable"), "expected_text": F("str", "expected likewise"),
        "actual_type": F("str", "JSON type of actual: null | boolean | number | string | array | object"),
        "truthy": F("bool", "what Python's bool() makes of actual (DeepSpeed's plain getters)"),
        "suggestion": F("str", "did-you-mean key"), "hf_key": F("str", "the TrainingArguments field compared with"),
        "replaced_by": F("str", "the dotted key a deprecated alias maps to"),
        "since": F("str", "first DeepSpeed version that accepts the key"),
        "removed": F("str", "first DeepSpeed version that rejects the key"),
        "stage": F("int", "ZeRO stage involved"), "count": F("int", "keys folded into one problem"),
        "version": F("str", "DeepSpeed version whose own verdict this is"),
        "error": F("str", "pydantic error type"), "error_msg": F("str", "pydantic's error text"),
        "source": F("str", "the upstream code of the check"),
        "detail": F("str", "the exact upstream error text"), "upstream": F("str", "its most specific line"),
        "fix": F("str", "auto | set | rename | delete"), "fix_key": F("str", "key the fix edits"),
        "fix_value": F("any", "value written"), "silent": F("bool", "DeepSpeed accepts it without a word"),
        "line": F("int", "1-based line"), "column": F("int", "1-based column"), "location": LOCATION(),
    }
    IGNORED_OFFLOAD_ITEM = {
        "key": F("str", "the offload key"),
        "what": F("str", "offload_param | offload_optimizer", values=("offload_param", "offload_optimizer")),
        "device": F("str", "cpu | nvme"), "stage": F("int", "ZeRO stage"), "location": LOCATION(),
    }
    DERIVED = {
        "path": F("str", "the JSON file (None for an inline dict)"),
        "stock": F("bool", "the file is LLaMA-Factory's bundled stock copy, not the user's"),
        "stand_in": F("str", "the path the config names when it is not on this machine and a stock file of the "
                             "stage its name suggests stands in for it (the deepspeed-config assumption); None otherwise"),
        "stand_in_named_stage": F("int", "the ZeRO stage that stand-in's file name states (ds_z2_config.json: 2); "
                                         "None when its name states none and the stage was assumed (`named_stage`)"),
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
        "gradient_clipping": F("number", "gradient clipping in effect (DeepSpeed's version default when absent)"),
        "explicit": F("list", "dotted keys written with a non-auto value"),
        "unresolved": F("list", "dotted keys whose value needs facts we lack"),
        "defaults": OPEN("zero_optimization keys absent from the JSON, with DeepSpeed's defaults"),
        "autotp_size": F("int", "tensor_parallel.autotp_size when > 1 (DeepSpeed AutoTP splits the model over that "
                                "many GPUs), else 1"),
        "autotp_zero3": F("str", "whether that DeepSpeed version's AutoTP trains under ZeRO-3: refused (before "
                                 "0.19.4) | accepted | unknown (version not given)",
                          values=("refused", "accepted", "unknown")),
        "autotp_version": F("str", "the DeepSpeed version autotp_zero3 was judged for (the training machine's from "
                                   "--env/--context, else the one the file was resolved for), None: not known"),
        "version": F("str", "DeepSpeed version assumed (None: newest known)"),
        "version_text": F("str", "that version as messages name it ('0.19.8', or '0.19.8 (assumed)' when unknown)"),
        "transformers_version": F("str", "transformers version assumed (None: newest known)"),
        "hf_dtype": F("str", "dtype HF uses for zero.Init/loading (transformers 5.x rule)"),
        "hf_dtype_4x": F("str", "the same under transformers 4.x"),
        "notes": F("list", "version caveats"),
        "_note": F("str", "a reader note"),
    }

    return {"PROBLEM_ITEM": PROBLEM_ITEM, "IGNORED_OFFLOAD_ITEM": IGNORED_OFFLOAD_ITEM, "DERIVED": DERIVED,
            "NAMESPACE": _namespace(DERIVED)}


def _namespace(derived: dict[str, Any]) -> Namespace:
    from finetune_doctor.readers.deepspeed import dsschema as S

    fields = {k: OPEN(f"DeepSpeed config section/key {k}", type="any") for k in sorted(S.TOP_KEYS)}
    fields.update(derived)
    return Namespace("ds", __doc__.split("\n\n")[0], fields)

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
    from finetune_doctor.readers.deepspeed import dsconfig   # a config without `deepspeed:` reads no JSON

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
    from finetune_doctor.readers.deepspeed import dsconfig

    try:
        full = Path(path).resolve()
    except (OSError, RuntimeError):   # a symlink loop (RuntimeError before Python 3.13): the reader names it
        full = Path(path).absolute()
    return dsconfig.load_ds_config(str(full), str(path), None, {}, None, None)


_NAMED_STAGE = re.compile(r"(?:^|[^a-z0-9])(?:ds_)?(?:z|zero|stage)[-_ ]?([0-3])(?![0-9])")


def named_stage(path: Any) -> int | None:
    """The ZeRO stage a DeepSpeed file's name states (``ds_z2_config.json``, ``zero3_offload.json``,
    ``ds_stage2.json``: LLaMA-Factory's examples/deepspeed names its files ds_z0/z2/z3[_offload]_config.json), or
    None when the name states none (then every stock stage is plausible)."""
    name = str(path or "").lower().rsplit("/", 1)[-1]
    m = _NAMED_STAGE.search(name)
    return int(m.group(1)) if m else None


def stand_in_note(value: Any, stock: str) -> str:
    """The note of a DeepSpeed file not on this machine that `stock` stands in for (facts/dsread.py
    `stand_in_deepspeed`): whether its stage is the one its file name says (`named_stage`) or assumed outright."""
    how = "the stage its file name says" if named_stage(value) is not None else "its stage assumed"
    return f"{value} is not on this machine: estimated with LLaMA-Factory's {stock} (an assumption, {how})"


def assemble(ds: Any, stock: bool = False, stack_sources: Any = (), stand_in: str | None = None
             ) -> dict[str, Any] | None:
    """The ``ds`` facts of a read DeepSpeed config (None without one). `stack_sources`: the run's (package,
    version, where) triples; the training machine's DeepSpeed among them (--env, --context) decides what its
    AutoTP accepts (`autotp_facts`). `stand_in`: the user's path a stock file stands in for (its stage and offload
    are then assumed from its name, not read: rules say so, trial 10 case 03)."""
    if ds is None:
        return None
    facts = facts_of(ds)
    facts["stock"] = stock
    facts["stand_in"] = stand_in
    facts["stand_in_named_stage"] = named_stage(stand_in) if stand_in else None
    training_ds = next((v for p, v, *_ in stack_sources if p == "deepspeed"), None)
    if training_ds:
        from finetune_doctor.readers.deepspeed import dsschema as S

        facts.update(autotp_facts(facts, S.parse_version(training_ds)))
    return facts


def validate_with_deepspeed(ds: Any, facts: dict[str, Any]) -> bool:
    """Add to `facts` the problems DeepSpeed's own config models find (imports deepspeed: ~3 s, so only on
    request). Returns False when deepspeed is not installed (nothing was validated)."""
    from finetune_doctor.readers.deepspeed import dsconfig

    extra = dsconfig.validate_with_deepspeed(ds)
    if extra is None:
        return False
    if extra:
        facts["problems"] = list(facts.get("problems") or []) + problem_dicts(ds, extra)
    return True


# ---------------------------------------------------------------------------------------------------------------
# The derived facts
# ---------------------------------------------------------------------------------------------------------------

_NOTES = {
    "no_yaml": "no LLaMA-Factory YAML: the values HF takes from it are unresolved and not compared",
    "apex_fp16_4x": "transformers 4.x fills fp16.enabled with False when half_precision_backend is apex "
                    "(fp16|fp16_full_eval+fp16_backend(amp)); 5.x fills True",
}


def facts_of(cfg: dsconfig.DSConfig) -> dict[str, Any]:
    """The ``ds`` fact namespace of a `DSConfig`: the resolved tree plus the DERIVED fields.

    ``offload_*_device`` map the deprecated cpu_offload / cpu_offload_param aliases to 'cpu', as DeepSpeed maps
    them; ``offload_*_active`` say whether the stage honours that offload (optimizer: stage >= 1; param: stage 3 —
    misconfigs.md §9; the engine hands only the optimizer offload to the stage-1/2 optimizer, runtime/engine.py);
    ``overlap_comm`` is the explicit value, else DeepSpeed's validator default (True only for stage 3);
    ``overlap_comm_buffer_gib`` is the HF DeepSpeed guide's upper bound for overlap_comm with ZeRO-1/2, 4.5 x
    (reduce + allgather bucket) elements x 2 bytes (fp16/bf16), in GiB; ``overlap_comm_known_bad`` is True for
    DeepSpeed 0.17.2-0.19.2 (ZeRO-1/2 overlap gradient corruption, misconfigs.md §6), None when the version is
    unknown; ``gradient_clipping`` is DeepSpeed's version default when absent (0.0 up to 0.19.2, 1.0 from 0.19.3,
    PR #8068).
    """
    from finetune_doctor.readers.deepspeed import dsschema as S

    res = cfg.resolved
    zo = res.get("zero_optimization") if isinstance(res.get("zero_optimization"), dict) else {}
    stage = cfg.zero_stage
    dsv = S.parse_version(cfg.ds_version)
    oo, op = _device(cfg, zo, "offload_optimizer", "cpu_offload"), _device(cfg, zo, "offload_param", "cpu_offload_param")
    overlap = S.lax_bool(zo.get("overlap_comm")) if zo.get("overlap_comm") is not None else None
    overlap = (stage == 3) if overlap is None else overlap
    rb, ab = cfg.get("zero_optimization.reduce_bucket_size"), cfg.get("zero_optimization.allgather_bucket_size")
    buf = None
    if overlap and stage in (1, 2) and _number(rb) and _number(ab):
        buf = 4.5 * (float(rb) + float(ab)) * 2 / float(1 << 30)
    bad = None if dsv is None else (S.parse_version("0.17.2") <= dsv <= S.parse_version("0.19.2"))  # type: ignore[operator]
    gc = res.get("gradient_clipping")
    if "gradient_clipping" not in cfg.raw:
        gc = 1.0 if S.at_least(dsv, "0.19.3") else 0.0
    facts: dict[str, Any] = {k: v for k, v in res.items()}
    facts.update(autotp_facts(res, dsv))
    facts.update({
        "path": cfg.path, "problems": problem_dicts(cfg, cfg.problems), "zero_stage": stage,
        "offload_optimizer_device": oo, "offload_param_device": op,
        "offload_optimizer_active": bool(oo) and stage >= 1, "offload_param_active": bool(op) and stage == 3,
        "ignored_offloads": _ignored_offloads(cfg, zo, stage, oo, op),
        "overlap_comm": bool(overlap), "reduce_bucket_size": rb, "allgather_bucket_size": ab,
        "overlap_comm_buffer_gib": buf, "overlap_comm_known_bad": bad,
        "fp16_enabled": _enabled(res, "fp16"), "bf16_enabled": _enabled(res, "bf16"), "gradient_clipping": gc,
        "explicit": list(cfg.explicit), "unresolved": list(cfg.unresolved), "defaults": dict(cfg.defaults),
        "version": cfg.ds_version, "version_text": S.version_text(dsv),
        "transformers_version": cfg.transformers_version,
        "hf_dtype": cfg.hf_dtype, "hf_dtype_4x": cfg.hf_dtype_4x, "notes": notes(cfg),
    })
    return facts


# DeepSpeed's AutoTP training (tensor_parallel.autotp_size, from 0.16.4) asserted ZeRO stage <= 2 in
# runtime/engine.py `_configure_tensor_parallel_states` ("Currently, the compatibility between 'autotp' and
# 'zero_stage = 3' has not been validated"), still there at 0.19.2 and gone by 0.19.4; at 0.19.8 the same function
# says "AutoTP + ZeRO stage 3 is supported for both inference and training" (runtime/engine.py:952).
AUTOTP_ZERO3_FROM = "0.19.4"


def autotp_facts(res: dict[str, Any], dsv: Any) -> dict[str, Any]:
    """``autotp_size`` (> 1 only when AutoTP is on: TensorParallelConfig.autotp_size defaults to 0,
    runtime/tensor_parallel/config.py:45 at 0.19.8) and ``autotp_zero3`` (refused | accepted | unknown) of the
    resolved DeepSpeed tree `res` under DeepSpeed version `dsv` (S.parse_version's, None: not given)."""
    from finetune_doctor.readers.deepspeed import dsschema as S

    tp = res.get("tensor_parallel")
    size = tp.get("autotp_size") if isinstance(tp, dict) else None
    size = size if isinstance(size, int) and not isinstance(size, bool) and size > 1 else 1
    z3 = "unknown" if dsv is None else ("accepted" if S.at_least(dsv, AUTOTP_ZERO3_FROM) else "refused")
    return {"autotp_size": size, "autotp_zero3": z3,
            "autotp_version": ".".join(str(x) for x in dsv) if dsv is not None else None}


def notes(cfg: dsconfig.DSConfig) -> list[str]:
    """The version caveats of `cfg`, worded."""
    from finetune_doctor.readers.deepspeed import dsschema as S

    out = []
    for c in cfg.caveats:
        if c == "clipping_absent":
            gc = 1.0 if S.at_least(S.parse_version(cfg.ds_version), "0.19.3") else 0.0
            out.append("gradient_clipping absent: HF does not fill it; DeepSpeed's default is 0.0 (no clipping) up to "
                       f"0.19.2 and 1.0 from 0.19.3 (PR #8068) — {gc} for this DeepSpeed")
        elif c == "version_unknown":
            out.append(f"DeepSpeed version unknown: defaults and schema of DeepSpeed {S.NEWEST_DS} assumed")
        elif c in _NOTES:
            out.append(_NOTES[c])
    return out


def problem_dicts(cfg: dsconfig.DSConfig, problems: Any) -> list[dict[str, Any]]:
    """`DSProblem`s as the items of ``ds.problems``: every field plus ``location`` {file, line, column, key},
    ``section``/``leaf`` of the key and the values as printable JSON text (``actual_text``, ``expected_text``,
    ``actual_type``, ``truthy``)."""
    from finetune_doctor.readers.deepspeed import dsschema as S
    from finetune_doctor.readers.deepspeed.dsproblem import FIELDS, DSProblem, locate

    file = cfg.path or "<inline deepspeed>"
    out = []
    for p in problems:
        d = p.as_dict() if isinstance(p, DSProblem) else {k: getattr(p, k, None) for k in FIELDS}
        key = d.get("key")
        line, col = locate(cfg.positions, key)
        section, _, leaf = (key or "").rpartition(".")
        d.update(section=section, leaf=leaf or None, actual_text=show(d.get("actual")),
                 expected_text=show(d.get("expected")), actual_type=S.json_type(d.get("actual")),
                 truthy=bool(d.get("actual")),
                 location={"file": file, "line": line or (1 if cfg.path else None), "column": col, "key": key})
        out.append(d)
    return out


def show(v: Any) -> str:
    """A value as a message quotes it: strings as JSON strings, numbers and the rest as Python prints them;
    always printable (readers/deepspeed/dsjson.py `printable`) and never longer than 200 characters."""
    from finetune_doctor.readers.deepspeed.dsjson import printable

    if isinstance(v, str):
        text = json.dumps(v, ensure_ascii=False)
    elif isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 640:
        text = f"an integer of {len(str(v)) if v.bit_length() < 14000 else 'over 4000'} digits"
    else:
        text = str(v)
    text = printable(text)
    return text if len(text) <= 200 else text[:197] + "..."


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _enabled(res: dict[str, Any], name: str) -> bool:
    from finetune_doctor.readers.deepspeed import dsschema as S

    sec = res.get(name)
    return bool(S.lax_bool(sec.get("enabled"))) if isinstance(sec, dict) else False


def _device(cfg: dsconfig.DSConfig, zo: dict[str, Any], sec: str, alias: str) -> str | None:
    from finetune_doctor.readers.deepspeed import dsschema as S

    o = zo.get(sec)
    d = o.get("device") if isinstance(o, dict) else None
    if d in ("cpu", "nvme"):
        return d
    raw_zo = cfg.raw.get("zero_optimization") if isinstance(cfg.raw.get("zero_optimization"), dict) else {}
    if S.lax_bool(raw_zo.get(alias)) and not isinstance(o, dict):
        return "cpu"
    return None


def _ignored_offloads(cfg: dsconfig.DSConfig, zo: dict[str, Any], stage: int, oo: str | None,
                      op: str | None) -> list[dict[str, Any]]:
    """Offload blocks the stage ignores (rule FD204 words them)."""
    from finetune_doctor.readers.deepspeed.dsproblem import locate

    raw_zo = cfg.raw.get("zero_optimization") if isinstance(cfg.raw.get("zero_optimization"), dict) else {}
    file = cfg.path or "<inline deepspeed>"

    def item(what: str, alias: str, device: str) -> dict[str, Any]:
        key = f"zero_optimization.{what if what in raw_zo else alias}"
        line, col = locate(cfg.positions, key)
        return {"key": key, "what": what, "device": device, "stage": stage,
                "location": {"file": file, "line": line or (1 if cfg.path else None), "column": col, "key": key}}

    out = []
    if op and stage != 3:
        out.append(item("offload_param", "cpu_offload_param", op))
    if oo and stage == 0:
        out.append(item("offload_optimizer", "cpu_offload", oo))
    return out
