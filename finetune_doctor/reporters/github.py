"""GitHub Actions reporter: one workflow command per finding, which the runner turns into an annotation.

Shape: ``::error file=PATH,line=N,col=N,title=CODE name::message`` with ``error``/``warning``/``notice``
for our error/warning/info. Escaping follows the runner's rules as implemented by ``@actions/core``
(actions/toolkit ``packages/core/src/command.ts``, ``escapeData`` / ``escapeProperty``): in the message,
``%`` → ``%25``, CR → ``%0D``, LF → ``%0A``; in property values additionally ``:`` → ``%3A`` and
``,`` → ``%2C``. ``%`` is escaped first so that the other escapes are not themselves re-escaped.

Paths are made relative to ``$GITHUB_WORKSPACE`` (else the working directory), which is how the runner
matches annotations to files in the checkout. A finding with a fix carries ``fix: title`` as a second
message line. A plain summary line ends the output for the job log.
"""

from __future__ import annotations

import os

from finetune_doctor.reporters import display_path, summary_line
from finetune_doctor.types import Finding, Report

LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(s: str) -> str:
    """Escape a workflow-command message."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """Escape a workflow-command property value (``file=``, ``title=``, ...)."""
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


class GithubReporter:
    def render(self, report: Report) -> str:
        base = os.environ.get("GITHUB_WORKSPACE") or None
        lines = [annotation(f, base) for f in report.findings]
        lines.append(f"finetune-doctor {report.command}: {summary_line(report.summary())}")
        return "\n".join(lines) + "\n"


def annotation(f: Finding, base: str | None = None) -> str:
    """The workflow command for one finding."""
    props: list[tuple[str, str]] = []
    loc = f.location
    if loc.file:
        props.append(("file", display_path(loc.file, base) or loc.file))
        if loc.line:
            props.append(("line", str(loc.line)))
            if loc.column:
                props.append(("col", str(loc.column)))
    props.append(("title", f"{f.code} {f.name}"))
    message = f.message if f.fix is None else f"{f.message}\nfix: {f.fix.title}"
    head = ",".join(f"{k}={escape_property(v)}" for k, v in props)
    return f"::{LEVEL.get(f.severity, 'warning')} {head}::{escape_data(message)}"
