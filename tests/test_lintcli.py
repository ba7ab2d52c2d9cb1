"""`doctor lint` without click (lintcli.py): its parser reads every command line it accepts exactly as click reads
it for the lint command cli.py declares, and hands every other one to click; the console script's lint imports
no click; `echo` writes what click.echo writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from finetune_doctor import lintcli
from finetune_doctor.cli import lint as lint_command

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "fixtures" / "llamafactory" / "examples" / "train_lora" / "qwen3_lora_sft.yaml"


def _click_params(argv: list[str]) -> dict | None:
    """The parameters click passes to lint's callback, or None when click refuses the command line."""
    try:
        ctx = lint_command.make_context("lint", list(argv), resilient_parsing=False)
    except (click.exceptions.UsageError, click.exceptions.Exit, click.exceptions.BadParameter):
        return None
    return dict(ctx.params)


def test_options_table_is_the_click_declaration():
    """Every lint option of cli.py, with its parameter name, kind, choices and click.Path settings, is in
    lintcli.OPTIONS and nothing else is: a new option declared in one place only fails here."""
    declared: dict[str, tuple] = {}
    for p in lint_command.params:
        if isinstance(p, click.Argument):
            t = p.type
            assert p.name == "files" and p.nargs == -1 and isinstance(t, click.Path)
            assert (t.file_okay, t.dir_okay) == lintcli.FILES_PATH
            continue
        t = p.type
        if p.is_flag:
            kind, detail = "flag", None
        elif isinstance(t, click.Choice):
            kind, detail = "choice", tuple(t.choices)
        elif isinstance(t, click.Path):
            kind, detail = "path", (t.file_okay, t.dir_okay)
            # the settings lintcli._path_ok models
            assert not t.exists and t.readable and not t.writable and not t.executable
            assert not t.resolve_path and not t.allow_dash and t.type is None
        elif t is click.INT:
            kind, detail = "int", None
        else:
            assert t is click.STRING, p.name
            kind, detail = "str", None
        assert not p.secondary_opts, p.name
        for opt in p.opts:
            declared[opt] = (p.name, kind, detail, p.multiple)
    assert declared == {k: (d, kind, tuple(x) if isinstance(x, (list, tuple)) and kind == "choice" else x, m)
                        for k, (d, kind, x, m) in lintcli.OPTIONS.items()}


def test_defaults_are_clicks():
    assert lintcli.parse([]) == _click_params([])
    assert lintcli.defaults() == _click_params([])


ACCEPTED = [
    [str(EXAMPLE)],
    [str(EXAMPLE), "--format", "json"],
    ["--format=concise", str(EXAMPLE), "--select", "FD0,FD2", "--ignore=FD101"],
    ["--output-format", "sarif", "a.yaml", "b.json"],
    ["--rules", str(ROOT / "rules"), "--rules=" + str(ROOT / "tests"), "x.yaml"],
    ["--nnodes", "2", "--gpu", "8xA100-80GB", "x.yaml"],
    ["--nnodes", " 3", "x.yaml"],
    ["--fail-on", "warning", "--exit-zero", "--strict", "--statistics", "x.yaml"],
    ["--fix", "--unsafe-fixes", "--diff", "--force-exclude", "x.yaml"],
    ["--gpu", "--fix", "x.yaml"],                      # a value may start with a dash, as in click
    ["--select", "FD1", "--select", "FD2", "x.yaml"],  # the last value of a repeated option wins
    ["--", "--fix", "-x.yaml"],                        # after --, words are files
    ["-", "--stdin-filename", "cfg.yaml"],
    ["--output", "out.txt", "--env", "env.txt", "--context", "ctx.json", "--config", "pyproject.toml", "x.yaml"],
    ["--torch", "2.6", "--transformers", "4.51.3", "--llamafactory", "0.9.4", "--offline", "x.yaml"],
    ["--model-config", str(ROOT / "fixtures"), "--accelerate-config", "a.yaml", "--launch", "l.sh", "x.yaml"],
    ["--host-ram", "744GB", "--format", "github", str(ROOT / "fixtures")],
    ["--select=", "x.yaml"],
]


@pytest.mark.parametrize("argv", ACCEPTED, ids=lambda a: " ".join(a)[:60])
def test_accepted_command_lines_parse_as_click_parses_them(argv):
    ours = lintcli.parse(argv)
    assert ours is not None
    assert ours == _click_params(argv)


