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
    python benchmarks/honest_check_speed.py --all-yaml   # every YAML under LF's examples, fresh process each

The `--all-yaml` section (session 12) runs every YAML of LF's examples/ at the snapshot and of fixtures/, not only
the training ones, so that a config kind with no verdict shows up with its reason.
"""

from __future__ import annotations

import json
import os
import re
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


# LF's example folder at the snapshot (shared/reference/llamafactory/examples, 95 YAMLs) beside the 30 vendored in
# fixtures/: the same search tests/shared_dirs.py makes (a clone beside shared/, a worktree one level deeper)
SHARED_EXAMPLES = next((p / "reference" / "llamafactory" / "examples" for p in
                        (ROOT.parent / "shared", ROOT.parent.parent / "shared", Path("/work/shared"))
                        if (p / "reference" / "llamafactory" / "examples").is_dir()), None)


def _verdict(rep: dict) -> tuple[str | None, str]:
    """(verdict, where it is) of one JSON report: the training verdict (memory.verdict), else the verdict of the
    config's own kind (export: verdict; chat and predict: their fits against the card), else None."""
    mem = rep.get("memory") or {}
    if mem.get("verdict"):
        return mem["verdict"], "memory"
    for kind in ("export", "chat", "predict"):
        sec = rep.get(kind) or {}
        if sec.get("verdict"):
            return sec["verdict"], kind
        if sec.get("fits") is not None:
            return ("fits" if sec["fits"] else "oom"), kind
    return None, "-"


def _why_none(rep: dict, r: subprocess.CompletedProcess, cfg: Path) -> str:
    """One line on why a config got no verdict: the exit-2 message, or the note/finding that says what is unknown."""
    if r.returncode == 2:
        last = " ".join((r.stderr or r.stdout).strip().splitlines()[-1:])
        return "exit 2: " + last.split(f"{cfg}: ", 1)[-1][:240]
    for n in rep.get("notes") or []:
        if "not estimated" in n or "not known here" in n or "does not estimate" in n:
            return n[:160]
    errs = [f"{f['code']} {f['name']}" for f in rep.get("findings") or [] if f["severity"] == "error"]
    return ("errors: " + ", ".join(errs)) if errs else "no estimate (see the report)"


def every_yaml_fresh() -> list[str]:
    """`doctor check` on every YAML under LF's examples (the snapshot's and fixtures'), one fresh process each, as
    a user runs it: HF_HUB_OFFLINE=1, no --offline, an empty working directory (no data, no model folder), no
    version; --gpu A100 (size not given). Per config: verdict (or why none), wall and CPU s, whether the
    verdict-moving assumptions come first in the report."""
    dirs = [d for d in (SHARED_EXAMPLES, EXAMPLES) if d is not None and d.is_dir()]
    sys.path.insert(0, str(ROOT))
    from finetune_doctor.readers.model.catalog import find_in_catalog

    rows, walls, cpus = [], [], []
    with tempfile.TemporaryDirectory() as empty:
        for d in dirs:
            label = "LF snapshot" if d == SHARED_EXAMPLES else "fixtures"
            for cfg in sorted(d.rglob("*.yaml")):
                cmd = [sys.executable, "-m", "finetune_doctor", "check", str(cfg), "--gpu", "A100", "--format", "json"]
                wall, cpu, r = run_cpu(cmd, empty)
                try:
                    rep = json.loads(r.stdout) if r.returncode in (0, 1) else {}
                except json.JSONDecodeError:
                    rep = {}
                verdict, where = _verdict(rep)
                flags = [a["moves_verdict"] for a in rep.get("assumptions", [])]
                movers = [a["name"] for a in rep.get("assumptions", []) if a["moves_verdict"]]
                # the name as the YAML writes it (an unresolved model has no report section to name it)
                hit = re.search(r"^(?:model_name_or_path|model):\s*(\S+)", cfg.read_text(encoding="utf-8"), re.M)
                model = hit.group(1) if hit else ""
                # the catalogue holds it by this name (or the report sized it by another: a parent folder's)
                in_cat = bool(model) and (find_in_catalog(model) is not None or bool(rep.get("model")))
                walls.append(wall)
                cpus.append(cpu)
                rows.append((label, cfg.relative_to(d), wall, cpu, verdict, where, movers,
                             flags == sorted(flags, reverse=True), model, in_cat,
                             None if verdict else _why_none(rep, r, cfg)))
    got = [x for x in rows if x[4]]
    out = ["## Every YAML under LF's examples, one fresh process each", "",
           f"{len(rows)} YAMLs ({sum(x[0] == 'LF snapshot' for x in rows)} in the LF snapshot's examples/, "
           f"{sum(x[0] == 'fixtures' for x in rows)} in fixtures/llamafactory/examples), HF_HUB_OFFLINE=1, no "
           "--offline, empty working directory, no version, --gpu A100. Verdict: memory.verdict for training, the "
           "kind's own for export (verdict), chat and predict (fits).", "",
           f"- with a verdict: {len(got)}/{len(rows)}; without: {len(rows) - len(got)} (listed below, with why)",
           f"- wall per check: median {statistics.median(walls):.3f} s, max {max(walls):.3f} s; CPU per check: "
           f"median {statistics.median(cpus):.3f} s, max {max(cpus):.3f} s (goal: under 1 s)",
           f"- verdict-moving assumptions listed first: {sum(x[7] for x in rows)}/{len(rows)} reports "
           f"({sum(bool(x[6]) for x in got)} of the {len(got)} verdicts have one)", "",
           "### Without a verdict, by reason", "", "| configs | why |", "|---|---|"]
    reasons: dict[str, int] = {}
    for x in rows:
        if not x[4]:
            reasons[x[10]] = reasons.get(x[10], 0) + 1
    out += [f"| {n} | {why} |" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    out += ["", "### Without a verdict", "", "| examples | config | model | catalogue | why |", "|---|---|---|---|---|"]
    for label, rel, _w, _c, verdict, _where, _m, _f, model, in_cat, why in rows:
        if not verdict:
            out.append(f"| {label} | {rel} | {model or '-'} | {'yes' if in_cat else 'no'} | {why} |")
    out += ["", "### With a verdict", "", "| examples | config | wall s | CPU s | verdict | of | verdict-moving "
            "(first) |", "|---|---|---|---|---|---|---|"]
    for label, rel, w, c, verdict, where, movers, first, *_ in rows:
        if verdict:
            out.append(f"| {label} | {rel} | {w:.3f} | {c:.3f} | {verdict} | {where} | "
                       f"{', '.join(movers) or '-'}{'' if first else ' (NOT first)'} |")
    return out


def main() -> int:
    if "--all-yaml" in sys.argv:   # only the every-YAML section, appended to the results file under its heading
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "finetune_doctor")], check=True)
        before = loadavg()
        section = every_yaml_fresh()
        section[2] += f" Load (/proc/loadavg) before: {before}; after: {loadavg()}."
        res = HERE / "results" / "honest_check_speed.md"
        text = res.read_text(encoding="utf-8").split("\n## Every YAML under LF's examples")[0].rstrip("\n")
        res.write_text(text + "\n\n" + "\n".join(section) + "\n", encoding="utf-8")
        print("\n".join(section))
        return 0
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
    lines += ["", *every_example(), "", *every_yaml_fresh()]
    text = "\n".join(lines) + "\n"
    (HERE / "results" / "honest_check_speed.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
