#!/usr/bin/env python
"""The confident misses of the memory model's own probability on dev, grouped by why the model was sure, and each
fix scored by leave-one-round-out (issue #21, session 16; benchmarks/results/calibrate_cal16.md).

A **confident miss** here is read on p_oom_model (pm, the probability the verdict reads; uncertainty.py 'Two
probabilities'), not on the all-cause p_oom, which the unexplained share q keeps inside [q/2, 1 − q/2] and so never
reaches 0.1 or 0.9 at q = 0.25: pm ≥ 0.9 on a run that trained, pm ≤ 0.1 on a run that ran out. Each dev run is
scored as calib_loro.py scores it under round folds (the error table, the prior (κ0, ν0) and the class widths fitted
on the other rounds; the shipped form otherwise), so nothing here is in-sample.

**Why the model was sure** (`kind`), read from the row and from what the doctor assumed for it, first match wins:

* ``outcome partly inferred`` — the collector's notes say the outcome was inferred rather than stated;
* ``far off the memory model`` — the need is under half the budget on a run that ran out, or over twice it on one
  that trained: a cause no memory term sees (another process, a bug of the release, an evaluation pass) or a
  translation of another framework's run that does not hold; no spread short of "anything goes" reaches it;
* ``sample lengths assumed`` — the data were not seen and the sample lengths are open, and one of their evaluated
  alternatives (shorter samples) would put the run's need on the other side of its budget, or the run trained
  although even the shortest evaluated length (facts/assume.py's ladder starts at 512 tokens) is over it;
* ``assumed value taken as read`` — another open assumption (launcher, checkpoint dtype, a version, a build) has an
  evaluated alternative on the other side of the budget;
* ``class spread: CLASS`` — nothing the doctor assumed reaches across the budget: the run's class of error (engine,
  method, card family; analyzers/memory/bands.py `run_class`) is narrower than this run's error.

**Steps** (`STEPS`, each on top of the one before): ``before`` — the rows and the yardstick as main had them;
``ZeRO keys nested`` — calib_data.zero_nested reads a row whose ``deepspeed`` holds the ``zero_optimization`` keys at
its top level (round 11's second collector) as the rows document them, instead of as ZeRO-0; ``scored as reported``
— the open assumptions other than the sample lengths weighed in each scored row's mixture as the report weighs them
(calib_loso.others_weight), not at their assumed value alone.

Usage (CPU; each step's dev rows are assembled once, 15-60 s on the shared machine, kept in ``--cache-dir``)::

    FINETUNE_DOCTOR_NO_NVML=1 HF_HUB_OFFLINE=1 python benchmarks/calib_cal16.py [--cache-dir DIR] [--page FILE]

Dev only: the rows of benchmarks/data/calibration_rows*.yaml whose split is dev; nothing under a held-out folder is
read. Writes benchmarks/results/calibrate_cal16.md (``--page``); changes no table.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import calib_data  # noqa: E402
import calib_loro  # noqa: E402
import calib_loso  # noqa: E402

PAGE = ROOT / "benchmarks" / "results" / "calibrate_cal16.md"
SURE = 0.9   # pm at or above it on a run that trained, or at or under 1 − SURE on one that ran out, is a confident miss


def _as_written(ds: dict[str, Any]) -> dict[str, Any]:
    return ds   # the rows' deepspeed mapping read as it is (the `before` steps)


# name → (nest the ZeRO keys, weigh the other assumptions as the report does)
STEPS: tuple[tuple[str, bool, bool], ...] = (
    ("before", False, False),
    ("ZeRO keys nested", True, False),
    ("scored as reported", True, True),
)


def scored_dev(nest: bool, cache: Path | None) -> list[dict[str, Any]]:
    """calibrate.score_all over the dev rows, the ZeRO keys nested or read as written (`nest`); from `cache` when
    it exists, written there after a fresh run."""
    if cache is not None and cache.exists():
        with open(cache, "rb") as fh:
            return pickle.load(fh)
    import calibrate

    keep = calib_data.zero_nested
    calib_data.zero_nested = keep if nest else _as_written
    try:
        rows = [r for r in calib_data.load_rows() if r["split"] == "dev"]
    finally:
        calib_data.zero_nested = keep
    scored = calibrate.score_all(rows)
    if cache is not None:
        with open(cache, "wb") as fh:
            pickle.dump(scored, fh)
    return scored


def score_step(scored: list[dict[str, Any]], reported: bool) -> list[dict[str, Any]]:
    """The dev rows scored under round folds (calib_loro.score_fold, the shipped form), each with ``pm``
    (p_oom_model: the all-cause p with the unexplained share taken out) where it has an outcome."""
    import calib_classes
    import calibrate

    keep = calib_loso.OTHERS_AT_ASSUMED
    calib_loso.OTHERS_AT_ASSUMED = not reported
    try:
        rows = calib_loro.score_fold(calib_loro.prepared(scored), "round", calib_classes.shipped_variant(),
                                     calibrate.kept_rows())
    finally:
        calib_loso.OTHERS_AT_ASSUMED = keep
    for r in rows:
        r["pm"] = None if r["p"] is None else (r["p"] - r["q"] / 2) / (1 - r["q"])
    return rows


def missed(r: dict[str, Any]) -> bool:
    """Whether scored row `r` is a confident miss of pm (module docstring)."""
    pm = r.get("pm")
    return pm is not None and ((r["y"] == 0 and pm >= SURE) or (r["y"] == 1 and pm <= 1 - SURE))


def inferred(row: dict[str, Any]) -> bool:
    """Whether the collector's notes on `row` say its outcome was inferred (a word about the outcome and one about
    inferring it in the same note)."""
    notes = [str(x) for x in (row.get("unknown") or [])] + [str(row.get("notes") or "")]
    return any("outcome" in n.lower() and "infer" in n.lower() for n in notes)


def crossing(r: dict[str, Any]) -> list[str]:
    """The open assumptions of scored row `r` with an evaluated alternative whose need lies on the other side of
    the row's budget from the outcome the model was sure of (below it for a run sure to run out, above it for one
    sure to fit)."""
    p = r["pred"]
    total, _hw, assumptions, _spec = p["mix"]
    comps = r["comps"] or []
    budget = comps[0][2] if comps else None
    if budget is None or not total:
        return []
    ratio = (p.get("need") or total) / total
    out = []
    for a in assumptions:
        if a.name not in p["open"] or (a.name == "sample-lengths" and calib_data.samples_fill(r["row"])):
            continue
        needs = [v * ratio for v in a.effect_gib.values() if v]
        if (r["y"] == 0 and any(n <= budget for n in needs)) or (r["y"] == 1 and any(n > budget for n in needs)):
            out.append(a.name)
    return out


def kind(r: dict[str, Any]) -> str:
    """Why the model was sure of missed row `r` (module docstring, first match wins)."""
    if inferred(r["row"]):
        return "outcome partly inferred"
    p, comps = r["pred"], r["comps"] or []
    budget = comps[0][2] if comps else None
    need = p.get("need") or p["total"]
    if budget and ((r["y"] == 1 and need < budget / 2) or (r["y"] == 0 and need > 2 * budget)):
        return "far off the memory model"
    names = crossing(r)
    lengths_open = "sample-lengths" in p["open"] and not calib_data.samples_fill(r["row"])
    if "sample-lengths" in names or (r["y"] == 0 and lengths_open):
        return "sample lengths assumed"
    if names:
        return "assumed value taken as read (" + ", ".join(names) + ")"
    return f"class spread: {r['cls']}"


def metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Brier and log score of the all-cause p_oom, coverage of the widened interval, confident misses of pm and
    of p (module docstring), over scored rows `rows`."""
    sc = calib_loro.scores(rows)
    out = [r for r in rows if r["p"] is not None]
    return {**sc, "pm_trained": [r["id"] for r in out if r["y"] == 0 and r["pm"] >= SURE],
            "pm_oom": [r["id"] for r in out if r["y"] == 1 and r["pm"] <= 1 - SURE],
            "brier_se": (statistics.stdev((r["p"] - r["y"]) ** 2 for r in out) / math.sqrt(len(out))
                         if len(out) > 1 else math.nan)}


