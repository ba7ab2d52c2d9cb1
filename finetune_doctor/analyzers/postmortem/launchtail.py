"""What a launcher's tail says of its children, and what lies above it: torchelastic's failure summary or its agent's
"failed (exitcode: N)" lines, DeepSpeed's "exits with return code", with no child's traceback in the files
(`child_failed_only`); a rank's traceback the paste cut before its exception line, above the launcher's own
traceback that ends in its ChildFailedError or CalledProcessError (`cut_above`). Called by causes.py `crash_facts`."""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence, Notice

# the frames of a launcher's own traceback: torchrun's main and elastic agent (torch/distributed/run.py,
# torch/distributed/launcher/api.py `launch_agent`), LLaMA-Factory's CLI running torchrun as a subprocess
# (llamafactory/cli.py -> subprocess.run -> CalledProcessError), DeepSpeed's launcher (launch.py sigkill_handler)
_LAUNCHER = ("launch_agent (", "elastic_launch", "raise ChildFailedError", "raise CalledProcessError", "sigkill_handler")


def _launcher_frames(n: Notice) -> bool:
    v = n.value or {}
    frames = " ".join(v.get("frames") or ())
    return any(w in frames for w in _LAUNCHER) or any(
        p == "torch" and base == "run.py" for p, _fn, base in v.get("pkgs") or ())


# a traceback whose frames wait in a collective or a barrier (torch/distributed/distributed_c10d.py, HF's
# main_process_first, accelerate's wait_for_everyone): a rank that waited for another, whatever stopped it
_COLLECTIVE = ("distributed_c10d.py", "barrier", "main_process_first", "wait_for_everyone", "all_reduce", "all_gather",
               "broadcast", "reduce_scatter")


def rank_raised(tb: Notice, nccl: dict[str, Any] | None) -> bool:
    """Whether a traceback cut before its exception line was a rank raising of its own: not the launcher's own
    traceback, no frame waiting in a collective or barrier (where the exception is most often the timeout another
    rank caused), and not the rank whose collective timeout the logs show (`nccl`: the ``ev.nccl`` fact; its
    traceback is that timeout's, cut). Where the traceback or the timeout names no rank, a timeout printed above
    the traceback in its file is taken for its own (torch prints the watchdog's or the store's timeout, then the
    exception it raises); one printed below it is another rank's."""
    frames = " ".join((tb.value or {}).get("frames") or ())
    rank = (tb.value or {}).get("rank")
    at = (nccl or {}).get("location") or {}
    if nccl is None:
        same = False
    elif rank is not None and nccl.get("rank") is not None:
        same = nccl.get("rank") == rank
    else:
        same = at.get("file") == tb.file and (at.get("line") or 0) <= tb.line
    return not same and not _launcher_frames(tb) and not any(w in frames for w in _COLLECTIVE)


def cut_above(ev: Evidence) -> Notice | None:
    """The last traceback that another traceback follows before any exception line: a rank's traceback the paste
    cut before its exception (CPython prints the exception right below its frames, Lib/traceback.py), above the
    launcher's own traceback that ends in its ChildFailedError / CalledProcessError. None when every traceback
    reached its exception line."""
    cut = None
    for f in ev.files:
        prev = None
        for n in f.notices:
            if n.kind == "traceback" and not _launcher_frames(n):
                cut, prev = (prev if prev is not None else cut), n
            elif n.kind == "exception" or n.kind == "traceback":
                cut, prev = (prev if prev is not None and n.kind == "traceback" else cut), None
    return cut


# who reports a child's exit without its traceback, and what to give instead (`child_failed_only`)
_REPORTER = {"deepspeed": "DeepSpeed's launcher", "agent": "torchelastic's agent log",
             "summary": "torchelastic's failure summary"}
_ASK = {False: "the exception is only in {first}'s own stderr: give that output with --log (or decorate the entry "
               "point with torch.distributed.elastic.multiprocessing.errors.record so the summary carries it)",
        True: "{first} printed its exception above this line in the same output (DeepSpeed's launcher does not "
              "redirect its children): give the whole output with --log"}


def child_failed_only(ev: Evidence, explained: bool) -> dict[str, Any] | None:
    """The run crashed in a child whose traceback is not in the files: torchelastic's failure summary
    (torch/distributed/elastic/multiprocessing/errors/__init__.py ``ChildFailedError``) names the root-cause rank and
    the other failed ranks with a positive exit code (a Python exception; a signal is `killed_facts`' business) and
    "traceback : To enable traceback see ..." (the child did not record its error: no ``@record`` and no
    TORCHELASTIC_ERROR_FILE), so the exception is only in that rank's own stderr. None without such a summary."""
    kills = [k for f in ev.files for k in f.kills if k.kind in ("child-failed-root", "child-failed")]
    root = next((k for k in kills if k.kind == "child-failed-root"), None)
    agent = root is None
    if agent:
        # no summary: the elastic agent's own "failed (exitcode: N) local_rank: R (pid: P) of binary: B" lines
        # (torch/distributed/elastic/multiprocessing/api.py:1003, torch 2.13 wheel) say the same of each child
        kills = [k for f in ev.files for k in f.kills if k.kind == "torchrun-exit"] or [
            # DeepSpeed's launcher: "[launch.py:N:sigkill_handler] [cmd ... '--local_rank=R' ...] exits with
            # return code = 1" (deepspeed/launcher/launch.py sigkill_handler), its children's output above it
            k for f in ev.files for k in f.kills if k.kind == "launcher-exit"]
        root = kills[0] if kills else None
    if root is None or root.exitcode is None or root.exitcode <= 0 or root.signal:
        return None
    seen: dict[str, int] = {}
    ranks = []
    for k in [root] + [k for k in kills if k is not root]:
        who = f"rank {k.rank}" if k.rank is not None else (
            f"local rank {k.local_rank}" + (f" (pid {k.pid})" if k.pid is not None else "") if k.local_rank is not None
            else f"pid {k.pid}" if k.pid is not None else "a child process")
        if who not in seen and k.exitcode is not None:
            seen[who] = k.exitcode
            ranks += [k.rank] if k.rank is not None else []
    names = ", ".join(f"{w} (exit code {c})" for w, c in list(seen.items())[:8]) + (", ..." if len(seen) > 8 else "")
    first = f"rank {root.rank}" if root.rank is not None else (
        f"local rank {root.local_rank}" if root.local_rank is not None else "the first failed process")
    src = "deepspeed" if root.kind == "launcher-exit" else "agent" if agent else "summary"
    text = (f"a Python exception in a child process that {_REPORTER[src]} reports without its traceback: {names}, "
            f"{first} first")
    ask = _ASK[src == "deepspeed"].format(first=first)
    return {"kind": "child-failed", "cls": None, "msg": None, "step": root.step, "explained": explained, "text": text,
            "ask": ask, "where_text": "at an unknown step" if root.step is None else f"during step {root.step}",
            "phase": None, "location": location_of(root.file, root.line), "disk_full": None,
            "ranks": sorted(ranks)}
