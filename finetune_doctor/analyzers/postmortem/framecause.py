"""The kinds of failure a traceback cut inside a trainer's own step names by its innermost frame (``ev.crash.cause``
kind ``frames-lead`` for a ``traceback-only`` crash): a lead for the lines the paste lost, never the exception.

A paste cut before its exception line (issue #25: accelerate#2761, cut at ``self._fsdp_``) still shows where the
run was. Some frames of HF Trainer's ``_inner_training_loop`` (transformers trainer.py) do one set-up job each,
and the exceptions users report from them fall into few kinds; the lead names those kinds and what tells them apart.
The frames read, and their sources:

- ``_fsdp_qlora_plugin_updates`` (called as ``self._fsdp_qlora_plugin_updates()`` from ``_inner_training_loop``
  before ``accelerator.prepare``): for a PEFT model under FSDP it sets accelerate's FSDP plugin — the auto-wrap
  policy from peft's ``fsdp_auto_wrap_policy`` and, for a bitsandbytes 4-bit model on accelerate > 0.27.0,
  ``fsdp_plugin.set_mixed_precision(bnb_4bit_quant_storage)``: it runs code of transformers, accelerate, peft and
  bitsandbytes together, so a release of one that the others were not written for is the usual failure
  (accelerate#2761: 0.30.0 failed where <= 0.29.3 ran the same script);
- ``accelerator.prepare`` / ``prepare_model`` (accelerate accelerator.py): wrapping the model in DDP, FSDP or a
  DeepSpeed engine — the engine's configuration, a GPU out of memory while it moves or shards the weights, or an
  accelerate release the Trainer was not written for;
- ``deepspeed_init`` (transformers integrations/deepspeed.py) and ``deepspeed.initialize``: the DeepSpeed config
  against the Trainer's arguments (a value the Trainer fills differently), the optimizer's CUDA extension build,
  or DeepSpeed against torch;
- ``_load_from_checkpoint`` / ``_load_optimizer_and_scheduler`` / ``_load_rng_state`` (trainer.py): a resume —
  a checkpoint written by another world size, ZeRO stage or model, or torch.load's ``weights_only`` default
  (torch 2.6);
- ``AutoProcessor/AutoTokenizer/AutoConfig/AutoModel*.from_pretrained`` (transformers models/auto/): a model type
  the installed transformers does not know (configuration_auto.py's KeyError / "does not recognize this
  architecture"), a file missing from the folder, remote code (LlamaFactory#9178: cut inside
  ``AutoProcessor.from_pretrained`` of ``load_tokenizer``, the KeyError 'qwen3_next' below the cut);
- a checkpoint write outside transformers' Trainer (mmengine's ``CheckpointHook._save_checkpoint``, ``torch.save``,
  safetensors' ``save_file``): disk or quota (open-mmlab/mmdetection#12069: cut in the save hook, Errno 122 below
  the cut), a folder not writable, host RAM (transformers' own staged save is savecause.py's);
- torch's ``cross_entropy`` (nn/functional.py): the loss over the logits, the largest tensor of a long-sequence
  step (LlamaFactory#10367: cut there, a CUDA OOM below the cut), or a label outside the vocabulary;
- the data loader's ``__next__`` / ``_next_data`` / ``fetch`` / a collator (torch utils/data/dataloader.py,
  _utils/fetch.py): a sample the collator cannot batch, or a worker that died (host RAM, /dev/shm);
- a collective of torch.distributed (distributed_c10d.py ``all_reduce``, ``all_gather*``, ``reduce_scatter*``,
  ``broadcast``, ``barrier``, ``all_to_all*``; the ``work = group.allreduce(...)`` line under them): NCCL's error
  (a peer gone, the network), the watchdog's timeout (a rank that never reached it raised first in its own log),
  or an earlier kernel's CUDA error surfacing at the collective (ProcessGroupNCCL checks the stream there);
- flash-attention's compiled kernels (flash_attn_interface.py ``_flash_attn_forward`` / ``_backward`` and their
  varlen forms, which call ``flash_attn_2_cuda``): a CUDA error inside the kernel (flash-attn 2.5.0's backward,
  Dao-AILab/flash-attention#338 and #812: an illegal memory access), a CUDA out-of-memory, or a build made for
  another torch or CUDA.
"""

from __future__ import annotations

import re
from typing import Any

FRAMES_LEAD = "the paste is cut inside "
"""How every lead of this module opens (`lead_kind` in cutcause.py tells it from the others)."""

_FUNC = re.compile(r"^[\w<>]+ \([\w.-]+\)$")

