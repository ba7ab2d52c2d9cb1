"""`doctor postmortem RUN_DIR [--log FILE ...] [--config CONFIG.yaml] [--plot FILE.png]`: why a run died or
went NaN, from what it left behind.

Flow: find the files a LLaMA-Factory run leaves (`discover`), read each with its reader (readers/logs.py,
readers/trainer_log.py, readers/tbevents.py), join the run's config when it is known (``--config``, else the
``training_args.yaml`` LLaMA-Factory's WebUI saves in output_dir) through facts/config.py, build
the timeline and the ``ev`` facts (analyzers/timeline.py), and evaluate the rules whose ``commands`` include
``postmortem`` over all namespaces (cfg, run, model, hw, mem, ds, ev).

Hardware: ``--gpu`` when given; otherwise the GPU capacity printed in a CUDA OOM message and the world size a
log states. NVML is not asked: the machine running the postmortem is not necessarily the one that trained.

Finding order: severity, then the rule's ``rank:N`` tag (root causes such as fp16-on-bf16-model-confirmed or
foreign-memory-on-gpu rank before the symptoms they explain, such as nan-loss or cuda-oom; rules without a
rank tag come last), then code. The first finding is the diagnosis.

Bad input never raises past the CLI: a missing path is an InputError (exit 2); unreadable, truncated or binary
files are reported in the ``read`` section and diagnosis goes on from the rest.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Any

from finetune_doctor.analyzers.timeline import analyze
from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError
from finetune_doctor.evidence import Evidence, FileEvidence, FileRead
from finetune_doctor.facts.config import Assembly, assemble_config
from finetune_doctor.facts.hw import resolve as resolve_hardware
from finetune_doctor.reporters.plot import draw
from finetune_doctor.settings import Options
from finetune_doctor.types import Hardware, Report, SourceDoc

LOG_PATTERNS = ("*.log", "*.out", "*.err", "*.txt", "*.log.gz", "*.txt.gz", "nohup.out", "stdout*", "stderr*")
NOT_LOGS = {"merges.txt", "vocab.txt", "requirements.txt", "added_tokens.txt", "special_tokens_map.txt",
            "README.txt", "LICENSE.txt", "license.txt", "dict.txt"}
MAX_DEPTH = 3
SPARK_POINTS = 120


def _kind_of(name: str) -> str | None:
    if name == "trainer_log.jsonl":
        return "trainer-log"
    if name == "trainer_state.json":
        return "trainer-state"
    if name.endswith("_results.json"):
        return "results"
    if "tfevents" in name:
        return "event-file"
    if name.endswith((".csv", ".jsonl")):
        return "csv"
    if name in NOT_LOGS:
        return None
    if any(fnmatch.fnmatch(name, p) for p in LOG_PATTERNS):
        return "text-log"
    return None


def discover(run_dir: str) -> list[tuple[str, str]]:
    """(path, kind) of every file worth reading under `run_dir`, in reading order.

    Of the ``trainer_state.json`` files (output_dir and each ``checkpoint-N/``) only the one with the highest
    step is read (each holds the whole log history up to its save). Event files are read one by one.
    """
    found: list[tuple[str, str]] = []
    states: list[tuple[int, str]] = []
    base = os.path.abspath(run_dir)
    for root, dirs, files in os.walk(base):
        depth = root[len(base):].count(os.sep)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules"))
        if depth >= MAX_DEPTH:
            dirs[:] = []
        in_ckpt = os.path.basename(root).startswith("checkpoint-")
        for name in sorted(files):
            p = os.path.join(root, name)
            if in_ckpt and name != "trainer_state.json":
                continue
            kind = _kind_of(name)
            if kind is None:
                continue
            if kind == "trainer-state":
                m = re.search(r"checkpoint-(\d+)", root)
                states.append((int(m.group(1)) if m else 1 << 62, p))
                continue
            found.append((p, kind))
    if states:
        found.append((max(states)[1], "trainer-state"))
    order = {"trainer-log": 0, "trainer-state": 1, "results": 2, "event-file": 3, "text-log": 4, "csv": 5}
    return sorted(found, key=lambda x: (order.get(x[1], 9), _event_key(x[0]) if x[1] == "event-file" else (0, x[0])))


def _event_key(path: str) -> tuple:
    parts = os.path.basename(path).split(".")
    ts = next((int(x) for x in parts if x.isdigit() and len(x) >= 9), 0)
    return (ts, path)


def read_file(path: str, kind: str) -> FileEvidence:
    """Read one file with the reader for `kind`; anything unexpected becomes a problem in its FileRead."""
    from finetune_doctor.readers import logs, trainer_log

    try:
        if kind == "text-log":
            kind = logs.sniff(path)   # a .txt that is really binary, a trainer log or an nvidia-smi CSV
        if kind == "trainer-log":
            return trainer_log.read_trainer_log(path)
        if kind == "trainer-state":
            return trainer_log.read_trainer_state(path)
        if kind == "results":
            return trainer_log.read_results(path)
        if kind == "event-file":
            from finetune_doctor.readers.tbevents import read_event_file

            return read_event_file(path)
        if kind in ("gpu-record", "csv"):
            return read_gpu_record(path)
        if kind == "text-log":
            return logs.read_text_log(path)
        if kind == "unknown":
            size = os.path.getsize(path)
            return FileEvidence(FileRead(path, "unknown", size, 0, complete=False,
                                         problems=("not a text log, trainer log or event file; skipped",)))
        size = os.path.getsize(path)
        return FileEvidence(FileRead(path, "unknown", size, 0, complete=False, problems=("not read",)))
    except InputError:
        raise
    except (OSError, MemoryError, ValueError, UnicodeError) as err:
        return FileEvidence(FileRead(path, kind, _size(path), 0, complete=False,
                                     problems=(f"could not be read: {type(err).__name__}: {err}",)))


def read_gpu_record(path: str) -> FileEvidence:
    """A GPU recording through readers/smi.py (the `doctor gpus` reader): per-card peak and last memory."""
    from finetune_doctor.evidence import GpuMemory
    from finetune_doctor.readers.smi import read_gpu_file

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


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


FINGERPRINT_BYTES = 1 << 20


def fingerprint(path: str) -> tuple[int, str] | None:
    """(size in bytes, BLAKE2b of the first and last MiB) of a file, or None when it cannot be read. Two inputs
    with the same fingerprint are taken as one file given twice (a copy, a hard or bind-mounted path): reading
    both would count every overflow, OOM and loss point twice. Cost: at most 2 MiB read per file."""
    import hashlib

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


def collect(run_dir: str | None, logs: list[str]) -> Evidence:
    """Read the run directory and every ``--log`` file, each content once (see `fingerprint`; the copies are
    listed in ``Evidence.duplicates``). Raises InputError for a path that does not exist."""
    files: list[FileEvidence] = []
    skipped: list[FileRead] = []
    saved = None
    seen: set[str] = set()
    prints: dict[tuple[int, str], str] = {}
    dups: list[tuple[str, str]] = []

    def copy_of(path: str) -> bool:
        fp = fingerprint(path)
        if fp is None or fp[0] == 0:
            return False
        if fp in prints:
            dups.append((path, prints[fp]))
            return True
        prints[fp] = path
        return False
    if run_dir is not None:
        if not os.path.exists(run_dir):
            raise InputError("no such file or directory", file=run_dir)
        if os.path.isfile(run_dir):
            logs = [run_dir, *logs]
            run_dir = None
    if run_dir is not None:
        from finetune_doctor.readers.trainer_log import find_saved_args

        saved, notes = find_saved_args(run_dir)
        skipped.extend(notes)
        for path, kind in discover(run_dir):
            if kind == "csv":
                from finetune_doctor.readers.logs import sniff

                if sniff(path) != "gpu-record":
                    continue
            seen.add(os.path.realpath(path))
            if copy_of(path):
                continue
            fe = read_file(path, kind)
            if fe.read.kind == "unknown":
                skipped.append(fe.read)
            else:
                files.append(fe)
    for p in logs:
        if not os.path.exists(p):
            raise InputError("no such file", file=p)
        if os.path.isdir(p):
            raise InputError("--log takes a file; give a directory as RUN_DIR", file=p)
        if os.path.realpath(p) in seen:
            continue
        seen.add(os.path.realpath(p))
        if copy_of(p):
            continue
        from finetune_doctor.readers.logs import sniff

        fe = read_file(p, sniff(p))
        if fe.read.kind == "unknown":
            skipped.append(fe.read)
        else:
            files.append(fe)
    return Evidence(run_dir=run_dir, files=tuple(files), skipped=tuple(skipped), saved_args=saved,
                    duplicates=tuple(dups))


def _hardware_from_evidence(ev: Evidence) -> Hardware | None:
    """The GPU capacity a CUDA OOM message printed and the world size a log stated: enough for the OOM remedy
    planner's budget when no --gpu was given."""
    cap = None
    for f in ev.files:
        for o in f.ooms:
            if o.total:
                cap = o.total / (1 << 30)
                break
        if cap:
            break
    world = next((fact.value for f in ev.files for fact in f.facts if fact.name == "world_size"
                  and isinstance(fact.value, int)), None)
    if cap is None and world is None:
        return None
    return Hardware(gpu=None, num_gpus=world, capacity_gib=cap, bf16=None, source="log")


