"""The memory savers LLaMA-Factory applies, resolved from the YAML keys into `Run` fields.

Every decision below is what LLaMA-Factory does at the snapshot the project follows (ff6d4d1, LF_FACTS.md), with
the upstream file and line. Nothing here computes bytes: the analyzers (analyzers/memory/, analyzers/memory/params.py)
read the fields this module fills.

Liger (``model/model_utils/liger_kernel.py``): ``enable_liger_kernel`` patches the model classes of the model types
listed at lines 41-92 with liger-kernel's ``apply_liger_kernel_to_<type>``; any other type logs "Current model does
not support liger kernel." and patches nothing (line 94). The loader passes ``require_logits = stage not in
["pt", "sft"]`` (``model/loader.py:142``), and then LF turns the fused linear cross-entropy off (lines 97-99).
Which kernels each patch applies by default is read from liger-kernel v0.8.2
``src/liger_kernel/transformers/monkey_patch.py`` (the signatures' defaults; LF requires liger-kernel>=0.6.3,
``requirements/liger-kernel.txt``, and the defaults are the same in v0.6.3). Even when the fused loss is patched
in, the patched forward computes it only when it receives the labels (``skip_logits = self.training and labels is
not None``, liger-kernel v0.8.2 ``transformers/model/qwen2.py:100``); transformers' Trainer pops the labels
before the forward whenever it has a ``compute_loss_func`` or a label smoother (transformers 5.24.0
``trainer.py:2163-2164``), which LF sets for ``use_dft_loss``/``use_eaft_loss``/``use_asft_loss``
(``train/sft/trainer.py:108-125``) and transformers for ``label_smoothing_factor > 0``.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.run.stack import parse_version
from finetune_doctor.run.values import as_bool, as_int, split_list

# why liger's fused linear cross-entropy is off with liger on (Run.liger_flce_off): the values the rule
# liger-fused-loss-off words one by one (facts/run.py declares them)
LIGER_FLCE_OFF = ("patch", "stage", "loss", "label_smoothing")

# model_type -> (fused linear CE, RMSNorm, gated-MLP kernel, RoPE) as liger-kernel v0.8.2 applies them by default
# (monkey_patch.py signatures). "swiglu"/"geglu" fuse the activation and the gate product; granite's patch
# defaults to the plain liger cross-entropy (fused_linear_cross_entropy=False); llava patches only the loss;
# glm4/glm4v, qwen3_next, qwen3_5(_moe) keep their own RoPE (rope=False); gpt_oss has no SwiGLU patch.
LIGER_PATCHES: dict[str, tuple[bool, bool, str | None, bool]] = {
    "gemma": (True, True, "geglu", True), "gemma2": (True, True, "geglu", True),
    "gemma3": (True, True, "geglu", True), "gemma3_text": (True, True, "geglu", True),
    "glm": (True, True, "swiglu", False), "glm4": (True, True, "swiglu", False),
    "glm4v": (True, True, "swiglu", False), "granite": (False, True, "swiglu", True),
    "llama": (True, True, "swiglu", True), "llava": (True, False, None, False),
    "mistral": (True, True, "swiglu", True), "mixtral": (True, True, "swiglu", True),
    "mllama": (True, True, "swiglu", True), "olmo2": (True, True, "swiglu", True),
    "paligemma": (True, True, "geglu", True), "phi3": (True, True, "swiglu", True),
    "qwen2": (True, True, "swiglu", True), "qwen2_vl": (True, True, "swiglu", True),
    "qwen2_5_vl": (True, True, "swiglu", True), "qwen3": (True, True, "swiglu", True),
    "qwen3_moe": (True, True, "swiglu", True), "qwen3_next": (True, True, "swiglu", False),
    "qwen3_5": (True, True, "swiglu", False), "qwen3_5_moe": (True, True, "swiglu", False),
    "gpt_oss": (True, True, None, True),
}

# stages whose trainer reads the logits itself: LF asks liger for the plain cross-entropy instead of the fused
# loss there (loader.py:142, liger_kernel.py:97-99)
LOGITS_STAGES = ("rm", "ppo", "dpo", "kto")
# LongLoRA's shift short attention exists for these model types only (extras/constants.py:136) and only with
# transformers >= 4.45, < 4.48 (model_utils/longlora.py:353, a mandatory version check)
S2ATTN_TYPES = ("llama",)
S2ATTN_TRANSFORMERS = ((4, 45), (4, 48))
S2ATTN_GROUP_RATIO = 0.25     # longlora.py:366 group_size_ratio
FP8_BACKENDS = ("torchao", "te", "msamp")


def liger_known_missing(run: Any) -> bool:
    """True when a stack the user supplied (--env, --context: ``Run.stack_sources``) names liger-kernel as absent
    (no version). `llamafactory-cli env` does not list liger-kernel (extras/env.py at the snapshot), so its absence
    from a pasted env block says nothing and is not read as missing."""
    return any(str(pkg).lower().replace("_", "-") == "liger-kernel"
               and str(ver or "").strip().lower() in ("", "none", "not installed", "n/a")
               for pkg, ver, _src in getattr(run, "stack_sources", ()) or ())


def liger_offerable(run: Any) -> bool:
    """Whether ``enable_liger_kernel: true`` is a remedy LLaMA-Factory would apply to `run` (a run.Run): liger is
    off, LF patches the model type (`LIGER_PATCHES`, model_utils/liger_kernel.py:41-92 at the snapshot), the run is
    not an unsloth load (unsloth brings its own fused loss), and liger-kernel is not known to be missing
    (`liger_known_missing`). That liger-kernel is installable on the training machine is an assumption
    (facts/assume.py ``liger-kernel``)."""
    return (not run.liger_kernel and not run.liger_unpatched and run.arch.model_type in LIGER_PATCHES
            and not getattr(run, "use_unsloth", False) and not liger_known_missing(run))


TRITON_MIN_CC = (7, 0)
"""The lowest CUDA compute capability any Triton release supports: Triton's README lists "NVIDIA GPUs (Compute
Capability 7.0+)" through its 2.x/3.0 releases and 8.0+ in later ones; liger-kernel's kernels are Triton kernels, so
on a Maxwell or Pascal card (5.x, 6.x) none of them compiles (trial 10 case 06: liger was the first fix offered for
two Tesla M10s, compute capability 5.0)."""


def triton_supported(hw: Any) -> bool:
    """Whether Triton (and so liger-kernel) can run on the card of `hw` (types.Hardware): False only for a CUDA card
    whose compute capability is known and below `TRITON_MIN_CC`; an unknown card or one off CUDA is not judged."""
    cc = getattr(hw, "compute_capability", None) if hw is not None else None
    return cc is None or tuple(cc) >= TRITON_MIN_CC


def _liger(cfg: dict[str, Any], arch: ModelArch, stage: str, stack: dict[str, str | None]) -> dict[str, Any]:
    torch_v = parse_version(stack.get("torch"))
    # liger-kernel v0.8.2 fused_linear_cross_entropy.py:18 and :235-255: torch.addmm(out_dtype=float32) on torch
    # >= 2.8 (an unknown torch is taken as today's); CUDA compute capability >= 8 is assumed as well
    out: dict[str, Any] = {"liger_kernel": False, "liger_unpatched": False, "liger_flce": False,
                           "liger_rms_norm": False, "liger_swiglu": False, "liger_rope": False,
                           "liger_flce_off": None, "flce_addmm_out_dtype": torch_v is None or torch_v[:2] >= (2, 8)}
    if not as_bool(cfg.get("enable_liger_kernel")):
        return out
    patch = LIGER_PATCHES.get(arch.model_type)
    if patch is None:
        out["liger_unpatched"] = True
        return out
    flce, rms, mlp, rope = patch
    # the gated-MLP kernel replaces the MLP only where the model has a gated MLP to replace
    out.update(liger_kernel=True, liger_rms_norm=rms and arch.norm == "rmsnorm",
               liger_swiglu=bool(mlp) and arch.gated_mlp, liger_rope=rope and arch.positional == "rope")
    off = None   # one of LIGER_FLCE_OFF
    if not flce:
        off = "patch"
    elif stage in LOGITS_STAGES:
        off = "stage"
    elif any(as_bool(cfg.get(k)) for k in ("use_dft_loss", "use_eaft_loss", "use_asft_loss")):
        off = "loss"
    elif isinstance(cfg.get("label_smoothing_factor"), (int, float)) and cfg["label_smoothing_factor"] > 0:
        off = "label_smoothing"
    out["liger_flce"] = off is None
    out["liger_flce_off"] = off
    return out


def _checkpointing(cfg: dict[str, Any], arch: ModelArch, notes: list[str]) -> dict[str, Any]:
    """``use_reentrant_gc`` (default True, model_args.py:149), forced False under FSDP2
    (checkpointing.py:177-182) and KTransformers with checkpointing (model_args.py, configure_kt_checkpointing);
    ``use_unsloth``: LF loads through unsloth's FastLanguageModel with ``use_gradient_checkpointing="unsloth"``
    (model_utils/unsloth.py:47, :77), unsloth's checkpointing that moves each layer input to host RAM."""
    use_kt = as_bool(cfg.get("use_kt"))
    reentrant = as_bool(cfg.get("use_reentrant_gc"), True) and not (
        use_kt and not as_bool(cfg.get("disable_gradient_checkpointing")))
    unsloth = as_bool(cfg.get("use_unsloth"))
    if unsloth and str(cfg.get("finetuning_type") or "lora") == "oft":
        notes.append("use_unsloth with OFT: LF raises 'Unsloth is currently not supported for OFT.' (adapter.py:283)")
    return {"use_reentrant_gc": reentrant, "use_unsloth": unsloth}


