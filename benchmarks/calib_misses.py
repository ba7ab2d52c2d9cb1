"""The confident misses on the dev rows, one line per run: what the doctor needs against what the card gives.

Dev only (calib_data.assign_split: every row whose split is ``dev``): for each run with an outcome and a card whose
p_oom_model (pm, the memory model's own probability the verdict reads: pm = (p_oom − q/2)/(1 − q), since the
all-cause p_oom stays in [q/2, 1 − q/2] and never reaches 0.1 or 0.9 at q = 0.25), as calibrate.py reports it (the
shipped error table, the mixture over the open assumptions under the table's weights and prior on the longest
sample), is <= 0.1 on a run that ran out or >= 0.9 on a run that trained, print pm, the doctor's need and total
(GiB per GPU), the card's capacity (GiB), the verdict, and each open assumption with the peak of its alternatives.
Used to group the misses by cause (issue #21; benchmarks/calib_cal16.py groups them under leave-one-round-out); it
changes nothing and fits nothing. ``--all`` lists every dev run with an outcome, ``--ids A,B``
the named rows only.

Run: ``FINETUNE_DOCTOR_NO_NVML=1 HF_HUB_OFFLINE=1 python benchmarks/calib_misses.py [--ids ...]``
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from calib_data import load_rows   # noqa: E402
from calibrate import predict, reweigh   # noqa: E402


def line(row: dict, pred: dict, p: float | None) -> str:
    """One run as text: id, card, outcome, p_oom_model (`p`), need/total vs capacity, verdict, open assumptions' alternatives."""
    if "error" in pred:
        return f"{row['id']:<34} {row.get('gpu')!s:<18} {row['outcome']:<8} refused: {pred['error'][:120]}"
    _t, _hw, assumptions, _spec = pred["mix"]
    alts = []
    for a in assumptions:
        if a.effect_gib and a.name in pred["open"]:
            eff = ", ".join(f"{k}={v:.1f}" for k, v in list(a.effect_gib.items())[:4])
            alts.append(f"{a.name}[{a.value}: {eff}]")
    need = pred.get("need") or 0.0
    return (f"{row['id']:<34} {row.get('gpu')!s:<18} {row['outcome']:<8} p={p if p is None else round(p, 3)!s:<6} "
            f"need={need:.1f} total={pred['total']:.1f} cap={pred['capacity'] or 0:.1f} {pred['verdict']:<8} "
            f"shape={pred['shape']} | " + "; ".join(alts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--ids", default="")
    args = ap.parse_args(argv)
    from finetune_doctor.analyzers.memory import uncertainty as u

    rows = load_rows()
    want = {s for s in args.ids.split(",") if s}
    for row in rows:
        if row.get("split") != "dev" or row.get("outcome") not in ("oom", "trained") or not row.get("gpu"):
            continue
        if want and row["id"] not in want:
            continue
        pred = predict(row)
        out = reweigh(row, pred, u.table().get("assumption_weights") or {}, u.lengths_prior())
        p = out.get("p_oom")
        if p is not None:   # the memory model's own probability (uncertainty.py 'Two probabilities')
            q = u.unexplained_share(pred["method"])
            p = (p - q / 2) / (1 - q)
        miss = p is not None and ((row["outcome"] == "oom" and p <= 0.1) or (row["outcome"] == "trained" and p >= 0.9))
        if args.all or want or miss:
            print(line(row, pred, p), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
