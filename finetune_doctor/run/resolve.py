"""`resolve_run`: the merged YAML keys, the model, the DeepSpeed config and the GPUs → the `Run` LLaMA-Factory
would execute. Each part below resolves one concern and cites where LLaMA-Factory (snapshot ff6d4d1, see
reference/llamafactory/LF_FACTS.md), transformers or DeepSpeed decides it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.readers.model.byname import media_template
from finetune_doctor.run.quantization import resolve_quantization, unsloth_nf4_copy
from finetune_doctor.run.attention import auto_kernel, lf_drops_fa2_on_npu, npu_sdpa_materialises, resolve_attention
from finetune_doctor.run.engines import LaunchInputs, resolve_engine
from finetune_doctor.run.model import Run
from finetune_doctor.run.moments import moment_fields
from finetune_doctor.run.savers import resolve_savers
from finetune_doctor.run.seqpar import sequence_parallel
from finetune_doctor.run.stack import (FORWARD_UPCAST_BEFORE, OPTIM_IMPL, SHIFTED_LOGITS_COPY_BEFORE, default_optim,
                                      parse_version, torch_decides_optim)
from finetune_doctor.run.values import DEFAULT_CUTOFF_LEN, DEFAULT_MICRO_BATCH, as_bool, as_int, check_sizes, \
    packing_of, split_list
from finetune_doctor.types import Hardware

_BUCKET_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                "stage3_max_live_parameters", "stage3_param_persistence_threshold", "sub_group_size",
                "stage3_max_reuse_distance")


def resolve_run(cfg: dict[str, Any], arch: ModelArch, hw: Hardware | None, ds: Any | None = None,
                nnodes: int | None = None, stack: dict[str, str | None] | None = None,
                stack_sources: tuple[tuple[str, str, str], ...] = (), launch: LaunchInputs | None = None) -> Run:
    """Resolve the run LLaMA-Factory would execute from merged YAML keys `cfg`.

    `ds` is a readers.deepspeed.dsconfig.DSConfig (or None); `hw` gives the GPU count per node (world size = GPUs per node ×
    nodes, as ``llamafactory-cli`` launches torchrun with ``--nproc_per_node`` = all visible devices,
    launcher.py:56-134). Unknown hardware → world size 1 unless the DeepSpeed JSON states an explicit
    train_batch_size from which the world size follows. `stack` maps torch/transformers to the training machine's
    versions; `stack_sources` lists (package, version, where it came from) for the report. `launch` (an
    accelerate config and/or a launch command line) decides the engine and the ranks beyond DeepSpeed
    (run/engines.py). Raises InvalidRunValue for a size the memory model cannot compute with (`check_sizes`).
    """
    check_sizes(cfg)
    notes: list[str] = []
    stack = stack or {}
    n_nodes = nnodes or (hw.nnodes if hw else 1) or 1
    per_node = (hw.num_gpus // max(hw.nnodes, 1)) if (hw and hw.num_gpus) else 1
    dsf = _deepspeed(ds, hw, notes)
    world = dsf.pop("world", None) or per_node * n_nodes
    stage = str(cfg.get("stage") or "sft")
    ft = str(cfg.get("finetuning_type") or "lora")
    gas = as_int(cfg.get("gradient_accumulation_steps"), 1)
    mbs = as_int(cfg.get("per_device_train_batch_size"), DEFAULT_MICRO_BATCH)
    lr = cfg.get("learning_rate")
    mgn = cfg.get("max_grad_norm")
    run = Run(
        arch=arch, model_name=str(cfg.get("model_name_or_path") or arch.name), stage=stage, finetuning_type=ft,
        **_precision(cfg, arch, hw, ds, dsf["zero_stage"], notes, stack),
        **_adapters(cfg),
        micro_batch=mbs, grad_accum=gas, seq_len=as_int(cfg.get("cutoff_len"), DEFAULT_CUTOFF_LEN),
        **_stage_data(cfg, stage, ft), **sequence_parallel(cfg, max(world, 1), notes),
        **_memory_knobs(cfg, arch, notes, {**stack, "llamafactory": _stated(stack_sources, "llamafactory")}, hw),
        **_optimizer(cfg, stack, notes),
        max_grad_norm=float(mgn if isinstance(mgn, (int, float)) and not isinstance(mgn, bool) else 1.0),
        learning_rate=float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else None,
        deepspeed=ds is not None, **dsf, **moment_fields(cfg),
        world_size=max(world, 1), nnodes=n_nodes, gpus_per_node=max(per_node, 1),
        **resolve_savers(cfg, arch, stage, stack, notes),
        stack_sources=tuple(stack_sources), notes=tuple(notes),
    )
    return resolve_engine(run, cfg, launch, hw)


def _stated(stack_sources: tuple[tuple[str, str, str], ...], package: str) -> str | None:
    """The version of `package` the inputs state (``--env``, a context file, installed here), else None."""
    return next((v for p, v, _src in stack_sources if p == package), None)


def _deepspeed(ds: Any | None, hw: Hardware | None, notes: list[str]) -> dict[str, Any]:
    """ZeRO stage, offloads, bucket sizes and overlap from the resolved DeepSpeed JSON (readers/deepspeed/dsconfig.py); a
    ``world`` key when the GPUs are unknown and the JSON's explicit batch sizes imply the world size."""
    out: dict[str, Any] = {"zero_stage": 0, "offload_optimizer": None, "offload_param": None, "ds_buckets": {},
                           "overlap_comm": False, "contiguous_gradients": True}
    if ds is None:
        return out
    res = getattr(ds, "resolved", {}) or {}
    zo = res.get("zero_optimization") or {}
    stage = as_int(zo.get("stage"), 0)
    oo = (zo.get("offload_optimizer") or {}).get("device")
    op = (zo.get("offload_param") or {}).get("device")
    merged = {**(getattr(ds, "defaults", {}) or {}), **zo}
    out.update(zero_stage=stage,
               offload_optimizer=oo if oo in ("cpu", "nvme") and stage >= 1 else None,
               offload_param=op if op in ("cpu", "nvme") and stage == 3 else None,
               ds_buckets={k: float(v) for k in _BUCKET_KEYS if isinstance(v := merged.get(k), (int, float))
                           and not isinstance(v, bool)},
               ds_gather_16bit_on_save=merged.get("stage3_gather_16bit_weights_on_model_save",
                                                  merged.get("gather_16bit_weights_on_model_save")) is True,
               ds_memory_efficient_linear=merged.get("memory_efficient_linear", True) is not False,
               overlap_comm=bool(merged.get("overlap_comm", stage == 3)),
               contiguous_gradients=bool(merged.get("contiguous_gradients", True)))
    # DeepSpeed's TensorParallelConfig (runtime/tensor_parallel/config.py:45, autotp_size default 0 = off); the
    # engine splits the model only when it is > 1 (runtime/engine.py:595 at 0.19.8)
    tp = as_int((res.get("tensor_parallel") or {}).get("autotp_size"), 0) if isinstance(
        res.get("tensor_parallel"), dict) else 0
    out["autotp_size"] = tp if tp > 1 else 1
    if hw is None or hw.num_gpus is None:
        tbs, mbs, gas = (res.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                              "gradient_accumulation_steps"))
        if all(isinstance(x, int) and x > 0 for x in (tbs, mbs, gas)) and tbs % (mbs * gas) == 0:
            out["world"] = tbs // (mbs * gas)
            notes.append(f"world size {out['world']} taken from the DeepSpeed train_batch_size")
    return out