def _attention_savers(cfg: dict[str, Any], arch: ModelArch, stack: dict[str, str | None],
                      notes: list[str]) -> dict[str, Any]:
    """``shift_attn`` (LongLoRA S²-Attn, group_size_ratio 1/4 of the sequence) takes effect only on the listed
    model types and transformers versions; ``rope_scaling`` changes the RoPE frequencies and
    max_position_embeddings (model_utils/rope.py:35-83), never a tensor size of the step."""
    want = as_bool(cfg.get("shift_attn"))
    tf = parse_version(stack.get("transformers"))
    lo, hi = S2ATTN_TRANSFORMERS
    version_ok = tf is not None and lo <= tf[:2] < hi
    applies = want and arch.model_type in S2ATTN_TYPES
    if cfg.get("rope_scaling"):
        notes.append(f"rope_scaling {cfg['rope_scaling']}: RoPE frequencies change, no tensor of the step does")
    return {"shift_attn": applies and version_ok, "shift_attn_requested": want,
            "shift_attn_unsupported": want and not applies,
            "shift_attn_version_error": applies and not version_ok}


def _fp8(cfg: dict[str, Any]) -> dict[str, Any]:
    """``fp8`` and ``fp8_backend`` (hparams/training_args.py:123-139): ``auto`` builds torchao's recipe
    (train/fp8_utils.py:57-62), ``te`` Transformer Engine's (fp8_utils.py:46-50). What LF converts: the decoder's
    linear layers whose sides divide by 16, not the embeddings or lm_head (``module_filter_func``, :72-93); the
    parameters, gradients and optimizer states keep their dtypes and torchao's rowwise float8 linear keeps its
    inputs in high precision for backward (pytorch/ao @024fe94 ``torchao/float8/float8_linear.py``,
    ``manual_float8_matmul_with_args_in_hp``: ``save_for_backward(input_hp, weight_hp_t)``, the fp8 casts are
    per-call temporaries), so the memory terms do not change. Transformer Engine's ``te.Linear`` keeps the
    input of a trainable weight's gradient GEMM quantized; that saving is not modelled (an upper bound for full
    tuning under ``te``)."""
    on = as_bool(cfg.get("fp8"))
    backend = str(cfg.get("fp8_backend") or "auto").lower()
    if backend == "auto":
        backend = "torchao"
    return {"fp8": on, "fp8_backend": backend if on else None}


