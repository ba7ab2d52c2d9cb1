"""Peak RSS per command against the budgets of issue 27 (restated in benchmarks/results/rss_budgets.md).

Each command runs in a fresh subprocess that reports its own VmHWM (/proc/self/status) at exit: ru_maxrss is not
usable, Linux carries a forking parent's high-water mark across exec. Inputs are files of this repository plus
two configs written to a temporary folder (a Qwen2.5-0.5B LoRA run from fixtures/models). Linux only.

    python benchmarks/rss_budgets.py            # prints a markdown table
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_MIB = {"lint": 200, "check (no torch)": 200, "check --probe (torch)": 600, "probe --mode simulate": 800}
"""The budgets the fuzz suite enforces (tests/test_fuzz_round2.py)."""

CHILD = ("import atexit, os, sys\n"
         "def _hwm():\n"
         "    with open('/proc/self/status') as fh, open(os.environ['RSS_HWM_FILE'], 'w') as out:\n"
         "        out.write(next(ln.split()[1] for ln in fh if ln.startswith('VmHWM:')))\n"
         "atexit.register(_hwm)\n"
         "from finetune_doctor.cli import main\n"
         "sys.argv[0] = 'doctor'\n"
         "main()\n")


def peak_rss_mib(argv: list[str], timeout: float = 600.0) -> tuple[int, float, float]:
    """(exit code, peak RSS in MiB, wall seconds) of one ``doctor <argv>`` in a fresh process."""
    with tempfile.NamedTemporaryFile(suffix=".hwm") as hwm:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "FINETUNE_DOCTOR_NO_NVML": "1",
               "RSS_HWM_FILE": hwm.name}
        t = time.monotonic()
        res = subprocess.run([sys.executable, "-c", CHILD, *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env, timeout=timeout)
        wall = time.monotonic() - t
        return res.returncode, int(Path(hwm.name).read_text() or 0) / 1024, wall


def qwen_config(folder: Path, risky: bool) -> Path:
    """A Qwen2.5-0.5B LoRA config; `risky` makes it tight on a T4 so that --probe simulates."""
    cfg = folder / ("risky.yaml" if risky else "plain.yaml")
    cfg.write_text(f"model_name_or_path: {ROOT / 'fixtures/models/Qwen2.5-0.5B-Instruct'}\nstage: sft\ndo_train: true\n"
                   "finetuning_type: lora\nlora_target: all\ndataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: o\n"
                   f"cutoff_len: {8192 if risky else 2048}\nper_device_train_batch_size: {4 if risky else 2}\n"
                   "bf16: true\n")
    return cfg


def runs(folder: Path) -> dict[str, list[str]]:
    quick = str(ROOT / "fixtures/quickstart/llama7b_full_zero2_v100.yaml")
    return {
        "lint": ["lint", str(ROOT / "fixtures/llamafactory/examples")],
        "check (no torch)": ["check", quick, "--gpu", "8xV100-32GB", "--offline", "--no-data"],
        "check --probe (torch)": ["check", str(qwen_config(folder, True)), "--gpu", "T4", "--offline", "--no-data",
                                  "--probe"],
        "probe --mode simulate": ["probe", str(qwen_config(folder, False)), "--gpu", "A100-80GB", "--mode",
                                  "simulate"],
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("| command | peak RSS, MiB | budget, MiB | wall, s | exit |\n|---|---|---|---|---|")
        for name, argv in runs(Path(tmp)).items():
            code, rss, wall = peak_rss_mib(argv)
            print(f"| `doctor {' '.join(argv[:1])}` {name} | {rss:.0f} | {BUDGET_MIB[name]} | {wall:.1f} | {code} |")
    print(f"\nload average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
