"""The training machine's software, assumed when no input names it: torch, transformers and DeepSpeed releases,
unsloth's release, and a DeepSpeed file that is not on this machine (stood in for by LLaMA-Factory's stock file),
each weighed by re-running the memory model (facts/assumebase.py `weigh`). Split from facts/assume.py at the
800-line cap (issue #22); facts/assume.py `collect` gathers these with the other groups.
"""

from __future__ import annotations

from typing import Any, Callable

from finetune_doctor.facts.assumebase import Seen, budget_gib, weigh, weighs
from finetune_doctor.run.stack import FROZEN_HOLD_ABSENT_RELEASE as NO_FROZEN_HOLD_RELEASE
from finetune_doctor.run.stack import FROZEN_HOLD_FROM, FROZEN_HOLD_RELEASE, frozen_hold_shape, named_release_holds
from finetune_doctor.types import Assumption

# the transformers release before the loss stopped copying the shifted logits (run/stack.py
# SHIFTED_LOGITS_COPY_BEFORE = 4.49): the plausible older stack
OLD_TRANSFORMERS = "4.48.3"
STOCK_DS = ("examples/deepspeed/ds_z2_config.json", "examples/deepspeed/ds_z3_config.json",
            "examples/deepspeed/ds_z3_offload_config.json")
LEAK_RELEASE = "0.16.4"     # analyzers/memory/zero3.py RECOMPUTE_LEAK_RELEASE
NO_LINEAR_WRAP_RELEASE = "0.19.3"   # analyzers/memory/zero3.py LINEAR_WRAP_ABSENT_RELEASE
FROZEN_HOLD_LABEL = (f">= {'.'.join(map(str, FROZEN_HOLD_FROM))} "
                     "(ZeRO-3 keeps the frozen layers gathered through backward)")


def stack_assumptions(c: Seen, alt_stack: dict[str, Any] | None) -> list[Assumption]:
    """torch, transformers and DeepSpeed of the training machine, when nothing names them."""
    run, hw, out = c.run, c.hw, []
    given = {p for p, _v, _s in c.asm.stack_sources}
    if "torch" not in given:
        alts = []
        if alt_stack and alt_stack.get("alt_stack_total") is not None:
            total = float(alt_stack["alt_stack_total"])
            from finetune_doctor.analyzers.memory import predictive
            from finetune_doctor.facts.mem import need_ratio, shape_of

            # judged as the reported estimate is: same method, same shape class (the optimizer leaves both), its
            # need in the same ratio to its total
            shape = shape_of(c.asm.memory) if c.asm.memory is not None else "default"
            ratio = need_ratio(c.asm.memory) if c.asm.memory is not None else 1.0
            from finetune_doctor.facts.mem import run_cls

            verdict = (predictive.assess(total, budget_gib(hw), "analytic", shape, total * ratio,
                                          cls=run_cls(run, hw)).verdict if hw else None)
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
        out.append(weigh("torch-version", value,
                          f"no --torch, --env or installed torch of the training machine; {why}",
                          "--torch VERSION, or --env FILE with `llamafactory-cli env` of the training machine",
                          c.base, alts))
    if "transformers" not in given:
        def older() -> tuple[float, str | None] | None:
            if not weighs(c.judge):
                return None   # not weighed: skip the re-resolution too
            old = c.rerun({"transformers": OLD_TRANSFORMERS})
            return c.judge(old, hw, c.tokens) if old.shifted_logits_copy != run.shifted_logits_copy else None

        from finetune_doctor.facts import stackrange, tfmodeltype

        # only a version that loads the model and that the LF release admits (trial 11: "if transformers 4.48.3")
        alts = [(f"transformers {OLD_TRANSFORMERS}", older)] if tfmodeltype.could_run(c.asm, run.arch, OLD_TRANSFORMERS) else []
        ranged = getattr(c.asm, "tf_assumed", None)
        if ranged is not None:   # the LF release is known: pip installs the newest version its range admits (trial 5)
            out.append(weigh("transformers-version", f"{ranged['version']} (the newest LLaMA-Factory "
                              f"{ranged['releases']} accepts)",
                              f"no --transformers or --env transformers; LLaMA-Factory {ranged['releases']} "
                              f"({ranged['release_source']}) requires {ranged['spec']} at start-up "
                              "(extras/misc.py check_dependencies), so its newest allowed version is taken; renamed "
                              "keys are still judged for transformers 4.57-5.x",
                              "--transformers VERSION, or --env FILE", c.base,
                              # the older stack is an alternative only where the range admits newer ones
                              alts if stackrange.satisfies(ranged["version"], f"transformers>{OLD_TRANSFORMERS}") else []))
            return out + _deepspeed_version(c, given)
        out.append(weigh("transformers-version", "a current release (4.57-5.x)",
                          "no --transformers, --env or installed transformers of the training machine: renamed and "
                          "version-only keys are judged for transformers 4.57-5.x, and the loss shifts labels "
                          "instead of copying the logits (transformers >= 4.49)",
                          "--transformers VERSION, or --env FILE", c.base, alts))
    return out + _deepspeed_version(c, given)


