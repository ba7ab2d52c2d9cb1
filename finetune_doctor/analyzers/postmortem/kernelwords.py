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
"""

from __future__ import annotations

import re

TRITON = re.compile(r"Triton Error \[CUDA\]")
FLASH_SAID = re.compile(r"flash[_ -]?attention[_ -]?2|\bflash[_-]?attn\b|\bfa2\b|\bFA2\b", re.I | re.A)


def illegal_access_lead(text: str) -> str | None:
    """The likely kernel of an illegal memory access from `text` (the error line and the short paste or words around
    it; module docstring), as a clause that follows the general meaning; None when the text names neither."""
    if TRITON.search(text):
        return ("; the error is Triton's (\"Triton Error [CUDA]\"), so the faulting kernel is a Triton-compiled op: "
                "most likely one a package patched into the model (flash-linear-attention, Liger, unsloth, the "
                "trainer's own patch of the model's ops) given a tensor layout or shape it does not expect. The run "
                "that decides: the same step with that patch off (use_liger_kernel: false, the trainer's kernel or "
                "model-patch option off), with CUDA_LAUNCH_BLOCKING=1 to name the kernel")
    m = FLASH_SAID.search(text)
    if m:
        return (f"; the text names {m.group(0)}: most likely the flash-attention kernel read past its inputs, given "
                "sequence lengths it does not expect (cu_seqlens built from position_ids of another shape than the "
                "packed-sequence path assumes, a packing or padding-free collator) or a release with a bug for this "
                "GPU or head size. The run that decides: the same step with sdpa attention (attn_implementation="
                "\"sdpa\"; flash_attn: sdpa in LLaMA-Factory): if it trains, the flash-attention path is the cause")
    return None
