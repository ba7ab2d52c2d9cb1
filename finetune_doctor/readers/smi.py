"""Read what users already have about their GPUs: nvidia-smi tables, ``--query-gpu`` CSV logs, and recordings.

Formats (`read_gpu_file` picks one from the extension and the first lines):

* **nvidia-smi text table** — the default ``nvidia-smi`` output, pasted or saved, one or many tables (``nvidia-smi
  -l``). Layouts of drivers 418-470 (79 columns), 510-545 (87) and 550+ (89) are recognised by their rows, not by
  column offsets: the GPU rows ``|   0  NAME  On | BUS Off | ECC |`` / ``| FAN TEMP PERF PWR/CAP | USED / TOTAL |
  UTIL COMPUTE |``, the "MIG devices" table and the "Processes" table (with or without GI/CI columns). Names
  that nvidia-smi truncated (``NVIDIA A100-SXM...``) are kept as printed.
* **nvidia-smi CSV** — ``nvidia-smi --query-gpu=timestamp,index,name,memory.used,memory.total,... --format=csv``
  with or without ``nounits``; the header names the columns, so any subset and order works as long as it has
  ``index`` (or ``uuid``) and ``memory.used``. ``[N/A]``/``[Not Supported]``/``[Unknown Error]`` read as None. A row
  whose metrics are all errors marks a gap. This is also what ``doctor gpus --record FILE.csv`` writes.
* **JSONL recording** — ``doctor gpus --record FILE.jsonl``: a header line ``{"schema": ...}`` then one `Snapshot`
  per line (gaps as ``{"time": ..., "gap": "..."}``). A ``.json`` file holds one snapshot or ``{"samples": [...]}``.
* **per-card summary lines** — ``gpu 6`` / `` used:  41.7285GB   86.93%`` / `` free:   6.2715GB   13.07%``, as pasted in
  https://github.com/hiyouga/LlamaFactory/issues/7110 (cases/037); units are read as printed ("GB" taken as GiB,
  the script divides by 2^30).

A CSV or JSONL file whose last line is cut off (the recorder was killed mid-write) loses that line with a note;
anything malformed before the last line is an InputError naming the file and line. Every card keeps the line it
came from. Files carry no host name except JSONL recordings; the others are named after the file's stem.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, MigInstance, ProcessInfo, Snapshot

RECORD_SCHEMA = "finetune-doctor/gpus-record/v1"

# the columns `doctor gpus --record x.csv` writes, in nvidia-smi --query-gpu names (nvidia-smi --help-query-gpu)
QUERY_COLUMNS = ("timestamp", "index", "name", "uuid", "pci.bus_id", "memory.used", "memory.free", "memory.total",
                 "memory.reserved", "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw",
                 "power.limit")
QUERY_UNITS = {"memory.used": "MiB", "memory.free": "MiB", "memory.total": "MiB", "memory.reserved": "MiB",
               "utilization.gpu": "%", "utilization.memory": "%", "power.draw": "W", "power.limit": "W"}


@dataclass(frozen=True)
class Recording:
    """What one file holds: its samples in time order (gaps included), its format and reading notes."""

    path: str
    format: str                     # table | csv | jsonl | json | summary
    host: str
    samples: tuple[Snapshot, ...]
    notes: tuple[str, ...] = ()


def read_gpu_file(path: str) -> Recording:
    """Read one recorded or pasted GPU file; raises InputError (file, line) when it is none of the formats."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
    if not text.strip():
        raise InputError("empty file", file=path)
    head = text.lstrip()[:4000]
    suffix = p.suffix.lower()
    if suffix == ".jsonl" or (head.startswith("{") and "\n{" in text.strip() and suffix != ".json"):
        return read_record_jsonl(path, text)
    if suffix == ".json" or head.startswith("{"):
        return read_record_json(path, text)
    if "NVIDIA-SMI" in head or re.search(r"^\|\s+\d+\s+.+\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", head, re.M):
        return read_smi_table(path, text)
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if suffix == ".csv" or ("," in first and re.search(r"\b(index|memory\.used|uuid)\b", first)):
        return read_query_csv(path, text)
    if re.search(r"^\s*gpu\s*\d+\s*$", head, re.M | re.I) and re.search(r"^\s*used:", head, re.M | re.I):
        return read_summary_lines(path, text)
    raise InputError("not a GPU recording: expected an nvidia-smi table, an nvidia-smi --query-gpu CSV, "
                     "or a doctor gpus --record JSONL file", file=path, line=1)


