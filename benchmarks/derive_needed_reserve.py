#!/usr/bin/env python
"""The allocator reserve a run *needs* to fit, beside the reserve it *shows* on a roomy card, per shape class.

benchmarks/derive_reserve.py derives ``r = peak reserved / tensor peak − 1`` from allocator replays with no
capacity limit: what ``max_memory_reserved`` (and, with the runtime, nvidia-smi) shows on a card with room to
spare. A run near the card's capacity does not need all of it: before it raises an OOM, torch's caching allocator
frees its cached segments that hold no live block and retries the request (c10/cuda/CUDACachingAllocator.cpp
``malloc``: ``alloc_block`` || ``release_available_cached_blocks`` && ``alloc_block`` || ``release_cached_blocks``
&& ``alloc_block``; modelled in finetune_doctor/probes/allocator.py ``malloc``). What it cannot free is the free
space inside segments that still hold a live block. This script replays the same grid (derive_reserve.GRID,
expandable segments off) at decreasing capacities and finds, by bisection to 32 MiB, the smallest capacity at
which the step completes: ``needed = min capacity / tensor peak − 1`` (the analytic partitions added as in
derive_reserve.py).

Both allocator modes are replayed: expandable segments off (the default) and on (``expandable_segments:True``,
which llamafactory-cli exports for its torchrun launches); with them on, the retry also unmaps the free pages of
the expandable segment (``release_cached_blocks`` → ``unmap_block``), so the need is smaller still.

The class medians go into the ``needed`` entry of each class of finetune_doctor/analyzers/memory/reserve_table.json
(the shown columns, written by derive_reserve.py, are kept): analyzers/memory/reserve.py ``needed_fraction`` reads
them, and the verdict (fits/oom/p_oom) compares ``peak × (1 + needed)`` + runtime with the card while ``total``
keeps the shown reserve for comparison with measured reserved/nvidia-smi figures (issue 23: the FSDP LoRA 70B dev
row was predicted over its card by the shown share while it trained).

Usage (CPU, about 30 s of simulation per config)::

    python benchmarks/derive_needed_reserve.py [--only 1,5] [--no-write]
    # writes benchmarks/results/reserve_needed.md and (a full grid only) reserve_table.json's ``needed``
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
sys.path.insert(0, str(ROOT / "benchmarks"))
DOC = ROOT / "benchmarks" / "results" / "reserve_needed.md"
MIB32 = 32 << 20


def _smallest_capacity(sim, conf) -> tuple[int, int]:
    """(peak reserved with no limit, smallest capacity at which the replay completes, to 32 MiB) in bytes."""
    from finetune_doctor.probes.replay import replay_sim

    free = replay_sim(sim, conf)
    lo, hi = free.peak_allocated, free.peak_reserved
    if replay_sim(sim, conf, capacity=lo).oom is None:
        hi = lo
    while hi - lo > MIB32:
        mid = (lo + hi) // 2
        if replay_sim(sim, conf, capacity=mid).oom is None:
            hi = mid
        else:
            lo = mid
    return free.peak_reserved, hi


def needed(model: str, cfg: dict, world: int, stage: int | None) -> dict:
    from derive_reserve import simulated

    from finetune_doctor.probes.allocconf import parse_alloc_conf

    _run, spec, sim, cls, secs = simulated(model, cfg, world, stage)
    t = time.perf_counter()
    extra = sum(sim.analytic.values())
    out = {"model": model, "config": spec.describe(), "class": cls, "tensor_peak_gib": sim.peak_gib,
           "trains": trains_of(cfg.get("finetuning_type", "lora"))}
    for mode, conf in (("off", None), ("on", parse_alloc_conf("expandable_segments:True"))):
        shown, cap = _smallest_capacity(sim, conf)
        suffix = "" if mode == "off" else "_on"
        out["shown" + suffix] = (shown + extra) / sim.peak_bytes - 1
        out["needed" + suffix] = (cap + extra) / sim.peak_bytes - 1
    out["s"] = round(secs + time.perf_counter() - t, 1)
    return out


def trains_of(finetuning_type: str) -> str:
    """``full`` for runs that train the base weights (full, freeze), ``adapter`` for the rest: the grid shows the
    two apart (an adapter run's gradients and optimizer states are small, so the segments that held its freed
    activations hold nothing else and are released; a full run's states and gradients share those segments)."""
    from finetune_doctor.analyzers.memory.reserve import trains_kind

    return trains_kind(finetuning_type)


def write_table(rows: list[dict]) -> None:
    """Each class's ``needed`` entry in reserve_table.json: per kind of training (`trains_of`) and allocator mode,
    the median, min and max over the class's configs of that kind (a kind without configs in a class is absent:
    the doctor then takes the shown share). The rest of the table stays as derive_reserve.py wrote it."""
    from derive_reserve import TABLE

    table = json.loads(TABLE.read_text(encoding="utf-8"))
    for name, entry in table["classes"].items():
        if not any(r["class"] == name for r in rows):
            continue   # a class this grid does not replay (`zero`: derive_zero_reserve.py) keeps its need
        entry.pop("needed", None)
        for kind in ("adapter", "full"):
            m = [r for r in rows if r["class"] == name and r["trains"] == kind]
            if not m:
                continue
            entry.setdefault("needed", {})[kind] = {
                mode: {"median": round(statistics.median(r[key] for r in m), 4),
                       "min": round(min(r[key] for r in m), 4), "max": round(max(r[key] for r in m), 4)}
                for mode, key in (("off", "needed"), ("on", "needed_on"))}
            entry["needed"][kind]["n"] = len(m)
    table["about_needed"] = ("'needed': the smallest capacity at which the replay completes, as a share of the tensor "
                             "peak (the allocator frees cached blocks and retries before an OOM); regenerate with "
                             "benchmarks/derive_needed_reserve.py")
    TABLE.write_text(json.dumps(table, indent=1, ensure_ascii=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    from derive_reserve import GRID

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="1-based grid rows, comma-separated")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    pick = [int(x) for x in args.only.split(",")] if args.only else range(1, len(GRID) + 1)
    rows = []
    for i in pick:
        r = needed(*GRID[i - 1])
        rows.append(r)
        print(f"{i:2d} {r['class']:20s} shown {r['shown']:.4f} needed {r['needed']:.4f} "
              f"on: {r['shown_on']:.4f} {r['needed_on']:.4f} ({r['s']} s) {r['config']}", flush=True)
    if args.no_write:
        return 0
    lines = ["# The reserve a run needs to fit beside the reserve it shows (allocator replays, expandable segments off)",
             "", "Reproduce: `python benchmarks/derive_needed_reserve.py` (its docstring says what is computed and "
             "why). Shares of the simulated tensor peak.", "",
             "| class | model: config | tensor peak GiB | shown (no capacity limit) | needed (smallest capacity that "
             "completes) | shown, expandable | needed, expandable |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["class"]):
        lines.append(f"| {r['class']} | {r['model']}: {r['config']} | {r['tensor_peak_gib']:.2f} | {r['shown']:.3f} | "
                     f"{r['needed']:.3f} | {r['shown_on']:.3f} | {r['needed_on']:.3f} |")
    lines += ["", "| class, training | configs | median shown | median needed | median shown, expandable | median needed, "
              "expandable |", "|---|---|---|---|---|---|"]
    for c, kind in sorted({(r["class"], r["trains"]) for r in rows}):
        m = [r for r in rows if r["class"] == c and r["trains"] == kind]
        lines.append(f"| {c}, {kind} | {len(m)} | {statistics.median(r['shown'] for r in m):.3f} | "
                     f"{statistics.median(r['needed'] for r in m):.3f} | "
                     f"{statistics.median(r['shown_on'] for r in m):.3f} | "
                     f"{statistics.median(r['needed_on'] for r in m):.3f} |")
    DOC.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {DOC}")
    if not args.only:
        write_table(rows)
        print("wrote reserve_table.json's needed entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
