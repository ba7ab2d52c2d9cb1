"""Build a model from its config at a chosen depth and set it up for training as LLaMA-Factory does.

Used by the simulate probe (inside FakeTensorMode) and the gpu probe (real tensors on the GPU). LF's setup order and
precision rules are cited per function (reference/llamafactory/LF_FACTS.md §2-3).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

from finetune_doctor.dtypes import optimizer_state_bytes, quantized_weight_tensors
from finetune_doctor.errors import InputError
from finetune_doctor.probes.fakemode import dtype_of, load_torch, storage_dtype
from finetune_doctor.probes.liger import apply_liger
from finetune_doctor.probes.spec import ProbeSpec


_PER_LAYER_LISTS = ("layer_types",)


def _config_for_depth(cfg: dict[str, Any], n_layers: int) -> dict[str, Any]:
    out = dict(cfg)
    out["num_hidden_layers"] = n_layers
    for key in _PER_LAYER_LISTS:
        if isinstance(out.get(key), list) and len(out[key]) >= n_layers:
            out[key] = out[key][:n_layers]
    if isinstance(out.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in out["mlp_only_layers"] if i < n_layers]
    return out


def build_config(spec: ProbeSpec, n_layers: int, notes: list[str]):
    """A transformers config of `spec`'s model at `n_layers` layers (falls back to the stand-in config)."""
    from transformers import AutoConfig

    attn = "eager" if spec.attention == "eager" else "sdpa"
    for which, cfg in (("config.json", spec.model_config), ("stand-in", spec.standin_config)):
        if not cfg:
            continue
        cfg = _config_for_depth(cfg, n_layers)
        mt = cfg.pop("model_type", None) or spec.model_type
        try:
            conf = AutoConfig.for_model(mt, **cfg)
        except (ValueError, KeyError, TypeError) as err:
            notes.append(f"transformers cannot build model_type {mt!r} ({str(err).splitlines()[0][:80]}); "
                         "simulated a LLaMA-family stand-in of the same shapes")
            continue
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        if type(conf) not in MODEL_FOR_CAUSAL_LM_MAPPING:
            text = conf.get_text_config() if hasattr(conf, "get_text_config") else None
            if text is not None and type(text) in MODEL_FOR_CAUSAL_LM_MAPPING:
                conf = text
            else:
                notes.append(f"{mt} has no causal-LM class in transformers (a multimodal wrapper): its language "
                             "model is simulated from the same shapes")
                continue
        conf._attn_implementation = attn
        conf.use_cache = False
        if _is_moe(conf) and spec.trainable_dtype == "float32" and spec.finetuning_type in ("full", "freeze"):
            # transformers' default grouped_mm expert kernel takes bf16 only; fp32 trainable experts run the
            # per-expert loop
            conf._experts_implementation = "eager"
            notes.append("fp32 trainable experts run transformers' eager expert loop (grouped_mm needs bf16)")
        if which == "stand-in" and mt != spec.model_type:
            notes.append(f"{spec.model_type} simulated as a {mt} of the same shapes (parameter count equal)")
        return conf
    raise InputError(f"no buildable config for model_type {spec.model_type!r}")


def _is_moe(conf: Any) -> bool:
    return any(getattr(conf, k, None) for k in ("num_experts", "num_local_experts", "n_routed_experts"))


def _set_requires_grad(model: Any, spec: ProbeSpec) -> None:
    """Full / freeze trainable sets as LF sets them (adapter.py `_setup_full_tuning` / `_setup_freeze_tuning`)."""
    if spec.finetuning_type == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return
    for p in model.parameters():
        p.requires_grad_(False)
    if spec.finetuning_type != "freeze":
        return
    layers = decoder_layers(model)
    n, k = len(layers), spec.freeze_trainable_layers
    ids = range(n - k, n) if k > 0 else range(min(-k, n))
    mods = set(spec.freeze_trainable_modules)
    for i in ids:
        for name, p in layers[i].named_parameters():
            if "all" in mods or any(m in name.split(".") for m in mods):
                p.requires_grad_(True)


def decoder_layers(model: Any):
    torch = load_torch()
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and name.split(".")[-1] in ("layers", "h", "blocks"):
            if best is None or len(mod) > len(best):
                best = mod
    if best is None:
        raise InputError("cannot find the decoder layers of the model to probe")
    return best


