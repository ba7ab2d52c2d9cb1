"""The files a run leaves, found and read: LLaMA-Factory's output_dir, per-rank and per-node logs, torchelastic
error files, flight-recorder dumps, tracker folders (wandb, swanlab, mlflow), GPU recordings.

Only regular files are read (after symlinks): a FIFO, a device such as /dev/zero, a socket, a symlink loop or a
path the OS rejects is listed as skipped with the reason, never opened. Directories are walked without following
symlinks, to `MAX_DEPTH` levels (torchelastic's ``<log_dir>/<run_id>/attempt_<n>/<local_rank>/`` is 4 deep).

Who wrote a file comes from its path (`origin_of`): ``rank3.log``, ``rank_3/``, ``node1/``, ``node1_rank3.out``,
``attempt_0/3/error.json`` (local rank 3), a dump's ``nccl_trace_rank_3``, a recording named after its node; the
file's own lines add to it (readers/runlogs/logs.py). Files are read in parallel over the machine's cores when there are
many (`read_all`): each worker streams one file at a time, so memory is a few chunks per worker plus the kept
records.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import stat
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any, Iterator, Mapping

from finetune_doctor.errors import InputError, MissingExtra
from finetune_doctor.evidence import Evidence, FileEvidence, FileRead, GpuMemory
from finetune_doctor.readers.runlogs.logs import file_type, looks_binary, sniff
from finetune_doctor.readers.runlogs.ownreport import own_report_of

LOG_PATTERNS = ("*.log", "*.out", "*.err", "*.txt", "*.log.gz", "*.txt.gz", "nohup.out", "stdout*", "stderr*")
NOT_LOGS = {"merges.txt", "vocab.txt", "requirements.txt", "added_tokens.txt", "special_tokens_map.txt",
            "README.txt", "LICENSE.txt", "license.txt", "dict.txt", "debug.log", "debug-internal.log",
            "debug-core.log", "cmdline.txt"}
MAX_DEPTH = 5
PARALLEL_MIN_FILES = 4
PARALLEL_MIN_BYTES = 32 << 20
FINGERPRINT_BYTES = 1 << 20
# Many big rank logs (at least COUNTED_MIN_FILES text logs of loggrep.MIN_BYTES or more): each is read with its
# HF step dicts counted, not parsed, and only the file with the most dicts is read again in full, as `_BestCurves`
# keeps one copy of a curve anyway. Parsing the 18,000 dicts of each of 256 x 50 MB logs that all print them was
# most of the time over grep (benchmarks/results/postmortem_ranks.md); a file without dicts reads the same.
COUNTED = "text-log-counted"
COUNTED_MIN_FILES = 8
ORDER = {"trainer-log": 0, "trainer-state": 1, "results": 2, "event-file": 3, "run-record": 4, "text-log": 5,
         "elastic-error": 6, "flight-dump": 7, "csv": 8}

_RANK = re.compile(r"(?:^|[/_.\-])rank[_\-]?(?P<r>\d{1,5})(?=$|[/_.\-])", re.I)
_NODE = re.compile(r"(?:^|[/_.\-])(?P<n>(?:node|host)[_\-]?[\w\-]*?\d+)(?=$|[/_.])", re.I)
_ATTEMPT = re.compile(r"attempt_(?P<a>\d+)/(?P<lr>\d+)/(?:stdout|stderr)\.log$|attempt_(?P<a2>\d+)/(?P<lr2>\d+)/"
                      r"error\.json$")


def origin_of(path: str, base: str | None) -> dict[str, Any]:
    """{rank, local_rank, node, attempt, source} that the path names (relative to the run folder `base`)."""
    rel = os.path.relpath(path, base) if base else os.path.basename(path)
    rel = rel.replace(os.sep, "/")
    out: dict[str, Any] = {}
    m = _ATTEMPT.search(rel)
    if m:
        out["local_rank"] = int(m.group("lr") or m.group("lr2"))
        out["attempt"] = int(m.group("a") or m.group("a2"))
    m = _RANK.search(rel)
    if m:
        out["rank"] = int(m.group("r"))
    m = _NODE.search(rel)
    if m:
        out["node"] = m.group("n")
    from finetune_doctor.readers.runlogs.flight import rank_of_name

    r = rank_of_name(os.path.basename(rel))
    if r is not None:
        out.setdefault("rank", r)
    if out:
        out["source"] = "path"
    return out


def kind_of(name: str, rel: str) -> str | None:
    """The reader a file goes to, from its name and place; None for files that are no run evidence."""
    from finetune_doctor.readers.runlogs.flight import rank_of_name

    if name == "trainer_log.jsonl":
        return "trainer-log"
    if name == "trainer_state.json":
        return "trainer-state"
    if name.endswith("_results.json"):
        return "results"
    if "tfevents" in name:
        return "event-file"
    if name.endswith(".wandb"):
        return "wandb"
    if name == "wandb-summary.json":
        return "wandb-summary"
    if name.endswith(".swanlab"):
        return "swanlab"
    parts = rel.split("/")[:-1]
    if "metrics" in parts and ("mlruns" in parts or "mlruns" in rel):
        return "mlflow-metric"
    if name == "error.json":
        return "elastic-error"
    if rank_of_name(name) is not None and "trace" in name:
        return "flight-dump"
    if name.endswith((".csv", ".jsonl")):
        return "csv"
    if name in NOT_LOGS:
        return None
    if any(fnmatch.fnmatch(name, p) for p in LOG_PATTERNS):
        return "text-log"
    return None


def _walk(base: str, skipped: list[FileRead]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    states: list[tuple[int, str]] = []

    def onerror(err: OSError) -> None:
        skipped.append(FileRead(err.filename or base, "unknown", 0, 0, complete=False,
                                problems=(f"not read: {err.strerror or err}",)))

    for root, dirs, files in os.walk(base, onerror=onerror):
        depth = root[len(base):].count(os.sep)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
        if depth >= MAX_DEPTH:
            dirs[:] = []
        in_ckpt = os.path.basename(root).startswith("checkpoint-")
        for name in sorted(files):
            p = os.path.join(root, name)
            if in_ckpt and name != "trainer_state.json":
                continue
            kind = kind_of(name, os.path.relpath(p, base).replace(os.sep, "/"))
            if kind is None:
                continue
            why = not_regular(p)
            if why:
                skipped.append(FileRead(p, "unknown", 0, 0, complete=False, problems=(why,)))
                continue
            if kind == "trainer-state":
                m = re.search(r"checkpoint-(\d+)", root)
                states.append((int(m.group(1)) if m else 1 << 62, p))
                continue
            found.append((p, kind))
    if states:
        found.append((max(states)[1], "trainer-state"))
    return found


def not_regular(path: str) -> str | None:
    """Why `path` is not read (a FIFO, a device, a symlink loop, a path too long), or None for a regular file."""
    try:
        st = os.stat(path)
    except OSError as err:
        return f"not read: {err.strerror or err}"
    if not stat.S_ISREG(st.st_mode):
        return f"not read: {file_type(st.st_mode)}, not a regular file"
    return None


def discover(run_dir: str, skipped: list[FileRead] | None = None) -> list[tuple[str, str]]:
    """(path, kind) of every file worth reading under `run_dir`, in reading order; what was skipped (not a
    regular file, unreadable folders) is appended to `skipped`. Of the ``trainer_state.json`` files (output_dir
    and each ``checkpoint-N/``) only the one with the highest step is read (each holds the whole history)."""
    base = os.path.abspath(run_dir)
    found = _walk(base, skipped if skipped is not None else [])
    return sorted(found, key=lambda x: (ORDER.get(x[1], 9), _event_key(x[0]) if x[1] == "event-file" else (0, x[0])))


def _event_key(path: str) -> tuple:
    parts = os.path.basename(path).split(".")
    ts = next((int(x) for x in parts if x.isdigit() and len(x) >= 9), 0)
    return (ts, path)


def fingerprint(path: str) -> tuple[int, str] | None:
    """(size in bytes, BLAKE2b of the first and last MiB) of a file, or None when it cannot be read. Two inputs
    with the same fingerprint are taken as one file given twice (a copy, a hard or bind-mounted path): reading
    both would count every overflow, OOM and loss point twice. Cost: at most 2 MiB read per file."""
    try:
        size = os.path.getsize(path)
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as fh:
            h.update(fh.read(FINGERPRINT_BYTES))
            if size > FINGERPRINT_BYTES:
                fh.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
                h.update(fh.read(FINGERPRINT_BYTES))
    except OSError:
        return None
    return size, h.hexdigest()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def read_file(path: str, kind: str, base: str | None = None) -> FileEvidence:
    """Read one file with the reader for `kind`, its origin filled from its path; anything unexpected becomes a
    problem in its FileRead (kind ``unknown`` = skipped)."""
    try:
        fe = _dispatch(path, kind)
    except MissingExtra as err:
        fe = FileEvidence(FileRead(path, "unknown", _size(path), 0, complete=False,
                                   problems=(f"not read: {err} (the text logs were read without it)",)))
    except InputError as err:
        fe = FileEvidence(FileRead(path, "unknown", _size(path), 0, complete=False, problems=(err.message,)))
    except (OSError, MemoryError, ValueError, UnicodeError, OverflowError, RecursionError) as err:
        fe = FileEvidence(FileRead(path, kind, _size(path), 0, complete=False,
                                   problems=(f"could not be read: {type(err).__name__}: {err}",)))
    thinned = max((s.stride[0] for s in fe.series), default=1)
    if thinned > 1:
        fe = replace(fe, read=replace(fe.read, note="; ".join(x for x in (fe.read.note, (
            f"curves thinned: one kept point per {thinned} logs (spikes and non-finite values kept)")) if x)))
    bad = sum(s.out_of_range[0] for s in fe.series)
    if bad:
        fe = replace(fe, read=replace(fe.read, problems=fe.read.problems + (
            f"{bad} step value(s) of 2^62 or more (or not a number) read as unknown steps",)))
    origin = {**origin_of(path, base), **{k: v for k, v in fe.origin.items() if v is not None}}
    if kind == "csv" or fe.read.kind == "gpu-record":
        origin.setdefault("node", os.path.splitext(os.path.basename(path))[0])
    return replace(fe, origin=origin) if origin != fe.origin else fe


def _dispatch(path: str, kind: str) -> FileEvidence:
    from finetune_doctor.readers.runlogs import logs, trackers, trainer_log
    counted = kind == COUNTED
    if kind in ("text-log", COUNTED):
        kind = sniff(path)   # a .txt that is really binary, a trainer log or an nvidia-smi CSV
    if kind == "text-log":
        fmt = own_report_of(path)
        if fmt:
            return FileEvidence(FileRead(path, "unknown", _size(path), 0, complete=False, problems=(
                f"not read: a finetune-doctor report ({fmt} format), this tool's output rather than the run's",)))
    if kind == "text-log" and counted:
        return logs.read_text_log(path, count_dicts=True)
    if kind == "trainer-log":
        return trainer_log.read_trainer_log(path)
    if kind == "trainer-state":
        return trainer_log.read_trainer_state(path)
    if kind == "results":
        return trainer_log.read_results(path)
    if kind == "event-file":
        from finetune_doctor.readers.runlogs.tbevents import read_event_file

        return read_event_file(path)
    if kind == "wandb":
        return trackers.read_wandb(path)
    if kind == "wandb-summary":
        return trackers.read_wandb_summary(path)
    if kind == "swanlab":
        return trackers.read_swanlab(path)
    if kind == "mlflow-metric":
        return trackers.read_mlflow_metric(path, trackers.mlflow_key(path))
    if kind == "elastic-error":
        from finetune_doctor.readers.runlogs.elastic import read_elastic_error

        return read_elastic_error(path)
    if kind == "flight-dump":
        from finetune_doctor.readers.runlogs.flight import read_flight_dump

        return read_flight_dump(path, None)
    if kind in ("gpu-record", "csv"):
        return read_gpu_record(path)
    if kind == "text-log":
        return logs.read_text_log(path)
    size = _size(path)
    return FileEvidence(FileRead(path, "unknown", size, 0, complete=False,
                                 problems=("not a text log, trainer log or event file; skipped",)))


def read_gpu_record(path: str) -> FileEvidence:
    """A GPU recording through readers/gpus/smi.py (the `doctor gpus` reader): per-card peak and last memory."""
    from finetune_doctor.readers.gpus.smi import read_gpu_file

    size = _size(path)
    try:
        rec = read_gpu_file(path)
    except InputError as err:
        return FileEvidence(FileRead(path, "gpu-record", size, size, complete=False,
                                     problems=(f"line {err.line}: {err.message}" if err.line else err.message,)))
    stats: dict[int, dict[str, Any]] = {}
    for snap in rec.samples:
        for c in snap.cards:
            if c.used_bytes is None:
                continue
            st = stats.setdefault(c.index, {"n": 0, "max": -1.0, "last": 0.0, "line": c.line or 0, "total": None,
                                            "name": c.name})
            used = c.used_bytes / (1 << 20)
            st["n"] += 1
            st["last"] = used
            if used > st["max"]:
                st["max"], st["line"] = used, c.line or st["line"]
            if c.total_bytes:
                st["total"] = c.total_bytes / (1 << 20)
    gpus = tuple(GpuMemory(path, i, s["name"], s["n"], s["total"], s["max"], s["last"], s["line"])
                 for i, s in sorted(stats.items()))
    note = "; ".join([f"{rec.format} format"] + [n.replace(f"{path}: ", "") for n in rec.notes])
    return FileEvidence(FileRead(path, "gpu-record", size, size, records=len(rec.samples),
                                 items=sum(g.samples for g in gpus), note=note), gpus=gpus,
                        gpu_samples=tuple(rec.samples))


def _read_task(task: tuple[str, str, str | None]) -> FileEvidence:
    return read_file(*task)


def read_all(tasks: list[tuple[str, str, str | None]], workers: int | None = None) -> Iterator[FileEvidence]:
    """Read (path, kind, base) tasks, yielding in order; in parallel over the machine's cores (processes, one file
    at a time each) when there are at least PARALLEL_MIN_FILES files and PARALLEL_MIN_BYTES bytes. At most
    2 x workers results wait in memory: the caller consumes them as they come."""
    total = sum(_size(p) for p, _, _ in tasks)
    n = workers or os.cpu_count() or 1
    if n < 2 or len(tasks) < PARALLEL_MIN_FILES or total < PARALLEL_MIN_BYTES:
        for t in tasks:
            yield read_file(*t)
        return
    import multiprocessing
    from collections import deque

    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    n = min(n, len(tasks))
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        pending: deque = deque()
        it = iter(tasks)
        for t in it:
            pending.append(pool.submit(_read_task, t))
            if len(pending) >= 2 * n:
                break
        while pending:
            fe = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(_read_task, nxt))
            yield fe


class _BestCurves:
    """Keeps, per metric name, only the longest series of the text-log and tracker files (the one
    analyzers/postmortem/curves.py would choose among them): the same curve logged by 256 ranks costs one rank's memory.
    trainer_log/trainer_state/event-file series are always kept (their priority differs)."""

    PRUNED = ("text-log", "run-record", "elastic-error")

    def __init__(self) -> None:
        self.best: dict[str, tuple[int, int]] = {}   # name -> (points, index of the file holding it)

    def add(self, files: list[FileEvidence], fe: FileEvidence) -> FileEvidence:
        if fe.read.kind not in self.PRUNED or not fe.series:
            return fe
        keep = []
        idx = len(files)
        for s in fe.series:
            old = self.best.get(s.name)
            if old is not None and old[0] >= len(s):
                continue
            if old is not None:
                prev = files[old[1]]
                files[old[1]] = replace(prev, series=tuple(x for x in prev.series if x.name != s.name))
            self.best[s.name] = (len(s), idx)
            keep.append(s)
        return replace(fe, series=tuple(keep)) if len(keep) != len(fe.series) else fe


def _counted(tasks: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]] | None:
    """The tasks with the big text logs made counted reads (`COUNTED`), or None when there are fewer than
    COUNTED_MIN_FILES of them (each file is then read in full)."""
    from finetune_doctor.readers.runlogs.loggrep import MIN_BYTES

    big = {p for p, k, _ in tasks if k == "text-log" and _size(p) >= MIN_BYTES}
    if len(big) < COUNTED_MIN_FILES:
        return None
    return [(p, COUNTED if p in big else k, b) for p, k, b in tasks]


def sniff_kind(path: str) -> str:
    """The reader for a file given with ``--log``: by name first (tracker files, error files, dumps), else by
    content (readers/runlogs/logs.py `sniff`)."""
    name = os.path.basename(path)
    kind = kind_of(name, name)
    if kind in ("wandb", "swanlab", "elastic-error", "flight-dump", "wandb-summary"):
        return kind
    return sniff(path)


def _is_sink(path: str, exclude: frozenset[tuple[int, int]]) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in exclude


def _input_path(p: str, what: str) -> os.stat_result:
    """stat of a path given on the command line; InputError naming it for a missing, looping or too-long path."""
    try:
        return os.stat(p)
    except FileNotFoundError:
        raise InputError(f"no such {what}", file=p) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=p) from None


def _named_as(path: str, named: Mapping[tuple[int, int], str]) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return named.get((st.st_dev, st.st_ino))


def _holds_run_lines(fe: FileEvidence) -> bool:
    """Whether a file read as a log gave anything of the run beyond an environment report's lines (package
    versions and the GPU type, Fact names ``version:*``): a traceback, a metric, an OOM, NCCL or kill line, a
    launch line, the user's own words."""
    if fe.said or fe.series or fe.ooms or fe.overflows or fe.aborts or fe.nccl or fe.kills or fe.memory \
            or fe.notices or fe.restarts or fe.device_errors or fe.xids or fe.flight or fe.counted_dicts:
        return True
    return any(not f.name.startswith("version:") for f in fe.facts)


