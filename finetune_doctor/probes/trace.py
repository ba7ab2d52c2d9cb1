"""The allocation trace the simulate probe records (probes/tracker.py) and the allocator replay reads
(probes/replay.py, probes/tracedepth.py): a value type of its own so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AllocTrace:
    """One rank's allocation trace at `n_layers` decoder layers. `events`: ("a", serial, bytes, stream),
    ("f", serial), ("m", segment label tuple), ("e",) for ``torch.cuda.empty_cache()`` (only in the traces
    probes/zerotrace.py writes), in execution order; the first marker whose step is an int starts
    the training step (before it: model build and setup)."""

    events: tuple[tuple, ...]
    n_layers: int

    @property
    def allocations(self) -> int:
        return sum(1 for e in self.events if e[0] == "a")
