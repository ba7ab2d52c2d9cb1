"""What facts/assume.py and its family modules share: which assumptions open the verdict, the judge that weighs an
alternative by the memory model, and `Seen`, what every group of assumptions reads (docs/DESIGN.md, "Honest
verdicts"; issue #21). The groups live by input family: facts/assumestack.py (the training machine's torch,
transformers, DeepSpeed and unsloth; a DeepSpeed file not here), facts/assumelaunch.py (the launcher, the rank
count, the GPU variant a remedy must fit), facts/assume.py (the data, the card, the model, the memory terms'
own and the defaults; the fold into the verdict, the mixture and the token budget). Split from facts/assume.py at
the 800-line cap (issue #22); no module here imports the memory model at its top: `lint` without a card lists
assumptions without weighing them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from finetune_doctor.facts.kinds import ACCELERATE_FSDP
from finetune_doctor.quant import UNQUANTIZED_LABEL
from finetune_doctor.types import Assumption, Hardware

# The shortest samples taken as plausible when the data is not here: a one-turn instruction with a short answer
# (alpaca's median is ~150 tokens under a chat template; 512 leaves room for the longest sample of a batch).
SHORT_SAMPLE_TOKENS = 512
# The longest sample is evaluated at SHORT_SAMPLE_TOKENS and each doubling of it below cutoff_len (512, 1024, ...,
# at most SAMPLE_LADDER_STEPS lengths): the mixture over the open assumptions weighs them by the table's prior on
# the longest sample (analyzers/memory/uncertainty.py `length_weights`); a doubling keeps the discretisation's
# over-prediction of the activations under 2x while cutoff_len 32768 costs six re-runs of the memory model.
SAMPLE_LADDER_STEPS = 7
# The typical longest sample of a real dataset, the point figure of a run whose data was not read (facts/assume.py
# `typical_sample`; the verdict still weighs every length up to cutoff_len). A doubling of the ladder, not a fit of
# its own: the next one above Alpaca's longest sample (1,304 Llama-2 tokens, benchmarks/calib_data.py
# DATASET_LONGEST), which one-turn instruction sets stay near. Checked on the dev measurements whose sources train
# on a dataset they do not size (236 rows; benchmarks/results/memory_qlora_mem16b.md): the point at
# min(2048, cutoff_len) reads a median signed error of -0.9 % on documentation rows, against +6.4 % at cutoff_len,
# -7.3 % at the log-uniform prior's median and +6.1 % at 4096; issue threads (runs reported for their long data)
# stay under at any length below cutoff_len.
TYPICAL_LONGEST_TOKENS = 2048
SAMPLE_LABEL = re.compile(r"^samples of (\d+) tokens$")
# Assumptions that never open the verdict: values LLaMA-Factory or transformers fill in for sure (eval and train
# batch, cutoff_len), and transformers < 4.49, weighed and shown but not plausible under the modelled release: the
# run is modelled as LLaMA-Factory 0.9.5 runs it, and 0.9.5 requires transformers >= 4.55 (its wheel's metadata,
# catalog/lf_keys.json "sources"); an older transformers means an older LLaMA-Factory. Every other assumption whose
# alternatives change the verdict opens it, including those other modules add (the model's resolution).
# ``liger-kernel`` (installable) bears on a remedy, not on the run as configured: it never opens the verdict.
# Since trial 15 this set keeps its meaning for the p_oom/interval mixture only; the verdict reads `NEVER_OPENS`.
NOT_OPEN = frozenset({"eval-batch", "train-batch", "cutoff-len", "transformers-version", "liger-kernel"})
OPEN = frozenset({"sample-lengths", "gpu-variant", "torch-version", "checkpoint-dtype", "launcher",
                  "deepspeed-config", "attention-kernel", "image-pixels", "unsloth-version", "unsloth-gpt-oss",
                  "unsloth-rope-build", "moe-expert-layout"})   # this module's
# Alternatives no input names and LLaMA-Factory would not pick for the config (issue #21, trial 2: an FSDP launch
# nobody named softened predicted OOMs to at-risk). UNNAMED ones are evaluated, shown and weighed in the p_oom and
# interval mixture by the table's assumption weights (they widen it when the assumed value weighs < 1), but never
# open the verdict (`weigh`, `fold`) nor decide it (`deciding_facts`):
# `llamafactory-cli train` on several GPUs starts torchrun (LF main launcher.py L60-126); FSDP needs an accelerate
# config or the YAML's `fsdp`, and when either is given the launch is read, not assumed (facts/kinds.py
# `launcher_assumption`, which drops FSDP where LF refuses it for the model). SHOWN_ONLY ones are not plausible for
# the config at all and stay out of the mixture too: a checkpoint sized from its name's ending (-AWQ as AWQ 4-bit:
# quant.py `hinted_spec`) shows the unquantized base model (facts/quantassume.py `named_quant_assumption`), but an
# upload named so is not stored unquantized.
SP_DROPPED = ("the key dropped (upstream LLaMA-Factory under ALLOW_EXTRA_ARGS): every rank holds the whole "
              "sequence")   # the one alternative of `sequence-parallel` (facts/assume.py `_sequence_parallel`)
UNQUANTIZED = UNQUANTIZED_LABEL   # defined in quant.py, so facts/kinds.py (which this module imports) can name it
# One process over every visible GPU (DATA_PARALLEL) is how LLaMA-Factory before 0.8.0 trained. It is offered only
# where no input rules that release out (facts/kinds.py `data_parallel_open`: a release stated or narrowed by the
# config's keys to 0.8.0 or later closes it, facts/launchray.py `narrowed_past_first`), and an alternative that
# remains is plausible: it opens the verdict like any other (trial 15: "19.0 GiB at-risk" listed without `!` beside
# "fits"). `--launch` with a `python src/train.py` line estimates that launch itself (run/engines.py
# `_one_process_replicas`).
UNNAMED: dict[str, frozenset[str]] = {"launcher": frozenset({ACCELERATE_FSDP})}
SHOWN_ONLY: dict[str, frozenset[str]] = {"weights-quantization": frozenset({UNQUANTIZED}),
                                          # a config naming 360-LLaMA-Factory's key runs that fork (assume.py
                                          # `_sequence_parallel`)
                                          "sequence-parallel": frozenset({SP_DROPPED})}


# The names of `NOT_OPEN` that stay out of the verdict although they are weighed: values LLaMA-Factory or transformers
# fill in for sure, and the remedy-only liger-kernel. ``transformers-version`` is not among them (trial 15, case 06:
# "fits" beside "! if transformers 4.48.3: 14.5 GiB at-risk"): its older alternative is offered only where the model
# loads under it and a judged LLaMA-Factory release admits it (facts/tfmodeltype.py `could_run`; none where the
# release is 0.9.4 or later), so an alternative that remains is plausible and opens the verdict like any other. It
# stays in `NOT_OPEN` for the p_oom/interval mixture, whose weights were fitted without it (facts/assume.py `mixture`).
# ``train-batch`` is not among them either (trial 16, LF#4447: a paste that lost its `### train` section was sized
# at transformers' default 8, 56.8 GiB at-risk, beside "if 1: 41.8 GiB" with no `!`, on a run that trained at ~40
# GB): every LLaMA-Factory example and doc config sets per_device_train_batch_size, so a training config without it
# is as likely a file that lost the line as one that means 8, and an alternative whose verdict differs opens the
# verdict like any other. ``eval-batch`` stays sure: per_device_eval_batch_size is commonly left unset (trial 9).
NEVER_OPENS = NOT_OPEN - {"transformers-version", "train-batch"}


def sample_ladder(cutoff_len: int) -> list[int]:
    """The longest-sample lengths (tokens per sample) the ``sample-lengths`` assumption evaluates below
    `cutoff_len` (tokens): SHORT_SAMPLE_TOKENS and its doublings under cutoff_len, at most SAMPLE_LADDER_STEPS of
    them; at or under SHORT_SAMPLE_TOKENS, where no rung is below cutoff_len, half of cutoff_len (issue #23,
    session 16: a 257-token Chinese-Vicuna run and a 241-token gsm8k batch were called ``oom`` with the assumption
    open and no shorter length weighed, so the verdict held across none of its range; README "Verdicts that follow
    the unknowns"). Empty for cutoff_len < 2. Never raises."""
    ladder = [n for n in (SHORT_SAMPLE_TOKENS << k for k in range(SAMPLE_LADDER_STEPS)) if n < cutoff_len]
    return ladder or ([cutoff_len // 2] if cutoff_len >= 2 else [])


def opens_verdict(name: str, base_verdict: str | None, verdicts: dict[str, str]) -> bool:
    """Whether an assumption `name` whose alternatives gave `verdicts` (label → verdict) opens `base_verdict`: the
    one home of that question, so the ``!`` of the report (``Assumption.moves_verdict``) and the verdict
    (facts/assume.py `fold`) cannot disagree. True when some alternative that may decide (not `not_deciding`) gives
    another verdict, for an assumption not in `NEVER_OPENS`; False without a verdict."""
    if base_verdict is None or name in NEVER_OPENS:
        return False
    shown = not_deciding(name)
    return any(v != base_verdict for k, v in verdicts.items() if k not in shown)


def settled(a: Assumption) -> Assumption:
    """`a` with ``moves_verdict`` cleared where `opens_verdict`'s name test says it never opens the verdict (a
    producer that set the flag itself: facts/kinds.py, quantassume.py, exportadapter.py, readers/model/modelcfg.py);
    `fold` reads the flag alone."""
    from dataclasses import replace

    return replace(a, moves_verdict=False) if a.moves_verdict and a.name in NEVER_OPENS else a


def not_deciding(name: str) -> frozenset[str]:
    """The labels of assumption `name`'s alternatives that never open or decide the verdict (`UNNAMED`,
    `SHOWN_ONLY`)."""
    return UNNAMED.get(name, frozenset()) | SHOWN_ONLY.get(name, frozenset())


# what only the memory estimate rests on: `lint` without a card lists none of them (the stack's and the model's
# assumptions, which its key and model judgments rest on, it keeps; so is the launcher, which decides whether the
# launch-dependent rules fire: facts/kinds.py)
MEMORY_ONLY = frozenset({"sample-lengths", "gpus", "gpu-variant", "torch-version", "deepspeed-version",
                         "deepspeed-config", "checkpoint-dtype", "attention-kernel", "world-size",
                         "eval-batch", "train-batch", "cutoff-len", "host-ram", "images-per-sample", "image-pixels",
                         "hccl-buffsize", "npu-runtime", "save-gathers-adapter-only", "liger-kernel",
                         "unsloth-version", "unsloth-gpt-oss", "unsloth-rope-build",
                         "moe-expert-layout"})

Judge = Callable[[Any, Hardware | None, int | None], "tuple[float, str | None] | None"]


def judge_run(counts: Any = None, enabled: bool = True) -> Judge:
    """(run, hw, tokens) → (total GiB, verdict) by the memory model and the error model of the reported estimate.
    `counts` (analyzers.memory.params.ParamCounts) is reused only for runs of the same architecture and trainable set.
    Disabled (``lint`` without a card: no verdict to move), it returns None and the alternative stays unweighed."""

    def judge(run: Any, hw: Hardware | None, tokens: int | None = None) -> tuple[float, str | None] | None:
        if not enabled:
            return None
        from finetune_doctor.analyzers.memory import estimate, predictive
        from finetune_doctor.facts.mem import run_cls, shape_of

        est = estimate(run, hw, counts=counts, tokens=tokens)
        budget = budget_gib(hw)
        a = predictive.assess(est.total, budget, est.method, shape_of(est), est.need, cls=run_cls(run, hw))
        return est.total, a.verdict

    judge.enabled = enabled   # type: ignore[attr-defined]
    return judge


def weighs(judge: Judge) -> bool:
    """Whether `judge` weighs alternatives (judge_run's `enabled`): re-resolving a run for nothing is skipped."""
    return bool(getattr(judge, "enabled", True))


def budget_gib(hw: Hardware | None) -> float | None:
    if hw is None or not hw.capacity_gib:
        return None
    return hw.capacity_gib - (max(hw.in_use_gib) if hw.in_use_gib else 0.0)


def weigh(name: str, value: Any, source: str, resolve_with: str, base_verdict: str | None,
           alts: list[tuple[str, Callable[[], tuple[float, str | None]] | None]],
           shown_only: Any = ()) -> Assumption:
    """An Assumption whose alternatives are evaluated by the given thunks (None: not evaluable here); the labels in
    `shown_only` are evaluated and shown but do not make it move the verdict (`not_deciding`)."""
    gib: dict[str, float] = {}
    verdicts: dict[str, str] = {}
    for label, thunk in alts:
        res = thunk() if thunk is not None else None
        if res is None:
            continue
        total, verdict = res
        gib[label] = total
        if verdict is not None:
            verdicts[label] = verdict
    moves = opens_verdict(name, base_verdict, {k: v for k, v in verdicts.items() if k not in shown_only})
    return Assumption(name=name, value=value, source=source, alternatives=tuple(label for label, _ in alts),
                      effect_gib=gib, effect_verdict=verdicts, resolve_with=resolve_with, moves_verdict=moves)


@dataclass
class Seen:
    """What every group of assumptions reads: the assembly, its run and card, the judges and the re-resolver."""

    asm: Any
    opts: Any
    tokens: int | None
    base: str | None
    judge: Judge
    fresh: Judge

    @property
    def run(self) -> Any:
        return self.asm.run

    @property
    def hw(self) -> Hardware | None:
        return self.asm.hw

    @property
    def cfg(self) -> dict[str, Any]:
        return self.asm.doc.values

    def rerun(self, stack: dict[str, Any] | None = None, arch: Any = None, launch: Any = None,
              hw: Hardware | None = None) -> Any:
        """The run re-resolved by run.resolve_run with another stack, architecture, launch or GPUs."""
        from finetune_doctor.run import resolve_run

        a = self.asm
        out = resolve_run(self.cfg, arch or self.run.arch, hw or self.hw, a.ds, nnodes=a.nnodes,
                          stack={**a.stack, **(stack or {})}, stack_sources=a.stack_sources,
                          launch=launch if launch is not None else a.launch)
        # what the data showed (facts/config.py `text_only`) holds under every alternative
        return out if self.run.media_inputs else out.with_(media_inputs=False)
