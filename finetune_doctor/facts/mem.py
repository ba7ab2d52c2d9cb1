"""``mem``: the predicted peak memory of one training process on its busiest GPU (analyzers/memory.py), GiB.

``per_gpu`` and ``per_gpu_gib`` hold the DESIGN.md breakdown (weights, gradients, optimizer, activations, logits,
buffers, runtime, total); the moments of a step say where the peak falls and where the run first runs out.
``alt_stack_*`` is the same estimate on a training machine with torch < 2.8 when the verdict could depend on it.
``verdict``, ``p_oom`` and ``interval_*`` say how sure the doctor is (analyzers/memory/uncertainty.py: the error measured
on the benchmarks, by method and shape class); ``p_oom`` is the all-cause probability, ``p_oom_model`` the memory
model's own, which decides the verdict (uncertainty.py 'Two probabilities'); ``expandable_*`` is the estimate with the caching allocator's
expandable segments on, for a run whose processes would run without them (analyzers/memory/launchenv.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from finetune_doctor.analyzers.memory import launchenv, predictive, uncertainty
from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.reserve import needed_fraction, reserve_fraction
from finetune_doctor.facts.schema import F, Namespace
from finetune_doctor.quant import hinted_spec
from finetune_doctor.types import GIB, Hardware, MemoryEstimate

# what the error under a 90 % interval is, in words, by the table's ``one_distribution.core``
# (analyzers/memory/uncertainty.py `core_dist`): "outcome" is `model_dist` (the benchmarks' bias, the spread that
# benchmarks/calibrate.py fitted on which reported runs trained and which ran out), anything else `error_dist`
ERROR_WORDS = {
    "outcome": "the error for this kind of run, its bias measured on the benchmarks and its spread fitted on which "
               "reported runs trained or ran out",
    "measured": "the benchmarks' error for this kind of run",
}


def error_words() -> str:
    """What a 90 % interval of one prediction is made of (analyzers/memory/uncertainty.py `core_dist`, the error
    whose quantiles made it), in words (`ERROR_WORDS`); `interval_basis` adds the assumptions whose alternatives a
    mixture spreads it over (facts/verdict.py `mixed_p_oom`)."""
    core = (uncertainty.table().get("one_distribution") or {}).get("core")
    return ERROR_WORDS["outcome" if core == "outcome" else "measured"]

_TERMS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "runtime", "total")
_BREAKDOWN = {k: F("float", f"{k}, GiB") for k in _TERMS}

NAMESPACE = Namespace("mem", __doc__.split("\n\n")[0], {
    "per_gpu": F("dict", "breakdown at the peak, GiB", fields=_BREAKDOWN),
    "per_gpu_gib": F("dict", "the same, rounded as the JSON report prints it", fields=_BREAKDOWN),
    "total": F("float", "peak device memory as nvidia-smi shows it, GiB"),
    "peak_allocated": F("float", "tensor peak as max_memory_allocated shows it, GiB"),
    "peak_allocated_gib": F("float", "the same, rounded"),
    "host": F("float", "host RAM per node, GiB"), "host_gib": F("float", "the same, rounded"),
    "host_save": F("float", "the part of host that a ZeRO-3 checkpoint save adds on rank 0's node, GiB"),
    "fits": F("bool", "need <= capacity minus memory in use (None without a GPU)"),
    "headroom_gib": F("float", "capacity minus in-use minus need, GiB"),
    "need_gib": F("float", "what the run needs to complete: total with the allocator reserve it needs, not the one it "
                           "shows (the allocator frees its cache and retries before an OOM), GiB"),
    "reserve_needed_gib": F("float", "the part of need_gib that is allocator reserve, GiB"),
    "method": F("str", "analytic | simulated | measured"),
    "phase": F("str", "forward/loss | backward | optimizer step"),
    "peak_moment": F("str", "the moment of step 2 that peaks"),
    "first_oom": F("str", "the first moment (model load, step 1, step 2) that would not fit"),
    "tokens_measured": F("bool", "the micro batch's tokens come from the data scan, not micro batch x cutoff_len"),
    "capacity_gib": F("float", "the card's usable memory, GiB"),
    "host_ram_gib": F("float", "host RAM per node, GiB"),
    "weights_gib": F("float", "weights every rank holds, GiB"),
    "weights_replicated_gib": F("float", "weights replicated on every rank that ZeRO-3 would shard, GiB"),
    "load_whole_gib": F("float", "the whole model a ZeRO-3 rank holds while it loads, before DeepSpeed partitions it "
                        "(bitsandbytes, or built outside zero.Init), GiB; 0 otherwise"),
    "states_gib": F("float", "optimizer states and fp32 masters, GiB"),
    "step_temp_gib": F("float", "the optimizer update's temporaries, GiB"),
    "margin_gib": F("float", "room the error model asks for on this card: budget minus safe_total_gib, GiB"),
    "alt_stack_total": F("float", "total on a torch < 2.8 training machine, GiB"),
    "alt_stack_fits": F("bool", "whether that fits"),
    "alt_stack_optim": F("str", "the optimizer that stack defaults to"),
    "alt_stack_p_oom": F("float", "the memory model's probability of OOM on that stack (0-1)"),
    "budget_gib": F("float", "capacity minus memory already in use, GiB"),
    "verdict": F("str", "fits | at-risk | oom (analyzers/memory/uncertainty.py); None without a GPU"),
    "verdict_reason": F("str", "why at-risk: error (p_oom_model over 5 %) | stack (an older torch runs out) | "
                               "assumption (an open assumption's alternative changes the verdict, facts/assume.py; or the weights "
                               "were sized as an upper bound and stored as the name suggests they fit)"),
    "error_risk": F("str", "an at-risk verdict for the error (verdict_reason error) as rule predicted-tight-fit words "
                           "it (facts/verdict.py `error_risk`): over (p_oom_model_pct over 5 %) | assumed (over only at "
                           "the assumed values) | over-under / assumed-under (the same, with the 90 % interval's upper "
                           "end under the budget); None otherwise",
                    values=("over", "assumed", "over-under", "assumed-under")),
    "deciding_assumption": F("dict", "the open assumption an at-risk verdict depends on (None otherwise)", fields={
        "name": F("str", "the assumption's id (sample-lengths, gpu-variant, ...)"),
        "value": F("str", "the value assumed"), "source": F("str", "why it was assumed"),
        "alternative": F("str", "the plausible alternative that changes the verdict"),
        "alternative_total_gib": F("float", "total under that alternative, GiB"),
        "alternative_verdict": F("str", "the verdict under that alternative"),
        "verdict_assumed": F("str", "the verdict under the assumed value"),
        "total_gib": F("float", "total under the assumed value, GiB"),
        "resolve_with": F("str", "the flag, file or machine that removes the assumption")}),
    "token_budget": F("dict", "with the data not scanned: the longest samples that still fit (facts/assume.py)",
                      fields={"cutoff_len": F("int", "cutoff_len"),
                              "train": F("dict", "training: tokens_per_sample, tokens_per_micro_batch, micro_batch, "
                                                 "fits_at_cutoff"),
                              "eval": F("dict", "the first evaluation, the same fields (None without one)")}),
    "typical": F("dict", "with the data not scanned: the typical longest sample (facts/assumebase.py "
                 "TYPICAL_LONGEST_TOKENS, 2048 tokens: a rung of the ladder, not the prior's median) and the total "
                 "there, the point figure a measurement of a run on real data is compared with; total stays the worst "
                 "case (facts/assume.py typical_sample)",
                 fields={"tokens": F("int", "tokens per sample: the shortest rung weighed at or above "
                                            "min(2048, cutoff_len)"),
                         "total_gib": F("float", "total at that length, GiB"),
                         "label": F("str", "the sample-lengths alternative it is"),
                         "cutoff_len": F("int", "cutoff_len")}),
    "p_oom": F("float", "probability that the run runs out, all causes: (1 - q)·p_oom_model + q/2 (0-1)"),
    "p_oom_pct": F("float", "the same in percent"),
    "p_oom_text": F("str", "p_oom_pct as messages print it: one decimal, two where one would round across the 5 % "
                           "target (5.04 % is not printed as 5.0 % beside 'over the 5 %')"),
    "p_oom_assumed_pct": F("float", "p_oom in percent at the assumed value of every open assumption (p_oom_pct is "
                                    "mixed over their alternatives), equal to it when none is open"),
    "p_oom_assumed_text": F("str", "p_oom_assumed_pct printed as p_oom_text is"),
    "p_oom_model": F("float", "the memory model's own probability that the peak passes the budget, which decides "
                              "the verdict (0-1)"),
    "p_oom_model_pct": F("float", "the same in percent"),
    "p_oom_model_text": F("str", "p_oom_model_pct printed as p_oom_text is"),
    "p_oom_model_assumed_pct": F("float", "p_oom_model in percent at the assumed value of every open assumption (the "
                                          "verdict's basis), equal to p_oom_model_pct when none is open"),
    "p_oom_model_assumed_text": F("str", "p_oom_model_assumed_pct printed as p_oom_text is"),
    "p_oom_unexplained": F("float", "q: the share of reported runs whose outcome no memory term explains (0-1)"),
    "p_oom_other_pct": F("float", "q/2 in percent: how often runs reported like this one ran out for reasons no "
                                  "memory term sees"),
    "p_oom_target": F("float", "what the verdict and remedies read p_oom_model against (0-1)"),
    "interval_gib": F("list", "central 90 % predictive interval of total, GiB"),
    "interval_lo_gib": F("float", "its lower end, GiB"),
    "interval_hi_gib": F("float", "its upper end, GiB"),
    "interval_basis": F("str", "what the interval is made of: the error of this kind of run whose quantiles made it "
                               "(error_words), and the open assumptions whose alternatives it mixes in "
                               "(facts/verdict.py `mixed_p_oom`)"),
    "safe_total_gib": F("float", "the largest need with p_oom_model <= p_oom_target on this card, GiB"),
    "error_class": F("str", "the error class whose benchmark error applies (shape class, and weight storage where "
                                "the table keys by it)"),
    "error_rows": F("int", "benchmark rows of this method and class behind the error model"),
    "error_kind": F("str", "the kind of run (shape class) in user terms, e.g. ZeRO-2/3 runs"),
    "error_label": F("str", "the kind of run and how many measured runs its error rests on, in user terms"),
    "error_bias_pct": F("float", "the interval's error: its mean under-prediction, percent of total"),
    "error_spread_pct": F("float", "the interval's error: its spread (ErrorDist.spread), percent of total"),
    "reserve_gib": F("float", "cached-but-unallocated memory the allocator holds at the peak, GiB"),
    "expandable": F("bool", "the estimate assumes expandable segments (llamafactory-cli's torchrun launch)"),
    "expandable_in_env": F("bool", "the training processes get expandable_segments:True from the environment"),
    "expandable_total": F("float", "total with expandable segments on, GiB (None when already assumed)"),
    "expandable_saves_gib": F("float", "total minus expandable_total, GiB"),
    "expandable_p_oom": F("float", "p_oom with expandable segments on (0-1)"),
    "expandable_p_oom_pct": F("float", "the same in percent"),
    "expandable_p_oom_model": F("float", "p_oom_model with expandable segments on (0-1)"),
    "expandable_p_oom_model_pct": F("float", "the same in percent"),
    "expandable_verdict": F("str", "the verdict with expandable segments on"),
    "quant_alt_label": F("str", "the format a quantized-looking name suggests, when the weights were sized unquantized"),
    "quant_alt_total": F("float", "total with the weights stored in that format, GiB (None: not evaluated)"),
    "quant_alt_verdict": F("str", "the verdict with the weights stored in that format"),
    "dora_gib": F("float", "what use_dora adds to total (the same run with LoRA minus it), GiB; None without DoRA"),
})


def assemble(mem: MemoryEstimate, hw: Hardware | None, run: Any, alt: dict[str, Any] | None = None,
             qalt: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``mem`` facts of an estimate for `run` on `hw`; `alt` is `older_stack`'s result, `qalt`
    `quant_alternative`'s."""
    d = dict(mem.as_dict())
    d["per_gpu"] = dict(mem.per_gpu)
    d["total"] = mem.total
    d["peak_allocated"] = mem.peak_allocated
    d["host"] = mem.host
    d["host_save"] = mem.details.get("host_save_gib", 0.0)
    d["phase"] = mem.phase
    d["first_oom"] = mem.details.get("first_oom")
    d["peak_moment"] = mem.details.get("peak_moment")
    d["tokens_measured"] = mem.details.get("tokens_per_micro_batch") != run.tokens_per_micro_batch
    d["capacity_gib"] = hw.capacity_gib if hw else None
    d["host_ram_gib"] = hw.host_ram_gib if hw else None
    terms = mem.details.get("terms_bytes", {})
    d["weights_gib"] = terms.get("weights", 0.0) / GIB
    sharded = run.deepspeed and run.zero_stage == 3
    d["weights_replicated_gib"] = 0.0 if sharded else terms.get("weights", 0.0) / GIB
    d["load_whole_gib"] = terms.get("load_whole", 0.0) / GIB
    d["states_gib"] = (terms.get("states", 0.0) + terms.get("master", 0.0)) / GIB
    d["step_temp_gib"] = terms.get("step_temp", 0.0) / GIB
    d.update(alt or {"alt_stack_total": None, "alt_stack_fits": None, "alt_stack_optim": None})
    d.update(verdict_facts(mem, hw, run, alt))
    d.update(qalt or {"quant_alt_label": None, "quant_alt_total": None, "quant_alt_verdict": None})
    if d["verdict"] == "at-risk" and mem.fits is False:
        d["verdict_reason"] = "assumption"   # an upper bound over the card, its alternative fits (facts/config.py)
    d["dora_gib"] = dora_gib(mem, hw, run)
    return d


