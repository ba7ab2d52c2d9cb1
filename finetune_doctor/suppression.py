"""Suppression comments in LLaMA-Factory YAMLs, and the unused-suppression findings they can produce.

Syntax (one syntax only, ruff's ``# ruff: ignore[...]`` shape; codes or rule names, comma-separated)::

    bf16: false  # doctor: ignore[FD101]         -> findings of FD101 on this line
    # doctor: ignore[FD101, unknown-key]          -> findings on this line and on the next line holding YAML
    # doctor: ignore-file[FD203]                  -> FD203 anywhere in this file

A YAML comment starts at a ``#`` at the start of a line or after whitespace (YAML 1.2 §6.6), which is the only
place these are recognised, so a ``#`` inside a value such as ``run_name: a#b`` is never one. DeepSpeed JSON has no
comments: it is suppressed through ``per-file-ignores`` in the project configuration only.

A suppression that hides nothing in a run where its rule was evaluated is reported by the rule file
``rules/unused-suppression.yaml`` (facts namespace ``suppress``: ``unused`` items ``{code, line, file, scope,
reason, location}``), like ruff's RUF100.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

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
    """The suppression codes that hid nothing, as ``suppress.unused`` fact items.

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
            out.append({"code": code, "line": d.line, "file": file, "scope": d.scope, "reason": reason,
                        "location": {"file": file, "line": d.line, "column": None, "key": None}})
    return out


def _same_file(a: str | None, b: str) -> bool:
    if not a:
        return False
    return a == b or os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def apply_suppressions_to_docs(findings: list[Finding], docs: Mapping[str, str], opts: Any) -> list[Finding]:
    """Apply the suppression comments of each YAML in `docs` ({path: text}) to `findings`, and add the findings
    of the ``unused-suppression`` rule (when it is selected for ``opts.command``). Returns the findings to report,
    sorted. Findings in other files (a DeepSpeed JSON) pass through untouched.
    """
    parsed = {path: sup for path, sup in ((p, parse_suppressions(t or "")) for p, t in docs.items()) if sup}
    if not parsed:  # the common case: no suppression comment, nothing to load
        return list(findings)
    from finetune_doctor.engine.evaluate import RuleContext, evaluate
    from finetune_doctor.engine.loader import load_rules, select_rules

    command = getattr(opts, "command", "lint")
    rules_dirs = tuple(getattr(opts, "rules_dirs", ()) or ())
    all_rules = load_rules(rules_dirs)
    selected = select_rules(all_rules, command, list(opts.select) if getattr(opts, "select", None) else None,
                            list(getattr(opts, "ignore", ()) or ()))
    evaluated = [r.code for r in selected] + [r.name for r in selected]
    known = [r.code for r in all_rules] + [r.name for r in all_rules]
    meta = [r for r in selected if r.name == "unused-suppression"]

    remaining = list(findings)
    unused_items: list[dict[str, Any]] = []
    for path, sup in parsed.items():
        mine = [f for f in remaining if _same_file(f.location.file, path)]
        others = [f for f in remaining if not _same_file(f.location.file, path)]
        kept, used = apply(mine, sup)
        remaining = others + kept
        unused_items.extend(unused(sup, used, path, evaluated, known))
    if meta and unused_items:
        extra = evaluate(tuple(meta), RuleContext(facts={"suppress": {"unused": unused_items}}))
        for path, sup in parsed.items():  # an unused-suppression finding can itself be suppressed file-wide
            mine = [f for f in extra if _same_file(f.location.file, path)]
            kept, _ = apply(mine, Suppressions(tuple(d for d in sup.directives if d.scope == "file")))
            extra = [f for f in extra if not _same_file(f.location.file, path)] + kept
        remaining.extend(extra)
    return sorted(remaining, key=Finding.sort_key)
