"""The causes the postmortem names: why the loss went NaN, whether the learning rate is to blame, fp16 on a bf16
model, harmless overflows, a collective that timed out, a killed process, the exception that ended the run."""

from __future__ import annotations

import os
import re
from typing import Any

from finetune_doctor.analyzers.postmortem import refmodel
from finetune_doctor.analyzers.postmortem.agentcause import agent_lead
from finetune_doctor.analyzers.postmortem.nanfirst import from_start
from finetune_doctor.analyzers.postmortem.crashcause import crash_cause, raised_at, warning_lead
from finetune_doctor.analyzers.postmortem.cutcause import args_lead, dependency_check_lead, frame_lead, lead_kind, staged_save_lead
from finetune_doctor.analyzers.postmortem.saidstack import stack_text
from finetune_doctor.analyzers.postmortem.diskfull import disk_full
from finetune_doctor.analyzers.postmortem.launchtail import child_failed_only, cut_above, rank_raised
from finetune_doctor.analyzers.postmortem.rendezvous import connect_crash
from finetune_doctor.analyzers.postmortem.curves import Curve, fmt, location_of, sfmt, value_at
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.analyzers.postmortem.ranks import is_consequence_exc
from finetune_doctor.analyzers.postmortem.stackcause import stack_range_text
from finetune_doctor.evidence import Evidence, KillRecord, Notice, src

LATE_EPOCH = 0.05
LATE_STEP = 50
# learning rates beyond which a divergence is blamed on the rate itself (LLaMA-Factory's examples use 1e-4 for
# LoRA and 1e-5 for full fine-tuning; these are 50x those)
LR_HIGH = {"lora": 5e-3, "oft": 5e-3, "freeze": 1e-3, "full": 5e-4}
LR_TYPICAL = {"lora": 1e-4, "oft": 1e-4, "freeze": 1e-5, "full": 1e-5}


def lr_high_facts(cx: RunContext, lr: Curve | None, nan: dict | None, out: dict[str, Any], lz: dict | None,
             epoch: Curve | None) -> dict[str, Any] | None:
    """The learning rate is blamed when an instability happens at a rate far above the usual one for the
    finetuning type, or right as warm-up ends (within ±50 % of the warm-up length) after healthy logs."""
    cands = []
    if nan:
        cands.append((nan["step"], nan["location"], "non-finite " + nan["metric"]))
    if lz:
        cands.append((lz["start_step"], lz["location"], "loss stuck at 0"))
    if out.get("loss_spike"):
        cands.append((out["loss_spike"]["step"], out["loss_spike"]["location"], "loss spike"))
    if out.get("grad_spike"):
        cands.append((out["grad_spike"]["step"], out["grad_spike"]["location"], "grad-norm explosion"))
    sc = out.get("scale")
    if sc and sc["trajectory"] in ("collapse", "abort") and sc.get("location"):
        cands.append((sc["first_step"] if sc["first_step"] is not None else 10 ** 9, sc["location"], "loss-scale collapse"))
    if not cands:
        return None
    step, loc, what = min(cands, key=lambda c: c[0] if c[0] is not None else 10 ** 9)
    rate = value_at(lr, step)
    if rate is None or rate == 0:
        rate = cx.cfg.get("learning_rate") if isinstance(cx.cfg.get("learning_rate"), (int, float)) else None
    ft, ft_src = cx.method()
    known = ft is not None
    ft = ft or "lora"      # unknown method: LoRA's threshold, the higher one, so a full run is never over-blamed
    thr = LR_HIGH.get(ft, LR_HIGH["lora"])
    typical = LR_TYPICAL.get(ft, 1e-4)
    if rate is None:
        return None
    suggested = typical if rate > 3 * typical else rate / 3
    # the fix's title (rule learning-rate-too-high-confirmed), the rate as the rule language's sci() writes it (%g)
    title = f"lower the learning rate to {float(suggested):g}"
    info = out.get("lr") or {}
    if rate >= thr:
        usual = (f"{rate / typical:.0f}× the usual {fmt(typical)} for {ft}" if known else
                 f"{rate / 1e-4:.0f}× the usual 1e-4 for LoRA, {rate / 1e-5:.0f}× the usual 1e-5 for a full "
                 "fine-tune; the method is not known here: give --config")
        return {"lr": rate, "threshold": thr, "step": step, "what": what, "location": loc, "suggested": suggested,
                "fix_title": title, "finetuning_type": ft, "method_known": known, "method_source": ft_src,
                "reason": f"{what} at learning rate {fmt(rate)}, ≥ {fmt(thr)} ({usual})"}
    w = info.get("warmup_end_step")
    healthy = (nan or {}).get("healthy_before", 3 if not nan else 0)
    if w and step is not None and 0.5 * w <= step <= 1.5 * w and rate >= 0.5 * info["peak"] and healthy >= 3:
        return {"lr": rate, "threshold": thr, "step": step, "what": what, "location": loc, "suggested": suggested,
                "fix_title": title, "finetuning_type": ft, "reason": f"{what} at step {step}, as warm-up ends at step {w} "
                f"(learning rate {fmt(rate)}, peak {fmt(info['peak'])})"}
    return None


def epoch_at(epoch: Curve | None, step: int | None) -> float | None:
    return value_at(epoch, step) if epoch is not None else None


def _same_record(c: Curve | None, location: Any) -> float | None:
    """The value of curve `c` logged at `location` (the same file and line), None when it logged none there."""
    if c is None or location is None:
        return None
    return next((c.values[i] for i in range(len(c)) if c.location(i) == location), None)


