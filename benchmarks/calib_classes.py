#!/usr/bin/env python
"""Leave-one-source-out coverage and Brier per class of run, on the dev rows (issue #21, session 11).

The yardstick for an interval and a probability that generalise to unseen sources: every dev source is scored
with the error table fitted without it (benchmarks/calib_loso.py `fold_fits`/`fold_scores`, the shipped form —
the class key, location estimate, tails, λ, τ and q of finetune_doctor/analyzers/memory/uncertainty_table.json —
is not re-chosen here; the folds are calib_loso.FOLD's, whole rounds since session 12, though the page's title
and columns still say "source"), and the results are broken down by **class of run** (`run_class`: NPU, offload, QLoRA,
ZeRO-3 full, ZeRO-3 LoRA, ZeRO-2 (stage 1 and 2), FSDP, DDP, single; the first that applies, in that order).

Reports, per class and over all dev rows: LOSO coverage of the 90 % interval (measurements), LOSO Brier of the
all-cause p_oom (runs with an outcome and a card), and the runs with the largest squared error with what the
doctor did not know about them (their open assumptions, whether the source states its samples, the counter).

``--after`` also scores the interval as session 11 builds it (analyzers/memory/uncertainty.py
`widen_interval`, `interval_widths` in benchmarks/calib_widths.py): per-class widths from the LOSO residuals of
the *other* sources, the sample lengths widening downward only, and an unknown counter read as any of
allocated / reserved / nvidia-smi.

Usage (CPU, about a minute: each dev row is assembled once, ~35 s)::

    FINETUNE_DOCTOR_NO_NVML=1 HF_HUB_OFFLINE=1 python benchmarks/calib_classes.py [--after] [--cache FILE] [--page FILE]

``--cache FILE`` keeps the assembled rows (a pickle) between runs of the same tree; the page goes to ``--page``
(default benchmarks/results/calib_classes.md).
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import calib_loso  # noqa: E402
from calib_data import load_rows, samples_fill  # noqa: E402

PAGE = ROOT / "benchmarks" / "results" / "calib_classes.md"
CLASSES = ("NPU", "offload", "QLoRA", "ZeRO-3 full", "ZeRO-3 LoRA", "ZeRO-2", "FSDP", "DDP", "single")


def run_class(row: dict[str, Any]) -> str:
    """The class of run a calibration row belongs to, read from the row (module docstring): the first of `CLASSES`
    that applies. The scored rows carry the class the doctor gives the assembled run (analyzers/memory/bands.py
    `run_class`, calibrate.predict ``run_class``), which `loso_rows` uses; this reading stands in for a refused row.
    NPU: an Ascend card or a row whose id says npu; offload: a ZeRO or FSDP offload of optimizer or parameters
    to the CPU/NVMe (calibrate.engine_of); QLoRA: ``quantization_bit`` set; then the engine."""
    from calibrate import engine_of

    gpu, rid = str(row.get("gpu") or "").lower(), str(row.get("id") or "").lower()
    if "ascend" in gpu or "910" in gpu or "npu" in rid:
        return "NPU"
    eng = engine_of(row)
    if eng.endswith("+offload"):
        return "offload"
    if row["config"].get("quantization_bit"):
        return "QLoRA"
    if eng == "ZeRO-3":
        return "ZeRO-3 full" if row["config"].get("finetuning_type") == "full" else "ZeRO-3 LoRA"
    if eng in ("ZeRO-1", "ZeRO-2"):
        return "ZeRO-2"
    if eng == "ZeRO-0":
        return "DDP"
    return eng


def scored_dev(cache: str | None) -> list[dict[str, Any]]:
    """calibrate.score_all over the dev rows (each assembled as `doctor estimate` does), from `cache` when given
    and present; written there after a fresh run."""
    if cache and Path(cache).exists():
        with open(cache, "rb") as fh:
            return pickle.load(fh)
    import calibrate

    scored = calibrate.score_all([r for r in load_rows() if r["split"] == "dev"])
    if cache:
        with open(cache, "wb") as fh:
            pickle.dump(scored, fh)
    return scored


def shipped_variant() -> dict[str, Any]:
    """The form of the shipped table (class key, robust, tails, λ, τ, q) as calib_loso's variant fields."""
    from finetune_doctor.analyzers.memory import uncertainty as u

    t = u.table()
    cont = t.get("contamination") or {}
    return {"class_by": tuple((t.get("class_by") or {}).get("analytic") or ["shape"]), "robust": bool(t.get("robust")),
            "tails": ("wide", (float(cont["weight"]), float(cont["scale"]))) if cont.get("weight")
            else (("cap", int(t["max_dof"])) if t.get("max_dof") else ("t", None)),
            "factor": float(t.get("p_oom_scale_factor") or 1.0), "tau": float(t.get("p_oom_extra_scale") or 0.0),
            "q": float(t.get("p_oom_unexplained") or 0.0),
            # the one distribution (session 14): p_oom read on the interval's distribution, whose core the table names
            "one": True, "core": str((t.get("one_distribution") or {}).get("core") or "measured"),
            "width_floor": (t.get("one_distribution") or {}).get("width_floor")}


