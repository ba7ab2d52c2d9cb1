"""Simulate training steps at full size on CPU with FakeTensorMode and count the live tensor bytes of one rank.

The model's transformers class is built from its config inside ``torch._subclasses.FakeTensorMode``: every
tensor has its real shape and dtype but no memory, so a 70B step runs in seconds and a few hundred MB of RAM.
LLaMA-Factory's training setup is reproduced on it (reference/llamafactory/LF_FACTS.md §2-3): weights in the
checkpoint dtype, trainable params upcast to fp32 unless pure_bf16 (``model/adapter.py:337-349``), LoRA through
peft with LF's targets (``all`` = every Linear but lm_head, ``model_utils/misc.py:28-52``), gradient
checkpointing only of layers that train (``model_utils/checkpointing.py:100-123``) with ``use_reentrant`` as
configured, autocast for bf16/fp16, the configured optimizer implementation, ``steps`` optimizer steps of
``min(grad_accum, 2)`` micro-batches each (the peak comes at step ≥ 2 once optimizer states exist, reference/memory/REPORT.md key
finding 4). `tracker.LiveBytesTracker` counts live bytes by category; the result is the analogue of
``torch.cuda.max_memory_allocated`` on the busiest rank.

Depth reduction: a decoder stack's memory is affine in its depth at every moment of the step that is anchored
to a layer counted from the bottom or the top (forward of layer i holds i layers of activations, backward of
layer i holds L-i layers of activations and i layers of gradients, etc.). The step is therefore tracked per
segment (prologue, each layer, logits, backward of each layer, optimizer step), the model is simulated at k and
k+1 layers, every segment's bytes are extrapolated linearly to L layers, and the peak is the largest
extrapolated segment. tests/test_probe_simulate.py checks this against a full-depth simulation (within 1%).

What is not simulated, and enters analytically (each adds a note to the result):

* DeepSpeed ZeRO-1/2 optimizer-side partitions (fp32 master, fp32 gradient partition, optimizer states; ZeRO-2
  half-precision gradient partition) on top of the simulated replica, per DeepSpeed's own estimator terms
  (reference/deepspeed/memory_estimators.md: 2 + 4 + 4 + 8 bytes per parameter). ZeRO-3 (and FSDP) is
  simulated with FSDP2 ``fully_shard`` over a fake process group as the stand-in for parameter / gradient /
  optimizer partitioning; DeepSpeed's extra half-precision parameter partition (2 B per trainable param / N)
  is added.
* 8-bit optimizers (bitsandbytes needs CUDA): states counted from bitsandbytes' layout.
* bitsandbytes 4-bit / 8-bit weights: a stand-in module with bnb's storage layout (packed uint8 + absmax) that
  dequantizes on each call; bnb's kernels are not run.
* liger-kernel's Triton kernels (fused linear cross-entropy, RMSNorm, SwiGLU): stand-ins that allocate and save
  what the kernels do (probes/liger.py); RoPE is left as transformers runs it (the same saved tensors).
* CUDA kernel choice (obstacle 3 of reference/memory/REPORT.md §4): the CPU build cannot make fake CUDA tensors, so SDPA runs its
  CPU flash kernel (same saved tensors as FlashAttention-2: output + log-sum-exp) and the AdamW implementation
  is chosen explicitly.

The three prototype obstacles (reference/memory/REPORT.md §4) are handled in `fake_patches`: the dense causal mask
(transformers' ``is_tracing`` treats FakeTensors as traced, so ``find_packed_sequence_indices`` reports packed
sequences and a b×1×s×s mask is built), ``Module.to`` on fake parameters (always takes the ``swap_tensors`` path,
which fails), and MemTracker on frozen parameters (`tracker.FrozenSafeMemTracker`).
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any, Callable

from finetune_doctor.errors import InputError
from finetune_doctor.probes import forked
from finetune_doctor.probes.build import build_config, prepare, zero3_setup
from finetune_doctor.probes.depth import choose_depth, describe_segment, extrapolate_peak
from finetune_doctor.probes.fakemode import fake_patches, load_torch
from finetune_doctor.probes.trace import AllocTrace
from finetune_doctor.probes.simresult import GIB, SimResult
from finetune_doctor.probes.simterms import analytic_terms, apply_terms
from finetune_doctor.probes.spec import ProbeSpec
from finetune_doctor.probes.step import NoBooks, train_steps
from finetune_doctor.probes.tracker import LiveBytesTracker

CUDA_BLOCK = 512   # CUDACachingAllocator kMinBlockSize: every allocation rounds up to 512 bytes

__all__ = ["CUDA_BLOCK", "GIB", "SimResult", "choose_depth", "memtracker_peak", "run_depth", "simulate"]


def run_depth(spec: ProbeSpec, n_layers: int, steps: int = 2, *, fake: bool = True, rank: int = 0,
              round_to: int = CUDA_BLOCK, notes: list[str] | None = None, trace: bool = False,
              progress: Callable[[str], None] | None = None, alongside: str = "") -> dict[str, Any]:
    """Simulate `steps` optimizer steps of `spec` at `n_layers` decoder layers and return the raw books.
    `progress(message)` hears of the build and of each micro-batch (`alongside`: what runs in parallel, for it).

    `fake=False` runs the same code on real CPU tensors (tests compare the two byte for byte; keep the model
    tiny then). Returns ``{"segments": {key: Peak}, "peak": Peak, "counts": {...}}`` where keys are
    ``(step, micro, phase, *position)`` and counts are element/byte totals of this depth used for the analytic
    terms. `trace`: also record every allocation and free from the model build on (``"trace"``: a
    `replay.AllocTrace` for the allocator replay); the books are the same either way.
    """
    torch = load_torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    notes = notes if notes is not None else []
    mesh = zero3_setup(spec.world_size, rank) if spec.sharded else None
    mode = FakeTensorMode(allow_non_fake_inputs=False) if fake else contextlib.nullcontext()
    tracker = LiveBytesTracker(round_to, trace=trace)
    on_micro = None
    if progress is not None:
        progress(f"simulating {n_layers} of {spec.num_layers} layers: building the model{alongside}")

        def on_micro(step: int, micro: int, micro_steps: int) -> None:
            progress(f"simulating {n_layers} of {spec.num_layers} layers: step {step}/{steps}, micro-batch "
                     f"{micro + 1}/{micro_steps}{alongside}")
    torch.manual_seed(0)
    with fake_patches(tracker, gather_in_place=spec.sharded and spec.deepspeed), mode:
        if trace:
            # the model build is part of the trace: its segments stay reserved for the step (the gpu probe's
            # max_memory_reserved includes them), and LF's fp32 upcasts leave freed blocks behind
            tracker.untracked = True
            with tracker:
                prep = prepare(spec, n_layers, notes, mesh=mesh)
                tracker.untracked = False
                train_steps(prep, spec, steps, tracker, on_micro=on_micro)
        else:
            prep = prepare(spec, n_layers, notes, mesh=mesh)
            with tracker:
                train_steps(prep, spec, steps, tracker, on_micro=on_micro)
        counts = prep.counts
        del prep
    if not fake:
        # real CPU tensors (tests' tiny models): free them before the next depth. Fake tensors hold no memory,
        # and a full collection of a process that imported torch and transformers costs ~0.3 s per depth
        gc.collect()
    out = {"segments": tracker.segment_peaks, "peak": tracker.peak, "counts": counts}
    if trace:
        out["trace"] = AllocTrace(tuple(tracker.trace or ()), n_layers)
    return out


def _warm_up(spec: ProbeSpec, n_layers: int) -> None:
    """Pay the lazy imports of a first simulation once, before `_books` forks: FakeTensorMode's first
    construction imports torch._dynamo (seconds), and the model's transformers module and peft load on first use.
    Any failure here is left to the simulation itself to raise."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode()
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        MODEL_FOR_CAUSAL_LM_MAPPING[type(build_config(spec, n_layers, []))]
        if spec.finetuning_type in ("lora", "oft"):
            import peft  # noqa: F401
    except Exception:  # noqa: BLE001 - the depth run reports it
        pass