def _lora_targets(model: Any, spec: ProbeSpec) -> list[str]:
    """Leaf module names LoRA wraps. ``all``: every Linear except the output layer (LF model_utils/misc.py
    `find_all_linear_modules`: lm_head, plus output_layer/output for chatglm/internlm2)."""
    torch = load_torch()
    if "all" not in spec.lora_target:
        return list(spec.lora_target)
    forbidden = {"lm_head", "output_layer", "output"}
    names = set()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] not in forbidden:
            names.add(name.split(".")[-1])
    return sorted(names)


def _apply_adapter(model: Any, spec: ProbeSpec, notes: list[str]):
    import peft

    targets = _lora_targets(model, spec)
    to_save = ["embed_tokens", "lm_head"] if spec.resize_vocab else None
    if spec.finetuning_type == "lora":
        cfg = peft.LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha_value, lora_dropout=spec.lora_dropout,
                              target_modules=targets, use_dora=spec.use_dora, modules_to_save=to_save,
                              task_type="CAUSAL_LM")
    else:
        # LF defaults: oft_rank 0, oft_block_size 32 (finetuning_args.py OftArguments)
        cfg = peft.OFTConfig(r=spec.oft_rank, oft_block_size=spec.oft_block_size, target_modules=targets,
                             modules_to_save=to_save, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, cfg)


def _cast_trainable(model: Any, spec: ProbeSpec) -> None:
    """LF upcasts every trainable parameter to fp32 unless pure_bf16 / BAdam / ZeRO-3 (adapter.py:337-349);
    run.py resolved that into `trainable_dtype`."""
    dt = dtype_of(spec.trainable_dtype if spec.trainable_dtype in ("float32", "bfloat16", "float16") else "float32")
    if spec.sharded and spec.deepspeed and spec.trainable_dtype != "float32":
        # ZeRO-3 stand-in: FSDP2's sharded parameters play DeepSpeed's fp32 master partition
        dt = dtype_of("float32")
    for p in model.parameters():
        if p.requires_grad and p.dtype != dt:
            p.data = p.data.to(dt)


def _gc_func(spec: ProbeSpec, state: "StepState"):
    """LF's checkpointing function: checkpoint only layers with trainable params and make their first floating
    input require grad (model_utils/checkpointing.py:100-123, `get_custom_gradient_checkpointing_func`)."""
    torch = load_torch()
    from torch.utils.checkpoint import checkpoint

    reentrant = spec.use_reentrant and not spec.sharded   # FSDP2 needs non-reentrant (LF forces it, :177-182)

    def func(fn, *args, **kwargs):
        state.gc_calls += 1
        module = checkpointed_layer(fn)
        if any(p.requires_grad for p in module.parameters()):
            for a in args:
                if torch.is_tensor(a) and torch.is_floating_point(a):
                    a.requires_grad_(True)
                    break
            state.checkpointing += 1
            try:
                out = checkpoint(fn, *args, use_reentrant=reentrant, **kwargs)
            finally:
                state.checkpointing -= 1
            if state.on_checkpoint_exit is not None:
                state.on_checkpoint_exit(module, out)
            return out
        return fn(*args, **kwargs)

    return func


def checkpointed_layer(fn: Any) -> Any:
    """The decoder layer behind the callable transformers hands to ``_gradient_checkpointing_func``.

    Three conventions exist: ``layer.__call__`` (the older per-model loops, before GradientCheckpointingLayer),
    ``partial(super().__call__, **kwargs)`` (GradientCheckpointingLayer as seen in 5.17 on the GPU machine) and
    ``partial(Layer.forward, layer, **kwargs)`` (5.24 here, modeling_layers.py, which checkpoints ``forward`` so
    FSDP2 hooks stay outside). Raises RuntimeError on
    anything else: silently running the layer without checkpointing would measure a different run (the gpu probe
    on transformers 5.17 did exactly that before this was written; benchmarks/results/gpu_measure.md).
    """
    import torch

    cands = []
    if isinstance(fn, functools.partial):
        cands += [fn.args[0] if fn.args else None, getattr(fn.func, "__self__", None)]
    cands.append(getattr(fn, "__self__", None))
    for c in cands:
        if isinstance(c, torch.nn.Module):
            return c
    raise RuntimeError(f"gradient checkpointing: cannot tell which layer {fn!r} belongs to (an unknown transformers "
                       "calling convention); refusing to simulate a run without checkpointing")


