"""Median |error| of the memory estimate on the dev half of the published measurements (benchmarks/data/
calibration_rows*.yaml), per round and per the classes issue 23 names (ZeRO-3 with and without offload, QLoRA,
Ascend NPUs, DDP, ZeRO-2 at >= 8k tokens), so that a change to the memory terms or to a row's translation can be
read class by class. Errors as benchmarks/calibrate.py `compare` makes them (predicted / measured - 1 of the counter
the source measured). Only dev rows are assembled.

Run it against any tree by putting that tree first on PYTHONPATH (the rows, their translation and the classes are
this script's; the estimator is the tree's):

    PYTHONPATH=/path/to/base python benchmarks/memory_dev_classes.py --json /tmp/before.json
    PYTHONPATH=$PWD python benchmarks/memory_dev_classes.py --json /tmp/after.json --compare /tmp/before.json

CPU only, about a minute. Prints a markdown table; writes nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import load_rows  # noqa: E402
from calibrate import engine_of, score_all, seq_band  # noqa: E402

# calibrate.py puts this checkout first on sys.path; the tree named on PYTHONPATH goes back in front of it (nothing of
# finetune_doctor is imported before `score`), so the estimator is that tree's
for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

ORDER = ("all", "round 1", "round 2", "round 3", "round 4", "ZeRO-3 (with or without offload)", "ZeRO-3",
         "ZeRO-3+offload", "QLoRA (method)", "NPU (Ascend 910B)", "DDP", "ZeRO-2", "ZeRO-2+offload",
         "ZeRO-2 at >= 8k tokens", "FSDP", "FSDP+offload", "single", "unsloth")


def classes(row: dict) -> list[str]:
    """The groups one row counts in (a row is in several: its round, its engine, its method, its card)."""
    eng = engine_of(row)
    out = ["all", f"round {row.get('round', 1)}", eng]
    if row["method"] == "qlora":
        out.append("QLoRA (method)")
    if "910" in str(row.get("gpu") or ""):
        out.append("NPU (Ascend 910B)")
    if eng.startswith("ZeRO-3"):
        out.append("ZeRO-3 (with or without offload)")
    if eng.startswith("ZeRO-2") and seq_band(row) == ">= 8k tokens":
        out.append("ZeRO-2 at >= 8k tokens")
    if row["config"].get("use_unsloth"):   # round 4's notebooks and the LF + unsloth threads: the open loss term
        out.append("unsloth")
    return out


def score() -> dict[str, dict]:
    """id → {err, verdict, outcome, gpu} of every dev row (err None without a comparable measurement)."""
    rows = [r for r in load_rows() if r["split"] == "dev"]
    return {s["row"]["id"]: {"err": s["cmp"]["rel_err"] if s["cmp"] else None, "verdict": s["pred"].get("verdict"),
                             "outcome": s["row"].get("outcome"), "gpu": s["row"].get("gpu")}
            for s in score_all(rows)}


def table(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """Markdown rows: per group, n, median |error|, median signed error, max |error| and rows within 25 %, before
    and after (rows with a measurement on both sides)."""
    by_id = {r["id"]: r for r in load_rows()}
    groups: dict[str, list[str]] = {}
    for rid, a in after.items():
        b = before.get(rid)
        if a["err"] is None or not b or b["err"] is None:
            continue
        for g in classes(by_id[rid]):
            groups.setdefault(g, []).append(rid)
    out = ["| dev group | n | median abs error before | after | median signed before | after | max abs before | after "
           "| within 25 % before | after |", "|---|---|---|---|---|---|---|---|---|---|"]
    for g in [*ORDER, *sorted(set(groups) - set(ORDER))]:
        ids = groups.get(g)
        if not ids:
            continue
        eb, ea = [before[i]["err"] for i in ids], [after[i]["err"] for i in ids]
        out.append(f"| {g} | {len(ids)} | {statistics.median(map(abs, eb)):.1%} | {statistics.median(map(abs, ea)):.1%}"
                   f" | {statistics.median(eb):+.1%} | {statistics.median(ea):+.1%} | {max(map(abs, eb)):.1%} | "
                   f"{max(map(abs, ea)):.1%} | {sum(abs(x) <= 0.25 for x in eb)} | {sum(abs(x) <= 0.25 for x in ea)} |")

    def oom(d: dict[str, dict]) -> list[str]:
        return sorted(i for i, v in d.items() if v["outcome"] == "trained" and v["gpu"] and v["verdict"] == "oom")
    out += ["", f"Runs that trained called oom: before {oom(before) or 'none'}, after {oom(after) or 'none'}."]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write this tree's per-row errors here")
    ap.add_argument("--compare", help="per-row errors of another tree (this script's --json) to compare with")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    after = score()
    Path(args.json).write_text(json.dumps(after, indent=1), encoding="utf-8")
    before = json.loads(Path(args.compare).read_text(encoding="utf-8")) if args.compare else after
    print("\n".join(table(before, after)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
