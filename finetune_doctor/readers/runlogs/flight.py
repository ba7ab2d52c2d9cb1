"""NCCL flight-recorder dumps: the last collectives each rank enqueued, started and completed.

torch writes one dump per rank when ``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0 and a watchdog timeout fires with
``TORCH_NCCL_DUMP_ON_TIMEOUT=1``, to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank (default
``/tmp/nccl_trace_rank_<rank>``; torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp at cf1380dfb6c8). The dump is
a pickle of plain dicts and lists (``version``, ``pg_config`` {pg: {name, desc, ranks}}, ``entries`` [{record_id,
pg_id, process_group: (name, desc), collective_seq_id, profiling_name, state: scheduled|started|completed,
input_sizes, time_created_ns, ...}]; torch/distributed/flight_recorder/components/builder.py
``build_collectives`` of torch 2.13 documents it); ``_dump_nccl_trace_json`` writes the same as JSON.

Safety: a pickle can run code when loaded, so dumps are read by `_PlainUnpickler`, which refuses every global
(only dicts, lists, tuples, strings, numbers, bools and None come back); the torch analyzer is given only what
that yields, and only dumps whose ``ranks`` strings are lists of integers (its builder would ``eval`` anything
else: builder.py:111-119).

Analysis: where torch is installed, its own analyzer (``torch.distributed.flight_recorder.components.builder.
build_db``, the code behind ``torchfrtrace``) matches the collectives across ranks and names the ranks that did
not join one; without torch (or when it rejects the dumps) the fallback compares, per process group, each rank's
last enqueued collective sequence number: the ranks that never enqueued the collective the others are waiting in
are the laggards.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import re
from typing import Any

from finetune_doctor.evidence import FileEvidence, FileRead, FlightRecord
from finetune_doctor.readers.runlogs.logs import regular_size

MAX_BYTES = 256 << 20
NAME = re.compile(r"(?:^|[_.-])(?:nccl_)?trace_rank_?(?P<rank>\d+)(?:\.json|\.pkl)?$")
_RANKS = re.compile(r"^\[[\d,\s]*\]$")


class _PlainUnpickler(pickle.Unpickler):
    """Loads plain data only: any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused (plain data only)")


def rank_of_name(name: str) -> int | None:
    """The rank a dump's file name ends in (``nccl_trace_rank_3``), or None when it is not a dump's name."""
    m = NAME.search(name)
    return int(m.group("rank")) if m else None


def load_dump(path: str) -> dict[str, Any]:
    """The dump as plain data. Raises ValueError (with the reason) when it is not a flight-recorder dump."""
    size = regular_size(path)
    if size > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        d = json.loads(raw) if raw.lstrip()[:1] == b"{" else _PlainUnpickler(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            RecursionError, MemoryError) as err:
        raise ValueError(f"not a flight-recorder dump ({type(err).__name__}: {err})") from None
    if not isinstance(d, dict) or not isinstance(d.get("entries"), list):
        raise ValueError("not a flight-recorder dump (no entries)")
    return d


