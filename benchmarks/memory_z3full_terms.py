"""Every dev measurement of ZeRO-3 full fine-tuning (with or without offload), with its error and what the memory
model puts in each term at the peak: the listing issue 23's ZeRO-3 misses are read from.

Dev rows only (benchmarks/data/calibration_rows*.yaml whose ``split`` is dev; ZeRO-3 as calibrate.py `engine_of`
names it, ``method: full``). Errors as calibrate.py `compare` makes them: predicted / measured - 1 of the counter
the source measured. Terms are GiB of one rank from `estimate` (analyzers/memory/moments.py ``terms_bytes``):
the partitions (weights, the flat gradient partition, fp32 master, Adam states), the gathered parameters
(``live``), activations, logits, the step's fp32 gradient and temporaries, DeepSpeed's buckets, and the moment
the peak falls in. ``if outside zero.Init`` is the figure of the same counter the doctor would give the same run had its
model been built outside ``deepspeed.zero.Init`` (zero3.py `linear_weights_retained`, `unpartitioned_load_bytes`):
a what-if for the rows whose own training code is not read, never used to score them.

    PYTHONPATH=$PWD python benchmarks/memory_z3full_terms.py [--json FILE]

CPU only, about 15 s. Prints markdown; writes nothing unless --json is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import load_rows  # noqa: E402
from calibrate import DEFAULT_GPU, compare, engine_of, pins_for, write_row  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

GIB = float(1 << 30)
TERMS = ("weights", "grads_always", "master", "states", "live_params", "activations", "recompute", "logits",
         "logits_bwd", "grads_in_backward", "grads_step", "step_temp", "buffers")


def _assemble(row: dict):
    """`assemble_config` of the row as calibrate.py `predict` runs it (the same files and options)."""
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    with tempfile.TemporaryDirectory(prefix="z3full-") as tmp:
        path, acc = write_row(row, Path(tmp))
        mc = Path(tmp) / "model" / "config.json"
        env = None
        if pins_for(row):
            env = Path(tmp) / "pip-freeze.txt"
            env.write_text("".join(f"{k}=={v}\n" for k, v in sorted(pins_for(row).items())))
        gpu = row.get("gpu") or f"{int(row.get('world') or 1)}x{DEFAULT_GPU}"
        opts = Options(command="estimate", paths=(str(path),), gpu=gpu, offline=True,
                       env_file=str(env) if env else None, accelerate_config=str(acc) if acc else None,
                       model_config=str(mc) if mc.exists() else None)
        return assemble_config(str(path), (), opts)


def listing(ids: set[str] | None = None) -> list[dict]:
    """One dict per dev ZeRO-3 full row with a measurement: id, engine, counter, measured and predicted GiB, error,
    peak moment, the terms in GiB, and the what-if figure (same counter) outside zero.Init. `ids`: only these rows."""
    from finetune_doctor.analyzers.memory import estimate

    out = []
    for row in load_rows():
        if row.get("split") != "dev" or not engine_of(row).startswith("ZeRO-3") or row.get("method") != "full":
            continue
        if ids is not None and row["id"] not in ids:
            continue
        asm = _assemble(row)
        mem = asm.memory
        if mem is None:
            continue
        pred = {"total": mem.total, "peak_allocated": mem.peak_allocated,
                "runtime": float(mem.details.get("runtime_gib") or 0.0), "interval": None,
                "capacity": asm.hw.capacity_gib if asm.hw else None}
        c = compare(row, pred)
        if c is None:           # an outcome without a measurement
            continue
        tb = mem.details["terms_bytes"]
        what_if = estimate(dataclasses.replace(asm.run, zero3_init=False), asm.hw)
        outside = compare(row, {"total": what_if.total, "peak_allocated": what_if.peak_allocated, "interval": None,
                                "runtime": float(what_if.details.get("runtime_gib") or 0.0),
                                "capacity": pred["capacity"]})["predicted"]
        cfg = row.get("config") or {}
        out.append({"id": row["id"], "engine": engine_of(row), "counter": c["kind"] if c else None,
                    "measured": c["measured"] if c else None, "predicted": c["predicted"] if c else None,
                    "err": c["rel_err"] if c else None, "moment": mem.details.get("peak_moment"),
                    "allocated": mem.peak_allocated, "outside_init": outside,
                    "tokens": mem.details.get("tokens_per_micro_batch"), "gc": bool(asm.run.gradient_checkpointing),
                    "ga": cfg.get("gradient_accumulation_steps"), "optimizer": asm.run.optimizer_impl,
                    "terms": {k: tb.get(k, 0.0) / GIB for k in TERMS}})
    return out


def table(rows: list[dict]) -> str:
    """Markdown: the rows by error, then the medians."""
    head = ("| row | engine | counter | measured | predicted | error | peak moment | tokens/GA/ckpt/optim | "
            + " | ".join(TERMS) + " | if outside zero.Init |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(rows, key=lambda r: r["err"] if r["err"] is not None else 9):
        e = "-" if r["err"] is None else f"{100 * r['err']:+.1f}%"
        m = "-" if r["measured"] is None else f"{r['measured']:.1f}"
        p = "-" if r["predicted"] is None else f"{r['predicted']:.1f}"
        shape = f"{r['tokens']}/{r['ga']}/{'on' if r['gc'] else 'off'}/{r['optimizer']}"
        terms = " | ".join(f"{r['terms'][k]:.2f}" for k in TERMS)
        lines.append(f"| {r['id']} | {r['engine']} | {r['counter']} | {m} | {p} | {e} | {r['moment']} | {shape} | "
                     f"{terms} | {r['outside_init']:.1f} |")
    errs = [abs(r["err"]) for r in rows if r["err"] is not None]
    plain = [abs(r["err"]) for r in rows if r["err"] is not None and r["engine"] == "ZeRO-3"]
    lines.append("")
    lines.append(f"ZeRO-3 full, all: {len(errs)} measurements, median |error| {100 * statistics.median(errs):.1f}%; "
                 f"without offload: {len(plain)}, median {100 * statistics.median(plain):.1f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = listing()
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