def _books(spec: ProbeSpec, depths: tuple[int, ...], steps: int, **kw: Any) -> list[dict[str, Any]]:
    """`run_depth` of each depth. Two fake depths run side by side where a fork pays (probes/forked.py
    `worthwhile`: Linux, a CPU idle):
    the child simulates k+1 layers while this process simulates k; the books are the same as run one after
    the other (each depth is its own deterministic simulation: its own FakeTensorMode, tracker and seed)."""
    notes, progress = kw.pop("notes"), kw.pop("progress", None)
    if len(depths) != 2 or not kw.get("fake", True) or not forked.worthwhile():
        return [run_depth(spec, n, steps, notes=notes, progress=progress, **kw) for n in depths]
    if progress is not None:
        progress("simulating: loading the model's code")
    _warm_up(spec, depths[0])

    def second() -> tuple[dict[str, Any], list[str]]:
        # one intra-op thread in the child, as DataLoader workers do (torch/utils/data/_utils/worker.py
        # `_worker_loop`): an OpenMP pool the parent started does not survive the fork
        load_torch().set_num_threads(1)
        more: list[str] = []
        return run_depth(spec, depths[1], steps, notes=more, **kw), more

    child = forked.start(second)
    try:
        first = run_depth(spec, depths[0], steps, notes=notes, progress=progress,
                          alongside=f" (+{depths[1]} layers in parallel)" if child is not None else "", **kw)
    except BaseException:
        if child is not None:
            child.abandon()
        raise
    if progress is not None and child is not None:
        progress(f"simulating {depths[1]} of {spec.num_layers} layers (second process)")
    got = child.result() if child is not None else None
    if got is None:   # no fork here, or the child failed: run it here (and raise what it raises)
        return [first, run_depth(spec, depths[1], steps, notes=notes, progress=progress, **kw)]
    notes.extend(got[1])
    return [first, got[0]]


