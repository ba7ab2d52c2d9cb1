"""The training machine, captured once: the ``doctor context`` file (schema ``finetune-doctor/context``, version 1).

``doctor context`` writes it on the training machine; ``check``, ``estimate`` and ``lint`` read it anywhere
(``--context FILE``, or ``.doctor-context.json`` beside the config) and take its values exactly as the equivalent
flags: ``model.config`` as ``--model-config``, ``stack`` as ``--env``, ``hardware`` as ``--gpu`` and
``--host-ram``, ``launch.accelerate_config`` as ``--accelerate-config``, ``data`` as if the dataset scan had run
here. A flag given on the command line still wins over the file.

The file holds no data text, no secrets and no absolute paths of the training machine unless the user opted in
(`sanitize`): strings that look like secrets are replaced by ``<redacted>``, absolute paths by their path relative to
the config's folder (or their last component).

Shape (every key but ``schema`` and ``version`` may be null)::

    {"schema": "finetune-doctor/context", "version": 1, "tool": {"name", "version"},
     "config": {"file", "model_name_or_path", "data_keys": sha256 of the YAML keys the statistics depend on},
     "model": {"name", "config": {...config.json...}, "processor_config": {...} | null,
               "weights_dtype": {"value", "source"} | null},
     "stack": {"torch": "2.6.0", "transformers": ..., "deepspeed", "llamafactory", "peft", "accelerate"},
     "hardware": {"gpu", "num_gpus", "capacity_gib", "bf16", "compute_capability", "nnodes", "host_ram_gib",
                  "in_use_gib", "fp8", "source"},
     "launch": {"accelerate_config": {...} | null, "accelerate_config_file", "command"},
     "data": {...the data facts, sanitized...}}
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError

SCHEMA = "finetune-doctor/context"
VERSION = 1
FILE_NAME = ".doctor-context.json"
MAX_BYTES = 4 << 20   # a config.json is < 100 kB and the data statistics a few kB: 4 MiB is far beyond a real file
STACK_PACKAGES = ("torch", "transformers", "deepspeed", "llamafactory", "peft", "accelerate")
# The YAML keys the data statistics depend on (the scan reads them): statistics captured under other values are stale.
DATA_KEYS = ("dataset", "eval_dataset", "dataset_dir", "template", "cutoff_len", "stage", "packing", "neat_packing",
             "per_device_train_batch_size", "max_samples", "val_size", "mix_strategy", "train_on_prompt",
             "mask_history", "streaming", "tokenized_path", "model_name_or_path")

# environment names in a launch line (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, ...)
_SECRET_ENV = re.compile(r"(?i)(token|secret|passw|api[_-]?key|access[_-]?key|credential|private[_-]?key)")
# keys of a JSON object whose string value is a credential (not bos_token/image_token, which name vocabulary items)
_SECRET_KEY = re.compile(r"(?i)^(hf_|hub_|wandb_|api_|auth_|access_|private_|secret_)?"
                         r"(token|key|secret|password|passwd|api_key|access_key|secret_key)$")
_SECRET_VALUE = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{20,}|ghp_[A-Za-z0-9]{20,}|"
                           r"AKIA[0-9A-Z]{16}|xox[abp]-[A-Za-z0-9\-]{10,})")
_ASSIGN = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)")
_ABS_PATH = re.compile(r"(?<![\w.:/])(/[^\s'\"<>|;,()]+)")


@dataclass(frozen=True)
class MachineContext:
    """One read context file: `path` where it was read, `data` the whole validated JSON object."""

    path: str
    data: dict[str, Any]

    def section(self, key: str) -> Any:
        v = self.data.get(key)
        return v if v is not None else None

    @property
    def model_config(self) -> dict[str, Any] | None:
        m = self.section("model") or {}
        return m.get("config") if isinstance(m.get("config"), dict) else None

    @property
    def model_name(self) -> str | None:
        m = self.section("model") or {}
        return m.get("name") if isinstance(m.get("name"), str) else None


def _fail(path: str, what: str) -> InputError:
    return InputError(f"--context: {what}", file=path)


def read_context(path: str) -> MachineContext:
    """Read and validate a context file. Raises InputError (one line, exit 2) for a file that cannot be read, is
    larger than `MAX_BYTES`, is not JSON, is not the doctor's format, or comes from a newer schema version."""
    from finetune_doctor.readers.textfile import decode, read_bytes

    try:
        size = os.stat(path).st_size
    except OSError as err:
        raise _fail(path, f"cannot read it: {err.strerror or err}") from None
    if size > MAX_BYTES:
        raise _fail(path, f"the file is {size} bytes, larger than a doctor context can be ({MAX_BYTES >> 20} MiB)")
    text = decode(read_bytes(path, "doctor context", MAX_BYTES), path, "doctor context")
    try:
        data = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, RecursionError) as err:
        msg = err.msg if isinstance(err, json.JSONDecodeError) else str(err)
        raise _fail(path, f"not a doctor context file: not JSON ({msg})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise _fail(path, f"not a doctor context file (no \"schema\": \"{SCHEMA}\"); write one with "
                          "`doctor context CONFIG.yaml` on the training machine")
    ver = data.get("version")
    if not isinstance(ver, int) or isinstance(ver, bool) or ver < 1:
        raise _fail(path, f"not a doctor context file: version {ver!r} is not a schema version")
    if ver > VERSION:
        raise _fail(path, f"context schema version {ver} is newer than this doctor reads ({VERSION}): upgrade "
                          "finetune-doctor, or write the file with the same version")
    for key, kind in (("model", dict), ("stack", dict), ("hardware", dict), ("launch", dict), ("data", dict),
                      ("config", dict)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise _fail(path, f"not a doctor context file: '{key}' is a {type(data[key]).__name__}, not an object")
    return MachineContext(path, data)


def find_context(config: str, explicit: str | None) -> MachineContext | None:
    """The context to use for `config`: `explicit` (``--context FILE``), else ``.doctor-context.json`` in the
    config's folder, else None."""
    if explicit:
        return read_context(explicit)
    from finetune_doctor.fsutil import real_parent

    beside = real_parent(config) / FILE_NAME
    return read_context(str(beside)) if beside.is_file() else None


def data_keys_digest(values: dict[str, Any]) -> str:
    """sha256 of the YAML values the data statistics depend on (`DATA_KEYS`): statistics captured under another
    digest were taken for another dataset, template, cutoff or batch. A digest, so no path or name leaves."""
    import hashlib

    picked = {k: values.get(k) for k in DATA_KEYS if values.get(k) is not None}
    return hashlib.sha256(json.dumps(picked, sort_keys=True, default=str).encode()).hexdigest()


# ---- what a context may hold -------------------------------------------------------------------------------------

def redact(text: str) -> str:
    """`text` with secrets replaced by ``<redacted>``: values of ``KEY=VALUE`` assignments whose key names a token,
    key, secret or password, and strings shaped like known credentials (hf_..., sk-..., ghp_..., AKIA...)."""
    text = _ASSIGN.sub(lambda m: f"{m.group(1)}=<redacted>" if _SECRET_ENV.search(m.group(1)) else m.group(0), text)
    return _SECRET_VALUE.sub("<redacted>", text)


def strip_paths(text: str, base: str) -> str:
    """`text` with every absolute path made relative to `base` when it lies under it, else cut to its last
    component (the training machine's folder layout stays on that machine)."""
    def one(m: re.Match[str]) -> str:
        p = m.group(1)
        try:
            rel = os.path.relpath(p, base)
        except ValueError:
            rel = ""
        if rel and not rel.startswith(".."):
            return rel
        return os.path.basename(p.rstrip("/")) or p
    return _ABS_PATH.sub(one, text)


def sanitize(value: Any, base: str, keep_paths: bool = False, _key: str = "") -> Any:
    """A copy of `value` safe to leave the machine: secret-named keys' values and credential-shaped strings
    redacted, absolute paths relativized (unless `keep_paths`), and no data text — ``examples``, ``message``
    and ``text`` entries are dropped (they may quote a sample)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            ks = str(k)
            if ks in ("examples", "message", "text", "content", "prompt", "response"):
                continue
            # a position record's `key` ({file, line, column, key}) names a config key, e.g. a dataset's entry in
            # dataset_info.json: not a credential (the training machine's report shows it, so must the other's)
            if _SECRET_KEY.search(ks) and isinstance(v, str) and not (ks == "key" and _key == "location"):
                out[ks] = "<redacted>"
                continue
            out[ks] = sanitize(v, base, keep_paths, ks)
        return out
    if isinstance(value, list):
        return [sanitize(v, base, keep_paths, _key) for v in value]
    if isinstance(value, str):
        s = redact(value)
        return s if keep_paths else strip_paths(s, base)
    return value
