"""Every streaming reader on inputs of three sizes up to 1 GB (issue 17, class 5): wall time and peak RSS of the
doctor command that reads it, in a fresh process, against a named baseline run on the same file in the same run.

Readers and commands (inputs in the formats of the real writers, generated into --dir and removed afterwards):

* log without newlines -- one line of trigger words (``CUDA out of memory``, ``NCCL``, ``Killed``, ``Traceback``)
  and no line feed: ``doctor postmortem DIR``;
* log of metric lines -- HF's printed step dicts (transformers ProgressCallback.on_log: ``{'loss': ..., 'grad_norm':
  ..., 'learning_rate': ..., 'epoch': ...}``): ``doctor postmortem DIR``;
* trainer_log.jsonl -- LLaMA-Factory's LogCallback records (train/callbacks.py): ``doctor postmortem DIR``;
* trainer_state.json -- HF TrainerState.save_to_json (indent 2, sorted keys), log_history of N entries:
  ``doctor postmortem DIR``;
* gpus recording -- the JSONL ``doctor gpus --record`` writes (hardware/record.py), 4 cards a sample:
  ``doctor gpus --from FILE``;
* dataset JSON Lines and JSON array -- alpaca rows (LLaMA-Factory data/README.md): ``doctor data CONFIG
  --approximate --workers 1``;
* DeepSpeed JSON -- a config is read whole, up to readers/limits.MAX_CONFIG_BYTES (16 MiB) and MAX_CONFIG_NODES
  (250k values), so its sizes are 1, 2 and 4 MiB of keys (~40k-170k), and a 1 GB file shows the refusal at the
  limit: ``doctor lint FILE``.

Baselines, same file, same run: ``wc -l`` (reads every byte, keeps nothing) and, for text logs, ``grep -c loss``.
Linear time shows as seconds per GB staying flat across the sizes (the ``vs smallest`` ratio near 1 or below);
bounded memory as peak RSS (the process tree's summed RSS, psutil, every 50 ms) under 400 MiB at every size.

Run: ``.venv/bin/python benchmarks/bench_big_inputs.py [--max-mb 1024] [--only NAME]``; writes
benchmarks/results/big_inputs.md (``--result``). Needs psutil (the test extra). ~30 min on 2 cores at 1 GB.
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
MB = 1 << 20
BUDGET_MIB = 400
DOCTOR = [sys.executable, "-m", "finetune_doctor"]


def _fill(path: str, size: int, line_of) -> int:
    """Write lines from `line_of(i)` until `size` bytes; the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        written = 0
        buf: list[str] = []
        while written < size:
            ln = line_of(n)
            buf.append(ln)
            written += len(ln)
            n += 1
            if len(buf) >= 4096:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return n


