"""``doctor postmortem --plot FILE.png``: the run's curves with its events marked, drawn with matplotlib.

Four panels share the step axis: loss, grad norm (log scale), learning rate, DeepSpeed loss scale (log2). Every
timeline event is a vertical line coloured by kind, in the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal
Design"; distinguishable with every common colour-vision deficiency) and with a line style per family, so no two
kinds rely on hue alone. Non-finite values cannot be plotted as values: each NaN is a black ``X`` and each Inf a
black ``^`` on a band above the panel's data (in axes coordinates, outside the value range), with a light
vertical span at its step and a gap in the line, and the legend counts them. A loss of exactly 0.0 logged with a
non-finite grad_norm is a NaN hidden by ``logging_nan_inf_filter``: drawn as a gap with a vermillion ``X``
("nan logged as 0.0"), never as a point at zero. The title names the model and the run folder. Curves longer than `MAX_POINTS` are reduced to per-bucket minimum and
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


def hidden_nan_steps(curves: dict[str, Any]) -> set[int]:
    """Steps whose logged loss is exactly 0.0 while grad_norm is non-finite at the same step: HF's Trainer with
    ``logging_nan_inf_filter`` (the default) leaves NaN/Inf losses out of the logged mean, which prints 0.0 when
    every loss of the interval was NaN (transformers/trainer.py ``training_step`` accounting). Such a 0.0 is a
    hidden NaN, not a perfect fit."""
    loss, gn = curves.get("loss"), curves.get("grad_norm")
    if loss is None or gn is None or not len(loss) or not len(gn):
        return set()
    bad_gn = {s for s, v in zip(gn.steps, gn.values) if not math.isfinite(v)}
    return {s for s, v in zip(loss.steps, loss.values) if v == 0.0 and s in bad_gn}


def _reduce(steps: Any, values: Any, hidden: set[int] | frozenset[int] = frozenset()
            ) -> tuple[list[int], list[float], list[tuple[int, str]]]:
    """(steps, values, (step, "nan"|"inf"|"hidden") of non-finite values): a non-finite or hidden value leaves a
    gap in the line (a NaN in the values, which matplotlib does not join across); at most MAX_POINTS finite
    points (bucket min+max, without the gaps)."""
    fs, fv, bad = [], [], []
    for s, v in zip(steps, values):
        if math.isfinite(v) and not (v == 0.0 and s in hidden):
            fs.append(s)
            fv.append(v)
        else:
            bad.append((s, "hidden" if math.isfinite(v) else "nan" if v != v else "inf"))
            fs.append(s)
            fv.append(math.nan)
    n = sum(1 for v in fv if v == v)
    if n <= MAX_POINTS:
        return fs, fv, bad
    fs, fv = [s for s, v in zip(fs, fv) if v == v], [v for v in fv if v == v]
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
    hidden = hidden_nan_steps(timeline.curves)
    for ax, (key, label, log) in zip(axes, panels):
        _panel(ax, timeline.curves[key], key, label, log, hidden if key == "loss" else set())
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


def _panel(ax: Any, c: Any, key: str, label: str, log: bool, hidden: set[int] | frozenset[int] = frozenset()) -> None:
    """One curve with gaps at its non-finite and hidden-NaN points, which are marked on a band above the values
    (module docstring)."""
    s, v, bad = _reduce(c.steps, c.values, hidden)
    fin = [x for x in v if x == x]
    if fin:
        # a line needs two points: short series (case 065 logged one loss) get markers too
        ax.plot(s, v, lw=0.9, color=LINE, marker="o" if len(fin) <= SHORT_SERIES else None, ms=3.5)
        if log and min(fin) > 0:
            ax.set_yscale("log", base=2 if key == "loss_scale" else 10)
    for kind, marker, text in (("nan", "X", "nan"), ("inf", "^", "inf"),
                               ("hidden", "X", "nan logged as 0.0")):
        xs = [st for st, k in bad if k == kind]
        if not xs:
            continue
        ax.scatter(xs, [NONFINITE_Y] * len(xs), marker=marker, s=36, zorder=4, transform=ax.get_xaxis_transform(),
                   clip_on=False, label=f"{text} ({len(xs)})",
                   color=OKABE_ITO["vermillion" if kind == "hidden" else "black"])
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
