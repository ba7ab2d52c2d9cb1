"""The story of a run from its leftovers: one ordered timeline, and the ``ev`` facts the postmortem rules judge.

Input: the `Evidence` of the readers and, when the run's config is known, the fact namespaces of
facts/config.py (cfg, run, model, hw, mem, ds). Output: a `Timeline` with `TimelineEvent` values
(``source`` = ``file:line``; for event files the number is the record) and the ``ev`` namespace (shape in
evidence.py, declared in facts/ev.py).

The work is split along the data: analyzers/postmortem/curves.py builds one curve per metric, analyzers/postmortem/detectors.py finds
what the curves and loss-scale lines show, analyzers/postmortem/causes.py and analyzers/postmortem/oomcause.py name the causes,
analyzers/postmortem/ranks.py joins the ranks and nodes of a distributed run, and analyzers/postmortem/failures.py reads device and
kernel errors. This module runs them in order and orders the events.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from finetune_doctor.analyzers.postmortem.nanfirst import words_family
from finetune_doctor.analyzers.postmortem.netlead import network_lead
from finetune_doctor.analyzers.postmortem import causes, detectors, dictsteps, failures, health, hostalloc, ranks
from finetune_doctor.analyzers.postmortem.collectives import barrier_facts, nccl_error_facts, nccl_facts
from finetune_doctor.analyzers.postmortem.curves import Curve, build_curves, curve_summary, fmt, location_of
from finetune_doctor.analyzers.postmortem.gaacc import ga_loss_facts
from finetune_doctor.analyzers.postmortem.detectors import spikes
from finetune_doctor.analyzers.postmortem.dpcause import data_parallel_facts
from finetune_doctor.analyzers.postmortem.mmcause import image_cut
from finetune_doctor.analyzers.postmortem.nativewords import native_words
from finetune_doctor.analyzers.postmortem.saidstack import stated_releases
from finetune_doctor.analyzers.postmortem.oomcause import oom_facts
from finetune_doctor.analyzers.postmortem.refusal import refused_keys, undefined_dataset
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.analyzers.postmortem.said import said_facts, said_image_cut
from finetune_doctor.evidence import Evidence, FileRead, src
from finetune_doctor.types import TimelineEvent

TIMELINE_CAP = 200
EXTRA_KINDS = ("first_loss", "loss_zero", "grad_norm_constant", "exception", "warning", "warmup_end", "finished",
               "cuda_error", "gpu_xid", "loss_scale_abort", "host_alloc")
"""Timeline kinds beyond DESIGN.md's eight: an abnormal first loss, the start of a loss stuck at 0, a constant
grad norm, a crash with a Python exception, a framework warning that matters, the end of LR warm-up, a normal end
of training, a CUDA runtime/library error, a kernel Xid line, DeepSpeed's minimum-loss-scale abort and a host
allocation that failed in-process."""

__all__ = ["Timeline", "analyze", "spikes", "build_curves", "Curve"]


@dataclass(frozen=True)
class Timeline:
    """What `analyze` returns: ordered events, the ``ev`` facts and the merged curves (for plots)."""

    events: tuple[TimelineEvent, ...]
    facts: dict[str, Any]
    curves: dict[str, Curve] = field(default_factory=dict)
    reads: tuple[FileRead, ...] = ()


class _Events:
    """Timeline events keyed by step (else by wall-clock order of appearance), stable for equal keys."""

    def __init__(self) -> None:
        self.items: list[tuple[float, int, TimelineEvent]] = []

    def add(self, step: int | None, kind: str, detail: str, source: str | None, when: float | None = None) -> None:
        key = float(step) if step is not None else (when if when is not None else math.inf)
        self.items.append((key, len(self.items), TimelineEvent(step, kind, detail, source)))

    def at(self, step: int | None, kind: str, detail: str, loc: dict[str, Any] | None,
           when: float | None = None) -> None:
        self.add(step, kind, detail, src(loc["file"], loc["line"]) if loc else None, when)

    def ordered(self) -> tuple[TimelineEvent, ...]:
        self.items.sort(key=lambda e: (e[0], e[1]))
        return tuple(e[2] for e in self.items[:TIMELINE_CAP])


FINISHED = {None: "the training loop finished (final metrics were logged)",
            "run-end": "the training loop finished (LLaMA-Factory's end-of-training output follows it)"}
"""The timeline's words for a finished loop, by the notice that says so (causes.LOOP_OVER)."""


