"""Text rendering of the ``postmortem`` report section: sparklines of the run's curves with a strip of event
marks on the same step axis, so a NaN, a spike or an OOM can be seen against the loss and grad norm.

The data is what pipeline/postmortem.py `section_data` puts in the report (JSON-safe: non-finite values are
the strings ``"nan"``/``"inf"``). The timeline table itself is drawn by reporters/text.py from
``report.timeline``; this section adds the picture.
"""

from __future__ import annotations

import math
from typing import Any

BLOCKS = "▁▂▃▄▅▆▇█"
WIDTH = 50      # sparkline columns: with the label, min–max and last cells the table fits in 100 columns
MARKS = {"nan": ("N", "bold red"), "loss_spike": ("S", "yellow"), "grad_norm_spike": ("G", "yellow"),
         "loss_scale_drop": ("v", "magenta"), "loss_scale_abort": ("A", "bold magenta"), "oom": ("O", "bold red"), "nccl_timeout": ("T", "bold red"),
         "killed": ("K", "bold red"), "restart": ("R", "cyan"), "loss_zero": ("0", "red"),
         "grad_norm_constant": ("C", "red"), "first_loss": ("F", "red"), "exception": ("X", "bold red"),
         "warmup_end": ("|", "dim"), "warning": ("w", "yellow"), "finished": ("✓", "green")}
LABELS = {"loss": "loss", "grad_norm": "grad norm", "learning_rate": "lr", "loss_scale": "loss scale"}


def _num(v: Any) -> float:
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, math.nan)
    return float(v)


