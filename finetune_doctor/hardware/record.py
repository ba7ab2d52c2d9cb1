"""Writers of ``doctor gpus --record FILE``: nvidia-smi ``--query-gpu`` CSV, or JSONL snapshots.

The CSV is byte-for-byte the layout ``nvidia-smi --query-gpu=<readers.gpus.smi.QUERY_COLUMNS> --format=csv`` prints
(``, `` separators, units in the header and after each value, ``[N/A]`` for a missing value), so tools that read
nvidia-smi logs read it too; it has no processes. The JSONL keeps everything a `Snapshot` holds, processes
included. A sample NVML failed to take is written as a gap: a JSONL ``{"time", "gap"}`` line, or CSV rows of the
last known cards whose metrics read ``[Unknown Error]`` (what nvidia-smi itself prints for a failed query).
Rows are flushed per sample, so a recorder killed mid-run loses at most its last line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, Snapshot

# The --record formats are the recorder's to define; readers/gpus/smi.py reads them back (it took them from a reader:
# the one arrow up, issue #22).
RECORD_SCHEMA = "finetune-doctor/gpus-record/v1"

# the columns `doctor gpus --record x.csv` writes, in nvidia-smi --query-gpu names (nvidia-smi --help-query-gpu)
QUERY_COLUMNS = ("timestamp", "index", "name", "uuid", "pci.bus_id", "memory.used", "memory.free", "memory.total",
                 "memory.reserved", "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw",
                 "power.limit")
QUERY_UNITS = {"memory.used": "MiB", "memory.free": "MiB", "memory.total": "MiB", "memory.reserved": "MiB",
               "utilization.gpu": "%", "utilization.memory": "%", "power.draw": "W", "power.limit": "W"}


def open_recorder(path: str, host: str | None = None, interval_s: float | None = None) -> "CsvRecorder | JsonlRecorder":
    """A recorder for `path` by extension (.csv, or .jsonl/.ndjson/.json); appends to an existing file.

    Raises InputError for another extension, or for a CSV whose existing header is not ours.
    """
    from finetune_doctor.fsutil import STDOUT, output_target

    if output_target(path, "--record") == STDOUT:
        raise InputError("--record appends samples to a file; standard output carries the report (name a file)",
                         file=path)
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return CsvRecorder(path)
    if suffix in (".jsonl", ".ndjson", ".json"):
        return JsonlRecorder(path, host, interval_s)
    raise InputError("--record needs a .csv (nvidia-smi --query-gpu format) or .jsonl file name", file=path)


def _flush(f: IO[str], path: str) -> None:
    """Flush one sample; a full disk or a revoked folder mid-recording is one line naming the file."""
    try:
        f.flush()
    except OSError as err:
        raise InputError(f"cannot write: {err.strerror or err}", file=path) from None


def _stamp(t: float | None) -> str:
    t = time.time() if t is None else t
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


class CsvRecorder:
    """Appends one row per card per sample in nvidia-smi ``--query-gpu ... --format=csv`` layout."""

    HEADER = ", ".join(f"{c} [{QUERY_UNITS[c]}]" if c in QUERY_UNITS else c for c in QUERY_COLUMNS)

    def __init__(self, path: str):
        self.path = path
        p = Path(path)
        fresh = not p.exists() or p.stat().st_size == 0
        if not fresh:
            first = p.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
            if not first or first[0].strip() != self.HEADER:
                raise InputError("exists with other columns; record to a new file", file=path, line=1)
        try:
            self._f: IO[str] = open(path, "a", encoding="utf-8", newline="")
        except OSError as err:
            raise InputError(f"cannot write: {err.strerror or err}", file=path) from None
        if fresh:
            self._f.write(self.HEADER + "\n")
        self._last: tuple[CardSnapshot, ...] = ()
        self.rows = 0

    def write(self, snap: Snapshot) -> None:
        if snap.gap is not None:
            for c in self._last:
                self._f.write(self._row(snap.time, c, error="Unknown Error") + "\n")
                self.rows += 1
        else:
            self._last = snap.cards
            for c in snap.cards:
                self._f.write(self._row(snap.time, c) + "\n")
                self.rows += 1
        _flush(self._f, self.path)

    @staticmethod
    def _row(t: float | None, c: CardSnapshot, error: str | None = None) -> str:
        def num(v: float | int | None, unit: str, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
            if error:
                return f"[{error}]"
            if v is None:
                return "[N/A]"
            return fmt.format(v / scale) + (f" {unit}" if unit else "")

        fields = [
            _stamp(t), str(c.index), c.name or "[N/A]", c.uuid or "[N/A]", c.bus_id or "[N/A]",
            num(c.used_bytes, "MiB", MIB), num(c.free_bytes, "MiB", MIB), num(c.total_bytes, "MiB", MIB),
            num(c.reserved_bytes, "MiB", MIB), num(c.util_gpu, "%"), num(c.util_mem, "%"),
            num(c.temperature_c, ""), num(c.power_w, "W", fmt="{:.2f}"), num(c.power_limit_w, "W", fmt="{:.2f}"),
        ]
        return ", ".join(fields)

    def close(self) -> None:
        self._f.close()


class JsonlRecorder:
    """Appends a header line (schema, host, interval) once, then one `Snapshot` JSON object per sample."""

    def __init__(self, path: str, host: str | None = None, interval_s: float | None = None):
        self.path = path
        try:
            self._f: IO[str] = open(path, "a", encoding="utf-8")
        except OSError as err:
            raise InputError(f"cannot write: {err.strerror or err}", file=path) from None
        if self._f.tell() == 0:
            self._f.write(json.dumps({"schema": RECORD_SCHEMA, "host": host, "interval_s": interval_s,
                                      "started": time.time()}) + "\n")
        self.rows = 0

    def write(self, snap: Snapshot) -> None:
        if snap.gap is not None:
            self._f.write(json.dumps({"time": snap.time, "host": snap.host, "gap": snap.gap}) + "\n")
        else:
            self._f.write(json.dumps(snap.to_dict(), separators=(",", ":")) + "\n")
        self.rows += 1
        _flush(self._f, self.path)

    def close(self) -> None:
        self._f.close()