def _quantize_standin(model: Any, spec: ProbeSpec, notes: list[str]) -> None:
    """Replace every decoder Linear by a module with bitsandbytes' storage layout (transformers keeps lm_head
    unquantized, ``get_keys_to_not_convert``).

    4-bit (``bnb.nn.Linear4bit`` / ``functional.quantize_4bit``): packed uint8 of numel/2 bytes, absmax fp32 per
    block of 64; with double quantization (LF default) the absmax is 8-bit per block of 64 plus an fp32 absmax per
    256 of those and a 256-entry fp32 code. 8-bit (``Linear8bitLt``): int8 weight + one fp32 scale per row.
    Forward and backward dequantize to the compute dtype per call (``MatMul4Bit``), a transient of out×in.
    """
    torch = load_torch()
    bits = spec.quantization_bit
    cdt = dtype_of(spec.compute_dtype if spec.compute_dtype in ("bfloat16", "float16") else "bfloat16")

    from torch._subclasses.fake_tensor import FakeTensor

    def _dequantized(shape, like):
        w = torch.empty(shape, dtype=like.dtype, device=like.device)
        if not isinstance(like, FakeTensor):
            w.normal_(0.0, 0.02)   # real runs (gpu probe, CPU tests) need finite values, not the packed codes
        return w

    class _Dequant(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, packed, shape):
            ctx.shape = shape
            ctx.save_for_backward(packed)
            w = _dequantized(shape, x)   # dequantized weight (transient)
            return torch.nn.functional.linear(x, w)

        @staticmethod
        def backward(ctx, g):
            (packed,) = ctx.saved_tensors
            w = _dequantized(ctx.shape, g)
            return g @ w, None, None

    class QuantLinear(torch.nn.Linear):
        def forward(self, x):
            out = _Dequant.apply(x.to(cdt), self.weight, (self.out_features, self.in_features))
            if self.bias is not None:
                out = out + self.bias.to(out.dtype)
            return out

    def make(lin):
        # sizes from the shared table (dtypes.py `quantized_weight_tensors`, bitsandbytes' layout)
        sizes = quantized_weight_tensors(lin.in_features * lin.out_features, lin.out_features, bits,
                                         spec.double_quantization)
        q = QuantLinear.__new__(QuantLinear)
        torch.nn.Module.__init__(q)
        q.in_features, q.out_features = lin.in_features, lin.out_features
        if bits == 4:
            q.weight = torch.nn.Parameter(torch.empty(sizes["weight"], 1, dtype=torch.uint8), requires_grad=False)
            if spec.double_quantization:
                q.register_buffer("absmax", torch.empty(sizes["absmax"], dtype=torch.uint8))
                q.register_buffer("absmax2", torch.empty(sizes["absmax2"] // 4, dtype=torch.float32))
                q.register_buffer("code", torch.empty(sizes["code"] // 4, dtype=torch.float32))
            else:
                q.register_buffer("absmax", torch.empty(sizes["absmax"] // 4, dtype=torch.float32))
        else:
            q.weight = torch.nn.Parameter(torch.empty(lin.out_features, lin.in_features, dtype=torch.int8),
                                          requires_grad=False)
            q.register_buffer("SCB", torch.empty(sizes["SCB"] // 4, dtype=torch.float32))
        q.bias = lin.bias
        return q

    layers = decoder_layers(model)
    count = 0
    for layer in layers:
        for name, mod in list(layer.named_modules()):
            if isinstance(mod, torch.nn.Linear) and not isinstance(mod, QuantLinear):
                parent = layer.get_submodule(name.rsplit(".", 1)[0]) if "." in name else layer
                setattr(parent, name.rsplit(".", 1)[-1], make(mod))
                count += 1
    notes.append(f"bitsandbytes {bits}-bit weights modelled by a stand-in with bnb's storage layout "
                  f"({'0.5 B/param packed + absmax' if bits == 4 else '1 B/param + row scales'}"
                  f"{', double quantization' if bits == 4 and spec.double_quantization else ''}), dequantized per "
                  "call; bitsandbytes needs CUDA, so its kernels are not run")


@dataclass
class StepState:
    """Where a probe's training step is: step, micro-batch, phase, layers seen and gradient checkpointing."""

    step: int = 0
    micro: int = 0
    phase: str = "setup"
    n_layers: int = 0
    gc_calls: int = 0   # calls of the checkpointing function: 0 after a forward means checkpointing never engaged
    checkpointing: int = 0   # > 0 while a layer runs inside torch.utils.checkpoint (its forward, not the recompute)
    # called with (layer, output) when a checkpointed layer returns: the output autograd sees (step.py)
    on_checkpoint_exit: Any = None


def _make_optimizer(params: list, spec: ProbeSpec, notes: list[str]):
    """The optimizer LF/HF would create, or None when its states are added analytically."""
    torch = load_torch()
    impl = spec.optimizer_impl
    if spec.deepspeed and not spec.sharded:
        return None   # DeepSpeed's optimizer works on its fp32 partitions: analytic (see module docstring)
    if impl in ("fused", "foreach", "forloop", "paged"):
        kw = {"fused": dict(fused=True), "foreach": dict(foreach=True, fused=False),
              "forloop": dict(foreach=False, fused=False), "paged": dict(fused=True)}[impl]
        if impl == "paged":
            notes.append("paged 32-bit AdamW simulated as fused AdamW (paged states stay on the GPU until evicted)")
        return torch.optim.AdamW(params, lr=1e-5, **kw)
    if impl == "adafactor":
        from transformers.optimization import Adafactor

        # HF Trainer's `adafactor` optim: scale_parameter=False, relative_step=False (trainer.py get_optimizer_cls)
        return Adafactor(params, lr=1e-5, scale_parameter=False, relative_step=False)
    if impl == "sgd":
        return torch.optim.SGD(params, lr=1e-5)
    if impl == "adagrad":
        return torch.optim.Adagrad(params, lr=1e-5, foreach=True)
    if impl == "rmsprop":
        return torch.optim.RMSprop(params, lr=1e-5, foreach=True)
    return None


def _analytic_state_bytes(params: list, spec: ProbeSpec) -> tuple[int, str]:
    """Optimizer-state bytes of the implementations that are not run, and a note saying how they were counted.

    Per tensor from the shared table (dtypes.py `optimizer_state_bytes`): bitsandbytes 8-bit keeps uint8
    states plus an fp32 absmax per block of 256 for tensors of ≥ 4096 elements and fp32 states below that
    (``Optimizer2State.init_state``); Lion one state, AdEMAMix three; GaLore/APOLLO are counted as AdamW over the
    full parameter (an upper bound: they keep states of a rank-16 projection); LOMO/AdaLomo none.
    """
    impl = spec.optimizer_impl
    total = sum(optimizer_state_bytes(impl, p.numel(), p.element_size()) for p in params)
    why = {"8bit": "bitsandbytes 8-bit AdamW (needs CUDA)", "paged_8bit": "bitsandbytes paged 8-bit AdamW",
           "8bit_lion": "bitsandbytes 8-bit Lion", "lion": "Lion", "ademamix": "AdEMAMix",
           "lomo": "LOMO (no states)", "galore": "GaLore (counted as AdamW states)",
           "galore_8bit": "GaLore 8-bit", "apollo": "APOLLO (counted as AdamW states)"}.get(impl, impl)
    return total, f"optimizer states of {why} counted analytically, not run"


def zero3_setup(world: int, rank: int):
    """A fake process group of `world` ranks (no communication; collectives return correctly shaped outputs) and
    a 1-D device mesh over it (reference/memory/REPORT.md §4 obstacle 6: the mesh is made outside FakeTensorMode)."""
    torch = load_torch()
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == world and dist.get_rank() == rank:
            return init_device_mesh("cpu", (world,))
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    return init_device_mesh("cpu", (world,))


def _shard(model: Any, spec: ProbeSpec, mesh: Any) -> None:
    """FSDP2 ``fully_shard`` per decoder layer and at the root, reshard after forward (ZeRO-3 semantics), with
    parameters all-gathered in the compute dtype and gradients reduced in fp32 (DeepSpeed ZeRO-3 keeps a
    half-precision partition and reduces into fp32 gradient partitions)."""
    torch = load_torch()
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    half = dtype_of(spec.compute_dtype if spec.compute_dtype in ("bfloat16", "float16") else None)
    mp = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32) if half is not None else MixedPrecisionPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    # embeddings and an untied lm_head as their own units: DeepSpeed gathers each only while it runs, where an
    # FSDP2 root unit would keep both gathered from the first forward to the end of backward
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is None or emb is None or head.weight is not emb.weight:
        for mod in (emb, head):
            if mod is not None:
                fully_shard(mod, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def _local_bytes(t: Any) -> int:
    local = getattr(t, "_local_tensor", t)
    return local.numel() * local.element_size()


@dataclass
class Prepared:
    """A model set up for training as LF sets it up, with its optimizer (None: states are analytic)."""

    model: Any
    ref: Any
    trainable: list
    opt: Any
    counts: dict[str, float]
    vocab: int
    state: StepState


def prepare(spec: ProbeSpec, n_layers: int, notes: list[str], *, mesh: Any = None,
            device: str | None = None) -> Prepared:
    """Build `spec`'s model at `n_layers` layers and set it up as LF does (call inside `fake_patches` and, to
    simulate, inside FakeTensorMode; `device` "cuda" builds real tensors on the GPU for the gpu probe).

    Order as in LF's loader: load in the checkpoint dtype → quantize → ``patch_model`` (checkpointing, layernorm
    upcast, lm_head output upcast) → ``init_adapter`` (trainable set, LoRA/OFT, fp32 upcast of trainable params)
    (model/loader.py, model/patcher.py, model/adapter.py).
    """
    torch = load_torch()
    from transformers import AutoModelForCausalLM

    st = StepState()
    conf = build_config(spec, n_layers, notes)
    dev = torch.device(device) if device else contextlib.nullcontext()
    try:
        with dev:
            model = AutoModelForCausalLM.from_config(conf, dtype=dtype_of(storage_dtype(spec)))
    except ValueError as err:
        if "attention implementation" not in str(err) or conf._attn_implementation == "eager":
            raise
        # a family without SDPA support (Gemma-2's logit soft-capping): transformers, hence LF's `auto`, runs eager
        notes.append(f"{conf.model_type} has no SDPA attention in transformers: simulated with eager attention")
        conf._attn_implementation = "eager"
        with dev:
            model = AutoModelForCausalLM.from_config(conf, dtype=dtype_of(storage_dtype(spec)))
    model.train()
    if spec.liger_flce or spec.liger_rms_norm or spec.liger_swiglu:
        # LF applies liger before the model is built (loader.py:142); patching the instance is the same
        apply_liger(model, spec, notes)
    if spec.quantization_bit in (4, 8):
        with dev:
            _quantize_standin(model, spec, notes)
    _set_requires_grad(model, spec)
    if spec.gradient_checkpointing:
        # LF replaces gradient_checkpointing_enable: it sets LF's checkpointing function and, unlike transformers'
        # own method, does not call enable_input_require_grads — its function makes the hidden-state input of each
        # trainable layer require grad instead (checkpointing.py _gradient_checkpointing_enable, "have already
        # enabled input require gradients"). Frozen layers below the trainable ones therefore keep nothing.
        model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=_gc_func(spec, st))
    if spec.upcast_layernorm:
        for name, p in model.named_parameters():
            if p.ndim == 1 and ("norm" in name or "ln" in name):
                p.data = p.data.to(torch.float32)
    if spec.upcast_lmhead_output:
        head = model.get_output_embeddings()
        if head is not None and head.weight.dtype != torch.float32:
            head.register_forward_hook(lambda m, a, out: out.to(torch.float32))
    if spec.finetuning_type in ("lora", "oft"):
        with dev:
            model = _apply_adapter(model, spec, notes)
    _cast_trainable(model, spec)
    ref = None
    if spec.ref_model and spec.finetuning_type in ("full", "freeze"):
        with dev:
            ref = AutoModelForCausalLM.from_config(conf, dtype=dtype_of(storage_dtype(spec)))
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    counts: dict[str, float] = {
        "trainable": sum(p.numel() for p in trainable),
        "trainable_bytes": sum(p.numel() * p.element_size() for p in trainable),
        "total": sum(p.numel() for p in model.parameters()),
    }
    if mesh is not None:
        _shard(model, spec, mesh)
        if ref is not None:
            _shard(ref, spec, mesh)
        trainable = [p for p in model.parameters() if p.requires_grad]
        counts["shard_trainable_bytes"] = sum(_local_bytes(p) for p in trainable)
        counts["shard_trainable"] = sum(getattr(p, "_local_tensor", p).numel() for p in trainable)
        counts["shard_weights_bytes"] = sum(_local_bytes(p) for p in model.parameters())
    opt = _make_optimizer(trainable, spec, notes)
    counts["analytic_states"] = 0
    if opt is None and not spec.deepspeed:
        counts["analytic_states"], state_note = _analytic_state_bytes(trainable, spec)
        notes.append(state_note)
    vocab = conf.get_text_config().vocab_size if hasattr(conf, "get_text_config") else conf.vocab_size
    return Prepared(model, ref, trainable, opt, counts, vocab, st)
