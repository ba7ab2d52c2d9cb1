"""``doctor gpus --from`` on big inputs: peak RSS and time against the input size (issue 17, class 5).

What is measured: a generated ``doctor gpus --record`` JSONL recording (the real writer's line format: the
samples of fixtures/gpus/node0.jsonl, 4 cards with their processes, memory varied per sample) at several sizes
up to 1 GB, and an nvidia-smi ``--query-gpu`` CSV log of the same samples; each is read by ``doctor gpus --from
FILE --format json`` in a fresh interpreter, which reports its own peak RSS (``ru_maxrss``) and wall time.
Baselines, measured in the same run: the RSS of the same interpreter after the imports and an empty read (what
the program costs before any input), and the time per MB of the smallest file (a linear reader keeps that per-MB
time at every size; the ratio column says how far each size is from it). Plus one snapshot of 10,000 cards.

Usage: python benchmarks/bench_gpus_big.py [MAX_MB]   (default 1024; writes benchmarks/results/gpus_big.md)
The recordings go to a temporary folder and are deleted afterwards.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

FIX = ROOT / "fixtures" / "gpus" / "node0.jsonl"

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from finetune_doctor.pipeline import gpus as pipe
from finetune_doctor.settings import Options
from finetune_doctor.reporters.json import JsonReporter
files = sys.argv[1:]
if files:
    rep = pipe.run(Options(command="gpus"), from_files=files)
    JsonReporter().render(rep)
    n = rep.sections["gpus"]["samples"]
else:
    n = 0
print(json.dumps({"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "seconds": time.perf_counter() - t0, "samples": n}))
"""


def child(*files: str) -> dict:
    env = dict(os.environ, FINETUNE_DOCTOR_NO_NVML="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, *files], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def write_jsonl(path: Path, target_bytes: int) -> int:
    """A recording of about `target_bytes`: the fixture's header, then its samples over and over, with each
    card's used memory moved by the sample number (so peaks and the busiest card really vary)."""
    lines = FIX.read_text(encoding="utf-8").splitlines()
    header, body = lines[0], [json.loads(x) for x in lines[1:] if x.strip()]
    n = 0
    size = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n")
        while size < target_bytes:
            d = body[n % len(body)]
            d["time"] = 1717840800.0 + n
            for k, c in enumerate(d["cards"]):
                c["used_bytes"] = 60_000_000_000 + ((n * 7919 + k * 104729) % 4096) * (1 << 20)
            line = json.dumps(d, separators=(",", ":")) + "\n"
            f.write(line)
            size += len(line)
            n += 1
    return n


def write_csv(jsonl: Path, path: Path) -> None:
    from finetune_doctor.hardware.record import CsvRecorder
    from finetune_doctor.readers.gpus.smi import open_gpu_file

    rec = CsvRecorder(str(path))
    for snap in open_gpu_file(str(jsonl)):
        rec.write(snap)
    rec.close()


def write_wide(path: Path, cards: int) -> None:
    d = json.loads(FIX.read_text(encoding="utf-8").splitlines()[1])
    c0 = d["cards"][0]
    d["cards"] = [dict(c0, index=i, processes=[dict(c0["processes"][0], pid=100_000 + i)]) for i in range(cards)]
    path.write_text(json.dumps({"samples": [d]}), encoding="utf-8")


def main(max_mb: int) -> str:
    sizes = [s for s in (16, 64, 200, 512, 1024) if s <= max_mb]
    base = child()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            p = Path(tmp) / f"rec_{mb}.jsonl"
            t0 = time.perf_counter()
            n = write_jsonl(p, mb << 20)
            gen = time.perf_counter() - t0
            r = child(str(p))
            rows.append(("jsonl", mb, p.stat().st_size / 2**20, n, r, gen))
            print(rows[-1], flush=True)
            if mb == 200:
                c = Path(tmp) / "rec_200.csv"
                write_csv(p, c)
                rc = child(str(c))
                rows.append(("csv", 200, c.stat().st_size / 2**20, n, rc, 0.0))
                print(rows[-1], flush=True)
                c.unlink()
            p.unlink()
        wide = Path(tmp) / "wide.json"
        write_wide(wide, 10_000)
        rw = child(str(wide))
    per_mb0 = rows[0][4]["seconds"] / rows[0][2]
    lines = [
        "# doctor gpus --from on big recordings (benchmarks/bench_gpus_big.py)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work, Python "
        f"{platform.python_version()}. Run: `python benchmarks/bench_gpus_big.py {max_mb}`.",
        "",
        f"Baseline in the same run: a fresh interpreter with the imports and no input peaks at "
        f"**{base['rss_mib']:.0f} MiB** RSS; the time per MB of the smallest recording is "
        f"**{per_mb0 * 1e3:.0f} ms/MB**.",
        "",
        "| format | size (MiB) | samples | peak RSS (MiB) | RSS above baseline | time (s) | ms per MB | vs smallest |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fmt, _, size, n, r, _g in rows:
        per_mb = r["seconds"] / size
        lines.append(f"| {fmt} | {size:.0f} | {r['samples']} | {r['rss_mib']:.0f} | {r['rss_mib'] - base['rss_mib']:.0f} "
                     f"| {r['seconds']:.1f} | {per_mb * 1e3:.0f} | {per_mb / per_mb0:.2f} |")
    lines += [
        "",
        f"One snapshot of 10,000 cards (each with one process), read and judged: {rw['seconds']:.1f} s, "
        f"peak RSS {rw['rss_mib']:.0f} MiB.",
        "",
        "Before this change (issue 17), a 200 MB recording peaked at 862 MB and 10k cards took over 30 s. The "
        "readers now stream (readers/gpus/smi.py, one line at a time) into a SampleAccumulator that keeps each card's "
        "peak and 8 bytes per card per sample (analyzers/gpus/gpu_cards.py), so RSS grows with the cards, not the text.",
        "",
    ]
    text = "\n".join(lines)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "gpus_big.md").write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024))
