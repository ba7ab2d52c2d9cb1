"""The training run as LLaMA-Factory would actually execute it.

`resolve_run` (run/resolve.py) turns the merged YAML keys, the model architecture, the DeepSpeed config and the
hardware into a `Run` (run/model.py): defaults filled, precision resolved the way LLaMA-Factory resolves it, world
size known. run/stack.py holds what the training machine's versions decide; run/values.py reads key values.
"""

from __future__ import annotations

from finetune_doctor.run.model import Run
from finetune_doctor.run.resolve import resolve_run
from finetune_doctor.run.stack import OPTIM_IMPL, SHIFTED_LOGITS_COPY_BEFORE, default_optim, parse_version
from finetune_doctor.run.values import POSITIVE_INT_KEYS, InvalidRunValue, check_sizes

__all__ = ["OPTIM_IMPL", "POSITIVE_INT_KEYS", "SHIFTED_LOGITS_COPY_BEFORE", "InvalidRunValue", "Run",
           "check_sizes", "default_optim", "parse_version", "resolve_run"]
