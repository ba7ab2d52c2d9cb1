"""Command line: parse arguments, call a pipeline, pick a reporter. Nothing else lives here.

Exit codes (DESIGN.md): 0 nothing at or above ``--fail-on``; 1 findings at or above it; 2 usage or input
error, printed as one line ``file:line: what is wrong`` and never as a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import click

from finetune_doctor import __version__, lintcli

# lint's body, output and error policy live in lintcli.py (the console script runs lint without click)
FORMATS = lintcli.FORMATS
_fail_input = lintcli.fail_input


def _guard(fn: Callable) -> Callable:
    """Turn bad input into one line and exit 2, never a traceback (lintcli.guard; click's exits pass)."""
    return lintcli.guard(fn, passthrough=(click.exceptions.Exit, click.ClickException))


# options more than one command takes, declared once (issue #22)
RULES_OPTION = click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False),
                            help="Extra directory of rule files (repeatable).")
FIX_OPTION = click.option("--fix", is_flag=True, help="Apply safe fixes, keeping comments, key order and quoting.")
UNSAFE_FIXES_OPTION = click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that change training "
                                                                         "semantics.")


def common_options(fn: Callable) -> Callable:
    opts = [
        click.option("--gpu", "gpu", default=None, help="GPU spec: A100-80GB, 8xH100-80GB, 2x4090 (default: NVML)."),
        click.option("--nnodes", type=int, default=None, help="Number of nodes (each with the --gpu count)."),
        click.option("--format", "--output-format", "fmt", type=click.Choice(FORMATS), default=None,
                     help="Output format (default text; github under GitHub Actions). --output-format is ruff's "
                          "name for it."),
        click.option("--output", "output", type=click.Path(dir_okay=False), default=None, help="Write the report here."),
        click.option("--select", default=None, help="Comma-separated codes or prefixes to run."),
        click.option("--ignore", default=None, help="Comma-separated codes or prefixes to skip."),
        click.option("--fail-on", type=click.Choice(["error", "warning", "info", "never"]), default=None,
                     help="Lowest severity that makes the exit code 1 (default error)."),
        RULES_OPTION,
        click.option("--torch", "torch_version", default=None, metavar="VERSION",
                     help="torch on the training machine (default optimizer and kernels follow it; default: current)."),
        click.option("--transformers", "transformers_version", default=None, metavar="VERSION",
                     help="transformers on the training machine (its loss and DeepSpeed handling follow it)."),
        click.option("--llamafactory", "lf_version", default=None, metavar="VERSION",
                     help="LLaMA-Factory on the training machine (0.8.3, 0.9.5, main): its keys, choices and "
                          "templates decide (default: --env, else the installed llamafactory, else any release)."),
        click.option("--model-config", "model_config", type=click.Path(), default=None, metavar="FILE|DIR",
                     help="The model's config.json (or its folder) when model_name_or_path is not on this machine."),
        click.option("--offline", is_flag=True, default=False,
                     help="Never download a model's JSON configs (also HF_HUB_OFFLINE=1)."),
        click.option("--env", "env_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="The training machine's `llamafactory-cli env` (or pip freeze) output: its versions and GPUs."),
        click.option("--accelerate-config", "accelerate_config", type=click.Path(), default=None, metavar="FILE",
                     help="The accelerate config the run is launched with (FSDP/FSDP2, processes, mixed precision)."),
        click.option("--launch", "launch", type=click.Path(), default=None, metavar="FILE",
                     help="A file holding the launch command line (cmdline.txt, train.sh): launcher, ranks, env."),
        click.option("--host-ram", "host_ram", default=None, metavar="SIZE",
                     help="Host RAM per node of the training machine (744GB, 693GiB): CPU offload is judged "
                          "against it (default: this machine's when NVML sees its GPUs)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def strict_option(fn: Callable) -> Callable:
    """``--strict`` (check, estimate, lint): for CI gates, every verdict-moving assumption and every check that
    could not run on this machine (a dataset_dir, a DeepSpeed path not here) is an error."""
    return click.option("--strict", is_flag=True, default=False,
                        help="Treat verdict-moving assumptions and files not on this machine as errors (CI).")(fn)


def context_option(fn: Callable) -> Callable:
    """``--context FILE`` for the commands that answer as on the training machine (check, estimate, lint)."""
    return click.option("--context", "context", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        help="The training machine captured by `doctor context` (default: .doctor-context.json "
                             "beside the config); its values act as --model-config, --env, --gpu, --host-ram, "
                             "--accelerate-config and the data scan.")(fn)


_options = lintcli.options
emit = lintcli.emit
_input_files = lintcli.input_files
_write = lintcli.write
exit_code = lintcli.exit_code


class DoctorGroup(click.Group):
    """click's usage errors as one line and exit 2, like every other bad input (DESIGN.md)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              **extra)
        except click.exceptions.UsageError as err:
            cmd = f" {err.ctx.info_name}" if err.ctx is not None and err.ctx.parent is not None else ""
            click.echo(f"doctor{cmd}: {err.format_message()} (see 'doctor{cmd} --help')", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        if isinstance(rv, int) and standalone_mode:
            sys.exit(rv)
        return rv


@click.group(cls=DoctorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="finetune-doctor")
def main() -> None:
    """finetune-doctor: will a LLaMA-Factory run fit, why did it die, is the config sane."""


@main.command()
@click.argument("config", type=click.Path())
@click.argument("overrides", nargs=-1)
@common_options
@click.option("--probe", "probe_mode", flag_value="simulate", default=None,
              help="Confirm each memory/numerics fix with a probe (simulate on CPU).")
@click.option("--probe-mode", "probe_mode", type=click.Choice(["simulate", "gpu", "auto"]),
              help="Probe mode for --probe: simulate (default), gpu (real steps on free local GPUs), auto.")
@click.option("--data/--no-data", "scan_data", default=True, help="Scan local datasets for token lengths.")
@FIX_OPTION
@UNSAFE_FIXES_OPTION
@click.option("--validate-deepspeed", "validate_ds", is_flag=True,
              help="Also validate the DeepSpeed JSON with DeepSpeed's own config models (imports deepspeed, ~3 s).")
@strict_option
@context_option
@_guard
def check(config: str, overrides: tuple[str, ...], probe_mode: str | None, scan_data: bool, fix: bool,
          unsafe_fixes: bool, validate_ds: bool, **kw: Any) -> None:
    """Full diagnosis of a run before launch: rules, memory, data, probes."""
    from finetune_doctor.pipeline import check as pipe

    opts = _options(command="check", paths=[config], **kw)
    report = pipe.run(config, overrides, opts, probe=probe_mode is not None, probe_mode=probe_mode or "simulate",
                      scan_data=scan_data, fix=fix, unsafe_fixes=unsafe_fixes, validate_ds=validate_ds)
    emit(report, opts)


@main.command()
@click.argument("files", nargs=-1, type=click.Path())
@common_options
@FIX_OPTION
@UNSAFE_FIXES_OPTION
@click.option("--diff", is_flag=True, help="Print only the unified diff the fixes would make (nothing is written; "
              "exit 1 when there is one).")
@strict_option
@context_option
@click.option("--statistics", is_flag=True, help="Print one line per rule code with its count instead of findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (bad input still exits 2).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Use this pyproject.toml or .finetune-doctor.toml instead of looking one up per file.")
@click.option("--stdin-filename", default=None, metavar="PATH",
              help="The name standard input (-) is linted under: findings point at it, its suffix says YAML/JSON.")
@click.option("--force-exclude", is_flag=True,
              help="Apply exclude/extend-exclude to files named on the command line too (as pre-commit names them).")
@_guard
def lint(files: tuple[str, ...], fix: bool, unsafe_fixes: bool, diff: bool, statistics: bool, exit_zero: bool,
         config_file: str | None, stdin_filename: str | None, force_exclude: bool, **kw: Any) -> None:
    """Static rules over FILES, directories (walked for YAML/JSON configs) or - (standard input); for
    pre-commit. Never imports torch, never touches a GPU or a dataset."""
    lintcli.lint_command(files, fix, unsafe_fixes, diff, statistics, exit_zero, config_file, stdin_filename,
                         force_exclude, **kw)


@main.command()
@click.argument("config", type=click.Path())
@click.argument("overrides", nargs=-1)
@common_options
@click.option("--sweep", "sweeps", multiple=True, help="KEY=v1,v2,... what-if table (repeatable: a grid).")
@click.option("--data/--no-data", "scan_data", default=True,
              help="Scan local datasets for token lengths (as check does).")
@strict_option
@context_option
@_guard
def estimate(config: str, overrides: tuple[str, ...], sweeps: tuple[str, ...], scan_data: bool, **kw: Any) -> None:
    """Memory breakdown per GPU and host; --sweep for what-fits tables."""
    from finetune_doctor.pipeline import estimate as pipe

    opts = _options(command="estimate", paths=[config], **kw)
    report = pipe.run(config, overrides, opts, sweeps=sweeps, scan_data=scan_data)
    emit(report, opts)


@main.command()
@click.argument("run_dir", type=click.Path(), required=False)
@click.argument("overrides", nargs=-1)
@click.option("--log", "logs", multiple=True, type=click.Path(), help="Extra log file (repeatable).")
@click.option("--config", "config", type=click.Path(), default=None, help="The run's LLaMA-Factory YAML.")
@click.option("--deepspeed", "deepspeed", type=click.Path(), default=None,
              help="The run's DeepSpeed JSON (the same as deepspeed=FILE).")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None, help="Draw the curves to a PNG.")
@common_options
@_guard
def postmortem(run_dir: str | None, overrides: tuple[str, ...], logs: tuple[str, ...], config: str | None,
               deepspeed: str | None, plot: str | None, **kw: Any) -> None:
    """Why a finished or crashed run died or went NaN, from its outputs and logs.

    RUN_DIR may be left out when --log names the logs. KEY=VALUE overrides apply to the run's config as
    `llamafactory-cli train` applies them."""
    from finetune_doctor.pipeline import postmortem as pipe

    if run_dir is not None and "=" in run_dir and not os.path.exists(run_dir) and logs:
        run_dir, overrides = None, (run_dir, *overrides)   # `postmortem key=value --log FILE`: no run folder
    if run_dir is None and not logs:
        raise click.UsageError("give the run folder (RUN_DIR) or its logs (--log FILE)")
    opts = _options(command="postmortem", paths=[run_dir] if run_dir else list(logs), **kw)
    report = pipe.run(run_dir, list(logs), config, opts, plot=plot, overrides=overrides, deepspeed=deepspeed)
    for n in pipe.own_output_notes(report):
        click.echo(f"doctor: note: {n}", err=True)
    emit(report, opts)


@main.command()
@click.argument("config", type=click.Path())
@click.argument("overrides", nargs=-1)
@common_options
@click.option("--mode", type=click.Choice(["simulate", "gpu", "auto"]), default="auto")
@click.option("--steps", type=int, default=2, help="Training steps per probe (peak comes at step >= 2).")
@click.option("--force", is_flag=True, help="Probe on GPUs that other processes are using.")
@_guard
def probe(config: str, overrides: tuple[str, ...], mode: str, steps: int, force: bool, **kw: Any) -> None:
    """Confirm fixes by running short probes (FakeTensorMode on CPU, or real steps on GPU)."""
    from finetune_doctor.pipeline import probe as pipe

    opts = _options(command="probe", paths=[config], **kw)
    report = pipe.run(config, overrides, opts, mode=mode, steps=steps, force=force)
    emit(report, opts)


@main.command()
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--watch", type=float, default=None, help="Refresh every SECONDS (live view).")
@click.option("--record", type=click.Path(dir_okay=False), default=None, help="Append samples to a CSV or JSONL file.")
@click.option("--interval", type=float, default=1.0, help="Seconds between recorded samples.")
@click.option("--count", type=int, default=None, help="Stop after this many samples (with --watch/--record).")
@click.option("--from", "from_files", multiple=True, type=click.Path(), help="Read recorded files instead of NVML.")
@click.option("--config", "config", type=click.Path(), default=None, help="The run's YAML, to rank likely causes.")
@common_options
@_guard
def gpus(files: tuple[str, ...], watch: float | None, record: str | None, interval: float, count: int | None,
         from_files: tuple[str, ...], config: str | None, **kw: Any) -> None:
    """Live per-card memory via NVML; imbalance and foreign processes.

    FILES (or --from FILE, repeatable) read recorded nvidia-smi CSV/text or `--record` files instead of NVML,
    several nodes together: `doctor gpus --from node0.jsonl node1.jsonl`."""
    from_files = tuple(from_files) + tuple(files)
    from finetune_doctor.pipeline import gpus as pipe

    opts = _options(command="gpus", paths=list(from_files) or ["."], **kw)
    view = None
    if watch is not None:
        from finetune_doctor.reporters.live import LiveView

        view = LiveView()
    try:
        report = pipe.run(opts, watch=watch, record=record, interval=interval, count=count,
                          from_files=list(from_files), config=config, progress=view.update if view else None)
    finally:
        if view is not None:
            view.stop()
    emit(report, opts)


@main.command()
@click.argument("config", type=click.Path())
@click.argument("overrides", nargs=-1)
@common_options
@click.option("--approximate", is_flag=True, help="Count tokens without the model's tokenizer (says so).")
@click.option("--workers", type=int, default=None, help="Tokenizer processes (default: all cores).")
@_guard
def data(config: str, overrides: tuple[str, ...], approximate: bool, workers: int | None, **kw: Any) -> None:
    """Token-length statistics of the configured datasets against cutoff_len."""
    from finetune_doctor.pipeline import data as pipe

    opts = _options(command="data", paths=[config], **kw)
    bars = None
    if opts.format == "text" and not opts.output and sys.stderr.isatty():
        from finetune_doctor.reporters.sections.data import ScanProgress

        bars = ScanProgress()
        bars.start()
    try:
        report = pipe.run(config, overrides, opts, approximate=approximate, workers=workers,
                          progress=bars.update if bars is not None else None)
    finally:
        if bars is not None:
            bars.stop()
    emit(report, opts)


@main.command(name="rules")
@RULES_OPTION
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@_guard
def rules_cmd(rules_dirs: tuple[str, ...], fmt: str) -> None:
    """The rule catalogue."""
    from finetune_doctor.engine.loader import load_rules
    from finetune_doctor.reporters.catalog import render_catalog

    click.echo(render_catalog(load_rules(list(rules_dirs)), fmt))


@main.command()
@click.argument("code_or_name")
@RULES_OPTION
@_guard
def explain(code_or_name: str, rules_dirs: tuple[str, ...]) -> None:
    """One rule's documentation."""
    from finetune_doctor.engine.loader import find_rule, load_rules
    from finetune_doctor.reporters.catalog import render_explain

    from finetune_doctor.reporters.wrap import terminal_width, wrap_markdown

    rule = find_rule(load_rules(list(rules_dirs)), code_or_name)
    click.echo(wrap_markdown(render_explain(rule), terminal_width()))


if __name__ == "__main__":  # pragma: no cover
    main()


def entry() -> None:
    """The console script: `main`, then a fast exit once torch is loaded.

    Tearing down torch, transformers and their thread pools at interpreter exit costs about 1 CPU second (2-3 s
    wall on a loaded machine: benchmarks/results/margin_speed.md) after the report is out. Every output is written
    and flushed by then (reports via click.echo or fsutil.atomic_write), so the process ends with ``os._exit``.
    Without torch in the process (lint, check without probes) the normal exit runs.
    """
    try:
        main()
        code: Any = 0
    except SystemExit as done:
        code = done.code
    from finetune_doctor.startup import save

    save()   # the dataclass code cache (startup.py; nothing to do when __main__.entry did not set it up)
    if "torch" not in sys.modules:
        raise SystemExit(code)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


@main.command()
@click.argument("config", type=click.Path())
@click.argument("overrides", nargs=-1)
@common_options
@click.option("--keep-paths", is_flag=True, help="Keep absolute paths of this machine in the file (default: made "
              "relative to the config's folder or cut to their last component).")
@click.option("--no-data", "no_data", is_flag=True, help="Do not scan the datasets.")
@click.option("--from", "gpus_from", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Read the GPUs from an nvidia-smi, rocm-smi, amd-smi or npu-smi output instead of NVML.")
@_guard
def context(config: str, overrides: tuple[str, ...], keep_paths: bool, no_data: bool, gpus_from: str | None,
            **kw: Any) -> None:
    """Capture this (training) machine for checks elsewhere: writes .doctor-context.json beside the config."""
    from finetune_doctor.pipeline import context as pipe

    opts = _options(command="context", paths=[config], **{**kw, "output": None})
    got = pipe.capture(config, overrides, opts, output=kw.get("output"), keep_paths=keep_paths,
                       scan_data=not no_data, gpus_from=gpus_from)
    d = got.data
    gpus = (d.get("hardware") or {})
    parts = [f"model {((d.get('model') or {}).get('name'))}" + (" (config.json)" if (d.get("model") or {}).get("config")
                                                                else " (no config.json)"),
             f"GPUs {gpus.get('num_gpus')} x {gpus.get('gpu')}" if gpus.get("gpu") else "no GPUs",
             "stack " + ", ".join(f"{k} {v}" for k, v in (d.get("stack") or {}).items() if v and k in
                                  ("torch", "transformers", "deepspeed", "llamafactory", "peft", "accelerate")),
             f"{len((d.get('data') or {}).get('datasets') or [])} dataset(s) scanned"]
    click.echo(f"doctor: wrote {got.path}: " + "; ".join(parts))
    for n in got.notes:
        click.echo(f"doctor: note: {n}", err=True)
