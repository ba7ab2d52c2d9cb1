"""The launch facts of trial 15 (issue #21): a Ray launch named as its own launcher, and a release narrowed by the
config's keys that rules out LLaMA-Factory's launch before torchrun. Split from facts/kinds.py at the 800-line cap
(issue #22); facts/kinds.py `launcher_assumption` and `data_parallel_open` ask it, facts/assumelaunch.py weighs
`RAY_UNSET`.
"""

from __future__ import annotations

from typing import Any

# a Ray launch (``ray_num_workers`` with ``USE_RAY=1``, run/engines.py) is its own launcher: LLaMA-Factory's
# launcher.py starts torchrun, and sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, only when use_ray() is
# false (LF main launcher.py L57-82); without USE_RAY=1 the Ray keys are ignored and torchrun runs over the
# visible GPUs, which is the alternative weighed
RAY_UNSET = "llamafactory-cli train without USE_RAY=1 (torchrun over the visible GPUs, expandable segments on)"


def ray_launcher(run: Any, how: str) -> dict[str, Any]:
    """The fields (value, source, alternatives, resolve_with) of the ``launcher`` Assumption that facts/kinds.py
    `launcher_assumption` writes for a run resolved as a Ray launch (``run.launcher == "ray"``: the YAML sets
    ``ray_num_workers`` > 1 and no --launch line was read, run/engines.py) whose ranks train as `how` ("DDP" or
    "DeepSpeed as the YAML names it"): Ray's workers, USE_RAY=1 taken as set; its one alternative is `RAY_UNSET`."""
    n = int(getattr(run, "ray_num_workers", None) or run.world_size)
    return {"value": f"USE_RAY=1 llamafactory-cli train (Ray, {n} workers of one GPU each, {how}, allocator default)",
            "source": f"the YAML sets ray_num_workers: {n}, which LLaMA-Factory reads only under USE_RAY=1 "
                      "(extras/misc.py use_ray); no --launch line says whether it is set, so it is taken as set, and "
                      "LLaMA-Factory then starts no torchrun and no expandable segments (launcher.py L57-82)",
            "alternatives": (RAY_UNSET,),
            "resolve_with": "--launch FILE (the launch command line with its environment)"}


def narrowed_past_first(release: Any, values: Any = None, kind: str | None = "train") -> bool:
    """Whether the config's keys place the run after the catalogue's first release (LLaMA-Factory 0.8.0): `release`
    (readers/config/lfrelease.py Release) not known but narrowed by them (readers/config/lfnarrow.py) to releases
    that start later, or, for the one installed here (not necessarily the training machine's, so not narrowed by
    the reading), the config's `values` narrowed the same way. A key first declared later was in no release before
    the catalogue either (a key's declared range is one stretch of its history), so a release before 0.8.0 is ruled
    out (trial 15 case 07: the Ray keys narrowed the run to 0.9.3-0.9.4, yet "llamafactory-cli train before 0.8.0"
    was offered as an alternative)."""
    if release is None or getattr(release, "older", False):
        return False
    from finetune_doctor.readers.config.lfrelease import choose, load

    if release.known and getattr(release, "source", None) == "installed here" and values:
        from finetune_doctor.readers.config.lfnarrow import narrow

        release = narrow(choose(None), values, kind) or release
    versions = getattr(release, "versions", ())
    if release.known or not versions or getattr(release, "conflict", ()):
        return False
    return versions[0] != load()["versions"][0]


def ranks_train_as(asm: Any, engine: str | None, deepspeed: bool) -> tuple[bool, str | None, str]:
    """(deepspeed, engine, how) of a multi-rank run for the ``launcher`` assumption: the YAML's ``deepspeed`` key
    says how the ranks train whether or not its file is on this machine (lint resolves the run without the file),
    so lint and check describe the launch alike (trial 15 case 04: lint said "torchrun, DDP" for a ZeRO-3 config
    that check called "DeepSpeed as the YAML names it"). `how` is "DeepSpeed as the YAML names it" or "DDP"."""
    if not deepspeed and (getattr(getattr(asm, "doc", None), "values", None) or {}).get("deepspeed"):
        deepspeed, engine = True, ("deepspeed" if engine == "ddp" else engine)
    return deepspeed, engine, ("DeepSpeed as the YAML names it" if deepspeed else "DDP")


def world_without_gpus(run: Any) -> str:
    """How many ranks a run judged without a card is sized for, in words, for the ``gpus`` assumption and the
    "GPUs unknown" note alike (trial 15 case 05: the header said "world size 4", from ray_num_workers, while both
    said one GPU was assumed). `run` is the resolved run.Run, or None before it is resolved."""
    n = int(getattr(run, "world_size", 1) or 1)
    if n <= 1:
        return "one GPU is assumed for the world size"
    if getattr(run, "launcher", None) == "ray":
        return f"the world size is {n}, Ray's ray_num_workers (one GPU per worker)"
    return f"the world size is {n}, from the launch"


def gpus_unknown_note(env_file: str | None, run: Any) -> str:
    """The note of a run judged without a card; it names --env as given when it was (trial 6 case 11: an env file
    with no GPU line was reported as "no --env"), and the world size as `world_without_gpus` words it for `run`
    (None before the run is resolved)."""
    world = world_without_gpus(run)
    if env_file:
        return (f"GPUs unknown (no --gpu, no NVML; --env {env_file} names no GPU): the fit is not judged and "
                f"{world}; pass e.g. --gpu 4xL20")
    return (f"GPUs unknown (no --gpu, no NVML, no --env): the fit is not judged and {world}; pass e.g. --gpu "
            "4xL20, or --env with `llamafactory-cli env` output")


def renote_world(asm: Any, env_file: str | None) -> None:
    """Replace the "GPUs unknown" note written before the run was resolved (one GPU) by the one of the resolved
    run, when it has several ranks (Ray workers, a launch line): one answer in the header, note and assumption."""
    run = getattr(asm, "run", None)
    first = gpus_unknown_note(env_file, None)
    if run is not None and asm.hw is None and run.world_size > 1 and first in asm.notes:
        asm.notes[asm.notes.index(first)] = gpus_unknown_note(env_file, run)