def _optimizers(cfg: dict[str, Any]) -> dict[str, Any]:
    """The optimizer-side methods and their LF defaults (hparams/finetuning_args.py: GaLore 263-300, APOLLO
    302-350, BAdam 353-400, LoRA+ 91-98, PiSSA 107-118, OFT 143-150, Muon 522)."""
    return {
        "use_muon": as_bool(cfg.get("use_muon")),
        "galore_rank": as_int(cfg.get("galore_rank"), 16),
        "galore_target": split_list(cfg.get("galore_target")) or ("all",),
        "galore_layerwise": as_bool(cfg.get("galore_layerwise")),
        "galore_proj_type": str(cfg.get("galore_proj_type") or "std"),
        "apollo_rank": as_int(cfg.get("apollo_rank"), 16),
        "apollo_target": split_list(cfg.get("apollo_target")) or ("all",),
        "apollo_layerwise": as_bool(cfg.get("apollo_layerwise")),
        "apollo_proj": str(cfg.get("apollo_proj") or "random"),
        "badam_mode": str(cfg.get("badam_mode") or "layer"),
        "badam_update_ratio": float(cfg["badam_update_ratio"]) if isinstance(cfg.get("badam_update_ratio"),
                                                                             (int, float)) else 0.05,
        "loraplus_lr_ratio": float(cfg["loraplus_lr_ratio"]) if isinstance(cfg.get("loraplus_lr_ratio"),
                                                                           (int, float)) else None,
        "use_rslora": as_bool(cfg.get("use_rslora")),
        "pissa_init": as_bool(cfg.get("pissa_init")),
        "oft_rank": as_int(cfg.get("oft_rank"), 0),
        "oft_block_size": as_int(cfg.get("oft_block_size"), 32),
    }


