"""Confirm fixes by probing: simulate (FakeTensorMode on the CPU) or run (GPU) short steps of the run before and
after a fix's edits. A confirmation fills ``fix.confirmed`` (DESIGN.md): ``{"by": "simulate", "before_gib": 92.4,
"after_gib": 61.0}``.

How probe bytes become the DESIGN.md per-GPU total: the probe measures tensors (simulate: the live tensor peak,
the analogue of ``max_memory_allocated``); the analytic model (analyzers/memory.py) supplies what a tensor probe
cannot see — DeepSpeed/DDP buffers (``per_gpu.buffers``), the allocator reserve at the estimator's rate, and the
runtime (CUDA context, cuBLAS, NCCL). total = tensor peak + buffers + reserve·(tensor peak + buffers)/(analytic
peak) + runtime. A gpu probe measures reserved memory itself, so its total is the measured device-level usage
(or reserved + runtime when the driver hides usage).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from finetune_doctor.errors import InputError, MissingExtra
from finetune_doctor.settings import Options
from finetune_doctor.types import GIB, Confirmation, Finding, Hardware

# what a probe is doing, for the caller to show (pipeline → reporters/sections/probe.py `progress`); probes never
# touch the terminal themselves
Progress = Callable[[str], None] | None

# rule categories whose fixes change memory or numerics (the others change semantics or files only)
CONFIRMABLE = ("memory", "precision", "deepspeed", "numerics")


@dataclass(frozen=True)
class Measured:
    """One probe of one run: tensor peak and DESIGN.md total per GPU (GiB), and the raw result."""

    by: str                    # simulate | gpu
    tensor_gib: float
    total_gib: float
    result: Any                # SimResult | GpuResult
    finite_steps: int | None = None
    replay: Any = None         # probes/replayed.py ReplayView: the trace replayed (simulate with trace=True)
    note: str | None = None    # why there is no replay


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401  (availability check only)
    except ImportError:
        raise MissingExtra("probes", "all") from None


def gpu_usable(force: bool) -> bool:
    import os

    if os.environ.get("FINETUNE_DOCTOR_NO_NVML") == "1":
        return False
    try:
        from finetune_doctor.probes.gpu import free_gpus

        free, busy = free_gpus()
    except Exception:  # no driver, no NVML: simulate
        return False
    return bool(free) and (not busy or force)


def overhead(run: Any, hw: Hardware | None, tensor_gib: float) -> tuple[float, dict[str, float]]:
    """DESIGN.md total per GPU for a tensor peak of `tensor_gib`, with the analytic model's buffers, allocator
    reserve rate and runtime (module docstring). Returns (total GiB, the parts)."""
    from finetune_doctor.analyzers.memory import estimate

    est = estimate(run, hw)
    buffers = est.per_gpu.get("buffers", 0.0)
    rate = est.details.get("reserve_gib", 0.0) / est.peak_allocated if est.peak_allocated else 0.0
    runtime = est.details.get("runtime_gib", 0.0)
    reserve = rate * (tensor_gib + buffers)
    return tensor_gib + buffers + reserve + runtime, {"buffers": buffers, "reserve": reserve, "runtime": runtime,
                                                      "analytic_total": est.total,
                                                      "analytic_peak_allocated": est.peak_allocated}


# Simulations are deterministic functions of the ProbeSpec: one process (a test session, `check --probe` with many
# fixes sharing a run) simulates each spec once.
_SIMULATED: dict[tuple, Any] = {}


def measure(run: Any, hw: Hardware | None, *, mode: str = "simulate", steps: int = 2, force: bool = False,
            cache: dict | None = None, trace: bool = False, torch_version: str | None = None,
            progress: Progress = None) -> Measured:
    """Probe `run` (a run.Run) once. `mode` simulate|gpu|auto (auto: gpu when a free GPU is here). `cache` maps
    ProbeSpec → Measured so a run shared by several fixes is probed once (simulations are also kept for the
    process). `trace` (simulate): record the allocation trace and replay it through the caching-allocator model
    (probes/replayed.py); the total is then the replay's (peak reserved + what the trace does not hold + runtime)
    instead of the tensor peak plus the analytic reserve rate. `torch_version` selects how the allocator variables
    are read. `progress(message)` hears each stage (import, simulation, replays)."""
    from finetune_doctor.probes.spec import spec_from_run

    if progress is not None:
        progress("loading torch and transformers")
    _need_torch()
    spec = spec_from_run(run)
    if mode == "auto":
        mode = "gpu" if gpu_usable(force) else "simulate"
    key = (spec, mode, steps)
    if cache is not None and key in cache and (not trace or mode != "simulate" or cache[key].replay is not None
                                                or cache[key].note):
        return cache[key]
    if mode == "gpu":
        from finetune_doctor.probes.gpu import run_gpu
        from finetune_doctor.probes.simulate import simulate

        predicted = simulate(spec, steps=2).peak_gib
        res = run_gpu(spec, steps=max(steps, 2), force=force, predicted_gib=predicted)
        if res.error:
            total = float("inf") if res.oom else float("nan")
            m = Measured("gpu", float("nan"), total, res, 0)
        else:
            dev = max((u for u in res.device_used if u is not None), default=None)
            _, parts = overhead(run, hw, res.peak_allocated_gib)
            total = dev / GIB if dev is not None else res.peak_reserved_gib + parts["runtime"]
            m = Measured("gpu", res.peak_allocated_gib, total, res, res.nan_free_steps)
    else:
        m = _simulated(run, hw, spec, steps, trace, torch_version, progress)
    if cache is not None:
        cache[key] = m
    return m


def _simulated(run: Any, hw: Hardware | None, spec: Any, steps: int, trace: bool,
               torch_version: str | None, progress: Progress = None) -> Measured:
    """The simulate probe of `spec`, replayed when `trace` (measure)."""
    from finetune_doctor.probes.simulate import simulate

    res = _SIMULATED.get((spec, steps))
    if res is None or (trace and not res.traces):
        res = simulate(spec, steps=max(steps, 2), trace=trace, progress=progress)
        _SIMULATED[(spec, steps)] = res
    total, _ = overhead(run, hw, res.peak_gib)
    if not trace:
        return Measured("simulate", res.peak_gib, total, res)
    from finetune_doctor.probes.replayed import replay_probe, untrusted

    if progress is not None:
        progress("replaying the allocation trace through the caching-allocator model")
    try:
        view = replay_probe(run, hw, res, torch_version=torch_version, toggle=False)
    except InputError as err:   # an allocator variable torch would refuse: the tensor peak still stands
        return Measured("simulate", res.peak_gib, total, res, note=f"allocator replay skipped: {err.message}")
    why = untrusted(view, res)
    if why:
        return Measured("simulate", res.peak_gib, total, res, note=f"allocator replay: {why}")
    return Measured("simulate", res.peak_gib, view.total_gib, res, replay=view)


def confirm(run_before: Any, run_after: Any, hw: Hardware | None = None, *, mode: str = "simulate",
            steps: int = 2, force: bool = False, cache: dict | None = None, trace: bool = False,
            torch_version: str | None = None, progress: Progress = None) -> Confirmation:
    """Probe the run before and after a fix; GiB per GPU as DESIGN.md `memory.per_gpu_gib.total` counts it
    (`trace`: from the allocator replay of each simulation, `measure`).

    The note says whether the fixed run fits `hw` ("fits 79.2" / "still exceeds 79.2") and, for a gpu probe, how
    many steps had a finite loss and gradient norm.
    """
    kw = {"mode": mode, "steps": steps, "force": force, "cache": cache, "trace": trace,
          "torch_version": torch_version}
    b = measure(run_before, hw, progress=None if progress is None else lambda m: progress(f"before the fix: {m}"),
                **kw)
    a = measure(run_after, hw, progress=None if progress is None else lambda m: progress(f"after the fix: {m}"),
                **kw)
    cap = hw.capacity_gib if hw and hw.capacity_gib else None
    parts = []   # the reporters print by/before/after themselves; the note adds what they cannot know
    if cap:
        parts.append(("fits " if a.total_gib <= cap else "still exceeds ") + f"{cap:.1f}")
    if a.by == "gpu" and getattr(a.result, "error", None):
        parts.append(a.result.error)
    return Confirmation(by=a.by, before_gib=_num(b.total_gib), after_gib=_num(a.total_gib),
                        nan_free_steps=a.finite_steps, note=", ".join(parts) or None)


def _num(x: float) -> float | None:
    return None if x != x else x


# ---- fixes → the run after them ------------------------------------------------------------------------

def run_after_fix(asm: Any, fix: Any, opts: Options) -> Any:
    """The Run LLaMA-Factory would execute after `fix`'s edits (facts/config.py `Assembly.run_after`): each edit's
    file is mapped to its role, the config or the DeepSpeed JSON."""
    src = asm.sources
    ds_paths = {p for p in (src["deepspeed"].path if "deepspeed" in src else None,
                            getattr(asm.ds, "path", None) if asm.ds is not None else None) if p}
    cfg_paths = {p for p in (src["config"].path if "config" in src else None, asm.doc.path, "config") if p}
    edits = []
    for e in fix.edits:
        if e.file == "deepspeed" or e.file in ds_paths:
            edits.append(("deepspeed", e.key, e.value, e.delete))
        elif e.file in cfg_paths:
            edits.append(("config", e.key, e.value, e.delete))
    return asm.run_after(edits)


def _confirmable(f: Finding) -> bool:
    return f.fix is not None and bool(f.fix.edits) and f.category in CONFIRMABLE


def confirm_findings(asm: Any, findings: list[Finding], opts: Options, *, mode: str = "auto", steps: int = 2,
                     force: bool = False, cache: dict | None = None, trace: bool = False,
                     progress: Progress = None) -> list[Finding]:
    """Fill `fix.confirmed` of every finding whose fix changes memory or numerics (`doctor check --probe`).

    Findings without a resolved run, or whose fix the probe cannot express, get a Confirmation with ``by=None``
    and a note saying why; probe failures (a model transformers cannot build) become notes, never crashes.
    """
    if asm.run is None:
        return findings
    cache = {} if cache is None else cache
    out = []
    for f in findings:
        if not _confirmable(f):
            out.append(f)
            continue
        try:
            after = run_after_fix(asm, f.fix, opts)
            say = None if progress is None else (lambda m, f=f: progress(f"{f.code} {f.name}, {m}"))
            conf = confirm(asm.run, after, asm.hw, mode=mode, steps=steps, force=force, cache=cache, trace=trace,
                           torch_version=opts.torch_version, progress=say)
            if f.category in ("numerics", "precision"):
                conf = _with_numerics(conf, asm, after)
        except (InputError, MissingExtra) as err:
            conf = Confirmation(by=None, note=f"not probed: {err}")
        except Exception as err:  # a probe failure must not hide the diagnosis
            conf = Confirmation(by=None, note=f"probe failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}")
        out.append(replace(f, fix=replace(f.fix, confirmed=conf)))
    return out


# Largest model the numerics probe runs on the CPU: a forward in half precision of more than this many parameters
# takes minutes and tens of GB of RAM on a CPU box.
NUMERICS_CPU_MAX_PARAMS = 3e9


def _with_numerics(conf: Confirmation, asm: Any, after: Any) -> Confirmation:
    """Precision/numerics fixes: memory is confirmed either way; numerics only with the checkpoint on disk (a
    forward pass on real samples of the configured data, probes/numerics.py), else the note says why not."""
    from finetune_doctor.probes.numerics import probe_numerics, weights_on_disk

    path = asm.doc.values.get("model_name_or_path")
    path = _local_model_dir(str(path), asm) if path else None
    extra = None
    if not weights_on_disk(path):
        extra = "numerics not confirmed: random weights (the checkpoint is not on disk here)"
    else:
        before = asm.run.autocast or asm.run.compute_dtype or "float32"
        fixed = after.autocast or after.compute_dtype or "float32"
        device = "cuda" if gpu_usable(False) else "cpu"
        n_params = asm.run.arch.total_params()
        if device == "cpu" and n_params > NUMERICS_CPU_MAX_PARAMS:
            extra = (f"numerics not probed: a {n_params / 1e9:.1f}B-parameter forward needs a free GPU "
                     "(--mode gpu) on this machine")
        else:
            batches = sample_batches(asm, path)
            if before == "float32":
                res = probe_numerics(path, batches, fixed, "float32", device=device)
                first = res.passes[0] if res.passes else None
                extra = res.note if first is None else (
                    f"numerics: {fixed} forward on {res.samples} real samples is finite everywhere" if
                    first.first_overflow is None else
                    f"numerics: {fixed} overflows first in {first.first_overflow} on real samples")
            else:
                res = probe_numerics(path, batches, before, fixed, device=device)
                extra = "numerics: " + res.note
    return replace(conf, note=(conf.note + "; " if conf.note else "") + extra) if extra else conf


def _local_model_dir(name: str, asm: Any) -> str | None:
    """`model_name_or_path` as a local directory (absolute, or relative to the YAML's directory)."""
    from pathlib import Path

    for cand in (Path(name), Path(asm.doc.path).resolve().parent / name):
        if cand.is_dir():
            return str(cand)
    return None


def sample_batches(asm: Any, model_dir: str, n: int = 4, max_len: int = 512) -> list:
    """Up to `n` real samples of the configured datasets, tokenized with the checkpoint's tokenizer (the text of
    each row's string fields joined, LF's template not applied), each a 1×L LongTensor with L ≤ `max_len`
    (and ≤ cutoff_len). Empty when no dataset row is readable here."""
    import torch

    from finetune_doctor.readers.data.datasets import iter_chunks, resolve_datasets

    from finetune_doctor.run.values import split_list

    values = asm.doc.values
    names = list(split_list(values.get("dataset")))   # LF's split_arg, empty items dropped (run/values.py)
    if not names:
        return []
    from pathlib import Path

    try:
        specs, _ = resolve_datasets(names, str(values.get("dataset_dir") or "data"),
                                    config_dir=str(Path(asm.doc.path).resolve().parent))
    except InputError:
        return []
    texts: list[str] = []
    for spec in specs:
        if spec.unavailable:
            continue
        for ch in iter_chunks(spec, max_rows=n):
            for row in ch.rows or []:
                texts.append(_row_text(row))
        if len(texts) >= n:
            break
    texts = [t for t in texts if t.strip()][:n]
    if not texts:
        return []
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
    except Exception:  # no tokenizer files next to the weights
        return []
    limit = min(max_len, int(asm.run.seq_len or max_len))
    return [torch.tensor([tok(t, add_special_tokens=True)["input_ids"][:limit]], dtype=torch.long) for t in texts]


def _row_text(row: Any) -> str:
    if isinstance(row, str):
        return row
    if isinstance(row, dict):
        return "\n".join(_row_text(v) for v in row.values() if v is not None)
    if isinstance(row, list):
        return "\n".join(_row_text(v) for v in row)
    return ""


# ---- the probe section of the report --------------------------------------------------------------------------------------

def section_data(run: Any, m: Measured, confirmations: list[tuple[Finding, Confirmation]]) -> dict[str, Any]:
    """The ``sections["probe"]`` payload: the configured run's probe and each fix's confirmation."""
    res = m.result
    d = {"by": m.by, "tensor_gib": round(m.tensor_gib, 3), "total_gib": _num(round(m.total_gib, 3)),
         "spec": getattr(getattr(res, "spec", None), "describe", lambda: None)(), "result": res.as_dict(),
         "fixes": [{"code": f.code, "name": f.name, "title": f.fix.title if f.fix else None, **c.as_dict()}
                   for f, c in confirmations]}
    if d["spec"] is None:
        from finetune_doctor.probes.spec import spec_from_run

        d["spec"] = spec_from_run(run).describe()
    return d


def replay_data(run: Any, hw: Hardware | None, m: Measured, shape: str) -> dict[str, Any] | None:
    """The probe section's ``replay`` object: the trace replayed on the card (probes/replayed.py `ReplayView`,
    GiB) with the simulated method's verdict, probability of OOM and 90 % interval (analyzers/memory/uncertainty.py for
    `shape` class); None without a replay."""
    if m.replay is None:
        return None
    from finetune_doctor.analyzers.memory import uncertainty
    from finetune_doctor.facts.mem import budget_of

    view = m.replay
    a = uncertainty.assess(view.total_gib, budget_of(hw), "simulated", shape)
    d = view.as_dict()
    d.update({"verdict": a.verdict, "p_oom": None if a.p_oom is None else round(a.p_oom, 3),
              "interval_gib": [round(v, 2) for v in a.interval_gib], "error_class": shape})
    return d


def configured(asm: Any, opts: Options, *, steps: int = 2, cache: dict | None = None,
               progress: Progress = None) -> Measured | None:
    """The configured run's simulate probe with its replay, from `cache` when a confirmation probed it already;
    None when it cannot be simulated here (the reason goes to the notes)."""
    try:
        return measure(asm.run, asm.hw, mode="simulate", steps=steps, cache=cache, trace=True,
                       torch_version=opts.torch_version, progress=progress)
    except (InputError, MissingExtra) as err:
        asm.notes.append(f"allocator replay skipped: {err}")
    except Exception as err:  # a probe failure must not hide the diagnosis
        asm.notes.append(f"allocator replay skipped: {type(err).__name__}: {str(err).splitlines()[0][:160]}")
    return None


def probe_check(asm: Any, findings: list[Finding], opts: Options, *, mode: str = "simulate",
                steps: int = 2, progress: Progress = None) -> tuple[list[Finding], dict[str, Any] | None]:
    """`doctor check --probe`: confirm every memory/numerics fix (`confirm_findings`, simulations traced) and,
    when the configured run was simulated (a fix needed it, or the expandable-segments remedy does), replay its
    trace through the caching-allocator model: the probe section gets the predicted peak reserved, the
    fragmentation, the simulated verdict and, on a card it would not fit, PyTorch's OOM message; the remedy
    `launch with ...expandable_segments:True` is confirmed by replaying the trace with the setting on.
    `progress(message)` hears each stage. Returns (findings, the ``probe`` section or None)."""
    from finetune_doctor.analyzers.memory.launchenv import EXPANDABLE_REMEDY
    from finetune_doctor.probes.replayed import with_toggled
    from finetune_doctor.probes.spec import spec_from_run

    cache: dict = {}
    findings = confirm_findings(asm, findings, opts, mode=mode, steps=steps, cache=cache, trace=True,
                                progress=progress)
    if asm.run is None:
        return findings, None
    wants = [f for f in findings if f.fix is not None and f.fix.title == EXPANDABLE_REMEDY]
    m = cache.get((spec_from_run(asm.run), "simulate", steps))
    if m is None and wants:
        m = configured(asm, opts, steps=steps, cache=cache, progress=progress)
    if m is None:
        return findings, None
    if m.note:
        asm.notes.append(m.note)
    if m.replay is not None:
        if progress is not None:
            progress("replaying the trace with expandable_segments:True")
        m = replace(m, replay=with_toggled(m.replay, asm.run, asm.hw, m.result))
        findings = confirm_expandable(findings, m)
    confs = [(f, f.fix.confirmed) for f in findings if f.fix is not None and f.fix.confirmed is not None]
    section = section_data(asm.run, m, confs)
    shape = str((asm.memory.details if asm.memory else {}).get("reserve_class") or "default")
    section["replay"] = replay_data(asm.run, asm.hw, m, shape)
    return findings, section


def confirm_expandable(findings: list[Finding], m: Measured) -> list[Finding]:
    """Confirm the remedy ``launch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (no file edit, so no
    before/after simulation) by the configured run's replay with the setting off and on (`m.replay`, toggled)."""
    from finetune_doctor.analyzers.memory.launchenv import EXPANDABLE_REMEDY
    from finetune_doctor.probes.replayed import expandable_confirmation

    if m.replay is None:
        return findings
    conf = expandable_confirmation(m.replay)
    return [replace(f, fix=replace(f.fix, confirmed=conf))
            if f.fix is not None and f.fix.title == EXPANDABLE_REMEDY and not f.fix.edits else f for f in findings]


def confirm_fragmentation(asm: Any, findings: list[Finding], opts: Options) -> list[Finding]:
    """`doctor postmortem`: confirm the ``fragmentation`` finding by replaying the crashed config — its simulate
    probe's trace through the caching-allocator model on the card the log names, with the settings the run had
    (probes/replayed.py) and with expandable segments on. Without torch, a resolved run or a card, the finding
    keeps the estimate's figures (rules/fragmentation.yaml) and this returns it unchanged."""
    frag = [f for f in findings if f.name == "fragmentation" and f.fix is not None]
    if not frag or asm is None or asm.run is None or asm.hw is None or not asm.hw.capacity_gib:
        return findings
    try:
        _need_torch()
    except MissingExtra:
        return findings
    from finetune_doctor.probes.replayed import expandable_confirmation, with_toggled

    m = configured(asm, opts)
    if m is None or m.replay is None:
        if m is not None and m.note:
            asm.notes.append(m.note)
        return findings
    view = with_toggled(m.replay, asm.run, asm.hw, m.result)
    conf = expandable_confirmation(view)
    if view.toggled is None:
        conf = replace(conf, note="the run already had expandable segments (llamafactory-cli sets them for torchrun "
                                  "launches unless OPTIM_TORCH is disabled): the replay finds "
                                  f"{view.as_dict()['fragmentation_gib']:.2f} GiB reserved but unallocated at its peak")
    return [replace(f, fix=replace(f.fix, confirmed=conf)) if f in frag else f for f in findings]
