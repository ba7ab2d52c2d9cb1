"""SARIF 2.1.0 reporter, for GitHub code scanning and other SARIF viewers.

Shape (OASIS SARIF 2.1.0, errata 01 schema, vendored in tests/data/ and validated in the tests; GitHub's
"SARIF support for code scanning" page for what it reads, summarised in reference/style/anchors.md §7):

- one run; ``tool.driver`` names finetune-doctor and lists each rule that has a result once, sorted by
  code, with ``id`` = code, ``name``, ``shortDescription`` (first sentence of *What it does*),
  ``fullDescription`` (*What it does* + *Why is this bad?*, at most 1024 characters as GitHub requires),
  ``help.text``/``help.markdown`` (the ``doctor explain`` page), ``helpUri`` (the rule's first reference
  URL; the project has no hosted rule pages), ``defaultConfiguration.level``;
- one result per finding: ``ruleId``/``ruleIndex``, ``level`` (error → error, warning → warning,
  info → note), the message, a ``physicalLocation`` (repository-relative URI, ``region.startLine`` and
  ``startColumn`` when known), ``properties`` with the key and the structured fix (edits, effect, cost,
  confirmation, alternatives);
- ``fixes`` for fix edits that can be expressed as text replacements against the file as it is now: a YAML
  or JSON scalar value replaced in place (inline comments kept), a YAML scalar key line deleted, a missing
  top-level YAML key appended. A fix any of whose edits cannot be expressed that way (a JSON key that does
  not exist yet, a JSON deletion, a nested block) is carried only in ``properties``, never half-written.

Columns are counted in Unicode code points (``run.columnKind``).

Rule documentation comes from the rules passed in (the CLI passes what it loaded, ``--rules`` dirs
included), else from the bundled pack; a result whose rule is in neither gets a descriptor built from the
finding itself.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable

from finetune_doctor import __version__
from finetune_doctor.reporters import display_path, one_line
from finetune_doctor.reporters._source import Span, SourceIndex, edit_text, format_value, yaml_scalar
from finetune_doctor.types import Edit, Finding, Fix, Report

if TYPE_CHECKING:  # pragma: no cover
    from finetune_doctor.engine.loader import Rule

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
PROBLEM_SEVERITY = {"error": "error", "warning": "warning", "info": "recommendation"}
GITHUB_TEXT_LIMIT = 1024


class SarifReporter:
    def __init__(self, rules: Iterable["Rule"] | None = None):
        self._rules = tuple(rules) if rules is not None else None

    def render(self, report: Report) -> str:
        import json

        from finetune_doctor.reporters.json import plain

        return json.dumps(plain(sarif_log(report, self._rules)), indent=2, ensure_ascii=False) + "\n"


def _bundled_rules() -> tuple["Rule", ...]:
    from finetune_doctor.engine.loader import load_rules
    from finetune_doctor.errors import InputError

    try:
        return load_rules()
    except InputError:  # no pack installed: descriptors then come from the findings alone
        return ()


def sarif_log(report: Report, rules: Iterable["Rule"] | None = None) -> dict[str, Any]:
    """The SARIF log object for `report` (see the module docstring for its shape)."""
    findings = list(report.findings)
    codes = sorted({f.code for f in findings})
    known: dict[str, Any] = {}
    if codes:
        for r in (rules if rules is not None else _bundled_rules()):
            known.setdefault(r.code, r)
    first = {code: next(f for f in findings if f.code == code) for code in codes}
    descriptors = [rule_descriptor(known[c]) if c in known else finding_descriptor(first[c]) for c in codes]
    index = {c: i for i, c in enumerate(codes)}
    sources = SourceIndex()
    results = [result(f, index[f.code], sources, report) for f in findings]
    driver: dict[str, Any] = {"name": "finetune-doctor", "version": __version__, "semanticVersion": __version__,
                              "rules": descriptors}
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {"command": report.command, "summary": report.summary()},
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _limit(text: str, n: int = GITHUB_TEXT_LIMIT) -> str:
    text = one_line(text)
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def rule_descriptor(rule: "Rule") -> dict[str, Any]:
    """A ``reportingDescriptor`` from a rule file: descriptions and help generated from its docs."""
    from finetune_doctor.reporters.catalog import first_sentence, render_explain

    what = str(rule.docs.get("what_it_does") or rule.name)
    why = str(rule.docs.get("why_bad") or "")
    markdown = render_explain(rule)
    d: dict[str, Any] = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": _limit(first_sentence(what))},
        "fullDescription": {"text": _limit(f"{what} {why}")},
        "help": {"text": markdown, "markdown": markdown},
        "defaultConfiguration": {"level": LEVEL.get(rule.severity, "warning")},
        "properties": {
            "tags": list(dict.fromkeys([rule.category, *rule.tags])),
            "problem.severity": PROBLEM_SEVERITY.get(rule.severity, "warning"),
            "commands": list(rule.commands),
            "fixable": rule.fix is not None,
        },
    }
    refs = rule.docs.get("references") or []
    url = next((r for r in ([refs] if isinstance(refs, str) else refs)
                if isinstance(r, str) and r.startswith(("https://", "http://"))), None)
    if url:
        d["helpUri"] = url
    return d


def finding_descriptor(f: Finding) -> dict[str, Any]:
    """A minimal descriptor for a finding whose rule file was not available to the reporter."""
    text = _limit(f"{f.name} ({f.category})")
    return {
        "id": f.code,
        "name": f.name,
        "shortDescription": {"text": text},
        "fullDescription": {"text": text},
        "help": {"text": f"Run `doctor explain {f.code}` for this rule's documentation."},
        "defaultConfiguration": {"level": LEVEL.get(f.severity, "warning")},
        "properties": {"tags": [f.category], "problem.severity": PROBLEM_SEVERITY.get(f.severity, "warning")},
    }


def artifact_uri(path: str) -> str:
    """A SARIF ``uri``: repository-relative with ``/`` and percent-escapes, or ``file://`` when outside."""
    from urllib.parse import quote

    shown = display_path(path) or path
    if os.path.isabs(shown):
        from pathlib import Path

        return Path(shown).as_uri()
    return quote(shown.replace(os.sep, "/"), safe="/@:+,;=-._~")


