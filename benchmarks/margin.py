#!/usr/bin/env python
"""Verdicts at the margin: fits / at-risk / oom with the probability of OOM, against what happened, next to the
verdicts of the flat reserve and of the shape-class reserve without an error model.

Three sets, each scored by the Brier score (mean of (p − outcome)², outcome 1 for OOM; a hard verdict counts as
p = 0 or 1) and by the verdicts' counts:

1. **Benchmark rows on cards near their peak.** Each published and device row (benchmarks/results/
   uncertainty_rows.csv: a prediction and the peak measured for it) is asked "does it fit on card C?" for every
   NVIDIA card of the catalog whose usable capacity C lies within 10 % of the measured peak (distinct capacities
   only); the outcome is measured > C. The error model is derived leave-one-out: without the row itself, so the
   row never scores a model fitted on it. Flat: the tensor peak × 1.08 (1.05 with expandable segments) + runtime,
   the reserve the estimate used before benchmarks/derive_reserve.py (analyzers/memory/constants.py).
2. **The real cases** (benchmarks/case_outcomes.py's OUTCOMES, laid out as tests/casekit.py does, with the GPUs of
   fixtures/cases/expected.yaml) whose predicted total lies within 10 % of the card's capacity.
3. **Held-out reports** (fixtures/margin_holdout): five real threads where the doctor predicted a fit with
   0.2–2.6 % to spare and the run ran out. Not used to derive anything; reported as they come out.

Run: python benchmarks/margin.py → prints the tables and writes benchmarks/results/margin.md.
"""

from __future__ import annotations

import csv
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")

ROWS = HERE / "results" / "uncertainty_rows.csv"
OUT = HERE / "results" / "margin.md"
HOLDOUT = ROOT / "fixtures" / "margin_holdout"
NEAR = 0.10
FLAT = {"off": 0.08, "on": 0.05}   # RESERVE_DEFAULT / RESERVE_EXPANDABLE, the former flat reserve


def brier(pairs: list[tuple[float, int]]) -> float:
    return statistics.mean((p - y) ** 2 for p, y in pairs) if pairs else float("nan")


def cards() -> list[tuple[str, float]]:
    """(name, usable GiB) of the catalog's NVIDIA cards, one per distinct capacity (to 0.1 GiB)."""
    from finetune_doctor.hardware.catalog import catalog

    seen, out = set(), []
    for g in catalog():
        key = round(g.capacity_gib, 1)
        if g.vendor == "nvidia" and key not in seen:
            seen.add(key)
            out.append((g.name, g.capacity_gib))
    return out


def row_questions() -> list[dict]:
    """Set 1: every benchmark row × card near its measured peak, scored leave-one-out."""
    from finetune_doctor.analyzers.memory.uncertainty import P_OOM_TARGET, derive, dist_from, p_oom

    rows = list(csv.DictReader(open(ROWS, encoding="utf-8")))
    out = []
    for i, r in enumerate(rows):
        if r["method"] not in ("analytic", "simulated"):
            continue
        others = derive(rows[:i] + rows[i + 1:])
        d = dist_from(others, r["method"], r["shape"])
        m, pred = float(r["measured_gib"]), float(r["predicted_gib"])
        flat = None
        if r["method"] == "analytic" and r.get("peak_allocated_gib"):
            share = FLAT["on" if int(r["world"] or 1) > 1 else "off"]
            flat = float(r["peak_allocated_gib"]) * (1 + share) + float(r["runtime_gib"])
        for name, cap in cards():
            if abs(m / cap - 1) > NEAR:
                continue
            p = p_oom(pred, cap, d)
            verdict = "oom" if pred > cap else ("fits" if p <= P_OOM_TARGET else "at-risk")
            out.append({"row": r["id"], "method": r["method"], "shape": r["shape"], "card": name, "cap": cap,
                        "measured": m, "pred": pred, "flat": flat, "y": int(m > cap), "p": p, "verdict": verdict})
    return out


def _check(cfg: Path, gpu: str | None, overrides: list[str], torch: str | None, transformers: str | None,
           nnodes: int | None = None):
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    opts = Options(command="check", paths=(str(cfg),), gpu=gpu, nnodes=nnodes, torch_version=torch,
                   transformers_version=transformers)
    return assemble_config(str(cfg), tuple(overrides), opts)


def _verdicts(asm) -> dict | None:
    m, hw = asm.memory, asm.hw
    if m is None or hw is None or not hw.capacity_gib:
        return None
    share = FLAT["on" if asm.run.world_size > 1 else "off"]
    flat = m.peak_allocated * (1 + share) + m.details["runtime_gib"]
    cap = hw.capacity_gib - (max(hw.in_use_gib) if hw.in_use_gib else 0.0)
    return {"cap": cap, "total": m.total, "flat": flat, "verdict": m.verdict, "p": m.p_oom,
            "interval": m.interval_gib, "shape": m.details.get("reserve_class"), "gpu": hw.gpu}


