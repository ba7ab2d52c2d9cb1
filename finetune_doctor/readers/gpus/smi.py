"""Read what users already have about their GPUs: nvidia-smi tables, ``--query-gpu`` CSV logs, ``-q -x`` XML,
rocm-smi/amd-smi JSON, npu-smi tables, and the doctor's own recordings.

Every format streams (`open_gpu_file` yields one `Snapshot` at a time, memory bounded by one sample), and only
regular files or ``-`` (stdin) are read (readers/gpus/gpu_input.py). Formats (picked from the extension and the first
lines; the AMD, Ascend and XML readers live in readers/gpus/rocm_smi.py, readers/gpus/npu_smi.py, readers/gpus/smi_xml.py):

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

* **nvidia-smi -q -x** XML, **rocm-smi --json**, **amd-smi metric/static --json**, **npu-smi info**: see their
  modules.

A CSV or JSONL file whose last line is cut off (the recorder was killed mid-write) loses that line with a note;
anything malformed before the last line is an InputError naming the file and line. Every card keeps the line it
came from. Files carry no host name except JSONL recordings; the others are named after the file's stem.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.record import QUERY_COLUMNS, QUERY_UNITS, RECORD_SCHEMA
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, MigInstance, ProcessInfo, Snapshot
from finetune_doctor.readers.gpus import npu_smi, rocm_smi, smi_procs, smi_xml
from finetune_doctor.readers.gpus.gpu_input import TextInput


@dataclass(frozen=True)
class Recording:
    """What one file holds: its samples in time order (gaps included), its format and reading notes."""

    path: str
    format: str                     # table | csv | jsonl | json | summary | xml | rocm-smi | amd-smi | npu-smi
    host: str
    samples: tuple[Snapshot, ...]
    notes: tuple[str, ...] = ()


class GpuStream:
    """One GPU file, read as it is iterated: yields its `Snapshot`s in file order; `notes` grows while reading.

    Raises InputError (file, line) while iterating when a sample is malformed, and at construction when the
    file cannot be opened, is not a regular file, or is none of the formats.
    """

    def __init__(self, path: str):
        self.path = path
        self.input = TextInput(path)
        self.host = self.input.host
        self.notes: list[str] = []
        head = self.input.head()
        if not head.strip():
            self.input.close()
            raise InputError("empty file", file=path)
        try:
            self.format, self._reader = _detect(path, head)
        except InputError:
            self.input.close()
            raise

    def __iter__(self) -> Iterator[Snapshot]:
        try:
            yield from self._reader(self)
        finally:
            self.input.close()


def open_gpu_file(path: str) -> GpuStream:
    """A streaming reader of one recorded or pasted GPU file (see GpuStream)."""
    return GpuStream(path)


def read_gpu_file(path: str) -> Recording:
    """Read one recorded or pasted GPU file whole; raises InputError (file, line) when it is none of the formats
    or has no sample. For large recordings prefer `open_gpu_file`, which does not keep the samples."""
    stream = open_gpu_file(path)
    samples = tuple(stream)
    if not samples:
        raise InputError("no GPU samples found", file=path, line=1)
    return Recording(path, stream.format, next((s.host for s in samples if s.host), stream.host), samples,
                     tuple(stream.notes))


def _first_json_line(head: str) -> dict | None:
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    try:
        d = json.loads(first)
    except (ValueError, RecursionError):   # not a JSON line, or nested past the parser: not a recording's header
        return None
    return d if isinstance(d, dict) else None


def _detect(path: str, head: str) -> tuple[str, Callable[[GpuStream], Iterable[Snapshot]]]:
    suffix = Path(path).suffix.lower()
    text = head.lstrip()
    first = _first_json_line(head)
    # the recorder writes JSONL under .json too (hardware/record.py): the first line decides, not the name
    if suffix in (".jsonl", ".ndjson") or (first is not None and (
            {"cards", "gap"} & set(first) or first.get("schema") == RECORD_SCHEMA)):
        return "jsonl", _read_jsonl
    if text.startswith("<?xml") or text.startswith("<nvidia_smi_log"):
        return "xml", smi_xml.read
    json_start = re.search(r"^[\[{]", text, re.M)
    if suffix == ".json" or text.startswith(("{", "[")) or (json_start and re.match(r"^(?:WARNING|ERROR)", text)):
        return "json", _read_json_document
    if re.search(r"npu-smi\s+\S+\s+Version:|^\|\s*NPU\s+Name\s+\|", text, re.M):
        return "npu-smi", npu_smi.read
    if "NVIDIA-SMI" in text or re.search(r"^\|\s+\d+\s+.+\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", text, re.M):
        return "table", _read_table
    first_line = next((ln for ln in text.splitlines() if ln.strip()), "")
    if smi_procs.looks_like_compute_apps(first_line):
        return "compute-apps", smi_procs.read_compute_apps
    if suffix == ".csv" or ("," in first_line and re.search(r"\b(index|memory\.used|uuid)\b", first_line)):
        return "csv", _read_csv
    if re.search(r"^\s*gpu\s*\d+\s*$", text, re.M | re.I) and re.search(r"^\s*used:", text, re.M | re.I):
        return "summary", _read_summary
    if smi_procs.looks_like_pmon(text):
        return "pmon", smi_procs.read_pmon
    if smi_procs.looks_like_processes(text):
        return "processes", smi_procs.read_processes
    raise InputError("not a GPU recording: expected an nvidia-smi table (or its Processes section), --query-gpu or "
                     "--query-compute-apps CSV, pmon, -q -x XML, rocm-smi or amd-smi JSON, an npu-smi info table, or a "
                     "doctor gpus --record file", file=path, line=1)


# -- nvidia-smi text table --------------------------------------------------------------------------------------
_GPU_ROW1 = re.compile(r"^\|\s*(\d+)\s+(.*?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f.]+)\s+(On|Off)\s*"
                       r"\|\s*(\S+)\s*\|\s*$")
_GPU_ROW2 = re.compile(r"^\|\s*(\S+)\s+(\d+C|N/A)\s+(P\d+|N/A)\s+(.*?)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|"
                       r"\s*(\d+%|N/A)\s+(.*?)\s*\|\s*$")
_MIG_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_VERSION = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)\s+CUDA Version:\s+(\S+)")
_STAMP = re.compile(r"^\s*(\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\s*$")
_TABLE_MAX_LINES = 100_000


def _read_table(stream: GpuStream) -> Iterator[Snapshot]:
    """One `Snapshot` per nvidia-smi table (``nvidia-smi -l`` prints one per interval), a table at a time."""
    path, host = stream.path, stream.host
    lines: list[str] = []
    first_no = 1
    stamp: float | None = None
    recent: list[str] = []
    found = False
    for raw in stream.input.lines():
        ln = raw.rstrip("\r\n")
        if "NVIDIA-SMI" in ln and "Driver Version" in ln and lines:
            snap = _one_table(path, host, lines, first_no, stamp)
            if snap.cards:
                found = True
                yield snap
            lines, first_no = [], stream.input.lineno
            stamp = next((t for t in (_stamp_of(x) for x in recent[-3:]) if t is not None), None)
        elif "NVIDIA-SMI" in ln and "Driver Version" in ln:
            stamp = next((t for t in (_stamp_of(x) for x in recent[-3:]) if t is not None), None)
        lines.append(ln)
        if len(lines) > _TABLE_MAX_LINES:
            raise InputError(f"one nvidia-smi table exceeds {_TABLE_MAX_LINES} lines", file=path, line=first_no)
        recent = (recent + [ln])[-3:]
    if lines:
        snap = _one_table(path, host, lines, first_no, stamp)
        if snap.cards:
            found = True
            yield snap
    if not found:
        raise InputError("no GPU rows found in this nvidia-smi table", file=path, line=1)


def _stamp_of(line: str) -> float | None:
    m = _STAMP.match(line)
    return _parse_ctime(m.group(1)) if m else None


def _one_table(path: str, host: str, lines: list[str], lo: int, stamp: float | None) -> Snapshot:
    """The table in `lines`, whose first line is line `lo` of the file."""
    driver = cuda = None
    cards: dict[int, dict] = {}
    order: list[int] = []
    migs: dict[int, list[MigInstance]] = {}
    procs: dict[int, list[ProcessInfo]] = {}
    saw_proc_table = False
    pending: int | None = None
    for k, ln in enumerate(lines):
        ln_no = lo + k
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
            pending = idx
            cards[idx] = {"index": idx, "name": m.group(2).strip(), "bus_id": m.group(4), "line": ln_no,
                          "ecc": m.group(6)}
            order.append(idx)
            continue
        m = _GPU_ROW2.match(ln)
        if m and pending is not None:
            pw = re.match(r"(\d+(?:\.\d+)?)W\s*/\s*(\d+(?:\.\d+)?)W", m.group(4).strip())
            cards[pending].update(
                used=int(m.group(5)) * MIB, total=int(m.group(6)) * MIB,
                temp=None if m.group(2) == "N/A" else int(m.group(2)[:-1]),
                power=float(pw.group(1)) if pw else None, limit=float(pw.group(2)) if pw else None,
                util=None if m.group(7) == "N/A" else int(m.group(7)[:-1]))
            pending = None
            continue
        m = _MIG_ROW.match(ln)
        if m and not saw_proc_table:
            migs.setdefault(int(m.group(1)), []).append(MigInstance(
                gi=int(m.group(2)), ci=int(m.group(3)), used_bytes=int(m.group(5)) * MIB,
                total_bytes=int(m.group(6)) * MIB))
            continue
        if saw_proc_table:
            row = smi_procs.process_row(ln)
            if row is not None:
                procs.setdefault(row[0], []).append(row[1])
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
            mig=mig_list, processes=tuple(procs.get(idx, ())) if saw_proc_table else None,
            process_note=None if saw_proc_table else "the pasted table has no Processes section",
            line=c["line"]))
    return Snapshot(time=stamp, host=host, driver=driver, cuda_driver=cuda, cards=tuple(out), source=path, line=lo)


def _parse_ctime(s: str) -> float | None:
    try:
        return datetime.strptime(re.sub(r"\s+", " ", s), "%a %b %d %H:%M:%S %Y").timestamp()
    except ValueError:
        return None


# -- nvidia-smi --query-gpu CSV ---------------------------------------------------------------------------------
_BRACKET = re.compile(r"^\[(.*)\]$")


def _read_csv(stream: GpuStream) -> Iterator[Snapshot]:
    """Samples from an ``nvidia-smi --query-gpu ... --format=csv`` log (a new sample starts when an index repeats),
    one row at a time."""
    path, host, notes = stream.path, stream.host, stream.notes
    state = {"ended": True}

    def feed() -> Iterator[str]:
        for line in stream.input.lines():
            state["ended"] = line.endswith("\n")
            yield line

    reader = csv.reader(feed(), skipinitialspace=True)
    cols: list[tuple[str, str | None]] | None = None
    names: list[str] = []
    current: list[tuple[CardSnapshot, str | None]] = []
    seen: set = set()
    stamp: float | None = None
    rows = 0
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not f.strip() for f in row):
                continue
            if cols is None:
                cols, header_row = _csv_columns(path, row, notes)
                names = [c for c, _ in cols]
                if header_row:
                    continue
            if not state["ended"] and rows:
                # nvidia-smi and the recorder end every row with a newline: a last row without one was cut off
                # mid-write, and even when its field count looks right its last number may be cut short
                notes.append(f"{path}:{line}: last row has no line end (recording cut off?); ignored")
                break
            try:
                card, t, err = _csv_card(row, cols, line)
            except ValueError as exc:
                raise InputError(str(exc), file=path, line=line) from None
            rows += 1
            key = card.uuid if "index" not in names else card.index
            if key in seen:
                yield _csv_sample(current, stamp, host, path)
                current, seen = [], set()
            if not current:
                stamp = t
            seen.add(key)
            # a row whose memory reads "[Unknown Error]" / "[GPU is lost]" is a failed query, not a value
            current.append((card, err if err and card.used_bytes is None else None))
    except csv.Error as exc:
        raise InputError(f"malformed CSV: {exc}", file=path, line=reader.line_num) from None
    if cols is None:
        raise InputError("empty CSV", file=path)
    if current:
        yield _csv_sample(current, stamp, host, path)
    elif not rows:
        raise InputError("the CSV has a header but no rows", file=path, line=1)


def _csv_columns(path: str, header: list[str], notes: list[str]) -> tuple[list[tuple[str, str | None]], bool]:
    """(columns with their units, whether `header` is a header row) for the first row of a --query-gpu CSV."""
    header = [h.strip() for h in header]
    cols: list[tuple[str, str | None]] = []
    if any(h.split(" [")[0] in QUERY_COLUMNS for h in header) and not _looks_numeric_row(header):
        for h in header:
            m = re.match(r"^(.*?)\s*\[(.*)\]$", h)
            cols.append((m.group(1), m.group(2)) if m else (h, None))
        is_header = True
    elif len(header) == len(QUERY_COLUMNS):
        # --format=csv,noheader[,nounits]: only our own recorder's column order can be assumed
        cols = [(c, QUERY_UNITS.get(c)) for c in QUERY_COLUMNS]
        is_header = False
        notes.append(f"{path}: no header; assumed the doctor gpus --record columns")
    else:
        raise InputError("CSV without a header: record with nvidia-smi --format=csv (not noheader) so the "
                         "columns are named", file=path, line=1)
    names = [c for c, _ in cols]
    if "memory.used" not in names or not ({"index", "uuid"} & set(names)):
        raise InputError("the CSV needs the columns index (or uuid) and memory.used; it has "
                         + ", ".join(names), file=path, line=1)
    return cols, is_header


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
    m = re.match(r"^(-?\d{1,20}(?:\.\d{1,20})?)\s*([A-Za-z%]*)$", raw)
    if not m:
        raise ValueError(f"{name}: cannot read {raw[:40]!r} as a number")
    value, suffix = float(m.group(1)), m.group(2)
    if value < 0 or value > 2 ** 40:
        raise ValueError(f"{name}: {raw[:40]!r} is out of range")
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
def _bounded_int(text: str) -> int:
    """JSON integers through the one bounded number parser (numbers.py): a 5,000-digit value is named as such
    instead of Python's int-conversion limit message (issue 27)."""
    from finetune_doctor.numbers import MAX_INT_DIGITS, bounded_int

    n = bounded_int(text)
    if n is None:
        raise ValueError(f"a number of {len(text)} digits (more than {MAX_INT_DIGITS}) is no GPU metric")
    return n