def analyze(ev: Evidence, facts: dict[str, Any] | None = None,
            versions: dict[str, tuple[str, str]] | None = None) -> Timeline:
    """Build the timeline and the ``ev`` facts (their shape: finetune_doctor/evidence.py, "The ``ev`` fact
    namespace"). `facts` are the config-side namespaces (cfg, run, model, hw, mem, ds), or None when the run's
    config is unknown; log statements (world size, DeepSpeed stage, parameter counts) fill in. `versions`
    ({package: (version, where)}, from ``--transformers`` / ``--torch`` / ``--env``) outrank the versions a log
    prints when a crash is explained.
    """
    cx = RunContext(facts, ev)
    cx.given_versions = dict(versions or {})
    curves = build_curves(ev, cx.logging_steps())
    events = _Events()
    out: dict[str, Any] = {}
    total = next((f.total_steps for f in ev.files if f.total_steps), None) or cx.log.get("total_steps")
    out["dict_steps"] = dictsteps.place(curves, ev, dictsteps.hints(cx.cfg, cx.log, total))
    trained = _outline(ev, cx, curves, out)
    stages: tuple[Callable[..., None], ...] = (_schedule, _scale, _numerics, _warnings, _nan, _memory,
                                               _distributed, _kills, _end)
    for stage in stages:
        stage(ev, cx, curves, out, events, trained)
    tl = events.ordered()
    out["events"] = [e.as_dict() for e in tl]
    out["has_metrics"] = bool(curves.get("loss") is not None and len(curves["loss"]))
    # a loss that follows gradient accumulation (gaacc.py): log evidence, before the words are weighed
    out["ga_loss"] = ga_loss_facts(ev, cx.given_versions, out.get("stack"))
    out["image_cut"] = image_cut(ev)
    out["said"] = said_facts(ev, out)
    out["image_cut"] = out["image_cut"] or said_image_cut(out["said"])
    out["basis"] = "words" if out["said"] else "log"
    # a dataset that gave no sample, and what says so: LLaMA-Factory's own check ended the run (samplecause.py,
    # the crash cause `no-samples`), or the user's words (said.py); the no-valid-samples rule's case
    cause = ((out.get("crash") or {}).get("cause") or {}).get("kind")
    out["no_samples"] = ("log" if out["basis"] == "log" and cause == "no-samples" else
                         "words" if (out["said"] or {}).get("symptom") == "no-samples" else None)
    # LLaMA-Factory's start-up refusal of the config in that exception: the lint rules' items (refusal.py)
    out["refused_keys"] = refused_keys(out.get("crash"))
    out["undefined_dataset"] = undefined_dataset(out.get("crash"))
    return Timeline(tl, out, curves, tuple(f.read for f in ev.files) + tuple(ev.skipped))


def _outline(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any]) -> bool:
    """Files, steps, model and world facts; returns whether any training step is known to have run."""
    loss, gn, lr = curves.get("loss"), curves.get("grad_norm"), curves.get("learning_rate")
    reads = [f.read for f in ev.files] + list(ev.skipped)
    out["files"] = len(reads)
    out["readable"] = sum(1 for f in ev.files if f.read.items or f.read.records or f.series)
    out["unread"] = [r.path for r in reads if not r.complete or r.problems]
    out["nccl_seen"] = next((f"{os.path.basename(x.file)}:{x.line}" for f in ev.files for x in f.facts
                             if x.name == "nccl_line"), None)
    out["loss"] = curve_summary(loss)
    out["grad_norm"] = curve_summary(gn)
    steps_seen = [c.steps[-1] for c in (loss, gn, lr) if c is not None and len(c)]
    last_step = max([s for s in [f.last_step for f in ev.files] if s is not None] + steps_seen, default=None)
    total = next((f.total_steps for f in ev.files if f.total_steps), None) or cx.log.get("total_steps")
    out["steps"] = {"first": loss.steps[0] if loss is not None and len(loss) else None, "last": last_step,
                    "total": total, "logged": len(loss) if loss is not None else 0}
    P, psrc = cx.params()
    world, wsrc = cx.world()
    out["model"] = {"params": P, "params_source": psrc, "trainable": cx.trainable(), "vocab": cx.vocab(),
                    "name": cx.model.get("name") or cx.cfg.get("model_name_or_path")}
    out["world"] = {"value": world, "source": wsrc}
    out["zero_stage"] = cx.zero_stage()
    out["overlap_comm"] = cx.overlap_comm()
    out["stack"] = failures.stack_facts(ev)
    out["data_parallel"] = data_parallel_facts(ev)
    return bool(steps_seen) or last_step is not None


