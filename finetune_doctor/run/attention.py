"""Models that run their own attention: the ``flash_attn`` key does not reach them, and their attention scores
(batch × heads × seq × seq) are materialised and kept for backward.

Which attention a model really runs, read from the code that runs it:

* **BLOOM** (transformers 5.6.0 ``models/bloom/modeling_bloom.py``): ``BloomPreTrainedModel`` declares neither
  ``_supports_sdpa`` nor ``_supports_flash_attn``, so transformers keeps eager attention (``flash_attn: auto``) or
  refuses the load for an explicit ``fa2``/``sdpa`` (modeling_utils.py:1682, :1755). The ALiBi scores come from
  ``alibi.baddbmm`` (:266-271), the softmax runs in fp32 and is cast back (:280): autograd keeps the fp32
  probabilities (softmax's backward reads its output) and their half-precision cast (the value matmul's input).
* **MPT** (``models/mpt/modeling_mpt.py:107-127``): same shape of code, ``softmax(scores.float()).to(dtype)``.
* **Falcon with ``alibi: true``** (``models/falcon/modeling_falcon.py:395-411``): the ALiBi branch ignores the
  attention implementation; the scores are upcast to fp32 but the softmax returns the hidden dtype
  (``F.softmax(..., dtype=hidden_states.dtype)``), so only the half-precision probabilities are kept.
* **Baichuan-13B / Baichuan2-13B** (remote code, ``trust_remote_code``; ``modeling_baichuan.py`` of the 13B
  checkpoints, as ipex-llm's adaptation of Baichuan2-13B-Chat c6f8592 reproduces it): ALiBi via a
  ``[heads, seq, seq]`` mask added to ``q @ kᵀ``, clamped with ``torch.max`` and soft-maxed in the model dtype;
  the clamp keeps its input and the softmax its output, two half-precision copies. LLaMA-Factory's
  ``configure_attn_implementation`` only rewrites ``_attn_implementation`` (and InternLM2's own key), which this
  code never reads (LF model/model_utils/attention.py).

**``flash_attn: auto`` before transformers 4.36.** LLaMA-Factory's ``auto`` leaves the choice to transformers (LF
model/model_utils/attention.py: ``auto`` returns before setting ``_attn_implementation``). transformers chose
SDPA by default from 4.36.0 (2023-12-11), the release that first gave LLaMA and Mistral an SDPA attention class
(huggingface/transformers#26572; #28005: "In Transformers 4.36, we started adding native support of
torch.nn.functional.scaled_dot_product_attention (SDPA), enabled by default"). Before it their attention is the
eager kernel (matmul, fp32 softmax, matmul), so a training machine known to run an older transformers runs eager
attention under ``auto`` (`auto_kernel`). Architectures that first appeared in 4.36 or later cannot run on an older
release; remote-code models run their own code and are left to `own_attention`.

**SDPA on an Ascend NPU before transformers 4.57.** torch_npu runs ``F.scaled_dot_product_attention`` on its fused
FlashAttentionScore operator only when the call is causal without a mask or carries a *boolean* mask; a float
(additive) mask sends it to "small-operator concatenation", the composite path that materialises the scores
(transformers 5.6.0 ``integrations/sdpa_attention.py:86-90``, the comment and the conversion of a non-boolean mask
to a boolean one on an NPU; huggingface/transformers#41143, merged 2025-09-25 between the 4.56.0 release of
2025-08-29 and 4.57.0, so 4.57 is taken as the first release with it — the tag itself was not read). Before it,
transformers hands SDPA the float mask it builds whenever a batch is padded, and LLaMA-Factory's training collator
pads every batch to a multiple of 8 tokens (``pad_to_multiple_of=8 if training_args.do_train``: LF 0.9.0
train/sft/workflow.py:55, the snapshot's :65), so nearly every step carries one (all but a batch whose rows are all
one length that is a multiple of 8): SDPA on an NPU then keeps the probabilities like eager attention. Seen in the wild: ``F.scaled_dot_product_attention`` asking a 910B for 35.31 GiB
(zai-org/CogVideo#63, answered "use npu_fusion_attention to replace torch sdpa"). What the composite path keeps per
score is taken as one half-precision copy (the softmax output, which its backward and the value matmul share): a
lower bound, since torch_npu's composite was not read (`npu_sdpa_materialises`).

**``flash_attn: fa2`` on an Ascend NPU before LLaMA-Factory 0.9.4.** Up to 0.9.3 LF's
``configure_attn_implementation`` sets ``flash_attention_2`` only when ``is_flash_attn_2_available()``, which is
False without the CUDA ``flash_attn`` package, so on an NPU it logs "FlashAttention-2 is not installed." and
returns without touching ``_attn_implementation`` (LF 0.9.0 model/model_utils/attention.py:60-63, 0.9.3 :59-62,
read in the PyPI wheels): the model runs transformers' default, what ``auto`` gives (`auto_kernel`). 0.9.4 accepts
``is_torch_npu_available()`` beside it (0.9.4 :72-76; hiyouga/LlamaFactory#9397, merged 2025-11-04), and
transformers maps ``flash_attention_2`` to torch_npu's fused operator. The LF release is the training machine's
(``--env``, a ``doctor context`` file, or installed here); unknown, it is taken as current, like transformers
(`lf_drops_fa2_on_npu`). With a transformers before 4.57 the SDPA it falls back to keeps the probabilities (above).

`saved` names what autograd keeps per score element: ``fp32+cast`` (4 + e bytes), ``half`` (e), ``half+masked``
(2·e); activations.py turns it into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.arch import ModelArch
from finetune_doctor.hardware.catalog import vendor_of
from finetune_doctor.types import Hardware


@dataclass(frozen=True)
class OwnAttention:
    """The attention a model's own code runs: `saved` per score element (module docstring), `why` for notes."""

    saved: str
    why: str