# the extra spread (ln units) per open assumption tried for the record (`per_assumption`); 0 is the shipped form
TAUS = (0.0, 0.03, 0.05, 0.1)


def per_assumption(rows: list[dict[str, Any]], tau: float, unevaluated: bool) -> list[dict[str, Any]]:
    """Rows `rows` (score_step, round folds) rescored with the error's scale widened by τ·√n, n the row's open
    assumptions (facts/assume.py: every one not in NOT_OPEN; `unevaluated`: only those whose alternatives were not
    evaluated, so the mixture does not already carry them): scale' = √(scale² + n·τ²) (uncertainty.py `widened`).
    The class widths stay the ones each fold fitted without the extra spread, so the interval and pm move by the
    extra spread alone. An experiment: nothing here is shipped."""
    from finetune_doctor.analyzers.memory import bands
    from finetune_doctor.analyzers.memory.uncertainty import widened
    from finetune_doctor.facts.assume import NOT_OPEN

    import calib_widths

    widths: dict[Any, dict[str, Any]] = {}
    for k in sorted({r["fold"] for r in rows}, key=str):
        train = [o for o in rows if "r_lo" in o and calib_loro.in_training("round", k, o["row"])]
        widths[k] = {"interval_widths": calib_widths.derive_widths(train, floor=0.0)} if train else {}
    out = []
    for r in rows:
        n = sum(1 for a in r["pred"]["mix"][2] if a.name not in NOT_OPEN and not (unevaluated and a.effect_gib))
        o = {**r, "dist": widened(r["dist"], tau * math.sqrt(n), 1.0) if tau and n else r["dist"]}
        if o["p"] is not None:
            pm = calib_loro.one_p_model(o, widths[r["fold"]])
            o["pm"], o["p"] = pm, (1 - r["q"]) * pm + r["q"] / 2
        if "r_lo" in r:
            base = calib_widths.base_interval(o)
            lo, hi = bands.widen(base, widths[r["fold"]], r["cls"])
            x = calib_loso.measured_on_total(r)
            o["inside_after"] = lo <= x <= hi
            o["inside_after_side"] = None if o["inside_after"] else ("below" if x < lo else "above")
        out.append(o)
    return out


