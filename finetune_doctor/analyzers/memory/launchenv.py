"""The environment ``llamafactory-cli train`` gives its training processes, as far as the memory model cares: whether
the caching allocator runs with expandable segments.

LLaMA-Factory launcher.py at ff6d4d12 (lines 57-83, with extras/misc.py:258-260 for ``is_env_enabled``): training
goes through torchrun when USE_MCA or USE_MEGATRON_BRIDGE or FORCE_TORCHRUN is enabled, or when more than one
device is visible (and neither Ray nor KTransformers is used); for a torchrun launch, unless OPTIM_TORCH is set to
something other than 1/true/y (it defaults to enabled), the workers' PYTORCH_CUDA_ALLOC_CONF is overwritten with
``expandable_segments:True`` (and TORCH_NCCL_AVOID_RECORD_STREAMS=1). A single-process run inherits the shell's
variables unchanged. Which variable torch reads: PYTORCH_ALLOC_CONF before PYTORCH_CUDA_ALLOC_CONF from torch 2.8 on,
only the latter before (probes/allocconf.py has the full parser; this module only needs the one option).

Pure Python: the doctor takes the environment it runs in as the launching shell's.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

from finetune_doctor.numbers import parse_version

LEGACY_VAR = "PYTORCH_CUDA_ALLOC_CONF"
PRIMARY_VAR = "PYTORCH_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"
# the title of the remedy (engine/planners.py, rules/expandable-segments.yaml): probes confirm it by replay
EXPANDABLE_REMEDY = "launch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def _enabled(env: Mapping[str, str], name: str, default: str = "0") -> bool:
    """LLaMA-Factory's ``is_env_enabled``: the value lower-cased is one of true, y, 1."""
    return str(env.get(name, default)).lower() in ("true", "y", "1")


def torchrun_launch(run: Any, env: Mapping[str, str]) -> bool:
    """Whether llamafactory-cli starts `run` (a run.Run) through torchrun: several data-parallel processes, or a
    variable that forces it."""
    return run.world_size > 1 or any(_enabled(env, k) for k in ("FORCE_TORCHRUN", "USE_MCA", "USE_MEGATRON_BRIDGE"))


def launch_env(run: Any, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The training processes' environment: `env` (default: this process's) as the launcher changes it."""
    out = dict(os.environ if env is None else env)
    if torchrun_launch(run, out) and _enabled(out, "OPTIM_TORCH", "1"):
        out[LEGACY_VAR] = EXPANDABLE
    return out


def _newer(torch_version: str | None) -> bool:
    """torch >= 2.8 (PYTORCH_ALLOC_CONF read first), or a version not known as major.minor."""
    got = parse_version(str(torch_version or ""), parts=2)   # numbers.py, the one reader of release strings
    return got is None or len(got) < 2 or got >= (2, 8)


def alloc_setting(env: Mapping[str, str], torch_version: str | None = None) -> tuple[str | None, str]:
    """(variable, text) of the allocator setting torch would read from `env` ((None, "") when neither is set)."""
    for name in ((PRIMARY_VAR, LEGACY_VAR) if _newer(torch_version) else (LEGACY_VAR,)):
        if name in env:
            return name, env[name]
    return None, ""


def expandable_segments(run: Any, env: Mapping[str, str] | None = None, torch_version: str | None = None) -> bool:
    """Whether `run`'s training processes get ``expandable_segments:True``: the setting torch reads, split at
    commas and colons as its tokenizer splits it (whitespace dropped), names the option with the value True."""
    _, text = alloc_setting(launch_env(run, env), torch_version)
    parts = [p for p in re.split(r"\s*,\s*", re.sub(r"\s+", "", text)) if p]
    return any(p.split(":", 1) == ["expandable_segments", "True"] for p in parts)
