#!/usr/bin/env python
"""Generate ``finetune_doctor/catalog/lf_keys.json``: every key a LLaMA-Factory training YAML accepts.

The keys come from LLaMA-Factory's and transformers' own argument dataclasses, read with ``dataclasses.fields``
(ModelArguments, DataArguments, FinetuningArguments, GeneratingArguments, LF's TrainingArguments and, through it,
``transformers.Seq2SeqTrainingArguments``) -- the same classes ``HfArgumentParser.parse_dict`` fills
(LLaMA-Factory ``src/llamafactory/hparams/parser.py``, LF_FACTS.md §1).

Nothing is installed into the project's environment: LLaMA-Factory pins transformers, so each source is fetched from
PyPI into a throwaway ``--cache`` directory and imported from there in a subprocess:

* ``--lf-version 0.9.5`` downloads the ``llamafactory`` wheel (``pip download --no-deps``) and unpacks it; its
  ``hparams`` modules are imported without running the package ``__init__`` (which would pull in datasets, trl, ...).
* ``--transformers 4.57.6,5.6.0,5.8.0`` installs each transformers version with its small dependencies into
  ``--cache/transformers-<v>`` (``pip install --target``); ``installed`` means the transformers importable here.
* ``--lf-args reference/llamafactory/lf_args.json`` adds a LLaMA-Factory version recorded as JSON (the snapshot in
  /work/shared/reference, 0.9.6.dev0): used when LF cannot be imported, or in addition to an imported version.

Every key records the LF versions and transformers versions that declare it, and the JSON names each source with its
version (and the wheel's sha256). The renamed/removed key table and the derived (``init=False``) keys are written here
by hand from LF_FACTS.md §1/§1a with their upstream sources.

Usage::

    python scripts/gen_key_schema.py                     # defaults: LF 0.9.5 from PyPI + lf_args.json + tf 4.57.6, 5.6.0, 5.8.0
    python scripts/gen_key_schema.py --lf-version none --lf-args lf_args.json --transformers installed --out /tmp/k.json
    python scripts/gen_key_schema.py --check             # exit 1 when the committed file differs from a fresh run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "finetune_doctor" / "catalog" / "lf_keys.json"
DEFAULT_REF = next((p for p in (Path("/work/shared/reference/llamafactory/lf_args.json"),
                                ROOT / "fixtures" / "lint" / "lf_args.reference.json") if p.exists()),
                   Path("lf_args.json"))
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "finetune-doctor-keyschema"
SCHEMA_ID = "finetune-doctor/lf-keys/v1"

# Train-parser dataclasses (LF parser.py `_TRAIN_ARGS`) and the group name each gets in the schema.
LF_CLASSES = (
    ("model_args", "ModelArguments", "model"),
    ("data_args", "DataArguments", "data"),
    ("training_args", "TrainingArguments", "training"),
    ("finetuning_args", "FinetuningArguments", "finetuning"),
    ("generating_args", "GeneratingArguments", "generating"),
)

# ---------------------------------------------------------------------------------------------------------------
# Hand-written tables (sources in each entry).

# transformers 4.x keys that 5.x dropped, with what to use on 5.x. Filled in only where transformers' own 4.57.6
# help text or deprecation warning names the successor (transformers 4.57.6 training_args.py).
TRANSFORMERS_V5_SUCCESSORS = {
    "no_cuda": "use_cpu",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
    "include_tokens_per_second": "include_num_input_tokens_seen",
}

# Fields declared init=False: LF computes them in get_train_args and HfArgumentParser rejects them as keys.
DERIVED = {
    "compute_dtype": {
        "derived_from": ["bf16", "pure_bf16", "fp16"],
        "explanation": "bfloat16 when bf16 or pure_bf16 is set, float16 when fp16 is set, otherwise chosen at model "
                       "load from the checkpoint dtype and the device (parser.py:640-643, model/patcher.py:375-379).",
        "instead": "set bf16: true (or fp16: true on GPUs without bf16)",
        "source": "src/llamafactory/hparams/model_args.py:742-761, parser.py:640-643",
    },
    "device_map": {
        "derived_from": ["stage", "quantization_device_map"],
        "explanation": "{'': current device} for training; 'auto' for inference/export "
                       "(parser.py:644, 0.9.5 parser.py:517, 567, 586).",
        "instead": "select GPUs with CUDA_VISIBLE_DEVICES; for inference of quantized models use "
                   "quantization_device_map",
        "source": "src/llamafactory/hparams/model_args.py:742-761",
    },
    "model_max_length": {
        "derived_from": ["cutoff_len"],
        "replacement": "cutoff_len",
        "explanation": "copied from cutoff_len (parser.py:647).",
        "instead": "set cutoff_len",
        "source": "src/llamafactory/hparams/model_args.py:742-761, parser.py:647",
    },
    "block_diag_attn": {
        "derived_from": ["neat_packing"],
        "explanation": "copied from neat_packing (0.9.5 parser.py:519).",
        "instead": "set neat_packing: true",
        "source": "src/llamafactory/hparams/model_args.py:742-761",
    },
    "megatron_bridge_args": {
        "derived_from": ["tensor_model_parallel_size", "pipeline_model_parallel_size"],
        "explanation": "built from the individual Megatron-Bridge keys when USE_MEGATRON_BRIDGE=1.",
        "instead": "set the individual Megatron-Bridge keys",
        "source": "src/llamafactory/hparams/finetuning_args.py:494-499",
    },
}

# Values that older LF versions accepted under another spelling, and what LF does with the old one today.
VALUE_RENAMES = {
    "quantization_method": {
        "bitsandbytes": {"to": "bnb",
                         "why": "the on-the-fly quantization branches compare with bnb/hqq/eetq only "
                                "(model/model_utils/quantization.py:167-207 in 0.9.5), so quantization_bit is "
                                "silently ignored and the model loads unquantized"},
    },
    "flash_attn": {
        "off": {"to": "disabled", "why": "LF v0.7-0.8 spelled it off"},
        "fa": {"to": "fa2", "why": "fa2 is FlashAttention-2"},
    },
}

# Defaults that are not constants of the dataclass.
DEFAULT_NOTES = {
    "optim": "adamw_torch_fused when torch>=2.8 is installed, else adamw_torch (decided when transformers' "
             "training_args is imported: transformers 4.57.6 training_args.py:1292-1299, 5.8.0 :810-817)",
    "report_to": "transformers 4.x: None means every installed integration; 5.x: 'none' (LF_FACTS §3)",
    "lora_alpha": "None means 2 x lora_rank (finetuning_args.py __post_init__)",
    "packing": "None means true for stage pt, else false (parser.py:645)",
}

from lf_key_tables import NULL_FAILS, RANGES, RETIRED  # noqa: E402,F401  (scripts/ is sys.path[0] here)

sys.path.insert(1, str(ROOT))   # this tree's package, after scripts/: the reader's value kinds are the schema's
from finetune_doctor.readers.config.keyschema import value_kind as _kind_of_value  # noqa: E402

# Keys accepted only by a launcher mode that an environment variable turns on; outside it they are unknown keys.
ONLY_WHEN_GROUPS = {
    "megatron_bridge": "USE_MEGATRON_BRIDGE=1 (hparams/megatron_bridge_args.py, parser.py)",
}

# Comma-string fields whose __post_init__ also accepts a YAML list (``split_arg`` returns a non-str unchanged).
# Used only when LF source is not available to find them; otherwise they are read from the source (see
# _list_accepting_fields). LF 0.9.5 data_args.py:148-169, finetuning_args.py:561-573.
SPLIT_ARG_FALLBACK = ("dataset", "eval_dataset", "interleave_probs", "freeze_trainable_modules",
                      "freeze_extra_modules", "lora_target", "oft_target", "additional_target", "galore_target",
                      "apollo_target")


# ---------------------------------------------------------------------------------------------------------------
# Worker: runs in a subprocess whose sys.path holds one transformers version (and maybe one LF tree).

def worker(lf_dir: str | None) -> dict:
    """Introspect the dataclasses importable in this process; returns a JSON-able dict."""
    import dataclasses
    import importlib
    import types

    import transformers

    out: dict = {"transformers_version": transformers.__version__, "transformers_file": transformers.__file__,
                 "lf": None, "lf_error": None, "fields": []}
    classes = []
    if lf_dir:
        try:
            sys.path.insert(0, lf_dir)
            # Import hparams modules without running llamafactory/__init__ or hparams/__init__ (they pull in the
            # whole training stack: datasets, trl, peft trainers).
            for name in ("llamafactory", "llamafactory.hparams"):
                mod = types.ModuleType(name)
                mod.__path__ = [os.path.join(lf_dir, *name.split("."))]
                sys.modules[name] = mod
            env = importlib.import_module("llamafactory.extras.env")
            out["lf"] = {"version": env.VERSION, "dir": lf_dir}
            for mod_name, cls_name, group in LF_CLASSES:
                mod = importlib.import_module(f"llamafactory.hparams.{mod_name}")
                classes.append((getattr(mod, cls_name), group))
            out["lf"]["list_accepting"] = sorted(_list_accepting_fields(lf_dir))
            try:  # eval-only arguments (llamafactory-cli eval); they import `datasets`, which may be missing
                mod = importlib.import_module("llamafactory.hparams.evaluation_args")
                classes.append((mod.EvaluationArguments, "evaluation"))
            except Exception as err:
                out["lf"]["evaluation_error"] = f"{type(err).__name__}: {err}"
        except Exception as err:  # any import problem: fall back to transformers alone
            out["lf_error"] = f"{type(err).__name__}: {err}"
            classes = []
    if not classes:
        classes = [(transformers.Seq2SeqTrainingArguments, "training")]
    for cls, group in classes:
        for f in dataclasses.fields(cls):
            owner = _owner(cls, f.name)
            out["fields"].append({
                "name": f.name,
                "group": group,
                "dataclass": owner.__name__,
                "module": owner.__module__,
                "origin": "transformers" if owner.__module__.startswith("transformers") else "llamafactory",
                "type": _fmt_type(f.type),
                "accepts": sorted(_accepts(f.type)),
                "choices": _choices(f.type, f.metadata),
                "item_choices": _item_choices(f.type),
                "default": _default(f),
                "help": " ".join(str(f.metadata.get("help", "")).split()),
                "init": bool(f.init),
            })
    return out


def _owner(cls, name: str):
    """The class in `cls`'s MRO that declares field `name` (nearest first: LF re-declarations win)."""
    for klass in cls.__mro__:
        if name in klass.__dict__.get("__annotations__", {}):
            return klass
    return cls


