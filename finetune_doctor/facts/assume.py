"""Assumptions: the values ``check``, ``estimate`` and ``lint`` used but did not read, each weighed by re-running
the memory model under its alternatives (docs/DESIGN.md, "Honest verdicts"; issue #21).

The memory model is a pure function of the run (analyzers/memory/moments.py ``estimate``: a fraction of a
millisecond), so every alternative that changes only the run or the card is evaluated exactly: the Run is
re-resolved by run.resolve_run (precision, optimizer, engine follow LLaMA-Factory's rules there, not here) and
judged by the same error model as the reported estimate (analyzers/memory/uncertainty.py ``assess``).

Two kinds:

* **open** assumptions (every one not in `NOT_OPEN`; `OPEN` lists this module's): a value the doctor cannot
  know here — sample lengths without the data, the GPU variant of a bare ``--gpu A100``, the training machine's
  torch, a checkpoint dtype its config.json does not name, the launcher, a DeepSpeed file that is not on this
  machine. The memory verdict is ``fits`` or ``oom`` only when it holds under every alternative of every open
  assumption (`fold`); otherwise ``at-risk``, naming the deciding assumption.
* **defaults**: a value LLaMA-Factory or transformers would fill in for sure (``per_device_eval_batch_size`` 8);
  recorded with its effect so the user sees what it costs, but it does not open the verdict.

`token_budget` answers "how long may the samples be": the largest sequence length (tokens per sample) at which the
run still fits, for training and for the first evaluation, by bisection over the memory model's sequence length.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace
from typing import Any, Callable

# the memory model is imported where an alternative is weighed, not here: `lint` without a card lists assumptions
# without weighing them and stays off the memory model (ARCHITECTURE.md, "memory model off the lint path")
from finetune_doctor.facts.assumebase import (NOT_OPEN, SAMPLE_LABEL, SAMPLE_LADDER_STEPS, SHORT_SAMPLE_TOKENS,
                                              TYPICAL_LONGEST_TOKENS,
                                              SHOWN_ONLY, SP_DROPPED, Seen, budget_gib, judge_run, not_deciding, sample_ladder,
                                              settled, weigh, weighs)
from finetune_doctor.facts.assumelaunch import launch_assumptions
from finetune_doctor.facts.assumepartial import partial_assumption
from finetune_doctor.facts.assumestack import (deepspeed_config_assumption, stack_assumptions, unsloth_assumption,
                                              unsloth_nf4_assumption, unsloth_rope_build_assumption,
                                              moe_expert_layout_assumption)
from finetune_doctor.types import Assumption, Hardware

# the least that enabling liger-kernel must lower the peak by for its assumption to be listed: the report rounds
# GiB to one decimal, a smaller move is not visible in it
LIGER_MOVES_GIB = 0.05


def collect(asm: Any, opts: Any, *, tokens: int | None, base_verdict: str | None,
            alt_stack: dict[str, Any] | None = None) -> list[Assumption]:
    """Every assumption behind `asm`'s estimate (facts/config.py `Assembly` with a resolved run), weighed against
    `base_verdict` (the verdict of the reported estimate). `tokens` is the measured worst micro-batch (None: the
    data was not scanned); `alt_stack` is facts/mem.py `older_stack`'s result. Pure apart from reading
    ``os.environ`` for the launch variables. Never raises for a resolved run."""
    weigh = asm.hw is not None or asm.memory is not None   # lint without a card: listed, not weighed
    c = Seen(asm, opts, tokens, base_verdict, judge_run(asm.counts, weigh), judge_run(None, weigh))
    return [*_data_and_card(c), *deepspeed_config_assumption(c), *stack_assumptions(c, alt_stack), *_checkpoint(c), *_attention(c),
            *unsloth_assumption(c), *unsloth_nf4_assumption(c), *unsloth_rope_build_assumption(c),
            *moe_expert_layout_assumption(c), *_terms(c), *_tensor_parallel(c), *_sequence_parallel(c),
            *launch_assumptions(asm, c.run, c.hw, tokens, c.judge, c.fresh, c.rerun, base_verdict), *_defaults(c),
            *partial_assumption(c)]


def _data_and_card(c: Seen) -> list[Assumption]:
    """The sample lengths without the data; the card a bare ``--gpu`` names; no card at all."""
    run, hw, out = c.run, c.hw, []
    if c.tokens is None and not run.fills_cutoff:
        alts = [(f"samples of {n} tokens", (lambda n=n: c.judge(run.with_(seq_len=n), hw, None)))
                for n in sample_ladder(run.seq_len)]
        out.append(weigh(
            "sample-lengths", f"every sample fills cutoff_len ({run.seq_len} tokens)",
            "the datasets were not scanned (not on this machine, or --no-data): the worst case is taken",
            "the data on this machine (check measures the longest micro-batch) or --context FILE from "
            "`doctor context`", c.base, alts))
    if hw is not None and hw.source == "flag" and c.opts.gpu:
        from finetune_doctor.hardware.catalog import variants

        others = variants(c.opts.gpu)
        if others:
            alts = [(g.name, (lambda g=g: c.judge(run, replace(hw, gpu=g.name, capacity_gib=g.capacity_gib,
                                                                bf16=g.bf16, compute_capability=g.compute_capability),
                                                  c.tokens)))
                    for g in others]
            out.append(weigh("gpu-variant", hw.gpu, f"--gpu {c.opts.gpu} names no memory size: the catalogue's "
                              f"default variant ({hw.capacity_gib:.2f} GiB usable) is taken",
                              f"--gpu {'/'.join([hw.gpu] + [g.name for g in others])}", c.base, alts))
    if hw is None:
        from finetune_doctor.facts.launchray import world_without_gpus

        ranks = "one GPU" if c.run.world_size <= 1 else f"{c.run.world_size} GPUs"
        out.append(weigh("gpus", f"unknown: {ranks}, no capacity", "no --gpu, no --env and no GPU seen here: the "
                          f"fit is not judged and {world_without_gpus(c.run)}",
                          "--gpu SPEC (e.g. 8xA100-80GB) or --env FILE", None, []))
    return out



def _checkpoint(c: Seen) -> list[Assumption]:
    """A checkpoint dtype its config.json does not name (readers/model/generic.py takes float32 then), or one the
    bundled catalogue recalls without a stored copy of the file to re-read (readers/model/catalog.py notes it
    "recalled, not re-read": the hub file is gated or not stored; models.json provenance says where it was looked
    for): the other width is weighed, float32 against the 16-bit dtype the entry names or the reverse."""
    notes = str(c.run.arch.notes or "")
    dtype = c.run.arch.dtype
    # readers/model/generic.py checkpoint_dtype's note is the only sign today (ModelArch has no "assumed" flag)
    if dtype == "float32" and ("assumed float32" in notes or "names no torch_dtype" in notes):
        why = ("the model's config.json names no torch_dtype/dtype; LLaMA-Factory's torch_dtype='auto' load takes "
               "the stored weights' dtype")
    elif "recalled, not re-read" in notes and dtype in ("float32", "bfloat16", "float16"):
        why = ("the bundled catalogue's dtype for this model was recalled, not re-read from a stored copy of its "
               "config.json or weights (finetune_doctor/catalog/models.json provenance says where it was looked for)")
    else:
        return []
    alt = "bfloat16" if dtype == "float32" else "float32"
    other = replace(c.run.arch, dtype=alt)
    return [weigh("checkpoint-dtype", dtype, why,
                   "--model-config with the checkpoint's config.json (or the model folder on this machine)",
                   c.base, [(alt, lambda: c.fresh(c.rerun(arch=other), c.hw, c.tokens) if weighs(c.fresh) else None)])]


def _tensor_parallel(c: Seen) -> list[Assumption]:
    """DeepSpeed AutoTP (``tensor_parallel.autotp_size`` > 1, run/resolve.py): the memory model sizes each GPU as
    holding the whole model, which only overstates a rank's share (AutoTP splits the linear layers' weights,
    gradients and optimizer states over the TP group, DeepSpeed runtime/tensor_parallel). An ``oom`` verdict is
    therefore not established (the assumption moves it; the split is not sized, so no figure is given); a ``fits``
    verdict holds (trial 9, LlamaFactory#10140)."""
    n = getattr(c.run, "autotp_size", 1)
    if n <= 1:
        return []
    return [Assumption(
        name="tensor-parallel", value=f"each GPU holds the whole model (AutoTP {n} not modelled)",
        source=f"the DeepSpeed file sets tensor_parallel.autotp_size: {n}; the doctor's memory model sizes data and "
               "ZeRO parallelism only",
        alternatives=(f"the linear layers split over {n} GPUs (not sized)",), effect_gib={}, effect_verdict={},
        resolve_with="measure the first steps on the training machine (doctor gpus --watch), or size the run "
                     "without tensor_parallel",
        moves_verdict=c.base == "oom")]


def _sequence_parallel(c: Seen) -> list[Assumption]:
    """360-LLaMA-Factory's ``sequence_parallel_size`` > 1 (run/seqpar.py): the run is sized as that fork splits each
    sequence. Upstream LLaMA-Factory declares no such key; it stops on it, or under ``ALLOW_EXTRA_ARGS`` drops it and
    trains every rank on the whole sequence. That alternative is evaluated and shown (assumebase.py `SHOWN_ONLY`:
    a config that names the fork's key is not run by a LLaMA-Factory that drops it unless the user asks for that),
    so the size the split saves is in the report."""
    run = c.run
    out = _context_parallel_unsized(c)
    if run.sp_size <= 1:
        return out
    one = SP_DROPPED
    return out + [weigh("sequence-parallel",
                  f"360-LLaMA-Factory splits each sequence over {run.sp_size} ranks ({run.sp_mode}): "
                  f"{run.rank_seq_len} of {run.seq_len} tokens per rank",
                  "sequence_parallel_size is 360-LLaMA-Factory's key (hparams/model_args.py:232 at 6fd8b28); "
                  "upstream LLaMA-Factory does not declare it",
                  "run the 360-LLaMA-Factory fork, or remove sequence_parallel_size for upstream LLaMA-Factory",
                  c.base, [(one, lambda: c.judge(run.with_(sp_size=1, sp_mode=""), c.hw, c.tokens))],
                  shown_only=(one,))]


def _context_parallel_unsized(c: Seen) -> list[Assumption]:
    """LLaMA-Factory's HyperParallel context parallelism (``use_hyper_parallel`` with ``hyper_parallel_cp_size``
    > 1, run/seqpar.py `hyper_parallel_cp`): the split happens in a package the doctor has not read, so each rank is
    sized with the whole sequence, and the split (each rank's per-token terms at 1/N of the sequence, as
    360-LLaMA-Factory's split is sized) is the alternative that may decide the verdict."""
    run, n = c.run, c.run.hp_cp_size
    if n <= 1 or run.sp_size > 1:
        return []
    return [weigh("context-parallel", f"each rank holds the whole sequence (HyperParallel cp {n} not sized)",
                  f"use_hyper_parallel with hyper_parallel_cp_size: {n}; the hyper_parallel package's split is not "
                  "modelled", "measure the first steps on the training machine (doctor gpus --watch)", c.base,
                  [(f"the sequence split over {n} ranks", lambda: c.judge(run.with_(sp_size=n), c.hw, None))])]


def _terms(c: Seen) -> list[Assumption]:
    """The memory terms' own assumptions (analyzers/memory/assumed.py, in the estimate's details), weighed where
    the run carries the value: the image size (``image_max_pixels`` is the largest an image may be; the smallest,
    ``image_min_pixels``, is the other end of the range) and the bitsandbytes release (one before 0.43.2 keeps every
    4-bit linear's input)."""
    mem = c.asm.memory
    out = []
    for a in (mem.details.get("assumptions") if mem is not None else None) or ():
        if a.name == "image-pixels" and a.alternatives:
            alts = [(str(v), (lambda v=v: c.judge(c.run.with_(image_max_pixels=int(v)), c.hw, c.tokens)))
                    for v in a.alternatives if isinstance(v, int)]
            # a sample holding one video at LF's bounds (analyzers/memory/assumed.py `video_alternative`)
            alts += [(v, (lambda: c.judge(c.run.with_(video_frames=c.run.video_maxlen), c.hw, c.tokens)))
                     for v in a.alternatives if isinstance(v, str) and v.startswith("one video per sample")]
            a = weigh(a.name, a.value, a.source, a.resolve_with, c.base, alts)
        elif a.name == "bitsandbytes-version" and a.alternatives:
            # the run with that release in its stack (analyzers/memory/qlora.py keeps_input reads it there)
            alts = [(str(v), (lambda v=v: c.judge(c.run.with_(stack_sources=c.run.stack_sources + (
                ("bitsandbytes", str(v), "assumed alternative"),)), c.hw, c.tokens))) for v in a.alternatives]
            a = weigh(a.name, a.value, a.source, a.resolve_with, c.base, alts)
        out.append(a)
    return out


def _attention(c: Seen) -> list[Assumption]:
    """Gemma-2 with ``flash_attn: auto`` (or unset): LLaMA-Factory takes FlashAttention-2 when flash-attn is
    installed on the training machine and eager attention when not (model/model_utils/attention.py, the gemma2
    branch at ff6d4d1); which one runs is not visible here, and eager keeps the full score matrix."""
    run = c.run
    if run.arch.model_type != "gemma2" or str(c.cfg.get("flash_attn") or "auto") != "auto":
        return []
    alts = [(k, (lambda k=k: c.judge(run.with_(attention=k), c.hw, c.tokens)))
            for k in ("fa2", "eager") if k != run.attention]
    return [weigh("attention-kernel", run.attention, "flash_attn: auto on Gemma-2: LLaMA-Factory uses "
                   "FlashAttention-2 if flash-attn is installed on the training machine, else eager attention",
                   "flash_attn: fa2 (or disabled) in the YAML, or --env FILE listing flash-attn", c.base, alts)]

def _defaults(c: Seen) -> list[Assumption]:
    """Values LLaMA-Factory or transformers fill in for sure (recorded with their effect, not open), and the host
    RAM an offloading run is not judged against."""
    run, hw, cfg, out = c.run, c.hw, c.cfg, []
    if run.eval_during_training and "per_device_eval_batch_size" not in cfg:
        alts = []
        if run.micro_batch != run.eval_micro_batch:
            alts.append((f"{run.micro_batch} (the training micro batch)",
                         lambda: c.judge(run.with_(eval_micro_batch=run.micro_batch), hw, c.tokens)))
        out.append(weigh("eval-batch", run.eval_micro_batch, "per_device_eval_batch_size is not set: "
                          "transformers' TrainingArguments default (8) evaluates 8 samples per micro batch",
                          "set per_device_eval_batch_size in the YAML", c.base, alts))
    if "per_device_train_batch_size" not in cfg and run.micro_batch != 1:
        out.append(weigh("train-batch", run.micro_batch, "per_device_train_batch_size is not set: transformers' "
                          "TrainingArguments default", "set per_device_train_batch_size in the YAML", c.base,
                          [("1", lambda: c.judge(run.with_(micro_batch=1), hw, None))]))
    if "cutoff_len" not in cfg:
        out.append(weigh("cutoff-len", run.seq_len, "cutoff_len is not set: LLaMA-Factory's DataArguments "
                          "default (data_args.py)", "set cutoff_len in the YAML", c.base, []))
    from finetune_doctor.run.savers import liger_offerable, triton_supported

    if c.base in ("oom", "at-risk") and liger_offerable(run) and triton_supported(hw):
        # the remedy planner may prescribe enable_liger_kernel (engine/planners.py `liger_candidate`): whether the
        # training machine can import liger-kernel is not in any input (LF's env block does not list it). Listed
        # only where liger moves the peak: an assumption carries its effect (trial 2: a full run whose peak is the
        # optimizer step, logits 0.0, listed it as noise)
        moved = _liger_moves(c)
        if moved is not None:
            out.append(weigh("liger-kernel", "installable on the training machine", "a remedy may enable "
                              "enable_liger_kernel, which would take the peak from "
                              f"{moved[0]:.1f} to {moved[1]:.1f} GiB; liger-kernel is an optional package "
                              "(LLaMA-Factory's requirements/liger-kernel.txt: liger-kernel>=0.6.3) and no input "
                              "says whether it is installed",
                              "pip install \"liger-kernel>=0.6.3\" on the training machine", c.base, []))
    offload = run.offload_optimizer == "cpu" or run.offload_param == "cpu" or bool(getattr(run, "fsdp_offload", False))
    if offload and (hw is None or hw.host_ram_gib is None):
        out.append(weigh("host-ram", "unknown", "CPU offload keeps states in host RAM, and the training machine's "
                          "RAM was not given: host OOM is not judged", "--host-ram SIZE (e.g. 744GB)",
                          c.base, []))
    return out


def _liger_moves(c: Seen) -> tuple[float, float] | None:
    """(total as configured, total with ``enable_liger_kernel: true``) in GiB when liger lowers the peak by at least
    `LIGER_MOVES_GIB`, else None. The liger run is re-resolved by the assembly's `run_after` (the remedy planner asks
    for the same edit set, so it is resolved once) and weighed with the same judge. Only asked where a verdict
    exists (``oom``/``at-risk``), so the judge weighs."""
    if c.asm.memory is None or not weighs(c.fresh):
        return None
    res = c.fresh(c.asm.run_after([("config", "enable_liger_kernel", True, False)]), c.hw, c.tokens)
    before = c.asm.memory.total
    return (before, res[0]) if res is not None and before - res[0] >= LIGER_MOVES_GIB else None


def fold(verdict: str | None, total: float, assumptions: list[Assumption]) -> tuple[str | None, Assumption | None]:
    """The verdict across the plausible range of every open assumption: `verdict` when every evaluated alternative
    of every open assumption agrees with it, else ``at-risk`` with the deciding assumption (of the open ones whose
    alternatives change the verdict, the one that moves the predicted `total` (GiB) the most). An ``at-risk``
    verdict stays at-risk; None (no card) stays None."""
    if verdict is None:
        return None, None
    # the flag is the one computation (facts/assumebase.py `opens_verdict`, `settled`): what the report marks `!`
    movers = [a for a in assumptions if settled(a).moves_verdict]
    if not movers or verdict == "at-risk":
        return verdict, None
    movers.sort(key=lambda a: -max((abs(v - total) for v in a.effect_gib.values()), default=0.0))
    return "at-risk", movers[0]


def deciding_facts(a: Assumption | None, total: float, verdict: str | None) -> dict[str, Any] | None:
    """The ``mem.deciding_assumption`` fact: the assumption, its first alternative whose verdict differs from
    `verdict` (the one under the assumed value) and that alternative's total (GiB)."""
    if a is None:
        return None
    shown = not_deciding(a.name)
    flip = next((k for k, v in a.effect_verdict.items() if v != verdict and k not in shown), None)
    return {"name": a.name, "value": str(a.value), "source": a.source, "alternative": flip,
            "alternative_total_gib": a.effect_gib.get(flip) if flip else None,
            "alternative_verdict": a.effect_verdict.get(flip) if flip else None, "verdict_assumed": verdict,
            "total_gib": total, "resolve_with": a.resolve_with}


def token_budget(run: Any, hw: Hardware | None, counts: Any = None) -> dict[str, Any] | None:
    """The largest sequence length (tokens per sample, ≤ cutoff_len) at which the run still fits its card with
    p_oom_model ≤ 5 % (the ``fits`` verdict of analyzers/memory/uncertainty.py), for training and for the first evaluation;
    None without a card or for a run whose every sequence is cutoff_len long (packing, 360-LLaMA-Factory's
    sequence parallelism: `Run.fills_cutoff`).

    Bisection over `run.seq_len` (the memory model is monotone in it): training is judged with evaluation off,
    evaluation from the evaluation moment alone (its tensor peak × (1 + the allocator reserve share) + the
    runtime, analyzers/memory/moments.py; the verdict on the reserve the run needs, reserve.py `needed_fraction`).
    Returns ``{"cutoff_len", "budget_gib", "train": {"tokens_per_sample",
    "tokens_per_micro_batch", "micro_batch", "fits_at_cutoff", "total_gib", "need_gib", "card_tokens_per_sample"},
    "eval": {...}
    or None}``; ``total_gib`` is the estimate at ``tokens_per_sample`` (GiB, None at 0 tokens), ``need_gib`` what
    the run needs there (the figure the verdict and ``card_tokens_per_sample`` judge, reserve.py) and
    ``card_tokens_per_sample`` the longest sequence whose point estimate of what it needs is under the budget (no
    error band): the gap between the two limits is what the prediction's error takes. ``tokens_per_sample``
    is the longest sequence (for DPO/RM/KTO each of the pair's sequences; the collator pads a micro batch to its
    longest, so one long sample sets the whole batch) and 0 when even one-token samples do not fit.
    """
    budget = budget_gib(hw)
    if budget is None or run.fills_cutoff:
        return None
    from finetune_doctor.analyzers.memory import estimate, predictive
    from finetune_doctor.facts.mem import run_cls, shape_of

    per_seq = 2 if run.pairwise else 1
    cls = run_cls(run, hw)

    def train_at(n: int) -> tuple[float, str, float]:
        est = estimate(run.with_(seq_len=n, eval_during_training=False), hw, counts=counts)
        verdict = predictive.assess(est.total, budget, est.method, shape_of(est), est.need, cls=cls).verdict
        return est.total, verdict, est.need

    def eval_at(n: int) -> tuple[float, str, float] | None:
        est = estimate(run.with_(seq_len=n), hw, counts=counts)
        d = est.details
        moment = next((v for k, v in (d.get("moments_gib") or {}).items() if "evaluation" in k), None)
        if moment is None:
            return None
        rt = float(d.get("runtime_gib") or 0.0)
        total = moment * (1 + float(d.get("reserve_share") or 0.0)) + rt
        need = moment * (1 + max(float(d.get("reserve_needed_share") or 0.0), 0.0)) + rt
        return total, predictive.assess(total, budget, est.method, shape_of(est), need, cls=cls).verdict, need

    def largest(at: Callable[[int], tuple[float, str, float] | None], batch: int) -> dict[str, Any]:
        n = _bisect(lambda k: (at(k) or (0.0, "fits", 0.0))[1] == "fits", run.seq_len)
        # the same search against the card itself: the longest samples whose point estimate is under the budget.
        # Where it is far above `n`, the prediction's error band, not the card, sets the limit (trial 7, c01: 18 GiB
        # "fits" at 512 tokens on a 39.4 GiB card, yet the limit is 726 tokens)
        card = _bisect(lambda k: (at(k) or (0.0, "", 0.0))[2] <= budget, run.seq_len)
        res = at(n) if n else None
        return {"tokens_per_sample": n, "tokens_per_micro_batch": n * batch * per_seq,
                "micro_batch": batch, "fits_at_cutoff": n >= run.seq_len,
                "total_gib": round(res[0], 2) if res else None, "need_gib": round(res[2], 2) if res else None,
                "card_tokens_per_sample": card}

    out: dict[str, Any] = {"cutoff_len": run.seq_len, "budget_gib": round(budget, 2),
                           "train": largest(train_at, run.micro_batch), "eval": None}
    if run.eval_during_training:
        out["eval"] = largest(eval_at, run.eval_micro_batch)
    return out


def _bisect(ok: Callable[[int], bool], hi: int) -> int:
    """The largest n in [1, hi] with ok(n) (ok monotone: true up to some n), 0 when ok(1) is false."""
    if ok(hi):
        return hi
    if not ok(1):
        return 0
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


# the most open assumptions a mixture combines (the largest moves first): 4 with up to 3 alternatives each is at
# most 256 combinations, a few milliseconds of t-CDFs; the rest are rarely more than a rounding of the first
MIXTURE_MAX_ASSUMPTIONS = 4


_FROM_TABLE: Any = object()


def mixture(total: float, hw: Hardware | None, assumptions: list[Assumption],
            gpu_spec: str | None = None,
            weight: Callable[[str], float] | None = None,
            lengths_prior: Any = _FROM_TABLE,
            shown: list[tuple[str, list[str], list[tuple[float, float, float | None]]]] | None = None,
            ) -> list[tuple[float, float, float | None]]:
    """The components (weight, total GiB, budget GiB) of a prediction of `total` GiB on `hw` under its
    open assumptions (those not in `NOT_OPEN` whose alternatives were evaluated): each assumption is its assumed
    value with the table's weight (analyzers/memory/uncertainty.py `assumed_weight`) or one of its evaluated
    alternatives with an even share of the rest; assumptions are independent, and an alternative scales the total
    by its own ratio (alternative total / `total`), so combined alternatives multiply. A ``gpu-variant``
    alternative keeps its total and changes the budget to that card's capacity less the memory in use (hardware
    catalogue, `gpu_spec` the bare --gpu). One component (1, `total`, budget) when nothing is open; the budgets
    are None without a card. `weight` (name → the assumed value's probability) replaces the table's, for the
    calibration's fit (benchmarks/calibrate.py). The ``sample-lengths`` assumption is weighed instead by the prior
    on the longest sample (`lengths_prior`: uncertainty.py `lengths_prior`'s values, default the table's
    ``sample_lengths_prior``; None: the constant weight as for the others), each evaluated length
    ("samples of N tokens") taking its share (uncertainty.py `length_weights`). `shown`, when given, receives
    (assumption name, option labels, options (weight, ratio, budget)) of each assumption weighed."""
    from finetune_doctor.analyzers.memory import uncertainty

    weight = weight or uncertainty.assumed_weight
    prior = uncertainty.lengths_prior() if lengths_prior is _FROM_TABLE else lengths_prior
    budget = budget_gib(hw)
    in_use = (max(hw.in_use_gib) if hw is not None and hw.in_use_gib else 0.0)
    cards: dict[str, float] = {}
    if gpu_spec:
        from finetune_doctor.hardware.catalog import variants

        cards = {g.name: g.capacity_gib for g in variants(gpu_spec)}
    movers = []
    for a in assumptions:
        if a.name in NOT_OPEN or not a.effect_gib or total <= 0:
            continue
        alts = [(k, v) for k, v in a.effect_gib.items() if v and v > 0 and k not in SHOWN_ONLY.get(a.name, ())]
        opts = _length_options(a, alts, total, prior)
        if opts is None:
            w0 = weight(a.name)
            if w0 >= 1.0 or not alts:
                continue
            share = (1.0 - w0) / len(alts)
            opts = [(w0, 1.0, None)]
            for label, alt_total in alts:
                if a.name == "gpu-variant" and label in cards and budget is not None:
                    opts.append((share, alt_total / total, cards[label] - in_use))
                else:
                    opts.append((share, alt_total / total, None))
        if not opts:
            continue
        labels = (_length_labels(a, alts, prior) if a.name == "sample-lengths" and prior is not None
                  and _length_options(a, alts, total, prior) is not None else [str(a.value)] + [k for k, _v in alts])
        movers.append((max(abs(math.log(r)) + (abs(math.log(budget / b)) if b and budget else 0.0)
                           for _w, r, b in opts), opts, a.name, labels))
    movers.sort(key=lambda m: -m[0])
    options = [o for _m, o, *_ in movers[:MIXTURE_MAX_ASSUMPTIONS]]
    if shown is not None:
        # what the report prints beside the headline (facts/mixshow.py): each weighed assumption's options in the
        # order of `opts`, labelled (the assumed value first when it keeps a weight)
        shown.extend((m[2], m[3], o) for m in movers[:MIXTURE_MAX_ASSUMPTIONS] for o in [m[1]])
    out: list[tuple[float, float, float | None]] = []
    for combo in itertools.product(*options):
        w, ratio, b = 1.0, 1.0, budget
        for cw, cr, cb in combo:
            w *= cw
            ratio *= cr
            b = cb if cb is not None else b
        out.append((w, total * ratio, b))
    return out


def _length_labels(a: Assumption, alts: list[tuple[str, float]], prior: Any) -> list[str]:
    """The labels of `_length_options`' options, in its order (those with no weight left out)."""
    from finetune_doctor.analyzers.memory.uncertainty import length_weights

    toks = {label: int(SAMPLE_LABEL.match(str(label)).group(1)) for label, _t in alts}   # type: ignore[union-attr]
    w0, ws = length_weights(toks.values(), prior)
    return ([str(a.value)] if w0 > 0 else []) + [label for label, _t in alts if ws[toks[label]] > 0]


def _length_options(a: Assumption, alts: list[tuple[str, float]], total: float,
                    prior: Any) -> list[tuple[float, float, float | None]] | None:
    """The mixture options (weight, total ratio, None) of a ``sample-lengths`` assumption under the prior on the
    longest sample, or None when the constant weight applies (another assumption, no prior, or labels that do not
    name a length)."""
    if a.name != "sample-lengths" or prior is None or not alts:
        return None
    toks = {}
    for label, _t in alts:
        m = SAMPLE_LABEL.match(str(label))
        if m is None:
            return None
        toks[label] = int(m.group(1))
    from finetune_doctor.analyzers.memory.uncertainty import length_weights

    w0, ws = length_weights(toks.values(), prior)
    opts: list[tuple[float, float, float | None]] = [(w0, 1.0, None)] if w0 > 0 else []
    opts += [(ws[toks[label]], t / total, None) for label, t in alts if ws[toks[label]] > 0]
    return opts



def typical_sample(assumptions: list[Assumption]) -> dict[str, Any] | None:
    """The point figure of a run whose data was not read: the total at the typical longest sample
    (assumebase.py `TYPICAL_LONGEST_TOKENS`, cut at cutoff_len), one of the lengths the ``sample-lengths``
    assumption evaluated.

    The reported total takes every sample at cutoff_len (the worst case, which the verdict, p_oom and the interval
    weigh with the shorter lengths under the prior on the longest sample); compared with a measurement of a run on
    real data that worst case is an error of its own, not the memory terms' (issue #23: a Qwen2.5-VL-3B LoRA at
    cutoff 8192 x micro batch 8 on LaTeX-OCR, +725.9 % at cutoff_len). The length taken is the shortest evaluated
    one ("samples of N tokens") at or above min(TYPICAL_LONGEST_TOKENS, cutoff_len). Returns ``{"tokens": N
    (tokens per sample), "total_gib": GiB, "label": that alternative's label, "cutoff_len": tokens}``, or None
    when the data was read (no ``sample-lengths`` assumption), its lengths were not evaluated (no card, lint) or
    the typical length is cutoff_len itself (cutoff_len <= TYPICAL_LONGEST_TOKENS: the total is the point).
    Never raises."""
    a = next((x for x in assumptions if x.name == "sample-lengths"), None)
    if a is None or not a.effect_gib:
        return None
    m = re.search(r"\((\d+) tokens\)", str(a.value))
    toks = {label: int(mt.group(1)) for label in a.effect_gib if (mt := SAMPLE_LABEL.match(str(label)))}
    if m is None:
        return None
    cutoff = int(m.group(1))
    above = sorted((n, label) for label, n in toks.items() if n >= min(TYPICAL_LONGEST_TOKENS, cutoff))
    if not above or above[0][0] >= cutoff:
        return None
    n, label = above[0]
    return {"tokens": n, "total_gib": round(float(a.effect_gib[label]), 2), "label": label, "cutoff_len": cutoff}
