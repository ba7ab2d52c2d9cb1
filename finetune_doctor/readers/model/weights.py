"""The stored dtype of a local checkpoint, from its safetensors header: what ``torch_dtype="auto"`` resolves to
when config.json names no dtype.

transformers (modeling_utils.py ``_get_dtype`` / ``get_state_dict_dtype``) takes the dtype of the first
floating-point tensor of the checkpoint when the config has none. A safetensors file starts with an 8-byte
little-endian header length and a JSON header mapping tensor names to ``{"dtype", "shape", "data_offsets"}``
(safetensors format specification, docs/source/index.mdx "Format"); only that header is read, never the tensors.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

MAX_HEADER = 100 << 20   # the format caps the header at 100 MB (safetensors lib.rs N_LEN check)
_FLOAT = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
          "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _first_shard(folder: Path) -> Path | None:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            wm = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
        except (OSError, ValueError, AttributeError, RecursionError):
            wm = {}
        shards = sorted(set(v for v in wm.values() if isinstance(v, str)))
        for s in shards:
            if (folder / s).is_file() and "/" not in s and "\\" not in s:
                return folder / s
    single = folder / "model.safetensors"
    if single.is_file():
        return single
    found = sorted(folder.glob("*.safetensors"))
    return found[0] if found else None


def stored_dtype(folder: Path) -> tuple[str, str] | None:
    """(dtype, file name) of the first floating-point tensor in the checkpoint's first safetensors file in
    `folder`, or None when there is none or its header cannot be read (a note-free None: the caller falls back)."""
    f = _first_shard(folder)
    if f is None:
        return None
    try:
        with open(f, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                return None
            (n,) = struct.unpack("<Q", raw)
            if n <= 0 or n > MAX_HEADER:
                return None
            header = json.loads(fh.read(n).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    for name, t in header.items():
        if name != "__metadata__" and isinstance(t, dict) and t.get("dtype") in _FLOAT:
            return _FLOAT[t["dtype"]], f.name
    return None
