"""Speed of `doctor lint` against `yamllint -d relaxed` on the same files, measured in the same run.

Corpus: 50 LLaMA-Factory training configs and their 50 DeepSpeed JSONs, generated into a temporary directory from
the example configs LLaMA-Factory ships (fixtures/llamafactory/examples) with varied values (learning rate, cutoff,
batch sizes, LoRA rank, precision flags, ZeRO stage, offload, bucket sizes), each YAML pointing at its own JSON.

Timed, each as a fresh process the way pre-commit starts it (console scripts of this environment):
* ``doctor lint <100 files>`` vs ``yamllint -d relaxed <100 files>``: median wall time of N runs each, runs
  interleaved so that both see the same machine state; the ratio doctor/yamllint (goal, issue #6: <= 1.0).
* ``doctor lint <one config>`` cold (a new interpreter each time): median wall time (goal: <= 0.15 s).

Python is run with its bytecode cache available (as after ``pip install``, which compiles .pyc files), kept in a
temporary PYTHONPYCACHEPREFIX and warmed once; a second table repeats the measurement with PYTHONDONTWRITEBYTECODE=1,
the setting of this development sandbox, where every import is compiled from source on every run.
Also checks with ``-X importtime`` that `doctor lint` imports no torch, transformers or deepspeed.
Writes benchmarks/results/lint.md.

Second, LLaMA-Factory's own examples as they are (issue #22): every YAML under the copy in
fixtures/llamafactory/examples, and every YAML under a full examples/ folder of LLaMA-Factory when one is given
(``LF_EXAMPLES=path``; default: the snapshot's copy at /work/shared/reference/llamafactory/examples when present),
each against ``yamllint -d relaxed`` on the same files, interleaved, bytecode cached (goal: ratio <= 0.5, one file
<= 0.12 s).

Usage: python benchmarks/bench_lint.py [RUNS]   (default 7)
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"
BIN = Path(sys.executable).parent
HISTORY = "## Before and after issue #22"   # lint.md's hand-written sections start here
DOCTOR: list[str] = []   # the console script, written by `console_script` as pip writes it from pyproject.toml


def console_script(where: Path) -> Path:
    """`doctor` as pip would install it from this tree's pyproject.toml ([project.scripts]): a Python file that
    imports the named entry and exits with it. The environment's own `doctor` may come from an older install of
    the project (an editable install keeps the script of the tree it was installed from), so it is not used."""
    import tomllib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["doctor"]
    module, func = target.split(":")
    script = where / "doctor"
    script.write_text(f"#!{sys.executable}\nimport re\nimport sys\nfrom {module} import {func}\n"
                      f"if __name__ == '__main__':\n"
                      f"    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      f"    sys.exit({func}())\n")
    script.chmod(0o755)
    return script
N_CONFIGS = 50
LF_FULL = Path(os.environ.get("LF_EXAMPLES", "/work/shared/reference/llamafactory/examples"))


def generate(out: Path, seed: int = 20261130) -> tuple[list[Path], list[Path]]:
    """Write N_CONFIGS LF YAMLs + one DeepSpeed JSON each, varied from LF's examples; returns (yamls, jsons)."""
    from finetune_doctor.fixes.edit import render_edits
    from finetune_doctor.types import Edit

    rng = random.Random(seed)
    bases = sorted(p for p in EXAMPLES.rglob("*.yaml")
                   if "stage:" in p.read_text() and "megatron" not in str(p) and "ray" not in p.name)
    ds_bases = sorted((EXAMPLES / "deepspeed").glob("ds_z*_config.json"))
    yamls, jsons = [], []
    for i in range(N_CONFIGS):
        base = bases[i % len(bases)]
        ds_base = ds_bases[i % len(ds_bases)]
        ds_path = out / f"ds_{i:02d}.json"
        ds_edits = [Edit(str(ds_path), "zero_optimization.stage", rng.choice([0, 1, 2, 3])),
                    Edit(str(ds_path), "zero_optimization.overlap_comm", rng.choice([True, False])),
                    Edit(str(ds_path), "zero_optimization.reduce_bucket_size", rng.choice(["auto", 5e8, 2e8]))]
        ds_text, _ = render_edits(ds_base.read_text(), ds_edits, kind="json", path=str(ds_path))
        ds_path.write_text(ds_text)
        y_path = out / f"{base.stem}_{i:02d}.yaml"
        edits = [Edit(str(y_path), "learning_rate", rng.choice([1e-5, 5e-5, 1e-4, 2e-4, 3e-4])),
                 Edit(str(y_path), "cutoff_len", rng.choice([1024, 2048, 4096, 8192])),
                 Edit(str(y_path), "per_device_train_batch_size", rng.choice([1, 2, 4])),
                 Edit(str(y_path), "gradient_accumulation_steps", rng.choice([1, 4, 8, 16])),
                 Edit(str(y_path), "deepspeed", ds_path.name),
                 Edit(str(y_path), rng.choice(["bf16", "fp16"]), True)]
        if "lora" in base.read_text():
            edits.append(Edit(str(y_path), "lora_rank", rng.choice([8, 16, 64])))
        y_text, _ = render_edits(base.read_text(), edits, kind="yaml", path=str(y_path))
        y_path.write_text(y_text)
        yamls.append(y_path)
        jsons.append(ds_path)
    return yamls, jsons


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    dt, _cpu, rc = timed_cpu(cmd, env, cwd)
    return dt, rc


