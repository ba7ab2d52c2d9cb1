"""Median |error| of the memory estimate per engine and method, on the measurements already in the repository
(reference/memory/memory_points_dev.csv through benchmarks/memory_accuracy.py's `to_config`, the FSDP/Megatron/
liger rows of benchmarks/engine_points.py), so that a change to the memory terms can be read group by group.

Run it against any tree by putting that tree first on PYTHONPATH (the rows and their LLaMA-Factory translation
are this script's; the estimator is the tree's):

    PYTHONPATH=/path/to/base python benchmarks/memory_by_group.py --json /tmp/before.json
    PYTHONPATH=$PWD python benchmarks/memory_by_group.py --json /tmp/after.json --compare /tmp/before.json

`--compare` writes benchmarks/results/memory_by_group.md with both columns. CPU only, seconds.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engine_points import evaluate, fsdp_points, liger_points, megatron_points  # noqa: E402
from memory_accuracy import DEFAULT_CSV, LIGER_ROWS, _DS, to_config  # noqa: E402


def _method(cfg: dict) -> str:
    ft = cfg.get("finetuning_type", "lora")
    if ft == "lora" and cfg.get("quantization_bit"):
        return "qlora"
    if ft == "lora" and cfg.get("additional_target"):
        return "lora+emb"
    return ft


def _engine(run) -> str:
    if run.deepspeed:
        return f"deepspeed ZeRO-{run.zero_stage}"
    if run.engine == "fsdp":
        return f"fsdp{run.fsdp_version if run.fsdp_version == 2 else ''}"
    return run.engine


def rows() -> list[dict]:
    """Every comparable row: engine, method, kind, measured, predicted, signed error."""
    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.errors import InputError
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run

    out = []
    for r in csv.DictReader(open(DEFAULT_CSV, encoding="utf-8")):
        cfg = to_config(r)
        if cfg is None:
            continue
        try:
            arch, _ = load_arch(r["model"].replace("generic ", ""))
        except InputError:
            continue
        n = int(r["num_gpus"] or 1)
        hw = parse_gpu_spec(f"{n}xA100-80GB")
        zero, extra = cfg.pop("_zero", None), cfg.pop("_zero_extra", None)
        run = resolve_run(cfg, arch, hw, _DS(zero, extra) if zero else None)
        est = estimate(run, hw)
        meas = float(r["measured_gb_per_gpu"])
        out.append({"source": "memory_points_dev.csv", "model": r["model"], "engine": _engine(run),
                    "method": _method(cfg), "kind": "device", "measured": meas, "predicted": est.total,
                    "error": (est.total - meas) / meas})
    for eng, points in (("fsdp", fsdp_points() + liger_points()), ("megatron", megatron_points())):
        for p in points:
            if not p.fixed_length:
                continue
            pred, _est = evaluate(p)
            out.append({"source": p.source, "model": p.model, "engine": eng, "method": _method(p.cfg),
                        "kind": p.kind, "measured": p.measured, "predicted": pred,
                        "error": (pred - p.measured) / p.measured})
    for src, model, cfg, zo, n, stack, meas, _what in LIGER_ROWS:
        arch, _ = load_arch(model)
        hw = parse_gpu_spec(f"{n}xA100-80GB")
        ds = _DS(zo["stage"], {k: v for k, v in zo.items() if k != "stage"}) if zo else None
        run = resolve_run(cfg, arch, hw, ds, stack=stack)
        est = estimate(run, hw)
        out.append({"source": src, "model": model, "engine": _engine(run), "method": _method(cfg), "kind": "device",
                    "measured": meas, "predicted": est.total, "error": (est.total - meas) / meas})
    return out


def groups(rs: list[dict]) -> dict[str, dict]:
    """{"engine / method": {"n", "median", "max", "bias"}} plus "all"."""
    keys = sorted({f"{r['engine']} / {r['method']}" for r in rs}) + ["all"]
    out = {}
    for k in keys:
        errs = [r["error"] for r in rs if k == "all" or f"{r['engine']} / {r['method']}" == k]
        out[k] = {"n": len(errs), "median": statistics.median(abs(e) for e in errs),
                  "max": max(abs(e) for e in errs), "bias": statistics.median(errs)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--compare")
    ap.add_argument("--out", default=str(HERE / "results" / "memory_by_group.md"))
    ap.add_argument("--before-label", default="the tree given with --compare",
                    help="what the --compare tree was (a commit), written into the page")
    args = ap.parse_args(argv)
    rs = rows()
    g = groups(rs)
    Path(args.json).write_text(json.dumps({"groups": g, "rows": rs}, indent=1), encoding="utf-8")
    for k, v in g.items():
        print(f"{k:40s} n={v['n']:3d} median |err| {v['median']:6.1%}  max {v['max']:6.1%}  median err {v['bias']:+6.1%}")
    if args.compare:
        before = json.loads(Path(args.compare).read_text(encoding="utf-8"))["groups"]
        lines = ["# Memory accuracy per engine and method, before and after the upstream-derived terms (issue 23)", "",
                 "Rows: the measurements already in the repository (memory_points_dev.csv, the FSDP/Megatron/liger rows "
                 "of engine_points.py, the liger row of memory_accuracy.py); the held-out published rows "
                 "(benchmarks/data/calibration_rows.yaml) are scored by halves in memory_accuracy.md. Reproduce with "
                 f"the commands in benchmarks/memory_by_group.py (before: {args.before_label}).", "",
                 "| engine / method | rows | median abs error before | after | max before | after | median signed "
                 "error before | after |", "|---|---|---|---|---|---|---|---|"]
        for k, v in g.items():
            b = before.get(k)
            if b is None:
                lines.append(f"| {k} | {v['n']} | – | {v['median']:.1%} | – | {v['max']:.1%} | – | {v['bias']:+.1%} |")
            else:
                lines.append(f"| {k} | {v['n']} | {b['median']:.1%} | {v['median']:.1%} | {b['max']:.1%} | "
                             f"{v['max']:.1%} | {b['bias']:+.1%} | {v['bias']:+.1%} |")
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