def _flags_text(cfg: dict[str, Any]) -> str:
    """How the precision notes name what the YAML set when it turns on neither bf16 nor fp16: "bf16: false,
    fp16 not set" rather than "neither ... set" for a `bf16: false` the user wrote (trial 4, LlamaFactory#7531)."""
    said = [f"{k}: {str(cfg[k]).lower()}" for k in ("bf16", "fp16") if k in cfg and cfg[k] is not None]
    if not said:
        return "neither bf16 nor fp16 set"
    unset = [f"{k} not set" for k in ("bf16", "fp16") if k not in cfg or cfg[k] is None]
    return ", ".join(said + unset)


def _precision(cfg: dict[str, Any], arch: ModelArch, hw: Hardware | None, ds: Any | None, zero_stage: int,
               notes: list[str], stack: dict[str, str | None] | None = None) -> dict[str, Any]:
    """Weights, trainable and compute dtypes, autocast and quantization, as LLaMA-Factory resolves them
    (LF_FACTS.md §2: weights load in the checkpoint dtype; trainable params are upcast to fp32 unless pure_bf16)."""
    bf16, fp16, pure_bf16 = as_bool(cfg.get("bf16")), as_bool(cfg.get("fp16")), as_bool(cfg.get("pure_bf16"))
    # Quantization (LF model_utils/quantization.py:86-227): a PTQ checkpoint wins over quantization_bit, except
    # where use_unsloth hands the load to unsloth, whose mapper swaps an MXFP4 checkpoint for its NF4 copy
    qarch = arch
    if unsloth_nf4_copy(arch, cfg, parse_version((stack or {}).get("unsloth"))):
        qarch = replace(arch, quant=None)
        notes.append("use_unsloth with quantization_bit 4: unsloth loads its bitsandbytes NF4 copy of this MXFP4 "
                     "checkpoint (unsloth-bnb-4bit, experts as 4-bit linears) instead of LF's dequantised bf16")
    qz = resolve_quantization(qarch, cfg.get("quantization_bit"), cfg.get("quantization_method"))
    ptq, qbit = qz["ptq_method"], qz["quantization_bit"]
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
        notes.append(f"{_flags_text(cfg)}: LF infers compute dtype {compute} from the checkpoint ({ckpt})")
    # trainable params upcast to fp32 unless pure_bf16 / badam, or ZeRO-3 without quantization (adapter.py:337-349)
    zero3 = ds is not None and zero_stage == 3
    if pure_bf16 or as_bool(cfg.get("use_badam")) or (zero3 and qbit is None and (ptq is None or qz["ptq_dequantized"])):
        trainable_dtype = ckpt
    else:
        trainable_dtype = "float32"
    weights_dtype = ckpt
    if qbit:
        weights_dtype = {4: "nf4" if str(cfg.get("quantization_type") or "nf4") == "nf4" else "fp4", 8: "int8"}.get(
            qbit, f"int{qbit}")
    elif ptq and not qz["ptq_dequantized"]:
        weights_dtype = qz["weights_dtype"] or weights_dtype
    if arch.model_type == "qwen" and not qbit and not ptq and compute in ("bfloat16", "float16"):
        # Qwen(1)/Qwen-VL remote code: LF sets its config.bf16/fp16/fp32 to the compute dtype (LF model/patcher.py
        # L389-392) and modeling_qwen.py casts the transformer and lm_head to it in QWenLMHeadModel.__init__, so
        # `fp16: true` loads a bf16 checkpoint as fp16 (trial 13 case 07: "weights bf16" on a V100 run)
        weights_dtype = compute
    # DeepSpeed with fp16/bf16 casts the module to half precision (engine._configure_distributed_model) and keeps
    # fp32 masters inside its optimizer: GPU-resident trainable params are 2-byte then.
    if zero3 and not (bf16 or fp16 or pure_bf16) and qbit is None and ptq is None:
        # With neither flag HF writes bf16/fp16 "enabled: false" into the DeepSpeed config, and zero.Init then
        # creates every floating tensor in fp32 (deepspeed/runtime/zero/partition_parameters.py `_set_dtype`:
        # neither bfloat16 nor float16 enabled -> torch.float; the tensor-creation wrappers cast to it): the
        # whole model, frozen parts included, is fp32 whatever the checkpoint's dtype ("ZeRO3 already in fp32",
        # LF adapter.py:344-345).
        trainable_dtype = weights_dtype = "float32"
    if ds is not None and (bf16 or fp16) and not qbit:
        trainable_dtype = "bfloat16" if bf16 else "float16"
        weights_dtype = trainable_dtype if ckpt == "float32" else weights_dtype
        if ckpt == "float32":
            notes.append("DeepSpeed casts the fp32 checkpoint to the compute dtype on the GPU")
    if not (bf16 or fp16 or pure_bf16) and trainable_dtype == "float32" and (
            str(cfg.get("finetuning_type")) == "full" or weights_dtype == "float32"):
        # No autocast and every parameter upcast to fp32 (adapter.py:337-349): the inferred dtype above is only the
        # load dtype; every matmul, activation and logit of a full fine-tune is fp32.
        compute = "float32"
        notes[:] = [n for n in notes if not n.startswith(_flags_text(cfg) + ": LF infers")]
        notes.append(f"{_flags_text(cfg)}: the {ckpt} checkpoint's trainable parameters are upcast to fp32 "
                     + ("(DeepSpeed ZeRO-3 creates the whole model in fp32) " if zero3 else "(LF's upcast) ")
                     + "and no autocast runs, so this run computes in fp32")
    return {
        "bf16": bf16, "fp16": fp16, "pure_bf16": pure_bf16, "weights_dtype": weights_dtype,
        "trainable_dtype": trainable_dtype, "compute_dtype": compute,
        # accelerate enables native AMP only outside DeepSpeed; under DeepSpeed the engine casts the module instead
        "autocast": None if ds is not None else ("bfloat16" if bf16 else ("float16" if fp16 else None)),
        "quantization_bit": qbit, "quantization_method": str(cfg.get("quantization_method") or "bnb") if qbit else None,
        "double_quantization": as_bool(cfg.get("double_quantization"), True), "ptq_method": ptq,
        **{k: qz[k] for k in ("ptq_bits", "ptq_format", "ptq_dequantized", "ptq_lora_only", "quantization_bit_ignored",
                              "quantization_unknown", "linear_weight_bytes")},
        "upcast_layernorm": as_bool(cfg.get("upcast_layernorm")),
        "upcast_lmhead_output": as_bool(cfg.get("upcast_lmhead_output")),
    }


