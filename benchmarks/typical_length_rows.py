"""Which sample length a dev row on unsized data is best compared at: the evidence behind facts/assumebase.py
`TYPICAL_LONGEST_TOKENS` (issue #23, benchmarks/results/memory_qlora_mem16b.md).

The rows: dev measurements whose samples come from a dataset the source does not size (calib_data.samples_fill
false, no `longest_bound`). Each is estimated as a config at every doubling of 512 tokens below its cutoff_len and
at cutoff_len itself (as calibrate.py `predict` writes it), and compared with its measurement (`compare`). A rule
picks one of those lengths per row; the table gives each rule's median |error| and median signed error over
these rows, split by documentation tables and issue threads, and over every dev row (the others unchanged).

    PYTHONPATH=$PWD python benchmarks/typical_length_rows.py [--json /tmp/lengths.json]

CPU only, about half a minute. Prints a markdown table; writes only the --json file it is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import config_for, load_rows, longest_bound, samples_fill  # noqa: E402
from calibrate import _predict, compare  # noqa: E402


def errors_by_length(row: dict[str, Any]) -> dict[int, float]:
    """{tokens per sample: predicted / measured - 1} of `row` at each doubling of 512 below its cutoff_len and at
    cutoff_len (the row as written); empty when the doctor refuses it or it has no comparable measurement."""
    cut = int(config_for(row).get("cutoff_len") or 2048)
    out: dict[int, float] = {}
    n = 512
    while n < cut:
        p = _predict({**row, "config": {**row["config"], "cutoff_len": n}, "samples": "fill"})
        c = compare(row, p) if "error" not in p else None
        if c:
            out[n] = c["rel_err"]
        n *= 2
    p = _predict(row)
    c = compare(row, p) if "error" not in p else None
    if c:
        out[cut] = c["rel_err"]
    return out


def at_least(tokens: int) -> Callable[[dict[int, float]], float]:
    """The rule of facts/assume.py `typical_sample` with `tokens` as the typical length: the shortest evaluated
    length at or above min(tokens, cutoff_len)."""
    def pick(errs: dict[int, float]) -> float:
        cut = max(errs)
        return errs[min(n for n in errs if n >= min(tokens, cut))]
    return pick


def prior_median(errs: dict[int, float]) -> float:
    """The median of the log-uniform prior over the evaluated lengths (each an equal share): the lower middle."""
    ks = sorted(errs)
    return errs[ks[(len(ks) - 1) // 2]]


RULES: dict[str, Callable[[dict[int, float]], float]] = {
    "cutoff_len (before)": lambda errs: errs[max(errs)],
    "log-uniform prior's median": prior_median,
    **{f"min({n}, cutoff_len)": at_least(n) for n in (1024, 2048, 4096, 8192)},
}


def table(per_row: dict[str, dict[int, float]], rows: dict[str, dict[str, Any]], others: list[float]) -> list[str]:
    out = ["| point compared | rows | median abs | median signed | docs median abs | docs signed | threads median abs "
           "| threads signed | every dev row median abs |", "|---|---|---|---|---|---|---|---|---|"]
    for name, rule in RULES.items():
        got = {i: rule(e) for i, e in per_row.items() if e}
        docs = [v for i, v in got.items() if rows[i].get("source_type") != "issue-thread"]
        threads = [v for i, v in got.items() if rows[i].get("source_type") == "issue-thread"]
        every = [*got.values(), *others]
        out.append(f"| {name} | {len(got)} | {statistics.median(map(abs, got.values())):.1%} | "
                   f"{statistics.median(got.values()):+.1%} | {statistics.median(map(abs, docs)):.1%} | "
                   f"{statistics.median(docs):+.1%} | {statistics.median(map(abs, threads)):.1%} | "
                   f"{statistics.median(threads):+.1%} | {statistics.median(map(abs, every)):.1%} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write {row id: {tokens: error}} here")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = {r["id"]: r for r in load_rows() if r["split"] == "dev"}
    unsized = {i for i, r in rows.items() if r.get("measured") and not samples_fill(r) and longest_bound(r) is None}
    per_row = {i: errors_by_length(rows[i]) for i in sorted(unsized)}
    others = []
    for i, r in rows.items():
        if i in unsized or not r.get("measured"):
            continue
        p = _predict(r)
        c = compare(r, p) if "error" not in p else None
        if c:
            others.append(c["rel_err"])
    if args.json:
        Path(args.json).write_text(json.dumps(per_row, indent=1), encoding="utf-8")
    print("\n".join(table(per_row, rows, others)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
