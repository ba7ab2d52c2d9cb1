"""Text rendering of ``sections["chat"]`` (facts/kinds.py `chat_estimate`): the weights and KV cache of a
chat/API config on one card, as a table like the training memory table, then one line with the engine's up-front
reservation (vLLM, SGLang) and the verdict."""

from __future__ import annotations

from typing import Any

from finetune_doctor.reporters.sections.export import _g, _pct


def render(data: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    cap = data.get("capacity_gib")
    t = Table(title=f"Inference memory per GPU ({data.get('backend')})", title_justify="left", box=None,
              pad_edge=False, show_footer=True)
    w, kv = data.get("weights_gib"), data.get("kv_gib")
    total = (w or 0) + (kv or 0) if w is not None else None
    t.add_column("", footer="total")
    t.add_column("GiB", justify="right", footer=_g(total))
    t.add_column("% of capacity", justify="right", footer=_pct(total, cap))
    t.add_row(f"weights ({data.get('weights_format') or data.get('dtype')})", _g(w), _pct(w, cap))
    t.add_row(f"KV cache at {data.get('max_len')} tokens", _g(kv), _pct(kv, cap))
    fits = {True: "yes", False: "NO", None: "unknown"}[data.get("fits")]
    res = data.get("reserved_gib")
    line = f"capacity {_g(cap) + ' GiB' if cap is not None else 'unknown (--gpu)'}"
    if res is not None:
        line += f" · the engine reserves {_g(res)} GiB of each card up front"
    return [t, line + f" · fits {fits}"]