# (name, how the frame is recognised among the innermost frames and code lines, what it is, the likely kinds,
# what to run): the first whose pattern matches wins
_TABLE: tuple[tuple[str, re.Pattern[str], str, str, str], ...] = (
    ("fsdp-peft", re.compile(r"^_fsdp_qlora_plugin_updates \(|^self\._fsdp_(?:q(?:l(?:o(?:r(?:a(?:_\w*)?)?)?)?)?)?\(?\)?$"),
     "the Trainer's FSDP set-up for a PEFT model (transformers trainer.py `_fsdp_qlora_plugin_updates`, called "
     "before `accelerator.prepare`: accelerate's FSDP plugin gets peft's auto-wrap policy and, for a bitsandbytes "
     "4-bit model, the quant storage dtype as its mixed precision)",
     "transformers, accelerate, peft and bitsandbytes releases out of step (one calls an FSDP plugin method or "
     "attribute another release lacks; accelerate#2761: accelerate 0.30.0 failed where <= 0.29.3 ran), or a "
     "bnb_4bit_quant_storage that is not a float dtype",
     "`pip show transformers accelerate peft bitsandbytes`"),
    ("wrap", re.compile(r"^(?:prepare|prepare_model|_prepare_one|_prepare_deepspeed|_prepare_fsdp2?) \(accelerator\.py\)$|"
                        r"^(?:model|self\.model(?:_wrapped)?|self\.model, self\.optimizer)\s*=\s*self\.accelerator\.prepare"),
     "accelerate's wrap of the model (`accelerator.prepare`: DDP, FSDP or a DeepSpeed engine)",
     "the engine's configuration (a wrap class or DeepSpeed value it refuses), a GPU out of memory while the "
     "weights are moved or sharded, or an accelerate release the installed transformers was not written for",
     "`pip show transformers accelerate torch`"),
    ("deepspeed", re.compile(r"^(?:deepspeed_init|initialize|_configure_optimizer|_configure_basic_optimizer) "
                             r"\((?:deepspeed|__init__|engine)\.py\)$|deepspeed_init\("),
     "DeepSpeed's engine set-up (transformers `deepspeed_init`, `deepspeed.initialize`)",
     "a DeepSpeed config value the Trainer's arguments contradict, the optimizer's CUDA extension failing to "
     "build or load, or a DeepSpeed release against the installed torch",
     "`ds_report` and `pip show deepspeed torch transformers`"),
    ("resume", re.compile(r"^(?:_load_from_checkpoint|_load_optimizer_and_scheduler|_load_rng_state|"
                          r"load_checkpoint|_load_zero_checkpoint) \("),
     "a resume from a checkpoint (transformers trainer.py `_load_from_checkpoint` and its siblings)",
     "a checkpoint written by another world size, ZeRO stage or model, a file missing from it, or torch.load's "
     "`weights_only=True` default (torch 2.6) refusing what the checkpoint pickled",
     "`ls` of the checkpoint folder and `pip show torch transformers`"),
    ("load", re.compile(r"^(?:\w+\s*=\s*)?Auto(?:Processor|Tokenizer|Config|Model\w*)\.from_pretrained\(|"
                        r"^from_pretrained \((?:processing|tokenization|configuration|modeling)_auto\.py\)$|"
                        r"^(?:load_config|load_tokenizer) \(loader\.py\)$"),
     "transformers' load of the model, tokenizer or processor (`Auto*.from_pretrained`)",
     "a model type the installed transformers does not know (a KeyError naming the model type, or \"does not "
     "recognize this architecture\": a transformers older than the model), a file missing from the model folder, "
     "or remote code that needs `trust_remote_code`",
     "the model folder's config.json `model_type` and `pip show transformers`"),
    ("save", re.compile(r"^(?:_save_checkpoint|save_checkpoint|save_model|_save|save_file) \((?!trainer\.py)[\w.-]+\)$|"
                        r"^save \(serialization\.py\)$|"
                        r"^(?:self\.)?_?save_checkpoint\(|^torch\.save\(|^save_file\("),
     "a checkpoint write (the save hook of the trainer, torch.save or safetensors' save_file)",
     "the disk or the quota (OSError [Errno 28] No space left on device, [Errno 122] Disk quota exceeded), a "
     "folder that is not writable, or host RAM while the weights are gathered for the file",
     "`df -h` and `quota -s` for the output folder"),
    ("loss", re.compile(r"^cross_entropy \(functional\.py\)$|^return torch\._C\._nn\.cross_entropy_loss\("),
     "the loss over the logits (torch's cross_entropy, on batch x sequence x vocabulary logits, upcast to "
     "float32 in most trainers)",
     "a CUDA out-of-memory (for long sequences and a large vocabulary the logits are the largest tensor of the "
     "step), or a label outside the vocabulary (a device-side assert, an IndexError)",
     "the per-device batch, the sequence length and the vocabulary size"),
    ("lf-data", re.compile(r"^_get_preprocessed_dataset \(loader\.py\)$"),
     "LLaMA-Factory's preprocessing of the dataset (data/loader.py `_get_preprocessed_dataset`: datasets' map "
     "over the template's converters, which call the model's tokenizer and, for a multimodal template, its "
     "processor, in num_proc worker processes)",
     "the model's tokenizer or processor that the installed transformers cannot build or call (a model newer "
     "than the transformers release, LlamaFactory#7281; `doctor lint CONFIG` names the release the "
     "model's type needs), a "
     "sample in another format than its dataset_info entry says, or a map worker that died (host RAM)",
     "`pip show transformers datasets`, the transformers release the model card names, and the first sample"),
    ("collective", re.compile(r"^(?:all_reduce|all_gather\w*|_all_gather_base|reduce_scatter\w*|_reduce_scatter_base|"
                              r"broadcast|barrier|all_to_all\w*|reduce) \(distributed_c10d\.py\)$"),
     "a collective of torch.distributed (an NCCL all-reduce, all-gather, reduce-scatter, broadcast or barrier)",
     "an NCCL error (a peer that died, the network between nodes), the watchdog's timeout (a rank that never "
     "reached the collective: its own error, in its own log, is the cause), or an earlier kernel's CUDA error "
     "surfacing at the collective",
     "every rank's log (the first rank that raised something other than a timeout is the cause) and NCCL_DEBUG=INFO"),
    ("flash-attn", re.compile(r"^_?flash_attn_(?:varlen_)?(?:forward|backward) \(flash_attn_interface\.py\)$|"
                              r"^_wrapped_flash_attn_(?:varlen_)?(?:forward|backward) \(flash_attn_interface\.py\)$"),
     "flash-attention's compiled kernel (flash_attn_interface.py calling flash_attn_2_cuda)",
     "a CUDA error inside the kernel (an illegal memory access: a flash-attn release with a bug for this GPU, head "
     "size or packed sequences, e.g. 2.5.0's backward, Dao-AILab/flash-attention#338), a CUDA out-of-memory, or "
     "a flash-attn build made for another torch or CUDA",
     "`pip show flash-attn torch`, the GPU model, and a run with `flash_attn: sdpa` to compare"),
    ("data", re.compile(r"^(?:(?:__next__|_next_data) \(dataloader\.py\)|fetch \(fetch\.py\)|_process_data \(|"
                        r"(?:default_collate|collate) \(collate\.py\)|__call__ \(data_collator|get_batch_samples \()"),
     "the data loader (torch utils/data/dataloader.py, a collator)",
     "a sample the collator cannot batch (a missing key, lengths or types that differ), or a worker process that "
     "died (host RAM or /dev/shm)",
     "the first sample the error names, and `df -h /dev/shm`"),
)


