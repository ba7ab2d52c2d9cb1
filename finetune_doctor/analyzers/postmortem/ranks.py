"""The ranks and nodes of a distributed run, joined from their own files: who failed first, who was waiting on it,
who was slow, and where each one sits (node, GPU).

Each file carries its writer in ``FileEvidence.origin`` (the path: ``node1/rank3.log``, torchelastic's
``attempt_0/3/error.json``, a flight-recorder dump's rank suffix; or its lines: ``[rank3]:`` prefixes, LLaMA-
Factory's "Process rank: 3, ... device: cuda:3"), and its pace and failure time in ``FileEvidence.timing``.

* **First failure.** The rank whose first failure line (an OOM, a CUDA error, an exception, an NCCL timeout)
  carries the earliest wall clock; without clocks, torchelastic's "Root Cause (first observed failure)" (its
  error files hold the timestamp, errors/__init__.py:152-158 of torch 2.13); without that, a rank with a
  failure other than a collective timeout, since a timeout is what the others see while they wait.
* **Waiting ranks.** Ranks whose watchdog timed out on a collective, minus the first failure; the desync
  report of TORCH_NCCL_DESYNC_DEBUG (TraceUtils.h ``analyzeMissingRanks``/``analyzeLaggingRanks``) or the
  flight-recorder dumps name the laggards directly and win over this inference. With only "last enqueued /
  last completed NCCL work" lines, the ranks that completed the fewest collectives are the laggards.
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


def _rank_of(f: FileEvidence) -> int | None:
    r = f.origin.get("rank")
    return r if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 20 else None


def _first_failure(f: FileEvidence) -> dict[str, Any] | None:
    """The first failure record of one file: (line, kind, is_timeout)."""
    cands: list[tuple[int, str, bool]] = []
    for o in f.ooms[:1]:
        cands.append((o.line, "CUDA out of memory", False))
    for d in f.device_errors[:1]:
        cands.append((d.line, f"CUDA error: {d.status}", False))
    for n in f.nccl:
        if n.kind in ("timeout", "last_work", "failed", "heartbeat"):
            cands.append((n.line, "NCCL collective timeout", True))
            break
    for n in f.notices:
        if n.kind == "exception":
            cands.append((n.line, (n.value or {}).get("cls") or "exception", False))
            break
    for k in f.kills:
        if k.kind in ("kernel-oom", "cgroup-oom", "slurm-oom", "signal", "shell-killed"):
            cands.append((k.line, f"killed ({k.signal or k.kind})", False))
            break
    if not cands:
        return None
    line, kind, timeout = min(cands)
    return {"line": line, "kind": kind, "timeout": timeout, "wall": f.timing.get("fail_wall"),
            "location": location_of(f.read.path, line)}


def _table(ev: Evidence) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for f in ev.files:
        r = _rank_of(f)
        if r is None:
            continue
        row = rows.setdefault(r, {"rank": r, "node": None, "host": None, "gpu": None, "local_rank": None,
                                  "files": [], "last_step": None, "sec_per_step": None, "failure": None})
        row["files"].append(f.read.path)
        for key in ("node", "host", "gpu", "local_rank"):
            if row[key] is None and f.origin.get(key) is not None:
                row[key] = f.origin[key]
        if f.last_step is not None:
            row["last_step"] = max(row["last_step"] or 0, f.last_step)
        if f.timing.get("sec_per_step"):
            row["sec_per_step"] = f.timing["sec_per_step"]
        fail = _first_failure(f)
        old = row["failure"]
        if fail and (old is None or (fail["wall"] or float("inf")) < (old["wall"] or float("inf"))):
            row["failure"] = fail
    return rows


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


def rank_facts(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.ranks`` (shape in facts/ev.py), or None when no file names its rank."""
    rows = _table(ev)
    if not rows:
        return None
    failed = {r: row for r, row in rows.items() if row["failure"]}
    first = None
    how = None
    walls = {r: row["failure"]["wall"] for r, row in failed.items() if row["failure"]["wall"] is not None}
    desync = _desync(ev)
    if walls:
        first, how = min(walls, key=lambda r: (walls[r], r)), "earliest failure line by wall clock"
    elif _elastic_root(ev) is not None:
        first, how = _elastic_root(ev), "torchelastic's root cause (first observed failure)"
    elif desync and desync["lagging"]:
        first, how = min(desync["lagging"]), desync["source"]
    else:
        real = [r for r, row in failed.items() if not row["failure"]["timeout"]]
        if real:
            first, how = min(real, key=lambda r: (rows[r]["failure"]["line"], r)), "the only failure that is not a " \
                "collective timeout"
    timed_out = sorted(r for r, row in failed.items() if row["failure"]["timeout"] and r != first)
    lag = set(desync["lagging"]) if desync else set()
    waiting = [r for r in timed_out if r not in lag] if lag else timed_out
    nodes = sorted({row["node"] or row["host"] for row in rows.values() if row["node"] or row["host"]})
    first_d = None
    if first is not None:
        row = rows.get(first) or {"node": None, "host": None, "gpu": None, "failure": None}
        fail = row["failure"] or {}
        first_d = {"rank": first, "node": row["node"] or row["host"], "gpu": row["gpu"], "kind": fail.get("kind"),
                   "how": how, "location": fail.get("location")}
    table = [{k: v for k, v in row.items() if k != "files"} | {"file": row["files"][0]}
             for _, row in sorted(rows.items())[:TABLE_CAP]]
    return {"count": len(rows), "nodes": nodes, "node_count": len(nodes), "table": table, "first_failed": first_d,
            "waiting": waiting[:64], "waiting_count": len(waiting), "stragglers": _stragglers(rows)[:64],
            "desync": desync, "failed_count": len(failed)}
