"""What a run that is non-finite or dead from its very first step points to when it is DPO or KTO with its own
reference model under FSDP: LLaMA-Factory's trainers before 0.9.5 prepared that reference model for DeepSpeed only.

Facts (LLaMA-Factory wheels from PyPI and the PR):

* A separate reference model exists for ``stage: dpo`` (``use_ref_model`` = dpo and ``pref_loss`` not orpo/simpo,
  hparams/finetuning_args.py:574 at 0.9.5) and ``stage: kto``, unless ``finetuning_type: lora`` without
  ``ref_model`` (then ``create_ref_model`` returns None and the policy with its adapters off is the reference,
  train/trainer_utils.py:116-148 at 0.9.5).
* 0.9.0 (train/dpo/trainer.py:86-94) up to 0.9.4 (train/dpo/trainer.py:94-102, train/kto/trainer.py:96-104): the
  reference model goes through ``prepare_deepspeed`` under DeepSpeed, else through
  ``accelerator.prepare_model(ref_model, evaluation_mode=True)``, which under FSDP neither wraps nor places it
  (the trl fix for the same fault: huggingface/trl#2539, issue trl#1147 "ref_model was not placed on cuda").
* LLaMA-Factory PR #10127 (merged 2026-01-22, "add dpo/kto fsdp fsdp2 support", fixes #10126 "Full-parameter
  training DPO/KTO, using FSDP results in abnormal loss": grad_norm nan, loss 0) adds the FSDP and FSDP2 branches;
  0.9.5 ships them (train/dpo/trainer.py:95-109). A ``0.9.5.dev0`` git install may predate the merge.
  LF#7641 ("DPO + FSDP") is the same fault dying in the first step instead.

`ref_model_fsdp(cx, version)` returns None when the run is known not to be this case (another stage, LoRA without
a ref_model, DeepSpeed, a release with the fix), else a dict: ``certain`` (stage, reference model, FSDP and a
release without the fix all read from the inputs), ``text`` (what it establishes, naming what is unread and the
input that reads it) and ``fix``.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import Evidence
from finetune_doctor.numbers import is_prerelease, parse_version

FIX_RELEASE = (0, 9, 5)


def _stage(cx: RunContext, log_stage: str | None, log_source: str) -> tuple[str | None, str]:
    st = cx.run.get("stage") if cx.cfg else None
    st = st or cx.cfg.get("stage")
    if st:
        return str(st), "config"
    if log_stage:
        return log_stage, log_source
    return None, ""


def _release_state(version: str | None) -> str:
    """'fixed', 'unfixed', 'maybe' (a 0.9.5 development build) or 'unknown' for an LF version string."""
    got = parse_version(version, suffix=True) if version else None
    if not got or len(got[0]) < 2:
        return "unknown"
    nums = got[0] + (0,) * (3 - len(got[0]))
    if nums > FIX_RELEASE:
        return "fixed"
    if nums == FIX_RELEASE:
        return "maybe" if is_prerelease(got[1]) else "fixed"
    return "unfixed"


def ref_model_fsdp(cx: RunContext, version: tuple[str, str] | None, log_stage: str | None = None,
                   log_source: str = "traceback") -> dict[str, Any] | None:
    """The DPO/KTO-reference-model-under-FSDP explanation of a run broken from its first step (module docstring),
    or None. `version`: (LLaMA-Factory version, where it was read) or None; `log_stage`: the stage the logs name
    when no config was given, `log_source` how (a traceback frame ``run_dpo``, the metric keys of trl's preference
    trainers)."""
    stage, stage_src = _stage(cx, log_stage, log_source)
    if stage not in ("dpo", "kto"):
        return None   # unknown too: a NaN at step 1 is not blamed on a stage nothing names
    if stage == "dpo" and cx.cfg.get("pref_loss") in ("orpo", "simpo"):
        return None   # reference-free losses: no reference model is built
    ft = cx.run.get("finetuning_type") or cx.cfg.get("finetuning_type")
    if cx.cfg and not ft:
        ft = "lora"   # FinetuningArguments' default
    if ft == "lora" and not cx.cfg.get("ref_model"):
        return None
    engine = cx.run.get("engine")
    if cx.run.get("deepspeed") or cx.cfg.get("deepspeed") or engine in ("deepspeed", "megatron"):
        return None
    fsdp = bool(cx.run.get("fsdp")) or engine == "fsdp"
    state = _release_state(version[0] if version else None)
    if state == "fixed":
        return None
    unread = []
    what = []
    what.append(f"{stage.upper()} (from the {stage_src})")
    if ft:
        what.append("its own reference model (" + (f"ref_model: {cx.cfg['ref_model']}" if cx.cfg.get("ref_model")
                                                   else f"finetuning_type {ft}") + ")")
    else:
        unread.append("whether a separate reference model is built (give --config)")
    if fsdp:
        what.append(f"under FSDP (from the {cx.run.get('fsdp_source') or 'config'})")
    else:
        unread.append("the launcher (FSDP or not: give --accelerate-config)")
    if state == "unfixed":
        what.append(f"on LLaMA-Factory {version[0]} ({version[1]}), before the fix")
    elif state == "maybe":
        what.append(f"on LLaMA-Factory {version[0]} ({version[1]}), a development build that may predate the fix")
    else:
        unread.append("the LLaMA-Factory release (give --env or --llamafactory)")
    certain = not unread and state == "unfixed"
    head = ("this is the known fault of LLaMA-Factory's DPO/KTO trainers up to 0.9.4: " if certain else
            "it matches the known fault of LLaMA-Factory's DPO/KTO trainers up to 0.9.4 — ")
    body = ("under FSDP they hand the reference model to accelerate's prepare_model(evaluation_mode=True), which "
            "neither wraps nor places it for FSDP: NaN from the first step (LLaMA-Factory#10126, fixed by PR #10127 "
            "in 0.9.5) or a crash in it (#7641)")
    text = head + body + (f"; read: {', '.join(what)}" if what else "")
    if unread:
        text += f"; not read: {', '.join(unread)}"
    return {"certain": certain, "text": text, "stage": stage, "fsdp": fsdp, "release_state": state,
            "fix": "upgrade LLaMA-Factory to 0.9.5 or later (PR #10127), or run this stage under DeepSpeed, "
                   "whose reference-model path those releases prepare"}


# LLaMA-Factory's workflow entry of each stage with a reference model (train/dpo/workflow.py run_dpo,
# train/kto/workflow.py run_kto; the frame tuner.py _training_function calls)
_STAGE_FRAMES = {"run_dpo": "dpo", "run_kto": "kto"}


def stage_of_traceback(ev: Evidence) -> str | None:
    """The stage a logged traceback's LLaMA-Factory frames name (``run_dpo`` -> dpo), or None."""
    for f in ev.files:
        for n in f.notices:
            if n.kind != "traceback":
                continue
            for pkg, func, _base in (n.value or {}).get("pkgs") or ():
                if pkg == "llamafactory" and func in _STAGE_FRAMES:
                    return _STAGE_FRAMES[func]
    return None
