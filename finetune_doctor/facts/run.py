"""``run``: the run as LLaMA-Factory would execute it (run.py `Run`): every field of `Run` but the architecture,
plus ``tokens_per_micro_batch``, ``quantized`` and ``global_batch``.

Without a resolved model only ``stage`` and ``finetuning_type`` are known (LLaMA-Factory's defaults filled).
"""

from __future__ import annotations

from dataclasses import fields as dc_fields
from typing import Any, Mapping

from finetune_doctor.facts.schema import OPEN, F, Field, Namespace
from finetune_doctor.run import Run
from finetune_doctor.run.savers import LIGER_FLCE_OFF

_TYPES = {"bool": "bool", "int": "int", "float": "float", "str": "str"}
_VALUES = {"liger_flce_off": LIGER_FLCE_OFF,   # fields whose values a rule's message table may switch on
           # LF hparams/finetuning_args.py:464 (main) `finetuning_type: Literal["lora", "oft", "freeze", "full"]`
           "finetuning_type": ("lora", "oft", "freeze", "full"),
           "trainable_dtype": ("float32", "bfloat16", "float16"),   # run/resolve.py: the trainable params' dtype
           "mcore": ("mca", "bridge")}   # run/engines.py:379: USE_MCA=1's adapter, else Megatron Bridge
_DOCS = {
    "stage": "pt | sft | rm | ppo | dpo | kto", "finetuning_type": "lora | oft | freeze | full",
    "weights_dtype": "frozen weights as stored on the GPU", "trainable_dtype": "trainable params' dtype",
    "compute_dtype": "matmul dtype", "autocast": "None | bfloat16 | float16 (AMP)",
    "micro_batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
    "seq_len": "cutoff_len, tokens", "world_size": "data-parallel ranks over all nodes",
    "zero_stage": "DeepSpeed ZeRO stage (0 without DeepSpeed)", "optim": "transformers optim name",
    "zero3_init": "a ZeRO-3 model is built under deepspeed.zero.Init (False: whole on every rank until "
                  "deepspeed.initialize partitions it; accelerate < 1.0 with zero3_init_flag false)",
    "optimizer_impl": "fused | foreach | forloop | 8bit | ...", "optim_assumed": "optim unset: the assumed default",
    "ds_buckets": "DeepSpeed bucket sizes, elements",
    # engines beyond DeepSpeed (run/engines.py)
    "engine": "single | ddp | deepspeed | fsdp | megatron",
    "launcher": "accelerate | torchrun | deepspeed | llamafactory-cli | ray | python (None: not known)",
    "autotp_size": "DeepSpeed AutoTP degree (tensor_parallel.autotp_size; 1 without it): not sized by the memory "
                   "estimate",
    "ray_num_workers": "Ray workers, one GPU each", "fsdp": "FSDP (1 or 2) shards the run",
    "fsdp_version": "1 (FlatParameter) | 2 (fully_shard); 0 without FSDP",
    "fsdp_sharding": "FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | _HYBRID_SHARD_ZERO2 | NO_SHARD",
    "fsdp_reshard_after_forward": "units are resharded after their forward (FULL_SHARD)",
    "fsdp_offload_params": "sharded parameters, gradients and the optimizer step on the host",
    "fsdp_param_dtype": "mixed-precision dtype units are all-gathered and computed in (None: their own)",
    "fsdp_wrap": "auto-wrap policy: TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP",
    "fsdp_cpu_ram_efficient_loading": "rank 0 alone loads the checkpoint into CPU memory",
    "fsdp_source": "where the FSDP settings came from (accelerate config | accelerate launch | YAML fsdp/fsdp_config)",
    "fsdp_flat_dtype_conflict": "FSDP1: the unit that would flatten parameters of two dtypes (None: none)",
    "fsdp_ignored": "FSDP was asked for but DeepSpeed runs",
    "fsdp_ignored_strategy": "an FSDP1 fsdp_sharding_strategy written into an FSDP2 accelerate config",
    "mcore": "mca (mcore adapter, USE_MCA=1) | bridge (Megatron Bridge) | None",
    "mcore_tp": "tensor parallel size", "mcore_pp": "pipeline parallel size",
    "mcore_vpp": "virtual pipeline size (interleaved schedule), None: not interleaved",
    "mcore_cp": "context parallel size", "mcore_ep": "expert parallel size", "mcore_etp": "expert tensor parallel size",
    "mcore_sp": "sequence parallelism (TP > 1)", "mcore_dp": "data-parallel ranks: world / (TP x PP x CP)",
    "mcore_expert_dp": "expert data-parallel ranks: world / (ETP x EP x PP)",
    "mcore_distributed_optimizer": "fp32 main params and Adam states sharded over DP x CP",
    "mcore_recompute": "full | selective | None", "mcore_optimizer_offload": "share of the optimizer on the host",
    "mcore_error": "the first parallel layout Megatron-Core or the adapter refuses, in its words (None: none)",
    "mcore_error_key": "the YAML key of that layout",
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
            F(kind, _DOCS.get(f.name, f"Run.{f.name}"), values=_VALUES.get(f.name))
    out["tokens_per_micro_batch"] = F("int", "tokens in one forward of one rank (x2 for pairwise data)")
    out["quantized"] = F("bool", "quantization_bit set or a pre-quantized checkpoint")
    out["global_batch"] = F("int", "micro batch x gradient accumulation x world size")
    out["grad_projector"] = F("str", "the gradient-projecting optimizer LLaMA-Factory builds itself: galore "
                              "(use_galore) | apollo (use_apollo) | None; GaLore when both are set, as its checks "
                              "come first (rules' message tables switch on it)", values=("galore", "apollo"))
    return Namespace("run", __doc__.split("\n\n")[0], out)


NAMESPACE = _namespace()


def assemble(run: Run | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``run`` facts: the resolved Run, or LLaMA-Factory's defaults of stage/finetuning_type without one."""
    projector = "galore" if values.get("use_galore") else ("apollo" if values.get("use_apollo") else None)
    if run is not None:
        return {**run.facts(), "grad_projector": projector}
    return {"stage": values.get("stage") or "sft", "finetuning_type": values.get("finetuning_type") or "lora",
            "grad_projector": projector}