def _deepspeed_version(c: Seen, given: set[str]) -> list[Assumption]:
    """DeepSpeed of the training machine when the run uses it and nothing names its version."""
    run, out = c.run, []
    # the LLaMA-Factory release is recorded where the config is read (facts/kinds.py `lf-version`): the keys are
    # judged for the release named, else for every release together (readers/config/lfrelease.py)
    if run.deepspeed and "deepspeed" not in given:
        dsv = getattr(c.asm.ds, "ds_version", None) if c.asm.ds is not None else None
        def alt(release: str, label: str | None = None) -> tuple[str, Callable[[], Any]]:
            return label or release, lambda: c.judge(run.with_(stack_sources=run.stack_sources + (
                ("deepspeed", release, "assumed alternative"),)), c.hw, c.tokens) if weighs(c.judge) else None
        # DeepSpeed 0.16.0-0.16.7 keep every checkpointed layer gathered under non-reentrant checkpointing
        # (analyzers/memory/zero3.py `recompute_leak` reads the release from the run's stack; LEAK_RELEASE is
        # its RECOMPUTE_LEAK_RELEASE, kept here so that lint stays off the memory model); before 0.19.4 a model built
        # outside zero.Init has no linear wrapper, and F.linear keeps each gathered weight (`linear_weights_retained`)
        ds_alts = ([alt(LEAK_RELEASE)] if run.zero_stage == 3 and run.gradient_checkpointing
                   and not run.use_reentrant_gc else [])
        if run.zero_stage == 3 and not (run.zero3_init or run.gradient_checkpointing or run.quantization_bit):
            ds_alts.append(alt(NO_LINEAR_WRAP_RELEASE))
        # from 0.19.3 a reentrant recompute keeps every frozen base layer gathered until backward ends
        # (`frozen_recompute_hold`); the release before it holds one layer at a time. The hold is applied only to a
        # release the inputs name (LLaMA-Factory's deepspeed extra installs <= 0.18.4), so an unnamed DeepSpeed
        # weighs a release with the hold and a named one from 0.19.3 on weighs the release before it
        if frozen_hold_shape(run):
            ds_alts.append(alt(NO_FROZEN_HOLD_RELEASE) if named_release_holds(run) else
                           alt(FROZEN_HOLD_RELEASE, FROZEN_HOLD_LABEL))
        out.append(weigh("deepspeed-version", dsv or "0.19.8 (the newest behaviour the doctor knows)",
                          "installed on this machine, not read from the training machine" if dsv else
                          "no DeepSpeed version of the training machine: defaults and known bugs of 0.19.8 apply "
                          "(not ZeRO-3's frozen-recompute hold of 0.19.3 on: LLaMA-Factory's deepspeed extra installs "
                          "<= 0.18.4)",
                          "--env FILE with `llamafactory-cli env` (or `pip freeze`) of the training machine",
                          c.base, ds_alts))
    return out