def loso_rows(scored: list[dict[str, Any]], v: dict[str, Any]) -> list[dict[str, Any]]:
    """Per dev row, its source's fold (calib_loso.fold_scores) with the variant's p_oom, the fold's interval at
    the row's components and the row's class: {id, source, cls, row, pred, dist, comps, totals, inside, p, y}."""
    from dataclasses import replace

    from finetune_doctor.analyzers.memory.uncertainty import mixture_p_oom, widened

    dev = [{**s, "comps": calib_loso.components(s), "totals": calib_loso.components(s, need=False)} for s in scored]
    kept = __import__("calibrate").kept_rows()
    folds = calib_loso.fold_scores(dev, v["class_by"], kept, robust=v["robust"], tails=v["tails"])
    by_id = {s["row"]["id"]: s for s in dev}
    out = []
    for f in folds:
        s = by_id[f["id"]]
        p = y = None
        if f["outcome"] and f["comps"]:
            p = mixture_p_oom(f["comps"], replace(widened(f["dist"], v["tau"], v["factor"]), unexplained=v["q"]))
            y = 1.0 if f["outcome"] == "oom" else 0.0
        out.append({**f, "cls": s["pred"].get("run_class") or run_class(s["row"]), "row": s["row"], "pred": s["pred"], "totals": s["totals"],
                    "cmp": s["cmp"], "p": p, "y": y})
    return out


def _brier(rs: list[dict[str, Any]]) -> tuple[float, int, int]:
    terms = [(r["p"] - r["y"]) ** 2 for r in rs if r["p"] is not None]
    return (statistics.mean(terms) if terms else math.nan), len(terms), sum(1 for r in rs if r["y"] == 1.0)


def _cover(rs: list[dict[str, Any]], key: str = "inside") -> tuple[float, int, int, int]:
    """(coverage, n, below, above) of the rows' measurements under `key`."""
    m = [r for r in rs if r.get(key) is not None]
    below = sum(1 for r in m if r.get(key + "_side") == "below")
    above = sum(1 for r in m if r.get(key + "_side") == "above")
    return (sum(1 for r in m if r[key]) / len(m) if m else math.nan), len(m), below, above


def mark_sides(rows: list[dict[str, Any]]) -> None:
    """Mark whether a measurement outside the fold's interval lies below or above it (``inside_side``)."""
    from finetune_doctor.analyzers.memory.predictive import mixture_interval

    for r in rows:
        x = calib_loso.measured_on_total(r)
        if r["inside"] is None or x is None:
            continue
        lo, hi = mixture_interval([(w, t, None) for w, t, _b in r["totals"]], r["dist"])
        r["before"] = (lo, hi)
        if not r["inside"]:
            r["inside_side"] = "below" if x < lo else "above"


def class_table(rows: list[dict[str, Any]], keys: tuple[str, ...] = ("inside",)) -> list[str]:
    head = "| class | runs with outcome (OOM) | LOSO Brier |" + "".join(
        f" measurements | LOSO coverage ({k}) | below / above |" for k in keys)
    out = [head, "|" + "---|" * (3 + 3 * len(keys))]
    for c in (*CLASSES, "all dev"):
        rs = rows if c == "all dev" else [r for r in rows if r["cls"] == c]
        b, n, oom = _brier(rs)
        line = f"| {c} | {n} ({oom}) | {b:.3f} |"
        for k in keys:
            cov, m, lo, hi = _cover(rs, k)
            line += f" {m} | {cov:.0%} | {lo} / {hi} |" if m else " 0 | — | — |"
        out.append(line)
    return out


def kind_of_miss(r: dict[str, Any]) -> str:
    """What the doctor did not know about a run, in words: its open assumptions, whether the source states its
    samples, the p_oom of the memory model alone."""
    row, pred = r["row"], r["pred"]
    bits = []
    if not samples_fill(row):
        bits.append("samples from a dataset (lengths unknown)")
    opened = [a for a in pred.get("open") or [] if a != "sample-lengths"]
    if opened:
        bits.append("open: " + ", ".join(opened))
    return "; ".join(bits) or "nothing open"


