"""The run's metric curves, one per metric, from the best source of every file the readers found.

Per metric the source with the most points wins (trainer_state > trainer_log > event files > captured stdout on
ties); event files are concatenated per launch. HF's printed dicts carry no step: the step is the training bar's,
else it is extrapolated from the logged steps around it, else from ``logging_steps``, else the dict's ordinal (the
timeline then says "log #N"). Also the small formatting helpers every analyzer of the postmortem shares.
"""

from __future__ import annotations

import math
import os
import statistics
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

from finetune_doctor.evidence import Evidence, Series, src
from finetune_doctor.types import GIB

# canonical metric names for TensorBoard tags written by transformers' TensorBoardCallback (rewrite_logs)
TB_TAGS = {"train/loss": "loss", "train/grad_norm": "grad_norm", "train/learning_rate": "learning_rate",
           "train/epoch": "epoch", "eval/loss": "eval_loss", "train/loss_scale": "loss_scale"}
SOURCE_PRIORITY = {"trainer-state": 0, "trainer-log": 1, "event-file": 2, "run-record": 2, "text-log": 3}


@dataclass(frozen=True)
class Curve:
    """One metric over the run: parallel arrays, plus which file each stretch came from.

    `basis` says how steps were obtained: global_step | estimated | logging_steps | ordinal.
    """

    name: str
    steps: array
    values: array
    lines: array
    segments: tuple[tuple[int, str], ...]      # (first index, file)
    basis: str = "global_step"

    def __post_init__(self) -> None:
        # whether steps never go back (every curve but a resumed run's concatenation): then a step is found by
        # bisection in O(log n) instead of a scan, which keeps detectors linear on 100k-point curves
        st = self.steps
        object.__setattr__(self, "monotone", all(st[i] <= st[i + 1] for i in range(len(st) - 1)))

    def __len__(self) -> int:
        return len(self.values)

    def index_of(self, step: int) -> int | None:
        """The first index whose step is `step`, or None."""
        if self.monotone:
            i = bisect_left(self.steps, step)
            return i if i < len(self.steps) and self.steps[i] == step else None
        for i, s in enumerate(self.steps):
            if s == step:
                return i
        return None

    def file_at(self, i: int) -> str:
        starts = [s for s, _ in self.segments]
        return self.segments[max(0, bisect_right(starts, i) - 1)][1]

    def source(self, i: int) -> str | None:
        return src(self.file_at(i), self.lines[i])

    def location(self, i: int) -> dict[str, Any]:
        return {"file": self.file_at(i), "line": self.lines[i], "column": None, "key": None}



def gib_text(b: float | None) -> str:
    """Bytes as PyTorch prints sizes: GiB with two decimals, MiB below 1 GiB."""
    if b is None:
        return "?"
    if abs(b) >= GIB:
        return f"{b / GIB:.2f} GiB"
    return f"{b / (1 << 20):.2f} MiB"


def fmt(v: float | None) -> str:
    if v is None:
        return "?"
    if not math.isfinite(v):
        return str(v).lower()
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.4g}"


def sfmt(v: float | None) -> str:
    """A loss scale as DeepSpeed prints it: an integer when it is one."""
    if v is None:
        return "?"
    return str(int(v)) if math.isfinite(v) and float(v).is_integer() else fmt(v)


