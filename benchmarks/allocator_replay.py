#!/usr/bin/env python
"""Allocator replay against the reserved memory measured on the GPU (benchmarks/results/gpu_measure.csv).

For every device row the config is resolved as benchmarks/gpu_measure.py resolves it (model from its config on the
meta device, the rows marked † predicted without checkpointing, as the GPU ran them), simulated with the
allocation trace on (probes/simulate.py, ``trace=True``), and the trace replayed through the caching-allocator
model (probes/replay.py) with the allocator's default settings, as the measurement ran. Two replays per row: at the
probe's default depth (k and k+1 layers, extrapolated) and at full depth. Baseline, in the same run: the flat
reserve of the analytic model (analyzers/memory.py RESERVE_DEFAULT = 8 %) on top of the simulated tensor peak,
and on top of the analytic tensor peak. Errors are predicted / measured − 1 of ``max_memory_reserved``.

Usage::

    python benchmarks/allocator_replay.py            # prints the table; writes benchmarks/results/allocator_replay.md
    python benchmarks/allocator_replay.py --only 1,5 --no-write
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
CSV = ROOT / "benchmarks" / "results" / "gpu_measure.csv"
OUT = ROOT / "benchmarks" / "results" / "allocator_replay.md"
GIB = float(1 << 30)
FLAT = 0.08   # analyzers/memory.py RESERVE_DEFAULT, the reserve this replaces (single-process rows)


def predict_row(n: int, no_gc: bool) -> dict:
    """Simulated and replayed figures (GiB, seconds) of gpu_measure config `n` (1-based)."""
    from gpu_measure import CONFIGS, _DS

    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.probes.replay import replay_sim
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run
    from finetune_doctor.types import Hardware

    model, cfg, world, _ = CONFIGS[n - 1]
    cfg = dict(cfg)
    stage = cfg.pop("_zero", None)
    if no_gc:
        cfg["disable_gradient_checkpointing"] = True
    arch = load_arch(model)[0]
    hw = Hardware(gpu="probe", num_gpus=world, capacity_gib=None, bf16=True, source="flag")
    run = resolve_run(cfg, arch, hw, _DS(stage) if stage is not None else None)
    spec = spec_from_run(run)
    est = estimate(run, hw)
    out = {"config": spec.describe(), "analytic_alloc": est.peak_allocated}
    for label, depth in (("auto", "auto"), ("full", "full")):
        t = time.perf_counter()
        sim = simulate(spec, steps=3, depth=depth, trace=True)
        sim_s = time.perf_counter() - t
        rep = replay_sim(sim)
        out[label] = {"sim_alloc": sim.peak_gib, "reserved": rep.peak_reserved_gib,
                      "replay_alloc": rep.peak_allocated_gib, "depth": "/".join(map(str, rep.depth)),
                      "sim_s": sim_s, "replay_s": rep.wall_s, "requests": rep.requests,
                      "frag": rep.fragmentation_share}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default=str(CSV))
    ap.add_argument("--only", default=None, help="comma-separated config numbers")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv, encoding="utf-8")))
    if args.only:
        keep = {int(x) for x in args.only.split(",")}
        rows = [r for r in rows if int(r["n"]) in keep]
    results = []
    for r in rows:
        n = int(r["n"])
        meas = float(r["meas_reserved_gib"])
        p = predict_row(n, bool(r.get("asked")))
        res = {"n": n, "model": r["model"], "config": p["config"], "meas_res": meas,
               "meas_alloc": float(r["meas_alloc_gib"]), "p": p}
        results.append(res)
        a, f = p["auto"], p["full"]
        print(f"[{n}] measured reserved {meas:.2f} GiB | replay {a['reserved']:.2f} ({a['reserved'] / meas - 1:+.1%}, "
              f"depth {a['depth']}) full {f['reserved']:.2f} ({f['reserved'] / meas - 1:+.1%}) | flat 8 % on sim "
              f"{a['sim_alloc'] * (1 + FLAT):.2f} ({a['sim_alloc'] * (1 + FLAT) / meas - 1:+.1%}) | replay "
              f"{a['replay_s']:.2f} s / {f['replay_s']:.2f} s", flush=True)
    text = report(results)
    print(text)
    if not args.no_write:
        OUT.write_text(text)
        print(f"wrote {OUT}")
    return 0


def _errs(results: list[dict], fn) -> list[float]:
    return [fn(r) / r["meas_res"] - 1 for r in results]


def _summary(label: str, errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"| {label} | {100 * statistics.median(a):.1f} % | {100 * max(a):.1f} % | {100 * statistics.mean(errs):+.1f} % |"


def report(results: list[dict]) -> str:
    methods = [
        ("replay, probe depth (k, k+1 extrapolated)", lambda r: r["p"]["auto"]["reserved"]),
        ("replay, full depth", lambda r: r["p"]["full"]["reserved"]),
        ("flat 8 % on the simulated tensor peak", lambda r: r["p"]["auto"]["sim_alloc"] * (1 + FLAT)),
        ("flat 8 % on the analytic tensor peak (analytic model today)", lambda r: r["p"]["analytic_alloc"] * (1 + FLAT)),
        ("flat 8 % on the measured allocated peak", lambda r: r["meas_alloc"] * (1 + FLAT)),
    ]
    lines = ["# Allocator replay vs measured reserved memory", "",
             f"{time.strftime('%Y-%m-%d')}; {len(results)} device rows of `gpu_measure.csv` (1 × H200, torch 2.11, "
             "default allocator settings, measured `max_memory_reserved`); predictions recomputed on the CPU. "
             "Error = predicted / measured − 1.", "",
             "| method | median abs error | max abs error | mean error |", "|---|---|---|---|"]
    lines += [_summary(label, _errs(results, fn)) for label, fn in methods]
    lines += ["", "| # | model | config | measured reserved | replay (probe depth) | err | replay (full) | err | "
              "flat 8 % on sim | err | replay frag. share | replay s (probe / full) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        a, f, m = r["p"]["auto"], r["p"]["full"], r["meas_res"]
        flat = a["sim_alloc"] * (1 + FLAT)
        lines.append(f"| {r['n']} | {r['model']} | {r['config']} | {m:.2f} | {a['reserved']:.2f} | "
                     f"{a['reserved'] / m - 1:+.1%} | {f['reserved']:.2f} | {f['reserved'] / m - 1:+.1%} | "
                     f"{flat:.2f} | {flat / m - 1:+.1%} | {a['frag']:.1%} | {a['replay_s']:.2f} / {f['replay_s']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
