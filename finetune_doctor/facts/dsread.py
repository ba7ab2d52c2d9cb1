"""The DeepSpeed JSON a training config names, read into its `Assembly` (facts/assembly.py): the ``ds`` facts and
the source positions, a path not on this machine as the ``lint.ds_missing`` fact, and the stock file that stands in
for it (an assumption, facts/assumestack.py weighs the other stock stages). Split from facts/config.py at the
800-line cap (issue #22); facts/config.py `assemble_config` calls `read_deepspeed`.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.facts import ds as ds_facts
from finetune_doctor.facts import nothere
from finetune_doctor.facts.assembly import Assembly
from finetune_doctor.fsutil import display_path
from finetune_doctor.types import SourceDoc


def read_deepspeed(asm: Assembly, arch: Any, *, tolerate_missing: bool, lenient: bool) -> None:
    """Read the DeepSpeed JSON the config names into `asm` (ds, ds_stock, facts["ds"], sources["deepspeed"]).

    A path that does not resolve is the ``lint.ds_missing`` fact when tolerated (pre-commit runs from the
    repository root, not from where the run launches; a postmortem reads a run folder moved since); `lenient` also
    reads on past a broken JSON, with a note.
    """
    doc = asm.doc
    try:
        asm.ds, asm.ds_stock = ds_facts.load(doc.values, doc.path, doc.line_of("deepspeed"), asm.hw,
                                             arch.hidden_size if arch else None, asm.notes,
                                             overridden="deepspeed" in doc.overrides)
    except InputError as err:
        not_found = "not found" in err.message
        if not (not_found or lenient):
            raise
        if not_found:
            missing = ds_facts.missing(doc.values.get("deepspeed"), err)
            missing["machine_dependent"] = not lenient   # lint, check: the training machine may hold it
            asm.facts["lint"]["ds_missing"] = missing
            if not lenient:
                asm.facts["lint"]["keys"].append({
                    "key": "deepspeed", "kind": "not_here", "message": missing["message"], "suggestion": None,
                    "replacement": None, "fix": None, "fix_value": None, "condition": nothere.PATH_NOT_HERE,
                    "line": doc.line_of("deepspeed"), "override": "deepspeed" in doc.overrides})
            if not tolerate_missing:
                stand_in_deepspeed(asm, arch)   # check, estimate: estimate with a stock file, as an assumption
                return
        else:
            asm.notes.append(f"DeepSpeed config not read ({err}); facts computed without it")
        return
    asm.facts["ds"] = ds_facts.assemble(asm.ds, asm.ds_stock, asm.stack_sources)
    if asm.ds is not None and getattr(asm.ds, "path", None) and not asm.ds_stock:
        asm.sources["deepspeed"] = SourceDoc("deepspeed", display_path(str(asm.ds.path)) or str(asm.ds.path),
                                             dict(getattr(asm.ds, "positions", {}) or {}))


def ds_stage_hint(value: Any) -> tuple[int, bool]:
    """(ZeRO stage, CPU offload) a DeepSpeed file name suggests (``ds_z3_offload.json`` → (3, True)); (2, False)
    when it says nothing, the stage cases/INDEX.md infers for a file it does not show."""
    import re

    name = str(value or "").lower().rsplit("/", 1)[-1]
    m = re.search(r"(?:z|zero|stage)[-_ ]?([0-3])", name)
    return (int(m.group(1)) if m else 2), "offload" in name


def stand_in_deepspeed(asm: Assembly, arch: Any) -> None:
    """A DeepSpeed file the config names that is not on this machine: the run is estimated with LLaMA-Factory's
    stock file of the stage its name suggests (`ds_stage_hint`), recorded as the ``deepspeed-config`` assumption
    (facts/assumestack.py evaluates the other stock stages); the path itself is not-checked-here."""
    doc = asm.doc
    value = doc.values.get("deepspeed")
    stage, offload = ds_stage_hint(value)
    stock = f"examples/deepspeed/ds_z{stage}{'_offload' if offload and stage in (2, 3) else ''}_config.json"
    asm.ds, asm.ds_stock = ds_facts.load({**doc.values, "deepspeed": stock}, doc.path, doc.line_of("deepspeed"),
                                         asm.hw, arch.hidden_size if arch else None, [])
    asm.ds_assumed = (str(value), stock)
    asm.facts["ds"] = ds_facts.assemble(asm.ds, asm.ds_stock, stand_in=str(value))
    asm.notes.append(ds_facts.stand_in_note(value, stock))