def dora_gib(mem: MemoryEstimate, hw: Hardware | None, run: Any) -> float | None:
    """GiB per GPU that DoRA adds to `mem` (the estimate of `run`): `mem.total` minus the same run with plain
    LoRA. The terms are analyzers/memory/params.py (the magnitude vectors) and activations.py (the output-sized
    products DoRA keeps, and `_dora_transient`, the dense weight it builds per adapted module to take the weight
    norm, peft tuners/lora/dora.py). None when the run is no DoRA run."""
    if run is None or not getattr(run, "use_dora", False) or run.finetuning_type != "lora":
        return None
    return mem.total - estimate(replace(run, use_dora=False), hw).total


def budget_of(hw: Hardware | None) -> float | None:
    """The memory a run may use per GPU: capacity minus what is already in use (GiB), None without a GPU."""
    if hw is None or not hw.capacity_gib:
        return None
    return hw.capacity_gib - (max(hw.in_use_gib) if hw.in_use_gib else 0.0)


def shape_of(mem: MemoryEstimate) -> str:
    """The error class of `mem` (analyzers/memory/uncertainty.py `error_class`): shape class and weight storage."""
    return uncertainty.error_class(str(mem.details.get("reserve_class") or "default"),
                                   bool(mem.details.get("quantized")))


