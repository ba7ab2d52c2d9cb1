"""Issue #21, "Done when": a check with no network, no data, no model folder and no version given returns a
verdict on every config whose model family is in the catalogue, in under 1 s, with the assumptions that move it
listed first.

Runs `doctor check CONFIG --gpu A100 --format json` on LLaMA-Factory's own example configs
(fixtures/llamafactory/examples/train_*), from an empty working directory (their `dataset_dir: data` is not there:
no data), with HF_HUB_OFFLINE=1 and no --torch/--transformers/--env (no version), and no model folder (the examples
name hub models). For each config: the median wall time of N runs (a fresh process each), the verdict, and whether
the verdict-moving assumptions come first. Baseline measured in the same run: `python -c "import click, rich,
ruamel.yaml"` (the floor of any CLI on the same libraries). Writes benchmarks/results/honest_check_speed.md.

Bytecode: the package's modules are compiled to __pycache__ first (`python -m compileall`, what pip does when it
installs a wheel), so the timed runs load bytecode as an installed doctor does. Until session 8 the runs inherited
PYTHONDONTWRITEBYTECODE=1 from the sessions' shell in a worktree without __pycache__, so every run compiled ~140
modules from source (about half its CPU time); that cold start is still measured, on the first config, with an
empty PYTHONPYCACHEPREFIX (what a first run, or one that may not write bytecode, costs).

    python benchmarks/honest_check_speed.py [N]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"
CONFIGS = [EXAMPLES / p for p in ("train_lora/qwen3_lora_sft.yaml", "train_lora/qwen3_lora_dpo.yaml",
                                  "train_lora/qwen3_lora_sft_ds3.yaml", "train_full/qwen3_full_sft.yaml",
                                  "train_qlora/qwen3_lora_sft_otfq.yaml", "train_lora/qwen3vl_lora_sft.yaml")]


def run(cmd: list[str], cwd: str, extra: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(extra or {})}
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, r


def run_cpu(cmd: list[str], cwd: str, extra: dict[str, str] | None = None
            ) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, the child's user + system CPU s, result) of `run`: on a shared machine the wall time follows the
    load of other jobs, the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, r = run(cmd, cwd, extra)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), r


def loadavg() -> str:
    """/proc/loadavg's 1-, 5- and 15-minute loads ("n/a" where the file is absent)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])
    except OSError:
        return "n/a"


