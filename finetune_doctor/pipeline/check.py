"""`doctor check`: read a run, resolve it, compute facts, judge them with the rule pack, report.

The same assembly (`build_context`) serves `doctor lint` (static facts only), `doctor estimate` and
`doctor postmortem --config`, so every command sees the same facts namespaces:

========  =====================================================================================================
cfg       merged LLaMA-Factory YAML keys (after ``key=value`` overrides), plain values
run       the resolved `Run` (run.py) as a dict, plus ``tokens_per_micro_batch``, ``quantized``, ``global_batch``
model     architecture and parameter counts: name, model_type, dtype, params_b, trainable_params, hidden_size,
          num_layers, vocab_size, is_moe, num_experts, expert_lora_params, max_position_embeddings, source
hw        the GPUs: gpu, num_gpus, capacity_gib, bf16, source, compute_capability, in_use_gib (None if unknown)
mem       the estimate: per_gpu (GiB by term), total, peak_allocated, host, fits, headroom, phase,
          capacity_gib, host_ram_gib, weights_replicated_gib (None without a model)
ds        the DeepSpeed facts of readers/dsconfig.py (None without ``deepspeed:``)
lint      key problems of readers/keyschema.py: ``keys`` (list of {key, kind, message, suggestion, replacement,
          line}), and ``derived``
data      token statistics of the configured datasets (pipeline/data.py), when scanned
ds_missing  lint only: the ``deepspeed:`` path that did not resolve ({value, message})
suppress  unused suppression comments (suppression.py)
========  =====================================================================================================

`doctor postmortem` adds ``ev`` (evidence.py) and `doctor gpus` ``gpus`` (pipeline/gpus.py) beside these.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finetune_doctor.engine.evaluate import RuleContext, evaluate
from finetune_doctor.engine.loader import load_rules, select_rules
from finetune_doctor.errors import InputError
from finetune_doctor.readers.yamlcfg import ConfigDoc, load_config
from finetune_doctor.settings import Options
from finetune_doctor.types import GIB, Finding, Hardware, MemoryEstimate, Report, SourceDoc


@dataclass
class Assembly:
    """Everything read and computed for one config: the rule context plus the live objects behind it."""

    doc: ConfigDoc
    ctx: RuleContext
    run: Any = None                # run.Run, when the model is known
    hw: Hardware | None = None
    memory: MemoryEstimate | None = None
    ds: Any = None                 # readers.dsconfig.DSConfig
    notes: list[str] = field(default_factory=list)


def resolve_hardware(opts: Options, *, allow_nvml: bool = True) -> Hardware | None:
    """`--gpu` spec, else the cards NVML sees, else None (unknown)."""
    if opts.gpu:
        from finetune_doctor.hardware.catalog import parse_gpu_spec

        return parse_gpu_spec(opts.gpu, opts.nnodes)
    if allow_nvml and os.environ.get("FINETUNE_DOCTOR_NO_NVML") != "1":
        try:
            from finetune_doctor.hardware.nvml import detect
        except ImportError:
            return None
        try:
            hw = detect()
        except Exception:  # a broken driver must not stop a diagnosis that needs no GPU
            return None
        from dataclasses import replace

        if hw is not None and hw.host_ram_gib is None:
            hw = replace(hw, host_ram_gib=local_ram_gib())   # NVML sees this machine: its RAM is the node's
        if hw is not None and opts.nnodes and opts.nnodes > 1:
            hw = replace(hw, nnodes=opts.nnodes, num_gpus=(hw.num_gpus or 1) * opts.nnodes)
        return hw
    return None


def local_ram_gib() -> float | None:
    """Physical RAM of this machine in GiB (POSIX sysconf), or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError, AttributeError):
        return None


KEY_FIELDS = ("key", "kind", "message", "suggestion", "replacement_key", "fix", "fix_value", "condition")


def _key_facts(doc: ConfigDoc, transformers_version: str | None = None) -> dict[str, Any]:
    try:
        from finetune_doctor.readers.keyschema import check_keys
    except ImportError:  # pragma: no cover - schema module missing in a broken install
        return {"keys": []}
    from finetune_doctor.analyzers.launch import check_launch

    out = []
    for p in [*check_keys(doc.values, transformers_version=transformers_version),
              *check_launch(doc.values, doc.path)]:
        p = p if isinstance(p, dict) else {k: getattr(p, k, None) for k in KEY_FIELDS}
        d = {k: p.get(k) for k in KEY_FIELDS}
        d["replacement"] = d.pop("replacement_key")
        d["line"] = doc.line_of(d["key"])
        # a value given as key=value on the command line is judged there, whether or not the file has the key
        d["override"] = any(k == d["key"] or k.startswith(d["key"] + ".") for k in doc.overrides)
        out.append(d)
    return {"keys": out}


