"""Apply the fixes of findings to their files: safe ones always, unsafe ones on request, atomically.

Edits are grouped per file and written in one pass per file (readers never write; fixes/edit.py owns the comment-
and order-preserving write). Two fixes that set the same key to different values conflict: the first (most
severe) wins and the other is reported, not applied. Like the reporters, this is the output end of the flow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from finetune_doctor.types import Edit, Finding


@dataclass(frozen=True)
class FixOutcome:
    """What `apply_fixes` did: `notes` for the report (what was written, what was left and why), `fixed` the
    number of findings whose every edit was written (ruff's "N fixed"), `written` the files rewritten."""

    notes: tuple[str, ...]
    fixed: int
    written: tuple[str, ...] = ()


def fixable(f: Finding, unsafe: bool = False) -> bool:
    """True when `--fix` (or, with `unsafe`, ``--unsafe-fixes``) can apply `f`'s fix: it has edits to a file."""
    if f.fix is None or not f.fix.edits or (f.fix.safety != "safe" and not unsafe):
        return False
    return all(e.file and not e.file.startswith("<") for e in f.fix.edits)


def collect_edits(findings: list[Finding], unsafe: bool) -> tuple[dict[str, list[Edit]], list[str]]:
    """Edits per file of the findings' applicable fixes, and notes on the edits left out as conflicting."""
    per_file, notes, _owners = _collect(findings, unsafe)
    return per_file, notes


def _collect(findings: list[Finding], unsafe: bool) -> tuple[dict[str, list[Edit]], list[str], list[set[str]]]:
    per_file: dict[str, dict[str, Edit]] = {}
    skipped: list[str] = []
    owners: list[set[str]] = []      # per applicable finding: the files its edits go to (empty: one was dropped)
    for f in findings:
        if not fixable(f, unsafe):
            continue
        files: set[str] | None = set()
        for e in f.fix.edits:
            slot = per_file.setdefault(e.file, {})
            prev = slot.get(e.key)
            if prev is not None and (prev.value != e.value or prev.delete != e.delete):
                skipped.append(f"{f.code}: {e.key} left as fixed by an earlier finding")
                files = None
                continue
            slot[e.key] = e
            if files is not None:
                files.add(e.file)
        owners.append(files or set())
    return {k: list(v.values()) for k, v in per_file.items()}, skipped, owners


def apply_fixes(findings: list[Finding], *, unsafe: bool = False, texts: dict[str, str] | None = None,
                only: list[str] | None = None) -> FixOutcome:
    """Write the fixes of `findings`; ``lint --diff`` shows them instead (pipeline/lint.py `diff`).

    `texts` maps a path to the text the findings were computed from: a file that changed since is left alone.
    `only`, when given, names the files that may be written (a pre-commit run passes the staged files: a DeepSpeed
    JSON that a YAML names but that was not passed is reported, not edited). Raises InputError when a file
    cannot be read or an edit cannot be expressed.
    """
    from finetune_doctor.fixes.edit import apply_edits

    per_file, notes, owners = _collect(findings, unsafe)
    allowed = None if only is None else {os.path.realpath(p) for p in only}
    written: list[str] = []
    for path, edits in per_file.items():
        if allowed is not None and os.path.realpath(path) not in allowed:
            notes.append(f"{path}: not among the files given, fix not written (name it to fix it)")
            continue
        if not Path(path).is_file():
            notes.append(f"{path}: not a file, fix not applied")
            continue
        result = apply_edits(path, edits, expect_text=(texts or {}).get(path))
        if result.stale:
            notes.append(f"{path} changed since it was read: no fix written (run again)")
        elif result.changed:
            written.append(path)
            notes.append(f"fixed {path}: " + ", ".join(result.keys or tuple(e.key for e in edits)))
        notes.extend(f"{path}: {n}" for n in result.notes)
    fixed = sum(1 for files in owners if files and files <= set(written))
    return FixOutcome(tuple(notes), fixed, tuple(written))
