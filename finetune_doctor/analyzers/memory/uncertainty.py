"""How sure the doctor is of its memory prediction: an error model measured on the benchmarks, and the verdict.

Pure Python, no torch (the lint path imports it through facts/mem.py).

**The error.** For a prediction `total` of the peak device memory per GPU (GiB, what nvidia-smi shows) and the
memory a run really used, ε = ln(measured / total). The benchmarks measured ε on every row where both are known
(benchmarks/derive_uncertainty.py regenerates uncertainty_table.json from them; the derivation and the rows are in
benchmarks/results/uncertainty_derivation.md):

* published rows (reference/memory/memory_points_dev.csv, the rows benchmarks/memory_accuracy.py expresses), method
  ``analytic``;
* device rows (benchmarks/results/gpu_measure.csv, measured on an H200): method ``analytic`` (the estimate) and
  ``simulated`` (the simulate probe's trace replayed through the caching-allocator model, probes/replay.py);
* ``measured`` (a gpu probe's own peak): the spread of repeated device measurements of one configuration, one
  class for every shape (``any``).

Each row carries the shape class of its run (analyzers/memory/reserve.py `shape_class`: zero, moe, long_sequence,
large_vocab_logits, default), the classes whose allocator behaviour differs.

**The model.** Per method, ε of a class is normal with unknown mean and variance, and the class's parameters are
drawn around those of the method's pooled rows: the conjugate normal / scaled-inverse-χ² prior with the pooled mean
worth κ0 rows and the pooled variance worth ν0 rows (Gelman et al., Bayesian Data Analysis, 3rd ed., §3.3). The
predictive distribution of a new run's ε is then Student's t with ν0 + n degrees of freedom, location μ_n and
scale σ_n·√(1 + 1/κ_n) (BDA3 §3.3, the posterior predictive). A class with no rows of a method is taken as a
random row of that method: the pooled rows' own predictive (t with N − 1 degrees of freedom). κ0 and ν0 are the
pair of a small grid with the best leave-one-out log predictive density over the rows (the derivation script
chooses them and writes them into the table). The scale is never below `SIGMA_FLOOR`.

**The verdict.** With `budget` = capacity − memory already in use (GiB) the probability of OOM is
p_oom = P(need·e^ε > budget), where `need` is `total` with the allocator reserve the run needs to complete instead
of the one it shows on a roomy card (the caching allocator frees its cached segments and retries before it raises
an OOM; analyzers/memory/reserve.py, 'Shown and needed'); ε is measured against `total`, and taken to scale `need`
alike. Whether a run near its card's edge runs out also depends on what the prediction
does not see (the card's usable memory on that machine, other processes, the lengths the data really reach, the
allocator's luck), while the measurements the interval is fitted on also carry errors an outcome does not (rows
from other frameworks translated into LLaMA-Factory keys, counters other than the peak). So for the analytic method
p_oom takes ε's scale s as √((λ·s)² + τ²): λ (``p_oom_scale_factor``) and τ (``p_oom_extra_scale``, an independent
spread of the budget) are chosen on outcome rows by benchmarks/calibrate.py (1 and 0 when the table has none). The
verdict is ``oom`` when the prediction's need itself exceeds the budget (the meaning
of ``fits == False`` is unchanged), ``fits`` when the memory model's own probability p_oom_model ≤ `P_OOM_TARGET`
(5 %), else ``at-risk``. `interval_gib` is
the central `LEVEL` (90 %) predictive interval of the peak. Remedies aim at p_oom_model ≤ 5 %; for a run predicted
over the card the cheapest set that brings it under with p_oom_model < 50 % leads (engine/planners.py). A prediction over the
card from weights sized as an upper bound (a quantized-looking name without a config.json) is at-risk, not oom,
when the weights as the name suggests fit (facts/quantassume.py `quant_assumption`).

**Runs unlike the measured ones.** A few dev sources are far off the memory model (ε of ±0.8 to ±1.4 where the
rest sit within ±0.3: Ascend NPU runs whose allocator caches far more, other trainers' recipes translated into
LLaMA-Factory keys that load or shard differently — benchmarks/results/calibrate.md, 'Tails'). One t with heavier
tails for every run (a ν cap; rounds 1-4 chose ν = 1, Cauchy) widens the tails of the runs like the measured ones
too: p_oom 0.05 on a run at a third of its card. So the analytic error may be a **contamination mixture**
(Huber's ε-contamination): with probability 1 − w the class's t, with probability w a normal around the same
location with scale s (ln units), the table's ``contamination`` {weight, scale}; and p_oom may carry a share q of
outcomes the prediction does not explain (a cause no term sees, an over-sized translation), each an even chance:
p_oom = (1 − q)·P(need·e^ε > budget) + q/2 (``p_oom_unexplained``, at most `UNEXPLAINED_MAX`, the top of the
calibration's grid). w, s and q are chosen with the rest of the form by leave-one-out on dev
(benchmarks/calib_loso.py; the folds are whole calibration rounds since session 12, sources before).

**Two probabilities** (issue #21, a contract change: README 'Two probabilities'). About 11 % of the dev runs the
memory model placed under 10 % ran out all the same, for causes no memory term sees (other processes, version bugs,
native Windows; benchmarks/results/calibrate_misses.md): a calibrated all-cause probability cannot go below that
base rate, and while the verdict was read from it q had to be capped so that ``fits`` stayed reachable. So there are
two: ``p_oom`` is the all-cause probability above, the one calibrated and scored on outcomes; ``p_oom_model`` is the
memory model's own, P(need·e^ε > budget) (the (1 − q) part renormalised: p_oom = (1 − q)·p_oom_model + q/2), which
decides the verdict and what remedies aim at, since no edit of the config moves the q/2 part.

**By kind of report** (session 12, `by_report`; benchmarks/calib_loro.py, benchmarks/results/calib_loro.md). The runs
with outcomes are published runs, and why a run was published decides much of its outcome: an issue thread is
written because a run failed (53 % of the dev threads ran out), a documentation table lists what trained (6 %). Under
leave-one-round-out a two-sided map per kind, p = a + (1 − a − b)·p_oom_model (a: the share that runs out whatever
the memory model says, b: the share that trains whatever it says, both at least 0.1 so that no p reaches 0.1 or
0.9), scores a Brier of 0.115 where one q for all runs scores 0.141. It is the probability *given why the run was
published*, which a user's check before launch does not have, so the doctor's ``p_oom`` keeps the one q; the table's
``p_oom_by_report`` ({kind: {"oom": a, "trained": b}}) is what benchmarks/calibrate.py scores reported runs with
beside it.

**One distribution** (issue #21, session 14). What a report shows is read on one predictive distribution of the
peak (analyzers/memory/predictive.py): its 5-95 % is the interval (the core `core_dist`'s mixture over the open
assumptions, widened by the class's widths), p_oom_model its share above the budget, the verdict ``fits`` exactly
when the interval's upper end is under the budget (in shown terms, budget·total/need). `assess` above keeps the
core's interval and the spread-based p_oom for the callers that know no class of run (the probes).

The t distribution's CDF is Abramowitz & Stegun 26.7.3 (odd ν) and 26.7.4 (even ν), exact for integer ν.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

TABLE = Path(__file__).with_name("uncertainty_table.json")
METHODS = ("analytic", "simulated", "measured")
VERDICTS = ("fits", "at-risk", "oom")
SHAPELESS = ("measured",)   # methods whose error is one class for every shape (`ANY`)
ANY = "any"
P_OOM_TARGET = 0.05
# the largest share q of unexplained outcomes the table may carry: the top of benchmarks/calib_loso.py's grid. The
# verdict and the remedies are decided on the memory model's own probability (`model_dist`), so the floor q/2 under
# the all-cause p_oom no longer has to stay under P_OOM_TARGET (issue #21: sessions 9 and 10 capped q for that
# reason and leave-one-source-out chose the cap both times)
UNEXPLAINED_MAX = 0.3
LEVEL = 0.90
# the pooled rows of a method count as this many rows of each class: κ0 for the mean, ν0 for the variance; the
# table's "prior" (chosen by benchmarks/derive_uncertainty.py) overrides these defaults
PRIOR_KAPPA0 = 1.0
PRIOR_NU0 = 1
# a prediction is never trusted closer than 1 %. An assumption, not a measurement: the only repeats on the device
# (gpu_measure.csv rows 1 and 2, one configuration on one machine) agree to 0.01 %, which says nothing about other
# machines, drivers or data; the floor keeps a class whose few rows happen to agree from claiming certainty
SIGMA_FLOOR = 0.01


# the shape classes (analyzers/memory/reserve.py `shape_class`) as a user reads them
CLASS_WORDS = {"zero": "ZeRO-2/3 runs", "moe": "mixture-of-experts runs", "long_sequence": "long-sequence runs",
               "large_vocab_logits": "runs whose logits dominate (large vocabulary)",
               "default": "dense runs without ZeRO-2/3", ANY: "repeated measurements of one run"}


# -- Student's t ---------------------------------------------------------------------------------------------------

def t_cdf(x: float, dof: int) -> float:
    """P(T ≤ x) for Student's t with `dof` ≥ 1 (an integer) degrees of freedom.

    A(x|ν) = P(|T| ≤ x) from Abramowitz & Stegun 26.7.3 (ν odd) / 26.7.4 (ν even), with θ = atan(|x|/√ν); exact.
    Raises ValueError for dof < 1.
    """
    if dof < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {dof}")
    nu = int(dof)
    th = math.atan(abs(x) / math.sqrt(nu))
    s, c2 = math.sin(th), math.cos(th) ** 2
    if nu % 2:
        acc = 0.0
        if nu > 1:
            term = math.cos(th)
            acc = term
            for j in range(3, nu - 1, 2):     # cos^j θ · (2·4···(j−1)) / (1·3···j), j = 3, 5, …, ν−2
                term *= c2 * (j - 1) / j
                acc += term
        a = 2.0 / math.pi * (th + s * acc)
    else:
        term = acc = 1.0
        for j in range(2, nu - 1, 2):         # cos^j θ · (1·3···(j−1)) / (2·4···j), j = 2, 4, …, ν−2
            term *= c2 * (j - 1) / j
            acc += term
        a = s * acc
    a = min(max(a, 0.0), 1.0)
    return 0.5 + 0.5 * a if x >= 0 else 0.5 - 0.5 * a


# A pure function of (p, dof), asked again and again for the same few levels (the interval's ends, the verdict's
# thresholds): each bisection costs ~30 `t_cdf` calls, ~9 % of `doctor check`'s CPU on tests/rule_cases before
# (cProfile, 2026-12-07: 267,896 t_cdf calls for 9,671 quantiles).
@lru_cache(maxsize=4096)
def t_quantile(p: float, dof: int) -> float:
    """The `p` quantile of Student's t with `dof` degrees of freedom (bisection on `t_cdf`, to 1e-10).
    Raises ValueError unless 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, dof) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


