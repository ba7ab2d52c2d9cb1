"""One dev round's measurements with the doctor's term split beside each error: the listing a round's misses are
sorted by kind from (benchmarks/results/memory_round7_dev.md for round 7).

Rows: benchmarks/data/calibration_rows*.yaml of round N with a measurement and ``split: dev`` (a held-out round
is refused: its rows are scored once, by calibrate.py). Errors and terms as benchmarks/memory_dev_terms.py
`score_with_terms` makes them (predicted / measured - 1 of the counter the source measured; GiB per GPU).

    PYTHONPATH=$PWD python benchmarks/memory_round_terms.py --round 7 [--json /tmp/r7.json]

CPU only, about half a minute for round 7. Prints markdown; writes only the optional --json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from calib_data import load_rows  # noqa: E402
from memory_dev_terms import TERMS, score_with_terms  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)


def listing(round_no: int) -> list[dict]:
    """Every dev row of `round_no` with a comparable measurement, scored with its term split (file order)."""
    rows = [r for r in load_rows() if int(r.get("round") or 1) == round_no and r.get("measured")]
    if any(r.get("split") != "dev" for r in rows):
        raise SystemExit(f"round {round_no} holds held-out rows: score it with calibrate.py, once")
    return [s for s in map(score_with_terms, rows) if s is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--json", help="write the scored rows here")
    args = ap.parse_args()
    scored = listing(args.round)
    print("| id | engine | counter | measured | predicted | error | " + " | ".join(TERMS[:-1]) + " | allocated |")
    print("|---|---|---|---|---|---|" + "---|" * (len(TERMS) - 1) + "---|")
    for s in scored:
        t = s["terms"]
        print(f"| {s['id']} | {s['engine']} | {s['counter']} | {s['measured_gib']:.2f} | {s['predicted_gib']:.2f} | "
              f"{s['err_pct']:+.1f}% | " + " | ".join(f"{t[k]:.1f}" for k in TERMS[:-1])
              + f" | {s['peak_allocated_gib']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(scored, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