def memtracker_peak(spec: ProbeSpec, n_layers: int | None = None, steps: int = 2, *,
                    fake: bool = True) -> tuple[int, dict[str, int]]:
    """The same steps under ``torch.distributed._tools.mem_tracker.MemTracker`` (per-module statistics; slower,
    reference/memory/REPORT.md §4). Uses `tracker.FrozenSafeMemTracker`, which accepts LoRA's frozen base weights. Returns the peak
    total bytes and MemTracker's per-reference-type bytes at its peak snapshot. Full depth only."""
    torch = load_torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    from finetune_doctor.probes.tracker import FrozenSafeMemTracker

    notes: list[str] = []
    mode = FakeTensorMode(allow_non_fake_inputs=False) if fake else contextlib.nullcontext()
    torch.manual_seed(0)
    with fake_patches(None), mode:
        prep = prepare(spec, n_layers or spec.num_layers, notes)
        mt = FrozenSafeMemTracker()
        mt.track_external(prep.model, *( [prep.opt] if prep.opt is not None else []))
        with mt:
            train_steps(prep, spec, steps, NoBooks(), between_steps=mt.reset_mod_stats)
        snap = mt.get_tracker_snapshot("peak")
        del prep
    dev_stats = next(iter(snap.values()))
    total = int(dev_stats.pop("Total"))
    return total, {str(k): int(v) for k, v in dev_stats.items()}