def nan_cause(nan: dict[str, Any], out: dict[str, Any], cx: RunContext, fp16: bool, lr: Curve | None,
               epoch: Curve | None, said_family: str | None = None) -> dict[str, Any]:
    st = nan["step"]
    # the learning rate printed in the same metric dict as the non-finite value, else the one in effect at its step
    # (two dicts placed at one estimated step would otherwise lend it the later dict's rate)
    rate = _same_record(lr, nan.get("location"))
    if rate is None:
        rate = value_at(lr, st)
    ep = epoch_at(epoch, st)
    n = dict(nan)
    n["lr"] = rate
    n["epoch"] = ep
    n["hidden"] = bool(nan["metric"] == "grad_norm" and nan.get("loss") == 0.0)
    sc = out.get("scale")
    fl = out.get("first_loss")
    late = _late(nan, cx, lr, rate, ep)
    rm = (refmodel.ref_model_fsdp(cx, _lf_version(cx, out), cx.log.get("lf_stage"),
                                  "log's metric keys (rewards/chosen: trl's preference trainers)")
          if nan["first_logged"] and not late else None)
    ds = bool(cx.cfg.get("deepspeed") or cx.zero_stage() is not None)
    if out.get("lr_high"):
        cause, text, fix = "learning-rate", (f"the learning rate ({out['lr_high']['reason']}; see "
                                             "learning-rate-too-high-confirmed)"), "lower the learning rate"
    elif fl and fl["abnormal"]:
        cause, text, fix = "environment", ("the first loss was already impossible for a working forward pass "
                                           "(see first-step-loss-abnormal): a broken kernel or environment"), \
            "switch the attention kernel / rebuild the environment"
    elif fp16 and sc and sc["trajectory"] in ("collapse", "abort"):
        cause, text, fix = "fp16-range", "fp16 overflow: the loss scale collapsed before it", "train in bf16"
    elif out.get("attention_warning") and not late:
        # the log's own warning outranks what this machine lacks (a missing DeepSpeed file): transformers
        # printed it before the NaN (trial 7, LLaMA-Factory #7755: Gemma-3 under sdpa in fp16, loss 0)
        aw = out["attention_warning"]
        cause, text, fix = "attention-warning", (
            f"transformers warned before it that {aw.get('model') or 'this model'} should be trained with "
            f"{aw.get('want') or 'another'} attention, not {aw.get('have') or 'the one in use'} (see "
            "attention-backend-warning)" + ("; the run computes in fp16, where the skipped soft-capping "
                                            "overflows" if fp16 else "")), "use the attention the warning names"
    elif cx.overlap_comm() is True and cx.zero_stage() in (1, 2) and not late:
        cause, text, fix = "overlap-comm", ("DeepSpeed ZeRO-2 with overlap_comm can corrupt reduced gradients "
                                            "(DeepSpeed#5347; Qwen-VL-Series-Finetune#10 ran fine with overlap_comm false "
                                            "or ZeRO-3)"), "set zero_optimization.overlap_comm to false"
    elif cx.lint.get("ds_missing") and not late and not (fp16 and cx.model_bf16()[0]):
        # fp16 on a bf16 model is read from the config and the model, not from the DeepSpeed file: that
        # explanation stands without it (fp16-on-bf16-model-confirmed)
        cause, text, fix = "deepspeed-unchecked", (
            "not determined: the DeepSpeed file the config names is not here, so the run's fp16/bf16, loss-scale "
            "and communication settings (overlap_comm) could not be checked, and the attention kernel is not "
            "blamed without them (see not-checked-here)"), "restore the DeepSpeed file and run the postmortem again"
    elif rm is not None:
        cause, text, fix = "ref-model-fsdp", (
            f"NaN from the first logged step{_at_rate(rate)} with no healthy log before it: not the learning rate "
            f"and not one bad batch; {rm['text']}"), rm["fix"]
    elif nan["first_logged"] and not late and rate is not None and rate <= 1e-7:
        cause, text, fix = "forward", (f"NaN at the first logged step with learning rate {fmt(rate)}: no optimizer "
                                       "update can have caused it, nor one late batch, so the forward/backward pass "
                                       "of the model as loaded produced it: the attention kernel (#9631 was fixed by "
                                       "flash_attn: fa2; #8088 by flash_attn: disabled), the weights' dtype, or how "
                                       "the model (or a reference model) was prepared for the launcher"), \
            "switch the attention kernel"
    elif nan["first_logged"] and not late:
        cause, text, fix = from_start(st, cx, fp16, said_family)   # a paste that starts mid-run; fp16 on bf16 (nanfirst.py)
    elif late:
        where = f"epoch {fmt(ep)}" if ep is not None else f"step {st}"
        before = (f"after {nan['healthy_before']} healthy logs ({where})" if nan["healthy_before"] else
                  f"at {where}, after training that was healthy before the logs read")
        extra = (" Under DeepSpeed, overlap_comm races (DeepSpeed#5347) and old releases (0.14.0; fixed by 0.14.3 "
                 "in LLaMA-Factory #5627) also produce late NaN." if ds else "")
        # at a learning rate of ~0 (a schedule's end) a lower rate is no remedy: the step barely moves the weights
        lower = ("" if rate is not None and rate <= 1e-7 else ", lower the learning rate")
        cause, text, fix = "late", (f"NaN {before}: a bad sample or batch, "
                                    f"or an optimizer-state blow-up; inspect the data around that step{lower} or "
                                    "tighten max_grad_norm." + extra), "find the bad batch"
    else:
        cause, text, fix = "unknown", "the cause is not visible in the logs read", "inspect the step"
    n["cause"] = cause
    n["cause_text"] = text.rstrip(".")
    n["ref_model"] = rm
    # one clause about what came before, never two that disagree (trial 9: "after 0 healthy log(s)" beside
    # "after training that was healthy before the logs read")
    n["healthy_text"] = (f"after {nan['healthy_before']} healthy log(s)" if nan["healthy_before"] else
                         "at the first log read" if nan["first_logged"] else "with no healthy log before it")
    n["fix_title"] = fix
    what = ("loss 0.0 with grad_norm nan" if n["hidden"] and nan["metric"] == "grad_norm" else
            f"{nan['metric']} {fmt(nan['value'])}")
    n["what"] = what
    n["detail"] = f"first non-finite value: {what}" + (f" (lr {fmt(rate)})" if rate is not None else "")
    basis = nan.get("basis")
    n["step_text"] = (f"log #{nan['index'] + 1} (the logged lines carry no step)" if basis == "ordinal" else
                      f"about step {st}" if basis in ("estimated", "logging_steps") else
                      f"step {st}" if st is not None else "an unknown step")
    return n


