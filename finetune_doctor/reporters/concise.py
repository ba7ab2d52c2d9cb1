"""Concise reporter: one line per finding, ``file:line:col: CODE message`` (ruff's ``concise`` shape).

Meant for editors, ``grep`` and problem matchers, so every line has the same four fields: a finding without
a file shows ``-``, one without a line or column points at ``1``. Paths are relative to the working
directory when they lie below it. Lines follow the file position, except a postmortem's, which keep the
report's causal order (its first line is the diagnosis, as in every other format). Messages are folded to one
line. Nothing else is printed: the exit code carries the verdict.
"""

from __future__ import annotations

from finetune_doctor.fixes import fixable
from finetune_doctor.reporters import display_path, one_line
from finetune_doctor.types import Finding, Report


class ConciseReporter:
    def render(self, report: Report) -> str:
        # a postmortem's order is its diagnosis (the judge's: the cause first, engine/judge.py `_order` "rank"),
        # the order every other format prints (trial 14: run-crashed above its SIGBUS cause, and the config's
        # start-up findings above the log's cause, sorted by file); config findings sort by position, as ruff's do
        found = report.findings if report.command == "postmortem" else sorted(report.findings, key=_position)
        return "".join(line(f) + "\n" for f in found)


def line(f: Finding) -> str:
    """``config.yaml:12:1: FD101 message`` (``FD101 [*] message`` when ``--fix`` can apply its fix)."""
    loc = f.location
    path = display_path(loc.file) if loc.file else "-"
    mark = "[*] " if fixable(f) else ""    # ruff's mark of a finding that --fix can apply
    return f"{path}:{loc.line or 1}:{loc.column or 1}: {f.code} {mark}{one_line(f.message)}"


def _position(f: Finding) -> tuple:
    # findings at one position keep the report's order (the judge's: severity, then rank) rather than a code's
    loc = f.location
    return (loc.file or "", loc.line or 1, loc.column or 1)
