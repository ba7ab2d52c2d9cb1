"""The ranks and nodes of a distributed run, joined from their own files: each rank's last state, the rank the
others waited on (the root), who was slow, and where each one sits (node, GPU).

Each file carries its writer in ``FileEvidence.origin`` (the path: ``node1/rank3.log``, torchelastic's
``attempt_0/3/error.json``, a flight-recorder dump's rank suffix; or its lines: ``[rank3]:`` prefixes, LLaMA-
Factory's "Process rank: 3, ... device: cuda:3"), and its pace and failure time in ``FileEvidence.timing``.

* **State of each rank**: ``raised`` (a CUDA OOM, a CUDA error, a Python exception that is not the collective's
  own abort), ``killed`` (the kernel's or cgroup's OOM killer, slurm, a shell's "Killed", SIGKILL),
  ``timed out`` (the NCCL watchdog's timeout, "last enqueued / last completed NCCL work", "Some NCCL operations
  have failed or timed out", the heartbeat monitor, and the ``DistBackendError`` those raise), ``aborted`` (the
  watchdog or torchelastic tearing the process down after another rank failed: SIGABRT/SIGTERM, "failed
  (exitcode: N)"), ``finished``, ``still running`` (it logged progress and nothing else) and ``silent`` (its file
  shows neither). A timeout or an abort is what a rank sees while it waits on another: a consequence
  (ProcessGroupNCCL.cpp ``WorkNCCL::checkTimeout``; torch/distributed/elastic/agent/server/api.py tears down the
  other workers once one fails).
* **Root: causality first, clocks second.** (1) the ranks that raised or were killed are causes, the timed-out
  ranks their consequences, whatever the clocks: a line without a wall clock is not later than one with it;
  among several causes, the one the desync report / flight recorder names, else the earliest step, else the
  earliest clock. (2) without a cause: the laggards that TORCH_NCCL_DESYNC_DEBUG (TraceUtils.h
  ``analyzeMissingRanks``/``analyzeLaggingRanks``) or the flight-recorder dumps name; (3) the rank whose
  collective sequence number is behind the others' (strictly; equal counts or a cut line name nobody);
  (3b) when every rank that printed only timed out, the ranks of the world that printed nothing (below the
  highest rank named, or up to the world size the log or config states; fewer than half of it);
  (4) the ranks that logged no failure while the others timed out (stuck, not dead); (5) torchelastic's "Root
  Cause (first observed failure)", which is only the first process to exit; (6) the earliest failure by clock.
  ``first_failed.how`` says which step decided.
* **Stragglers.** From each rank's seconds per step (the training bar's rate): at least 3 ranks with a pace, and
  a rank ≥ 1.25× the median of the others (a bar's rate moves by a few percent between steps; 25 % is a rank
  that is really behind). A rank whose last step is behind the furthest rank's by ≥ 2 steps is a straggler too.
"""

from __future__ import annotations

import statistics
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence, FileEvidence

STRAGGLER_RATIO = 1.25
STRAGGLER_LAG = 2
TABLE_CAP = 1024
CAUSE_STATES = ("raised", "killed")
FAR_BEHIND = 10
"""Collectives a rank's counter must trail by for it to be named behind even between two ranks (a counter that
far back left the sequence long before the timeout; one or two apart is the normal skew of in-flight work)."""
CONSEQUENCE_EXC = ("DistBackendError", "DistError", "ChildFailedError", "DistNetworkError", "SignalException",
                   "CalledProcessError", "DistStoreError")
"""Exception classes that a rank raises because another one failed (torch.distributed's watchdog and store,
torchelastic's agent): consequences, not causes (torch/distributed/elastic/multiprocessing/errors/__init__.py);
and a launcher's report that its child exited non-zero (accelerate/commands/launch.py ``simple_launcher``:
``raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)``), whose cause is the child's own
exception printed above it."""
CONSEQUENCE_WORDS = ("NCCL", "Watchdog", "watchdog", "timed out", "Timeout", "Connection reset", "TCPStore",
                     "Connection closed by peer",   # gloo pair.cc: the peer went away (launchcause.py GLOO_PEER)
                     "recvValue", "Broken pipe", "ProcessGroup",
                     # c10d's store seen from a client (launchcause.py STORE_*): rank 0, its server, had gone
                     "store->get", "Socket Timeout", "Failed to recv, got 0 bytes")
