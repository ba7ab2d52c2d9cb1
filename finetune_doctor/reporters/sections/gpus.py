"""Text rendering of ``sections["gpus"]`` (pipeline/gpus.py `section_data`): one row per card, then processes.

Used by the text reporter for ``doctor gpus`` and by the ``--watch`` live view (reporters/live.py). Laid out for
80 columns, as gpustat is: the section is drawn two columns in, so every table fits 78 columns with the longest
catalog name. No table borders; one line per card and per process (long names and command lines are shortened,
command lines in the middle so the program and the config file stay visible). Several hosts get a block each,
headed by the host name, so the rows need only the card index.

Units: memory in GiB; used and peak to one decimal (they move by more than that between samples), the usable
capacity to two, as torch prints it ("total capacity of 79.11 GiB") and as every capacity in a report is printed.
The bar is the peak against the usable capacity.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Span, Text

_BAR = 8
NAME_MAX = 14
COMMAND_MAX = 38


def _bar(used: float | None, cap: float | None) -> list[tuple[str, str | None]]:
    if used is None or not cap:
        return [("?", "dim")]
    frac = max(0.0, min(1.0, used / cap))
    n = round(frac * _BAR)
    style = "red" if frac >= 0.95 else "yellow" if frac >= 0.85 else "green"
    return [("█" * n, style), ("░" * (_BAR - n), "dim"), (f"{frac:4.0%}", None)]


def _g(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def fit(text: str, width: int) -> str:
    """`text` cut to `width` characters in the middle (``/usr/bin/python…examples/qwen3_full.yaml``)."""
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def _columns(header: list[tuple[str, str]], rows: list[list[Any]]) -> Text:
    """A borderless table as one styled Text: `header` is [(title, "<" or ">" or "^")], columns one space apart,
    each as wide as its widest cell; a cell is a string or styled segments [(text, style)]. Built from plain
    strings and style spans in one pass (rich's Table costs milliseconds a row: 10k cards took 40 s), so a table
    of any length renders in time linear in its rows."""
    segs = [[c if isinstance(c, list) else [(c, None)] for c in row] for row in rows]
    widths = [max([len(h)] + [sum(len(t) for t, _ in r[i]) for r in segs]) for i, (h, _) in enumerate(header)]
    parts: list[str] = []
    spans: list[Span] = []
    pos = 0

    def put(row: list[list[tuple[str, str | None]]], style: str | None = None) -> None:
        nonlocal pos
        for i, (cell, (_, align)) in enumerate(zip(row, header)):
            gap = widths[i] - sum(len(t) for t, _ in cell)
            left = gap if align == ">" else gap // 2 if align == "^" else 0
            chunks = [" " * left] + [t for t, _ in cell] + ([" " * (gap - left + 1)] if i < len(row) - 1 else [])
            at = pos + left
            for t, st in cell:
                if st or style:
                    spans.append(Span(at, at + len(t), st or style))
                at += len(t)
            text = "".join(chunks)
            parts.append(text)
            pos += len(text)
        parts.append("\n")
        pos += 1

    put([[(h, None)] for h, _ in header], style="bold")
    for row in segs:
        put(row)
    out = Text("".join(parts).rstrip("\n"), no_wrap=True, overflow="ellipsis")
    out.spans = spans
    return out


def _name(c: dict[str, Any]) -> str:
    name = c.get("model") or c.get("name") or "?"
    if c.get("mig_enabled"):
        name += f" MIG×{len(c.get('mig') or [])}"
    return name if len(name) <= NAME_MAX else name[:NAME_MAX - 1] + "…"


def _cards(cards: list[dict[str, Any]], multi_sample: bool) -> Text:
    header = [("GPU", ">"), ("name", "<"), ("used", ">")] + ([("peak", ">")] if multi_sample else []) + \
        [("total", ">"), ("memory", "<"), ("util", ">"), ("temp", ">"), ("power", ">"), ("job", "^")]
    rows: list[list[Any]] = []
    for c in cards:
        used = c.get("peak_gib") if multi_sample else c.get("used_gib")
        power = "-"
        if c.get("power_w") is not None:
            power = f"{c['power_w']:.0f}" + (f"/{c['power_limit_w']:.0f}W" if c.get("power_limit_w") else "W")
        row: list[Any] = [str(c.get("index", "?")), _name(c), _g(c.get("used_gib"))]
        if multi_sample:
            row.append(_g(c.get("peak_gib")))
        row += [_g(c.get("capacity_gib"), 2), _bar(used, c.get("capacity_gib")),
                "-" if c.get("util_gpu") is None else f"{c['util_gpu']}%",
                "-" if c.get("temperature_c") is None else f"{c['temperature_c']}°C", power,
                "●" if c.get("in_job") else ""]
        rows.append(row)
    return _columns(header, rows)


def _health(cards: list[dict[str, Any]]) -> list[str]:
    out = []
    for c in cards:
        bad = []
        if c.get("ecc_uncorrected"):
            bad.append(f"{c['ecc_uncorrected']} uncorrected ECC errors")
        if c.get("retired_pending") or c.get("remapped_rows_pending"):
            bad.append("a reset is pending (retired pages / remapped rows)")
        if bad:
            out.append(f"{c.get('label', '?')}: " + ", ".join(bad))
    return out


def _processes(cards: list[dict[str, Any]]) -> Text | None:
    rows: list[list[Any]] = []
    for c in cards:
        for p in c.get("processes") or []:
            mark = {True: [("job", "green")], False: [("foreign", "yellow")]}.get(p.get("job"), "")
            user = p.get("user") or ""
            rows.append([str(c.get("index", "?")), str(p.get("pid")), _g(p.get("used_gib"), 2),
                         user if len(user) <= 8 else user[:7] + "…",
                         fit(p.get("cmdline") or p.get("name") or "", COMMAND_MAX), mark])
    if not rows:
        return None
    return _columns([("GPU", ">"), ("pid", ">"), ("GiB", ">"), ("user", "<"), ("command", "<"), ("", "<")], rows)


def _head(data: dict[str, Any]) -> Text | None:
    head = []
    if data.get("driver"):
        head.append(f"driver {data['driver']}" + (f", CUDA {data['cuda_driver']}" if data.get("cuda_driver") else ""))
    hosts = data.get("hosts") or []
    if len(hosts) > 1:
        head.append(f"{len(hosts)} hosts")
    n = data.get("samples") or 0
    if n > 1:
        span = data.get("span_s")
        head.append(f"{n} samples" + (f" over {span:.0f} s" if span else "") + ", peak = max")
    if data.get("gaps"):
        head.append(f"[red]{data['gaps']} gap(s)[/]")
    head.append("memory in GiB")
    return Text.from_markup(" · ".join(head), style="dim")


def render(data: dict[str, Any]) -> Any:
    """A rich renderable for the gpus section: a header line, per host the cards and their processes, the
    health remarks and the imbalance summary; every line fits 78 columns."""
    parts: list[Any] = [_head(data)]
    cards = data.get("cards") or []
    multi_sample = (data.get("samples") or 0) > 1
    hosts = list(dict.fromkeys(c.get("host") for c in cards))
    for host in hosts:
        mine = [c for c in cards if c.get("host") == host]
        if len(hosts) > 1:
            parts.append(Text(fit(str(host), 78), style="bold"))
        parts.append(_cards(mine, multi_sample))
        procs = _processes(mine)
        if procs is not None:
            parts.append(procs)
    if cards and not data.get("process_info"):
        parts.append(Text("no process information for these cards", style="dim"))
    parts.extend(Text(line, style="red") for line in _health(cards))
    imb = data.get("imbalance")
    if imb:
        b, lo = imb["busiest"], imb["lightest"]
        parts.append(Text(f"fullest {b['label']} {_g(b['peak_gib'])} GiB, emptiest {lo['label']} "
                          f"{_g(lo['peak_gib'])} GiB: spread {_g(imb['spread_gib'])} GiB", style="bold"))
    rec = data.get("recorder")
    if rec and rec.get("samples"):
        msg = (f"sampler: {rec['samples']} samples every {rec['effective_interval_s']:g} s, "
               f"{_g(rec.get('cpu_ms_mean'), 2)} ms CPU each ({_g(rec.get('overhead_pct'), 2)}% of a core)")
        if rec.get("missed_ticks"):
            msg += f", {rec['missed_ticks']} ticks missed"
        if rec.get("file"):
            msg += f" → {rec['file']}"
        parts.append(Text(msg, style="dim"))
    return Group(*parts)