REFUSED = [
    ["--help"], ["-h"], [str(EXAMPLE), "--help"],
    ["--bogus", "x.yaml"], ["--form", "json", "x.yaml"], ["-x.yaml"],
    ["--format", "yaml", "x.yaml"], ["--fail-on", "Error", "x.yaml"], ["--nnodes", "two", "x.yaml"],
    ["x.yaml", "--gpu"], ["--fix=yes", "x.yaml"],
    ["--output", str(ROOT), "x.yaml"],             # click.Path(dir_okay=False) on a folder
    ["--rules", str(EXAMPLE), "x.yaml"],           # click.Path(file_okay=False) on a file
    ["--config", str(ROOT / "tests"), "x.yaml"],
]


@pytest.mark.parametrize("argv", REFUSED, ids=lambda a: " ".join(a)[:60])
def test_other_command_lines_go_to_click(argv):
    """Help and every usage error are click's to print: the parser declines them."""
    assert lintcli.parse(argv) is None


@pytest.mark.parametrize("argv", REFUSED[3:], ids=lambda a: " ".join(a)[:60])
def test_declined_usage_errors_are_usage_errors_in_click(argv):
    assert _click_params(argv) is None


def test_console_script_lint_runs_without_click(tmp_path):
    """The console script's lint (`__main__.entry`) imports neither click nor importlib.metadata, gives the
    findings and exit code click's command gives, and hands --help to click."""
    # at exit, not in a `finally`: a finished lint ends with os._exit after the atexit handlers (__main__._end)
    code = ("import atexit, sys; from finetune_doctor.__main__ import entry\n"
            "atexit.register(lambda: print('CLICK' if 'click' in sys.modules else 'NOCLICK', "
            "'META' if 'importlib.metadata' in sys.modules else 'NOMETA', file=sys.stderr))\n"
            "entry()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FINETUNE_DOCTOR_NO_NVML": "1", "NO_COLOR": "1",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text() + "learnign_rate: 1.0e-4\n")
    fast = subprocess.run([sys.executable, "-c", code, "lint", "--format", "concise", str(bad)], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert fast.stderr.strip().splitlines()[-1] == "NOCLICK NOMETA"
    slow = subprocess.run([sys.executable, "-c", "from finetune_doctor.cli import main; main()", "lint",
                           "--format", "concise", str(bad)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert fast.returncode == slow.returncode == 1
    assert fast.stdout == slow.stdout and "learnign_rate" in fast.stdout
    helped = subprocess.run([sys.executable, "-c", code, "lint", "--help"], env=env, capture_output=True,
                            text=True, cwd=tmp_path)
    assert helped.returncode == 0 and "--stdin-filename" in helped.stdout
    assert helped.stderr.strip().splitlines()[-1].startswith("CLICK")


def test_echo_writes_what_click_echo_writes(capsys):
    for text, nl in (("plain — text", True), ("no newline", False), ("", True)):
        lintcli.echo(text, nl=nl)
        ours = capsys.readouterr().out
        click.echo(text, nl=nl)
        assert ours == capsys.readouterr().out
    lintcli.echo("to stderr", err=True)
    assert capsys.readouterr().err == "to stderr\n"


def test_a_finished_lint_flushes_its_output_and_keeps_its_exit_code(tmp_path):
    """`__main__._end` leaves a finished lint with os._exit: every line of the report still reaches stdout (a
    pipe, as pre-commit reads it), the skip note stderr, atexit handlers run once, and the exit codes are the
    ones of the ordinary exit: 1 with findings, 0 without, 2 for bad input (issue #22)."""
    code = ("import atexit, sys; from finetune_doctor.__main__ import entry\n"
            "atexit.register(lambda: print('ATEXIT', file=sys.stderr))\nentry()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FINETUNE_DOCTOR_NO_NVML": "1", "NO_COLOR": "1",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text() + "learnign_rate: 1.0e-4\n")
    other = tmp_path / "other.yaml"
    other.write_text("name: not a config\nitems: [1, 2]\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text(EXAMPLE.read_text() + "stage: [sft\n")

    def run(*files: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, "lint", "--format", "json", *map(str, files)], env=env,
                              capture_output=True, text=True, cwd=tmp_path)

    found = run(bad, other)
    report = json.loads(found.stdout)   # the whole JSON document arrived
    assert found.returncode == 1 and any("learnign_rate" in f["message"] for f in report["findings"])
    assert found.stderr.count("ATEXIT") == 1 and "skipped" in found.stderr
    clean = run(other)
    assert clean.returncode == 0 and json.loads(clean.stdout)["findings"] == []
    refused = run(broken)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("doctor: ") and refused.stderr.count("ATEXIT") == 1
