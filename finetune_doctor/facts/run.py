"""``run``: the run as LLaMA-Factory would execute it (run.py `Run`): every field of `Run` but the architecture,
plus ``tokens_per_micro_batch``, ``quantized`` and ``global_batch``.

Without a resolved model only ``stage`` and ``finetuning_type`` are known (LLaMA-Factory's defaults filled).
"""

from __future__ import annotations

from dataclasses import fields as dc_fields
from typing import Any, Mapping

from finetune_doctor.facts.schema import OPEN, F, Field, Namespace
from finetune_doctor.run import Run

_TYPES = {"bool": "bool", "int": "int", "float": "float", "str": "str"}
_DOCS = {
    "stage": "pt | sft | rm | ppo | dpo | kto", "finetuning_type": "lora | oft | freeze | full",
    "weights_dtype": "frozen weights as stored on the GPU", "trainable_dtype": "trainable params' dtype",
    "compute_dtype": "matmul dtype", "autocast": "None | bfloat16 | float16 (AMP)",
    "micro_batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
    "seq_len": "cutoff_len, tokens", "world_size": "data-parallel ranks over all nodes",
    "zero_stage": "DeepSpeed ZeRO stage (0 without DeepSpeed)", "optim": "transformers optim name",
    "optimizer_impl": "fused | foreach | forloop | 8bit | ...", "optim_assumed": "optim unset: the assumed default",
    "ds_buckets": "DeepSpeed bucket sizes, elements",
}


def _namespace() -> Namespace:
    out: dict[str, Field] = {}
    for f in dc_fields(Run):
        if f.name == "arch":
            continue
        t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "any")
        base = t.split("|")[0].strip().split("[")[0]
        kind = _TYPES.get(base, "tuple" if base == "tuple" else "any")
        out[f.name] = OPEN(_DOCS.get(f.name, f"Run.{f.name}"), "dict") if base == "dict" else \
            F(kind, _DOCS.get(f.name, f"Run.{f.name}"))
    out["tokens_per_micro_batch"] = F("int", "tokens in one forward of one rank (x2 for pairwise data)")
    out["quantized"] = F("bool", "quantization_bit set or a pre-quantized checkpoint")
    out["global_batch"] = F("int", "micro batch x gradient accumulation x world size")
    return Namespace("run", __doc__.split("\n\n")[0], out)


NAMESPACE = _namespace()


def assemble(run: Run | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``run`` facts: the resolved Run, or LLaMA-Factory's defaults of stage/finetuning_type without one."""
    if run is not None:
        return run.facts()
    return {"stage": values.get("stage") or "sft", "finetuning_type": values.get("finetuning_type") or "lora"}
