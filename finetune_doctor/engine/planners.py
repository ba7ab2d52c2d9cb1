"""Remedy planners: fixes that must be computed, not written down.

``oom-remedies`` searches the smallest sets of edits that make a run fit: every candidate edit is applied to the
resolved Run, the analytic estimator is re-run (about a millisecond), and the sets that fit are ranked by their
cost to the user (`TIERS`, the costliest remedy of a set decides), then by whether they change training semantics
(unsafe), by their throughput cost, then by size. The best set becomes the fix; the next ones become
`Fix.alternatives`.

The ranking, and why (issue 21, trial 7: the planner truncated data while ``enable_liger_kernel`` alone fitted,
and led with full CPU offload for a run at 57 % of its card):

0. **free**: kernels and settings that train the same model at the same speed or faster — liger-kernel's fused
   linear cross-entropy (the fp32 logits are never materialised), SDPA instead of eager attention, the fused AdamW,
   the allocator's expandable segments. Nothing is lost, so they come first.
1. **throughput**: the same training at some compute or communication cost — activation checkpointing, a smaller
   micro batch with more accumulation (same global batch), a smaller eval batch, ZeRO-2/3.
2. **changes what is trained**: truncating samples (``cutoff_len``), QLoRA, 8-bit Adam, pure bf16, fewer LoRA
   targets. Marked unsafe; the user decides whether the change is acceptable.
3. **offload**: CPU offload of optimizer states or parameters — the same training, but ~60-120 % slower and
   hundreds of GiB of host RAM per node, which the doctor often cannot see: after every remedy that keeps the
   speed, so that a user is never sent to the slowest remedy while a cheaper one fits. Unsafe (``--unsafe-fixes``):
   the speed and the host RAM are the user's to accept, not the doctor's (trial 3).
4. **another method**: LoRA instead of full fine-tuning. A user who chose full fine-tuning wants its result; a
   slower run of the same training (offload) is the lesser change, so switching the method comes last. A set fits when the memory model's probability of OOM of its estimate
(p_oom_model, not the all-cause p_oom: no edit moves the share of runs that run out for causes no memory term sees;
analyzers/memory/uncertainty.py 'Two probabilities', issue #21) is at most 5 % (the estimate's error measured on the
benchmarks for the run's shape class), not when it lands just under the card. For a run predicted over the card, the cheapest set that brings the prediction
under it with p_oom < 50 % leads even when it misses 5 % (`cheapest_under`; the fitting sets follow), and a set
whose host RAM per node exceeds the node's known RAM is ranked last with the reason. Besides YAML and DeepSpeed edits, a single-process run may be launched with the
caching allocator's expandable segments (an environment variable, no file edit).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

from finetune_doctor.analyzers.memory import launchenv
from finetune_doctor.engine.evaluate import RuleContext, planner
from finetune_doctor.engine.expr import unwrap
from finetune_doctor.types import Edit, Fix

MAX_EDITS = 3
# Host RAM per node past which an offload remedy is said to need more than many GPU nodes have, when --host-ram is
# not given (trial 16, LF#5553: ~1,369 GiB for a 72B full run ranked first with no word): 1 TiB, the system memory
# of NVIDIA's DGX A100 320GB (datasheet: "System Memory 1TB") and below AWS p4d.24xlarge's 1,152 GiB, GiB.
PLAUSIBLE_HOST_RAM_GIB = 1024.0
SHOWN = 4


@dataclass(frozen=True)
class Candidate:
    """One remedy: a change to the Run and the file edits that express it.

    `cost` is a rough throughput penalty in percent, used only to rank remedies: activation checkpointing repeats
    each layer's forward (+25-33 % compute, Chen et al. 2016, arXiv:1604.06174); ZeRO-3 moves 1.5x ZeRO-2's
    communication volume (Rajbhandari et al. 2020, arXiv:1910.02054 §7); CPU offload runs Adam on the host and
    streams states over PCIe (ZeRO-Offload, arXiv:2101.06840) — the larger penalties are orders of magnitude, not
    measurements. `unsafe` marks remedies that change what is trained or its numerics; `group` prevents two
    remedies on the same knob in one set. `expandable`: the remedy is the allocator setting
    ``expandable_segments:True`` (no file edit; its effect is the 'on' reserve, facts/mem.py `expandable_total`).
    `tier`: the cost to the user (module docstring, `TIERS`): 0 free, 1 throughput, 2 changes what is trained,
    3 offload, 4 another fine-tuning method.
    """

    label: str
    group: str
    edits: tuple[tuple[str, str, Any, bool], ...]   # (role, key, value, delete)
    cost: float
    unsafe: bool
    note: str
    expandable: bool = False
    tier: int = 1


TIERS = {"free": 0, "throughput": 1, "training": 2, "offload": 3, "method": 4}

# liger-kernel is an optional package LF imports only when enable_liger_kernel is set (requirements/liger-kernel.txt:
# liger-kernel>=0.6.3); nothing the doctor reads says whether the training machine has it
LIGER_HOWTO = ("assumes liger-kernel is installed on the training machine (pip install \"liger-kernel>=0.6.3\", "
               "LLaMA-Factory's requirements/liger-kernel.txt)")


# llamafactory-cli runs a single-process job in its own process, with the shell's environment (launcher.py:60-62,
# 136+ at ff6d4d12): the variable goes before the command. Expandable segments exist from torch 2.1; torch >= 2.8
# reads PYTORCH_ALLOC_CONF first when both are set (probes/allocconf.py).
EXPANDABLE_HOWTO = ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True llamafactory-cli train config.yaml "
                    "(torch >= 2.1; if PYTORCH_ALLOC_CONF is set, add it there: torch >= 2.8 reads that first)")


def expandable_candidate() -> Candidate:
    """The allocator remedy: segments grow in place instead of leaving freed blocks of other sizes cached."""
    return Candidate(launchenv.EXPANDABLE_REMEDY, "alloc", (), 0,
                     False, tier=0, note="the caching allocator maps pages into one growing segment instead of cutting fixed "
                     "segments, so freed memory is reused across sizes: " + EXPANDABLE_HOWTO, expandable=True)


def liger_candidate() -> Candidate:
    """enable_liger_kernel: LF patches the model with liger-kernel (model_utils/liger_kernel.py at the snapshot);
    its fused linear cross-entropy computes the loss from the hidden states in chunks, so the fp32 logits term goes
    to ~0 (run/savers.py `_liger`, analyzers/memory/logits.py). Offered only where `liger_offerable` holds."""
    return Candidate("enable liger-kernel", "liger", (("config", "enable_liger_kernel", True, False),), 0, False,
                     "fused kernels (linear cross-entropy, RMSNorm, SwiGLU): the fp32 logits are never "
                     "materialised, the loss is the same; " + LIGER_HOWTO, tier=0)


def _ds_stage_edit(asm_ds: Any, stage: int, stock: bool = False,
                   written: str | None = None) -> tuple[tuple[str, str, Any, bool], ...]:
    if asm_ds is not None and not stock:
        return (("deepspeed", "zero_optimization.stage", stage, False),)
    return (("config", "deepspeed", stock_sibling(written, f"ds_z{stage}_config.json"), False),)


def stock_sibling(written: str | None, name: str) -> str:
    """The path a fix writes for LLaMA-Factory's stock DeepSpeed file `name`: beside the stock file the config
    already names (`written`, e.g. ``examples/deepspeed/ds_z3_config.json`` -> ``examples/deepspeed/`` + `name`),
    since LF ships ds_z0/z2/z3 and their _offload variants together in examples/deepspeed/ and the user launches
    where the one they name resolves; without a DeepSpeed file, ``examples/deepspeed/`` + `name`, relative to the
    LLaMA-Factory checkout LF's own examples are launched from. Either way the edit changes which file the run
    reads, so the remedies that write it are unsafe (trial 3: a safe fix swapped the user's own file for a stock
    path that was not where they launched)."""
    import posixpath

    if written and posixpath.basename(str(written).replace("\\", "/")).startswith("ds_z"):
        folder = posixpath.dirname(str(written).replace("\\", "/"))
        return posixpath.join(folder, name) if folder else name
    return f"examples/deepspeed/{name}"


def candidates(run: Any, ds: Any, stock: bool = False, own_missing: str | None = None,
               written: str | None = None) -> list[Candidate]:
    """Remedies that apply to `run` (a run.Run).

    `stock`: the DeepSpeed file read is LLaMA-Factory's stock copy; `own_missing`: the path the config names when
    the user's own DeepSpeed file is not on this machine (a stock file of its stage stood in for the estimate,
    facts/dsread.py `stand_in_deepspeed`) -- the remedies then edit the keys of the user's file, never swap it for
    a stock path; `written` the ``deepspeed:`` value as the config spells it (`stock_sibling`). Offload and any edit of the ``deepspeed:`` path are unsafe (`--unsafe-fixes`): offload keeps the
    training but runs ~60-120 % slower on host RAM the doctor may not see, and a new path must exist where the run
    is launched, which only the user knows.

    Never one LLaMA-Factory would ignore or refuse for this model (issue 26): on a pre-quantized checkpoint —
    known from its config.json (`run.ptq_method`) or, when the config is not on this machine, hinted by its name
    (``-AWQ``, ``-GPTQ-Int4``, ``-FP8``: quant.py `name_suggests_quantized`) — `quantization_bit` is ignored
    (LF model_args: a checkpoint's own quantization_config wins) and ZeRO-3 is refused, so neither is proposed.
    """
    from finetune_doctor.quant import name_suggests_quantized
    from finetune_doctor.run.savers import liger_offerable

    prequantized = run.quantized or run.ptq_method is not None or bool(name_suggests_quantized(run.model_name or ""))
    out: list[Candidate] = []
    if not launchenv.torchrun_launch(run, launchenv.launch_env(run)) and not launchenv.expandable_segments(run):
        out.append(expandable_candidate())
    if not run.gradient_checkpointing:
        out.append(Candidate("enable activation checkpointing", "gc",
                             (("config", "disable_gradient_checkpointing", None, True),), 25, False,
                             "recomputes each layer's forward in backward (~1/3 more compute)"))
    if liger_offerable(run):
        out.append(liger_candidate())
    if run.attention == "eager":
        out.append(Candidate("use SDPA attention", "attn",
                             (("config", "flash_attn", "sdpa", False),), 0, False,
                             "no s² attention probabilities kept", tier=0))
    if run.optimizer_impl in ("foreach", "forloop"):
        out.append(Candidate("use the fused AdamW", "optim",
                             (("config", "optim", "adamw_torch_fused", False),), 0, False,
                             "no optimizer-step temporaries; same math", tier=0))
    if run.optimizer_impl in ("fused", "foreach", "forloop") and not run.deepspeed:
        out.append(Candidate("use 8-bit AdamW (bitsandbytes)", "optim8",
                             (("config", "optim", "adamw_bnb_8bit", False),), 5, True,
                             "optimizer states quantized to 8 bit", tier=2))
    mb = run.micro_batch
    if mb > 1:
        for new in sorted({mb // 2, 1}, reverse=True):
            if new < mb and mb % new == 0:
                factor = mb // new
                out.append(Candidate(f"micro batch {mb} → {new}, gradient accumulation ×{factor}", "mb",
                                     (("config", "per_device_train_batch_size", new, False),
                                      ("config", "gradient_accumulation_steps", run.grad_accum * factor, False)),
                                     8 * (factor - 1) ** 0.5, False, "same global batch, smaller forward passes"))
    if run.eval_during_training and run.eval_micro_batch > 1:
        # transformers evaluates 8 sequences at a time by default: their logits alone can outgrow the training step
        out.append(Candidate(f"eval micro batch {run.eval_micro_batch} → 1", "evalmb",
                             (("config", "per_device_eval_batch_size", 1, False),), 2, False,
                             "evaluation runs in smaller batches; training is unchanged"))
    for new_len in (run.seq_len // 2, run.seq_len // 4):
        if new_len >= 512:
            out.append(Candidate(f"cutoff_len {run.seq_len} → {new_len}", "seq",
                                 (("config", "cutoff_len", new_len, False),), 0, True,
                                 "longer samples are truncated", tier=2))
    if run.finetuning_type == "full" and run.trainable_dtype == "float32" and not run.deepspeed:
        out.append(Candidate("pure bf16 training", "prec",
                             (("config", "pure_bf16", True, False), ("config", "bf16", None, True)), 0, True,
                             "weights, gradients and Adam states in bf16 (no fp32 master)", tier=2))
    out += _ds_candidates(run, ds, stock and not own_missing, written, prequantized)
    if run.finetuning_type in ("full", "freeze"):
        out.append(Candidate("LoRA instead of full fine-tuning", "ft",
                             (("config", "finetuning_type", "lora", False), ("config", "lora_target", "all", False)),
                             0, True, "trains low-rank adapters only", tier=4))
    if run.finetuning_type in ("lora",) and not prequantized and not (run.deepspeed and run.zero_stage == 3):
        out.append(Candidate("QLoRA (4-bit base weights)", "quant",
                             (("config", "quantization_bit", 4, False),), 30, True,
                             "base weights in NF4; dequantized per matmul", tier=2))
    if run.finetuning_type == "lora" and run.arch.is_moe and ("all" in run.lora_target):
        out.append(Candidate("LoRA on attention projections only (not every expert)", "target",
                             (("config", "lora_target", "q_proj,k_proj,v_proj,o_proj", False),), 0, True,
                             "experts keep their pretrained weights", tier=2))
    return out


def _ds_candidates(run: Any, ds: Any, stock: bool, written: str | None, prequantized: bool) -> list[Candidate]:
    """The ZeRO-stage and CPU-offload remedies (`candidates`); `stock` False for the user's own file, here or not
    (its keys are edited, at the path the config names)."""
    world = run.world_size
    written = written if stock else None
    out: list[Candidate] = []
    if world > 1 and not prequantized:
        stage = run.zero_stage if run.deepspeed else -1
        for new_stage in (2, 3):
            if new_stage == 3 and _autotp_refuses_zero3(run, ds):
                continue
            if new_stage > stage:
                edit = _ds_stage_edit(ds, new_stage, stock, written)
                out.append(Candidate(f"DeepSpeed ZeRO-{new_stage}", "zero",
                                     edit, 5 if new_stage == 2 else 15, edit[0][0] == "config",
                                     "shards optimizer states and gradients" + (" and weights" if new_stage == 3 else "")
                                     + f" over {world} GPUs"))
    if run.deepspeed and run.zero_stage >= 2 and run.offload_optimizer is None:
        if stock:
            # the user runs LLaMA-Factory's stock file: point at its offload sibling instead of editing it
            both = run.zero_stage == 3
            out.append(Candidate("offload optimizer states" + (" and parameters" if both else "") + " to CPU", "offopt",
                                 (("config", "deepspeed",
                                   stock_sibling(written, f"ds_z{run.zero_stage}_offload_config.json"), False),),
                                 120 if both else 60, True, "Adam runs on the CPU; needs host RAM", tier=3))
        else:
            out.append(Candidate("offload optimizer states to CPU", "offopt",
                                 (("deepspeed", "zero_optimization.offload_optimizer.device", "cpu", False),
                                  ("deepspeed", "zero_optimization.offload_optimizer.pin_memory", True, False)),
                                 60, True, "Adam runs on the CPU; needs host RAM", tier=3))
    if run.deepspeed and run.zero_stage == 3 and run.offload_param is None and not stock:
        out.append(Candidate("offload parameters to CPU", "offpar",
                             (("deepspeed", "zero_optimization.offload_param.device", "cpu", False),
                              ("deepspeed", "zero_optimization.offload_param.pin_memory", True, False)),
                             120, True, "weights stream from host memory every step", tier=3))
    return out


def _autotp_refuses_zero3(run: Any, ds: Any) -> bool:
    """DeepSpeed AutoTP is on and its version is not known to train it under ZeRO-3 (facts/ds.py `autotp_facts`:
    the engine asserted stage <= 2 before 0.19.4): ZeRO-3 is then no remedy, let alone a safe one (trial 9,
    LlamaFactory#10140 on DeepSpeed 0.16.9)."""
    if getattr(run, "autotp_size", 1) <= 1:
        return False
    from finetune_doctor.facts.ds import AUTOTP_ZERO3_FROM
    from finetune_doctor.readers.deepspeed.dsschema import parse_version

    given = next((v for p, v, _ in getattr(run, "stack_sources", ()) if p == "deepspeed"), None)
    dsv = parse_version(given or getattr(ds, "ds_version", None))
    return dsv is None or dsv < parse_version(AUTOTP_ZERO3_FROM)


def _edits(combo: tuple[Candidate, ...]) -> tuple[tuple[str, str, Any, bool], ...]:
    return tuple(e for c in combo for e in c.edits)


Judge = Callable[[Any, bool], tuple[bool, float, float]]
"""(run, expandable segments on) → (fits with p_oom_model <= 5 %, total GiB, p_oom_model)."""


def search(run: Any, ds: Any, judge: Judge, after: Callable[[Any], Any],
           stock: bool = False, seen: list | None = None,
           own_missing: str | None = None, written: str | None = None, exclude: tuple[str, ...] = ()
           ) -> tuple[list[tuple], tuple | None]:
    """Edit sets of up to MAX_EDITS candidates that `judge` accepts, best first, and the set that came closest
    (lowest p_oom, then total) when none does.

    `after(edits)` is the run LLaMA-Factory would execute after the edits (facts/config.py `Assembly.run_after`):
    a remedy's effect is resolved by run.py, never re-derived here. Returns ([(candidates, total_gib, p_oom), ...],
    closest or None); a set is dropped when one of its subsets already fits (minimality). Candidates of the
    groups in `exclude` are not tried (liger on a card no Triton release supports: run/savers.py
    `triton_supported`).
    """
    cands = [c for c in candidates(run, ds, stock, own_missing, written) if c.group not in exclude]
    fitting: list[tuple[tuple[Candidate, ...], float, float]] = []
    closest: tuple[tuple[Candidate, ...], float, float] | None = None
    for k in range(1, MAX_EDITS + 1):
        for combo in itertools.combinations(cands, k):
            if len({c.group for c in combo}) < k:
                continue
            if any(set(f).issubset(combo) for f, _, _ in fitting):
                continue
            ok, total, p = judge(after(_edits(combo)), any(c.expandable for c in combo))
            if seen is not None:
                seen.append((combo, total, p))
            if ok:
                fitting.append((combo, total, p))
            elif closest is None or (p, total) < (closest[2], closest[1]):
                closest = (combo, total, p)
    # among equals the set that changes the run least (the largest total that still meets the target) comes first:
    # halving cutoff_len beats quartering it when both bring the probability of OOM under 5 %
    fitting.sort(key=_rank)
    return fitting, closest


def _rank(ft: tuple) -> tuple:
    """The order of fitting sets (module docstring): the costliest tier in the set, then the tiers summed, unsafe
    remedies, throughput cost, the number of remedies that cost something, and the largest total that still fits
    (the set that changes the run least). Free remedies do not count towards the size: expandable segments with
    cutoff_len halved beats cutoff_len quartered."""
    combo = ft[0]
    return (max((c.tier for c in combo), default=0), sum(c.tier for c in combo), sum(c.unsafe for c in combo),
            sum(c.cost for c in combo), sum(c.tier > 0 for c in combo), -ft[1])


def cheapest_under(seen: list[tuple], budget: float) -> tuple | None:
    """The cheapest minimal set among `seen` whose prediction lands under `budget` (GiB) and is more likely to fit
    than not (p_oom < 50 %: the median of the predicted peak, total·e^μ, is under the card), though its
    probability of OOM may stay above the 5 % target: for a run predicted to OOM, the cheapest change that fits (e.g. ZeRO-3 for LLaMA-7B
    full on 8 V100-32GB, 21.05 GiB of 31.75, what fixed it in hiyouga/LlamaFactory#1221,
    fixtures/quickstart). Ranked as `search` ranks; None when no set fits under the budget."""
    under = [t for t in seen if t[1] <= budget and t[2] < 0.5]
    under = [t for t in under if not any(set(u[0]) < set(t[0]) for u in under)]
    return min(under, key=_rank) if under else None


def judge_against(hw: Any, mixture: list[tuple[float, float, float | None]] | None = None,
                  full: list[tuple[float, float, float | None]] | None = None) -> Judge:
    """The planners' fit test on `hw`: the analytic estimate (with expandable segments when asked) and the memory
    model's own probability of OOM (p_oom_model) read on the one predictive distribution of its peak
    (analyzers/memory/predictive.py, its error uncertainty.py `core_dist`, the widths of its shape class).

    `mixture`: (weight, ratio, budget GiB or None) per component of the report's open assumptions (facts/assume.py
    `mixture`, as ratios to the reported total; None budget: `hw`'s). The p_oom of a run is then Σ w·P(peak of
    total·ratio > budget), the quantity the report's memory block shows (facts/verdict.py `mixed_p_oom`), so a fix's
    "before" is the report's p_oom and its "after" is the same quantity for the edited run: each alternative is
    taken to scale the edited run's total by the ratio it scaled the original's (the mixture's own approximation).
    Without it, the assumed values' p_oom_model. The all-cause p_oom of the same run is
    uncertainty.all_cause(p_oom_model, q) (the mixture is linear in it).

    Since session 14 the probability is read as the report reads it (facts/bands.py `one_distribution`): the share
    above the budget of the one distribution whose 5-95 % is the edited run's interval (the mixture, its upper end
    at the samples' cutoff_len from `full` — the same ratios for the components without the sample lengths —, the
    widths of the edited run's class), so a fix's "before" is the report's p_oom."""
    from finetune_doctor.analyzers.memory import estimate, predictive, uncertainty
    from finetune_doctor.analyzers.memory.bands import run_class
    from finetune_doctor.facts.bands import final_interval
    from finetune_doctor.facts.mem import budget_of, expandable_total, shape_of

    budget = budget_of(hw) or 0.0
    comps = mixture or [(1.0, 1.0, None)]
    assumed: dict[float, float] = {}

    def judge(r: Any, expandable: bool) -> tuple[bool, float, float]:
        est = estimate(r, hw)
        on = expandable and r.world_size == 1
        total = expandable_total(est, r) if on else est.total
        # decided on what the run needs, as the verdict is (uncertainty.assess `need_gib`); `total` is reported
        need = expandable_total(est, r, need=True) if on else est.need
        core, cls = uncertainty.core_dist("analytic", shape_of(est)), run_class(r, getattr(hw, "gpu", None))
        shown = [(w, total * ratio, budget if b is None else b) for w, ratio, b in comps]
        iv = final_interval(shown, [(w, total * ratio, None) for w, ratio, _b in full] if full else None, core, cls)
        ratio_need = need / total if total > 0 else 1.0
        p = predictive.build(shown, core, iv).p_over([b for _w, _t, b in shown], ratio_need) or 0.0
        # the report decides at-risk on the probability at the assumed values as well as on the mixture (README,
        # trial 9): an edited run is held to the same rule, so a remedy never reads safer than the report would
        # call that run (trial 11, LlamaFactory#7869: "cutoff_len 32768 -> 16384: 55.0 GiB, < 1 %" beside the
        # alternative "samples of 16384 tokens: 55.0 GiB at-risk")
        if mixture:
            one = [(1.0, total, budget)]
            pa = predictive.build(one, core, final_interval(one, None, core, cls)).p_over([budget], ratio_need) or 0.0
        else:
            pa = p
        assumed[round(total, 6)] = pa
        return p <= uncertainty.P_OOM_TARGET and pa <= uncertainty.P_OOM_TARGET, total, p

    judge.assumed = assumed   # type: ignore[attr-defined]  # {total GiB: p at the assumed values}, for the effect
    return judge


def full_ratios(extra: dict[str, Any], worst: bool) -> list[tuple[float, float, float | None]] | None:
    """The report's components without the sample lengths (facts/bands.py `full_components`: the interval's upper
    end at cutoff_len) as (weight, ratio to the reported total, budget), for `judge_against`; None when the
    mixture is not used (`mixture_ratios`) or the sample lengths are not open."""
    comps, total = extra.get("p_oom_full_components"), extra.get("mem_total")
    if mixture_ratios(extra, worst) is None or not comps or not total:
        return None
    return [(w, t / total, b) for w, t, b in comps]


def mixture_ratios(extra: dict[str, Any], worst: bool) -> list[tuple[float, float, float | None]] | None:
    """The report's p_oom components (facts/config.py `Assembly.live`) as (weight, ratio to the reported total,
    budget) for `judge_against`; None with one component, no reported total, or when the planner judges on the
    smallest card a bare --gpu may mean (`worst`: the components' budgets are the other cards')."""
    comps, total = extra.get("p_oom_components"), extra.get("mem_total")
    if worst or not comps or len(comps) < 2 or not total or any(b is None for _w, _t, b in comps):
        return None
    return [(w, t / total, b) for w, t, b in comps]


def _fix_of(combo: tuple[Candidate, ...], total: float, before: tuple[float, float], ctx: RuleContext,
            host_after: float | None = None, p_after: float | None = None,
            assumed: tuple[float | None, float | None] = (None, None)) -> Fix:
    edits = []
    for c in combo:
        for role, key, value, delete in c.edits:
            doc = ctx.sources.get(role)
            path = doc.path if doc else (ctx.sources["config"].path if role == "config" else _missing_ds(ctx, role))
            edits.append(Edit(path, key, value, delete))
    cost = "; ".join(f"{c.label}: {c.note}" + (f" (~{c.cost:.0f}% slower)" if c.cost else "") for c in combo)
    from finetune_doctor.analyzers.memory.uncertainty import all_cause, unexplained_share

    # `before[1]` and `p_after` are the memory model's (what the target is read on); p_oom_* stay the report's
    # all-cause memory.p_oom quantity (README 'Two probabilities')
    q = unexplained_share()
    effect = {"total_gib_before": before[0], "total_gib_after": total, "p_oom_before": all_cause(before[1], q),
              "p_oom_model_before": before[1]}
    if p_after is not None:
        effect.update(p_oom_after=all_cause(p_after, q), p_oom_model_after=p_after)
    if None not in assumed and (assumed[0], assumed[1]) != (before[1], p_after):
        # the same run at the assumed values (judge_against): what the verdict of the edited run is decided on too
        effect.update(p_oom_model_assumed_before=assumed[0], p_oom_model_assumed_after=assumed[1])
    if host_after is not None and any(c.group in ("offopt", "offpar") for c in combo):
        cost += f"; host RAM needed per node ≈ {host_after:.0f} GiB"
        hw = ctx.extra.get("hw")
        if host_after > PLAUSIBLE_HOST_RAM_GIB and (hw is None or not hw.host_ram_gib):
            cost += (", more than many GPU nodes have (DGX A100 320GB: 1 TB); ranked by that bound until --host-ram "
                     "SIZE gives the node's own")
    return Fix(title=" + ".join(c.label for c in combo), edits=tuple(edits),
               safety="unsafe" if any(c.unsafe for c in combo) else "safe", effect=effect, cost=cost)


def _worst_after(fix: Fix) -> float:
    """The memory model's probability of OOM after `fix` as the verdict reads it: over the open assumptions and at
    their assumed values, whichever is higher."""
    return max(fix.effect["p_oom_model_after"], fix.effect.get("p_oom_model_assumed_after") or 0.0)


def _missing_ds(ctx: RuleContext, role: str) -> str:
    """Where an edit of the user's DeepSpeed file goes when that file is not on this machine: the path the config
    names, relative to the config's folder (LF resolves it from where the run is launched; `lint --fix` then says
    "not a file, fix not applied" rather than writing somewhere else)."""
    import os

    missing = (ctx.extra.get("ds_assumed") or (None,))[0]
    if role != "deepspeed" or not missing:
        return role
    base = os.path.dirname(ctx.sources["config"].path)
    return missing if os.path.isabs(missing) else os.path.normpath(os.path.join(base, missing))


def _safe_total(r: Any, hw: Any) -> float:
    """The largest total (GiB) with p_oom_model <= 5 % on `hw` for the run `r` (its shape class decides)."""
    from finetune_doctor.analyzers.memory import estimate, uncertainty
    from finetune_doctor.facts.mem import budget_of, need_ratio, shape_of

    est = estimate(r, hw)
    dist = uncertainty.model_dist("analytic", shape_of(est))
    # safe_total bounds the need (uncertainty.assess); as a total, in the run's ratio of need to total
    return uncertainty.safe_total(budget_of(hw) or 0.0, dist) / need_ratio(est)


@planner("oom-remedies")
def oom_remedies(ctx: RuleContext, rule: Any, ev: Any) -> Fix | None:
    """The predicted-oom / predicted-tight-fit / cuda-oom fix: the cheapest minimal edit set whose memory model's
    probability of OOM (p_oom_model) is at most 5 %, with ranked alternatives."""
    from dataclasses import replace

    from finetune_doctor.analyzers.memory import uncertainty   # the error model: only when a memory rule fires

    run, hw = ctx.extra.get("run"), ctx.extra.get("hw")
    worst = rule.name == "verdict-depends-on-assumption" and ctx.extra.get("hw_worst") is not None
    if worst:
        hw = ctx.extra["hw_worst"]   # a bare --gpu decides: the remedy must fit the smallest card it may mean
    if run is None or hw is None or not hw.capacity_gib:
        return None
    judge = judge_against(hw, mixture_ratios(ctx.extra, worst), full_ratios(ctx.extra, worst))
    after = ctx.extra["run_after"]
    _, total0, p0 = judge(run, False)
    before = (total0, p0)

    def pa(total: float) -> tuple[float | None, float | None]:
        return judge.assumed.get(round(total0, 6)), judge.assumed.get(round(total, 6))   # type: ignore[attr-defined]
    seen: list[tuple] = []
    missing = (ctx.extra.get("ds_assumed") or (None,))[0]
    doc = ctx.extra.get("doc")
    written = doc.values.get("deepspeed") if doc is not None and isinstance(doc.values.get("deepspeed"), str) else None
    from finetune_doctor.run.savers import triton_supported

    found, closest = search(run, ctx.extra.get("ds"), judge, after, bool(ctx.extra.get("ds_stock")), seen, missing,
                            written, exclude=() if triton_supported(hw) else ("liger",))

    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.facts.mem import budget_of

    def host_of(combo: tuple[Candidate, ...]) -> float:
        return estimate(after(_edits(combo)), hw).host

    # a prediction over the card: the cheapest set that brings it under the card, more likely to fit than not, comes
    # first even when its probability of OOM stays above the target; the sets that reach the target follow
    budget = budget_of(hw) or 0.0
    cheap = cheapest_under(seen, budget) if total0 > budget else None
    if cheap is not None and found and _rank(cheap) < _rank(found[0]):
        found = [cheap, *found]
    # the node's RAM unknown: a set past what many nodes have ranks after the others (it is said in its cost)
    found, over = _host_split(found, hw.host_ram_gib or PLAUSIBLE_HOST_RAM_GIB, host_of)
    if not found and not over:
        if closest is None:
            return Fix(title="no standard remedy applies: use more or larger GPUs", edits=(), safety="unsafe")
        combo, total, p = closest
        fix = _fix_of(combo, total, before, ctx, p_after=p, assumed=pa(total))
        short = total - _safe_total(after(_edits(combo)), hw)
        return replace(fix, title=f"no set of up to {MAX_EDITS} standard remedies brings the memory model's probability of OOM "
                                  f"to {100 * uncertainty.P_OOM_TARGET:.0f} %; the closest, {fix.title}, leaves "
                                  f"{100 * p:.0f} % and still needs {short:.1f} GiB more per GPU: use more or "
                                  "larger GPUs", safety="unsafe")
    fixes = [_fix_of(combo, total, before, ctx, host_of(combo), p, pa(total)) for combo, total, p in found[:SHOWN]]
    fixes = [f if _worst_after(f) <= uncertainty.P_OOM_TARGET else
             replace(f, cost=f"{f.cost}; fits the card by the prediction, but the memory model's probability of OOM "
                             f"stays {100 * _worst_after(f):.0f} % (over the {100 * uncertainty.P_OOM_TARGET:.0f} % "
                             "the next remedies reach)") for f in fixes]
    for combo, total, p in over[:max(SHOWN - len(fixes), 1)]:
        fix = _fix_of(combo, total, before, ctx, host_of(combo), p, pa(total))
        node = (f"the node's {hw.host_ram_gib:.0f} GiB" if hw.host_ram_gib else
                f"{PLAUSIBLE_HOST_RAM_GIB:.0f} GiB, the bound taken for a node while --host-ram is not given")
        fixes.append(replace(fix, cost=f"{fix.cost}; ranked last: needs about {host_of(combo):.0f} GiB of host RAM "
                                       f"per node, more than {node}"))
    return replace(fixes[0], alternatives=tuple(fixes[1:]))


def _host_split(found: list[tuple], host_ram: float | None,
                host_of: Callable[[tuple], float]) -> tuple[list[tuple], list[tuple]]:
    """(sets whose host RAM per node fits the node's `host_ram` GiB, sets that need more). With the node's RAM
    unknown every set is kept: the host-oom-offload rules judge the chosen one."""
    if not host_ram:
        return found, []
    ok = [ft for ft in found if host_of(ft[0]) <= host_ram]
    return ok, [ft for ft in found if ft not in ok]


@planner("fit-precision")
def fit_precision(ctx: RuleContext, rule: Any, ev: Any) -> Fix | None:
    """accidental-fp32: enable bf16 when the GPU supports it, else fp16; report the memory effect."""
    run, hw, doc = ctx.extra.get("run"), ctx.extra.get("hw"), ctx.sources.get("config")
    if doc is None:
        return None
    bf16_ok = True if (hw is None or hw.bf16 is None) else hw.bf16
    key = "bf16" if bf16_ok else "fp16"
    edits = (Edit(doc.path, key, True),)
    effect = None
    if run is not None:
        from finetune_doctor.analyzers.memory import estimate

        after_run = ctx.extra["run_after"]((("config", key, True, False),))
        effect = {"total_gib_before": estimate(run, hw).total, "total_gib_after": estimate(after_run, hw).total}
    return Fix(title=f"enable {key} mixed precision", edits=edits, safety="safe" if bf16_ok else "unsafe",
               effect=effect,
               cost="matmuls run in half precision with fp32 master weights (faster, not slower)")


@planner("gpus-uneven")
def plan_uneven(ctx: RuleContext, rule: Any, ev: Any) -> Fix:
    """The fix of uneven-gpu-memory: the top cause's prescription (analyzers/gpus/gpu_causes.py ranks them), with its
    YAML edit when ``doctor gpus --config`` named the run's config."""
    item = unwrap(ev.eval("item")) or {}
    edits: tuple[Edit, ...] = ()
    doc = ctx.sources.get("config")
    if item.get("fix_key") and doc is not None:
        edits = (Edit(doc.path, item["fix_key"], item.get("fix_value")),)
    return Fix(title=item.get("fix_title") or ev.render(rule.fix.title), edits=edits, safety=rule.fix.safety)


@planner("expandable-segments")
def plan_expandable(ctx: RuleContext, rule: Any, ev: Any) -> Fix | None:
    """expandable-segments: the allocator setting with its predicted effect (total and probability of OOM before →
    after, facts/mem.py `expandable_facts`) and how to set it for llamafactory-cli."""
    mem = unwrap(ev.eval("mem")) or {}
    if mem.get("expandable_total") is None:
        return None
    effect = {"total_gib_before": mem["total"], "total_gib_after": mem["expandable_total"],
              "p_oom_before": mem.get("p_oom"), "p_oom_after": mem.get("expandable_p_oom"),
              "p_oom_model_before": mem.get("p_oom_model"), "p_oom_model_after": mem.get("expandable_p_oom_model")}
    run, hw = ctx.extra.get("run"), ctx.extra.get("hw")
    mix = mixture_ratios(ctx.extra, False)
    if run is not None and hw is not None and hw.capacity_gib:
        from finetune_doctor.analyzers.memory.uncertainty import all_cause, unexplained_share

        # mem.p_oom is read on the one distribution over the open assumptions: the "after" is the same quantity
        pm = judge_against(hw, mix, full_ratios(ctx.extra, False))(run, True)[2]
        effect.update(p_oom_model_after=pm, p_oom_after=all_cause(pm, unexplained_share()))
    return Fix(title=launchenv.EXPANDABLE_REMEDY, edits=(), safety="safe",
               effect={k: v for k, v in effect.items() if v is not None}, cost=expandable_candidate().note)
