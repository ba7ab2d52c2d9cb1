"""Reporters: one `Report` in, one string out, in the format the user asked for.

Every format is a class with one method, ``render(report) -> str`` (the `Reporter` protocol), registered by
name in `REPORTERS`. The registry holds import paths rather than classes so that picking ``json`` never
imports rich: only the text reporter (and the rule catalogue) touch rich, and only inside ``render``. The
lint path therefore pays for nothing but the standard library here (DESIGN.md "the lint path stays light").

Reporters never print and never decide exit codes: the CLI writes the string and exits.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from finetune_doctor.errors import InputError
from finetune_doctor.fsutil import display_path  # noqa: F401  (re-exported: the reporters' path rule)

if TYPE_CHECKING:  # pragma: no cover
    from finetune_doctor.types import Report


class Reporter(Protocol):
    """A format. Constructed with that format's keyword options, then ``render(report) -> str``."""

    def render(self, report: "Report") -> str: ...


REPORTERS: dict[str, str] = {
    "text": "finetune_doctor.reporters.text:TextReporter",
    "json": "finetune_doctor.reporters.json:JsonReporter",
    "sarif": "finetune_doctor.reporters.sarif:SarifReporter",
    "github": "finetune_doctor.reporters.github:GithubReporter",
    "concise": "finetune_doctor.reporters.concise:ConciseReporter",
}
"""Format name -> ``module:Class``. Imported on first use so an unused format costs nothing."""

_OPTIONS: dict[str, tuple[str, ...]] = {
    "text": ("color", "width"),
    "sarif": ("rules",),
}
"""Which keyword options each format accepts; others are ignored for that format."""


def get_reporter(fmt: str, **options: Any) -> Reporter:
    """The reporter for `fmt`, built with the options it understands.

    Options: ``color`` (bool or None = decide from the terminal and NO_COLOR/FORCE_COLOR) and ``width``
    (columns) for text; ``rules`` (the loaded `Rule` tuple, so SARIF rule help covers ``--rules`` dirs) for
    sarif. Raises InputError for an unknown format.
    """
    target = REPORTERS.get(fmt)
    if target is None:
        raise InputError(f"unknown output format {fmt!r} (choose from {', '.join(REPORTERS)})", file="--format")
    module, _, cls = target.partition(":")
    kwargs = {k: v for k, v in options.items() if k in _OPTIONS.get(fmt, ()) and v is not None}
    return getattr(import_module(module), cls)(**kwargs)


def render(report: "Report", fmt: str, **options: Any) -> str:
    """Render `report` in `fmt` (text|json|sarif|github|concise); see `get_reporter` for the options.

    Every string of the report is made terminal-safe first (reporters/safe.py), whatever the format.
    """
    from finetune_doctor.reporters.safe import sanitize

    return get_reporter(fmt, **options).render(sanitize(report))


def one_line(text: str) -> str:
    """Collapse runs of whitespace (newlines included) so a message fits one output line."""
    return " ".join(str(text).split())


def summary_line(counts: dict[str, int]) -> str:
    """``2 errors, 1 warning, 0 info`` from `Report.summary()` counts (info is a mass noun: no plural)."""

    def one(n: int, word: str) -> str:
        return f"{n} {word}" if word == "info" or n == 1 else f"{n} {word}s"

    return ", ".join(one(counts.get(s, 0), s) for s in ("error", "warning", "info"))


def fix_summary(report: "Report") -> str:
    """The summary line's fix part, as ruff words it: `` · 2 fixed, 1 remaining`` after ``--fix``, else
    `` · 1 fixable with --fix`` when `lint`/`check` found safe fixes with edits; "" otherwise."""
    done = (report.sections or {}).get("fixes")
    if isinstance(done, dict):
        return f" · {done.get('fixed', 0)} fixed, {done.get('remaining', 0)} remaining"
    if report.command not in ("lint", "check") or not report.findings:
        return ""
    from finetune_doctor.fixes import fixable   # the fixers' package only when there is a finding to ask about

    n = sum(1 for f in report.findings if fixable(f))
    return f" · {n} fixable with --fix" if n else ""