def run_cls(run: Any, hw: Hardware | None) -> str | None:
    """The class of run `run` on `hw`'s cards (analyzers/memory/bands.py `run_class`), whose widths the interval
    takes; None without a run."""
    from finetune_doctor.analyzers.memory.bands import run_class

    return None if run is None else run_class(run, hw.gpu if hw is not None else None)


def judged(mem: MemoryEstimate, hw: Hardware | None, alt: dict[str, Any] | None = None,
           run: Any = None) -> MemoryEstimate:
    """`mem` with its verdict, p_oom and interval (analyzers/memory/predictive.py `assess`) against `hw`'s budget. A
    run that fits the assumed stack but not a torch < 2.8 one (`alt`, `older_stack`) is at risk: the stack is not
    known. With `run`, the interval takes its class's widths and p_oom is read on that one distribution
    (predictive.py `assess`, ``cls``; details ``interval_widened``)."""
    cls = run_cls(run, hw)
    a = predictive.assess(mem.total, budget_of(hw), mem.method, shape_of(mem), mem.need, cls=cls)
    verdict = a.verdict
    if verdict == "fits" and alt and alt.get("alt_stack_fits") is False:
        verdict = "at-risk"
    details = {**mem.details, "p_oom_unexplained": uncertainty.unexplained_share(mem.method),
               "interval_widened": cls is not None}
    return replace(mem, verdict=verdict, p_oom=a.p_oom, interval_gib=a.interval_gib, p_oom_model=a.p_oom_model,
                   details=details)