def _read_jsonl(stream: GpuStream) -> Iterator[Snapshot]:
    """Samples of a ``doctor gpus --record FILE.jsonl`` recording, a line at a time."""
    path = stream.path
    host = stream.host
    for ln in stream.input.lines():
        k = stream.input.lineno
        if not ln.strip():
            continue
        try:
            d = json.loads(ln, parse_int=_bounded_int)
            if not isinstance(d, dict):
                raise ValueError("a line must be a JSON object")
            if "schema" in d and "cards" not in d and "gap" not in d:
                if d["schema"] != RECORD_SCHEMA:
                    raise ValueError(f"unknown schema {d['schema']!r} (expected {RECORD_SCHEMA})")
                if d.get("host") is not None and not isinstance(d["host"], str):
                    raise ValueError("host must be a string")
                host = d.get("host") or host
                continue
            if not d.get("host"):
                d["host"] = host
            snap = Snapshot.from_dict(d, source=path, line=k)
        except (ValueError, TypeError, RecursionError) as exc:
            if not ln.endswith("\n"):
                stream.notes.append(f"{path}:{k}: last line is truncated; ignored")
                return
            raise InputError(f"bad recording line: {exc}", file=path, line=k) from None
        yield snap


def _read_json_document(stream: GpuStream) -> Iterator[Snapshot]:
    """A JSON document: the doctor's own snapshot (``{"samples": [...]}`` or one snapshot, the fixtures' format),
    or rocm-smi / amd-smi ``--json`` output, which readers/gpus/rocm_smi.py reads."""
    path = stream.path
    text = stream.input.document()
    docs = rocm_smi.decode_documents(path, text)
    if len(docs) == 1 and isinstance(docs[0][1], dict) and not rocm_smi.is_vendor_json(docs[0][1]):
        yield from _own_json(stream, docs[0][1], docs[0][0])
        return
    stream.format = rocm_smi.vendor_format(docs)
    yield from rocm_smi.snapshots(path, stream.host, text, docs, stream.notes)


