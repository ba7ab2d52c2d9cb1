"""The run's LLaMA-Factory YAML as ``doctor gpus --config`` reads it: the values that rank the causes of uneven
memory, with key positions for the findings, and the DeepSpeed JSON it names when that file is readable."""

from __future__ import annotations


from dataclasses import dataclass, field
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers.config.yamlcfg import load_config as _load_yaml
from finetune_doctor.readers.deepspeed.dsconfig import resolve_ds_path
from finetune_doctor.readers.deepspeed.dsjson import read_json
from finetune_doctor.types import SourceDoc


@dataclass
class ConfigInfo:
    """The LLaMA-Factory YAML given with ``--config``: values, key positions and its DeepSpeed JSON if readable."""

    path: str
    values: dict[str, Any]
    source: SourceDoc
    ds: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def get(self, key: str) -> Any:
        return self.values.get(key)


def load_config(path: str) -> ConfigInfo:
    """Read `path` with the shared YAML reader (readers/config/yamlcfg.py; InputError for a bad file) and the DeepSpeed
    JSON its ``deepspeed`` key names, found the way ``doctor check`` finds it (readers/deepspeed/dsconfig.py
    `resolve_ds_path`: the working directory, the YAML's folder, then each of its parents). A missing or unreadable
    DeepSpeed file is a note, not an error: only the ZeRO-3 save cost is then left unranked."""
    doc = _load_yaml(path)
    info = ConfigInfo(path, dict(doc.values), doc.source())
    ds = info.values.get("deepspeed")
    if isinstance(ds, str) and ds.strip():
        try:
            info.ds = read_json(str(resolve_ds_path(ds, path))).values
        except InputError as err:
            if "not found" in err.message:
                info.notes.append(f"{path}: deepspeed file {ds} not found; ZeRO save cost not ranked")
            else:
                info.notes.append(f"cannot read the DeepSpeed config ({err}); ZeRO save cost not ranked")
    elif isinstance(ds, dict):
        info.ds = ds
    return info
