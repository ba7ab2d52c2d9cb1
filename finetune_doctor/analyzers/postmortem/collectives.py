"""A collective that timed out or failed: which one, on which rank, who set the timeout, the likely reason, and
(from analyzers/postmortem/ranks.py) the rank that failed first and the ranks that waited on it.

Every generation of ProcessGroupNCCL's watchdog is read (readers/runlogs/logpatterns.py): the "Watchdog caught collective
operation timeout: WorkNCCL(...)" line, the "[PG n Rank r] Timeout at NCCL work: W, last enqueued / last
completed NCCL work" desync line (alone when a paste was cut), "Some NCCL operations have failed or timed out",
the ``WorkNCCL::checkTimeout`` frames and the heartbeat monitor. ``Timeout(ms)`` tells who set the timeout:
1800000 is transformers' ``ddp_timeout`` default, 600000 torch's own default (the framework most likely passed none).
"""

from __future__ import annotations

import re

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.analyzers.postmortem.ranks import FAR_BEHIND
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.analyzers.postmortem.kindwords import moe_not_zero3_lead
from finetune_doctor.analyzers.postmortem.saidstack import moe_zero3_said
from finetune_doctor.evidence import NcclRecord
from finetune_doctor.numbers import parse_version
from finetune_doctor.readers.runlogs.logpatterns import NCCL_WARN_FAILURE

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


# NCCL's communicator set-up (src/init.cc): "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx",
# after which the call returns ncclInvalidUsage ("invalid usage" in torch's NCCL error line)
DUPLICATE_GPU = re.compile(r"Duplicate GPU detected : rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device "
                           r"(?P<dev>[0-9a-fA-Fx]+)")


def _duplicate_gpu_words(m: re.Match) -> str:
    """The launch mistake NCCL's duplicate-GPU check names: two ranks on one card."""
    return (f"two ranks were given the same GPU (NCCL: ranks {m.group('a')} and {m.group('b')} both on the card at "
            f"bus id {m.group('dev')}): more processes per node than visible GPUs (--nproc_per_node above the "
            "node's cards), CUDA_VISIBLE_DEVICES leaving every rank one card, or a script that does not pick its "
            "device from LOCAL_RANK; launch one process per visible GPU")


def _warn_failure(text: str) -> tuple[str, str] | None:
    """(desc, meaning) of an NCCL WARN line that is a failure in itself (logpatterns.NCCL_WARN_FAILURE: a socket
    that could not connect or was closed by the peer, an InfiniBand completion error, no interface); None for
    the WARN lines that are advice (a plugin or library not found). The address says which interface NCCL chose:
    an IPv6 link-local address (fe80::, scope "%dev") or a docker bridge (172.17.x.x) is one the other node
    cannot reach (NCCL picks interfaces in the order of src/misc/socket.cc ``ncclFindInterfaces``: ib*, then any
    but docker/lo/virbr)."""
    m = NCCL_WARN_FAILURE.search(text)
    if m is None:
        return None
    sysmeaning = NCCL_MEANINGS["unhandled system error"]
    if m.group("addr") or m.group("err2"):
        addr = m.group("addr")
        desc = (f"could not connect to {addr}: {m.group('err').strip()}" if addr else
                f"connect() {'refused' if m.group('err2') == 'retries' else 'timed out'} {m.group('n')} times: "
                "the peer never accepted (not listening: it died or has not started)")
        hint = ""
        if addr and addr.lower().startswith("fe80:"):
            hint = ("; the address is IPv6 link-local (fe80::), which is only valid on one link: NCCL chose an "
                    "interface the peer cannot route to (NCCL_SOCKET_IFNAME=<the shared interface>, or "
                    "NCCL_SOCKET_FAMILY=AF_INET)")
        elif addr and addr.startswith("172.17."):
            hint = "; 172.17.x.x is docker's default bridge, private to each host (NCCL_SOCKET_IFNAME)"
        return desc, "the socket transport could not reach a peer: " + sysmeaning + hint
    if m.group("closed"):
        return ("connection closed by remote peer" + (f" {m.group('peer')}" if m.group("peer") else ""),
                NCCL_MEANINGS["remote process exited or there was a network error"])
    if m.group("shm"):
        what = (f"could not create shared-memory segment {m.group('seg')}"
                + (f" ({int(m.group('shmsize')) / 2**20:.1f} MiB)" if m.group("shmsize") else "")
                if m.group("seg") else f"could not size a shared-memory segment: {m.group('shmerr').strip()}")
        return (what, "the ranks on this node exchange data through files in /dev/shm, and /dev/shm is too small "
                "or full: a container's default is 64 MB (docker run --shm-size=... or --ipc=host; Kubernetes: an "
                "emptyDir with medium Memory at /dev/shm); NCCL_SHM_DISABLE=1 avoids it at some speed")
    if m.group("ib"):
        return (f"InfiniBand completion error {m.group('ib')} from peer {m.group('ibpeer')}",
                "a work request on the InfiniBand link failed (status 12 is a retry-count timeout: the link or the "
                "peer stopped answering): check the link (ibstat, the switch) and the peer's own log")
    return (m.group("noif"), "NCCL found no network interface to use: NCCL_SOCKET_IFNAME names one that does not "
            "exist on this node, or the node has no usable one")


