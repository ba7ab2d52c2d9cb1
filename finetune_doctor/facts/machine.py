"""A ``doctor context`` file (readers/config/context.py) turned into what the equivalent flags would have given.

``check``, ``estimate`` and ``lint`` take ``--context FILE`` (or find ``.doctor-context.json`` beside the config).
Each value acts exactly as its flag, and a flag given on the command line wins: ``model.config`` as
``--model-config`` (after the local folder), ``stack`` as ``--env``, ``hardware`` as ``--gpu`` and
``--host-ram``, ``launch`` as ``--accelerate-config`` and ``--launch``, ``data`` as the dataset scan's result when
the datasets are not on this machine and the YAML keys the statistics depend on are unchanged (data that is here is
scanned here: it may have changed since the capture). A context captured for another model, or one whose model dtype
contradicts a config.json read here, is an InputError naming both sources.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers.config.context import MachineContext, data_keys_digest, find_context
from finetune_doctor.types import Hardware

CONTEXT_COMMANDS = ("check", "estimate", "lint")


def load(config: str, opts: Any, doc: Any) -> tuple[MachineContext | None, str | None]:
    """(the context for `config`, a note) under `opts`, for the commands that take one.

    ``--context FILE`` is used as given: a file for another model is an InputError (`check_model`). A
    ``.doctor-context.json`` found beside the config serves the configs it was captured for (same file name or same
    model); for another config in that folder it is skipped with a note, so that linting a folder of configs
    never stops on it."""
    if getattr(opts, "command", None) not in CONTEXT_COMMANDS:
        return None, None
    explicit = getattr(opts, "context", None)
    ctx = find_context(config, explicit)
    if ctx is None or explicit:
        check_model(ctx, doc)
        return ctx, None
    same_file = (ctx.section("config") or {}).get("file") == Path(doc.path).name
    name = doc.values.get("model_name_or_path")
    if not same_file and ctx.model_name is not None and str(name or "").strip() != ctx.model_name.strip():
        return None, (f"{ctx.path} was captured for {(ctx.section('config') or {}).get('file')} "
                      f"(model {ctx.model_name}): not used for this config")
    check_model(ctx, doc)
    return ctx, None


def how_used(ctx: MachineContext | None, opts: Any) -> str | None:
    """How the report says a context file was taken (JSON ``inputs.context_use``, the header beside ``context:``),
    None when none is used or when it was passed and holds GPUs. A file found beside the config (no --context) is
    named as found; one that records no GPU (``hardware.gpu`` empty: `doctor context` run on a laptop or CI runner,
    trial 16) says what wins for the cards (--gpu when given, else nothing: unknown) and that its stack and host RAM
    are that machine's."""
    if ctx is None:
        return None
    parts = [] if getattr(opts, "context", None) else [
        "found beside the config, used without --context: pass --context FILE for another, or remove it"]
    h = ctx.section("hardware") or {}
    if not h.get("gpu") and not h.get("capacity_gib"):
        gpu = getattr(opts, "gpu", None)
        cards = f"--gpu {gpu} gives the cards" if gpu else "no --gpu: the cards are unknown here"
        parts.append(f"captured on a machine with no GPU, so not the training machine's cards: {cards}; its stack "
                     "and host RAM are that machine's (--env FILE and --host-ram SIZE give the training machine's)")
    return "; ".join(parts) or None


def check_model(ctx: MachineContext | None, doc: Any) -> None:
    """Raise InputError when the context was captured for another model than the config names."""
    if ctx is None or ctx.model_name is None:
        return
    name = doc.values.get("model_name_or_path")
    if name is not None and str(name).strip() != ctx.model_name.strip():
        where = "<command line>" if "model_name_or_path" in (doc.overrides or {}) else \
            f"{doc.path}:{doc.line_of('model_name_or_path') or 1}"
        raise InputError(f"the context {ctx.path} was captured for model '{ctx.model_name}' (model.name), but "
                         f"{where} names '{name}' (model_name_or_path): capture it again with `doctor context` for "
                         "this config, or pass the right --context", file=ctx.path)


def _declared_dtype(cfg: dict[str, Any]) -> str | None:
    for d in (cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}):
        v = d.get("torch_dtype") or d.get("dtype")
        if isinstance(v, str) and v != "auto":
            return v.replace("torch.", "").lower()
    return None