def brier_lines(rows: list[dict[str, Any]], k: int = 25) -> list[str]:
    rs = sorted((r for r in rows if r["p"] is not None), key=lambda r: -(r["p"] - r["y"]) ** 2)
    total = sum((r["p"] - r["y"]) ** 2 for r in rs)
    out = [f"The {k} dev runs with the largest squared error under LOSO ({sum((r['p'] - r['y']) ** 2 for r in rs[:k]):.1f}"
           f" of the sum {total:.1f} over {len(rs)} runs):", "",
           "| run | class | source type | outcome | LOSO p_oom | (p − y)² | predicted need / budget GiB | what was not known |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rs[:k]:
        row, pred = r["row"], r["pred"]
        need = pred.get("need") or pred.get("total")
        out.append(f"| {r['id']} | {r['cls']} | {row.get('source_type')} | {row.get('outcome')} | {r['p']:.3f} | "
                   f"{(r['p'] - r['y']) ** 2:.2f} | {need:.1f} / {pred.get('capacity') or 0:.1f} | {kind_of_miss(r)} |")
    return out


def brier_parts_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Where the LOSO Brier sum comes from: confident misses either way, the floor q/2 on runs that trained, and
    the runs left in between (module docstring)."""
    rs = [r for r in rows if r["p"] is not None]
    total = sum((r["p"] - r["y"]) ** 2 for r in rs)
    parts = [("ran out at p ≤ 0.15 (the memory model sees it fit)", lambda r: r["y"] == 1 and r["p"] <= 0.15),
             ("trained at p ≥ 0.85", lambda r: r["y"] == 0 and r["p"] >= 0.85),
             ("trained at p ≤ 0.15 (the floor q/2 on right answers)", lambda r: r["y"] == 0 and r["p"] <= 0.15),
             ("ran out at p ≥ 0.85", lambda r: r["y"] == 1 and r["p"] >= 0.85),
             ("0.15 < p < 0.85, sample lengths open", lambda r: 0.15 < r["p"] < 0.85 and not samples_fill(r["row"])),
             ("0.15 < p < 0.85, samples reach cutoff_len", lambda r: 0.15 < r["p"] < 0.85 and samples_fill(r["row"]))]
    out = ["| runs | n | share of the Brier sum | adds to the Brier score |", "|---|---|---|---|"]
    for name, f in parts:
        sub = [r for r in rs if f(r)]
        c = sum((r["p"] - r["y"]) ** 2 for r in sub)
        out.append(f"| {name} | {len(sub)} | {c / total:.0%} | {c / len(rs):.3f} |")
    return out


def q_split(rs: list[dict[str, Any]], q0: float, group: Any) -> float:
    """LOSO Brier with the unexplained share q chosen per `group` of runs on the other sources' runs (grid 0.05-0.4),
    the memory model's own p_oom recovered from the shipped p = (1 − q0)·p_model + q0/2."""
    grid = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
    pm = [min(max((r["p"] - q0 / 2) / (1 - q0), 0.0), 1.0) for r in rs]
    by_src: dict[str, list[int]] = {}
    for i, r in enumerate(rs):
        by_src.setdefault(r["source"], []).append(i)
    groups = {group(r) for r in rs}
    out = []
    for ii in by_src.values():
        held = set(ii)
        qs = {}
        for g in groups:
            sub = [j for j, r in enumerate(rs) if j not in held and group(r) == g]
            qs[g] = min(grid, key=lambda q: sum(((1 - q) * pm[j] + q / 2 - rs[j]["y"]) ** 2 for j in sub)) if sub else q0
        out += [((1 - qs[group(rs[i])]) * pm[i] + qs[group(rs[i])] / 2 - rs[i]["y"]) ** 2 for i in ii]
    return statistics.mean(out)


def recalibration_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Calibration maps tried under LOSO (each source scored with what the other sources choose), none shipped:
    the unexplained share q chosen per group of runs (`q_split`); a logistic map of the memory model's own probability inside the all-cause mix, p = (1 − q)·σ(a + b·logit
    p_model) + q/2 over a grid of (a, b, q); and a shift of ε's location per class of run by the median (each source
    alike) of the other sources' fill-row residuals ε − μ, for classes of at least 5 sources."""
    from dataclasses import replace

    from finetune_doctor.analyzers.memory.uncertainty import mixture_p_oom, widened

    v = shipped_variant()
    rs = [r for r in rows if r["p"] is not None]
    q = v["q"]

    def logit(p: float) -> float:
        p = min(max((p - q / 2) / (1 - q), 1e-6), 1 - 1e-6)
        return math.log(p / (1 - p))

    grid = [(a / 10, b, qq) for a in range(-20, 11, 2) for b in (0.5, 0.7, 0.9, 1.0) for qq in (0.15, 0.2, 0.25)]
    terms = {g: [((1 - g[2]) / (1 + math.exp(-(g[0] + g[1] * logit(r["p"])))) + g[2] / 2 - r["y"]) ** 2 for r in rs]
             for g in grid}
    tot = {g: sum(t) for g, t in terms.items()}
    by_src: dict[str, list[int]] = {}
    for i, r in enumerate(rs):
        by_src.setdefault(r["source"], []).append(i)
    loso = []
    for ii in by_src.values():
        g = min(grid, key=lambda g: tot[g] - sum(terms[g][i] for i in ii))
        loso += [terms[g][i] for i in ii]
    res = [(r["source"], r["cls"], r["cmp"]["eps"] - r["dist"].mu) for r in rows
           if r["cmp"] is not None and r["inside"] is not None and samples_fill(r["row"])]

    def shift(cls: str, leave: str) -> float:
        sub = [(s, e) for s, c, e in res if c == cls and s != leave]
        cnt: dict[str, int] = {}
        for s_, _e in sub:
            cnt[s_] = cnt.get(s_, 0) + 1
        if len(cnt) < 5:
            return 0.0
        vs, acc = sorted((e, 1.0 / cnt[s_]) for s_, e in sub), 0.0
        for e, w in vs:
            acc += w
            if acc >= len(cnt) / 2:
                return e
        return 0.0
    shifted = []
    for r in rs:
        d = replace(widened(r["dist"], v["tau"], v["factor"]), unexplained=q)
        p = mixture_p_oom(r["comps"], replace(d, mu=d.mu + shift(r["cls"], r["source"])))
        shifted.append((p - r["y"]) ** 2)
    base = statistics.mean((r["p"] - r["y"]) ** 2 for r in rs)
    q_lines = [f"- q chosen per group, {name} (each fold on the other sources): {q_split(rs, q, f):.4f}"
               for name, f in (("one group", lambda r: 0),
                               ("by launcher open", lambda r: "launcher" in (r["pred"].get("open") or [])),
                               ("by class of run", lambda r: r["cls"]),
                               ("by one GPU or several", lambda r: r["cls"] in ("single", "QLoRA", "NPU")))]
    return [f"- as shipped: LOSO Brier {base:.4f} over {len(rs)} runs", *q_lines,
            f"- logistic map of p_oom_model (a, b, q chosen per fold on the other sources): {statistics.mean(loso):.4f}",
            f"- ε's location shifted per class of run (other sources' fill-row residuals): "
            f"{statistics.mean(shifted):.4f}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", metavar="FILE")
    ap.add_argument("--page", metavar="FILE", default=str(PAGE))
    ap.add_argument("--after", action="store_true")
    args = ap.parse_args(argv)
    scored = scored_dev(args.cache)
    v = shipped_variant()
    rows = loso_rows(scored, v)
    mark_sides(rows)
    keys = ("inside",)
    if args.after:
        import calib_widths
        calib_widths.score_after(rows)
        keys = ("inside", "inside_base", "inside_after", "inside_widen_only")
    lines = ["# Leave-one-source-out coverage and Brier per class of run (dev rounds 1-6)", "",
             f"`python benchmarks/calib_classes.py{' --after' if args.after else ''}` (module docstring). Shipped "
             f"form, re-fitted per fold: classes keyed by {' × '.join(v['class_by'])}, robust {v['robust']}, tails "
             f"{v['tails']}, λ {v['factor']}, τ {v['tau']}, q {v['q']}. Every number is dev: rounds 1-6, each "
             "source scored with the table fitted without it.", ""]
    if args.after:
        lines += ["Columns: `inside` — the interval as shipped before session 11 (the mixture's); `inside_base` — its "
                  "upper end at cutoff_len (unknown sample lengths widen downward only) and, for a measurement whose "
                  "counter the source does not name, its lower end at the allocated counter's share; "
                  "`inside_after` — that with the class's widths derived without the row's source "
                  "(benchmarks/calib_widths.py: what ships once the table is refitted); `inside_widen_only` — "
                  "the same widths bounded below by 0, for the record. Below / above: measurements under the "
                  "lower end / over the upper end. p_oom (the Brier column) does not change.", ""]
    lines += class_table(rows, keys)
    lines += ["", "## Brier: where the sum comes from, and what calibration can still move", ""]
    lines += brier_parts_lines(rows) + [""] + recalibration_lines(rows)
    lines += [""] + brier_lines(rows)
    if args.after:
        lines += ["", "## The four rules for the widths under LOSO (benchmarks/calib_widths.py, 'Which of four rules'; "
                  "each cell: coverage, median hi / lo)", ""] + calib_widths.rules_lines(rows)
        lines += [""] + calib_widths.report_lines(rows)
    Path(args.page).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(class_table(rows, keys)))
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