def nccl_error_facts(recs: list[NcclRecord]) -> dict[str, Any] | None:
    """``ev.nccl_error``: the first NCCL error that is not a timeout — ncclGetErrorString's text as torch prints
    it ("NCCL error in: ProcessGroupNCCL.cpp:N, unhandled system error", nccl src/init.cc ``ncclGetErrorString``)
    or the ncclResult name — with what it means and the NCCL WARN lines beside it. Without one, the first WARN
    line that is a failure in itself (`_warn_failure`: a socket connect that failed, a peer that closed the
    connection) is the error; other WARN lines alone are not (NCCL warns about optional plugins it did not
    find). None without either."""
    errs = [r for r in recs if r.kind == "error" and r.op and not r.op.startswith("WARN ")]
    warns = [r.op[5:] for r in recs if r.kind == "error" and r.op and r.op.startswith("WARN ")]
    failing = [(r, _warn_failure(r.op[5:])) for r in recs if r.kind == "error" and r.op and r.op.startswith("WARN ")]
    failing = [(r, w) for r, w in failing if w is not None]
    shown = ([r.op[5:] for r, _ in failing] + [w for w in warns if w not in {r.op[5:] for r, _ in failing}])[:3]
    if errs:
        e = errs[0]
        desc = NCCL_NAMES.get(e.op or "", e.op or "")
        meaning = NCCL_MEANINGS.get(desc, "NCCL failed; NCCL_DEBUG=INFO shows the failing call")
        if failing and desc == "unhandled system error":
            # a system error is what NCCL returns after a failing WARN (a socket, /dev/shm): the WARN says which
            w, (wdesc, wmeaning) = failing[0]
            meaning = f"NCCL warned just before that it {wdesc}: {wmeaning}"
            shown = [x for x in shown if x != w.op[5:]]
    elif failing:
        e, (desc, meaning) = failing[0]
        shown = [w for w in shown if w != e.op[5:]]
    else:
        return None
    dup = next((DUPLICATE_GPU.search(w) for w in warns if "Duplicate GPU" in w), None)
    if dup:
        meaning = _duplicate_gpu_words(dup)
    return {"desc": desc, "meaning": meaning, "rank": e.rank, "count": len(errs) or len(failing), "warns": shown,
            "step": e.step, "location": location_of(e.file, e.line)}


def _main(recs: list[NcclRecord]) -> NcclRecord | None:
    for kind in _MAIN_ORDER:
        got = [r for r in recs if r.kind == kind and (kind != "last_work" or r.op == "timeout")]
        if got:
            return min(got, key=lambda r: (r.wall if r.wall is not None else float("inf"), r.file, r.line))
    return None


_TRAINER_NAMES = {"nemo": "NeMo (through Lightning)", "lightning": "Lightning"}


