"""AMD's tools, pasted as JSON: ``rocm-smi ... --json`` and ``amd-smi metric|static|process --json``.

**rocm-smi** prints one object keyed by card: ``{"card0": {"VRAM Total Memory (B)": "206141652992", "VRAM Total
Used Memory (B)": "297771008", "GPU use (%)": "0", "Card Series": "...", ...}}``; every value is a string. The
keys are those of ROCm's rocm_smi.py (``--showmeminfo vram``: "VRAM Total Memory (B)" / "VRAM Total Used Memory
(B)"; ``--showuse``: "GPU use (%)"; ``--showproductname``: "Card Series", "Card Model", "Card SKU", "GFX Version";
``--showtemp``/``--showpower``: "Temperature (Sensor ...) (C)", "... Package Power (W)"), as shown in
https://github.com/marimo-team/marimo/issues/9237 and https://github.com/ROCm/rocm_smi_lib/pull/120. VRAM total
and used are bytes, the total being what HIP reports as torch's total memory.

**amd-smi** (ROCm/amdsmi, amdsmi_cli/amdsmi_commands.py) prints a list of per-GPU objects, or ``{"gpu_data":
[...]}`` in newer releases, each with ``"gpu": N`` and sections: ``metric`` → ``mem_usage.total_vram/used_vram/
free_vram``, ``usage.gfx_activity``, ``power.socket_power``, ``temperature.hotspot|edge``; ``static`` →
``asic.market_name``, ``vram.size``, ``bus.bdf``, ``driver.version``; ``process`` → ``process_list[].
process_info{pid, name, memory_usage.vram_mem}``. A value is ``{"value": V, "unit": U}``, a bare number, or
``"N/A"``; amd-smi's "MB" is MiB (196592 MB on a 192 GiB MI300X).

Outputs pasted one after another (``rocm-smi --showmeminfo vram --json; rocm-smi --showuse --json``, or
``amd-smi static --json`` then ``amd-smi metric --json``) are merged per card into one sample; a document that
gives a card a value other than the one the current sample already has starts the next sample (``amd-smi metric --watch``). Lines
before the first ``{``/``[`` (amd-smi's "WARNING: ..." banners) are skipped. Anything of the wrong type or range
is an InputError naming the file and the line of the card.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, ProcessInfo, Snapshot

_UNITS = {"B": 1, "KB": 1 << 10, "KIB": 1 << 10, "MB": MIB, "MIB": MIB, "GB": 1 << 30, "GIB": 1 << 30}
_MAX = 1 << 53
_CARD_KEY = re.compile(r"^card(\d+)$")


def decode_documents(path: str, text: str) -> list[tuple[int, Any]]:
    """Every JSON value in `text`, one after another, each with the line it starts on; leading non-JSON lines
    (banners) are skipped. Raises InputError with the line of the first malformed document."""
    dec = json.JSONDecoder()
    out: list[tuple[int, Any]] = []
    pos = 0
    m = re.search(r"^[ \t]*[\[{]", text, re.M)
    pos = m.start() if m else len(text)
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        line = text.count("\n", 0, pos) + 1
        try:
            value, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg}", file=path, line=exc.lineno) from None
        except RecursionError:
            raise InputError("JSON nested too deeply", file=path, line=line) from None
        out.append((line, value))
        pos = end
    if not out:
        raise InputError("no JSON document found", file=path, line=1)
    return out


def is_vendor_json(d: Any) -> bool:
    """True for rocm-smi or amd-smi output (not a doctor snapshot)."""
    if isinstance(d, list):
        return bool(d) and all(isinstance(x, dict) and "gpu" in x for x in d)
    if isinstance(d, dict):
        return "gpu_data" in d or any(_CARD_KEY.match(str(k)) for k in d)
    return False


def vendor_format(docs: list[tuple[int, Any]]) -> str:
    return "rocm-smi" if any(isinstance(d, dict) and any(_CARD_KEY.match(str(k)) for k in d) for _, d in docs) \
        else "amd-smi"


def snapshots(path: str, host: str, text: str, docs: list[tuple[int, Any]], notes: list[str]) -> Iterator[Snapshot]:
    """Samples from rocm-smi / amd-smi documents, merged per card as the module docstring says."""
    cards: dict[int, dict[str, Any]] = {}
    first_line = docs[0][0]
    for line, doc in docs:
        if not is_vendor_json(doc):
            raise InputError("neither rocm-smi nor amd-smi JSON (expected {\"card0\": ...} or [{\"gpu\": 0, ...}])",
                             file=path, line=line)
        rows = list(_rows(path, text, line, doc))
        if any(v is not None and k not in ("line", "name") and cards.get(idx, {}).get(k, v) != v
               for idx, _, vals in rows for k, v in vals.items()):
            yield _snapshot(path, host, cards, first_line)
            cards, first_line = {}, line
        for idx, card_line, vals in rows:
            c = cards.setdefault(idx, {"line": card_line})
            c.update({k: v for k, v in vals.items() if v is not None and k != "line"})
    if cards:
        yield _snapshot(path, host, cards, first_line)
    if not any(c.get("used") is not None for c in cards.values()):  # the last sample tells
        notes.append(f"{path}: no used-memory values (amd-smi static / rocm-smi without --showmeminfo vram): "
                     "capacity only")


def _rows(path: str, text: str, line: int, doc: Any) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(card index, line of the card, values) for each card of one document."""
    offset = _offset_of_line(text, line)
    if isinstance(doc, dict) and "gpu_data" in doc:
        doc = doc["gpu_data"]
        if not isinstance(doc, list):
            raise InputError("amd-smi gpu_data must be a list", file=path, line=line)
    if isinstance(doc, list):
        for item in doc:
            if not isinstance(item, dict):
                raise InputError("amd-smi entries must be objects", file=path, line=line)
            idx = item.get("gpu")
            at = _find(text, f'"gpu": {idx}', offset) if isinstance(idx, int) else -1
            card_line = text.count("\n", 0, at) + 1 if at >= 0 else line
            if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < 1 << 20:
                raise InputError(f"amd-smi 'gpu' must be a card number, not {_short(idx)}", file=path,
                                 line=card_line)
            offset = max(offset, at)
            yield idx, card_line, _amd_values(path, card_line, item)
        return
    for key, vals in doc.items():
        m = _CARD_KEY.match(str(key))
        if not m:
            continue   # "system": driver-wide values
        at = _find(text, f'"{key}"', offset)
        card_line = text.count("\n", 0, at) + 1 if at >= 0 else line
        if not isinstance(vals, dict):
            raise InputError(f"rocm-smi {key} must be an object", file=path, line=card_line)
        yield int(m.group(1)), card_line, _rocm_values(path, card_line, vals)


