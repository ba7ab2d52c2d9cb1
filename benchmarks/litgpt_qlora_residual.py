#!/usr/bin/env python
"""Diagnostic (no fit, nothing the doctor reports): what litgpt's QLoRA loop keeps that a LLaMA-Factory run does
not, added to the doctor's ``peak_allocated`` for the litgpt QLoRA rows of the dev half of
benchmarks/data/calibration_rows.yaml, to show how much of their residual error those terms account for.

The rows are litgpt ``finetune_lora`` runs (config_hub at 00af8b0d, bitsandbytes 0.42.0, Lightning 2.4). Three
things differ from LLaMA-Factory and have no LLaMA-Factory key, so the doctor cannot be told them:

* **The previous step's graph stays alive through the next forward.** The loop keeps ``logits = model(...)`` (a
  list of chunk tensors with their ``grad_fn``) until the next iteration's forward has returned
  (litgpt/finetune/lora.py:304-310 at 00af8b0d). Autograd frees the tensors a node saved with
  ``save_for_backward`` after backward, but not attributes of its ``ctx``; bitsandbytes 0.42.0's ``MatMul4Bit``
  keeps its input as ``ctx.tensors = (A, B)`` (autograd/_functions.py:523), so every 4-bit linear's input of step
  N is still held while step N+1 runs, with step N's bf16 logits (T × V). The held inputs are the same bytes the
  doctor counts once as the saved input (analyzers/memory/qlora.py ``saved_input_terms``).
* **The output layer is quantized.** litgpt builds ``lm_head`` as ``LoRALinear`` around ``torch.nn.Linear``
  (litgpt/lora.py:121, :509) and Lightning's ``BitsandbytesPrecision.module_init_context`` replaces every
  ``torch.nn.Linear`` made under ``fabric.init_module`` (lightning/fabric/plugins/precision/bitsandbytes.py
  :129-144 at 2.4.0): V × h stored at 0.5625 bytes instead of bf16.
* **Its dequantised copy is fp16 plus a bf16 cast.** Lightning quantizes ``weight.to(torch.half)``
  (bitsandbytes.py:334), so the state's dtype is fp16 and ``MatMul4Bit`` builds ``dequantize_4bit(B).to(A.dtype)``
  (_functions.py:516): two V × h copies at the output layer, the largest quantized linear.

Run: ``FINETUNE_DOCTOR_NO_NVML=1 HF_HUB_OFFLINE=1 python benchmarks/litgpt_qlora_residual.py`` (CPU, seconds). The
sum is an upper bound (the moments of the three do not all coincide with the doctor's peak).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from calib_data import load_rows, measured_gib, pins_for  # noqa: E402

GIB = 2 ** 30
NF4_BYTES = 0.5 + 4 / 64      # 4-bit codes and an fp32 absmax per block of 64 (no double quantization)


def main() -> int:
    import calibrate
    from finetune_doctor.analyzers.memory import qlora
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    before, after = [], []
    print("| row | measured GiB | doctor | error | previous step's inputs | previous logits | lm_head in NF4 | "
          "its fp16 + bf16 dequant | doctor + these | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in load_rows():
        if row.get("split") != "dev" or row.get("framework") != "litgpt" or row["method"] != "qlora" \
                or not row.get("measured"):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path, _ = calibrate.write_row(row, Path(tmp))
            env = Path(tmp) / "pip-freeze.txt"
            env.write_text("".join(f"{k}=={v}\n" for k, v in pins_for(row).items()))
            opts = Options(command="estimate", paths=(str(path),), gpu=row["gpu"], offline=True, env_file=str(env),
                           model_config=str(Path(tmp) / "model" / "config.json"))
            asm = assemble_config(str(path), (), opts)
        run, mem = asm.run, asm.memory
        a = run.arch
        T = run.micro_batch * run.seq_len
        held, _ = qlora.saved_input_terms(run, T, range(a.num_layers), range(0))
        logits = T * a.vocab_size * 2
        lm = -a.vocab_size * a.hidden_size * (2 - NF4_BYTES)
        dq = max(a.vocab_size * a.hidden_size * 4 - qlora.dequant_transient_bytes(run), 0.0)
        meas = measured_gib(row)
        total = mem.peak_allocated + (held + logits + lm + dq) / GIB
        before.append(abs(mem.peak_allocated / meas - 1))
        after.append(abs(total / meas - 1))
        print(f"| {row['id']} | {meas:.2f} | {mem.peak_allocated:.2f} | {mem.peak_allocated / meas - 1:+.0%} | "
              f"{held / GIB:+.2f} | {logits / GIB:+.2f} | {lm / GIB:+.2f} | {dq / GIB:+.2f} | {total:.2f} | "
              f"{total / meas - 1:+.0%} |")
    print(f"\nmedian |error|: doctor {statistics.median(before):.1%}, with litgpt's terms {statistics.median(after):.1%}"
          f" (max {max(before):.1%} -> {max(after):.1%}; {len(before)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