def _resolve(tp):
    import typing

    if isinstance(tp, str):  # postponed annotations: leave as text
        return tp
    return tp if not isinstance(tp, typing.ForwardRef) else tp.__forward_arg__


def _members(tp):
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        out = []
        for a in typing.get_args(tp):
            out.extend(_members(a))
        return out
    return [tp]


def _fmt_type(tp) -> str:
    import enum
    import typing

    tp = _resolve(tp)
    if isinstance(tp, str):
        return tp
    parts = []
    for m in _members(tp):
        if m is type(None):
            parts.append("None")
        elif typing.get_origin(m) is typing.Literal:
            parts.append("Literal[" + ", ".join(repr(a) for a in typing.get_args(m)) + "]")
        elif typing.get_origin(m) is not None:
            args = ", ".join(_fmt_type(a) for a in typing.get_args(m))
            parts.append(f"{getattr(typing.get_origin(m), '__name__', str(typing.get_origin(m)))}[{args}]")
        elif isinstance(m, type) and issubclass(m, enum.Enum):
            parts.append(m.__name__)
        elif isinstance(m, type):
            parts.append(m.__name__)
        else:
            parts.append(str(m).replace("typing.", ""))
    return " | ".join(parts)


def _accepts(tp) -> set[str]:
    """JSON kinds a YAML value may have for this annotation (before LF's own conversions)."""
    import enum
    import typing

    tp = _resolve(tp)
    if isinstance(tp, str):
        return {"any"}
    kinds: set[str] = set()
    for m in _members(tp):
        origin = typing.get_origin(m)
        if m is type(None):
            kinds.add("null")
        elif m is typing.Any:
            kinds.add("any")
        elif origin is typing.Literal:
            for a in typing.get_args(m):
                kinds.add(_kind_of_value(a))
        elif origin in (list, tuple, set, typing.List, typing.Tuple) or m in (list, tuple):
            kinds.add("list")
        elif origin in (dict, typing.Dict) or m is dict:
            kinds.add("dict")
        elif m is bool:
            kinds.add("bool")
        elif m is int:
            kinds.add("int")
        elif m is float:
            kinds.update(("float", "int"))  # an int is a valid float everywhere LF/transformers use it
        elif m is str:
            kinds.add("str")
        elif isinstance(m, type) and issubclass(m, enum.Enum):
            kinds.update(_kind_of_value(e.value) for e in m)
        else:  # torch.dtype and other objects: nothing a YAML can express checks against them
            kinds.add("any")
    return kinds