def experiment_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| extra spread per open assumption | LORO Brier | log score | coverage | pm ≥ 0.9 trained / pm ≤ 0.1 OOM |",
           "|---|---|---|---|---|"]
    for unevaluated in (False, True):
        for tau in TAUS:
            m = metrics(per_assumption(rows, tau, unevaluated))
            which = "unevaluated ones" if unevaluated else "every open one"
            out.append(f"| τ = {tau:g}, {which} | {m['brier']:.4f} | {m['log_outc']:.4f} | "
                       f"{100 * m['cover']:.1f} % ({m['below']}↓ {m['above']}↑) | {len(m['pm_trained'])} / "
                       f"{len(m['pm_oom'])} |")
    return out


def step_line(name: str, m: dict[str, Any]) -> str:
    return (f"| {name} | {m['brier']:.4f} ± {m['brier_se']:.4f} ({m['n']}, {m['oom']} OOM) | {m['log_outc']:.3f} | "
            f"{100 * m['cover']:.1f} % of {m['m']} ({m['below']}↓ {m['above']}↑) | {len(m['pm_trained'])} / "
            f"{len(m['pm_oom'])} | {len(m['sure_trained'])} / {len(m['sure_oom'])} |")


def round_lines(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """Per dev round: Brier, coverage and pm misses before → after."""
    out = ["| round | runs (OOM) | Brier before → after | coverage before → after | pm ≥ 0.9 trained / "
           "pm ≤ 0.1 OOM, before → after |", "|---|---|---|---|---|"]
    for rd in sorted({r["round"] for r in after}):
        b = metrics([r for r in before if r["round"] == rd])
        a = metrics([r for r in after if r["round"] == rd])
        out.append(f"| {rd} | {a['n']} ({a['oom']}) | {b['brier']:.3f} → {a['brier']:.3f} | "
                   f"{_pct(b['cover'])} → {_pct(a['cover'])} | {len(b['pm_trained'])} / {len(b['pm_oom'])} → "
                   f"{len(a['pm_trained'])} / {len(a['pm_oom'])} |")
    return out


def _pct(x: float) -> str:
    return "—" if x != x else f"{100 * x:.0f} %"


def kind_lines(rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str] = kind) -> list[str]:
    """The confident misses of `rows` grouped by `label`: count by direction and the ids with pm, need, budget."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if missed(r):
            groups[label(r)].append(r)
    out = ["| why the model was sure | trained at pm ≥ 0.9 | ran out at pm ≤ 0.1 | runs (pm; need / budget GiB) |",
           "|---|---|---|---|"]
    for k, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        c = Counter(int(r["y"]) for r in rs)
        ids = "; ".join(f"{r['id']} ({r['pm']:.2f}; {_need(r)})" for r in sorted(rs, key=lambda r: r["id"]))
        out.append(f"| {k} | {c[0]} | {c[1]} | {ids} |")
    return out


def _need(r: dict[str, Any]) -> str:
    p, comps = r["pred"], r["comps"] or []
    budget = comps[0][2] if comps else None
    return f"{p.get('need') or p['total']:.1f} / {budget:.1f}" if budget else f"{p['total']:.1f} / ?"


# what the tables below say, checked against them when the page was last written (session 16)
WORDS = [
    "## What the misses were, and what was the doctor's (or its yardstick's) fault", "",
    "- **A translation that dropped the engine** (all 5 of round 11's trained runs at pm ≥ 0.9: *class spread: DDP* (4) and "
    "*single* (1) before). Round 11's second collector wrote the `zero_optimization` keys at the top level of a row's "
    "`deepspeed`; calibrate.py read only the nested form and wrote LLaMA-Factory's ZeRO-0 stock file for nine "
    "ZeRO-2/3 runs, offloaded ones among them, so a 7B full run with ZeRO-3 offload that trained on two 4090s was "
    "sized at 162 GiB per card. calib_data.load_rows now nests them (`zero_nested`) in every file it reads, a held-out "
    "one passed to it included. Round 11's LORO Brier 0.238 → 0.130.",
    "- **An assumed value scored as if read** (r4m-unsloth-mistral-nemo-12b-alpaca: an old unsloth build assumed, "
    "30.5 GiB on a 14.75 GiB card, the current build's 11.2 GiB as the alternative). The report mixes every open "
    "assumption's evaluated alternatives under the table's weights (facts/assume.py `mixture`), but the "
    "leave-one-round-out and leave-one-source-out yardsticks scored the assumed value alone: they scored a "
    "narrower distribution than the one printed. calib_loso.components (and calib_widths' full-length upper end) now "
    "weigh them as the report does (`others_weight`); test_calibration_rows_zero pins it.",
    "- **Sample lengths.** With the data unseen the mixture already spreads the run over the log-uniform ladder of "
    "lengths (512 tokens to cutoff_len); one trained run stays sure (r4r-3052-a100-40g: even 512-token samples "
    "need 51 GiB of a 39.4 GiB budget, so its data were shorter than the ladder's floor or the run differs).",
    "- **Far off the memory model** (24 of the 42 left; 23 ran out with a need under half their budget). No spread "
    "of the peak short of \"anything goes\" reaches them: another process, a release's bug, an evaluation pass, or "
    "a translation that does not hold. They are what the unexplained share q carries in the all-cause p_oom, which "
    "never goes under q/2 = 0.125 for them; the verdict's pm cannot, by design (uncertainty.py 'Two "
    "probabilities').",
    "- **Class spread** (the 17 others, one to four per class): runs within a factor of two of their budget that "
    "the class's error, widths included, puts past 0.9 or under 0.1.",
    "",
    "**Widening with each open assumption.** Every open assumption whose alternatives were evaluated already widens "
    "the distribution, as a mixture component with its own total. A further spread per open assumption "
    "(last table) trades confident misses for calibration: τ = 0.05 per assumption removes 5 of the 8 trained "
    "misses and 2 of the 34 OOM ones, and costs Brier +0.0007 and log score −0.002; both scores get worse with "
    "every τ > 0 tried, so it is not shipped. The integrator's refit (calibrate.py --write-table) "
    "is unchanged by this page; the two fixes above change what it is fitted on.",
    "",
    "In-sample, for comparison: `benchmarks/calib_misses.py` (the shipped table fitted on all dev rows, each row "
    "as calibrate.py scores it, now on pm) lists 6 trained runs at pm ≥ 0.9 and 32 OOM runs at pm ≤ 0.1 after "
    "both fixes (session 16). The refit on rounds 1-11 with both fixes (`calibrate.py --dev-only`, nothing "
    "written; the integrator refits at scoring) chose q = 0.2 (0.25 before), the assumed value's weight 0.6 (0.75) "
    "and the same error form, and scores in-sample Brier 0.140 (0.147 before) with 94 % of 469 measurements inside "
    "the interval (94 %); its form's leave-one-round-out on the rows with known lengths: Brier 0.143, log score "
    "−0.664, coverage 88.3 %.",
]


def page(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    names = list(results)
    first, last = results[names[0]], results[names[-1]]
    lines = ["# Confident misses by kind, and what fixed them (issue #21, session 16)", "",
             "`FINETUNE_DOCTOR_NO_NVML=1 HF_HUB_OFFLINE=1 python benchmarks/calib_cal16.py` (module docstring). Every "
             "number is dev (rounds 1-11 of benchmarks/data/calibration_rows*.yaml) scored by leave-one-round-out: the "
             "error table, its prior and the class widths fitted on the other rounds, the shipped form otherwise "
             "(calib_loro.py `score_fold`). No table is refitted or written.", "",
             "Brier and log score are the all-cause p_oom's (q = 0.25 keeps it in [0.125, 0.875]); the confident "
             "misses are read on p_oom_model (pm = (p − q/2)/(1 − q), what the verdict reads) and, for the record, on "
             "p. Coverage is the 90 % interval's over the measurements (↓ below, ↑ above). ± is one standard error "
             "of the mean.", "",
             "| step (each on top of the one above) | LORO Brier (runs, OOM) | log score | coverage | pm ≥ 0.9 trained "
             "/ pm ≤ 0.1 OOM | p ≥ 0.9 trained / p ≤ 0.1 OOM |", "|---|---|---|---|---|---|"]
    lines += [step_line(n, metrics(results[n])) for n in names]
    lines += ["", f"## Per round, {names[0]} → {names[-1]}", "", *round_lines(first, last), "",
              f"## The confident misses by kind, {names[0]}", "", *kind_lines(first), "",
              f"## The confident misses by kind, {names[-1]}", "", *kind_lines(last), "",
              "## Tried and not shipped: a spread that grows with the number of open assumptions", "",
              f"On {names[-1]}, the error's scale widened by τ·√n (n the row's open assumptions; `per_assumption`), "
              "the fold's class widths kept:", "", *experiment_lines(last), "", *WORDS]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", metavar="DIR", help="keep each step's assembled dev rows here")
    ap.add_argument("--page", metavar="FILE", default=str(PAGE))
    args = ap.parse_args(argv)
    cache = Path(args.cache_dir) if args.cache_dir else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {}
    for name, nest, reported in STEPS:
        scored = scored_dev(nest, cache / f"dev_nest{int(nest)}.pkl" if cache is not None else None)
        results[name] = score_step(scored, reported)
        print(step_line(name, metrics(results[name])), flush=True)
    lines = page(results)
    Path(args.page).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
