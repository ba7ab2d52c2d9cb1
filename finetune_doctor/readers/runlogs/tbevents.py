"""Read TensorBoard event files with TensorBoard's own record reader, keeping every scalar, file by file.

Why not EventAccumulator: its default size guidance keeps at most 10,000 scalars per tag (reservoir sampling,
reference/style/anchors.md §8) and ``purge_orphaned_data`` drops the pre-crash tail on a resume; a postmortem
needs every point and the resume boundaries. So each ``events.out.tfevents.*`` file is read on its own (one
file is one launch: transformers' TensorBoardCallback writes to ``<output_dir>/runs/<date>_<host>/``, a new
directory per launch) with the record reader of TensorBoard's TensorFlow stub
(``tensorboard.compat.tensorflow_stub.pywrap_tensorflow.PyRecordReader_New``: TFRecord framing, masked CRC-32C
of header and payload) and ``event_pb2.Event`` parsing. The stub is used even when TensorFlow is installed so
that behaviour and speed do not depend on it (about 12 µs per record on one core).

Files from torch's ``SummaryWriter`` and from tensorboardX both store ``add_scalar`` as ``simple_value``;
new-style scalars (a rank-0 ``tensor`` with the scalars plugin) are read too.

Damage: a truncated last record (the writer died mid-flush) ends the file and is reported; a record with a bad
payload CRC is skipped using its (CRC-checked) header length, and one with a bad header CRC is skipped by
searching the next 1 MiB for a valid record header. Either way the report says what was lost.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from finetune_doctor.errors import InputError, MissingExtra
from finetune_doctor.evidence import FileEvidence, FileRead, Notice, Restart, Series

RESYNC_WINDOW = 1 << 20
MAX_RECORD = 256 << 20     # a header claiming more than this is treated as corrupt


def _stub() -> tuple[Any, Any, Any]:
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.compat.tensorflow_stub import errors as tf_errors
        from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise MissingExtra("reading TensorBoard event files", "tensorboard") from None
    return pywrap_tensorflow, tf_errors, event_pb2


def _reader_at(pw: Any, path: str, offset: int) -> Any:
    """A stub record reader positioned at byte `offset`. The stub refuses start offsets, so the reader's
    GFile is given the continuation token that its own LocalFileSystem.read honours (a seek)."""
    r = pw.PyRecordReader_New(path, 0, None, None)
    if offset:
        r.file_handle.continuation_token = {"opaque_offset": offset}
    return r


# TensorFlow DataType enum values (tensorflow/core/framework/types.proto) for rank-0 scalar tensors
_DT = {1: ("float_val", "<f"), 2: ("double_val", "<d"), 19: ("half_val", "<e"), 3: ("int_val", "<i"),
       9: ("int64_val", "<q")}


def _tensor_scalar(t: Any) -> float | None:
    if len(t.tensor_shape.dim) > 0 and any(d.size != 1 for d in t.tensor_shape.dim):
        return None
    spec = _DT.get(t.dtype)
    if spec is None:
        return None
    field, fmt = spec
    if t.tensor_content:
        try:
            return float(struct.unpack_from(fmt, t.tensor_content)[0])
        except struct.error:
            return None
    vals = getattr(t, field)
    if len(vals) == 0:
        return None
    if field == "half_val":   # stored as the raw 16-bit pattern in an int32
        return float(struct.unpack("<e", struct.pack("<H", vals[0] & 0xFFFF))[0])
    return float(vals[0])


def _resync(pw: Any, path: str, offset: int, header_ok: bool) -> tuple[int | None, str]:
    """Where the next readable record starts after a damaged one at `offset`, and what was skipped."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        if header_ok:
            head = fh.read(8)
            if len(head) == 8:
                (length,) = struct.unpack("<Q", head)
                if length <= MAX_RECORD:
                    return offset + 16 + length, f"record at byte {offset}: payload CRC mismatch, {length} bytes skipped"
        base = offset + 1
        fh.seek(base)
        window = fh.read(RESYNC_WINDOW + 12)
    masked = pw.masked_crc32c
    for i in range(0, max(0, len(window) - 12)):
        # a record length fits in 32 bits in practice: cheap filter before the CRC
        if window[i + 4:i + 8] != b"\x00\x00\x00\x00":
            continue
        if masked(window[i:i + 8]) == struct.unpack_from("<I", window, i + 8)[0]:
            return base + i, f"record at byte {offset}: header CRC mismatch, {base + i - offset} bytes skipped"
    return None, f"record at byte {offset}: header CRC mismatch, no valid record in the next {RESYNC_WINDOW} bytes"