def _buckets(steps: list[int], values: list[float], lo: int, hi: int, width: int) -> list[float | None]:
    """One value per column: the column's non-finite value if any, else its value farthest from the median."""
    cols: list[list[float]] = [[] for _ in range(width)]
    span = max(hi - lo, 1)
    for s, v in zip(steps, values):
        x = min(width - 1, max(0, int((s - lo) * (width - 1) / span + 0.5)))
        cols[x].append(v)
    fin = sorted(v for v in values if math.isfinite(v))
    med = fin[len(fin) // 2] if fin else 0.0
    out: list[float | None] = []
    for c in cols:
        if not c:
            out.append(None)
            continue
        bad = [v for v in c if not math.isfinite(v)]
        out.append(bad[0] if bad else max(c, key=lambda v: abs(v - med)))
    return out


def sparkline(steps: list[int], values: list[float], lo: int, hi: int, width: int = WIDTH,
              log: bool = False) -> tuple[str, list[int]]:
    """Block characters for `values` over the step range [lo, hi]; non-finite points are ``×``, empty columns
    a space. Returns the string and the column indexes that are non-finite."""
    cols = _buckets(steps, values, lo, hi, width)

    def tr(v: float) -> float:
        return math.log10(v) if log and v > 0 else v

    fin = [tr(v) for v in cols if v is not None and math.isfinite(v) and (not log or v > 0)]
    vmin, vmax = (min(fin), max(fin)) if fin else (0.0, 1.0)
    out, bad = [], []
    for i, v in enumerate(cols):
        if v is None:
            out.append(" ")
        elif not math.isfinite(v):
            out.append("×")
            bad.append(i)
        elif log and v <= 0:
            out.append(BLOCKS[0])
        else:
            out.append(BLOCKS[_level(tr(v), vmin, vmax)])
    return "".join(out), bad


def _level(v: float, vmin: float, vmax: float) -> int:
    """The block index of `v` in [vmin, vmax]; halved first where the span itself overflows a float (a fuzzed
    ±1.8e308 learning rate: inf - inf would make it NaN)."""
    if vmax == vmin:
        return 0
    span = vmax - vmin
    frac = (v - vmin) / span if math.isfinite(span) else (v / 2 - vmin / 2) / (vmax / 2 - vmin / 2)
    return min(len(BLOCKS) - 1, max(0, int(frac * (len(BLOCKS) - 1) + 0.5)))


def _fmt(v: Any) -> str:
    """3 significant digits, at most 7 characters for |v| < 1e100: ``2.05``, ``1.96e-4``, ``2.3e+6`` -- short
    enough that the min–max cell never wraps at the reporter's 100 columns."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if v == 0:
        return "0"
    a = abs(v)
    if 1e-3 <= a < 1e4:
        t = f"{v:.3g}"
        if "e" not in t:
            return t
        return f"{v:.0f}"   # 1000 <= |v| < 10000: "1234", not "1.23e+03"
    m, e = f"{v:.2e}".split("e")
    m = m.rstrip("0").rstrip(".")
    return f"{m}e{int(e)}" if int(e) < 0 else f"{m}e+{int(e)}"


def _range(lo: Any, hi: Any) -> str:
    a, b = _fmt(lo), _fmt(hi)
    return a if a == b else f"{a} – {b}"


def render(data: dict[str, Any]) -> Any:
    """A rich renderable: one row per curve (label, sparkline, min–max, last) and the event strip."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text
    from rich import box

    curves = data.get("curves") or {}
    marks = data.get("marks") or []
    steps_all = [s for c in curves.values() for s in c.get("steps", [])] + [m["step"] for m in marks]
    parts: list[Any] = []
    st = data.get("steps") or {}
    outline = []
    if st.get("last") is not None:
        outline.append(f"last step {st['last']}" + (f" of {st['total']}" if st.get("total") else ""))
    if data.get("completed") and data.get("crashed"):
        outline.append("training loop finished, then the run died after it")
    elif data.get("completed"):
        outline.append("training loop finished")
    elif data.get("stopped_outside"):
        outline.append("the run was stopped from outside")
    elif data.get("crashed"):
        outline.append("the run crashed")
    if data.get("restarts"):
        outline.append(f"{data['restarts']} restart(s)")
    if outline:
        parts.append(Text(" · ".join(outline)))
    if data.get("gpus"):
        cards = ", ".join(f"{g['node'] + ' ' if g.get('node') else ''}GPU {g['index']} {g['peak_gib']:.1f}" + (f"/{g['total_gib']:.0f}" if g.get("total_gib")
                                                                      else "") + " GiB" for g in data["gpus"])
        parts.append(Text(f"GPU memory peaks (recorded): {cards}"))
    if not steps_all:
        if not curves:
            parts.append(Text("no metric curves in the files read", style="dim"))
        return Group(*parts)
    lo, hi = min(steps_all), max(steps_all)
    from finetune_doctor.reporters.wrap import render_width

    # the strip shrinks with the terminal: the label, range and last-value columns take about 50 of its columns
    width = max(10, min(WIDTH, render_width() - 52)) if hi > lo else 1
    if _axis_basis(curves):
        parts.append(Text("step axis " + _axis_basis(curves).strip(), style="dim"))
    t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, show_header=True, header_style="bold")
    t.add_column("curve", no_wrap=True)
    t.add_column(f"steps {lo} → {hi}", no_wrap=True)
    t.add_column("min – max", justify="right", no_wrap=True)
    t.add_column("last", justify="right", no_wrap=True)
    for name in ("loss", "grad_norm", "learning_rate", "loss_scale"):
        c = curves.get(name)
        if not c:
            continue
        vals = [_num(v) for v in c["values"]]
        fin = [v for v in vals if math.isfinite(v) and v > 0]
        log = name == "loss_scale" or (name == "grad_norm" and fin and max(fin) / max(min(fin), 1e-12) > 100)
        line, bad = sparkline(c["steps"], vals, lo, hi, width, log=bool(log))
        txt = Text(line)
        for i in bad:
            txt.stylize("bold red", i, i + 1)
        label = LABELS[name] + (" (log)" if log else "")
        t.add_row(label, txt, _range(c.get("min"), c.get("max")), _fmt(c.get("last")))
    strip = [" "] * width
    styles: list[str | None] = [None] * width
    seen: dict[str, list[int]] = {}
    span = max(hi - lo, 1)

    def free(x: int) -> int | None:
        for d in range(0, 4):   # the nearest free column within 3 of the step's own
            for y in (x + d, x - d):
                if 0 <= y < width and strip[y] == " ":
                    return y
        return None

    # fatal marks first so they take their own column; an informative mark at the same step moves next to it
    # rather than disappearing (case 041: the loss-0 mark under the NaN mark)
    for m in sorted(marks, key=lambda m: not MARKS.get(m["kind"], ("", ""))[1].startswith("bold")):
        ch, style = MARKS.get(m["kind"], ("•", ""))
        x = min(width - 1, max(0, int((m["step"] - lo) * (width - 1) / span + 0.5)))
        if strip[x] != ch:
            y = free(x)
            if y is not None:
                strip[y], styles[y] = ch, style
        seen.setdefault(m["kind"], [])
        if m["step"] not in seen[m["kind"]]:
            seen[m["kind"]].append(m["step"])
    stxt = Text("".join(strip))
    for i, sty in enumerate(styles):
        if sty:
            stxt.stylize(sty, i, i + 1)
    t.add_row("events", stxt, "", "")
    parts.append(t)
    if seen:
        def at(steps: list[int]) -> str:
            steps = sorted(steps)
            return f" @{steps[0]}" if len(steps) == 1 else f" @{steps[0]}…{steps[-1]} ({len(steps)})"

        legend = "  ".join(f"{MARKS.get(k, ('•', ''))[0]} {k.replace('_', ' ')}{at(v)}" for k, v in seen.items())
        parts.append(Text(legend, style="dim"))
    return Group(*parts)


# how a curve's x-axis was obtained (analyzers/postmortem/curves.py Curve.basis): only global_step is read as is
AXIS_WORDS = {"estimated": "estimated: the log prints no step; each metric dict placed from the progress bar, its epoch "
                           "or the spacing of the others",
              "logging_steps": "assumed: one dict every logging_steps, the log prints no step",
              "ordinal": "not steps: the dicts numbered in order, the log prints no step"}


def _axis_basis(curves: dict[str, Any]) -> str:
    """The header's note on what the step axis was read from (trial 12: epochs and a bar placed as plain steps)."""
    bases = [c.get("basis") for c in curves.values() if c and c.get("basis") in AXIS_WORDS]
    return f" ({AXIS_WORDS[bases[0]]})" if bases else ""