def collect(run_dir: str | None, logs: list[str], workers: int | None = None,
            exclude: frozenset[tuple[int, int]] = frozenset(),
            named: Mapping[tuple[int, int], str] | None = None) -> Evidence:
    """Read the run directory and every ``--log`` file, each content once (see `fingerprint`; the copies are
    listed in ``Evidence.duplicates``). Raises InputError for a path that does not exist or cannot be named; a
    RUN_DIR or ``--log`` that is not a regular file or directory (a FIFO, /dev/zero) is skipped with a note.
    `exclude` holds the (st_dev, st_ino) of files the command is writing its own report to (fsutil.py
    ``output_sinks``): skipped with a note, never read. `named` maps the (st_dev, st_ino) of files the command
    takes through another flag (an ``--env`` report in the run folder, trial 3) to that flag: read, and kept as a log
    only when it also holds log lines (`_holds_run_lines`: an issue's env block above its traceback, trial 14)."""
    from finetune_doctor.readers.runlogs.trainer_log import find_saved_args

    skipped: list[FileRead] = []
    saved = None
    seen: set[str] = set()
    prints: dict[tuple[int, str], str] = {}
    dups: list[tuple[str, str]] = []
    tasks: list[tuple[str, str, str | None]] = []
    flagged: dict[str, str] = {}

    def add(path: str, kind: str, base: str | None) -> None:
        real = os.path.realpath(path)
        if real in seen:
            return
        seen.add(real)
        if exclude and _is_sink(path, exclude):
            skipped.append(FileRead(path, "unknown", _size(path), 0, complete=False, problems=(
                "not read: this command's own report is being written to it",)))
            return
        flag = _named_as(path, named) if named else None
        if flag:
            # read like any log, kept only when it holds log lines (`_holds_run_lines`): LLaMA-Factory's issue
            # template puts `llamafactory-cli env` and the traceback in one post, given as both --env and --log
            # (trial 14); an environment report alone is still not a log (trial 3)
            flagged[path] = flag
        fp = fingerprint(path)
        if fp is not None and fp[0] > 0:
            if fp in prints:
                dups.append((path, prints[fp]))
                return
            prints[fp] = path
        tasks.append((path, kind, base))

    base = None
    if run_dir is not None:
        st = _input_path(run_dir, "file or directory")
        if stat.S_ISREG(st.st_mode):
            logs, run_dir = [run_dir, *logs], None
        elif not stat.S_ISDIR(st.st_mode):
            skipped.append(FileRead(run_dir, "unknown", 0, 0, complete=False,
                                    problems=(f"not read: {file_type(st.st_mode)}, not a regular file",)))
            run_dir = None
    if run_dir is not None:
        base = os.path.abspath(run_dir)
        saved, notes = find_saved_args(run_dir)
        skipped.extend(notes)
        for path, kind in discover(run_dir, skipped):
            if kind == "csv" and sniff(path) != "gpu-record":
                continue
            add(path, kind, base)
    for p in logs:
        st = _input_path(p, "file")
        if stat.S_ISDIR(st.st_mode):
            raise InputError("--log takes a file; give a directory as RUN_DIR", file=p)
        why = not_regular(p)
        if why:
            skipped.append(FileRead(p, "unknown", 0, 0, complete=False, problems=(why,)))
            continue
        add(p, sniff_kind(p), None)
    files: list[FileEvidence] = []
    best = _BestCurves()
    counted = _counted(tasks)
    read: list[FileEvidence] = []
    for fe in read_all(counted or tasks, workers):
        if fe.read.path in flagged and not _holds_run_lines(fe):
            skipped.append(FileRead(fe.read.path, "unknown", fe.read.size, 0, complete=False, problems=(
                f"not read: the {flagged[fe.read.path]} file, not a log",)))
        elif fe.read.kind == "unknown":
            skipped.append(fe.read)
        elif counted:
            read.append(fe)
        else:
            files.append(best.add(files, fe))
    if counted:
        top = max(read, key=lambda x: x.counted_dicts, default=None)
        for fe in read:
            if top is not None and fe is top and fe.counted_dicts:
                fe = read_file(fe.read.path, "text-log", next(b for p, _, b in tasks if p == fe.read.path))
            elif fe.counted_dicts:
                fe = replace(fe, read=replace(fe.read, note="; ".join(x for x in (fe.read.note, (
                    f"{fe.counted_dicts} metric dict line(s) counted, not parsed: the curves are read from "
                    f"{os.path.basename(top.read.path) if top else 'another file'}, the rank log with the most")) if x)))
            files.append(best.add(files, fe))
    return Evidence(run_dir=run_dir, files=tuple(files), skipped=tuple(skipped), saved_args=saved,
                    duplicates=tuple(dups))


__all__ = ["collect", "discover", "read_file", "read_all", "origin_of", "kind_of", "fingerprint", "not_regular",
           "read_gpu_record", "sniff_kind", "looks_binary"]