def simulate(spec: ProbeSpec, steps: int = 2, *, depth: str | tuple[int, ...] = "auto", rank: int = 0,
             round_to: int = CUDA_BLOCK, fake: bool = True, other_ranks: tuple[int, ...] = (),
             trace: bool = False, progress: Callable[[str], None] | None = None) -> SimResult:
    """See `_simulate`; library deprecation warnings raised while building and stepping the model stay inside
    the probe (they concern transformers' own API, not the user's run). `progress(message)` hears what the
    probe is doing (the build, each micro-batch); it must not raise."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _simulate(spec, steps, depth=depth, rank=rank, round_to=round_to, fake=fake, other_ranks=other_ranks,
                         trace=trace, progress=progress)


def _simulate(spec: ProbeSpec, steps: int = 2, *, depth: str | tuple[int, ...] = "auto", rank: int = 0,
              round_to: int = CUDA_BLOCK, fake: bool = True, other_ranks: tuple[int, ...] = (),
              trace: bool = False, progress: Callable[[str], None] | None = None) -> SimResult:
    """Simulate `spec` and return the peak live tensor bytes of rank `rank` (a `SimResult`); `other_ranks` are
    simulated too and land in `SimResult.per_rank` (each costs one more simulation).

    `depth`: "auto" (`choose_depth`), "full", or explicit depths ((L,) or (k, k+1)). `steps` ≥ 2 catches the
    steady-state peak. `trace`: keep each depth's allocation trace in `SimResult.traces` for the allocator replay
    (probes/replay.py `replay_sim`). Raises InputError when the model cannot be built from its config, MissingExtra without
    torch/transformers/peft. Wall time: seconds for any model size (only 2-3 layers are built).
    """
    t0 = time.perf_counter()
    if steps < 1:
        raise InputError(f"--steps must be at least 1, got {steps}")
    if depth == "auto":
        depths = choose_depth(spec)
    elif depth == "full":
        depths = (spec.num_layers,)
    else:
        depths = tuple(depth)
    notes: list[str] = []
    if spec.attention in ("fa2", "fa3"):
        notes.append(f"{spec.attention} simulated with SDPA's flash kernel (same saved tensors: output + "
                     "log-sum-exp); the CPU build cannot run CUDA kernels")
    if spec.deepspeed and spec.autocast:
        notes.append("no autocast under DeepSpeed: it runs the half-precision module itself (accelerate sets "
                     "native_amp only outside DeepSpeed)")
    if spec.unsloth_gc:
        notes.append("unsloth checkpointing simulated as standard checkpointing (its CPU offload of layer inputs "
                     "is not modelled: an upper bound)")
    if spec.world_size > 1 and not spec.deepspeed and not spec.fsdp:
        notes.append("DDP gradient buckets are not simulated")
    if spec.stage in ("ppo", "rm"):
        notes.append(f"stage {spec.stage} simulated as a causal-LM loss (value head and generation not modelled)")
    from torch._subclasses.fake_tensor import DynamicOutputShapeException

    try:
        books = _books(spec, depths, steps, fake=fake, rank=rank, round_to=round_to, notes=notes, trace=trace,
                       progress=progress)
    except DynamicOutputShapeException as err:
        # e.g. transformers' per-expert loop (MoE experts in fp32) indexes tokens with nonzero(): its output size
        # depends on the routing, which fake tensors do not have
        raise InputError(f"simulate cannot run this model's step: {err.func if hasattr(err, 'func') else err} "
                         "has a data-dependent output shape under FakeTensorMode (MoE experts with fp32 trainable "
                         "weights use transformers' per-expert loop); use --mode gpu, or bf16 trainable weights "
                         "(pure_bf16) for the grouped expert kernel") from None
    L = spec.num_layers
    if len(depths) == 1:
        segs = books[0]["segments"]
        counts = {k: float(v) for k, v in books[0]["counts"].items()}
        scale = L / depths[0] if depths[0] != L else 1.0
        if scale != 1.0:
            notes.append(f"simulated at {depths[0]} layers, not extrapolated")
    else:
        k = depths[0]
        a, b = books
        segs = {key: extrapolate_peak(a["segments"][key], b["segments"][key], k, L)
                for key in a["segments"] if key in b["segments"] and key[0] != "setup"}
        counts = {key: a["counts"][key] + (L - k) * (b["counts"][key] - a["counts"][key]) for key in a["counts"]}
    terms, host, more = analytic_terms(spec, counts)
    notes += more
    best = None
    step_peak: dict[int, float] = {}
    described: dict[str, dict[str, int]] = {}
    for key, pk in segs.items():
        if key[0] == "setup" or not isinstance(key[0], int):
            continue
        total, by, added, part = apply_terms(key, pk, terms)
        described[describe_segment(key, L)] = {c: int(round(v)) for c, v in by.items()}
        step_peak[key[0]] = max(step_peak.get(key[0], 0.0), total)
        if best is None or total >= best[0]:   # on a tie prefer the later moment (steady state)
            best = (total, by, added, key, part)
    assert best is not None, "no segment was tracked"
    total, by, added, key, part = best
    params = {k: int(round(v)) for k, v in counts.items() if k in ("trainable", "total")}
    return SimResult(
        peak_bytes=int(round(total)),
        by_category={c: int(round(v)) for c, v in by.items()},
        segment=describe_segment(key, L),
        analytic={c: int(round(v)) for c, v in added.items() if v},
        analytic_part={c: int(round(v)) for c, v in part.items() if v},
        depth=depths,
        num_layers=L,
        rank=rank,
        world_size=spec.world_size,
        steps=steps,
        step_peaks=tuple(int(round(step_peak[s])) for s in sorted(step_peak)),
        wall_s=time.perf_counter() - t0,
        notes=tuple(dict.fromkeys(notes)),
        params=params,
        host_bytes=int(round(host)),
        spec=spec,
        segments=described,
        traces=tuple(b["trace"] for b in books if "trace" in b),
        per_rank={rank: int(round(total)), **{
            r: simulate(spec, steps, depth=depths, rank=r, round_to=round_to, fake=fake).peak_bytes
            for r in other_ranks if r != rank and 0 <= r < max(spec.world_size, 1)}},
    )
