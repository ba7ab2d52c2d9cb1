"""Every dev measurement of the ZeRO-3 and DDP classes (issue 23), one line each, with its error's sign and size,
grouped by what the row's own data says about its figure, so that a miss can be read as a term the doctor lacks or
as a figure no term can reach.

The group of a row comes from the row's fields alone, never from its error (first rule that holds):

* ``npu``: an Ascend card (the NPU class is another engineer's lane; its rows are listed, not studied here);
* ``card-size``: the figure equals the card's marketed size in GB (a comment such as '4 * 24GB GPU memory' on
  24 GB cards states the card, not a reading: an upper bound);
* ``lengths-unknown``: the source trains on a real dataset (``samples: dataset``) whose longest sample no
  source states (no DATASET_LONGEST bound reaches the row, or the run packs), so the doctor is given the
  cutoff as every sample's length;
* ``counter-unknown``: lengths are known or filled, but the source does not say which counter it read;
* ``stated``: the counter and the lengths are both stated.

Dev rows only (every round of benchmarks/data/calibration_rows*.yaml whose ``split`` is dev). Errors as
benchmarks/calibrate.py `compare` makes them (predicted / measured - 1 of the counter the source measured). The
estimator is the tree first on PYTHONPATH, as in memory_dev_classes.py:

    PYTHONPATH=$PWD python benchmarks/memory_z3ddp_rows.py [--json FILE]

CPU only, about 15 s. Prints markdown; writes nothing unless --json is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import load_rows, longest_bound, samples_fill  # noqa: E402
from calibrate import engine_of, score_all  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

CLASSES = ("ZeRO-3", "DDP")
GROUPS = ("npu", "card-size", "lengths-unknown", "counter-unknown", "stated")


def in_class(row: dict) -> str | None:
    """``ZeRO-3`` (with or without offload) or ``DDP`` for a row of those engines, else None."""
    eng = engine_of(row)
    return next((c for c in CLASSES if eng.startswith(c)), None)


def card_of(row: dict):
    """The catalogue entry of the row's card, or None."""
    from finetune_doctor.hardware.catalog import lookup

    return lookup(re.sub(r"^\d+\s*[xX]\s*", "", str(row.get("gpu") or ""))) if row.get("gpu") else None


def group(row: dict) -> str:
    """The row's group (module docstring), from its fields only."""
    card = card_of(row)
    m = row.get("measured") or {}
    if card is not None and card.vendor == "huawei":
        return "npu"
    if card is not None and m.get("unit") == "GB" and float(m.get("value") or 0) == float(card.nominal_gb):
        return "card-size"
    cfg = row.get("config") or {}
    packs = bool(cfg.get("packing") or cfg.get("neat_packing"))
    if not samples_fill(row) and (packs or longest_bound(row) is None):
        return "lengths-unknown"
    if m.get("kind") == "unknown":
        return "counter-unknown"
    return "stated"


def listing() -> list[dict]:
    """One dict per dev ZeRO-3/DDP row with a comparable measurement: id, class, engine, group, method, round,
    framework, counter, measured and predicted GiB, error (a fraction); plus those without one (error None)."""
    rows = [r for r in load_rows() if r["split"] == "dev" and in_class(r)]
    out = []
    for s in score_all(rows):
        r, c = s["row"], s["cmp"]
        out.append({"id": r["id"], "class": in_class(r), "engine": engine_of(r), "group": group(r),
                    "method": r["method"], "round": r.get("round", 1), "framework": str(r.get("framework") or ""),
                    "counter": c["kind"] if c else (r.get("measured") or {}).get("kind"),
                    "measured": c["measured"] if c else None, "predicted": c["predicted"] if c else None,
                    "err": c["rel_err"] if c else None, "refused": s["pred"].get("error")})
    return out


def tables(items: list[dict]) -> list[str]:
    """Markdown: per class, the rows sorted by error, then the groups' sizes and median errors."""
    lines: list[str] = []
    for cls in CLASSES:
        rows = sorted((i for i in items if i["class"] == cls and i["err"] is not None), key=lambda i: i["err"])
        if not rows:
            continue
        errs = [i["err"] for i in rows]
        lines += [f"### {cls}: {len(rows)} dev measurements, median |error| "
                  f"{statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}", "",
                  "| row | engine | method | round | framework | group | counter | measured GiB | predicted GiB | error |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {i['id']} | {i['engine']} | {i['method']} | {i['round']} | {i['framework']} | {i['group']} | "
                  f"{i['counter']} | {i['measured']:.1f} | {i['predicted']:.1f} | {i['err']:+.1%} |" for i in rows]
        lines += ["", "| group | n | median signed | median abs | within 10 % |", "|---|---|---|---|---|"]
        for g in GROUPS:
            ge = [i["err"] for i in rows if i["group"] == g]
            if ge:
                lines.append(f"| {g} | {len(ge)} | {statistics.median(ge):+.1%} | "
                             f"{statistics.median(map(abs, ge)):.1%} | {sum(abs(e) <= 0.10 for e in ge)} |")
        lines.append("")
        none = [i["id"] for i in items if i["class"] == cls and i["err"] is None]
        if none:
            lines += [f"Without a comparable measurement (outcome rows): {len(none)}.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the rows here as well")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    items = listing()
    if args.json:
        Path(args.json).write_text(json.dumps(items, indent=1), encoding="utf-8")
    print("\n".join(tables(items)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
