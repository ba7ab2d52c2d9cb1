"""Simulate training steps at full size on CPU with FakeTensorMode and count the live tensor bytes of one rank.

The model's transformers class is built from its config inside ``torch._subclasses.FakeTensorMode``: every
tensor has its real shape and dtype but no memory, so a 70B step runs in seconds and a few hundred MB of RAM.
LLaMA-Factory's training setup is reproduced on it (reference/llamafactory/LF_FACTS.md §2-3): weights in the
checkpoint dtype, trainable params upcast to fp32 unless pure_bf16 (``model/adapter.py:337-349``), LoRA through
peft with LF's targets (``all`` = every Linear but lm_head, ``model_utils/misc.py:28-52``), gradient
checkpointing only of layers that train (``model_utils/checkpointing.py:100-123``) with ``use_reentrant`` as
configured, autocast for bf16/fp16, the configured optimizer implementation, ``steps`` optimizer steps of
``min(grad_accum, 2)`` micro-batches each (the peak comes at step ≥ 2 once optimizer states exist, REPORT.md key
finding 4). `tracker.LiveBytesTracker` counts live bytes by category; the result is the analogue of
``torch.cuda.max_memory_allocated`` on the busiest rank.

Depth reduction: a decoder stack's memory is affine in its depth at every moment of the step that is anchored
to a layer counted from the bottom or the top (forward of layer i holds i layers of activations, backward of
layer i holds L-i layers of activations and i layers of gradients, etc.). The step is therefore tracked per
segment (prologue, each layer, logits, backward of each layer, optimizer step), the model is simulated at k and
k+1 layers, every segment's bytes are extrapolated linearly to L layers, and the peak is the largest
extrapolated segment. tests/test_probe_simulate.py checks this against a full-depth simulation (within 1%).

What is not simulated, and enters analytically (each adds a note to the result):

* DeepSpeed ZeRO-1/2 optimizer-side partitions (fp32 master, fp32 gradient partition, optimizer states; ZeRO-2
  half-precision gradient partition) on top of the simulated replica, per DeepSpeed's own estimator terms
  (reference/deepspeed/memory_estimators.md: 2 + 4 + 4 + 8 bytes per parameter). ZeRO-3 (and FSDP) is
  simulated with FSDP2 ``fully_shard`` over a fake process group as the stand-in for parameter / gradient /
  optimizer partitioning; DeepSpeed's extra half-precision parameter partition (2 B per trainable param / N)
  is added.
* 8-bit optimizers (bitsandbytes needs CUDA): states counted from bitsandbytes' layout.
* bitsandbytes 4-bit / 8-bit weights: a stand-in module with bnb's storage layout (packed uint8 + absmax) that
  dequantizes on each call; bnb's kernels are not run.
* CUDA kernel choice (obstacle 3 of REPORT.md §4): the CPU build cannot make fake CUDA tensors, so SDPA runs its
  CPU flash kernel (same saved tensors as FlashAttention-2: output + log-sum-exp) and the AdamW implementation
  is chosen explicitly.

The three prototype obstacles (REPORT.md §4) are handled in `fake_patches`: the dense causal mask
(transformers' ``is_tracing`` treats FakeTensors as traced, so ``find_packed_sequence_indices`` reports packed
sequences and a b×1×s×s mask is built), ``Module.to`` on fake parameters (always takes the ``swap_tensors`` path,
which fails), and MemTracker on frozen parameters (`tracker.FrozenSafeMemTracker`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from finetune_doctor.errors import InputError, MissingExtra
from finetune_doctor.probes.spec import ProbeSpec
from finetune_doctor.probes.tracker import CATEGORIES, LiveBytesTracker, Peak

GIB = float(1 << 30)
CUDA_BLOCK = 512   # CUDACachingAllocator kMinBlockSize: every allocation rounds up to 512 bytes


# ---- result ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SimResult:
    """Peak live tensor bytes of one rank over the simulated steps.

    `peak_bytes` is the analogue of ``torch.cuda.max_memory_allocated`` (bytes; simulated + analytic parts);
    `by_category` splits it at the peak moment (keys of `tracker.CATEGORIES`); `analytic` says which bytes of
    that were added analytically, by category; `segment` names the moment (``step 2, backward, layer 1 of 28``).
    `depth` lists the depths built (one entry: full depth; two: k and k+1, extrapolated to `num_layers`).
    `step_peaks` holds the peak of each optimizer step. `notes` say what was modelled rather than run.
    `segments` maps each segment's description to its peak bytes by category (analytic terms included), for
    calibration and diagnosis. `per_rank` maps each simulated rank to its peak bytes: data-parallel ranks run the
    same step on equal partitions, except that FSDP2 pads the last shards (``torch.chunk`` semantics), so rank 0
    holds the largest and is the one simulated by default.
    """

    peak_bytes: int
    by_category: dict[str, int]
    segment: str
    analytic: dict[str, int]
    depth: tuple[int, ...]
    num_layers: int
    rank: int
    world_size: int
    steps: int
    step_peaks: tuple[int, ...]
    wall_s: float
    notes: tuple[str, ...]
    params: dict[str, int] = field(default_factory=dict)
    host_bytes: int = 0
    spec: ProbeSpec | None = None
    segments: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    per_rank: dict[int, int] = field(default_factory=dict)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    @property
    def extrapolated(self) -> bool:
        return len(self.depth) == 2

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": "simulated",
            "peak_allocated_gib": round(self.peak_gib, 3),
            "by_category_gib": {k: round(v / GIB, 3) for k, v in self.by_category.items() if v},
            "analytic_gib": {k: round(v / GIB, 3) for k, v in self.analytic.items() if v},
            "segment": self.segment,
            "depth": list(self.depth),
            "num_layers": self.num_layers,
            "extrapolated": self.extrapolated,
            "rank": self.rank,
            "world_size": self.world_size,
            "steps": self.steps,
            "step_peaks_gib": [round(p / GIB, 3) for p in self.step_peaks],
            "host_gib": round(self.host_bytes / GIB, 3),
            "params": dict(self.params),
            "wall_s": round(self.wall_s, 2),
            "per_rank_gib": {str(k): round(v / GIB, 3) for k, v in self.per_rank.items()},
            "notes": list(self.notes),
        }


# ---- torch helpers ---------------------------------------------------------------------------------------

def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - the test environment has torch
        raise MissingExtra("the simulate probe", "torch") from None
    return torch


def _dtype(name: str | None):
    torch = _torch()
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            None: None}.get(name, torch.bfloat16)


def _storage_dtype(spec: ProbeSpec) -> str:
    """Dtype the non-quantized weights are built in: the checkpoint dtype, or the GPU dtype run.py resolved
    (DeepSpeed casts an fp32 checkpoint to the compute dtype)."""
    w = spec.weights_dtype
    return w if w in ("float32", "bfloat16", "float16") else spec.checkpoint_dtype


@contextlib.contextmanager
def fake_patches(tracker: Any = None, *, gather_in_place: bool = False) -> Iterator[None]:
    """Patches that make a transformers/peft training step behave under FakeTensorMode as it does for real.

    1. ``transformers.masking_utils.find_packed_sequence_indices`` → None: with FakeTensors ``is_tracing`` is
       true, so the packed-sequence check cannot read values and assumes packing, and a dense b×1×s×s mask plus
       masked SDPA is built (+O(s²) bytes; REPORT.md §4 obstacle 1). The probe's batches are unpacked rows of
       full length, for which the real check returns None.
    2. ``nn.Module.to`` on modules holding FakeTensors: the default path swaps tensors
       (``torch.utils.swap_tensors``), which fails on fake parameters (REPORT.md §4 obstacle 2). A no-op when
       nothing changes; dtype changes are done by assigning ``param.data`` as LF's own upcast does.
       ``copy.deepcopy`` of a FakeTensor copies it within its own fake mode (the default makes a new mode).
    3. DTensor sharding propagation (shape inference on full-size fake arguments) is not counted.
    4. `gather_in_place` (the DeepSpeed ZeRO-3 stand-in): FSDP2 keeps each unit's flat all-gather buffer alive
       until the next unit's all-gather (``_fsdp_param_group.py`` ``comm_ctx.all_gather_state``, "free unless
       saved"), on top of the parameters copied out of it; DeepSpeed gathers into the parameters' own storage, so
       the stand-in drops that reference once the copy-out is done.
    5. FSDP2's ``alloc_storage`` / ``free_storage`` resize storages outside the dispatcher; the tracker is told.
    """
    torch = _torch()
    import transformers.masking_utils as mu
    from torch._subclasses.fake_tensor import FakeTensor

    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    patch(mu, "find_packed_sequence_indices", lambda position_ids: None)

    orig_to = torch.nn.Module.to

    def safe_to(self, *args, **kwargs):
        tensors = [t for t in self.parameters()] + [t for t in self.buffers()]
        if not any(isinstance(t, FakeTensor) for t in tensors):
            return orig_to(self, *args, **kwargs)
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        # simulated tensors all live on the fake CPU device; a requested device is the rank's GPU
        if dtype is None:
            return self
        for mod in self.modules():
            for name, p in list(mod._parameters.items()):
                if p is not None and (p.is_floating_point() or p.is_complex()) and p.dtype != dtype:
                    p.data = p.data.to(dtype)
            for name, b in list(mod._buffers.items()):
                if b is not None and b.is_floating_point() and b.dtype != dtype:
                    mod._buffers[name] = b.to(dtype)
        return self

    patch(torch.nn.Module, "to", safe_to)

    def fake_deepcopy(self, memo):
        # copy.deepcopy of a FakeTensor makes a tensor of a new FakeTensorMode, which cannot be mixed with the
        # model's (peft's modules_to_save deep-copies embed_tokens / lm_head); copy within the same mode
        if id(self) in memo:
            return memo[id(self)]
        with self.fake_mode:
            new = torch.empty_like(self)
        if getattr(self, "_is_param", False):
            new = torch.nn.Parameter(new, requires_grad=self.requires_grad)
        memo[id(self)] = new
        return new

    saved.append((FakeTensor, "__deepcopy__", FakeTensor.__dict__.get("__deepcopy__")))
    FakeTensor.__deepcopy__ = fake_deepcopy

    if tracker is not None:
        try:
            from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
        except ImportError:  # pragma: no cover - torch without FSDP2
            _fsdp_param = _fsdp_param_group = None
        if _fsdp_param is not None:
            orig_alloc, orig_free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

            def alloc(tensor):
                orig_alloc(tensor)
                tracker.track([tensor], "weights")
                tracker.storage_resized(tensor.untyped_storage())

            def free(tensor):
                orig_free(tensor)
                tracker.storage_resized(tensor.untyped_storage())

            orig_init = _fsdp_param.FSDPParam.init_all_gather_outputs

            def init_outputs(self, *args, **kwargs):
                orig_init(self, *args, **kwargs)
                tracker.track(self.all_gather_outputs, "weights")   # gathered parameters count as weights

            patch(_fsdp_param.FSDPParam, "init_all_gather_outputs", init_outputs)
            from torch.distributed.tensor._sharding_prop import ShardingPropagator

            orig_meta = ShardingPropagator._propagate_tensor_meta_non_cached

            def meta(self, *args, **kwargs):
                # shape propagation builds full-size fake arguments under the ambient fake mode; not memory
                tracker.paused += 1
                try:
                    return orig_meta(self, *args, **kwargs)
                finally:
                    tracker.paused -= 1

            patch(ShardingPropagator, "_propagate_tensor_meta_non_cached", meta)
            if gather_in_place:
                orig_wait = _fsdp_param_group.FSDPParamGroup.wait_for_unshard

                def wait(self, *args, **kwargs):
                    out = orig_wait(self, *args, **kwargs)
                    self.comm_ctx.all_gather_state = None
                    return out

                patch(_fsdp_param_group.FSDPParamGroup, "wait_for_unshard", wait)
            patch(_fsdp_param, "alloc_storage", alloc)
            patch(_fsdp_param, "free_storage", free)
            patch(_fsdp_param_group, "alloc_storage", alloc)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is None and obj is FakeTensor:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


# ---- building the model ----------------------------------------------------------------------------------

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
    layers = _decoder_layers(model)
    n, k = len(layers), spec.freeze_trainable_layers
    ids = range(n - k, n) if k > 0 else range(min(-k, n))
    mods = set(spec.freeze_trainable_modules)
    for i in ids:
        for name, p in layers[i].named_parameters():
            if "all" in mods or any(m in name.split(".") for m in mods):
                p.requires_grad_(True)


def _decoder_layers(model: Any):
    torch = _torch()
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
    torch = _torch()
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
        cfg = peft.OFTConfig(r=0, oft_block_size=32, target_modules=targets, modules_to_save=to_save,
                             task_type="CAUSAL_LM")
    return peft.get_peft_model(model, cfg)


def _cast_trainable(model: Any, spec: ProbeSpec) -> None:
    """LF upcasts every trainable parameter to fp32 unless pure_bf16 / BAdam / ZeRO-3 (adapter.py:337-349);
    run.py resolved that into `trainable_dtype`."""
    dt = _dtype(spec.trainable_dtype if spec.trainable_dtype in ("float32", "bfloat16", "float16") else "float32")
    if spec.sharded and spec.deepspeed and spec.trainable_dtype != "float32":
        # ZeRO-3 stand-in: FSDP2's sharded parameters play DeepSpeed's fp32 master partition
        dt = _dtype("float32")
    for p in model.parameters():
        if p.requires_grad and p.dtype != dt:
            p.data = p.data.to(dt)


def _gc_func(spec: ProbeSpec, state: "_StepState"):
    """LF's checkpointing function: checkpoint only layers with trainable params and make their first floating
    input require grad (model_utils/checkpointing.py:100-123, `get_custom_gradient_checkpointing_func`)."""
    torch = _torch()
    from torch.utils.checkpoint import checkpoint

    reentrant = spec.use_reentrant and not spec.sharded   # FSDP2 needs non-reentrant (LF forces it, :177-182)

    def func(fn, *args, **kwargs):
        state.gc_calls += 1
        module = _checkpointed_layer(fn)
        if any(p.requires_grad for p in module.parameters()):
            for a in args:
                if torch.is_tensor(a) and torch.is_floating_point(a):
                    a.requires_grad_(True)
                    break
            return checkpoint(fn, *args, use_reentrant=reentrant, **kwargs)
        return fn(*args, **kwargs)

    return func


def _checkpointed_layer(fn: Any) -> Any:
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
    torch = _torch()
    bits = spec.quantization_bit
    cdt = _dtype(spec.compute_dtype if spec.compute_dtype in ("bfloat16", "float16") else "bfloat16")

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
        n = lin.in_features * lin.out_features
        q = QuantLinear.__new__(QuantLinear)
        torch.nn.Module.__init__(q)
        q.in_features, q.out_features = lin.in_features, lin.out_features
        if bits == 4:
            q.weight = torch.nn.Parameter(torch.empty((n + 1) // 2, 1, dtype=torch.uint8), requires_grad=False)
            blocks = -(-n // 64)
            if spec.double_quantization:
                q.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8))
                q.register_buffer("absmax2", torch.empty(-(-blocks // 256), dtype=torch.float32))
                q.register_buffer("code", torch.empty(256, dtype=torch.float32))
            else:
                q.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32))
        else:
            q.weight = torch.nn.Parameter(torch.empty(lin.out_features, lin.in_features, dtype=torch.int8),
                                          requires_grad=False)
            q.register_buffer("SCB", torch.empty(lin.out_features, dtype=torch.float32))
        q.bias = lin.bias
        return q

    layers = _decoder_layers(model)
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


# ---- the step ----------------------------------------------------------------------------------------------

@dataclass
class _StepState:
    step: int = 0
    micro: int = 0
    phase: str = "setup"
    n_layers: int = 0
    gc_calls: int = 0   # calls of the checkpointing function: 0 after a forward means checkpointing never engaged


def _layer_key(i: int, n: int) -> tuple:
    """Anchor layer `i` of `n` to the nearer end of the stack, so that keys match across depths k and k+1."""
    return ("b", i) if i < n // 2 else ("t", n - 1 - i)


def _install_segment_hooks(model: Any, tracker: Any, st: _StepState, trainable: list) -> list:
    """Hooks that name the segment of the step the tracker is in, and keep gradients categorised.

    Forward: a pre-hook per decoder layer; backward: a gradient hook on each layer's output (it fires before that
    layer's backward and before its recomputation under checkpointing — transformers ≥ 5 checkpoints ``forward``
    inside the module call, so module hooks run once, outside the checkpoint, ``modeling_layers.py``
    GradientCheckpointingLayer). Gradients: ``register_post_accumulate_grad_hook`` on plain parameters; FSDP2
    assigns sharded gradients directly, so every backward segment change also sweeps ``param.grad``.
    """
    torch = _torch()
    layers = _decoder_layers(model)
    n = len(layers)
    handles = []

    def seg(*pos):
        if st.phase == "bwd":
            tracker.track([p.grad for p in trainable if p.grad is not None], "gradients")
        tracker.set_segment(st.step, st.micro, *pos)

    for p in trainable:
        if not hasattr(p, "_local_tensor"):
            handles.append(p.register_post_accumulate_grad_hook(
                lambda q: tracker.track([q.grad], "gradients")))

    for i, layer in enumerate(layers):
        key = _layer_key(i, n)

        def pre(mod, args, key=key):
            if st.phase in ("fwd", "ref"):
                seg(st.phase, *key)

        def post(mod, args, out, key=key, i=i):
            if st.phase == "ref" and i == n - 1:
                seg("ref", "head")
            if st.phase != "fwd":
                return
            t = out[0] if isinstance(out, (tuple, list)) else out
            if torch.is_tensor(t) and t.requires_grad:
                t.register_hook(lambda g, key=key: (seg("bwd", *key), None)[1])
            if i == 0 and args and torch.is_tensor(args[0]) and args[0].requires_grad:
                args[0].register_hook(lambda g: (seg("bwd", "embed"), None)[1])
            if i == n - 1:
                seg(st.phase, "head")

        handles.append(layer.register_forward_pre_hook(pre))
        handles.append(layer.register_forward_hook(post))

    head = getattr(model, "module", model).get_output_embeddings()   # DDP wraps the model in .module
    if head is not None:
        def head_pre(mod, args):
            if st.phase in ("fwd", "ref"):
                seg(st.phase, "logits")
                tracker.default_category = "logits"
        handles.append(head.register_forward_pre_hook(head_pre))
    return handles


def _make_optimizer(params: list, spec: ProbeSpec, notes: list[str]):
    """The optimizer LF/HF would create, or None when its states are added analytically."""
    torch = _torch()
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

    bitsandbytes 8-bit (``Optimizer2State.init_state``): tensors with ≥ 4096 elements keep two uint8 states plus
    one fp32 absmax per block of 256 for each; smaller ones keep fp32 states. Lion keeps one momentum (8-bit: one
    uint8 state). AdEMAMix keeps three states. GaLore/APOLLO project gradients to rank 16 subspaces — counted as
    AdamW over the full parameter (an upper bound). LOMO/AdaLomo keep none.
    """
    impl = spec.optimizer_impl
    total = 0
    for p in params:
        n = p.numel()
        e = p.element_size()
        if impl in ("8bit", "paged_8bit", "galore_8bit"):
            total += 2 * n + 2 * 4 * -(-n // 256) if n >= 4096 else 8 * n
        elif impl == "8bit_lion":
            total += n + 4 * -(-n // 256) if n >= 4096 else 4 * n
        elif impl == "lion":
            total += n * e
        elif impl == "ademamix":
            total += 3 * n * e
        elif impl in ("lomo",):
            total += 0
        else:
            total += 2 * n * e
    why = {"8bit": "bitsandbytes 8-bit AdamW (needs CUDA)", "paged_8bit": "bitsandbytes paged 8-bit AdamW",
           "8bit_lion": "bitsandbytes 8-bit Lion", "lion": "Lion", "ademamix": "AdEMAMix",
           "lomo": "LOMO (no states)", "galore": "GaLore (counted as AdamW states)",
           "galore_8bit": "GaLore 8-bit", "apollo": "APOLLO (counted as AdamW states)"}.get(impl, impl)
    return total, f"optimizer states of {why} counted analytically, not run"


def _batch(spec: ProbeSpec, vocab: int):
    torch = _torch()
    ids = torch.randint(0, vocab, (spec.batch, spec.seq_len), dtype=torch.long)
    return ids


def _loss(model: Any, ids: Any, spec: ProbeSpec, ref: Any, st: _StepState | None = None,
          mark: Callable[..., None] | None = None):
    """Forward + loss as the LF trainer of `spec.stage` computes it."""
    torch = _torch()
    if spec.stage in ("dpo", "kto", "orpo", "simpo"):
        # LF CustomDPOTrainer.concatenated_forward: logits.to(float32), log_softmax gathered at the labels; the
        # reference forward runs after the policy forward, under no_grad (get_batch_loss_metrics).
        logits = model(input_ids=ids).logits.to(torch.float32)
        logps = torch.gather(logits[:, :-1].log_softmax(-1), 2, ids[:, 1:].unsqueeze(2)).squeeze(2).sum(-1)
        ref_logps = None
        if ref is not None or spec.finetuning_type in ("lora", "oft"):
            # the reference forward is its own part of the step (segments keep its peak apart from the policy's)
            if st is not None:
                st.phase = "ref"
            if mark is not None:
                mark("ref", "embed")
            with torch.no_grad():
                if ref is not None:
                    rl = ref(input_ids=ids).logits.to(torch.float32)
                else:
                    with getattr(model, "module", model).disable_adapter():
                        rl = model(input_ids=ids).logits.to(torch.float32)
                ref_logps = torch.gather(rl[:, :-1].log_softmax(-1), 2, ids[:, 1:].unsqueeze(2)).squeeze(2).sum(-1)
                del rl
            if st is not None:
                st.phase = "fwd"
            if mark is not None:
                mark("fwd", "loss")
        half = logps.shape[0] // 2 if spec.pairwise else logps.shape[0]
        diff = logps[:half] - logps[half:] if spec.pairwise else logps
        if ref_logps is not None:
            diff = diff - ((ref_logps[:half] - ref_logps[half:]) if spec.pairwise else ref_logps)
        return -torch.nn.functional.logsigmoid(0.1 * diff).mean()
    return model(input_ids=ids, labels=ids).loss


def _zero3_setup(world: int, rank: int):
    """A fake process group of `world` ranks (no communication; collectives return correctly shaped outputs) and
    a 1-D device mesh over it (REPORT.md §4 obstacle 6: the mesh is made outside FakeTensorMode)."""
    torch = _torch()
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
    torch = _torch()
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    half = _dtype(spec.compute_dtype if spec.compute_dtype in ("bfloat16", "float16") else None)
    mp = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32) if half is not None else MixedPrecisionPolicy()
    for layer in _decoder_layers(model):
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
    state: _StepState


def prepare(spec: ProbeSpec, n_layers: int, notes: list[str], *, mesh: Any = None,
            device: str | None = None) -> Prepared:
    """Build `spec`'s model at `n_layers` layers and set it up as LF does (call inside `fake_patches` and, to
    simulate, inside FakeTensorMode; `device` "cuda" builds real tensors on the GPU for the gpu probe).

    Order as in LF's loader: load in the checkpoint dtype → quantize → ``patch_model`` (checkpointing, layernorm
    upcast, lm_head output upcast) → ``init_adapter`` (trainable set, LoRA/OFT, fp32 upcast of trainable params)
    (model/loader.py, model/patcher.py, model/adapter.py).
    """
    torch = _torch()
    from transformers import AutoModelForCausalLM

    st = _StepState()
    conf = build_config(spec, n_layers, notes)
    dev = torch.device(device) if device else contextlib.nullcontext()
    try:
        with dev:
            model = AutoModelForCausalLM.from_config(conf, dtype=_dtype(_storage_dtype(spec)))
    except ValueError as err:
        if "attention implementation" not in str(err) or conf._attn_implementation == "eager":
            raise
        # a family without SDPA support (Gemma-2's logit soft-capping): transformers, hence LF's `auto`, runs eager
        notes.append(f"{conf.model_type} has no SDPA attention in transformers: simulated with eager attention")
        conf._attn_implementation = "eager"
        with dev:
            model = AutoModelForCausalLM.from_config(conf, dtype=_dtype(_storage_dtype(spec)))
    model.train()
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
            ref = AutoModelForCausalLM.from_config(conf, dtype=_dtype(_storage_dtype(spec)))
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


class _NoBooks:
    """Tracker interface for runs that measure elsewhere (MemTracker, CUDA counters): segment names only."""

    default_category = "temp"

    def track(self, tensors: Any, category: str) -> None:
        pass

    def set_segment(self, *label: Any) -> None:
        pass


def train_steps(prep: Prepared, spec: ProbeSpec, steps: int, tracker: Any, *, device_type: str = "cpu",
                on_step: Callable[[int, float, float | None], None] | None = None,
                between_steps: Callable[[], None] | None = None) -> None:
    """Run `steps` optimizer steps of ``min(grad_accum, 2)`` micro-batches on `prep` as the HF/LF trainer does,
    naming segments on `tracker` (see `_install_segment_hooks`). `on_step(step, loss, grad_norm)` receives each
    step's loss and (when clipping runs) the total gradient norm as Python floats (real tensors only)."""
    torch = _torch()
    model, ref, trainable, opt, st = prep.model, prep.ref, prep.trainable, prep.opt, prep.state
    handles = _install_segment_hooks(model, tracker, st, trainable)
    if ref is not None:
        handles += _install_segment_hooks(ref, tracker, st, [])
    tracker.track(list(model.parameters()), "weights")
    tracker.track(list(model.buffers()), "buffers")
    if ref is not None:
        tracker.track(list(ref.parameters()), "weights")
        tracker.track(list(ref.buffers()), "buffers")
    autocast = None if spec.deepspeed else spec.autocast   # accelerate runs no AMP under DeepSpeed
    micro_steps = min(max(spec.grad_accum, 1), 2)
    dev = next(iter(model.parameters())).device
    try:
        for step in range(1, steps + 1):
            if between_steps is not None and step > 1:
                between_steps()
            st.step = step
            losses = []
            for micro in range(micro_steps):
                st.micro = micro
                with torch.device(dev):
                    ids = _batch(spec, prep.vocab)
                tracker.track([ids], "inputs")
                st.phase = "fwd"
                tracker.default_category = "activations"
                tracker.set_segment(step, micro, "fwd", "embed")
                ctx = (torch.autocast(device_type, dtype=_dtype(autocast)) if autocast else contextlib.nullcontext())
                with ctx:
                    loss = _loss(model, ids, spec, ref, st,
                                 lambda *pos: tracker.set_segment(st.step, st.micro, *pos))
                if spec.gradient_checkpointing and st.gc_calls == 0:
                    raise RuntimeError("gradient checkpointing is on in the spec but the model never called the "
                                       "checkpointing function: this transformers version wires it differently")
                # the trainer keeps only the loss: model outputs (logits) die when compute_loss returns
                # (transformers Trainer.compute_loss / LF get_batch_loss_metrics)
                st.phase = "bwd"
                tracker.default_category = "temp"
                tracker.set_segment(step, micro, "bwd", "logits")
                (loss / micro_steps if micro_steps > 1 else loss).backward()
                if on_step is not None:
                    losses.append(loss.detach())
                del loss, ids
                tracker.track([p.grad for p in trainable], "gradients")
                tracker.set_segment(step, micro, "bwd", "end")
            st.phase = "opt"
            tracker.set_segment(step, 0, "opt")
            norm = None
            if spec.max_grad_norm and not spec.deepspeed:
                norm = torch.nn.utils.clip_grad_norm_(trainable, spec.max_grad_norm)
            if opt is not None:
                opt.step()
                for state in opt.state.values():
                    tracker.track([v for v in state.values() if torch.is_tensor(v)], "optimizer")
            tracker.set_segment(step, 0, "zero")
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            else:
                for p in trainable:
                    p.grad = None
            if on_step is not None:
                total = float(sum(float(x) for x in losses))
                on_step(step, total, None if norm is None else float(getattr(norm, "full_tensor", lambda: norm)()))
    finally:
        for h in handles:
            h.remove()


def run_depth(spec: ProbeSpec, n_layers: int, steps: int = 2, *, fake: bool = True, rank: int = 0,
              round_to: int = CUDA_BLOCK, notes: list[str] | None = None) -> dict[str, Any]:
    """Simulate `steps` optimizer steps of `spec` at `n_layers` decoder layers and return the raw books.

    `fake=False` runs the same code on real CPU tensors (tests compare the two byte for byte; keep the model
    tiny then). Returns ``{"segments": {key: Peak}, "peak": Peak, "counts": {...}}`` where keys are
    ``(step, micro, phase, *position)`` and counts are element/byte totals of this depth used for the analytic
    terms.
    """
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    notes = notes if notes is not None else []
    mesh = _zero3_setup(spec.world_size, rank) if spec.sharded else None
    mode = FakeTensorMode(allow_non_fake_inputs=False) if fake else contextlib.nullcontext()
    tracker = LiveBytesTracker(round_to)
    torch.manual_seed(0)
    with fake_patches(tracker, gather_in_place=spec.sharded and spec.deepspeed), mode:
        prep = prepare(spec, n_layers, notes, mesh=mesh)
        with tracker:
            train_steps(prep, spec, steps, tracker)
        counts = prep.counts
        del prep
    gc.collect()
    return {"segments": tracker.segment_peaks, "peak": tracker.peak, "counts": counts}


def memtracker_peak(spec: ProbeSpec, n_layers: int | None = None, steps: int = 2, *,
                    fake: bool = True) -> tuple[int, dict[str, int]]:
    """The same steps under ``torch.distributed._tools.mem_tracker.MemTracker`` (per-module statistics; slower,
    REPORT.md §4). Uses `tracker.FrozenSafeMemTracker`, which accepts LoRA's frozen base weights. Returns the peak
    total bytes and MemTracker's per-reference-type bytes at its peak snapshot. Full depth only."""
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    from finetune_doctor.probes.tracker import FrozenSafeMemTracker

    notes: list[str] = []
    mode = FakeTensorMode(allow_non_fake_inputs=False) if fake else contextlib.nullcontext()
    torch.manual_seed(0)
    with fake_patches(None), mode:
        prep = prepare(spec, n_layers or spec.num_layers, notes)
        mt = FrozenSafeMemTracker()
        mt.track_external(prep.model, *( [prep.opt] if prep.opt is not None else []))
        with mt:
            train_steps(prep, spec, steps, _NoBooks(), between_steps=mt.reset_mod_stats)
        snap = mt.get_tracker_snapshot("peak")
        del prep
    dev_stats = next(iter(snap.values()))
    total = int(dev_stats.pop("Total"))
    return total, {str(k): int(v) for k, v in dev_stats.items()}


# ---- analytic terms -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Term:
    """Bytes added to (or, negative, removed from) one category at the segments `when` selects.

    `when`: "always"; "states" (from the first optimizer step on: optimizer states exist); "grads" (from the
    first backward on); "replace_grads" (drop the simulated gradients of this segment: ZeRO-2 reduces them into
    a partition bucket by bucket).
    """

    category: str
    nbytes: float
    when: str
    note: str = ""


def _applies(when: str, key: tuple) -> bool:
    step, micro, phase = key[0], key[1], key[2]
    if when in ("always", "replace_grads"):
        return True
    if when == "states":
        return step >= 2 or phase in ("opt", "zero")
    if when == "opt":
        return phase == "opt"
    if when == "grads_live":
        # from a micro-batch's backward to the optimizer step (and through later micro-batches of an accumulation)
        return phase in ("bwd", "opt") or (phase in ("fwd", "ref") and micro > 0)
    return False


# Optimizer-state bytes per parameter when the optimizer works on fp32 master partitions (DeepSpeed): AdamW two fp32
# states; bitsandbytes 8-bit two uint8 states + fp32 absmax per 256 (Optimizer2State.init_state); Lion one state;
# AdEMAMix three; Adafactor (beta1=None) factored rows+cols, ~0 per element; SGD without momentum none.
_STATE_BYTES_FP32 = {"8bit": 2 + 8 / 256, "paged_8bit": 2 + 8 / 256, "galore_8bit": 2 + 8 / 256,
                     "8bit_lion": 1 + 4 / 256, "lion": 4.0, "ademamix": 12.0, "lomo": 0.0, "adafactor": 0.0,
                     "sgd": 0.0, "adagrad": 4.0, "rmsprop": 4.0}


def _analytic_terms(spec: ProbeSpec, counts: dict[str, float]) -> tuple[list[_Term], float, list[str]]:
    """Terms for what is not simulated, from the (extrapolated) parameter counts. Returns (terms, host bytes,
    notes).

    DeepSpeed's optimizer side, read from deepspeed 0.19.8 (the version reference/deepspeed/ documents):

    * ZeRO-1/2 (``runtime/zero/stage_1_and_2.py``): an fp32 master partition (4 B/param / N) and the optimizer
      states on it, persistent; at ``step()`` an fp32 copy of this rank's gradient partition is made per parameter
      group and freed after that group's update ("Step 4: get rid of the fp32 gradients"); ZeRO-2 copies each
      reduced gradient into a half-precision partition buffer (``grads_in_partition``, allocated in backward,
      released with the IPG buffers after the step) and frees the replica gradients bucket by bucket; ZeRO-1 keeps
      the replica gradients until the step (simulated).
    * ZeRO-0 with bf16/fp16 (engine ``_configure_fp16_optimizer``): fp32 master copies and states of every
      parameter; counted like ZeRO-1 over one rank.
    * ZeRO-3 (``runtime/zero/stage3.py``): a half-precision parameter partition (2 B/N) beside the fp32 master
      partition (the FSDP2 stand-in's fp32 shards); a persistent flat gradient-partition buffer in the
      gradient-accumulation dtype (``grad_partitions_flat_buffer``, the model dtype unless
      ``data_types.grad_accum_dtype`` says otherwise: 2 B/N for bf16); at the step an fp32 copy per sub-group of
      at most ``sub_group_size`` (1e9) elements (``_prepare_fp32_grad_for_sub_group``). FSDP2's own fp32 gradient
      shards are replaced by these.

    Communication buffers (IPG buckets, all-gather/prefetch buckets) are the analytic model's `buffers`.
    """
    terms: list[_Term] = []
    notes: list[str] = []
    host = 0.0
    N = max(spec.world_size, 1)
    T = counts["trainable"]
    states_per_param = _STATE_BYTES_FP32.get(spec.optimizer_impl, 8.0)
    if counts.get("analytic_states"):
        terms.append(_Term("optimizer", counts["analytic_states"], "states"))
    if spec.extra_params:
        # LF freezes a VLM's vision tower and projector by default (freeze_vision_tower, LF_FACTS §3): weights only
        b = {"float32": 4.0}.get(spec.checkpoint_dtype, 2.0) * spec.extra_params / (N if spec.sharded else 1)
        terms.append(_Term("weights", b, "always"))
        notes.append(f"vision tower / projector ({spec.extra_params / 1e6:.0f}M frozen parameters) counted as "
                     "weights, not simulated; image activations are not included (text-only batches)")
    if spec.deepspeed and not spec.sharded:
        stage = spec.zero_stage
        P = N if stage >= 1 else 1
        half = counts["trainable_bytes"] / T if T else 2.0
        off = spec.offload_optimizer is not None and stage >= 1
        master, grads32, states = 4.0 * T / P, 4.0 * T / P, states_per_param * T / P
        if off:
            host += master + grads32 + states
            notes.append(f"DeepSpeed ZeRO-{stage}: fp32 master, fp32 gradients and optimizer states offloaded to "
                         f"the host ({(master + grads32 + states) / GIB:.2f} GiB per rank on the host)")
        else:
            terms += [_Term("optimizer", master, "always"), _Term("optimizer", states, "states"),
                      _Term("gradients", grads32, "opt")]
        if stage >= 2:
            terms += [_Term("gradients", 0.0, "replace_grads"), _Term("gradients", half * T / N, "grads_live")]
        notes.append(f"DeepSpeed ZeRO-{stage} over {N} ranks: the replica (weights, activations"
                     f"{', gradients' if stage < 2 else ''}) is simulated; the fp32 master partition and optimizer "
                     f"states (persistent), the fp32 gradient partition (at the step)"
                     f"{' and the half-precision gradient partition (backward to step)' if stage >= 2 else ''} are "
                     "added as DeepSpeed 0.19.8 allocates them; communication buckets are not included")
    if spec.sharded and spec.deepspeed:
        shard_t = counts.get("shard_trainable", T / N)
        half_b = 2.0 if spec.compute_dtype in ("bfloat16", "float16") else 4.0
        master = counts.get("shard_trainable_bytes", 4.0 * shard_t)
        # the fp32 shards are DeepSpeed's master partition: reported under optimizer, as DESIGN.md's per-GPU
        # categories and the analytic model count it
        terms += [_Term("weights", half_b * shard_t - master, "always"), _Term("optimizer", master, "always"),
                  _Term("gradients", 0.0, "replace_grads")]
        notes.append(f"DeepSpeed ZeRO-3 over {N} ranks simulated with FSDP2 fully_shard over a fake process group "
                     "(fp32 shards = DeepSpeed's master partition); DeepSpeed's half-precision parameter partition, "
                     "its persistent gradient-partition buffer and the fp32 gradients of the step are added as "
                     "DeepSpeed 0.19.8 allocates them; prefetch and bucket buffers are not included")
        if spec.offload_optimizer:
            terms.append(_Term("optimizer", 0.0, "drop_optimizer"))
            host += master * 3 + half_b * shard_t
            notes.append("offload_optimizer: fp32 master, gradients and optimizer states counted on the host")
        else:
            terms += [_Term("gradients", half_b * shard_t, "always"),
                      _Term("gradients", 4.0 * min(shard_t, 1e9), "opt")]
        if spec.offload_param:
            frozen_shard = counts.get("shard_weights_bytes", 0.0) - counts.get("shard_trainable_bytes", 0.0)
            terms.append(_Term("weights", -frozen_shard - half_b * shard_t, "always"))
            host += frozen_shard + half_b * shard_t
            notes.append("offload_param: parameter partitions counted on the host; layers are fetched per use")
    return terms, host, notes


def _apply_terms(key: tuple, peak: Peak, terms: list[_Term]) -> tuple[float, dict[str, float], dict[str, float]]:
    by = {c: float(peak.by_category.get(c, 0)) for c in CATEGORIES}
    added = {c: 0.0 for c in CATEGORIES}
    for t in terms:
        if t.when == "drop_optimizer":
            continue
        if not _applies(t.when, key):
            continue
        if t.when == "replace_grads":
            added[t.category] -= by[t.category]
        else:
            added[t.category] += t.nbytes
    if any(t.when == "drop_optimizer" for t in terms):
        # offloaded: master and states live on the host; nothing of the optimizer stays on the GPU
        added["optimizer"] = -by["optimizer"]
    total = sum(by.values()) + sum(added.values())
    return total, {c: by[c] + added[c] for c in CATEGORIES}, added


# ---- extrapolation ------------------------------------------------------------------------------------

def _extrapolate(a: Peak, b: Peak, k: int, L: int) -> Peak:
    """Affine extrapolation of one segment from depths k (a) and k+1 (b) to depth L, per category."""
    by = {c: a.by_category.get(c, 0) + (L - k) * (b.by_category.get(c, 0) - a.by_category.get(c, 0))
          for c in CATEGORIES}
    by = {c: max(v, 0) for c, v in by.items()}
    return Peak(sum(by.values()), by)


def _describe_segment(key: tuple, L: int) -> str:
    step, micro, phase = key[0], key[1], key[2]
    where = {"fwd": "forward", "bwd": "backward", "opt": "optimizer step", "zero": "zero_grad",
             "ref": "reference-model forward"}.get(phase, phase)
    pos = key[3:]
    if pos and pos[0] in ("b", "t"):
        i = pos[1] if pos[0] == "b" else L - 1 - pos[1]
        where += f", layer {i + 1} of {L}"
    elif pos:
        where += {"embed": ", embeddings", "head": ", final norm", "logits": ", logits and loss",
                  "end": ", end", "loss": ", loss"}.get(pos[0], f", {pos[0]}")
    s = f"step {step}"
    if micro:
        s += f" (micro-batch {micro + 1})"
    return f"{s}, {where}"


def choose_depth(spec: ProbeSpec, max_full: int = 4) -> tuple[int, ...]:
    """Depths to build: the full depth when it is small, else (k, k+1) with k large enough that both depths have
    the same kinds of layers at both ends of the stack (freeze tuning: the trainable block plus a frozen layer;
    MoE: the leading dense layers plus two sparse ones)."""
    L = spec.num_layers
    if L <= max_full:
        return (L,)
    k = 2
    if spec.finetuning_type == "freeze":
        k = max(k, 2 * (abs(spec.freeze_trainable_layers) + 1))
    cfg = spec.model_config or spec.standin_config
    fk = int(cfg.get("first_k_dense_replace") or 0)
    if fk:
        k = max(k, 2 * (fk + 1))
    dense = [i for i in (cfg.get("mlp_only_layers") or []) if isinstance(i, int)]
    if dense:
        k = max(k, 2 * (max(dense) + 2))
    if k + 1 >= L:
        return (L,)
    return (k, k + 1)


def simulate(spec: ProbeSpec, steps: int = 2, *, depth: str | tuple[int, ...] = "auto", rank: int = 0,
             round_to: int = CUDA_BLOCK, fake: bool = True, other_ranks: tuple[int, ...] = ()) -> SimResult:
    """See `_simulate`; library deprecation warnings raised while building and stepping the model stay inside
    the probe (they concern transformers' own API, not the user's run)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _simulate(spec, steps, depth=depth, rank=rank, round_to=round_to, fake=fake, other_ranks=other_ranks)


def _simulate(spec: ProbeSpec, steps: int = 2, *, depth: str | tuple[int, ...] = "auto", rank: int = 0,
              round_to: int = CUDA_BLOCK, fake: bool = True, other_ranks: tuple[int, ...] = ()) -> SimResult:
    """Simulate `spec` and return the peak live tensor bytes of rank `rank` (a `SimResult`); `other_ranks` are
    simulated too and land in `SimResult.per_rank` (each costs one more simulation).

    `depth`: "auto" (`choose_depth`), "full", or explicit depths ((L,) or (k, k+1)). `steps` ≥ 2 catches the
    steady-state peak. Raises InputError when the model cannot be built from its config, MissingExtra without
    torch/transformers/peft. Wall time: seconds for any model size (only 2-3 layers are built).
    """
    t0 = time.perf_counter()
    if steps < 1:
        raise InputError(f"--steps must be at least 1, got {steps}")
    if depth == "auto":
        depths = choose_depth(spec)
    elif depth == "full":
        depths = (spec.num_layers,)
    else:
        depths = tuple(depth)
    notes: list[str] = []
    if spec.attention in ("fa2", "fa3"):
        notes.append(f"{spec.attention} simulated with SDPA's flash kernel (same saved tensors: output + "
                     "log-sum-exp); the CPU build cannot run CUDA kernels")
    if spec.deepspeed and spec.autocast:
        notes.append("no autocast under DeepSpeed: it runs the half-precision module itself (accelerate sets "
                     "native_amp only outside DeepSpeed)")
    if spec.unsloth_gc:
        notes.append("unsloth checkpointing simulated as standard checkpointing (its CPU offload of layer inputs "
                     "is not modelled: an upper bound)")
    if spec.world_size > 1 and not spec.deepspeed and not spec.fsdp:
        notes.append("DDP gradient buckets are not simulated")
    if spec.stage in ("ppo", "rm"):
        notes.append(f"stage {spec.stage} simulated as a causal-LM loss (value head and generation not modelled)")
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    try:
        books = [run_depth(spec, n, steps, fake=fake, rank=rank, round_to=round_to, notes=notes) for n in depths]
    except DynamicOutputShapeException as err:
        # e.g. transformers' per-expert loop (MoE experts in fp32) indexes tokens with nonzero(): its output size
        # depends on the routing, which fake tensors do not have
        raise InputError(f"simulate cannot run this model's step: {err.func if hasattr(err, 'func') else err} "
                         "has a data-dependent output shape under FakeTensorMode (MoE experts with fp32 trainable "
                         "weights use transformers' per-expert loop); use --mode gpu, or bf16 trainable weights "
                         "(pure_bf16) for the grouped expert kernel") from None
    L = spec.num_layers
    if len(depths) == 1:
        segs = books[0]["segments"]
        counts = {k: float(v) for k, v in books[0]["counts"].items()}
        scale = L / depths[0] if depths[0] != L else 1.0
        if scale != 1.0:
            notes.append(f"simulated at {depths[0]} layers, not extrapolated")
    else:
        k = depths[0]
        a, b = books
        segs = {key: _extrapolate(a["segments"][key], b["segments"][key], k, L)
                for key in a["segments"] if key in b["segments"] and key[0] != "setup"}
        counts = {key: a["counts"][key] + (L - k) * (b["counts"][key] - a["counts"][key]) for key in a["counts"]}
    terms, host, more = _analytic_terms(spec, counts)
    notes += more
    best = None
    step_peak: dict[int, float] = {}
    described: dict[str, dict[str, int]] = {}
    for key, pk in segs.items():
        if key[0] == "setup" or not isinstance(key[0], int):
            continue
        total, by, added = _apply_terms(key, pk, terms)
        described[_describe_segment(key, L)] = {c: int(round(v)) for c, v in by.items()}
        step_peak[key[0]] = max(step_peak.get(key[0], 0.0), total)
        if best is None or total >= best[0]:   # on a tie prefer the later moment (steady state)
            best = (total, by, added, key)
    assert best is not None, "no segment was tracked"
    total, by, added, key = best
    params = {k: int(round(v)) for k, v in counts.items() if k in ("trainable", "total")}
    return SimResult(
        peak_bytes=int(round(total)),
        by_category={c: int(round(v)) for c, v in by.items()},
        segment=_describe_segment(key, L),
        analytic={c: int(round(v)) for c, v in added.items() if v},
        depth=depths,
        num_layers=L,
        rank=rank,
        world_size=spec.world_size,
        steps=steps,
        step_peaks=tuple(int(round(step_peak[s])) for s in sorted(step_peak)),
        wall_s=time.perf_counter() - t0,
        notes=tuple(dict.fromkeys(notes)),
        params=params,
        host_bytes=int(round(host)),
        spec=spec,
        segments=described,
        per_rank={rank: int(round(total)), **{
            r: simulate(spec, steps, depth=depths, rank=r, round_to=round_to, fake=fake).peak_bytes
            for r in other_ranks if r != rank and 0 <= r < max(spec.world_size, 1)}},
    )
