#!/usr/bin/env python
"""Derive the analytic model's allocator reserve per shape class from allocator replays; write the table.

For each config of the grid below the run is resolved (analyzers see the same Run), simulated with the allocation
trace on (probes/simulate.py), and replayed through the caching-allocator model (probes/replay.py) with
expandable segments off and on. The reserve of a config is what the allocator holds beyond the tensor peak:
``r = (peak reserved + analytic bytes) / (simulated tensor peak) − 1``, where the analytic bytes (DeepSpeed's
partitions, which the simulate probe adds without allocating them) are flat buffers allocated once, so they add
to reserved and to allocated alike. Configs are grouped by the shape class `analyzers/memory/reserve.py
shape_class` gives their Run; the table stores each class's median, spread and members.

Usage::

    python benchmarks/derive_reserve.py            # writes finetune_doctor/analyzers/memory/reserve_table.json and
                                                   # benchmarks/results/reserve_derivation.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TABLE = ROOT / "finetune_doctor" / "analyzers" / "memory" / "reserve_table.json"
DOC = ROOT / "benchmarks" / "results" / "reserve_derivation.md"

Q05, Q15, Q7, L8 = "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-7B", "meta-llama/Meta-Llama-3-8B"
MOE = "Qwen/Qwen1.5-MoE-A2.7B"
B = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048}
# (model, LF keys, world size, ZeRO stage or None)
GRID = [
    (Q15, {**B, "finetuning_type": "lora", "cutoff_len": 1024}, 1, None),
    (Q7, {**B, "finetuning_type": "lora"}, 1, None),
    (Q7, {**B, "finetuning_type": "lora", "lora_target": "q_proj,v_proj", "lora_rank": 32}, 1, None),
    (L8, {**B, "finetuning_type": "lora", "per_device_train_batch_size": 2}, 1, None),
    (Q7, {**B, "finetuning_type": "full", "pure_bf16": True, "bf16": False, "cutoff_len": 1024}, 1, None),
    (L8, {**B, "finetuning_type": "lora", "quantization_bit": 4}, 1, None),
    (Q05, {**B, "finetuning_type": "full"}, 1, None),
    (Q05, {**B, "finetuning_type": "freeze", "cutoff_len": 4096}, 1, None),
    (Q15, {**B, "finetuning_type": "full", "cutoff_len": 4096}, 1, None),
    (Q15, {**B, "finetuning_type": "lora", "per_device_train_batch_size": 4}, 1, None),
    (Q7, {**B, "finetuning_type": "lora", "cutoff_len": 16384}, 1, None),
    (L8, {**B, "finetuning_type": "lora", "cutoff_len": 32768}, 1, None),
    (Q15, {**B, "finetuning_type": "full", "cutoff_len": 8192}, 1, None),
    # issue 23 (session 13): the shapes of the dev runs that trained and were called oom on the reserve alone,
    # full fine-tunes whose peak is the fp32 logits of many tokens: llama-cookbook's pure-bf16 Llama-3-8B at
    # 4 × 4096 tokens, Liger's HF example's Qwen2-7B at 48 × 512 (bf16 autocast, bf16 parameters)
    (L8, {**B, "finetuning_type": "full", "pure_bf16": True, "bf16": False, "per_device_train_batch_size": 4,
          "cutoff_len": 4096, "optim": "adamw_torch"}, 1, None),
    ("Qwen/Qwen2-7B", {**B, "finetuning_type": "full", "pure_bf16": True, "per_device_train_batch_size": 48,
                       "cutoff_len": 512, "optim": "adamw_torch"}, 1, None),
    (MOE, {**B, "finetuning_type": "lora"}, 1, None),
    (MOE, {**B, "finetuning_type": "lora", "cutoff_len": 4096}, 1, None),
]
# ZeRO-2/3 (class `zero`) is not in this grid: the simulate probe runs DeepSpeed's replica and adds its partitions
# analytically (ZeRO-2), or stands in FSDP2 for ZeRO-3, so neither trace has DeepSpeed's allocation pattern.
# benchmarks/derive_zero_reserve.py derives it from DeepSpeed's own order (probes/zerotrace.py); this script keeps
# that class and its section of the derivation (below ZERO_SECTION) when it rewrites the table.
ZERO_SECTION = "\n## The `zero` class (DeepSpeed ZeRO-2/3)\n"


class _DS:
    def __init__(self, stage: int):
        self.resolved = {"zero_optimization": {"stage": stage}}
        self.defaults = {}


def simulated(model: str, cfg: dict, world: int, stage: int | None) -> tuple:
    """(run, spec, traced simulation of two steps, its shape class, seconds it took) of one GRID row: the input both
    this script and benchmarks/derive_needed_reserve.py replay through the allocator."""
    from finetune_doctor.analyzers.memory import compute_terms
    from finetune_doctor.analyzers.memory.reserve import shape_class
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run
    from finetune_doctor.types import Hardware

    arch = load_arch(model)[0]
    hw = Hardware(gpu="derive", num_gpus=world, capacity_gib=None, bf16=True, source="flag")
    run = resolve_run(dict(cfg), arch, hw, _DS(stage) if stage is not None else None)
    spec = spec_from_run(run)
    t = time.perf_counter()
    sim = simulate(spec, steps=2, trace=True)
    return run, spec, sim, shape_class(run, compute_terms(run)), time.perf_counter() - t


def measure(model: str, cfg: dict, world: int, stage: int | None) -> dict:
    from finetune_doctor.probes.allocconf import parse_alloc_conf
    from finetune_doctor.probes.replay import replay_sim

    _run, spec, sim, cls, secs = simulated(model, cfg, world, stage)
    extra = sum(sim.analytic.values())
    out = {"model": model, "config": spec.describe(), "class": cls,
           "tensor_peak_gib": sim.peak_gib, "sim_s": round(secs, 1)}
    for label, conf in (("off", None), ("on", parse_alloc_conf("expandable_segments:True"))):
        rep = replay_sim(sim, conf)
        out[label] = (rep.peak_reserved + extra) / sim.peak_bytes - 1
        out[f"replay_s_{label}"] = round(rep.wall_s, 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for model, cfg, world, stage in GRID:
        r = measure(model, cfg, world, stage)
        rows.append(r)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
    classes: dict[str, dict] = {}
    for name in sorted({r["class"] for r in rows}):
        members = [r for r in rows if r["class"] == name]
        classes[name] = {
            mode: {"median": round(statistics.median(m[mode] for m in members), 4),
                   "min": round(min(m[mode] for m in members), 4), "max": round(max(m[mode] for m in members), 4)}
            for mode in ("off", "on")}
        classes[name]["n"] = len(members)
        classes[name]["members"] = [f"{m['model']}: {m['config']}" for m in members]
    table = {"about": "Allocator reserve (peak reserved / tensor peak - 1) per shape class, from allocator replays "
                      "of simulated traces; regenerate with benchmarks/derive_reserve.py. 'off'/'on': "
                      "expandable_segments.", "generated": time.strftime("%Y-%m-%d"), "classes": classes}
    if not args.no_write:
        # the `zero` class is derived by benchmarks/derive_zero_reserve.py (not this GRID): kept as it is, with
        # its section of the derivation
        old = json.loads(TABLE.read_text(encoding="utf-8"))["classes"]
        if "zero" in old and "zero" not in classes:
            classes["zero"] = old["zero"]
        zero_doc = DOC.read_text(encoding="utf-8").partition(ZERO_SECTION)[2] if DOC.exists() else ""
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
        DOC.write_text(_doc(rows, {k: v for k, v in classes.items() if k != "zero" or "source" not in v})
                       + (ZERO_SECTION + zero_doc if zero_doc else ""))
        print(f"wrote {TABLE} and {DOC}")
    return 0


def _doc(rows: list[dict], classes: dict) -> str:
    lines = ["# Allocator reserve per shape class, derived from replays", "",
             f"{time.strftime('%Y-%m-%d')}; `python benchmarks/derive_reserve.py` (CPU only, "
             f"{sum(r['sim_s'] for r in rows):.0f} s of simulation). The analytic model (analyzers/memory.py) adds "
             "`reserve × tensor peak` for the allocator's cached-but-unallocated memory; it took a flat 8 % (5 % with "
             "expandable segments) before. Now the reserve is the median over the configs of the run's shape class "
             "(analyzers/memory/reserve.py `shape_class`: DeepSpeed ZeRO-2/3 → `zero`; a MoE model → `moe`; ≥ 8192 tokens per "
             "micro-batch → `long_sequence`; fp32 logits ≥ 25 % of the tensor peak → `large_vocab_logits`; else "
             "`default`). The `zero` class is derived by benchmarks/derive_zero_reserve.py (its section below).", "",
             "Per config: the simulate probe's allocation trace (model build and 2 steps, at the probe's depth) is "
             "replayed through probes/allocator.py with the default settings and with `expandable_segments:True`; "
             "r = (peak reserved + DeepSpeed's analytic partitions) / tensor peak − 1. The replay itself was checked "
             "against the GPU (benchmarks/results/allocator_replay.md).", "",
             "| class | n | r (expandable off): median [min, max] | r (on): median [min, max] |", "|---|---|---|---|"]
    for name, c in classes.items():
        lines.append(f"| {name} | {c['n']} | {100 * c['off']['median']:.1f} % [{100 * c['off']['min']:.1f}, "
                     f"{100 * c['off']['max']:.1f}] | {100 * c['on']['median']:.1f} % [{100 * c['on']['min']:.1f}, "
                     f"{100 * c['on']['max']:.1f}] |")
    lines += ["", "| model | config | class | tensor peak GiB | r off | r on |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['config']} | {r['class']} | {r['tensor_peak_gib']:.2f} | "
                     f"{100 * r['off']:.1f} % | {100 * r['on']:.1f} % |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
