#!/usr/bin/env python
"""What the allocator replay costs: a 7B training step replayed (probes/replayed.py), and `doctor check --probe` on
a 7B config whose memory findings make the probe run.

The config: Qwen2.5-7B LoRA (all linear layers), 9216 tokens, one A100-40GB — at risk (FD606) with expandable
segments as the remedy (FD660), so `--probe` simulates the configured run with its allocation trace and replays it
twice (settings as launched, and with expandable segments on). Baselines measured in the same run: the simulate
probe the replay follows (in-process), `doctor check` without `--probe`, and the bare import of torch and
transformers that any probe pays.

Run: python benchmarks/margin_speed.py [--repeat 3] → prints and writes benchmarks/results/margin_speed.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
OUT = HERE / "results" / "margin_speed.md"
CONFIG = """model_name_or_path: Qwen/Qwen2.5-7B
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: alpaca_en_demo
template: qwen
cutoff_len: 9216
output_dir: saves/qwen2.5-7b/lora/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""
GPU = "A100-40GB"


def in_process(repeat: int) -> dict:
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.probes.replayed import replay_probe
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run
    from finetune_doctor.readers.modelcfg import load_arch
    from finetune_doctor.run import resolve_run

    hw = parse_gpu_spec(GPU)
    run = resolve_run({"finetuning_type": "lora", "bf16": True, "cutoff_len": 9216, "per_device_train_batch_size": 1,
                       "gradient_accumulation_steps": 8}, load_arch("Qwen/Qwen2.5-7B")[0], hw)
    spec = spec_from_run(run)
    simulate(spec, steps=2)                       # warm-up: the first simulation of a process pays lazy imports
    plain, sims, replays, one = [], [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        simulate(spec, steps=2)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        sim = simulate(spec, steps=2, trace=True)
        sims.append(time.perf_counter() - t)
        t = time.perf_counter()
        view = replay_probe(run, hw, sim, env={}, toggle=False)
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        view = replay_probe(run, hw, sim, env={})
        replays.append(time.perf_counter() - t)
    return {"plain": plain, "sim": sims, "replay_one": one, "replay_both": replays, "requests": view.result.requests,
            "steps": sim.steps, "depth": view.result.depth, "total": view.total_gib}


def cli(args: list[str], cwd: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "finetune_doctor", *args], cwd=cwd, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    ip = in_process(args.repeat)
    with tempfile.TemporaryDirectory() as t:
        Path(t, "config.yaml").write_text(CONFIG, encoding="utf-8")
        imp = [cli_import(t) for _ in range(args.repeat)]
        plain = [cli(["check", "config.yaml", "--gpu", GPU, "--no-data"], t) for _ in range(args.repeat)]
        probe = [cli(["check", "config.yaml", "--gpu", GPU, "--no-data", "--probe"], t) for _ in range(args.repeat)]
    med = statistics.median
    per_step = med(ip["replay_one"]) / ip["steps"]
    lines = ["# Allocator replay: cost", "",
             f"{time.strftime('%Y-%m-%d')}; `python benchmarks/margin_speed.py --repeat {args.repeat}` on this "
             f"machine ({os.cpu_count()} CPUs shared with the team's other jobs: absolute seconds vary by 2x between "
             "runs; the ratios are taken within one run). Config: Qwen2.5-7B LoRA all, 9216 tokens, one "
             f"{GPU} (at risk: FD606 and FD660 fire, so `--probe` simulates and replays the configured run). Medians "
             f"of {args.repeat}.", "",
             "| what | seconds | ratio |", "|---|---|---|",
             f"| simulate probe (2 steps, depth {'/'.join(map(str, ip['depth']))} extrapolated to 28 layers), "
             f"in-process, without the trace | {med(ip['plain']):.2f} | baseline |",
             f"| the same recording the allocation trace | {med(ip['sim']):.2f} | "
             f"{med(ip['sim']) / med(ip['plain']):.2f} × |",
             f"| replay of that trace ({ip['requests']} requests: model build + 2 steps), as launched | "
             f"{med(ip['replay_one']):.2f} | {med(ip['replay_one']) / med(ip['sim']):.2f} × the simulation |",
             f"| the same per training step | {per_step:.2f} | budget 2 s: {'met' if per_step < 2 else 'MISSED'} |",
             f"| replay as launched + with expandable segments (what `--probe` does) | {med(ip['replay_both']):.2f} | "
             f"{med(ip['replay_both']) / med(ip['sim']):.2f} × the simulation |",
             f"| `python -c 'import torch, transformers'` | {med(imp):.2f} | floor of any probe |",
             f"| `doctor check` (no probe) | {med(plain):.2f} | baseline |",
             f"| `doctor check --probe` | {med(probe):.2f} | {med(probe) / med(plain):.1f} × check; budget 15 s: "
             f"{'met' if med(probe) < 15 else 'MISSED'} |", "",
             "`doctor check --probe` = the import of torch and transformers + one simulation + two replays (+ the check "
             "itself): the replay's share is the two replays; the simulation is the simulate probe's own cost.", "",
             f"Runs (s): simulate without / with trace {', '.join(f'{x:.2f}' for x in ip['plain'])} / "
             f"{', '.join(f'{x:.2f}' for x in ip['sim'])}; replay {', '.join(f'{x:.2f}' for x in ip['replay_one'])}; "
             f"check --probe {', '.join(f'{x:.2f}' for x in probe)}.", "",
             "## Reproduce", "", "    python benchmarks/margin_speed.py --repeat 3     # CPU only, ~3 min"]
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.write_text(text, encoding="utf-8")
    return 0


def cli_import(cwd: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers"], cwd=cwd, check=False)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
