"""``ev.ga_loss``: a reported loss that follows gradient accumulation, the trace of transformers' GA loss path.

transformers 4.46.0 made the Trainer normalise a step's loss by the number of label tokens of all its micro-batches
(``num_items_in_batch``, huggingface/transformers PR #34191). A model whose forward takes no loss kwargs (LLaVA,
Qwen2-VL and other multimodal classes then) cannot use that count, and the Trainer's fallback divided wrongly:

- 4.46.0-4.46.1 multiplied such a model's loss by gradient_accumulation_steps, 4.47.0 still doubled it at GA 2
  (https://github.com/huggingface/transformers/pull/35438, its description and the 2024-12-29 comment);
- 4.47.1 (https://github.com/huggingface/transformers/issues/37766), 4.49.0 with LLaVA under LLaMA-Factory 0.9.2
  (https://github.com/hiyouga/LlamaFactory/issues/7443: 6.4 / 13.65 / 69 / 138 at GA 2 / 4 / 16 / 32) and 4.50
  (https://github.com/hiyouga/LlamaFactory/issues/7743) still showed a loss growing with GA; #37766 says 4.51.3
  no longer inflates it. `AFFECTED` is that span, 4.46.0 up to (not including) 4.51.0.

Two shapes of evidence are read from the text the log reader keeps of a paste (``FileEvidence.text``, files of at
most readers/runlogs/logkept.py PASTE_TEXT bytes; a rank's long log is not read again, issue #25):
- ``table``: a pasted table (markdown pipes) with a gradient-accumulation column and a loss column, whose loss
  rises with GA about in proportion (`_scales`): the same global batch giving a loss k times larger at k times the
  accumulation is the normalisation, not the training;
- ``items``: ``num_items_in_batch`` printed by the user's own debugging (LlamaFactory#6639), with two different
  counts inside one optimizer step's micro-batches (one step is counted once in these releases: Trainer
  ``get_batch_samples``).
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence

AFFECTED = ((4, 46, 0), (4, 51, 0))
_GA_HEAD = re.compile(r"grad(?:ient)?[\s_-]*acc|accumulation|^\s*GA\s*$", re.I)
_LOSS_HEAD = re.compile(r"loss", re.I)
_NUM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
_ITEMS = re.compile(r"num_items_in_batch\s*[:=]\s*(?:tensor\()?(\d+)")
_GA_SET = re.compile(r"gradient_accumulation_steps[\"']?\s*[:= ]\s*(\d+)")


def _release(v: str | None) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> tuple[int, list[tuple[float, float]], str, str] | None:
    """(header line index, [(GA, loss)] sorted by GA with one row per GA, GA column name, loss column name) of the
    first pipe table with both columns and two GA values or more, or None."""
    for i, line in enumerate(lines):
        if line.count("|") < 3:
            continue
        head = _cells(line)
        ga = next((j for j, c in enumerate(head) if _GA_HEAD.search(c)), None)
        loss = next((j for j, c in enumerate(head) if _LOSS_HEAD.search(c)), None)
        if ga is None or loss is None:
            continue
        rows: dict[float, float] = {}
        for row in lines[i + 1:]:
            if row.count("|") < 3:
                break
            cells = _cells(row)
            if len(cells) <= max(ga, loss):
                continue
            g, l_ = _NUM.match(cells[ga]), _NUM.match(cells[loss])
            if g and l_ and float(g.group(1)) > 0:
                rows.setdefault(float(g.group(1)), float(l_.group(1)))
        if len(rows) >= 2:
            return i, sorted(rows.items()), head[ga], head[loss]
    return None


def _scales(rows: list[tuple[float, float]]) -> bool:
    """The loss never falls as GA grows and its spread is at least half the GA's (GA 2 -> 32 with the loss 6.4 ->
    138: 16x against 21.6x); a loss that only wobbles with GA is no evidence."""
    losses = [l_ for _, l_ in rows]
    if any(b < a for a, b in zip(losses, losses[1:])) or losses[0] <= 0:
        return False
    return losses[-1] / losses[0] >= 0.5 * rows[-1][0] / rows[0][0] and rows[-1][0] / rows[0][0] >= 2


def _items(lines: list[str]) -> tuple[int, list[int]] | None:
    """(line index, counts) of the first run of consecutive ``num_items_in_batch`` lines holding two different
    counts, or None."""
    run: list[int] = []
    start = 0
    for i, line in enumerate(lines + [""]):
        m = _ITEMS.search(line)
        if m:
            start = i if not run else start
            run.append(int(m.group(1)))
            continue
        if len(set(run)) > 1:
            return start, run
        run = []
    return None


def _version_of(versions: dict[str, tuple[str, str]], stack: dict[str, Any] | None) -> tuple[str, str] | None:
    if "transformers" in versions:
        return versions["transformers"]
    got = (stack or {}).get("transformers") or {}
    return (got["version"], got.get("source") or "the log") if got.get("version") else None


def ga_loss_facts(ev: Evidence, versions: dict[str, tuple[str, str]],
                  stack: dict[str, Any] | None) -> dict[str, Any] | None:
    """``ev.ga_loss``: {variant, shape, release, release_text, rows_text, counts_text, ga, location} or None.
    `variant` keys rule grad-accum-loss-scaled's message: ``table-in`` / ``table-out`` / ``table-unknown`` /
    ``items-in`` / ``items-unknown`` (the transformers release inside `AFFECTED`, outside it, or not given); a
    ``num_items_in_batch`` print on a release outside `AFFECTED` establishes nothing and gives None. `versions`
    {package: (version, where)} from the flags, --env or a pasted block; `stack` the versions the log printed."""
    for f in ev.files:
        if f.read.kind != "text-log" or not f.text:
            continue
        lines = f.text.splitlines()
        table = _table(lines)
        items = None if table else _items(lines)
        if table and not _scales(table[1]):
            table = None
        if not (table or items):
            continue
        ver = _version_of(versions, stack)
        rel = _release(ver[0]) if ver else None
        where = "unknown" if rel is None else "in" if AFFECTED[0] <= rel < AFFECTED[1] else "out"
        shape = "table" if table else "items"
        if shape == "items" and where == "out":
            return None
        ga = next((int(m.group(1)) for line in lines for m in [_GA_SET.search(line)] if m), None)
        out: dict[str, Any] = {"variant": f"{shape}-{where}", "shape": shape, "ga": ga,
                               "release": ver[0] if ver else None,
                               "release_text": f"transformers {ver[0]} ({ver[1]})" if ver else None}
        if table:
            i, rows, ga_col, loss_col = table
            out["rows_text"] = ", ".join(f"{g:g}: {l_:g}" for g, l_ in rows)
            out["columns"] = f"{loss_col} by {ga_col}"
            out["location"] = location_of(f.read.path, i + 1)
        else:
            assert items is not None
            i, counts = items
            out["counts_text"] = ", ".join(str(c) for c in counts)
            out["location"] = location_of(f.read.path, i + 1)
        return out
    return None