def _schedule(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
              trained: bool) -> None:
    """Restarts, the learning-rate schedule and the first loss."""
    lr, loss = curves.get("learning_rate"), curves.get("loss")
    out["restarts"] = detectors.restarts_of(ev)
    for r in out["restarts"]:
        events.at(r["step"], "restart", r["detail"], r["location"])
    out["lr"] = detectors.lr_facts(lr)
    if out["lr"] and out["lr"].get("warmup_end_step") is not None and lr is not None:
        events.add(out["lr"]["warmup_end_step"], "warmup_end",
                   f"learning rate reaches its peak {fmt(out['lr']['peak'])}", lr.source(out["lr"]["peak_index"]))
    out["first_loss"] = detectors.first_loss_facts(loss, cx)
    fl = out["first_loss"]
    if fl and fl["abnormal"]:
        events.at(fl["step"], "first_loss", f"first loss {fmt(fl['value'])} is {fl['ratio']:.0f}× ln(vocab)="
                  f"{fl['ln_vocab']:.2f}", fl["location"])


def _scale(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
           trained: bool) -> None:
    """DeepSpeed's (and apex's) loss-scale trajectory."""
    overflows = [o for f in ev.files for o in f.overflows]
    aborts = [detectors.abort_step(a, f.overflows) for f in ev.files for a in f.aborts]
    out["scale"] = detectors.scale_facts(overflows, aborts, cx)
    for e in detectors.scale_events(overflows, aborts):
        events.add(*e)


def _numerics(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
              trained: bool) -> None:
    """AMP skips, a loss stuck at 0, a constant grad norm, loss and grad-norm spikes."""
    loss, gn = curves.get("loss"), curves.get("grad_norm")
    fp16_on, _ = cx.fp16()
    # another precision read from the files rules the scaler out; none read leaves it possible (detectors.amp_skips)
    other = cx.cfg.get("bf16") is True or cx.cfg.get("fp16") is False or any(
        d.get("compute_dtype") in ("bfloat16", "float32") for d in (cx.run, cx.log)) or cx.log.get("bf16_enabled")
    amp = detectors.amp_skips(loss, gn, fp16_on, unstated=not fp16_on and not other)
    out["amp_skips"] = amp
    if amp:
        events.at(amp["steps"][0], "loss_scale_drop", f"{amp['count']} step(s) skipped by the {'fp16 GradScaler' if amp['stated'] else 'loss scaler'} "
                  "(grad_norm nan, loss finite, training went on)", amp["location"])
    out["loss_zero"] = detectors.loss_zero_facts(loss, gn)
    out["diverged"] = dv = detectors.diverged(loss, gn, curves.get("learning_rate"))
    if dv:
        events.add(dv["last_step"], "loss_spike", f"loss back to {dv['last']:.4g} from {dv['low']:.4g} at step "
                   f"{dv['low_step']} (diverged)", dv["source"])
    out["grad_const"] = gc = detectors.grad_const_facts(gn, loss)
    out["loss_spikes"], out["loss_spike"] = 0, None
    out["grad_spikes"], out["grad_spike"] = 0, None
    if loss is not None and len(loss) >= 2:
        sp = detectors.curve_spikes(loss, "loss")
        out["loss_spikes"], out["loss_spike"] = len(sp), (sp[0] if sp else None)
        for s in sp[:20]:
            events.add(s["step"], "loss_spike", detectors.spike_text(s, "loss"), s["source"])
    if gn is not None and len(gn) >= 2 and not gc:
        sp = detectors.curve_spikes(gn, "grad_norm")
        out["grad_spikes"], out["grad_spike"] = len(sp), (sp[0] if sp else None)
        if sp:
            # max_grad_norm from the config, else HF's and LLaMA-Factory's default 1.0 (training_args.py)
            mgn = cx.cfg.get("max_grad_norm", 1.0) if cx.cfg else 1.0
            cu = detectors.clipped_unfelt(sp[0], loss, mgn)
            sp[0]["clipped_unfelt"] = cu is not None
            sp[0]["max_grad_norm"] = mgn
            sp[0]["max_grad_norm_source"] = "config" if cx.cfg and "max_grad_norm" in cx.cfg else \
                "HF's default, no config read"
        for s in sp[:20]:
            events.add(s["step"], "grad_norm_spike", detectors.spike_text(s, "grad_norm"), s["source"])


