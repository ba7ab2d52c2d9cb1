"""A rendezvous that never formed: the c10d store's client could not connect to the master address, and the log
holds nothing else (no exception, no step, no metric). ``ev.crash`` of kind ``connect`` (rule run-crashed).

torch's TCPStore client logs each failed connect before it retries, until the rendezvous timeout ends in
``DistNetworkError`` (torch/csrc/distributed/c10d/socket.cpp, the format strings of torch 2.0-2.13): ``[c10d] The
client socket has failed to connect to [HOST]:PORT (errno: N - TEXT).`` (a warning, ``[W socket.cpp:N]``) and
``[c10d] The client socket has timed out after {} while trying to connect to ({}, {}).``. LlamaFactory#3715: one
node launched with the multi-node example's ``MASTER_ADDR=192.168.0.1``; the maintainer's fix was the right master
address and port. Such a warning alone, with no line after it, is the run waiting on an address nobody listens on:
the network or the launch settings, never a collective waiting for a busy rank.

The line is looked for in the text the log reader keeps of a paste (``FileEvidence.text``, files of at most
readers/runlogs/logkept.py PASTE_TEXT bytes): a log that never formed a rendezvous is that short; no file is read
again (issue #25).

errno 97 (EAFNOSUPPORT, "Address family not supported by protocol") is left out: torch tries the IPv6 form of
``localhost`` first and prints that warning on runs that then connect over IPv4 and train.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence

# the forms seen in real output: "[W socket.cpp:558] ... failed to connect to 0.0.0.5:40323 (errno: 110 - ...)" and
# "[E socket.cpp:610] ... failed to connect to any network address of (05, 40323)." (ofsoundof/GRL-Image-Restoration#27),
# "[E socket.cpp:860] ... timed out after 60s while trying to connect to 192.0.0.1:1234" (pytorch/pytorch#107021),
# "[E521 15:43:02.707733876 socket.cpp:1023] ... timed out after 600000ms while trying to connect to (172.18.21.4,
# 37907)." and TCPStore.cpp's "[c10d] TCP client failed to connect/validate to host 172.18.21.4:37907 - timed out"
# (lzhxmu/CPPO#6)
_HOST_PORT = r"(?:\[(?P<{0}>[^\]]+)\]|(?P<{0}b>[^\s:\[(]+)):(?P<{0}p>\d+)"
CONNECT_LINE = re.compile(
    r"\[c10d\] (?:The client socket has (?:failed to connect to (?:any network address of \((?P<an>[^,()]+), "
    r"(?P<anp>\d+)\)|" + _HOST_PORT.format("fc") + r"(?: \(errno: (?P<errno>\d+) - (?P<err>[^)]*)\))?)|timed out "
    r"after (?P<after>\S+) while trying to connect to (?:\((?P<tp>[^,()]+), (?P<tpp>\d+)\)|"
    + _HOST_PORT.format("tc") + r"))|TCP client failed to connect/validate to host " + _HOST_PORT.format("tv") + ")")
_BENIGN_ERRNO = ("97",)

# the settings a launch script or command line gives torchrun / torch.distributed.run / llamafactory-cli
# (torch/distributed/run.py's flags; LLaMA-Factory's launcher reads the same names from the environment)
_LAUNCH_KEYS = {"MASTER_ADDR": ("MASTER_ADDR", "--master_addr", "--master-addr"),
                "MASTER_PORT": ("MASTER_PORT", "--master_port", "--master-port"),
                "NNODES": ("NNODES", "--nnodes"),
                "NODE_RANK": ("NODE_RANK", "RANK", "--node_rank", "--node-rank"),
                "NPROC_PER_NODE": ("NPROC_PER_NODE", "--nproc_per_node", "--nproc-per-node")}
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def launch_settings(text: str) -> dict[str, str]:
    """{MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, NPROC_PER_NODE: value} a launch script or command line sets
    (``NAME=value`` assignments, ``export NAME=value``, torchrun's ``--flag value`` / ``--flag=value``), shell
    variables (``$NAME``, ``${NAME}``) replaced by the values the same text assigns; a setting it does not give
    is absent. Never raises (an unbalanced quote falls back to splitting on spaces)."""
    assigned: dict[str, str] = {}
    for m in re.finditer(r"(?:^|[\s;])(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\"[^\"]*\"|'[^']*'|[^\s;&|]*)", text, re.M):
        assigned[m.group(1)] = m.group(2).strip("\"'")
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    flags: dict[str, str] = {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            name, eq, val = w.partition("=")
            flags[name] = val if eq else (words[i + 1] if i + 1 < len(words) else "")

    def expand(v: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: assigned.get(m.group(1), m.group(0)), v)

    out: dict[str, str] = {}
    for key, names in _LAUNCH_KEYS.items():
        for n in names:
            v = flags.get(n) if n.startswith("--") else assigned.get(n)
            if v:
                out[key] = expand(v)
                break
    return out


def launch_note(path: str, settings: dict[str, str]) -> str:
    """The one line the report's notes give of what ``--launch`` (or the run folder's cmdline.txt) was read for."""
    if not settings:
        return (f"launch command read from {path}: it sets none of MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, "
                "NPROC_PER_NODE (the launcher's defaults apply)")
    return f"launch command read from {path}: " + ", ".join(f"{k}={v}" for k, v in settings.items())


def _first_connect(ev: Evidence) -> tuple[str, int, re.Match[str]] | None:
    for f in ev.files:
        if f.read.kind != "text-log" or not f.text:
            continue
        for i, line in enumerate(f.text.splitlines(), 1):
            m = CONNECT_LINE.search(line)
            if m and m.group("errno") not in _BENIGN_ERRNO:
                return f.read.path, i, m
    return None


def _address(m: re.Match[str]) -> tuple[str, str]:
    """(host, port) of a `CONNECT_LINE` match, whichever form printed them."""
    for h, p in (("fc", "fcp"), ("fcb", "fcp"), ("an", "anp"), ("tp", "tpp"), ("tc", "tcp"), ("tcb", "tcp"),
                 ("tv", "tvp"), ("tvb", "tvp")):
        if m.group(h) and m.group(p):
            return m.group(h), m.group(p)
    return "?", "?"


def connect_crash(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.crash`` for a log whose only failure is the c10d client's connect to the master (`CONNECT_LINE`), or
    None: where the log trained (a step, a metric dict) or completed, the warning was a retry that succeeded."""
    if out.get("has_metrics") or out.get("completed") or (out.get("steps") or {}).get("last"):
        return None
    found = _first_connect(ev)
    if found is None:
        return None
    path, line, m = found
    host, port = _address(m)
    err = f" ({m.group('err')})" if m.group("err") else f" after {m.group('after')}" if m.group("after") else ""
    text = f"c10d's client failing to connect to the master's store at {host}:{port}{err}"
    cause = (f"the processes never formed the rendezvous: nothing answered at {host}:{port}, the MASTER_ADDR and "
             "MASTER_PORT the launch gave; this is the network or the launch settings, not the training. Give "
             "every node the master node's own reachable address and one free port (on one node, 127.0.0.1 or "
             "no --master_addr at all), check that a firewall lets that port through, and where a node has "
             "several interfaces pin the right one (GLOO_SOCKET_IFNAME for the store and gloo, NCCL_SOCKET_IFNAME "
             "for NCCL after it)")
    return {"kind": "connect", "cls": None, "msg": m.group(0), "step": None, "explained": False, "text": text,
            "ask": "torch retries this connect until the rendezvous timeout, then raises DistNetworkError",
            "where_text": "before the first step", "phase": None, "location": location_of(path, line),
            "disk_full": None, "cause": {"kind": "launch", "text": cause}, "first": False, "consequences": "",
            "earlier_text": "", "after_loop": False, "in_loop": False, "host": host, "port": port}