def _late(nan: dict[str, Any], cx: RunContext, lr: Curve | None, rate: float | None, ep: float | None) -> bool:
    """Whether the first non-finite value came after healthy training (epoch >= LATE_EPOCH, or enough healthy
    logs) and not at the run's start. The first log read, non-finite at the run's first logged step or at learning
    rate 0, had nothing healthy before it, however far an epoch counter on a small dataset has moved (trial 9,
    LF#10126: epoch 0.06 at step 1). A rate of 0 is the start only while warm-up follows it (the logged rates
    rise after it) or the epoch is still early: a cosine schedule also ends at 0, and a paste of a run's last
    lines starts there."""
    st = nan["step"]
    late = (ep is not None and ep >= LATE_EPOCH) or (st is not None and st >= LATE_STEP and nan["healthy_before"] >= 3) \
        or nan["healthy_before"] >= 10
    lr_rises = lr is not None and len(lr) > 1 and any(v > 1e-7 for v in list(lr.values)[1:])
    at_start = bool(nan["first_logged"] and not nan["healthy_before"] and (
        (rate is not None and rate <= 1e-7 and (lr_rises or (ep is not None and ep < 0.25)))
        or (st is not None and nan.get("basis") not in ("ordinal", "estimated", "logging_steps")
            and st <= max(1, cx.logging_steps() or 1))))
    return late and not at_start


def _at_rate(rate: float | None) -> str:
    return f" at learning rate {fmt(rate)}" if rate is not None else ""


def _lf_version(cx: RunContext, out: dict[str, Any]) -> tuple[str, str] | None:
    """(LLaMA-Factory version, where it was read): the flags/--env first, then what the logs print."""
    got = cx.given_versions.get("llamafactory")
    if got:
        return got
    st = (out.get("stack") or {}).get("llamafactory")
    if st and st.get("version"):
        return str(st["version"]), str(st.get("source") or "the log")
    return None


def fp16_facts(cx: RunContext, on: bool, source: str | None, out: dict[str, Any]) -> dict[str, Any]:
    sc = out.get("scale")
    if sc and sc["initial"] is not None and not on:
        on, source = True, "DeepSpeed fp16 loss-scale lines"
    mb, mtext = cx.model_bf16()
    evidence = None
    loc = None
    if sc and sc["trajectory"] in ("collapse", "abort"):
        evidence = ("the loss scale collapsed to its minimum and DeepSpeed aborted" if sc["trajectory"] == "abort"
                    else f"the loss scale fell to {sfmt(sc['min'])} and kept falling after calibration")
        loc = sc["location"] or (sc["abort"] or {}).get("location")
    elif out.get("lr_high") or out.get("grad_const") or (out.get("first_loss") or {}).get("abnormal"):
        pass    # a stronger explanation of the NaN / zero loss exists: not evidence against fp16
    elif out.get("nan") and out["nan"]["cause"] in ("from-start", "unknown", "fp16-range", "attention-warning"):
        evidence = f"{out['nan']['what']} at {out['nan']['step_text']}"
        loc = out["nan"]["location"]
    elif out.get("loss_zero") and not out.get("nan"):
        evidence = f"loss stuck at 0 from step {out['loss_zero']['start_step']}"
        loc = out["loss_zero"]["location"]
    confirmed = bool(on and mb and evidence)
    return {"in_use": on, "source": source, "model_bf16": mb, "model_text": mtext, "evidence": evidence,
            "confirmed": confirmed, "location": loc, "hw_bf16": cx.hw.get("bf16")}


def benign_overflow(out: dict[str, Any]) -> dict[str, Any] | None:
    sc, amp = out.get("scale"), out.get("amp_skips")
    if sc and sc["trajectory"] == "benign" and sc["overflows"]:
        text = (f"{sc['overflows']} fp16 overflow(s) skipped step(s) while the loss scale searched down from "
                f"{sfmt(sc['initial'])} to {sfmt(sc['min'])}")
        if sc["increases"]:
            text += f", then it grew again ({sc['increases']} increase(s))"
        elif sc["still_falling"]:
            text += "; the log ends before the scale settles, so watch it"
        return {"text": text, "location": sc["location"], "kind": "deepspeed"}
    if amp and not amp["stated"]:
        return {"text": f"grad_norm was nan at {amp['count']} log(s) (from step {amp['steps'][0]}) while the loss "
                        "stayed finite and kept falling, with finite norms after: an optimizer step on a nan "
                        "gradient would have made every later loss nan, so the step was skipped, as the dynamic "
                        "loss scaler of fp16 mixed precision does at an overflow (the files do not say fp16 is on)",
                "location": amp["location"], "kind": "amp"}
    if amp:
        return {"text": f"the fp16 GradScaler skipped {amp['count']} step(s) (grad_norm nan with a finite loss) "
                        "and training went on", "location": amp["location"], "kind": "amp"}
    return None



# -- process death ----------------------------------------------------------------------------------------------------

KILL_PRIORITY = {"child-failed-root": 0, "kernel-oom": 1, "cgroup-oom": 1, "slurm-oom": 1, "ray-oom": 1, "torchrun-exit": 2,
                  "loader-signal": 4,
                  "launcher-exit": 3, "shell-killed": 4, "shell-signaled": 4, "signal": 5, "cpu-alloc": 6,
                  "launcher-signalled": 7, "elastic-signalled": 7, "launcher-kill": 8,
                  # a scheduler's own record of why it ended the job outranks the SIGKILL that follows its SIGTERM
                  "slurm-cancel": 1, "trainer-signalled": 7, "interrupted": 7}
LAUNCHER_ONLY = ("launcher-kill", "launcher-signalled")
SUMMARY_KINDS = ("child-failed-root", "torchrun-exit", "launcher-exit", "exit-signal", "signal")
"""A launcher's report of how its child ended (torchrun's failure summary and agent line, DeepSpeed's "exits with
return code", CPython's CalledProcessError "died with <Signals.SIGKILL: 9>" under accelerate): the exit, not its
sender."""
EXIT_KINDS = ("child-failed-root", "torchrun-exit", "launcher-exit")
"""A launcher's report of its child's exit code (the code a Python exception gives is 1)."""
SENDER_KINDS = ("kernel-oom", "cgroup-oom", "slurm-oom", "ray-oom", "cpu-alloc", "slurm-cancel", "shell-killed")
"""Records that name who ended a process (the kernel, a cgroup, Slurm, Ray, bash's report of the signal)."""
SUMMARY_ASK = (" The launcher's summary does not say who sent SIGKILL: `dmesg -T | grep -iE 'killed process|out of "
               "memory'` on that node shows whether the kernel's OOM killer did (a scheduler's limit or a `kill -9` "
               "are the other senders).")
