"""Benchmark: `doctor postmortem` on a 1,000,000-step TensorBoard event file and a 2 GB captured log.

Baselines, measured in the same run on the same event file: TensorBoard's ``EventAccumulator`` with its default
size guidance (keeps 10,000 scalars per tag), ``EventAccumulator`` keeping everything, and ``tbparse``'s
``SummaryReader`` (pandas). Every measurement runs in a fresh Python process; its peak RSS is the child's
``ru_maxrss`` from ``os.wait4``. Inputs are generated in a temporary directory:

* ``runs/<date>_<host>/events.out.tfevents.*``: 1,000,000 steps × (train/loss, train/grad_norm,
  train/learning_rate), written by ``torch.utils.tensorboard.SummaryWriter`` as transformers'
  TensorBoardCallback would (one NaN burst and one loss spike are planted).
* ``train.log`` (2 GB): per optimizer step a tqdm bar update (``\\r``-separated, as a non-tty tqdm writes it)
  and a DeepSpeed wall-clock timer line; every 10 steps an HF loss dict; a few fp16 OVERFLOW lines; a CUDA OOM
  traceback at the end.

Run: ``.venv/bin/python benchmarks/bench_postmortem.py [--steps N] [--log-gb G] [--out FILE]``; the result is
written as markdown (default benchmarks/results/postmortem.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable


def write_events(run_dir: str, steps: int) -> str:
    from torch.utils.tensorboard import SummaryWriter

    logdir = os.path.join(run_dir, "runs", "Jan01_00-00-00_bench")
    w = SummaryWriter(log_dir=logdir, max_queue=10000, flush_secs=600)
    for s in range(1, steps + 1):
        loss = 2.0 * math.exp(-s / (steps / 3)) + 0.3 + 0.02 * math.sin(s * 0.7)
        gn = 1.0 + 0.3 * math.sin(s * 0.13)
        if s == steps // 2:
            loss = 9.0
        if steps - 50 < s <= steps - 40:
            loss, gn = float("nan"), float("nan")
        w.add_scalar("train/loss", loss, s)
        w.add_scalar("train/grad_norm", gn, s)
        w.add_scalar("train/learning_rate", 2e-5 * min(1.0, s / 1000), s)
    w.close()
    return next(os.path.join(logdir, f) for f in os.listdir(logdir))


def write_log(path: str, target_bytes: int) -> tuple[int, int]:
    """A realistic 2 GB capture; returns (bytes, optimizer steps)."""
    total = 4_000_000     # the bar's total: big enough for the whole file
    out = open(path, "w", encoding="utf-8", newline="")
    out.write("[INFO|2026-01-01 00:00:00] llamafactory.hparams.parser:651 >> Process rank: 0, world size: 8, "
              "device: cuda:0, distributed training: True, compute dtype: torch.float16\n")
    out.write(f"[INFO|trainer.py:2136] 2026-01-01 00:00:10,000 >>   Total optimization steps = {total:,}\n")
    written = 0
    step = 0
    buf = []
    while written < target_bytes:
        for _ in range(10):
            step += 1
            pct = step * 100 // total
            buf.append(f"\r{pct:3d}%|          | {step}/{total} [1:02:03<99:01:02,  1.23s/it]")
            buf.append(f"[2026-01-01 01:02:03,456] [INFO] [timer.py:260:stop] epoch=0/micro_step={step * 8}/"
                       f"global_step={step}, RunningAvgSamplesPerSec=101.2345, CurrSamplesPerSec=99.8765, "
                       f"MemAllocated=21.37GB, MaxMemAllocated=39.88GB\n")
        loss = 2.0 * math.exp(-step / 1e6) + 0.3 + 0.01 * math.sin(step)
        buf.append(f"{{'loss': {loss:.4f}, 'grad_norm': {1.0 + 0.2 * math.sin(step * 0.1)!r}, "
                   f"'learning_rate': {2e-5 * (1 - step / total)!r}, 'epoch': {step / total * 3:.2f}}}\n")
        if step % 1_000_000 == 0:
            buf.append(f"[2026-01-01 01:02:03,456] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! "
                       f"Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n")
        if len(buf) > 20000:
            s = "".join(buf)
            out.write(s)
            written += len(s)
            buf = []
    s = "".join(buf) + (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/opt/venv/lib/python3.11/site-packages/deepspeed/runtime/zero/stage3.py", line 1408, in partition_grads\n'
        "[rank3]:     grad_buffer = self.__param_id_to_grad_partition[param.ds_id].narrow(0, 0, grad_partition.numel())\n"
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has a total capacity "
        "of 79.15 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory in "
        "use. Of the allocated memory 74.02 GiB is allocated by PyTorch, and 2.41 GiB is reserved by PyTorch but "
        "unallocated.\n")
    out.write(s)
    written += len(s)
    out.close()
    return os.path.getsize(path), step


CHILD = {
    "ours-event-file": """