def _context(config: str | None, opts: Options, hw: Hardware | None, notes: list[str]) -> Assembly | None:
    """The config-side facts of `config` (facts/config.py, lenient: the run already happened, so a model or a
    DeepSpeed JSON that no longer resolves narrows the diagnosis instead of stopping it), or None without a config.
    """
    if not config:
        return None
    placeholder = hw or Hardware(gpu=None, num_gpus=None, capacity_gib=None, bf16=None, source="none")
    asm = assemble_config(config, (), opts, hw=placeholder, need_model=False, lenient=True)
    notes.extend(asm.notes)
    return asm


def run(run_dir: str, logs: list[str], config: str | None, opts: Options, plot: str | None = None) -> Report:
    """Diagnose a finished or crashed run; returns the Report (the CLI picks the exit code)."""
    ev = collect(run_dir, list(logs or []))
    notes: list[str] = []
    cfg_path = config or ev.saved_args
    if config is None and ev.saved_args:
        notes.append(f"config taken from {ev.saved_args} (the arguments LLaMA-Factory saved in the run directory)")
    hw = resolve_hardware(opts.gpu, opts.nnodes, allow_nvml=False) if opts.gpu else None
    if hw is None:
        hw = _hardware_from_evidence(ev)
    if cfg_path and not os.path.isfile(cfg_path):
        raise InputError("no such config file", file=cfg_path)
    asm = _context(cfg_path, opts, hw, notes)
    if asm is not None:
        facts, sources, live = asm.facts, dict(asm.sources), asm.live()
        hw = asm.hw if asm.hw is not None and asm.hw.source != "none" else hw
    else:
        facts = {"cfg": None, "run": None, "model": None, "mem": None, "ds": None, "lint": None,
                 "hw": None if hw is None else {**hw.as_dict(), "host_ram_gib": hw.host_ram_gib}}
        sources, live = {}, {}
    tl = analyze(ev, facts)
    facts["ev"] = tl.facts
    main_log = next((f.read.path for f in ev.files if f.read.kind == "text-log"), None)
    if main_log and "log" not in sources:
        sources["log"] = SourceDoc("log", main_log)
    if ev.run_dir and "run_dir" not in sources:
        sources["run_dir"] = SourceDoc("run_dir", ev.run_dir)
    findings = judge("postmortem", facts, sources, opts, live=live, order="rank")
    if asm is not None and any(f.name == "fragmentation" for f in findings):
        from finetune_doctor.probes.confirm import confirm_fragmentation

        findings = confirm_fragmentation(asm, findings, opts)   # replays the crashed config (probes/replayed.py)

    if plot:
        draw(tl, plot)
        notes.append(f"plot written to {plot}")
    sections = {"postmortem": section_data(tl), "read": read_data(ev)}
    inputs = {"config": cfg_path, "deepspeed": None, "run_dir": ev.run_dir}
    run_d = None
    memory = None
    if asm is not None:
        run_d = asm.run_summary()
        memory = asm.memory
        oom = any(getattr(e, "kind", None) == "oom" for e in tl.events)
        if memory is not None and not oom and not (hw is not None and hw.capacity_gib):
            # nothing to compare it with and no OOM to explain: the table would only distract from the cause
            memory = None
            notes.append("memory estimate left out (no GPU known, no OOM in the logs): `doctor estimate` shows it")
        if asm.ds is not None and getattr(asm.ds, "path", None):
            inputs["deepspeed"] = str(asm.ds.path)
    if hw is not None and hw.source == "none":
        hw = None
    return Report(command="postmortem", inputs=inputs, findings=tuple(findings), run=run_d, hardware=hw,
                  memory=memory, timeline=tl.events, sections=sections, notes=tuple(notes))


