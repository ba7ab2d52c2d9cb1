"""The ``weights-quantization`` assumption of a checkpoint whose storage no config.json states: sized unquantized
while its name suggests a quantized upload (an upper bound), or sized from the name's ending with the unquantized
model shown beside it. `asm` is facts/config.py's Assembly (run, hw, memory, assumptions); kept apart from that
module so each stays within the house's size limit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from finetune_doctor.types import Assumption


def quant_assumption(asm: Any, qalt: dict[str, Any]) -> None:
    """Record how the weights of a quantized-looking checkpoint were sized (unquantized: an upper bound) with the
    alternative its name suggests, and keep an upper bound from deciding an ``oom`` verdict: when the weights as
    the name suggests they are stored fit, the verdict is at-risk (issue 21: verdicts follow the unknowns)."""
    label = qalt.get("quant_alt_label")
    if label is None or asm.run is None or asm.memory is None:
        return
    if asm.memory.verdict == "oom" and qalt.get("quant_alt_verdict") in ("fits", "at-risk"):
        asm.memory = replace(asm.memory, verdict="at-risk")
    verdict = asm.memory.verdict
    asm.assumptions.append(Assumption(
        name="weights-quantization", value=f"unquantized {asm.run.arch.dtype} (an upper bound)",
        source="the model name suggests a quantized checkpoint; no config.json says how it is stored",
        alternatives=(label,), effect_gib={label: qalt["quant_alt_total"]},
        effect_verdict={label: qalt["quant_alt_verdict"]} if qalt.get("quant_alt_verdict") else {},
        resolve_with="--model-config (the checkpoint's config.json)",
        moves_verdict=bool(qalt.get("quant_alt_verdict")) and qalt["quant_alt_verdict"] != verdict))


def named_quant_assumption(asm: Any, resolve_arch: Any, tokens: int | None) -> None:
    """Record the ``weights-quantization`` assumption of weights sized from the repository name's ending alone
    (quant.py `QuantSpec.from_name`: ``-AWQ`` as AWQ 4-bit g128, ...) with the unquantized base model (an upper
    bound) evaluated beside it. That alternative is shown, not weighed (facts/assumebase.py `SHOWN_ONLY`): an upload
    named -AWQ is not stored unquantized, so it neither moves the verdict nor enters the mixture."""
    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.facts import assumebase
    from finetune_doctor.facts import mem as mem_facts

    run = asm.run
    quant = getattr(run.arch, "quant", None) if run is not None else None
    if quant is None or not getattr(quant, "from_name", False) or asm.memory is None:
        return
    label = assumebase.UNQUANTIZED
    est = mem_facts.judged(estimate(resolve_arch(replace(run.arch, quant=None)), asm.hw, tokens=tokens), asm.hw,
                           run=run)
    asm.assumptions.append(Assumption(
        name="weights-quantization", value=f"{quant.label} (as the name's ending suggests)",
        source=f"no config.json of the checkpoint was read; the name '{run.model_name}' ends as such uploads do, "
               f"and they are stored as {quant.label} (quant.py hinted_spec)",
        alternatives=(label,), effect_gib={label: est.total},
        effect_verdict={label: est.verdict} if est.verdict else {},
        resolve_with="--model-config (the checkpoint's config.json), or the model folder on this machine",
        moves_verdict=False))
