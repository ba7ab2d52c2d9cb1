"""`doctor probe`: probe the configured run (simulate on the CPU, or real steps on a GPU) and confirm each fix.

Reads and judges the config as `doctor check` does (facts/config.py, engine/judge.py), probes the run as configured
and confirms every fix that changes memory or numerics by probing the run before and after its edits
(probes/confirm.py). The report's ``memory`` is the probe's (method simulated | measured), with the verdict of
that method's error model (analyzers/memory/uncertainty.py). A simulation records its allocation trace and replays it
through the caching-allocator model (probes/replayed.py): the total is the replay's peak reserved plus what the
trace does not hold, and the probe section shows the replay (fragmentation, PyTorch's OOM message on a card it
would not fit, and the same trace with expandable segments on). While it probes, a terminal's stderr shows what it
is doing (reporters/sections/probe.py `progress`; nothing when stderr is not a terminal).
"""

from __future__ import annotations

from dataclasses import replace

from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError
from finetune_doctor.facts.assembly import Assembly
from finetune_doctor.facts.config import assemble_config
from finetune_doctor.facts.mem import judged
from finetune_doctor.probes.confirm import (Measured, Progress, confirm_expandable, confirm_findings, gpu_usable,
                                            measure, overhead, replay_data, section_data)
from finetune_doctor.reporters.sections.probe import progress as probe_progress
from finetune_doctor.settings import Options
from finetune_doctor.types import GIB, MemoryEstimate, Report


def _nothing_to_probe(asm: Assembly, opts: Options) -> InputError:
    """Why there is no run to probe, in the words of the first error `check` reports for it (a micro batch of 0,
    an unknown model...), at its line; "set model_name_or_path" only when that is the reason (issue 27)."""
    findings = judge("check", asm.facts, asm.sources, opts, texts={asm.doc.path: asm.doc.text}, live=asm.live())
    first = next((f for f in findings if f.severity == "error"), None)
    if first is not None:
        return InputError(f"nothing to probe: {first.message}", file=first.location.file or asm.doc.path,
                          line=first.location.line)
    return InputError("no model to probe: set model_name_or_path", file=asm.doc.path, line=1)


def run(config: str, overrides: tuple[str, ...], opts: Options, *, mode: str = "auto", steps: int = 2,
        force: bool = False) -> Report:
    """`doctor probe CONFIG.yaml`: probe the configured run and confirm every memory/numerics fix.

    Raises InputError for a config without a resolvable model (nothing to probe), MissingExtra without torch.
    """
    if steps < 1:
        raise InputError(f"--steps must be at least 1, got {steps}", file="--steps")
    asm = assemble_config(config, overrides, opts, "probe")
    if asm.run is None:
        raise _nothing_to_probe(asm, opts)
    if mode == "gpu":
        _require_gpu(asm, force)
    with probe_progress() as say:   # a status line on a terminal's stderr, nothing otherwise
        m, findings = _probe(asm, opts, mode, steps, force, say)
    findings = confirm_expandable(findings, m)
    confs = [(f, f.fix.confirmed) for f in findings if f.fix is not None and f.fix.confirmed is not None]
    section = section_data(asm.run, m, confs)
    memory = _memory_of(asm, m)
    if m.replay is not None:
        section["replay"] = replay_data(asm.run, asm.hw, m, _shape(asm))
    return Report(command="probe", inputs=asm.inputs(), findings=tuple(findings), run=asm.run_summary(),
                  hardware=asm.hw, memory=memory, sections={"model": asm.model_section(), "probe": section},
                  notes=tuple(dict.fromkeys(asm.notes)))


def _probe(asm: Assembly, opts: Options, mode: str, steps: int, force: bool,
           say: Progress) -> tuple[Measured, list]:
    """The configured run probed (its replay toggled) and every memory/numerics fix confirmed; `say` hears each
    stage."""
    cache: dict = {}
    m = measure(asm.run, asm.hw, mode=mode, steps=steps, force=force, cache=cache, trace=True,
                torch_version=opts.torch_version, progress=say)
    if m.note:
        asm.notes.append(m.note)
    if m.replay is not None:
        from finetune_doctor.probes.replayed import with_toggled

        if say is not None:
            say("replaying the trace with expandable_segments:True")
        m = replace(m, replay=with_toggled(m.replay, asm.run, asm.hw, m.result))
    findings = judge("check", asm.facts, asm.sources, opts, texts={asm.doc.path: asm.doc.text}, live=asm.live())
    findings = confirm_findings(asm, findings, opts, mode=mode, steps=steps, force=force, cache=cache, trace=True,
                                progress=say)
    return m, findings


def _shape(asm: Assembly) -> str:
    """The run's shape class (analyzers/memory/reserve.py), as the analytic estimate classified it."""
    return str((asm.memory.details if asm.memory else {}).get("reserve_class") or "default")


def _require_gpu(asm: Assembly, force: bool) -> None:
    """``--mode gpu`` needs a free local GPU: an input error naming why there is none."""
    from finetune_doctor.probes.gpu import ProbeRefused, free_gpus

    if gpu_usable(force):
        return
    try:
        free_gpus()
    except ProbeRefused as err:
        raise InputError(f"--mode gpu: {err}", file=asm.doc.path) from None
    raise InputError("--mode gpu: every GPU is in use by other processes (pass --force)", file=asm.doc.path)


def _memory_of(asm: Assembly, m: Measured) -> MemoryEstimate | None:
    """The report's `memory` object from the probe: per-category tensor GiB (simulate), plus the analytic
    buffers/runtime; method simulated|measured."""
    if m.total_gib != m.total_gib:
        return asm.memory
    total, parts = overhead(asm.run, asm.hw, m.tensor_gib if m.tensor_gib == m.tensor_gib else 0.0)
    if m.by == "gpu":
        total = m.total_gib
    per = {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0, "activations": 0.0, "logits": 0.0}
    by = getattr(m.result, "by_category", None)
    if by:
        per["weights"] = (by.get("weights", 0) + by.get("buffers", 0)) / GIB
        per["gradients"] = by.get("gradients", 0) / GIB
        per["optimizer"] = by.get("optimizer", 0) / GIB
        per["activations"] = (by.get("activations", 0) + by.get("temp", 0) + by.get("inputs", 0)) / GIB
        per["logits"] = by.get("logits", 0) / GIB
    per["buffers"] = parts["buffers"]
    if m.replay is not None:   # the replay's total: runtime holds the runtime and what the allocator keeps cached
        total = m.total_gib
    per["runtime"] = (total - m.tensor_gib - parts["buffers"] if m.by == "gpu" or m.replay is not None
                      else parts["reserve"] + parts["runtime"])
    per["total"] = total
    hw = asm.hw
    fits = headroom = None
    if hw is not None and hw.capacity_gib:
        in_use = max(hw.in_use_gib) if hw.in_use_gib else 0.0
        headroom = hw.capacity_gib - in_use - total
        fits = headroom >= 0
    est = MemoryEstimate(per_gpu=per, peak_allocated=m.tensor_gib, host=asm.memory.host if asm.memory else 0.0,
                         fits=fits, headroom=headroom, method="simulated" if m.by == "simulate" else "measured",
                         phase=getattr(m.result, "segment", "") or "",
                         details={"probe": m.by, "reserve_class": _shape(asm)})
    return judged(est, hw)