# -- nvidia-smi text table --------------------------------------------------------------------------------------
_GPU_ROW1 = re.compile(r"^\|\s*(\d+)\s+(.*?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f.]+)\s+(On|Off)\s*"
                       r"\|\s*(\S+)\s*\|\s*$")
_GPU_ROW2 = re.compile(r"^\|\s*(\S+)\s+(\d+C|N/A)\s+(P\d+|N/A)\s+(.*?)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|"
                       r"\s*(\d+%|N/A)\s+(.*?)\s*\|\s*$")
_MIG_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_PROC_ROW = re.compile(r"^\|\s*(\d+)\s+(?:(N/A|\d+)\s+(N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(.*?)\s+"
                       r"(\d+MiB|N/A)\s*\|\s*$")
_VERSION = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)\s+CUDA Version:\s+(\S+)")
_STAMP = re.compile(r"^\s*(\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\s*$")


def read_smi_table(path: str, text: str | None = None) -> Recording:
    """One `Snapshot` per nvidia-smi table in the text (``nvidia-smi -l`` prints one per interval)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace") if text is None else text
    host = Path(path).stem
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if "NVIDIA-SMI" in ln and "Driver Version" in ln] or [0]
    samples = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        lo = start
        stamp = None
        for j in range(max(0, start - 3), start):
            m = _STAMP.match(lines[j])
            if m:
                stamp = _parse_ctime(m.group(1))
        samples.append(_one_table(path, host, lines, lo, end, stamp))
    samples = [s for s in samples if s.cards]
    if not samples:
        raise InputError("no GPU rows found in this nvidia-smi table", file=path, line=1)
    return Recording(path, "table", host, tuple(samples))


def _one_table(path: str, host: str, lines: list[str], lo: int, hi: int, stamp: float | None) -> Snapshot:
    driver = cuda = None
    cards: dict[int, dict] = {}
    order: list[int] = []
    migs: dict[int, list[MigInstance]] = {}
    procs: dict[int, list[ProcessInfo]] = {}
    saw_proc_table = False
    pending: tuple[int, str, int] | None = None
    for ln_no in range(lo, hi):
        ln = lines[ln_no].rstrip()
        m = _VERSION.search(ln)
        if m:
            driver, cuda = m.group(2), m.group(3)
            continue
        if "Processes:" in ln:
            saw_proc_table = True
            continue
        m = _GPU_ROW1.match(ln)
        if m:
            idx = int(m.group(1))
            pending = (idx, m.group(2).strip(), ln_no + 1)
            cards[idx] = {"index": idx, "name": m.group(2).strip(), "bus_id": m.group(4), "line": ln_no + 1,
                          "ecc": m.group(6)}
            order.append(idx)
            continue
        m = _GPU_ROW2.match(ln)
        if m and pending is not None:
            idx = pending[0]
            pw = re.match(r"(\d+(?:\.\d+)?)W\s*/\s*(\d+(?:\.\d+)?)W", m.group(4).strip())
            cards[idx].update(
                used=int(m.group(5)) * MIB, total=int(m.group(6)) * MIB,
                temp=None if m.group(2) == "N/A" else int(m.group(2)[:-1]),
                power=float(pw.group(1)) if pw else None, limit=float(pw.group(2)) if pw else None,
                util=None if m.group(7) == "N/A" else int(m.group(7)[:-1]))
            pending = None
            continue
        m = _MIG_ROW.match(ln)
        if m and not saw_proc_table:
            idx = int(m.group(1))
            migs.setdefault(idx, []).append(MigInstance(gi=int(m.group(2)), ci=int(m.group(3)),
                                                        used_bytes=int(m.group(5)) * MIB,
                                                        total_bytes=int(m.group(6)) * MIB))
            continue
        if saw_proc_table:
            m = _PROC_ROW.match(ln)
            if m:
                idx = int(m.group(1))
                gi, ci = m.group(2), m.group(3)
                used = None if m.group(7) == "N/A" else int(m.group(7)[:-3]) * MIB
                kind = "graphics" if m.group(5) == "G" else "compute"
                procs.setdefault(idx, []).append(ProcessInfo(
                    pid=int(m.group(4)), used_bytes=used, name=m.group(6).strip() or None, kind=kind,
                    mig=f"{gi}/{ci}" if gi and gi != "N/A" else None))
            elif "No running processes found" in ln:
                pass
    out = []
    for idx in order:
        c = cards[idx]
        if "used" not in c:
            raise InputError(f"GPU {idx}: the memory row after its name row is missing or malformed",
                             file=path, line=c["line"] + 1)
        mig_list = tuple(migs.get(idx, ()))
        out.append(CardSnapshot(
            index=idx, name=c["name"], bus_id=c["bus_id"], used_bytes=c["used"], total_bytes=c["total"],
            free_bytes=c["total"] - c["used"], util_gpu=c.get("util"), temperature_c=c.get("temp"),
            power_w=c.get("power"), power_limit_w=c.get("limit"), mig_enabled=True if mig_list else None,
            mig=mig_list,
            processes=tuple(procs.get(idx, ())) if saw_proc_table else None,
            process_note=None if saw_proc_table else "the pasted table has no Processes section",
            line=c["line"]))
    return Snapshot(time=stamp, host=host, driver=driver, cuda_driver=cuda, cards=tuple(out), source=path,
                    line=lo + 1)


def _parse_ctime(s: str) -> float | None:
    try:
        return datetime.strptime(re.sub(r"\s+", " ", s), "%a %b %d %H:%M:%S %Y").timestamp()
    except ValueError:
        return None


# -- nvidia-smi --query-gpu CSV ---------------------------------------------------------------------------------
_BRACKET = re.compile(r"^\[(.*)\]$")


def read_query_csv(path: str, text: str | None = None) -> Recording:
    """Samples from an ``nvidia-smi --query-gpu ... --format=csv`` log (a new sample starts when an index repeats)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace") if text is None else text
    host = Path(path).stem
    notes: list[str] = []
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    while rows and not any(f.strip() for f in rows[-1]):
        rows.pop()
    if rows and not text.endswith("\n") and len(rows) > 1:
        # nvidia-smi and the recorder end every row with a newline: a last row without one was cut off mid-write,
        # and even when its field count looks right its last number may be cut short
        notes.append(f"{path}:{len(rows)}: last row has no line end (recording cut off?); ignored")
        rows.pop()
    if not rows:
        raise InputError("empty CSV", file=path)
    header = [h.strip() for h in rows[0]]
    cols: list[tuple[str, str | None]] = []
    if any(h.split(" [")[0] in QUERY_COLUMNS or h.split(" [")[0] in ("timestamp", "index") for h in header) and \
            not _looks_numeric_row(header):
        for h in header:
            m = re.match(r"^(.*?)\s*\[(.*)\]$", h)
            cols.append((m.group(1), m.group(2)) if m else (h, None))
        body = rows[1:]
        first_line = 2
    elif len(header) == len(QUERY_COLUMNS):
        # --format=csv,noheader[,nounits]: only our own recorder's column order can be assumed
        cols = [(c, QUERY_UNITS.get(c)) for c in QUERY_COLUMNS]
        body = rows
        first_line = 1
        notes.append(f"{path}: no header; assumed the doctor gpus --record columns")
    else:
        raise InputError("CSV without a header: record with nvidia-smi --format=csv (not noheader) so the "
                         "columns are named", file=path, line=1)
    names = [c for c, _ in cols]
    if "memory.used" not in names or not ({"index", "uuid"} & set(names)):
        raise InputError("the CSV needs the columns index (or uuid) and memory.used; it has "
                         + ", ".join(names), file=path, line=1)
    samples: list[Snapshot] = []
    current: list[tuple[CardSnapshot, str | None]] = []
    seen: set = set()
    stamp: float | None = None
    for k, row in enumerate(body):
        line = first_line + k
        if not row or all(not f.strip() for f in row):
            continue
        try:
            card, t, err = _csv_card(row, cols, line)
        except ValueError as exc:
            raise InputError(str(exc), file=path, line=line) from None
        key = card.uuid if "index" not in names else card.index
        if key in seen:
            samples.append(_csv_sample(current, stamp, host, path))
            current, seen = [], set()
        if not current:
            stamp = t
        seen.add(key)
        # a row whose memory reads "[Unknown Error]" / "[GPU is lost]" is a failed query, not a value
        failed = err if err and card.used_bytes is None else None
        current.append((card, failed))
    if current:
        samples.append(_csv_sample(current, stamp, host, path))
    if not samples:
        raise InputError("the CSV has a header but no rows", file=path, line=1)
    return Recording(path, "csv", host, tuple(samples), tuple(notes))