def deepspeed_config_assumption(c: Seen) -> list[Assumption]:
    """A DeepSpeed file not on this machine (facts/dsread.py `stand_in_deepspeed`): the stock file used for it,
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
                                                           c.hw, c.tokens) if weighs(c.fresh) else None))
            for alt in stocks if alt != used]
    return [weigh("deepspeed-config", used.rsplit("/", 1)[-1], f"{path} is not on this machine: {why}",
                   f"run where {path} is, or deepspeed=PATH with a copy of it", c.base, alts)]


def unsloth_assumption(c: Seen) -> list[Assumption]:
    """``use_unsloth`` in pt/sft with no unsloth release of the training machine (a type unsloth runs through its
    own forward, or one it hands to FastModel, whose compiled forward fuses the loss from 2025.8): the loss stays charged as transformers' (run/savers.py `_unsloth_loss` says why), and the
    forms of three release ranges are weighed (run/savers.py `unsloth_release_paths`): the fused loss of 2024.11.8
    and later, the in-place half-precision loss of 2024.8-2024.11.7 (analyzers/memory/logits.py `unsloth_terms`), and
    that loss with the whole-window RoPE tables of every layer before 2024.8 (weights.py `unsloth_rope_bytes`)."""
    from finetune_doctor.run.savers import UNSLOTH_OWN_FORWARD, unsloth_release_paths

    run = c.run
    if (not run.use_unsloth or run.stage not in ("pt", "sft")
            or "unsloth" in {p for p, _v, _s in c.asm.stack_sources}):
        return []
    forms = ((("2024.11.8 or later (fused loss, logits in chunks)", (2024, 11, 8)),
              ("2024.8-2024.11.7 (whole half-precision logits, in-place loss)", (2024, 8)),
              ("before 2024.8 (in-place loss, whole-window RoPE tables in every layer)", (2024, 7)))
             if run.arch.model_type in UNSLOTH_OWN_FORWARD else
             # FastModel types: unsloth_zoo's compiled forward (run/savers.py UNSLOTH_COMPILED_FUSED_FROM)
             (("2025.8 or later (the compiled forward's fused loss, logits in chunks)", (2025, 8)),))
    alts = [(label, (lambda v=v: c.judge(run.with_(**unsloth_release_paths(c.cfg, run.arch, v)), c.hw, c.tokens)))
            for label, v in forms]
    return [weigh("unsloth-version", "not known: the loss charged as transformers' (whole logits, fp32 upcast)",
                   "use_unsloth and no unsloth version of the training machine; a long-context unsloth run that ran "
                   "out (LlamaFactory#3638) needs more than its release's own loss gives",
                   "--env FILE with `pip freeze` of the training machine", c.base, alts)]


def unsloth_nf4_assumption(c: Seen) -> list[Assumption]:
    """``use_unsloth`` with ``quantization_bit: 4`` on gpt-oss's MXFP4 checkpoint and no unsloth release of the
    training machine: the run is sized as unsloth's bitsandbytes NF4 copy, which its mapper loads from 2025.8.2
    (run/quantization.py `unsloth_nf4_copy` has the source lines); an older unsloth has no gpt-oss entry and the
    alternative is LF's own load, the MXFP4 experts dequantised to bf16 (every weight at 2 bytes)."""
    from finetune_doctor.run.quantization import UNSLOTH_GPT_OSS_FROM, unsloth_nf4_copy

    run = c.run
    if "unsloth" in {p for p, _v, _s in c.asm.stack_sources} or not unsloth_nf4_copy(run.arch, c.cfg, None):
        return []
    older = ".".join(str(x) for x in (*UNSLOTH_GPT_OSS_FROM[:2], UNSLOTH_GPT_OSS_FROM[2] - 1))
    label = f"unsloth {older} or older: LF's own load, the MXFP4 checkpoint dequantised to bf16"
    alts = [(label, (lambda: c.fresh(c.rerun(stack={"unsloth": older}), c.hw, c.tokens)) if weighs(c.fresh) else None)]
    return [weigh("unsloth-gpt-oss", "unsloth's NF4 copy (unsloth-bnb-4bit): every decoder linear, experts "
                  "included, at 4 bits", "use_unsloth with quantization_bit 4 on an MXFP4 checkpoint and no unsloth "
                  "version of the training machine: unsloth 2025.8.2 and later load their own 4-bit copy",
                  "--env FILE with `pip freeze` of the training machine", c.base, alts)]


