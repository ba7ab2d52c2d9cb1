"""DeepSpeed's batch-size check read as what it establishes (issue #25, DeepSpeed's own lines in a paste).

DeepSpeed's config (deepspeed/runtime/config.py ``DeepSpeedConfig._batch_assertion``, 0.9-0.19) asserts
``train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size`` and says, when it
does not hold, "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu *
gradient_acc_step * world_size T != M * G * W" (older releases print no space before T). ``_set_batch_related_
parameters`` derives the third of the three from any two, so the check fails only when the config fixes all three
(or HF's Trainer filled "auto" ones beside a fixed one) and they do not multiply out for the processes started: a
config written for another GPU count, or a launch that started a different number of processes. The assertion is a
config error, not a DeepSpeed bug (what a traceback read by package alone would suggest).
"""

from __future__ import annotations

import re

BATCH_CHECK = re.compile(r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size\s*"
                         r"(?P<t>\d+) != (?P<m>\d+) \* (?P<g>\d+) \* (?P<w>\d+)")

WHY = {
    "world": ("the three hold for {k} processes and {w} were started: the config was written for another GPU count, or "
              "the launch started another number of processes than intended (the launcher's process count, "
              "CUDA_VISIBLE_DEVICES)"),
    "split": ("train_batch_size {t} is not a whole multiple of micro batch × world size ({m} × {w} = {mw}), so no "
              "gradient_accumulation_steps makes it up (a trainer that derives the accumulation rounds it down): "
              "choose a global batch that is a multiple of {mw}, or another micro batch"),
    "accumulation": ("for micro batch {m} on {w} processes train_batch_size {t} needs gradient_accumulation_steps "
                     "{need}, and {g} is set"),
}
"""Why the product misses, by the shape of the numbers (`_shape`)."""


def _shape(t: int, m: int, g: int, w: int) -> str:
    """"world" when train_batch_size is micro batch × accumulation × another whole process count, "split" when it
    is no whole multiple of micro batch × world size, else "accumulation" (the accumulation is the odd one)."""
    if m * g and t % (m * g) == 0 and t // (m * g) != w:
        return "world"
    return "split" if m * w == 0 or t % (m * w) else "accumulation"


def ds_batch(msg: str) -> str | None:
    """Words for DeepSpeed's batch-size assertion (`BATCH_CHECK`, module docstring), or None for another message."""
    m = BATCH_CHECK.search(msg)
    if m is None:
        return None
    t, mb, g, w = (int(m.group(x)) for x in "tmgw")
    why = WHY[_shape(t, mb, g, w)].format(t=t, m=mb, g=g, w=w, k=t // (mb * g) if mb * g else 0, mw=mb * w,
                                          need=t // (mb * w) if mb * w else 0)
    return (f"DeepSpeed's config check failed: train_batch_size {t} is not train_micro_batch_size_per_gpu {mb} × "
            f"gradient_accumulation_steps {g} × world size {w} = {mb * g * w}; {why}. Give at most two of the three in "
            "the DeepSpeed config, or \"auto\" for each under the HF Trainer (it fills them from "
            "per_device_train_batch_size, gradient_accumulation_steps and the processes started), so the third is "
            "derived: a config error, not a DeepSpeed bug")