def _timeout_text(tmo: int | None, trainer: str | None, configured: Any = None) -> str | None:
    """Who set the timeout. 1800 s is transformers' ``ddp_timeout`` default (training_args.py) and also torch's
    ``default_pg_timeout`` (torch/distributed/constants.py, 30 min) that Lightning's DDPStrategy and DeepSpeed's
    ``init_distributed`` pass by default: the HF setting is named only for a run an HF-based trainer wrote.
    `configured`: the config's own ``ddp_timeout`` (seconds; None when the file does not set it): a timeout equal
    to it is the user's setting, never called a default (trial 12: "transformers' default ddp_timeout" was said of
    a config with ``ddp_timeout: 1800``)."""
    hf = trainer == "transformers"
    try:
        mine = int(float(configured)) if configured is not None else None
    except (TypeError, ValueError):
        mine = None
    if tmo and mine is not None and mine * 1000 == tmo:
        return f"{mine} s: your ddp_timeout (the config sets ddp_timeout: {configured})"
    if tmo == 1800000:
        return ("1800 s: transformers' default ddp_timeout" if hf else
                "1800 s: torch.distributed's default_pg_timeout (30 min)"
                + (f", which {_TRAINER_NAMES.get(trainer, trainer)} passes by default" if trainer else ""))
    if tmo and mine is not None:
        # the config sets another value: the process group was not made with it (trial 18, LlamaFactory#5450:
        # ddp_timeout: 180000000 in the config, Timeout(ms)=600000 in the watchdog line)
        return (f"{tmo / 1000:.0f} s, not the {mine} s your config's ddp_timeout sets: the process group was "
                "made without it (created before the Trainer's arguments were read, or the run used another "
                "config)")
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


# the first transformers release whose MoE blocks no longer skip experts that receive no token (LlamaFactory#9628)
MOE_HANG_FIXED = (5, 0, 0)


def _moe_hang(cx: RunContext, out: dict[str, Any]) -> str | None:
    """The known ZeRO-3 hang of MoE models on transformers < 5.0.0, when the inputs state that transformers
    (--transformers / --env over the logs' own versions) and the model is a mixture of experts: LlamaFactory#9628
    (reproduced on Qwen3-30B-A3B, Qwen3-Omni, GLM-4.6; #9222, #9474, #9609) found the backward pass hanging when
    some experts get no token on a rank, and transformers 5.0.0 removing it. transformers 4.x's sparse-MoE blocks
    loop over the experts and skip those with no routed token, so that rank never gathers their ZeRO-3 partitions
    nor reduces their gradients while the others wait; 5.0.0 computes all experts as one module of packed
    parameters (transformers PR #41580, the unified MoE experts). None when any of this is not stated."""
    if not (cx.model.get("is_moe") or (cx.model.get("num_experts") or 0) > 1):
        return None
    got = cx.given_versions.get("transformers") or (
        ((out.get("stack") or {}).get("transformers") or {}).get("version"),
        ((out.get("stack") or {}).get("transformers") or {}).get("source"))
    ver = parse_version(got[0]) if got and got[0] else None
    if ver is None or tuple(ver) >= MOE_HANG_FIXED:
        return None
    return (f"the known ZeRO-3 hang of mixture-of-experts models on transformers < 5.0.0 (this run's is {got[0]}, "
            f"{got[1]}): transformers 4.x skips an expert that no token of the batch reaches, so under ZeRO-3 the "
            "ranks disagree on the collectives of the backward pass and the others wait "
            "(LlamaFactory#9628 reproduced it on Qwen3-30B-A3B, Qwen3-Omni and GLM-4.6; transformers 5.0.0, whose "
            "experts are one module of packed parameters, PR #41580, removed it): upgrade transformers to >= 5.0.0 "
            "with a LLaMA-Factory that admits it, or train without ZeRO-3")


