"""The launch, assumed when no input reads it: the launcher over several ranks (facts/kinds.py `launcher_assumption`,
the one producer, asked again with the resolved run), the rank count, the GPU counts weighed for a card named
without its count, and the smallest card a bare ``--gpu`` may mean. Each alternative is weighed by re-running the
memory model (facts/assumebase.py `weigh`). Split from facts/assume.py at the 800-line cap (issue #22).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from finetune_doctor.facts.assumebase import Judge, not_deciding, weigh, weighs
from finetune_doctor.types import Assumption, Hardware

def smallest_variant(hw: Hardware | None, spec: str | None) -> Hardware | None:
    """`hw` as the smallest card the bare ``--gpu`` `spec` may mean (``A100`` → the 40 GB card), None when the spec
    names a size or the card has one variant: what a remedy must fit when the GPU variant decides the verdict."""
    if hw is None or not spec:
        return None
    from finetune_doctor.hardware.catalog import variants

    others = [g for g in variants(spec) if g.capacity_gib < (hw.capacity_gib or 0)]
    if not others:
        return None
    g = min(others, key=lambda g: g.capacity_gib)
    return replace(hw, gpu=g.name, capacity_gib=g.capacity_gib, bf16=g.bf16, compute_capability=g.compute_capability)


def launch_assumptions(asm: Any, run: Any, hw: Hardware | None, tokens: int | None, judge: Judge, fresh: Judge,
            rerun: Callable[..., Any], base_verdict: str | None) -> list[Assumption]:
    """Over several ranks: the launcher (facts/kinds.py `launcher_assumption`, the one producer, asked again with
    the resolved run) weighed, and the rank count, when the launch was not read."""
    from finetune_doctor.facts.kinds import ACCELERATE_FSDP, BY_HAND, DATA_PARALLEL, launcher_assumption
    from finetune_doctor.facts.launchray import RAY_UNSET

    if run.world_size <= 1:
        return _gpu_count(asm, run, hw, tokens, judge, rerun, base_verdict)
    base = launcher_assumption(asm, run.world_size, run.engine, bool(run.deepspeed), run)
    if base is None:
        return []
    thunks: dict[str, Callable[[], tuple[float, str | None] | None]] = {
        BY_HAND: lambda: judge(run.with_(launcher="torchrun"), hw, tokens),
        DATA_PARALLEL: lambda: _data_parallel(asm, run, hw, tokens, judge, fresh, rerun),
        RAY_UNSET: lambda: judge(run.with_(launcher="llamafactory-cli"), hw, tokens)}
    if ACCELERATE_FSDP in base.alternatives:
        from finetune_doctor.readers.config.accelerate import AccelerateConfig
        from finetune_doctor.run.engines import LaunchInputs

        acc = AccelerateConfig(path="<assumed FSDP launch>", values={}, positions={}, distributed_type="FSDP",
                               num_processes=run.world_size, num_machines=run.nnodes)
        thunks[ACCELERATE_FSDP] = lambda: (fresh(rerun(launch=LaunchInputs(acc, None)), hw, tokens)
                                           if weighs(fresh) else None)
    weighed = weigh(base.name, base.value, base.source, base.resolve_with, base_verdict,
                     [(label, thunks.get(label)) for label in base.alternatives], not_deciding(base.name))
    src = "every GPU of --gpu on each node" if hw is not None and hw.source == "flag" else "the GPUs seen here"
    return [weighed, weigh("world-size", run.world_size, f"{src} (llamafactory-cli sets NPROC_PER_NODE to the "
                            "visible devices, launcher.py)", "--launch FILE, --accelerate-config FILE or --nnodes N",
                            base_verdict, [])]


# The GPU counts weighed when the inputs name a card but not how many (an `llamafactory-cli env` paste without
# "GPU number", trial 5 case 10): the node sizes LLaMA-Factory's multi-GPU examples and users' reports name most
GPU_COUNTS = (2, 4, 8)


def sharded(run: Any) -> bool:
    """Whether the run's per-GPU memory falls with its rank count: DeepSpeed ZeRO 1-3 partitions optimizer states
    (and gradients, parameters) over the ranks, FSDP shards parameters (DeepSpeed runtime/zero/stage_1_and_2.py,
    stage3.py; torch FSDP). Plain DDP replicates everything, so more GPUs do not move its peak."""
    return bool(run.zero_stage >= 1 or run.engine == "fsdp" or run.fsdp)


def _gpu_count(asm: Any, run: Any, hw: Hardware | None, tokens: int | None, judge: Judge,
               rerun: Callable[..., Any], base_verdict: str | None) -> list[Assumption]:
    """One rank because nothing said how many (the one-rank ``launcher`` assumption, facts/kinds.py
    `launcher_assumption`): weighed at `GPU_COUNTS` ranks per node when the run shards (`sharded`), so the
    alternative that moves the verdict is sized and can open it (trial 5: an --env card without its count gave
    `oom > 99 %` on a run that trained on 8 V100s). The weighed entry replaces the one recorded when the config was
    read (facts/verdict.py `record_assumptions`); [] when the count was read or the run does not shard."""
    from finetune_doctor.facts.kinds import launcher_assumption

    base = launcher_assumption(asm, run.world_size, run.engine, bool(run.deepspeed), run)
    if base is None or hw is None or not sharded(run) or not weighs(judge):
        return []
    nodes = max(hw.nnodes or 1, 1)

    def at(n: int) -> tuple[float, str | None] | None:
        more = replace(hw, num_gpus=n * nodes)
        return judge(rerun(hw=more), more, tokens)

    alts: list[tuple[str, Callable[[], tuple[float, str | None] | None] | None]] = [
        (f"torchrun over {n} GPUs per node", (lambda n=n: at(n))) for n in GPU_COUNTS]
    alts += [(label, None) for label in base.alternatives if label != "torchrun over several GPUs"]
    resolve = f"--gpu NxCARD such as --gpu 8x{hw.gpu or 'CARD'}, --launch FILE or --accelerate-config FILE"
    return [weigh(base.name, base.value, base.source + "; the run shards over its ranks, so each count is sized",
                   resolve, base_verdict, alts)]


def _data_parallel(asm: Any, run: Any, hw: Hardware | None, tokens: int | None, judge: Judge, fresh: Judge,
                   rerun: Callable[..., Any]) -> tuple[float, str | None] | None:
    """(total GiB, verdict) of the run as one process over its `run.world_size` GPUs (facts/kinds.py
    `DATA_PARALLEL`): GPU 0 holds a one-GPU run of the same micro batch plus the logits of every replica gathered
    on it (analyzers/memory/dataparallel.py), without torchrun, so without NCCL ranks or expandable segments. Such
    a launch means a LLaMA-Factory before 0.8.0: with no transformers given, the run is re-resolved with the
    transformers of those releases (kinds.py `DATA_PARALLEL_TRANSFORMERS`)."""
    from finetune_doctor.facts.kinds import DATA_PARALLEL_TRANSFORMERS

    if "transformers" not in {p for p, _v, _s in asm.stack_sources}:
        if not weighs(fresh):
            return None
        if asm.doc.values.get("shift_attn"):   # its version gate (run/savers.py) is the other transformers effect
            run, judge = rerun({"transformers": DATA_PARALLEL_TRANSFORMERS}), fresh
        else:
            # the one effect of that transformers on the run (run/resolve.py `_optimizer`), without re-resolving it:
            # a check on the training machine's config should stay under a second (issue #21)
            run = run.with_(shifted_logits_copy=True, forward_upcasts_logits=True)
    return judge(run.with_(world_size=1, gpus_per_node=1, launcher="python", dp_replicas=run.world_size),
                 hw, tokens)
