"""A traceback cut inside torchrun's own launcher (``ev.crash.cause`` kind ``frames-lead`` for a ``traceback-only``
crash): the elastic agent failed before any worker process ran the training script.

torchrun's console script calls ``torch.distributed.run.main`` → ``run`` → ``elastic_launch.__call__`` →
``launch_agent`` (torch/distributed/launcher/api.py), which builds the rendezvous handler and calls
``agent.run()`` (torch/distributed/elastic/agent/server/api.py ``SimpleElasticAgent.run``, wrapped by
elastic/metrics/api.py ``wrap``). A traceback whose frames run through ``launch_agent`` and hold no frame of the
training script (no worker's) was raised by the launcher itself: the rendezvous (the c10d store on MASTER_ADDR:
MASTER_PORT that every node must reach) or the workers' start. A worker's own failure is printed by the agent as
its ChildFailedError summary instead (launchtail.py). LlamaFactory#5864 (2 nodes, ``MASTER_ADDR=192.168.0.1``, the
example address of LLaMA-Factory's multi-node command): the maintainer's answer was to check the network settings.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.framecause import FRAMES_LEAD

# the launcher's frames (function (file)), as the reader keeps them
_AGENT = "launch_agent (api.py)"
_LAUNCHER_FILES = ("(run.py)", "(api.py)", "(__init__.py)", "(torchrun)", "(<module>)")


def agent_lead(tb: Any) -> str | None:
    """The lead for a traceback (`tb`: the reader's traceback notice; its value's ``frames`` hold "func (file.py)"
    entries, outermost first) that runs through torchrun's ``launch_agent`` and no further than the launcher's own
    files (`_LAUNCHER_FILES`), or None (a worker's traceback, or none). Opens with framecause.FRAMES_LEAD, so its
    kind is ``frames-lead``."""
    v = tb.value if tb is not None and isinstance(tb.value, dict) else {}
    frames = [f.strip() for f in (v.get("frames") or ()) if isinstance(f, str)]
    if _AGENT not in frames:
        return None
    funcs = [f for f in frames[frames.index(_AGENT):] if f.endswith(")") and " (" in f]
    if not all(f.endswith(_LAUNCHER_FILES) for f in funcs):
        return None
    return (f"{FRAMES_LEAD}torchrun's elastic agent (torch/distributed/launcher/api.py `launch_agent` → "
            "`agent.run()`), before any worker started the training script: the launcher itself failed, most "
            "often at the rendezvous, where every node must reach the c10d store at MASTER_ADDR:MASTER_PORT "
            "(RendezvousTimeoutError, DistNetworkError: a master address that is not the master node's, a port "
            "closed by a firewall, the wrong network interface); give the lines after the cut, and check from each "
            "node that the master's address answers on that port (`nc -zv MASTER_ADDR MASTER_PORT`)")