def _offset_of_line(text: str, line: int) -> int:
    pos = 0
    for _ in range(line - 1):
        nxt = text.find("\n", pos)
        if nxt < 0:
            return pos
        pos = nxt + 1
    return pos


def _find(text: str, needle: str, start: int) -> int:
    at = text.find(needle, start)
    return at if at >= 0 else text.find(needle.replace(": ", ":"), start)


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _number(path: str, line: int, what: str, raw: Any, scale: float = 1.0, unit: str | None = None) -> float | None:
    """A numeric value as the tools print it: a number, a numeric string, {"value", "unit"}, or "N/A"."""
    if isinstance(raw, dict):
        unit = raw.get("unit") if isinstance(raw.get("unit"), str) else unit
        raw = raw.get("value")
    if raw is None or (isinstance(raw, str) and raw.strip().upper() in ("N/A", "NA", "", "UNKNOWN")):
        return None
    if isinstance(raw, bool):
        raise InputError(f"{what}: expected a number, found {_short(raw)}", file=path, line=line)
    if isinstance(raw, str):
        m = re.match(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([A-Za-z%]*)\s*$", raw)
        if not m:
            raise InputError(f"{what}: expected a number, found {_short(raw)}", file=path, line=line)
        raw, unit = float(m.group(1)), (m.group(2) or unit)
    if not isinstance(raw, (int, float)):
        raise InputError(f"{what}: expected a number, found {_short(raw)}", file=path, line=line)
    if unit and unit.upper() in _UNITS:
        scale = _UNITS[unit.upper()]
    value = float(raw) * scale
    if not 0 <= value <= _MAX:   # NaN fails too
        raise InputError(f"{what}: {_short(raw)} is out of range", file=path, line=line)
    return value


def _text(v: Any) -> str | None:
    return v.strip() if isinstance(v, str) and v.strip() and v.strip().upper() != "N/A" else None


def _rocm_values(path: str, line: int, vals: dict[str, Any]) -> dict[str, Any]:
    low = {str(k).lower(): v for k, v in vals.items()}
    out: dict[str, Any] = {"line": line}
    out["total"] = _number(path, line, "VRAM Total Memory (B)", low.get("vram total memory (b)"))
    out["used"] = _number(path, line, "VRAM Total Used Memory (B)", low.get("vram total used memory (b)"))
    util = _number(path, line, "GPU use (%)", low.get("gpu use (%)"))
    out["util"] = None if util is None else int(round(min(util, 100)))
    for k, v in low.items():
        if k.startswith("temperature") and out.get("temp") is None:
            t = _number(path, line, str(k), v)
            out["temp"] = None if t is None else int(round(t))
        if "power" in k and k.endswith("(w)") and "cap" not in k and out.get("power") is None:
            out["power"] = _number(path, line, str(k), v)
    for key in ("card series", "device name", "card sku", "card model"):
        name = _text(low.get(key))
        if name and not re.match(r"^0x[0-9a-f]+$", name, re.I):
            out["name"] = name
            break
    out["bus"] = _text(low.get("pci bus"))
    return out


def _amd_values(path: str, line: int, item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"line": line}
    mem = item.get("mem_usage") if isinstance(item.get("mem_usage"), dict) else {}
    out["total"] = _number(path, line, "mem_usage.total_vram", mem.get("total_vram"), MIB, "MB")
    out["used"] = _number(path, line, "mem_usage.used_vram", mem.get("used_vram"), MIB, "MB")
    vram = item.get("vram") if isinstance(item.get("vram"), dict) else {}
    if out["total"] is None:
        out["total"] = _number(path, line, "vram.size", vram.get("size"), MIB, "MB")
    usage = item.get("usage") if isinstance(item.get("usage"), dict) else {}
    util = _number(path, line, "usage.gfx_activity", usage.get("gfx_activity"))
    out["util"] = None if util is None else int(round(min(util, 100)))
    power = item.get("power") if isinstance(item.get("power"), dict) else {}
    out["power"] = _number(path, line, "power.socket_power",
                           power.get("socket_power", power.get("average_socket_power")))
    temp = item.get("temperature") if isinstance(item.get("temperature"), dict) else {}
    t = _number(path, line, "temperature", temp.get("hotspot", temp.get("edge")))
    out["temp"] = None if t is None else int(round(t))
    asic = item.get("asic") if isinstance(item.get("asic"), dict) else {}
    out["name"] = _text(asic.get("market_name"))
    bus = item.get("bus") if isinstance(item.get("bus"), dict) else {}
    out["bus"] = _text(bus.get("bdf"))
    if "process_list" in item:
        out["procs"] = _amd_processes(path, line, item["process_list"])
    return out


def _amd_processes(path: str, line: int, plist: Any) -> tuple[ProcessInfo, ...]:
    if not isinstance(plist, list):
        raise InputError("process_list must be a list", file=path, line=line)
    out = []
    for p in plist:
        info = p.get("process_info", p) if isinstance(p, dict) else None
        if not isinstance(info, dict):
            if isinstance(info, str):   # "No running processes detected"
                continue
            raise InputError("process_info must be an object", file=path, line=line)
        pid = info.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < 1 << 32:
            raise InputError(f"process pid must be a number, not {_short(pid)}", file=path, line=line)
        use = info.get("memory_usage") if isinstance(info.get("memory_usage"), dict) else {}
        vram = _number(path, line, "memory_usage.vram_mem", use.get("vram_mem", info.get("mem_usage")), 1, "B")
        out.append(ProcessInfo(pid=pid, used_bytes=None if vram is None else int(vram), name=_text(info.get("name"))))
    return tuple(out)


def _snapshot(path: str, host: str, cards: dict[int, dict[str, Any]], line: int) -> Snapshot:
    out = []
    for idx in sorted(cards):
        c = cards[idx]
        total = None if c.get("total") is None else int(c["total"])
        used = None if c.get("used") is None else int(c["used"])
        procs = c.get("procs")
        out.append(CardSnapshot(
            index=idx, name=c.get("name"), bus_id=c.get("bus"), used_bytes=used, total_bytes=total,
            free_bytes=None if total is None or used is None else max(0, total - used), util_gpu=c.get("util"),
            temperature_c=c.get("temp"), power_w=c.get("power"), processes=procs,
            process_note=None if procs is not None else "rocm-smi/amd-smi metric output lists no processes",
            line=c["line"]))
    return Snapshot(time=None, host=host, cards=tuple(out), source=path, line=line)
