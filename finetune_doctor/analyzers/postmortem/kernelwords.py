"""Which kernel an illegal memory access most likely came from, by what the paste or the words beside the CUDA error
name (issue #25: an error line quoted inside the user's sentence).

- "Triton Error [CUDA]: an illegal memory access was encountered": Triton's driver wraps the CUDA status of a
  Triton-compiled kernel in its own prefix (triton/backends/nvidia/driver.c, ``gpuAssert``: "Triton Error [CUDA]:
  %s"), so the fault is in a Triton kernel, not in cuBLAS, cuDNN or flash-attn's CUDA build. Training stacks get
  Triton kernels from packages that patch the model's ops (flash-linear-attention, Liger, unsloth, a trainer's own
  patch); modelscope/ms-swift#9640: a Qwen3.5 patch put FLA's ``causal_conv1d`` (expecting [B, T, D]) where the HF
  forward passes [B, D, T].
- the words name flash-attention 2 (``attn_implementation="flash_attention_2"``, ``flash_attn: fa2``, flash-attn):
  the attention kernel reads past its inputs when the lengths it is given are wrong (``cu_seqlens`` built from
  position_ids that are not what the packed-sequence path expects; QwenLM/Qwen3.8#104, Qwen3.5 under FA2, fixed by
  huggingface/transformers#44911) or a release has a bug for the GPU or head size (Dao-AILab/flash-attention#338).

Each lead says it is the likely reading and names the run that decides.

torch's non-reentrant activation checkpointing records how many tensors the first forward of a checkpointed block
saved and raises ``CheckpointError`` ("torch.utils.checkpoint: A different number of tensors was saved during the
original forward and recomputation.", torch 2.13 torch/utils/checkpoint.py:879, ``_CheckpointFrame.
check_recomputed_tensors_match``, with the two counts on the lines after) when the recomputation saves another number: the block ran
differently the second time. A fused or custom op that saves tensors on its own terms does so (jzhang38/
TinyLlama#152: xformers' fused SwiGLU under FSDP activation checkpointing, 27 tensors against 8; the answer was
torch's own SwiGLU layers), as does a branch taken on state that changed between the passes (`checkpoint_mismatch`).
"""

from __future__ import annotations

import re

TRITON = re.compile(r"Triton Error \[CUDA\]")
# a name set to a value that turns it off, as a config or an arguments dump prints it ("use_liger_kernel=False",
# TrainingArguments' repr; LLaMA-Factory's "flash_attn: sdpa" / "auto" / "disabled", model_args.py): the name is
# then what the run did not use, so it is not read as a kernel the text names
_OFF = r"(?![\w \t-]{0,24}[:=][ \t]*[\"']?(?:false|no|none|0|disabled|sdpa|eager|auto)\b)"
# packages whose kernels are Triton ops patched into a model (Liger's: transformers' use_liger_kernel, LLaMA-Factory's
# enable_liger_kernel, hparams/model_args.py; unsloth's, flash-linear-attention's)
TRITON_PKG = re.compile(r"(?:\bliger(?:[-_ ]kernels?)?\b|\b(?:use|enable)_liger_kernel\b|\bunsloth\b|"
                        r"\bflash[-_ ]linear[-_ ]attention\b|\bfla\b)" + _OFF, re.I | re.A)
FLASH_SAID = re.compile(r"(?:flash[_ -]?attention[_ -]?2|\bflash[_-]?attn\b|\bfa2\b)" + _OFF, re.I | re.A)


def illegal_access_lead(text: str) -> str | None:
    """The likely kernel of an illegal memory access from `text` (the error line and the short paste or words around
    it; module docstring), as a clause that follows the general meaning; None when the text names neither."""
    if TRITON.search(text):
        return ("; the error is Triton's (\"Triton Error [CUDA]\"), so the faulting kernel is a Triton-compiled op: "
                "most likely one a package patched into the model (flash-linear-attention, Liger, unsloth, the "
                "trainer's own patch of the model's ops) given a tensor layout or shape it does not expect. The run "
                "that decides: the same step with that patch off (use_liger_kernel: false, the trainer's kernel or "
                "model-patch option off), with CUDA_LAUNCH_BLOCKING=1 to name the kernel")
    p = TRITON_PKG.search(text)
    if p:
        return (f"; the text names {p.group(0)}, whose kernels are Triton-compiled ops patched into the model: most "
                "likely one of them given a tensor layout or shape it does not expect. The run that decides: the same "
                "step with it off (use_liger_kernel: false, use_unsloth: false, the trainer's kernel option off), with "
                "CUDA_LAUNCH_BLOCKING=1 to name the kernel")
    m = FLASH_SAID.search(text)
    if m:
        return (f"; the text names {m.group(0)}: most likely the flash-attention kernel read past its inputs, given "
                "sequence lengths it does not expect (cu_seqlens built from position_ids of another shape than the "
                "packed-sequence path assumes, a packing or padding-free collator) or a release with a bug for this "
                "GPU or head size. The run that decides: the same step with sdpa attention (attn_implementation="
                "\"sdpa\"; flash_attn: sdpa in LLaMA-Factory): if it trains, the flash-attention path is the cause")
    return None


CHECKPOINT_MISMATCH = re.compile(r"A different number of tensors was saved during the original forward and "
                                 r"recomputation")


def checkpoint_mismatch(msg: str) -> str | None:
    """Words for torch's CheckpointError of a recomputation that saved another number of tensors (module docstring),
    or None for another message."""
    if not CHECKPOINT_MISMATCH.search(msg):
        return None
    return ("the checkpointed block ran differently when it was recomputed for the backward pass: most likely an op "
            "inside it that saves tensors on its own terms, a fused or custom kernel (xformers' fused SwiGLU or "
            "memory-efficient attention, a Triton or custom autograd op), else a branch taken on state that changed "
            "between the passes (use_cache, a random choice, a flag a hook flips); use plain torch layers for that op "
            "inside checkpointed blocks. The run that decides: the same step with the fused op swapped for its torch "
            "form, or with checkpointing off for that block")


ILLEGAL_SAID = re.compile(r"illegal memory access|非法内存访问|非法访问内存", re.I)


def said_kernel_lead(said: dict) -> str | None:
    """``ev.said.lead`` for an illegal memory access said in words (symptom cuda-error, no CUDA status line read):
    `illegal_access_lead` of the words as a sentence of its own; None for another symptom or words naming no kernel."""
    text = str(said.get("text") or "")
    if said.get("symptom") != "cuda-error" or not ILLEGAL_SAID.search(text):
        return None
    lead = illegal_access_lead(text)
    return (lead[2].upper() + lead[3:] + ".") if lead else None
