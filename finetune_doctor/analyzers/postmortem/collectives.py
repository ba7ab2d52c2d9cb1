"""A collective that timed out or failed: which one, on which rank, who set the timeout, the likely reason, and
(from analyzers/postmortem/ranks.py) the rank that failed first and the ranks that waited on it.

Every generation of ProcessGroupNCCL's watchdog is read (readers/runlogs/logpatterns.py): the "Watchdog caught collective
operation timeout: WorkNCCL(...)" line, the "[PG n Rank r] Timeout at NCCL work: W, last enqueued / last
completed NCCL work" desync line (alone when a paste was cut), "Some NCCL operations have failed or timed out",
the ``WorkNCCL::checkTimeout`` frames and the heartbeat monitor. ``Timeout(ms)`` tells who set the timeout:
1800000 is transformers' ``ddp_timeout`` default, 600000 torch's own default when the framework passed none.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import NcclRecord

_MAIN_ORDER = ("timeout", "last_work", "heartbeat", "failed", "desync-missing", "desync-started", "error")


def _main(recs: list[NcclRecord]) -> NcclRecord | None:
    for kind in _MAIN_ORDER:
        got = [r for r in recs if r.kind == kind and (kind != "last_work" or r.op == "timeout")]
        if got:
            return min(got, key=lambda r: (r.wall if r.wall is not None else float("inf"), r.file, r.line))
    return None


def _timeout_text(tmo: int | None) -> str | None:
    if tmo == 1800000:
        return "1800 s: transformers' default ddp_timeout"
    if tmo == 600000:
        return "600 s: torch's default NCCL timeout (the framework passed none)"
    if tmo:
        return f"{tmo / 1000:.0f} s as configured (ddp_timeout)"
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
    last = [r for r in recs if r.kind == "last_work" and r.last_completed is not None]
    laggards: list[int] = []
    if last:
        lo = min(r.last_completed for r in last if r.last_completed is not None)
        laggards = sorted({r.rank for r in last if r.last_completed == lo and r.rank is not None})
    early = (seq is not None and seq <= 2) or (seq is None and main.step is None and not out["steps"]["last"])
    likely = _likely(op, early, cx, out)
    rk = ranks or {}
    first = rk.get("first_failed")
    desync = rk.get("desync")
    if desync and desync.get("lagging"):
        likely += (f"; the {desync['source']} names rank(s) {', '.join(map(str, desync['lagging'][:16]))}: they "
                   f"{desync['how']}")
    elif laggards and len({r.rank for r in last}) > 1:
        likely += f"; rank(s) {', '.join(map(str, laggards[:16]))} completed the fewest collectives"
    if first and first.get("kind") and "NCCL" not in first["kind"]:
        where = f" on {first['node']}" if first.get("node") else ""
        likely += f"; rank {first['rank']}{where} failed first ({first['kind']}), the others waited on it"
    what = (f"{op}" + (f" (SeqNum {seq})" if seq is not None else "")) if op else \
        (f"collective #{seq}" if seq is not None else "a collective")
    d = {"rank": main.rank, "op": op, "seq": seq, "timeout_ms": tmo, "timeout_text": _timeout_text(tmo),
         "ran_ms": main.ran_ms, "numel_in": main.numel_in, "numel_out": main.numel_out, "step": main.step,
         "kind": main.kind, "likely": likely, "stragglers": laggards, "pg": main.pg, "pg_desc": main.pg_desc,
         "ddp_timeout_fix": bool(early and tmo is not None and tmo <= 1800000
                                and "NCCL" in ((first or {}).get("kind") or "NCCL")),
         "count": len(timeouts), "ranks": sorted({r.rank for r in timeouts if r.rank is not None}),
         "first_failed": first, "waiting": rk.get("waiting") or [], "what": what,
         "location": location_of(main.file, main.line)}
    d["timeline_text"] = (f"NCCL watchdog timeout on rank {main.rank if main.rank is not None else '?'}: {what}"
                          + (f" after {main.ran_ms / 1000:.0f} s" if main.ran_ms else ""))
    return d
