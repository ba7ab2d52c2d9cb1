"""``doctor context CONFIG.yaml``: capture the training machine once, in one small JSON (readers/config/context.py).

Run where the training runs. It records what a check elsewhere cannot see: the model's config.json (and its
processor config, and the stored weights' dtype when config.json names none), the stack's versions from the
installed packages, the GPUs (NVML, the reader ``doctor check`` uses) and the host RAM, the accelerate config and
launch command line when given, and the data statistics of the configured datasets under the configured template
(the scan ``doctor check`` runs). It keeps no data text, no secrets and no absolute paths unless `keep_paths`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finetune_doctor import __version__
from finetune_doctor.errors import InputError
from finetune_doctor.facts import data as data_facts
from finetune_doctor.facts import hw as hw_facts
from finetune_doctor.readers.config.context import FILE_NAME, MAX_BYTES, SCHEMA, STACK_PACKAGES, VERSION, \
    data_keys_digest, redact, sanitize, strip_paths
from finetune_doctor.readers.config.stack import installed_versions
from finetune_doctor.readers.config.yamlcfg import load_config
from finetune_doctor.settings import Options


@dataclass
class Captured:
    """What `capture` wrote: `path` of the file, `data` its content, `notes` what could not be captured."""

    path: str
    data: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _model(values: dict[str, Any], config: str, opts: Options, notes: list[str]) -> dict[str, Any] | None:
    from finetune_doctor.readers.model.weights import stored_dtype
    from finetune_doctor.readers.model.modelcfg import load_arch, read_config_json, read_processor_config

    name = values.get("model_name_or_path")
    if not name:
        notes.append("the config names no model_name_or_path: no model config captured")
        return None
    cache = values.get("cache_dir")
    try:
        _, src = load_arch(str(name), base_dir=str(Path(config).resolve().parent),
                           cache_dir=cache if isinstance(cache, str) else None, model_config=opts.model_config,
                           allow_download=False, offline=True)
    except InputError as err:
        raise InputError(f"doctor context: the model's config.json is not on this machine ({err.message})",
                         file=err.file, line=err.line) from None
    if src is None:   # a catalogue match: nothing read here that a check elsewhere lacks
        notes.append(f"{name}: no config.json on this machine (sized from the bundled catalogue); run where the "
                     "model's files are, or pass --model-config")
        return {"name": str(name), "config": None, "processor_config": None, "weights_dtype": None}
    cfg_path = Path(src.path)
    cfg, _ = read_config_json(cfg_path)
    stored = stored_dtype(cfg_path.parent)
    return {"name": str(name), "config": cfg, "processor_config": read_processor_config(cfg_path.parent),
            "weights_dtype": None if stored is None else {"value": stored[0],
                                                          "source": f"safetensors header of {stored[1]}"}}


def _from_file(path: str) -> Any:
    """The GPUs of an nvidia-smi / rocm-smi / amd-smi / npu-smi output (readers/gpus/smi.py, the readers ``doctor gpus
    --from`` uses): AMD and Ascend machines have no NVML to ask."""
    from finetune_doctor.hardware.nvml import hardware_from_snapshot
    from finetune_doctor.readers.gpus.smi import read_gpu_file

    rec = read_gpu_file(path)
    snap = next((s for s in reversed(rec.samples) if s.cards), None)
    if snap is None:
        raise InputError("no GPU in this file", file=path)
    return hardware_from_snapshot(snap)


def _hardware(opts: Options, notes: list[str], gpus_from: str | None = None) -> dict[str, Any] | None:
    hw = _from_file(gpus_from) if gpus_from and not opts.gpu else hw_facts.resolve(opts.gpu, opts.nnodes,
                                                                                   allow_nvml=True)
    ram = hw_facts.parse_host_ram(opts.host_ram) if opts.host_ram else hw_facts.local_ram_gib()
    if hw is None:
        notes.append("no GPU seen here (NVML): the context holds no GPUs; pass --gpu SPEC to record them")
        return {"gpu": None, "num_gpus": None, "capacity_gib": None, "bf16": None, "compute_capability": None,
                "nnodes": opts.nnodes or 1, "host_ram_gib": ram, "in_use_gib": [], "fp8": None, "source": "none"}
    return {"gpu": hw.gpu, "num_gpus": hw.num_gpus, "capacity_gib": hw.capacity_gib, "bf16": hw.bf16,
            "compute_capability": list(hw.compute_capability) if hw.compute_capability else None,
            "nnodes": hw.nnodes, "host_ram_gib": ram if ram is not None else hw.host_ram_gib,
            # memory other processes hold now is this moment's, not the machine's: a check elsewhere sees none
            "in_use_gib": [], "fp8": hw.fp8, "source": "record" if gpus_from and not opts.gpu else hw.source}


def _launch(opts: Options, base: str, keep_paths: bool) -> dict[str, Any] | None:
    from finetune_doctor.readers.config.accelerate import load_accelerate_config
    from finetune_doctor.readers.textfile import read_text

    out: dict[str, Any] = {"accelerate_config": None, "accelerate_config_file": None, "command": None}
    if opts.accelerate_config:
        load_accelerate_config(opts.accelerate_config)   # refuse a file a check would refuse
        from finetune_doctor.readers.config.yamlcfg import parse_yaml_text

        values, _ = parse_yaml_text(read_text(opts.accelerate_config, "accelerate config"), opts.accelerate_config)
        out["accelerate_config"] = sanitize(values, base, keep_paths)
        out["accelerate_config_file"] = Path(opts.accelerate_config).name
    if opts.launch:
        text = redact(read_text(opts.launch, "launch command"))
        out["command"] = text if keep_paths else strip_paths(text, base)
    return out if any(v is not None for v in out.values()) else None


def capture(config: str, overrides: tuple[str, ...], opts: Options, *, output: str | None = None,
            keep_paths: bool = False, scan_data: bool = True, gpus_from: str | None = None) -> Captured:
    """Write the context of `config` (with `overrides`) to `output` (default: ``.doctor-context.json`` beside the
    config). `gpus_from` reads the GPUs from an nvidia-smi / rocm-smi / amd-smi / npu-smi output instead of NVML.
    Raises InputError on bad input or when the model's config.json cannot be read here."""
    doc = load_config(config, tuple(overrides))
    base = str(Path(doc.path).resolve().parent) if doc.path != "-" else str(Path.cwd())
    notes: list[str] = []
    model = _model(doc.values, doc.path, opts, notes)
    data = data_facts.assemble(doc.values, doc.path) if scan_data else None
    if data is None and scan_data and doc.values.get("dataset"):
        notes.append("datasets not found on this machine: no data statistics captured")
    stack = installed_versions()   # every package the stack reader knows, the six of STACK_PACKAGES at least
    content = {
        "schema": SCHEMA, "version": VERSION, "tool": {"name": "finetune-doctor", "version": __version__},
        "config": {"file": Path(doc.path).name,
                   "model_name_or_path": doc.values.get("model_name_or_path"),
                   "data_keys": data_keys_digest(doc.values)},
        "model": model,
        "stack": {**{k: None for k in STACK_PACKAGES}, **stack},
        "hardware": _hardware(opts, notes, gpus_from),
        "launch": _launch(opts, base, keep_paths),
        "data": None if data is None else {k: v for k, v in data.items() if k != "elapsed_s"},
    }
    # model.name and config.model_name_or_path stay as the YAML spells them: they are how a check matches the file
    names = (content["config"]["model_name_or_path"], (model or {}).get("name"))
    content = sanitize(content, base, keep_paths)
    content["config"]["model_name_or_path"] = names[0]
    if content["model"] is not None:
        content["model"]["name"] = names[1]
    text = json.dumps(content, indent=1, ensure_ascii=False, sort_keys=False) + "\n"
    if len(text.encode()) > MAX_BYTES:
        raise InputError(f"doctor context: the context would be {len(text.encode())} bytes, over the "
                         f"{MAX_BYTES >> 20} MiB a context may hold", file=doc.path)
    dest = output or str(Path(base) / FILE_NAME)
    from finetune_doctor.fsutil import atomic_write

    atomic_write(dest, text)
    return Captured(dest, content, notes)