_PHASE_WORDS = (("save", ("_save_checkpoint", "save_model", "save_checkpoint", "Saving model checkpoint")),
                ("evaluation", ("evaluation_loop", "evaluate", "prediction_step", "Running Evaluation")),
                ("optimizer", ("optimizer.step", "_optimizer_step", "step (adamw", "clip_grad")),
                ("backward", ("backward", "reduce_scatter", "allreduce_bucket")),
                ("forward", ("forward", "compute_loss")))


def _rank_of(f: FileEvidence) -> int | None:
    r = f.origin.get("rank")
    return r if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 20 else None


def is_consequence_exc(value: dict[str, Any] | None, text: str) -> bool:
    """True for an exception a rank raises because another one failed (`CONSEQUENCE_EXC` classes, or
    `CONSEQUENCE_WORDS` in its message); `value` is the exception notice's {cls, msg}, `text` its line."""
    cls = (value or {}).get("cls") or ""
    msg = (value or {}).get("msg") or text
    return any(c in cls for c in CONSEQUENCE_EXC) or any(w in msg for w in CONSEQUENCE_WORDS)


def _phase(text: str, frames: tuple[str, ...] = ()) -> str | None:
    for phase, words in _PHASE_WORDS:
        if any(w in x for x in (text, *frames) for w in words):
            return phase
    return None


def _line_ranks(f: FileEvidence) -> list[int]:
    """The ranks that the failure records of one file name on their own lines (``[rank2]:`` prefixes). More
    than one: the file is a launcher's interleaved log (``accelerate launch`` or torchrun without ``--log-dir``
    print every worker's output to one stream, accelerate/commands/launch.py:998-1030 runs torch.distributed.run
    in-process), and each rank's events are read apart."""
    named = {o.rank for o in f.ooms} | {d.rank for d in f.device_errors} | {n.rank for n in f.nccl} \
        | {(n.value or {}).get("rank") for n in f.notices if n.kind == "exception"} \
        | {_tb_rank(n.value) for n in f.notices if n.kind == "traceback"}
    return sorted(r for r in named if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 20)


def _events(f: FileEvidence, only: int | None = None) -> list[dict[str, Any]]:
    """Every failure event of one file: {line, state, kind, step, phase, op, seq, wall}; with `only`, the
    events of the lines that name that rank (see `_line_ranks`)."""
    wall = f.timing.get("fail_wall")
    out: list[dict[str, Any]] = []

    def mine(rank: Any) -> bool:
        return only is None or rank == only

    def add(line: int, state: str, kind: str, step: int | None, phase: str | None = None, op: str | None = None,
            seq: int | None = None, w: float | None = None) -> None:
        out.append({"line": line, "state": state, "kind": kind, "step": step, "phase": phase, "op": op,
                    "seq": seq, "wall": w})

    for o in [o for o in f.ooms if mine(o.rank)][:1]:
        from finetune_doctor.analyzers.postmortem.oomcause import oom_phase

        ph = oom_phase(o.frames, o.memory_label)[0]
        add(o.line, "raised", "CUDA out of memory", o.step, ph, w=wall)
    for d in [d for d in f.device_errors if mine(d.rank)][:1]:
        add(d.line, "raised", f"CUDA error: {d.status}", d.step, _phase(d.text), w=wall)
    for n in f.nccl:
        if n.kind in ("timeout", "last_work", "failed", "heartbeat") and mine(n.rank):
            add(n.line, "timed out", "NCCL collective timeout", n.step, None, n.op if n.kind == "timeout" else None,
                n.seq if n.seq is not None else n.work, n.wall if n.wall is not None else wall)
            break
    for n in f.notices:
        if n.kind == "exception" and mine((n.value or {}).get("rank")):
            v = n.value or {}
            if is_consequence_exc(v, n.text):
                add(n.line, "timed out" if "imeout" in n.text or "timed out" in n.text else "aborted",
                    v.get("cls") or "exception", n.step, w=wall)
            else:
                add(n.line, "raised", v.get("cls") or "exception", n.step, _phase(n.text), w=wall)
            break
    if not any(e["state"] in ("raised", "timed out") for e in out):
        _cut_traceback(f, mine, add, wall)
    for k in f.kills:
        if not mine(k.rank):
            continue
        if k.signal in ("SIGSEGV", "SIGBUS", "SIGILL"):
            # a fault in compiled code is this rank's own failure: a cause, like an exception
            add(k.line, "raised", f"crashed ({k.signal})", k.step, w=wall)
            break
        if k.kind in ("kernel-oom", "cgroup-oom", "slurm-oom", "shell-killed") or (
                k.kind == "signal" and k.signal == "SIGKILL"):
            add(k.line, "killed", f"killed ({k.signal or k.kind})", k.step, w=wall)
            break
        if k.kind in ("signal", "torchrun-exit", "launcher-exit"):
            add(k.line, "aborted", f"aborted ({k.signal or ('exitcode ' + str(k.exitcode))})", k.step, w=wall)
            break
    return out