def _fallback_file(report: Report) -> str | None:
    for key in ("config", "run_dir", "deepspeed"):
        v = (report.inputs or {}).get(key)
        if isinstance(v, str) and v:
            return v
    return None


def result(f: Finding, rule_index: int, sources: SourceIndex, report: Report) -> dict[str, Any]:
    """A ``result`` for one finding."""
    loc = f.location
    r: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": rule_index,
        "level": LEVEL.get(f.severity, "warning"),
        "message": {"text": f.message},
    }
    path = loc.file or _fallback_file(report)
    if path and path.startswith("<"):
        # a value given on the command line (``key=value``) has no file: a logical location names it, and the
        # physical location falls back to the config file it overrides, so GitHub can still place the result
        r["locations"] = [{"logicalLocations": [{"name": loc.key or path.strip("<>"),
                                                  "fullyQualifiedName": f"command-line:{loc.key or ''}",
                                                  "kind": "parameter"}]}]
        cfg = _fallback_file(report)
        if cfg and not cfg.startswith("<"):
            r["locations"][0]["physicalLocation"] = {"artifactLocation": {"uri": artifact_uri(cfg)},
                                                     "region": {"startLine": 1}}
        path = None
    if path:
        phys: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(path)}}
        # a finding without a line points at the top of its file: GitHub wants a region on every result
        region: dict[str, Any] = {"startLine": loc.line or 1}
        if loc.line and loc.column:
            region["startColumn"] = loc.column
        phys["region"] = region
        r["locations"] = [{"physicalLocation": phys}]
    props: dict[str, Any] = {"name": f.name, "category": f.category}
    if loc.key:
        props["key"] = loc.key
    if f.fix is not None:
        props["fix"] = f.fix.as_dict()
        # the fixes array is ranked: alternatives only follow a primary fix that has a text form
        primary = sarif_fix(f.fix, sources)
        if primary is not None:
            alts = (sarif_fix(a, sources) for a in f.fix.alternatives)
            r["fixes"] = [primary, *(a for a in alts if a is not None)]
    r["properties"] = props
    return r


def sarif_fix(fix: Fix, sources: SourceIndex) -> dict[str, Any] | None:
    """A SARIF ``fix`` with one ``artifactChange`` per edited file, or None when an edit has no text form."""
    changes: dict[str, list[dict[str, Any]]] = {}
    for e in fix.edits:
        reps = replacements(e, sources)
        if reps is None:
            return None
        changes.setdefault(e.file, []).extend(reps)
    changes = {p: reps for p, reps in changes.items() if reps}
    if not changes:
        return None
    edits = "; ".join(edit_text(e, sources) for e in fix.edits)
    return {
        "description": {"text": f"{fix.title} ({fix.safety}): {edits}"},
        "artifactChanges": [{"artifactLocation": {"uri": artifact_uri(p)}, "replacements": reps}
                            for p, reps in changes.items()],
    }


def replacements(edit: Edit, sources: SourceIndex) -> list[dict[str, Any]] | None:
    """The text replacements that perform `edit` on its file as it is now; None when they cannot be
    determined (unreadable file, unlocated key, or an edit with no safe text form)."""
    text = sources.text(edit.file)
    if text is None:
        return None
    span = sources.value(edit.file, edit.key)
    as_json = sources.is_json(edit.file)
    lines = text.split("\n")
    if span is None:
        return None
    if span is False:
        if edit.delete:
            return []  # nothing to delete
        if as_json or "." in edit.key:
            return None  # inserting into a JSON object or a nested YAML block needs a real writer
        line = f"{edit.key}: {yaml_scalar(edit.value)}"
        n = len(lines)
        if text.endswith("\n") or not text:
            region = {"startLine": n, "startColumn": 1, "endLine": n, "endColumn": 1}
            return [{"deletedRegion": region, "insertedContent": {"text": line + "\n"}}]
        end = len(lines[-1]) + 1
        region = {"startLine": n, "startColumn": end, "endLine": n, "endColumn": end}
        return [{"deletedRegion": region, "insertedContent": {"text": "\n" + line}}]
    assert isinstance(span, Span)
    if span.block:
        return None  # replacing or deleting an indented block is the fixer's job
    if edit.delete:
        if as_json or not span.whole_line or span.text == "":
            return None  # JSON commas and YAML parent blocks are left to the fixer
        if span.line < len(lines):
            region = {"startLine": span.line, "startColumn": 1, "endLine": span.line + 1, "endColumn": 1}
        else:
            region = {"startLine": span.line, "startColumn": 1, "endLine": span.line,
                      "endColumn": len(lines[span.line - 1]) + 1}
        return [{"deletedRegion": region}]
    new = format_value(edit.value, as_json)
    if span.text == "" and not as_json:
        # ``key:`` with nothing after it: insert the value, with a separating space when none is there
        before = lines[span.line - 1][: span.col - 1]
        new = new if before.endswith((" ", "\t")) else " " + new
    region = {"startLine": span.line, "startColumn": span.col, "endLine": span.line, "endColumn": span.end_col}
    return [{"deletedRegion": region, "insertedContent": {"text": new}}]