from finetune_doctor.readers.runlogs.tbevents import read_event_file
ev = read_event_file({event!r})
RESULT = {{"points": sum(len(s) for s in ev.series), "tags": len(ev.series)}}
""",
    "eventaccumulator-default": """
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator({event!r})
acc.Reload()
RESULT = {{"points": sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"]), "tags": len(acc.Tags()["scalars"])}}
""",
    "eventaccumulator-keep-all": """
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator({event!r}, size_guidance={{ea.SCALARS: 0, ea.TENSORS: 0}}, purge_orphaned_data=False)
acc.Reload()
RESULT = {{"points": sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"]), "tags": len(acc.Tags()["scalars"])}}
""",
    "tbparse": """
from tbparse import SummaryReader
df = SummaryReader({event!r}).scalars
RESULT = {{"points": int(len(df)), "tags": int(df["tag"].nunique())}}
""",
    "doctor-postmortem-log-only": """
from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options
import tempfile
empty = tempfile.mkdtemp()
r = pm.run(empty, [{log!r}], None, Options(command="postmortem"))
RESULT = {{"findings": [f.name for f in r.findings], "events": len(r.timeline)}}
""",
    "doctor-postmortem-full": """
from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options
from finetune_doctor.reporters import render
r = pm.run({run_dir!r}, [{log!r}], None, Options(command="postmortem"))
render(r, "json")
RESULT = {{"findings": [f.name for f in r.findings], "events": len(r.timeline),
          "read": [(f["kind"], f["items"]) for f in r.sections["read"]["files"]]}}
""",
}


def measure(name: str, **paths: str) -> dict:
    code = CHILD[name].format(**paths) + "\nimport json, sys\nsys.stdout.write('@@' + json.dumps(RESULT))\n"
    t0 = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT})
    out, err = b"", b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    out = proc.stdout.read()
    err = proc.stderr.read()
    if status != 0:
        raise SystemExit(f"{name} failed:\n{err.decode()[-3000:]}")
    result = json.loads(out.decode().rsplit("@@", 1)[1])
    return {"name": name, "seconds": elapsed, "peak_rss_mib": usage.ru_maxrss / 1024, "result": result}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--log-gb", type=float, default=2.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "postmortem.md"))
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    ap.add_argument("--generate", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:   # child: write the inputs (torch stays out of the measuring parent)
        run_dir = os.path.join(args.generate, "run")
        os.makedirs(run_dir)
        t = time.perf_counter()
        event = write_events(run_dir, args.steps)
        t_ev = time.perf_counter() - t
        log = os.path.join(args.generate, "train.log")
        t = time.perf_counter()
        log_bytes, log_steps = write_log(log, int(args.log_gb * (1 << 30)))
        print(json.dumps({"event": event, "log": log, "run_dir": run_dir, "log_bytes": log_bytes,
                          "log_steps": log_steps, "t_events": t_ev, "t_log": time.perf_counter() - t}))
        return
    # the parent stays small: Linux carries a process's peak RSS across fork+exec into its children's ru_maxrss
    tmp = tempfile.mkdtemp(prefix="bench_postmortem_")
    gen = subprocess.run([PY, os.path.abspath(__file__), "--generate", tmp, "--steps", str(args.steps),
                          "--log-gb", str(args.log_gb)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT})
    if gen.returncode:
        raise SystemExit(gen.stderr[-3000:])
    g = json.loads(gen.stdout.strip().splitlines()[-1])
    event, log, run_dir, log_bytes, log_steps = g["event"], g["log"], g["run_dir"], g["log_bytes"], g["log_steps"]
    print(f"inputs: {event} ({os.path.getsize(event) / 2**20:.0f} MiB, {g['t_events']:.0f} s); {log} "
          f"({log_bytes / 2**30:.2f} GiB, {log_steps} steps, {g['t_log']:.0f} s)", flush=True)
    rows = []
    for name in ("ours-event-file", "eventaccumulator-default", "eventaccumulator-keep-all", "tbparse",
                 "doctor-postmortem-log-only", "doctor-postmortem-full"):
        m = measure(name, event=event, log=log, run_dir=run_dir)
        print(json.dumps(m), flush=True)
        rows.append(m)
    by = {r["name"]: r for r in rows}
    ours = by["ours-event-file"]["seconds"]
    lines = [
        "# postmortem benchmark",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; tensorboard stub reader (no TensorFlow). Generated by "
        "`benchmarks/bench_postmortem.py`; every row is a fresh process, peak RSS from `os.wait4`.",
        "",
        f"* event file: {args.steps:,} steps × 3 scalar tags ({os.path.getsize(event) / 2**20:.0f} MiB), torch "
        "SummaryWriter",
        f"* text log: {log_bytes / 2**30:.2f} GiB, {log_steps:,} optimizer steps (tqdm bar + DeepSpeed timer line per "
        f"step, an HF loss dict every 10 steps, OVERFLOW lines, a CUDA OOM at the end)",
        "",
        "| reader | seconds | × ours (event file) | peak RSS MiB | scalars kept / result |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        res = r["result"]
        what = (f"{res['points']:,} points, {res['tags']} tags" if "points" in res else
                f"findings {res['findings']}, {res['events']} timeline events")
        ratio = f"{r['seconds'] / ours:.2f}" if r["name"] in ("eventaccumulator-default", "eventaccumulator-keep-all",
                                                                "tbparse", "ours-event-file") else ""
        lines.append(f"| {r['name']} | {r['seconds']:.1f} | {ratio} | {r['peak_rss_mib']:.0f} | {what} |")
    full = by["doctor-postmortem-full"]
    lines += ["", f"Peak RSS of the full diagnosis (event file + {log_bytes / 2**30:.2f} GiB log): "
                  f"{full['peak_rss_mib']:.0f} MiB (budget 500 MiB: {'met' if full['peak_rss_mib'] < 500 else 'MISSED'}).",
              f"Log scan throughput: {log_bytes / 2**20 / by['doctor-postmortem-log-only']['seconds']:.0f} MiB/s.", ""]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