def get_path(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def robust(vals: list[float]) -> tuple[float, float]:
    med = statistics.median(vals)
    mad = statistics.median([abs(v - med) for v in vals])
    return med, 1.4826 * mad



def canonical_name(name: str) -> str:
    return TB_TAGS.get(name, name)


def candidates(ev: Evidence) -> dict[str, list[tuple[int, int, list[Series]]]]:
    """metric -> [(points, priority, [series...])]; event files of one run directory are one candidate."""
    out: dict[str, list[tuple[int, int, list[Series]]]] = {}
    tb: dict[str, list[Series]] = {}
    for f in ev.files:
        kind = f.read.kind
        for s in f.series:
            name = canonical_name(s.name)
            if kind == "event-file":
                tb.setdefault(name, []).append(s)
                continue
            if kind == "text-log" and name.startswith("lf_"):
                name = name[3:]
                prio = SOURCE_PRIORITY["text-log"] + 1   # LF's duplicate callback lines: only if nothing else
            else:
                prio = SOURCE_PRIORITY.get(kind, 5)
            out.setdefault(name, []).append((len(s), prio, [s]))
    for name, lst in tb.items():
        out.setdefault(name, []).append((sum(len(s) for s in lst), SOURCE_PRIORITY["event-file"], lst))
    return out


def fill_steps(steps: array, logging_steps: int | None) -> tuple[array, str]:
    if all(s >= 0 for s in steps):
        return steps, "global_step"
    known = [(i, s) for i, s in enumerate(steps) if s >= 0]
    out = array("q", steps)
    if not known:
        k = logging_steps or 1
        for i in range(len(out)):
            out[i] = (i + 1) * k
        return out, "logging_steps" if logging_steps else "ordinal"
    if len(known) >= 2:
        ratios = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(known, known[1:]) if b[0] > a[0]]
        spacing = statistics.median(ratios) if ratios else (logging_steps or 1)
    else:
        i0, s0 = known[0]
        spacing = logging_steps or (s0 / (i0 + 1) if s0 > 0 else 1)
    spacing = max(spacing, 1)
    ki = [i for i, _ in known]
    for i in range(len(out)):
        if out[i] >= 0:
            continue
        j = bisect_right(ki, i)
        if j > 0:
            a_i, a_s = known[j - 1]
            out[i] = int(round(a_s + (i - a_i) * spacing))
        else:
            b_i, b_s = known[0]
            out[i] = max(1, int(round(b_s - (b_i - i) * spacing)))
    return out, "estimated"


def fill_nearest(steps: array) -> array:
    out = array("q", steps)
    nxt = -1
    for i in range(len(out) - 1, -1, -1):
        if out[i] >= 0:
            nxt = out[i]
        elif nxt >= 0:
            out[i] = nxt
    prev = -1
    for i in range(len(out)):
        if out[i] >= 0:
            prev = out[i]
        else:
            out[i] = max(prev, 0)
    return out


def build_curves(ev: Evidence, logging_steps: int | None = None) -> dict[str, Curve]:
    """One `Curve` per metric, from the best source (module docstring)."""
    curves: dict[str, Curve] = {}
    for name, cands in candidates(ev).items():
        cands.sort(key=lambda c: (-c[0], c[1]))
        n, _, parts = cands[0]
        if n == 0:
            continue
        if len(parts) == 1:
            s = parts[0]
            if name == "loss_scale":   # overflow lines before the first progress bar: the next known step
                steps, basis = fill_nearest(s.steps), "global_step"
            else:
                steps, basis = fill_steps(s.steps, logging_steps)
            curves[name] = Curve(name, steps, s.values, s.lines, ((0, s.file),), basis)
            continue
        steps, values, lines = array("q"), array("d"), array("q")
        segs = []
        for s in parts:
            segs.append((len(values), s.file))
            steps.extend(s.steps)
            values.extend(s.values)
            lines.extend(s.lines)
        curves[name] = Curve(name, steps, values, lines, tuple(segs))
    return curves


def value_at(c: Curve | None, step: int | None) -> float | None:
    """The curve's value at the last logged step <= `step` (the learning rate in effect)."""
    if c is None or step is None or not len(c):
        return None
    if c.monotone:
        i = bisect_right(c.steps, step) - 1
        return c.values[i] if i >= 0 else c.values[0]
    best = None
    for s, v in zip(c.steps, c.values):
        if s <= step:
            best = v
        else:
            break
    return best if best is not None else c.values[0]


def curve_summary(c: Curve | None) -> dict[str, Any] | None:
    if c is None or not len(c):
        return None
    fin = [v for v in c.values if math.isfinite(v)]
    return {"n": len(c), "first": c.values[0], "first_step": c.steps[0], "last": c.values[-1], "last_step": c.steps[-1],
            "min": min(fin) if fin else None, "max": max(fin) if fin else None,
            "median": statistics.median(fin) if fin else None, "nonfinite": len(c) - len(fin),
            "zeros": sum(1 for v in c.values if v == 0.0), "basis": c.basis, "file": c.file_at(0)}


def location_of(file: str, line: int | None) -> dict[str, Any]:
    return {"file": file, "line": line, "column": None, "key": None}


def short_path(path: str) -> str:
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


def exact_at(c: Curve | None, step: int) -> float | None:
    """The value logged at exactly `step`, or None."""
    if c is None:
        return None
    i = c.index_of(step)
    return None if i is None else c.values[i]