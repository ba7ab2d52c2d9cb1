"""The training run as LLaMA-Factory would actually execute it.

`resolve_run` turns the merged YAML keys, the model architecture, the DeepSpeed config and the hardware into a
`Run`: defaults filled, precision resolved the way LLaMA-Factory resolves it, world size known. Every decision cites
where LLaMA-Factory (snapshot ff6d4d1, see reference/llamafactory/LF_FACTS.md) or transformers makes it.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.types import Hardware


# HF optim names -> the optimizer implementation that decides temporaries and state bytes
# (transformers training_args.py OptimizerNames; REPORT.md §3 "Optimizer states in torch").
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


@dataclass(frozen=True)
class Run:
    """A resolved run. Sizes are elements or tokens; `world_size` counts data-parallel ranks over all nodes."""

    arch: ModelArch
    model_name: str
    stage: str = "sft"
    finetuning_type: str = "lora"
    # precision (LF_FACTS §2)
    bf16: bool = False
    fp16: bool = False
    pure_bf16: bool = False
    weights_dtype: str = "bfloat16"       # frozen weights as stored on the GPU
    trainable_dtype: str = "float32"      # trainable params (fp32 upcast unless pure_bf16 / badam / ZeRO-3)
    compute_dtype: str = "bfloat16"
    autocast: str | None = "bfloat16"     # None | bfloat16 | float16 (AMP)
    quantization_bit: int | None = None
    quantization_method: str | None = None
    double_quantization: bool = True
    ptq_method: str | None = None         # quantization_config.quant_method of a pre-quantized checkpoint
    ptq_bits: float | None = None         # bits per quantized weight element of that checkpoint
    ptq_format: str | None = None         # e.g. "awq 4-bit g128", "fp8 8-bit block 128x128"
    ptq_dequantized: bool = False         # LF loads it with dequantize=True (MXFP4, FP8) and trains it unquantized
    ptq_lora_only: bool = False           # LF trains only LoRA/OFT on it (adapter.py:330-335)
    quantization_bit_ignored: bool = False  # quantization_bit set on a PTQ checkpoint: LF ignores it
    quantization_unknown: bool = False    # the name suggests a quantized checkpoint but no config says how
    linear_weight_bytes: float | None = None  # stored bytes per decoder-linear parameter of a PTQ checkpoint
    upcast_layernorm: bool = False
    upcast_lmhead_output: bool = False
    # adapters / trainable set
    lora_rank: int = 8
    lora_alpha: int | None = None
    lora_target: tuple[str, ...] = ("all",)
    additional_target: tuple[str, ...] = ()
    use_dora: bool = False
    resize_vocab: bool = False
    freeze_trainable_layers: int = 2
    freeze_trainable_modules: tuple[str, ...] = ("all",)
    use_galore: bool = False
    use_apollo: bool = False
    use_badam: bool = False
    # batch and sequence
    micro_batch: int = 8
    grad_accum: int = 1
    seq_len: int = 2048
    packing: bool = False
    neat_packing: bool = False
    pairwise: bool = False                # DPO/ORPO/SimPO/RM: chosen+rejected in one batch
    ref_model: bool = False               # DPO/KTO full/freeze keep a frozen reference copy
    # memory knobs
    gradient_checkpointing: bool = True
    unsloth_gc: bool = False
    attention: str = "sdpa"               # eager | sdpa | fa2 | fa3
    optim: str = "adamw_torch_fused"
    optimizer_impl: str = "fused"
    optim_assumed: bool = False           # `optim` unset: transformers' default for the assumed torch version
    max_grad_norm: float = 1.0
    learning_rate: float | None = None
    # distribution
    deepspeed: bool = False
    zero_stage: int = 0
    offload_optimizer: str | None = None
    offload_param: str | None = None
    ds_buckets: dict[str, float] = field(default_factory=dict)
    overlap_comm: bool = False
    contiguous_gradients: bool = True     # DeepSpeedZeroConfig's default
    world_size: int = 1
    nnodes: int = 1
    gpus_per_node: int = 1
    fsdp: bool = False
    shifted_logits_copy: bool = False    # transformers < 4.49 keeps an fp32 copy of the shifted logits
    notes: tuple[str, ...] = ()

    @property
    def tokens_per_micro_batch(self) -> int:
        """Tokens in one forward pass of one rank: micro batch × cutoff_len (× 2 for pairwise data)."""
        return self.micro_batch * self.seq_len * (2 if self.pairwise else 1)

    @property
    def quantized(self) -> bool:
        """Frozen weights stay quantized on the GPU (on-the-fly bitsandbytes/HQQ/EETQ, or a PTQ checkpoint that
        LLaMA-Factory does not dequantize)."""
        return self.quantization_bit is not None or (self.ptq_method is not None and not self.ptq_dequantized)

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world_size

    def summary(self, params_b: float | None = None) -> dict[str, Any]:
        """The JSON report's `run` object (DESIGN.md)."""
        return {
            "stage": self.stage,
            "finetuning_type": self.finetuning_type,
            "model": self.model_name,
            "params_b": None if params_b is None else round(params_b, 2),
            "precision": {"weights": self.weights_dtype, "trainable": self.trainable_dtype,
                          "compute": self.compute_dtype},
            "zero_stage": self.zero_stage if self.deepspeed else None,
            "offload": {"optimizer": self.offload_optimizer, "param": self.offload_param},
            "world_size": self.world_size,
            "micro_batch": self.micro_batch,
            "grad_accum": self.grad_accum,
            "seq_len": self.seq_len,
            "gradient_checkpointing": self.gradient_checkpointing,
            "attention": self.attention,
            "optim": self.optim,
            "optim_assumed": self.optim_assumed,
        }

    def facts(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("arch")
        d["tokens_per_micro_batch"] = self.tokens_per_micro_batch
        d["quantized"] = self.quantized
        d["global_batch"] = self.global_batch
        return d

    def with_(self, **kw: Any) -> "Run":
        return replace(self, **kw)


def _split_list(v: Any) -> tuple[str, ...]:
    """LF splits comma strings into lists in __post_init__ (finetuning_args.py:580-592)."""
    if v is None:
        return ()
    if isinstance(v, (list, tuple)):
        return tuple(str(x).strip() for x in v if str(x).strip())
    return tuple(s.strip() for s in str(v).split(",") if s.strip())


def _bool(v: Any, default: bool = False) -> bool:
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


def _int(v: Any, default: int) -> int:
    """An integer key's value; `default` when unset or not a number (the key-schema rules report a wrong type)."""
    if v is None or isinstance(v, bool):
        return default
    if isinstance(v, float) and not math.isfinite(v):
        return default
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return default


class InvalidRunValue(ValueError):
    """A value the memory model would compute with makes no sense there (a micro batch of -8, cutoff_len 0, an
    infinite or non-integer size). `key` is the YAML key; the key-schema rules report it as a finding, and no
    estimate is made from it."""

    def __init__(self, key: str, value: Any, why: str):
        super().__init__(f"{key}={value!r} {why}")
        self.key, self.value, self.why = key, value, why


# Keys the memory model multiplies by: each must be an integer in [low, high] when set (LLaMA-Factory passes them
# to transformers' TrainingArguments / the data collator, where 0 or a negative value fails or divides by zero).
POSITIVE_INT_KEYS = {"per_device_train_batch_size": (1, 1 << 20), "gradient_accumulation_steps": (1, 1 << 20),
                     "cutoff_len": (1, 1 << 24), "lora_rank": (1, 1 << 16)}


def check_sizes(cfg: dict[str, Any]) -> None:
    """Raise InvalidRunValue for the first key of POSITIVE_INT_KEYS whose value is not an integer in range."""
    for key, (low, high) in POSITIVE_INT_KEYS.items():
        v = cfg.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise InvalidRunValue(key, v, "is not an integer")
        if not low <= v <= high:
            raise InvalidRunValue(key, v, f"is outside {low}..{high}")


def default_optim(torch_version: tuple[int, int] | None = None) -> str:
    """transformers' default `optim`: adamw_torch_fused on torch >= 2.8, else adamw_torch (LF_FACTS §3).

    The torch version of the training machine is unknown before launch; we assume a current stack (>= 2.8) unless
    told otherwise, and the JSON report's `run` says which optimizer was assumed.
    """
    if torch_version is not None and torch_version < (2, 8):
        return "adamw_torch"
    return "adamw_torch_fused"


def parse_version(v: str | None) -> tuple[int, ...] | None:
    """'2.5.1+cu124' -> (2, 5, 1); None or unparsable -> None."""
    if not v:
        return None
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(v))
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