def _scalar_choices(tp):
    import enum
    import typing

    vals: list = []
    for m in _members(_resolve(tp)):
        if typing.get_origin(m) is typing.Literal:
            vals.extend(a for a in typing.get_args(m) if a is not None)
        elif isinstance(m, type) and issubclass(m, enum.Enum):
            vals.extend(e.value for e in m)
    return vals


def _choices(tp, metadata=None):
    """Allowed values, or None when any value of the accepted kinds goes.

    An Enum member makes the list closed even beside ``str`` (transformers converts ``IntervalStrategy | str`` to
    the enum in __post_init__ and raises on anything else); a Literal next to a plain ``str`` does not
    (``str | None | Literal[False]``). ``metadata["choices"]`` is how transformers spells choices on plain str fields.
    """
    import enum

    tp = _resolve(tp)
    if metadata and metadata.get("choices"):
        return list(metadata["choices"])
    if isinstance(tp, str):
        return None
    vals = _scalar_choices(tp)
    if not vals:
        return None
    members = _members(tp)
    has_enum = any(isinstance(m, type) and issubclass(m, enum.Enum) for m in members)
    if not has_enum and str in members:
        return None
    return list(dict.fromkeys(vals))


def _item_choices(tp):
    import typing

    if isinstance(_resolve(tp), str):
        return None
    vals: list = []
    for m in _members(_resolve(tp)):
        if typing.get_origin(m) in (list, tuple):
            for a in typing.get_args(m):
                vals.extend(_scalar_choices(a))
    return list(dict.fromkeys(vals)) or None


