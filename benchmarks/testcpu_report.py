"""Tables from the files benchmarks/testcpu.py writes (one ``<worker>.json`` per xdist worker): per worker, per test
file and per test, CPU seconds (user+sys of the worker and its reaped children, ``os.times``) and wall seconds.

Usage: ``python benchmarks/testcpu_report.py DIR [N]`` prints markdown tables of the N (default 30) costliest files
and tests. CPU rather than wall because the machine the suite runs on here is shared and load inflates wall
unevenly (benchmarks/results/test_speed.md).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def load(folder: str) -> dict[str, dict]:
    """Worker name -> its record, for every ``*.json`` in `folder` (the plugin's output)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(folder).glob("*.json"))}


def report(folder: str, top: int = 30) -> str:
    """Markdown: a per-worker table, then the `top` files and the `top` tests by CPU seconds."""
    recs = load(folder)
    ctl = recs.pop("main", None)  # xdist's controller: no tests of its own, only its CPU
    lines = ["| worker | collection CPU s | tests CPU s | whole worker CPU s | tests | idle at end s |",
             "|---|---:|---:|---:|---:|---:|"]
    last_end = max(max(t[3] for t in r["tests"]) for r in recs.values() if r["tests"])
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0.0])
    tests = []
    for name, r in recs.items():
        coll = r["collected_cpu"] - r["start_cpu"]
        cpu = sum(t[1] for t in r["tests"])
        end = max((t[3] for t in r["tests"]), default=r["collected_wall"])
        lines.append(f"| {name} | {coll:.1f} | {cpu:.1f} | {r['end_cpu'] - r['start_cpu']:.1f} | {len(r['tests'])} "
                     f"| {last_end - end:.1f} |")
        for nodeid, c, w, _, *kid in r["tests"]:
            f = files[nodeid.split("::")[0]]
            f[0] += c
            f[1] += w
            f[2] += 1
            f[3] += kid[0] if kid else 0.0
            tests.append((c, w, name, nodeid, kid[0] if kid else 0.0))
    if ctl is not None and "end_children_cpu" in ctl:
        # the controller's children are the workers: its own CPU is what is left (the workers' exit counts there)
        own = ctl["end_cpu"] - ctl["end_children_cpu"] - ctl["start_cpu"]
        exits = ctl["end_children_cpu"] - sum(r["end_cpu"] for r in recs.values())
        lines.append(f"| controller (own) | | | {own:.1f} | | |")
        lines.append(f"| workers after their last report (exit) | | | {exits:.1f} | | |")
    lines += ["", f"Sum of per-test CPU: {sum(t[0] for t in tests):.1f} s over {len(tests)} tests.", "",
              f"Of it in child processes the tests started: {sum(t[4] for t in tests):.1f} s.", "",
              "| CPU s | of it children | wall s | tests | file |", "|---:|---:|---:|---:|---|"]
    for path, (c, w, n, k) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"| {c:.2f} | {k:.2f} | {w:.2f} | {n} | {path} |")
    lines += ["", "| CPU s | of it children | wall s | worker | test |", "|---:|---:|---:|---|---|"]
    for c, w, name, nodeid, k in sorted(tests, reverse=True)[:top]:
        lines.append(f"| {c:.2f} | {k:.2f} | {w:.2f} | {name} | `{nodeid}` |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30))