def _own_json(stream: GpuStream, d: dict, line: int) -> Iterator[Snapshot]:
    path = stream.path
    if "unavailable" in d:
        raise InputError(f"this file records a machine without NVML ({d['unavailable']}): nothing to read",
                         file=path, line=line)
    items = d.get("samples", [d])
    if not isinstance(items, list):
        raise InputError("samples must be a list", file=path, line=line)
    host = d.get("host") if isinstance(d.get("host"), str) else None
    for item in items:
        try:
            if isinstance(item, dict) and "raise" in item:
                snap = Snapshot(time=None, host=host, gap=f"NVML error: {item['raise']}", source=path)
            else:
                snap = Snapshot.from_dict(item, source=path)
        except (ValueError, TypeError, RecursionError) as exc:
            raise InputError(f"bad snapshot: {exc}", file=path, line=line) from None
        yield replace(snap, host=snap.host or host or stream.host)


# -- "gpu N / used: X GB P%" summaries -----------------------------------------------------------------------
_SUM_GPU = re.compile(r"^\s*gpu\s*(\d+)\s*$", re.I)
_SUM_VAL = re.compile(r"^\s*(used|free|total)\s*:\s*([\d.]+)\s*(GiB|GB|MiB|MB)\b", re.I)


def _read_summary(stream: GpuStream) -> Iterator[Snapshot]:
    """Per-card ``used:``/``free:`` summaries (case 037's paste): one snapshot, used and total per card."""
    path = stream.path
    cards: list[dict] = []
    for ln in stream.input.lines():
        m = _SUM_GPU.match(ln)
        if m:
            cards.append({"index": int(m.group(1)), "line": stream.input.lineno})
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
    stream.notes.append(f"{path}: 'GB' read as GiB (2^30 bytes), as printed")
    yield Snapshot(time=None, host=stream.host, cards=tuple(out), source=path, line=1)
