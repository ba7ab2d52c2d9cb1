"""Concise reporter: one line per finding, ``file:line:col: CODE message`` (ruff's ``concise`` shape).

Meant for editors, ``grep`` and problem matchers, so every line has the same four fields: a finding without
a file shows ``-``, one without a line or column points at ``1``. Paths are relative to the working
directory when they lie below it. Messages are folded to one line. Nothing else is printed: the exit code
carries the verdict.
"""

from __future__ import annotations

from finetune_doctor.fixes import fixable
from finetune_doctor.reporters import display_path, one_line
from finetune_doctor.types import Finding, Report


class ConciseReporter:
    def render(self, report: Report) -> str:
        return "".join(line(f) + "\n" for f in sorted(report.findings, key=_position))


def line(f: Finding) -> str:
    """``config.yaml:12:1: FD101 message`` (``FD101 [*] message`` when ``--fix`` can apply its fix)."""
    loc = f.location
    path = display_path(loc.file) if loc.file else "-"
    mark = "[*] " if fixable(f) else ""    # ruff's mark of a finding that --fix can apply
    return f"{path}:{loc.line or 1}:{loc.column or 1}: {f.code} {mark}{one_line(f.message)}"


def _position(f: Finding) -> tuple:
    # findings at one position keep the report's order (the judge's: severity, then the causal rank), the order
    # every other format prints; a code tie-break put run-crashed above its cause (trial 14, SIGBUS in a worker)
    loc = f.location
    return (loc.file or "", loc.line or 1, loc.column or 1)
