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
from dataclasses import dataclass, replace
from typing import Any, Callable

# the memory model is imported where an alternative is weighed, not here: `lint` without a card lists assumptions
# without weighing them and stays off the memory model (ARCHITECTURE.md, "memory model off the lint path")
from finetune_doctor.quant import UNQUANTIZED_LABEL
from finetune_doctor.facts.kinds import ACCELERATE_FSDP, DATA_PARALLEL
from finetune_doctor.types import Assumption, Hardware

# The shortest samples taken as plausible when the data is not here: a one-turn instruction with a short answer
# (alpaca's median is ~150 tokens under a chat template; 512 leaves room for the longest sample of a batch).
SHORT_SAMPLE_TOKENS = 512
# the least that enabling liger-kernel must lower the peak by for its assumption to be listed: the report rounds
# GiB to one decimal, a smaller move is not visible in it
LIGER_MOVES_GIB = 0.05
# The longest sample is evaluated at SHORT_SAMPLE_TOKENS and each doubling of it below cutoff_len (512, 1024, ...,
# at most SAMPLE_LADDER_STEPS lengths): the mixture over the open assumptions weighs them by the table's prior on
# the longest sample (analyzers/memory/uncertainty.py `length_weights`); a doubling keeps the discretisation's
# over-prediction of the activations under 2x while cutoff_len 32768 costs six re-runs of the memory model.
SAMPLE_LADDER_STEPS = 7
_SAMPLE_LABEL = re.compile(r"^samples of (\d+) tokens$")
# the transformers release before the loss stopped copying the shifted logits (run/stack.py
# SHIFTED_LOGITS_COPY_BEFORE = 4.49): the plausible older stack
OLD_TRANSFORMERS = "4.48.3"
# Assumptions that never open the verdict: values LLaMA-Factory or transformers fill in for sure (eval and train
# batch, cutoff_len), and transformers < 4.49, weighed and shown but not plausible under the modelled release: the
# run is modelled as LLaMA-Factory 0.9.5 runs it, and 0.9.5 requires transformers >= 4.55 (its wheel's metadata,
# catalog/lf_keys.json "sources"); an older transformers means an older LLaMA-Factory. Every other assumption whose
# alternatives change the verdict opens it, including those other modules add (the model's resolution).
# ``liger-kernel`` (installable) bears on a remedy, not on the run as configured: it never opens the verdict.
NOT_OPEN = frozenset({"eval-batch", "train-batch", "cutoff-len", "transformers-version", "liger-kernel"})
OPEN = frozenset({"sample-lengths", "gpu-variant", "torch-version", "checkpoint-dtype", "launcher",
                  "deepspeed-config", "attention-kernel", "image-pixels", "unsloth-version"})   # this module's
# Alternatives no input names and LLaMA-Factory would not pick for the config (issue #21, trial 2: an FSDP launch
# nobody named softened predicted OOMs to at-risk). UNNAMED ones are evaluated, shown and weighed in the p_oom and
# interval mixture by the table's assumption weights (they widen it when the assumed value weighs < 1), but never
# open the verdict (`_weigh`, `fold`) nor decide it (`deciding_facts`):
# `llamafactory-cli train` on several GPUs starts torchrun (LF main launcher.py L60-126); FSDP needs an accelerate
# config or the YAML's `fsdp`, and when either is given the launch is read, not assumed (facts/kinds.py
# `launcher_assumption`, which drops FSDP where LF refuses it for the model). SHOWN_ONLY ones are not plausible for
# the config at all and stay out of the mixture too: a checkpoint sized from its name's ending (-AWQ as AWQ 4-bit:
# quant.py `hinted_spec`) shows the unquantized base model (facts/quantassume.py `named_quant_assumption`), but an
# upload named so is not stored unquantized.
UNQUANTIZED = UNQUANTIZED_LABEL   # defined in quant.py, so facts/kinds.py (which this module imports) can name it
# One process over every visible GPU (DATA_PARALLEL) is how LLaMA-Factory before 0.8.0 trained; the run is modelled
# as 0.9.5 runs it (as for transformers < 4.49 above), so an older release is shown and weighed, never deciding;
# `--launch` with a `python src/train.py` line estimates that launch itself (run/engines.py `_one_process_replicas`)
UNNAMED: dict[str, frozenset[str]] = {"launcher": frozenset({ACCELERATE_FSDP, DATA_PARALLEL})}
SHOWN_ONLY: dict[str, frozenset[str]] = {"weights-quantization": frozenset({UNQUANTIZED})}


