"""One predictive distribution of a run's peak, whose 5-95 % quantiles are the reported 90 % interval and whose share
above the card's usable memory is the memory model's probability of OOM (issue #21, session 14: "one distribution").

Pure Python, no torch (facts/bands.py calls it on every check and estimate, the lint path included).

**Why one.** Before session 14 the interval and p_oom were two computations: the interval the mixture over open
assumptions of total·e^ε under the error fitted on measurements (uncertainty.py `error_dist`), its ends then moved by
the class's widths (bands.py `widen`) and the samples' full-length upper end (`upper_at_cutoff`); p_oom the same
mixture under another spread (uncertainty.py `model_dist`: λ·s and τ fitted on outcomes). So a report could show an
interval wholly under the card beside p_oom 0.3, or the reverse (trial 15 case 04).

**The distribution.** Let X be the ln of the peak nvidia-smi shows, drawn from the mixture Σ w_i·F(x − ln total_i)
(law of total probability over the open assumptions' alternatives, weights w_i; F the CDF of ε, uncertainty.py
`ErrorDist`). The class's widths and the full-length upper end move the mixture's 5 % and 95 % points; the
distribution that has exactly those ends is T(X) with T piecewise linear in ln units through three knots: the
mixture's 5 % point to the interval's lower end, its median m to m' (m itself, or the middle of the interval in ln
units where negative widths put m outside it), its 95 % point to the interval's upper end, and continued past the
outer knots with the outer segments' slopes. T is increasing, so D = T(X) has the quantiles Q_D(p) = T(Q_X(p)) and
the CDF F_D(y) = F_X(T⁻¹(y)): its 5 % and 95 % points ARE the interval's ends (to the bisection's 1e-10 ln units,
`mixture_quantile`).

**The budget in shown terms.** The run runs out when what it needs passes the budget (capacity − memory in use):
need_i·e^ε > budget_i, with need_i = ratio·total_i (facts/mem.py `need_ratio`: the allocator frees its cache before
it raises an OOM, analyzers/memory/reserve.py 'Shown and needed'). On the scale of X that is total_i·e^ε >
budget_i / ratio, the card's usable memory as nvidia-smi would show it at the moment the run runs out
(`threshold`). So p_oom_model = Σ w_i·(1 − F(T⁻¹(ln(budget_i / ratio)) − ln total_i)): for one budget, exactly
1 − F_D(threshold), the share of D above it. p_oom_model > 5 % iff the interval's upper end is above the threshold.

The all-cause p_oom keeps the share q of outcomes no memory term explains (uncertainty.py `all_cause`:
(1 − q)·p_oom_model + q/2): it is a statement about the outcome, not about the peak, and no distribution of the peak
with a finite 90 % interval can carry it (q/2 = 0.1 of the mass would sit beyond each end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from finetune_doctor.analyzers.memory import bands, uncertainty
from finetune_doctor.analyzers.memory.uncertainty import LEVEL, Assessment, ErrorDist

# the smallest slope of T (ln units per ln unit): a class whose widths collapse the interval to a point keeps an
# invertible map (bands.py `widen` makes lo = hi then)
_MIN_SLOPE = 1e-9


@dataclass(frozen=True)
class Predictive:
    """The predictive distribution D of the peak (module docstring). `comps`: (weight, total GiB) of the mixture;
    `dist`: the error ε; `knots`: ln GiB of the mixture's 5 %, median and 95 % points; `ends`: ln GiB of D's 5 %
    point, median and 95 % point (the interval's ends)."""

    comps: tuple[tuple[float, float], ...]
    dist: ErrorDist
    knots: tuple[float, float, float]
    ends: tuple[float, float, float]

    def _slopes(self) -> tuple[float, float]:
        (lo_m, m, hi_m), (lo_f, mid, hi_f) = self.knots, self.ends
        below = (mid - lo_f) / (m - lo_m) if m > lo_m else 1.0
        above = (hi_f - mid) / (hi_m - m) if hi_m > m else 1.0
        return max(below, _MIN_SLOPE), max(above, _MIN_SLOPE)

    def to_final(self, x: float) -> float:
        """T(x): ln GiB of the mixture to ln GiB of D."""
        below, above = self._slopes()
        m, mid = self.knots[1], self.ends[1]
        return mid + (x - m) * (above if x >= m else below)

    def to_mixture(self, y: float) -> float:
        """T⁻¹(y)."""
        below, above = self._slopes()
        m, mid = self.knots[1], self.ends[1]
        return m + (y - mid) / (above if y >= mid else below)

    def mixture_cdf(self, x: float) -> float:
        """F_X(x) = Σ w·F(x − ln total), `x` in ln GiB."""
        return sum(w * self.dist.cdf(x - math.log(t)) for w, t in self.comps)

    def cdf(self, gib: float) -> float:
        """P(D ≤ `gib`), GiB."""
        if gib <= 0:
            return 0.0
        return min(max(self.mixture_cdf(self.to_mixture(math.log(gib))), 0.0), 1.0)

    def share_above(self, gib: float) -> float:
        """P(D > `gib`): the share of the distribution above `gib` GiB."""
        return 1.0 - self.cdf(gib)

    def quantile(self, p: float) -> float:
        """The `p` quantile of D (GiB): T of the mixture's (`mixture_quantile`)."""
        return math.exp(self.to_final(mixture_quantile(self.comps, self.dist, p)))

    def interval(self) -> tuple[float, float]:
        """The central 90 % interval (GiB): D's 5 % and 95 % points."""
        return math.exp(self.ends[0]), math.exp(self.ends[2])

    def p_over(self, budgets: Iterable[float | None], ratio: float = 1.0) -> float | None:
        """p_oom_model (0-1): Σ w_i·P(need_i·e^ε > budget_i) on the scale of D, component i's threshold
        `threshold`(budget_i, `ratio`) (module docstring, 'The budget in shown terms'); `budgets` align with
        `comps`. None when a budget is unknown; 1.0 for a component whose budget is ≤ 0."""
        bs = list(budgets)
        if len(bs) != len(self.comps) or any(b is None for b in bs):
            return None
        acc = 0.0
        for (w, t), b in zip(self.comps, bs):
            if b is None or b <= 0:
                acc += w
                continue
            x = self.to_mixture(math.log(threshold(b, ratio)))
            acc += w * (1.0 - self.dist.cdf(x - math.log(t)))
        return min(max(acc, 0.0), 1.0)


def mixture_quantile(comps: tuple[tuple[float, float], ...], dist: ErrorDist, p: float) -> float:
    """The `p` quantile (ln GiB) of the mixture Σ w·F(x − ln total) of `comps` (weight, total GiB) under `dist`,
    between the components' own quantiles (the mixture's lies between them): exact for one component, else the
    Illinois variant of false position (Dowell & Jarratt, BIT 11 (1971) 168-174) to a bracket of 1e-10 ln units or
    a residual under 1e-13, the bisection's answer in a handful of CDF evaluations instead of ~35 (the remedy search
    builds hundreds of these: 1.07 s of one check, LF's ascend/qwen3_5_full_sft_fsdp2.yaml). Raises ValueError
    unless 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    logs = [math.log(t) for _w, t in comps]
    q = dist.quantile(p)
    total_w = sum(w for w, _t in comps)
    if len(comps) == 1 or min(logs) == max(logs):
        return logs[0] + q

    def f(x: float) -> float:
        return sum(w * dist.cdf(x - lg) for (w, _t), lg in zip(comps, logs)) / total_w - p

    lo, hi = min(logs) + q - 1e-6, max(logs) + q + 1e-6
    flo, fhi = f(lo), f(hi)
    side = 0
    for _ in range(200):
        if hi - lo <= 1e-10:
            break
        mid = (lo * fhi - hi * flo) / (fhi - flo) if fhi != flo else 0.5 * (lo + hi)
        if not lo < mid < hi:
            mid = 0.5 * (lo + hi)
        fm = f(mid)
        if abs(fm) < 1e-13:
            return mid
        if fm < 0:
            lo, flo = mid, fm
            if side == -1:
                fhi *= 0.5
            side = -1
        else:
            hi, fhi = mid, fm
            if side == 1:
                flo *= 0.5
            side = 1
    return 0.5 * (lo + hi)


def mixture_interval(components: Iterable[tuple[float, float, Any]], dist: ErrorDist,
                     level: float = LEVEL) -> tuple[float, float]:
    """The central `level` interval (GiB) of the peak total_i·e^ε drawn from the mixture `components` (weight,
    total GiB, budget GiB or None; the budget unused): e to the `mixture_quantile` at (1 − level)/2 and
    (1 + level)/2, the one quantile every interval of the doctor and of benchmarks/calib*.py is read with (issue
    #21, session 16: a second bisection to 1e-4 ln units in uncertainty.py gave the report and the calibration two
    slightly different numbers). Components of weight or total ≤ 0 are dropped; the weights need not sum to 1.
    Raises ValueError when none is left, or unless 0 < level < 1."""
    comp = tuple((float(w), float(t)) for w, t, _b in components if w > 0 and t > 0)
    if not comp:
        raise ValueError("a mixture needs a component with weight and total above 0")
    if not 0.0 < level < 1.0:
        raise ValueError(f"an interval needs 0 < level < 1, got {level}")
    return (math.exp(mixture_quantile(comp, dist, (1.0 - level) / 2)),
            math.exp(mixture_quantile(comp, dist, (1.0 + level) / 2)))


def threshold(budget_gib: float, ratio: float) -> float:
    """The budget (GiB, capacity − memory in use) as the peak nvidia-smi would show when the run runs out:
    budget / (need / total) (module docstring, 'The budget in shown terms'); `ratio` ≤ 0 is taken as 1."""
    return budget_gib / ratio if ratio > 0 else budget_gib


def build(comps: Iterable[tuple[float, float, Any]], dist: ErrorDist,
          final: tuple[float, float] | None = None) -> Predictive:
    """D for the mixture `comps` (weight, total GiB, budget GiB or None; the budget unused) under `dist`, its 5 %
    and 95 % points moved to `final` (GiB: the interval after the class's widths and the full-length upper end;
    None: the mixture's own). Raises ValueError without a component of weight and total above 0."""
    comp = tuple((float(w), float(t)) for w, t, _b in comps if w > 0 and t > 0)
    if not comp:
        raise ValueError("a predictive distribution needs a component with weight and total above 0")
    lo_m, m, hi_m = (mixture_quantile(comp, dist, p) for p in ((1.0 - LEVEL) / 2, 0.5, (1.0 + LEVEL) / 2))
    if final is None:
        return Predictive(comp, dist, (lo_m, m, hi_m), (lo_m, m, hi_m))
    lo_f, hi_f = math.log(final[0]), math.log(final[1])
    mid = m if lo_f < m < hi_f else 0.5 * (lo_f + hi_f)
    return Predictive(comp, dist, (lo_m, m, hi_m), (lo_f, mid, hi_f))


def assess(total_gib: float, budget_gib: float | None, method: str, shape: str, need_gib: float | None = None,
           cls: str | None = None) -> Assessment:
    """uncertainty.py `assess` read on the one distribution (module docstring) of a run of class `cls`
    (analyzers/memory/bands.py `run_class`): the core's interval widened by that class's widths, p_oom_model its
    share above budget·total/need (`threshold`), p_oom = uncertainty.all_cause(p_oom_model, q), the verdict ``oom``
    when need > budget, ``fits`` when p_oom_model ≤ P_OOM_TARGET (exactly when the interval's upper end is under
    the threshold), else ``at-risk``; `safe_total_gib` the largest need with p_oom_model ≤ target,
    budget·total/upper end (the upper end scales with the total). `cls` None: uncertainty.assess as it is."""
    a = uncertainty.assess(total_gib, budget_gib, method, shape, need_gib)
    if cls is None:
        return a
    iv = bands.widen(a.interval_gib, uncertainty.table(), cls)
    if budget_gib is None:
        return Assessment(None, None, iv, a.dist, None, None)
    need = total_gib if need_gib is None else need_gib
    ratio = need / total_gib if total_gib > 0 else 1.0
    pm = build([(1.0, total_gib, budget_gib)], uncertainty.core_dist(method, shape), iv).p_over([budget_gib], ratio)
    pm = 1.0 if pm is None else pm
    verdict = "oom" if need > budget_gib else ("fits" if pm <= uncertainty.P_OOM_TARGET else "at-risk")
    safe = budget_gib * total_gib / iv[1] if iv[1] > 0 else None
    return Assessment(verdict, uncertainty.all_cause(pm, uncertainty.unexplained_share(method)), iv, a.dist,
                      budget_gib, safe, pm)
