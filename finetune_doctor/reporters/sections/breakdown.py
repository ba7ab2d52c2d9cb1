"""Text rendering of ``sections["breakdown"]`` (pipeline/estimate.py): the predicted memory at each moment of a
training step, in execution order, and the parameter counts behind it."""

from __future__ import annotations

from typing import Any


def render(data: dict[str, Any]) -> Any:
    from rich.table import Table

    t = Table(title="Memory by moment of the step (tensors, GiB, before allocator reserve and runtime)",
              title_justify="left", box=None, pad_edge=False)
    t.add_column("moment")
    t.add_column("GiB", justify="right")
    moments = data.get("moments_gib") or data.get("phase_gib") or {}
    first = data.get("first_oom")
    for name, gib in moments.items():
        t.add_row(name + ("  ← first out of memory" if name == first else ""), f"{gib:.2f}")
    p = data.get("params") or {}
    if p:
        t.add_row("", "")
        t.add_row("parameters (base / trainable)", f"{p.get('base', 0) / 1e9:.2f} B / {p.get('trainable', 0) / 1e9:.3f} B")
    if data.get("tokens_per_micro_batch"):
        t.add_row("tokens per micro-batch", f"{data['tokens_per_micro_batch']:,}")
    return t
