"""The console script's fast exit (cli.entry): once torch is loaded the process ends with os._exit after the
report, so its exit code and every byte of output must already be right at that point."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
import click
from finetune_doctor import cli

@click.command()
def fake():
    import torch  # noqa: F401  (a command that loaded torch, as probe and check --probe do)
    click.echo("report line " * 2000)        # more than one pipe buffer: it must be flushed before _exit
    print("note", file=sys.stderr)
    sys.exit({code})

cli.main = fake
cli.entry()
"""


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 1, 2])
def test_exit_code_and_output_survive_the_fast_exit(code):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(code=code)], capture_output=True, text=True, timeout=120)
    assert r.returncode == code
    assert r.stdout.count("report line") == 2000 and r.stderr.strip().endswith("note")


def test_without_torch_the_normal_exit_runs():
    script = SCRIPT.replace("    import torch  # noqa: F401  (a command that loaded torch, as probe and check --probe do)\n",
                            "")
    r = subprocess.run([sys.executable, "-c", script.format(code=1) + "\nprint('unreachable')"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "torch" not in r.stderr
