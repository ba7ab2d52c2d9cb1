"""Big single inputs (issue 17): a 256 MB trainer_log.jsonl, a 512 MB log of metric lines, a trainer_state.json of
100k entries, and a 4 MB log without a newline, each diagnosed by `doctor postmortem` in a fresh process; peak RSS
of the process tree (psutil, sampled every 50 ms) against the 400 MiB budget, and time.

The files, written to /tmp and removed afterwards: LLaMA-Factory LogCallback records (train/callbacks.py:271-310:
``{"current_steps", "total_steps", "loss", "lr", "epoch", "percentage", "elapsed_time", "remaining_time"}``), HF's
printed step dicts (``{'loss': ..., 'grad_norm': ..., 'learning_rate': ..., 'epoch': ...}``, transformers 4.x
``ProgressCallback.on_log``), TrainerState.save_to_json's layout (indent 2, sorted keys) and one line of trigger
words without a line feed. Linear time shows as the seconds per MB staying flat between a file and one half its
size (the ``half`` rows).

Run: ``.venv/bin/python benchmarks/bench_postmortem_big.py [--scale 1.0]``; results: benchmarks/results/postmortem_big.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench_postmortem_ranks import measure  # noqa: E402  (same folder: the process-tree RSS sampler)


def trainer_log(path: str, mb: float) -> None:
    rnd = random.Random(1)
    with open(path, "w", encoding="utf-8") as fh:
        size, s = 0, 0
        total = 10 ** 7
        while size < mb * 1e6:
            s += 1
            line = json.dumps({"current_steps": s, "total_steps": total, "loss": round(2 - s / total + rnd.random() * 0.05, 4),
                               "lr": 1e-4, "epoch": round(s / total, 4), "percentage": round(s / total * 100, 2),
                               "elapsed_time": "1:00:00", "remaining_time": "9:00:00"}) + "\n"
            fh.write(line)
            size += len(line)


def metric_log(path: str, mb: float) -> None:
    rnd = random.Random(2)
    with open(path, "w", encoding="utf-8") as fh:
        size, s = 0, 0
        while size < mb * 1e6:
            s += 1
            line = (f"{{'loss': {2 - s / 1e7 + rnd.random() * 0.05:.4f}, 'grad_norm': {rnd.random() + 0.5:.6f}, "
                    f"'learning_rate': {1e-4:.4e}, 'epoch': {s / 1e7:.2f}}}\n")
            fh.write(line)
            size += len(line)


def trainer_state(path: str, n: int) -> None:
    rnd = random.Random(3)
    hist = [{"epoch": i / 1000, "grad_norm": rnd.random() + 0.5, "learning_rate": 1e-4, "loss": 2 + rnd.random() * 0.1,
             "step": i} for i in range(1, n + 1)]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"global_step": n, "log_history": hist, "max_steps": n}, fh, indent=2, sort_keys=True)


def no_newline(path: str, mb: float) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("CUDA out of memory 'loss': NCCL Killed Traceback (most recent " * int(mb * 1e6 / 62))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--dir", default="/tmp/doctor_big")
    ap.add_argument("--result", default=os.path.join(ROOT, "benchmarks", "results", "postmortem_big.md"))
    ap.add_argument("--only", default=None, help="run only the cases whose label starts with this")
    a = ap.parse_args()
    cases = [("trainer_log.jsonl", trainer_log, 256), ("trainer_log.jsonl (half)", trainer_log, 128),
             ("metric lines log", metric_log, 512), ("metric lines log (half)", metric_log, 256),
             ("trainer_state.json, 100k entries", trainer_state, 100_000),
             ("log without newlines", no_newline, 4), ("log without newlines (half)", no_newline, 2)]
    rows = []
    for label, make, amount in cases:
        if a.only and not label.startswith(a.only):
            continue
        d = os.path.join(a.dir, label.split()[0].replace(".", "_") + str(amount))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        name = {trainer_log: "trainer_log.jsonl", metric_log: "train.log", trainer_state: "trainer_state.json",
                no_newline: "nonl.log"}[make]
        p = os.path.join(d, name)
        make(p, amount * a.scale if make is not trainer_state else int(amount * a.scale))
        r = measure([sys.executable, "-m", "finetune_doctor.cli", "postmortem", d, "--format", "json"], cwd=ROOT,
                    env={**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1"})
        size = os.path.getsize(p) / 1e6
        rep = json.loads(r["out"]) if r["out"] else {}
        rows.append((label, size, r["wall_s"], r["tree_peak_mib"], [f["name"] for f in rep.get("findings", [])]))
        shutil.rmtree(d, ignore_errors=True)
    lines = ["# postmortem on big single inputs", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; the machine "
             "is shared (its load is in the notes). Generated by `benchmarks/bench_postmortem_big.py`.", "",
             "| input | MB | seconds | s/MB | peak RSS MiB (budget 400) | findings |", "|---|---:|---:|---:|---:|---|"]
    for label, size, wall, rss, names in rows:
        lines.append(f"| {label} | {size:.0f} | {wall:.1f} | {wall / max(size, 1e-9):.3f} | {rss:.0f} | {names} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(a.result, "w", encoding="utf-8") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