def case_questions() -> list[dict]:
    """Set 2: the real cases with a known outcome."""
    from case_outcomes import OUTCOMES
    from casekit import CASES, lay_out
    from ruamel.yaml import YAML

    from finetune_doctor.errors import InputError

    expected = YAML(typ="safe").load((CASES / "expected.yaml").read_text())
    out = []
    for case, (actual, why) in OUTCOMES.items():
        exp = expected[case]
        with tempfile.TemporaryDirectory() as t:
            cfg = lay_out(case, Path(t))
            cwd = os.getcwd()
            os.chdir(t)
            try:
                v = _verdicts(_check(cfg, str(exp["gpu"]) if exp.get("gpu") else None, exp.get("overrides", []),
                                     exp.get("torch"), exp.get("transformers"), exp.get("nnodes")))
            except InputError:
                v = None
            finally:
                os.chdir(cwd)
        if v is not None:
            out.append({"case": case, "y": int(actual == "oom"), "why": why, **v})
    return out


def holdout_questions() -> list[dict]:
    """Set 3: the held-out reports."""
    from casekit import lay_out
    from ruamel.yaml import YAML

    expected = YAML(typ="safe").load((HOLDOUT / "expected.yaml").read_text())
    out = []
    for case, exp in expected.items():
        with tempfile.TemporaryDirectory() as t:
            cfg = lay_out(case, Path(t), HOLDOUT)
            cwd = os.getcwd()
            os.chdir(t)
            try:
                v = _verdicts(_check(cfg, exp["gpu"], exp.get("overrides", []), exp.get("torch"),
                                     exp.get("transformers")))
            finally:
                os.chdir(cwd)
        text = (HOLDOUT / case / "case.md").read_text(encoding="utf-8")
        src = re.search(r"\*\*Source\*\*: (\S+)", text)
        out.append({"case": case, "y": int(exp["outcome"] == "oom"), "source": src.group(1) if src else "", **v})
    return out


def _hard(pred: float | None, cap: float) -> float | None:
    return None if pred is None else float(pred > cap)


def _score_lines(qs: list[dict], flat_key: str, class_key: str) -> list[str]:
    with_flat = [q for q in qs if q.get(flat_key) is not None]
    lines = ["| verdicts of | questions | Brier score | said fits, ran out | said oom/at-risk, fit |", "|---|---|---|---|---|"]
    for label, sub, fn in (
            ("flat reserve (8 % / 5 %), hard", with_flat, lambda q: _hard(q[flat_key], q["cap"])),
            ("shape-class reserve, hard (before the error model)", qs, lambda q: _hard(q[class_key], q["cap"])),
            ("error model: p_oom", qs, lambda q: q["p"])):
        if not sub:
            continue
        ps = [(fn(q), q["y"]) for q in sub]
        if label.startswith("error"):
            missed = sum(1 for q in sub if q["verdict"] == "fits" and q["y"])
            false = sum(1 for q in sub if q["verdict"] != "fits" and not q["y"])
        else:
            missed = sum(1 for p, y in ps if p == 0 and y)
            false = sum(1 for p, y in ps if p == 1 and not y)
        lines.append(f"| {label} | {len(sub)} | {brier(ps):.3f} | {missed} | {false} |")
    return lines


def _pct(p: float) -> str:
    return f"{100 * p:.1f} %"


def coverage() -> list[str]:
    """Leave-one-out coverage of the 90 % interval over the benchmark rows, per method (derive_uncertainty.loo)."""
    from derive_uncertainty import loo

    from finetune_doctor.analyzers.memory.uncertainty import prior

    rows = [{**r, "eps": float(r["eps"])} for r in csv.DictReader(open(ROWS, encoding="utf-8"))]
    checks = loo(rows, *prior())
    lines = ["| method | rows | measured peak inside its 90 % interval |", "|---|---|---|"]
    for method in ("analytic", "simulated", "measured"):
        ch = [c for c in checks if c["method"] == method]
        if ch:
            k = sum(c["inside"] for c in ch)
            lines.append(f"| {method} | {len(ch)} | {k}/{len(ch)} = {k / len(ch):.0%} |")
    return lines