def pct_text(p: float | None) -> str | None:
    """A probability (0-1) in percent as a message prints it: one decimal, or two where one decimal would land on
    the other side of the 5 % target than the value (4.96 -> "4.96", 5.04 -> "5.04"), so that a printed number and
    the verdict decided on it never disagree (trial 9: "4.7 %, over the 5 % the doctor accepts")."""
    if p is None:
        return None
    pct = 100 * p
    target = 100 * uncertainty.P_OOM_TARGET
    one = round(pct, 1)
    return f"{pct:.2f}" if (one <= target) != (pct <= target) or (one == target and pct != target) else f"{one:.1f}"


def pct_fields(p: float | None, p_assumed: float | None, pm: float | None = None,
               pm_assumed: float | None = None) -> dict[str, Any]:
    """The p_oom / p_oom_assumed percent fields of the ``mem`` facts (`p` mixed over open assumptions, `p_assumed`
    at their assumed values), and the same of p_oom_model (`pm`, `pm_assumed`: the memory model's own probability,
    which the verdict reads; analyzers/memory/uncertainty.py 'Two probabilities')."""
    out: dict[str, Any] = {}
    for key, v, va in (("p_oom", p, p_assumed), ("p_oom_model", pm, pm_assumed)):
        out.update({key: v, f"{key}_pct": None if v is None else 100 * v, f"{key}_text": pct_text(v),
                    f"{key}_assumed_pct": None if va is None else 100 * va, f"{key}_assumed_text": pct_text(va)})
    return out