def no_newline(d: str, size: int) -> list[str]:
    words = "CUDA out of memory 'loss': NCCL Killed Traceback (most recent call last) "
    with open(os.path.join(d, "train.log"), "w") as fh:
        chunk = words * (MB // len(words))
        for _ in range(size // len(chunk)):
            fh.write(chunk)
    return [*DOCTOR, "postmortem", d]


def metric_lines(d: str, size: int) -> list[str]:
    rnd = random.Random(2)
    _fill(os.path.join(d, "train.log"), size, lambda i: (
        f"{{'loss': {2 - i / 1e8 + rnd.random() * 0.05:.4f}, 'grad_norm': {rnd.random() + 0.5:.6f}, "
        f"'learning_rate': {1e-4:.4e}, 'epoch': {i / 1e7:.2f}}}\n"))
    return [*DOCTOR, "postmortem", d]


def trainer_log(d: str, size: int) -> list[str]:
    rnd = random.Random(1)
    total = 10 ** 8
    _fill(os.path.join(d, "trainer_log.jsonl"), size, lambda i: json.dumps({
        "current_steps": i + 1, "total_steps": total, "loss": round(2 - i / total + rnd.random() * 0.05, 4),
        "lr": 1e-4, "epoch": round(i / total, 4), "percentage": round(i / total * 100, 2),
        "elapsed_time": "1:00:00", "remaining_time": "9:00:00"}) + "\n")
    return [*DOCTOR, "postmortem", d]


def trainer_state(d: str, size: int) -> list[str]:
    rnd = random.Random(3)
    path = os.path.join(d, "trainer_state.json")
    entry = ('    {{\n      "epoch": {e},\n      "grad_norm": {g},\n      "learning_rate": 0.0001,\n'
             '      "loss": {l},\n      "step": {s}\n    }}')
    with open(path, "w") as fh:
        fh.write('{\n  "best_metric": null,\n  "log_history": [\n')
        written, i, buf = 0, 0, []
        while written < size:
            i += 1
            e = entry.format(e=round(i / 1e6, 6), g=round(rnd.random() + 0.5, 6), l=round(2 + rnd.random() * 0.1, 4),
                             s=i)
            buf.append(e)
            written += len(e) + 2
            if len(buf) >= 4096:
                fh.write(",\n".join(buf) + ",\n")
                buf.clear()
        buf.append(entry.format(e=1.0, g=1.0, l=2.0, s=i + 1))
        fh.write(",\n".join(buf) + f'\n  ],\n  "global_step": {i + 1},\n  "max_steps": {i + 1}\n}}\n')
    return [*DOCTOR, "postmortem", d]


def gpus_recording(d: str, size: int) -> list[str]:
    path = os.path.join(d, "node0.jsonl")
    head = json.dumps({"schema": "finetune-doctor/gpus-record/v1", "host": "node0", "interval_s": 1.0,
                       "started": 1717840800.0}) + "\n"
    rnd = random.Random(4)

    def snap(i: int) -> str:
        cards = [{"index": c, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{c:04d}", "bus_id": f"00000000:{c:02X}:00.0",
                  "used_bytes": 60_000_000_000 + rnd.randrange(1 << 30), "total_bytes": 85520809984,
                  "free_bytes": 20_000_000_000, "util_gpu": 98, "temperature_c": 60, "power_w": 300.0,
                  "processes": [{"pid": 1000 + c, "name": "python", "used_bytes": 59_000_000_000}]}
                 for c in range(4)]
        return json.dumps({"time": 1717840800.0 + i, "host": "node0", "cards": cards}) + "\n"

    with open(path, "w") as fh:
        fh.write(head)
    with open(path, "a") as fh:
        pass
    n = _fill(path + ".body", size, snap)
    with open(path, "ab") as out, open(path + ".body", "rb") as body:
        shutil.copyfileobj(body, out, 16 * MB)
    os.remove(path + ".body")
    del n
    return [*DOCTOR, "gpus", "--from", path, "--format", "json"]


_ROW = json.dumps({"instruction": "Summarise the text below in one sentence.", "input": "The quick brown fox " * 8,
                   "output": "A fox jumps over a dog, many times."})


def _data_config(d: str, fname: str) -> list[str]:
    with open(os.path.join(d, "dataset_info.json"), "w") as fh:
        json.dump({"big": {"file_name": fname}}, fh)
    cfg = os.path.join(d, "train.yaml")
    with open(cfg, "w") as fh:
        fh.write("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                 f"dataset: big\ndataset_dir: {d}\ntemplate: qwen\ncutoff_len: 1024\noutput_dir: out\n")
    return [*DOCTOR, "data", cfg, "--approximate", "--workers", "1", "--offline"]


def dataset_jsonl(d: str, size: int) -> list[str]:
    _fill(os.path.join(d, "big.jsonl"), size, lambda i: _ROW + "\n")
    return _data_config(d, "big.jsonl")


def dataset_json(d: str, size: int) -> list[str]:
    path = os.path.join(d, "big.json")
    n = _fill(path + ".body", size, lambda i: ",\n" + _ROW if i else _ROW)
    with open(path, "wb") as out, open(path + ".body", "rb") as body:
        out.write(b"[\n")
        shutil.copyfileobj(body, out, 16 * MB)
        out.write(b"\n]\n")
    os.remove(path + ".body")
    del n
    return _data_config(d, "big.json")


def deepspeed_json(d: str, size: int) -> list[str]:
    path = os.path.join(d, "ds.json")
    with open(path, "w") as fh:
        fh.write('{\n  "train_micro_batch_size_per_gpu": 1,\n  "zero_optimization": {"stage": 2},\n')
        written, i, buf = 0, 0, []
        while written < size:
            ln = f'  "custom_key_{i}": {i},\n'
            buf.append(ln)
            written += len(ln)
            i += 1
        fh.write("".join(buf) + '  "gradient_clipping": 1.0\n}\n')
    return [*DOCTOR, "lint", path]


READERS = {
    "log without newlines": (no_newline, None),
    "log of metric lines": (metric_lines, None),
    "trainer_log.jsonl": (trainer_log, None),
    "trainer_state.json": (trainer_state, None),
    "gpus --from recording": (gpus_recording, None),
    "dataset JSON Lines": (dataset_jsonl, None),
    "dataset JSON array": (dataset_json, None),
    "DeepSpeed JSON": (deepspeed_json, [1, 2, 4, 1024]),
}


def measure(cmd: list[str]) -> dict:
    """Wall seconds, exit code and the peak summed RSS (MiB) of the process tree of `cmd` (psutil, 50 ms)."""
    import psutil

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FINETUNE_DOCTOR_NO_NVML": "1"}
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [ps] + ps.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    return {"s": time.perf_counter() - t, "rss": peak / MB, "rc": proc.returncode, "err": err.strip()[:160]}


def baseline(path: str, text_log: bool) -> dict:
    out = {"wc": measure(["wc", "-l", path])["s"]}
    if text_log:
        out["grep"] = measure(["grep", "-c", "loss", path])["s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mb", type=int, default=1024)
    ap.add_argument("--dir", default="/tmp/doctor_big_inputs")
    ap.add_argument("--only", default=None, help="run only the readers whose name starts with this")
    ap.add_argument("--result", default=os.path.join(ROOT, "benchmarks", "results", "big_inputs.md"))
    a = ap.parse_args()
    sizes = [a.max_mb // 16, a.max_mb // 4, a.max_mb]
    rows: list[str] = []
    started = time.strftime("%Y-%m-%d %H:%M")
    for name, (make, own_sizes) in READERS.items():
        if a.only and not name.startswith(a.only):
            continue
        first = None
        for mb in own_sizes or sizes:
            d = os.path.join(a.dir, name.replace(" ", "_").replace("/", "_"))
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            cmd = make(d, mb * MB)
            data = max((os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if not f.endswith(".yaml")
                        and f != "dataset_info.json"), key=os.path.getsize)
            real_mb = os.path.getsize(data) / MB
            m = measure(cmd)
            b = baseline(data, name.startswith("log"))
            shutil.rmtree(d, ignore_errors=True)
            per_gb = m["s"] / real_mb * 1024
            first = first or per_gb
            base = f"wc -l {b['wc']:.2f} s" + (f", grep -c {b['grep']:.2f} s" if "grep" in b else "")
            note = "" if m["rc"] in (0, 1) else m["err"].replace("|", "/")
            row = (f"| {name} | {real_mb:,.0f} | {m['s']:.1f} | {per_gb:.1f} | {per_gb / first:.2f} | {m['rss']:.0f} | "
                   f"{'yes' if m['rss'] < BUDGET_MIB else '**no**'} | {m['rc']} | {base} | "
                   f"{m['s'] / b['wc']:.0f}x | {note} |")
            print(row, flush=True)
            rows.append(row)
    shutil.rmtree(a.dir, ignore_errors=True)
    load = os.getloadavg()[0]
    head = [f"## {started} -- {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"load {load:.1f}", "",
            f"`{' '.join(['benchmarks/bench_big_inputs.py', *sys.argv[1:]])}`", "",
            "| reader | file MiB | seconds | s per GiB | vs smallest | peak RSS MiB | < 400 MiB | exit | baseline "
            "(same file) | doctor / wc -l | note |",
            "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---|"]
    with open(a.result, "a", encoding="utf-8") as fh:
        fh.write("\n".join(head + rows) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
