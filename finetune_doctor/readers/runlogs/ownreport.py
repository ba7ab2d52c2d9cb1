"""The doctor's own reports, saved beside a run (``doctor check cfg.yaml > check.txt``, ``doctor postmortem run/ |
tee run/postmortem.txt``): output of this tool, not of the run, so a postmortem does not read them as logs (trial 7
c01: ``check.txt text-log read 78 lines``). Recognised by the first 4 KiB, in the shapes reporters/ writes:

* text (reporters/text.py ``_header``): the line ``doctor COMMAND``, then the indented ``key: value`` inputs or
  the ``run:`` / ``gpus:`` lines;
* JSON (``"schema": "finetune-doctor/report/v1"``) and SARIF (the driver ``"name": "finetune-doctor"``);
* concise (reporters/concise.py ``line``): every line ``path:line:col: FDnnn message``;
* GitHub annotations (reporters/github.py): ``::error file=…,title=FDnnn name::…`` and the ``finetune-doctor COMMAND:`` summary.
"""

from __future__ import annotations

import re

HEAD_BYTES = 4096
COMMANDS = ("check", "postmortem", "lint", "estimate", "probe", "gpus", "data", "context")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TEXT_FIRST = re.compile(r"^doctor (?:%s)$" % "|".join(COMMANDS))
# what follows the command line: the indented inputs, the run and GPU lines, or (a report with no inputs to list,
# `doctor postmortem` of the current folder: trial 5) the first section heading reporters/text.py writes
_TEXT_NEXT = re.compile(r"^(?:  [a-z_]+: |run: |gpus: |No findings|Timeline$|Memory per GPU \(|"
                        r"(?:Errors|Warnings|Info) \(\d+\)$|Postmortem$|Assumed \()")
_CONCISE = re.compile(r"^\S[^\n]*:\d+:\d+: FD\d{3} ")
_GITHUB = re.compile(r"^(?:::(?:error|warning|notice) [^\n]*title=FD\d{3} [^\n]*::|finetune-doctor (?:%s): )"
                     % "|".join(COMMANDS))


def own_report_format(head: bytes) -> str | None:
    """'text', 'json', 'sarif', 'concise' or 'github' when `head` (a file's first bytes, HEAD_BYTES are enough)
    is a report this tool wrote, else None. An empty head is None: an empty file is no report yet."""
    text = _ANSI.sub("", head[:HEAD_BYTES].decode("utf-8", "replace"))
    stripped = text.lstrip()
    if stripped.startswith("{"):
        if re.search(r'"schema"\s*:\s*"finetune-doctor/', stripped):
            return "json"
        if '"$schema"' in stripped and re.search(r'"name"\s*:\s*"finetune-doctor"', stripped):
            return "sarif"
        return None
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    if not lines:
        return None
    if _TEXT_FIRST.match(lines[0].rstrip()) and (len(lines) == 1 or _TEXT_NEXT.match(lines[1])):
        return "text"
    first = lines[:20] if len(text) < HEAD_BYTES else lines[:-1][:20]   # the last line of a cut head may be cut
    if first and all(_CONCISE.match(ln) for ln in first):
        return "concise"
    if first and all(_GITHUB.match(ln) for ln in first):
        return "github"
    return None


def own_report_of(path: str) -> str | None:
    """`own_report_format` of the file at `path`; None when it cannot be read (the log reader says why)."""
    try:
        with open(path, "rb") as fh:
            return own_report_format(fh.read(HEAD_BYTES))
    except OSError:
        return None