def model_config(ctx: MachineContext | None) -> tuple[dict[str, Any], str, str] | None:
    """(config.json dict, where, note) for ``load_arch(context_config=...)``; the stored weights' dtype the
    context recorded fills a config.json that names none, as ``torch_dtype="auto"`` would on the training
    machine (the note says so, as the local read does)."""
    if ctx is None or ctx.model_config is None:
        return None
    cfg = dict(ctx.model_config)
    wd = (ctx.section("model") or {}).get("weights_dtype")
    note = ""
    if _declared_dtype(cfg) is None and isinstance(wd, dict) and isinstance(wd.get("value"), str):
        cfg["torch_dtype"] = wd["value"]
        where = wd.get("source") or "stored weights"
        note = f"checkpoint dtype {wd['value']} from the {where} (config.json names none)"
    return cfg, f"{ctx.path} (model.config)", note


def check_dtype(ctx: MachineContext | None, arch: Any, model_src: Any) -> None:
    """Raise InputError when a config.json read here names another dtype than the context's model config."""
    if ctx is None or ctx.model_config is None or model_src is None:
        return
    theirs = _declared_dtype(ctx.model_config)
    mine = getattr(arch, "dtype", None)
    if theirs and mine and {"bf16": "bfloat16", "fp16": "float16"}.get(theirs, theirs) != mine:
        raise InputError(f"{model_src.path} gives torch_dtype {mine}, but the context {ctx.path} gives {theirs} "
                         "(model.config.torch_dtype): they describe different checkpoints; capture the context "
                         "again or drop the one that is stale", file=ctx.path)


def hardware(ctx: MachineContext | None, nnodes: int | None) -> Hardware | None:
    """The GPUs (and host RAM) the context recorded, as ``--gpu`` and ``--host-ram`` would give them; None when
    it recorded none."""
    h = (ctx.section("hardware") or {}) if ctx is not None else {}
    if not h.get("gpu") and not h.get("capacity_gib"):
        return None
    cc = h.get("compute_capability")
    n_nodes = nnodes or int(h.get("nnodes") or 1)
    per_node = int(h.get("num_gpus") or 1) // max(int(h.get("nnodes") or 1), 1)
    return Hardware(gpu=h.get("gpu"), num_gpus=per_node * n_nodes, capacity_gib=h.get("capacity_gib"),
                    bf16=h.get("bf16"), source="context",
                    compute_capability=tuple(cc) if isinstance(cc, list) and len(cc) == 2 else None,
                    nnodes=n_nodes, host_ram_gib=h.get("host_ram_gib"),
                    in_use_gib=tuple(h.get("in_use_gib") or ()), fp8=h.get("fp8"))


def host_ram(ctx: MachineContext | None) -> float | None:
    h = (ctx.section("hardware") or {}) if ctx is not None else {}
    v = h.get("host_ram_gib")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def stack(ctx: MachineContext | None) -> dict[str, str]:
    """The package versions the context recorded (those installed on the training machine)."""
    s = (ctx.section("stack") or {}) if ctx is not None else {}
    return {k: str(v) for k, v in s.items() if isinstance(v, str) and v}


def accelerate(ctx: MachineContext | None) -> Any:
    """The accelerate config the context recorded, as ``--accelerate-config`` reads it; None without one."""
    launch = (ctx.section("launch") or {}) if ctx is not None else {}
    values = launch.get("accelerate_config")
    if not isinstance(values, dict):
        return None
    from finetune_doctor.readers.config.accelerate import accelerate_config_from_values

    return accelerate_config_from_values(values, f"{ctx.path} (launch.accelerate_config)")


def launch(ctx: MachineContext | None) -> Any:
    """The launch command line the context recorded, as ``--launch`` reads it; None without one."""
    text = ((ctx.section("launch") or {}) if ctx is not None else {}).get("command")
    if not isinstance(text, str) or not text.strip():
        return None
    from finetune_doctor.readers.config.accelerate import parse_launch

    return parse_launch(text, f"{ctx.path} (launch.command)")


def data(ctx: MachineContext | None, values: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the data facts the context recorded, None) when the YAML keys they depend on are unchanged; (None, note)
    when they changed; (None, None) without recorded statistics."""
    if ctx is None or not isinstance(ctx.section("data"), dict):
        return None, None
    want = (ctx.section("config") or {}).get("data_keys")
    if want != data_keys_digest(values):
        return None, (f"the data statistics in {ctx.path} were taken under other dataset/template/cutoff_len/batch "
                      "values than this config's: not used (run `doctor context` again)")
    return copy.deepcopy(ctx.section("data")), None
