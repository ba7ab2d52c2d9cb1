"""The quantization a run trains under: a checkpoint's `QuantSpec` priced on the model's linears, and
LLaMA-Factory's treatment of the YAML's ``quantization_bit``/``quantization_method`` against it.

The formats and their byte layouts are in quant.py; this module needs the architecture (arch.py), which is why
it is not there (a value type below, the resolution here, `lf_treatment` included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.dtypes import DTYPE_BYTES
from finetune_doctor.quant import QuantSpec
from finetune_doctor.run.values import as_bool


# LLaMA-Factory's own list (extras/constants.py:168-179, snapshot ff6d4d1); transformers names bitsandbytes
# "bitsandbytes" (utils/quantization_config.py QuantizationMethod), LF "bnb".
LF_DEQUANTIZED = frozenset({"mxfp4", "fp8"})   # model_utils/quantization.py:107-126: loaded with dequantize=True


@dataclass(frozen=True)
class LFTreatment:
    """What LLaMA-Factory (snapshot ff6d4d1) does with a pre-quantized checkpoint.

    `dequantized`: loaded with ``dequantize=True`` and trained as a plain model in the checkpoint dtype
    (MXFP4, FP8: model_utils/quantization.py:107-126; transformers then drops the quantization,
    quantizers/base.py ``remove_quantization_config``). Otherwise the model stays quantized: `lora_only`
    (adapter.py:330-335 "Quantized models can only be used for the LoRA or OFT tuning"), no ZeRO-3/FSDP
    (quantization.py:101-105), no DoRA (adapter.py:239-243), and `quantization_bit` is ignored with a warning
    (quantization.py:94-96).
    """

    dequantized: bool
    lora_only: bool
    zero3_ok: bool
    dora_ok: bool


def lf_treatment(spec: QuantSpec) -> LFTreatment:
    """LLaMA-Factory's treatment of a checkpoint stored in `spec`'s format (`LF_DEQUANTIZED` or not)."""
    deq = spec.method in LF_DEQUANTIZED
    return LFTreatment(dequantized=deq, lora_only=not deq, zero3_ok=deq, dora_ok=deq)


# ---- which linears a format quantizes ------------------------------------------------------------------------

def _skipped(lin_name: str, group: str, skip: tuple[str, ...]) -> bool:
    """Whether a skip pattern (a module path or a regex-like path with ``*``) leaves this linear unquantized.

    Patterns name module paths (``model.layers.*.self_attn``, ``lm_head``, ``mlp.gate``); a pattern that names a
    single layer index only (``model.layers.3.mlp``) is not applied per layer (the counts are per layer kind).
    """
    leaf = lin_name.rsplit(".", 1)[-1]
    for p in skip:
        pl = p.lower().removeprefix("re:")
        if re.search(r"layers\.\d+\.", pl):
            continue
        parts = [x for x in re.split(r"[.\\*]+", pl) if x]
        if not parts:
            continue
        if parts[-1] == leaf:
            return True
        if group == "attention" and any(x in ("self_attn", "attn", "attention", "self_attention") for x in parts):
            return True
        if group == "linear_attention" and "linear_attn" in parts:
            return True
        if group == "shared" and any("shared_expert" in x for x in parts):
            return True
        if group == "experts" and "experts" in parts:
            return True
        if group in ("mlp", "experts", "shared") and parts[-1] in ("mlp", "feed_forward", "block_sparse_moe"):
            return True
    return False


@dataclass(frozen=True)
class LinearBytes:
    """Bytes of the decoder's linear weights as loaded: `quantized`/`unquantized` element counts, `bytes` in
    total, and `per_param` = bytes / all linear elements (None when the format is not modelled)."""

    quantized: int
    unquantized: int
    bytes: float | None

    @property
    def per_param(self) -> float | None:
        n = self.quantized + self.unquantized
        return None if self.bytes is None or not n else self.bytes / n


def stored_linear_bytes(arch: ModelArch, spec: QuantSpec, unquantized_bytes: float = 2.0) -> LinearBytes:
    """Bytes of every decoder-layer linear weight of `arch` stored under `spec` (biases at `unquantized_bytes`).

    Linears a skip pattern names, and all of them when `spec` is not modelled, are priced at
    `unquantized_bytes` per element (the checkpoint dtype). Computed per layer kind (`ModelArch.layer_groups`).
    """
    q = u = 0
    total = 0.0
    known = spec.known and spec.bits
    for kind, n in arch.layer_groups():
        for lin in arch.kind_linears(kind):
            w = lin.count * lin.in_features * lin.out_features
            b = lin.count * lin.out_features if lin.bias else 0
            if lin.expert:
                group = "experts"
            elif lin.name.startswith("shared_experts."):
                group = "shared"
            elif lin.name in ("in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
                              "out_proj"):
                group = "linear_attention"
            elif lin.name.endswith(("gate_proj", "up_proj", "down_proj")):
                group = "mlp"
            else:
                group = "attention"
            per = spec.bytes_per_param(lin.in_features, lin.out_features) if known else None
            if per is None or _skipped(lin.name, group, spec.skip):
                u += n * w
                total += n * (w + b) * unquantized_bytes
            else:
                q += n * w
                total += n * (w * per + b * unquantized_bytes)
            u += n * b
    return LinearBytes(q, u, total if known else None)



def resolve_quantization(arch: ModelArch, quantization_bit: Any, quantization_method: Any) -> dict[str, Any]:
    """The quantization LLaMA-Factory applies to `arch` given the YAML's ``quantization_bit``/``method``.

    Returns a plain dict: ``ptq_method`` (None for an unquantized or unknown checkpoint), ``ptq_bits``,
    ``ptq_format``, ``ptq_dequantized``, ``ptq_lora_only``, ``quantization_bit`` (None when a PTQ checkpoint makes
    LF ignore it: quantization.py:94-96), ``quantization_bit_ignored``, ``quantization_unknown`` (a name hints
    at quantization, no config says), ``weights_dtype`` (a label for a quantized PTQ checkpoint),
    ``linear_weight_bytes`` (stored bytes per decoder-linear element, `stored_linear_bytes`) and ``notes``.
    """
    spec = arch.quant
    notes: list[str] = []
    try:
        qbit = int(quantization_bit) if quantization_bit is not None and not isinstance(quantization_bit, bool) else None
    except (TypeError, ValueError, OverflowError):   # .inf: the key-schema rules report the wrong type
        qbit = None
    out: dict[str, Any] = {"ptq_method": None, "ptq_bits": None, "ptq_format": None, "ptq_dequantized": False,
                           "ptq_lora_only": False, "quantization_bit": qbit or None, "quantization_bit_ignored": False,
                           "quantization_unknown": False, "weights_dtype": None, "linear_weight_bytes": None,
                           "notes": notes}
    if spec is None:
        return out
    if spec.method == "unknown":
        out["quantization_unknown"] = True
        notes.append(f"quantization unknown ({spec.detail}): weights sized as {arch.dtype}; "
                     "pass --model-config with the checkpoint's config.json to size them as stored")
        return out
    t = lf_treatment(spec)
    out.update(ptq_method=spec.method, ptq_bits=spec.bits, ptq_format=spec.label, ptq_dequantized=t.dequantized,
               ptq_lora_only=t.lora_only, quantization_bit=None, quantization_bit_ignored=bool(qbit))
    if qbit:
        notes.append(f"quantization_bit: {qbit} is ignored: the checkpoint is already {spec.label}-quantized "
                     "(LLaMA-Factory warns and loads it as stored)")
    if t.dequantized:
        notes.append(f"{spec.label} checkpoint: LLaMA-Factory dequantizes it on load and trains it in {arch.dtype}")
        return out
    lb = stored_linear_bytes(arch, spec, float(DTYPE_BYTES.get(arch.dtype, 2.0)))
    out["linear_weight_bytes"] = lb.per_param
    bits = spec.bits or 0
    out["weights_dtype"] = "float8" if spec.method in ("fp8", "fbgemm_fp8") else (
        f"int{int(bits)}" if bits and float(bits).is_integer() else f"{spec.method}")
    if lb.per_param is None:
        notes.append(f"{spec.label}: {spec.detail or 'format not modelled'}")
    return out


def checkpoint_weight_bytes(arch: ModelArch, unquantized_bytes: float) -> tuple[float, str | None]:
    """(bytes, label) of the whole checkpoint as stored: every parameter at `unquantized_bytes` (the dtype it loads
    in), except the decoder linears a modelled `arch.quant` packs, which are priced as `stored_linear_bytes` does
    (AWQ/GPTQ/bitsandbytes bits plus their scales and zeros). `label` is the format's (e.g. "AWQ 4-bit g128") or
    None when the weights are not stored quantized. The one sizing of a checkpoint's storage that a config that
    does not train (chat/API, export) shares with training (`resolve_quantization`), so a ``-AWQ`` upload sized
    from its name (quant.py `hinted_spec`, trial 6 case 12) is the same size whatever the config kind. Units: bytes.
    """
    params = arch.total_params()
    spec = getattr(arch, "quant", None)
    if spec is None or not spec.known or not spec.bits:
        return params * unquantized_bytes, None
    lb = stored_linear_bytes(arch, spec, unquantized_bytes)
    if lb.bytes is None:
        return params * unquantized_bytes, None
    rest = max(params - lb.quantized - lb.unquantized, 0)
    return lb.bytes + rest * unquantized_bytes, spec.label


# ---- unsloth's own 4-bit copy of an MXFP4 checkpoint ------------------------------------------------------------

# The first unsloth release whose mapper knows gpt-oss (commit 5fa56a5cda "GPT-OSS", 2025-08-06, which moved
# unsloth/models/_utils.py ``__version__`` from 2025.8.1 to 2025.8.2).
UNSLOTH_GPT_OSS_FROM = (2025, 8, 2)
# MXFP4 checkpoints unsloth's mapper sends to a bitsandbytes NF4 copy of its own under ``load_in_4bit``
UNSLOTH_NF4_COPIES = frozenset({"gpt_oss"})


def unsloth_nf4_copy(arch: ModelArch, cfg: dict[str, Any], unsloth_release: tuple[int, ...] | None) -> bool:
    """Whether LLaMA-Factory's ``use_unsloth`` load trains `arch`'s MXFP4 checkpoint as unsloth's bitsandbytes NF4
    copy instead of dequantising it to bf16.

    LF's own load meets an MXFP4 checkpoint with ``Mxfp4Config(dequantize=True)`` and ignores ``quantization_bit``
    (model_utils/quantization.py:94-112 at the snapshot: the warning :95-96, the dequantising config :107-112):
    every weight at 2 bytes. With ``use_unsloth`` LF builds ``init_kwargs`` the same way (``patch_config`` first,
    model/loader.py:141-149) but never hands them on: it calls unsloth's ``FastLanguageModel.from_pretrained(
    model_name=model_name_or_path, load_in_4bit=quantization_bit == 4, ...)`` (model_utils/unsloth.py:36-48, :59),
    and ``quantization_bit`` is never cleared for a PTQ checkpoint. Unsloth then renames the model
    (unsloth/models/loader.py:560 ``get_model_name(model_name, load_in_4bit)`` at abbf1f0a, 2025-08-13;
    loader_utils.py:67-75 looks the lower-cased name up in ``FLOAT_TO_INT_MAPPER``), and its mapper sends
    ``openai/gpt-oss-20b``/``-120b`` (and ``unsloth/gpt-oss-*``) to ``unsloth/gpt-oss-*-unsloth-bnb-4bit``
    (mapper.py:924-933 at abbf1f0a; :1058-1067 at 015bdef0d9, 2026-08-22): a bitsandbytes 4-bit checkpoint whose
    routed experts are per-expert linears (the loader's ``'down_projs' in name`` rule for that copy,
    loader.py:620-626 at abbf1f0a). So every decoder linear, the experts included, is NF4 with its quantisation
    state; embeddings, head, router and norms stay 16-bit.

    `unsloth_release` is the training machine's unsloth (a parsed version) or None when unknown: unknown is taken
    as a release with the mapper (the assumption ``unsloth-gpt-oss`` weighs LF's dequantised path against it);
    a release before `UNSLOTH_GPT_OSS_FROM` has no gpt-oss entry and is left on LF's own path.
    """
    spec = arch.quant
    if not (as_bool(cfg.get("use_unsloth")) and spec is not None and spec.method == "mxfp4"
            and arch.model_type in UNSLOTH_NF4_COPIES):
        return False
    try:
        qbit = int(cfg.get("quantization_bit"))
    except (TypeError, ValueError, OverflowError):
        return False
    return qbit == 4 and (unsloth_release is None or tuple(unsloth_release[:3]) >= UNSLOTH_GPT_OSS_FROM)