def own_attention(arch: ModelArch) -> OwnAttention | None:
    """The materialised attention of `arch`, or None when the ``flash_attn`` setting decides."""
    mt = arch.model_type
    if mt == "bloom":
        return OwnAttention("fp32+cast", "BLOOM has no SDPA or FlashAttention path in transformers: eager ALiBi "
                                         "attention with an fp32 softmax (modeling_bloom.py:266-280)")
    if mt == "mpt":
        return OwnAttention("fp32+cast", "MPT has no SDPA or FlashAttention path in transformers: eager attention "
                                         "with an fp32 softmax (modeling_mpt.py:107-127)")
    if mt == "falcon" and arch.positional == "alibi":
        return OwnAttention("half", "Falcon with alibi runs its eager ALiBi branch whatever the attention "
                                    "implementation (modeling_falcon.py:395-411)")
    if mt == "baichuan" and arch.positional == "alibi":
        return OwnAttention("half+masked", "the Baichuan 13B remote code computes ALiBi attention itself "
                                           "(trust_remote_code): flash_attn does not reach it")
    return None


# architectures transformers implemented before 4.36.0 whose SDPA class arrived in 4.36.0 (module docstring)
SDPA_FROM_4_36 = frozenset({"llama", "mistral"})
SDPA_DEFAULT_FROM = (4, 36)


def auto_kernel(arch: ModelArch, transformers: tuple[int, ...] | None) -> str:
    """The kernel ``flash_attn: auto`` gives `arch` under the training machine's transformers version (a parsed
    tuple, None when unknown): ``eager`` for an SDPA_FROM_4_36 architecture before 4.36.0, else ``sdpa``."""
    if transformers and arch.model_type in SDPA_FROM_4_36 and tuple(transformers[:2]) < SDPA_DEFAULT_FROM:
        return "eager"
    return "sdpa"


def resolve_attention(requested: str, arch: ModelArch) -> tuple[str, str, str | None]:
    """(attention kernel, saved-scores kind, note) for `requested` (the flash_attn value mapped to
    eager/sdpa/fa2/fa3) on `arch`: ``eager`` with the model's own kind when its code materialises the scores."""
    own = own_attention(arch)
    if own is None:
        return requested, "fp32+cast", None
    note = None if requested == "eager" else f"flash_attn: {requested} does not apply: {own.why}"
    return "eager", own.saved, note


# the first transformers release whose SDPA hands an Ascend NPU a boolean mask (module docstring)
NPU_BOOL_MASK_FROM = (4, 57)


# the first LLaMA-Factory release that keeps ``fa2`` on an NPU (module docstring)
LF_NPU_FA2_FROM = (0, 9, 4)


def lf_drops_fa2_on_npu(hw: Hardware | None, llamafactory: tuple[int, ...] | None) -> bool:
    """Whether ``flash_attn: fa2`` falls back to transformers' default on `hw` under the LLaMA-Factory release
    `llamafactory` (a parsed tuple; None when unknown, taken as current): an Ascend NPU with LF before
    LF_NPU_FA2_FROM (module docstring). False for any other card."""
    on_npu = bool(hw is not None and hw.gpu and vendor_of(hw.gpu) == "huawei")
    return on_npu and llamafactory is not None and tuple(llamafactory[:3]) < LF_NPU_FA2_FROM


def npu_sdpa_materialises(hw: Hardware | None, transformers: tuple[int, ...] | None) -> bool:
    """Whether SDPA runs torch_npu's composite path (the scores materialised) on `hw`: an Ascend NPU under a
    transformers before NPU_BOOL_MASK_FROM (module docstring). False for any other card, and for an unknown
    transformers (taken as current, as `auto_kernel` takes it; the stack assumption names the version)."""
    on_npu = bool(hw is not None and hw.gpu and vendor_of(hw.gpu) == "huawei")
    return on_npu and transformers is not None and tuple(transformers[:2]) < NPU_BOOL_MASK_FROM
