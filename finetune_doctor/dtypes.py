"""Byte tables shared by the analytic memory model (analyzers/memory.py) and the simulate probe (probes/).

Pure Python, no torch: `doctor lint` may import it. One source for each fact, so the two predictions agree by
construction (tests/test_bytes.py checks both sides against these functions and the functions against the
upstream layouts below).

bitsandbytes layouts, read from bitsandbytes-foundation/bitsandbytes at tag 0.50.1 (and its history):

* blockwise 8-bit optimizer states (``bitsandbytes/optim/optimizer.py``, ``Optimizer2State.init_state`` and
  ``Optimizer1State.init_state``): a tensor with fewer than ``min_8bit_size`` (default 4096) elements keeps fp32
  states; a larger one keeps each state as uint8 (1 B/element) plus one fp32 ``absmax`` per block of
  ``blocksize = 256`` elements (``blocks = n // 256 + bool(n % 256)``). Releases up to 0.43.x used blocks of 2048
  (``blocks = n // 2048``, tags 0.42.0 and 0.43.0); 0.44.0 changed it to 256. Adam/AdEMAMix-style optimizers
  (``Optimizer2State``) keep two states, Lion/Momentum/RMSprop (``Optimizer1State``) one. The 256-entry fp32
  quantization maps (``qmap1``/``qmap2``) are shared by every parameter and not counted per parameter.
* 4-bit weights (``bitsandbytes/functional.py`` ``quantize_4bit``): two 4-bit codes per byte (numel/2 B),
  ``blocksize`` 64 by default with one fp32 absmax per block; with ``compress_statistics`` (double quantization,
  LLaMA-Factory's default ``double_quantization: true``) the absmax is shifted by its mean and quantized with
  ``quantize_blockwise(..., blocksize=256)``: one uint8 per 64-element block, one fp32 absmax per 256 of those,
  and a 256-entry fp32 code per tensor.
* 8-bit weights (``bitsandbytes/nn/modules.py`` ``Int8Params``/``Linear8bitLt``): int8 weight (1 B/element) plus
  one fp32 row scale ``SCB`` per output row.
"""

from __future__ import annotations

# Bytes per element of a stored dtype (torch.finfo / torch.iinfo sizes); 4-bit formats are half a byte packed.
DTYPE_BYTES: dict[str, float] = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "nf4": 0.5, "fp4": 0.5,
                                 "int4": 0.5, "float8": 1}

# bitsandbytes blockwise 8-bit optimizer state (see the module docstring for the source lines).
BNB_OPTIM_BLOCKSIZE = 256
BNB_OPTIM_BLOCKSIZE_BEFORE_0_44 = 2048
BNB_MIN_8BIT_SIZE = 4096
BNB_ABSMAX_BYTES = 4          # fp32 absmax per block

# bitsandbytes 4-bit weights
BNB_4BIT_BLOCKSIZE = 64
BNB_NESTED_BLOCKSIZE = 256    # quantize_blockwise of the absmax under compress_statistics
BNB_CODE_ENTRIES = 256        # fp32 code of the nested quantization, per tensor

# Number of optimizer-state tensors of the size of the parameter, per implementation (the keys of
# run.OPTIM_IMPL's values). AdamW: exp_avg and exp_avg_sq (torch.optim.AdamW; reference/memory/REPORT.md §3); Lion, Adagrad,
# RMSprop: one; AdEMAMix: three (two EMAs of the gradient and one of its square); SGD as HF builds it (no momentum)
# and LOMO/AdaLomo: none; Adafactor with HF's defaults (beta1=None) keeps only the factored second moment, rows +
# columns per matrix, which is O(m+n) rather than O(mn) and counted as zero per parameter.
# Muon (LLaMA-Factory third_party/muon/muon.py:176-178): one momentum buffer per matrix it orthogonalises (its
# other parameters keep AdamW's two moments, analyzers/memory/optstates.py). GaLore/APOLLO keep two moments, but of
# the projected gradient: `lowrank_state_elements` gives their size.
_STATE_COUNT = {
    "fused": 2, "foreach": 2, "forloop": 2, "paged": 2, "schedule_free": 2, "galore": 2, "apollo": 2,
    "8bit": 2, "paged_8bit": 2, "galore_8bit": 2, "8bit_lion": 1, "lion": 1, "adagrad": 1, "rmsprop": 1,
    "ademamix": 3, "sgd": 0, "lomo": 0, "adafactor": 0, "muon": 1,
}
_EIGHT_BIT = ("8bit", "paged_8bit", "galore_8bit", "8bit_lion")


def dtype_bytes(dtype: str, default: float = 2.0) -> float:
    """Bytes per element of `dtype` (``"bfloat16"`` → 2.0); `default` for a name the table does not know."""
    return float(DTYPE_BYTES.get(dtype, default))


def is_8bit_optimizer(impl: str) -> bool:
    """True for the bitsandbytes blockwise 8-bit optimizer implementations."""
    return impl in _EIGHT_BIT


