"""Every dev row that trains in pure bf16 (``pure_bf16: true``) or fully fine-tunes under FSDP, with the precision
the doctor resolves for it and what the memory model puts in each term at the peak: the listing issue 23's pure-bf16
FSDP misses (rounds 9 and 10: llama-cookbook's two FSDP rows and Liger's HF FSDP Qwen2-7B called ``oom``) are read
from.

Dev rows only (benchmarks/data/calibration_rows*.yaml whose ``split`` is dev). For each row: framework, the bf16 /
pure_bf16 keys as written, the accelerate mixed precision its framework rule gives (calib_data.py
FRAMEWORK_MIXED_PRECISION), the resolved trainable dtype and FSDP param dtype, the terms of one rank in GiB at the
peak (`estimate`'s ``per_gpu``: weights, gradients, optimizer = masters + states + step temporaries, activations,
logits, runtime = runtime + allocator reserve), the need the verdict is decided on, the card's capacity, the verdict
and the outcome or the error against the measured counter (calibrate.py `compare`).

    PYTHONPATH=$PWD python benchmarks/memory_purebf16_rows.py [--json FILE]

CPU only. Prints markdown; writes nothing unless --json is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import FRAMEWORK_MIXED_PRECISION, load_rows  # noqa: E402
from calibrate import compare, predict  # noqa: E402
from memory_z3full_terms import _assemble  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

COLS = ("weights", "gradients", "optimizer", "activations", "logits", "runtime")


def selected(row: dict) -> bool:
    """A pure-bf16 row, or an FSDP full fine-tune."""
    cfg = row.get("config") or {}
    return bool(cfg.get("pure_bf16")) or (bool(row.get("fsdp")) and cfg.get("finetuning_type") == "full")


def describe(row: dict) -> dict:
    """One row's precision, terms (GiB), need, capacity, verdict and error."""
    pred = predict(row)
    out = {"id": row["id"], "framework": row.get("framework"), "gpu": row.get("gpu"),
           "bf16": (row["config"] or {}).get("bf16"), "pure_bf16": (row["config"] or {}).get("pure_bf16"),
           "acc_mp": (FRAMEWORK_MIXED_PRECISION.get(str(row.get("framework")), "bf16") if row.get("fsdp") else None),
           "outcome": row.get("outcome")}
    if "error" in pred:
        return {**out, "error": pred["error"]}
    asm = _assemble(row)
    mem, run = asm.memory, asm.run
    cmp = compare(row, pred)
    out.update(trainable=run.trainable_dtype, fsdp_pd=getattr(run, "fsdp_param_dtype", None),
               autocast=run.autocast, terms={k: round(mem.per_gpu.get(k, 0.0), 2) for k in COLS},
               total=round(mem.total, 2), need=round(mem.need, 2), capacity=pred.get("capacity"),
               verdict=pred.get("verdict"), err=None if cmp is None else round(cmp["rel_err"], 3))
    return out


def table(rows: list[dict]) -> list[str]:
    head = ("| row | framework | bf16 / pure_bf16 / acc. mp | trainable / FSDP param / autocast | "
            + " | ".join(COLS) + " | need | card | verdict | outcome / error |")
    out = [head, "|" + "---|" * (len(COLS) + 8)]
    for d in rows:
        keys = f"{d['bf16']} / {d['pure_bf16']} / {d['acc_mp'] or '—'}"
        if "error" in d:
            out.append(f"| {d['id']} | {d['framework']} | {keys} | error: {d['error'][:60]} |")
            continue
        prec = f"{d['trainable']} / {d['fsdp_pd'] or '—'} / {d['autocast'] or '—'}"
        res = d["outcome"] if d["err"] is None else f"{d['err']:+.1%}"
        cap = "—" if d["capacity"] is None else f"{d['capacity']:.1f}"
        out.append(f"| {d['id']} | {d['framework']} | {keys} | {prec} | "
                   + " | ".join(f"{d['terms'][k]:.2f}" for k in COLS)
                   + f" | {d['need']:.2f} | {cap} | {d['verdict']} | {res} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the per-row figures here")
    args = ap.parse_args(argv)
    rows = [describe(r) for r in load_rows() if r["split"] == "dev" and selected(r)]
    print("\n".join(table(rows)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