def _adapters(cfg: dict[str, Any]) -> dict[str, Any]:
    """The trainable set: LoRA/OFT, freeze tuning and the optimizer-side methods (finetuning_args.py)."""
    return {
        "lora_rank": as_int(cfg.get("lora_rank"), 8), "lora_alpha": as_int(cfg.get("lora_alpha"), 0) or None,
        "lora_target": split_list(cfg.get("lora_target")) or ("all",),
        "additional_target": split_list(cfg.get("additional_target")), "use_dora": as_bool(cfg.get("use_dora")),
        "lora_dropout": _dropout_rate(cfg.get("lora_dropout")),
        "resize_vocab": as_bool(cfg.get("resize_vocab")) or bool(cfg.get("add_tokens"))
        or bool(cfg.get("add_special_tokens")),
        "freeze_trainable_layers": as_int(cfg.get("freeze_trainable_layers"), 2),
        "freeze_trainable_modules": split_list(cfg.get("freeze_trainable_modules")) or ("all",),
        "use_galore": as_bool(cfg.get("use_galore")), "use_apollo": as_bool(cfg.get("use_apollo")),
        "use_badam": as_bool(cfg.get("use_badam")),
    }


def _dropout_rate(v: Any) -> float:
    """``lora_dropout`` as a probability: LF's default 0.0 (finetuning_args.py ``lora_dropout``) when unset, not a
    number or outside [0, 1] (peft's ``nn.Dropout`` refuses p outside [0, 1]; the key-schema rules report a wrong
    type). Only whether it is above 0 changes memory (activations.py ``_lora_dropout_bytes``)."""
    if isinstance(v, bool):
        return 0.0
    try:
        p = float(v)
    except (TypeError, ValueError):
        return 0.0
    return p if 0.0 <= p <= 1.0 else 0.0


