"""How wide the 90 % interval is for what the doctor does not know: per class of run, and for unknown sample lengths.

Pure Python, no torch (facts/config.py calls it on every check and estimate, the lint path included).

**Class of run** (`run_class`): NPU, offload, QLoRA, ZeRO-3 full, ZeRO-3 LoRA, ZeRO-2, FSDP, DDP, single — the first
that applies, in that order. Measured with leave-one-source-out on the dev calibration rows (benchmarks/
calib_classes.py, benchmarks/results/calib_classes.md), these classes miss the interval by different amounts and
on different sides (session 11, rounds 1-6: ZeRO-3 LoRA 78 %, FSDP 70 %, NPU 77 % against DDP 100 %); the error
classes of analyzers/memory/uncertainty.py (shape class × weight storage) do not separate them.

**Widths** (the table's ``interval_widths``, written by benchmarks/calibrate.py through benchmarks/calib_widths.py
`derive_widths`): per class, ``below`` and ``above`` in ln units — split-conformal 95 % quantiles (the
⌈(n + 1)·0.95⌉-th of n; Lei et al. 2018, JASA 113:1094) of how far the dev measurements fell under the lower end
and over the upper end of their leave-one-source-out interval (a measurement inside gives a negative residual, so a
class whose measurements sit well inside gets a narrower band). Both ends at 95 % make the central 90 %: the level
is the interval's own. A class with fewer than the derivation's minimum of sources takes the ``pooled`` widths
(every class). The interval becomes [lo·e^(−below), hi·e^(above)]. Which of four quantile rules ships was decided
on dev (benchmarks/calib_widths.py, 'Which of four rules').

**Sample lengths** (open when the data was not scanned): the prediction with every sample at cutoff_len is an upper
bound of the sample-lengths effect (a shorter longest sample never needs more), so unknown lengths widen the interval
downward only: the upper end is the one the run would have with its samples at cutoff_len (the mixture over the other
open assumptions), the lower end the mixture's over the lengths too (`upper_at_cutoff`).

A table without ``interval_widths`` (every table before session 11's derivation is shipped) changes nothing here:
the interval stays the mixture's, so the two rules above arrive together with the widths fitted under them.
"""

from __future__ import annotations

import math
from typing import Any

RUN_CLASSES = ("NPU", "offload", "QLoRA", "ZeRO-3 full", "ZeRO-3 LoRA", "ZeRO-2", "FSDP", "DDP", "single")
_NPU_WORDS = ("ascend", "910", "npu")
_OFFLOAD_DEVICES = ("cpu", "nvme")


def run_class(run: Any, gpu: str | None) -> str:
    """The class of run (module docstring) of `run` (run.Run) on cards named `gpu` (the hardware's name, or None).
    Runs without a resolved Run are ``single``."""
    if gpu and any(w in gpu.lower() for w in _NPU_WORDS):
        return "NPU"
    if run is None:
        return "single"
    offl = (str(getattr(run, "offload_optimizer", None) or "").lower() in _OFFLOAD_DEVICES
            or str(getattr(run, "offload_param", None) or "").lower() in _OFFLOAD_DEVICES
            or bool(getattr(run, "fsdp_offload_params", False)))
    if offl:
        return "offload"
    if getattr(run, "quantization_bit", None):
        return "QLoRA"
    if getattr(run, "deepspeed", False):
        stage = int(getattr(run, "zero_stage", 0) or 0)
        if stage == 3:
            return "ZeRO-3 full" if getattr(run, "finetuning_type", "") == "full" else "ZeRO-3 LoRA"
        if stage in (1, 2):
            return "ZeRO-2"
    if getattr(run, "fsdp", False) or getattr(run, "engine", "") == "fsdp":
        return "FSDP"
    return "DDP" if int(getattr(run, "world_size", 1) or 1) > 1 else "single"


def widths(table: dict[str, Any], cls: str | None) -> tuple[float, float] | None:
    """(below, above) ln units of class `cls` in `table`'s ``interval_widths`` (the pooled ones for a class it does
    not list); None when the table has none (module docstring: nothing changes)."""
    spec = table.get("interval_widths")
    if not isinstance(spec, dict):
        return None
    c = (spec.get("classes") or {}).get(cls) or spec.get("pooled")
    if not c:
        return None
    return float(c["below"]), float(c["above"])


def widen(interval: tuple[float, float], table: dict[str, Any], cls: str | None) -> tuple[float, float]:
    """`interval` (GiB) as [lo·e^(−below), hi·e^(above)] with the widths of class `cls` (`widths`); unchanged when
    the table has none. The ends never cross: a negative width pair that would put lo above hi keeps their
    geometric mean as both ends' bound."""
    w = widths(table, cls)
    if w is None:
        return interval
    lo, hi = interval[0] * math.exp(-w[0]), interval[1] * math.exp(w[1])
    if lo > hi:
        lo = hi = math.sqrt(lo * hi)
    return lo, hi


def upper_at_cutoff(interval: tuple[float, float], full_length: tuple[float, float] | None,
                    table: dict[str, Any]) -> tuple[float, float]:
    """`interval` (the mixture's over every open assumption, GiB) with its upper end raised to `full_length`'s (the
    interval with the samples at cutoff_len: module docstring, 'Sample lengths'); unchanged when the table has no
    ``interval_widths`` or `full_length` is None."""
    if full_length is None or widths(table, None) is None:
        return interval
    return interval[0], max(interval[1], full_length[1])
