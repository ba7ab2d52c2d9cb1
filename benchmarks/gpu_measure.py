#!/usr/bin/env python
"""Predicted vs measured GPU memory: simulate and the analytic estimator against real steps (the gpu probe).

For each config the same resolved Run is (1) simulated on the CPU (finetune_doctor/probes/simulate.py: tensor
peak ≈ ``max_memory_allocated``), (2) estimated analytically (analyzers/memory.py: ``peak_allocated`` and the
nvidia-smi ``total``), and (3) run for 3 real steps on the GPU with random weights (probes/gpu.py: per rank
``max_memory_allocated``, ``max_memory_reserved`` and device-level usage ``mem_get_info``). Baseline = the
measurement; ratios are predicted / measured.

Needs a CUDA GPU with nothing else running on it (the probe refuses busy cards; --force overrides), torch with
CUDA, transformers and peft installed (``pip install -e '.[all]'``); deepspeed for the DeepSpeed rows (skipped
otherwise); the multi-GPU rows need ≥ 2 GPUs (skipped otherwise). Sized for a 15-minute device window on one
80-141 GiB card: 14 single-GPU configs of 0.5B-7B shapes at seq ≤ 4096, about 30-45 s each (process start,
model build, 3 steps).

Usage::

    python benchmarks/gpu_measure.py                 # GPU machine; writes benchmarks/results/gpu_measure.md/.csv
    python benchmarks/gpu_measure.py --dry-run-cpu   # plumbing check on a CPU box (tiny shapes, CPU worker)
    python benchmarks/gpu_measure.py --only 1,2,5 --budget-min 12
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT_MD = ROOT / "benchmarks" / "results" / "gpu_measure.md"
OUT_CSV = ROOT / "benchmarks" / "results" / "gpu_measure.csv"
GIB = float(1 << 30)

QWEN05 = "Qwen/Qwen2.5-0.5B"
QWEN15 = "Qwen/Qwen2.5-1.5B"
QWEN7 = "Qwen/Qwen2.5-7B"
LLAMA8 = "meta-llama/Meta-Llama-3-8B"

BASE = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048}
# (model, LF config keys, world size, needs) — needs: "" | "deepspeed" | "multi"
CONFIGS = [
    (QWEN05, {**BASE, "finetuning_type": "full"}, 1, ""),
    (QWEN05, {**BASE, "finetuning_type": "full", "disable_gradient_checkpointing": True}, 1, ""),
    (QWEN05, {**BASE, "finetuning_type": "full", "optim": "adamw_torch"}, 1, ""),
    (QWEN05, {**BASE, "finetuning_type": "full", "pure_bf16": True, "bf16": False}, 1, ""),
    (QWEN05, {**BASE, "finetuning_type": "freeze", "cutoff_len": 4096}, 1, ""),
    (QWEN15, {**BASE, "finetuning_type": "lora", "per_device_train_batch_size": 4}, 1, ""),
    (QWEN15, {**BASE, "finetuning_type": "lora", "disable_gradient_checkpointing": True, "cutoff_len": 1024}, 1, ""),
    (QWEN15, {**BASE, "finetuning_type": "lora", "flash_attn": "disabled", "cutoff_len": 1024,
              "disable_gradient_checkpointing": True}, 1, ""),
    (QWEN15, {**BASE, "finetuning_type": "full", "cutoff_len": 4096}, 1, ""),
    (QWEN15, {**BASE, "finetuning_type": "lora", "fp16": True, "bf16": False}, 1, ""),
    (QWEN7, {**BASE, "finetuning_type": "lora", "cutoff_len": 4096}, 1, ""),
    (QWEN7, {**BASE, "finetuning_type": "lora", "lora_target": "q_proj,v_proj", "lora_rank": 32}, 1, ""),
    (LLAMA8, {**BASE, "finetuning_type": "lora", "per_device_train_batch_size": 2}, 1, ""),
    (QWEN7, {**BASE, "finetuning_type": "full", "pure_bf16": True, "bf16": False, "cutoff_len": 1024}, 1, ""),
    (QWEN15, {**BASE, "finetuning_type": "full", "_zero": 2}, 2, "deepspeed"),
    (QWEN15, {**BASE, "finetuning_type": "full", "_zero": 3}, 2, "deepspeed"),
]


class _DS:
    def __init__(self, stage: int):
        self.resolved = {"zero_optimization": {"stage": stage}}
        self.defaults = {}


def _tiny_arch():
    from finetune_doctor.arch import ModelArch

    return ModelArch(name="tiny", model_type="qwen2", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                     intermediate_size=128, vocab_size=512, qkv_bias=True, dtype="bfloat16")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run-cpu", action="store_true", help="tiny shapes on the CPU worker (no GPU needed)")
    ap.add_argument("--only", default=None, help="comma-separated 1-based config numbers")
    ap.add_argument("--budget-min", type=float, default=13.0, help="stop starting configs after this many minutes")
    ap.add_argument("--force", action="store_true", help="probe even if other processes use the GPUs")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--order", default=None, help="comma-separated 1-based config numbers, run in this order")
    ap.add_argument("--reanalyze", default=None, metavar="CSV",
                    help="recompute the predictions of a measured CSV on this machine (no GPU needed) and rewrite "
                    "the table; measured columns are kept")
    ap.add_argument("--ran-without-gc", default="", metavar="N,...",
                    help="with --reanalyze: rows whose GPU run had checkpointing silently off (the probe bug fixed "
                    "after the 2026-11-30 run); their predictions are made for the run that actually happened")
    ap.add_argument("--out-dir", default=None, help="also write the .md/.csv here after every row (a device "
                    "window can end mid-run; what was measured so far survives)")
    args = ap.parse_args(argv)
    if args.reanalyze:
        return _reanalyze(Path(args.reanalyze), {int(x) for x in args.ran_without_gc.split(",") if x}, args.steps)

    from finetune_doctor.probes.gpu import ProbeRefused, run_gpu

    device = "cpu" if args.dry_run_cpu else "cuda"
    has_ds = _has("deepspeed")
    n_gpus = _gpu_count() if device == "cuda" else 1
    picks = [int(x) for x in (args.order or args.only).split(",")] if (args.order or args.only) \
        else list(range(1, len(CONFIGS) + 1))
    t_start = time.perf_counter()
    rows = []
    for i in picks:
        model, cfg, world, needs = CONFIGS[i - 1]
        if (time.perf_counter() - t_start) / 60 > args.budget_min:
            print(f"[{i}] budget reached, stopping", flush=True)
            break
        if needs == "deepspeed" and (not has_ds or device == "cpu"):
            print(f"[{i}] skipped: deepspeed not installed / CPU dry run", flush=True)
            continue
        if world > n_gpus:
            print(f"[{i}] skipped: needs {world} GPUs, {n_gpus} here", flush=True)
            continue
        arch, spec, est, sim, sim_s = _predict(i, tiny=args.dry_run_cpu, steps=args.steps)
        try:
            meas = run_gpu(spec, steps=args.steps, force=args.force, timeout_s=600, device=device,
                           predicted_gib=sim.peak_gib)
        except ProbeRefused as err:
            print(f"[{i}] refused: {err}", flush=True)
            return 2
        row = {
            "n": i, "model": arch.name, "config": spec.describe(), "world": world,
            "sim_alloc_gib": sim.peak_gib, "analytic_alloc_gib": est.peak_allocated, "analytic_total_gib": est.total,
            "meas_alloc_gib": meas.peak_allocated_gib if not meas.error else None,
            "meas_reserved_gib": meas.peak_reserved_gib if not meas.error else None,
            "meas_device_gib": (max((u for u in meas.device_used if u is not None), default=0) / GIB) or None
            if not meas.error else None,
            "finite_steps": meas.nan_free_steps, "steps": meas.steps, "error": meas.error, "sim_s": sim_s,
            "gpu_s": meas.wall_s, "depth": "/".join(map(str, meas.depth)),
        }
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
        if not args.dry_run_cpu:
            _write(rows, n_gpus, Path(args.out_dir) if args.out_dir else None)
    if args.dry_run_cpu:
        print("dry run: nothing written")
    return 0


def _predict(i: int, *, tiny: bool = False, steps: int = 3, no_gc: bool = False):
    """(arch, spec, analytic estimate, simulate result, simulate seconds) of config `i` (1-based)."""
    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run
    from finetune_doctor.types import Hardware

    model, cfg, world, _ = CONFIGS[i - 1]
    cfg = dict(cfg)
    stage = cfg.pop("_zero", None)
    if no_gc:
        cfg["disable_gradient_checkpointing"] = True
    arch = _tiny_arch() if tiny else load_arch(model)[0]
    hw = Hardware(gpu="probe", num_gpus=world, capacity_gib=None, bf16=True, source="flag")
    run = resolve_run(cfg, arch, hw, _DS(stage) if stage is not None else None)
    spec = spec_from_run(run)
    est = estimate(run, hw)
    t = time.perf_counter()
    sim = simulate(spec, steps=max(steps, 2))
    return arch, spec, est, sim, time.perf_counter() - t


def _reanalyze(path: Path, no_gc: set[int], steps: int) -> int:
    """Predictions recomputed here for the rows of a measured CSV; rows in `no_gc` are predicted without
    checkpointing, because that is the run the GPU executed (the spec asked for it, transformers 5.17's calling
    convention made the probe skip it; see probes/build.py `checkpointed_layer`)."""
    with path.open(newline="") as f:
        measured = list(csv.DictReader(f))
    rows = []
    for m in measured:
        i = int(m["n"])
        arch, spec, est, sim, sim_s = _predict(i, steps=steps, no_gc=i in no_gc)
        num = lambda k: float(m[k]) if m.get(k) not in (None, "") else None  # noqa: E731
        rows.append({
            "n": i, "model": arch.name, "config": spec.describe(), "world": int(m["world"]),
            "sim_alloc_gib": sim.peak_gib, "analytic_alloc_gib": est.peak_allocated, "analytic_total_gib": est.total,
            "meas_alloc_gib": num("meas_alloc_gib"), "meas_reserved_gib": num("meas_reserved_gib"),
            "meas_device_gib": num("meas_device_gib"), "finite_steps": int(m["finite_steps"]),
            "steps": int(m["steps"]), "error": m.get("error") or None, "sim_s": sim_s, "gpu_s": num("gpu_s"),
            "depth": m["depth"], "asked": m["config"] if i in no_gc else "",
        })
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}), flush=True)
    _write(rows, 1, host="the device machine (1 × H200)", note=(
        f"Measured on the GPU on the date of `{path.name}`; predictions recomputed by `--reanalyze` on "
        f"{time.strftime('%Y-%m-%d')}. Rows marked † asked for gradient checkpointing, but the probe skipped it "
        "silently on that machine's transformers 5.17 (the checkpointing function did not recognise its calling "
        "convention; fixed since, and an unengaged checkpointing is now an error). The GPU therefore ran them "
        "without checkpointing, and they are predicted as run: the config column shows what ran.") if no_gc else "")
    return 0


def _ratio(a, b) -> str:
    return "-" if not a or not b else f"{a / b:.3f}"


def _summary(rows: list[dict]) -> str:
    """Median and max |predicted/measured − 1| of each prediction over the rows that measured something."""
    import statistics

    out = []
    for label, pred, meas in (("simulate alloc", "sim_alloc_gib", "meas_alloc_gib"),
                              ("analytic alloc", "analytic_alloc_gib", "meas_alloc_gib"),
                              ("analytic total vs device", "analytic_total_gib", "meas_device_gib")):
        errs = [abs(r[pred] / r[meas] - 1) for r in rows if r.get(pred) and r.get(meas)]
        if errs:
            out.append(f"{label}: median |error| {100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}% "
                       f"({len(errs)} rows)")
    return "; ".join(out) + "."


def _write(rows: list[dict], n_gpus: int, extra_dir: Path | None = None, note: str = "",
           host: str | None = None) -> None:
    with OUT_CSV.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["n"])
        w.writeheader()
        w.writerows(rows)
    lines = ["# Predicted vs measured GPU memory (gpu probe)", "",
             f"{time.strftime('%Y-%m-%d')}; {n_gpus} GPU(s); {host or platform.node()}; baseline = measured. "
             "simulate and analytic 'alloc' predict max_memory_allocated; analytic 'total' predicts the device "
             "usage nvidia-smi shows (mem_get_info: total - free).", "", _summary(rows), ""] \
        + ([note, ""] if note else []) + [
             "| # | model | config | sim alloc | measured alloc | sim/meas | analytic alloc | an/meas | "
             "measured reserved | analytic total | measured device | an total/meas | finite steps |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = lambda k: "-" if r.get(k) is None else f"{r[k]:.2f}"  # noqa: E731
        mark = " †" if r.get("asked") else ""
        lines.append(f"| {r['n']}{mark} | {r['model']} | {r['config']} | {g('sim_alloc_gib')} | {g('meas_alloc_gib')} | "
                     f"{_ratio(r['sim_alloc_gib'], r['meas_alloc_gib'])} | {g('analytic_alloc_gib')} | "
                     f"{_ratio(r['analytic_alloc_gib'], r['meas_alloc_gib'])} | {g('meas_reserved_gib')} | "
                     f"{g('analytic_total_gib')} | {g('meas_device_gib')} | "
                     f"{_ratio(r['analytic_total_gib'], r['meas_device_gib'])} | {r['finite_steps']}/{r['steps']}"
                     + (f" ({r['error']})" if r.get("error") else "") + " |")
    OUT_MD.write_text("\n".join(lines) + "\n")
    if extra_dir is not None:
        extra_dir.mkdir(parents=True, exist_ok=True)
        (extra_dir / OUT_MD.name).write_text(OUT_MD.read_text())
        (extra_dir / OUT_CSV.name).write_text(OUT_CSV.read_text())
    print(f"wrote {OUT_MD} and {OUT_CSV}", flush=True)


def _has(mod: str) -> bool:
    try:
        __import__(mod)
    except ImportError:
        return False
    return True


def _gpu_count() -> int:
    # counted in a child process: this process must not hold a CUDA context while the probes measure
    import subprocess

    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, env=dict(os.environ))
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