def _default(f):
    import dataclasses

    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        try:
            v = f.default_factory()  # type: ignore[misc]
        except Exception:
            return "<factory>"
    else:
        return None
    return _jsonable(v)


def _jsonable(v):
    import enum
    import math

    if isinstance(v, enum.Enum):
        return _jsonable(v.value)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _list_accepting_fields(lf_dir: str) -> set[str]:
    """Fields that an hparams ``__post_init__`` passes through ``split_arg`` (which keeps a list as it is)."""
    import ast

    found: set[str] = set()
    for py in Path(lf_dir, "llamafactory", "hparams").glob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "split_arg"
                    and node.args and isinstance(node.args[0], ast.Attribute)
                    and isinstance(node.args[0].value, ast.Name) and node.args[0].value.id == "self"):
                found.add(node.args[0].attr)
    return found


# ---------------------------------------------------------------------------------------------------------------
# Fetching sources into the throwaway cache.

def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"]
    subprocess.run(cmd, check=True)


def fetch_lf(version: str, cache: Path) -> tuple[Path, dict]:
    """Download and unpack the llamafactory wheel (no dependencies, nothing installed). Returns (dir, source)."""
    dl = cache / "wheels"
    dl.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dl.glob(f"llamafactory-{version}-*.whl"))
    if not wheels:
        _pip("download", f"llamafactory=={version}", "--no-deps", "--only-binary", ":all:", "-d", str(dl))
        wheels = sorted(dl.glob(f"llamafactory-{version}-*.whl"))
    whl = wheels[0]
    target = cache / f"llamafactory-{version}"
    if not (target / "llamafactory").is_dir():
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(target)
    meta = next(target.glob("llamafactory-*.dist-info/METADATA")).read_text(encoding="utf-8")
    req = [ln.split(":", 1)[1].strip() for ln in meta.splitlines()
           if ln.startswith("Requires-Dist: transformers")]
    source = {"package": "llamafactory", "version": version, "how": "introspected",
              "from": f"PyPI wheel {whl.name}", "sha256": hashlib.sha256(whl.read_bytes()).hexdigest(),
              "transformers_requirement": req[0] if req else None}
    return target, source


