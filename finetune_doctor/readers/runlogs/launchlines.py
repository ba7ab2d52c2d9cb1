"""Launch command lines pasted into a report: a shell line that starts a training launcher, with the environment
assignments and the prompt before it (``FORCE_TORCHRUN=1 NNODES=2 RANK=0 MASTER_ADDR=192.168.0.1 MASTER_PORT=29500
llamafactory-cli train x.yaml``, LlamaFactory#5864; ``(env) user@host:/dir$ torchrun --nnodes 2 ...``).

Such a line is what the user ran, not what they say happened: the words reader (userwords.py) blanks it before it
looks for a symptom, and postmortem reads its rendezvous settings as it reads ``--launch``
(analyzers/postmortem/rendezvous.py ``launch_settings``). The launchers: torchrun and ``python -m
torch.distributed.run|launch`` (torch), ``llamafactory-cli`` / ``lmf`` (LLaMA-Factory's console scripts,
setup.py entry_points), ``deepspeed`` and ``accelerate launch``.
"""

from __future__ import annotations

import re

LAUNCH_LINE = re.compile(
    r"^(?:[^\n$#]{0,200}?[$#]\s+)?"                                   # a shell prompt ("(env) u@h:/dir$ ")
    r"(?:(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"\n]*\"|'[^'\n]*'|\S*)\s+)*"   # NAME=value before it
    # a command's arguments, not a sentence naming the tool ("deepspeed 0.15 和 torch 2.4 不兼容", "torchrun crashes
    # with OOM when I set --nproc_per_node 8", "deepspeed train fails"): the first word after the launcher is itself an
    # argument -- a flag, a file or a key=value, or for LLaMA-Factory's console scripts one of their subcommands
    r"(?:nohup\s+)?(?:(?:llamafactory-cli|lmf)(?=[ \t]+(?:train|eval|export|chat|webui|api)"
    r"(?:[ \t]*$|[ \t]+(?:--?[A-Za-z]|\S+\.(?:ya?ml|json)\b|[A-Za-z_]+=)))|"
    r"(?:torchrun|llamafactory-cli|lmf|deepspeed|accelerate\s+launch|python3?\s+-m\s+torch\.distributed\.(?:run|launch))"
    r"(?=[ \t]+(?:--?[A-Za-z]|\S+\.(?:py|ya?ml|json|sh)\b|[A-Za-z_]+=)))"
    r"[ \t][^\n]*$", re.M)
"""One launch command line (`LAUNCH_LINE.finditer` over a paste; ``re.M``)."""


def blank_launch_lines(text: str) -> str:
    """`text` with every launch command line (`LAUNCH_LINE`) replaced by spaces of the same length, so offsets and
    line numbers stay those of the file. Never raises."""
    return LAUNCH_LINE.sub(lambda m: " " * len(m.group(0)), text)


def launch_lines(text: str) -> list[str]:
    """The launch command lines of `text`, in file order (empty when there is none)."""
    return [m.group(0) for m in LAUNCH_LINE.finditer(text)]
