"""The interval's widths per class of run, from leave-one-source-out residuals (issue #21, session 11).

What it derives (analyzers/memory/bands.py reads it from the table's ``interval_widths``): per class of run
(bands.run_class), ``below`` and ``above`` in ln units — split-conformal one-sided quantiles at 95 % (the
⌈(n + 1)·0.95⌉-th of the class's n residuals) of how far the dev measurements fell past the lower and the upper end
of their leave-one-source-out interval. A class measured by fewer than `MIN_SOURCES` sources takes the ``pooled``
widths of every class. The two 95 % ends make the 90 % interval: the level is the interval's own.

**Which of four rules.** The page prints the plain and the finite-sample (conformal) quantile, each with every
measurement weighed alike or each source alike, with their LOSO coverage and median width (hi / lo). Said plainly:
the first run used the plain quantile with sources weighed alike (88 %, FSDP 80 %, offload 82 %; a class's tail is
then one source's row, so leaving one source out moved the "single" class's lower width from 0.11 to 0.69 ln
units), and the other three were compared on dev after it. What ships is the textbook rule — split conformal's
finite-sample rank over exchangeable rows (every measurement alike) — and on dev it is the one of the four with LOSO
coverage in 85–95 % overall and in every class (NPU, on the pooled widths, included) at the smallest median width
("sharpness subject to calibration", Gneiting, Balabdaoui & Raftery 2007, JRSS-B 69:243). This is a choice made on
dev; the next held-out round scores it.

**The interval the residuals are taken against** (`base_interval`): the fold's mixture interval over the row's
open assumptions (calib_loso.components) with its upper end at cutoff_len (bands.upper_at_cutoff: unknown sample
lengths widen downward only), and for a measurement whose source does not say what it counted (``unknown``) the
lower end at the allocated counter's share of the total (it may be torch's allocated, reserved or nvidia-smi:
calibrate.compare compares it with the total, the largest).

**Leave-one-source-out of the widths too** (`score_after`): the widths a source S is scored with come from the
residuals of the other sources only; each of those residuals was itself taken against the table fitted without
its own source (calib_loso.fold_fits), a table S's rows helped fit — S's measurements reach its own widths only
through that (the error table is fitted on the rows whose samples reach cutoff_len; a nested refit per pair of
sources, ~160,000 fits, was not run).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

import calib_loso

LEVEL_ONE_SIDED = 0.95   # each end of the central 90 % interval
# the page's comparison (calib_classes.py --after prints all four): the finite-sample rank or the plain quantile;
# every measurement weighed alike (split conformal's exchangeable rows) or each source alike (its tail is one
# source's row per class: leaving one source out moved the "single" class's lower width from 0.11 to 0.69)
CONFORMAL = True
WEIGH_SOURCES = False
MIN_SOURCES = 8


def _full_length_totals(s: dict[str, Any]) -> list[tuple[float, float, Any]] | None:
    """Row `s`'s mixture components (weight, total GiB, None) with its sample lengths at cutoff_len (the
    sample-lengths assumption closed, the others weighed as calib_loso.components weighs them); None for a refused
    row."""
    from finetune_doctor.analyzers.memory.uncertainty import LOG_UNIFORM
    from finetune_doctor.facts.assume import mixture

    p = s["pred"]
    if "error" in p or "mix" not in p:
        return None
    total, hw, assumptions, spec = p["mix"]
    rest = [a for a in assumptions if a.name != "sample-lengths"]
    comps = mixture(total, hw, rest, spec, weight=calib_loso.others_weight, lengths_prior=LOG_UNIFORM)
    return [(w, t, None) for w, t, _b in comps] if comps else None


def base_interval(r: dict[str, Any]) -> tuple[float, float] | None:
    """The interval (GiB, on the total's scale) row `r` (calib_classes.loso_rows) is judged against before its
    class's widths (module docstring); None without a measurement."""
    from finetune_doctor.analyzers.memory.predictive import mixture_interval

    tot = r.get("totals")
    if r.get("inside") is None or not tot:
        return None
    lo, hi = mixture_interval([(w, t, None) for w, t, _b in tot], r["dist"])
    full = _full_length_totals(r)
    if full:
        hi = max(hi, mixture_interval(full, r["dist"])[1])
    c, p = r["cmp"], r["pred"]
    if c and c["kind"] == "unknown" and p.get("total"):
        lo *= min(1.0, float(p.get("peak_allocated") or p["total"]) / p["total"])
    return lo, hi


def residuals(rows: list[dict[str, Any]]) -> None:
    """Add to every measured row its residuals past the lower and the upper end of `base_interval` (``r_lo`` =
    ln(lo / x), ``r_hi`` = ln(x / hi), ln units; positive outside) and that interval (``base``)."""
    for r in rows:
        iv = base_interval(r)
        x = calib_loso.measured_on_total(r) if iv else None
        if not iv or not x:
            continue
        r["base"], r["r_lo"], r["r_hi"] = iv, math.log(iv[0] / x), math.log(x / iv[1])


def weighted_quantile(values: list[tuple[float, float]], q: float) -> float:
    """The `q` quantile of (value, weight) pairs: the smallest value whose cumulative weight reaches q of the
    total."""
    vs = sorted(values)
    total = sum(w for _v, w in vs)
    acc = 0.0
    for v, w in vs:
        acc += w
        if acc >= q * total - 1e-12:
            return v
    return vs[-1][0]


def _widths_of(rs: list[dict[str, Any]], floor: float | None = None) -> dict[str, Any]:
    """{below, above, rows, sources} of the measured rows `rs` (module docstring, 'Widths')."""
    per_src: dict[str, int] = defaultdict(int)
    for r in rs:
        per_src[r["source"]] += 1
    weight = (lambda r: 1.0 / per_src[r["source"]]) if WEIGH_SOURCES else (lambda r: 1.0)
    lo = [(r["r_lo"], weight(r)) for r in rs]
    hi = [(r["r_hi"], weight(r)) for r in rs]
    # split-conformal's finite-sample rank (Vovk, Gammerman & Shafer 2005; Lei et al. 2018, JASA 113:1094, Thm
    # 2.2): the ⌈(n + 1)·0.95⌉-th of n residuals, not the low-biased plain sample quantile (without it: 88 % under
    # LOSO, the page's comparison); the largest residual when n is too small for that rank
    n = len(per_src) if WEIGH_SOURCES else len(rs)
    level = min(1.0, LEVEL_ONE_SIDED * (1.0 + 1.0 / n)) if CONFORMAL else LEVEL_ONE_SIDED
    below, above = weighted_quantile(lo, level), weighted_quantile(hi, level)
    if floor is not None:
        below, above = max(below, floor), max(above, floor)
    return {"below": round(below, 4), "above": round(above, 4), "rows": len(rs), "sources": len(per_src)}


def derive_widths(rows: list[dict[str, Any]], leave_out: str | None = None, floor: float | None = None
                  ) -> dict[str, Any]:
    """``interval_widths`` (module docstring) from the measured rows of `rows` (with `residuals`), leaving out
    source `leave_out`: {"classes": {class: {below, above, rows, sources}}, "pooled": {...}, "level", "min_sources",
    "how"}; ``pooled`` None without a measured row (the table's interval then stays the mixture's). `floor` (ln
    units; None: none) bounds each width from below — the comparison the page prints with 0, bands that only
    widen; what ships has none."""
    rs = [r for r in rows if "r_lo" in r and r["source"] != leave_out]
    out: dict[str, Any] = {"classes": {}, "pooled": _widths_of(rs, floor) if rs else None, "level": LEVEL_ONE_SIDED,
                           "min_sources": MIN_SOURCES,
                           "how": "per class of run, split-conformal 95 % quantiles of the dev "
                                  "measurements' residuals past the lower and the upper end of their "
                                  f"leave-one-{calib_loso.FOLD}-out interval (benchmarks/calib_widths.py)"}
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rs:
        by[r["cls"]].append(r)
    for c, crs in sorted(by.items()):
        if len({r["source"] for r in crs}) >= MIN_SOURCES:
            out["classes"][c] = _widths_of(crs, floor)
    return out


def _mark(r: dict[str, Any], key: str, lo: float, hi: float) -> None:
    x = calib_loso.measured_on_total(r)
    r[key] = lo <= x <= hi
    r.pop(key + "_side", None)   # a rerun under another rule (`rules_lines`) leaves no stale side
    if not r[key]:
        r[key + "_side"] = "below" if x < lo else "above"


def score_after(rows: list[dict[str, Any]]) -> None:
    """Score every measured row with the widths derived without its source (module docstring): ``inside_after``,
    ``inside_after_side`` (below / above) and ``after`` (the interval, GiB); beside it, for the record,
    ``inside_base`` (the interval before any class's widths: cutoff_len's upper end and the counter only) and
    ``inside_widen_only`` (the widths bounded below by 0: bands that never narrow)."""
    from finetune_doctor.analyzers.memory import bands

    residuals(rows)
    cache: dict[tuple[str, bool], dict[str, Any]] = {}
    for r in rows:
        if "r_lo" not in r:
            continue
        src = r["source"]
        for only_widen in (False, True):
            if (src, only_widen) not in cache:
                cache[src, only_widen] = {"interval_widths": derive_widths(rows, src, 0.0 if only_widen else None)}
        lo, hi = bands.widen(r["base"], cache[src, False], r["cls"])
        r["after"] = (lo, hi)
        _mark(r, "inside_after", lo, hi)
        _mark(r, "inside_base", *r["base"])
        _mark(r, "inside_widen_only", *bands.widen(r["base"], cache[src, True], r["cls"]))


def report_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The widths every dev row gives (the table's ``interval_widths`` if fitted now), and the rows still outside."""
    w = derive_widths(rows)
    out = ["## Widths from every dev source (what calibrate.py writes into the table)", "",
           "| class | sources | measurements | below (ln) | above (ln) |", "|---|---|---|---|---|"]
    for c, v in [*sorted(w["classes"].items()), ("pooled (classes with fewer sources)", w["pooled"])]:
        out.append(f"| {c} | {v['sources']} | {v['rows']} | {v['below']:+.3f} | {v['above']:+.3f} |")
    out += ["", "How wide the interval is (median of hi / lo over the class's measurements; the price of the "
            "coverage):", "", "| class | before | base (cutoff's upper end, counter) | after |", "|---|---|---|---|"]
    for c in sorted({r["cls"] for r in rows if "after" in r}) + ["all dev"]:
        rs = [r for r in rows if "after" in r and "before" in r and (c == "all dev" or r["cls"] == c)]
        med = [statistics.median(r[k][1] / r[k][0] for r in rs) for k in ("before", "base", "after")]
        out.append(f"| {c} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} |")
    out += ["", "By what the doctor did not know (LOSO coverage before → base → after; a row counts under every "
            "assumption open for it):", "", "| rows | n | before | base | after |", "|---|---|---|---|---|"]
    meas = [r for r in rows if "after" in r]
    from calib_data import samples_fill

    groups = [("sample lengths open (the source does not size its samples)", lambda r: not samples_fill(r["row"]))]
    groups += [(f"{a} open", lambda r, a=a: a in (r["pred"].get("open") or []))
               for a in ("launcher", "torch-version", "bitsandbytes-version", "image-pixels")]
    groups += [("nothing open but the sample lengths",
                lambda r: not set(r["pred"].get("open") or []) - {"sample-lengths"})]
    groups += [(f"counter {k}", lambda r, k=k: r["cmp"]["kind"] == k)
               for k in ("unknown", "allocated", "reserved", "nvidia-smi", "boundary")]
    for name, f in groups:
        sub = [r for r in meas if f(r)]
        if sub:
            out.append(f"| {name} | {len(sub)} | " + " | ".join(
                f"{statistics.mean(bool(r[k]) for r in sub):.0%}" for k in ("inside", "inside_base", "inside_after"))
                + " |")
    miss = [r for r in rows if r.get("inside_after") is False]
    out += ["", f"Outside the widened interval under LOSO ({len(miss)}):", "",
            "| row | class | counter | measured GiB | interval GiB |", "|---|---|---|---|---|"]
    for r in sorted(miss, key=lambda r: (r["cls"], r["id"])):
        x = calib_loso.measured_on_total(r)
        out.append(f"| {r['id']} | {r['cls']} | {r['cmp']['kind']} | {x:.1f} | {r['after'][0]:.1f}-{r['after'][1]:.1f} |")
    return out


def rules_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The four rules of the module docstring ('Which of four rules') under LOSO: coverage and median width
    (hi / lo) overall and per class; `rows` are left scored with the shipped rule."""
    global CONFORMAL, WEIGH_SOURCES
    shipped = (CONFORMAL, WEIGH_SOURCES)
    classes = sorted({r["cls"] for r in rows if r.get("inside") is not None})
    out = ["| quantile | weighed | all dev: coverage, width | " + " | ".join(classes) + " |",
           "|---|---|---|" + "---|" * len(classes)]
    try:
        for conf in (False, True):
            for by_src in (True, False):
                CONFORMAL, WEIGH_SOURCES = conf, by_src
                score_after(rows)
                m = [r for r in rows if "after" in r]

                def cell(rs: list[dict[str, Any]]) -> str:
                    return (f"{statistics.mean(r['inside_after'] for r in rs):.0%}, "
                            f"{statistics.median(r['after'][1] / r['after'][0] for r in rs):.2f}")
                out.append(f"| {'conformal rank' if conf else 'plain'} | {'each source' if by_src else 'each row'}"
                           f"{' (ships)' if (conf, by_src) == shipped else ''} | {cell(m)} | "
                           + " | ".join(cell([r for r in m if r["cls"] == c]) for c in classes) + " |")
    finally:
        CONFORMAL, WEIGH_SOURCES = shipped
        score_after(rows)
    return out
