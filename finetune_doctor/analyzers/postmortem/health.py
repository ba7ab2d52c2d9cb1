"""Run health: a run that never trained, a run that stopped without an error, a run that hangs (issue #25).

Input: the merged curves (analyzers/postmortem/curves.py), the ``ev`` facts built before (steps, completed, crash, oom,
nccl, killed, cuda_error, ranks) and the run context. Output: ``ev.health`` = {no_update, stopped, hang}, each
None or a mapping that names its evidence (``evidence``: the lines or values it rests on, ``location``).

* **No update** (the optimizer changed nothing): every logged ``learning_rate`` is exactly 0 (at least
  MIN_LOGS logs — one 0 is the first warm-up step of HF's schedulers, transformers/optimization.py
  ``get_linear_schedule_with_warmup``: lr = peak·step/warmup, 0 at step 0), or every logged ``grad_norm`` is
  exactly 0.0 (no parameter received a gradient: nothing trainable, or the graph cut before them), or the log
  states 0 trainable parameters (PEFT's "trainable params: 0 || all params: ..."), or torch's "optimizer got an
  empty parameter list" (torch/optim/optimizer.py ``Optimizer.__init__``).
* **Stopped without an error**: the last step is short of the total (``Total optimization steps`` of HF's
  banner, trainer_log's ``total_steps``, or ``max_steps`` of the config) by more than STOP_SHORT of it, the run
  did not complete, and no log shows an error of any kind (exception, OOM, CUDA error, NCCL, a kill line): the
  process was ended from outside (SIGKILL from the kernel's OOM killer, the scheduler, a preemption, a closed
  terminal) — or it still hangs. Only a log read from HF's banner (or LF's trainer_log.jsonl) counts: a paste
  cut anywhere would look the same.
* **Hang**: stopped without an error, and something says the processes were alive but not progressing: the NCCL
  heartbeat monitor ("ProcessGroupNCCL's watchdog got stuck", ProcessGroupNCCL.cpp ``HeartbeatMonitor``), ranks
  whose last steps differ with none failed, or a ``ddp_timeout`` so large (≥ HANG_TIMEOUT_S) that the watchdog
  never fires (LLaMA-Factory's examples set 180000000 s).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import Curve, location_of
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import Evidence
from finetune_doctor.readers.runlogs.userwords import read_words

MIN_LOGS = 3
STOP_SHORT = 0.05
HANG_TIMEOUT_S = 24 * 3600


def _all_zero(c: Curve | None) -> bool:
    return c is not None and len(c) >= MIN_LOGS and all(v == 0.0 for v in c.values)


def _curve_evidence(c: Curve, name: str) -> str:
    return f"'{name}': 0.0 at all {len(c)} logs (steps {c.steps[0]}–{c.steps[-1]})"


def no_update(ev: Evidence, cx: RunContext, curves: dict[str, Curve]) -> dict[str, Any] | None:
    """``ev.health.no_update``: {why, evidence, check, location} or None."""
    lr, gn, loss = curves.get("learning_rate"), curves.get("grad_norm"), curves.get("loss")
    flat = loss is not None and len(loss) >= MIN_LOGS and max(loss.values) - min(loss.values) <= \
        0.01 * max(abs(loss.values[0]), 1e-9)
    loss_txt = (f"; the loss stayed at {loss.values[0]:.4g}" if flat else "") if loss is not None else ""
    if _all_zero(lr):
        assert lr is not None
        both = _all_zero(gn)
        return {"why": "the learning rate was 0 for the whole run"
                + (" and no parameter received a gradient" if both else ""),
                "evidence": _curve_evidence(lr, "learning_rate")
                + (f", {_curve_evidence(gn, 'grad_norm')}" if both and gn is not None else "") + loss_txt,
                "location": location_of(lr.file_at(0), lr.lines[0]),
                "check": "learning_rate in the config (0, or a tiny value printed as 0), a warm-up longer than the "
                         "run (warmup_steps/warmup_ratio vs max_steps), and lr_scheduler_type (constant_with_warmup "
                         "at step 0 of a resumed run)"}
    if _all_zero(gn):
        assert gn is not None
        return {"why": "no parameter received a gradient (grad_norm exactly 0.0 at every log)",
                "evidence": _curve_evidence(gn, "grad_norm") + loss_txt,
                "location": location_of(gn.file_at(0), gn.lines[0]),
                "check": "which parameters are trainable (finetuning_type, lora_target matching no module, "
                         "freeze_trainable_layers), whether the loss reaches them (gradient checkpointing with a "
                         "frozen embedding needs enable_input_require_grads; a detached loss), and the labels "
                         "(all -100 gives loss 0, not a flat loss)"}
    tp = cx.log.get("trainable_params")
    if tp == 0:
        at = cx.log_at.get("trainable_params")
        return {"why": "the log states 0 trainable parameters", "evidence": "trainable params: 0",
                "location": at, "check": "finetuning_type and lora_target / freeze_trainable_modules: they "
                                         "matched no parameter of this model"}
    for f in ev.files:
        for n in f.notices:
            if n.kind == "exception" and "empty parameter list" in n.text:
                return {"why": "the optimizer was built with no parameters", "evidence": n.text[:200],
                        "location": location_of(n.file, n.line),
                        "check": "finetuning_type and the trainable modules: nothing requires a gradient"}
    return None


def _errored(out: dict[str, Any]) -> bool:
    return any(out.get(k) for k in ("crash", "oom", "nccl", "nccl_error", "killed", "cuda_error")) or \
        (out.get("scale") or {}).get("trajectory") == "abort"


def _total(out: dict[str, Any], cx: RunContext) -> tuple[int | None, str | None]:
    """The run's total from a record of the whole run: HF's "Total optimization steps" banner or LLaMA-Factory's
    trainer_log.jsonl (fact ``total_steps``), with max_steps of the config beside a banner. A bar's total alone
    is not enough: a pasted excerpt ends anywhere, and only a log read from its banner ends where the run did."""
    t = cx.log.get("total_steps")
    if isinstance(t, int) and t > 0:
        return t, "the log's total steps"
    ms = cx.cfg.get("max_steps")
    if isinstance(ms, int) and ms > 0 and cx.log.get("micro_batch") is not None:
        return ms, "max_steps of the config"
    return None, None


_PROGRESS_LINE = ("'loss'", "it/s]", "s/it]")


def _said_below(ev: Evidence) -> dict[str, Any] | None:
    """The user's words below the last progress line of a paste (`FileEvidence.text`, kept for short files) read
    by readers/runlogs/userwords.py, when they say it hangs; None otherwise (a long log keeps no text)."""
    for f in ev.files:
        lines = str(f.text or "").splitlines()
        last = max((i for i, ln in enumerate(lines) if any(p in ln for p in _PROGRESS_LINE)), default=None)
        tail = "\n".join(lines[last + 1:]).strip() if last is not None else ""
        said = read_words(tail) if tail and len(tail) <= 4096 else None
        if said and said.get("symptom") == "hang":
            return said
    return None


def _hang_evidence(ev: Evidence, cx: RunContext, out: dict[str, Any]) -> str | None:
    for f in ev.files:
        for n in f.nccl:
            if n.kind == "heartbeat":
                return f"the NCCL heartbeat monitor: {n.text[:160]} ({f.read.path}:{n.line})"
    rk = out.get("ranks") or {}
    steps = {row["rank"]: row.get("last_step") for row in rk.get("table") or [] if row.get("last_step") is not None}
    if len(steps) >= 2 and len(set(steps.values())) > 1 and not rk.get("failed_count"):
        lo = min(steps.values())
        behind = sorted(r for r, s in steps.items() if s == lo)
        return (f"rank(s) {', '.join(map(str, behind[:8]))} stopped at step {lo} while others reached "
                f"{max(steps.values())}, and no rank failed")
    # the user's words beside the last line say it stays there ("停留在这里，gpu利用率100%", "stuck here"): the
    # process was alive and not progressing when they wrote, which is a hang, not a stop (ms-swift#4680's kind)
    said = next((f.said for f in ev.files if f.said and f.said.get("symptom") == "hang"), None) or _said_below(ev)
    if said:
        return f"your words say it stays there (\"{said.get('words')}\"): the processes were alive, not progressing"
    tmo = cx.cfg.get("ddp_timeout")
    if isinstance(tmo, (int, float)) and tmo >= HANG_TIMEOUT_S:
        return (f"ddp_timeout is {int(tmo)} s ({tmo / 86400:.0f} days): a rank stuck in a collective is never "
                "timed out, so a hang leaves exactly this log")
    return None


def stopped(ev: Evidence, cx: RunContext, out: dict[str, Any]) -> tuple[dict[str, Any] | None,
                                                                         dict[str, Any] | None]:
    """(``ev.health.stopped``, ``ev.health.hang``): at most one of them is set."""
    if out.get("completed") or _errored(out):
        return None, None
    last = (out.get("steps") or {}).get("last")
    if last is None:
        hang = _startup_hang(ev)
        return (_data_load_stop(ev) if hang is None else None), hang
    total, tsrc = _total(out, cx)
    bar_only = False
    if not total and isinstance((out.get("steps") or {}).get("total"), int):
        # only a progress bar's total: a paste cut anywhere ends the same way, so the finding says both
        total, tsrc, bar_only = out["steps"]["total"], "the progress bar's total", True
    if not total or total - last <= max(1, STOP_SHORT * total):
        return None, None
    if bar_only and (any(out.get(k) for k in CURVE_FINDINGS) or (out.get("first_loss") or {}).get("abnormal")):
        return None, None   # a cut paste is a weaker reading than what the curves show: leave them the diagnosis
    where = next((f.read.path for f in reversed(ev.files) if f.read.kind == "text-log"), None)
    pct = round(100 * last / total, 1)
    d = {"last_step": last, "total": total, "total_source": tsrc, "percent": pct, "bar_only": bar_only,
         "location": location_of(where, None) if where else None,
         "lead": (f"The log ends at step {last} of {total} ({pct}%, total from {tsrc}) without an error, a "
                  "traceback, an exit line or the final metrics. Only the bar says how long the run was meant to "
                  "be, so a log or paste cut there reads the same: give the whole output (the lines after this "
                  "point, or the file the run wrote) if it goes on. If this is where the output really ends, the "
                  "run was ended from outside (the kernel's OOM killer, the scheduler's time or memory limit, a "
                  "preemption, a closed terminal or ssh session), or it is still hung."
                  if bar_only else
                  f"The run stopped at step {last} of {total} ({pct}%, total from {tsrc}) without an error, a "
                  "traceback or an exit line: it was ended from outside (the kernel's OOM killer, the scheduler's "
                  "time or memory limit, a preemption, a closed terminal or ssh session), or it is still hung.")}
    if bar_only:
        return d, None
    hang = _hang_evidence(ev, cx, out)
    if hang:
        # shown: the logs themselves show processes alive and stuck (the heartbeat monitor, ranks at different
        # steps with none failed); a huge ddp_timeout only explains why nothing was printed, and a paste cut
        # there reads the same (pipeline/postmortem.py makes such a hang a warning, trial 12)
        shown = not hang.startswith(("ddp_timeout is ", "your words say"))   # words allow it, as a timeout does
        return None, {**d, "evidence": hang, "shown": shown,
                      "lead": f"Progress stopped at step {last} of {total} with no error and "
                      f"no exit, and {hang}: the run hangs (a rank stuck in a collective or in data loading)",
                      "more": ", and set a ddp_timeout short enough for the watchdog to name the stuck collective"}
    return d, None


CURVE_FINDINGS = ("loss_spike", "grad_spike", "nan", "diverged", "loss_zero", "grad_const", "scale", "lr_high")
"""``ev`` facts of what the curves show; a log whose length only a progress bar gives is not called stopped
beside one of them (the postmortem's first finding should be the stronger evidence)."""


STARTUP_WHERE = {
    "deepspeed": ("DeepSpeed's process-group set-up", "it hangs at process-group set-up, waiting for a rank that "
                  "never joined (a wrong or busy master port, e.g. main_process_port in the accelerate config; "
                  "MASTER_ADDR not reachable from every node; more processes launched than the GPUs or nodes "
                  "that start)"),
    "llamafactory": ("LLaMA-Factory's per-rank line, printed once the process group is up", "it hangs in the first "
                     "collective or barrier after set-up (a rank that stopped or never got there; GPUs without "
                     "working peer-to-peer access, where NCCL_P2P_DISABLE=1 is the usual test)"),
    "nccl": ("NCCL's communicator set-up (NCCL INFO lines)", "it hangs inside NCCL's set-up or first collective "
             "(peer-to-peer or network transport that never connects: test with NCCL_P2P_DISABLE=1, and "
             "NCCL_IB_DISABLE=1 on machines without InfiniBand; a firewall between nodes)"),
}
"""What each start-up line the log can end on means (readers/runlogs/logparse.py ``_dist_init``)."""


def _startup_hang(ev: Evidence) -> dict[str, Any] | None:
    """A log that ends on a distributed set-up line (readers/runlogs/logparse.py ``_dist_init``: nothing but
    set-up lines after it up to the end of the file), with no step, no error and no exit: if the job was still
    running there, it waits for a rank or a connection that never came. Said conditionally: a paste cut there reads
    the same."""
    last = None
    for f in ev.files:
        for n in f.notices:
            if n.kind == "dist-init" and (n.value or {}).get("ends_log"):
                last = (f, n)
    if last is None:
        return None
    f, n = last
    kind = (n.value or {}).get("kind") or "deepspeed"
    what, means = STARTUP_WHERE[kind]
    where = f"{f.read.path}:{n.line}"
    line = n.text if len(n.text) <= 120 else n.text[:117] + "..."
    return {"last_step": None, "total": None, "percent": None, "total_source": None, "shown": False,
            "location": location_of(f.read.path, n.line), "evidence": f"the log ends at {where}",
            "lead": (f"The log ends at distributed start-up ({what}: \"{line}\", {where}) with no training step, "
                     f"no error and no exit: if the job was still running there, {means}"),
            "more": ", and rerun with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL to see which rank never joined"}


def _data_load_stop(ev: Evidence) -> dict[str, Any] | None:
    """A log that ends on a dataset-loading line (readers/runlogs/logparse.py ``_data_load``) with no step, no
    error and no exit: the output stops while the data loads. What ends a process silently there is said as a
    question to check, not as the cause: a paste cut at that line reads the same."""
    last = None
    for f in ev.files:
        for n in f.notices:
            if n.kind == "data-load" and (n.value or {}).get("ends_log"):
                last = (f, n)
    if last is None:
        return None
    f, n = last
    where = f"{f.read.path}:{n.line}"
    line = n.text if len(n.text) <= 120 else n.text[:117] + "..."
    return {"last_step": None, "total": None, "percent": None, "total_source": None, "bar_only": False,
            "location": location_of(f.read.path, n.line),
            "lead": (f"The log ends while the dataset loads (\"{line}\", {where}) with no training step, no error "
                     "and no exit. If this is where the output really ends, the process was ended from outside or "
                     "hangs in the load; a process that dies there without a word is most often killed by the "
                     "kernel's OOM killer because the dataset does not fit in host RAM (watch the RAM in use "
                     "while it loads; streaming or smaller shards load less at once). A paste cut at this line reads "
                     "the same: give the rest of the output if it goes on.")}


_RESUME_CHECK = ("whether the run resumed from a checkpoint already at its last step: HF's Trainer restores the "
                 "checkpoint's global_step and skips the steps already trained (transformers trainer.py "
                 "``_inner_training_loop``: \"Continuing training from global step N\"), so with the same "
                 "num_train_epochs or max_steps nothing is left to run and the run ends as if complete; raise "
                 "num_train_epochs or max_steps past the checkpoint's global_step (its trainer_state.json), or load "
                 "the adapter (adapter_name_or_path) instead of resuming. Otherwise the dataset gave no batch "
                 "(max_samples, a filter that dropped every sample) or the output given is only its last lines: "
                 "give the whole of it")


def ended_untrained(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.health.no_update`` for a run whose output reaches its end with no training step (issue #25, round 8
    LlamaFactory#2776): a text log's end-of-training notice (readers/runlogs/logmoments.py ``run-end``:
    LLaMA-Factory's loss plot or the model card written after ``trainer.train()`` returned; or transformers'
    "***** train metrics *****") and no step in any file (no logged metric, no training bar). With HF's resume
    line ("Continuing training from global step N") the step it resumed at is named. None otherwise."""
    steps = out.get("steps") or {}
    if steps.get("last") is not None or steps.get("logged") or out.get("has_metrics"):
        return None
    end = next(((f, n) for f in ev.files if f.read.kind == "text-log" for n in f.notices
                if n.kind in ("run-end", "train-metrics")), None)
    if end is None:
        return None
    f, n = end
    resumes = [r for g in ev.files for r in g.restarts if r.kind == "resume"]
    resume = next((r for r in resumes if r.step is not None), resumes[0] if resumes else None)
    total = steps.get("total")
    what = {"plot": f"LLaMA-Factory's loss plot (\"{n.text[:100]}\")", "model-card": "the model card written "
            "after training (transformers' \"Dropping the following result ...\")"}.get(
        str((n.value or {}).get("what")), "transformers' final \"***** train metrics *****\"")
    said = resume.detail[resume.detail.find("Continuing"):][:100] if resume is not None else ""
    at = f" at global step {resume.step}" if resume is not None and resume.step is not None else ""
    of = f" of the {total} the run has (\"Total optimization steps\")" if at and isinstance(total, int) else ""
    from_step = (f"it resumed from a checkpoint{at}{of} (\"{said}\", {resume.file}:{resume.line}) and "
                 if resume is not None else "")
    return {"why": f"{from_step}the output reaches the run's end with no training step before it",
            "evidence": f"{what} at {f.read.path}:{n.line}, and no metric, step or training progress bar in "
                        f"the {len(ev.files)} file(s) read",
            "location": location_of(f.read.path, n.line), "check": _RESUME_CHECK}


def health_facts(ev: Evidence, cx: RunContext, curves: dict[str, Curve], out: dict[str, Any]) -> dict[str, Any]:
    """``ev.health``: {no_update, stopped, hang} (module docstring)."""
    s, h = stopped(ev, cx, out)
    return {"no_update": no_update(ev, cx, curves) or ended_untrained(ev, out), "stopped": s, "hang": h}


def _eval_points(f: Any) -> list[tuple[int, int]]:
    """(line, step) of the eval_loss points of one file."""
    out: list[tuple[int, int]] = []
    for s in f.series:
        if s.name.endswith("eval_loss"):
            out += [(s.lines[i], s.steps[i]) for i in range(len(s.steps))]
    return out


def _after_eval(step: int, cx: RunContext) -> tuple[str, str]:
    ss = cx.cfg.get("save_steps")
    if isinstance(ss, int) and ss > 0 and step % ss == 0:
        return "save", (f"during the checkpoint save at step {step}, right after its evaluation (step {step} is a "
                        f"multiple of save_steps {ss}: HF's Trainer evaluates, then saves)")
    return "evaluation", f"right after the evaluation at step {step}"


def crash_moment(ev: Evidence, cx: RunContext, file: str, line: int, step: int | None) -> tuple[str, str, int] | None:
    """(phase, words, step) of a crash at `file`:`line` from the moment markers before it in the same file:
    HF's "Saving model checkpoint to .../checkpoint-N" (phase save), "***** Running Evaluation *****" with or
    without its eval_loss logged after it (evaluation, or the save that follows an evaluation at a save step),
    or an eval_loss logged at the step just before the crash. None when nothing places it; a marker counts only
    when no training step was counted between it and the crash (the bar's step is the same)."""
    f = next((x for x in ev.files if x.read.path == file), None)
    if f is None:
        return None
    marks = [n for n in f.notices if n.kind in ("save", "eval-start") and n.line < line]
    evals = [(ln, s) for ln, s in _eval_points(f) if ln < line]
    last = marks[-1] if marks else None
    if last is not None and (step is None or last.step == step):
        at = (last.value or {}).get("step")
        if last.kind == "save":
            # (transformers 4.49.0.dev0 saved to tmp-checkpoint-<random>: the marker names no step)
            return "save", (f"during the checkpoint save of checkpoint-{at}" if at is not None else
                            "during a checkpoint save"), at if at is not None else step
        done = [s for ln, s in evals if ln > last.line]
        if done:
            ph, words = _after_eval(done[-1], cx)
            return ph, words, done[-1]
        return "evaluation", f"during the evaluation at step {at}", at if at is not None else step
    if evals and step is not None and evals[-1][1] in (step - 1, step):
        ph, words = _after_eval(evals[-1][1], cx)
        return ph, words, evals[-1][1]
    return None