STOCK_DS = Path(__file__).resolve().parent.parent / "catalog" / "lf_deepspeed"


def stock_ds_file(value: Any) -> Path | None:
    """LLaMA-Factory's stock DeepSpeed file that a ``deepspeed: examples/deepspeed/NAME.json`` value names."""
    if not isinstance(value, str):
        return None
    norm = value.replace("\\", "/")
    if "examples/deepspeed/" not in norm:
        return None
    cand = STOCK_DS / norm.rsplit("/", 1)[-1]
    return cand if cand.is_file() else None


def _load_ds(doc: ConfigDoc, hw: Hardware | None, hidden: int | None, notes: list[str]) -> tuple[Any, bool]:
    """The DeepSpeed config and whether it is LLaMA-Factory's bundled stock copy (not the user's file)."""
    value = doc.values.get("deepspeed")
    if not value:
        return None, False
    from finetune_doctor.readers.dsconfig import load_ds_config

    world = hw.num_gpus if hw and hw.num_gpus else None
    line = doc.line_of("deepspeed")
    try:
        return load_ds_config(value, doc.path, line, doc.values, world, hidden), False
    except InputError as err:
        stock = stock_ds_file(value)
        if stock is None or "not found" not in err.message:
            if "not found" in err.message and "deepspeed" not in doc.overrides:
                err.message += " (pass deepspeed=PATH after the config to point at it)"
            raise
    notes.append(f"{value} is not on disk here: read LLaMA-Factory's stock copy of it")
    return load_ds_config(str(stock), doc.path, line, doc.values, world, hidden), True


def model_facts(run: Any, counts: Any) -> dict[str, Any]:
    a = run.arch
    return {
        "name": a.name, "model_type": a.model_type, "dtype": a.dtype, "params_b": counts.base / 1e9,
        "params": counts.base, "trainable_params": counts.trainable, "adapter_params": counts.adapter,
        "trainable_pct": 100.0 * counts.trainable / max(counts.base, 1),
        "hidden_size": a.hidden_size, "num_layers": a.num_layers, "vocab_size": a.vocab_size,
        "num_heads": a.num_heads, "is_moe": a.is_moe, "num_experts": a.num_experts,
        "expert_lora_params": counts.expert_lora_params, "max_position_embeddings": a.max_position_embeddings,
        "source": a.source, "notes": a.notes,
    }


def memory_facts(mem: MemoryEstimate, hw: Hardware | None, run: Any) -> dict[str, Any]:
    d = dict(mem.as_dict())
    d["per_gpu"] = dict(mem.per_gpu)
    d["total"] = mem.total
    d["peak_allocated"] = mem.peak_allocated
    d["host"] = mem.host
    d["phase"] = mem.phase
    d["first_oom"] = mem.details.get("first_oom")
    d["peak_moment"] = mem.details.get("peak_moment")
    d["tokens_measured"] = mem.details.get("tokens_per_micro_batch") != run.tokens_per_micro_batch
    d["capacity_gib"] = hw.capacity_gib if hw else None
    d["host_ram_gib"] = hw.host_ram_gib if hw else None
    terms = mem.details.get("terms_bytes", {})
    # frozen + trainable weights every rank holds whole (ZeRO <= 2, DDP): what ZeRO-3 would shard
    d["weights_gib"] = terms.get("weights", 0.0) / GIB
    d["weights_replicated_gib"] = terms.get("weights", 0.0) / GIB if not (run.deepspeed and run.zero_stage == 3) else 0.0
    d["states_gib"] = (terms.get("states", 0.0) + terms.get("master", 0.0)) / GIB
    d["step_temp_gib"] = terms.get("step_temp", 0.0) / GIB
    # the remedy planner's margin: a fit closer than this is inside the estimator's error (predicted-tight-fit)
    from finetune_doctor.engine.planners import MARGIN

    d["margin_gib"] = MARGIN * hw.capacity_gib if hw and hw.capacity_gib else None
    return d


