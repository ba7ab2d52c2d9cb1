"""Run one doctor command in-process (click's CliRunner) under a wall-clock limit and judge what it printed.

The contract every command keeps on any input (DESIGN.md "Exit codes", issue 17):

* the exit code is 0, 1 or 2;
* no Python traceback and no ``doctor: internal error`` anywhere in the output;
* exit 2 prints (on stderr) a line ``doctor: <where>: <message>`` (or ``doctor <cmd>: <usage>`` for click's own
  usage errors), where ``<where>`` names a file -- ``path:line`` or ``path`` -- or ``<command line>``;
* no ESC byte (``\\x1b``) reaches stdout: every string that comes from a file is made terminal-safe
  (reporters/safe.py) before it is printed.

The time limit uses SIGALRM in the main thread, which raises `Hang` (a BaseException, so neither the CLI's guard
nor CliRunner swallows it) out of whatever the command was doing.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from click.testing import CliRunner

from finetune_doctor.cli import main

# `doctor: <file>[:<line>[:<col>]]: message`; a file is any text up to the first ": " that is followed by the
# message. `<command line>` stands for key=value overrides.
_INPUT_LINE = re.compile(r"^doctor: (?P<where>.+?)(?::(?P<line>\d+))?(?::\d+)?: \S")
_USAGE_LINE = re.compile(r"^doctor(?: [\w-]+)?: .+\(see 'doctor(?: [\w-]+)? --help'\)$")


class Hang(BaseException):
    """A command ran past its time limit."""


@dataclass(frozen=True)
class Outcome:
    """What one command did: exit `code`, `stdout` and `stderr` text, and the `problem` (None when the contract
    holds, else one line saying how it was broken)."""

    code: int
    stdout: str
    stderr: str
    problem: str | None


def _alarm(_sig, _frame):
    raise Hang()


def invoke(args: list[str], limit_s: float = 20.0, input: bytes | None = None) -> Outcome:
    """Run ``doctor <args>`` in-process with a `limit_s` wall-clock limit and judge it (see the module doc)."""
    runner = CliRunner()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        res = runner.invoke(main, args, input=input, catch_exceptions=True)
    except Hang:
        return Outcome(-1, "", "", f"hang: still running after {limit_s:g} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    stdout, stderr = res.stdout, res.stderr
    code = res.exit_code
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        exc = res.exception
        return Outcome(code, stdout, stderr, f"uncaught {type(exc).__name__}: {str(exc)[:200]}")
    return Outcome(code, stdout, stderr, judge(code, stdout, stderr))


def judge(code: int, stdout: str, stderr: str) -> str | None:
    """None when (code, stdout, stderr) keep the contract of the module doc, else what broke it."""
    text = stdout + stderr
    if code not in (0, 1, 2):
        return f"exit code {code}"
    if "Traceback (most recent call last)" in text:
        return "a traceback was printed"
    if "internal error" in text:
        line = next(ln for ln in text.splitlines() if "internal error" in ln)
        return f"internal error: {line[:300]}"
    if "\x1b" in stdout:
        i = stdout.index("\x1b")
        return f"an escape byte reached stdout: {stdout[max(0, i - 40):i + 20]!r}"
    if code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        if not lines:
            return "exit 2 with nothing on stderr"
        first = lines[0]
        if _USAGE_LINE.match(first):
            return None
        m = _INPUT_LINE.match(first)
        if not m:
            return f"exit 2 without a 'doctor: <file>:<line>: ...' line: {first[:300]!r}"
        where = m.group("where")
        if where in ("<input>", "None", ""):
            return f"exit 2 naming no file: {first[:300]!r}"
    return None
