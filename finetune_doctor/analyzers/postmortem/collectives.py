"""A collective that timed out or failed: which one, on which rank, who set the timeout, the likely reason, and
(from analyzers/postmortem/ranks.py) the rank that failed first and the ranks that waited on it.

Every generation of ProcessGroupNCCL's watchdog is read (readers/runlogs/logpatterns.py): the "Watchdog caught collective
operation timeout: WorkNCCL(...)" line, the "[PG n Rank r] Timeout at NCCL work: W, last enqueued / last
completed NCCL work" desync line (alone when a paste was cut), "Some NCCL operations have failed or timed out",
the ``WorkNCCL::checkTimeout`` frames and the heartbeat monitor. ``Timeout(ms)`` tells who set the timeout:
1800000 is transformers' ``ddp_timeout`` default, 600000 torch's own default (the framework most likely passed none).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.analyzers.postmortem.ranks import FAR_BEHIND
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import NcclRecord

_MAIN_ORDER = ("timeout", "last_work", "heartbeat", "failed", "desync-missing", "desync-started")
"""The records that mean a collective timed out or was torn down; NCCL's own errors ("unhandled system error",
a WARN line) are not timeouts and go to `nccl_error_facts`."""

NCCL_MEANINGS = {
    "unhandled system error": ("a system call NCCL needs failed — almost always the network between nodes: NCCL "
                               "picked an interface the peers cannot reach (docker/virtual bridges), a firewall, "
                               "or a peer that is not up; set NCCL_SOCKET_IFNAME to the interface the nodes share "
                               "(and NCCL_IB_DISABLE=1 without InfiniBand) and rerun with NCCL_DEBUG=INFO"),
    "remote process exited or there was a network error": (
        "a peer process died or the link dropped: the cause is on the other rank or node (its own log), or the "
        "network"),
    "unhandled cuda error": ("a CUDA call inside NCCL failed (often out of memory for NCCL's buffers, or a driver "
                             "problem); NCCL_DEBUG=INFO names the call"),
    "internal error": "NCCL hit an internal error: NCCL_DEBUG=INFO shows where; mismatched NCCL versions across "
                      "nodes are a common cause",
    "invalid usage": "NCCL was called inconsistently across ranks (different collectives, sizes or orders)",
    "invalid argument": "NCCL was given an invalid argument (a device or communicator mismatch)",
}
NCCL_NAMES = {"ncclSystemError": "unhandled system error", "ncclRemoteError":
              "remote process exited or there was a network error", "ncclUnhandledCudaError": "unhandled cuda error",
              "ncclInternalError": "internal error", "ncclInvalidUsage": "invalid usage",
              "ncclInvalidArgument": "invalid argument"}


def nccl_error_facts(recs: list[NcclRecord]) -> dict[str, Any] | None:
    """``ev.nccl_error``: the first NCCL error that is not a timeout — ncclGetErrorString's text as torch prints
    it ("NCCL error in: ProcessGroupNCCL.cpp:N, unhandled system error", nccl src/init.cc ``ncclGetErrorString``)
    or the ncclResult name — with what it means and the NCCL WARN lines beside it. None without one (WARN lines
    alone are not an error: NCCL warns about optional plugins it did not find)."""
    errs = [r for r in recs if r.kind == "error" and r.op and not r.op.startswith("WARN ")]
    if not errs:
        return None
    e = errs[0]
    desc = NCCL_NAMES.get(e.op or "", e.op or "")
    warns = [r.op[5:] for r in recs if r.kind == "error" and r.op and r.op.startswith("WARN ")][:3]
    return {"desc": desc, "meaning": NCCL_MEANINGS.get(desc, "NCCL failed; NCCL_DEBUG=INFO shows the failing call"),
            "rank": e.rank, "count": len(errs), "warns": warns, "step": e.step,
            "location": location_of(e.file, e.line)}


def _main(recs: list[NcclRecord]) -> NcclRecord | None:
    for kind in _MAIN_ORDER:
        got = [r for r in recs if r.kind == kind and (kind != "last_work" or r.op == "timeout")]
        if got:
            return min(got, key=lambda r: (r.wall if r.wall is not None else float("inf"), r.file, r.line))
    return None


_TRAINER_NAMES = {"nemo": "NeMo (through Lightning)", "lightning": "Lightning"}


def _timeout_text(tmo: int | None, trainer: str | None) -> str | None:
    """Who set the timeout. 1800 s is transformers' ``ddp_timeout`` default (training_args.py) and also torch's
    ``default_pg_timeout`` (torch/distributed/constants.py, 30 min) that Lightning's DDPStrategy and DeepSpeed's
    ``init_distributed`` pass by default: the HF setting is named only for a run an HF-based trainer wrote."""
    hf = trainer == "transformers"
    if tmo == 1800000:
        return ("1800 s: transformers' default ddp_timeout" if hf else
                "1800 s: torch.distributed's default_pg_timeout (30 min)"
                + (f", which {_TRAINER_NAMES.get(trainer, trainer)} passes by default" if trainer else ""))
    if tmo == 600000:
        return "600 s: torch's default NCCL timeout (so the framework most likely passed none)"
    if tmo:
        return f"{tmo / 1000:.0f} s as configured" + (" (ddp_timeout)" if hf else "")
    return None


def late_watchdog(main: NcclRecord, tmo: int | None) -> str | None:
    """A watchdog that fired far later than its timeout (``ran for`` ≥ 3× ``Timeout(ms)``): its own thread was
    held up — the process stalled on the host (swapping, a blocked CUDA driver call, a stuck dataloader worker
    holding the GIL), so the timeout says little about the collective itself (WorkNCCL::checkTimeout checks
    only when the watchdog loop runs, ProcessGroupNCCL.cpp)."""
    if main.ran_ms and tmo and main.ran_ms >= 3 * tmo:
        return (f"the watchdog fired after {main.ran_ms / 1000:.0f} s, {main.ran_ms / tmo:.0f}× its "
                f"{tmo / 1000:.0f} s timeout: the process itself was stalled (host swapping, a blocked driver call, "
                "a frozen dataloader), not only the collective")
    return None


def _likely(op: str | None, early: bool, cx: RunContext, out: dict[str, Any]) -> str:
    zs = cx.zero_stage()
    if out.get("grad_const") or out.get("loss_zero") or out.get("nan"):
        return ("the ranks diverged after the non-finite/degenerate steps logged before it (one rank took a "
                "different code path or died), so the others waited in the collective")
    if early and op in ("BROADCAST", "ALLREDUCE", None):
        return ("a rank never reached the first collective: rank 0 was still preprocessing the dataset or "
                "loading the model when the others timed out (raise ddp_timeout, or preprocess once beforehand)")
    if op and "ALLGATHER" in op and zs == 3:
        return ("ZeRO-3 parameter all-gather hang: the ranks ran different numbers of forward passes (generate "
                "with different lengths, a rank-0-only evaluation or save, an uneven last batch)")
    if op in ("ALLREDUCE", "REDUCE_SCATTER", "_REDUCE_SCATTER_BASE"):
        return ("gradient synchronisation waited on a slow or stuck rank (data loading, a rank-0-only save or "
                "evaluation, swapping host memory, or a rank that died)")
    return "one rank stopped participating in collectives (stuck, slow, or dead)"


def _behind_in_one_file(recs: list[NcclRecord]) -> dict[str, Any] | None:
    """The seq-behind test of analyzers/postmortem/ranks.py over the "last enqueued / last completed" lines of
    one pasted log (several ranks' lines in one file, so no per-rank table)."""
    from finetune_doctor.analyzers.postmortem.ranks import seq_behind

    rows: dict[int, dict[str, Any]] = {}
    for r in recs:
        if r.rank is None:
            continue
        row = rows.setdefault(r.rank, {"enqueued": None, "completed": None, "failure": None})
        if r.kind == "last_work":
            row["enqueued"], row["completed"] = r.last_enqueued, r.last_completed
        elif r.kind == "timeout" and r.seq is not None:
            # the furthest collective this rank's watchdog timed out on (several may be pending)
            row["failure"] = {"seq": max(r.seq, (row["failure"] or {}).get("seq") or 0)}
    return seq_behind(rows) if len(rows) >= 2 else None


def nccl_facts(recs: list[NcclRecord], cx: RunContext, out: dict[str, Any],
               ranks: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``ev.nccl`` from the NCCL records of every file and ``ev.ranks``; None without a timeout or failure."""
    main = _main(recs)
    if main is None:
        return None
    seq = main.seq if main.seq is not None else main.work
    op = main.op if main.kind == "timeout" else None
    if op is None:   # the WorkNCCL line of the same rank and sequence number names the collective
        twin = next((r for r in recs if r.kind == "timeout" and r.rank == main.rank and r.op), None)
        if twin is not None:
            op, seq = twin.op, twin.seq if twin.seq is not None else seq
    timeouts = [r for r in recs if r.kind == "timeout" or (r.kind == "last_work" and r.op == "timeout")]
    tmo = next((r.timeout_ms for r in recs if r.timeout_ms), None)
    rk = ranks or {}
    behind = rk.get("seq_behind") or _behind_in_one_file(recs)
    laggards: list[int] = list(behind["ranks"]) if behind else []
    early = (seq is not None and seq <= 2) or (seq is None and main.step is None and not out["steps"]["last"])
    likely = _likely(op, early, cx, out)
    first = rk.get("first_failed")
    desync = rk.get("desync")
    if desync and desync.get("lagging"):
        likely += (f"; the {desync['source']} names rank(s) {', '.join(map(str, desync['lagging'][:16]))}: they "
                   f"{desync['how']}")
    elif behind:
        likely += (f"; rank(s) {', '.join(map(str, laggards[:16]))} stopped at {behind['what']} #{behind['value']} "
                   f"while the others reached #{behind['others']}")
        if behind["gap"] >= FAR_BEHIND:
            likely += (f" — {behind['gap']} collectives behind: it left the sequence long before the timeout (a "
                       "collective on a rank-dependent code path, uneven batches or a rank-0-only evaluation)")
    late = late_watchdog(main, tmo)
    if late:
        likely += "; " + late
    if first and first.get("kind") and first.get("cause"):
        where = f" on {first['node']}" if first.get("node") else ""
        likely += f"; rank {first['rank']}{where} failed first ({first['kind']}), the others waited on it"
    elif first and first.get("unseen"):
        likely += (f"; rank {first['rank']} printed nothing while every rank that did timed out: the others "
                   "waited on it")
    elif first and first.get("state") in ("still running", "silent"):
        likely += f"; rank {first['rank']} logged no failure: it was stuck, and the others waited on it"
    what = (f"{op}" + (f" (SeqNum {seq})" if seq is not None else "")) if op else \
        (f"collective #{seq}" if seq is not None else "a collective")
    trainer = cx.log.get("trainer") or ("transformers" if cx.cfg else None)
    d = {"rank": main.rank, "op": op, "seq": seq, "timeout_ms": tmo, "timeout_text": _timeout_text(tmo, trainer),
         "ran_ms": main.ran_ms, "numel_in": main.numel_in, "numel_out": main.numel_out, "step": main.step,
         "kind": main.kind, "likely": likely, "stragglers": laggards, "pg": main.pg, "pg_desc": main.pg_desc,
         "trainer": trainer, "late": late,
         "ddp_timeout_fix": bool(early and trainer == "transformers" and tmo is not None and tmo <= 1800000
                                and "NCCL" in ((first or {}).get("kind") or "NCCL")),
         "count": len(timeouts), "ranks": sorted({r.rank for r in timeouts if r.rank is not None}),
         "first_failed": first, "waiting": rk.get("waiting") or [], "what": what,
         "location": location_of(main.file, main.line)}
    d["timeline_text"] = (f"NCCL watchdog timeout on rank {main.rank if main.rank is not None else '?'}: {what}"
                          + (f" after {main.ran_ms / 1000:.0f} s" if main.ran_ms else ""))
    return d
