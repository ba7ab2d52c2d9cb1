"""nvidia-smi's per-process views, for ``doctor gpus --from``: the Processes section of the table pasted alone,
``nvidia-smi --query-compute-apps=... --format=csv`` and ``nvidia-smi pmon``. Each yields `Snapshot`s whose cards
carry the processes; what the view does not print stays None (a card's total, its utilisation).

Formats (nvidia-smi's own output, driver 470–580; the column names are nvidia-smi's ``--help-query-compute-apps``
and ``pmon -h`` text):

* Processes section: ``|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |`` then
  rows ``|    0   N/A  N/A    331903      C   ...python                      1733MiB |`` (the GI/CI columns since
  driver 450; older rows have none). A card's memory is the sum of its rows — a lower bound of what it holds.
* ``--query-compute-apps``: a CSV whose header names ``pid``, ``process_name``, ``used_gpu_memory [MiB]`` (or
  ``used_memory``) and optionally ``gpu_bus_id``, ``gpu_uuid``, ``gpu_name``, ``timestamp``. It has no card index:
  cards are numbered in PCI bus-id order (nvidia-smi's default enumeration, ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
  for CUDA), else in order of first appearance, and the notes say so.
* ``pmon``: ``# gpu  pid  type  sm  mem  enc  dec  [jpg  ofa]  [fb  ccpm]  command`` headers and one row per
  process per interval (``-`` for a card with none); ``fb`` (MB, with ``-s m``/``-s um``) is the process's
  memory. A new interval starts where the card index goes back.
"""

from __future__ import annotations

import csv
import re
from typing import Any, Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, ProcessInfo, Snapshot

PROC_ROW = re.compile(r"^\|\s*(\d+)\s+(?:(N/A|\d+)\s+(N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(.*?)\s+"
                      r"(\d+MiB|N/A)\s*\|\s*$")


def process_row(line: str) -> tuple[int, ProcessInfo] | None:
    """(GPU index, the process) of one row of nvidia-smi's Processes table (``|    0   N/A  N/A    331903      C
    ...python   1733MiB |``; MIG rows carry GI/CI ids), None for any other line. The one reading of such a row, for
    the full table (smi.py) and the section pasted alone (`read_processes`)."""
    m = PROC_ROW.match(line)
    if not m:
        return None
    gi = m.group(2)
    used = None if m.group(7) == "N/A" else int(m.group(7)[:-3]) * MIB
    return int(m.group(1)), ProcessInfo(pid=int(m.group(4)), used_bytes=used, name=m.group(6).strip() or None,
                                        kind="graphics" if m.group(5) == "G" else "compute",
                                        mig=f"{gi}/{m.group(3)}" if gi and gi != "N/A" else None)
PMON_HEADER = re.compile(r"^#\s*gpu\s+pid\s+type\b", re.I)


def looks_like_processes(text: str) -> bool:
    """The Processes section without the card rows above it."""
    return sum(1 for ln in text.splitlines()[:200] if PROC_ROW.match(ln.strip())) >= 1


def looks_like_compute_apps(first_line: str) -> bool:
    low = first_line.lower()
    return "pid" in low and ("used_gpu_memory" in low or "used_memory" in low or "process_name" in low)


def looks_like_pmon(text: str) -> bool:
    return any(PMON_HEADER.match(ln.strip()) for ln in text.splitlines()[:20])


def _snapshot(stream: Any, procs: dict[Any, list[ProcessInfo]], util: dict[Any, int | None], line: int,
              names: dict[Any, str] | None = None, bus: dict[Any, str] | None = None,
              order: list[Any] | None = None) -> Snapshot:
    keys = order if order is not None else sorted(procs)
    cards = []
    for i, k in enumerate(keys):
        ps = tuple(procs.get(k, ()))
        used = [p.used_bytes for p in ps if p.used_bytes is not None]
        cards.append(CardSnapshot(index=k if isinstance(k, int) else i, name=(names or {}).get(k),
                                  bus_id=(bus or {}).get(k), used_bytes=sum(used) if used else None,
                                  util_gpu=util.get(k), processes=ps, line=line))
    return Snapshot(time=None, host=stream.host, cards=tuple(cards), source=stream.path, line=line)


def read_processes(stream: Any) -> Iterator[Snapshot]:
    """The Processes section pasted alone: one Snapshot."""
    procs: dict[int, list[ProcessInfo]] = {}
    first = None
    for raw in stream.input.lines():
        row = process_row(raw.strip())
        if row is None:
            continue
        first = first or stream.input.lineno
        procs.setdefault(row[0], []).append(row[1])
    if not procs:
        raise InputError("no process rows found in this nvidia-smi Processes section", file=stream.path, line=1)
    stream.notes.append(f"{stream.path}: the Processes section alone: each card's memory is the sum of its "
                        "processes (a lower bound), its total and utilisation are not in the paste")
    yield _snapshot(stream, procs, {}, first or 1)