def fetch_transformers(version: str, cache: Path) -> Path | None:
    """Install transformers==version (+ omegaconf, which LF's model_args imports) into a private target dir."""
    if version == "installed":
        return None
    target = cache / f"transformers-{version}"
    if not (target / "transformers").is_dir():
        _pip("install", "--no-warn-conflicts", "--target", str(target), f"transformers=={version}", "omegaconf")
    return target


def run_worker(tf_dir: Path | None, lf_dir: Path | None) -> dict:
    env = dict(os.environ)
    if tf_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tf_dir), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env["DISABLE_VERSION_CHECK"] = "1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"] + ([str(lf_dir)] if lf_dir else [])
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"introspection failed (transformers dir {tf_dir}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------------------
# Reading lf_args.json (the recorded LF snapshot).

def _accepts_from_text(tp: str, choices) -> set[str]:
    """JSON kinds from a type written as text in lf_args.json (``str | None``, ``Optional[int]``, ``Literal['a']``)."""
    import re

    t = re.sub(r"Literal\[[^\]]*\]", "Literal", tp)
    t = re.sub(r"\b(list|List|tuple|dict|Dict)\[[^\]]*\]", r"\1", t)
    t = t.replace("Optional[", "None | ").replace("Union[", "").replace("]", "")
    kinds: set[str] = set()
    for base in (p.strip() for p in t.replace(",", "|").split("|")):
        if base in ("None", "NoneType"):
            kinds.add("null")
        elif base == "bool":
            kinds.add("bool")
        elif base == "int":
            kinds.add("int")
        elif base == "float":
            kinds.update(("float", "int"))
        elif base == "str":
            kinds.add("str")
        elif base in ("list", "List", "tuple"):
            kinds.add("list")
        elif base in ("dict", "Dict"):
            kinds.add("dict")
        elif base == "Literal" or (base[:1].isupper() and choices):  # a Literal, or an enum named by its class
            kinds.update(_kind_of_value(c) for c in (choices or []))
        elif base:
            kinds.add("any")
    return kinds or {"any"}