"""What tells a summary's SIGKILL apart: the kernel's log on that node (``ev.killed.ask``)."""


def _summary_sigkill(k: KillRecord, relevant: list[KillRecord]) -> bool:
    """True for a launcher's summary of a SIGKILL (torchrun's table or agent line, accelerate's CalledProcessError
    "died with <Signals.SIGKILL: 9>", DeepSpeed's "return code = -9") with no record of who sent it: the OOM
    killer is the usual sender, so host-oom-killed says "most likely" and asks for the kernel's log."""
    return (k.kind in SUMMARY_KINDS and (k.signal == "SIGKILL" or k.exitcode in (-9, 137))
            and not any(x.kind in SENDER_KINDS for x in relevant))
OUTSIDE_KINDS = ("launcher-signalled", "elastic-signalled", "slurm-cancel", "trainer-signalled", "interrupted")
"""Records of a stop sent from outside the training code (a signal to the launcher, a scheduler's cancel, an
interrupt): an exception the process raises after one (a DataLoader worker "killed by signal: Terminated", a
KeyboardInterrupt, torchelastic's SignalException) is that stop's consequence (`crash_facts`)."""


NATIVE_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")
"""Signals a process raises on itself from compiled code (signal(7): invalid memory reference, bus error, illegal
instruction, an integer division by zero): a crash inside a C/C++/CUDA extension, not something sent from
outside."""


def _relevant_kills(kills: list[KillRecord]) -> list[KillRecord]:
    """The records that may name the death that ended the run: not the summary's list of the other failed ranks,
    not a SIGTERM a launcher sent while stopping the others. A launcher's summary of a child that exited with an
    exception's code (1: torchrun's "Root Cause" block, its agent's "failed (exitcode: 1)") only says that the child
    raised; where a record beside it names a death (a DataLoader worker's signal, the kernel's or a cgroup's OOM
    kill), that death is what the exception reported, and the summary is dropped."""
    relevant = [k for k in kills if not (k.kind == "child-failed" or (k.exitcode in (-15, 143) and k.kind != "signal"))]
    raised = [k for k in relevant if k.kind in EXIT_KINDS and k.exitcode is not None and k.exitcode > 0]
    if raised and any(k.kind in SENDER_KINDS or k.kind == "loader-signal" for k in relevant):
        return [k for k in relevant if k not in raised]
    return relevant


