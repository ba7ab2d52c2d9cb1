"""Ranks of one run that disagree on how big the run is (``ev.world_split``; rule nodes-disagree-on-world).

Every process of a torch.distributed job must be started with the same world size: the process group forms only
when WORLD_SIZE processes have joined the rendezvous store, and a collective completes only when every rank of
the group enters it. Processes told different world sizes wait for peers that never come, without an error, until
a timeout (if any) fires. The usual way to get there on several nodes is an asymmetric launch:

- ``llamafactory-cli train`` starts torchrun with ``--nproc_per_node`` = ``NPROC_PER_NODE``, else the number of
  devices the node shows (LLaMA-Factory launcher.py:66 at the snapshot,
  ``os.getenv("NPROC_PER_NODE", str(get_device_count()))``), and logs ``Initializing {nproc_per_node} distributed
  tasks at: {master_addr}:{master_port}`` (launcher.py:69). ``CUDA_VISIBLE_DEVICES`` set on one node only
  therefore starts a different number of processes there.
- Each process then logs ``Process rank: R, world size: W, device: ..., distributed training: ...``
  (hparams/parser.py:652-653 at the snapshot); accelerate's ``PartialState`` prints ``Num processes: W`` in its
  ``__repr__`` (accelerate state.py).

What is read: the world sizes the reader took from the first 256 KiB of every text log (``FileEvidence.head``,
readers/runlogs/logkept.py `head_statements`; these lines are printed at start-up) and the launch
script given with ``--launch`` (one launch line per node, as multi-node scripts are written). Nothing here is
inferred from the config: only what the run's files state.
"""

from __future__ import annotations

import os
from typing import Any

from finetune_doctor.evidence import Evidence
from finetune_doctor.readers.config.accelerate import LaunchCommand, parse_launch_or_none

NODE_KEYS = ("NODE_RANK", "node_rank", "machine_rank")


def _logs(ev: Evidence) -> list[dict[str, Any]]:
    rows = []
    for f in ev.files:
        if f.read.kind != "text-log":
            continue
        st = {"tasks": f.head.get("tasks"), "worlds": dict(f.head.get("worlds") or {}), "addr": f.head.get("addr")}
        ws = next((x for x in f.facts if x.name == "world_size" and isinstance(x.value, int)), None)
        if ws is not None and ws.file == f.read.path:
            st["worlds"].setdefault(ws.value, ws.line)
        if st["tasks"] or st["worlds"]:
            rows.append({"file": f.read.path, **st})
    return rows


def _per_node(cmd: LaunchCommand) -> tuple[str, str | None]:
    """(what the line says about processes per node, in words; the count or None when the node decides)."""
    o, env = cmd.options, cmd.env
    for name in ("NPROC_PER_NODE",):
        if env.get(name):
            return f"{name}={env[name]}", env[name]
    for key in ("nproc_per_node", "num_gpus", "num_processes"):
        if o.get(key):
            return f"--{key} {o[key]}", o[key]
    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if name in env:
            return f"{name}={env[name]}", str(cmd.visible_devices())
    return "no device list (every GPU of that node)", None


def launch_lines(text: str, path: str) -> list[dict[str, Any]]:
    """Every training launch in a launch script (`text`, read from `path`), one per logical line, with the
    ``export`` lines above each applied: [{line, node, per_node, count}]. `node` is the NODE_RANK / --node_rank /
    --machine_rank the line gives (None when absent)."""
    exports: list[str] = []
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, logical = i + 1, lines[i]
        while logical.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            logical = logical.rstrip()[:-1] + " " + lines[i]
        i += 1
        s = logical.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("export "):
            exports.append(s)
            continue
        cmd = parse_launch_or_none("\n".join(exports + [s]), path)
        if cmd is None:
            continue
        node = next((cmd.env.get(k) or cmd.options.get(k) for k in NODE_KEYS if cmd.env.get(k) or cmd.options.get(k)),
                    None)
        words, count = _per_node(cmd)
        out.append({"line": start, "node": node, "per_node": words, "count": count})
    return out


def _launch_split(path: str | None) -> list[dict[str, Any]] | None:
    """The launch lines of `path` when they start different numbers of processes per node, else None."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return None
    cmds = launch_lines(text, path)
    if len(cmds) < 2 or len({c["node"] for c in cmds}) < 2:
        return None                      # one line, or lines for the same node: not a per-node launch script
    return cmds if len({c["count"] for c in cmds}) > 1 else None


def world_split(ev: Evidence, launch: str | None = None) -> dict[str, Any] | None:
    """``ev.world_split``: {text, cause, fix, location} when the logs of one run state different world sizes or
    start different numbers of processes per node (``Initializing N distributed tasks`` at the same master), or
    the `launch` script starts its nodes differently; None otherwise (one log, or logs that agree).

    `text` names each file's statement (file:line); `cause` the launch lines that explain it, where given."""
    rows = _logs(ev)
    worlds = {w for r in rows for w in r["worlds"]}
    tasks = {r["tasks"][0] for r in rows if r["tasks"]}
    # logs that name different masters are different jobs (an old run's log beside a new one), not one split job
    one_job = len({r["addr"] for r in rows if r["addr"]}) <= 1
    logs_split = len(rows) >= 2 and one_job and (len(worlds) > 1 or len(tasks) > 1)
    cmds = _launch_split(launch)
    if not logs_split and not cmds:
        return None
    parts = []
    for r in rows if logs_split else []:
        said = []
        if r["tasks"]:
            said.append(f"{r['tasks'][0]} processes on its node (line {r['tasks'][1]})")
        if r["worlds"]:
            said.append("world size " + ", ".join(f"{w} (line {ln})" for w, ln in sorted(r["worlds"].items())))
        parts.append(f"{os.path.basename(r['file'])} says " + " and ".join(said))
    cause = ""
    if cmds:
        cause = (f"{os.path.basename(launch or '')} launches its nodes differently: "
                 + "; ".join(f"line {c['line']} (node {c['node'] if c['node'] is not None else '?'}): "
                             f"{c['per_node']}" for c in cmds))
    where = rows[0] if logs_split else None
    location = ({"file": where["file"], "line": (where["tasks"] or (0, min(where["worlds"].values())))[1],
                 "column": 1, "key": None} if where else
                {"file": launch, "line": cmds[0]["line"] if cmds else 1, "column": 1, "key": None})
    return {"text": "; ".join(parts), "logs": logs_split, "cause": cause, "location": location,
            "worlds": sorted(worlds), "tasks": sorted(tasks)}