def _stage_data(cfg: dict[str, Any], stage: str, ft: str) -> dict[str, Any]:
    """What the stage's data collator puts in a micro batch, and whether a reference model is kept.

    rm/dpo batches hold chosen + rejected (PairwiseDataCollatorWithPadding); KTO batches hold the targets and their
    KL counterparts (KTODataCollatorWithPadding): both double the sequences per micro-batch. ORPO and SimPO are
    pref_loss values of stage dpo, not stages; they keep no reference model. Packing is on by default for pt.
    """
    pref_loss = str(cfg.get("pref_loss") or "sigmoid")
    ref_model = stage in ("dpo", "kto") and ft in ("full", "freeze") and pref_loss not in ("orpo", "simpo") \
        and not cfg.get("ref_model")
    if stage in ("dpo", "kto") and cfg.get("ref_model"):
        ref_model = True
    packing, _, neat = packing_of(cfg, stage)
    # PPO generates up to max_new_tokens per rollout (LF hparams/generating_args.py:53-56, default 1024)
    gen = as_int(cfg.get("max_new_tokens"), 1024) if stage == "ppo" else 0
    return {"pairwise": stage in ("dpo", "rm", "kto"), "ref_model": ref_model, "packing": packing,
            "neat_packing": neat, "gen_new_tokens": gen}