# -- sections -------------------------------------------------------------------------------------------------------

def read_data(ev: Evidence) -> dict[str, Any]:
    """The ``read`` section: what each file gave and what could not be read."""
    rows = []
    for r in ev.reads():
        status = "read" if r.complete and not r.problems else ("skipped" if r.bytes_read == 0 and not r.items
                                                                 else "partial")
        rows.append({"path": r.path, "kind": r.kind, "status": status, "size": r.size, "bytes_read": r.bytes_read,
                     "lines": r.lines or None, "records": r.records or None, "items": r.items,
                     "problems": list(r.problems), "note": r.note})
    return {"run_dir": ev.run_dir, "files": rows,
            "duplicates": [{"path": p, "same_as": q} for p, q in ev.duplicates],
            "counts": {s: sum(1 for x in rows if x["status"] == s) for s in ("read", "partial", "skipped")}}


def _nf(v: float) -> Any:
    """JSON-safe value: non-finite floats as the strings 'nan', 'inf', '-inf'."""
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v


def downsample(steps: Any, values: Any, n: int = SPARK_POINTS) -> tuple[list[int], list[Any]]:
    """At most `n` buckets over the points: each bucket keeps its extreme (largest distance from the overall
    median) and any non-finite value, so spikes and NaN survive the reduction."""
    m = len(values)
    if m <= n:
        return list(steps), [_nf(v) for v in values]
    import statistics

    fin = [v for v in values if v == v and abs(v) != float("inf")]
    med = statistics.median(fin) if fin else 0.0
    out_s, out_v = [], []
    for b in range(n):
        lo, hi = b * m // n, (b + 1) * m // n
        best = None
        for i in range(lo, hi):
            v = values[i]
            if not (v == v and abs(v) != float("inf")):
                best = i
                break
            if best is None or abs(v - med) > abs(values[best] - med):
                best = i
        assert best is not None
        out_s.append(steps[best])
        out_v.append(_nf(values[best]))
    return out_s, out_v