def build_context(config: str, overrides: tuple[str, ...] | list[str], opts: Options, *, static: bool = False,
                  scan_data: bool = False, hw: Hardware | None = None, need_model: bool = True,
                  validate_ds: bool = False) -> Assembly:
    """Read `config` with `overrides` and compute every fact namespace (module docstring).

    `static=True` is the lint path: no NVML, no dataset, no deepspeed import; an unresolvable model is then not an
    error (memory facts are simply absent). Raises InputError on bad input.
    """
    doc = load_config(config, tuple(overrides))
    sources: dict[str, SourceDoc] = {"config": doc.source()}
    if doc.overrides:
        sources["override"] = SourceDoc("override", "<command line>", {k: (1, 1) for k in doc.overrides})
    facts: dict[str, Any] = {"cfg": doc.values, "lint": _key_facts(doc, opts.transformers_version), "run": None,
                             "model": None, "hw": None, "mem": None, "ds": None, "data": None}
    asm = Assembly(doc=doc, ctx=RuleContext(facts=facts, sources=sources))

    if hw is None:
        hw = resolve_hardware(opts, allow_nvml=not static)
    asm.hw = hw
    facts["hw"] = None if hw is None else {**hw.as_dict(), "compute_capability": hw.compute_capability,
                                           "in_use_gib": list(hw.in_use_gib), "nnodes": hw.nnodes,
                                           "host_ram_gib": hw.host_ram_gib}

    arch = None
    name = doc.values.get("model_name_or_path")
    if name:
        from finetune_doctor.readers.modelcfg import load_arch

        try:
            arch, model_src = load_arch(str(name), base_dir=str(Path(config).resolve().parent))
        except InputError as err:
            if not static and need_model:
                if err.file is None or err.file == str(name):
                    err = InputError(f"{err.message}", file=doc.path, line=doc.line_of("model_name_or_path"))
                raise err from None
            asm.notes.append(f"model not resolved: {err.message}")
            arch, model_src = None, None
        if model_src is not None:
            sources["model"] = model_src
    else:
        asm.notes.append("model_name_or_path is not set: memory not estimated")

    try:
        ds, stock = _load_ds(doc, hw, arch.hidden_size if arch else None, asm.notes)
    except InputError as err:
        if not (static or not need_model) or "not found" not in err.message:
            raise
        # pre-commit runs from the repository root, not from where the run launches: a missing DeepSpeed file
        # is a finding there (deepspeed-file-missing), not a failed lint
        facts["ds_missing"] = {"value": doc.values.get("deepspeed"),
                               "message": err.message.replace(" (pass deepspeed=PATH after the config to point at it)", "")}
        ds, stock = None, False
    asm.ds = ds
    asm.ctx.extra["ds_stock"] = stock
    if ds is not None:
        from finetune_doctor.readers.dsconfig import ds_facts

        facts["ds"] = ds_facts(ds)
        facts["ds"]["stock"] = stock
        if getattr(ds, "path", None) and not stock:
            sources["deepspeed"] = SourceDoc("deepspeed", _display_path(ds.path),
                                             dict(getattr(ds, "positions", {}) or {}))
        if validate_ds and not static:
            # importing deepspeed costs ~3 s (it imports torch): only on request, so `check` stays under a second
            try:
                from finetune_doctor.readers.dsconfig import validate_with_deepspeed

                extra = validate_with_deepspeed(ds)
                if extra:
                    facts["ds"]["problems"] = list(facts["ds"].get("problems") or []) + [
                        p if isinstance(p, dict) else {k: getattr(p, k, None) for k in ("key", "kind", "message", "line")}
                        for p in extra]
            except ImportError:
                pass

    if arch is not None:
        from finetune_doctor.analyzers.memory import estimate
        from finetune_doctor.analyzers.params import count_params
        from finetune_doctor.run import resolve_run

        run = resolve_run(doc.values, arch, hw, ds, nnodes=opts.nnodes,
                          stack={"torch": opts.torch_version, "transformers": opts.transformers_version})
        counts = count_params(run)
        asm.run = run
        facts["run"] = run.facts()
        facts["model"] = model_facts(run, counts)
        if not static or hw is not None:
            tokens = None
            if scan_data:
                data = _data_facts(doc, config, opts)
                facts["data"] = data
                if data and data.get("worst_micro_batch_tokens"):
                    tokens = int(data["worst_micro_batch_tokens"])
                scan_data = False
            mem = estimate(run, hw, counts=counts, tokens=tokens)
            asm.memory = mem
            facts["mem"] = memory_facts(mem, hw, run)
            facts["mem"].update(_older_stack(doc, arch, hw, ds, opts, run, counts, tokens))
        asm.notes.extend(run.notes)
        asm.ctx.extra.update(run=run, hw=hw, doc=doc, ds=ds, counts=counts)
    else:
        facts["run"] = {"stage": doc.values.get("stage") or "sft",
                        "finetuning_type": doc.values.get("finetuning_type") or "lora"}
    if scan_data and not static:
        # without a model the data scan still runs (approximate token counts when no tokenizer is local)
        facts["data"] = _data_facts(doc, config, opts)
    return asm