def _memory_knobs(cfg: dict[str, Any], arch: ModelArch, notes: list[str] | None = None,
                  stack: dict[str, str | None] | None = None, hw: Hardware | None = None) -> dict[str, Any]:
    """Activation checkpointing and the attention kernel.

    Checkpointing is ON unless disable_gradient_checkpointing (checkpointing.py:184-198); the HF key
    gradient_checkpointing: true re-enables it even then; LF never checkpoints Gemma-3n. A model whose own code
    runs its attention (run/attention.py) gets eager attention whatever ``flash_attn`` says; ``auto`` is eager on a
    LLaMA or Mistral under a transformers before 4.36 (`stack`, run/attention.py `auto_kernel`); SDPA on an Ascend
    NPU (`hw`) under a transformers before 4.57 keeps the probabilities like eager attention (run/attention.py
    `npu_sdpa_materialises`); ``fa2`` on an NPU under a LLaMA-Factory before 0.9.4 (``stack['llamafactory']``) is
    transformers' default (run/attention.py `lf_drops_fa2_on_npu`).
    """
    gc = not as_bool(cfg.get("disable_gradient_checkpointing")) or as_bool(cfg.get("gradient_checkpointing"))
    attention = str(cfg.get("flash_attn") or "auto")
    auto = auto_kernel(arch, parse_version((stack or {}).get("transformers")))
    if auto == "eager" and attention == "auto" and notes is not None:
        notes.append(f"flash_attn: auto under transformers {(stack or {}).get('transformers')}: eager attention "
                     "(SDPA is transformers' default from 4.36.0)")
    attention = {"auto": auto, "disabled": "eager", "sdpa": "sdpa", "fa2": "fa2", "fa3": "fa3"}.get(attention,
                                                                                                   attention)
    lf = (stack or {}).get("llamafactory")
    if attention == "fa2" and lf_drops_fa2_on_npu(hw, parse_version(lf)):
        attention = auto
        if notes is not None:
            notes.append(f"flash_attn: fa2 on an Ascend NPU under LLaMA-Factory {lf}: FlashAttention-2 is not "
                         f"installed there, so the model runs transformers' default ({auto}); LLaMA-Factory "
                         "0.9.4 keeps fa2 on an NPU")
    attention, saved, note = resolve_attention(attention, arch)
    if note and notes is not None:
        notes.append(note)
    tf_v = parse_version((stack or {}).get("transformers"))
    if attention == "sdpa" and npu_sdpa_materialises(hw, tf_v):
        attention, saved = "eager", "half"
        if notes is not None:
            notes.append(f"SDPA on an Ascend NPU under transformers {(stack or {}).get('transformers')}: the padded "
                         "batch's float mask sends it to torch_npu's composite path, which materialises the "
                         "attention scores (a boolean mask reaches the fused operator from transformers 4.57)")
    return {"gradient_checkpointing": gc and arch.model_type != "gemma3n", "unsloth_gc": as_bool(cfg.get("use_unsloth_gc")),
            "attention": attention, "attention_saved": saved,
            # the processor arguments LF reads (hparams/model_args.py:305-330) and freeze_vision_tower (:546)
            **media_knobs(cfg, parse_version(lf)),
            "media_inputs": media_template(cfg.get("template"))}


