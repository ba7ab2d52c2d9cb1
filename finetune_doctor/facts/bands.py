"""The 90 % interval of a check or estimate, widened for what the doctor does not know (analyzers/memory/bands.py):
per class of run, and downward only for unknown sample lengths. facts/verdict.py `_mixed` calls it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from finetune_doctor.analyzers.memory import bands, uncertainty


def _class(asm: Any) -> str:
    return bands.run_class(asm.run, asm.hw.gpu if asm.hw is not None else None)


def mixed_interval(asm: Any, gpu_spec: str | None, comps: list[tuple[float, float, float | None]],
                   dist: uncertainty.ErrorDist) -> tuple[float, float]:
    """The interval (GiB) of `asm.memory` over the mixture `comps` (facts/assume.py `mixture`) under `dist`: its
    upper end at the samples' cutoff_len when their lengths are open, then the class's widths (analyzers/memory/
    bands.py); the mixture's interval alone when the table carries no widths."""
    from finetune_doctor.facts import assume

    table = uncertainty.table()
    interval = uncertainty.mixture_interval(comps, dist)
    if bands.widths(table, None) is None:
        return interval
    rest = [a for a in asm.assumptions if a.name != "sample-lengths"]
    if len(rest) != len(asm.assumptions):
        full = assume.mixture(asm.memory.total, asm.hw, rest, gpu_spec)
        interval = bands.upper_at_cutoff(interval, uncertainty.mixture_interval(full, dist), table)
    return bands.widen(interval, table, _class(asm))


def basis(asm: Any, text: str | None) -> str:
    """What the interval is made of, in words (``mem.interval_basis``): `text` (None: the benchmarks' error alone,
    facts/mem.py BENCHMARK_ERROR), and, once the table carries widths, the class of run whose spread across sources
    widened it."""
    from finetune_doctor.facts.mem import BENCHMARK_ERROR

    text = text or BENCHMARK_ERROR
    if bands.widths(uncertainty.table(), None) is None:
        return text
    return f"{text}, widened by the spread of {_class(asm)} runs across sources"


def single_interval(asm: Any) -> dict[str, Any]:
    """With nothing open (one component): `asm.memory`'s interval widened by its class's widths, written back to
    `asm.memory`; returns the ``mem`` facts that change (none when the table carries no widths)."""
    table, mem = uncertainty.table(), asm.memory
    if mem is None or not mem.interval_gib or bands.widths(table, None) is None:
        return {}
    iv = bands.widen(tuple(mem.interval_gib), table, _class(asm))
    asm.memory = replace(mem, interval_gib=iv, details={**mem.details, "interval_basis": basis(asm, None)})
    return {"interval_gib": list(iv), "interval_lo_gib": iv[0], "interval_hi_gib": iv[1],
            "interval_basis": basis(asm, None)}
