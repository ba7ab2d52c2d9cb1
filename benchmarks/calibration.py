#!/usr/bin/env python
"""Calibration: the analytic estimator (finetune_doctor/analyzers/memory.py) against the simulate probe.

Both sides take the same resolved `Run` (run.resolve_run over a LLaMA-Factory config dict, the model from the
bundled catalog). Compared quantity: tensor bytes of one rank at the step's peak — the estimator's
``peak_allocated`` minus its ``buffers`` term (DeepSpeed buckets / DDP bucket views, which the probe does not
model), against simulate's peak (which adds DeepSpeed ZeRO-1/2 partitions analytically with the same DeepSpeed
estimator terms, and simulates ZeRO-3 with FSDP2 over a fake process group). The baseline is the simulation; the
ratio is analytic / simulate.

Disagreements above the 3% bar are broken down by term: each of the estimator's terms (weights, gradients,
master + optimizer states, activations + autocast cache, logits) against the probe's bytes of that category at the
matching moment of step 2 (weights and states at the start of the forward, gradients at the end of the backward,
activations when the lm_head starts, logits at their largest).

Grid (Qwen2.5-7B unless stated; bf16; fused AdamW; micro batch 1; sdpa; gradient checkpointing on):
finetuning type full / freeze / LoRA × seq 512 / 4096 / 32768 × checkpointing on / off; micro batch 1 / 4 / 8;
eager vs sdpa; liger-kernel on (LoRA, full, freeze); ZeRO 0 (DeepSpeed) / 1 / 2 / 3 over 8 ranks; world size 1 / 2 / 8
/ 64 under ZeRO-2/3.

Usage: .venv/bin/python benchmarks/calibration.py [--slice] → prints the table, writes
benchmarks/results/calibration.md (--slice: the small slice the tests run, not written).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "calibration.md"
GIB = float(1 << 30)
BAR = 0.03


class _DS:
    """The resolved DeepSpeed config fields run.resolve_run reads (a stage; everything else at its default)."""

    def __init__(self, stage: int, offload: str | None = None):
        zo: dict[str, Any] = {"stage": stage}
        if offload:
            zo["offload_optimizer"] = {"device": offload}
        self.resolved = {"zero_optimization": zo}
        self.defaults = {}


def hardware(world: int):
    from finetune_doctor.types import Hardware

    per = min(world, 8)
    return Hardware(gpu="H100-80GB", num_gpus=world, capacity_gib=79.1, bf16=True, source="flag",
                    nnodes=max(world // per, 1), compute_capability=(9, 0))


def grid(small: bool = False) -> list[tuple[str, dict[str, Any], int | None, int]]:
    """(label, LF config keys, ZeRO stage or None, world size)."""
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 4096}
    # fp16 autocast over the bf16 checkpoint: every frozen weight is cast per matmul (found on the GPU, gpu_measure.md)
    fp16 = {**base, "bf16": False, "fp16": True}
    rows: list[tuple[str, dict[str, Any], int | None, int]] = []
    if small:
        # the slice tests/test_probe_calibration.py runs: one config per finetuning type, one sharded
        return [
            ("lora s4096 GC", {**base, "finetuning_type": "lora"}, None, 1),
            ("full s512 GC", {**base, "finetuning_type": "full", "cutoff_len": 512}, None, 1),
            ("freeze s4096 GC", {**base, "finetuning_type": "freeze"}, None, 1),
            ("lora s4096 ZeRO-3 x8", {**base, "finetuning_type": "lora"}, 3, 8),
            ("lora s2048 noGC fp16 on bf16 weights", {**fp16, "finetuning_type": "lora", "cutoff_len": 2048,
                                                      "disable_gradient_checkpointing": True}, None, 1),
        ]
    for ft in ("full", "freeze", "lora"):
        for seq in (512, 4096, 32768):
            for gc in (True, False):
                cfg = {**base, "finetuning_type": ft, "cutoff_len": seq}
                if not gc:
                    cfg["disable_gradient_checkpointing"] = True
                rows.append((f"{ft} s{seq} {'GC' if gc else 'noGC'}", cfg, None, 1))
    for ft in ("full", "lora"):
        for mb in (4, 8):
            rows.append((f"{ft} s2048 mb{mb} GC", {**base, "finetuning_type": ft, "cutoff_len": 2048,
                                                   "per_device_train_batch_size": mb}, None, 1))
    for seq in (512, 4096):
        for attn in ("disabled", "sdpa"):
            rows.append((f"lora s{seq} noGC {'eager' if attn == 'disabled' else 'sdpa'}",
                         {**base, "finetuning_type": "lora", "cutoff_len": seq, "flash_attn": attn,
                          "disable_gradient_checkpointing": True}, None, 1))
    for gc in (True, False):
        rows.append((f"lora s4096 {'GC' if gc else 'noGC'} fp16 on bf16 weights",
                     {**fp16, "finetuning_type": "lora", **({} if gc else {"disable_gradient_checkpointing": True})},
                     None, 1))
    # liger-kernel (fused linear cross-entropy, RMSNorm, SwiGLU), simulated by probes/liger.py's stand-ins
    for label, extra in (("lora s4096 GC liger", {"finetuning_type": "lora"}),
                         ("lora s32768 GC liger", {"finetuning_type": "lora", "cutoff_len": 32768}),
                         ("lora s4096 noGC liger", {"finetuning_type": "lora", "disable_gradient_checkpointing": True}),
                         ("full s4096 GC liger", {"finetuning_type": "full"}),
                         ("freeze s4096 GC liger", {"finetuning_type": "freeze"})):
        rows.append((label, {**base, "enable_liger_kernel": True, **extra}, None, 1))
    for ft in ("full", "lora"):
        for stage in (0, 1, 2, 3):
            rows.append((f"{ft} s4096 ZeRO-{stage} x8", {**base, "finetuning_type": ft}, stage, 8))
    for world in (1, 2, 64):
        rows.append((f"full s2048 ZeRO-3 x{world}", {**base, "finetuning_type": "full", "cutoff_len": 2048}, 3,
                     world))
    for world in (2, 64):
        rows.append((f"full s2048 ZeRO-2 x{world}", {**base, "finetuning_type": "full", "cutoff_len": 2048}, 2,
                     world))
    return rows


def _terms(est, sim) -> list[tuple[str, float, float]]:
    """(term, analytic GiB, simulate GiB) at matching moments of step 2 (module docstring)."""
    t = est.details["terms_bytes"]
    seg = sim.segments

    def at(prefix: str, *cats: str) -> float:
        for name, by in seg.items():
            if name.startswith(prefix):
                return sum(by.get(c, 0) for c in cats) / GIB
        return float("nan")

    logits = max((by.get("logits", 0) for by in seg.values()), default=0) / GIB
    return [
        ("weights", t["weights"] / GIB, at("step 2, forward, embeddings", "weights", "buffers")),
        ("gradients", t["gradients"] / GIB, at("step 2, backward, end", "gradients")),
        ("optimizer", (t["master"] + t["states"]) / GIB, at("step 2, forward, embeddings", "optimizer")),
        ("activations", (t["activations"] + t["autocast_cache"]) / GIB,
         at("step 2, forward, logits and loss", "activations")),
        ("logits", t["logits"] / GIB, logits),
    ]


def compare(label: str, cfg: dict[str, Any], stage: int | None, world: int, arch) -> dict[str, Any]:
    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run
    from finetune_doctor.run import resolve_run

    hw = hardware(world)
    run = resolve_run(cfg, arch, hw, _DS(stage) if stage is not None else None)
    est = estimate(run, hw)
    t0 = time.perf_counter()
    sim = simulate(spec_from_run(run))
    analytic = est.peak_allocated - est.per_gpu.get("buffers", 0.0)
    ratio = analytic / sim.peak_gib
    return {"label": label, "analytic": analytic, "simulate": sim.peak_gib, "ratio": ratio,
            "phase": est.phase, "segment": sim.segment, "terms": _terms(est, sim), "s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slice", action="store_true")
    ap.add_argument("--model", default="Qwen/Qwen2.5-7B")
    args = ap.parse_args(argv)
    from finetune_doctor.readers.model.modelcfg import load_arch

    arch, _ = load_arch(args.model)
    rows = []
    for label, cfg, stage, world in grid(args.slice):
        r = compare(label, cfg, stage, world, arch)
        rows.append(r)
        flag = "" if abs(r["ratio"] - 1) <= BAR else "  <-- over 3%"
        print(f"{label:28s} analytic {r['analytic']:8.2f}  simulate {r['simulate']:8.2f}  "
              f"ratio {r['ratio']:.3f}  ({r['phase']} / {r['segment']}, {r['s']:.1f} s){flag}", flush=True)
    if args.slice:
        return 0
    bad = [r for r in rows if abs(r["ratio"] - 1) > BAR]
    lines = ["# Calibration: analytic estimator vs simulate probe (tensor bytes per rank)", "",
             f"Model {args.model}; {len(rows)} configs; bar ±{BAR:.0%}; analytic = peak_allocated − buffers; "
             f"baseline = simulate. Generated by benchmarks/calibration.py on {time.strftime('%Y-%m-%d')}.", "",
             f"**{len(rows) - len(bad)} of {len(rows)} within the bar.**", "",
             "| config | analytic GiB | simulate GiB | analytic/simulate | analytic phase | simulate peak at |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if abs(r["ratio"] - 1) <= BAR else " ✗"
        lines.append(f"| {r['label']} | {r['analytic']:.2f} | {r['simulate']:.2f} | {r['ratio']:.3f}{mark} | "
                     f"{r['phase']} | {r['segment']} |")
    lines += ["", "## Terms of the configs over the bar (GiB, analytic vs simulate at matching moments of step 2)",
              "", "| config | term | analytic | simulate | difference |", "|---|---|---|---|---|"]
    for r in bad:
        for name, a, s in r["terms"]:
            if s != s:
                continue
            diff = a - s
            if abs(diff) >= 0.01 and (s == 0 or abs(diff) / max(s, 1e-9) > 0.01):
                lines.append(f"| {r['label']} | {name} | {a:.2f} | {s:.2f} | {diff:+.2f} |")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
