"""Brier score and p_oom per run of one calibration round's dev rows with an outcome and a card, under the shipped
uncertainty table (calibrate.py `predict` + `reweigh`: the mixture over the open assumptions at the table's weights
and prior on the longest sample). Changes nothing, fits nothing: a before/after yardstick for a change to the memory
terms or to a row's translation, e.g. benchmarks/results/memory_round12_mem17.md.

    PYTHONPATH=/path/to/tree FINETUNE_DOCTOR_NO_NVML=1 HF_HUB_OFFLINE=1 python benchmarks/calib_round_brier.py --round 12
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calib_data import load_rows   # noqa: E402
from calibrate import predict, reweigh   # noqa: E402

# calibrate.py puts this checkout first on sys.path; the tree named on PYTHONPATH goes back in front of it
for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--round", type=int, required=True)
    args = ap.parse_args(argv)
    from finetune_doctor.analyzers.memory import uncertainty as u

    total, n = 0.0, 0
    for row in load_rows():
        if (row.get("round") != args.round or row.get("split") != "dev" or not row.get("gpu")
                or row.get("outcome") not in ("oom", "trained")):
            continue
        pred = predict(row)
        p = reweigh(row, pred, u.table().get("assumption_weights") or {}, u.lengths_prior()).get("p_oom")
        if p is None:
            continue
        total += (p - (row["outcome"] == "oom")) ** 2
        n += 1
        print(f"| {row['id']} | {row['outcome']} | {p:.3f} |")
    print(f"Brier {total / max(n, 1):.3f} over {n} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
