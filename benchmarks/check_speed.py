"""Speed of `doctor check` (no probes, no data scan) on a training config (LF's Qwen3-4B full SFT example), against
the interpreter's own start-up.

Baseline measured in the same run: `python -c "import click, rich, ruamel.yaml"` (the floor any CLI built on the
same libraries pays). Prints median wall times over N runs and the ratio; the goal (issue #2) is a median under
1 s on the 2-core development machine. Also checks with `-X importtime` that `import finetune_doctor` loads no
torch, transformers or deepspeed. Writes benchmarks/results/check_speed.md.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIG = ROOT / "fixtures" / "llamafactory" / "examples" / "train_full" / "qwen3_full_sft.yaml"


def timed(cmd: list[str], n: int) -> list[float]:
    env = {**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1"}
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        out.append(time.perf_counter() - t)
        if r.returncode not in (0, 1):   # 1 = findings; anything else means the timing measured a failure
            raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return out


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    doctor = [sys.executable, "-m", "finetune_doctor", "check", str(CONFIG), "model_name_or_path=Qwen/Qwen2.5-7B",
              "--gpu", "8xA100-80GB", "--no-data"]
    base = [sys.executable, "-c", "import click, rich, ruamel.yaml"]
    t_doc, t_base = timed(doctor, n), timed(base, n)
    imp = subprocess.run([sys.executable, "-X", "importtime", "-c", "import finetune_doctor"], capture_output=True,
                         text=True, cwd=ROOT)
    heavy = [ln for ln in imp.stderr.splitlines() if any(f" {m}" in ln.split("|")[-1] and ln.split("|")[-1].strip().split(".")[0] == m
                                                         for m in ("torch", "transformers", "deepspeed"))]
    md, mb = statistics.median(t_doc), statistics.median(t_base)
    text = (f"# doctor check speed\n\n`doctor check` on a Qwen2.5-7B full-SFT config (8x A100-80GB, no data scan), "
            f"{n} runs on this machine.\n\n| what | median s |\n|---|---|\n| doctor check | {md:.3f} |\n"
            f"| baseline: python -c 'import click, rich, ruamel.yaml' | {mb:.3f} |\n\nratio doctor/baseline: "
            f"{md / mb:.2f}; goal < 1 s: {'met' if md < 1 else 'NOT met'}.\n`import finetune_doctor` heavy imports: "
            f"{heavy or 'none'}.\n")
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "check_speed.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
