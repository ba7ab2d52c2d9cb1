"""The ``lint.accelerate`` fact: the FSDP wrapping an accelerate config asks for, for `doctor lint` of the accelerate
config on its own and for `check` with ``--accelerate-config`` (rules/fsdp-wrap-class-unset.yaml).

accelerate's FullyShardedDataParallelPlugin wraps, under ``fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP``, the
classes ``fsdp_transformer_layer_cls_to_wrap`` names; without it, the names in the model's ``_no_split_modules``
(accelerate utils/dataclasses.py ``set_auto_wrap_policy``), and it stops with "Could not find the transformer layer
class ... in the model" when a name is not a module class of the model as loaded (hiyouga/LlamaFactory#8279: an
accelerate FSDP config without the key, for a model whose ``_no_split_modules`` did not match).
"""

from __future__ import annotations

from typing import Any


def accelerate_fact(acc: Any) -> dict[str, Any] | None:
    """``lint.accelerate`` of a readers/config/accelerate.AccelerateConfig (None without one): ``file``,
    ``distributed_type``, ``auto_wrap_policy``, ``cls_to_wrap`` (as written; None when absent) and ``fsdp_version``."""
    if acc is None:
        return None
    fsdp = getattr(acc, "fsdp", {}) or {}
    return {"file": acc.path, "distributed_type": acc.distributed_type,
            "auto_wrap_policy": fsdp.get("fsdp_auto_wrap_policy"),
            "cls_to_wrap": fsdp.get("fsdp_transformer_layer_cls_to_wrap"),
            "fsdp_version": fsdp.get("fsdp_version")}

