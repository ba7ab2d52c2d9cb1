"""``doctor postmortem --plot FILE.png``: the run's curves with its events marked, drawn with matplotlib.

Four panels share the step axis: loss, grad norm (log scale), learning rate, DeepSpeed loss scale (log2). Every
timeline event is a vertical line coloured by kind, in the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal
Design"; distinguishable with every common colour-vision deficiency) and with a line style per family, so no two
kinds rely on hue alone. Non-finite values cannot be plotted as values: each NaN is a black ``X`` and each Inf a
black ``^`` on a band above the panel's data (in axes coordinates, outside the value range), with a light
vertical span at its step, and the legend counts them. The title names the model and the run folder. Curves longer than `MAX_POINTS` are reduced to per-bucket minimum and
maximum, which keeps spikes visible. matplotlib is imported here only (the ``plot`` extra),
with the non-interactive Agg backend.
"""

from __future__ import annotations

import math
from typing import Any

from finetune_doctor.errors import InputError, MissingExtra

MAX_POINTS = 4000
SHORT_SERIES = 50     # series with at most this many points are drawn with markers
PANELS = (("loss", "loss", False), ("grad_norm", "grad norm", True), ("learning_rate", "learning rate", False),
          ("loss_scale", "loss scale", True))
OKABE_ITO = {"orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442", "blue": "#0072B2",
             "vermillion": "#D55E00", "purple": "#CC79A7", "black": "#000000", "grey": "#999999"}
# (colour, line style) per event kind: crashes vermillion solid, numerics orange dashed, loss scale purple dash-dot,
# degenerate curves blue dotted, restarts sky, the end green
STYLES = {"nan": ("vermillion", "-"), "oom": ("vermillion", "-"), "killed": ("vermillion", "-"),
          "nccl_timeout": ("vermillion", "-"), "exception": ("vermillion", "-"), "cuda_error": ("vermillion", "-"),
          "gpu_xid": ("black", "-"), "loss_spike": ("orange", "--"), "grad_norm_spike": ("orange", "--"),
          "loss_scale_drop": ("purple", "-."), "loss_scale_abort": ("purple", "-"), "restart": ("sky", "-"),
          "loss_zero": ("blue", ":"), "grad_norm_constant": ("blue", ":"), "first_loss": ("blue", ":"),
          "warmup_end": ("grey", ":"), "warning": ("yellow", "--"), "finished": ("green", "-")}
COLORS = {k: OKABE_ITO[c] for k, (c, _) in STYLES.items()}
LINE = OKABE_ITO["blue"]
NONFINITE_Y = 1.02     # axes fraction: just above the plotted values, inside the figure


def _reduce(steps: Any, values: Any) -> tuple[list[int], list[float], list[tuple[int, str]]]:
    """(steps, finite values, (step, "nan"|"inf") of non-finite values), at most MAX_POINTS finite points
    (bucket min+max)."""
    fs, fv, bad = [], [], []
    for s, v in zip(steps, values):
        if math.isfinite(v):
            fs.append(s)
            fv.append(v)
        else:
            bad.append((s, "nan" if v != v else "inf"))
    n = len(fv)
    if n <= MAX_POINTS:
        return fs, fv, bad
    half = MAX_POINTS // 2
    rs, rv = [], []
    for b in range(half):
        lo, hi = b * n // half, (b + 1) * n // half
        if hi <= lo:
            continue
        seg = range(lo, hi)
        i1 = min(seg, key=lambda i: fv[i])
        i2 = max(seg, key=lambda i: fv[i])
        for i in sorted({i1, i2}):
            rs.append(fs[i])
            rv.append(fv[i])
    return rs, rv, bad


def draw(timeline: Any, path: str, title: str | None = None, inputs: Any = ()) -> str:
    """Write the PNG to `path` and return it; `title` names the model and the run folder. The output policy of
    fsutil.py applies (a regular file only, never one of `inputs`, written atomically). Raises MissingExtra
    without matplotlib, InputError when the file cannot or may not be written."""
    from finetune_doctor.fsutil import STDOUT, output_target

    target = output_target(path, "--plot", inputs)
    if target == STDOUT:
        raise InputError("--plot writes a PNG file; standard output carries the report (name a .png file)",
                         file=path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("--plot", "plot") from None
    panels = [(k, label, log) for k, label, log in PANELS if k in timeline.curves and len(timeline.curves[k])]
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.4 * n + 0.8), sharex=True, squeeze=False)
    axes = [a[0] for a in axes]
    events = [e for e in timeline.events if e.step is not None]
    if not panels:
        axes[0].text(0.5, 0.5, "no metric curves in the files read", ha="center", va="center",
                     transform=axes[0].transAxes)
    for ax, (key, label, log) in zip(axes, panels):
        _panel(ax, timeline.curves[key], key, label, log)
        for e in events:
            col, ls = STYLES.get(e.kind, ("grey", "-"))
            ax.axvline(e.step, color=OKABE_ITO[col], ls=ls, lw=1.0, alpha=0.8)
    _legend(fig, events)
    from matplotlib.ticker import MaxNLocator

    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))   # steps are whole: no "379.5" tick
    axes[-1].set_xlabel("step")
    fig.suptitle(f"doctor postmortem: {title}" if title else "doctor postmortem", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 if events else 0, 1, 0.96))
    import io

    from finetune_doctor.fsutil import write_bytes

    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=110, format="png")
    finally:
        plt.close(fig)
    write_bytes(target, buf.getvalue(), shown=path)
    return path


def _panel(ax: Any, c: Any, key: str, label: str, log: bool) -> None:
    """One curve, its non-finite points on a band above the values (module docstring)."""
    s, v, bad = _reduce(c.steps, c.values)
    if s:
        # a line needs two points: short series (case 065 logged one loss) get markers too
        ax.plot(s, v, lw=0.9, color=LINE, marker="o" if len(s) <= SHORT_SERIES else None, ms=3.5)
        if log and min(v) > 0:
            ax.set_yscale("log", base=2 if key == "loss_scale" else 10)
    for kind, marker in (("nan", "X"), ("inf", "^")):
        xs = [st for st, k in bad if k == kind]
        if not xs:
            continue
        ax.scatter(xs, [NONFINITE_Y] * len(xs), marker=marker, color=OKABE_ITO["black"], s=36, zorder=4,
                   transform=ax.get_xaxis_transform(), clip_on=False, label=f"{kind} ({len(xs)})")
        for x in xs[:200]:
            ax.axvspan(x - 0.5, x + 0.5, color=OKABE_ITO["grey"], alpha=0.25, lw=0)
    if bad:
        ax.legend(loc="upper left", fontsize=7)
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)


def _legend(fig: Any, events: list[Any]) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for e in events:
        seen.setdefault(e.kind, STYLES.get(e.kind, ("grey", "-")))
    if not seen:
        return
    from matplotlib.lines import Line2D

    handles = [Line2D([0], [0], color=OKABE_ITO[c], ls=ls, lw=2) for c, ls in seen.values()]
    fig.legend(handles, [k.replace("_", " ") for k in seen], loc="lower center", ncol=min(6, len(seen)),
               fontsize=8, frameon=False)
