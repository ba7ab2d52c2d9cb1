"""The ``config-complete`` assumption of a training config that lost its training section, weighed.

facts/cutpaste.py's ``no-training-section`` sign says the file sets none of the keys of the training section
(batch, learning rate, epochs or steps, precision). The estimate then stands on transformers' and LLaMA-Factory's
defaults for all of them — micro batch 8 (TrainingArguments ``per_device_train_batch_size``), fp32 (no
``bf16``/``fp16``), no DeepSpeed — which are the run's values only if the file is whole. Here they become one
assumption that opens the verdict (trial 17, LF#7341: "oom > 99 %" on a cut paste of a run that trained), sized at
the training sections LLaMA-Factory's own examples write: micro batch 1 with bf16 (examples/train_full and
train_lora: ``per_device_train_batch_size: 1``, ``bf16: true``), and for full fine-tuning over several GPUs the same
under ZeRO-3 (its stock ``examples/deepspeed/ds_z3_config.json``, which every examples/train_full config sets; one of
eleven train_lora configs and no train_qlora config does). It opens the verdict where one of those
gives another verdict (facts/assumebase.py `opens_verdict`, the one home of the `!`): k4's "oom" becomes at-risk
(39.0 GiB under ZeRO-3 on 4 x A6000), while a run that runs out under every section LF's examples write (cases 005
and 026: Baichuan-7B full on one A100-80GB, Baichuan-13B LoRA on 24 GB cards) keeps its "oom".
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.facts.assumebase import opens_verdict
from finetune_doctor.types import Assumption

NAME = "config-complete"
# the LF example training section the alternatives put back (examples/train_lora/llama3_lora_sft.yaml `### train`)
EXAMPLE_SECTION = (("config", "per_device_train_batch_size", 1, False), ("config", "bf16", True, False))
ZERO3 = ("config", "deepspeed", "examples/deepspeed/ds_z3_config.json", False)
ZERO3_METHODS = ("full", "freeze")   # the methods whose LF examples run under ZeRO-3 (examples/train_full)


def lost_section(asm: Any) -> bool:
    """Whether the config shows the ``no-training-section`` sign (facts/cutpaste.py)."""
    return bool((getattr(asm, "facts", None) or {}).get("lint", {}).get("training_section_lost"))


def partial_assumption(c: Any) -> list[Assumption]:
    """[the weighed ``config-complete`` Assumption] for a config that lost its training section, else []. `c` is
    facts/assumebase.py `Seen`. Alternatives (label → total GiB, verdict) are the run re-resolved with LF's example
    training section (micro batch 1, bf16) and, over more than one GPU, that section under ZeRO-3; `moves_verdict`
    is `opens_verdict`'s answer over them. Never raises for a resolved run: an alternative
    that cannot be resolved is listed unsized."""
    if not lost_section(c.asm) or c.run is None:
        return []
    alts: list[tuple[str, list[tuple[str, str, Any, bool]]]] = [
        ("LF's example training section (micro batch 1, bf16)", list(EXAMPLE_SECTION))]
    # ZeRO-3 only where LF's examples of the method write it: every examples/train_full config sets
    # ds_z3_config.json, one of the eleven examples/train_lora configs does (qwen3_lora_sft_ds3.yaml), no train_qlora
    if (c.run.world_size or 1) > 1 and not c.run.zero_stage and c.run.finetuning_type in ZERO3_METHODS:
        alts.append(("the same under DeepSpeed ZeRO-3", [*EXAMPLE_SECTION, ZERO3]))
    gib: dict[str, float] = {}
    verdicts: dict[str, str] = {}
    for label, edits in alts:
        res = _judge(c, edits)
        if res is not None:
            gib[label], verdict = res
            if verdict is not None:
                verdicts[label] = verdict
    lost = c.asm.facts["lint"]["training_section_lost"]
    return [Assumption(
        name=NAME, value="the file is the whole config: transformers' and LLaMA-Factory's defaults for its training "
                         "section (micro batch 8, fp32, no DeepSpeed)",
        source=f"the file may be partial: {lost}",
        alternatives=tuple(label for label, _ in alts) + ("any other training section",),
        effect_gib=gib, effect_verdict=verdicts,
        resolve_with="the whole YAML as it is launched (its `### train` section: per_device_train_batch_size, "
                     "bf16/fp16, deepspeed), with the command line's key=value overrides",
        moves_verdict=opens_verdict(NAME, c.base, verdicts))]


def _judge(c: Any, edits: list[tuple[str, str, Any, bool]]) -> tuple[float, str | None] | None:
    from finetune_doctor.errors import InputError
    from finetune_doctor.facts.assumebase import weighs

    if not weighs(c.fresh):
        return None
    try:
        run = c.asm.run_after(edits)
    except (InputError, OSError, ValueError):
        return None
    return c.fresh(run, c.hw, c.tokens)
