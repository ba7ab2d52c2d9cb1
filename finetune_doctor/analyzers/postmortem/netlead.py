"""The inter-node network as the lead of a multi-node run whose collective timed out before any step was logged.

A collective that times out on a run spanning nodes, with no training step logged before it, has not shown that
the nodes can exchange tensors at all: NCCL builds its rings and trees between the nodes at the first collective
and, when it picks an interface the other node cannot reach (docker0, a virtual bridge) or an InfiniBand/RoCE
device that does not connect them, the traffic stalls and the watchdog fires (NCCL's environment variables
NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE, NCCL_DEBUG: docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
LlamaFactory#5450: 2 nodes, ``[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=616,
OpType=ALLREDUCE ...)`` minutes after launch with no step logged; labelled solved as an inter-node communication
fault. The node count is read from ``--nnodes`` (``hw.nnodes``), else from a pasted launch line's NNODES
(readers/runlogs/launchlines.py).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.rendezvous import launch_settings
from finetune_doctor.evidence import Evidence
from finetune_doctor.readers.runlogs.launchlines import launch_lines


def nodes_of(ev: Evidence, hw: dict[str, Any]) -> tuple[int, str] | None:
    """(node count, the input that gave it) when more than one node: ``--nnodes`` (`hw`'s ``nnodes``), else the
    NNODES of the first launch line pasted in a log; None for one node or none known."""
    n = hw.get("nnodes")
    if isinstance(n, int) and n > 1:
        return n, "--nnodes"
    for f in ev.files:
        for line in launch_lines(f.text or ""):
            v = launch_settings(line).get("NNODES", "")
            if v.isdigit() and int(v) > 1:
                return int(v), f"the launch line in {f.read.path}"
    return None


def network_lead(ev: Evidence, hw: dict[str, Any], nccl: dict[str, Any] | None, trained: bool) -> str | None:
    """The words put before ``ev.nccl.likely`` for a collective timeout (`nccl` kind ``timeout``) of a multi-node
    run (`nodes_of`) that logged no step (`trained` False), or None."""
    if not nccl or nccl.get("kind") != "timeout" or trained:
        return None
    got = nodes_of(ev, hw)
    if got is None:
        return None
    nodes, where = got
    return (f"a {nodes}-node run ({where}) that logged no step before the timeout: the inter-node network first — "
            "NCCL on an interface the other node cannot reach (set NCCL_SOCKET_IFNAME to the one the nodes reach "
            "each other by), InfiniBand/RoCE not usable between them (NCCL_IB_DISABLE=1 tests plain TCP), or a "
            "firewall between the nodes; NCCL_DEBUG=INFO on every node shows the interface and transport it "
            "picked. Else")
