"""`Run`: the training run as LLaMA-Factory would execute it — the value every analyzer, fact and probe reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.run.seqpar import sp_cutoff


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
    lora_dropout: float = 0.0   # LF's default (finetuning_args.py); > 0 adds peft's nn.Dropout per adapted module
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
    sp_size: int = 1                      # 360-LLaMA-Factory sequence_parallel_size: ranks sharing one sequence
    sp_mode: str = ""                     # its sequence_parallel_mode (run/seqpar.py)
    hp_cp_size: int = 1                   # HyperParallel's hyper_parallel_cp_size: read, not sized (run/seqpar.py)
    pairwise: bool = False                # DPO/ORPO/SimPO/RM: chosen+rejected in one batch
    ref_model: bool = False               # DPO/KTO full/freeze keep a frozen reference copy
    gen_new_tokens: int = 0               # PPO: max_new_tokens of each rollout's generate (LF default 1024)
    # memory knobs
    gradient_checkpointing: bool = True
    unsloth_gc: bool = False
    attention: str = "sdpa"               # eager | sdpa | fa2 | fa3
    # what eager attention keeps per score element: fp32+cast | half | half+masked (run/attention.py)
    attention_saved: str = "fp32+cast"
    # multimodal (LF ProcessorArguments / FinetuningArguments defaults; analyzers/memory/vision.py)
    image_max_pixels: int = 768 * 768
    image_min_pixels: int = 32 * 32
    video_max_pixels: int = 256 * 256
    video_min_pixels: int = 16 * 16
    freeze_vision_tower: bool = True
    # LF >= 0.9.2 (hparams/finetuning_args.py:550): the projector is frozen by default under full/freeze tuning
    freeze_multi_modal_projector: bool = True
    # the most frames LF samples from one video (ProcessorArguments.video_maxlen: 128 from 0.9.2, 64 before)
    video_maxlen: int = 128
    # 0: a sample's media are images; N > 0: one video of N frames at video_max_pixels (the alternative the
    # image-pixels assumption weighs when the data is not read; analyzers/memory/vision.py `vision_terms`)
    video_frames: int = 0
    # whether images can reach a vision tower at all: False under a template without an image plugin (LF
    # data/template.py: one registered without mm_plugin gets the base plugin; readers/model/byname.py
    # media_template) or data read here that holds no media; the vision term and its assumptions follow it
    # (issue #21, trial 2)
    media_inputs: bool = True
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
    ds_gather_16bit_on_save: bool = False   # zero_optimization.stage3_gather_16bit_weights_on_model_save
    ds_memory_efficient_linear: bool = True  # zero_optimization.memory_efficient_linear (DeepSpeedZeroConfig's default)
    overlap_comm: bool = False
    contiguous_gradients: bool = True     # DeepSpeedZeroConfig's default
    # DeepSpeed AutoTP: `tensor_parallel.autotp_size` of the JSON (run/resolve.py `_deepspeed`); 1 without it.
    # The memory terms do not size it (each rank is sized as holding the whole model): facts/assume.py
    # `_tensor_parallel` and rule deepspeed-autotp-not-sized say so
    autotp_size: int = 1
    # False: a ZeRO-3 model built outside deepspeed.zero.Init, whole on each rank until deepspeed.initialize
    # partitions it (run/engines.py `_zero3_init`)
    zero3_init: bool = True
    world_size: int = 1
    nnodes: int = 1
    gpus_per_node: int = 1
    fsdp: bool = False
    # engines beyond DeepSpeed (run/engines.py); defaults describe a DDP or DeepSpeed run
    engine: str = "ddp"                   # single | ddp | deepspeed | fsdp | megatron
    launcher: str | None = None           # accelerate | torchrun | deepspeed | llamafactory-cli | ray | python
    # replicas of one process's torch.nn.DataParallel (HF Trainer n_gpu > 1 without a distributed launch;
    # analyzers/memory/dataparallel.py); 1 for every other launch, where each rank is its own process
    dp_replicas: int = 1
    ray_num_workers: int | None = None
    fsdp_version: int = 0                 # 1 | 2 under FSDP
    fsdp_sharding: str | None = None      # FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | _HYBRID_SHARD_ZERO2 | NO_SHARD
    fsdp_reshard_after_forward: bool = True
    fsdp_offload_params: bool = False
    fsdp_param_dtype: str | None = None   # dtype units are all-gathered and computed in (mixed precision)
    fsdp_wrap: str | None = None          # TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP
    fsdp_wrap_cls: tuple[str, ...] = ()
    fsdp_min_num_params: int = 0
    fsdp_use_orig_params: bool = True
    fsdp_backward_prefetch: str | None = None
    fsdp_forward_prefetch: bool = False
    fsdp_cpu_ram_efficient_loading: bool = False
    fsdp_sync_module_states: bool = True
    fsdp_activation_checkpointing: bool = False
    fsdp_state_dict_type: str | None = None
    fsdp_source: str | None = None
    fsdp_flat_dtype_conflict: str | None = None  # FSDP1: a unit whose parameters would mix dtypes
    fsdp_ignored: bool = False            # FSDP was asked for but DeepSpeed runs (accelerate checks it first)
    fsdp_ignored_strategy: str | None = None  # an FSDP1 fsdp_sharding_strategy written into an FSDP2 config
    mcore: str | None = None              # mca | bridge: Megatron-Core through LLaMA-Factory
    mcore_tp: int = 1
    mcore_pp: int = 1
    mcore_vpp: int | None = None
    mcore_cp: int = 1
    mcore_ep: int = 1
    mcore_etp: int = 1
    mcore_sp: bool = False
    mcore_dp: int = 1                     # data-parallel ranks: world / (TP x PP x CP)
    mcore_expert_dp: int = 1              # expert data-parallel ranks: world / (ETP x EP x PP)
    mcore_distributed_optimizer: bool = False
    mcore_recompute: str | None = None    # full | selective
    mcore_recompute_method: str | None = None
    mcore_recompute_num_layers: int | None = None
    mcore_optimizer_offload: float = 0.0  # share of fp32 master params and Adam states kept on the host
    mcore_overlap_param_gather: bool = False
    mcore_overlap_grad_reduce: bool = False
    mcore_ce_fusion: bool = False         # cross_entropy_loss_fusion: no fp32 copy of the logits
    mcore_error: str | None = None        # the first parallel layout Megatron-Core refuses, in its words
    mcore_error_key: str | None = None
    shifted_logits_copy: bool = False    # transformers < 4.49 keeps an fp32 copy of the shifted logits
    forward_upcasts_logits: bool = False  # transformers < 4.46: the forward casts lm_head's output to fp32 (stack.py)
    # moments after the steady step (run/moments.py)
    eval_during_training: bool = False   # an eval_strategy with eval data: evaluations interrupt training
    eval_micro_batch: int = 8            # per_device_eval_batch_size (transformers' default 8)
    eval_first_step: int | None = None   # the first evaluation's step; None: at the end of epoch 1
    eval_keeps_preds: bool = False       # compute_accuracy: argmax predictions gathered on the GPU over the eval set
    resume: bool = False                 # resume_from_checkpoint: step 1 already carries the optimizer states
    save_first_step: int | None = None   # the first checkpoint save's step (save_strategy steps)
    stack_sources: tuple[tuple[str, str, str], ...] = ()   # (package, version, where it came from)
    # memory savers as LLaMA-Factory applies them (run/savers.py cites each decision)
    liger_kernel: bool = False            # enable_liger_kernel and LF has a liger patch for the model type
    liger_unpatched: bool = False         # enable_liger_kernel, but LF patches nothing for this model type
    liger_flce: bool = False              # liger's fused linear cross-entropy: the logits are never materialised
    liger_flce_off: str | None = None     # why not, with liger on: patch | stage | loss | label_smoothing
    liger_rms_norm: bool = False          # liger RMSNorm (saves its input and one fp32 rstd per row)
    liger_swiglu: bool = False            # liger SwiGLU/GeGLU (saves gate and up only)
    liger_rope: bool = False              # liger RoPE (rotates q and k in place)
    flce_addmm_out_dtype: bool = True     # torch >= 2.8: the fused loss adds lm_head's gradient in fp32 in place
    use_reentrant_gc: bool = True         # reentrant activation checkpointing (False under FSDP2 / KT)
    use_unsloth: bool = False             # unsloth's FastLanguageModel: offloaded checkpoints, fused loss
    unsloth_loss: str = ""                # unsloth's loss in pt/sft: "inplace" (< 2024.11.8) | "fused" | "" (none)
    unsloth_rope_positions: int = 0       # unsloth < 2024.8: positions of each layer's cos/sin tables (run/savers.py)
    shift_attn: bool = False              # LongLoRA S2-Attn in effect (llama, transformers 4.45-4.47)
    shift_attn_requested: bool = False    # shift_attn set in the config
    shift_attn_unsupported: bool = False  # ... on a model type LF has no S2-Attn for (it warns, does nothing)
    shift_attn_version_error: bool = False  # ... on a transformers version where LF's patch raises
    fp8: bool = False                     # fp8 mixed precision through accelerate
    fp8_backend: str | None = None        # torchao | te | msamp
    use_muon: bool = False                # LF's Muon: 2-D matrices momentum only, the rest AdamW
    galore_rank: int = 16
    galore_target: tuple[str, ...] = ("all",)
    galore_layerwise: bool = False        # per-parameter optimizer steps inside backward
    galore_proj_type: str = "std"
    apollo_rank: int = 16
    apollo_target: tuple[str, ...] = ("all",)
    apollo_layerwise: bool = False
    apollo_proj: str = "random"
    badam_mode: str = "layer"             # layer: one decoder layer trains at a time; ratio: a share of each
    badam_update_ratio: float = 0.05
    loraplus_lr_ratio: float | None = None
    use_rslora: bool = False
    pissa_init: bool = False
    oft_rank: int = 0                     # peft OFT r (0: derived from oft_block_size)
    oft_block_size: int = 32
    use_kt: bool = False                  # KTransformers: routed experts on the CPU
    kt_expert_bytes: float = 2.0          # bytes per routed-expert weight on the host (bf16 2, int8 1, int4 0.5)
    kt_cpu_activation: str | None = None  # retain | recompute (KT's CPU expert activations)
    notes: tuple[str, ...] = ()

    @property
    def rank_seq_len(self) -> int:
        """Tokens of one sequence on one rank: cutoff_len, or under 360-LLaMA-Factory's sequence parallelism its
        cutoff_len (raised to a multiple of 8·sp) divided by ``sp_size`` (run/seqpar.py)."""
        if self.sp_size <= 1:
            return self.seq_len
        return -(-sp_cutoff(self.seq_len, self.sp_size) // self.sp_size)

    @property
    def fills_cutoff(self) -> bool:
        """Every sequence is cutoff_len long whatever the data: packing, or 360-LLaMA-Factory's sequence
        parallelism, which pads each sample to cutoff_len before splitting it (run/seqpar.py)."""
        return self.packing or self.sp_size > 1

    @property
    def tokens_per_micro_batch(self) -> int:
        """Tokens in one forward pass of one rank: micro batch × `rank_seq_len` (× 2 for pairwise data)."""
        return self.micro_batch * self.rank_seq_len * (2 if self.pairwise else 1)

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
            "stack": [{"package": p, "version": v, "source": src} for p, v, src in self.stack_sources],
            "engine": self.engine,
        }

    def facts(self) -> dict[str, Any]:
        # field by field, skipping the architecture: asdict(self) deep-copied the whole ModelArch only to drop it
        # (a quarter of `doctor lint`'s fact assembly)
        state = self.__dict__   # the fields' values, read once per name (fields() rebuilds its tuple per call)
        d = {name: _plain(state[name]) for name in _FACT_FIELDS}
        d["tokens_per_micro_batch"] = self.tokens_per_micro_batch
        d["quantized"] = self.quantized
        d["global_batch"] = self.global_batch
        return d

    def with_(self, **kw: Any) -> "Run":
        """A copy with the fields in `kw` changed: ``dataclasses.replace`` without re-running the 154-argument
        ``__init__`` (Run has no ``__post_init__`` and no ``init=False`` field, so the copy is the same object
        ``replace`` builds; ~0.2 ms a call, a tenth of a lint's per-file work, issue #22). An unknown field
        raises TypeError, as ``replace`` does."""
        unknown = kw.keys() - _RUN_FIELDS
        if unknown:
            raise TypeError(f"Run.with_() got unexpected field(s): {', '.join(sorted(unknown))}")
        new = object.__new__(Run)
        state = dict(self.__dict__)
        state.update(kw)
        object.__setattr__(new, "__dict__", state)
        return new


_SCALARS = (str, int, float, bool, type(None))


def _plain(v: Any) -> Any:
    """`v` as ``dataclasses.asdict`` renders a field value: dataclasses as dicts, containers rebuilt."""
    if type(v) in _SCALARS:   # most fields: nothing to render (the checks below cost ~4 us each)
        return v
    if is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    if isinstance(v, tuple) and hasattr(v, "_fields"):   # a namedtuple, rebuilt positionally as asdict does
        return type(v)(*(_plain(x) for x in v))
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


_RUN_FIELDS = frozenset(f.name for f in fields(Run))
_FACT_FIELDS = tuple(f.name for f in fields(Run) if f.name != "arch")   # Run.facts' keys, in declaration order
