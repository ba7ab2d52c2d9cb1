"""Apply the fixes of findings to their files: safe ones always, unsafe ones on request, atomically.

Edits are grouped per file and written in one pass per file (readers never write; fixes/edit.py owns the comment-
and order-preserving write). Two fixes that set the same key to different values conflict: the first (most
severe) wins and the other is reported, not applied. Like the reporters, this is the output end of the flow.
"""

from __future__ import annotations

from pathlib import Path

from finetune_doctor.types import Edit, Finding


def collect_edits(findings: list[Finding], unsafe: bool) -> tuple[dict[str, list[Edit]], list[str]]:
    per_file: dict[str, dict[str, Edit]] = {}
    skipped: list[str] = []
    for f in findings:
        if f.fix is None or not f.fix.edits:
            continue
        if f.fix.safety != "safe" and not unsafe:
            continue
        for e in f.fix.edits:
            if not e.file or e.file.startswith("<"):
                continue
            slot = per_file.setdefault(e.file, {})
            prev = slot.get(e.key)
            if prev is not None and (prev.value != e.value or prev.delete != e.delete):
                skipped.append(f"{f.code}: {e.key} left as fixed by an earlier finding")
                continue
            slot[e.key] = e
    return {k: list(v.values()) for k, v in per_file.items()}, skipped


def apply_fixes(findings: list[Finding], *, unsafe: bool = False,
                texts: dict[str, str] | None = None) -> list[str]:
    """Write the fixes; returns human notes (what was written). ``lint --diff`` shows them instead (lint.diff).

    `texts` maps a path to the text the findings were computed from: a file that changed since is left alone.
    """
    from finetune_doctor.fixes.edit import apply_edits

    per_file, notes = collect_edits(findings, unsafe)
    for path, edits in per_file.items():
        if not Path(path).is_file():
            notes.append(f"{path}: not a file, fix not applied")
            continue
        text = (texts or {}).get(path)
        if text is None:
            text = Path(path).read_text(encoding="utf-8")
        result = apply_edits(path, edits, expect_text=text)
        if result.stale:
            notes.append(f"{path} changed since it was read: no fix written (run again)")
        elif result.changed:
            notes.append(f"fixed {path}: " + ", ".join(result.keys or tuple(e.key for e in edits)))
        notes.extend(f"{path}: {n}" for n in result.notes)
    return notes
