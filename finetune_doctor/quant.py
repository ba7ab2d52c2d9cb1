"""Weights as a checkpoint stores them: the ``quantization_config`` of a config.json, and its bytes per parameter.

`parse_quantization_config` turns the dict into a frozen `QuantSpec`. What LLaMA-Factory does with a format
(`lf_treatment`), pricing a model's linears under a spec and resolving the YAML's quantization keys against the
checkpoint live in run/quantization.py: resolution, not a value type (issue #22).

Layouts (bytes per quantized weight element of an ``in_features x out_features`` linear, group size g):

* AWQ GEMM/GEMV (AutoAWQ ``awq/modules/linear/gemm.py`` ``WQLinear_GEMM``): int32-packed ``qweight``
  (bits/8), packed ``qzeros`` per group (bits/8 / g) and fp16 ``scales`` per group (2 / g).
* GPTQ (auto-gptq / GPTQModel ``qlinear`` ``QuantLinear``): packed ``qweight`` (bits/8), ``qzeros`` and fp16
  ``scales`` per group as AWQ, plus an int32 ``g_idx`` per input row (4 / out). ``group_size: -1`` is one group
  per column (g = in).
* bitsandbytes 4-bit (``bnb.nn.Params4bit``): 0.5 + an fp32 absmax per 64 (4/64), or with
  ``bnb_4bit_use_double_quant`` an 8-bit absmax per 64 plus an fp32 scale per 256 of those
  (1/64 + 4/(64*256)); 8-bit LLM.int8 (``Int8Params``): 1 + an fp32 ``SCB`` per output row (4 / in).
* FP8 (transformers ``integrations/finegrained_fp8.py``; DeepSeek-V3, Qwen3-*-FP8): 1 byte plus an fp32
  ``weight_scale_inv`` per ``weight_block_size`` block (4 / (b0*b1)); without a block size one scale per tensor.
  ``fbgemm_fp8``: one fp32 scale per output row (4 / in).
* MXFP4 (OCP Microscaling spec v1.0; transformers ``quantizers/quantizer_mxfp4.py``; gpt-oss): 4-bit E2M1
  elements in blocks of 32 sharing one E8M0 scale byte: 0.5 + 1/32.
* HQQ (``hqq/core/quantize.py`` ``Quantizer``; transformers ``HqqConfig``): nbits/8 plus an fp16 scale and an
  fp16 zero per group (4 / g).
* EETQ (``eetq`` ``EetqLinear``): int8 weights with an fp16 scale per output channel (2 / in).
* compressed-tensors (``compressed_tensors/quantization/quant_args.py``): ``num_bits``/8 plus one scale (and
  a zero point when asymmetric) in the checkpoint dtype per tensor, channel, group or block, as ``strategy``
  says.

Modules a format leaves in the checkpoint dtype: embeddings, norms, routers and lm_head always (AWQ/GPTQ/bnb/
HQQ quantize only the decoder's ``nn.Linear`` layers), plus whatever ``modules_to_not_convert`` /
``llm_int8_skip_modules`` / ``skip_modules`` / ``ignore`` name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class QuantSpec:
    """A checkpoint's quantization as its config.json states it.

    `method` is ``quant_method`` lower-cased (``awq``, ``gptq``, ``bitsandbytes``, ``fp8``, ``fbgemm_fp8``,
    ``mxfp4``, ``hqq``, ``eetq``, ``compressed-tensors``, ``aqlm``, ... or ``unknown`` when only a name
    suggests quantization). `bits` per weight element, `group_size` elements per scale (0: per output channel,
    -1: per tensor), `block` the FP8 block shape, `scale_bytes`/`zero_bytes` per group, `double_quant`
    (bitsandbytes nested absmax), `skip` the module-name patterns left unquantized, `known` whether the bytes
    are modelled (False: an unknown format), `from_name` whether only the repository name's ending says so
    (``-AWQ``: `hinted_spec`, sized as such uploads are stored and reported as an assumption).
    """

    method: str
    bits: float | None = None
    group_size: int = 0
    block: tuple[int, int] | None = None
    scale_bytes: float = 2.0
    zero_bytes: float = 0.0
    double_quant: bool = False
    skip: tuple[str, ...] = ()
    known: bool = True
    detail: str = ""
    # sized from a repository name's ending (`hinted_spec`), no config.json read: an assumption of the report
    from_name: bool = False

    @property
    def label(self) -> str:
        """Short human form, e.g. ``awq 4-bit g128``, ``fp8 block 128x128``."""
        parts = [self.method]
        if self.bits:
            parts.append(f"{self.bits:g}-bit")
        if self.block:
            parts.append(f"block {self.block[0]}x{self.block[1]}")
        elif self.group_size > 0:
            parts.append(f"g{self.group_size}")
        return " ".join(parts)

    def bytes_per_param(self, in_features: int, out_features: int) -> float | None:
        """Stored bytes per weight element of one quantized linear, or None when the format is not modelled."""
        if not self.known or not self.bits:
            return None
        b = self.bits / 8
        m = self.method
        if m == "bitsandbytes":
            if self.bits == 8:
                return 1 + 4 / max(in_features, 1)
            return 0.5 + (1 / 64 + 4 / (64 * 256) if self.double_quant else 4 / 64)
        if m == "mxfp4":
            return 0.5 + 1 / 32
        if m == "fp8":
            if self.block:
                return 1 + 4 / (self.block[0] * self.block[1])
            return 1.0
        if m == "fbgemm_fp8":
            return 1 + 4 / max(in_features, 1)
        if m == "eetq":
            return 1 + 2 / max(in_features, 1)
        g = self.group_size if self.group_size > 0 else (in_features if self.group_size == 0 else 0)
        per_group = self.scale_bytes + self.zero_bytes
        out = b + (per_group / g if g else 0.0)
        if m == "gptq":
            out += 4 / max(out_features, 1)   # g_idx
        return out


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _patterns(*vals: Any) -> tuple[str, ...]:
    out: list[str] = []
    for v in vals:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(str(x) for x in v if isinstance(x, str))
    return tuple(out)


def parse_quantization_config(qc: Any) -> QuantSpec | None:
    """`QuantSpec` of a config.json ``quantization_config`` dict; None when `qc` is empty or not a dict.

    Field names per format: AWQ ``bits``/``w_bit``, ``group_size``/``q_group_size``, ``zero_point``; GPTQ
    ``bits``, ``group_size``, ``sym``; bitsandbytes ``load_in_4bit``/``load_in_8bit``,
    ``bnb_4bit_use_double_quant``, ``llm_int8_skip_modules``; FP8 ``weight_block_size``; HQQ
    ``quant_config.weight_quant_params.{nbits,group_size}`` and ``skip_modules``; compressed-tensors
    ``config_groups.*.weights.{num_bits,strategy,group_size,symmetric,block_structure}`` and ``ignore``.
    """
    if not isinstance(qc, dict) or not qc:
        return None
    m = str(qc.get("quant_method") or "").strip().lower().replace("_", "-") or "unknown"
    m = {"bnb": "bitsandbytes", "fbgemm-fp8": "fbgemm_fp8", "compressed_tensors": "compressed-tensors"}.get(m, m)
    skip = _patterns(qc.get("modules_to_not_convert"), qc.get("llm_int8_skip_modules"), qc.get("skip_modules"),
                     qc.get("ignore"))
    bits = _num(qc.get("bits")) or _num(qc.get("w_bit"))
    group = _num(qc.get("group_size")) or _num(qc.get("q_group_size"))
    if m == "awq":
        return QuantSpec("awq", bits or 4, int(group or 128), scale_bytes=2.0, zero_bytes=(bits or 4) / 8, skip=skip)
    if m == "gptq":
        g = int(group if group is not None else 128)
        return QuantSpec("gptq", bits or 4, g if g > 0 else 0, scale_bytes=2.0, zero_bytes=(bits or 4) / 8, skip=skip)
    if m == "bitsandbytes":
        eight = bool(qc.get("load_in_8bit")) and not qc.get("load_in_4bit")
        return QuantSpec("bitsandbytes", 8 if eight else 4, 64, double_quant=bool(qc.get("bnb_4bit_use_double_quant")),
                         skip=skip, detail=str(qc.get("bnb_4bit_quant_type") or ("int8" if eight else "fp4")))
    if m == "fp8":
        blk = qc.get("weight_block_size")
        block = (int(blk[0]), int(blk[1])) if isinstance(blk, (list, tuple)) and len(blk) == 2 and all(
            _num(x) and x > 0 for x in blk) else None
        return QuantSpec("fp8", 8, -1 if block is None else 0, block=block, scale_bytes=4.0, skip=skip,
                         detail=str(qc.get("fmt") or "e4m3"))
    if m in ("fbgemm_fp8", "eetq"):
        return QuantSpec(m, 8, 0, skip=skip)
    if m == "mxfp4":
        return QuantSpec("mxfp4", 4, 32, scale_bytes=1.0, skip=skip)
    if m == "hqq":
        wq = ((qc.get("quant_config") or {}).get("weight_quant_params") or {}) if isinstance(
            qc.get("quant_config"), dict) else {}
        nb = _num(wq.get("nbits")) or _num(qc.get("nbits")) or bits
        gs = _num(wq.get("group_size")) or _num(qc.get("group_size")) or 64
        return QuantSpec("hqq", nb, int(gs), scale_bytes=2.0, zero_bytes=2.0, skip=skip or ("lm_head",),
                         known=nb is not None)
    if m == "compressed-tensors":
        return _compressed_tensors(qc, skip)
    if m == "aqlm":
        # LF sets bits = 2 for AQLM (model_utils/quantization.py:136-138); codebooks are not modelled
        return QuantSpec("aqlm", 2, 0, skip=skip, detail="codebooks not counted")
    return QuantSpec(m, bits, int(group or 0), skip=skip, known=False,
                     detail="quantization format not modelled: weights sized at the checkpoint dtype (an upper bound)")


def _compressed_tensors(qc: dict[str, Any], skip: tuple[str, ...]) -> QuantSpec:
    groups = qc.get("config_groups") if isinstance(qc.get("config_groups"), dict) else {}
    w: dict[str, Any] = {}
    for g in groups.values():
        if isinstance(g, dict) and isinstance(g.get("weights"), dict):
            w = g["weights"]
            break
    nb = _num(w.get("num_bits"))
    strategy = str(w.get("strategy") or "tensor")
    sym = w.get("symmetric", True) is not False
    gs = int(_num(w.get("group_size")) or 0)
    block = w.get("block_structure")
    blk = (int(block[0]), int(block[1])) if isinstance(block, (list, tuple)) and len(block) == 2 else None
    if strategy == "tensor":
        gs = -1
    elif strategy == "channel":
        gs = 0
    spec = QuantSpec("compressed-tensors", nb, gs if not blk else 0, block=blk, scale_bytes=2.0,
                     zero_bytes=0.0 if sym else 2.0, skip=skip, known=nb is not None,
                     detail=f"{w.get('type') or 'int'} {strategy}")
    return spec


UNQUANTIZED_LABEL = "unquantized, in the base model's dtype (an upper bound)"
"""The alternative shown beside a checkpoint sized from its name's ending (`hinted_spec`): the ``weights-quantization``
assumption's label in every config kind (facts/assume.py, facts/quantassume.py, facts/kinds.py)."""