# The mixture's quantile is a pure function of the (frozen, compared by value) distribution and p, and a check asks
# the same few (class, level) pairs again and again: each bisection costs ~45 `t_cdf` calls, 2.2 of ~20 CPU s of
# `doctor check` over tests/rule_cases, test_cases and test_terminal_width before (cProfile, 2026-12-07: 227,685
# t_cdf calls for 12,679 quantiles).
@lru_cache(maxsize=4096)
def _mixture_quantile(dist: "ErrorDist", p: float) -> float:
    """`ErrorDist.quantile` of a distribution with a contamination component or an unexplained share: bisection on
    its CDF to 1e-10 in ln units; the mixture's quantile lies between its components'. `p` is checked by the
    caller."""
    lo = hi = dist.mu
    step = max(dist.scale, dist.wide_scale)
    while dist.cdf(lo) > p:
        lo -= step
    while dist.cdf(hi) < p:
        hi += step
    while hi - lo > 1e-10:
        mid = 0.5 * (lo + hi)
        if dist.cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# -- the error model ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ErrorDist:
    """The predictive distribution of ε = ln(measured / predicted) for one method and shape class: Student's t with
    `dof` degrees of freedom, location `mu` and scale `scale` (both in ln units, ≈ shares of the prediction).
    `n` counts the benchmark rows of this method and class behind it (0: the method's pooled rows only)."""

    method: str
    shape: str
    mu: float
    scale: float
    dof: int
    n: int
    # a contamination component (module docstring, 'Runs unlike the measured ones'): with probability
    # `wide_weight` ε is normal around `mu` with scale `wide_scale` (ln units) instead of the class's t
    wide_weight: float = 0.0
    wide_scale: float = 0.0
    # p_oom only (`oom_dist`): the share q of outcomes the prediction does not explain, each an even chance
    # (module docstring, 'Runs unlike the measured ones'): the CDF is (1 − q)·F + q/2
    unexplained: float = 0.0

    def _wide(self) -> bool:
        return self.wide_weight > 0.0 and self.wide_scale > 0.0

    def cdf(self, eps: float) -> float:
        core = t_cdf((eps - self.mu) / self.scale, self.dof)
        if self._wide():
            w = self.wide_weight
            core = (1.0 - w) * core + w * 0.5 * math.erfc(-(eps - self.mu) / (self.wide_scale * math.sqrt(2.0)))
        q = self.unexplained
        return (1.0 - q) * core + 0.5 * q if q > 0.0 else core

    def quantile(self, p: float) -> float:
        """The `p` quantile of ε. Raises ValueError unless q/2 < p < 1 − q/2 (q: `unexplained`)."""
        if not self._wide() and self.unexplained <= 0.0:
            return self.mu + self.scale * t_quantile(p, self.dof)
        if not 0.5 * self.unexplained < p < 1.0 - 0.5 * self.unexplained:
            raise ValueError(f"a quantile needs {0.5 * self.unexplained:g} < p < {1 - 0.5 * self.unexplained:g}, "
                             f"got {p}")
        return _mixture_quantile(self, p)

    def spread(self) -> float:
        """The error's spread in ln units, as messages state it ("miss by X % either way"): the t's scale, or with a
        contamination component half the width of the mixture's central 68 % (the ±1 sd band of a normal), so the
        broad component's runs are not left out of the words."""
        if not self._wide():
            return self.scale
        return 0.5 * (self.quantile(0.8413447) - self.quantile(0.1586553))

    def logpdf(self, eps: float) -> float:
        """ln of the density of ε at `eps` (per ln unit): the class's t, mixed with the contamination component."""
        core = t_logpdf((eps - self.mu) / self.scale, self.dof) - math.log(self.scale)
        if not self._wide():
            return core
        z = (eps - self.mu) / self.wide_scale
        wide = -0.5 * z * z - math.log(self.wide_scale * math.sqrt(2.0 * math.pi))
        w = self.wide_weight
        return math.log(max((1.0 - w) * math.exp(core) + w * math.exp(wide), 1e-300))

    def kind(self) -> str:
        """The error class in the user's words: "ZeRO-2/3 runs", "ZeRO-2/3 runs with quantized weights" (a class
        keyed by weight storage too, `class_key`; unquantized is the common case and is not named)."""
        shape, _, weights = self.shape.partition("/")
        if shape in ("quantized", "unquantized") and not weights:   # a class keyed by weight storage alone
            return "runs with quantized weights" if shape == "quantized" else "runs whose weights are not quantized"
        words = CLASS_WORDS.get(shape, f"{shape.replace('_', ' ')} runs")
        return words + (" with quantized weights" if weights == "quantized" else "")

    def label(self) -> str:
        """The kind of run and how many measured runs stand behind its error, in the user's words (messages,
        report text): "ZeRO runs: measured on 1 run"."""
        kind = self.kind()
        if not self.n:
            return f"{kind}: none measured, the error of all measured runs"
        return f"{kind}: measured on {self.n} run{'s' if self.n != 1 else ''}"

    def describe(self) -> str:
        rows = f"{self.n} benchmark row{'s' if self.n != 1 else ''}" if self.n else "no rows of its own"
        return (f"{self.method}, shape class {self.shape}: {rows}, bias {100 * self.mu:+.1f} %, "
                f"spread {100 * self.scale:.1f} %")


