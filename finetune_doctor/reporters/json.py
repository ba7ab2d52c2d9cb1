"""JSON reporter: the report as schema ``finetune-doctor/report/v1`` (DESIGN.md "JSON report").

Every v1 key is always present, in the documented order, so consumers can index without guards:
``schema, tool, command, inputs, run, hardware, memory, findings, timeline, summary``. Absent facts are
``null`` (``run`` for lint, ``memory`` when nothing was estimated), never missing keys. Command-specific
extras from ``report.sections`` (``gpus``, ``data``, ``sweep``, ``probe``, ...) follow under their own keys, then
``notes``; they may add keys but never replace a v1 key.

Units and rounding: memory in GiB (2^30 bytes) rounded to 2 decimals by the value types' ``as_dict``;
``run.params_b`` in billions of parameters, rounded to 2 decimals as in the DESIGN.md example. Non-finite
floats (NaN, inf) become ``null`` because JSON has no spelling for them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from typing import Any

from finetune_doctor import __version__
from finetune_doctor.types import Report

SCHEMA = "finetune-doctor/report/v1"
SCHEMA_FILE = "report-v1.json"
"""The JSON Schema (draft 2020-12) of SCHEMA, shipped in the package as finetune_doctor/schema/report-v1.json."""
TOOL_NAME = "finetune-doctor"

V1_KEYS = ("schema", "tool", "command", "inputs", "run", "hardware", "memory", "findings", "timeline", "summary")
INPUT_KEYS = ("config", "deepspeed", "run_dir")
RUN_KEYS = ("stage", "finetuning_type", "model", "params_b", "precision", "zero_stage", "offload", "world_size",
            "micro_batch", "grad_accum", "seq_len", "gradient_checkpointing", "attention")
PRECISION_KEYS = ("weights", "trainable", "compute")
OFFLOAD_KEYS = ("optimizer", "param")
MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "runtime", "total")
HARDWARE_NONE = {"gpu": None, "num_gpus": None, "capacity_gib": None, "bf16": None, "source": "none"}


class JsonReporter:
    """Render a `Report` as indented UTF-8 JSON text ending in a newline."""

    def render(self, report: Report) -> str:
        return json.dumps(report_dict(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def load_schema() -> dict[str, Any]:
    """The report's JSON Schema (its ``$id`` is SCHEMA) from the installed package, for CI pipelines and tests."""
    from importlib.resources import files

    return json.loads(files("finetune_doctor").joinpath("schema", SCHEMA_FILE).read_text(encoding="utf-8"))


def report_dict(report: Report) -> dict[str, Any]:
    """The schema-v1 object for `report` (plain dicts/lists/scalars, ready for ``json.dumps``).

    Raises ValueError when a section key would replace a v1 key (a pipeline bug, not bad input).
    """
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "command": report.command,
        "inputs": _inputs(report.inputs),
        "run": _run(report.run),
        "hardware": report.hardware.as_dict() if report.hardware else dict(HARDWARE_NONE),
        "memory": _memory(report),
        "findings": [f.as_dict() for f in report.findings],
        "timeline": [e.as_dict() for e in report.timeline],
        "summary": report.summary(),
        # verdict-moving assumptions first (docs/DESIGN.md, "Honest verdicts")
        "assumptions": [a.as_dict() for a in sorted(report.assumptions, key=lambda a: not a.moves_verdict)],
    }
    for key, value in report.sections.items():
        if key in out or key == "notes":
            raise ValueError(f"report section {key!r} would replace a schema-v1 key")
        out[key] = value
    out["notes"] = list(report.notes)
    return plain(out)


def _inputs(inputs: dict[str, Any] | None) -> dict[str, Any]:
    d: dict[str, Any] = {k: None for k in INPUT_KEYS}
    for k, v in (inputs or {}).items():
        d[k] = os.fspath(v) if isinstance(v, os.PathLike) else v
    return d


def _ordered(src: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    """`src` with `keys` first (None when missing), then its other keys in their own order."""
    src = dict(src or {})
    d = {k: src.pop(k, None) for k in keys}
    d.update(src)
    return d


def _run(run: dict[str, Any] | None) -> dict[str, Any] | None:
    if run is None:
        return None
    d = _ordered(run, RUN_KEYS)
    d["precision"] = _ordered(d["precision"], PRECISION_KEYS)
    d["offload"] = _ordered(d["offload"], OFFLOAD_KEYS)
    if isinstance(d["params_b"], (int, float)) and not isinstance(d["params_b"], bool):
        d["params_b"] = round(float(d["params_b"]), 2)
    return d


def _memory(report: Report) -> dict[str, Any] | None:
    if report.memory is None:
        return None
    m = report.memory.as_dict()
    m["per_gpu_gib"] = _ordered(m["per_gpu_gib"], MEMORY_TERMS)
    return m


def plain(obj: Any) -> Any:
    """`obj` as JSON-ready data: dataclasses via their ``as_dict`` (else field by field), tuples and sets as
    lists, paths as strings, enums as their values, NaN/inf as None. Mapping keys become strings."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((plain(v) for v in obj), key=repr)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        as_dict = getattr(obj, "as_dict", None)
        return plain(as_dict() if callable(as_dict) else dataclasses.asdict(obj))
    if isinstance(obj, enum.Enum):
        return plain(obj.value)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    # numpy scalars and similar expose .item(); anything else is shown, not dropped
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return plain(item())
        except (TypeError, ValueError):
            pass
    return str(obj)