def name_suggests_quantized(name: str) -> str | None:
    """The quantization a repo name hints at (``-AWQ``, ``-GPTQ-Int4``, ``-FP8``, ``-bnb-4bit``, ...), or None.

    A hint only: the doctor never sizes weights from a name (a config.json decides), it reports the hint.
    """
    base = name.strip().strip("/").rsplit("/", 1)[-1].lower()
    for pat, what in ((r"(^|[-_.])awq($|[-_.])", "AWQ"), (r"(^|[-_.])gptq($|[-_.])", "GPTQ"),
                      (r"(^|[-_.])fp8($|[-_.])", "FP8"), (r"(^|[-_.])(bnb|4bit|8bit)($|[-_.])", "bitsandbytes"),
                      (r"(^|[-_.])mxfp4($|[-_.])", "MXFP4"), (r"(^|[-_.])int[48]($|[-_.])", "integer"),
                      (r"(^|[-_.])gguf($|[-_.])", "GGUF"), (r"(^|[-_.])aqlm($|[-_.])", "AQLM"),
                      (r"(^|[-_.])[123]bit($|[-_.])", "low-bit")):
        if re.search(pat, base):
            return what
    return None


def hinted_spec(name: str) -> QuantSpec | None:
    """How a checkpoint whose name hints at a format (`name_suggests_quantized`) would most likely be stored: the
    catalogue sizes such a checkpoint by it when no config.json is read (readers/model/catalog.py, marked
    `QuantSpec.from_name`; the report names it as the ``weights-quantization`` assumption): AWQ 4-bit with groups of 128 (AutoAWQ's default,
    ``q_group_size`` 128, the layout of Qwen's own -AWQ uploads); GPTQ 4-bit (8-bit for ``-Int8``) with groups of
    128 (Qwen's -GPTQ-Int4/-Int8 uploads); bitsandbytes 4-bit (8-bit for ``-8bit``). None for FP8/MXFP4 (LLaMA-
    Factory dequantizes them on load: the unquantized size is what trains) and for formats not modelled."""
    hint = name_suggests_quantized(name)
    low = name.strip().strip("/").rsplit("/", 1)[-1].lower()
    eight = bool(re.search(r"(^|[-_.])(int8|8bit|w8a16|w8a8)($|[-_.])", low))
    if hint == "AWQ":
        return parse_quantization_config({"quant_method": "awq", "bits": 4, "group_size": 128})
    if hint in ("GPTQ", "integer"):
        return parse_quantization_config({"quant_method": "gptq", "bits": 8 if eight else 4, "group_size": 128})
    if hint == "bitsandbytes":
        return parse_quantization_config({"quant_method": "bitsandbytes", "load_in_8bit": eight,
                                          "load_in_4bit": not eight, "bnb_4bit_quant_type": "nf4"})
    return None