def verdict_facts(mem: MemoryEstimate, hw: Hardware | None, run: Any, alt: dict[str, Any] | None) -> dict[str, Any]:
    """The verdict and error-model facts of `mem` (namespace fields budget_gib … expandable_verdict). The error's
    class, rows, bias and spread are those of the distribution whose quantiles made the interval
    (predictive.assess's ``dist``: uncertainty.py `core_dist`), so the spread a message quotes is the interval's."""
    budget = budget_of(hw)
    a = predictive.assess(mem.total, budget, mem.method, shape_of(mem), mem.need, cls=run_cls(run, hw))
    d = a.dist   # core_dist (uncertainty.py `assess`), not the measurements' error_dist
    q = uncertainty.unexplained_share(mem.method)
    verdict = mem.verdict or a.verdict
    reason = None
    if verdict == "at-risk":
        reason = "error" if a.p_oom_model is not None and a.p_oom_model > uncertainty.P_OOM_TARGET else "stack"
    out: dict[str, Any] = {
        "budget_gib": budget, "need_gib": mem.need, "reserve_needed_gib": mem.details.get("reserve_needed_gib"),
        "verdict": verdict, "verdict_reason": reason, "p_oom": a.p_oom,
        **pct_fields(a.p_oom, a.p_oom, a.p_oom_model, a.p_oom_model), "p_oom_target": uncertainty.P_OOM_TARGET,
        "p_oom_unexplained": q, "p_oom_other_pct": 50 * q,
        "interval_gib": list(a.interval_gib), "interval_lo_gib": a.interval_gib[0],
        "interval_hi_gib": a.interval_gib[1], "interval_basis": error_words(), "safe_total_gib": a.safe_total_gib,
        "margin_gib": None if budget is None else budget - a.safe_total_gib,
        "error_class": d.shape, "error_rows": d.n, "error_label": d.label(), "error_kind": d.kind(), "error_bias_pct": 100 * d.mu, "error_spread_pct": 100 * d.spread(),
        "alt_stack_p_oom": None,
    }
    if alt and alt.get("alt_stack_total") is not None and budget is not None:
        out["alt_stack_p_oom"] = predictive.assess(alt["alt_stack_total"], budget, d.method, shape_of(mem),
                                                    alt["alt_stack_total"] * need_ratio(mem),
                                                    cls=run_cls(run, hw)).p_oom_model
    out.update(expandable_facts(mem, hw, run))
    return out


def expandable_facts(mem: MemoryEstimate, hw: Hardware | None, run: Any) -> dict[str, Any]:
    """The estimate with expandable segments on. The analytic model assumes them for torchrun launches (world size
    > 1, analyzers/memory/moments.py); for a single process the reserve of the run's shape class is taken from the
    'on' column of reserve_table.json instead of the 'off' one (analyzers/memory/reserve.py), the tensors unchanged."""
    assumed = run.world_size > 1
    reserve = float(mem.details.get("reserve_gib") or 0.0)
    out: dict[str, Any] = {"reserve_gib": reserve, "expandable": assumed,
                           "expandable_in_env": launchenv.expandable_segments(run),
                           "expandable_total": None, "expandable_saves_gib": None, "expandable_p_oom": None,
                           "expandable_p_oom_pct": None, "expandable_verdict": None,
                           "expandable_p_oom_model": None, "expandable_p_oom_model_pct": None}
    if assumed or mem.method != "analytic":
        return out
    total = expandable_total(mem, run)
    a = predictive.assess(total, budget_of(hw), mem.method, shape_of(mem), expandable_total(mem, run, need=True),
                           cls=run_cls(run, hw))
    out.update({"expandable_total": total, "expandable_saves_gib": mem.total - total, "expandable_p_oom": a.p_oom,
                "expandable_p_oom_pct": None if a.p_oom is None else 100 * a.p_oom, "expandable_verdict": a.verdict,
                "expandable_p_oom_model": a.p_oom_model,
                "expandable_p_oom_model_pct": None if a.p_oom_model is None else 100 * a.p_oom_model})
    return out