def _not_deciding(name: str) -> frozenset[str]:
    """The labels of assumption `name`'s alternatives that never open or decide the verdict (`UNNAMED`,
    `SHOWN_ONLY`)."""
    return UNNAMED.get(name, frozenset()) | SHOWN_ONLY.get(name, frozenset())
STOCK_DS = ("examples/deepspeed/ds_z2_config.json", "examples/deepspeed/ds_z3_config.json",
            "examples/deepspeed/ds_z3_offload_config.json")

# what only the memory estimate rests on: `lint` without a card lists none of them (the stack's and the model's
# assumptions, which its key and model judgments rest on, it keeps; so is the launcher, which decides whether the
# launch-dependent rules fire: facts/kinds.py)
MEMORY_ONLY = frozenset({"sample-lengths", "gpus", "gpu-variant", "torch-version", "deepspeed-version",
                         "deepspeed-config", "checkpoint-dtype", "attention-kernel", "world-size",
                         "eval-batch", "train-batch", "cutoff-len", "host-ram", "images-per-sample", "image-pixels",
                         "hccl-buffsize", "npu-runtime", "save-gathers-adapter-only", "liger-kernel",
                         "unsloth-version"})

Judge = Callable[[Any, Hardware | None, int | None], "tuple[float, str | None] | None"]


def judge_run(counts: Any = None, enabled: bool = True) -> Judge:
    """(run, hw, tokens) → (total GiB, verdict) by the memory model and the error model of the reported estimate.
    `counts` (analyzers.memory.params.ParamCounts) is reused only for runs of the same architecture and trainable set.
    Disabled (``lint`` without a card: no verdict to move), it returns None and the alternative stays unweighed."""

    def judge(run: Any, hw: Hardware | None, tokens: int | None = None) -> tuple[float, str | None] | None:
        if not enabled:
            return None
        from finetune_doctor.analyzers.memory import estimate, uncertainty
        from finetune_doctor.facts.mem import shape_of

        est = estimate(run, hw, counts=counts, tokens=tokens)
        budget = _budget(hw)
        a = uncertainty.assess(est.total, budget, est.method, shape_of(est), est.need)
        return est.total, a.verdict

    judge.enabled = enabled   # type: ignore[attr-defined]
    return judge


def _on(judge: Judge) -> bool:
    """Whether `judge` weighs alternatives (judge_run's `enabled`): re-resolving a run for nothing is skipped."""
    return bool(getattr(judge, "enabled", True))


def _budget(hw: Hardware | None) -> float | None:
    if hw is None or not hw.capacity_gib:
        return None
    return hw.capacity_gib - (max(hw.in_use_gib) if hw.in_use_gib else 0.0)


def _weigh(name: str, value: Any, source: str, resolve_with: str, base_verdict: str | None,
           alts: list[tuple[str, Callable[[], tuple[float, str | None]] | None]],
           shown_only: Any = ()) -> Assumption:
    """An Assumption whose alternatives are evaluated by the given thunks (None: not evaluable here); the labels in
    `shown_only` are evaluated and shown but do not make it move the verdict (`_not_deciding`)."""
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
    moves = base_verdict is not None and any(v != base_verdict for k, v in verdicts.items() if k not in shown_only)
    return Assumption(name=name, value=value, source=source, alternatives=tuple(label for label, _ in alts),
                      effect_gib=gib, effect_verdict=verdicts, resolve_with=resolve_with, moves_verdict=moves)


@dataclass
class _Seen:
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


def collect(asm: Any, opts: Any, *, tokens: int | None, base_verdict: str | None,
            alt_stack: dict[str, Any] | None = None) -> list[Assumption]:
    """Every assumption behind `asm`'s estimate (facts/config.py `Assembly` with a resolved run), weighed against
    `base_verdict` (the verdict of the reported estimate). `tokens` is the measured worst micro-batch (None: the
    data was not scanned); `alt_stack` is facts/mem.py `older_stack`'s result. Pure apart from reading
    ``os.environ`` for the launch variables. Never raises for a resolved run."""
    weigh = asm.hw is not None or asm.memory is not None   # lint without a card: listed, not weighed
    c = _Seen(asm, opts, tokens, base_verdict, judge_run(asm.counts, weigh), judge_run(None, weigh))
    return [*_data_and_card(c), *_deepspeed_config(c), *_stack(c, alt_stack), *_checkpoint(c), *_attention(c),
            *_unsloth_release(c), *_terms(c), *_tensor_parallel(c),
            *_launch(asm, c.run, c.hw, tokens, c.judge, c.fresh, c.rerun, base_verdict), *_defaults(c)]