def section_data(tl: Any) -> dict[str, Any]:
    """The ``postmortem`` section: curves reduced for sparklines, event marks, and the run's outline."""
    f = tl.facts
    curves = {}
    for name in ("loss", "grad_norm", "learning_rate", "loss_scale"):
        c = tl.curves.get(name)
        if c is None or not len(c):
            continue
        s, v = downsample(c.steps, c.values)
        fin = [x for x in c.values if x == x and abs(x) != float("inf")]
        curves[name] = {"steps": s, "values": v, "points": len(c), "basis": c.basis,
                        "min": min(fin) if fin else None, "max": max(fin) if fin else None,
                        "last": _nf(c.values[-1]), "nonfinite": len(c) - len(fin)}
    marks = [{"step": e.step, "kind": e.kind} for e in tl.events if e.step is not None]
    gpus = None
    if f.get("gpus"):
        gpus = [{"index": c["index"], "name": c["name"], "peak_gib": round(c["peak_gib"], 2),
                 "total_gib": None if c["total_gib"] is None else round(c["total_gib"], 2), "samples": c["samples"]}
                for c in f["gpus"]["cards"]]
    return {"steps": f.get("steps"), "completed": bool(f.get("completed")), "gpus": gpus,
            # DeepSpeed's minimum-loss-scale abort is an exception that ends the run, like any other crash
            "crashed": bool(f.get("crash") or f.get("oom") or f.get("nccl") or f.get("killed")
                            or (f.get("scale") or {}).get("trajectory") == "abort"),
            "curves": curves, "marks": marks, "events": len(tl.events),
            "restarts": len(f.get("restarts") or [])}


__all__ = ["run", "collect", "discover", "read_file", "section_data", "read_data", "downsample"]