def killed_facts(kills: list[KillRecord], cx: RunContext, mems: list[Any], out: dict[str, Any],
                 traced: bool = False, caused: bool | None = None) -> dict[str, Any] | None:
    """The process death that ended the run, or None. `traced`: the files hold a Python exception, a traceback
    or another failure (CUDA OOM or error, NCCL): DeepSpeed's "Killing subprocess" lines are then that
    failure's consequence, never the cause. `caused` (default `traced`): the same without the launchers' wrapper
    exceptions (ChildFailedError, CalledProcessError): a SIGABRT with nothing else is the child's abort."""
    # the root cause: torchrun's "first observed failure", else the kernel's own record, else the launcher's
    relevant = _relevant_kills(kills)
    if all(k.kind in LAUNCHER_ONLY for k in relevant) and traced:
        return None
    if not relevant:
        return None
    k = min(relevant, key=lambda x: (KILL_PRIORITY.get(x.kind, 9), x.line))
    # DeepSpeed's launcher killing its children, a Ray worker gone without an exception: a SIGKILL no line names
    summary = _summary_sigkill(k, relevant)
    inferred = k.kind in ("launcher-kill", "ray-worker-gone") or summary
    host_oom = (k.kind in ("kernel-oom", "cgroup-oom", "slurm-oom", "cpu-alloc", "ray-oom")
                or k.signal == "SIGKILL" or k.exitcode in (-9, 137) or inferred)
    if not host_oom and k.exitcode not in (-6, 134):
        # a Python exception (exit code 1) is reported by the crash fact, not as a kill
        if k.exitcode is not None and k.exitcode > 0 and k.kind in EXIT_KINDS:
            return None
    step = k.step
    if step is None:
        step = next((x.step for x in kills if x.step is not None), None)
    total = (out.get("steps") or {}).get("total")
    if step is not None and total and step > total:
        step = None   # killed after the last step (the "step in progress" past the bar's end is no step)
    host = [m for m in mems if m.cpu_percent is not None]
    peak = max(host, key=lambda m: m.cpu_percent) if host else None
    run_off = cx.run.get("offload_optimizer") or cx.run.get("offload_param") or cx.ds.get("offload_optimizer_device") \
        or cx.ds.get("offload_param_device")
    # DeepSpeed printed "Time to load cpu_adam op": its CPU Adam, ZeRO-Offload's optimizer, ran (trial 10 case 10)
    log_off = not run_off and cx.log.get("cpu_adam") is True
    run_off = run_off or log_off
    hram = None
    if cx.mem.get("host"):
        hram = (f"this config needs about {cx.mem['host']:.0f} GiB of host RAM per node"
                + (" (DeepSpeed CPU offload pins the fp32 master weights and Adam states there)" if run_off else "")
                + (f", and the node has {cx.hw.get('host_ram_gib'):.0f} GiB" if cx.hw.get("host_ram_gib") else ""))
    elif peak is not None:
        hram = f"DeepSpeed last saw host RAM at {peak.cpu_used:.0f} GB used ({peak.cpu_percent:.0f} %)"
    elif log_off:
        at = cx.log_at.get("cpu_adam") or {}
        hram = ("The log shows DeepSpeed's CPU Adam loaded" + (f" (line {at['line']})" if at.get("line") else "")
                + ": ZeRO-Offload keeps the fp32 master weights, their gradients and both Adam moments in host RAM, "
                "about 16 bytes per trainable parameter over a node's ranks (ZeRO-Offload, arXiv:2101.06840; "
                "analyzers/memory/buffers.py host_bytes), so the offload is the first host-RAM consumer to look at")
    elif k.kind == "ray-oom" and (rm := _ray_use(kills)):
        hram = f"Ray saw {rm[0]} of the node's {rm[1]} in use ({100 * float(rm[2]):.0f} %)"
    who = ((f"a DataLoader worker process (pid {k.pid})" if k.pid is not None else "a DataLoader worker process")
           if k.kind == "loader-signal"
           else f"rank {k.rank}" if k.rank is not None else f"local rank {k.local_rank}" if k.local_rank is not None
           else f"pid {k.pid}" if k.pid is not None else "a training process")
    how = {"kernel-oom": "the kernel's OOM killer", "cgroup-oom": "the cgroup (container) memory limit",
           "slurm-oom": "Slurm's memory limit (oom_kill event)", "cpu-alloc": "a failed host allocation",
           "ray-oom": "Ray's memory monitor (the node's RAM use passed RAY_memory_usage_threshold, 0.95 by default)",
           "ray-worker-gone": "a SIGKILL Ray could not see (its worker exited with no exception of its own)"
           }.get(
        k.kind, f"{k.signal or 'a signal'}" + (f" (exit code {k.exitcode})" if k.exitcode is not None else ""))
    if k.kind == "shell-killed":
        # the line is what the shell prints for a job SIGKILL ended (strsignal(SIGKILL) = "Killed"); the status it
        # would return (128 + 9) is not in the input, so no exit code is stated (trial 12)
        how = "SIGKILL (the shell prints `Killed` when SIGKILL ends a job)"
    if k.kind == "loader-signal" and k.signal in NATIVE_SIGNALS:
        # torch/csrc/DataLoader.cpp's SIGBUS handler names the usual cause itself; with num_workers 0 the dataset
        # code runs in the main process, where the fault (and PYTHONFAULTHANDLER's stack) can be seen
        # (SIGBUS: PyTorch's own message names shared memory; rule native-crash words that cause first, `shm`)
        how += "" if k.signal == "SIGBUS" else " (a rerun with fewer loader workers, or 0, shows whether the dataset code faults)"
    if k.kind == "ray-oom" and k.pid is None:
        pid = next((x.pid for x in relevant if x.kind == "ray-oom" and x.pid is not None), None)
        who = f"pid {pid}" if pid is not None else who
    if k.kind == "ray-worker-gone":
        who = "A Ray worker" + (f" (pid {k.pid})" if k.pid is not None else "")
    if k.kind == "elastic-signalled":
        who, how = _elastic_words(k)
    nxt = None
    if k.kind in ("slurm-cancel", "trainer-signalled"):
        who, how, nxt = _scheduler_words(k)
    if k.kind == "interrupted":
        who = f"rank {k.rank}" if k.rank is not None else "the training process"
        how = ("SIGINT (Python raised KeyboardInterrupt: Ctrl-C in its terminal, `kill -INT`, or a launcher or "
               "scheduler passing on an interrupt)")
    if k.kind in LAUNCHER_ONLY:
        who, how = _launcher_words(k, [x for x in relevant if x.kind == "launcher-kill"])
        host_oom = host_oom and not any(x.kind == "launcher-signalled" for x in relevant)
    abort = k.signal == "SIGABRT" and not (traced if caused is None else caused)   # native-crash's abort words
    d = {"kind": k.kind, "signal": k.signal, "exitcode": None if k.kind == "shell-killed" else k.exitcode, "rank": k.rank, "local_rank": k.local_rank,
         "pid": k.pid, "host": k.host, "step": step, "host_oom": host_oom, "who": who, "how": how,
         "host_ram_text": hram, "offload": bool(run_off), "location": location_of(k.file, k.line),
         "shm": k.kind == "loader-signal" and k.signal == "SIGBUS",
         # a fault in compiled code (bash's "Segmentation fault", faulthandler, exit -11/139 ...): not the host
         "native": k.signal in NATIVE_SIGNALS or abort,
         "text": k.text, "count": len(kills), "inferred": inferred and host_oom,
         "outside": k.kind in OUTSIDE_KINDS,
         "total": total, "next_text": nxt,
         # the pipeline sets it from the --launch line (pipeline/postmortem.py `_launched_under_nohup`)
         "nohup": False, "abort": abort, "ask": SUMMARY_ASK if summary and host_oom else ""}
    d["timeline_text"] = f"{who} {'crashed with' if d['native'] else 'killed by'} {how}"
    return d


def _ray_use(kills: list[KillRecord]) -> tuple[str, str, str] | None:
    """(used, total, fraction) from Ray's "Memory on the node ... was running was U / T (F)" line, if one is whole."""
    from finetune_doctor.readers.runlogs import logpatterns as pat

    for k in kills:
        m = pat.RAY_OOM.search(k.text or "") if k.kind == "ray-oom" else None
        if m and m.group("used"):
            return m.group("used"), m.group("total"), m.group("frac")
    return None


ELASTIC_SIGNAL_SENDERS = {
    "SIGHUP": "the terminal or ssh session it ran in was closed",
    "SIGTERM": "a scheduler's time limit or preemption, a container stop, or `kill`",
    "SIGINT": "Ctrl-C, or a scheduler's interrupt",
    "SIGQUIT": "Ctrl-\\ or `kill -QUIT`",
}
"""Who usually sends each signal that torchelastic handles (TORCHELASTIC_SIGNALS_TO_HANDLE's default, torch/distributed/
elastic/multiprocessing/api.py ``PContext.start``); signal(7) for the signals' meanings."""


def _elastic_words(k: KillRecord) -> tuple[str, str]:
    """Who died and how, for torchelastic's "Received SIG death signal, shutting down workers" or its
    ``SignalException: Process PID got signal: SIG`` (torch/distributed/elastic/agent/server/api.py ``run``,
    multiprocessing/api.py ``_terminate_process_handler``): the torchrun agent itself got the signal and stopped
    its training processes."""
    sig = k.signal or "a signal"
    sender = ELASTIC_SIGNAL_SENDERS.get(k.signal or "")
    return ("torchrun (the torchelastic agent" + (f", pid {k.pid})" if k.pid is not None else ")"),
            f"{sig} from outside" + (f" ({sender})" if sender else "") + "; it then shut down its training processes")


SLURM_REASONS = {
    "TIME LIMIT": ("Slurm's time limit (the job ran past its --time)", "Resubmit with a longer --time (or within "
                   "the partition's limit) and resume from the last checkpoint (resume_from_checkpoint); with "
                   "save_steps small enough that a time limit costs little."),
    "PREEMPTION": ("a preemption (Slurm gave the nodes to a job of higher priority)", "Resubmit (or use --requeue) "
                   "and resume from the last checkpoint; save_steps small enough that a preemption costs little."),
    "NODE FAILURE": ("a node failure (slurmctld's log says which node and why)", "Ask the admins what failed on the "
                     "node (slurmctld's log), exclude it (--exclude) and resume from the last checkpoint."),
}
"""Slurm's reasons (slurmstepd req.c, `SLURM_CANCELLED`) and what to do about each."""