def read_lf_args(path: Path) -> tuple[list[dict], dict, dict[str, list[str]]]:
    """Fields of the LF snapshot recorded in lf_args.json, its source record, and transformers availability."""
    data = json.loads(path.read_text(encoding="utf-8"))
    fields = []
    tf_avail: dict[str, list[str]] = {}
    versions = data.get("transformers_versions_introspected") or []
    for name, a in data["args"].items():
        origin = "transformers" if str(a.get("source", "")).startswith("transformers") else "llamafactory"
        if origin == "transformers" or a.get("transformers_availability"):
            av = a.get("transformers_availability", "both")
            tf_avail[name] = versions if av == "both" else [av.split("_")[0].lstrip("v")]
        if origin == "transformers":
            continue  # transformers fields are introspected from transformers itself
        fields.append({
            "name": name, "group": a["group"], "dataclass": _class_from_source(a.get("source", "")),
            "module": a.get("source", ""), "origin": origin, "type": a.get("type", ""),
            "accepts": sorted(_accepts_from_text(a.get("type", ""), a.get("choices"))),
            "choices": a.get("choices"), "item_choices": None, "default": a.get("default"),
            "help": " ".join(str(a.get("help") or "").split()), "init": bool(a.get("user_settable", True)),
            "only_when": a.get("only_when"), "also_in_groups": a.get("also_in_groups"),
            "overrides_transformers_field": a.get("overrides_transformers_field", False),
        })
    source = {"package": "llamafactory", "version": data.get("version"), "how": "reference",
              "from": "lf_args.json: LF's hparams recorded from git (reference/llamafactory; the same file is "
                      "fixtures/lint/lf_args.reference.json)", "commit": data.get("lf_commit"),
              "transformers_requirement": data.get("transformers_requirement"),
              "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return fields, source, tf_avail


def _class_from_source(src: str) -> str:
    return src.rsplit("(", 1)[1].rstrip(")") if "(" in src else ""


# ---------------------------------------------------------------------------------------------------------------
# Merging.

def build(lf_versions: list[str], lf_args: Path | None, tf_versions: list[str], cache: Path) -> dict:
    sources: list[dict] = []
    lf_fields: dict[str, list[dict]] = {}      # LF version -> its own fields
    tf_fields: dict[str, list[dict]] = {}      # transformers version -> Seq2SeqTrainingArguments fields
    list_accepting: set[str] = set()
    ref_tf_avail: dict[str, list[str]] = {}
    lf_dirs = [fetch_lf(v, cache) for v in lf_versions]
    for v in tf_versions:
        tf_dir = fetch_transformers(v, cache)
        lf_dir = lf_dirs[0][0] if lf_dirs else None
        res = run_worker(tf_dir, lf_dir)
        tv = res["transformers_version"]
        sources.append({"package": "transformers", "version": tv, "how": "introspected",
                        "from": ("the transformers importable in this environment" if tf_dir is None
                                 else f"PyPI transformers=={v} in a private --target dir"),
                        "class": "transformers.Seq2SeqTrainingArguments"})
        tf_fields[tv] = [f for f in res["fields"] if f["origin"] == "transformers"]
        if res["lf"]:
            lf_fields.setdefault(res["lf"]["version"], [f for f in res["fields"] if f["origin"] == "llamafactory"])
            list_accepting.update(res["lf"]["list_accepting"])
        elif lf_dir is not None:
            print(f"warning: LLaMA-Factory could not be imported: {res['lf_error']}", file=sys.stderr)
        # the other LF versions (rare: several --lf-version) are introspected against the first transformers
        for lf_dir2, _src in lf_dirs[1:]:
            if v == tf_versions[0]:
                res2 = run_worker(tf_dir, lf_dir2)
                if res2["lf"]:
                    lf_fields.setdefault(res2["lf"]["version"],
                                         [f for f in res2["fields"] if f["origin"] == "llamafactory"])
    for _dir, src in lf_dirs:
        if src["version"] in lf_fields:
            sources.append(src)
    if lf_args is not None:
        ref_fields, ref_src, ref_tf_avail = read_lf_args(lf_args)
        lf_fields.setdefault(ref_src["version"], ref_fields)
        sources.append(ref_src)
    if not lf_fields:
        raise SystemExit("no LLaMA-Factory source: LF could not be imported and no --lf-args was given")
    if not list_accepting:
        list_accepting = set(SPLIT_ARG_FALLBACK)

    all_lf = sorted(lf_fields, key=_vkey)
    all_tf = sorted(tf_fields, key=_vkey)
    keys: dict[str, dict] = {}
    # transformers fields first, oldest version first, so the newest version's text and type win
    for tv in all_tf:
        for f in tf_fields[tv]:
            e = keys.get(f["name"])
            if e is None:
                e = keys[f["name"]] = _entry(f)
                e["transformers_versions"], e["_defaults"] = [], {}
            else:
                _refresh(e, f)
            e["transformers_versions"].append(tv)
            e["_defaults"][tv] = f["default"]
    for e in keys.values():
        e["lf_versions"] = list(all_lf)  # every LF version subclasses Seq2SeqTrainingArguments
        if len({json.dumps(v, sort_keys=True) for v in e["_defaults"].values()}) > 1:
            e["default_by_version"] = dict(e["_defaults"])
    # LF's own fields; a field LF re-declares (overwrite_output_dir) replaces the transformers one, as in LF's subclass
    for lv in all_lf:
        for f in lf_fields[lv]:
            e = keys.get(f["name"])
            if e is not None and f["group"] == "evaluation" and e["group"] != "evaluation":
                # EvaluationArguments.seed (llamafactory-cli eval) is another parser's field of the same name: the
                # train parser's (transformers') entry stays
                e.setdefault("also_in_groups", sorted(set(e.get("also_in_groups") or []) | {"evaluation"}))
                continue
            if e is None or e["origin"] == "transformers":
                new = _entry(f)
                new["lf_versions"] = []
                if e is not None:
                    new["overrides_transformers_field"] = True
                    new["transformers_versions"] = e["transformers_versions"]
                keys[f["name"]] = e = new
            else:
                _refresh(e, f)
            e["lf_versions"].append(lv)
    for name, e in keys.items():
        e.pop("_defaults", None)
        if name in list_accepting and "list" not in e["accepts"]:
            e["accepts"] = sorted(set(e["accepts"]) | {"list"})
            e["list_note"] = "a comma-separated string or a YAML list (split_arg in __post_init__)"
        if e["group"] in ONLY_WHEN_GROUPS and not e.get("only_when"):
            e["only_when"] = ONLY_WHEN_GROUPS[e["group"]]
        if name in DERIVED:
            e["init"] = False
        if name in DEFAULT_NOTES:
            e["default_note"] = DEFAULT_NOTES[name]
        if name in RANGES:
            e["range"] = RANGES[name]
        if name in NULL_FAILS:
            e["null_fails"] = NULL_FAILS[name]
        if name in ref_tf_avail and e["origin"] == "transformers":
            e["reference_transformers_versions"] = ref_tf_avail[name]
    retired = {}
    for old, r in RETIRED.items():
        entry = dict(r)
        if old in keys:  # e.g. use_cache: a transformers 5 key of its own
            entry["also_a_key_in"] = keys[old].get("transformers_versions") or keys[old].get("lf_versions")
        retired[old] = entry
    for old, new in TRANSFORMERS_V5_SUCCESSORS.items():
        if old in keys:
            keys[old]["successor"] = new
    derived = {}
    for name, d in DERIVED.items():
        entry = dict(d)
        if name in keys:
            entry["declared_in"] = keys[name]["dataclass"]
            entry["lf_versions"] = keys[name]["lf_versions"]
        derived[name] = entry
    return {
        "schema": SCHEMA_ID,
        "generated_by": "scripts/gen_key_schema.py",
        "sources": sources,
        "lf_versions": all_lf,
        "transformers_versions": all_tf,
        "parsing": {
            "parser": "HfArgumentParser.parse_dict(allow_extra_keys=False) over [ModelArguments, DataArguments, "
                      "TrainingArguments, FinetuningArguments, GeneratingArguments] (LF parser.py)",
            "allow_extra_args_env": "ALLOW_EXTRA_ARGS: values true/y/1 (case-insensitive) turn the unknown-key error "
                                    "off (LF extras/misc.py is_env_enabled, parser.py _parse_train_args)",
            "typing": "OmegaConf YAML 1.1: 1e-4 float, on/off/yes/no bool, null/~ None; parse_dict coerces nothing",
        },
        "keys": dict(sorted(keys.items())),
        "retired": retired,
        "derived": derived,
        "value_renames": VALUE_RENAMES,
    }


def _entry(f: dict) -> dict:
    e = {k: f.get(k) for k in ("group", "dataclass", "origin", "type", "accepts", "choices", "item_choices",
                               "default", "help", "init")}
    for k in ("only_when", "also_in_groups"):
        if f.get(k):
            e[k] = f[k]
    return e


def _refresh(e: dict, f: dict) -> None:
    """Update entry `e` with a newer version's field `f`: newest text wins, accepted kinds and choices are unioned."""
    for k in ("group", "dataclass", "type", "default", "help", "init"):
        if f.get(k) not in (None, ""):
            e[k] = f[k]
    e["accepts"] = sorted(set(e["accepts"]) | set(f["accepts"]))
    for k in ("choices", "item_choices"):
        if e.get(k) or f.get(k):
            e[k] = list(dict.fromkeys((e.get(k) or []) + (f.get(k) or [])))
    for k in ("only_when", "also_in_groups"):
        if f.get(k):
            e[k] = f[k]


def _vkey(v: str):
    out = []
    for part in v.replace("-", ".").split("."):
        num = "".join(ch for ch in part if ch.isdigit())
        out.append((int(num) if num else -1, part))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lf-version", default="0.9.5",
                    help="llamafactory versions to download and introspect, comma-separated; 'none' for none")
    ap.add_argument("--lf-args", default=str(DEFAULT_REF) if DEFAULT_REF.exists() else None,
                    help="lf_args.json of an LF snapshot to add as a source ('none' to skip)")
    ap.add_argument("--transformers", default="4.57.6,5.6.0,5.8.0",
                    help="transformers versions to introspect, comma-separated, or 'installed'")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="throwaway directory for wheels and targets")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    ap.add_argument("--worker", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker or None)))
        return 0
    lf_versions = [] if args.lf_version in ("", "none") else args.lf_version.split(",")
    lf_args = None if args.lf_args in (None, "", "none") else Path(args.lf_args)
    data = build(lf_versions, lf_args, args.transformers.split(","), Path(args.cache))
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    out = Path(args.out)
    if args.check:
        same = out.exists() and out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{out} differs from a fresh generation")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}: {len(data['keys'])} keys from "
          + ", ".join(f"{s['package']} {s['version']} ({s['how']})" for s in data["sources"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