def _warnings(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
              trained: bool) -> None:
    """The attention implementation warning, and whether the learning rate is to blame for an instability."""
    out["attention_warning"] = None
    for f in ev.files:
        for n in f.notices:
            if n.kind == "attention-warning" and out["attention_warning"] is None:
                out["attention_warning"] = {**(n.value or {}), "location": location_of(n.file, n.line), "text": n.text}
                events.add(n.step, "warning", n.text[:160], src(n.file, n.line), when=-1 if not trained else None)


def _nan(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
         trained: bool) -> None:
    """The first non-finite value and its likely cause; the zero-loss and constant-grad events; fp16 facts."""
    loss, gn, lr, epoch = (curves.get(k) for k in ("loss", "grad_norm", "learning_rate", "epoch"))
    fp16_on, fp16_src = cx.fp16()
    if not fp16_on and (out.get("scale") or {}).get("initial") is not None:
        fp16_on = True   # a dynamic loss scale was printed: only fp16 training scales the loss (as in fp16_facts)
    nan = detectors.first_nonfinite(loss, gn)
    amp, lz, gc = out["amp_skips"], out["loss_zero"], out["grad_const"]
    out["lr_high"] = causes.lr_high_facts(cx, lr, nan, out, lz, epoch)
    out["nan"] = None
    out["grad_nan_only"] = g = detectors.grad_nan_only(nan, loss)
    if g:
        events.at(g["step"], "warning", g["detail"], g["location"])
    if nan is not None and not g and not (amp and nan["metric"] == "grad_norm" and nan["step"] in amp["steps"]
                                          and not (lz and lz["with_grad_nan"])):
        out["nan"] = n = causes.nan_cause(nan, out, cx, fp16_on, lr, epoch, words_family(ev))
        events.at(n["step"], "nan", n["detail"], n["location"])
    if lz:
        events.at(lz["start_step"], "loss_zero", f"loss 0.0 for {lz['count']} log(s)"
                  + (" with grad_norm nan (NaN hidden by logging_nan_inf_filter)" if lz["with_grad_nan"] else
                     f" with grad_norm {fmt(lz['grad_norm'])}" if lz["grad_norm"] is not None else ""),
                  lz["location"])
    if gc:
        events.at(gc["first_step"], "grad_norm_constant", f"grad_norm = {gc['value']!r}"
                  + (f" = √{gc['sqrt_k']}" if gc["sqrt_k"] else "") + f" at {gc['count']} logs", gc["location"])
    out["fp16"] = causes.fp16_facts(cx, fp16_on, fp16_src, out)
    out["benign_overflow"] = causes.benign_overflow(out)


def _memory(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
            trained: bool) -> None:
    """CUDA OOM, device and kernel errors."""
    P, _ = cx.params()
    world, _ = cx.world()
    ooms = [o for f in ev.files for o in f.ooms]
    out["oom"] = oom_facts(ooms, cx, P, world, trained, ev) if ooms else None
    if out["oom"]:
        o = out["oom"]
        events.at(o["step"], "oom", o["timeline_text"], o["location"],
                  when=-1 if o["step"] is None and not trained else None)
    out["cuda_error"] = failures.cuda_error_facts(ev, cx)
    if out["cuda_error"]:
        c = out["cuda_error"]
        events.at(c["step"], "cuda_error", c["timeline_text"], c["location"])
    out["xid"] = failures.xid_facts(ev)
    for x in (out["xid"] or {}).get("events", [])[:20]:
        events.at(None, "gpu_xid", x["timeline_text"], x["location"], when=x.get("when"))


