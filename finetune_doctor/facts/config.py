"""Every config-side fact namespace of one training config, assembled once per command.

The order follows the data: read the YAML with its overrides (cfg, lint) → the GPUs (hw) → the model's
architecture → the DeepSpeed JSON (ds) → the run LLaMA-Factory would execute (run, model) → the datasets (data,
when asked) → the memory estimate (mem). `assemble_config` serves ``check``, ``lint`` (static: no NVML, no data, no
deepspeed import), ``estimate``, ``probe`` and the config half of ``postmortem`` (lenient: a config that no longer
resolves does not stop the diagnosis of a run that already happened).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.errors import InputError
from finetune_doctor.facts import cfg as cfg_facts
from finetune_doctor.facts import skeleton
from finetune_doctor.facts import data as data_facts
from finetune_doctor.facts import ds as ds_facts
from finetune_doctor.facts import hw as hw_facts
from finetune_doctor.facts import lint as lint_facts
from finetune_doctor.facts import machine
from finetune_doctor.facts import model as model_facts
from finetune_doctor.facts import run as run_facts
from finetune_doctor.fsutil import display_path
from finetune_doctor.readers.config.yamlcfg import ConfigDoc, load_config
from finetune_doctor.run import InvalidRunValue, resolve_run
from finetune_doctor.settings import Options
from finetune_doctor.types import Assumption, Hardware, MemoryEstimate, SourceDoc


@dataclass
class Assembly:
    """What was read and computed for one config: the fact namespaces, the source files, the live objects.

    `facts` maps namespace names to plain values (facts/__init__.py); `sources` maps a role (config, override,
    deepspeed, model) to the `SourceDoc` read for it. The live objects (`run`, `ds`, `counts`) are what remedy
    planners and probes re-run the estimator with; they never reach a rule.
    """

    doc: ConfigDoc
    facts: dict[str, Any]
    sources: dict[str, SourceDoc]
    run: Any = None                # run.Run, when the model is known
    hw: Hardware | None = None
    memory: MemoryEstimate | None = None
    ds: Any = None                 # readers.deepspeed.dsconfig.DSConfig
    ds_stock: bool = False
    counts: Any = None             # analyzers.memory.params.ParamCounts
    launch: Any = None             # run.engines.LaunchInputs: accelerate config and launch command line
    notes: list[str] = field(default_factory=list)
    stack: dict[str, str | None] = field(default_factory=dict)   # the training stack the run was resolved for
    stack_sources: tuple[tuple[str, str, str], ...] = ()          # (package, version, where it came from)
    nnodes: int | None = None
    assumptions: list[Assumption] = field(default_factory=list)   # values used but not read (Report.assumptions)
    context: Any = None            # readers.config.context.MachineContext: the training machine, captured (--context)
    _after: dict[tuple, Any] = field(default_factory=dict, repr=False)

    def live(self) -> dict[str, Any]:
        """The live objects remedy planners need (engine/planners.py): `run_after` re-resolves the run for edits."""
        return {"run": self.run, "hw": self.hw, "doc": self.doc, "ds": self.ds, "counts": self.counts,
                "ds_stock": self.ds_stock, "run_after": self.run_after}

    def run_after(self, edits: Iterable[tuple[str, str, Any, bool]]) -> Any:
        """The Run LLaMA-Factory would execute after `edits` — (role, key, value, delete) with role ``config`` or
        ``deepspeed`` — resolved again by run.resolve_run, so a remedy's effect follows LLaMA-Factory's own rules
        (precision, ZeRO-3's dtypes, quantization) rather than a copy of them.

        Config edits apply to the merged YAML values; a new ``deepspeed`` path is read (LLaMA-Factory's stock file
        when it is not on disk here); DeepSpeed edits apply to the resolved JSON. Results are cached per edit set.
        Raises InputError when a new DeepSpeed path cannot be read.
        """
        key = tuple((r, k, repr(v), d) for r, k, v, d in edits)
        if key in self._after:
            return self._after[key]
        values = copy.deepcopy(dict(self.doc.values))
        ds = self.ds
        ds_resolved = copy.deepcopy(ds.resolved) if ds is not None else None
        reload_ds = False
        for role, k, v, delete in edits:
            if role == "deepspeed":
                if ds_resolved is not None:
                    _set_dotted(ds_resolved, k, v, delete)
            else:
                _set_dotted(values, k, v, delete)
                reload_ds |= k == "deepspeed"
        if reload_ds:
            ds, _ = ds_facts.load(values, self.doc.path, None, self.hw, self.run.arch.hidden_size, [])
        elif ds is not None and ds_resolved is not None:
            ds = replace(ds, resolved=ds_resolved)
        out = resolve_run(values, self.run.arch, self.hw, ds, nnodes=self.nnodes, stack=self.stack,
                          stack_sources=self.stack_sources, launch=self.launch)
        self._after[key] = out
        return out

    def run_summary(self) -> dict[str, Any] | None:
        """The JSON report's ``run`` object (DESIGN.md), None without a resolved model."""
        if self.run is None:
            return None
        return self.run.summary(params_b=self.counts.base / 1e9 if self.counts else None)

    def model_section(self) -> dict[str, Any]:
        """The report's ``model`` object: where the architecture came from (`ModelArch.source_kind`: local,
        model-config, hf-cache, modelscope-cache, openmind-cache, catalog, hub), its config file or address, and how
        it matched; empty without a resolved model."""
        if self.run is None:
            return {}
        a = self.run.arch
        cfg = self.sources["model"].path if "model" in self.sources else (a.source or None)
        return {"name": self.run.model_name, "source": getattr(a, "source_kind", None) or "catalog",
                "config": cfg, "model_type": a.model_type, "notes": a.notes or None}

    def inputs(self, **extra: Any) -> dict[str, Any]:
        """The JSON report's ``inputs`` object."""
        ds, stock = None, {}
        if self.ds is not None and self.ds_stock:
            # not on disk here: the file the YAML names, read from LLaMA-Factory's stock copy of it
            ds, stock = str(self.doc.values.get("deepspeed") or self.ds.path), {"deepspeed_stock": True}
        elif self.ds is not None and getattr(self.ds, "path", None):
            ds = self.sources["deepspeed"].path if "deepspeed" in self.sources else str(self.ds.path)
        ctx = {"context": self.context.path} if self.context is not None else {}
        return {"config": self.doc.path, "deepspeed": ds, **stock, "run_dir": None, **ctx, **extra}


def _set_dotted(d: dict[str, Any], key: str, value: Any, delete: bool) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        nxt = d.get(p)
        if not isinstance(nxt, dict):
            nxt = d[p] = {}
        d = nxt
    if delete:
        d.pop(parts[-1], None)
    else:
        d[parts[-1]] = value


@dataclass(frozen=True)
class Mode:
    """How a command assembles a config's facts (one row of `MODES`).

    `static` is the lint path: no NVML, no dataset, no deepspeed import; an unresolvable model or a missing
    DeepSpeed file is then a fact for a rule, not an error. `need_model=False` tolerates an unresolvable model
    (``lint.model_unresolved``, rule model-unresolved). `lenient` (postmortem) also reads on past a DeepSpeed JSON
    that is missing or broken. `scan_data` scans the datasets; `validate_ds` runs DeepSpeed's own config models.
    """

    static: bool = False
    scan_data: bool = False
    need_model: bool = True
    validate_ds: bool = False
    lenient: bool = False


# The command modes, declared once (they were five booleans at every call site). `check` turns scan_data and
# validate_ds on from its flags: replace(MODES["check"], scan_data=..., validate_ds=...).
MODES: dict[str, Mode] = {
    "lint": Mode(static=True),
    "check": Mode(need_model=False),
    "estimate": Mode(),
    "probe": Mode(),
    "postmortem": Mode(need_model=False, lenient=True),
}


def assemble_config(config: str, overrides: tuple[str, ...] | list[str], opts: Options, mode: "Mode | str" = "estimate",
                    *, hw: Hardware | None = None, **legacy: bool) -> Assembly:
    """Read `config` with `overrides` and assemble every config-side namespace, the way `mode` (a `Mode` or a
    command name of `MODES`) says. `hw` replaces hardware resolution (a sweep reuses its first point's).
    `legacy` accepts the former keyword flags (static, scan_data, need_model, validate_ds, lenient) for branches
    written before `MODES`; they override the mode's fields. Raises InputError on bad input.
    """
    m = MODES[mode] if isinstance(mode, str) else mode
    if legacy:
        m = replace(m, **legacy)
    static, scan_data, need_model, validate_ds, lenient = (m.static, m.scan_data, m.need_model, m.validate_ds,
                                                           m.lenient)
    doc = load_config(config, tuple(overrides))
    sources: dict[str, SourceDoc] = {"config": doc.source()}
    if doc.overrides:
        sources["override"] = SourceDoc("override", "<command line>", {k: (1, 1) for k in doc.overrides})
    facts: dict[str, Any] = skeleton(cfg=cfg_facts.assemble(doc.values),
                                     lint=lint_facts.assemble(doc, opts.transformers_version))
    asm = Assembly(doc=doc, facts=facts, sources=sources)
    asm.context, ctx_note = machine.load(config, opts, doc)
    if ctx_note:
        asm.notes.append(ctx_note)
    if machine.data(asm.context, doc.values)[0] is not None:
        # the datasets were resolved on the training machine: its scan, carried by the context, reports them
        facts["lint"]["keys"] = [k for k in facts["lint"].get("keys", []) if k.get("kind") != "dataset"]
    env_report = read_env_file(opts.env_file) if opts.env_file and not static else None
    if hw is None and not opts.gpu:   # the training machine's GPUs act as --gpu (a flag still wins)
        hw = machine.hardware(asm.context, opts.nnodes)
    asm.hw = hw if hw is not None else hw_facts.resolve(opts.gpu, opts.nnodes, allow_nvml=not static)
    if asm.hw is None and env_report is not None:
        asm.hw = hw_facts.from_env_report(env_report, opts.nnodes)
    if opts.host_ram:
        ram = hw_facts.parse_host_ram(opts.host_ram)
        if asm.hw is not None:
            asm.hw = replace(asm.hw, host_ram_gib=ram)
        else:
            asm.notes.append("--host-ram is judged with the GPUs: pass --gpu too")
    facts["hw"] = hw_facts.assemble(asm.hw)
    if asm.hw is not None:
        asm.notes.extend(getattr(asm.hw, "notes", ()) or ())   # e.g. how a bare --gpu 24GB was read
    elif not static:
        # no verdict without a card: say so instead of a clean report that reads like a pass
        asm.notes.append("GPUs unknown (no --gpu, no NVML, no --env): the fit is not judged and one GPU is assumed "
                         "for the world size; pass e.g. --gpu 4xL20, or --env with `llamafactory-cli env` output")

    # the stack first: the model's layout depends on the transformers release that builds it (MoE experts)
    stack, sources = _stack(opts, asm.hw, env_report, asm.context)
    asm.stack, asm.nnodes, asm.stack_sources = stack, opts.nnodes, sources
    arch = _arch(asm, config, opts, tolerate=static or not need_model or lenient, static=static,
                 transformers=stack.get("transformers"))
    _deepspeed(asm, arch, tolerate_missing=static or lenient, lenient=lenient)
    _accelerate(asm, opts, lenient=lenient)
    if asm.ds is not None and validate_ds and not static:
        if not ds_facts.validate_with_deepspeed(asm.ds, facts["ds"]):
            asm.notes.append("--validate-deepspeed: deepspeed is not installed here (pip install deepspeed); "
                             "only the bundled checks ran")

    if arch is None:
        facts["run"] = run_facts.assemble(None, doc.values)
        if scan_data and not static:
            # without a model the data scan still runs (approximate token counts when no tokenizer is local)
            facts["data"] = _scan(asm, config)
        return asm

    def resolve(stack: dict[str, str | None]) -> Any:
        return resolve_run(doc.values, arch, asm.hw, asm.ds, nnodes=opts.nnodes, stack=stack,
                           stack_sources=asm.stack_sources, launch=asm.launch)

    try:
        asm.run = resolve(stack)
    except InvalidRunValue as err:
        # the key rules report the value at its line; nothing is estimated from it
        asm.notes.append(f"memory not estimated: {err}")
        facts["run"] = run_facts.assemble(None, doc.values)
        return asm
    asm.counts = count_params(asm.run)
    facts["run"] = run_facts.assemble(asm.run, doc.values)
    facts["model"] = model_facts.assemble(asm.run, asm.counts)
    if not static or asm.hw is not None:
        # the memory model is imported only here: `doctor lint` without --gpu never estimates (import time, #22)
        from finetune_doctor.analyzers.memory import estimate
        from finetune_doctor.facts import mem as mem_facts

        tokens = None
        if scan_data and not static:
            facts["data"] = _scan(asm, config)
            tokens = (facts["data"] or {}).get("worst_micro_batch_tokens") or None
        est = estimate(asm.run, asm.hw, counts=asm.counts, tokens=int(tokens) if tokens else None)
        alt = mem_facts.older_stack(lambda s: resolve({**stack, **s}), asm.run, asm.hw, asm.counts,
                                    int(tokens) if tokens else None, torch_given=bool(opts.torch_version),
                                    optim_given="optim" in doc.values)
        asm.memory = mem_facts.judged(est, asm.hw, alt)   # verdict, p_oom, interval (analyzers/memory/uncertainty.py)
        qalt = mem_facts.quant_alternative(
            lambda a: resolve_run(doc.values, a, asm.hw, asm.ds, nnodes=opts.nnodes, stack=stack,
                                  stack_sources=asm.stack_sources, launch=asm.launch),
            asm.run, asm.hw, int(tokens) if tokens else None)
        _quant_assumption(asm, qalt)
        facts["mem"] = mem_facts.assemble(asm.memory, asm.hw, asm.run, alt, qalt)
    asm.notes.extend(asm.run.notes)
    return asm


def _quant_assumption(asm: Assembly, qalt: dict[str, Any]) -> None:
    """Record how the weights of a quantized-looking checkpoint were sized (unquantized: an upper bound) with the
    alternative its name suggests, and keep an upper bound from deciding an ``oom`` verdict: when the weights as
    the name suggests they are stored fit, the verdict is at-risk (issue 21: verdicts follow the unknowns)."""
    label = qalt.get("quant_alt_label")
    if label is None or asm.run is None or asm.memory is None:
        return
    if asm.memory.verdict == "oom" and qalt.get("quant_alt_verdict") in ("fits", "at-risk"):
        asm.memory = replace(asm.memory, verdict="at-risk")
    verdict = asm.memory.verdict
    asm.assumptions.append(Assumption(
        name="weights-quantization", value=f"unquantized {asm.run.arch.dtype} (an upper bound)",
        source="the model name suggests a quantized checkpoint; no config.json says how it is stored",
        alternatives=(label,), effect_gib={label: qalt["quant_alt_total"]},
        effect_verdict={label: qalt["quant_alt_verdict"]} if qalt.get("quant_alt_verdict") else {},
        resolve_with="--model-config (the checkpoint's config.json)",
        moves_verdict=bool(qalt.get("quant_alt_verdict")) and qalt["quant_alt_verdict"] != verdict))


DOWNLOAD_COMMANDS = ("check", "estimate", "probe", "data")
"""Commands that may download a model's JSON configs when nothing local has them (never lint, never postmortem)."""


def read_env_file(path: str) -> Any:
    """readers/config/stack.py's `read_env_file` (``--env FILE``), its module imported on first use."""
    from finetune_doctor.readers.config.stack import read_env_file as read

    return read(path)


def installed_versions() -> dict[str, str]:
    """readers/config/stack.py's `installed_versions` (torch/transformers installed here), its module imported on
    first use: only a machine whose GPUs NVML sees asks."""
    from finetune_doctor.readers.config.stack import installed_versions as installed

    return installed()


def _stack(opts: Options, hw: Hardware | None, env: Any, ctx: Any = None) -> tuple[dict[str, str | None], tuple]:
    """The training machine's versions and where each came from, in order of precedence: ``--torch`` /
    ``--transformers``, then ``--env FILE``, then a ``doctor context`` file (`ctx`, as ``--env``), then the packages
    installed here when this machine is the training machine (NVML sees its GPUs). Returns ({torch, transformers}
    for resolve_run, (package, version, source)...)."""
    found: dict[str, tuple[str, str]] = {}
    if hw is not None and hw.source == "nvml":
        found.update({k: (v, "installed here") for k, v in installed_versions().items()})
    found.update({k: (v, ctx.path) for k, v in machine.stack(ctx).items()})
    if env is not None:
        found.update({k: (v, env.path) for k, v in env.versions.items()})
    for key, flag in (("torch", opts.torch_version), ("transformers", opts.transformers_version)):
        if flag:
            found[key] = (flag, f"--{key}")
    stack = {k: found[k][0] if k in found else None for k in ("torch", "transformers")}
    return stack, tuple((k, v, src) for k, (v, src) in sorted(found.items()))


def _arch(asm: Assembly, config: str, opts: Options, *, tolerate: bool, static: bool,
          transformers: str | None = None) -> Any:
    """The model's architecture, or None when the config names none or, if tolerated, it does not resolve.

    An unresolved model becomes the ``lint.model_unresolved`` fact (what is missing and the one command that
    supplies it) for the ``model-unresolved`` rule; untolerated, its error points at ``model_name_or_path``.
    """
    from finetune_doctor.readers.model.byname import multimodal_hint
    from finetune_doctor.readers.model.errors import ModelUnresolved
    from finetune_doctor.readers.model.modelcfg import load_arch

    doc = asm.doc
    name = doc.values.get("model_name_or_path")
    if not name:
        asm.notes.append("model_name_or_path is not set: memory not estimated")
        return None
    cache = doc.values.get("cache_dir")
    try:
        arch, model_src = load_arch(
            str(name), base_dir=str(Path(config).resolve().parent),
            cache_dir=cache if isinstance(cache, str) else None, model_config=opts.model_config,
            allow_download=not static and opts.command in DOWNLOAD_COMMANDS, offline=opts.offline,
            exact=False if static else "auto", transformers_major=transformers,
            template=str(doc.values.get("template") or "") or None, multimodal=multimodal_hint(doc.values),
            assumptions=asm.assumptions, context_config=machine.model_config(asm.context))
    except InputError as err:
        if not tolerate:
            if err.file is None or err.file == str(name):
                if "model_name_or_path" in (doc.overrides or {}):   # a key=value override named the model
                    err = InputError(err.message, file="<command line>", line=None)
                else:
                    err = InputError(err.message, file=doc.path, line=doc.line_of("model_name_or_path"))
            raise err from None
        fix = getattr(err, "fix", "") if isinstance(err, ModelUnresolved) else ""
        where = f"{err.file}:{err.line}" if err.file and err.file != str(name) and err.line else err.file
        asm.facts["lint"]["model_unresolved"] = {
            "name": str(name), "message": err.message, "missing": getattr(err, "missing", "") or "",
            "fix": fix or "--model-config path/to/config.json",
            "config_json": where if where and where != str(name) else None}
        asm.notes.append(f"memory not estimated: the architecture of {name} is not known here")
        return None
    for note in (arch.notes or "").split("; ") if isinstance(arch.notes, str) else ():
        if note and ("download" in note or "offline" in note or note.startswith("sized as the catalogue entry")):
            asm.notes.append(note)
    if model_src is not None:
        machine.check_dtype(asm.context, arch, model_src)
        asm.sources["model"] = model_src
    return arch


def _deepspeed(asm: Assembly, arch: Any, *, tolerate_missing: bool, lenient: bool) -> None:
    """Read the DeepSpeed JSON the config names into `asm` (ds, ds_stock, facts["ds"], sources["deepspeed"]).

    A path that does not resolve is the ``lint.ds_missing`` fact when tolerated (pre-commit runs from the
    repository root, not from where the run launches; a postmortem reads a run folder moved since); `lenient` also
    reads on past a broken JSON, with a note.
    """
    doc = asm.doc
    try:
        asm.ds, asm.ds_stock = ds_facts.load(doc.values, doc.path, doc.line_of("deepspeed"), asm.hw,
                                             arch.hidden_size if arch else None, asm.notes,
                                             overridden="deepspeed" in doc.overrides)
    except InputError as err:
        not_found = "not found" in err.message
        if not ((tolerate_missing and not_found) or lenient):
            raise
        if not_found:
            asm.facts["lint"]["ds_missing"] = ds_facts.missing(doc.values.get("deepspeed"), err)
        else:
            asm.notes.append(f"DeepSpeed config not read ({err}); facts computed without it")
        return
    asm.facts["ds"] = ds_facts.assemble(asm.ds, asm.ds_stock)
    if asm.ds is not None and getattr(asm.ds, "path", None) and not asm.ds_stock:
        asm.sources["deepspeed"] = SourceDoc("deepspeed", display_path(str(asm.ds.path)) or str(asm.ds.path),
                                             dict(getattr(asm.ds, "positions", {}) or {}))


def _read_accelerate(path: str) -> Any:
    """readers/config/accelerate.py's `load_accelerate_config`, imported once there is a file to read (a lint of a
    config alone reads none)."""
    from finetune_doctor.readers.config.accelerate import load_accelerate_config

    return load_accelerate_config(path)


def _accelerate(asm: Assembly, opts: Options, *, lenient: bool) -> None:
    """Read the launch command line (``opts.launch``, e.g. a run folder's cmdline.txt) and the accelerate config
    (``--accelerate-config``, else the launch's ``--config_file``) into ``asm.launch`` and ``sources["accelerate"]``.

    A config named by ``--accelerate-config`` that cannot be read is an InputError; one named only inside a
    launch command line (relative to where the run was launched, which may not be here) is a note, as is a launch
    file that holds no launch under `lenient` (postmortem).
    """
    from finetune_doctor.run.engines import LaunchInputs

    launch = acc = None
    if not getattr(opts, "launch", None):
        launch = machine.launch(asm.context)
    if getattr(opts, "launch", None):
        from finetune_doctor.readers.config.accelerate import read_launch_file

        try:
            launch = read_launch_file(opts.launch)
        except InputError as err:
            if not lenient:
                raise
            asm.notes.append(f"launch command not read ({err})")
    path = getattr(opts, "accelerate_config", None)
    if path:
        acc = _read_accelerate(path)
    elif launch is not None and launch.accelerate_config:
        found = next((p for p in (Path(launch.accelerate_config), Path(opts.launch).parent / launch.accelerate_config)
                      if p.is_file()), None)
        if found is None:
            asm.notes.append(f"the launch's accelerate config {launch.accelerate_config} is not on this machine: "
                             "its FSDP settings are not known (--accelerate-config FILE)")
        else:
            acc = _read_accelerate(str(found))
    if acc is None and not path:
        acc = machine.accelerate(asm.context)
    if acc is not None:
        asm.sources["accelerate"] = SourceDoc("accelerate", display_path(acc.path) or acc.path, dict(acc.positions))
    if launch is not None or acc is not None:
        asm.launch = LaunchInputs(acc, launch)


def _scan(asm: Assembly, config: str) -> dict[str, Any] | None:
    """The ``data`` facts: the datasets scanned here when they are here, else the statistics a ``doctor context``
    file carries (the training machine's scan); without either, a note says so."""
    data = data_facts.assemble(asm.doc.values, config)
    if data is not None:
        asm.assumptions.extend(data_facts.assumptions(data))
        return data
    data, note = machine.data(asm.context, asm.doc.values)
    if note:
        asm.notes.append(note)
    if data is not None:
        return data
    if asm.doc.values.get("dataset"):
        asm.notes.append("datasets not scanned: their dataset_info.json or files are not on this machine "
                         "(`doctor data` shows what it looked for)")
    return data


def assemble_ds_alone(path: str) -> Assembly:
    """The facts of a DeepSpeed JSON linted on its own (``doctor lint ds.json``): ``ds`` and an empty ``lint``."""
    ds = ds_facts.load_alone(path)
    doc = ConfigDoc(path=str(path), values={}, positions={})
    sources = {"deepspeed": SourceDoc("deepspeed", str(path), dict(getattr(ds, "positions", {}) or {}))}
    facts = skeleton(ds=ds_facts.assemble(ds), cfg={}, lint=lint_facts.assemble(None))
    return Assembly(doc=doc, facts=facts, sources=sources, ds=ds)
