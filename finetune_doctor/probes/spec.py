"""What a probe runs: a frozen `ProbeSpec`, built from a resolved `Run` by `spec_from_run`.

A ProbeSpec is plain data (JSON-able, picklable) so that the gpu probe can hand it to a subprocess and the
simulate probe can be called directly in tests without a Run. It imports no torch.

The precision fields follow LLaMA-Factory as run.py resolves it (reference/llamafactory/LF_FACTS.md §2): frozen
weights stay in the checkpoint dtype, trainable parameters are upcast to fp32 unless pure_bf16 / BAdam / ZeRO-3
(``model/adapter.py:337-349``), autocast follows ``bf16``/``fp16``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

HALF_DTYPES = ("bfloat16", "float16")
QUANT_WEIGHT_DTYPES = ("nf4", "fp4", "int4", "int8", "float8")
FINETUNING_TYPES = ("full", "freeze", "lora", "oft")
# Keys of config.json that describe the checkpoint rather than the architecture; the probe drops them before
# building the model from its config (quantized checkpoints are modelled by `quantization_bit`).
_NON_ARCH_KEYS = ("architectures", "auto_map", "quantization_config", "transformers_version", "_name_or_path",
                  "torch_dtype", "dtype", "use_cache", "_commit_hash")


@dataclass(frozen=True)
class ProbeSpec:
    """One training configuration to probe. Sizes are elements/tokens; dtypes are torch dtype names.

    `model_config_json` is the ``config.json`` content (JSON text, so the spec stays hashable); when transformers
    cannot build that ``model_type`` (remote-code models), `standin_config_json` — a LLaMA-family config with the
    same shapes, built from the ModelArch fields — is used instead and the probe says so. `num_layers` is the
    model's real depth (simulate may build fewer layers and extrapolate).
    """

    model_type: str
    model_config_json: str
    num_layers: int
    name: str = ""
    standin_config_json: str = ""
    checkpoint_dtype: str = "bfloat16"
    stage: str = "sft"
    finetuning_type: str = "lora"
    weights_dtype: str = "bfloat16"      # frozen weights on the GPU (nf4/int8 when quantized)
    trainable_dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    autocast: str | None = "bfloat16"
    pure_bf16: bool = False
    quantization_bit: int | None = None
    double_quantization: bool = True
    upcast_layernorm: bool = False
    upcast_lmhead_output: bool = False
    lora_rank: int = 8
    lora_alpha: int | None = None
    lora_dropout: float = 0.0
    lora_target: tuple[str, ...] = ("all",)
    use_dora: bool = False
    resize_vocab: bool = False
    freeze_trainable_layers: int = 2
    freeze_trainable_modules: tuple[str, ...] = ("all",)
    micro_batch: int = 1
    grad_accum: int = 1
    seq_len: int = 2048
    gradient_checkpointing: bool = True
    use_reentrant: bool = True
    unsloth_gc: bool = False
    attention: str = "sdpa"              # eager | sdpa | fa2 | fa3
    optim: str = "adamw_torch_fused"
    optimizer_impl: str = "fused"        # fused | foreach | forloop | 8bit | paged_8bit | adafactor | sgd | ...
    max_grad_norm: float = 1.0
    deepspeed: bool = False
    zero_stage: int = 0
    offload_optimizer: str | None = None
    offload_param: str | None = None
    world_size: int = 1
    fsdp: bool = False
    pairwise: bool = False
    ref_model: bool = False
    extra_params: int = 0                # frozen parameters outside the language model (vision tower, projector)
    # liger-kernel as LF applies it (run/savers.py), simulated by probes/liger.py; OFT's peft sizes
    liger_flce: bool = False
    liger_rms_norm: bool = False
    liger_swiglu: bool = False
    flce_addmm_out_dtype: bool = True
    oft_rank: int = 0
    oft_block_size: int = 32

    # ---- derived -----------------------------------------------------------------------------------------
    @property
    def model_config(self) -> dict[str, Any]:
        """The config dict to build the model from (architecture keys only)."""
        cfg = json.loads(self.model_config_json) if self.model_config_json else {}
        return {k: v for k, v in cfg.items() if k not in _NON_ARCH_KEYS}

    @property
    def standin_config(self) -> dict[str, Any]:
        return json.loads(self.standin_config_json) if self.standin_config_json else {}

    @property
    def batch(self) -> int:
        """Sequences in one forward pass (pairwise data doubles the batch: chosen + rejected)."""
        return self.micro_batch * (2 if self.pairwise else 1)

    @property
    def sharded(self) -> bool:
        """Parameters, gradients and optimizer states are partitioned over ranks (ZeRO-3 or FSDP). DeepSpeed
        ZeRO-3 keeps its partition layout (half-precision partition, fp32 master, gradient buffer) even on one
        rank, so it counts as sharded at any world size."""
        return (self.deepspeed and self.zero_stage == 3) or (self.fsdp and self.world_size > 1)

    @property
    def lora_alpha_value(self) -> int:
        """LoRA alpha; LF's default is 2 × rank (finetuning_args.py, LF_FACTS §3)."""
        return self.lora_alpha if self.lora_alpha else 2 * self.lora_rank

    def with_(self, **kw: Any) -> "ProbeSpec":
        return replace(self, **kw)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProbeSpec":
        """Inverse of `as_dict` (tuples come back from JSON as lists)."""
        names = {f.name for f in fields(cls)}
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names}
        return cls(**kw)

    def describe(self) -> str:
        """One line for reports: ``lora r8 all, bf16 autocast, b1×2048, GC, sdpa, fused, ZeRO-3×8``."""
        parts = [self.finetuning_type]
        if self.finetuning_type in ("lora", "oft"):
            parts[-1] += f" r{self.lora_rank} {','.join(self.lora_target)}"
        if self.quantization_bit:
            parts.append(f"{self.quantization_bit}-bit")
        parts.append(f"{self.autocast} autocast" if self.autocast else f"{self.trainable_dtype} trainable, no autocast")
        parts.append(f"b{self.batch}×{self.seq_len}" + (f" ×{self.grad_accum} accum" if self.grad_accum > 1 else ""))
        parts.append("GC" if self.gradient_checkpointing else "no GC")
        parts += [self.attention, self.optimizer_impl]
        if self.deepspeed:
            parts.append(f"ZeRO-{self.zero_stage}×{self.world_size}")
        elif self.fsdp:
            parts.append(f"FSDP×{self.world_size}")
        elif self.world_size > 1:
            parts.append(f"DDP×{self.world_size}")
        return ", ".join(parts)


