#!/usr/bin/env python
"""Derive the error model of the memory prediction (analyzers/memory/uncertainty.py) from the benchmark rows; write it.

Since the held-out calibration (benchmarks/calibrate.py, issue #21 item 5) the committed table's ``analytic`` rows
are the dev half of benchmarks/data/calibration_rows.yaml, fitted by that script, which keeps this script's
``simulated`` and ``measured`` rows. Running this script rewrites the table from the rows below instead; run
benchmarks/calibrate.py after it to restore the held-out fit.

Rows, each one prediction against one measurement of the peak device memory per GPU, ε = ln(measured / predicted):

* published: the rows of reference/memory/memory_points_dev.csv that benchmarks/memory_accuracy.py expresses as a
  LLaMA-Factory run (same `to_config`), estimated on A100-80GB cards as that benchmark does; rows published twice
  (the same model, method, length, GPUs and stage within 1 % of each other) count once. Method ``analytic``.
* device: the 14 rows of benchmarks/results/gpu_measure.csv (1 × H200, torch 2.11, default allocator settings;
  measured = device usage, ``mem_get_info`` total − free), resolved as benchmarks/allocator_replay.py resolves
  them (the rows whose GPU run skipped checkpointing are predicted without it). Method ``analytic``: the estimate
  on an H200; method ``simulated``: the simulate probe's trace (probe depth, 2 steps) replayed through the
  allocator model with the default settings (probes/replayed.py, what ``doctor probe`` reports).
* measured: device rows of one configuration as run measured more than once, each against their mean.

Each row's shape class is analyzers/memory/reserve.py `shape_class` of its run. The table keeps per method the pooled
statistics and those of each class (`uncertainty.derive`); the predictive distributions follow from them at run
time (`uncertainty.dist_from`). The results page adds the leave-one-out check: every row's 90 % interval and
p(measured > predicted) from a table derived without that row.

Usage::

    python benchmarks/derive_uncertainty.py                 # all rows (simulates the 14 device rows, ~5 min)
    python benchmarks/derive_uncertainty.py --reuse-simulated   # keep the simulated rows of the rows file
    python benchmarks/derive_uncertainty.py --no-write

Writes finetune_doctor/analyzers/memory/uncertainty_table.json, benchmarks/results/uncertainty_rows.csv and
benchmarks/results/uncertainty_derivation.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
TABLE = ROOT / "finetune_doctor" / "analyzers" / "memory" / "uncertainty_table.json"
ROWS = ROOT / "benchmarks" / "results" / "uncertainty_rows.csv"
DOC = ROOT / "benchmarks" / "results" / "uncertainty_derivation.md"
DEVICE_CSV = ROOT / "benchmarks" / "results" / "gpu_measure.csv"
FIELDS = ("source", "id", "model", "config", "method", "shape", "predicted_gib", "measured_gib", "eps", "world",
          "peak_allocated_gib", "runtime_gib")


def shared_reference() -> Path:
    """The reference notes: docs/reference in this repository (a snapshot of the team's shared folder)."""
    return ROOT / "docs" / "reference"


def published_rows(path: Path) -> list[dict]:
    from memory_accuracy import _DS, to_config

    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.errors import InputError
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run

    out, seen = [], []
    for i, r in enumerate(csv.DictReader(open(path, encoding="utf-8")), start=2):
        cfg = to_config(r)
        if cfg is None:
            continue
        try:
            arch, _ = load_arch(r["model"].replace("generic ", ""))
        except InputError:
            continue
        meas = float(r["measured_gb_per_gpu"])
        method = r["method"].lower().replace("lora(emb)", "lora+train_embed_and_lm_head")
        key = (r["model"], method, r["seq_len"], r["num_gpus"], r["zero_stage"].strip("?"))
        if any(k == key and abs(m / meas - 1) < 0.01 for k, m in seen):
            continue
        seen.append((key, meas))
        n = int(r["num_gpus"] or 1)
        hw = parse_gpu_spec(f"{n}xA100-80GB")
        zero, extra = cfg.pop("_zero", None), cfg.pop("_zero_extra", None)
        run = resolve_run(cfg, arch, hw, _DS(zero, extra) if zero else None)
        est = estimate(run, hw)
        out.append(_row("published", f"{path.name}:{i}", r["model"],
                        f"{r['method']} seq {r['seq_len']} x{n} ZeRO {r['zero_stage']}", "analytic",
                        est.details["reserve_class"], est.total, meas, est, run.world_size))
    return out


def device_rows(reuse: dict[str, dict]) -> list[dict]:
    """Analytic and simulated rows of the device measurements; `reuse` maps ids to simulated rows kept."""
    from gpu_measure import CONFIGS, _DS

    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run

    out = []
    for r in csv.DictReader(open(DEVICE_CSV, encoding="utf-8")):
        n = int(r["n"])
        model, cfg, world, _ = CONFIGS[n - 1]
        cfg = dict(cfg)
        stage = cfg.pop("_zero", None)
        if r.get("asked"):
            cfg["disable_gradient_checkpointing"] = True   # the GPU run skipped checkpointing (gpu_measure.md †)
        hw = parse_gpu_spec(f"{world}xH200")
        run = resolve_run(cfg, load_arch(model)[0], hw, _DS(stage) if stage is not None else None)
        est = estimate(run, hw)
        meas, rid = float(r["meas_device_gib"]), f"gpu_measure.csv:{n}"
        shape = est.details["reserve_class"]
        out.append(_row("device", rid, model, r["config"], "analytic", shape, est.total, meas, est, run.world_size))
        if rid in reuse:
            out.append(reuse[rid])
            continue
        from finetune_doctor.probes.replayed import replay_probe, untrusted
        from finetune_doctor.probes.simulate import simulate
        from finetune_doctor.probes.spec import spec_from_run

        t = time.perf_counter()
        sim = simulate(spec_from_run(run), steps=2, trace=True)
        view = replay_probe(run, replace(hw, capacity_gib=None), sim, env={})
        if untrusted(view, sim):   # the probe would not use this replay either (probes/replayed.py)
            print(f"  {rid}: replay not used: {untrusted(view, sim)}")
            continue
        print(f"  simulated {rid}: {view.total_gib:.2f} GiB vs {meas:.2f} ({time.perf_counter() - t:.0f} s)",
              flush=True)
        out.append(_row("device", rid, model, r["config"], "simulated", shape, view.total_gib, meas))
    return out


def measured_rows(device: list[dict]) -> list[dict]:
    """Repeated measurements of one configuration as run: each against the group's mean (shape class ``any``:
    the spread of a measurement does not depend on the run's shape)."""
    from finetune_doctor.analyzers.memory.uncertainty import ANY

    groups: dict[str, list[dict]] = {}
    for r in device:
        if r["method"] == "analytic":
            groups.setdefault(f"{r['model']} {r['config']}", []).append(r)
    out = []
    for rows in groups.values():
        if len(rows) < 2:
            continue
        mean = statistics.mean(float(r["measured_gib"]) for r in rows)
        for r in rows:
            out.append(_row("device-repeat", r["id"], r["model"], r["config"], "measured", ANY, mean,
                            float(r["measured_gib"])))
    return out


def _row(source, rid, model, config, method, shape, pred, meas, est=None, world=None) -> dict:
    """One error row; an analytic row also keeps its tensor peak and runtime (GiB) and world size, from which
    benchmarks/margin.py recomputes the former flat-reserve total."""
    return {"source": source, "id": rid, "model": model, "config": config, "method": method, "shape": shape,
            "predicted_gib": round(float(pred), 4), "measured_gib": round(float(meas), 4),
            "eps": round(math.log(float(meas) / float(pred)), 6), "world": world,
            "peak_allocated_gib": None if est is None else round(est.peak_allocated, 4),
            "runtime_gib": None if est is None else round(est.details["runtime_gib"], 4)}


GRID = [(k, v) for k in (0.5, 1.0, 2.0, 4.0, 8.0) for v in (1, 2, 4, 8)]


def choose_prior(rows: list[dict], robust: bool = False) -> tuple[tuple[float, int], dict[str, float]]:
    """The (κ0, ν0) of GRID with the best leave-one-out log predictive density over `rows` (`robust`: class
    statistics by median and MAD, uncertainty.summarize), and every score."""
    from finetune_doctor.analyzers.memory.uncertainty import log_score

    scores = {f"{k:g},{v}": log_score(rows, k, v, robust) for k, v in GRID}
    best = max(GRID, key=lambda kv: scores[f"{kv[0]:g},{kv[1]}"])
    return best, scores


def loo(rows: list[dict], k0: float, nu0: int) -> list[dict]:
    """Leave-one-out: each row's 90 % interval and p(measured > predicted) from the other rows' table."""
    from finetune_doctor.analyzers.memory.uncertainty import LEVEL, derive, dist_from

    out = []
    for i, r in enumerate(rows):
        others = derive(rows[:i] + rows[i + 1:])
        if r["method"] not in others:
            continue
        d = dist_from(others, r["method"], r["shape"], k0, nu0)
        lo, hi = d.quantile((1 - LEVEL) / 2), d.quantile((1 + LEVEL) / 2)
        out.append({**r, "inside": lo <= float(r["eps"]) <= hi, "pit": d.cdf(float(r["eps"]))})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--published", default=None, help="memory_points_dev.csv (default: docs/reference/memory)")
    ap.add_argument("--reuse-simulated", action="store_true", help="keep the simulated rows of the rows file")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from finetune_doctor.analyzers.memory.uncertainty import derive

    pub = Path(args.published) if args.published else shared_reference() / "memory" / "memory_points_dev.csv"
    reuse = {}
    if args.reuse_simulated and ROWS.exists():
        reuse = {r["id"]: {k: r.get(k) for k in FIELDS} for r in csv.DictReader(open(ROWS, encoding="utf-8"))
                 if r["method"] == "simulated"}
    rows = published_rows(pub)
    dev = device_rows(reuse)
    rows += dev + measured_rows(dev)
    rows = [{**r, "eps": float(r["eps"]), "predicted_gib": float(r["predicted_gib"]),
             "measured_gib": float(r["measured_gib"])} for r in rows]
    methods = derive(rows)
    (k0, nu0), scores = choose_prior(rows)
    table = {"about": "Error of the memory prediction, eps = ln(measured / predicted) of the peak device memory per "
                      "GPU, by method and shape class: n, mean, sample variance; prior: the weights of the pooled "
                      "rows, chosen by leave-one-out log predictive density. Regenerate with "
                      "benchmarks/derive_uncertainty.py; the model is analyzers/memory/uncertainty.py.",
             "generated": time.strftime("%Y-%m-%d"),
             "prior": {"kappa0": k0, "nu0": nu0, "loo_log_score": {k: round(v, 3) for k, v in scores.items()}},
             "methods": methods}
    checks = loo(rows, k0, nu0)
    text = _doc(rows, methods, checks, (k0, nu0), scores)
    print(text)
    if not args.no_write:
        TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
        with open(ROWS, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {TABLE}, {ROWS} and {DOC}")
    return 0


def _doc(rows: list[dict], methods: dict, checks: list[dict], prior: tuple[float, int],
         scores: dict[str, float]) -> str:
    from finetune_doctor.analyzers.memory.uncertainty import LEVEL, SIGMA_FLOOR, dist_from

    k0, nu0 = prior
    lines = ["# Error model of the memory prediction", "",
             f"{time.strftime('%Y-%m-%d')}; `python benchmarks/derive_uncertainty.py`. ε = ln(measured / predicted) "
             "of the peak device memory per GPU; a positive ε is an under-prediction. Rows: the published "
             "measurements benchmarks/memory_accuracy.py expresses (method analytic), the 14 device rows of "
             "gpu_measure.csv (analytic, and simulated = the probe's trace replayed through the allocator model), "
             "and repeated device measurements of one configuration (measured). The predictive distribution of a "
             f"class is Student's t from the conjugate update of its method's pooled rows (the mean worth κ0 = {k0:g} "
             f"rows, the variance ν0 = {nu0} rows) by the class's rows; a class without rows takes the pooled rows' "
             f"own predictive; scale floor {100 * SIGMA_FLOOR:.0f} % (analyzers/memory/uncertainty.py). κ0 and ν0 are "
             "the pair with the best leave-one-out log predictive density over all rows: "
             + ", ".join(f"({k}) {v:.1f}" for k, v in sorted(scores.items(), key=lambda kv: -kv[1])[:6]) + " … "
             f"(worst {min(scores.values()):.1f}).", "",
             "| method | shape class | n | mean ε | sd ε | predictive bias | predictive scale | dof | "
             f"{100 * LEVEL:.0f} % interval of measured/predicted |", "|---|---|---|---|---|---|---|---|---|"]
    for method, m in methods.items():
        for shape in (("any",) if method == "measured" else
                      ("default", "large_vocab_logits", "long_sequence", "moe", "zero")):
            c = m["classes"].get(shape, {"n": 0, "mean": 0.0, "var": 0.0})
            d = dist_from(methods, method, shape, k0, nu0)
            lo, hi = math.exp(d.quantile((1 - LEVEL) / 2)), math.exp(d.quantile((1 + LEVEL) / 2))
            lines.append(f"| {method} | {shape} | {c['n']} | {c['mean']:+.3f} | {math.sqrt(c['var']):.3f} | "
                         f"{100 * d.mu:+.1f} % | {100 * d.scale:.1f} % | {d.dof} | {lo:.3f} – {hi:.3f} |")
    lines += ["", "## Leave-one-out check", "",
              f"Each row against a table derived from the other rows: the share of rows whose measurement falls "
              f"inside its {100 * LEVEL:.0f} % interval (calibrated: {100 * LEVEL:.0f} %), and the mean of "
              "p(ε below the measured one) (calibrated: 0.5).", "",
              "| method | rows | inside the interval | mean PIT |", "|---|---|---|---|"]
    for method in methods:
        ch = [c for c in checks if c["method"] == method]
        if ch:
            lines.append(f"| {method} | {len(ch)} | {sum(c['inside'] for c in ch)}/{len(ch)} = "
                         f"{sum(c['inside'] for c in ch) / len(ch):.0%} | {statistics.mean(c['pit'] for c in ch):.2f} |")
    lines += ["", "## Rows", "", "| source | id | model | config | method | class | predicted | measured | ε |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['id']} | {r['model']} | {r['config']} | {r['method']} | {r['shape']} | "
                     f"{r['predicted_gib']:.2f} | {r['measured_gib']:.2f} | {r['eps']:+.3f} |")
    lines += ["", "## Reproduce", "", "    python benchmarks/derive_uncertainty.py            # CPU only, ~5 min",
              "    python benchmarks/derive_uncertainty.py --reuse-simulated   # seconds: keeps the simulated rows"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