def _tb_rank(value: Any) -> Any:
    """The rank of a traceback notice (its value is {rank, frames}; an int in older records)."""
    return value.get("rank") if isinstance(value, dict) else value


# the frames of a rank that was waiting in a collective when it died: its traceback is a consequence
_COLLECTIVE_FRAMES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "all_to_all")


def _cut_traceback(f: FileEvidence, mine: Any, add: Any, wall: float | None) -> None:
    """A traceback cut before its exception line, in a file (or rank) with no other failure line: the rank
    raised something the paste lost. It is what that rank did (a cause), unless its innermost frames are a
    collective (the rank was waiting on another: aborted). The phase comes from the frames (oomcause.PHASES)."""
    from finetune_doctor.analyzers.postmortem.oomcause import oom_phase

    if any(n.kind == "exception" and mine((n.value or {}).get("rank")) for n in f.notices):
        return
    for n in f.notices:
        if n.kind != "traceback" or not mine(_tb_rank(n.value)):
            continue
        frames = tuple((n.value or {}).get("frames") or ()) if isinstance(n.value, dict) else ()
        inner = tuple(reversed(frames[-6:]))
        waiting = any(w in fr for fr in inner[:3] for w in _COLLECTIVE_FRAMES)
        add(n.line, "aborted" if waiting else "raised", "a traceback cut before its exception line", n.step,
            oom_phase(inner, None)[0] if inner else None, w=wall)
        return