def _looks_numeric_row(fields: list[str]) -> bool:
    return sum(bool(re.match(r"^\s*-?\d", f)) for f in fields) >= max(2, len(fields) // 2)


def _csv_sample(rows: list[tuple[CardSnapshot, str | None]], stamp: float | None, host: str, path: str) -> Snapshot:
    """One sample; a gap when every card's query failed, else the cards that read (failed ones dropped)."""
    first = rows[0][0].line
    ok = [c for c, err in rows if err is None]
    if not ok:
        return Snapshot(time=stamp, host=host, gap=f"nvidia-smi: {rows[0][1]}", source=path, line=first)
    return Snapshot(time=stamp, host=host, cards=tuple(ok), source=path, line=first)


def _csv_card(row: list[str], cols: list[tuple[str, str | None]], line: int) -> tuple[CardSnapshot, float | None,
                                                                                        str | None]:
    if len(row) != len(cols):
        raise ValueError(f"expected {len(cols)} fields, found {len(row)}")
    vals: dict[str, object] = {}
    err = None
    for (name, unit), raw in zip(cols, row):
        raw = raw.strip()
        m = _BRACKET.match(raw)
        if m or raw in ("N/A", ""):
            if m and m.group(1) not in ("N/A", "Not Supported", "Insufficient Permissions"):
                err = m.group(1)
            vals[name] = None
            continue
        vals[name] = _csv_value(name, unit, raw)
    t = None
    if vals.get("timestamp"):
        t = _parse_stamp(str(vals["timestamp"]))
    mib = {k: (None if vals.get(k) is None else int(round(float(vals[k]) * MIB)))
           for k in ("memory.used", "memory.total", "memory.free", "memory.reserved")}
    idx = vals.get("index")
    card = CardSnapshot(
        index=int(idx) if idx is not None else -1, name=_s(vals.get("name")), uuid=_s(vals.get("uuid")),
        bus_id=_s(vals.get("pci.bus_id")), used_bytes=mib["memory.used"], total_bytes=mib["memory.total"],
        free_bytes=mib["memory.free"], reserved_bytes=mib["memory.reserved"],
        util_gpu=_i(vals.get("utilization.gpu")), util_mem=_i(vals.get("utilization.memory")),
        temperature_c=_i(vals.get("temperature.gpu")), power_w=_f(vals.get("power.draw")),
        power_limit_w=_f(vals.get("power.limit")), processes=None,
        process_note="nvidia-smi --query-gpu records no processes", line=line)
    if idx is None and card.uuid is None:
        raise ValueError("row has neither index nor uuid")
    return card, t, err


def _csv_value(name: str, unit: str | None, raw: str) -> object:
    if name in ("timestamp", "name", "uuid", "pci.bus_id", "driver_version"):
        return raw
    m = re.match(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$", raw)
    if not m:
        raise ValueError(f"{name}: cannot read {raw!r} as a number")
    value, suffix = float(m.group(1)), m.group(2)
    if suffix == "GiB":
        value *= 1024.0
    elif suffix == "KiB":
        value /= 1024.0
    elif suffix and suffix not in ("MiB", "%", "W", "C"):
        raise ValueError(f"{name}: unexpected unit {suffix!r} in {raw!r}")
    return value


def _parse_stamp(s: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S.%f",
                "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(s, fmt).timestamp()
        except ValueError:
            continue
    raise ValueError(f"timestamp: cannot read {s!r}")


def _s(v: object) -> str | None:
    return None if v is None else str(v)


def _i(v: object) -> int | None:
    return None if v is None else int(round(float(v)))  # type: ignore[arg-type]


def _f(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]


# -- JSON / JSONL recordings -----------------------------------------------------------------------------------
def read_record_jsonl(path: str, text: str | None = None) -> Recording:
    """Samples of a ``doctor gpus --record FILE.jsonl`` recording."""
    text = Path(path).read_text(encoding="utf-8", errors="replace") if text is None else text
    lines = text.splitlines()
    notes: list[str] = []
    samples: list[Snapshot] = []
    host = Path(path).stem
    for k, ln in enumerate(lines):
        if not ln.strip():
            continue
        is_last = k == len(lines) - 1 or all(not x.strip() for x in lines[k + 1:])
        try:
            d = json.loads(ln)
            if not isinstance(d, dict):
                raise ValueError("a line must be a JSON object")
            if "schema" in d and "cards" not in d and "gap" not in d:
                if d["schema"] != RECORD_SCHEMA:
                    raise ValueError(f"unknown schema {d['schema']!r} (expected {RECORD_SCHEMA})")
                host = d.get("host") or host
                continue
            snap = Snapshot.from_dict(d, source=path, line=k + 1)
            snap = replace(snap, cards=tuple(replace(c, line=k + 1) for c in snap.cards), host=snap.host or host)
        except (ValueError, TypeError) as exc:
            if is_last and not text.endswith("\n"):
                notes.append(f"{path}:{k + 1}: last line is truncated; ignored")
                break
            raise InputError(f"bad recording line: {exc}", file=path, line=k + 1) from None
        samples.append(snap)
    if not samples:
        raise InputError("the recording has no samples", file=path, line=1)
    return Recording(path, "jsonl", host, tuple(samples), tuple(notes))


def read_record_json(path: str, text: str | None = None) -> Recording:
    """One snapshot, or ``{"samples": [...]}``, as a JSON document (the fixtures' format)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace") if text is None else text
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", file=path, line=exc.lineno) from None
    if not isinstance(d, dict):
        raise InputError("expected a JSON object", file=path, line=1)
    if "unavailable" in d:
        raise InputError(f"this file records a machine without NVML ({d['unavailable']}): nothing to read",
                         file=path, line=1)
    items = d.get("samples", [d])
    samples = []
    try:
        for item in items:
            if "raise" in item:
                samples.append(Snapshot(time=None, host=d.get("host"), gap=f"NVML error: {item['raise']}",
                                        source=path))
                continue
            samples.append(Snapshot.from_dict(item, source=path))
    except (ValueError, TypeError) as exc:
        raise InputError(f"bad snapshot: {exc}", file=path) from None
    host = next((s.host for s in samples if s.host), Path(path).stem)
    samples = [replace(s, host=s.host or host) for s in samples]
    return Recording(path, "json", host, tuple(samples))


# -- "gpu N / used: X GB P%" summaries -----------------------------------------------------------------------
_SUM_GPU = re.compile(r"^\s*gpu\s*(\d+)\s*$", re.I)
_SUM_VAL = re.compile(r"^\s*(used|free|total)\s*:\s*([\d.]+)\s*(GiB|GB|MiB|MB)\b", re.I)


def read_summary_lines(path: str, text: str | None = None) -> Recording:
    """Per-card ``used:``/``free:`` summaries (case 037's paste): one snapshot, used and total per card."""
    text = Path(path).read_text(encoding="utf-8", errors="replace") if text is None else text
    cards: list[dict] = []
    for k, ln in enumerate(text.splitlines()):
        m = _SUM_GPU.match(ln)
        if m:
            cards.append({"index": int(m.group(1)), "line": k + 1})
            continue
        m = _SUM_VAL.match(ln)
        if m and cards:
            scale = 1024 ** 3 if m.group(3).upper().startswith("G") else MIB
            cards[-1][m.group(1).lower()] = int(float(m.group(2)) * scale)
    out = []
    for c in cards:
        if "used" not in c:
            raise InputError(f"gpu {c['index']} has no 'used:' line", file=path, line=c["line"])
        total = c.get("total") or (c["used"] + c["free"] if "free" in c else None)
        out.append(CardSnapshot(index=c["index"], used_bytes=c["used"], total_bytes=total, free_bytes=c.get("free"),
                                processes=None, process_note="the summary lists no processes", line=c["line"]))
    host = Path(path).stem
    return Recording(path, "summary", host, (Snapshot(time=None, host=host, cards=tuple(out), source=path, line=1),),
                     (f"{path}: 'GB' read as GiB (2^30 bytes), as printed",))
