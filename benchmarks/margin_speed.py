#!/usr/bin/env python
"""What the allocator replay costs: a 7B training step replayed (probes/replayed.py), and `doctor check --probe` on
a 7B config whose memory findings make the probe run.

The config: Qwen2.5-7B LoRA (all linear layers), 9216 tokens, one A100-40GB — at risk (FD606) with expandable
segments as the remedy (FD660), so `--probe` simulates the configured run with its allocation trace and replays it
twice (settings as launched, and with expandable segments on). Baselines measured in the same run: the simulate
probe the replay follows (in-process), the same with its two depths one after the other instead of side by side
(probes/forked.py), `doctor check` without `--probe`, and the bare import of torch and transformers (and of
torch._dynamo, which FakeTensorMode's first construction imports) that any probe pays.

Each command's CPU seconds (user + system, its forked child included) are recorded next to its wall seconds: on
the team's shared 2-CPU machine the wall time follows the other jobs' load (the load average is printed), the CPU
time much less so.

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
# what cProfile and per-stage timestamps (time.process_time, this machine, load average 2.5-4) showed: kept with
# the table because the table alone cannot say it
WHERE = """## Where the time goes (profiled 2026-12-02)

One `check --probe` of this config is ~11-14 CPU seconds; its wall time is 1.7-2.5 times that at the load
averages of 3-6 this 2-CPU machine runs at while the team works, and that factor is most of the "unexplained"
20 s of the first measurement (38 s). Per stage, CPU seconds:

- imports, 4.6-5.8 s: torch and transformers; peft; `torch._dynamo`, which `FakeTensorMode.__init__` imports
  (torch/_subclasses/fake_tensor.py:1478 in 2.13; ~1.5 s CPU, 2.9 s wall, not in a bare `import torch`);
  transformers.modeling_layers → processing_utils (~1 s wall); scipy.optimize through transformers.loss (0.7 s
  wall, only because the test extra installs scipy).
- simulation, 3-4 s: depth 2 ≈ 1.2-1.5 s, depth 3 ≈ 1.7-2.0 s, i.e. ~0.5 s per decoder layer for the 4
  micro-batches (forward, recomputation, backward through FakeTensorMode's dispatch); the model build is
  0.1-0.2 s a depth. A full `gc.collect()` after each depth cost 0.28 s each (now only after real-tensor runs).
- replays, 0.2-0.25 s each; the full-depth trace was synthesized for each (0.06-0.11 s; now once).
- the interpreter's exit after the report is written: ~1 s CPU, 2.6 s wall (module teardown with torch
  loaded; `os._exit` after flushing would skip it, a change to cli.py).

