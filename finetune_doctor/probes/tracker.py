"""Live tensor bytes by category, tracked through a TorchDispatchMode and weak references to storages.

Every operator output passes through `LiveBytesTracker.__torch_dispatch__`; each storage not seen before is
counted once (views and in-place results share a storage and are not counted again) and a weakref callback
subtracts its bytes when Python frees it. This is the bookkeeping the CUDA caching allocator's
``memory_allocated`` counter does, so the tracker's peak is the analogue of ``max_memory_allocated``. It works on
real tensors and on FakeTensors alike, because a FakeTensor carries an (unallocated) storage object of the real
size; that is what lets a simulated step and a real CPU step be compared byte for byte.

Why not ``torch.distributed._tools.mem_tracker.MemTracker`` by default: it also hooks every module
(``ModTracker``) and snapshots per module, which costs 22-40 s per full fine-tuning step of a 7B model and
110-180 s with LoRA, against 2-7 s for a storage-only tracker (reference/memory/REPORT.md §4, "Run cost").
`FrozenSafeMemTracker` below is offered for per-module breakdowns.

Categories (bytes), the keys of DESIGN.md ``memory.per_gpu_gib`` where they overlap:

- ``weights``: parameters (trainable and frozen), registered before the step.
- ``buffers``: module buffers (rotary ``inv_freq``...).
- ``gradients``: ``param.grad`` storages, re-categorised when autograd accumulates them and at each sweep.
- ``optimizer``: optimizer state tensors, re-categorised after each ``optimizer.step``.
- ``activations``: created during forward (saved tensors and forward temporaries).
- ``logits``: created from the output-embedding (lm_head) forward to the end of forward: logits, their fp32
  upcast and the loss.
- ``temp``: created in backward or in the optimizer step and not (yet) re-categorised: gradients of
  activations, recomputation under checkpointing, foreach/for-loop AdamW temporaries.
- ``inputs``: the batch.

Sizes are rounded up to `round_to` bytes per storage (512 mirrors the CUDA caching allocator's minimum block,
``c10/cuda/CUDACachingAllocator.cpp`` kMinBlockSize, as MemTracker's ``_PYTORCH_MIN_ALLOCATE`` does; 1 counts
exact bytes as a CPU run allocates them).

Storage resizes that bypass the dispatcher (``UntypedStorage.resize_``, used by FSDP2 to free and re-allocate
unsharded parameters, ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py`` alloc_storage/free_storage) are
reported with `storage_resized`; fakemode.py patches those two FSDP2 helpers to call it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable

CATEGORIES = ("weights", "buffers", "gradients", "optimizer", "activations", "logits", "temp", "inputs")


@dataclass
class Peak:
    """The largest live total seen in one segment of the step, with the per-category bytes at that moment."""

    total: int = -1
    by_category: dict[str, int] = field(default_factory=dict)


def _make_mode_base():
    # TorchDispatchMode lives in torch; this module must stay importable without torch so that `doctor lint`
    # can import finetune_doctor.probes.spec freely. The tracker class is built on first use.
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def _storages(t: Any) -> list:
    """Untyped storages behind a tensor, unwrapping traceable subclasses (DTensor → its local shard)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    out = []
    stack = [t]
    while stack:
        obj = stack.pop()
        if is_traceable_wrapper_subclass(obj):
            attrs, _ = obj.__tensor_flatten__()
            import torch

            stack.extend(v for v in (getattr(obj, a) for a in attrs) if isinstance(v, torch.Tensor))
        else:
            try:
                out.append(obj.untyped_storage())
            except (RuntimeError, NotImplementedError):
                # sparse and some opaque tensors have no storage; they do not occur in a training step
                continue
    return out


