"""One process over several GPUs: HF Trainer's torch DataParallel (``ev.data_parallel``, rule
launched-as-data-parallel).

transformers' ``TrainingArguments._setup_devices`` (training_args.py, 5.6.0 :1896-1902) sets ``n_gpu`` to every
visible CUDA device when the process was not started by a distributed launcher (torchrun, accelerate, deepspeed),
``Trainer._wrap_model`` (trainer.py, 5.6.0 :2419-2426) then wraps the model in ``nn.DataParallel``, and
``_inner_training_loop`` prints "Training with DataParallel so batch size has been adjusted to: B" (trainer.py
5.6.0 :1474-1475; trainer.py:2083 in the June 2024 paste of LlamaFactory#4213) whenever that batch differs from
per_device_train_batch_size. The line is the log's own statement that the run was one process, not one per GPU:
the launch LLaMA-Factory does not make (``llamafactory-cli train`` starts torchrun itself when it sees several
GPUs from 0.8.0 on, cli.py; tests/test_dataparallel.py), and the one that keeps the whole optimizer state, the
gradients and the gathered outputs on GPU 0.

The same launch is established without that line where a paste shows it (`plain_launch`): the command, a plain
``python SCRIPT.py`` with no distributed launcher (torchrun, ``python -m torch.distributed``, accelerate,
deepspeed, ``llamafactory-cli``), under a CUDA_VISIBLE_DEVICES that lists several GPUs (``export`` or inline), and
the error such a process raises: torch's "Expected all tensors to be on the same device, ... cuda:0 and cuda:1"
(DataParallel's replicas or a spread model meeting another card's tensors; hiyouga/LlamaFactory#140, where the
maintainer's answer was to launch through accelerate or DeepSpeed). ``basis`` says which evidence it is.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence


def data_parallel_facts(ev: Evidence) -> dict[str, Any] | None:
    """``ev.data_parallel``: {batch (the adjusted batch the line states), micro_batch (per_device_train_batch_size,
    from the "Instantaneous batch size per device" line above it, else None), gpus (batch / micro_batch when both
    are read and divide, else None), text, where ("file:line"), location} of the first file whose log states
    DataParallel; None when no file does."""
    for f in ev.files:
        facts = {x.name: x for x in f.facts}
        dp = facts.get("data_parallel_batch")
        if dp is None or not isinstance(dp.value, int):
            continue
        mb = facts.get("micro_batch")
        micro = mb.value if mb is not None and isinstance(mb.value, int) and mb.value > 0 else None
        gpus = dp.value // micro if micro and dp.value % micro == 0 and dp.value // micro > 1 else None
        return {"basis": "line", "batch": dp.value, "micro_batch": micro, "gpus": gpus,
                "text": f"Training with DataParallel so batch size has been adjusted to: {dp.value}",
                "where": f"{dp.file}:{dp.line}", "location": location_of(dp.file, dp.line)}
    return plain_launch(ev)


VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES\s*=\s*[\"']?(?P<ids>\d+(?:\s*,\s*\d+)+)")
PLAIN = re.compile(r"^\s*(?:[A-Z_]+=\S+\s+)*(?P<cmd>python3?(?:\.\d+)?\s+(?:-u\s+)?\S+\.py)\b", re.M)
LAUNCHERS = re.compile(r"\btorchrun\b|torch\.distributed\.(?:launch|run)|\baccelerate\s+launch\b|"
                       r"(?<![\w.])deepspeed\s|llamafactory-cli|\bFORCE_TORCHRUN\b")
TWO_CARDS = re.compile(r"Expected all tensors to be on the same device, but found at least two devices, "
                       r"(?P<a>cuda:\d+) and (?P<b>cuda:\d+)")


def plain_launch(ev: Evidence) -> dict[str, Any] | None:
    """``ev.data_parallel`` from a paste (a short file's whole text, `FileEvidence.text`) that shows a plain
    ``python SCRIPT.py`` launch (`PLAIN`, no `LAUNCHERS` anywhere in the file), a CUDA_VISIBLE_DEVICES listing
    several GPUs (`VISIBLE`) and torch's same-device error between two CUDA devices (`TWO_CARDS`): {basis
    "command", gpus (the count listed), text (the command's line), where, location, devices}. None otherwise."""
    for f in ev.files:
        text = f.text or ""
        vis, cmd, two = VISIBLE.search(text), PLAIN.search(text), TWO_CARDS.search(text)
        if not (vis and cmd and two) or LAUNCHERS.search(text):
            continue
        line = text.count("\n", 0, cmd.start("cmd")) + 1
        ids = [x for x in re.split(r"\s*,\s*", vis.group("ids")) if x]
        return {"basis": "command", "batch": None, "micro_batch": None, "gpus": len(ids),
                "text": cmd.group("cmd"), "where": f"{f.read.path}:{line}",
                "location": location_of(f.read.path, line), "devices": f"{two.group('a')} and {two.group('b')}"}
    return None
