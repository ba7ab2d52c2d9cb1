"""Numerics probe: does a forward pass overflow in the configured half precision, and does the fix remove it?

With the model's real weights on disk, the probe runs forward passes on real samples in the configured dtype with
a forward hook on every module that records the largest finite magnitude of its outputs and whether any output
element is inf or NaN — the check transformers' ``DebugUnderflowOverflow`` (``debug_utils.py``) does, reduced to
what a diagnosis needs: the first module, in execution order, whose output is not finite. It then repeats the pass
with the fix applied (bf16 instead of fp16, or the named modules upcast to fp32) and reports whether the overflow
is gone. fp16's largest finite value is 65504 (IEEE 754 binary16); bf16 shares fp32's exponent range (max ≈ 3.39e38).

Random weights say nothing about overflow (real checkpoints have the outlier features that overflow fp16), so
without weights on disk the probe returns ``confirmed=None`` with a note saying numerics cannot be confirmed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

FP16_MAX = 65504.0
WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "model*.bin")


@dataclass(frozen=True)
class PassResult:
    """One forward pass: the first non-finite module (None if all finite) and the largest magnitudes seen."""

    dtype: str
    first_overflow: str | None
    overflow_modules: tuple[str, ...]
    max_abs: float                      # largest finite magnitude over all module outputs
    max_abs_module: str | None
    loss: float | None


@dataclass(frozen=True)
class NumericsResult:
    """`confirmed` is True when the configured dtype overflows and the fixed one does not, False when the configured
    pass is already finite or the fix does not help, None when numerics could not be probed (`note` says why)."""

    confirmed: bool | None
    note: str
    passes: tuple[PassResult, ...] = ()
    samples: int = 0
    upcast_modules: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed, "note": self.note, "samples": self.samples,
            "upcast_modules": list(self.upcast_modules),
            "passes": [{"dtype": p.dtype, "first_overflow": p.first_overflow,
                        "overflow_modules": list(p.overflow_modules[:10]), "max_abs": p.max_abs,
                        "max_abs_module": p.max_abs_module, "loss": p.loss} for p in self.passes],
        }


def weights_on_disk(model_path: str | None) -> bool:
    """True when `model_path` is a local directory holding checkpoint weights (safetensors or .bin shards)."""
    if not model_path:
        return False
    p = Path(model_path)
    return p.is_dir() and any(any(p.glob(pat)) for pat in WEIGHT_FILES)


def _forward_pass(model: Any, batches: Sequence[Any], dtype_name: str, autocast: bool, device: str) -> PassResult:
    import torch

    order: list[str] = []
    bad: list[str] = []
    best = [0.0, None]

    def hook(name: str):
        def fn(mod, args, out):
            tensors = [out] if torch.is_tensor(out) else [t for t in (out if isinstance(out, (tuple, list)) else
                                                                      getattr(out, "values", lambda: [])())
                                                          if torch.is_tensor(t)]
            for t in tensors:
                if not t.is_floating_point():
                    continue
                finite = torch.isfinite(t)
                if not bool(finite.all()):
                    if name not in bad:
                        bad.append(name)
                vals = t.detach().abs().masked_fill(~finite, 0)
                m = float(vals.max()) if vals.numel() else 0.0
                if m > best[0]:
                    best[0], best[1] = m, name
            order.append(name)
        return fn

    handles = [mod.register_forward_hook(hook(name)) for name, mod in model.named_modules() if name]
    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    losses = []
    try:
        with torch.no_grad():
            for ids in batches:
                ids = ids.to(device)
                ctx = torch.autocast(device, dtype=dt) if autocast else _null()
                with ctx:
                    out = model(input_ids=ids, labels=ids)
                losses.append(float(out.loss.float()))
    finally:
        for h in handles:
            h.remove()
    loss = sum(losses) / len(losses) if losses else None
    return PassResult(dtype_name, bad[0] if bad else None, tuple(bad), best[0], best[1],
                      None if loss is None or not math.isfinite(loss) else loss)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def probe_numerics(model_path: str | None, batches: Sequence[Any] | None, dtype: str = "float16",
                   fixed_dtype: str = "bfloat16", upcast_modules: Sequence[str] = (), *, device: str = "cpu",
                   autocast: bool = False) -> NumericsResult:
    """Forward `batches` (LongTensors of token ids, b×s) through the checkpoint at `model_path` in `dtype`, then
    with the fix: in `fixed_dtype`, or in `dtype` with the modules whose names end with any of `upcast_modules`
    kept in fp32 (their outputs cast back). `autocast=True` runs fp32 weights under autocast as AMP training does;
    False casts the weights (pure half precision, what a half-precision checkpoint under autocast mostly is).

    Returns NumericsResult; confirmed=None without weights on disk or without samples. Never raises for
    missing extras: the note says what is missing.
    """
    if not weights_on_disk(model_path):
        return NumericsResult(None, "numerics cannot be confirmed: the model's weights are not on disk here, and "
                                    "random weights do not have the outlier activations that overflow fp16")
    if not batches:
        return NumericsResult(None, "numerics cannot be confirmed: no samples of the configured data were read")
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        from finetune_doctor.errors import install_hint

        return NumericsResult(None, f"numerics probe needs torch and transformers: {install_hint('torch,transformers')}")
    passes = []

    from transformers.utils import logging as hf_logging

    def load(dt_name: str):
        dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dt_name]
        hf_logging.disable_progress_bar()   # the doctor's output is a report, not a loading bar
        try:
            m = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32 if autocast else dt)
        finally:
            hf_logging.enable_progress_bar()
        return m.to(device).eval()

    model = load(dtype)
    passes.append(_forward_pass(model, batches, dtype, autocast, device))
    if upcast_modules:
        hs = []
        for name, mod in model.named_modules():
            if name and any(name.endswith(u) for u in upcast_modules):
                mod.float()
                hs.append(mod.register_forward_pre_hook(
                    lambda m, args: tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a
                                          for a in args)))
                hs.append(mod.register_forward_hook(
                    lambda m, a, out, dt=passes[0].dtype: out.to(getattr(torch, dt)) if torch.is_tensor(out) else out))
        fixed = _forward_pass(model, batches, dtype, autocast, device)
        fixed = replace(fixed, dtype=f"{dtype}+fp32[{','.join(upcast_modules)}]")
        for h in hs:
            h.remove()
    else:
        del model
        model = load(fixed_dtype)
        fixed = _forward_pass(model, batches, fixed_dtype, autocast, device)
    passes.append(fixed)
    before, after = passes
    if before.first_overflow is None:
        note = (f"no overflow in {dtype}: every module output is finite (largest magnitude {before.max_abs:.4g} in "
                f"{before.max_abs_module})")
        return NumericsResult(False, note, tuple(passes), len(batches), tuple(upcast_modules))
    if after.first_overflow is None:
        note = (f"{dtype} overflows first in {before.first_overflow} ({len(before.overflow_modules)} modules "
                f"non-finite); {after.dtype} is finite everywhere (largest magnitude {after.max_abs:.4g} in "
                f"{after.max_abs_module}, above fp16's {FP16_MAX:.0f})" if after.max_abs > FP16_MAX else
                f"{dtype} overflows first in {before.first_overflow}; {after.dtype} is finite everywhere")
        return NumericsResult(True, note, tuple(passes), len(batches), tuple(upcast_modules))
    note = (f"{dtype} overflows first in {before.first_overflow}; the fix ({after.dtype}) still overflows in "
            f"{after.first_overflow}")
    return NumericsResult(False, note, tuple(passes), len(batches), tuple(upcast_modules))
