"""Read what experiment trackers keep on local disk: wandb run folders, swanlab run files, mlflow's ``mlruns/``.

* **wandb** (``wandb/run-<date>-<id>/``, ``offline-run-...``): ``run-<id>.wandb`` holds every logged row as a
  ``Record`` protobuf (``history`` = field 2: ``HistoryRecord{item=1: HistoryItem{key=1 or nested_key=2, value_json=16},
  step=2: HistoryStep{num=1}}``, wandb/proto/wandb_internal.proto) in LevelDB-log framing
  (readers/runlogs/leveldblog.py). Where wandb is installed its own ``wandb_internal_pb2.Record`` parses them; without it
  the same fields are decoded from the protobuf wire format. ``files/wandb-summary.json`` holds the last value of
  each key; ``files/output.log`` is the console and is read as a text log. transformers' WandbCallback logs
  ``train/loss``, ``train/grad_norm``, ``train/learning_rate``, ``train/epoch`` and ``train/global_step``
  (integrations/integration_utils.py ``rewrite_logs``): the step of a row is its ``train/global_step``, else
  wandb's own ``_step``.
* **swanlab** (``swanlog/run-<date>-<id>/run-<id>.swanlab``): ``Record{scalar=13: ScalarRecord{key=1, step=2,
  value=5: ScalarValue{number=1 (double)}}}`` (protos/swanlab/record/v1/record.proto, metric/data/v1/data.proto
  at b444209a), framed as above with a CRC-32 checksum.
* **mlflow** file store (``mlruns/<experiment>/<run>/metrics/<key>``): one ``timestamp value [step]`` line per
  point (mlflow/store/tracking/file_store.py ``_get_metric_from_line``); transformers' MLflowCallback logs
  ``loss``, ``grad_norm``, ``learning_rate``, ``epoch`` with ``step=state.global_step``.

Every reader streams (one record or line at a time) and returns a `FileEvidence` of kind ``run-record`` whose
series carry the tracker's key names (``train/loss`` is mapped to ``loss`` by analyzers/postmortem/curves.py).
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, Iterator

from finetune_doctor.evidence import FileEvidence, FileRead, Series
from finetune_doctor.readers.runlogs import leveldblog
from finetune_doctor.readers.runlogs.logs import regular_size

# keys of HF's callbacks worth a curve (the rest of a row is counted, not kept)
KEEP_KEYS = ("loss", "grad_norm", "learning_rate", "epoch", "eval_loss", "loss_scale")
MAX_KEY = 256


def _keep(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in KEEP_KEYS or key in ("train/global_step",)


# -- protobuf wire format (the few fields the trackers' records need) ----------------------------------------------

def _varint(b: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        if c < 0x80:
            return out, i
        shift += 7


def wire_fields(b: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of one protobuf message: varints as int, fixed64 as 8 raw bytes, length-delimited
    as bytes, fixed32 as 4 raw bytes. Raises ValueError on malformed input."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated field")
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, v


def _first(b: bytes, num: int) -> Any:
    return next((v for n, v in wire_fields(b) if n == num), None)


# -- wandb ---------------------------------------------------------------------------------------------------------

def _wandb_rows_pb(payloads: Iterator[bytes]) -> Iterator[tuple[int | None, dict[str, str]]]:
    from wandb.proto import wandb_internal_pb2 as pb  # the optional extra: its own record type

    for data in payloads:
        rec = pb.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") != "history":
            continue
        h = rec.history
        items = {(it.key or "/".join(it.nested_key))[:MAX_KEY]: it.value_json for it in h.item}
        yield (h.step.num if h.HasField("step") else None), items


def _wandb_rows_wire(payloads: Iterator[bytes]) -> Iterator[tuple[int | None, dict[str, str]]]:
    for data in payloads:
        hist = _first(data, 2)
        if not isinstance(hist, bytes):
            continue
        items: dict[str, str] = {}
        step = None
        for num, v in wire_fields(hist):
            if num == 1 and isinstance(v, bytes):
                key = val = None
                nested: list[str] = []
                for n2, v2 in wire_fields(v):
                    if n2 == 1:
                        key = v2.decode("utf-8", "replace")[:MAX_KEY]
                    elif n2 == 2:       # wandb's core writes the key as nested_key parts
                        nested.append(v2.decode("utf-8", "replace"))
                    elif n2 == 16:
                        val = v2.decode("utf-8", "replace")
                key = key or "/".join(nested)[:MAX_KEY] or None
                if key is not None and val is not None:
                    items[key] = val
            elif num == 2 and isinstance(v, bytes):
                s = _first(v, 1)
                step = s if isinstance(s, int) else None
        yield step, items


def _json_number(text: str) -> float | None:
    t = text.strip()
    if t in ("NaN", "nan", '"NaN"'):
        return math.nan
    if t in ("Infinity", '"Infinity"', "inf"):
        return math.inf
    if t in ("-Infinity", '"-Infinity"', "-inf"):
        return -math.inf
    try:
        v = json.loads(t)
    except ValueError:
        return None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read_wandb(path: str) -> FileEvidence:
    """Every kept metric of a ``run-<id>.wandb`` file (module docstring). Raises InputError for a path that is
    not a readable regular file; damage is a problem in the returned `FileRead`."""
    size = regular_size(path)
    problems: list[str] = []
    series: dict[str, Series] = {}
    rows = 0
    note = None
    with open(path, "rb") as fh:
        head = fh.read(leveldblog.HEADER)
        if head[:4] != leveldblog.WANDB_IDENT:
            return FileEvidence(FileRead(path, "run-record", size, len(head), complete=False,
                                         problems=("not a wandb run file (no :W&B header)",)))
        payloads = leveldblog.records(fh, problems)
        try:
            import wandb.proto.wandb_internal_pb2  # noqa: F401

            it = _wandb_rows_pb(payloads)
            note = "wandb records (wandb's own Record type)"
        except ImportError:
            it = _wandb_rows_wire(payloads)
            note = "wandb records (protobuf wire format; pip install wandb for wandb's own Record type)"
        try:
            for step, items in it:
                rows += 1
                gs = _json_number(items.get("train/global_step", "")) if "train/global_step" in items else None
                st = int(gs) if gs is not None and math.isfinite(gs) else step
                for key, val in items.items():
                    if key == "train/global_step" or not _keep(key):
                        continue
                    v = _json_number(val)
                    if v is not None:
                        s = series.get(key) or series.setdefault(key, Series(key, path))
                        s.append(st, v, rows)
        except (ValueError, struct.error) as err:
            problems.append(f"record {rows + 1} is not a wandb Record ({err}); stopped there")
        except Exception as err:  # protobuf's DecodeError lives in google.protobuf, imported only with wandb
            problems.append(f"record {rows + 1} could not be parsed ({type(err).__name__}); stopped there")
    return FileEvidence(FileRead(path, "run-record", size, size, records=rows,
                                 items=sum(len(s) for s in series.values()), complete=not problems,
                                 problems=tuple(problems), note=note), series=tuple(series.values()),
                        last_step=max((max(s.steps) for s in series.values() if len(s)), default=None))


def read_wandb_summary(path: str) -> FileEvidence:
    """``files/wandb-summary.json``: the last value of every key (1 MiB read at most)."""
    size = regular_size(path)
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            d = json.loads(fh.read(1 << 20))
        if not isinstance(d, dict):
            raise ValueError("not an object")
    except ValueError as err:
        return FileEvidence(FileRead(path, "run-record", size, size, complete=False,
                                     problems=(f"not valid JSON ({err})",)))
    vals = {k: v for k, v in d.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    gs = vals.get("train/global_step")
    return FileEvidence(FileRead(path, "run-record", size, size, items=len(vals), note="wandb summary"),
                        results={f"wandb:{k}": v for k, v in vals.items()},
                        last_step=int(gs) if isinstance(gs, (int, float)) and math.isfinite(gs) else None)


# -- swanlab -------------------------------------------------------------------------------------------------------

def read_swanlab(path: str) -> FileEvidence:
    """Every scalar of a ``run-<id>.swanlab`` file (module docstring)."""
    size = regular_size(path)
    problems: list[str] = []
    series: dict[str, Series] = {}
    n = 0
    with open(path, "rb") as fh:
        head = fh.read(leveldblog.HEADER)
        if head[:4] != leveldblog.SWANLAB_IDENT:
            return FileEvidence(FileRead(path, "run-record", size, len(head), complete=False,
                                         problems=("not a swanlab run file (no :SWL header)",)))
        try:
            for data in leveldblog.records(fh, problems, leveldblog.swanlab_crc):
                n += 1
                sc = _first(data, 13)
                if not isinstance(sc, bytes):
                    continue
                key, step, val = None, None, None
                for num, v in wire_fields(sc):
                    if num == 1:
                        key = v.decode("utf-8", "replace")[:MAX_KEY]
                    elif num == 2 and isinstance(v, int):
                        step = v if v < 1 << 62 else None
                    elif num == 5 and isinstance(v, bytes):
                        raw = _first(v, 1)
                        val = struct.unpack("<d", raw)[0] if isinstance(raw, bytes) and len(raw) == 8 else None
                if key and val is not None and _keep(key):
                    s = series.get(key) or series.setdefault(key, Series(key, path))
                    s.append(step, val, n)
        except (ValueError, struct.error) as err:
            problems.append(f"record {n} is not a swanlab Record ({err}); stopped there")
    return FileEvidence(FileRead(path, "run-record", size, size, records=n, items=sum(len(s) for s in series.values()),
                                 complete=not problems, problems=tuple(problems), note="swanlab records"),
                        series=tuple(series.values()),
                        last_step=max((max(s.steps) for s in series.values() if len(s)), default=None))


# -- mlflow --------------------------------------------------------------------------------------------------------

def read_mlflow_metric(path: str, key: str) -> FileEvidence:
    """One mlflow file-store metric file (module docstring), streamed line by line. `key` is the metric name
    (the path below ``metrics/``)."""
    size = regular_size(path)
    s = Series(key, path)
    bad = 0
    n = 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(iter(lambda: fh.readline(4096), b""), 1):
            parts = raw.split()
            try:
                if len(parts) not in (2, 3):
                    raise ValueError
                v = float(parts[1])
                step = int(parts[2]) if len(parts) == 3 else 0
                if not -(1 << 62) < step < 1 << 62:
                    raise ValueError
            except ValueError:
                bad += 1
                continue
            s.append(step, v, n)
    probs = (f"{bad} malformed line(s)",) if bad else ()
    return FileEvidence(FileRead(path, "run-record", size, size, lines=n, items=len(s), complete=not bad,
                                 problems=probs, note="mlflow metric"),
                        series=(s,) if len(s) else (), last_step=max(s.steps) if len(s) else None)


def mlflow_key(path: str) -> str:
    """The metric name of a file under ``.../metrics/`` (keys with ``/`` are sub-folders)."""
    parts = path.replace(os.sep, "/").split("/metrics/", 1)
    return parts[1] if len(parts) == 2 else os.path.basename(path)