def every_example() -> list[str]:
    """Every training config among LLaMA-Factory's examples, in one process (click's test runner, no interpreter
    start-up): the verdict or why none, the verdict-moving assumptions first, and the time per config."""
    os.environ.update(FINETUNE_DOCTOR_NO_NVML="1", HF_HUB_OFFLINE="1")
    sys.path.insert(0, str(ROOT))
    from click.testing import CliRunner

    from finetune_doctor.cli import main as cli

    skip = ("accelerate", "deepspeed", "inference", "merge_lora")
    cfgs = sorted(p for p in EXAMPLES.rglob("*.yaml") if not any(part in skip for part in p.parts))
    out = ["## Every LF example training config, in one process", "",
           "| config | ms | verdict | verdict-moving assumptions (first) |", "|---|---|---|---|"]
    verdicts = 0
    with tempfile.TemporaryDirectory() as empty:
        here = os.getcwd()
        os.chdir(empty)
        try:
            for cfg in cfgs:
                t = time.perf_counter()
                r = CliRunner().invoke(cli, ["check", str(cfg), "--gpu", "A100", "--format", "json", "--offline"])
                ms = 1000 * (time.perf_counter() - t)
                rep = json.loads(r.stdout) if r.exit_code in (0, 1) else {}
                mem = rep.get("memory") or {}
                movers = [a["name"] for a in rep.get("assumptions", []) if a["moves_verdict"]]
                flags = [a["moves_verdict"] for a in rep.get("assumptions", [])]
                why = mem.get("verdict") or ("model not in the catalogue" if any(
                    f["name"] == "model-unresolved" for f in rep.get("findings", [])) else f"exit {r.exit_code}")
                verdicts += bool(mem.get("verdict"))
                ok = "" if flags == sorted(flags, reverse=True) else " (NOT first)"
                out.append(f"| {cfg.relative_to(EXAMPLES)} | {ms:.0f} | {why} | {', '.join(movers) or '-'}{ok} |")
        finally:
            os.chdir(here)
    out += ["", f"{verdicts}/{len(cfgs)} configs get a verdict."]
    return out


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rows = []
    # bytecode as an installed package has it (module docstring); quiet, and a failure is the package's own error
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "finetune_doctor")], check=True)
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as nocache:
        base = [run([sys.executable, "-c", "import click, rich, ruamel.yaml"], empty)[0] for _ in range(n)]
        cold = [run_cpu([sys.executable, "-m", "finetune_doctor", "check", str(CONFIGS[0]), "--gpu", "A100", "--format",
                         "json"], empty, {"PYTHONPYCACHEPREFIX": nocache, "PYTHONDONTWRITEBYTECODE": "1"})[:2]
                for _ in range(n)]
        for cfg in CONFIGS:
            if not cfg.is_file():
                continue
            cmd = [sys.executable, "-m", "finetune_doctor", "check", str(cfg), "--gpu", "A100", "--format", "json"]
            times, cpus, report = [], [], None
            for _ in range(n):
                t, c, r = run_cpu(cmd, empty)
                if r.returncode not in (0, 1):
                    raise SystemExit(f"{cfg.name}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                times.append(t)
                cpus.append(c)
                report = json.loads(r.stdout)
            mem = report["memory"] or {}
            flags = [a["moves_verdict"] for a in report["assumptions"]]
            rows.append((cfg.relative_to(EXAMPLES), statistics.median(times), statistics.median(cpus), mem.get("verdict"),
                         (mem.get("deciding_assumption") or {}).get("name") or "-",
                         ", ".join(a["name"] for a in report["assumptions"] if a["moves_verdict"]) or "-",
                         flags == sorted(flags, reverse=True)))
    b = statistics.median(base)
    lines = ["# doctor check with nothing but the config (issue #21 done-when)", "",
             f"`python benchmarks/honest_check_speed.py {n}`: median wall of {n} fresh processes per config, "
             "--gpu A100 (size not given), HF_HUB_OFFLINE=1, empty working directory (no data), no versions, "
             "no model folder; the package's bytecode compiled first, as pip installs it.", "",
             f"Baseline, same run: `python -c \"import click, rich, ruamel.yaml\"` {b:.3f} s. Load (/proc/loadavg, "
             f"1/5/15 min) before: {load_before}; after: {loadavg()}.", "",
             "| config | median wall s | median CPU s | x baseline (wall) | verdict | deciding | "
             "verdict-moving assumptions | movers first |",
             "|---|---|---|---|---|---|---|---|"]
    for name, t, c, verdict, deciding, movers, first in rows:
        lines.append(f"| {name} | {t:.3f} | {c:.3f} | {t / b:.2f} | {verdict} | {deciding} | {movers} | {first} |")
    worst = max(t for _, t, *_ in rows)
    worst_cpu = max(c for _, _, c, *_ in rows)
    lines += ["", f"Slowest: {worst:.3f} s wall, {worst_cpu:.3f} s CPU (goal: under 1 s). Verdicts: "
              f"{sum(1 for r in rows if r[3])}/{len(rows)}.", "",
              f"Cold start (no bytecode: every module compiled from source, PYTHONPYCACHEPREFIX empty), "
              f"{CONFIGS[0].relative_to(EXAMPLES)}: median wall {statistics.median(w for w, _ in cold):.3f} s, "
              f"median CPU {statistics.median(c for _, c in cold):.3f} s over {n} runs."]
    lines += ["", *every_example()]
    text = "\n".join(lines) + "\n"
    (HERE / "results" / "honest_check_speed.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
