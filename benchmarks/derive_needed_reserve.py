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

No table is written and nothing in the doctor reads this yet: it is the evidence for deciding whether a verdict
should compare ``peak × (1 + needed)`` with the card while ``total`` keeps the shown reserve (issue 23: the FSDP
LoRA 70B dev row is predicted over its card by the shown share while it trained).

Usage (CPU, about 30 s of simulation per config)::

    python benchmarks/derive_needed_reserve.py [--only 1,5]    # writes benchmarks/results/reserve_needed.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
DOC = ROOT / "benchmarks" / "results" / "reserve_needed.md"
MIB32 = 32 << 20


def needed(model: str, cfg: dict, world: int, stage: int | None) -> dict:
    from derive_reserve import simulated

    from finetune_doctor.probes.replay import replay_sim

    _run, spec, sim, cls, secs = simulated(model, cfg, world, stage)
    t = time.perf_counter()
    extra = sum(sim.analytic.values())
    free = replay_sim(sim, None)
    lo, hi = free.peak_allocated, free.peak_reserved
    if replay_sim(sim, None, capacity=lo).oom is None:
        hi = lo
    while hi - lo > MIB32:
        mid = (lo + hi) // 2
        if replay_sim(sim, None, capacity=mid).oom is None:
            hi = mid
        else:
            lo = mid
    return {"model": model, "config": spec.describe(), "class": cls,
            "shown": (free.peak_reserved + extra) / sim.peak_bytes - 1, "needed": (hi + extra) / sim.peak_bytes - 1,
            "tensor_peak_gib": sim.peak_gib, "s": round(secs + time.perf_counter() - t, 1)}


def main(argv: list[str] | None = None) -> int:
    from derive_reserve import GRID

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="1-based grid rows, comma-separated")
    args = ap.parse_args(argv)
    pick = [int(x) for x in args.only.split(",")] if args.only else range(1, len(GRID) + 1)
    rows = []
    for i in pick:
        r = needed(*GRID[i - 1])
        rows.append(r)
        print(f"{i:2d} {r['class']:20s} shown {r['shown']:.4f} needed {r['needed']:.4f} ({r['s']} s) {r['config']}",
              flush=True)
    lines = ["# The reserve a run needs to fit beside the reserve it shows (allocator replays, expandable segments off)",
             "", "Reproduce: `python benchmarks/derive_needed_reserve.py` (its docstring says what is computed and "
             "why). Shares of the simulated tensor peak.", "",
             "| class | model: config | tensor peak GiB | shown (no capacity limit) | needed (smallest capacity that "
             "completes) |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["class"]):
        lines.append(f"| {r['class']} | {r['model']}: {r['config']} | {r['tensor_peak_gib']:.2f} | {r['shown']:.3f} | "
                     f"{r['needed']:.3f} |")
    lines += ["", "| class | configs | median shown | median needed |", "|---|---|---|---|"]
    for c in sorted({r["class"] for r in rows}):
        m = [r for r in rows if r["class"] == c]
        lines.append(f"| {c} | {len(m)} | {statistics.median(r['shown'] for r in m):.3f} | "
                     f"{statistics.median(r['needed'] for r in m):.3f} |")
    DOC.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