def report(rq: list[dict], cq: list[dict], hq: list[dict]) -> str:
    near = [q for q in cq if abs(q["total"] / q["cap"] - 1) <= NEAR or abs(q["flat"] / q["cap"] - 1) <= NEAR]
    lines = ["# Verdicts at the margin: fits / at-risk / oom and the probability of OOM", "",
             f"{time.strftime('%Y-%m-%d')}; `python benchmarks/margin.py`. Brier score = mean (p − outcome)², outcome "
             "1 when the run ran out of memory; a hard verdict counts as p = 0 (fits) or 1 (oom), so the Brier score of "
             "a hard verdict is its error rate. The error model (analyzers/memory/uncertainty.py) gives p_oom; its verdict "
             "is `oom` when the prediction exceeds the card, `fits` when p_oom ≤ 5 %, else `at-risk`.", "",
             "## 1. Benchmark rows on every card within 10 % of their measured peak", "",
             "Each row of benchmarks/results/uncertainty_rows.csv (published and device measurements) against each "
             "catalog card whose usable capacity is within 10 % of the measured peak; outcome = measured peak > "
             "capacity. The error model is derived without the row (leave-one-out).", ""]
    for method in ("analytic", "simulated"):
        sub = [q for q in rq if q["method"] == method]
        if not sub:
            continue
        lines += [f"**{method}** ({len({q['row'] for q in sub})} rows, {len(sub)} row × card questions, "
                  f"{sum(q['y'] for q in sub)} of them OOM):", ""]
        lines += _score_lines(sub, "flat", "pred") + [""]
        counts = {v: (sum(1 for q in sub if q["verdict"] == v), sum(q["y"] for q in sub if q["verdict"] == v))
                  for v in ("fits", "at-risk", "oom")}
        lines.append("verdict → share that ran out: " + "; ".join(
            f"{v} {n} ({k}/{n} = {k / n:.0%} OOM)" if n else f"{v} 0" for v, (n, k) in counts.items()) + ".")
        lines.append("")
    lines += ["Interval coverage, leave-one-out over the rows themselves (calibrated: 90 %):", "", *coverage(), ""]
    lines += ["## 2. Real cases within 10 % of their card", "",
              f"The cases of benchmarks/case_outcomes.py that can be sized ({len(cq)}); these {len(near)} have the "
              "prediction (shape-class or flat reserve) within 10 % of the card's capacity.", ""]
    lines += _score_lines(near, "flat", "total") + [""]
    lines += ["| case | GPUs | reported | flat total | flat verdict | class total | verdict | p_oom | 90 % interval | "
              "shape class |", "|---|---|---|---|---|---|---|---|---|---|"]
    for q in near:
        lines.append(f"| {q['case']} | {q['gpu']} | {'oom' if q['y'] else 'fits'} | {q['flat']:.1f} / {q['cap']:.1f} | "
                     f"{'oom' if q['flat'] > q['cap'] else 'fits'} | {q['total']:.1f} | {q['verdict']} | "
                     f"{_pct(q['p'])} | {q['interval'][0]:.1f}–{q['interval'][1]:.1f} | {q['shape']} |")
    lines += ["", f"All {len(cq)} sized cases: Brier " + ", ".join(
        f"{label} {brier([(fn(q), q['y']) for q in cq]):.3f}" for label, fn in (
            ("flat", lambda q: _hard(q["flat"], q["cap"])), ("shape-class", lambda q: _hard(q["total"], q["cap"])),
            ("error model", lambda q: q["p"]))) + ".", "",
              "## 3. Held-out reports (fixtures/margin_holdout)", "",
              "Not used to derive the error model. Each ran out of memory.", "",
              "| case | source | GPUs | predicted / usable | headroom | flat verdict | verdict | p_oom | 90 % interval | "
              "shape class |", "|---|---|---|---|---|---|---|---|---|---|"]
    for q in hq:
        lines.append(f"| {q['case']} | {q['source']} | {q['gpu']} | {q['total']:.2f} / {q['cap']:.2f} | "
                     f"{_pct(1 - q['total'] / q['cap'])} | {'oom' if q['flat'] > q['cap'] else 'fits'} | "
                     f"{q['verdict']} | {_pct(q['p'])} | {q['interval'][0]:.1f}–{q['interval'][1]:.1f} | {q['shape']} |")
    ok = all(not (q["verdict"] == "fits" and q["p"] < 0.05) for q in hq)
    lines += ["", f"Held-out Brier: flat {brier([(_hard(q['flat'], q['cap']), q['y']) for q in hq]):.3f}, "
                  f"shape-class {brier([(_hard(q['total'], q['cap']), q['y']) for q in hq]):.3f}, error model "
                  f"{brier([(q['p'], q['y']) for q in hq]):.3f}. None says `fits` with p_oom under 5 %: "
                  f"{'yes' if ok else 'NO'}.", "",
              "## Reproduce", "", "    python benchmarks/derive_uncertainty.py --reuse-simulated   # the rows",
              "    python benchmarks/margin.py                                  # ~1 min, CPU only"]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = report(row_questions(), case_questions(), holdout_questions())
    print(text)
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
