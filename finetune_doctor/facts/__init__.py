"""The facts rules judge: one module per namespace, each declaring its fields and assembling its values.

========  ============================================================  ==========================================
namespace what                                                          assembled by
========  ============================================================  ==========================================
cfg       merged LLaMA-Factory YAML keys after ``key=value`` overrides  facts/cfg.py
lint      key problems, a missing DeepSpeed file, unused suppressions   facts/lint.py (+ engine/judge.py)
hw        the GPUs                                                      facts/hw.py
model     architecture and parameter counts                             facts/model.py
run       the run as LLaMA-Factory executes it (run.py)                 facts/run.py
ds        the DeepSpeed config, "auto" resolved                         facts/ds.py
mem       the memory estimate                                           facts/mem.py
data      token statistics of the datasets                              facts/data.py
ev        a finished run's timeline and detectors                       facts/ev.py
gpus      live or recorded per-card memory                              facts/gpus.py
========  ============================================================  ==========================================

facts/config.py assembles every config-side namespace of one training config (the path of check, lint, estimate,
probe and the config half of postmortem); the commands that add ``ev``, ``gpus`` or ``data`` add them beside it.
Imports point down only: readers, run.py, analyzers and value types.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping

from finetune_doctor.facts.schema import Namespace

NAMES = ("cfg", "lint", "hw", "model", "run", "ds", "mem", "data", "ev", "gpus")
CONFIG_NAMES = NAMES[:8]   # the namespaces a config's facts hold (ev: a postmortem's logs, gpus: doctor gpus)


def skeleton(**given: object) -> dict[str, object]:
    """The one facts skeleton: every namespace of a config's facts, None (a rule requiring it is skipped) unless
    `given`. facts/config.py, the DeepSpeed-alone lint and the config-less postmortem all start from it."""
    out: dict[str, object] = dict.fromkeys(CONFIG_NAMES)
    out.update(given)
    return out


@lru_cache(maxsize=1)
def namespaces() -> Mapping[str, Namespace]:
    """Every declared namespace by name (what the rule loader checks fact names against)."""
    from finetune_doctor.facts import cfg, data, ds, ev, gpus, hw, lint, mem, model, run

    out = {"cfg": cfg.namespace()}
    for mod in (lint, hw, model, run, ds, mem, data, ev, gpus):
        out[mod.NAMESPACE.name] = mod.NAMESPACE
    return out