# the MAD of a normal sample times this estimates its standard deviation (1 / Φ⁻¹(3/4))
MAD_TO_SD = 1.4826


def summarize(values: Iterable[float], robust: bool = False) -> dict[str, float]:
    """Statistics of ε values: n, mean, sample variance (0 for fewer than 2). `robust`: the median for the mean
    and (MAD_TO_SD · median absolute deviation)² for the variance — location and scale that a few runs far off
    (other trainers' rows translated into LLaMA-Factory keys, ε up to ±1.3 on the dev half) do not drag; the
    tails are then the predictive t's (the table's ``max_dof``)."""
    v = list(values)
    n = len(v)
    if robust and n > 1:
        srt = sorted(v)
        med = (srt[(n - 1) // 2] + srt[n // 2]) / 2
        dev = sorted(abs(x - med) for x in v)
        mad = (dev[(n - 1) // 2] + dev[n // 2]) / 2
        return {"n": n, "mean": med, "var": (MAD_TO_SD * mad) ** 2}
    mean = sum(v) / n if n else 0.0
    var = sum((x - mean) ** 2 for x in v) / (n - 1) if n > 1 else 0.0
    return {"n": n, "mean": mean, "var": var}


def derive(rows: Iterable[Mapping[str, Any]], robust: bool = False) -> dict[str, Any]:
    """The table's ``methods`` object from error rows ``{"method", "shape", "eps"}``: per method its pooled
    statistics and those of each shape class (`summarize`, `robust` as there). The benchmark script writes it; the
    benchmarks' leave-one-out checks call it on the other rows."""
    by: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        by.setdefault(str(r["method"]), {}).setdefault(str(r["shape"]), []).append(float(r["eps"]))
    out: dict[str, Any] = {}
    for method, classes in sorted(by.items()):
        out[method] = {"pooled": summarize((e for v in classes.values() for e in v), robust),
                       "classes": {c: summarize(v, robust) for c, v in sorted(classes.items())}}
    return out


def dist_from(methods: Mapping[str, Any], method: str, shape: str, kappa0: float | None = None,
              nu0: int | None = None) -> ErrorDist:
    """The predictive `ErrorDist` of `method` and `shape` from a ``methods`` table (module docstring: the
    normal / scaled-inverse-χ² update of the method's pooled rows by the class's rows, BDA3 §3.3; the pooled
    predictive for a class without rows). `kappa0`, `nu0`: the prior's weights (default: the table's).
    Raises KeyError for a method the table does not hold."""
    k0, v0 = prior() if kappa0 is None or nu0 is None else (float(kappa0), int(nu0))
    m = methods[method]
    pooled = m["pooled"]
    mu0, s0 = float(pooled["mean"]), max(float(pooled["var"]), SIGMA_FLOOR ** 2)
    c = m["classes"].get(shape) or {"n": 0, "mean": 0.0, "var": 0.0}
    n, ybar, s2 = int(c["n"]), float(c["mean"]), float(c["var"])
    if n == 0:
        big_n = max(int(pooled["n"]), 1)
        scale = max(math.sqrt(s0 * (1.0 + 1.0 / big_n)), SIGMA_FLOOR)
        return ErrorDist(method, shape, mu0, scale, max(big_n - 1, 1), 0)
    kn, nun = k0 + n, v0 + n
    mun = (k0 * mu0 + n * ybar) / kn
    var_n = (v0 * s0 + (n - 1) * s2 + (k0 * n / kn) * (ybar - mu0) ** 2) / nun
    scale = max(math.sqrt(var_n * (1.0 + 1.0 / kn)), SIGMA_FLOOR)
    return ErrorDist(method, shape, mun, scale, int(nun), n)


def prior() -> tuple[float, int]:
    """(κ0, ν0) of the table (the derivation script's choice), else the module defaults."""
    p = table().get("prior") or {}
    return float(p.get("kappa0", PRIOR_KAPPA0)), int(p.get("nu0", PRIOR_NU0))


def log_score(rows: list[Mapping[str, Any]], kappa0: float, nu0: int, robust: bool = False) -> float:
    """The leave-one-out log predictive density of ε over `rows` (each left out of the table it is scored by;
    `robust` as `summarize`)."""
    total = 0.0
    for i, r in enumerate(rows):
        others = derive(rows[:i] + rows[i + 1:], robust)
        if str(r["method"]) not in others:
            continue
        d = dist_from(others, str(r["method"]), str(r["shape"]), kappa0, nu0)
        z = (float(r["eps"]) - d.mu) / d.scale
        nu = d.dof
        total += (math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
                  - (nu + 1) / 2 * math.log1p(z * z / nu) - math.log(d.scale))
    return total


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """uncertainty_table.json (regenerated by benchmarks/derive_uncertainty.py)."""
    return json.loads(TABLE.read_text(encoding="utf-8"))


def error_class(shape: str, quantized: bool) -> str:
    """The error class of a run: its shape class and whether its base weights are stored quantized,
    ``"<shape>/quantized"`` or ``"<shape>/unquantized"``. Which parts a method's classes are keyed by is the
    table's ``class_by`` (benchmarks/calibrate.py chooses it by leave-one-source-out on the dev rows); a table
    without one keys every method by the shape class alone."""
    return f"{shape}/{'quantized' if quantized else 'unquantized'}"


def class_key(method: str, cls: str) -> str:
    """The key of error class `cls` (`error_class`, or a bare shape class) in the table's classes of `method`:
    the parts the table's ``class_by`` names for that method (default: the shape class only)."""
    shape, _, weights = cls.partition("/")
    by = (table().get("class_by") or {}).get(method) or ["shape"]
    parts = {"shape": shape, "weights": weights or "unquantized"}
    return "/".join(parts[b] for b in by)


def oom_spread() -> tuple[float, float]:
    """(λ, τ) of the table (``p_oom_scale_factor``, default 1; ``p_oom_extra_scale``, ln units, default 0): how
    p_oom's spread follows from the interval's (module docstring, 'The verdict')."""
    t = table()
    return float(t.get("p_oom_scale_factor") or 1.0), float(t.get("p_oom_extra_scale") or 0.0)


def widened(d: ErrorDist, tau: float, factor: float = 1.0) -> ErrorDist:
    """`d` with its scale s replaced by √((λ·s)² + τ²) for λ = `factor`, τ = `tau`: same location and dof,
    never below `SIGMA_FLOOR`."""
    if tau <= 0 and factor == 1.0:
        return d
    scale = max(math.sqrt((factor * d.scale) ** 2 + tau ** 2), SIGMA_FLOOR)
    return replace(d, scale=scale)


@lru_cache(maxsize=64)
def error_dist(method: str, shape: str) -> ErrorDist:
    """The error distribution of predictions by `method` (analytic | simulated | measured) for runs of `shape`
    (a shape class or an `error_class`); an unknown method is taken as analytic (the widest). A measurement's
    spread does not depend on the run's shape: ``measured`` has one class, ``any``."""
    methods = table()["methods"]
    method = method if method in methods else "analytic"
    d = dist_from(methods, method, ANY if method in SHAPELESS else class_key(method, shape))
    cap = table().get("max_dof")
    if cap and method == "analytic" and d.dof > int(cap):
        # heavier tails than the conjugate update gives (chosen by benchmarks/calib_loso.py on dev): the errors of
        # runs unlike the measured ones are not normal
        d = replace(d, dof=int(cap))
    return contaminated(d, table().get("contamination")) if method == "analytic" else d


def contaminated(d: ErrorDist, spec: Mapping[str, Any] | None) -> ErrorDist:
    """`d` with the table's contamination component (``{"weight", "scale"}``: module docstring, 'Runs unlike the
    measured ones'); unchanged without one."""
    if not spec or float(spec.get("weight") or 0.0) <= 0.0:
        return d
    return replace(d, wide_weight=float(spec["weight"]), wide_scale=float(spec["scale"]))


# -- the verdict ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Assessment:
    """The verdict on one prediction. `p_oom` (all-cause), `p_oom_model` (the memory model's own, which decides
    the verdict; module docstring, 'Two probabilities') and `verdict` are None without a budget (no GPU known);
    `interval_gib` is the central `LEVEL` predictive interval of the peak (GiB); `dist` the error whose quantiles
    made it (`core_dist`: what a message quotes as the interval's bias and spread); `safe_total_gib` the largest
    prediction that keeps p_oom_model ≤ `P_OOM_TARGET` on this budget."""

    verdict: str | None
    p_oom: float | None
    interval_gib: tuple[float, float]
    dist: ErrorDist
    budget_gib: float | None
    safe_total_gib: float | None
    p_oom_model: float | None = None


def p_oom(total_gib: float, budget_gib: float, dist: ErrorDist) -> float:
    """P(the peak exceeds `budget_gib`) for a prediction `total_gib` (GiB); 1.0 for a budget ≤ 0."""
    if budget_gib <= 0 or total_gib <= 0:
        return 1.0 if budget_gib <= 0 else 0.0
    return 1.0 - dist.cdf(math.log(budget_gib / total_gib))


def safe_total(budget_gib: float, dist: ErrorDist, target: float = P_OOM_TARGET) -> float:
    """The largest predicted total (GiB) whose p_oom under `dist` on `budget_gib` is at most `target` (callers pass
    `model_dist`: the target is the memory model's). Raises ValueError when `dist`'s unexplained share q puts
    q/2 at or above `target` (no prediction reaches it)."""
    return budget_gib * math.exp(-dist.quantile(1.0 - target))


def assess(total_gib: float, budget_gib: float | None, method: str, shape: str,
           need_gib: float | None = None) -> Assessment:
    """The verdict (module docstring) on a prediction of `total_gib` per GPU against `budget_gib` (capacity minus
    memory in use; None when no GPU is known), by the error model of `method` and `shape` class.

    `need_gib` is what the run needs to complete (MemoryEstimate.need: the allocator reserve it needs, not the one
    it shows, analyzers/memory/reserve.py 'Shown and needed'); it decides the verdict, p_oom and `safe_total_gib`
    (which is then in the same terms), while the interval stays the one of `total_gib`, the figure measurements of
    reserved memory and nvidia-smi are compared with. None: `total_gib` decides (a prediction that does not say).
    The interval is the core's (`core_dist`); analyzers/memory/predictive.py `assess` reads the verdict and p_oom on
    the one distribution of a run whose class is known (issue #21 session 14)."""
    core = core_dist(method, shape)
    lo = total_gib * math.exp(core.quantile((1.0 - LEVEL) / 2))
    hi = total_gib * math.exp(core.quantile((1.0 + LEVEL) / 2))
    if budget_gib is None:
        return Assessment(None, None, (lo, hi), core, None, None)
    dm = model_dist(method, shape)
    need = total_gib if need_gib is None else need_gib
    pm = p_oom(need, budget_gib, dm)
    # the verdict reads the memory model's own probability, not the all-cause one (module docstring, 'Two
    # probabilities'): the q/2 no memory term sees is not something a fit can be judged on
    verdict = "oom" if need > budget_gib else ("fits" if pm <= P_OOM_TARGET else "at-risk")
    p = p_oom(need, budget_gib, oom_dist(method, shape))
    return Assessment(verdict, p, (lo, hi), core, budget_gib, safe_total(budget_gib, dm), pm)


def core_dist(method: str, shape: str) -> ErrorDist:
    """The error ε of the ONE predictive distribution of the peak (analyzers/memory/predictive.py), whose 5-95 %
    (after the class's widths) is the interval and whose share above the budget is p_oom_model: `model_dist`
    (the spread fitted on outcomes, λ and τ) when the table's ``one_distribution`` says ``{"core": "outcome"}``
    (benchmarks/calibrate.py then fits the class's widths on intervals of that spread), else `error_dist` (the
    spread fitted on measurements, the widths of every table before session 14)."""
    spec = table().get("one_distribution") or {}
    return model_dist(method, shape) if spec.get("core") == "outcome" else error_dist(method, shape)


def oom_dist(method: str, shape: str) -> ErrorDist:
    """The distribution p_oom is taken from: for the analytic method `error_dist` with its scale set by the
    table's λ and τ (`oom_spread`, `widened`), which the calibration chose on outcome rows; the probe methods'
    own as they are."""
    d = model_dist(method, shape)
    return replace(d, unexplained=unexplained_share(d.method)) if d.method == "analytic" else d


def model_dist(method: str, shape: str) -> ErrorDist:
    """The distribution the memory model's own probability p_oom_model is taken from (module docstring, 'Two
    probabilities'): `oom_dist` without the unexplained share (the analytic method's location and scale moved by
    the table's outcome fit, `outcome_shift`, then its scale set by λ and τ; the probe methods' as they are). The verdict, `safe_total` and the remedy planners read it."""
    d = error_dist(method, shape)
    if d.method != "analytic":
        return d
    factor, tau = oom_spread()
    delta, mult = outcome_shift(shape)
    if delta or mult != 1.0:
        d = replace(d, mu=d.mu + delta, scale=max(d.scale * mult, SIGMA_FLOOR))
    return widened(d, tau, factor)


def outcome_shift(shape: str) -> tuple[float, float]:
    """(δ, m) of the table's ``p_oom_shift`` for the analytic error class of `shape` (`class_key`): the location
    δ (ln units) and the scale factor m that p_oom's distribution takes past the one fitted on measurements,
    fitted by maximum likelihood on the dev runs' outcomes as censored observations of ε (a run that trained:
    need·e^ε ≤ budget; one that ran out: above), each class shrunk to the pooled values by its number of sources
    (benchmarks/calib_censored.py `fit_table_shift`, scored by leave-one-round-out there; written only by
    `calibrate.py --outcome-shift`, so the shipped table has none). The class's own values, else the pooled ones,
    else (0, 1) for a table without the field."""
    spec = table().get("p_oom_shift") or {}
    got = (spec.get("classes") or {}).get(class_key("analytic", shape)) or spec.get("pooled") or {}
    return float(got.get("delta") or 0.0), float(got.get("mult") or 1.0)


def unexplained_share(method: str = "analytic") -> float:
    """The share q (0-1) of outcomes the memory prediction does not explain, in p_oom = (1 − q)·p_oom_model + q/2:
    the table's ``p_oom_unexplained`` clamped to [0, `UNEXPLAINED_MAX`] for the analytic method (chosen by
    benchmarks/calib_loso.py on dev); 0 for the probe methods (their error is measured, not fitted on outcomes)."""
    if method != "analytic" and method in METHODS:
        return 0.0
    return min(max(float(table().get("p_oom_unexplained") or 0.0), 0.0), UNEXPLAINED_MAX)


def all_cause(p_model: float, q: float) -> float:
    """The all-cause p_oom (0-1) from the memory model's own probability `p_model` and the unexplained share `q`:
    (1 − q)·p_model + q/2 (module docstring, 'Two probabilities')."""
    return (1.0 - q) * p_model + 0.5 * q


REPORT_KINDS = ("thread", "documentation")


def report_kind(source_type: str | None) -> str:
    """The kind of report a published run comes from (module docstring, 'By kind of report'): ``thread`` for an
    issue thread (a user's run, published because of its outcome), ``documentation`` for a framework's or vendor's
    table."""
    return "thread" if source_type == "issue-thread" else "documentation"


def by_report(p_model: float, kind: str) -> float | None:
    """p_oom (0-1) of a published run of report kind `kind` (`report_kind`) from the memory model's own probability
    `p_model`: a + (1 − a − b)·p_model with the table's ``p_oom_by_report`` shares for that kind (module docstring,
    'By kind of report'); None when the table carries none for it."""
    spec = (table().get("p_oom_by_report") or {}).get(kind)
    if not isinstance(spec, Mapping):
        return None
    a, b = float(spec["oom"]), float(spec["trained"])
    if not (0.0 <= a and 0.0 <= b and a + b < 1.0):
        raise ValueError(f"p_oom_by_report[{kind!r}]: shares {a}, {b} must be >= 0 with a sum under 1")
    return a + (1.0 - a - b) * p_model


# -- open assumptions: a mixture over their alternatives -----------------------------------------------------------
#
# A prediction made under assumptions the doctor could not check (facts/assume.py: sample lengths without the data,
# the card a bare --gpu names, ...) is a mixture: under each combination of the open assumptions' values the peak is
# total_i·e^ε against budget_i, with probability w_i. So p_oom = Σ w_i·P(total_i·e^ε > budget_i) and the interval is
# the central LEVEL interval of the mixture of the shifted peaks (law of total probability; the error ε is the same
# error model for every component). The weight of an assumed value is the table's ``assumption_weights`` (fitted
# on outcome rows by benchmarks/calibrate.py; the rest of the mass is shared evenly by the evaluated alternatives).
# The interval's quantiles are analyzers/memory/predictive.py `mixture_interval`'s, their one home.

DEFAULT_ASSUMED_WEIGHT = 1.0   # a table without weights: the assumed value only, as before the mixture


def assumed_weight(name: str) -> float:
    """The probability (0-1) the table gives the assumed value of assumption `name`: its own entry in
    ``assumption_weights``, else that object's ``default``, else `DEFAULT_ASSUMED_WEIGHT`."""
    w = table().get("assumption_weights") or {}
    v = w.get(name, w.get("default", DEFAULT_ASSUMED_WEIGHT))
    return min(max(float(v), 0.0), 1.0)


def weighs_alternatives(name: str) -> bool:
    """Whether the table gives the alternatives of assumption `name` any weight in the mixture: the sample lengths
    whenever it has a ``sample_lengths_prior``, any other assumption when its assumed value's weight is below 1."""
    if name == "sample-lengths" and lengths_prior() is not None:
        return True
    return assumed_weight(name) < 1.0


def mixture_p_oom(components: Iterable[tuple[float, float, float]], dist: ErrorDist) -> float:
    """Σ w·p_oom(total, budget) over `components` (weight, total GiB, budget GiB), the weights summing to 1."""
    return sum(w * p_oom(t, b, dist) for w, t, b in components)


# -- the sample lengths without the data: a prior on the longest sample ---------------------------------------------
#
# Without the data, the peak micro-batch holds the dataset's longest sample (padded to it, cut at cutoff_len). How
# long that is cannot be learnt from outcomes: issue threads are published because the run ran out (their data is
# long), documentation tables because a standard short dataset trained; fitted on either, the weight learns why the
# row was published (issue 21: "every sample fills cutoff_len" fitted to 1.0 on threads gave p_oom ~1 to runs at a
# framework's default cutoff_len 32768 that trained; fitted on tables' measurements, a 512-token median gives
# p_oom <= 0.1 to threads that ran out). The table's ``sample_lengths_prior`` is therefore chosen by a reason:
# ``{"form": "log-uniform"}`` (the default) is ignorance of the longest sample's scale between the shortest
# evaluated length and cutoff_len — a log-uniform (Jeffreys) prior, so every doubling (512, 1024, ..., and "fills
# cutoff_len", the top doubling) is equally likely; ``{"form": "lognormal", "median_tokens", "log_sd"}`` is kept
# for the calibration's comparison. Each evaluated length n keeps the mass between the next shorter one and n,
# so a length between two evaluated ones counts as the longer (never an under-prediction from the
# discretisation). With at most facts/assume.py SAMPLE_LADDER_STEPS + 1 doublings, every one keeps at least 1/8:
# a run predicted to fit at 512 tokens never gets p_oom >= 0.9 from the lengths alone, nor one predicted out of
# memory at cutoff_len p_oom <= 0.1.

LOG_UNIFORM = "log-uniform"


def t_logpdf(z: float, dof: int) -> float:
    """ln of Student's t density at `z` (standardised) with `dof` degrees of freedom."""
    nu = float(dof)
    return (math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
            - (nu + 1) / 2 * math.log1p(z * z / nu))


def lengths_prior() -> Any:
    """The table's prior on the longest sample: `LOG_UNIFORM`, (median tokens, log-sd) for a lognormal, or None
    (no ``sample_lengths_prior``: the constant ``assumption_weights`` weigh the lengths as any assumption)."""
    p = table().get("sample_lengths_prior")
    if not isinstance(p, Mapping):
        return None
    if p.get("form", LOG_UNIFORM) == LOG_UNIFORM:
        return LOG_UNIFORM
    return float(p["median_tokens"]), float(p["log_sd"])


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def length_weights(lengths: Iterable[int], prior: Any) -> tuple[float, dict[int, float]]:
    """(the assumed value's weight, {evaluated length: weight}) under `prior` (`LOG_UNIFORM`, or (median tokens,
    log-sd) of a lognormal longest sample): length n (ascending) gets P(previous < L ≤ n), the assumed value
    (every sample fills cutoff_len) the rest; log-uniform gives each of them the same share. Empty `lengths`:
    (1.0, {})."""
    ns = sorted(set(int(x) for x in lengths))
    if not ns:
        return 1.0, {}
    if prior == LOG_UNIFORM:
        share = 1.0 / (len(ns) + 1)
        return share, {n: share for n in ns}
    med, sd = prior
    out: dict[int, float] = {}
    below = 0.0
    for n in ns:
        c = _norm_cdf(math.log(n / med) / sd)
        out[n] = max(c - below, 0.0)
        below = c
    return max(1.0 - below, 0.0), out
