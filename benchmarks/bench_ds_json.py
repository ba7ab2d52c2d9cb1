"""Cost of `doctor lint` on DeepSpeed JSONs of growing size: time linear in the keys, RSS bounded.

Corpus, generated into a temporary directory: LLaMA-Factory's ds_z2_config.json with N extra keys, for N from 1k to
250k (readers/limits.py MAX_CONFIG_NODES), in two shapes:
* ``top``: N unknown top-level keys (DeepSpeed ignores them silently; each is a problem the reader records);
* ``zero``: N unknown keys inside ``zero_optimization`` (each an error; past the first 50 they fold into one).
Plus one file just over the node limit, which must be refused at once with ``... exceeds ...`` (exit 2).

Timed, each as a fresh process (``python -m finetune_doctor lint FILE --format json``): median wall time of RUNS runs
and the child's peak RSS (``os.wait4``). Baseline in the same run: a fresh ``python -c`` that ``json.load``s the same
file (CPython's C parser, no positions, no checks): the ratio doctor/baseline and the time per 1k keys show whether
the cost stays linear. Writes benchmarks/results/ds_json.md.

Usage: python benchmarks/bench_ds_json.py [RUNS]   (default 3)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE = ROOT / "fixtures" / "llamafactory" / "examples" / "deepspeed" / "ds_z2_config.json"
SIZES = (1_000, 10_000, 50_000, 100_000, 200_000, 249_000)


def make(path: Path, n: int, shape: str) -> None:
    cfg = json.loads(BASE.read_text(encoding="utf-8"))
    extra = {f"generated_key_{i}": i for i in range(n)}
    if shape == "top":
        cfg.update(extra)
    else:
        cfg["zero_optimization"].update(extra)
    path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")


def timed(cmd: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def measure(path: Path, runs: int) -> dict[str, float]:
    doctor = [sys.executable, "-m", "finetune_doctor", "lint", str(path), "--format", "json"]
    base = [sys.executable, "-c", f"import json; json.load(open({str(path)!r}, encoding='utf-8'))"]
    d, b, rss, rc = [], [], [], 0
    for _ in range(runs):               # interleaved: both see the same machine state
        w, r, rc = timed(doctor)
        d.append(w)
        rss.append(r)
        b.append(timed(base)[0])
    return {"doctor": statistics.median(d), "base": statistics.median(b), "rss": max(rss), "rc": rc}


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in ("top", "zero"):
            for n in SIZES:
                p = Path(tmp) / f"ds_{shape}_{n}.json"
                make(p, n, shape)
                m = measure(p, runs)
                rows.append((shape, n, p.stat().st_size / 2**20, m))
                print(f"{shape:4s} {n:>7d} keys  {m['doctor']:6.2f} s  json.load {m['base']:5.2f} s  "
                      f"rss {m['rss']:5.0f} MiB  rc {m['rc']}", flush=True)
        over = Path(tmp) / "ds_over.json"
        make(over, 260_000, "top")
        m_over = measure(over, 1)
    lines = ["# DeepSpeed JSON size: time and memory of `doctor lint`", "",
             f"`python benchmarks/bench_ds_json.py {runs}` on {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}; median of {runs} fresh processes, "
             "peak RSS of the child. Baseline: a fresh `python -c` that `json.load`s the same file.", "",
             "| shape | keys | MiB | doctor lint s | json.load s | ratio | s per 1k keys (above baseline) | "
             "peak RSS MiB | exit |", "|---|---|---|---|---|---|---|---|---|"]
    for shape, n, mib, m in rows:
        per_k = (m["doctor"] - m["base"]) / (n / 1000)
        lines.append(f"| {shape} | {n} | {mib:.1f} | {m['doctor']:.2f} | {m['base']:.2f} | "
                     f"{m['doctor'] / m['base']:.1f} | {per_k:.4f} | {m['rss']:.0f} | {m['rc']} |")
    lines += ["", f"Over the limit (260k top-level keys): exit {m_over['rc']} in {m_over['doctor']:.2f} s, peak RSS "
              f"{m_over['rss']:.0f} MiB (`... number of values (over 250000) exceeds the limit ...`).", "",
              "Before this reader (commit 46ec2ba), 200k top-level keys took 45.7 s and ended in `rule FD201 failed` "
              "(simpleeval's comprehension limit), 200k ZeRO keys did not finish in 60 s.", ""]
    out = HERE / "results" / "ds_json.md"
    out.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