def _kills(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
           trained: bool) -> None:
    """Killed processes and GPU recordings."""
    kills = [k for f in ev.files for k in f.kills]
    mems = [m for f in ev.files for m in f.memory]
    # a Python exception or another failure in the files explains a launcher's "Killing subprocess" lines
    traced = bool(kills) and (any(out.get(x) for x in ("oom", "cuda_error", "nccl", "nccl_error")) or any(
        n.kind in ("exception", "traceback") for f in ev.files for n in f.notices) or any(f.aborts for f in ev.files))
    # a failed in-process host allocation is a Python exception with its own fact, not a kill (hostalloc.py)
    out["host_alloc"] = hostalloc.host_alloc_facts(kills, ev, out) if kills else None
    if out["host_alloc"]:
        a = out["host_alloc"]
        events.at(a["step"], "host_alloc", a["timeline_text"], a["location"])
    kills = [k for k in kills if k.kind != "cpu-alloc"]
    # the same without the launchers' wrapper exceptions, which only report the child's end (said.py _WRAPPER_EXC)
    caused = traced and (any(out.get(x) for x in ("oom", "cuda_error", "nccl", "nccl_error")) or any(
        f.aborts for f in ev.files) or any(n.kind == "exception" and not any(
            w in str((n.value or {}).get("cls") or "") for w in ("ChildFailedError", "CalledProcessError"))
        for f in ev.files for n in f.notices))
    out["killed"] = causes.killed_facts(kills, cx, mems, out, traced, caused) if kills else None
    out["killed"] = native_words(out["killed"], ev)   # the fault handler's banner, a trimmed stack (nativewords.py)
    if out["killed"]:
        k = out["killed"]
        k["phase_text"] = causes.after_loop(ev, (k["location"] or {}).get("file"), (k["location"] or {}).get("line"))
        if k["phase_text"]:
            k["step"] = None   # no training step was in progress
        events.at(k["step"], "killed", k["timeline_text"], k["location"])
    out["gpus"] = failures.gpu_record_facts(ev)


def _distributed(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
                 trained: bool) -> None:
    """NCCL timeouts and the ranks of a distributed run (analyzers/postmortem/ranks.py)."""
    out["ranks"] = ranks.rank_facts(ev, out)
    nccl = [n for f in ev.files for n in f.nccl]
    out["nccl"] = nccl_facts(nccl, cx, out, out["ranks"]) if nccl else None
    if out["nccl"] is None:
        out["nccl"] = barrier_facts(ev, cx, out)
    net = network_lead(ev, cx.hw, out["nccl"], trained or bool(out["steps"]["last"]))   # netlead.py (trial 18)
    if net:
        out["nccl"]["likely"] = f"{net} {out['nccl']['likely']}"
    out["nccl_error"] = nccl_error_facts(nccl) if nccl else None
    if out["nccl_error"]:
        e = out["nccl_error"]
        events.at(e["step"], "exception", f"NCCL error: {e['desc']}", e["location"])
    if out["nccl"]:
        n = out["nccl"]
        events.at(n["step"], "nccl_timeout", n["timeline_text"], n["location"])


def _end(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any], events: _Events,
         trained: bool) -> None:
    """Completion and the exception that ended the run."""
    out["completed"] = causes.completed_facts(ev)
    # lowest first: a release the report's words state ("llamafactory 0.9.0 with accelerate 0.34.2",
    # readers/runlogs/statedwords.py; a full version only), then what the logs print, then the flags and --env
    versions = stated_releases(cx.stated)
    versions.update({k: (v["version"], v["source"]) for k, v in (out.get("stack") or {}).items()})
    versions.update(cx.given_versions)
    out["crash"] = causes.crash_facts(ev, out, cx.model_shape(), versions)
    c = out["crash"]
    if c:
        c.setdefault("cause", None)
        c.setdefault("first", False)
        c.setdefault("consequences", "")
        if (c["cause"] is None or c["cause"]["kind"] == "frames-lead") and c["kind"] == "traceback-only" \
                and (c["step"] or 0) <= 1:
            # a DPO/KTO run dead in its first step with its exception line cut: the known reference-model fault
            # under FSDP is a lead, never more than the frames and the inputs support (trial 9, LlamaFactory#7641);
            # it is more specific than the kinds a frame names (framecause.py), so it replaces them
            from finetune_doctor.analyzers.postmortem import refmodel

            stage = refmodel.stage_of_traceback(ev)
            rm = refmodel.ref_model_fsdp(cx, causes._lf_version(cx, out), stage) if stage else None
            if rm is not None:
                c["cause"] = {"kind": "ref-model-fsdp", "text": rm["text"]}
        c["cause_text"] = f" — {c['cause']['text']}" if c["cause"] else ""
    if c and c.get("location") and not c.get("after_loop"):
        got = health.crash_moment(ev, cx, c["location"]["file"], c["location"]["line"], c["step"])
        if got:
            c["phase"], c["where_text"], c["step"] = got
    if c and not (c["explained"] and c["kind"] == "traceback-only"):
        events.at(c["step"], "exception", c["text"], c["location"])
    out["health"] = health.health_facts(ev, cx, curves, out)
    if out["completed"]:
        events.add(out["steps"]["last"], "finished", FINISHED.get(out["completed"]["kind"], FINISHED[None]),
                   out["completed"]["source"])
