"""Every dev measurement of one issue-23 class, row by row, with its error's sign and size and the framework that ran
it, then the class summarised per framework: the listing a class's misses are grouped by cause from.

Dev rows only (benchmarks/data/calibration_rows*.yaml rows whose ``split`` is dev; the classes are
benchmarks/memory_dev_classes.py's). Errors as benchmarks/calibrate.py `compare` makes them: predicted / measured - 1
of the counter the source measured (an npu-smi reading of an Ascend card carries the firmware's share,
calibrate.py `npu_smi_offset_gib`).

    PYTHONPATH=$PWD python benchmarks/memory_dev_rows.py                      # QLoRA and NPU
    PYTHONPATH=$PWD python benchmarks/memory_dev_rows.py --cls "DDP" --json /tmp/ddp.json

CPU only, about a minute for QLoRA (each row is one in-process `doctor estimate`). Prints markdown; writes only the
optional --json (one object per row).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import load_rows  # noqa: E402
from calibrate import engine_of, score_all  # noqa: E402
from memory_dev_classes import classes  # noqa: E402

# the tree named on PYTHONPATH goes back in front of this checkout (as memory_dev_classes.py does)
for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

DEFAULT_CLASSES = ("QLoRA (method)", "NPU (Ascend 910B)")


def family(row: dict) -> str:
    """The framework a row ran under, without the parenthesised detail (``ms-swift 1.x (transformers Trainer)`` →
    ``ms-swift 1.x``): the unit the misses are grouped by, since a framework's own code is what no LF key says."""
    return str(row.get("framework") or "?").split(" (", 1)[0]


def listing(cls: str) -> list[dict]:
    """One dict per dev row of `cls` with a comparable measurement: id, framework, model, card, engine, counter,
    measured and predicted GiB of that counter, the error in %, the predicted peak allocated, cutoff and batch."""
    rows = [r for r in load_rows() if r["split"] == "dev" and cls in classes(r)]
    out = []
    for s in score_all(rows):
        r, p, c = s["row"], s["pred"], s["cmp"]
        if c is None:
            continue
        out.append({"id": r["id"], "framework": family(r), "model": r["model"], "gpu": r.get("gpu"),
                    "engine": engine_of(r), "counter": c["kind"], "measured_gib": round(c["measured"], 2),
                    "predicted_gib": round(c["predicted"], 2), "err_pct": round(100 * c["rel_err"], 1),
                    "peak_allocated_gib": round(p.get("peak_allocated") or 0.0, 2),
                    "cutoff_len": r["config"].get("cutoff_len"),
                    "batch": r["config"].get("per_device_train_batch_size"), "date": r.get("date"),
                    "round": r.get("round", 1)})
    return sorted(out, key=lambda d: d["err_pct"])


def table(cls: str, items: list[dict]) -> list[str]:
    """Markdown: the rows, then per framework n, median |error|, median signed error and rows within 10 %."""
    out = [f"## {cls}: {len(items)} dev measurements", "",
           "| error | row | framework | model | card | engine | counter | measured GiB | predicted GiB |",
           "|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {d['err_pct']:+.1f}% | {d['id']} | {d['framework']} | {d['model']} | {d['gpu'] or '-'} | "
            f"{d['engine']} | {d['counter']} | {d['measured_gib']:.2f} | {d['predicted_gib']:.2f} |" for d in items]
    by: dict[str, list[float]] = {}
    for d in items:
        by.setdefault(d["framework"], []).append(d["err_pct"])
    out += ["", "| framework | n | median abs error | median signed | within 10 % |", "|---|---|---|---|---|"]
    for fw, errs in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append(f"| {fw} | {len(errs)} | {statistics.median(map(abs, errs)):.1f}% | "
                   f"{statistics.median(errs):+.1f}% | {sum(abs(e) <= 10 for e in errs)} |")
    if items:
        errs = [d["err_pct"] for d in items]
        out.append(f"| all | {len(errs)} | {statistics.median(map(abs, errs)):.1f}% | {statistics.median(errs):+.1f}% "
                   f"| {sum(abs(e) <= 10 for e in errs)} |")
    return out + [""]


def run_listing(argv: list[str] | None, doc: str, listing_of: Callable[[str], list[dict]],
                table_of: Callable[[str, list[dict]], list[str]]) -> int:
    """The command line of a per-class dev listing (this script's, memory_dev_terms.py's): --cls (repeatable) and
    --json; prints each class's markdown table."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--cls", action="append", help="a class of memory_dev_classes.py (repeatable); default QLoRA and NPU")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    every = {}
    for cls in args.cls or DEFAULT_CLASSES:
        every[cls] = listing_of(cls)
        print("\n".join(table_of(cls, every[cls])))
    if args.json:
        Path(args.json).write_text(json.dumps(every, indent=1), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_listing(argv, __doc__, listing, table)


if __name__ == "__main__":
    sys.exit(main())