def timed_cpu(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """Wall seconds, the child's CPU seconds (user + sys: the growth of ``RUSAGE_CHILDREN`` across the run, one
    child at a time) and its exit code. CPU time is the steadier measure on a shared machine: at a load of 8-11 on
    2 cores wall times swing 2-3x between rounds."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu, res.returncode


def measure(files: list[Path], one: Path, envs: dict[str, dict[str, str]], cwd: Path,
            runs: int, train: Path | None = None) -> dict[str, dict[str, object]]:
    """Median wall times per environment (and, as "<command>_cpu", median CPU seconds of the child); every command of
    every environment runs once per round, interleaved. `train`: also time `doctor lint` and yamllint on that one
    training config ("train", "train_yamllint")."""
    doctor = [*DOCTOR, "lint", "--format", "concise", *map(str, files)]
    yamllint = [str(BIN / "yamllint"), "-d", "relaxed", *map(str, files)]
    single = [*DOCTOR, "lint", "--format", "concise", str(one)]
    cmds = {"doctor": doctor, "yamllint": yamllint, "single": single}
    if train is not None:
        cmds["train"] = [*DOCTOR, "lint", "--format", "concise", str(train)]
        cmds["train_yamllint"] = [str(BIN / "yamllint"), "-d", "relaxed", str(train)]
    times = {name: {c: [] for c in cmds} for name in envs}
    cpus = {name: {c: [] for c in cmds} for name in envs}
    codes: set[int] = set()
    for env in envs.values():  # warm the OS file cache (and the bytecode cache, when allowed)
        for cmd in cmds.values():
            timed(cmd, env, cwd)
    for _ in range(runs):
        for name, env in envs.items():
            for c, cmd in cmds.items():
                dt, cpu, rc = timed_cpu(cmd, env, cwd)
                times[name][c].append(dt)
                cpus[name][c].append(cpu)
                if c == "doctor":
                    codes.add(rc)
    out: dict[str, dict[str, object]] = {}
    for name, t in times.items():
        out[name] = {c: statistics.median(v) for c, v in t.items()}
        out[name].update({f"{c}_all": v for c, v in t.items()})
        out[name].update({f"{c}_cpu": statistics.median(v) for c, v in cpus[name].items()})
        out[name]["exit_codes"] = sorted(codes)
    return out


def heavy_imports(one: Path, env: dict[str, str], cwd: Path) -> list[str]:
    res = subprocess.run([sys.executable, "-X", "importtime", *DOCTOR[1:], "lint", str(one)],
                         env=env, cwd=cwd, capture_output=True, text=True)
    mods = {ln.split("|")[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")}
    return sorted(m for m in mods if m.split(".")[0] in ("torch", "transformers", "deepspeed"))


def breakdown(yaml_path: Path, json_path: Path, reps: int = 15) -> dict[str, float]:
    """In-process cost (median ms) of the pieces one linted config pays, to show where `doctor lint` spends time."""
    import json as _json

    from finetune_doctor.engine import loader
    from finetune_doctor.readers.deepspeed import dsconfig
    from finetune_doctor.readers.config import keyschema, yamlcfg
    def med(fn) -> float:
        out = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e3)
        return statistics.median(out)

    def rules_cold() -> None:
        loader._load_dir.cache_clear()
        loader.load_rules()

    def schema_cold() -> None:
        keyschema._bundled_schema.cache_clear()
        keyschema.load_schema()

    text = json_path.read_text()
    doc = yamlcfg.load_config(str(yaml_path))
    return {
        "rule pack parse (ruamel, pure Python), per process": med(rules_cold),
        "key schema JSON load, per process": med(schema_cold),
        "LF YAML read with positions (ruamel round-trip), per config": med(lambda: yamlcfg.load_config(str(yaml_path))),
        "DeepSpeed JSON read with positions, per JSON": med(lambda: dsconfig.parse_ds_text(text, str(json_path))),
        "DeepSpeed JSON json.loads alone, per JSON": med(lambda: _json.loads(text)),
        "check_keys, per config": med(lambda: keyschema.check_keys(doc.values, env={})),
    }


_PIECES = r"""
import atexit, gc, importlib, json, sys, time
c0 = time.process_time()
gc.set_threshold(50_000, *gc.get_threshold()[1:])   # as __main__.entry sets it for lint
acc = {}
def wrap(spec, label):
    mod, attr = spec.rsplit(":", 1)
    m = importlib.import_module(mod)
    f = getattr(m, attr)
    def w(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[label] = acc.get(label, 0.0) + time.process_time() - t
    setattr(m, attr, w)
from finetune_doctor import startup
startup.install("lint")   # as __main__.entry does first for a lint (its second call is a no-op)
import finetune_doctor.pipeline.lint
c2 = time.process_time()
for spec, label in json.loads(sys.argv[1]):
    wrap(spec, label)
c3 = time.process_time()
def done():
    acc["interpreter and site (before the first project import)"] = c0
    acc["start-up: finetune_doctor.startup and pipeline.lint imported"] = c2 - c0
    acc["imports of the judge, fact assembly and readers (a lint imports them with its first config)"] = c3 - c2
    acc["whole process (at exit)"] = time.process_time()
    sys.stderr.write("PIECES " + json.dumps(acc) + "\n")
atexit.register(done)
sys.argv = ["doctor", *sys.argv[2:]]
from finetune_doctor.__main__ import entry
entry()
"""

PIECES = [("finetune_doctor.pipeline.lint:classify", "classify every file (read, kind)"),
          ("finetune_doctor.pipeline.lint:_lint_config", "lint each LLaMA-Factory config (all below)"),
          ("finetune_doctor.facts.config:_read", "  read the YAML, key/launch/release facts"),
          ("finetune_doctor.facts.config:_arch", "  model resolution (local, caches, catalogue)"),
          ("finetune_doctor.facts.dsread:read_deepspeed", "  DeepSpeed JSON named by the config"),
          ("finetune_doctor.facts.launchread:read_launch", "  accelerate config beside it"),
          ("finetune_doctor.facts.config:resolve_run", "  run resolution"),
          ("finetune_doctor.engine.judge:judge", "  judge (rules, suppressions)"),
          ("finetune_doctor.pipeline.lint:_per_file", "  options per file (project config per folder)"),
          ("finetune_doctor.pipeline.lint:lint_accelerate_alone", "accelerate configs linted alone"),
          ("finetune_doctor.reporters:render", "report rendering")]


def pieces(files: list[Path], env: dict[str, str], cwd: Path, reps: int = 5) -> dict[str, float]:
    """Where the CPU of one `doctor lint` process goes (median ms of `reps` runs, one process:
    FINETUNE_DOCTOR_LINT_JOBS=1): each piece is a function of the lint path timed in place by process time,
    first calls (imports, rule pack, caches) included; nested pieces are indented. Raises RuntimeError when the
    harness prints nothing."""
    spec = json.dumps([list(p) for p in PIECES])
    rows: list[dict[str, float]] = []
    for _ in range(reps):
        res = subprocess.run([sys.executable, "-c", _PIECES, spec, "lint", "--format", "concise", *map(str, files)],
                             env={**env, "FINETUNE_DOCTOR_LINT_JOBS": "1"}, cwd=cwd, capture_output=True, text=True)
        line = next((ln for ln in res.stderr.splitlines() if ln.startswith("PIECES ")), None)
        if line is None:
            raise RuntimeError(f"the pieces harness printed nothing: {res.stderr[-500:]}")
        rows.append(json.loads(line[len("PIECES "):]))
    first = [k for k in rows[0] if k.startswith(("interpreter", "start-up", "imports"))]
    keys = first + [label for _spec, label in PIECES] + ["whole process (at exit)"]
    return {k: statistics.median(r.get(k, 0.0) for r in rows) * 1e3 for k in keys}


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    work = Path(tempfile.mkdtemp(prefix="bench-lint-"))
    pyc = Path(tempfile.mkdtemp(prefix="bench-lint-pyc-"))
    load_start = open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").is_file() else []
    bindir = Path(tempfile.mkdtemp(prefix="bench-lint-bin-"))
    # the doctor's own cache (compiled rule expressions, the rule pack, JSON copies) in a folder of this run: in the
    # shared ~/.cache/finetune-doctor every other checkout of the project (another mtime of engine/expr.py) writes
    # its own expression file, and the folder keeps the 8 newest and those of the last 10 minutes
    # (fsutil.prune_cache): a run can find its file evicted and compile the rule expressions again (valgrind, a
    # lint of LF's 95 examples: 1.26 G instructions warm, 6.9 G with the folder empty, 2.8 G with only another
    # checkout's files there); HF_HOME pinned to where the hub cache was before, which XDG_CACHE_HOME would move
    doctor_cache = Path(tempfile.mkdtemp(prefix="bench-lint-cache-"))
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    DOCTOR[:] = [sys.executable, str(console_script(bindir))]
    try:
        yamls, jsons = generate(work)
        files = yamls + jsons
        base_env = {**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1", "NO_COLOR": "1",
                    "XDG_CACHE_HOME": str(doctor_cache), "HF_HOME": hf_home,
                    "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        cached = {k: v for k, v in base_env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(pyc)
        nocache = {**base_env, "PYTHONDONTWRITEBYTECODE": "1"}
        nocache.pop("PYTHONPYCACHEPREFIX", None)
        res_all = measure(files, yamls[0], {"cached": cached, "nocache": nocache}, work, runs)
        r_cached, r_nocache = res_all["cached"], res_all["nocache"]
        corpora = {"fixtures/llamafactory/examples (copy)": sorted(EXAMPLES.rglob("*.yaml"))}
        if LF_FULL.is_dir():
            corpora[f"{LF_FULL} (LLaMA-Factory's examples/)"] = sorted(LF_FULL.rglob("*.yaml"))
        trains = {name: next((f for f in fs if f.name == "qwen3_lora_sft.yaml"), None) for name, fs in corpora.items()}
        lf_res = {name: measure(fs, fs[0], {"cached": cached}, work, runs, trains[name])["cached"]
                  for name, fs in corpora.items()}
        heavy = heavy_imports(yamls[0], cached, work)
        from finetune_doctor.pipeline.lint import default_jobs

        jobs_note = (f"{default_jobs()} at the end of the run on {os.cpu_count()} CPUs"
                     + (f" (FINETUNE_DOCTOR_LINT_JOBS={os.environ['FINETUNE_DOCTOR_LINT_JOBS']})"
                        if os.environ.get("FINETUNE_DOCTOR_LINT_JOBS") else ""))
        parts = breakdown(yamls[0], jsons[0])
        where = {name: pieces(fs, cached, work) for name, fs in corpora.items()}
        load = os.getloadavg()
        # findings as a sanity check: the corpus is linted, not skipped
        res = subprocess.run([*DOCTOR, "lint", "--format", "json", *map(str, files)], env=cached,
                             cwd=work, capture_output=True, text=True)
        report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
        n_findings = len(report.get("findings", []))
        skipped = len((report.get("skipped") or report.get("sections", {}).get("skipped") or []))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pyc, ignore_errors=True)
        shutil.rmtree(bindir, ignore_errors=True)
        shutil.rmtree(doctor_cache, ignore_errors=True)

    def row(name: str, r: dict[str, object]) -> str:
        ratio = r["doctor"] / r["yamllint"]
        return (f"| {name} | {r['doctor']:.3f} | {r['yamllint']:.3f} | **{ratio:.2f}** | {r['single']:.3f} |")

    import ruamel.yaml
    import yamllint

    ratio = r_cached["doctor"] / r_cached["yamllint"]
    text = f"""# doctor lint speed

`doctor lint` on {N_CONFIGS} LLaMA-Factory configs + their {len(jsons)} DeepSpeed JSONs ({len(files)} files, generated
from LLaMA-Factory's example configs with varied values by `benchmarks/bench_lint.py`), against
`yamllint -d relaxed` on the same files, in the same run. Median wall time of {runs} rounds (in each round every
command of both rows runs once, interleaved; one warm-up round first), each a fresh process started through the
console script as pre-commit starts it.
"one file cold": `doctor lint` on one config in a new interpreter.

| Python bytecode | doctor lint, s | yamllint -d relaxed, s | ratio doctor/yamllint | one file cold, s |
|---|---|---|---|---|
{row("cached (as installed by pip)", r_cached)}
{row("not written (PYTHONDONTWRITEBYTECODE=1, this sandbox)", r_nocache)}

Goals (issue #6): ratio <= 1.0 -- **{'met' if ratio <= 1.0 else 'NOT met'}** ({ratio:.2f});
one file cold <= 0.15 s -- **{'met' if r_cached['single'] <= 0.15 else 'NOT met'}** ({r_cached['single']:.3f} s).

- doctor lint exit codes over the runs: {r_cached['exit_codes']} (1 = findings at error level); {n_findings} findings
  reported for the corpus, {skipped} files skipped as not LLaMA-Factory/DeepSpeed.
- heavy imports on the lint path (`python -X importtime doctor lint`, the console script): {heavy or 'none'}.
- machine load average (1/5/15 min) at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs
  (other work ran on the same machine; the ratio is measured interleaved in the same run for that reason).
- raw times (cached bytecode), doctor: {', '.join(f'{t:.3f}' for t in r_cached['doctor_all'])};
  yamllint: {', '.join(f'{t:.3f}' for t in r_cached['yamllint_all'])};
  one file: {', '.join(f'{t:.3f}' for t in r_cached['single_all'])}.
- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, yamllint
  {getattr(yamllint, '__version__', '?')}, ruamel.yaml {ruamel.yaml.__version__}.

## LLaMA-Factory's examples, as shipped (issue #22)

Every YAML of each folder (configs of every kind: train, inference, merge; LLaMA-Factory v1 configs included),
`doctor lint` against `yamllint -d relaxed` on the same files, bytecode cached (PYTHONPYCACHEPREFIX, warmed once),
median of {runs} interleaved rounds (wall time; "CPU": the child's user + sys seconds, the steadier measure when
other work shares the cores). "one file": `doctor lint` on the first YAML of the folder (for both folders
an accelerate config, which lint names and skips); "one training config": on train_lora/qwen3_lora_sft.yaml, with
yamllint on the same file beside it. `doctor` is the console script as pip writes it from pyproject.toml.

| corpus | files | doctor lint, s | yamllint -d relaxed, s | ratio doctor/yamllint | one file, s | one training config, s (yamllint) | CPU ratio | one training config, CPU s (yamllint) |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(f"| {name} | {len(corpora[name])} | {r['doctor']:.3f} | {r['yamllint']:.3f} | "
                f"**{r['doctor'] / r['yamllint']:.2f}** | {r['single']:.3f} | "
                + (f"{r['train']:.3f} ({r['train_yamllint']:.3f})" if 'train' in r else "-") + " | "
                + f"**{r['doctor_cpu'] / r['yamllint_cpu']:.2f}** | "
                + (f"{r['train_cpu']:.3f} ({r['train_yamllint_cpu']:.3f})" if 'train' in r else "-") + " |"
                for name, r in lf_res.items()) + f"""

Goals (issue #22): ratio <= 0.5 -- {'; '.join(f"{n.split(' ')[0]}: **{'met' if r['doctor'] / r['yamllint'] <= 0.5 else 'NOT met'}**" for n, r in lf_res.items())};
one file <= 0.12 s -- {'; '.join(f"{n.split(' ')[0]}: **{'met' if r['single'] <= 0.12 else 'NOT met'}** ({r['single']:.3f}; training config {r.get('train', float('nan')):.3f})" for n, r in lf_res.items())}.
Load average (1/5/15 min) at the start: {' / '.join(load_start) or '?'}, at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.
Lint workers (pipeline/lint.py `default_jobs`: one process per CPU the 1-minute load average leaves free, 17 or more
files): {jobs_note}.
Raw times: {'; '.join(f"{n.split(' ')[0]}: doctor {', '.join(f'{t:.3f}' for t in r['doctor_all'])} / yamllint {', '.join(f'{t:.3f}' for t in r['yamllint_all'])}" for n, r in lf_res.items())}.

Where the time goes (in-process, median ms):

| piece | ms |
|---|---|
""" + "\n".join(f"| {k} | {v:.1f} |" for k, v in parts.items()) + f"""

Where the CPU of one lint process goes (`pieces`: FINETUNE_DOCTOR_LINT_JOBS=1, each piece a function of the lint
path timed in place by process time, first calls included; median of 5 runs, ms; indented rows are inside the row
above them; the rest of "whole process" is the lint's own loop, the DeepSpeed JSONs linted alone and the exit):

| piece | """ + " | ".join(n.split(" ")[0] for n in where) + """ |
|---|""" + "---|" * len(where) + "\n" + "\n".join(
        f"| {k.replace('  ', '&nbsp;&nbsp;', 1) if k.startswith('  ') else k} | "
        + " | ".join(f"{w.get(k, 0.0):.1f}" for w in where.values()) + " |"
        for k in next(iter(where.values()))) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    out = HERE / "results" / "lint.md"
    # the sections written by hand below the generated ones (A/B runs of past rounds) are kept as they are
    old = out.read_text(encoding="utf-8") if out.is_file() else ""
    history = old[old.index(HISTORY):] if HISTORY in old else ""
    out.write_text(text + ("\n" + history if history else ""), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