def _scalars(ev: Any, series: dict[str, Series], path: str, rec: int) -> tuple[int, int]:
    """Append the scalars of one summary event to `series`: (points added, non-scalar values skipped)."""
    added = other = 0
    for v in ev.summary.value:
        kind = v.WhichOneof("value")
        if kind == "simple_value":
            val = v.simple_value
        elif kind == "tensor":
            val = _tensor_scalar(v.tensor)
            if val is None:
                other += 1
                continue
        else:
            other += 1
            continue
        s = series.get(v.tag)
        if s is None:
            s = series[v.tag] = Series(v.tag, path, first_wall=ev.wall_time)
        s.append(ev.step, val, rec)
        added += 1
    return added, other


def read_event_file(path: str) -> FileEvidence:
    """Every scalar of one event file, per tag, with its step and record number.

    Returns series named by tag (``train/loss``...). Restarts inside the file (a SessionLog START after data)
    become `Restart` records. Raises InputError if the file cannot be opened; MissingExtra without tensorboard.
    """
    pw, tf_errors, event_pb2 = _stub()
    try:
        size = os.path.getsize(path)
    except OSError as err:
        raise InputError(f"cannot read event file: {err.strerror or err}", file=path) from None
    series: dict[str, Series] = {}
    restarts: list[Restart] = []
    notices: list[Notice] = []
    problems: list[str] = []
    complete = True
    offset = 0
    rec = 0
    bad_events = 0
    other = 0
    seen_data = False
    version = None
    reader = _reader_at(pw, path, 0)
    parse = event_pb2.Event.FromString
    start_status = event_pb2.SessionLog.START
    try:
        while True:
            try:
                reader.GetNext()
            except tf_errors.OutOfRangeError:
                break
            except (OverflowError, MemoryError):
                # a header whose (CRC-valid) length is 2^63 or more: the stub tries to read that many bytes
                complete = False
                nxt, what = _resync(pw, path, offset, header_ok=False)
                problems.append(f"record at byte {offset}: length exceeds {MAX_RECORD >> 20} MiB; " + what.split(": ", 1)[-1].replace("header CRC mismatch, ", ""))
                if nxt is None or nxt >= size:
                    break
                offset = nxt
                reader.file_handle.close()
                reader = _reader_at(pw, path, offset)
                continue
            except tf_errors.DataLossError as err:
                msg = str(err)   # the stub's messages end with what failed; the path itself may contain any word
                if "has truncated record in" in msg:
                    complete = False
                    problems.append(f"last record cut off at byte {offset} ({size - offset} bytes not read)")
                    break
                nxt, what = _resync(pw, path, offset, header_ok=msg.endswith("failed event crc32 check"))
                problems.append(what)
                complete = False
                if nxt is None or nxt >= size:
                    break
                offset = nxt
                reader.file_handle.close()
                reader = _reader_at(pw, path, offset)
                continue
            raw = reader.record()
            rec += 1
            offset += len(raw) + 16
            try:
                ev = parse(raw)
            except Exception:  # protobuf DecodeError: a CRC-valid record that is not an Event
                bad_events += 1
                continue
            what = ev.WhichOneof("what")
            if what == "summary":
                added, skipped = _scalars(ev, series, path, rec)
                seen_data = seen_data or added > 0
                other += skipped
            elif what == "session_log":
                if ev.session_log.status == start_status and seen_data:
                    restarts.append(Restart(path, rec, ev.step, "session-start",
                                            f"SessionLog START at step {ev.step} (TensorBoard purges later steps)"))
            elif what == "file_version":
                version = ev.file_version
    finally:
        try:
            reader.file_handle.close()
        except Exception:  # the stub's GFile may already be closed
            pass
    if bad_events:
        problems.append(f"{bad_events} records were not Event protos")
    if rec == 0 and size > 0:
        problems.append("no readable record (not an event file?)")
        complete = False
    final = tuple(series.values())
    n = sum(len(s) for s in final)
    note = f"{version}; {other} non-scalar values" if version else (f"{other} non-scalar values" if other else None)
    last = max((s.steps[-1] for s in final if len(s)), default=None)
    return FileEvidence(FileRead(path, "event-file", size, min(offset, size), records=rec, items=n,
                                 complete=complete, problems=tuple(problems), note=note),
                        series=final, restarts=tuple(restarts), notices=tuple(notices), last_step=last)