def _likely(op: str | None, early: bool, cx: RunContext, out: dict[str, Any]) -> str:
    zs = cx.zero_stage()
    if out.get("grad_const") or out.get("loss_zero") or out.get("nan"):
        return ("the ranks diverged after the non-finite/degenerate steps logged before it (one rank took a "
                "different code path or died), so the others waited in the collective")
    if early and op in ("BROADCAST", "ALLREDUCE", None):
        return ("a rank never reached the first collective: rank 0 was still preprocessing the dataset or "
                "loading the model when the others timed out (raise ddp_timeout, or preprocess once beforehand)")
    moe = _moe_hang(cx, out) if zs == 3 and not early else None
    if moe:
        return moe
    # no config, but the report's own words name ZeRO-3 and an MoE model (saidstack.py): that hang's kind
    setup = cx.stated.get("setup") or {}
    said = moe_zero3_said(setup) if zs in (3, None) and not early and not setup.get("not_zero3") else None
    # ... or ZeRO-1/2 / DDP with an MoE model: the experts' gradients, not ZeRO-3's gathers (kindwords.py)
    said = said or (moe_not_zero3_lead(setup) if zs in (0, 1, 2, None) and not early else None)
    if said:
        return said
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
    if main.kind == "heartbeat":
        likely, late = heartbeat_likely(main, cx), None
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
    d = {"rank": main.rank, "op": op, "seq": seq, "timeout_ms": tmo, "timeout_text": _timeout_text(tmo, trainer, cx.cfg.get("ddp_timeout")),
         "ran_ms": main.ran_ms, "numel_in": main.numel_in, "numel_out": main.numel_out, "step": main.step,
         "kind": main.kind, "likely": likely, "stragglers": laggards, "pg": main.pg, "pg_desc": main.pg_desc,
         "trainer": trainer, "late": late,
         "ddp_timeout_fix": bool(early and trainer == "transformers" and tmo is not None and tmo <= 1800000
                                and "NCCL" in ((first or {}).get("kind") or "NCCL") and main.kind != "heartbeat"),
         "count": len(timeouts), "ranks": sorted({r.rank for r in timeouts if r.rank is not None}),
         "first_failed": first, "waiting": rk.get("waiting") or [], "what": what,
         "location": location_of(main.file, main.line)}
    d["on_rank"] = on_rank(main.rank, cx)
    d["timeline_text"] = (f"NCCL watchdog timeout {d['on_rank']}: {what}"
                          + (f" after {main.ran_ms / 1000:.0f} s" if main.ran_ms else ""))
    # the watchdog's exception stack alone (readers/runlogs/logfailures.py op "watchdog-stack"): the message that
    # says timeout or error is cut, so neither is stated (trial 14)
    d["cut"] = main.kind == "failed" and main.op == "watchdog-stack" and not timeouts
    if d["cut"]:
        d["timeline_text"] = (f"NCCL watchdog ended the process {d['on_rank']}"
                              ": its exception stack is there, the message saying timeout or error is cut")
    if main.kind == "heartbeat":
        d["what"] = "ProcessGroupNCCL's watchdog thread"
        d["timeline_text"] = (f"NCCL heartbeat monitor {d['on_rank']}: the "
                              "watchdog made no progress" + (f" for {main.ran_ms / 1000:.0f} s" if main.ran_ms else ""))
    return d


def on_rank(rank: int | None, cx: RunContext) -> str:
    """``ev.nccl.on_rank``: "on rank R", or, when no line printed the rank, "(the rank is not printed, device D)"
    with the one CUDA device NCCL's own lines name (readers/runlogs/logfailures.py NCCL_DEVICE), else "(the rank
    is not printed)": a device index is no rank (issue #25: "rank ?" was said)."""
    if rank is not None:
        return f"on rank {rank}"
    dev = cx.log.get("nccl_device") if not cx.log.get("nccl_devices_mixed") else None
    return "(the rank is not printed" + (f", device {dev})" if dev is not None else ")")


def heartbeat_likely(main: NcclRecord, cx: RunContext) -> str:
    """What the heartbeat monitor's abort means ("ProcessGroupNCCL's watchdog got stuck for N seconds without making
    progress in monitoring enqueued collectives"): not a collective past its timeout (that is the watchdog's own
    WorkNCCL::checkTimeout, and ddp_timeout sets it) but the watchdog thread itself not looping for
    TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC seconds (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, the
    HeartbeatMonitor constructor, L1780-1781 in torch 2.8: ``getCvarInt(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, 60 * 8)``;
    600 s in the 2.3-2.4 releases that introduced it, log_patterns.md §6). Its knobs are that variable and
    TORCH_NCCL_ENABLE_MONITORING=0, both named by the message itself; ddp_timeout does not move it. A write-up of
    an LLaMA-Factory multi-node run (trial 10 case 11, blog.gitcode.com 0eab8af2) traced it to nodes that started
    far apart; a CUDA call that blocks the watchdog (the message's own example, CudaEventDestroy) is the other."""
    nodes = cx.hw.get("nnodes")
    text = ("not a collective past ddp_timeout: the heartbeat monitor aborts the process when the watchdog thread "
            "stays stuck past TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (a limit of its own): a CUDA/NCCL call blocked "
            "the watchdog (another thread holding the GIL inside a CUDA call), or, across nodes, one node started "
            "or reached its first collective far later than the others (a slow node still loading or "
            "preprocessing, a different environment)")
    if nodes and nodes > 1:
        text += f"; this run spans {nodes} nodes: compare when each node's ranks started"
    return text


_STORE_EXC = re.compile(r"^\s*(?:Socket Timeout|wait timeout after \d+ ?ms)")


