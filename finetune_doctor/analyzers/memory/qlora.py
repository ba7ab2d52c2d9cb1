"""QLoRA (bitsandbytes 4-bit) on the device beyond the packed weights: the dequantised weight of the linear being
computed, in forward and in backward.

Derived from bitsandbytes 0.48.2 (the wheel read in /tmp; LLaMA-Factory requires >= 0.39.0,
requirements/bitsandbytes.txt), ``bitsandbytes/autograd/_functions.py``:

* ``MatMul4Bit.forward`` (:357-384): ``torch.nn.functional.linear(A, F.dequantize_4bit(B, quant_state)
  .to(A.dtype).t(), bias)`` (:373) builds the whole ``out × in`` weight in the quantisation state's dtype, cast to
  the input's dtype when they differ (a second copy), uses it and drops it: autograd keeps only the packed ``B``
  and the state (``ctx.tensors = (None, B)``, :379-382), never the dequantised weight.
* ``MatMul4Bit.backward`` (:387-406): the input gradient ``grad_output @ dequantize_4bit(B).t()`` (:404) dequantises
  the weight again, so the backward of every quantised linear holds one dequantised weight beside the gradient it
  produces. The weight gradient is not computed (``req_gradB`` is False for frozen 4-bit weights).
* ``matmul_4bit`` (:409-450) takes the ``gemv_4bit`` kernel without dequantising only for a single-token input
  without grad (inference); training always takes ``MatMul4Bit``.

The quantisation state itself (an fp32 absmax per 64 elements, or with double quantisation a uint8 absmax per 64
plus an fp32 absmax per 256 of those, ``functional.py:826-900`` ``quantize_4bit`` with ``compress_statistics``) is
part of the stored bytes per parameter (dtypes.py ``weight_bytes_per_param``), persistent, not a transient.

One linear runs at a time, so the transient is that of the largest quantised linear of the stack.
"""

from __future__ import annotations

from finetune_doctor.dtypes import dtype_bytes
from finetune_doctor.run import Run


def is_bnb4(run: Run) -> bool:
    """bitsandbytes 4-bit on the fly (``quantization_bit: 4`` with the bnb method), the path MatMul4Bit serves."""
    return run.quantization_bit == 4 and (run.quantization_method or "bnb") in ("bnb", "bitsandbytes")


def largest_quantized_linear(run: Run) -> int:
    """Elements of the largest single quantised weight (``out × in`` of one linear, one expert's for MoE)."""
    a = run.arch
    return max((lin.in_features * lin.out_features for kind, _n in a.layer_groups() for lin in a.kind_linears(kind)),
               default=0)


def dequant_transient_bytes(run: Run) -> float:
    """Bytes of the dequantised weight a 4-bit linear holds while it runs (forward, checkpoint recompute and
    backward alike): ``out × in`` in the state's dtype (the dtype the weight was loaded in, LF's compute dtype),
    plus a cast to the activation dtype when that differs (:373, :404). 0 outside bitsandbytes 4-bit."""
    if not is_bnb4(run):
        return 0.0
    n = largest_quantized_linear(run)
    state_b = dtype_bytes(run.compute_dtype)
    act_b = dtype_bytes(run.compute_dtype if run.autocast is None else run.autocast)
    return n * state_b + (n * act_b if act_b != state_b else 0.0)