def _summary(d: dict[str, Any]) -> dict[str, Any]:
    groups: dict[str, Any] = {}
    cfg = d.get("pg_config") if isinstance(d.get("pg_config"), dict) else {}
    for e in d["entries"]:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group")
        name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id"))
        desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else None
        seq = e.get("collective_seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool):
            continue
        g = groups.setdefault(name, {"desc": desc, "ranks": (cfg.get(name) or {}).get("ranks"),
                                     "last_enqueued": -1, "last_started": -1, "last_completed": -1, "pending": []})
        state = str(e.get("state"))
        g["last_enqueued"] = max(g["last_enqueued"], seq)
        if state in ("started", "completed"):
            g["last_started"] = max(g["last_started"], seq)
        if state == "completed":
            g["last_completed"] = max(g["last_completed"], seq)
        elif len(g["pending"]) < 8:
            g["pending"].append({"seq": seq, "op": str(e.get("profiling_name") or "")[:80], "state": state,
                                 "sizes": str(e.get("input_sizes"))[:80]})
    return groups


def read_flight_dump(path: str, rank: int | None) -> FileEvidence:
    """One rank's dump as a `FlightRecord` (its rank from the file name, else `rank`)."""
    size = regular_size(path)
    import os

    r = rank_of_name(os.path.basename(path))
    r = r if r is not None else rank
    try:
        d = load_dump(path)
    except ValueError as err:
        return FileEvidence(FileRead(path, "flight-dump", size, 0, complete=False, problems=(str(err),)))
    if r is None:
        return FileEvidence(FileRead(path, "flight-dump", size, size, complete=False,
                                     problems=("no rank in the file name (nccl_trace_rank_<N>)",)))
    rec = FlightRecord(path, r, str(d.get("version")) if d.get("version") is not None else None, _summary(d),
                       entries=len(d["entries"]))
    return FileEvidence(FileRead(path, "flight-dump", size, size, records=len(d["entries"]), items=len(rec.groups),
                                 note=f"flight recorder {rec.version}"), flight=(rec,),
                        origin={"rank": r, "source": "file name"})


def _with_torch(records: list[FlightRecord]) -> dict[str, Any] | None:
    """torch's own analyzer over the dumps (module docstring); None when torch is missing or rejects them. Its
    logger and prints are silenced: the report says what it found."""
    import contextlib

    quiet = logging.getLogger("Flight Recorder")   # components/fr_logger.py; it also warns at import
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return _analyze_with_torch(records)
    finally:
        quiet.setLevel(level)


def _analyze_with_torch(records: list[FlightRecord]) -> dict[str, Any] | None:
    try:
        import argparse

        from torch.distributed.flight_recorder.components import builder
    except Exception:  # torch missing, or a build without the flight recorder
        return None
    details = {}
    for rec in records:
        try:
            d = load_dump(rec.file)
        except ValueError:
            return None
        cfg = d.get("pg_config") or {}
        if not all(isinstance(v, dict) and isinstance(v.get("ranks"), str) and _RANKS.match(v["ranks"])
                   for v in cfg.values()):
            return None
        details[rec.file] = {"host_name": f"host_rank{rec.rank}", "rank": rec.rank, "entries": d["entries"],
                             "version": d.get("version"), "pg_config": cfg}
    args = argparse.Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=True, mismatch_cap=10,
                              selected_ranks=None, pg_filters=None, print_stack_trace=False, transform_ft=False)
    try:
        db = builder.build_db(details, args, str(records[0].version or "2.0"))
    except Exception:  # its assertions on inconsistent dumps: the fallback still answers
        return None
    dumped = {r.rank for r in records}
    for c in db.collectives:
        missing = sorted(getattr(c, "missing_ranks", None) or [])
        # a rank "missing" from a collective whose dump was read is a laggard; one without a dump proves nothing
        if missing and set(missing) <= dumped and len(missing) < len(dumped):
            return {"source": "flight recorder (torch's analyzer)", "lagging": missing,
                    "seq": c.collective_seq_id, "how": f"never joined collective #{c.collective_seq_id} "
                    f"({c.collective_name}, {c.pg_desc})", "location": {"file": records[0].file, "line": None,
                                                                         "column": None, "key": None}}
    return None


def laggards(records: list[FlightRecord]) -> dict[str, Any] | None:
    """The ranks the dumps show the others waiting on: torch's analyzer first, else the fallback."""
    got = _with_torch(records)
    if got:
        return got
    best = None
    names = {n for r in records for n in r.groups}
    for name in sorted(names):
        have = {r.rank: r.groups[name] for r in records if name in r.groups}
        if len(have) < 2:
            continue
        top = max(g["last_enqueued"] for g in have.values())
        low = min(g["last_enqueued"] for g in have.values())
        if low < top:
            lag = sorted(r for r, g in have.items() if g["last_enqueued"] == low)
            cand = {"source": "flight recorder", "lagging": lag, "seq": low + 1,
                    "how": f"never enqueued collective #{low + 1} of process group {name}"
                           + (f" ({next(iter(have.values()))['desc']})" if next(iter(have.values()))["desc"] else "")
                           + ", which the other ranks were in",
                    "location": {"file": next(r.file for r in records if r.rank == lag[0]), "line": None,
                                 "column": None, "key": None}}
            if best is None or len(lag) < len(best["lagging"]):
                best = cand
    return best