def _older_stack(doc: ConfigDoc, arch: Any, hw: Hardware | None, ds: Any, opts: Options, run: Any, counts: Any,
                 tokens: int | None) -> dict[str, Any]:
    """The estimate on a training machine with torch < 2.8, when the verdict could depend on it.

    Only when neither ``--torch`` nor ``optim`` says which optimizer the run gets: transformers then defaults to
    the non-fused AdamW (``adamw_torch``) on torch < 2.8 and to the fused one from 2.8 on (LF_FACTS §3), and the
    non-fused update allocates temporaries the size of the states (case 028: 16 GiB on 8×H200 for Qwen3-32B).
    Keys ``alt_stack_total`` (GiB), ``alt_stack_fits`` and ``alt_stack_optim``; all None when not computed.
    """
    out: dict[str, Any] = {"alt_stack_total": None, "alt_stack_fits": None, "alt_stack_optim": None}
    if opts.torch_version or "optim" in doc.values:
        return out
    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.run import resolve_run

    old = resolve_run(doc.values, arch, hw, ds, nnodes=opts.nnodes,
                      stack={"torch": "2.7", "transformers": opts.transformers_version})
    if old.optim == run.optim:
        return out
    est = estimate(old, hw, counts=counts, tokens=tokens)
    return {"alt_stack_total": est.total, "alt_stack_fits": est.fits, "alt_stack_optim": old.optim}


def _display_path(p: Any) -> str:
    """Paths as the user would type them (the reporters' rule: relative to the working directory when below it)."""
    from finetune_doctor.reporters import display_path

    return display_path(str(p)) or str(p)


def _data_facts(doc: ConfigDoc, config: str, opts: Options) -> dict[str, Any] | None:
    try:
        from finetune_doctor.pipeline.data import collect
    except ImportError:
        return None
    try:
        return collect(doc.values, config)
    except InputError:
        raise
    except Exception as err:  # a data scan failure must not hide the config diagnosis
        return {"error": str(err), "partial": True}


def judge(asm: Assembly, opts: Options, command: str) -> list[Finding]:
    """Evaluate the rules that `command` runs over the assembled facts."""
    import finetune_doctor.engine.planners  # noqa: F401  (registers the remedy planners)

    rules = select_rules(load_rules(opts.rules_dirs), command, list(opts.select) if opts.select else None,
                         list(opts.ignore))
    findings = evaluate(rules, asm.ctx)
    return _apply_suppressions(findings, asm, opts)


def _apply_suppressions(findings: list[Finding], asm: Assembly, opts: Options) -> list[Finding]:
    out = findings
    try:
        from finetune_doctor.suppression import apply_suppressions_to_docs
    except ImportError:
        apply_suppressions_to_docs = None
    if apply_suppressions_to_docs is not None:
        out = apply_suppressions_to_docs(out, {asm.doc.path: asm.doc.text}, opts)
    if opts.per_file_ignores:
        import fnmatch

        kept = []
        for f in out:
            codes = [c for pat, cs in opts.per_file_ignores.items()
                     if f.location.file and (fnmatch.fnmatch(f.location.file, pat)
                                             or fnmatch.fnmatch(os.path.basename(f.location.file), pat))
                     for c in cs]
            if any(f.code.startswith(c) or f.name == c for c in codes):
                continue
            kept.append(f)
        out = kept
    return out


def run_summary(asm: Assembly) -> dict[str, Any] | None:
    if asm.run is None:
        return None
    counts = asm.ctx.extra.get("counts")
    return asm.run.summary(params_b=counts.base / 1e9 if counts else None)


def inputs_of(asm: Assembly, **extra: Any) -> dict[str, Any]:
    ds = _display_path(asm.ds.path) if asm.ds is not None and getattr(asm.ds, "path", None) else None
    return {"config": asm.doc.path, "deepspeed": ds, "run_dir": None, **extra}


def run(config: str, overrides: tuple[str, ...], opts: Options, *, probe: bool = False, probe_mode: str = "simulate",
        scan_data: bool = True, fix: bool = False, unsafe_fixes: bool = False, validate_ds: bool = False) -> Report:
    """The full diagnosis of `config` before launch; returns the Report (exit code decided by the CLI)."""
    asm = build_context(config, overrides, opts, scan_data=scan_data, validate_ds=validate_ds)
    findings = judge(asm, opts, "check")
    sections: dict[str, Any] = {}
    if asm.ctx.facts.get("data"):
        sections["data"] = asm.ctx.facts["data"]
    if probe:
        findings = _confirm(asm, findings, opts, probe_mode)
    notes = list(asm.notes)
    if fix or unsafe_fixes:
        from finetune_doctor.pipeline.fixing import apply_fixes

        notes.extend(apply_fixes(findings, unsafe=unsafe_fixes, texts={asm.doc.path: asm.doc.text}))
    return Report(command="check", inputs=inputs_of(asm), findings=tuple(findings), run=run_summary(asm),
                  hardware=asm.hw, memory=asm.memory, sections=sections, notes=tuple(notes))


def _confirm(asm: Assembly, findings: list[Finding], opts: Options, mode: str = "simulate") -> list[Finding]:
    try:
        from finetune_doctor.pipeline.probe import confirm_findings
    except ImportError:
        asm.notes.append("probes unavailable: install finetune-doctor[torch,transformers,peft]")
        return findings
    return confirm_findings(asm, findings, opts, mode=mode)
