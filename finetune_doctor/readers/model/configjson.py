"""One ``config.json``: read it safely, know where each key is, and read typed, range-checked fields from it.

Limits (issue 17, classes 1-3): only regular files are read, at most `MAX_BYTES`; the JSON parser's own limits
(nesting depth → RecursionError, integers over 4,300 digits → ValueError, Python >= 3.11) and ``Infinity``/``NaN``
become InputErrors naming the file. Sizes are checked against `LIMITS` before any arithmetic, so a hostile
``num_attention_heads: 0`` or ``num_hidden_layers: 10000000`` is one line naming the file, the line and the key.
"""

from __future__ import annotations

import json
import math
import os
import stat
from typing import Any

from finetune_doctor.readers.model.errors import ModelConfigInvalid
from finetune_doctor.types import SourceDoc

MAX_BYTES = 16 << 20   # the largest real config.json files (with layer_types lists) are well under 100 kB

# Inclusive ranges of the integer fields that size a model. The bounds are far beyond any published model
# (deepest decoder: 126 layers, Llama-3.1-405B; widest: hidden 16,384; largest vocabulary: 262,208, Gemma 3;
# most experts: 384, Kimi-K2) and exist so that nothing downstream computes with absurd values.
LIMITS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 1 << 20),
    "num_layers": (1, 16384),
    "num_heads": (1, 1 << 16),
    "num_kv_heads": (1, 1 << 16),
    "head_dim": (1, 1 << 16),
    "intermediate_size": (1, 1 << 24),
    "vocab_size": (1, 1 << 24),
    "num_experts": (0, 1 << 16),
    "num_experts_per_tok": (0, 1 << 16),
    "rank": (0, 1 << 20),
    "other": (0, 1 << 30),
}


def json_key_positions(text: str) -> dict[str, tuple[int, int]]:
    """(line, column), both 1-based, of every object key in a JSON text, by dotted path (``text_config.hidden_size``):
    readers/deepspeed/dsjson.py `key_positions`, the one scanner (a duplicated key at its last occurrence, as json.load)."""
    # imported here: a model resolved from the catalogue reads no config.json (issue #22, lint's start-up)
    from finetune_doctor.readers.deepspeed.dsjson import key_positions

    return key_positions(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_text(text: str, path: str) -> Any:
    """``json.loads`` with every parser failure as a `ModelConfigInvalid` naming `path` (and the line)."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ModelConfigInvalid(f"config.json is not valid JSON: {e.msg} (column {e.colno})", file=path,
                                 line=e.lineno, missing="a readable config.json") from None
    except RecursionError:
        raise ModelConfigInvalid("config.json nests deeper than the JSON reader allows", file=path,
                                 missing="a readable config.json") from None
    except ValueError as e:  # Infinity/NaN, or an integer longer than Python's digit limit
        raise ModelConfigInvalid(f"config.json holds a value that exceeds what it can hold: {e}", file=path,
                                 missing="a readable config.json") from None


def read_text_file(path: str | os.PathLike[str], what: str = "model config") -> str:
    """UTF-8 text of a regular file of at most `MAX_BYTES`; FIFOs, devices and directories are refused."""
    p = str(path)
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise ModelConfigInvalid(f"{what} is not a regular file", file=p, missing=f"a readable {what}")
        if st.st_size > MAX_BYTES:
            raise ModelConfigInvalid(f"{what} exceeds {MAX_BYTES >> 20} MiB ({st.st_size} bytes)", file=p,
                                     missing=f"a readable {what}")
        with open(p, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
        return data.decode("utf-8-sig")
    except ModelConfigInvalid:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ModelConfigInvalid(f"cannot read {what}: {msg}", file=p, missing=f"a readable {what}") from None


def read_config_json(path: str | os.PathLike[str]) -> tuple[dict[str, Any], SourceDoc]:
    """Parse one ``config.json``. Returns the dict and a `SourceDoc` (role ``model``) with key positions.

    Raises ModelConfigInvalid (an InputError, with file and line) when the file cannot be read, is not a regular
    file, is too large, is not JSON, or is not an object.
    """
    p = str(path)
    text = read_text_file(p)
    cfg = parse_json_text(text, p)
    if not isinstance(cfg, dict):
        raise ModelConfigInvalid(f"config.json must hold a JSON object, found {type(cfg).__name__}", file=p, line=1,
                                 missing="a readable config.json")
    try:
        positions = json_key_positions(text)
    except (ValueError, RecursionError):
        positions = {}
    return cfg, SourceDoc("model", p, positions)


class ConfigView:
    """A config dict with the defaults of its transformers configuration class, for typed, range-checked reads.

    `prefix` is the dotted path of this dict inside the file (``text_config``) so that errors name the key as
    the file spells it; `positions` gives its line.
    """

    def __init__(self, cfg: dict[str, Any], defaults: dict[str, Any], source: str, model_type: str,
                 positions: dict[str, tuple[int, int]] | None = None, prefix: str = ""):
        self.cfg, self.defaults, self.source, self.model_type = cfg, defaults, source, model_type
        self.positions, self.prefix = positions or {}, prefix

    def has(self, *names: str) -> bool:
        return any(self.cfg.get(n) is not None for n in names)

    def get(self, *names: str, default: Any = None) -> Any:
        for nm in names:
            if self.cfg.get(nm) is not None:
                return self.cfg[nm]
        for nm in names:
            if self.defaults.get(nm) is not None:
                return self.defaults[nm]
        return default

    def _which(self, names: tuple[str, ...]) -> str:
        for nm in names:
            if self.cfg.get(nm) is not None:
                return nm
        return names[0]

    def error(self, key: str, message: str) -> ModelConfigInvalid:
        path = f"{self.prefix}.{key}" if self.prefix else key
        line = (self.positions.get(path) or self.positions.get(key) or (None,))[0]
        return ModelConfigInvalid(message, file=self.source, line=line, key=path,
                                  missing=f"a valid '{path}' in config.json")

    def _int(self, v: Any, key: str, kind: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and (
                not math.isfinite(v) or v != int(v))):
            raise self.error(key, f"config.json '{key}' is not an integer: {str(v)[:40]!r}")
        v = int(v)
        lo, hi = LIMITS.get(kind, LIMITS["other"])
        if v < lo:
            raise self.error(key, f"config.json '{key}' is {v}, below {lo}")
        if v > hi:
            raise self.error(key, f"config.json '{key}' is {v}, which exceeds {hi}")
        return v

    def req(self, *names: str, kind: str = "other") -> int:
        """The first of `names` present (or defaulted) as a range-checked int; raises when none is."""
        v = self.get(*names)
        if v is None:
            where = f" (model_type '{self.model_type}')" if self.model_type else ""
            raise self.error(names[0], f"config.json{where} has no '{names[0]}'")
        return self._int(v, self._which(names), kind)

    def opt_int(self, *names: str, kind: str = "other") -> int | None:
        v = self.get(*names)
        return None if v is None else self._int(v, self._which(names), kind)

    def int_list(self, name: str) -> list[int]:
        v = self.get(name, default=[]) or []
        if not isinstance(v, (list, tuple)):
            raise self.error(name, f"config.json '{name}' is not a list: {str(v)[:40]!r}")
        return [self._int(x, name, "other") for x in v]

    def str_list(self, name: str) -> list[str]:
        v = self.cfg.get(name)
        if v is None:
            return []
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise self.error(name, f"config.json '{name}' is not a list of strings")
        return [str(x) for x in v]