def _data_and_card(c: _Seen) -> list[Assumption]:
    """The sample lengths without the data; the card a bare ``--gpu`` names; no card at all."""
    run, hw, out = c.run, c.hw, []
    if c.tokens is None and not run.packing:
        ladder = [SHORT_SAMPLE_TOKENS << k for k in range(SAMPLE_LADDER_STEPS)]
        alts = [(f"samples of {n} tokens", (lambda n=n: c.judge(run.with_(seq_len=n), hw, None)))
                for n in ladder if n < run.seq_len]
        out.append(_weigh(
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
            out.append(_weigh("gpu-variant", hw.gpu, f"--gpu {c.opts.gpu} names no memory size: the catalogue's "
                              f"default variant ({hw.capacity_gib:.2f} GiB usable) is taken",
                              f"--gpu {'/'.join([hw.gpu] + [g.name for g in others])}", c.base, alts))
    if hw is None:
        out.append(_weigh("gpus", "unknown: one GPU, no capacity", "no --gpu, no --env and no GPU seen here: the fit "
                          "is not judged and the world size is 1", "--gpu SPEC (e.g. 8xA100-80GB) or --env FILE",
                          None, []))
    return out


LEAK_RELEASE = "0.16.4"     # analyzers/memory/zero3.py RECOMPUTE_LEAK_RELEASE
NO_LINEAR_WRAP_RELEASE = "0.19.3"   # analyzers/memory/zero3.py LINEAR_WRAP_ABSENT_RELEASE


def _stack(c: _Seen, alt_stack: dict[str, Any] | None) -> list[Assumption]:
    """torch, transformers and DeepSpeed of the training machine, when nothing names them."""
    run, hw, out = c.run, c.hw, []
    given = {p for p, _v, _s in c.asm.stack_sources}
    if "torch" not in given:
        alts = []
        if alt_stack and alt_stack.get("alt_stack_total") is not None:
            total = float(alt_stack["alt_stack_total"])
            from finetune_doctor.analyzers.memory import uncertainty
            from finetune_doctor.facts.mem import need_ratio, shape_of

            # judged as the reported estimate is: same method, same shape class (the optimizer leaves both), its
            # need in the same ratio to its total
            shape = shape_of(c.asm.memory) if c.asm.memory is not None else "default"
            ratio = need_ratio(c.asm.memory) if c.asm.memory is not None else 1.0
            verdict = uncertainty.assess(total, _budget(hw), "analytic", shape, total * ratio).verdict if hw else None
            alts.append((f"torch < 2.8 ({alt_stack.get('alt_stack_optim')})",
                         lambda total=total, verdict=verdict: (total, verdict)))
        why = ("transformers' default optimizer follows torch (fused AdamW from 2.8)"
               if run.optim_assumed else "the YAML's `optim` fixes the optimizer; kernels follow torch")
        value = ">= 2.8 (a current stack)"
        from finetune_doctor.run.stack import parse_version, torch_decides_optim

        tf = (c.asm.stack or {}).get("transformers")
        if tf and not torch_decides_optim(parse_version(tf)):
            # torch 2.8 came out after transformers 4.54 (2025-07/08): a machine on an older transformers is taken to
            # run the torch of its time, and its default optimizer (adamw_torch) does not depend on torch at all
            value = f"< 2.8 (the torch of transformers {tf}'s time)"
            why = (f"transformers {tf} predates torch 2.8 and defaults to adamw_torch whatever the torch "
                   "(huggingface/transformers#37358, first in 4.54); kernels follow torch")
        out.append(_weigh("torch-version", value,
                          f"no --torch, --env or installed torch of the training machine; {why}",
                          "--torch VERSION, or --env FILE with `llamafactory-cli env` of the training machine",
                          c.base, alts))
    if "transformers" not in given:
        def older() -> tuple[float, str | None] | None:
            if not _on(c.judge):
                return None   # not weighed: skip the re-resolution too
            old = c.rerun({"transformers": OLD_TRANSFORMERS})
            return c.judge(old, hw, c.tokens) if old.shifted_logits_copy != run.shifted_logits_copy else None

        from finetune_doctor.facts import stackrange, tfmodeltype

        # only a version that loads the model and that the LF release admits (trial 11: "if transformers 4.48.3")
        alts = [(f"transformers {OLD_TRANSFORMERS}", older)] if tfmodeltype.could_run(c.asm, run.arch, OLD_TRANSFORMERS) else []
        ranged = getattr(c.asm, "tf_assumed", None)
        if ranged is not None:   # the LF release is known: pip installs the newest version its range admits (trial 5)
            out.append(_weigh("transformers-version", f"{ranged['version']} (the newest LLaMA-Factory "
                              f"{ranged['releases']} accepts)",
                              f"no --transformers or --env transformers; LLaMA-Factory {ranged['releases']} "
                              f"({ranged['release_source']}) requires {ranged['spec']} at start-up "
                              "(extras/misc.py check_dependencies), so its newest allowed version is taken; renamed "
                              "keys are still judged for transformers 4.57-5.x",
                              "--transformers VERSION, or --env FILE", c.base,
                              # the older stack is an alternative only where the range admits newer ones
                              alts if stackrange.satisfies(ranged["version"], f"transformers>{OLD_TRANSFORMERS}") else []))
            return out + _deepspeed_version(c, given)
        out.append(_weigh("transformers-version", "a current release (4.57-5.x)",
                          "no --transformers, --env or installed transformers of the training machine: renamed and "
                          "version-only keys are judged for transformers 4.57-5.x, and the loss shifts labels "
                          "instead of copying the logits (transformers >= 4.49)",
                          "--transformers VERSION, or --env FILE", c.base, alts))
    return out + _deepspeed_version(c, given)


def _deepspeed_version(c: _Seen, given: set[str]) -> list[Assumption]:
    """DeepSpeed of the training machine when the run uses it and nothing names its version."""
    run, out = c.run, []
    # the LLaMA-Factory release is recorded where the config is read (facts/kinds.py `lf-version`): the keys are
    # judged for the release named, else for every release together (readers/config/lfrelease.py)
    if run.deepspeed and "deepspeed" not in given:
        dsv = getattr(c.asm.ds, "ds_version", None) if c.asm.ds is not None else None
        def alt(release: str) -> tuple[str, Callable[[], Any]]:
            return release, lambda: c.judge(run.with_(stack_sources=run.stack_sources + (
                ("deepspeed", release, "assumed alternative"),)), c.hw, c.tokens) if _on(c.judge) else None
        # DeepSpeed 0.16.0-0.16.7 keep every checkpointed layer gathered under non-reentrant checkpointing
        # (analyzers/memory/zero3.py `recompute_leak` reads the release from the run's stack; LEAK_RELEASE is
        # its RECOMPUTE_LEAK_RELEASE, kept here so that lint stays off the memory model); before 0.19.4 a model built
        # outside zero.Init has no linear wrapper, and F.linear keeps each gathered weight (`linear_weights_retained`)
        ds_alts = ([alt(LEAK_RELEASE)] if run.zero_stage == 3 and run.gradient_checkpointing
                   and not run.use_reentrant_gc else [])
        if run.zero_stage == 3 and not (run.zero3_init or run.gradient_checkpointing or run.quantization_bit):
            ds_alts.append(alt(NO_LINEAR_WRAP_RELEASE))
        out.append(_weigh("deepspeed-version", dsv or "0.19.8 (the newest behaviour the doctor knows)",
                          "installed on this machine, not read from the training machine" if dsv else
                          "no DeepSpeed version of the training machine: defaults and known bugs of 0.19.8 apply",
                          "--env FILE with `llamafactory-cli env` (or `pip freeze`) of the training machine",
                          c.base, ds_alts))
    return out


def _deepspeed_config(c: _Seen) -> list[Assumption]:
    """A DeepSpeed file not on this machine (facts/config.py `_stand_in_deepspeed`): the stock file used for it,
    with LLaMA-Factory's other stock stages evaluated (Assembly.run_after re-reads and re-resolves)."""
    if not getattr(c.asm, "ds_assumed", None):
        return []
    path, used = c.asm.ds_assumed
    from finetune_doctor.facts.ds import named_stage

    named = named_stage(path)
    if named is None:
        stocks, why = STOCK_DS, "LLaMA-Factory's stock file of the stage its name suggests stands in for it"
    else:
        # the name states the stage (LF's examples/deepspeed/ds_z{0,2,3}[_offload]_config.json): that stage, with
        # or without CPU offload, is the plausible range; a file named ds_z2 that holds stage 3 is not (trial 10
        # case 03: ds_z2_config.json was at-risk only because it "might be ZeRO-3"; ZeRO-3 is FD602's remedy)
        same = {0: ("ds_z0_config.json",), 1: ("ds_z0_config.json",),
                2: ("ds_z2_config.json", "ds_z2_offload_config.json"),
                3: ("ds_z3_config.json", "ds_z3_offload_config.json")}[named]
        stocks = tuple(f"examples/deepspeed/{n}" for n in same)
        why = (f"name-implied: its file name says ZeRO stage {named} (LLaMA-Factory's examples/deepspeed naming, "
               "ds_z{0,2,3}[_offload]_config.json), so LLaMA-Factory's stock file of that stage stands in for it "
               "(with and without CPU offload weighed)")
    alts = [(alt.rsplit("/", 1)[-1], (lambda alt=alt: c.fresh(c.asm.run_after([("config", "deepspeed", alt, False)]),
                                                           c.hw, c.tokens) if _on(c.fresh) else None))
            for alt in stocks if alt != used]
    return [_weigh("deepspeed-config", used.rsplit("/", 1)[-1], f"{path} is not on this machine: {why}",
                   f"run where {path} is, or deepspeed=PATH with a copy of it", c.base, alts)]




def _checkpoint(c: _Seen) -> list[Assumption]:
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
    return [_weigh("checkpoint-dtype", dtype, why,
                   "--model-config with the checkpoint's config.json (or the model folder on this machine)",
                   c.base, [(alt, lambda: c.fresh(c.rerun(arch=other), c.hw, c.tokens) if _on(c.fresh) else None)])]


def _tensor_parallel(c: _Seen) -> list[Assumption]:
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


def _terms(c: _Seen) -> list[Assumption]:
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
            a = _weigh(a.name, a.value, a.source, a.resolve_with, c.base, alts)
        elif a.name == "bitsandbytes-version" and a.alternatives:
            # the run with that release in its stack (analyzers/memory/qlora.py keeps_input reads it there)
            alts = [(str(v), (lambda v=v: c.judge(c.run.with_(stack_sources=c.run.stack_sources + (
                ("bitsandbytes", str(v), "assumed alternative"),)), c.hw, c.tokens))) for v in a.alternatives]
            a = _weigh(a.name, a.value, a.source, a.resolve_with, c.base, alts)
        out.append(a)
    return out


def _attention(c: _Seen) -> list[Assumption]:
    """Gemma-2 with ``flash_attn: auto`` (or unset): LLaMA-Factory takes FlashAttention-2 when flash-attn is
    installed on the training machine and eager attention when not (model/model_utils/attention.py, the gemma2
    branch at ff6d4d1); which one runs is not visible here, and eager keeps the full score matrix."""
    run = c.run
    if run.arch.model_type != "gemma2" or str(c.cfg.get("flash_attn") or "auto") != "auto":
        return []
    alts = [(k, (lambda k=k: c.judge(run.with_(attention=k), c.hw, c.tokens)))
            for k in ("fa2", "eager") if k != run.attention]
    return [_weigh("attention-kernel", run.attention, "flash_attn: auto on Gemma-2: LLaMA-Factory uses "
                   "FlashAttention-2 if flash-attn is installed on the training machine, else eager attention",
                   "flash_attn: fa2 (or disabled) in the YAML, or --env FILE listing flash-attn", c.base, alts)]


def _unsloth_release(c: _Seen) -> list[Assumption]:
    """``use_unsloth`` in pt/sft on a type unsloth runs through its own forward, with no unsloth release of the
    training machine: the loss stays charged as transformers' (run/savers.py `_unsloth_loss` says why), and the
    forms of three release ranges are weighed (run/savers.py `unsloth_release_paths`): the fused loss of 2024.11.8
    and later, the in-place half-precision loss of 2024.8-2024.11.7 (analyzers/memory/logits.py `unsloth_terms`), and
    that loss with the whole-window RoPE tables of every layer before 2024.8 (weights.py `unsloth_rope_bytes`)."""
    from finetune_doctor.run.savers import UNSLOTH_OWN_FORWARD, unsloth_release_paths

    run = c.run
    if (not run.use_unsloth or run.stage not in ("pt", "sft") or run.arch.model_type not in UNSLOTH_OWN_FORWARD
            or "unsloth" in {p for p, _v, _s in c.asm.stack_sources}):
        return []
    alts = [(label, (lambda v=v: c.judge(run.with_(**unsloth_release_paths(c.cfg, run.arch, v)), c.hw, c.tokens)))
            for label, v in (("2024.11.8 or later (fused loss, logits in chunks)", (2024, 11, 8)),
                             ("2024.8-2024.11.7 (whole half-precision logits, in-place loss)", (2024, 8)),
                             ("before 2024.8 (in-place loss, whole-window RoPE tables in every layer)", (2024, 7)))]
    return [_weigh("unsloth-version", "not known: the loss charged as transformers' (whole logits, fp32 upcast)",
                   "use_unsloth and no unsloth version of the training machine; a long-context unsloth run that ran "
                   "out (LlamaFactory#3638) needs more than its release's own loss gives",
                   "--env FILE with `pip freeze` of the training machine", c.base, alts)]


def _defaults(c: _Seen) -> list[Assumption]:
    """Values LLaMA-Factory or transformers fill in for sure (recorded with their effect, not open), and the host
    RAM an offloading run is not judged against."""
    run, hw, cfg, out = c.run, c.hw, c.cfg, []
    if run.eval_during_training and "per_device_eval_batch_size" not in cfg:
        alts = []
        if run.micro_batch != run.eval_micro_batch:
            alts.append((f"{run.micro_batch} (the training micro batch)",
                         lambda: c.judge(run.with_(eval_micro_batch=run.micro_batch), hw, c.tokens)))
        out.append(_weigh("eval-batch", run.eval_micro_batch, "per_device_eval_batch_size is not set: "
                          "transformers' TrainingArguments default (8) evaluates 8 samples per micro batch",
                          "set per_device_eval_batch_size in the YAML", c.base, alts))
    if "per_device_train_batch_size" not in cfg and run.micro_batch != 1:
        out.append(_weigh("train-batch", run.micro_batch, "per_device_train_batch_size is not set: transformers' "
                          "TrainingArguments default", "set per_device_train_batch_size in the YAML", c.base,
                          [("1", lambda: c.judge(run.with_(micro_batch=1), hw, None))]))
    if "cutoff_len" not in cfg:
        out.append(_weigh("cutoff-len", run.seq_len, "cutoff_len is not set: LLaMA-Factory's DataArguments "
                          "default (data_args.py)", "set cutoff_len in the YAML", c.base, []))
    from finetune_doctor.run.savers import liger_offerable, triton_supported

    if c.base in ("oom", "at-risk") and liger_offerable(run) and triton_supported(hw):
        # the remedy planner may prescribe enable_liger_kernel (engine/planners.py `liger_candidate`): whether the
        # training machine can import liger-kernel is not in any input (LF's env block does not list it). Listed
        # only where liger moves the peak: an assumption carries its effect (trial 2: a full run whose peak is the
        # optimizer step, logits 0.0, listed it as noise)
        moved = _liger_moves(c)
        if moved is not None:
            out.append(_weigh("liger-kernel", "installable on the training machine", "a remedy may enable "
                              "enable_liger_kernel, which would take the peak from "
                              f"{moved[0]:.1f} to {moved[1]:.1f} GiB; liger-kernel is an optional package "
                              "(LLaMA-Factory's requirements/liger-kernel.txt: liger-kernel>=0.6.3) and no input "
                              "says whether it is installed",
                              "pip install \"liger-kernel>=0.6.3\" on the training machine", c.base, []))
    offload = run.offload_optimizer == "cpu" or run.offload_param == "cpu" or bool(getattr(run, "fsdp_offload", False))
    if offload and (hw is None or hw.host_ram_gib is None):
        out.append(_weigh("host-ram", "unknown", "CPU offload keeps states in host RAM, and the training machine's "
                          "RAM was not given: host OOM is not judged", "--host-ram SIZE (e.g. 744GB)",
                          c.base, []))
    return out


def _liger_moves(c: _Seen) -> tuple[float, float] | None:
    """(total as configured, total with ``enable_liger_kernel: true``) in GiB when liger lowers the peak by at least
    `LIGER_MOVES_GIB`, else None. The liger run is re-resolved by the assembly's `run_after` (the remedy planner asks
    for the same edit set, so it is resolved once) and weighed with the same judge. Only asked where a verdict
    exists (``oom``/``at-risk``), so the judge weighs."""
    if c.asm.memory is None or not _on(c.fresh):
        return None
    res = c.fresh(c.asm.run_after([("config", "enable_liger_kernel", True, False)]), c.hw, c.tokens)
    before = c.asm.memory.total
    return (before, res[0]) if res is not None and before - res[0] >= LIGER_MOVES_GIB else None


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


def _launch(asm: Any, run: Any, hw: Hardware | None, tokens: int | None, judge: Judge, fresh: Judge,
            rerun: Callable[..., Any], base_verdict: str | None) -> list[Assumption]:
    """Over several ranks: the launcher (facts/kinds.py `launcher_assumption`, the one producer, asked again with
    the resolved run) weighed, and the rank count, when the launch was not read."""
    from finetune_doctor.facts.kinds import ACCELERATE_FSDP, BY_HAND, DATA_PARALLEL, launcher_assumption

    if run.world_size <= 1:
        return _gpu_count(asm, run, hw, tokens, judge, rerun, base_verdict)
    base = launcher_assumption(asm, run.world_size, run.engine, bool(run.deepspeed), run)
    if base is None:
        return []
    thunks: dict[str, Callable[[], tuple[float, str | None] | None]] = {
        BY_HAND: lambda: judge(run.with_(launcher="torchrun"), hw, tokens),
        DATA_PARALLEL: lambda: _data_parallel(asm, run, hw, tokens, judge, fresh, rerun)}
    if ACCELERATE_FSDP in base.alternatives:
        from finetune_doctor.readers.config.accelerate import AccelerateConfig
        from finetune_doctor.run.engines import LaunchInputs

        acc = AccelerateConfig(path="<assumed FSDP launch>", values={}, positions={}, distributed_type="FSDP",
                               num_processes=run.world_size, num_machines=run.nnodes)
        thunks[ACCELERATE_FSDP] = lambda: (fresh(rerun(launch=LaunchInputs(acc, None)), hw, tokens)
                                           if _on(fresh) else None)
    weighed = _weigh(base.name, base.value, base.source, base.resolve_with, base_verdict,
                     [(label, thunks.get(label)) for label in base.alternatives], _not_deciding(base.name))
    src = "every GPU of --gpu on each node" if hw is not None and hw.source == "flag" else "the GPUs seen here"
    return [weighed, _weigh("world-size", run.world_size, f"{src} (llamafactory-cli sets NPROC_PER_NODE to the "
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
    read (facts/config.py `_assumptions`); [] when the count was read or the run does not shard."""
    from finetune_doctor.facts.kinds import launcher_assumption

    base = launcher_assumption(asm, run.world_size, run.engine, bool(run.deepspeed), run)
    if base is None or hw is None or not sharded(run) or not _on(judge):
        return []
    nodes = max(hw.nnodes or 1, 1)

    def at(n: int) -> tuple[float, str | None] | None:
        more = replace(hw, num_gpus=n * nodes)
        return judge(rerun(hw=more), more, tokens)

    alts: list[tuple[str, Callable[[], tuple[float, str | None] | None] | None]] = [
        (f"torchrun over {n} GPUs per node", (lambda n=n: at(n))) for n in GPU_COUNTS]
    alts += [(label, None) for label in base.alternatives if label != "torchrun over several GPUs"]
    resolve = f"--gpu NxCARD such as --gpu 8x{hw.gpu or 'CARD'}, --launch FILE or --accelerate-config FILE"
    return [_weigh(base.name, base.value, base.source + "; the run shards over its ranks, so each count is sized",
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
        if not _on(fresh):
            return None
        if asm.doc.values.get("shift_attn"):   # its version gate (run/savers.py) is the other transformers effect
            run, judge = rerun({"transformers": DATA_PARALLEL_TRANSFORMERS}), fresh
        else:
            # the one effect of that transformers on the run (run/resolve.py `_optimizer`), without re-resolving it:
            # a check on the training machine's config should stay under a second (issue #21)
            run = run.with_(shifted_logits_copy=True)
    return judge(run.with_(world_size=1, gpus_per_node=1, launcher="python", dp_replicas=run.world_size),
                 hw, tokens)


def fold(verdict: str | None, total: float, assumptions: list[Assumption]) -> tuple[str | None, Assumption | None]:
    """The verdict across the plausible range of every open assumption: `verdict` when every evaluated alternative
    of every open assumption agrees with it, else ``at-risk`` with the deciding assumption (of the open ones whose
    alternatives change the verdict, the one that moves the predicted `total` (GiB) the most). An ``at-risk``
    verdict stays at-risk; None (no card) stays None."""
    if verdict is None:
        return None, None
    movers = [a for a in assumptions if a.name not in NOT_OPEN and a.moves_verdict]
    if not movers or verdict == "at-risk":
        return verdict, None
    movers.sort(key=lambda a: -max((abs(v - total) for v in a.effect_gib.values()), default=0.0))
    return "at-risk", movers[0]


def deciding_facts(a: Assumption | None, total: float, verdict: str | None) -> dict[str, Any] | None:
    """The ``mem.deciding_assumption`` fact: the assumption, its first alternative whose verdict differs from
    `verdict` (the one under the assumed value) and that alternative's total (GiB)."""
    if a is None:
        return None
    shown = _not_deciding(a.name)
    flip = next((k for k, v in a.effect_verdict.items() if v != verdict and k not in shown), None)
    return {"name": a.name, "value": str(a.value), "source": a.source, "alternative": flip,
            "alternative_total_gib": a.effect_gib.get(flip) if flip else None,
            "alternative_verdict": a.effect_verdict.get(flip) if flip else None, "verdict_assumed": verdict,
            "total_gib": total, "resolve_with": a.resolve_with}


def token_budget(run: Any, hw: Hardware | None, counts: Any = None) -> dict[str, Any] | None:
    """The largest sequence length (tokens per sample, ≤ cutoff_len) at which the run still fits its card with
    p_oom_model ≤ 5 % (the ``fits`` verdict of analyzers/memory/uncertainty.py), for training and for the first evaluation;
    None without a card or for a packed run (every sequence is cutoff_len long).

    Bisection over `run.seq_len` (the memory model is monotone in it): training is judged with evaluation off,
    evaluation from the evaluation moment alone (its tensor peak × (1 + the allocator reserve share) + the
    runtime, analyzers/memory/moments.py; the verdict on the reserve the run needs, reserve.py `needed_fraction`).
    Returns ``{"cutoff_len", "budget_gib", "train": {"tokens_per_sample",
    "tokens_per_micro_batch", "micro_batch", "fits_at_cutoff", "total_gib", "card_tokens_per_sample"}, "eval": {...}
    or None}``; ``total_gib`` is the estimate at ``tokens_per_sample`` (GiB, None at 0 tokens) and
    ``card_tokens_per_sample`` the longest sequence whose point estimate of what it needs is under the budget (no
    error band): the gap between the two limits is what the prediction's error takes. ``tokens_per_sample``
    is the longest sequence (for DPO/RM/KTO each of the pair's sequences; the collator pads a micro batch to its
    longest, so one long sample sets the whole batch) and 0 when even one-token samples do not fit.
    """
    budget = _budget(hw)
    if budget is None or run.packing:
        return None
    from finetune_doctor.analyzers.memory import estimate, uncertainty
    from finetune_doctor.facts.mem import shape_of

    per_seq = 2 if run.pairwise else 1

    def train_at(n: int) -> tuple[float, str, float]:
        est = estimate(run.with_(seq_len=n, eval_during_training=False), hw, counts=counts)
        verdict = uncertainty.assess(est.total, budget, est.method, shape_of(est), est.need).verdict
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
        return total, uncertainty.assess(total, budget, est.method, shape_of(est), need).verdict, need

    def largest(at: Callable[[int], tuple[float, str, float] | None], batch: int) -> dict[str, Any]:
        n = _bisect(lambda k: (at(k) or (0.0, "fits", 0.0))[1] == "fits", run.seq_len)
        # the same search against the card itself: the longest samples whose point estimate is under the budget.
        # Where it is far above `n`, the prediction's error band, not the card, sets the limit (trial 7, c01: 18 GiB
        # "fits" at 512 tokens on a 39.4 GiB card, yet the limit is 726 tokens)
        card = _bisect(lambda k: (at(k) or (0.0, "", 0.0))[2] <= budget, run.seq_len)
        res = at(n) if n else None
        return {"tokens_per_sample": n, "tokens_per_micro_batch": n * batch * per_seq,
                "micro_batch": batch, "fits_at_cutoff": n >= run.seq_len,
                "total_gib": round(res[0], 2) if res else None, "card_tokens_per_sample": card}

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
            lengths_prior: Any = _FROM_TABLE) -> list[tuple[float, float, float | None]]:
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
    ("samples of N tokens") taking its share (uncertainty.py `length_weights`)."""
    from finetune_doctor.analyzers.memory import uncertainty

    weight = weight or uncertainty.assumed_weight
    prior = uncertainty.lengths_prior() if lengths_prior is _FROM_TABLE else lengths_prior
    budget = _budget(hw)
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
        movers.append((max(abs(math.log(r)) + (abs(math.log(budget / b)) if b and budget else 0.0)
                           for _w, r, b in opts), opts))
    movers.sort(key=lambda m: -m[0])
    options = [o for _m, o in movers[:MIXTURE_MAX_ASSUMPTIONS]]
    out: list[tuple[float, float, float | None]] = []
    for combo in itertools.product(*options):
        w, ratio, b = 1.0, 1.0, budget
        for cw, cr, cb in combo:
            w *= cw
            ratio *= cr
            b = cb if cb is not None else b
        out.append((w, total * ratio, b))
    return out


def _length_options(a: Assumption, alts: list[tuple[str, float]], total: float,
                    prior: Any) -> list[tuple[float, float, float | None]] | None:
    """The mixture options (weight, total ratio, None) of a ``sample-lengths`` assumption under the prior on the
    longest sample, or None when the constant weight applies (another assumption, no prior, or labels that do not
    name a length)."""
    if a.name != "sample-lengths" or prior is None or not alts:
        return None
    toks = {}
    for label, _t in alts:
        m = _SAMPLE_LABEL.match(str(label))
        if m is None:
            return None
        toks[label] = int(m.group(1))
    from finetune_doctor.analyzers.memory.uncertainty import length_weights

    w0, ws = length_weights(toks.values(), prior)
    opts: list[tuple[float, float, float | None]] = [(w0, 1.0, None)] if w0 > 0 else []
    opts += [(ws[toks[label]], t / total, None) for label, t in alts if ws[toks[label]] > 0]
    return opts