def expandable_total(mem: MemoryEstimate, run: Any, need: bool = False) -> float:
    """`mem.total` (GiB) of an analytic single-process estimate with expandable segments on: tensor peak ×
    (1 + the class's 'on' reserve) + runtime (the estimate's own sum, analyzers/memory/moments.py); with `need`,
    `mem.need`'s counterpart (the 'on' reserve the run needs, reserve.py `needed_fraction`)."""
    tokens = mem.details.get("tokens_per_micro_batch")
    pick = needed_fraction if need else reserve_fraction
    share, _ = pick(run, compute_terms(run, count_params(run), tokens), True)
    return mem.peak_allocated * (1 + share) + float(mem.details.get("runtime_gib") or 0.0)


def need_ratio(mem: MemoryEstimate) -> float:
    """`mem.need` / `mem.total`: how a total that only an alternative carries (another stack, an assumption's
    alternative, facts/assume.py `mixture`) becomes its need. The reserve shares are shares of the tensor peak and
    the runtime changes little between such alternatives, so the ratio carries over; 1 for an empty estimate."""
    return mem.need / mem.total if mem.total > 0 else 1.0


def quant_alternative(resolve_arch: Any, run: Any, hw: Hardware | None, tokens: int | None) -> dict[str, Any]:
    """The estimate with the weights stored as the model's name suggests (quant.py `hinted_spec`), for a run whose
    weights were sized unquantized because no config.json says how they are stored (``run.quantization_unknown``:
    an upper bound). `resolve_arch(arch)` re-resolves the run on another architecture. Keys ``quant_alt_label``,
    ``quant_alt_total`` (GiB) and ``quant_alt_verdict``; all None when not computed (no hint that shrinks the
    weights, or no GPU to judge against)."""
    out: dict[str, Any] = {"quant_alt_label": None, "quant_alt_total": None, "quant_alt_verdict": None}
    spec = hinted_spec(str(getattr(run, "model_name", "") or "")) if getattr(run, "quantization_unknown", False) \
        else None
    if spec is None:
        return out
    alt_run = resolve_arch(replace(run.arch, quant=spec))
    est = judged(estimate(alt_run, hw, tokens=tokens), hw, run=alt_run)
    return {"quant_alt_label": spec.label, "quant_alt_total": est.total, "quant_alt_verdict": est.verdict}


def older_stack(resolve: Any, run: Any, hw: Hardware | None, counts: Any, tokens: int | None,
                torch_given: bool, optim_given: bool) -> dict[str, Any]:
    """The estimate on a training machine with torch < 2.8, when the verdict could depend on it.

    Only when neither ``--torch`` nor ``optim`` says which optimizer the run gets: transformers then defaults to
    the non-fused AdamW (``adamw_torch``) on torch < 2.8 and to the fused one from 2.8 on (LF_FACTS §3), and the
    non-fused update allocates temporaries the size of the states (case 028: 16 GiB on 8×H200 for Qwen3-32B).
    `resolve(stack)` re-resolves the run for a stack mapping. Keys ``alt_stack_total`` (GiB), ``alt_stack_fits``
    and ``alt_stack_optim``; all None when not computed.
    """
    out: dict[str, Any] = {"alt_stack_total": None, "alt_stack_fits": None, "alt_stack_optim": None}
    if torch_given or optim_given:
        return out
    old = resolve({"torch": "2.7"})
    if old.optim == run.optim:
        return out
    est = estimate(old, hw, counts=counts, tokens=tokens)
    return {"alt_stack_total": est.total, "alt_stack_fits": est.fits, "alt_stack_optim": old.optim}