# the master address of LLaMA-Factory's multi-node example command (examples/README.md, README's "Supervised
# Fine-Tuning on multiple nodes"): copied as is onto real nodes (LlamaFactory#3715, #5864)
EXAMPLE_MASTER = "192.168.0.1"


def placeholder_master(settings: dict[str, str]) -> str | None:
    """Words for a multi-node launch (NNODES above 1) whose MASTER_ADDR is the example address `EXAMPLE_MASTER`,
    or None (one node, another address, or a setting not given)."""
    addr, nodes = settings.get("MASTER_ADDR"), settings.get("NNODES")
    if addr != EXAMPLE_MASTER or not (nodes or "").isdigit() or int(nodes or 0) < 2:
        return None
    return (f"MASTER_ADDR={addr} is the address of LLaMA-Factory's multi-node example command: on {nodes} nodes it "
            "must be the master node's own address, reachable from every node (`hostname -I` on the master), "
            "or the rendezvous never forms")


def with_launch(crash: dict[str, Any] | None, settings: dict[str, str]) -> None:
    """Add to the cause of a crash at the rendezvous (a ``connect`` crash, or a cut traceback of torchrun's own
    launcher, agentcause.py) what the launch command states: a single node pointed at an address that is not
    this machine (LlamaFactory#3715), or a multi-node launch naming the example's address (`placeholder_master`,
    LlamaFactory#5864)."""
    if not crash or not settings or not (crash.get("kind") == "connect" or "torchrun's elastic agent" in str(
            (crash.get("cause") or {}).get("text"))):
        return
    addr, nodes = settings.get("MASTER_ADDR"), settings.get("NNODES")
    said = ", ".join(f"{k}={v}" for k, v in settings.items())
    extra = f"; the launch sets {said}"
    if addr and nodes == "1" and addr not in _LOOPBACK:
        extra += (f": one node, yet the master address {addr} is not this machine's loopback (an example's "
                  "placeholder?): use 127.0.0.1 or leave --master_addr out")
    elif placeholder_master(settings):
        extra += ": " + str(placeholder_master(settings))
    crash["cause"] = {**crash["cause"], "text": crash["cause"]["text"] + extra}
    crash["cause_text"] = f" — {crash['cause']['text']}"