def _kt(cfg: dict[str, Any]) -> dict[str, Any]:
    """KTransformers (hparams/model_args.py:463-520, docs/en/advanced/ktransformers.md): routed MoE experts run on
    the CPU; their weights are the original bf16 ones unless ``kt_weight_path`` points at pre-quantized INT8
    experts; ``kt_cpu_activation`` defaults to ``recompute`` under GPU checkpointing and ``retain`` otherwise
    (``get_kt_activation_policy``)."""
    on = as_bool(cfg.get("use_kt"))
    if not on:
        return {"use_kt": False, "kt_expert_bytes": 2.0, "kt_cpu_activation": None}
    fmt = str((cfg.get("kt_config") or {}).get("kt_expert_weight_format") or "") if isinstance(
        cfg.get("kt_config"), dict) else ""
    fmt = fmt or ("int8" if cfg.get("kt_weight_path") else "bf16")
    expert_bytes = {"bf16": 2.0, "int8": 1.0, "int4": 0.5}.get(fmt.lower(), 2.0)
    gpu_gc = not as_bool(cfg.get("disable_gradient_checkpointing"))
    act = str(cfg.get("kt_cpu_activation") or ("recompute" if gpu_gc else "retain"))
    return {"use_kt": True, "kt_expert_bytes": expert_bytes, "kt_cpu_activation": act}