def media_knobs(cfg: dict[str, Any], lf: tuple[int, ...] | None) -> dict[str, Any]:
    """The processor bounds and freeze flags LF reads (hparams/model_args.py ProcessorArguments, hparams/
    finetuning_args.py:546-553), each the YAML's value or the judged release's default. From 0.9.2:
    ``image_max_pixels`` 768·768, ``video_max_pixels`` 256·256, ``video_maxlen`` 128, the projector frozen
    (``freeze_multi_modal_projector``). 0.9.0/0.9.1 bounded by ``image_resolution``/``video_resolution`` (0.9.0 a
    side of 512 / 128 px, hparams/model_args.py:59-74 of the 0.9.0 wheel; 0.9.1 the same area as a
    pixel count), sampled at most 64 frames and had no projector flag (0.9.0 model_utils/visual.py
    get_forbidden_modules freezes the vision tower only, so full tuning trains the projector); catalog/
    lf_releases.json lists the keys and defaults by release. An unknown release (`lf` None) takes the largest
    bounds: those of 0.9.2 onwards."""
    old = lf is not None and lf[:3] < (0, 9, 2)
    img, vid, frames = (512 * 512, 128 * 128, 64) if old else (768 * 768, 256 * 256, 128)
    # the releases that take image_resolution/video_resolution bound by the YAML's value as they read it (trial 16,
    # LF#5590: `image_resolution: 448` on 0.9.1 was sized at 0.9.2's 768·768)
    img, vid = _retired_bound(cfg, "image_resolution", lf, img), _retired_bound(cfg, "video_resolution", lf, vid)
    return {**{k: as_int(cfg.get(k), d) for k, d in (("image_max_pixels", img), ("image_min_pixels", 32 * 32),
                                                     ("video_max_pixels", vid), ("video_min_pixels", 16 * 16))},
            "freeze_vision_tower": as_bool(cfg.get("freeze_vision_tower"), True),
            "freeze_multi_modal_projector": as_bool(cfg.get("freeze_multi_modal_projector"), not old),
            "video_maxlen": as_int(cfg.get("video_maxlen"), frames)}


def _retired_bound(cfg: dict[str, Any], key: str, lf: tuple[int, ...] | None, default: int) -> int:
    """The pixel bound LLaMA-Factory `lf` (0.9.0/0.9.1, the releases that declare it) takes from `key`
    (``image_resolution``/``video_resolution``): a side length L in the catalog's ``side_length_in`` releases (0.9.0
    data/mm_plugin.py: ``max(w, h) > image_resolution`` scales to that side, so at most L² pixels), a pixel count
    in the others (0.9.1: ``w * h > image_resolution``); `default` (pixels) when the key is not set or the release
    does not read it (catalog/lf_keys.json ``retired``, readers/config/keyschema.py `_pixels` for the fix)."""
    v = cfg.get(key)
    if lf is None or lf[:3] >= (0, 9, 2) or not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        return default
    from finetune_doctor.readers.config.keyschema import load_schema

    side_in = (load_schema().get("retired", {}).get(key) or {}).get("side_length_in") or ()
    return v * v if ".".join(map(str, lf[:3])) in side_in else v


def _optimizer(cfg: dict[str, Any], stack: dict[str, str | None], notes: list[str]) -> dict[str, Any]:
    """The optimizer and its implementation (transformers' default follows the training machine's torch,
    LF_FACTS §3), and the loss's shifted-logits copy before transformers 4.49."""
    torch_v = parse_version(stack.get("torch"))
    tf_v = parse_version(stack.get("transformers"))
    optim = str(cfg.get("optim") or default_optim(torch_v[:2] if torch_v else None, tf_v))
    return {"optim": optim, "optimizer_impl": OPTIM_IMPL.get(optim, "foreach"),
            # a transformers before 4.54 decides the default without torch (run/stack.py FUSED_DEFAULT_FROM)
            "optim_assumed": not cfg.get("optim") and not stack.get("torch") and torch_decides_optim(tf_v),
            "shifted_logits_copy": bool(tf_v and tf_v[:2] < SHIFTED_LOGITS_COPY_BEFORE),
            "forward_upcasts_logits": bool(tf_v and tf_v[:2] < FORWARD_UPCAST_BEFORE)}