# ---- config dicts -------------------------------------------------------------------------------------------

def standin_config(arch: Any) -> dict[str, Any]:
    """A transformers config dict (with ``model_type``) of the same shapes as `arch` (a ModelArch).

    Used when no config.json was read or transformers has no class for its ``model_type`` (remote-code models such
    as ChatGLM, Baichuan, InternLM2, Qwen-1). The family is picked by the features ModelArch records: multi-head
    latent attention → ``deepseek_v2``; MoE → ``qwen3_moe`` (q/k norms) / ``qwen2_moe`` (shared expert) /
    ``mixtral``; dense → ``qwen3`` (q/k norms) / ``qwen2`` (q/k/v bias) / ``llama``. A fused qkv has the same
    element count as separate q/k/v (arch.py module docstring), so activations and parameter bytes match.
    """
    base = {
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "intermediate_size": arch.intermediate_size,
        "vocab_size": arch.vocab_size,
        "head_dim": arch.hd,
        "tie_word_embeddings": bool(arch.tie_word_embeddings),
        "max_position_embeddings": arch.max_position_embeddings or 32768,
    }
    if arch.mla:
        mt = "deepseek_v2"
        base.update(kv_lora_rank=arch.kv_lora_rank, q_lora_rank=arch.q_lora_rank,
                    qk_nope_head_dim=arch.qk_nope_head_dim, qk_rope_head_dim=arch.qk_rope_head_dim,
                    v_head_dim=arch.v_head_dim or arch.hd, n_routed_experts=arch.num_experts or None,
                    num_experts_per_tok=arch.num_experts_per_tok or None,
                    moe_intermediate_size=arch.moe_intermediate_size or arch.intermediate_size,
                    first_k_dense_replace=arch.first_k_dense,
                    n_shared_experts=(arch.shared_expert_intermediate_size // (arch.moe_intermediate_size or 1))
                    if arch.shared_expert_intermediate_size else None)
    elif arch.is_moe:
        base.update(num_experts=arch.num_experts, num_experts_per_tok=arch.num_experts_per_tok,
                    moe_intermediate_size=arch.moe_intermediate_size or arch.intermediate_size)
        if arch.qk_norm:
            mt = "qwen3_moe"
            base.update(mlp_only_layers=list(arch.dense_layers), decoder_sparse_step=1)
        elif arch.shared_expert_intermediate_size:
            mt = "qwen2_moe"
            base.update(shared_expert_intermediate_size=arch.shared_expert_intermediate_size,
                        mlp_only_layers=list(arch.dense_layers), decoder_sparse_step=1)
        else:
            mt = "mixtral"
            base["num_local_experts"] = base.pop("num_experts")
    elif arch.qk_norm:
        mt = "qwen3"
        base["attention_bias"] = bool(arch.qkv_bias)
    elif arch.qkv_bias and not arch.o_bias:
        mt = "qwen2"
    else:
        mt = "llama"
        base.update(attention_bias=bool(arch.qkv_bias or arch.o_bias), mlp_bias=bool(arch.mlp_bias))
    base["model_type"] = mt
    return {k: v for k, v in base.items() if v is not None}


def spec_from_run(run: Any) -> ProbeSpec:
    """The probe of `run` (a finetune_doctor.run.Run).

    The model config is ``run.arch.raw`` (config.json as read) when present, else `standin_config(run.arch)`.
    ``use_reentrant`` follows LF's ``use_reentrant_gc`` (default True, forced False under FSDP —
    ``model_utils/checkpointing.py:177-182``, LF_FACTS §3).
    """
    arch = run.arch
    raw = dict(arch.raw or {})
    stand = standin_config(arch)
    if raw.get("text_config") and isinstance(raw["text_config"], dict) and not raw.get("num_hidden_layers"):
        # multimodal checkpoints: the language model is what trains; the vision tower enters as extra params
        text = dict(raw["text_config"])
        text.setdefault("model_type", raw.get("model_type", ""))
        raw = text
    cfg = raw if raw.get("model_type") else stand
    reentrant = bool(getattr(run, "use_reentrant_gc", True)) and not getattr(run, "fsdp", False)
    return ProbeSpec(
        model_type=str(cfg.get("model_type")),
        model_config_json=json.dumps(cfg, sort_keys=True),
        standin_config_json=json.dumps(stand, sort_keys=True),
        num_layers=int(arch.num_layers),
        name=str(getattr(run, "model_name", "") or arch.name),
        checkpoint_dtype=str(arch.dtype or "float32"),
        stage=run.stage,
        finetuning_type=run.finetuning_type,
        weights_dtype=run.weights_dtype,
        trainable_dtype=run.trainable_dtype,
        compute_dtype=run.compute_dtype,
        autocast=run.autocast,
        pure_bf16=bool(run.pure_bf16),
        quantization_bit=run.quantization_bit,
        double_quantization=bool(getattr(run, "double_quantization", True)),
        upcast_layernorm=bool(getattr(run, "upcast_layernorm", False)),
        upcast_lmhead_output=bool(getattr(run, "upcast_lmhead_output", False)),
        lora_rank=int(run.lora_rank),
        lora_alpha=run.lora_alpha,
        lora_dropout=float(getattr(run, "lora_dropout", 0.0) or 0.0),
        lora_target=tuple(run.lora_target) or ("all",),
        use_dora=bool(getattr(run, "use_dora", False)),
        resize_vocab=bool(getattr(run, "resize_vocab", False)),
        freeze_trainable_layers=int(run.freeze_trainable_layers),
        freeze_trainable_modules=tuple(getattr(run, "freeze_trainable_modules", ("all",)) or ("all",)),
        micro_batch=int(run.micro_batch),
        grad_accum=int(run.grad_accum),
        seq_len=int(run.seq_len),
        gradient_checkpointing=bool(run.gradient_checkpointing),
        use_reentrant=reentrant,
        unsloth_gc=bool(getattr(run, "unsloth_gc", False)),
        attention=run.attention,
        optim=str(getattr(run, "optim", "") or ""),
        optimizer_impl=run.optimizer_impl,
        max_grad_norm=float(getattr(run, "max_grad_norm", 1.0) or 0.0),
        deepspeed=bool(getattr(run, "deepspeed", run.zero_stage > 0)),
        zero_stage=int(run.zero_stage),
        offload_optimizer=run.offload_optimizer or None,
        offload_param=run.offload_param or None,
        world_size=int(run.world_size),
        fsdp=bool(getattr(run, "fsdp", False)),
        pairwise=bool(run.pairwise),
        ref_model=bool(run.ref_model),
        extra_params=int(arch.extra_params or 0) if getattr(arch, "extra_frozen", True) else 0,
        liger_flce=bool(getattr(run, "liger_flce", False)),
        liger_rms_norm=bool(getattr(run, "liger_rms_norm", False)),
        liger_swiglu=bool(getattr(run, "liger_swiglu", False)),
        flce_addmm_out_dtype=bool(getattr(run, "flce_addmm_out_dtype", True)),
        oft_rank=int(getattr(run, "oft_rank", 0) or 0),
        oft_block_size=int(getattr(run, "oft_block_size", 32) or 0),
    )
