"""When the moments after the steady training step come: evaluations, checkpoint saves, a resume.

Sources (transformers 5.24 ``training_args.py``/``trainer.py``, LLaMA-Factory ``train/sft/workflow.py`` at the snapshot
commit):

* an evaluation runs during training when ``eval_strategy`` is ``steps`` or ``epoch`` and there is eval data
  (``val_size > 0`` or ``eval_dataset``, LF data/loader.py); its micro batch is ``per_device_eval_batch_size``,
  8 by default (TrainingArguments field default). With ``eval_strategy: steps`` and no ``eval_steps``, transformers
  takes ``logging_steps`` (TrainingArguments.__post_init__); ``eval_on_start`` evaluates before step 1.
  A fractional ``eval_steps`` (< 1) is a share of the total steps, unknown before the data is counted.
* LF's ``compute_accuracy`` keeps the argmax of the logits of every eval batch (``eval_logit_processor``,
  sft/metric.py) until the eval loop ends (no ``eval_accumulation_steps``): int64 predictions and labels.
* ``resume_from_checkpoint``: Trainer._load_optimizer_and_scheduler loads the optimizer states before step 1 (on the
  GPU in distributed runs), so the first step already carries them.
* saves come every ``save_steps`` (default 500) with ``save_strategy: steps``.
"""

from __future__ import annotations

import math
from typing import Any

from finetune_doctor.run.values import as_bool, as_int


def _step(v: Any) -> int | None:
    """A step count as transformers reads it: an int >= 1, or a float >= 1 truncated; < 1 is a ratio (None).
    A non-finite float is no step count (transformers stops on it; analyzers/config/launch.py says so): None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return int(v) if v >= 1 else None


def moment_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The Run fields of the later moments (see the module docstring)."""
    strategy = str(cfg.get("eval_strategy") or cfg.get("evaluation_strategy") or "no").lower()
    has_eval_data = bool(cfg.get("eval_dataset")) or (isinstance(cfg.get("val_size"), (int, float))
                                                      and not isinstance(cfg.get("val_size"), bool)
                                                      and cfg.get("val_size") > 0)
    during = strategy in ("steps", "epoch") and has_eval_data
    first = None
    if during and as_bool(cfg.get("eval_on_start")):
        first = 0
    elif during and strategy == "steps":
        first = _step(cfg.get("eval_steps")) if cfg.get("eval_steps") not in (None, 0) else \
            _step(cfg.get("logging_steps", 500))
    save_strategy = str(cfg.get("save_strategy") or "steps").lower()
    return {
        "eval_during_training": during,
        "eval_micro_batch": max(as_int(cfg.get("per_device_eval_batch_size"), 8), 1),
        "eval_first_step": first,
        "eval_keeps_preds": as_bool(cfg.get("compute_accuracy")),
        "resume": bool(cfg.get("resume_from_checkpoint")),
        "save_first_step": _step(cfg.get("save_steps", 500)) if save_strategy == "steps" else None,
    }