def _col(header: list[str], *names: str) -> int | None:
    for i, h in enumerate(header):
        base = h.strip().lower().split(" [")[0].split(" (")[0]
        if base in names:
            return i
    return None


def read_compute_apps(stream: Any) -> Iterator[Snapshot]:
    """``--query-compute-apps`` CSV: one Snapshot of every row (the query is one instant unless ``-l``)."""
    rows = list(csv.reader(ln for ln in stream.input.lines() if ln.strip()))
    if not rows:
        raise InputError("empty --query-compute-apps CSV", file=stream.path, line=1)
    header = rows[0]
    c_pid, c_mem = _col(header, "pid"), _col(header, "used_gpu_memory", "used_memory")
    c_name, c_bus, c_uuid, c_gpu = (_col(header, "process_name", "name"), _col(header, "gpu_bus_id"),
                                    _col(header, "gpu_uuid"), _col(header, "gpu_name"))
    if c_pid is None:
        raise InputError("a --query-compute-apps CSV needs a pid column", file=stream.path, line=1)
    procs: dict[str, list[ProcessInfo]] = {}
    names: dict[str, str] = {}
    seen: list[str] = []
    for n, row in enumerate(rows[1:], start=2):
        cells = [x.strip() for x in row]
        if len(cells) <= c_pid or not cells[c_pid].isdigit():
            continue
        card = cells[c_bus] if c_bus is not None and c_bus < len(cells) else \
            cells[c_uuid] if c_uuid is not None and c_uuid < len(cells) else "?"
        mem = cells[c_mem] if c_mem is not None and c_mem < len(cells) else ""
        m = re.match(r"(\d+)\s*(MiB)?$", mem)
        if card not in seen:
            seen.append(card)
        if c_gpu is not None and c_gpu < len(cells):
            names[card] = cells[c_gpu]
        procs.setdefault(card, []).append(ProcessInfo(
            pid=int(cells[c_pid]), used_bytes=int(m.group(1)) * MIB if m else None,
            name=cells[c_name] if c_name is not None and c_name < len(cells) else None))
    if not procs:
        raise InputError("no process rows in this --query-compute-apps CSV", file=stream.path, line=2)
    if c_bus is not None:
        order = sorted(seen, key=lambda b: b.lower())
        stream.notes.append(f"{stream.path}: --query-compute-apps has no card index: cards numbered in PCI bus-id "
                            "order (nvidia-smi's default enumeration)")
    else:
        order = seen
        stream.notes.append(f"{stream.path}: --query-compute-apps without gpu_bus_id: cards numbered in order of "
                            "first appearance" + (" (no gpu_uuid either: every process on one card)"
                                                  if c_uuid is None else ""))
    bus = {k: k for k in order} if c_bus is not None else None
    yield _snapshot(stream, procs, {}, 2, names, bus, order)


def read_pmon(stream: Any) -> Iterator[Snapshot]:
    """``nvidia-smi pmon``: one Snapshot per interval."""
    cols: list[str] = []
    procs: dict[int, list[ProcessInfo]] = {}
    util: dict[int, int | None] = {}
    last_gpu = -1
    start = 1
    found = False
    for raw in stream.input.lines():
        ln = raw.strip()
        if ln.startswith("#"):
            if PMON_HEADER.match(ln):
                cols = ln.lstrip("#").split()
            continue
        parts = ln.split()
        if not cols or len(parts) < 3 or not parts[0].isdigit():
            continue
        gpu = int(parts[0])
        if gpu < last_gpu or (gpu == last_gpu and util.get(gpu) is not None and parts[1] == "-"):
            yield _snapshot(stream, procs, util, start)
            found, procs, util, start = True, {}, {}, stream.input.lineno
        last_gpu = gpu
        rec = dict(zip(cols, parts))
        procs.setdefault(gpu, [])
        sm = rec.get("sm", "-")
        util[gpu] = max(util.get(gpu) or 0, int(sm)) if sm.isdigit() else (util.get(gpu) or 0)
        if parts[1] == "-":
            continue
        fb = rec.get("fb", "-")
        name = parts[len(cols) - 1] if len(parts) >= len(cols) else parts[-1]
        procs[gpu].append(ProcessInfo(pid=int(parts[1]), used_bytes=int(fb) * MIB if fb.isdigit() else None,
                                      name=name, kind="graphics" if rec.get("type") == "G" else "compute"))
    if procs:
        found = True
        yield _snapshot(stream, procs, util, start)
    if not found:
        raise InputError("no rows found in this nvidia-smi pmon output", file=stream.path, line=1)
    if "fb" not in cols:
        stream.notes.append(f"{stream.path}: pmon without -s m: per-process memory is not in the file")