def _scheduler_words(k: KillRecord) -> tuple[str, str, str]:
    """(who, how, what next) for a stop a scheduler or trainer recorded: Slurm's CANCELLED line (the reason it
    names, or a cancel with none: scancel by the user or an admin) and Lightning's "Received SIGTERM"."""
    from finetune_doctor.readers.runlogs import logpatterns as pat

    if k.kind == "trainer-signalled":
        return ((f"rank {k.rank}" if k.rank is not None else "the Lightning trainer"),
                "SIGTERM from outside (Lightning logged \"Received SIGTERM\": a scheduler's time limit or "
                "preemption, a container stop, or `kill`)",
                "Check who sent it (`sacct -j JOB -o State,ExitCode`, `kubectl describe pod`) and resume from the "
                "last checkpoint.")
    m = pat.SLURM_CANCELLED.search(k.text or "")
    why = (m.group("why") or "").strip() if m else ""
    what = f"Slurm {m.group('what').lower()} {m.group('id')}" if m else "the Slurm job"
    who = what + (f" on {m.group('node')}" if m and m.group("node") else "")
    how, nxt = SLURM_REASONS.get(why, (f"Slurm ({why.lower()})" if why else "a cancel (scancel, by the user or an "
                                       "admin; no reason in Slurm's line)", "Resume from the last checkpoint."))
    return who, how, nxt


def _launcher_words(k: KillRecord, killing: list[KillRecord]) -> tuple[str, str]:
    """Who died and how, when DeepSpeed's launcher lines are the only record (deepspeed/launcher/launch.py
    `sigkill_handler`: it kills every child once one exits with a non-zero code, or once it gets SIGINT/SIGTERM
    itself). With no Python traceback in the log, the child that exited died of a signal; which child it was, and
    its exit code, the log does not say when the "exits with return code" line is cut or missing."""
    pids = sorted({x.pid for x in killing if x.pid is not None})
    named = f" (pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids[:8]))}{', ...' if len(pids) > 8 else ''})"
    if k.kind == "launcher-signalled":
        return ("the DeepSpeed launcher", f"{k.signal} from outside (Ctrl-C, the scheduler or a preemption); it then "
                f"killed its {len(pids) or 'training'} process(es){named if pids else ''}")
    return (f"one of the DeepSpeed launcher's {len(pids)} training process(es){named if pids else ''}",
            "a signal (the launcher's \"Killing subprocess\" lines follow a child's non-zero exit; the exit code "
            "is not in the log)")


def completed_facts(ev: Evidence) -> dict[str, Any] | None:
    for f in ev.files:
        for n in f.notices:
            if n.kind in LOOP_OVER:
                return {"source": src(n.file, n.line), "kind": n.kind}
        if f.read.kind == "results" and any(k.startswith("train_") for k in f.results):
            return {"source": f.read.path, "kind": "results"}
    return None


LOOP_OVER = ("train-summary", "train-end", "train-metrics", "run-end")
"""Notices that the training loop returned: HF's final dict with train_runtime/train_loss, LF's last LogCallback
line, transformers' "***** train metrics *****" block, LF's loss plot and the model card (readers/runlogs/logparse.py, logmoments.py)."""


def after_loop(ev: Evidence, file: str | None, line: int | None) -> str | None:
    """Where a failure at `file`:`line` happened when the training loop had already finished (a notice of
    `LOOP_OVER` above it in the same file): in the final evaluation or prediction (HF's "***** Running Evaluation
    *****" / "Prediction" after it), the final checkpoint save, or at shutdown. LF's workflows run, after
    trainer.train() returns: save_model, log_metrics("train"), plot_loss, then evaluate/predict when do_eval /
    do_predict (LF train/sft/workflow.py L120-155 at the snapshot); a launcher (Ray's on_shutdown) may tear the
    process group down after that. None when no such notice precedes it (trial 10 cases 09 and 12: a kill in the
    final evaluation was placed at "step 29 of 55" of the eval bar, and an exception at shutdown was dropped)."""
    f = next((x for x in ev.files if x.read.path == file), None) if file and line else None
    if f is None:
        return None
    done = [n for n in f.notices if n.kind in LOOP_OVER and n.line < line]
    if not done:
        return None
    marks = [n for n in f.notices if n.kind in ("eval-start", "save") and done[-1].line < n.line < line]
    last = marks[-1] if marks else None
    phase = ("in the final prediction" if last is not None and "Prediction" in last.text
             else "in the final evaluation (its progress bar counts evaluation batches, not training steps)"
             if last is not None and last.kind == "eval-start"
             else "in the final checkpoint save" if last is not None else "at shutdown or in the final save")
    return f"after the training loop had finished (its final metrics are logged at line {done[0].line}), {phase}"


def _scan_exceptions(ev: Evidence, out: dict[str, Any]) -> tuple[Notice | None, Notice | None, Notice | None, bool,
                                                                   list[Notice]]:
    """(the last exception, the last that is a cause rather than a consequence, the last bare traceback, whether an
    exception followed a stop from outside, every cause exception in order) over the files' notices."""
    exc = cause_exc = tb = None
    signalled = False
    seen: list[Notice] = []
    for f in ev.files:
        for n in f.notices:
            if n.kind == "exception":
                v = n.value or {}
                if "CUDA out of memory" in n.text or "loss scale already at minimum" in n.text:
                    continue
                if (out.get("killed") or {}).get("outside") and _after_stop(n, out["killed"]):
                    # torchelastic's own handler raised it for a signal from outside, or the process raised it
                    # after a stop from outside (a worker killed by its SIGTERM, a KeyboardInterrupt): the killed
                    # fact says so
                    signalled = True
                    continue
                exc = n        # the last exception is what ended the run
                if not is_consequence_exc(v, n.text) and not v.get("ignored"):   # CPython ignored it (logparse)
                    cause_exc = n
                    seen.append(n)
            elif n.kind == "traceback":
                tb = n
    return exc, cause_exc, tb, signalled, seen


