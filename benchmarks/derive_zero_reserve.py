#!/usr/bin/env python
"""Derive the `zero` shape class's allocator reserve (DeepSpeed ZeRO-2/3) from replays of DeepSpeed's own
allocation order, as benchmarks/derive_reserve.py derives the other classes.

Per config of GRID: the simulate probe traces the DeepSpeed replica's step (LoRA, the shape's batch and
sequence; probes/simulate.py at depths k and k+1), `zerotrace.full_depth` makes it full depth, and
`zerotrace.zero_trace` replaces the replica's build with DeepSpeed's and puts DeepSpeed's step allocations
(partitions, gathers and prefetch, IPG buckets, gradient partitions, fp32 sub-group gradients, Adam's states) among
its events, for LoRA (frozen base, adapter trained) or full fine-tuning (every parameter trained; the activations
are the LoRA replica's, which differ from full fine-tuning's by the adapter's small tensors). DeepSpeed's settings
are LLaMA-Factory's examples/deepspeed/ds_z2_config.json and ds_z3_config.json ("auto" filled by transformers from
the hidden size). The trace is replayed through probes/allocator.py with expandable segments off and on:

    r = peak reserved / peak allocated − 1            (shown, no capacity limit)
    needed = smallest capacity the replay completes in / peak allocated − 1   (bisection to 64 MiB)

Both as derive_reserve.py / derive_needed_reserve.py define them, except that the tensor peak is the replay's
(every DeepSpeed tensor is in the trace; nothing is added analytically). The class's entry in
finetune_doctor/analyzers/memory/reserve_table.json gets the median, min and max over the grid (needed per kind
of training, adapter or full), and benchmarks/results/reserve_derivation.md its section.

Usage (CPU only)::

    PYTHONPATH=$PWD python benchmarks/derive_zero_reserve.py [--no-write] [--no-needed] [--only 0,5] [--variants-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))
sys.path.append(str(ROOT / "benchmarks"))
TABLE = ROOT / "finetune_doctor" / "analyzers" / "memory" / "reserve_table.json"
DOC = ROOT / "benchmarks" / "results" / "reserve_derivation.md"
RAW = ROOT / "benchmarks" / "results" / "reserve_zero_rows.json"
GIB = float(1 << 30)
MIB64 = 64 << 20

Q7, L8 = "Qwen/Qwen2.5-7B", "meta-llama/Meta-Llama-3-8B"
# LLaMA-Factory's shipped ZeRO configs (zero_optimization blocks; finetune_doctor/catalog/lf_deepspeed/)
Z2 = {"stage": 2, "allgather_bucket_size": 5e8, "overlap_comm": False, "reduce_bucket_size": 5e8,
      "contiguous_gradients": True}
Z3 = {"stage": 3, "overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9,
      "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9}
# (model, tokens per sample, finetuning type, world size, zero block)
GRID = [(m, s, t, w, z) for m in (Q7, L8) for s in (2048, 8192) for t in ("lora", "full") for w in (2, 4, 8)
        for z in (Z2, Z3)]
# not in the class's median: DeepSpeed's double IPG buffers (overlap_comm, ZeRO-2); the optimizer offloaded to the
# host (LF's ds_z2_offload_config.json / ds_z3_offload_config.json), whose runs the class also covers
OFF = {"offload_optimizer": {"device": "cpu", "pin_memory": True}}
VARIANTS = [(Q7, 2048, "full", 4, {**Z2, "overlap_comm": True}), (Q7, 2048, "lora", 4, {**Z2, "overlap_comm": True}),
            (Q7, 2048, "full", 4, {**Z2, **OFF}), (Q7, 2048, "full", 4, {**Z3, **OFF}),
            (Q7, 2048, "lora", 4, {**Z3, **OFF}), (Q7, 8192, "full", 8, {**Z3, **OFF})]

_BASE: dict[tuple, tuple] = {}


def base_traces(model: str, seq: int) -> tuple:
    """(arch, the replica's traces at k and k+1 layers, simulation seconds) for a LoRA r8 run of `model` at
    `seq` tokens, micro batch 1, bf16, gradient checkpointing, under DeepSpeed ZeRO-2 over 2 ranks (the replica
    the simulate probe runs: no autocast, bf16 weights). Cached per (model, seq)."""
    key = (model, seq)
    if key not in _BASE:
        from derive_reserve import B, simulated

        from finetune_doctor.readers.model.modelcfg import load_arch

        _run, _spec, sim, _cls, secs = simulated(model, {**B, "finetuning_type": "lora", "cutoff_len": seq}, 2, 2)
        _BASE[key] = (load_arch(model)[0], sim.traces, secs)
    return _BASE[key]


def lora_params(arch, rank: int = 8) -> int:
    """Elements of a rank-`rank` LoRA on every linear of every layer (LF's lora_target all)."""
    return sum(rank * (lin.in_features + lin.out_features) * lin.count
               for i in range(arch.num_layers) for lin in arch.layer_linears(i))


def _smallest_capacity(trace, conf, lo: int, hi: int, n_layers: int) -> int:
    from finetune_doctor.probes.replay import replay

    if replay(trace, conf, capacity=lo, num_layers=n_layers).oom is None:
        return lo
    while hi - lo > MIB64:
        mid = (lo + hi) // 2
        if replay(trace, conf, capacity=mid, num_layers=n_layers).oom is None:
            hi = mid
        else:
            lo = mid
    return hi


def measure(model: str, seq: int, ftype: str, world: int, zero: dict, need: bool = True) -> dict:
    from finetune_doctor.probes.allocconf import parse_alloc_conf
    from finetune_doctor.probes.replay import replay
    from finetune_doctor.probes.zerotrace import full_depth, layout_from_arch, zero_trace

    arch, traces, secs = base_traces(model, seq)
    t0 = time.perf_counter()
    full = ftype == "full"
    lay = layout_from_arch(arch, zero["stage"], world, arch.num_layers, full,
                           adapter=0 if full else lora_params(arch), zero=zero)
    trace = zero_trace(full_depth(traces[0], traces[1], arch.num_layers), lay)
    out = {"model": model, "seq": seq, "type": ftype, "world": world, "stage": zero["stage"],
           "overlap_comm": bool(zero.get("overlap_comm")), "offload": lay.offload,
           "trains": "full" if full else "adapter",
           "events": len(trace.events), "base_sim_s": round(secs, 1)}
    for mode, conf in (("off", None), ("on", parse_alloc_conf("expandable_segments:True"))):
        rep = replay(trace, conf, num_layers=arch.num_layers)
        out[f"allocated_gib_{mode}"] = round(rep.peak_allocated / GIB, 3)
        out[f"reserved_gib_{mode}"] = round(rep.peak_reserved / GIB, 3)
        out[mode] = rep.peak_reserved / rep.peak_allocated - 1
        if need:
            cap = _smallest_capacity(trace, conf, rep.peak_allocated, rep.peak_reserved, arch.num_layers)
            out[f"needed_{mode}"] = cap / rep.peak_allocated - 1
    out["replay_s"] = round(time.perf_counter() - t0, 1)
    return out


def _stats(vals: list[float]) -> dict:
    return {"median": round(statistics.median(vals), 4), "min": round(min(vals), 4), "max": round(max(vals), 4)}


def class_entry(rows: list[dict]) -> dict:
    """The `zero` class's entry of reserve_table.json from the GRID rows (VARIANTS excluded)."""
    entry = {mode: _stats([r[mode] for r in rows]) for mode in ("off", "on")}
    entry["n"] = len(rows)
    entry["members"] = [f"{r['model']}: {r['type']}, ZeRO-{r['stage']}×{r['world']}, b1×{r['seq']}" for r in rows]
    entry["source"] = "benchmarks/derive_zero_reserve.py (DeepSpeed's allocation order, probes/zerotrace.py)"
    if all("needed_off" in r for r in rows):
        entry["needed"] = {}
        for kind in ("adapter", "full"):
            m = [r for r in rows if r["trains"] == kind]
            if m:
                entry["needed"][kind] = {mode: _stats([r[f"needed_{mode}"] for r in m]) for mode in ("off", "on")}
                entry["needed"][kind]["n"] = len(m)
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-needed", action="store_true")
    ap.add_argument("--only", help="comma-separated GRID indices (implies --no-write)")
    ap.add_argument("--variants-only", action="store_true", help="only the VARIANTS (prints them; writes nothing)")
    args = ap.parse_args(argv)
    t0 = time.process_time()
    grid = [GRID[int(i)] for i in args.only.split(",")] if args.only else GRID
    rows, variants = [], []
    for spec in grid if not args.variants_only else []:
        rows.append(measure(*spec, need=not args.no_needed))
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}), flush=True)
    if not args.only:
        for spec in VARIANTS:
            variants.append(measure(*spec, need=False))
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in variants[-1].items()}),
                  flush=True)
    cpu = time.process_time() - t0
    if args.variants_only:
        return 0
    entry = class_entry(rows)
    print(json.dumps({k: v for k, v in entry.items() if k != "members"}), f"cpu_s={cpu:.0f}")
    if args.no_write or args.only:
        return 0
    table = json.loads(TABLE.read_text(encoding="utf-8"))
    table["classes"]["zero"] = entry
    TABLE.write_text(json.dumps(table, indent=1, ensure_ascii=True) + "\n")
    RAW.write_text(json.dumps({"rows": rows, "variants": variants, "cpu_s": round(cpu)}, indent=1) + "\n")
    print(f"wrote the zero class of {TABLE} and {RAW}; its section of {DOC} is written by hand from them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
