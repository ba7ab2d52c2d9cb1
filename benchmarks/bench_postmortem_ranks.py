"""Many ranks: `doctor postmortem` over a generated folder of per-rank logs, against `grep -c` over the same files
in the same run (issue 16: peak RSS under 500 MiB, wall time at most 3x grep's).

The folder (written to /tmp, never committed): ``node<N>/rank<R>.log`` for R in 0..ranks-1, 8 ranks a node, each
``--mb`` MB of what a rank-0 log of a DeepSpeed run holds per step (lines as the real writers print them): the
tqdm training bar, DeepSpeed's ThroughputTimer line ("epoch=0/micro_step=.../global_step=..., RunningAvgSamples
PerSec=..., MemAllocated=...GB", deepspeed/utils/timer.py ``ThroughputTimer.stop``) and, every 10 steps, HF's
metric dict. Every file starts with LLaMA-Factory's "Process rank: R, world size: W, device: cuda:G" line and ends
with the failure: one rank's CUDA OOM, the others' NCCL watchdog timeout, with ISO timestamps (kubectl) that
order them.

Baseline: ``grep -c -F -f words.txt FILES`` with words.txt = the reader's trigger words
(readers/runlogs/logpatterns.py TRIGGER_WORDS): grep counting the lines the doctor has to look at, GNU grep's fastest
mode for a set of fixed strings. Each is a fresh process; peak memory is the largest sum of RSS over the process
and its children (psutil, sampled every 50 ms).

Run: ``.venv/bin/python benchmarks/bench_postmortem_ranks.py [--ranks 256] [--mb 50] [--dir /tmp/doctor_ranks]``
(writes ranks x mb MB; about 13 GB at the defaults). Results: benchmarks/results/postmortem_ranks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

T0 = 1774058400.0   # 2026-03-21T02:00:00Z
TOTAL = 200000


def iso(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(mb: int, seed: int = 5, dicts: bool = True) -> bytes:
    """The steps of a rank log, `mb` MB; `dicts`: with HF's metric dict every 10 steps (rank 0 under HF, whose
    ProgressCallback prints on the world's process zero only)."""
    rnd = random.Random(seed)
    out: list[str] = []
    size = 0
    s = 0
    while size < mb * 1_000_000:
        s = s % TOTAL + 1
        left = (TOTAL - s) * 3
        lines = [f"  {100 * s // TOTAL:2d}%|{'█' * (s * 10 // TOTAL):<10}| {s}/{TOTAL} [{s * 3 // 60:02d}:{s * 3 % 60:02d}<"
                 f"{left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d},  3.00s/it]",
                 f"[2026-03-21 02:{s // 60 % 60:02d}:{s % 60:02d},123] [INFO] [timer.py:264:stop] epoch=0/micro_step="
                 f"{s * 8}/global_step={s}, RunningAvgSamplesPerSec=21.4, CurrSamplesPerSec=21.9, "
                 "MemAllocated=23.42GB, MaxMemAllocated=61.3GB"]
        if dicts and s % 10 == 0:
            lines.append(f"{{'loss': {2.0 - s / TOTAL + rnd.random() * 0.05:.4f}, 'grad_norm': {rnd.random() + 0.5:.6f}, "
                         f"'learning_rate': {1e-4 * (1 - s / TOTAL):.4e}, 'epoch': {s / TOTAL:.2f}}}")
        out.extend(lines)
        size += sum(len(x.encode()) + 1 for x in lines)
    return ("\n".join(out) + "\n").encode()


def generate(d: str, ranks: int, mb: int, culprit: int, dicts_on: str = "all") -> list[str]:
    """Write the folder; returns the files. `dicts_on`: which ranks print the metric dicts (all | rank0)."""
    shutil.rmtree(d, ignore_errors=True)
    mid = body(mb)
    plain = mid if dicts_on == "all" else body(mb, dicts=False)
    files = []
    for r in range(ranks):
        node = r // 8
        os.makedirs(os.path.join(d, f"node{node}"), exist_ok=True)
        p = os.path.join(d, f"node{node}", f"rank{r}.log")
        head = (f"{iso(T0)} [INFO|2026-03-21 02:00:00] llamafactory.hparams.parser:652 >> Process rank: {r}, world "
                f"size: {ranks}, device: cuda:{r % 8}, distributed training: True, compute dtype: torch.bfloat16\n")
        if r == culprit:
            t = T0 + 3600
            tail = (f"{iso(t)} [rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU "
                    f"{r % 8} has a total capacity of 79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, "
                    "this process has 78.08 GiB memory in use. Of the allocated memory 74.90 GiB is allocated by "
                    "PyTorch, and 1.95 GiB is reserved by PyTorch but unallocated.\n")
        else:
            t = T0 + 4200 + r * 0.001
            tail = (f"{iso(t)} [rank{r}]:[E321 03:10:00.{r:09d} ProcessGroupNCCL.cpp:1709] [PG 1 Rank {r}] Timeout "
                    "at NCCL work: 91580, last enqueued NCCL work: 91580, last completed NCCL work: 91579.\n")
        with open(p, "wb") as fh:
            fh.write(head.encode())
            fh.write(mid if r == 0 or dicts_on == "all" else plain)
            fh.write(tail.encode())
        files.append(p)
    return files


