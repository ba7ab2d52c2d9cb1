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
p_oom = P(total·e^ε > budget). The verdict is ``oom`` when the prediction itself exceeds the budget (the meaning
of ``fits == False`` is unchanged), ``fits`` when p_oom ≤ `P_OOM_TARGET` (5 %), else ``at-risk``. `interval_gib` is
the central `LEVEL` (90 %) predictive interval of the peak. Remedies aim at p_oom ≤ 5 % (engine/planners.py).

The t distribution's CDF is Abramowitz & Stegun 26.7.3 (odd ν) and 26.7.4 (even ν), exact for integer ν.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

TABLE = Path(__file__).with_name("uncertainty_table.json")
METHODS = ("analytic", "simulated", "measured")
VERDICTS = ("fits", "at-risk", "oom")
SHAPELESS = ("measured",)   # methods whose error is one class for every shape (`ANY`)
ANY = "any"
P_OOM_TARGET = 0.05
LEVEL = 0.90
# the pooled rows of a method count as this many rows of each class: κ0 for the mean, ν0 for the variance; the
# table's "prior" (chosen by benchmarks/derive_uncertainty.py) overrides these defaults
PRIOR_KAPPA0 = 1.0
PRIOR_NU0 = 1
# a prediction is never trusted closer than 1 %. An assumption, not a measurement: the only repeats on the device
# (gpu_measure.csv rows 1 and 2, one configuration on one machine) agree to 0.01 %, which says nothing about other
# machines, drivers or data; the floor keeps a class whose few rows happen to agree from claiming certainty
SIGMA_FLOOR = 0.01


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

    def cdf(self, eps: float) -> float:
        return t_cdf((eps - self.mu) / self.scale, self.dof)

    def quantile(self, p: float) -> float:
        return self.mu + self.scale * t_quantile(p, self.dof)

    def describe(self) -> str:
        rows = f"{self.n} benchmark row{'s' if self.n != 1 else ''}" if self.n else "no rows of its own"
        return (f"{self.method}, shape class {self.shape}: {rows}, bias {100 * self.mu:+.1f} %, "
                f"spread {100 * self.scale:.1f} %")


def summarize(values: Iterable[float]) -> dict[str, float]:
    """Sufficient statistics of ε values: n, mean, sample variance (0 for fewer than 2)."""
    v = list(values)
    n = len(v)
    mean = sum(v) / n if n else 0.0
    var = sum((x - mean) ** 2 for x in v) / (n - 1) if n > 1 else 0.0
    return {"n": n, "mean": mean, "var": var}


def derive(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The table's ``methods`` object from error rows ``{"method", "shape", "eps"}``: per method its pooled
    statistics and those of each shape class (`summarize`). The benchmark script writes it; the benchmarks' leave-
    one-out checks call it on the other rows."""
    by: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        by.setdefault(str(r["method"]), {}).setdefault(str(r["shape"]), []).append(float(r["eps"]))
    out: dict[str, Any] = {}
    for method, classes in sorted(by.items()):
        out[method] = {"pooled": summarize(e for v in classes.values() for e in v),
                       "classes": {c: summarize(v) for c, v in sorted(classes.items())}}
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


def log_score(rows: list[Mapping[str, Any]], kappa0: float, nu0: int) -> float:
    """The leave-one-out log predictive density of ε over `rows` (each left out of the table it is scored by)."""
    total = 0.0
    for i, r in enumerate(rows):
        others = derive(rows[:i] + rows[i + 1:])
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


@lru_cache(maxsize=64)
def error_dist(method: str, shape: str) -> ErrorDist:
    """The error distribution of predictions by `method` (analytic | simulated | measured) for runs of `shape`
    class; an unknown method is taken as analytic (the widest). A measurement's spread does not depend on the
    run's shape: ``measured`` has one class, ``any``."""
    methods = table()["methods"]
    method = method if method in methods else "analytic"
    return dist_from(methods, method, ANY if method in SHAPELESS else shape)


# -- the verdict ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Assessment:
    """The verdict on one prediction. `p_oom` and `verdict` are None without a budget (no GPU known);
    `interval_gib` is the central `LEVEL` predictive interval of the peak (GiB); `safe_total_gib` the largest
    prediction that keeps p_oom ≤ `P_OOM_TARGET` on this budget."""

    verdict: str | None
    p_oom: float | None
    interval_gib: tuple[float, float]
    dist: ErrorDist
    budget_gib: float | None
    safe_total_gib: float | None


def p_oom(total_gib: float, budget_gib: float, dist: ErrorDist) -> float:
    """P(the peak exceeds `budget_gib`) for a prediction `total_gib` (GiB); 1.0 for a budget ≤ 0."""
    if budget_gib <= 0 or total_gib <= 0:
        return 1.0 if budget_gib <= 0 else 0.0
    return 1.0 - dist.cdf(math.log(budget_gib / total_gib))


def safe_total(budget_gib: float, dist: ErrorDist, target: float = P_OOM_TARGET) -> float:
    """The largest predicted total (GiB) whose p_oom on `budget_gib` is at most `target`."""
    return budget_gib * math.exp(-dist.quantile(1.0 - target))


def assess(total_gib: float, budget_gib: float | None, method: str, shape: str) -> Assessment:
    """The verdict (module docstring) on a prediction of `total_gib` per GPU against `budget_gib` (capacity minus
    memory in use; None when no GPU is known), by the error model of `method` and `shape` class."""
    d = error_dist(method, shape)
    lo = total_gib * math.exp(d.quantile((1.0 - LEVEL) / 2))
    hi = total_gib * math.exp(d.quantile((1.0 + LEVEL) / 2))
    if budget_gib is None:
        return Assessment(None, None, (lo, hi), d, None, None)
    p = p_oom(total_gib, budget_gib, d)
    verdict = "oom" if total_gib > budget_gib else ("fits" if p <= P_OOM_TARGET else "at-risk")
    return Assessment(verdict, p, (lo, hi), d, budget_gib, safe_total(budget_gib, d))
