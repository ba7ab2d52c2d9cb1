"""Torch helpers of the simulate probe and the patches that make a transformers/peft step run under FakeTensorMode.

The three prototype obstacles (reference/memory/REPORT.md §4) are handled in `fake_patches`: the dense causal mask
(transformers' ``is_tracing`` treats FakeTensors as traced), ``Module.to`` on fake parameters (always takes the
``swap_tensors`` path, which fails), and FSDP2's storage resizes outside the dispatcher.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from finetune_doctor.errors import MissingExtra
from finetune_doctor.probes.spec import ProbeSpec


def load_torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - the test environment has torch
        raise MissingExtra("the simulate probe", "torch") from None
    return torch


def dtype_of(name: str | None):
    torch = load_torch()
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            None: None}.get(name, torch.bfloat16)


def storage_dtype(spec: ProbeSpec) -> str:
    """Dtype the non-quantized weights are built in: the checkpoint dtype, or the GPU dtype run.py resolved
    (DeepSpeed casts an fp32 checkpoint to the compute dtype)."""
    w = spec.weights_dtype
    return w if w in ("float32", "bfloat16", "float16") else spec.checkpoint_dtype


@contextlib.contextmanager
def fake_patches(tracker: Any = None, *, gather_in_place: bool = False) -> Iterator[None]:
    """Patches that make a transformers/peft training step behave under FakeTensorMode as it does for real.

    1. ``transformers.masking_utils.find_packed_sequence_indices`` → None: with FakeTensors ``is_tracing`` is
       true, so the packed-sequence check cannot read values and assumes packing, and a dense b×1×s×s mask plus
       masked SDPA is built (+O(s²) bytes; reference/memory/REPORT.md §4 obstacle 1). The probe's batches are unpacked rows of
       full length, for which the real check returns None.
    2. ``nn.Module.to`` on modules holding FakeTensors: the default path swaps tensors
       (``torch.utils.swap_tensors``), which fails on fake parameters (reference/memory/REPORT.md §4 obstacle 2). A no-op when
       nothing changes; dtype changes are done by assigning ``param.data`` as LF's own upcast does.
       ``copy.deepcopy`` of a FakeTensor copies it within its own fake mode (the default makes a new mode).
    3. DTensor sharding propagation (shape inference on full-size fake arguments) is not counted.
    4. `gather_in_place` (the DeepSpeed ZeRO-3 stand-in): FSDP2 keeps each unit's flat all-gather buffer alive
       until the next unit's all-gather (``_fsdp_param_group.py`` ``comm_ctx.all_gather_state``, "free unless
       saved"), on top of the parameters copied out of it; DeepSpeed gathers into the parameters' own storage, so
       the stand-in drops that reference once the copy-out is done.
    5. FSDP2's ``alloc_storage`` / ``free_storage`` resize storages outside the dispatcher; the tracker is told.
    """
    torch = load_torch()
    import transformers.masking_utils as mu
    from torch._subclasses.fake_tensor import FakeTensor

    saved: list[tuple[Any, str, Any]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    patch(mu, "find_packed_sequence_indices", lambda position_ids: None)
    patch(torch.nn.Module, "to", _safe_to(torch, FakeTensor, torch.nn.Module.to))
    saved.append((FakeTensor, "__deepcopy__", FakeTensor.__dict__.get("__deepcopy__")))
    FakeTensor.__deepcopy__ = _fake_deepcopy(torch)
    if tracker is not None:
        _patch_fsdp2(patch, tracker, gather_in_place)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is None and obj is FakeTensor:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


def _safe_to(torch: Any, fake_cls: type, orig_to: Any):
    """``Module.to`` that changes dtypes of fake parameters by assigning ``param.data`` (patch 2)."""

    def safe_to(self, *args, **kwargs):
        tensors = [t for t in self.parameters()] + [t for t in self.buffers()]
        if not any(isinstance(t, fake_cls) for t in tensors):
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

    return safe_to


def _fake_deepcopy(torch: Any):
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

    return fake_deepcopy


def _patch_fsdp2(patch: Any, tracker: Any, gather_in_place: bool) -> None:
    """Patches 3-5: FSDP2's storage resizes reach the tracker, sharding propagation is not counted, and (the
    DeepSpeed ZeRO-3 stand-in) the flat all-gather buffer is dropped after the copy-out."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
    except ImportError:  # pragma: no cover - torch without FSDP2
        return
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    orig_alloc, orig_free = _fsdp_param.alloc_storage, _fsdp_param.free_storage
    orig_init = _fsdp_param.FSDPParam.init_all_gather_outputs
    orig_meta = ShardingPropagator._propagate_tensor_meta_non_cached
    orig_wait = _fsdp_param_group.FSDPParamGroup.wait_for_unshard

    def alloc(tensor):
        orig_alloc(tensor)
        tracker.track([tensor], "weights")
        tracker.storage_resized(tensor.untyped_storage())

    def free(tensor):
        orig_free(tensor)
        tracker.storage_resized(tensor.untyped_storage())

    def init_outputs(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        tracker.track(self.all_gather_outputs, "weights")   # gathered parameters count as weights

    def meta(self, *args, **kwargs):
        # shape propagation builds full-size fake arguments under the ambient fake mode; not memory
        tracker.paused += 1
        try:
            return orig_meta(self, *args, **kwargs)
        finally:
            tracker.paused -= 1

    def wait(self, *args, **kwargs):
        out = orig_wait(self, *args, **kwargs)
        self.comm_ctx.all_gather_state = None
        return out

    patch(_fsdp_param.FSDPParam, "init_all_gather_outputs", init_outputs)
    patch(ShardingPropagator, "_propagate_tensor_meta_non_cached", meta)
    if gather_in_place:
        patch(_fsdp_param_group.FSDPParamGroup, "wait_for_unshard", wait)
    patch(_fsdp_param, "alloc_storage", alloc)
    patch(_fsdp_param, "free_storage", free)
    patch(_fsdp_param_group, "alloc_storage", alloc)