def measure(cmd: list[str], **kw) -> dict:
    """Wall seconds, the peak of the summed RSS of the process tree (MiB), and ru_maxrss of the process (MiB)."""
    import psutil

    import tempfile

    sink = tempfile.TemporaryFile()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, **kw)
    ps = psutil.Process(proc.pid)
    peak = 0
    out = b""
    while proc.poll() is None:
        try:
            tree = [ps] + ps.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - t
    sink.seek(0)
    out = sink.read()
    return {"wall_s": wall, "tree_peak_mib": peak / (1 << 20), "rc": proc.returncode, "out": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--dir", default="/tmp/doctor_ranks")
    ap.add_argument("--keep", action="store_true", help="keep the generated folder")
    ap.add_argument("--dicts-on", choices=("all", "rank0"), default="all",
                    help="ranks that print HF's metric dicts: every rank (worst case) or rank 0 (as HF does)")
    ap.add_argument("--result", default=os.path.join(ROOT, "benchmarks", "results", "postmortem_ranks.md"))
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of (grep, doctor) after the first grep; the ratio is of the medians")
    a = ap.parse_args()
    from finetune_doctor.readers.runlogs.logpatterns import TRIGGER_WORDS

    culprit = min(137, a.ranks - 1)
    t = time.perf_counter()
    files = generate(a.dir, a.ranks, a.mb, culprit, a.dicts_on)
    gen_s = time.perf_counter() - t
    total = sum(os.path.getsize(p) for p in files)
    words = a.dir.rstrip("/") + "-words.txt"     # beside the folder: a file in it would be read as a log
    with open(words, "w", encoding="utf-8") as fh:
        fh.write("\n".join(TRIGGER_WORDS) + "\n")
    # warm the page cache for both the same way: one untimed pass
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    import statistics

    greps, docs, loads = [], [], []
    greps.append(measure(["grep", "-c", "-F", "-f", words, *files]))
    for _ in range(a.repeat):   # alternated, so that both see the same contention
        loads.append(os.getloadavg()[0])
        docs.append(measure([sys.executable, "-m", "finetune_doctor.cli", "postmortem", a.dir, "--format", "json"],
                            cwd=ROOT, env={**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1"}))
        greps.append(measure(["grep", "-c", "-F", "-f", words, *files]))   # the page cache is the same
    loads.append(os.getloadavg()[0])
    grep, grep2, doc = greps[0], greps[-1], max(docs, key=lambda d: d["tree_peak_mib"])
    rep = json.loads(docs[-1]["out"])
    rk = rep["postmortem"]["ranks"] or {}
    ff = rk.get("first_failed") or {}
    grep_s = statistics.median(g["wall_s"] for g in greps) if a.repeat > 1 else min(grep["wall_s"], grep2["wall_s"])
    doc_s = statistics.median(d["wall_s"] for d in docs)
    doc = {**doc, "wall_s": doc_s}
    ratio = doc_s / grep_s
    g_runs = ", ".join(f"{g['wall_s']:.1f}" for g in greps)
    d_runs = ", ".join(f"{d['wall_s']:.1f}" for d in docs)
    lines = [
        "# postmortem over many rank logs",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. Generated by "
        "`benchmarks/bench_postmortem_ranks.py` (its docstring says what the files hold and how memory is measured).",
        "",
        f"* folder: {a.ranks} rank logs, {a.ranks // 8 + (a.ranks % 8 > 0)} nodes, {total / 1e9:.2f} GB "
        f"({total / a.ranks / 1e6:.1f} MB each), generated in {gen_s:.0f} s, page cache warmed before timing; "
        f"HF metric dicts printed by {'every rank (worst case)' if a.dicts_on == 'all' else 'rank 0 only (as HF does)'}",
        f"* baseline: `grep -c -F -f words.txt` with the reader's {len(TRIGGER_WORDS)} trigger words, run before "
        "and after the doctor (the faster of the two counts)",
        "",
        "| run | seconds | x grep | peak RSS of the process tree, MiB |",
        "|---|---:|---:|---:|",
        f"| grep -c (before) | {grep['wall_s']:.1f} | {grep['wall_s'] / grep_s:.2f} | {grep['tree_peak_mib']:.0f} |",
        f"| grep -c (after) | {grep2['wall_s']:.1f} | {grep2['wall_s'] / grep_s:.2f} | {grep2['tree_peak_mib']:.0f} |",
        f"| doctor postmortem | {doc['wall_s']:.1f} | {ratio:.2f} | {doc['tree_peak_mib']:.0f} |",
        "",
        f"Runs ({a.repeat} round(s), alternated): grep {g_runs} s; "
        f"doctor {d_runs} s; medians {grep_s:.1f} / {doc_s:.1f} s "
        f"(grep's median over all its runs when repeated, else the faster of two); 1-minute load average at each "
        f"doctor run and at the end: {', '.join(f'{x:.1f}' for x in loads)}.",
        "",
        f"Diagnosis: first failed rank {ff.get('rank')} on {ff.get('node')} (GPU {ff.get('gpu')}, {ff.get('kind')}; "
        f"generated culprit {culprit}), {rk.get('waiting_count')} ranks waiting, findings "
        f"{[f['name'] for f in rep['findings']]}.",
        "",
        f"Budgets (issue 16): peak RSS < 500 MiB: {'met' if doc['tree_peak_mib'] < 500 else 'NOT met'}; wall time <= 3x "
        f"grep: {'met' if ratio <= 3 else 'NOT met'} ({ratio:.2f}x).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(a.result, "w", encoding="utf-8") as fh:
        fh.write(text)
    if not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)
        os.unlink(words)


if __name__ == "__main__":
    main()