def crash_facts(ev: Evidence, out: dict[str, Any], model: dict[str, Any] | None = None,
                versions: dict[str, tuple[str, str]] | None = None) -> dict[str, Any] | None:
    """``ev.crash``: the exception (or bare traceback, or torchelastic's summary alone) that ended the run, with
    ``cause`` (analyzers/postmortem/crashcause.py) where its text establishes one; `model` is what is known of
    the model (vocab_size, hidden_size, name), `versions` {package: (version, where read)}. None without one."""
    exc, cause_exc, tb, signalled, seen = _scan_exceptions(ev, out)
    # an exception a rank raised is a cause; the collective's abort, torchrun's ChildFailedError and the store's
    # connection errors that other ranks raise after it are consequences, whatever their order in the files
    # (ranks.py CONSEQUENCE_EXC / CONSEQUENCE_WORDS): the last cause stands for the run
    raised = cause_exc is not None
    if not raised and exc is not None and (cut := cut_above(ev)) is not None:
        # the only exception is a launcher's or a collective's consequence (torchrun's ChildFailedError, LF's
        # CalledProcessError), printed below a rank's traceback that the paste cut before its exception line:
        # that traceback is the cause's evidence, its frames say where the rank was
        exc, tb = None, cut
    exc = cause_exc or exc
    # a rank's traceback cut before its exception line, away from a collective and from the launcher's own
    # frames, is a rank that raised: the collective timeouts of the other ranks are its consequences
    # (not beside an NCCL error: a failure of its own, which a rank's cut traceback may be the report of)
    raised = raised or (exc is None and tb is not None and not signalled and not out.get("nccl_error")
                        and rank_raised(tb, out.get("nccl")))
    explained = bool(out.get("oom") or (not raised and (out.get("nccl") or out.get("nccl_error")))
                     or out.get("cuda_error")
                     or (out.get("killed") and out["killed"]["host_oom"]) or out.get("host_alloc")
                     or (out.get("scale") and out["scale"]["trajectory"] == "abort"))
    if exc is None and (tb is None or signalled):
        # no exception at all: torchelastic's summary, else the store's connect warning alone (rendezvous.py)
        return None if out.get("completed") or signalled else (child_failed_only(ev, explained)
                                                                or connect_crash(ev, out))
    if exc is not None and str((exc.value or {}).get("cls") or "").endswith("ChildFailedError"):
        # torchrun's own exception only wraps the children's failures: say what its summary says of them
        child = child_failed_only(ev, explained)
        if child is not None:
            return child
    if out.get("completed") and exc is None:
        return None
    if exc is not None:
        v = exc.value or {}
        text = (f"{v.get('cls')}: {v.get('msg')}" if v.get("msg") else f"{v.get('cls')}")[:200]
        if v.get("compiler"):   # a compiler's line (readers/runlogs/logs.py), not a Python class: shown as printed
            text = f"a compiler error ({v.get('msg')})"[:240]
        rec = exc
        kind = "exception"
    else:
        assert tb is not None
        rec = tb
        text = "a traceback whose exception line is not in the log"
        kind = "traceback-only"
    total = out["steps"]["total"]
    pct = f" ({100 * rec.step / total:.0f}% of {total})" if rec.step and total else ""
    disk = disk_full(ev)
    where = f"during step {rec.step}{pct}" if rec.step is not None else "at an unknown step"
    post = after_loop(ev, rec.file, rec.line)
    where = post or where
    phase = None
    lead = dep = None
    if kind == "traceback-only":
        phase, where = _cut_where(tb, where, out)
        # the frames alone name the cause where only one exception can leave them (cutcause.py; the versions the
        # user's words state beside the paste name the package), else the warning printed above the traceback
        dep = dependency_check_lead(tb, versions or {}, stack_text(ev))
        lead = (dep or staged_save_lead(tb, versions or {}) or args_lead(ev, tb) or warning_lead(tb)
                or agent_lead(tb) or frame_lead(tb))
    tb_exc = _traceback_before(ev, exc) if exc else None
    cause = crash_cause(ev, exc, tb_exc, model or {}, versions or {}) if exc else (
        {"kind": "dependency-check" if dep else lead_kind(lead), "text": lead} if lead else None)
    at = raised_at(tb_exc) if exc and cause is None else None
    if at:   # no reading of the text: say where it was raised, which the traceback does establish
        cause = {"kind": "raised-at", "text": at}
    # (not beside the start-up check's own refusal: that exception is the check, not a sign it was skipped)
    rng = stack_range_text(versions or {}) if exc and "start-up version check" not in str((cause or {}).get("text")) \
        else None
    if rng:   # a lead the exception does not give: the release was not written for this stack (stackcause.py)
        cause = {"kind": cause["kind"] if cause else "stack-range", "text": (cause["text"] + "; " if cause else "") + rng}
    after = _consequences(ev, out, exc or rec) if raised and not explained else None
    return {"kind": kind, "cls": (exc.value or {}).get("cls") if exc else None,
            "msg": (exc.value or {}).get("msg") if exc else None, "step": rec.step, "explained": explained,
            "text": text, "where_text": where, "phase": phase, "location": location_of(rec.file, rec.line),
            "disk_full": disk, "cause": cause, "first": bool(after), "consequences": after or "",
            "earlier_text": _earlier(seen, exc),
            "after_loop": bool(post), "in_loop": _in_loop(tb_exc)}


# HF Trainer's training-loop functions (transformers trainer.py): a traceback through one of them was raised by a
# run past argument parsing (facts/ev.py `past_start_up`)
_LOOP_FRAMES = ("_inner_training_loop (", "training_step (", "compute_loss (")


def _in_loop(tb: Any) -> bool:
    """Whether the traceback `tb` (a Notice whose value holds ``frames``, "function (file)") runs through the
    HF Trainer's training loop."""
    frames = (tb.value or {}).get("frames") or () if tb is not None and isinstance(tb.value, dict) else ()
    return any(str(fr).startswith(_LOOP_FRAMES) for fr in frames)


STOP_WORDS = ("SignalException", "KeyboardInterrupt", "killed by signal: Terminated", "killed by signal: Interrupt",
              "killed by signal: Hangup", "got signal")