def optimizer_state_count(impl: str) -> int:
    """How many parameter-sized state tensors `impl` keeps (AdamW 2, Lion 1, SGD 0); unknown names count as AdamW."""
    return _STATE_COUNT.get(impl, 2)


def optimizer_state_bytes_per_param(impl: str, state_dtype_bytes: float,
                                    blocksize: int = BNB_OPTIM_BLOCKSIZE) -> float:
    """Persistent optimizer-state bytes per parameter of a large tensor (≥ 4096 elements for 8-bit).

    Full-precision states take `state_dtype_bytes` each (4.0 for fp32 masters or fp32 trainable weights, else the
    parameter's dtype). bitsandbytes 8-bit: per state 1 B plus an fp32 absmax per `blocksize` elements, so 8-bit
    AdamW is ``2 + 8/256`` B/param at bitsandbytes ≥ 0.44 (``2 + 8/2048`` before).
    """
    k = optimizer_state_count(impl)
    if is_8bit_optimizer(impl):
        return k * (1.0 + BNB_ABSMAX_BYTES / blocksize)
    return k * float(state_dtype_bytes)


def optimizer_state_bytes(impl: str, numel: int, elem_bytes: float, blocksize: int = BNB_OPTIM_BLOCKSIZE) -> int:
    """Exact optimizer-state bytes of one parameter tensor of `numel` elements and `elem_bytes` bytes each.

    bitsandbytes 8-bit: tensors under ``min_8bit_size`` (4096) elements keep fp32 states (4 B each); larger ones
    1 B per element per state plus ``ceil(numel / blocksize)`` fp32 absmax values per state. Others: states in the
    parameter's dtype.
    """
    k = optimizer_state_count(impl)
    if is_8bit_optimizer(impl):
        if numel < BNB_MIN_8BIT_SIZE:
            return k * 4 * numel
        return k * (numel + BNB_ABSMAX_BYTES * -(-numel // blocksize))
    return int(k * numel * elem_bytes)


def lowrank_state_elements(out_features: int, in_features: int, rank: int) -> tuple[int, int]:
    """(elements of one projected gradient / Adam moment, elements of the projector) of GaLore or APOLLO on one
    ``out × in`` matrix with ``proj_type: std`` (LF's default): the smaller side is projected to `rank`, so the
    moments are ``r × max(out, in)`` and the projector ``r × min(out, in)`` (GaLore @2cc66f8
    ``galore_projector.py:12-21``, APOLLO @76b3472 ``random_projector.py:108-116``); a rank above the smaller side
    keeps the whole side (``Vh[:rank]`` of a ``full_matrices=False`` SVD has at most min(out, in) rows)."""
    r = min(rank, out_features, in_features)
    return r * max(out_features, in_features), r * min(out_features, in_features)


def weight_bytes_per_param(dtype: str, double_quant: bool = True) -> float:
    """Bytes per parameter of stored weights, quantization overhead included (large tensors).

    NF4/FP4: 0.5 B + absmax: fp32 per 64 elements (4/64 = 0.0625 B), or with double quantization a uint8 per 64
    elements plus an fp32 per 64·256 (1/64 + 4/16384 ≈ 0.0159 B). int8 (LLM.int8): 1 B (the per-row fp32 scale is
    negligible per parameter). Else the dtype's size.
    """
    if dtype in ("nf4", "fp4", "int4"):
        if double_quant:
            return 0.5 + 1 / BNB_4BIT_BLOCKSIZE + BNB_ABSMAX_BYTES / (BNB_4BIT_BLOCKSIZE * BNB_NESTED_BLOCKSIZE)
        return 0.5 + BNB_ABSMAX_BYTES / BNB_4BIT_BLOCKSIZE
    return dtype_bytes(dtype)


def quantized_weight_tensors(numel: int, out_features: int, bits: int, double_quant: bool = True) -> dict[str, int]:
    """Byte size of each tensor bitsandbytes stores for one quantized Linear weight of `numel` elements.

    4-bit: ``weight`` (packed uint8, ceil(numel/2) B), ``absmax`` (fp32 per 64 elements, or uint8 per 64 with
    double quantization, plus ``absmax2`` fp32 per 256 blocks and a 256-entry fp32 ``code``). 8-bit: ``weight``
    (int8, numel B) and ``SCB`` (fp32 per output row). Raises ValueError for other `bits`.
    """
    if bits == 4:
        blocks = -(-numel // BNB_4BIT_BLOCKSIZE)
        out = {"weight": (numel + 1) // 2}
        if double_quant:
            out["absmax"] = blocks
            out["absmax2"] = BNB_ABSMAX_BYTES * -(-blocks // BNB_NESTED_BLOCKSIZE)
            out["code"] = 4 * BNB_CODE_ENTRIES
        else:
            out["absmax"] = BNB_ABSMAX_BYTES * blocks
        return out
    if bits == 8:
        return {"weight": numel, "SCB": 4 * out_features}
    raise ValueError(f"bitsandbytes stores 4- or 8-bit weights, not {bits}-bit")