# unsloth's causal-LM forward computes the loss itself when it is given labels (pt/sft; LF's other stages call the
# model without labels and build their own log-probs). Releases before 2024.11.8 take lm_head's full output in the
# model's dtype and run ``fast_cross_entropy_loss`` on it (unsloth/kernels/cross_entropy_loss.py
# ``Fast_CrossEntropyLoss``, at 015bdef0d9 lines 288-369: one fp32 loss and logsumexp per row, the logits saved, and
# the backward writing the gradient into them in place). From 2024.11.8 (the logits come back empty unless
# UNSLOTH_RETURN_LOGITS=1, 549c5be61c) the loss is fused with lm_head and never materialises the whole
# logits: cut-cross-entropy where installed (fa8e59eb1b "Cut Cross Entropy", 2024-11-17, first released in
# 2024.11.8: ddf118a8fc, 2024-11-21), unsloth_zoo's chunked ``unsloth_fused_ce_loss`` from 806bee2433 (2025-08-13;
# unsloth/models/llama.py:1465-1507 at 015bdef0d9).
UNSLOTH_FUSED_LOSS_FROM = (2024, 11, 8)
# The model types unsloth's FastLanguageModel runs through its own causal-LM forward (unsloth/models/loader.py:828-890
# at 015bdef0d9; cohere and granite at :235-237 in the 2025-01 loader). Every other type is handed to ``FastModel``
# (loader.py:906-), whose forward unsloth_zoo's compiler rewrites: ``unsloth_compile_transformers`` passes the
# forward of every GenerationMixin class of the model's modeling file through ``apply_fused_lm_head``
# (unsloth_zoo/compiler.py:5080-5100 and :2347 at ce232d6c), whose replacements of transformers' loss lines call
# ``unsloth_fused_ce_loss`` whenever labels are given and UNSLOTH_RETURN_LOGITS is unset (:2060-2330, the calls at
# :2105, :2197, :2314): the same chunked loss as the own forward's. It entered the compiler at fc29e051 (2025-08-13,
# "Nightly (#236)"), the day unsloth's own forward took it (806bee2433), so from release 2025.8 a FastModel type's
# loss is "fused"; before, the compiled forward's older form (cut-cross-entropy under conditions not read here)
# is not modelled and the plain loss stays. The compiler skips the rewrite on GPUs of compute capability 7.0,
# torch < 2.5 or Triton < 3 (:5081-5083), which the doctor does not weigh.
UNSLOTH_OWN_FORWARD = frozenset({"llama", "mistral", "gemma", "gemma2", "qwen2", "qwen3", "cohere", "granite"})
UNSLOTH_COMPILED_FUSED_FROM = (2025, 8)
# Before its "dynamic RoPE" change (54dd81de67, 2024-07-18, first in release 2024.8) unsloth's pre_patch replaced
# transformers' LlamaRotaryEmbedding (and Mistral's, with the same class) by its own (unsloth/models/llama.py:999-1000,
# mistral.py:285 at 0a433c33ca), which builds the cos and sin tables for every position up to
# ``max_position_embeddings`` at construction (llama.py:905-926), and each attention layer of transformers < 4.45 holds
# its own ``rotary_emb`` (unsloth's attention reads ``self.rotary_emb.cos_cached`` on the attention module,
# llama.py:318-319). unsloth's from_pretrained sets ``max_position_embeddings = max(max_seq_length, the
# checkpoint's)`` (llama.py:1050-1051, :1076, :1085) and LLaMA-Factory passes ``max_seq_length`` = cutoff_len
# (LF 05ef89cfc src/llmtuner/model/utils/unsloth.py ``_get_unsloth_kwargs``, hparams/parser.py:285); the tables
# are cast to lm_head's dtype after loading (llama.py:1336-1341). From 2024.8 the tables start at min(32768, that
# length) and grow only to the longest batch seen (llama.py ``extend_rope_embedding`` at 54dd81de67).
UNSLOTH_DYNAMIC_ROPE_FROM = (2024, 8)
# The version string "2024.7" spans main from cc4c5d7785 (2024-07-02) to e9ab1ad5bc~1 (2024-07-24): the dynamic RoPE
# commit 54dd81de67 landed on main's first-parent line on 2024-07-18, so a 2024.7 build may have either form (a
# model unsloth first took on 2024-07-18, Mistral-Nemo at 6a437e43f5, can only have run the later builds at scale).
# The window form is kept as the value; facts/assumestack.py `unsloth_rope_build_assumption` weighs the other.
UNSLOTH_AMBIGUOUS_ROPE_RELEASE = (2024, 7)
UNSLOTH_WINDOW_ROPE_TYPES = frozenset({"llama", "mistral"})


