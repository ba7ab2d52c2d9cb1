"""``mem``: the predicted peak memory of one training process on its busiest GPU (analyzers/memory.py), GiB.

``per_gpu`` and ``per_gpu_gib`` hold the DESIGN.md breakdown (weights, gradients, optimizer, activations, logits,
buffers, runtime, total); the moments of a step say where the peak falls and where the run first runs out.
``alt_stack_*`` is the same estimate on a training machine with torch < 2.8 when the verdict could depend on it.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.memory import MARGIN, estimate
from finetune_doctor.facts.schema import F, Namespace
from finetune_doctor.types import GIB, Hardware, MemoryEstimate

_TERMS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "runtime", "total")
_BREAKDOWN = {k: F("float", f"{k}, GiB") for k in _TERMS}

NAMESPACE = Namespace("mem", __doc__.split("\n\n")[0], {
    "per_gpu": F("dict", "breakdown at the peak, GiB", fields=_BREAKDOWN),
    "per_gpu_gib": F("dict", "the same, rounded as the JSON report prints it", fields=_BREAKDOWN),
    "total": F("float", "peak device memory as nvidia-smi shows it, GiB"),
    "peak_allocated": F("float", "tensor peak as max_memory_allocated shows it, GiB"),
    "peak_allocated_gib": F("float", "the same, rounded"),
    "host": F("float", "host RAM per node, GiB"), "host_gib": F("float", "the same, rounded"),
    "fits": F("bool", "total <= capacity minus memory in use (None without a GPU)"),
    "headroom_gib": F("float", "capacity minus in-use minus total, GiB"),
    "method": F("str", "analytic | simulated | measured"),
    "phase": F("str", "forward/loss | backward | optimizer step"),
    "peak_moment": F("str", "the moment of step 2 that peaks"),
    "first_oom": F("str", "the first moment (model load, step 1, step 2) that would not fit"),
    "tokens_measured": F("bool", "the micro batch's tokens come from the data scan, not micro batch x cutoff_len"),
    "capacity_gib": F("float", "the card's usable memory, GiB"),
    "host_ram_gib": F("float", "host RAM per node, GiB"),
    "weights_gib": F("float", "weights every rank holds, GiB"),
    "weights_replicated_gib": F("float", "weights replicated on every rank that ZeRO-3 would shard, GiB"),
    "states_gib": F("float", "optimizer states and fp32 masters, GiB"),
    "step_temp_gib": F("float", "the optimizer update's temporaries, GiB"),
    "margin_gib": F("float", "the estimator's error margin on this card, GiB"),
    "alt_stack_total": F("float", "total on a torch < 2.8 training machine, GiB"),
    "alt_stack_fits": F("bool", "whether that fits"),
    "alt_stack_optim": F("str", "the optimizer that stack defaults to"),
})


def assemble(mem: MemoryEstimate, hw: Hardware | None, run: Any, alt: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``mem`` facts of an estimate for `run` on `hw`; `alt` is `older_stack`'s result."""
    d = dict(mem.as_dict())
    d["per_gpu"] = dict(mem.per_gpu)
    d["total"] = mem.total
    d["peak_allocated"] = mem.peak_allocated
    d["host"] = mem.host
    d["phase"] = mem.phase
    d["first_oom"] = mem.details.get("first_oom")
    d["peak_moment"] = mem.details.get("peak_moment")
    d["tokens_measured"] = mem.details.get("tokens_per_micro_batch") != run.tokens_per_micro_batch
    d["capacity_gib"] = hw.capacity_gib if hw else None
    d["host_ram_gib"] = hw.host_ram_gib if hw else None
    terms = mem.details.get("terms_bytes", {})
    d["weights_gib"] = terms.get("weights", 0.0) / GIB
    sharded = run.deepspeed and run.zero_stage == 3
    d["weights_replicated_gib"] = 0.0 if sharded else terms.get("weights", 0.0) / GIB
    d["states_gib"] = (terms.get("states", 0.0) + terms.get("master", 0.0)) / GIB
    d["step_temp_gib"] = terms.get("step_temp", 0.0) / GIB
    d["margin_gib"] = MARGIN * hw.capacity_gib if hw and hw.capacity_gib else None
    d.update(alt or {"alt_stack_total": None, "alt_stack_fits": None, "alt_stack_optim": None})
    return d


def older_stack(resolve: Any, run: Any, hw: Hardware | None, counts: Any, tokens: int | None,
                torch_given: bool, optim_given: bool) -> dict[str, Any]:
    """The estimate on a training machine with torch < 2.8, when the verdict could depend on it.

    Only when neither ``--torch`` nor ``optim`` says which optimizer the run gets: transformers then defaults to
    the non-fused AdamW (``adamw_torch``) on torch < 2.8 and to the fused one from 2.8 on (LF_FACTS §3), and the
    non-fused update allocates temporaries the size of the states (case 028: 16 GiB on 8×H200 for Qwen3-32B).
    `resolve(stack)` re-resolves the run for a stack mapping. Keys ``alt_stack_total`` (GiB), ``alt_stack_fits``
    and ``alt_stack_optim``; all None when not computed.
    """
    out: dict[str, Any] = {"alt_stack_total": None, "alt_stack_fits": None, "alt_stack_optim": None}
    if torch_given or optim_given:
        return out
    old = resolve({"torch": "2.7"})
    if old.optim == run.optim:
        return out
    est = estimate(old, hw, counts=counts, tokens=tokens)
    return {"alt_stack_total": est.total, "alt_stack_fits": est.fits, "alt_stack_optim": old.optim}