def _failure(evs: list[dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The event that stands for the rank: a cause before a consequence, then the first line."""
    if not evs:
        return None
    order = {"raised": 0, "killed": 1, "timed out": 2, "aborted": 3}
    e = min(evs, key=lambda x: (order[x["state"]], x["line"]))
    step = next((x["step"] for x in evs if x["step"] is not None), None)
    coll = next((x for x in evs if x["seq"] is not None or x["op"]), None)
    return {"line": e["line"], "kind": e["kind"], "state": e["state"], "timeout": e["state"] == "timed out",
            "wall": e["wall"], "step": e["step"] if e["step"] is not None else step, "phase": e["phase"],
            "op": coll["op"] if coll else None, "seq": coll["seq"] if coll else None,
            "location": location_of(path, e["line"])}


def _new_row(r: int) -> dict[str, Any]:
    return {"rank": r, "node": None, "host": None, "gpu": None, "local_rank": None, "files": [], "last_step": None,
            "sec_per_step": None, "failure": None, "state": "silent", "completed": None, "enqueued": None}


def _table(ev: Evidence) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    order = {"raised": 0, "killed": 1, "timed out": 2, "aborted": 3}
    for f in ev.files:
        named = _line_ranks(f)
        if len(named) > 1:
            for r in named:
                row = rows.setdefault(r, _new_row(r))
                row["files"].append(f.read.path)
                _counters(row, f, r, strict=True)
                fail = _failure(_events(f, r), f.read.path)
                seqs = [n.seq for n in f.nccl if n.rank == r and n.kind == "timeout" and n.seq is not None]
                if fail and fail["state"] == "timed out" and seqs:
                    # several collectives may be pending: the furthest one this rank's watchdog timed out on
                    # (as collectives.py `_behind_in_one_file` reads a pasted log)
                    fail["seq"] = max(seqs)
                _merge(row, fail, order)
            continue
        r = _rank_of(f)
        if r is None:
            continue
        row = rows.setdefault(r, _new_row(r))
        row["files"].append(f.read.path)
        for key in ("node", "host", "gpu", "local_rank"):
            if row[key] is None and f.origin.get(key) is not None:
                row[key] = f.origin[key]
        if f.last_step is not None:
            row["last_step"] = max(row["last_step"] or 0, f.last_step)
        if f.timing.get("sec_per_step"):
            row["sec_per_step"] = f.timing["sec_per_step"]
        _counters(row, f, r)
        _merge(row, _failure(_events(f), f.read.path), order)
    for row in rows.values():
        if row["failure"]:
            row["state"] = row["failure"]["state"]
        elif row["last_step"] is not None or row["sec_per_step"]:
            row["state"] = "still running"
    return rows


def _counters(row: dict[str, Any], f: FileEvidence, r: int, strict: bool = False) -> None:
    """The rank's last completed / enqueued collective from its "last enqueued NCCL work" lines (`strict`: only
    the lines that name the rank, in an interleaved log)."""
    for n in f.nccl:
        if n.kind == "last_work" and (n.rank == r or (n.rank is None and not strict)):
            if n.last_completed is not None:
                row["completed"] = n.last_completed
            if n.last_enqueued is not None:
                row["enqueued"] = n.last_enqueued


def _merge(row: dict[str, Any], fail: dict[str, Any] | None, order: dict[str, int]) -> None:
    """Keep the rank's strongest failure: a cause before a consequence, then the earlier clock."""
    old = row["failure"]
    if fail and (old is None or (order[fail["state"]], fail["wall"] or float("inf"))
                 < (order[old["state"]], old["wall"] or float("inf"))):
        row["failure"] = fail


def _elastic_root(ev: Evidence) -> int | None:
    for f in ev.files:
        for k in f.kills:
            if k.kind == "child-failed-root" and k.rank is not None:
                return k.rank
    return None


def _desync(ev: Evidence) -> dict[str, Any] | None:
    """The laggards named by the desync report or the flight-recorder dumps."""
    for f in ev.files:
        for n in f.nccl:
            if n.kind in ("desync-missing", "desync-started") and n.ranks:
                how = ("never joined any collective" if n.kind == "desync-missing" else
                       f"joined but did not finish collective #{n.seq}")
                return {"source": "desync report", "lagging": list(n.ranks), "seq": n.seq, "how": how,
                        "location": location_of(n.file, n.line)}
    dumps = [fr for f in ev.files for fr in f.flight]
    if dumps:
        from finetune_doctor.readers.runlogs.flight import laggards

        return laggards(dumps)
    return None


def seq_behind(rows: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The ranks whose collective counter is strictly behind every other logged rank's: ``last enqueued`` (a
    rank that never enqueued the collective the others wait in), else ``last completed``, else the sequence
    number each rank's watchdog timed out on. None when every rank shows the same count, when fewer than two
    ranks print one, or when the behind ranks are half or more of those that print (then it is the others that
    ran ahead, not one that stopped)."""
    for key, what in (("enqueued", "last enqueued collective"), ("completed", "last completed collective"),
                      ("seq", "timed-out collective")):
        vals = {r: (row["failure"] or {}).get("seq") if key == "seq" else row[key] for r, row in rows.items()}
        vals = {r: v for r, v in vals.items() if isinstance(v, int)}
        if len(vals) < 2 or len(set(vals.values())) < 2:
            continue
        lo, hi = min(vals.values()), max(vals.values())
        behind = sorted(r for r, v in vals.items() if v == lo)
        if 2 * len(behind) >= len(vals) and not (len(behind) == 1 and hi - lo >= FAR_BEHIND):
            continue
        return {"ranks": behind, "value": lo, "others": hi, "gap": hi - lo, "what": what}
    return None


def _pick(cands: list[int], rows: dict[int, dict[str, Any]], lagging: set[int]) -> tuple[int, str]:
    """One of several causes: the one the desync report names, else the earliest step, else the earliest clock."""
    if len(cands) == 1:
        return cands[0], ""
    named = [r for r in cands if r in lagging]
    if named:
        return min(named), f"; of {len(cands)} ranks that raised, the one the desync report/flight recorder names"

    def key(r: int) -> tuple[float, float, int]:
        f = rows[r]["failure"]
        return (f["step"] if f["step"] is not None else float("inf"),
                f["wall"] if f["wall"] is not None else float("inf"), r)
    best = min(cands, key=key)
    f = rows[best]["failure"]
    by = ("the earliest step" if f["step"] is not None else
          "the earliest wall clock" if f["wall"] is not None else "the lowest rank (no step or clock to order them)")
    return best, f"; of {len(cands)} ranks that raised or were killed, {by}"


def unseen_ranks(rows: dict[int, dict[str, Any]], world: int | None) -> list[int]:
    """Ranks of the world that no file read names: below the highest rank that printed (certainly members), and
    up to `world` when the log or the config states it. Empty when they are half the world or more (a paste of a
    few ranks' lines says nothing about the ranks it left out)."""
    if not rows:
        return []
    size = max(world or 0, max(rows) + 1)
    missing = [r for r in range(min(size, 1 << 16)) if r not in rows]
    return missing if 2 * len(missing) < size else []


def _all_waited(rows: dict[int, dict[str, Any]], unseen: list[int], world: int | None,
                world_src: str | None) -> tuple[int, str] | None:
    """Step (3b) of the root: every rank that printed timed out (on one collective, when their sequence numbers
    agree) and some ranks of the world printed nothing. The timeouts are consequences; the silent ranks are the
    ones the others waited on (trial 7 c12, LLaMA-Factory #7396: ranks 0, 2, 3, 4 timed out on ALLREDUCE #1580,
    rank 1 never printed, and the doctor named rank 0 from the millisecond order of the prints)."""
    timed = sorted(r for r, row in rows.items() if row["state"] in ("timed out", "aborted"))
    if not unseen or not timed or len(timed) != len(rows):
        return None
    seqs = {(row["failure"] or {}).get("seq") for row in rows.values()}
    ops = {(row["failure"] or {}).get("op") for row in rows.values()} - {None}
    same = ""
    if len(seqs) == 1 and None not in seqs:
        same = f", all on the same collective ({next(iter(ops)) + ' ' if len(ops) == 1 else ''}#{next(iter(seqs))})"
    size = max(world or 0, max(rows) + 1)
    src = (f"ranks 0-{max(rows)} ({max(rows)} the highest the logs name)" if size == max(rows) + 1 else
           f"the world of {size} ({world_src})" if world_src else f"the world of {size}")
    return unseen[0], (f"causality: every rank that logged a failure ({_join(timed)}) only timed out{same}, which "
                       f"is what waiting on another rank looks like, and rank(s) {_join(unseen)} of {src} printed "
                       "nothing: stuck or dead before that collective (its own log says which); the order of the "
                       "timeout prints by clock is not evidence")


def root_of(rows: dict[int, dict[str, Any]], ev: Evidence, desync: dict[str, Any] | None,
            world: int | None = None,
            world_src: str | None = None) -> tuple[int | None, str | None, dict[str, Any] | None]:
    """(rank, how it was decided, seq-behind facts) — the module docstring gives the order; `world` (with
    `world_src`, where it was read) bounds the ranks that printed nothing."""
    failed = {r: row for r, row in rows.items() if row["failure"]}
    waited = sum(1 for row in failed.values() if row["state"] in ("timed out", "aborted"))
    lagging = set(desync["lagging"]) if desync and desync.get("lagging") else set()
    behind = seq_behind(rows)
    causes = sorted(r for r, row in failed.items() if row["state"] in CAUSE_STATES)
    if causes:
        r, extra = _pick(causes, rows, lagging)
        st = rows[r]["state"]
        how = (f"causality: rank {r} {st} ({rows[r]['failure']['kind']})"
               + (f" while {waited} rank(s) only timed out or were aborted waiting" if waited else "")
               + extra + " — a timeout is a consequence, whatever the clocks say")
        return r, how, behind
    if lagging:
        return min(lagging), f"the {desync['source']} names rank(s) {_join(sorted(lagging))}: they {desync['how']}", \
            behind
    if behind:
        return behind["ranks"][0], (f"rank(s) {_join(behind['ranks'])} stopped at {behind['what']} "
                                    f"#{behind['value']} while the others reached #{behind['others']}"), behind
    waited_on = _all_waited(rows, unseen_ranks(rows, world), world, world_src)
    if waited_on:
        return waited_on[0], waited_on[1], behind
    timed = [r for r, row in failed.items() if row["state"] == "timed out"]
    quiet = sorted(r for r, row in rows.items() if row["state"] in ("still running", "silent"))
    if timed and quiet and len(quiet) * 2 < len(rows):
        return quiet[0], (f"rank(s) {_join(quiet)} logged no failure while {len(timed)} rank(s) timed out: the one "
                          "the others waited on was stuck, not dead"), behind
    root = _elastic_root(ev)
    if root is not None:
        return root, "torchelastic's root cause (the first process to exit; nothing else names a cause)", behind
    walls = {r: row["failure"]["wall"] for r, row in failed.items() if row["failure"]["wall"] is not None}
    if walls:
        r = min(walls, key=lambda x: (walls[x], x))
        return r, ("the earliest failure line by wall clock (every rank only timed out: the clock is the weakest "
                   "evidence)"), behind
    return None, None, behind


def _join(xs: list[int], cap: int = 16) -> str:
    s = ", ".join(map(str, xs[:cap]))
    return s + (f" and {len(xs) - cap} more" if len(xs) > cap else "")


def _stragglers(rows: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    paced = {r: row["sec_per_step"] for r, row in rows.items() if row["sec_per_step"]}
    if len(paced) >= 3:
        for r, sec in paced.items():
            others = [v for k, v in paced.items() if k != r]
            med = statistics.median(others)
            if med > 0 and sec >= STRAGGLER_RATIO * med:
                out.append({"rank": r, "node": rows[r]["node"] or rows[r]["host"], "sec_per_step": sec,
                            "ratio": sec / med, "why": f"{sec:.2f} s/step, {sec / med:.2f}x the others' median"})
    steps = {r: row["last_step"] for r, row in rows.items() if row["last_step"] is not None}
    if len(steps) >= 2:
        top = max(steps.values())
        for r, s in steps.items():
            if top - s >= STRAGGLER_LAG and not any(x["rank"] == r for x in out):
                out.append({"rank": r, "node": rows[r]["node"] or rows[r]["host"], "sec_per_step": None,
                            "ratio": None, "why": f"reached step {s}, {top - s} behind the furthest rank"})
    return sorted(out, key=lambda x: x["rank"])


def _states(rows: dict[int, dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows.values():
        out[row["state"]] = out.get(row["state"], 0) + 1
    return out


def rank_facts(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.ranks`` (shape in facts/ev.py), or None when no file names its rank."""
    rows = _table(ev)
    if not rows:
        return None
    failed = {r: row for r, row in rows.items() if row["failure"]}
    desync = _desync(ev)
    world = (out.get("world") or {}).get("value")
    first, how, behind = root_of(rows, ev, desync, world if isinstance(world, int) else None,
                                 (out.get("world") or {}).get("source"))
    timed_out = sorted(r for r, row in failed.items() if row["state"] in ("timed out", "aborted") and r != first)
    lag = set(desync["lagging"]) if desync else set()
    waiting = [r for r in timed_out if r not in lag] if lag else timed_out
    nodes = sorted({row["node"] or row["host"] for row in rows.values() if row["node"] or row["host"]})
    first_d = None
    if first is not None:
        row = rows.get(first) or _new_row(first)
        fail = row["failure"] or {}
        unseen = first not in rows
        first_d = {"rank": first, "node": row["node"] or row["host"], "gpu": row["gpu"], "unseen": unseen,
                   "verb": "is the likely root" if unseen else "failed first",
                   "kind": fail.get("kind") or ("no line in the files read" if unseen else
                                                "no failure logged (stuck)" if row["state"] in
                                                ("still running", "silent") else None),
                   "state": row["state"], "step": fail.get("step", row["last_step"]), "phase": fail.get("phase"),
                   "op": fail.get("op"), "seq": fail.get("seq"), "how": how,
                   # a rank with no line is pointed at through the evidence: the first waiting rank's timeout
                   "location": fail.get("location") or (
                       next((rows[r]["failure"]["location"] for r in sorted(failed)), None) if unseen else None),
                   "cause": row["state"] in CAUSE_STATES}
    table = [{k: v for k, v in row.items() if k != "files"} | {"file": row["files"][0]}
             for _, row in sorted(rows.items())[:TABLE_CAP]]
    return {"count": len(rows), "nodes": nodes, "node_count": len(nodes), "table": table, "first_failed": first_d,
            "waiting": waiting[:64], "waiting_count": len(waiting), "stragglers": _stragglers(rows)[:64],
            "desync": desync, "failed_count": len(failed), "states": _states(rows), "seq_behind": behind}
