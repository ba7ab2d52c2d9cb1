"""The training machine's stack as it bears on memory: transformers' default optimizer per torch version, the
optimizer implementations, version parsing, and the loss's shifted-logits copy before transformers 4.49."""

from __future__ import annotations

import re

# HF optim names -> the optimizer implementation that decides temporaries and state bytes
# (transformers training_args.py OptimizerNames; reference/memory/REPORT.md §3 "Optimizer states in torch").
OPTIM_IMPL = {
    "adamw_torch_fused": "fused", "adamw_torch": "foreach", "adamw_hf": "forloop", "adamw_torch_xla": "foreach",
    "adamw_apex_fused": "fused", "adamw_anyprecision": "forloop", "adamw_torch_npu_fused": "fused",
    "adamw_bnb_8bit": "8bit", "adamw_8bit": "8bit", "paged_adamw_8bit": "paged_8bit", "paged_adamw": "paged",
    "paged_adamw_32bit": "paged", "adamw_8bit_bnb": "8bit", "lion_8bit": "8bit_lion", "paged_lion_8bit": "8bit_lion",
    "lion_32bit": "lion", "paged_lion_32bit": "lion", "adafactor": "adafactor", "sgd": "sgd", "adagrad": "adagrad",
    "rmsprop": "rmsprop", "galore_adamw": "galore", "galore_adamw_8bit": "galore_8bit", "galore_adafactor": "galore",
    "apollo_adamw": "apollo", "adalomo": "lomo", "lomo": "lomo", "schedule_free_adamw": "schedule_free",
    "ademamix": "ademamix", "ademamix_8bit": "8bit",
}


# transformers turned the default `optim` to adamw_torch_fused on torch >= 2.8 in huggingface/transformers#37358
# (merged 2025-07, first released in 4.54.0); before it the default was adamw_torch whatever the torch (4.45.0's
# training_args.py L1267-1270 keeps the fused line commented out)
FUSED_DEFAULT_FROM = (4, 54)


def default_optim(torch_version: tuple[int, int] | None = None,
                  transformers_version: tuple[int, ...] | None = None) -> str:
    """transformers' default `optim`: adamw_torch_fused on torch >= 2.8 from transformers 4.54 on, else adamw_torch
    (LF_FACTS §3; `FUSED_DEFAULT_FROM`).

    The torch version of the training machine is unknown before launch; we assume a current stack (>= 2.8) unless
    told otherwise, and the JSON report's `run` says which optimizer was assumed. A transformers before 4.54
    (stated, or assumed from the LLaMA-Factory release) decides it without torch.
    """
    if transformers_version is not None and tuple(transformers_version[:2]) < FUSED_DEFAULT_FROM:
        return "adamw_torch"
    if torch_version is not None and torch_version < (2, 8):
        return "adamw_torch"
    return "adamw_torch_fused"


def torch_decides_optim(transformers_version: tuple[int, ...] | None) -> bool:
    """Whether the default optimizer depends on torch: not under a transformers before `FUSED_DEFAULT_FROM`."""
    return transformers_version is None or tuple(transformers_version[:2]) >= FUSED_DEFAULT_FROM


def parse_version(v: str | None) -> tuple[int, ...] | None:
    """'2.5.1+cu124' -> (2, 5, 1); None or unparsable (or over-long: numbers.py bounds it) -> None."""
    from finetune_doctor.numbers import parse_version as bounded

    return bounded(str(v)) if v else None


# transformers before 4.49 built the loss from a contiguous fp32 copy of the shifted logits
# (loss_utils.ForCausalLMLoss: logits[..., :-1, :].contiguous()); huggingface/transformers#35646 (in 4.49.0)
# shifts the labels instead.
SHIFTED_LOGITS_COPY_BEFORE = (4, 49)
# transformers before 4.46 cast the logits to fp32 inside the causal-LM forward itself (4.45.0
# models/llama/modeling_llama.py:1214 ``self.lm_head(...).float()`` with its "TODO: remove the float() operation in
# v4.46" at :1213, and :1219 again when labels are given), so lm_head's half-precision output is dropped as soon as
# its fp32 copy exists; from 4.46 the forward returns lm_head's output in its own dtype (5.6.0 modeling_llama.py:487)
# and only the loss upcasts it (loss_utils.ForCausalLMLoss)
FORWARD_UPCAST_BEFORE = (4, 46)


# DeepSpeed #8148 (a31eb3165, 2026-07-22, first tagged in v0.19.3) attributes the frozen parameters a checkpoint's
# recompute gathers to the innermost module whose backward is under way, so that under reentrant checkpointing every
# frozen layer stays gathered until backward ends (analyzers/memory/zero3.py `frozen_recompute_hold` sizes it). The
# shape of run it needs and the releases are kept here, light, because facts/assumestack.py weighs the release on
# the lint-free path without loading the memory model.
FROZEN_HOLD_FROM = (0, 19, 3)
FROZEN_HOLD_ABSENT_RELEASE = "0.19.2"   # the release before it, weighed when a later one is named
FROZEN_HOLD_RELEASE = "0.19.8"          # a release with it, weighed when none is named (the newest the doctor knows)


def named_deepspeed(run) -> tuple[str, str] | None:   # noqa: ANN001 - run.Run, not imported: this module stays light
    """(version, where it came from) of DeepSpeed on the training machine as the inputs name it (``--env``, the
    packages here, a ``doctor context`` file: ``run.stack_sources``); None when none of them names it."""
    for pkg, v, src in run.stack_sources:
        if pkg == "deepspeed" and parse_version(v) is not None:
            return v, src
    return None


def frozen_hold_shape(run) -> bool:   # noqa: ANN001
    """The conditions of the frozen-recompute hold other than the release: ZeRO-3, reentrant activation
    checkpointing (LLaMA-Factory's default ``use_reentrant_gc: true``, hparams/model_args.py), and an adapter method
    (LoRA, OFT) whose frozen base is not quantized (quantized bases were not measured)."""
    return bool(run.deepspeed and run.zero_stage == 3 and run.gradient_checkpointing and run.use_reentrant_gc
                and run.finetuning_type in ("lora", "oft") and run.quantization_bit is None and not run.quantized)


def named_release_holds(run) -> bool:   # noqa: ANN001
    """Whether the DeepSpeed the inputs name is FROZEN_HOLD_FROM or later (False when none is named: LLaMA-Factory's
    deepspeed extra installs <= 0.18.4, see zero3.py `frozen_recompute_hold`)."""
    found = named_deepspeed(run)
    v = parse_version(found[0]) if found else None
    return v is not None and (tuple(v) + (0, 0, 0))[:3] >= FROZEN_HOLD_FROM