def unsloth_release_paths(cfg: dict[str, Any], arch: ModelArch, release: tuple[int, ...]) -> dict[str, Any]:
    """The `Run` fields of an unsloth `release` (a parsed version): ``unsloth_loss`` ("inplace" before 2024.11.8,
    else "fused"; for a type outside UNSLOTH_OWN_FORWARD "fused" from 2025.8, else "") and ``unsloth_rope_positions`` (the positions of each layer's cos/sin tables before 2024.8 for
    the types whose rotary class unsloth replaced, else 0)."""
    if arch.model_type not in UNSLOTH_OWN_FORWARD:   # FastModel: the compiled forward (UNSLOTH_COMPILED_FUSED_FROM)
        return {"unsloth_loss": "fused" if release[:2] >= UNSLOTH_COMPILED_FUSED_FROM else "",
                "unsloth_rope_positions": 0}
    rope = 0
    if release[:2] < UNSLOTH_DYNAMIC_ROPE_FROM and arch.model_type in UNSLOTH_WINDOW_ROPE_TYPES:
        rope = max(as_int(cfg.get("cutoff_len"), 0), int(arch.max_position_embeddings or 0))
    return {"unsloth_loss": "inplace" if release[:3] < UNSLOTH_FUSED_LOSS_FROM else "fused",
            "unsloth_rope_positions": rope}


def _unsloth_loss(cfg: dict[str, Any], arch: ModelArch, stage: str, stack: dict[str, str | None]) -> dict[str, Any]:
    """``unsloth_loss`` and ``unsloth_rope_positions`` (run/model.py): none without use_unsloth or outside pt/sft;
    the paths of the release the stack names (FastModel types included)
    (`unsloth_release_paths`). With no release named, none either: the loss stays charged as transformers' (the
    whole logits with their fp32 upcast), the largest of the forms, because the one long-context unsloth run on
    record that ran out (LlamaFactory#3638: cutoff 102400 on an A100-80GB, 65536 already filling it) is short of
    its card by about 25 GiB under the forms its release's source gives; facts/assumestack.py weighs the releases'
    forms as the ``unsloth-version`` assumption."""
    none = {"unsloth_loss": "", "unsloth_rope_positions": 0}
    if not as_bool(cfg.get("use_unsloth")) or stage not in ("pt", "sft"):
        return none
    v = parse_version(stack.get("unsloth"))
    return none if v is None else unsloth_release_paths(cfg, arch, v)


def resolve_savers(cfg: dict[str, Any], arch: ModelArch, stage: str, stack: dict[str, str | None] | None,
                   notes: list[str]) -> dict[str, Any]:
    """The `Run` fields of the memory savers (run/model.py documents each), from the merged YAML keys `cfg`.

    `stage` is the resolved LF stage, `stack` the training machine's versions (transformers decides whether
    shift_attn can run). Appends what a reader of the estimate should know to `notes`. Raises nothing: a value
    LF would reject is reported by the rules that read these fields.
    """
    stack = stack or {}
    return {**_liger(cfg, arch, stage, stack), **_checkpointing(cfg, arch, notes),
            **_unsloth_loss(cfg, arch, stage, stack),
            **_attention_savers(cfg, arch, stack, notes), **_fp8(cfg), **_optimizers(cfg), **_kt(cfg)}
