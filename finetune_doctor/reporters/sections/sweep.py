"""Text rendering of ``sections["sweep"]`` (pipeline/estimate.py): one row per grid point, the keys swept, the
predicted per-GPU total against the capacity, host RAM, and whether it fits."""

from __future__ import annotations

from typing import Any


def render(data: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    cap = data.get("capacity_gib")
    title = "What fits" + (f" (capacity {cap:.2f} GiB per GPU)" if cap else " (no GPU given: --gpu)")
    t = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for k in data.get("keys") or []:
        t.add_column(k)
    t.add_column("total GiB", justify="right")
    t.add_column("allocated GiB", justify="right")
    t.add_column("host GiB/node", justify="right")
    t.add_column("fits")
    for row in data.get("rows") or []:
        fits = row.get("fits")
        mark = Text("yes", style="green") if fits else Text("NO", style="red") if fits is False else Text("?")
        t.add_row(*[str(row.get(k)) for k in data.get("keys") or []],
                  *("-" if row.get(c) is None else f"{row[c]:.2f}" for c in ("total_gib", "peak_allocated_gib", "host_gib")),
                  mark)
    if data.get("rows") and not any(r.get("fits") for r in data["rows"]) and cap:
        from rich.console import Group

        if data.get("zero3_allowed", True):
            hint = Text("No point fits. Try sweeping other axes, e.g. --sweep deepspeed=examples/deepspeed/"
                        "ds_z2_config.json,examples/deepspeed/ds_z3_config.json,examples/deepspeed/"
                        "ds_z3_offload_config.json or --sweep finetuning_type=full,lora", style="yellow")
        else:   # a PTQ checkpoint: LLaMA-Factory refuses ZeRO-3 and FSDP for it
            hint = Text("No point fits. Try sweeping other axes, e.g. --sweep per_device_train_batch_size=1,2 "
                        "or --sweep lora_rank=8,16 (ZeRO-3 and FSDP are refused for this pre-quantized checkpoint)",
                        style="yellow")
        return Group(t, hint)
    return t