class _TrackerMixin:
    """Bookkeeping shared by the dispatch-mode tracker; kept separate so it can be unit-tested without torch."""

    def _init_books(self, round_to: int, trace: bool = False) -> None:
        self.round_to = max(1, int(round_to))
        self._info: dict[int, list] = {}          # id(storage) -> [category, nbytes, weakref, serial]
        self.live = {c: 0 for c in CATEGORIES}
        self.total = 0
        self.peak = Peak()
        self.segment: tuple = ("setup",)
        self.segment_peaks: dict[tuple, Peak] = {}
        self.default_category = "temp"
        self.events = 0
        self.paused = 0
        # the allocation trace (`trace=True`): ("a", serial, bytes, stream) for every storage allocation,
        # ("f", serial) for every free, ("m", segment label) at each segment boundary, in execution order; the
        # allocator replay (probes/replay.py) reads it. Sizes are the storages' exact bytes (the allocator rounds).
        self.trace: list[tuple] | None = [] if trace else None
        self._serial = 0
        # True while the probe builds the model with tracing on: storages are traced but stay out of the books
        # until `track` (or an op's output) names them, so the simulated peaks do not depend on tracing
        self.untracked = False

    def _size(self, nbytes: int) -> int:
        r = self.round_to
        return -(-nbytes // r) * r if nbytes else 0

    def _on_free(self, key: int, _ref: Any) -> None:
        rec = self._info.pop(key, None)
        if rec is not None:
            if rec[0] is not None:
                self.live[rec[0]] -= rec[1]
                self.total -= rec[1]
            if self.trace is not None and rec[3]:
                self.trace.append(("f", rec[3]))

    def _trace_alloc(self, nbytes: int) -> int:
        """Record an allocation of `nbytes` on the default stream (0); returns its serial (0: nothing allocated,
        as the allocator skips zero-byte requests)."""
        if self.trace is None or not nbytes:
            return 0
        self._serial += 1
        self.trace.append(("a", self._serial, int(nbytes), 0))
        return self._serial

    def _trace_realloc(self, rec: list, nbytes: int) -> None:
        # a storage that changes size is a free of the old block and an allocation of a new one
        if self.trace is None:
            return
        if rec[3]:
            self.trace.append(("f", rec[3]))
        rec[3] = self._trace_alloc(nbytes)

    def _add(self, st: Any, category: str) -> bool:
        key = id(st)
        rec = self._info.get(key)
        if rec is not None:
            if rec[2]() is st and rec[0] is None:
                # allocated while only tracing (`untracked`): joins the books now, as an unknown storage would
                n = self._size(st.nbytes())
                if n != rec[1]:
                    self._trace_realloc(rec, st.nbytes())
                    rec[1] = n
                if self.untracked:
                    return False
                rec[0] = category
                self.live[category] += n
                self.total += n
                return True
            if rec[2]() is st:
                n = self._size(st.nbytes())
                if n == rec[1]:
                    return False
                # an out= or resize_ op grew (or shrank) a storage already counted
                self.live[rec[0]] += n - rec[1]
                self.total += n - rec[1]
                rec[1] = n
                self._trace_realloc(rec, st.nbytes())
                return True
            self._on_free(key, None)  # id reused after the old storage died without its callback running yet
        n = self._size(st.nbytes())
        serial = self._trace_alloc(st.nbytes())
        if self.untracked:
            # traced, not counted: the books start where they always did (see `untracked`)
            self._info[key] = [None, n, weakref.ref(st, lambda r, k=key: self._on_free(k, r)), serial]
            return False
        self._info[key] = [category, n, weakref.ref(st, lambda r, k=key: self._on_free(k, r)), serial]
        self.live[category] += n
        self.total += n
        return True

    def _note_peak(self) -> None:
        t = self.total
        if t > self.peak.total:
            self.peak = Peak(t, dict(self.live))
        sp = self.segment_peaks.get(self.segment)
        if sp is None or t > sp.total:
            self.segment_peaks[self.segment] = Peak(t, dict(self.live))

    # ---- public API ------------------------------------------------------------------------------------
    def set_segment(self, *label: Any) -> None:
        """Name the part of the step that follows (e.g. ``(2, "bwd", 5)``); peaks are also kept per segment."""
        self.segment = tuple(label)
        if self.trace is not None:
            self.trace.append(("m", self.segment))
        self._note_peak()

    def track(self, tensors: Iterable[Any], category: str) -> None:
        """Count `tensors` (already allocated) under `category`, or move them there if already counted."""
        changed = False
        for t in tensors:
            if t is None:
                continue
            for st in _storages(t):
                key = id(st)
                rec = self._info.get(key)
                if rec is not None and rec[2]() is st and rec[0] is not None:
                    if rec[0] != category:
                        self.live[rec[0]] -= rec[1]
                        self.live[category] += rec[1]
                        rec[0] = category
                else:
                    changed |= self._add(st, category)
        if changed:
            self._note_peak()

    def storage_resized(self, st: Any) -> None:
        """A storage changed size outside the dispatcher (FSDP2 alloc/free of unsharded parameters)."""
        key = id(st)
        rec = self._info.get(key)
        if rec is None or rec[2]() is not st or rec[0] is None:
            if st.nbytes() or rec is not None:
                self._add(st, self.default_category)
                self._note_peak()
            return
        n = self._size(st.nbytes())
        self.live[rec[0]] += n - rec[1]
        self.total += n - rec[1]
        rec[1] = n
        self._trace_realloc(rec, st.nbytes())
        self._note_peak()

    def snapshot(self) -> dict[str, int]:
        """Live bytes per category now (plus ``total``)."""
        out = dict(self.live)
        out["total"] = self.total
        return out


_TRACKER_CLS = None
_DTENSOR = None
_WAIT_TENSOR = None


def _active_fake_mode():
    from torch._guards import active_fake_mode

    return active_fake_mode()


def LiveBytesTracker(round_to: int = 1, trace: bool = False):  # noqa: N802 - a factory, named as a class
    """Create a live-bytes tracker (a TorchDispatchMode); use it as ``with tracker: ...``.

    `round_to`: per-storage rounding in bytes (512 for CUDA's allocator, 1 for exact CPU bytes). Register
    pre-existing tensors with ``tracker.track(model.parameters(), "weights")`` and so on; tensors created inside
    the ``with`` block are counted in ``tracker.default_category`` (set it to "activations" during forward,
    "temp" in backward). Read ``tracker.peak`` (a `Peak`), ``tracker.segment_peaks`` and ``tracker.snapshot()``;
    with `trace`, ``tracker.trace`` holds every allocation and free in order (see `_TrackerMixin._init_books`).
    """
    global _TRACKER_CLS, _DTENSOR, _WAIT_TENSOR
    if _TRACKER_CLS is None:
        base = _make_mode_base()
        import torch

        try:
            from torch.distributed.tensor import DTensor as _dt

            _DTENSOR = _dt
            _WAIT_TENSOR = torch.ops._c10d_functional.wait_tensor.default
        except (ImportError, AttributeError):  # pragma: no cover - torch built without distributed
            _DTENSOR = _WAIT_TENSOR = None

        class _LiveBytesTracker(_TrackerMixin, base):
            def __init__(self, round_to: int = 1, trace: bool = False):
                base.__init__(self)
                self._init_books(round_to, trace)
                self._entry_fake = None

            def __enter__(self):
                self._entry_fake = _active_fake_mode()
                return base.__enter__(self)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if _DTENSOR is not None and any(t is _DTENSOR for t in types):
                    # let DTensor desugar into local-shard ops first; they come back through this mode, so its
                    # temporaries are seen too (as MemTracker does, mem_tracker.py __torch_dispatch__)
                    return NotImplemented
                fake = _active_fake_mode()
                if func is _WAIT_TENSOR and fake is not None:
                    # the fake kernel of wait_tensor returns a new tensor; eager returns its input
                    return args[0]
                out = func(*args, **(kwargs or {}))
                if self.paused or fake is not self._entry_fake:
                    # DTensor's sharding propagation runs ops under a (nested or the ambient) FakeTensorMode
                    # to learn output shapes; they allocate nothing on the device. simulate.fake_patches pauses
                    # the tracker around it; a different fake mode than at entry also marks it (MemTracker).
                    return out
                self.events += 1
                changed = False
                cat = self.default_category
                stack = [out]
                while stack:
                    o = stack.pop()
                    if isinstance(o, (list, tuple)):
                        stack.extend(o)
                    elif hasattr(o, "untyped_storage"):
                        for st in _storages(o):
                            changed |= self._add(st, cat)
                if changed:
                    self._note_peak()
                return out

        _TRACKER_CLS = _LiveBytesTracker
    return _TRACKER_CLS(round_to, trace)


def FrozenSafeMemTracker():  # noqa: N802 - factory, see LiveBytesTracker
    """``torch.distributed._tools.mem_tracker.MemTracker`` that accepts frozen parameters.

    MemTracker registers a gradient hook on every parameter it tracks; ``Tensor.register_hook`` raises
    "cannot register a hook on a tensor that doesn't require gradient" for frozen parameters, which is every base
    weight of a LoRA model (reference/memory/REPORT.md §4, "Limitation found here"). This subclass installs the
    hooks only on parameters that require grad and still counts frozen ones as parameters.
    """
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class _FrozenSafe(MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks: bool = True):
            def _grad_hook(grad):
                self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

            param_memory = 0
            for param in module.parameters():
                winfos = self._update_and_maybe_create_winfos(param, _MemRefType.PARAM)
                param_memory += sum(w.mem_consumed for w in winfos)
                if param.grad is not None:
                    self._update_and_maybe_create_winfos(param.grad, _MemRefType.GRAD)
                if (install_grad_hooks and param.requires_grad
                        and self._param_to_grad_hook_handles.get(param, None) is None):
                    h1 = param.register_hook(_grad_hook)
                    h2 = param.register_post_accumulate_grad_hook(lambda p: _grad_hook(p.grad))
                    self._param_to_grad_hook_handles[param] = (h1, h2)
            buffer_memory = 0
            for buf in module.buffers():
                winfos = self._update_and_maybe_create_winfos(buf, _MemRefType.BUFFER)
                buffer_memory += sum(w.mem_consumed for w in winfos)
            return param_memory, buffer_memory

    return _FrozenSafe()
