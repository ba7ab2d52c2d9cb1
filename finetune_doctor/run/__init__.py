"""The training run as LLaMA-Factory would actually execute it.

`resolve_run` (run/resolve.py) turns the merged YAML keys, the model architecture, the DeepSpeed config and the
hardware into a `Run` (run/model.py): defaults filled, precision resolved the way LLaMA-Factory resolves it, world
size known. run/stack.py holds what the training machine's versions decide; run/values.py reads key values.
"""

from __future__ import annotations

from typing import Any

# The package's names, each imported from its module on first use (PEP 562, as analyzers/memory/__init__.py):
# a module that needs only run/values.py (the launch checks' `split_arg`) does not import the resolver, the
# 161-field `Run`, the architecture and the model readers with it -- `doctor lint` of an accelerate config
# (issue #22).
_FROM = {
    "Run": "model", "resolve_run": "resolve",
    **dict.fromkeys(("OPTIM_IMPL", "SHIFTED_LOGITS_COPY_BEFORE", "default_optim", "parse_version"), "stack"),
    **dict.fromkeys(("POSITIVE_INT_KEYS", "InvalidRunValue", "check_sizes"), "values"),
}

__all__ = ["OPTIM_IMPL", "POSITIVE_INT_KEYS", "SHIFTED_LOGITS_COPY_BEFORE", "InvalidRunValue", "Run",
           "check_sizes", "default_optim", "parse_version", "resolve_run"]


def __getattr__(name: str) -> Any:
    mod = _FROM.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