# transformers before 4.49 built the loss from a contiguous fp32 copy of the shifted logits
# (loss_utils.ForCausalLMLoss: logits[..., :-1, :].contiguous()); huggingface/transformers#35646 (in 4.49.0)
# shifts the labels instead.
SHIFTED_LOGITS_COPY_BEFORE = (4, 49)


def resolve_run(cfg: dict[str, Any], arch: ModelArch, hw: Hardware | None, ds: Any | None = None,
                nnodes: int | None = None, stack: dict[str, str | None] | None = None) -> Run:
    """Resolve the run LLaMA-Factory would execute from merged YAML keys `cfg`.

    `ds` is a readers.dsconfig.DSConfig (or None); `hw` gives the GPU count per node (world size = GPUs per node ×
    nodes, as ``llamafactory-cli`` launches torchrun with ``--nproc_per_node`` = all visible devices,
    launcher.py:56-134). Unknown hardware → world size 1 unless the DeepSpeed JSON states an explicit
    train_batch_size from which the world size follows. Raises InvalidRunValue for a size the memory model cannot
    compute with (`check_sizes`).
    """
    check_sizes(cfg)
    notes: list[str] = []
    stage = str(cfg.get("stage") or "sft")
    ft = str(cfg.get("finetuning_type") or "lora")
    bf16, fp16, pure_bf16 = _bool(cfg.get("bf16")), _bool(cfg.get("fp16")), _bool(cfg.get("pure_bf16"))

    n_nodes = nnodes or (hw.nnodes if hw else 1) or 1
    per_node = (hw.num_gpus // max(hw.nnodes, 1)) if (hw and hw.num_gpus) else 1
    world = per_node * n_nodes

    # DeepSpeed: stage/offload from the resolved JSON (readers/dsconfig.py)
    zero_stage, off_opt, off_par, buckets, overlap, contiguous = 0, None, None, {}, False, True
    if ds is not None:
        res = getattr(ds, "resolved", {}) or {}
        zo = res.get("zero_optimization") or {}
        zero_stage = _int(zo.get("stage"), 0)
        oo = (zo.get("offload_optimizer") or {}).get("device")
        op = (zo.get("offload_param") or {}).get("device")
        off_opt = oo if oo in ("cpu", "nvme") and zero_stage >= 1 else None
        off_par = op if op in ("cpu", "nvme") and zero_stage == 3 else None
        merged = {**(getattr(ds, "defaults", {}) or {}), **zo}
        for k in ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                  "stage3_max_live_parameters", "stage3_param_persistence_threshold", "sub_group_size"):
            v = merged.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                buckets[k] = float(v)
        overlap = bool(merged.get("overlap_comm", zero_stage == 3))
        contiguous = bool(merged.get("contiguous_gradients", True))
        if hw is None or hw.num_gpus is None:
            tbs = res.get("train_batch_size")
            mbs = res.get("train_micro_batch_size_per_gpu")
            gas = res.get("gradient_accumulation_steps")
            if all(isinstance(x, int) and x > 0 for x in (tbs, mbs, gas)) and tbs % (mbs * gas) == 0:
                world = tbs // (mbs * gas)
                notes.append(f"world size {world} taken from the DeepSpeed train_batch_size")

    # Quantization (LF model_utils/quantization.py:86-227): a PTQ checkpoint wins over quantization_bit.
    from finetune_doctor.quant import resolve_quantization

    qz = resolve_quantization(arch, cfg.get("quantization_bit"), cfg.get("quantization_method"))
    ptq, qbit = qz["ptq_method"], qz["quantization_bit"]
    qmethod = str(cfg.get("quantization_method") or "bnb") if qbit else None
    notes.extend(qz["notes"])

    # compute dtype (parser.py:640-643, patcher.py:375-379 + extras/misc.py:241-248)
    ckpt = arch.dtype or "float32"
    if bf16 or pure_bf16:
        compute = "bfloat16"
    elif fp16:
        compute = "float16"
    else:
        gpu_bf16 = True if (hw is None or hw.bf16 is None) else hw.bf16
        compute = "bfloat16" if gpu_bf16 and ckpt == "bfloat16" else "float16"
        notes.append(f"neither bf16 nor fp16 set: LF infers compute dtype {compute} from the checkpoint ({ckpt})")
    # accelerate enables native AMP only outside DeepSpeed; under DeepSpeed the engine casts the module instead
    autocast = None if ds is not None else ("bfloat16" if bf16 else ("float16" if fp16 else None))

    use_badam = _bool(cfg.get("use_badam"))
    # trainable params upcast to fp32 unless pure_bf16 / badam, or ZeRO-3 without quantization (adapter.py:337-349)
    zero3 = ds is not None and zero_stage == 3
    if pure_bf16 or use_badam or (zero3 and qbit is None and (ptq is None or qz["ptq_dequantized"])):
        trainable_dtype = ckpt
    else:
        trainable_dtype = "float32"
    weights_dtype = ckpt
    if qbit:
        weights_dtype = {4: "nf4" if str(cfg.get("quantization_type") or "nf4") == "nf4" else "fp4", 8: "int8"}.get(
            qbit, f"int{qbit}")
    elif ptq and not qz["ptq_dequantized"]:
        weights_dtype = qz["weights_dtype"] or weights_dtype

    # DeepSpeed with fp16/bf16 casts the module to half precision (engine._configure_distributed_model) and keeps
    # fp32 masters inside its optimizer: GPU-resident trainable params are 2-byte then.
    if ds is not None and (bf16 or fp16) and not qbit:
        trainable_dtype = "bfloat16" if bf16 else "float16"
        weights_dtype = trainable_dtype if ckpt == "float32" else weights_dtype
        if ckpt == "float32":
            notes.append("DeepSpeed casts the fp32 checkpoint to the compute dtype on the GPU")

    stack = stack or {}
    torch_v = parse_version(stack.get("torch"))
    tf_v = parse_version(stack.get("transformers"))
    optim = str(cfg.get("optim") or default_optim(torch_v[:2] if torch_v else None))
    if stack.get("torch") or stack.get("transformers"):
        notes.append("training stack: " + ", ".join(f"{k} {v}" for k, v in stack.items() if v))
    impl = OPTIM_IMPL.get(optim, "foreach")
    if optim == "adamw_torch" and not cfg.get("optim"):
        impl = "foreach"

    attention = str(cfg.get("flash_attn") or "auto")
    attention = {"auto": "sdpa", "disabled": "eager", "sdpa": "sdpa", "fa2": "fa2", "fa3": "fa3"}.get(attention, attention)

    # activation checkpointing is ON unless disable_gradient_checkpointing (checkpointing.py:184-198); the HF key
    # gradient_checkpointing: true re-enables it even then.
    gc = not _bool(cfg.get("disable_gradient_checkpointing")) or _bool(cfg.get("gradient_checkpointing"))
    if arch.model_type == "gemma3n":
        gc = False

    # rm/dpo batches hold chosen + rejected (PairwiseDataCollatorWithPadding); KTO batches hold the targets and
    # their KL counterparts (KTODataCollatorWithPadding): both double the sequences per micro-batch. ORPO and
    # SimPO are pref_loss values of stage dpo, not stages.
    pairwise = stage in ("dpo", "rm", "kto")
    pref_loss = str(cfg.get("pref_loss") or "sigmoid")
    ref_model = stage in ("dpo", "kto") and ft in ("full", "freeze") and pref_loss not in ("orpo", "simpo") \
        and not cfg.get("ref_model")
    if stage in ("dpo", "kto") and cfg.get("ref_model"):
        ref_model = True

    packing = cfg.get("packing")
    packing = (stage == "pt") if packing is None else _bool(packing)
    neat = _bool(cfg.get("neat_packing"))
    if neat:
        packing = True

    resize_vocab = _bool(cfg.get("resize_vocab")) or bool(cfg.get("add_tokens")) or bool(cfg.get("add_special_tokens"))

    gas = _int(cfg.get("gradient_accumulation_steps"), 1)
    mbs = _int(cfg.get("per_device_train_batch_size"), 8)
    lr = cfg.get("learning_rate")
    return Run(
        arch=arch,
        model_name=str(cfg.get("model_name_or_path") or arch.name),
        stage=stage,
        finetuning_type=ft,
        bf16=bf16, fp16=fp16, pure_bf16=pure_bf16,
        weights_dtype=weights_dtype,
        trainable_dtype=trainable_dtype,
        compute_dtype=compute,
        autocast=autocast,
        quantization_bit=qbit,
        quantization_method=qmethod,
        double_quantization=_bool(cfg.get("double_quantization"), True),
        ptq_method=ptq,
        ptq_bits=qz["ptq_bits"],
        ptq_format=qz["ptq_format"],
        ptq_dequantized=qz["ptq_dequantized"],
        ptq_lora_only=qz["ptq_lora_only"],
        quantization_bit_ignored=qz["quantization_bit_ignored"],
        quantization_unknown=qz["quantization_unknown"],
        linear_weight_bytes=qz["linear_weight_bytes"],
        upcast_layernorm=_bool(cfg.get("upcast_layernorm")),
        upcast_lmhead_output=_bool(cfg.get("upcast_lmhead_output")),
        lora_rank=_int(cfg.get("lora_rank"), 8),
        lora_alpha=_int(cfg.get("lora_alpha"), 0) or None,
        lora_target=_split_list(cfg.get("lora_target")) or ("all",),
        additional_target=_split_list(cfg.get("additional_target")),
        use_dora=_bool(cfg.get("use_dora")),
        resize_vocab=resize_vocab,
        freeze_trainable_layers=_int(cfg.get("freeze_trainable_layers"), 2),
        freeze_trainable_modules=_split_list(cfg.get("freeze_trainable_modules")) or ("all",),
        use_galore=_bool(cfg.get("use_galore")),
        use_apollo=_bool(cfg.get("use_apollo")),
        use_badam=use_badam,
        micro_batch=mbs,
        grad_accum=gas,
        seq_len=_int(cfg.get("cutoff_len"), 2048),
        packing=packing,
        neat_packing=neat,
        pairwise=pairwise,
        ref_model=ref_model,
        gradient_checkpointing=gc,
        unsloth_gc=_bool(cfg.get("use_unsloth_gc")),
        attention=attention,
        optim=optim,
        optimizer_impl=impl,
        optim_assumed=not cfg.get("optim") and not stack.get("torch"),
        max_grad_norm=float(cfg.get("max_grad_norm") if isinstance(cfg.get("max_grad_norm"), (int, float)) else 1.0),
        learning_rate=float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else None,
        deepspeed=ds is not None,
        zero_stage=zero_stage,
        offload_optimizer=off_opt,
        offload_param=off_par,
        ds_buckets=buckets,
        overlap_comm=overlap,
        contiguous_gradients=contiguous,
        world_size=max(world, 1),
        nnodes=n_nodes,
        gpus_per_node=max(per_node, 1),
        shifted_logits_copy=bool(tf_v and tf_v[:2] < SHIFTED_LOGITS_COPY_BEFORE),
        notes=tuple(notes),
    )