def _after_stop(n: Any, killed: dict[str, Any]) -> bool:
    """True when the exception notice `n` is what a stop from outside (`killed`, its ``outside`` set) made the
    process raise: a signal's own exception (`STOP_WORDS`: torchelastic's SignalException, CPython's
    KeyboardInterrupt, a DataLoader worker killed by the same SIGTERM/SIGINT/SIGHUP), or any exception below the
    stop's line in the same file."""
    if any(w in n.text for w in STOP_WORDS):
        return True
    loc = killed.get("location") or {}
    return loc.get("file") == n.file and isinstance(loc.get("line"), int) and n.line > loc["line"]


def _consequences(ev: Evidence, out: dict[str, Any], exc: Any) -> str | None:
    """The words, after a raised exception, for the failures of the other ranks (or of the launcher) that it
    explains: an NCCL collective timeout or abort (ProcessGroupNCCL.cpp ``WorkNCCL::checkTimeout``: a rank
    that raised no longer enters the collectives its peers wait in), an NCCL error of a peer that went away,
    torchrun's ChildFailedError / the elastic agent's "failed (exitcode: N)" and "closing signal SIGTERM" lines
    (torch/distributed/elastic/agent/server/api.py tears the other workers down once one fails), DeepSpeed's
    launcher "Killing subprocess" lines. None when the logs show none of them: the exception stands alone."""
    said = []
    n = out.get("nccl")
    if n:
        who = f" on rank {n['rank']}" if n.get("rank") is not None else ""
        op = f" ({n['op']})" if n.get("op") else ""
        said.append(f"the NCCL collective timeout{who}{op}")
    if out.get("nccl_error"):
        said.append(f"the NCCL error \"{out['nccl_error'].get('desc')}\"")
    kills = {k.kind for f in ev.files for k in f.kills}
    later = [x for f in ev.files for x in f.notices if x.kind == "exception" and x is not exc
             and is_consequence_exc(x.value or {}, x.text)]
    torchrun = bool(kills & {"child-failed-root", "child-failed", "torchrun-exit"})
    cls = str((later[-1].value or {}).get("cls") or "").rsplit(".", 1)[-1] if later else ""
    if later and not n and not out.get("nccl_error") and not (torchrun and cls == "ChildFailedError"):
        said.append(f"the {cls} that follows" if cls else "the distributed error that follows")
    if torchrun:
        said.append("torchrun's failure lines")
    elif kills & {"launcher-kill", "launcher-exit"}:
        said.append("the launcher's kill lines")
    if not said:
        return None
    rank = (exc.value or {}).get("rank")
    if rank is None:   # the file's rank only where its path says it: the `[rankN]:` lines of an interleaved log
        rank = next((f.origin.get("rank") for f in ev.files if f.read.path == exc.file   # name other writers too
                     and f.origin.get("source") == "path"), None)
    whose = f"rank {rank}'s exception" if isinstance(rank, int) and not isinstance(rank, bool) else "this exception"
    return (" — then " + ", ".join(said) + f": consequences of {whose}, not its cause (a process that raised stops "
            "entering the collectives its peers wait in, and its launcher then stops the others)")


def _traceback_before(ev: Evidence, exc: Any) -> Any:
    """The traceback notice nearest above the exception line in its file (its frames end in that exception)."""
    best = None
    for f in ev.files:
        for n in f.notices:
            if n.kind == "traceback" and n.file == exc.file and n.line <= exc.line:
                if best is None or n.line > best.line:
                    best = n
    return best


def _earlier(seen: list[Notice], exc: Notice | None) -> str:
    """"; earlier in the logs: CLS: MSG (file:line)" for the first exception a process raised before the one that
    ended the run, with another class or message (a chain's original error, or an earlier attempt the user pasted
    above a later one): named as evidence, never ranked above the last one; "" when there is none."""
    if exc is None:
        return ""
    key = ((exc.value or {}).get("cls"), (exc.value or {}).get("msg"))
    for n in seen:
        v = n.value or {}
        # an exception read from its words alone (typeless) may be the raise line of a traceback's code, not a raise
        if n is exc or (v.get("cls"), v.get("msg")) == key or v.get("typeless"):
            continue
        text = (f"{v.get('cls')}: {v.get('msg')}" if v.get("msg") else f"{v.get('cls')}")[:200]
        return f"; earlier in the logs: {text} ({os.path.basename(n.file)}:{n.line})"
    return ""


def _cut_where(tb: Any, where: str, out: dict[str, Any]) -> tuple[str | None, str]:
    """(phase, words) of a traceback cut before its exception line: what the log does show of where the run
    was — the phase its innermost frames name (oomcause.PHASES: checkpoint save, evaluation, backward, forward,
    model load, optimizer) and that frame, and the last step the logs reached — so that the report says what it
    knows and what is missing rather than "unknown"."""
    from finetune_doctor.analyzers.postmortem.oomcause import oom_phase

    v = (tb.value or {}) if isinstance(tb.value, dict) else {}
    frames = tuple(v.get("frames") or ())
    inner = tuple(reversed(frames[-6:]))   # nearest the error first, as oom_phase reads them
    phase, _ = oom_phase(inner, None) if inner else (None, None)
    last = (out.get("steps") or {}).get("last")
    reached = f"; the logs reach step {last}" if last is not None and tb.step is None else ""
    if not inner:
        return None, where + (f" ({reached[2:]})" if reached else "")
    # the innermost function frame ("func (file.py)"), with the code line below it when the paste kept one
    k = next((i for i, fr in enumerate(inner) if _FUNC_FRAME.match(fr)), None)
    shown = inner[k] if k is not None else f"`{inner[0]}`"
    # the package that frame is in (site-packages/<package>/, src/llamafactory/), as raised_at names it: which
    # library the run was inside when the paste was cut
    owner = {f"{p[1]} ({p[2]})": p[0] for p in (v.get("pkgs") or ())}.get(shown) if k is not None else None
    if owner:
        shown = f"{shown[:-1]}, {owner})"
    if k:
        shown += f" at `{inner[0]}`"
    head = f"in the {_PHASE_WORDS.get(phase, phase)}" if phase else where
    return phase, f"{head} (the innermost frame the log shows: {shown}{reached})"


_FUNC_FRAME = re.compile(r"^[\w<>]+ \([\w.-]+\)$")
_PHASE_WORDS = {"forward": "forward pass", "backward": "backward pass"}
