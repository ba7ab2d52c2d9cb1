"""``doctor postmortem --plot FILE.png``: the run's curves with its events marked, drawn with matplotlib.

Four panels share the step axis: loss, grad norm (log scale), learning rate, DeepSpeed loss scale (log2). Every
timeline event is a vertical line coloured by kind; non-finite values are red crosses at the top of their
panel (they cannot be plotted as values). Curves longer than `MAX_POINTS` are reduced to per-bucket minimum and
maximum, which keeps spikes visible. matplotlib is imported here only (``pip install finetune-doctor[plot]``),
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
COLORS = {"nan": "red", "oom": "red", "killed": "red", "nccl_timeout": "red", "exception": "red",
          "loss_spike": "orange", "grad_norm_spike": "orange", "loss_scale_drop": "purple", "loss_scale_abort": "purple",
          "restart": "teal",
          "loss_zero": "crimson", "grad_norm_constant": "crimson", "first_loss": "crimson", "warmup_end": "gray",
          "warning": "goldenrod", "finished": "green"}


def _reduce(steps: Any, values: Any) -> tuple[list[int], list[float], list[int]]:
    """(steps, finite values, steps of non-finite values), at most MAX_POINTS finite points (bucket min+max)."""
    fs, fv, bad = [], [], []
    for s, v in zip(steps, values):
        if math.isfinite(v):
            fs.append(s)
            fv.append(v)
        else:
            bad.append(s)
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


def draw(timeline: Any, path: str) -> str:
    """Write the PNG to `path` and return it. Raises MissingExtra without matplotlib, InputError when the
    file cannot be written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("--plot", "plot") from None
    panels = [(k, label, log) for k, label, log in PANELS if k in timeline.curves and len(timeline.curves[k])]
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.4 * n + 0.6), sharex=True, squeeze=False)
    axes = [a[0] for a in axes]
    events = [e for e in timeline.events if e.step is not None]
    if not panels:
        axes[0].text(0.5, 0.5, "no metric curves in the files read", ha="center", va="center",
                     transform=axes[0].transAxes)
    for ax, (key, label, log) in zip(axes, panels):
        c = timeline.curves[key]
        s, v, bad = _reduce(c.steps, c.values)
        if s:
            # a line needs two points: short series (case 065 logged one loss) get markers too
            ax.plot(s, v, lw=0.9, color="tab:blue", marker="o" if len(s) <= SHORT_SERIES else None, ms=3.5)
            if log and min(v) > 0:
                ax.set_yscale("log", base=2 if key == "loss_scale" else 10)
        if bad:
            top = max(v) if v else 1.0
            ax.scatter(bad, [top] * len(bad), marker="x", color="red", s=24, zorder=3, label="nan/inf")
            ax.legend(loc="upper right", fontsize=7)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        for e in events:
            ax.axvline(e.step, color=COLORS.get(e.kind, "gray"), lw=0.8, alpha=0.6)
    seen: dict[str, str] = {}
    for e in events:
        seen.setdefault(e.kind, COLORS.get(e.kind, "gray"))
    if seen:
        from matplotlib.lines import Line2D

        handles = [Line2D([0], [0], color=col, lw=2) for col in seen.values()]
        fig.legend(handles, [k.replace("_", " ") for k in seen], loc="lower center", ncol=min(6, len(seen)),
                   fontsize=8, frameon=False)
    from matplotlib.ticker import MaxNLocator

    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))   # steps are whole: no "379.5" tick
    axes[-1].set_xlabel("step")
    fig.suptitle("doctor postmortem", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 if seen else 0, 1, 0.97))
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise InputError(f"cannot write the plot: {err.strerror or err}", file=path) from None
    finally:
        plt.close(fig)
    return path
