"""Suppression comments in LLaMA-Factory YAMLs, and the unused-suppression findings they can produce.

Syntax (one syntax only, ruff's ``# ruff: ignore[...]`` shape; codes or rule names, comma-separated)::

    bf16: false  # doctor: ignore[FD101]         -> findings of FD101 on this line
    # doctor: ignore[FD101, unknown-key]          -> findings on this line and on the next line holding YAML
    # doctor: ignore-file[FD203]                  -> FD203 anywhere in this file

A YAML comment starts at a ``#`` at the start of a line or after whitespace (YAML 1.2 §6.6), which is the only
place these are recognised, so a ``#`` inside a value such as ``run_name: a#b`` is never one. DeepSpeed JSON has no
comments: it is suppressed through ``per-file-ignores`` in the project configuration only.

A suppression that hides nothing in a run where its rule was evaluated is reported by the rule file
``rules/unused-suppression.yaml`` (fact ``lint.unused_suppressions``: items ``{code, line, file, scope, reason,
location}``), like ruff's RUF100. engine/judge.py applies all of this for every command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from finetune_doctor.types import Finding

_DIRECTIVE = re.compile(r"(?:^|\s)#\s*doctor:\s*(ignore|ignore-file)\[([^\]]*)\]", re.IGNORECASE)


@dataclass(frozen=True)
class Directive:
    """One suppression comment. `line` is where the comment is (1-based); `covers` the lines it applies to
    (empty for ``ignore-file``); `codes` as written (codes upper-cased, rule names as they are)."""

    line: int
    scope: str                       # "line" | "file"
    codes: tuple[str, ...]
    covers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Suppressions:
    """All suppression comments of one file."""

    directives: tuple[Directive, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.directives)


def parse_suppressions(text: str) -> Suppressions:
    """Every ``# doctor: ignore[...]`` / ``# doctor: ignore-file[...]`` comment of a YAML text.

    A trailing comment covers its own line; a comment on a line of its own covers that line and the next line that
    is neither blank nor a comment (so a stack of comments above a key all apply to that key).
    """
    lines = text.splitlines()
    out = []
    for idx, line in enumerate(lines):
        for m in _DIRECTIVE.finditer(line):
            codes = tuple(_norm(c) for c in m.group(2).split(",") if c.strip())
            if not codes:
                continue
            if m.group(1).lower() == "ignore-file":
                out.append(Directive(idx + 1, "file", codes))
                continue
            covers = [idx + 1]
            if line.lstrip().startswith("#"):
                nxt = idx + 1
                while nxt < len(lines) and (not lines[nxt].strip() or lines[nxt].lstrip().startswith("#")):
                    nxt += 1
                if nxt < len(lines):
                    covers.append(nxt + 1)
            out.append(Directive(idx + 1, "line", codes, tuple(covers)))
    return Suppressions(tuple(out))


def _norm(code: str) -> str:
    c = code.strip()
    return c.upper() if re.fullmatch(r"[A-Za-z]+\d+", c) else c


def _hits(code: str, f: Finding) -> bool:
    return code == f.code.upper() or code == f.name


def apply(findings: Iterable[Finding], suppressions: Suppressions) -> tuple[list[Finding], frozenset[tuple[int, str]]]:
    """Drop the findings `suppressions` cover. Returns (kept findings, used) where `used` holds the
    (comment line, code) pairs that suppressed at least one finding.

    The caller passes the findings of the one file the suppressions were parsed from. A finding without a line
    (a file-level finding) is only covered by ``ignore-file``.
    """
    kept: list[Finding] = []
    used: set[tuple[int, str]] = set()
    for f in findings:
        hit = None
        for d in suppressions.directives:
            if d.scope == "line" and (f.location.line is None or f.location.line not in d.covers):
                continue
            code = next((c for c in d.codes if _hits(c, f)), None)
            if code is not None:
                hit = (d.line, code)
                break
        if hit is None:
            kept.append(f)
        else:
            used.add(hit)
    return kept, frozenset(used)


def unused(suppressions: Suppressions, used: frozenset[tuple[int, str]], file: str,
           evaluated: Iterable[str] | None = None, known: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The suppression codes that hid nothing, as ``lint.unused_suppressions`` fact items.

    `evaluated`: codes and names of the rules that ran (a suppression of a rule that was not evaluated -- not
    selected, or not part of this command -- cannot be judged and is never reported). `known`: codes and names of
    all rules; a code outside it is reported with reason ``unknown``. None means "do not filter".
    """
    ran = None if evaluated is None else {_norm(c) for c in evaluated}
    all_known = None if known is None else {_norm(c) for c in known}
    out = []
    for d in suppressions.directives:
        for code in d.codes:
            if (d.line, code) in used:
                continue
            reason = "unused"
            if all_known is not None and code not in all_known:
                reason = "unknown"
            elif ran is not None and code not in ran:
                continue
            # the comment as the user wrote its form, and which of rules/unused-suppression.yaml's messages it takes
            comment = f"`# doctor: {'ignore-file' if d.scope == 'file' else 'ignore'}[{code}]`"
            case = "unknown" if reason == "unknown" else f"unused_{d.scope}"
            out.append({"code": code, "line": d.line, "file": file, "scope": d.scope, "reason": reason,
                        "comment": comment, "case": case,
                        "location": {"file": file, "line": d.line, "column": None, "key": None}})
    return out
