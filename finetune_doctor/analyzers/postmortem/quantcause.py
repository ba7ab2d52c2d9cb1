"""A quantized checkpoint under DeepSpeed ZeRO-3, read from the refusal it meets at load (issue #25).

transformers refuses a ``device_map`` (or ``low_cpu_mem_usage``) when ZeRO-3 is on: "DeepSpeed Zero-3 is not
compatible with `low_cpu_mem_usage=True` or with passing a `device_map`." (modeling_utils.py ``from_pretrained``,
the check beside ``is_deepspeed_zero3_enabled``); LLaMA-Factory turns low_cpu_mem_usage off under ZeRO-3
(model/patcher.py:429 at the snapshot), so the device_map is the quantized model's. Today's LLaMA-Factory refuses a
post-training-quantized checkpoint under ZeRO-3 or FSDP itself: "DeepSpeed ZeRO-3 or FSDP is incompatible with
PTQ-quantized models." (model/model_utils/quantization.py:105 at the snapshot). LlamaFactory#2974: LoRA under ZeRO-3
on Qwen-14B-Chat-Int4 (a GPTQ upload); the maintainer: pre-quantized models are not supported there.

When the user's words beside the line name a checkpoint whose name says it is stored quantized (``-Int4``,
``-GPTQ``, ``-AWQ``: `quant.name_suggests_quantized`, the one reading of such names), that checkpoint is named as the
likely cause, with its config.json's ``quantization_config`` as the input that decides (a name is a hint only).
"""

from __future__ import annotations

import re

from finetune_doctor.quant import name_suggests_quantized

ZERO3_QUANT = re.compile(r"DeepSpeed Z\w+-3 is not compatible with \W?low_cpu_mem_usage|incompatible with PTQ-quantized")

# a model name as users write one in a sentence ("使用Qwen14B-chat-Int4作为base模型", "Qwen/Qwen2-7B-Instruct-AWQ");
# ASCII word rules, so a name written against Chinese ends at the first Han character
_NAME = re.compile(r"(?<![\w./-])[A-Za-z][\w.-]*(?:/[\w.-]+)?", re.A)
# formats LLaMA-Factory dequantizes on load (FP8, MXFP4) or that ZeRO-3 shards (bitsandbytes 4-bit QLoRA): not the
# clash this refusal reports
_NOT_THE_CLASH = frozenset({"FP8", "MXFP4", "bitsandbytes"})


def quantized_name(words: str) -> tuple[str, str] | None:
    """(name, format) of the first model name in `words` that says it is stored quantized in a format ZeRO-3 cannot
    partition (GPTQ, AWQ, an -Int4/-Int8 upload, GGUF, AQLM, ...), or None."""
    for m in _NAME.finditer(words):
        hint = name_suggests_quantized(m.group(0).rstrip(".-"))
        # a model's name: a digit and a separator ("Qwen-7B-Int4"), not the format word alone ("int4", "GPTQ")
        if hint and hint not in _NOT_THE_CLASH and re.search(r"\d", m.group(0)) and re.search(r"[-_/]", m.group(0)):
            return m.group(0).rstrip(".-"), hint
    return None


def zero3_quantized(cls: str, msg: str, words: str = "") -> str | None:
    """Words for the ZeRO-3 refusal of a quantized model (`cls` ValueError, `msg` its message; module docstring),
    with the quantized checkpoint `words` (the user's words and the line beside the exception) name first; None for
    another exception. `cls` "" is the message quoted in words without its class (said.py `_reading`): the text is
    that ValueError's alone."""
    if cls not in ("ValueError", "") or not ZERO3_QUANT.search(msg):
        return None
    dm = "; under LLaMA-Factory the device_map is the quantized model's" if "device_map" in msg else ""
    named = quantized_name(words)
    lead = ""
    if named:
        fmt = "integer, GPTQ-style" if named[1] == "integer" else named[1]
        lead = (f"the words name `{named[0]}`, a checkpoint its name says is stored quantized ({fmt}): most likely "
                "it is the cause (the input that decides: `quantization_config` in its config.json); ")
    return (lead + "ZeRO-3 partitions every parameter at load, which a quantized model cannot be (a GPTQ/AWQ/... "
            f"checkpoint, or bitsandbytes 8-bit{dm}): train a quantized model with ZeRO-2 or without DeepSpeed, or "
            "use ZeRO-3 with the unquantized model (4-bit bitsandbytes QLoRA is the one quantization ZeRO-3 shards, "
            "quantization_bit: 4 on the original checkpoint); `doctor check` on the config says so before a launch")