_LF_MAP = "_get_preprocessed_dataset (loader.py)"
_DATASETS_FILES = ("(arrow_dataset.py)", "(py_utils.py)", "(fingerprint.py)", "(dataset_dict.py)")


def _whole_name(frames: list[str]) -> list[str]:
    """`frames` with an innermost function name cut by the paste ("l (loader.py)") completed from the call on the
    code line above it (``config = load_config(model_args)`` gives ``load_config (loader.py)``), when that call
    starts with the cut name; otherwise unchanged."""
    if _LF_MAP in frames:
        # cut inside datasets' own map machinery under LF's preprocessing: the job is LF's, the frames datasets'
        tail = [f for f in frames[frames.index(_LF_MAP) + 1:] if _FUNC.match(f)]
        if all(f.endswith(_DATASETS_FILES) for f in tail):
            return frames[:frames.index(_LF_MAP) + 1]
    if len(frames) < 2 or not _FUNC.match(frames[-1]):
        return frames
    name, _, file = frames[-1].partition(" (")
    call = re.search(r"(?:^|[=\s.])(\w+)\(", frames[-2])
    if call and call.group(1) != name and call.group(1).startswith(name):
        return [*frames[:-1], f"{call.group(1)} ({file}"]
    return frames


def frame_lead(tb: Any) -> str | None:
    """Words for a traceback cut inside a frame of `_TABLE` (`tb`: the reader's traceback notice, its value holding
    ``frames``, "func (file.py)" entries with the code lines below them, outermost first): what that frame does,
    the kinds of exception it raises, and what to give. The last three entries are looked at, nearest the cut
    first; a code line cut mid-name counts when it is a prefix of the call (``self._fsdp_``). None when no
    entry matches: nothing is guessed from a frame that does many things."""
    v = tb.value if tb is not None and isinstance(tb.value, dict) else {}
    frames = _whole_name([f.strip() for f in (v.get("frames") or ()) if isinstance(f, str)])
    for fr in reversed(frames[-3:]):
        for _name, rx, what, kinds, run in _TABLE:
            if rx.search(fr):
                return (f"{FRAMES_LEAD}{what}; the exceptions raised there are most often {kinds}: give the lines "
                        f"after the cut (the exception names which) and {run}")
        if _FUNC.match(fr) and not fr.startswith(("_inner_training_loop (", "train (")):
            return None   # the innermost function is another one: its code line is not the trainer's
    return None