Not the cause: a subprocess (the probe runs in the doctor's process), a second simulation of the configured run
(simulations are cached per spec), the remedy planner (this config's fixes are the expandable-segments remedy,
confirmed by the replay without simulating). The two depths run side by side in a forked child when a CPU is
idle (probes/forked.py): on a busy machine the child only adds CPU (it starts without the parent's fake-tensor
dispatch cache), so it is not used there.
"""


def in_process(repeat: int) -> dict:
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.probes import forked
    from finetune_doctor.probes.replayed import replay_probe
    from finetune_doctor.probes.simulate import simulate
    from finetune_doctor.probes.spec import spec_from_run
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run

    hw = parse_gpu_spec(GPU)
    run = resolve_run({"finetuning_type": "lora", "bf16": True, "cutoff_len": 9216, "per_device_train_batch_size": 1,
                       "gradient_accumulation_steps": 8}, load_arch("Qwen/Qwen2.5-7B")[0], hw)
    spec = spec_from_run(run)
    simulate(spec, steps=2)                       # warm-up: the first simulation of a process pays lazy imports
    plain, sims, replays, one, seq = [], [], [], [], []
    worthwhile = forked.worthwhile
    for _ in range(repeat):
        for fork, out in ((False, seq), (forked.usable(), plain)):
            forked.worthwhile = lambda fork=fork: fork      # both ways whatever the load
            try:
                t = time.perf_counter()
                simulate(spec, steps=2)
                out.append(time.perf_counter() - t)
            finally:
                forked.worthwhile = worthwhile
        t = time.perf_counter()
        sim = simulate(spec, steps=2, trace=True)
        sims.append(time.perf_counter() - t)
        t = time.perf_counter()
        view = replay_probe(run, hw, sim, env={}, toggle=False)
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        view = replay_probe(run, hw, sim, env={})
        replays.append(time.perf_counter() - t)
    return {"plain": plain, "seq": seq, "parallel": forked.usable(), "sim": sims, "replay_one": one,
            "replay_both": replays, "requests": view.result.requests,
            "steps": sim.steps, "depth": view.result.depth, "total": view.total_gib}


def timed(cmd: list[str], cwd: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process and the children it waited for)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, use = os.wait4(p.pid, 0)
    return time.perf_counter() - t, use.ru_utime + use.ru_stime


def cli(args: list[str], cwd: str) -> tuple[float, float]:
    return timed([sys.executable, "-m", "finetune_doctor", *args], cwd)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", metavar="DIR", help="a source tree of an earlier commit (git archive): its "
                    "`check --probe` runs interleaved with this tree's, under the same load")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    ip = in_process(args.repeat)
    base: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as t:
        Path(t, "config.yaml").write_text(CONFIG, encoding="utf-8")
        imp = [cli_import(t) for _ in range(args.repeat)]
        plain = [cli(["check", "config.yaml", "--gpu", GPU, "--no-data"], t) for _ in range(args.repeat)]
        probe = []
        for _ in range(args.repeat):
            probe.append(cli(["check", "config.yaml", "--gpu", GPU, "--no-data", "--probe"], t))
            if args.baseline:
                base.append(timed([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                   "from finetune_doctor.cli import main; sys.argv[1:2] = []; main()",
                                   args.baseline, "check", "config.yaml", "--gpu", GPU, "--no-data", "--probe"], t))
    load1 = os.getloadavg()[0]
    med = statistics.median

    def wc(runs):   # medians of (wall, cpu)
        return med(r[0] for r in runs), med(r[1] for r in runs)

    per_step = med(ip["replay_one"]) / ip["steps"]
    (iw, ic), (cw, cc), (pw, pc) = wc(imp), wc(plain), wc(probe)
    lines = ["# Allocator replay: cost", "",
             f"{time.strftime('%Y-%m-%d')}; `python benchmarks/margin_speed.py --repeat {args.repeat}"
             f"{' --baseline DIR' if args.baseline else ''}` on this machine ({os.cpu_count()} CPUs shared with the "
             f"team's other jobs; 1-minute load average {load0:.1f} at the start, {load1:.1f} at the end: wall "
             "seconds follow that load, CPU seconds much less; ratios are taken within one run). Config: "
             f"Qwen2.5-7B LoRA all, 9216 tokens, one {GPU} (at risk: FD606 and FD660 fire, so `--probe` simulates "
             f"and replays the configured run). Medians of {args.repeat}.", "",
             "| what | wall s | CPU s | ratio |", "|---|---|---|---|",
             f"| simulate probe (2 steps, depth {'/'.join(map(str, ip['depth']))} extrapolated to 28 layers), "
             f"in-process, depths one after the other, without the trace | {med(ip['seq']):.2f} | | baseline |",
             f"| the same, depths side by side (forked child; {'used' if ip['parallel'] else 'NOT usable here'}) | "
             f"{med(ip['plain']):.2f} | | {med(ip['plain']) / med(ip['seq']):.2f} × |",
             f"| the same recording the allocation trace | {med(ip['sim']):.2f} | | "
             f"{med(ip['sim']) / med(ip['seq']):.2f} × |",
             f"| replay of that trace ({ip['requests']} requests: model build + 2 steps), as launched | "
             f"{med(ip['replay_one']):.2f} | | {med(ip['replay_one']) / med(ip['sim']):.2f} × the simulation |",
             f"| the same per training step | {per_step:.2f} | | budget 2 s: {'met' if per_step < 2 else 'MISSED'} |",
             f"| replay as launched + with expandable segments (what `--probe` does) | {med(ip['replay_both']):.2f} "
             f"| | {med(ip['replay_both']) / med(ip['sim']):.2f} × the simulation |",
             f"| import torch, transformers, peft + first FakeTensorMode (torch._dynamo) | {iw:.2f} | {ic:.2f} | "
             "floor of any probe |",
             f"| `doctor check` (no probe) | {cw:.2f} | {cc:.2f} | baseline |",
             f"| `doctor check --probe` | {pw:.2f} | {pc:.2f} | {pw / cw:.1f} × check; budget 15 s (wall): "
             f"{'met' if pw < 15 else 'MISSED'} |"]
    if base:
        bw, bc = wc(base)
        lines.append(f"| `doctor check --probe` of the baseline tree, interleaved | {bw:.2f} | {bc:.2f} | "
                     f"this tree: {pw / bw:.2f} × wall, {pc / bc:.2f} × CPU |")
    lines += ["", "`doctor check --probe` = the imports (torch, transformers, peft, torch._dynamo) + one simulation "
              "(two depths) + two replays + the check itself + the interpreter's exit.", "",
              f"Runs (wall/CPU s): check --probe {', '.join(f'{w:.1f}/{c:.1f}' for w, c in probe)}"
              + (f"; baseline {', '.join(f'{w:.1f}/{c:.1f}' for w, c in base)}" if base else "")
              + f"; simulate sequential / side by side {', '.join(f'{x:.2f}' for x in ip['seq'])} / "
              f"{', '.join(f'{x:.2f}' for x in ip['plain'])}.", "",
              WHERE, "## Reproduce", "",
              "    python benchmarks/margin_speed.py --repeat 3     # CPU only, ~4 min",
              "    # against an earlier commit: git archive <commit> | tar -x -C /tmp/base",
              "    python benchmarks/margin_speed.py --repeat 3 --baseline /tmp/base"]
    text = "\n".join(lines) + "\n"
    print(text)
    OUT.write_text(text, encoding="utf-8")
    return 0


def cli_import(cwd: str) -> tuple[float, float]:
    return timed([sys.executable, "-c", "import torch, transformers, peft; "
                  "from torch._subclasses.fake_tensor import FakeTensorMode; FakeTensorMode()"], cwd)


if __name__ == "__main__":
    sys.exit(main())
