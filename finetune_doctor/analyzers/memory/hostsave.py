"""Host RAM at a checkpoint save under ZeRO-3: the 16-bit state dict gathered on rank 0's host.

Read from the versions docs/ARCHITECTURE.md "Sources" names:

* transformers 5.6.0 ``Trainer.save_model`` under DeepSpeed (``trainer.py:3778-3799``): with a PEFT model, ZeRO-3,
  and a DeepSpeed whose ``save_checkpoint`` accepts ``exclude_frozen_parameters`` (DeepSpeed >= 0.10.1,
  deepspeedai/DeepSpeed#3953) it calls ``_zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)``:
  only the trainable parameters (the adapter) come to the host. Otherwise ``accelerator.get_state_dict`` (accelerate
  1.11.0 ``accelerator.py:3910-3925``) calls ``_zero3_consolidated_16bit_state_dict()`` when
  ``stage3_gather_16bit_weights_on_model_save`` is true (it raises, and transformers saves the DeepSpeed checkpoint
  alone, when false).
* DeepSpeed 0.19.8 ``runtime/engine.py:5631-5700`` (``_zero3_consolidated_16bit_state_dict``): every rank joins the
  gather of one module at a time (``GatheredParameters``, the device side, already counted by the save moment),
  and rank 0 copies each gathered parameter to the host (``param.detach().cpu()``): the whole 16-bit model, or its
  trainable part, ends up in rank 0's host RAM before ``save_pretrained`` writes it.
* LLaMA-Factory saves at the end of training whatever ``save_strategy`` says (``trainer.save_model()`` in each
  workflow, e.g. train/sft/workflow.py), so every run meets this moment once.

Which transformers release first took the PEFT branch is not established here: for a training stack older than
transformers 5 the whole model is assumed gathered (the upper bound), and `save_host_bytes` says so.
"""

from __future__ import annotations

from finetune_doctor.analyzers.memory.params import ParamCounts
from finetune_doctor.run import Run


def _transformers_major(run: Run) -> int | None:
    for pkg, ver, _src in run.stack_sources:
        if pkg == "transformers" and ver:
            try:
                return int(str(ver).split(".")[0])
            except ValueError:
                return None
    return None


def save_host_bytes(run: Run, c: ParamCounts) -> tuple[float, str]:
    """(bytes rank 0's host gains while a checkpoint's 16-bit weights are consolidated, what is gathered) for
    `run`; (0, reason) outside ZeRO-3 or without ``stage3_gather_16bit_weights_on_model_save``."""
    if not (run.deepspeed and run.zero_stage == 3):
        return 0.0, "not ZeRO-3: each rank's weights are whole and saved from the device"
    if not run.ds_gather_16bit_on_save:
        return 0.0, "stage3_gather_16bit_weights_on_model_save is false: only DeepSpeed's partitioned checkpoint"
    peft = run.finetuning_type in ("lora", "oft")
    major = _transformers_major(run)
    if peft and (major is None or major >= 5):
        return c.adapter * 2.0, "the adapter only (transformers excludes frozen parameters for PEFT under ZeRO-3)"
    what = "the whole model in 16 bits" + ("" if not peft else
                                            " (assumed for a transformers < 5 stack: the PEFT branch may be absent)")
    return float(c.total) * 2.0, what