def unsloth_rope_build_assumption(c: Seen) -> list[Assumption]:
    """A stated unsloth 2024.7 on a type whose RoPE tables unsloth replaced: builds of that version string before
    2024-07-18 hold every layer's cos/sin tables over the whole window, builds from then on grow them with the
    batch (run/savers.py `UNSLOTH_AMBIGUOUS_ROPE_RELEASE` has the commits); the window form is the value, the later
    builds' form is weighed."""
    from finetune_doctor.run.savers import UNSLOTH_AMBIGUOUS_ROPE_RELEASE
    from finetune_doctor.run.stack import parse_version

    run = c.run
    stated = next((v for p, v, _s in c.asm.stack_sources if p == "unsloth"), None)
    v = parse_version(stated)
    if v is None or tuple(v[:2]) != UNSLOTH_AMBIGUOUS_ROPE_RELEASE or run.unsloth_rope_positions <= 0:
        return []
    label = "a build from 2024-07-18 on (dynamic RoPE, 54dd81de67): tables grow with the longest batch"
    alts = [(label, lambda: c.judge(run.with_(unsloth_rope_positions=0), c.hw, c.tokens))]
    return [weigh("unsloth-rope-build", f"a 2024.7 build before 2024-07-18: every layer holds cos/sin tables for "
                  f"{run.unsloth_rope_positions} positions", f"unsloth {stated} names a version string that spans "
                  "builds with and without the dynamic RoPE change", "--env FILE naming the unsloth commit, or "
                  "unsloth 2024.8 or later", c.base, alts)]


def moe_expert_layout_assumption(c: Seen) -> list[Assumption]:
    """On-the-fly quantization (``quantization_bit``, not through unsloth) of an MoE whose experts the doctor built as
    ``nn.Linear`` modules, with no transformers release of the training machine: under transformers 4.x each expert
    is a linear and is quantized with the rest; under 5.x (LLaMA-Factory's snapshot allows up to 5.8.0,
    pyproject.toml:43) the routed experts are fused 3-D parameters that bitsandbytes, HQQ and EETQ leave 16-bit
    (analyzers/memory/qlora.py `fused_experts_left_unquantized` has the source lines), which the alternative sizes."""
    from dataclasses import replace

    run = c.run
    arch = run.arch
    if (not run.quantization_bit or run.use_unsloth or not arch.is_moe or arch.experts_fused
            or "transformers" in {p for p, _v, _s in c.asm.stack_sources}):
        return []
    label = "transformers 5.x: the routed experts fused 3-D parameters, left 16-bit by on-the-fly quantization"
    fused = replace(arch, experts_fused=True)
    alts = [(label, (lambda: c.fresh(c.rerun(arch=fused), c.hw, c.tokens)) if weighs(c.fresh) else None)]
    return [weigh("moe-expert-layout", "transformers 4.x: every expert an nn.Linear, quantized with the rest",
                  "quantization_bit on a mixture-of-experts model and no transformers version of the training "
                  "machine: transformers 5 stores the experts fused, and bitsandbytes quantizes nn.Linear modules "
                  "only", "--env FILE with `pip freeze` of the training machine", c.base, alts)]