def barrier_facts(ev: Any, cx: RunContext, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.nccl`` for a distributed timeout at a barrier that no NCCL watchdog line reports, or None.

    Evidence (any one): a rank's c10d store wait that timed out (socket.cpp ``waitForInput``, "store-timeout"
    notices), or a traceback whose innermost frames are the ``__enter__``/``__exit__`` of transformers'
    ``TrainingArguments.main_process_first`` (training_args.py: the non-main ranks call ``dist.barrier()`` on entry
    and wait while the main process preprocesses, the main process calls it on exit) with no exception line or a
    timeout one, or the c10d store's own timeout exception (`_STORE_EXC`, libtorch's "Socket Timeout" / "wait
    timeout after Nms", launchcause.py) raised beside that bar (transformers#17106). HF datasets' map bar on the failure's line ("prep-bar" notices: desc, percent, elapsed seconds)
    names what the main process was still doing. LLaMA-Factory's remedies: a larger ``ddp_timeout``
    (hparams/training_args; transformers' default 1800 s) or more ``preprocessing_num_workers``, or preprocessing
    once beforehand (``tokenized_path``)."""
    notes = [n for f in ev.files for n in f.notices]
    store = next((n for n in notes if n.kind == "store-timeout"), None)
    mpf = None
    for n in notes:
        if n.kind != "traceback":
            continue
        frames = list(((n.value or {}) if isinstance(n.value, dict) else {}).get("frames") or ())
        inner = " ".join(frames[-4:])
        if any("main_process_first" in fr for fr in frames) and ("__enter__" in inner or "__exit__" in inner
                                                                 or "barrier" in inner):
            mpf = n
    exc = next((n for n in reversed(notes) if n.kind == "exception"), None)
    if mpf is not None and exc is not None and not any(w in exc.text for w in ("imeout", "timed out", "Timed out")):
        mpf = None   # an error inside the preprocessing itself, not the wait at the barrier
    if store is None and mpf is None and exc is not None and _STORE_EXC.search(str((exc.value or {}).get("msg") or "")) \
            and any(n.kind == "prep-bar" and exc.line - 60 <= n.line <= exc.line + 2 for n in notes):
        mpf = exc   # the store's own timeout ("Socket Timeout") raised at the main process's preprocessing bar (the
        # bar's line, where the traceback opens, or the user's sentence around it; 60 lines: a traceback's frames)
    main = store or mpf
    if main is None:
        return None
    bar = next((n for n in reversed(notes) if n.kind == "prep-bar" and n.line <= main.line + 2), None)
    tmo = store.value["ms"] if store is not None else None
    trainer = cx.log.get("trainer") or ("transformers" if cx.cfg or mpf is not None else None)
    rank = (store.value or {}).get("rank") if store is not None else (mpf.value or {}).get("rank")
    what = ("the barrier of main_process_first (the other ranks wait there while the main process preprocesses the "
            "dataset)" if mpf is not None else "a wait on the c10d store (a barrier)")
    if bar is not None:
        b = bar.value
        likely = (f"the main process was still preprocessing the dataset (\"{b['desc']}\" at {b['pct']} % after "
                  f"{b['elapsed_s'] // 60} min {b['elapsed_s'] % 60} s) when the timeout ran out")
    elif mpf is not None:
        likely = "the main process was still preprocessing the dataset (the other ranks waited for it at the barrier)"
    else:
        likely = ("a rank never reached the barrier: still preprocessing or loading, or dead (the ranks that did "
                  "not time out are the ones to look at)")
    if bar is not None or mpf is not None:
        likely += ("; raise ddp_timeout for the first run, or preprocess faster (more preprocessing_num_workers) "
                   "or once beforehand (tokenized_path)")
    d = {"rank": rank, "op": None, "seq": None, "timeout_ms": tmo, "timeout_text": _timeout_text(tmo, trainer, cx.cfg.get("ddp_timeout")),
         "ran_ms": None, "numel_in": None, "numel_out": None, "step": main.step, "kind": "barrier",
         "likely": likely, "stragglers": [], "pg": None, "pg_desc": None, "trainer": trainer, "late": None,
         "ddp_timeout_fix": trainer == "transformers" or bar is not None or mpf is not None, "count": 1, "ranks": [rank] if rank is not None else [],
         "first_failed": None, "waiting": [], "what": what, "location": location_of(main.file, main.line),
         "preprocessing": bar.value if bar is not None else None}
    d["on_rank"] = on_rank(rank, cx)
    d["timeline_text"] = f"distributed timeout at a barrier {d['on_rank']}"
    return d
