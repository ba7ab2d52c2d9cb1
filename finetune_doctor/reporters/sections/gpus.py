"""Text rendering of ``sections["gpus"]`` (pipeline/gpus.py `section_data`): one row per card, then processes.

Used by the text reporter for ``doctor gpus`` and by the ``--watch`` live view. Memory in GiB; a bar shows the
peak against the card's usable capacity (what torch reports as total memory).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

_BAR = 12


def _bar(used: float | None, cap: float | None) -> Text:
    if used is None or not cap:
        return Text("?" * 1, style="dim")
    frac = max(0.0, min(1.0, used / cap))
    n = round(frac * _BAR)
    style = "red" if frac >= 0.95 else "yellow" if frac >= 0.85 else "green"
    return Text("█" * n, style=style) + Text("░" * (_BAR - n), style="dim") + Text(f" {frac:4.0%}")


def _g(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def render(data: dict[str, Any]) -> Any:
    """A rich renderable for the gpus section: header line, cards table, processes table, imbalance summary."""
    parts: list[Any] = []
    head = []
    if data.get("driver"):
        head.append(f"driver {data['driver']}" + (f", CUDA {data['cuda_driver']}" if data.get("cuda_driver") else ""))
    hosts = data.get("hosts") or []
    if len(hosts) > 1:
        head.append(f"{len(hosts)} hosts")
    n = data.get("samples") or 0
    if n > 1:
        span = data.get("span_s")
        head.append(f"{n} samples" + (f" over {span:.0f} s" if span else "") + " (peak = max over samples)")
    if data.get("gaps"):
        head.append(f"[red]{data['gaps']} gap(s)[/]")
    if head:
        parts.append(Text.from_markup(" · ".join(head), style="dim"))

    multi_sample = n > 1
    # short headers (the unit goes in the title) and no_wrap on the numbers: at the 100 columns of piped
    # output a header like "used GiB" used to wrap and the name fold mid-word ("H100-80 / GB")
    cards = Table(title="GPUs (memory in GiB)", title_justify="left", expand=False, pad_edge=False)
    cards.add_column("card", no_wrap=True)
    cards.add_column("name", overflow="fold", min_width=9)
    cards.add_column("used", justify="right", no_wrap=True)
    if multi_sample:
        cards.add_column("peak", justify="right", no_wrap=True)
    cards.add_column("total", justify="right", no_wrap=True)
    cards.add_column("", no_wrap=True)
    cards.add_column("util", justify="right", no_wrap=True)
    cards.add_column("temp", justify="right", no_wrap=True)
    cards.add_column("power", justify="right", no_wrap=True)
    cards.add_column("job", justify="center", no_wrap=True)
    for c in data.get("cards") or []:
        used = c.get("peak_gib") if multi_sample else c.get("used_gib")
        name = c.get("model") or c.get("name") or "?"
        if c.get("mig_enabled"):
            name += f" [MIG ×{len(c.get('mig') or [])}]"
        health = []
        if c.get("ecc_uncorrected"):
            health.append(f"{c['ecc_uncorrected']} uncorrected ECC")
        if c.get("retired_pending") or c.get("remapped_rows_pending"):
            health.append("reset pending")
        if health:
            name += " (" + ", ".join(health) + ")"
        power = "-"
        if c.get("power_w") is not None:
            power = f"{c['power_w']:.0f} W" + (f"/{c['power_limit_w']:.0f}" if c.get("power_limit_w") else "")
        row = [c.get("label", "?"), name, _g(c.get("used_gib"))]
        if multi_sample:
            row.append(_g(c.get("peak_gib")))
        row += [_g(c.get("capacity_gib"), 2), _bar(used, c.get("capacity_gib")),
                "-" if c.get("util_gpu") is None else f"{c['util_gpu']}%",
                "-" if c.get("temperature_c") is None else f"{c['temperature_c']}°C", power,
                "●" if c.get("in_job") else ""]
        cards.add_row(*row)
    parts.append(cards)

    procs = [(c, p) for c in data.get("cards") or [] for p in c.get("processes") or []]
    if procs:
        t = Table(title="Processes", title_justify="left", pad_edge=False)
        t.add_column("card")
        t.add_column("pid", justify="right")
        t.add_column("GiB", justify="right")
        t.add_column("user")
        t.add_column("command", overflow="fold")
        t.add_column("", justify="center")
        for c, p in procs:
            mark = {True: Text("job", style="green"), False: Text("foreign", style="yellow")}.get(p.get("job"), "")
            t.add_row(c.get("label", "?"), str(p.get("pid")), _g(p.get("used_gib"), 2), p.get("user") or "",
                      p.get("cmdline") or p.get("name") or "", mark)
        parts.append(t)
    elif data.get("cards") and not data.get("process_info"):
        parts.append(Text("no process information for these cards", style="dim"))

    imb = data.get("imbalance")
    if imb:
        b, lo = imb["busiest"], imb["lightest"]
        line = (f"fullest {b['label']} {_g(b['peak_gib'])} GiB, emptiest {lo['label']} {_g(lo['peak_gib'])} GiB: "
                f"spread {_g(imb['spread_gib'])} GiB")
        parts.append(Text(line, style="bold"))
    rec = data.get("recorder")
    if rec and rec.get("samples"):
        msg = (f"sampler: {rec['samples']} samples every {rec['effective_interval_s']:g} s, "
               f"{_g(rec.get('cpu_ms_mean'), 2)} ms CPU per sample ({_g(rec.get('overhead_pct'), 2)}% of one core)")
        if rec.get("missed_ticks"):
            msg += f", {rec['missed_ticks']} ticks missed"
        if rec.get("file"):
            msg += f" → {rec['file']}"
        parts.append(Text(msg, style="dim"))
    return Group(*parts)
