"""Terminal safety: text from untrusted files (a DeepSpeed key, a log line, a dataset path) never reaches the terminal
as a control sequence.

Every string of a `Report` passes through `sanitize` before any reporter sees it: C0 and C1 control characters
other than newline and tab (ESC starts every ANSI/OSC sequence, e.g. the set-window-title ``ESC ] 0 ; ... BEL``),
DEL, and lone UTF-16 surrogates (which a JSON file can carry as ``\\ud800`` and which no UTF-8 stream can print)
become visible escapes such as ``\\x1b`` and ``\\ud800``. The reporters' own styling (rich's colours) is added
afterwards and is not affected.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def safe_str(s: str) -> str:
    """`s` with every unsafe character (module docstring) written as a visible escape."""
    return _UNSAFE.sub(_escape, s) if _UNSAFE.search(s) else s


def sanitize(obj: Any) -> Any:
    """A copy of `obj` (a Report, or any nest of frozen dataclasses, mappings, sequences) with `safe_str` applied
    to every string, keys included. Objects without unsafe text come back as they are."""
    if isinstance(obj, str):
        return safe_str(obj)
    if isinstance(obj, dict):
        return {sanitize(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [sanitize(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(sanitize(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            old = getattr(obj, f.name)
            new = sanitize(old)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj
