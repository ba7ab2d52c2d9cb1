"""Every config-side fact namespace of one training config, assembled once per command.

The order follows the data: read the YAML with its overrides (cfg, lint) → the GPUs (hw) → the model's
architecture → the DeepSpeed JSON (ds) → the run LLaMA-Factory would execute (run, model) → the datasets (data,
when asked) → the memory estimate (mem). `assemble_config` serves ``check``, ``lint`` (static: no NVML, no data, no
deepspeed import), ``estimate``, ``probe`` and the config half of ``postmortem`` (lenient: a config that no longer
resolves does not stop the diagnosis of a run that already happened).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.errors import InputError
from finetune_doctor.facts import cfg as cfg_facts
from finetune_doctor.facts import skeleton
from finetune_doctor.facts import ds as ds_facts
from finetune_doctor.facts import hw as hw_facts
from finetune_doctor.facts import kinds
from finetune_doctor.facts.bf16stack import bf16_refusal, stack_versions
from finetune_doctor.facts.stackrange import assumed_transformers, stack_refusal_facts
from finetune_doctor.facts import lint as lint_facts
from finetune_doctor.facts import machine
from finetune_doctor.facts import model as model_facts
from finetune_doctor.facts import quantassume
from finetune_doctor.facts import moeleaf, nothere
from finetune_doctor.facts import run as run_facts
from finetune_doctor.facts import tfmodeltype
from finetune_doctor.fsutil import display_path, real_parent
from finetune_doctor.readers.config.yamlcfg import ConfigDoc, load_config
from finetune_doctor.readers.config.lfnarrow import release_in_use
from finetune_doctor.readers.config.lfrelease import with_launch
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
    hw_worst: Hardware | None = None   # the smallest card a bare --gpu may mean, when that decides the verdict
    ds_assumed: tuple[str, str] | None = None   # (the DeepSpeed path not here, the stock file used instead)
    kind: str = "train"            # readers/config/lfkind.py: which LF command reads the config
    release: Any = None            # readers/lfrelease.Release the keys were judged for
    tf_assumed: dict[str, str] | None = None   # transformers assumed from the LF release's range (facts/stackrange.py)
    kind_section: dict[str, Any] | None = None                    # export / chat estimates (facts/kinds.py)
    doc_read: Any = None           # the config as read (a v1 config before its adoption as v0 keys)
    v1_world: int | None = None    # the process count v1's batch layout was judged for (facts/kinds.py v1_batch)
    host_ram_gib: float | None = None   # --host-ram when no GPUs are known (a CPU merge is judged by it alone)
    _after: dict[tuple, Any] = field(default_factory=dict, repr=False)

    def live(self) -> dict[str, Any]:
        """The live objects remedy planners need (engine/planners.py): `run_after` re-resolves the run for edits."""
        mem = self.memory
        return {"run": self.run, "hw": self.hw, "doc": self.doc, "ds": self.ds, "counts": self.counts,
                "ds_stock": self.ds_stock, "ds_assumed": self.ds_assumed, "run_after": self.run_after,
                "hw_worst": self.hw_worst,
                # the report's p_oom is a mixture over the open assumptions (`_mixed`): a remedy's before/after
                # is weighed over the same components, so the fix and the memory block give one number
                "p_oom_components": mem.details.get("p_oom_components") if mem is not None else None,
                "mem_total": mem.total if mem is not None else None}

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
        if not self.run.media_inputs:   # the data read here holds no media (text_only): no edit brings any
            out = out.with_(media_inputs=False)
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
        if self.ds is not None and self.ds_assumed:
            # not on this machine and not a stock name: a stock file stands in (the deepspeed-config assumption)
            ds, stock = self.ds_assumed[0], {"deepspeed_stand_in": self.ds_assumed[1]}
        elif self.ds is not None and self.ds_stock:
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
    assume: bool = True


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
                    *, hw: Hardware | None = None) -> Assembly:
    """Read `config` with `overrides` and assemble every config-side namespace, the way `mode` (a `Mode` or a
    command name of `MODES`) says. `hw` replaces hardware resolution (a sweep reuses its first point's).
    Raises InputError on bad input.
    """
    m = MODES[mode] if isinstance(mode, str) else mode
    static, scan_data, need_model, validate_ds, lenient = (m.static, m.scan_data, m.need_model, m.validate_ds,
                                                           m.lenient)
    assume = m.assume and not lenient   # a postmortem judges a run that happened: nothing to assume for a verdict
    asm, env_report = _read(config, overrides, opts, hw, static=static)
    doc, facts, kind, release = asm.doc_read, asm.facts, asm.kind, asm.release

    # the stack first: the model's layout depends on the transformers release that builds it (MoE experts)
    stack, sources = _stack(opts, asm.hw, env_report, asm.context)
    asm.stack, asm.nnodes, asm.stack_sources = stack, opts.nnodes, sources
    stack = _release_stack(asm, stack, release)
    if asm.tf_assumed is None and stack.get("transformers") and stack["transformers"] != opts.transformers_version:
        # --env (or this training machine) names transformers: its renamed keys are judged for that release
        facts["lint"]["keys"] = lint_facts.assemble(doc, stack["transformers"], release=release, kind=kind)["keys"]
    if machine.data(asm.context, doc.values)[0] is not None:
        # the datasets were resolved on the training machine: its scan, carried by the context, reports them
        facts["lint"]["keys"] = [k for k in facts["lint"].get("keys", []) if k.get("kind") != "dataset"
                                 and not (k.get("kind") == "not_here" and k.get("key") == "dataset_dir")]
    arch = _arch(asm, config, opts, tolerate=static or not need_model or lenient, static=static,
                 transformers=stack.get("transformers"))
    facts["lint"]["model_type_unregistered"] = tfmodeltype.fact(asm, arch)
    if arch is None:   # every config kind alike: a model this machine cannot see is info unless --strict (trial 6)
        nothere.model_not_here(asm)
    if kind not in ("train", "train-v1") or (kind == "train" and kinds.predict_only(doc.values)):
        kinds.not_training(asm, arch)
        return _lint_assumptions(asm)   # --strict judges a merge's or a chat's verdict-moving ones too
    # check, estimate and postmortem size a DeepSpeed file that is not here with the same stock stand-in (one home:
    # `_stand_in_deepspeed`, an assumption), so the same inputs give the same total (trial 3, LlamaFactory#8665)
    _deepspeed(asm, arch, tolerate_missing=static, lenient=lenient)
    _accelerate(asm, opts, lenient=lenient)
    if kind == "train-v1":
        asm.launch = kinds.v1_launch(asm.doc.values.get("_v1") or {}, asm.launch)
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

    doc = asm.doc

    def resolve(stack: dict[str, str | None], other_arch: Any = None) -> Any:
        return resolve_run(doc.values, other_arch or arch, asm.hw, asm.ds, nnodes=opts.nnodes, stack=stack,
                           stack_sources=asm.stack_sources, launch=asm.launch)

    try:
        asm.run = resolve(stack)
        if kind == "train-v1" and asm.run.world_size != asm.v1_world:
            # a launch file or accelerate config set the process count: v1 lays the batch out over those
            kinds.v1_batch(asm, asm.run.world_size)
            facts["cfg"] = cfg_facts.assemble({k: v for k, v in doc.values.items() if k not in ("_v1", "_peft")})
            asm.run = resolve(stack)
    except InvalidRunValue as err:
        # the key rules report the value at its line; nothing is estimated from it
        asm.notes.append(f"memory not estimated: {err}")
        facts["run"] = run_facts.assemble(None, doc.values)
        return asm
    asm.counts = count_params(asm.run)
    facts["run"] = run_facts.assemble(asm.run, doc.values)
    facts["model"] = model_facts.assemble(asm.run, asm.counts)
    facts["lint"]["moe_z3_leaf"] = moeleaf.fact(asm)
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
        qalt = mem_facts.quant_alternative(lambda a: resolve(stack, a), asm.run, asm.hw,
                                           int(tokens) if tokens else None)
        quantassume.quant_assumption(asm, qalt)
        quantassume.named_quant_assumption(asm, lambda a: resolve(stack, a), int(tokens) if tokens else None)
        honest = _assumptions(asm, opts, int(tokens) if tokens else None, alt) if assume else {}
        facts["mem"] = mem_facts.assemble(asm.memory, asm.hw, asm.run, alt, qalt)
        facts["mem"].update({"deciding_assumption": None, "token_budget": None, **honest})
    elif assume:
        _assumptions(asm, opts, None, None)
    _lint_assumptions(asm)
    # a v1 run's FSDP2 comes from its dist_config, handed to the resolver as an accelerate FSDP2 setting
    asm.notes.extend(n.replace("from the accelerate config", "from v1's dist_config") if kind == "train-v1" else n
                     for n in asm.run.notes)
    return asm


def _read(config: str, overrides: tuple[str, ...] | list[str], opts: Options, hw: Hardware | None, *,
          static: bool) -> tuple[Assembly, Any]:
    """The config read and typed before any model is sized: its kind (readers/config/lfkind.py), the LF release it
    is judged for, the ``cfg``/``lint`` facts, the training machine's context, the GPUs, the launch facts and the
    config reading's assumptions; a v1 config adopted as its v0 keys. Returns the Assembly and the --env report
    (None under `static`: lint never takes GPUs or a stack from --env). Raises InputError on bad input."""
    doc = load_config(config, tuple(overrides))
    kind = _kind(doc, getattr(opts, "launch", None))
    sources: dict[str, SourceDoc] = {"config": doc.source()}
    if doc.overrides:
        sources["override"] = SourceDoc("override", "<command line>", {k: (1, 1) for k in doc.overrides})
    # --env is read even by lint: its LLaMA-Factory and transformers releases decide which keys exist
    env_report = read_env_file(opts.env_file) if opts.env_file else None
    # none given: the config's keys narrow it (lfnarrow.py); a train_bash.py launch line marks a release before 0.8.0
    release = with_launch(release_in_use(opts.lf_version, env_report.versions if env_report else None, opts.env_file,
                                         config=(doc.values, kind)), kinds._launch_line(getattr(opts, "launch", None)))
    facts: dict[str, Any] = skeleton(cfg=cfg_facts.assemble(doc.values),
                                     lint=lint_facts.assemble(doc, opts.transformers_version or (
                                         env_report.versions.get("transformers") if env_report else None),
                                         release=release, kind=kind))
    asm = Assembly(doc=doc, facts=facts, sources=sources, kind=kind, release=release)
    asm.doc_read = doc
    facts["lint"]["strict"] = bool(getattr(opts, "strict", False))
    asm.context, ctx_note = machine.load(config, opts, doc)
    if ctx_note:
        asm.notes.append(ctx_note)
    env_read, env_report = env_report, (env_report if not static else None)
    _hardware(asm, opts, hw, env_report, static=static)
    facts["lint"].update(kinds.launch_facts(opts, asm.hw, env_report))
    # lint too judges bf16 by the --env versions (a static check: no GPUs read from the file)
    facts["lint"].update(bf16_refusal(*stack_versions(opts, env_read, asm.hw)))
    # LF's start-up check_dependencies refuses a package outside the release's range (facts/stackrange.py)
    facts["lint"].update(stack_refusal_facts(release, opts, env_read, machine.stack(asm.context), asm.hw))
    asm.assumptions.extend(kinds.assumptions(asm, opts, asm.hw))
    if kind in ("train-v1", "export-v1"):
        kinds.adopt_v1(asm, opts.nnodes)   # the run is resolved from the v1 config's v0 keys
    return asm, env_report


def _hardware(asm: Assembly, opts: Options, hw: Hardware | None, env_report: Any, *, static: bool) -> None:
    """The GPUs into ``asm.hw`` and ``facts["hw"]``: `hw` (a sweep's), the context's, ``--gpu``, NVML (not
    `static`), ``--env``; ``--host-ram`` on top. Raises InputError for a --gpu or --host-ram it cannot read."""
    if hw is None and not opts.gpu:   # the training machine's GPUs act as --gpu (a flag still wins)
        hw = machine.hardware(asm.context, opts.nnodes)
    asm.hw = hw if hw is not None else hw_facts.from_inputs(opts, env_report, allow_nvml=not static)
    if opts.host_ram:
        ram = hw_facts.parse_host_ram(opts.host_ram)
        asm.host_ram_gib = ram
        if asm.hw is not None:
            asm.hw = replace(asm.hw, host_ram_gib=ram)
        elif asm.kind in ("train", "train-v1"):
            asm.notes.append("--host-ram is judged with the GPUs: pass --gpu too")
    asm.facts["hw"] = hw_facts.assemble(asm.hw)
    if asm.hw is not None:
        asm.notes.extend(getattr(asm.hw, "notes", ()) or ())   # e.g. how a bare --gpu 24GB was read
    elif not static and asm.kind not in ("export", "export-v1"):
        # no verdict without a card: say so instead of a clean report that reads like a pass (a merge's own
        # estimate says what it needs of the GPUs or host RAM)
        asm.notes.append(_gpus_unknown(opts))


def _gpus_unknown(opts: Options) -> str:
    """The note of a run judged without a card; it names --env as given when it was (trial 6 case 11: an env file
    with no GPU line was reported as "no --env")."""
    if opts.env_file:
        return (f"GPUs unknown (no --gpu, no NVML; --env {opts.env_file} names no GPU): the fit is not judged and "
                "one GPU is assumed for the world size; pass e.g. --gpu 4xL20")
    return ("GPUs unknown (no --gpu, no NVML, no --env): the fit is not judged and one GPU is assumed for the world "
            "size; pass e.g. --gpu 4xL20, or --env with `llamafactory-cli env` output")


def _lint_assumptions(asm: Assembly) -> Assembly:
    """Copy the assumptions into ``lint.assumptions`` (for assumption-moves-verdict), verdict-moving first."""
    asm.facts["lint"]["assumptions"] = [{**a.as_dict(), "effect_text": effect_text(a)}
                                        for a in sort_assumptions(asm.assumptions)]
    return asm


def effect_text(a: Any) -> str:
    """``A100-40GB: 92.1 GiB, oom; ...``: each evaluated alternative of an Assumption, for rule messages."""
    return "; ".join(f"{k}: {v:.1f} GiB" + (f", {a.effect_verdict[k]}" if k in a.effect_verdict else "")
                     for k, v in a.effect_gib.items())


def sort_assumptions(items: Iterable[Any]) -> list[Any]:
    """Verdict-moving assumptions first, each group in the order they were found (docs/DESIGN.md)."""
    return sorted(items, key=lambda a: not a.moves_verdict)


def _assumptions(asm: Assembly, opts: Options, tokens: int | None, alt: dict[str, Any] | None) -> dict[str, Any]:
    """Record what the estimate assumed (facts/assume.py) into ``asm.assumptions`` and fold the open ones into the
    memory verdict; returns the ``mem`` facts that say so (verdict, verdict_reason, deciding_assumption,
    token_budget)."""
    from finetune_doctor.facts import assume

    mem = asm.memory
    base = mem.verdict if mem is not None else None
    found = assume.collect(asm, opts, tokens=tokens, base_verdict=base, alt_stack=alt)
    if (asm.run is not None and asm.run.world_size > 1) or any(a.name == "launcher" for a in found):
        # the launcher recorded when the config was read (facts/kinds.py `launcher_assumption`, asked before the
        # ranks were known) is asked again of the same producer with the resolved run (facts/assume.py `_launch`),
        # whose answer replaces it: weighed (over several ranks, or over GPU counts when none was read), or none
        # once the launch is read
        asm.assumptions[:] = [a for a in asm.assumptions if a.name != "launcher"]
    asm.assumptions.extend(found)
    if mem is None:
        return {}
    verdict, deciding = assume.fold(base, mem.total, asm.assumptions)
    budget = assume.token_budget(asm.run, asm.hw, asm.counts) if tokens is None else None
    out: dict[str, Any] = {"deciding_assumption": assume.deciding_facts(deciding, mem.total, base),
                           "token_budget": budget}
    details = dict(mem.details)
    details["token_budget"] = budget
    details["deciding_assumption"] = out["deciding_assumption"]
    asm.memory = replace(mem, verdict=verdict, details=details)
    out.update(_mixed(asm, opts))
    if deciding is not None:
        out.update(verdict=verdict, verdict_reason="assumption")
        if deciding.name == "gpu-variant":
            asm.hw_worst = assume.smallest_variant(asm.hw, opts.gpu)
    return out


def _mixed(asm: Assembly, opts: Options) -> dict[str, Any]:
    """p_oom and the 90 % interval of ``asm.memory`` over its open assumptions (facts/assume.py `mixture`,
    analyzers/memory/uncertainty.py `mixture_p_oom`/`mixture_interval`): a run that fits only if its samples are
    short does not keep the full-length case's p_oom. The assumed case's values stay in ``details``
    (``p_oom_assumed``, ``interval_assumed``, and the components for benchmarks/calibrate.py). Returns the ``mem``
    facts that change (p_oom, p_oom_model and their _pct, interval_*); empty when nothing is open."""
    from finetune_doctor.analyzers.memory import uncertainty
    from finetune_doctor.facts import assume, bands
    from finetune_doctor.facts.mem import BENCHMARK_ERROR, need_ratio, pct_fields, shape_of

    mem = asm.memory
    comps = assume.mixture(mem.total, asm.hw, asm.assumptions, opts.gpu)
    details = {**mem.details, "p_oom_assumed": mem.p_oom, "interval_assumed": mem.interval_gib,
               "p_oom_components": comps, "p_oom_model_assumed": mem.p_oom_model}
    if len(comps) < 2:
        asm.memory = replace(mem, details=details)
        return bands.single_interval(asm)   # the class's widths (facts/bands.py); {} without them
    shape = shape_of(mem)
    interval = bands.mixed_interval(asm, opts.gpu, comps, uncertainty.error_dist(mem.method, shape))
    mixed_p: dict[str, Any] = {}
    if mem.p_oom is not None and all(b is not None for _w, _t, b in comps):
        # on each component's need, not the reserve it shows (uncertainty.assess `need_gib`); Σw·((1−q)·P + q/2)
        need_comps = [(w, t * need_ratio(mem), b) for w, t, b in comps]
        pm = uncertainty.mixture_p_oom(need_comps, uncertainty.model_dist(mem.method, shape))   # type: ignore[arg-type]
        mixed_p = {"p_oom": uncertainty.all_cause(pm, uncertainty.unexplained_share(mem.method)), "p_oom_model": pm}
    # say what the interval is made of (trial 3: ds_z3_offload's 9.6 GiB spread a 60.6 GiB prediction to 7.8-85.1
    # GiB, labelled as the benchmarks' error alone)
    mixed = [a.name for a in asm.assumptions if a.name not in assume.NOT_OPEN and a.effect_gib
             and (a.name == "sample-lengths" or uncertainty.assumed_weight(a.name) < 1.0)]
    basis = bands.basis(asm, f"{BENCHMARK_ERROR}, mixed over the alternatives of {', '.join(mixed)}" if mixed else None)
    details["interval_basis"] = basis
    asm.memory = replace(mem, interval_gib=interval, details=details, **mixed_p)
    out: dict[str, Any] = {"interval_gib": list(interval), "interval_lo_gib": interval[0],
                           "interval_hi_gib": interval[1], "interval_basis": basis}
    if mixed_p:
        out.update(pct_fields(mixed_p["p_oom"], mem.p_oom, mixed_p["p_oom_model"], mem.p_oom_model))
    return out


def _kind(doc: ConfigDoc, launch_file: str | None = None) -> str:
    """Which LF command reads `doc` (readers/config/lfkind.py; ``USE_V1=1`` on the --launch line counts); a file LF does
    not read as a config is an InputError naming the flag that takes it. A YAML of no recognisable kind is read as
    a training config, as before."""
    from finetune_doctor.readers.config.lfkind import NOT_LF, kind_of

    launch_env = None
    if launch_file:
        from finetune_doctor.readers.config.accelerate import read_launch_file

        try:
            launch_env = read_launch_file(launch_file).env
        except InputError:
            launch_env = None   # reported where the launch is read (_accelerate)
    kind = kind_of(doc.values, suffix=Path(doc.path).suffix.lower() or ".yaml", launch_env=launch_env)
    if kind in NOT_LF:
        raise InputError(f"this is {NOT_LF[kind]}{_dump_summary(doc.values) if kind == 'hf-training-args' else ''}",
                         file=doc.path)
    return kind or "train"


def _dump_summary(values: Any) -> str:
    """What a TrainingArguments dump says about the run it came from (the batch, accumulation, rate, precision
    written in it), for the one-line answer to a dump given as CONFIG."""
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "num_train_epochs",
            "max_steps", "bf16", "fp16", "gradient_checkpointing", "deepspeed", "optim")
    said = [f"{k} {values[k]}" for k in keys if k in values and values[k] not in (None, -1, False)]
    return f" (it says: {', '.join(said)})" if said else ""


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


def _release_stack(asm: Assembly, stack: dict[str, str | None], release: Any) -> dict[str, str | None]:
    """`stack` with the transformers the LF release's start-up range makes likely when only the release is known
    (facts/stackrange.py `assumed_transformers`, kept in ``asm.tf_assumed``: trial 5), an assumption
    (facts/assume.py) that decides the run but not which keys are judged renamed; `stack` itself otherwise."""
    asm.tf_assumed = None if stack.get("transformers") else assumed_transformers(release)
    if asm.tf_assumed is not None:
        asm.stack = {**stack, "transformers": asm.tf_assumed["version"]}
    from finetune_doctor.run.stack import parse_version, torch_decides_optim

    tf = asm.stack.get("transformers")
    if not asm.stack.get("torch") and tf and not torch_decides_optim(parse_version(tf)):
        # a transformers before 4.54 ran on a torch before 2.8 (released after it): the torch-dependent terms
        # follow that, not a current stack (the torch-version assumption says so: facts/assume.py `_stack`)
        asm.stack = {**asm.stack, "torch": "2.7"}
    return asm.stack


def _stack(opts: Options, hw: Hardware | None, env: Any, ctx: Any = None) -> tuple[dict[str, str | None], tuple]:
    """The training machine's versions and where each came from, in order of precedence: ``--torch`` /
    ``--transformers``, then ``--env FILE``, then a ``doctor context`` file (`ctx`, as ``--env``), then the packages
    installed here when this machine is the training machine (NVML sees its GPUs). Returns ({torch, transformers,
    unsloth} for resolve_run, (package, version, source)...)."""
    found: dict[str, tuple[str, str]] = {}
    if hw is not None and hw.source == "nvml":
        found.update({k: (v, "installed here") for k, v in installed_versions().items()})
    found.update({k: (v, ctx.path) for k, v in machine.stack(ctx).items()})
    if env is not None:
        found.update({k: (v, env.path) for k, v in env.versions.items()})
    for key, flag in (("torch", opts.torch_version), ("transformers", opts.transformers_version)):
        if flag:
            found[key] = (flag, f"--{key}")
    # unsloth's release decides its loss path (run/savers.py `_unsloth_loss`)
    stack = {k: found[k][0] if k in found else None for k in ("torch", "transformers", "unsloth")}
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
    if not name and asm.kind not in ("train", "train-v1"):
        return None
    if not name:
        asm.notes.append("model_name_or_path is not set: memory not estimated")
        return None
    cache = doc.values.get("cache_dir")
    try:
        arch, model_src = load_arch(
            str(name), base_dir=str(real_parent(config)),
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
        if not (not_found or lenient):
            raise
        if not_found:
            missing = ds_facts.missing(doc.values.get("deepspeed"), err)
            missing["machine_dependent"] = not lenient   # lint, check: the training machine may hold it
            asm.facts["lint"]["ds_missing"] = missing
            if not lenient:
                asm.facts["lint"]["keys"].append({
                    "key": "deepspeed", "kind": "not_here", "message": missing["message"], "suggestion": None,
                    "replacement": None, "fix": None, "fix_value": None, "condition": nothere.PATH_NOT_HERE,
                    "line": doc.line_of("deepspeed"), "override": "deepspeed" in doc.overrides})
            if not tolerate_missing:
                _stand_in_deepspeed(asm, arch)   # check, estimate: estimate with a stock file, as an assumption
                return
        else:
            asm.notes.append(f"DeepSpeed config not read ({err}); facts computed without it")
        return
    asm.facts["ds"] = ds_facts.assemble(asm.ds, asm.ds_stock, asm.stack_sources)
    if asm.ds is not None and getattr(asm.ds, "path", None) and not asm.ds_stock:
        asm.sources["deepspeed"] = SourceDoc("deepspeed", display_path(str(asm.ds.path)) or str(asm.ds.path),
                                             dict(getattr(asm.ds, "positions", {}) or {}))


def ds_stage_hint(value: Any) -> tuple[int, bool]:
    """(ZeRO stage, CPU offload) a DeepSpeed file name suggests (``ds_z3_offload.json`` → (3, True)); (2, False)
    when it says nothing, the stage cases/INDEX.md infers for a file it does not show."""
    import re

    name = str(value or "").lower().rsplit("/", 1)[-1]
    m = re.search(r"(?:z|zero|stage)[-_ ]?([0-3])", name)
    return (int(m.group(1)) if m else 2), "offload" in name


def _stand_in_deepspeed(asm: Assembly, arch: Any) -> None:
    """A DeepSpeed file the config names that is not on this machine: the run is estimated with LLaMA-Factory's
    stock file of the stage its name suggests (`ds_stage_hint`), recorded as the ``deepspeed-config`` assumption
    (facts/assume.py evaluates the other stock stages); the path itself is not-checked-here."""
    doc = asm.doc
    value = doc.values.get("deepspeed")
    stage, offload = ds_stage_hint(value)
    stock = f"examples/deepspeed/ds_z{stage}{'_offload' if offload and stage in (2, 3) else ''}_config.json"
    asm.ds, asm.ds_stock = ds_facts.load({**doc.values, "deepspeed": stock}, doc.path, doc.line_of("deepspeed"),
                                         asm.hw, arch.hidden_size if arch else None, [])
    asm.ds_assumed = (str(value), stock)
    asm.facts["ds"] = ds_facts.assemble(asm.ds, asm.ds_stock, stand_in=str(value))
    asm.notes.append(ds_facts.stand_in_note(value, stock))


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
        if launch is None and asm.doc.path == "<command line>":
            # `doctor check -- llamafactory-cli train ...` launches the run as the same words in a cmdline.txt do
            # (pipeline/check.py reads such a file as its own --launch): one reading for every form (trial 5)
            from finetune_doctor.readers.config.accelerate import parse_launch_or_none

            launch = parse_launch_or_none(asm.doc.text, asm.doc.path)
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
    if launch is None and acc is None and not lenient:
        acc = _accelerate_beside(asm)
        launch = _env_launch() if acc is None else None
    if acc is not None:
        asm.sources["accelerate"] = SourceDoc("accelerate", display_path(acc.path) or acc.path, dict(acc.positions))
        from finetune_doctor.facts.accel import accelerate_fact

        asm.facts["lint"]["accelerate"] = accelerate_fact(acc)
    if launch is not None or acc is not None:
        asm.launch = LaunchInputs(acc, launch)


# accelerate's own default file name (accelerate config writes default_config.yaml) and the names users give it
ACCELERATE_BESIDE = ("accelerate_config.yaml", "accelerate_config.yml", "accelerate.yaml", "default_config.yaml",
                     "fsdp_config.yaml")
# llamafactory-cli's launch variables (LLaMA-Factory launcher.py: FORCE_TORCHRUN starts torchrun, NNODES and
# NPROC_PER_NODE size it)
LAUNCH_ENV = ("FORCE_TORCHRUN", "NNODES", "NPROC_PER_NODE")


def _accelerate_beside(asm: Assembly) -> Any:
    """The one accelerate config beside the training YAML (`ACCELERATE_BESIDE`), with a note; None when there is
    none, several, or a file of that name that is not an accelerate config."""
    here = real_parent(asm.doc.path)
    base = str(here)
    # os.path on strings: five pathlib joins and stats per config were ~3 % of a lint of LF's examples (issue #22)
    found = [here / n for n in ACCELERATE_BESIDE if os.path.isfile(os.path.join(base, n))]
    if len(found) != 1:
        return None
    from finetune_doctor.readers.config.accelerate import load_accelerate_config   # once there is one (#22)
    try:
        acc = load_accelerate_config(str(found[0]))
    except InputError:
        return None
    asm.notes.append(f"launch read from the accelerate config beside the YAML ({found[0].name}); "
                     "--accelerate-config FILE names another")
    return acc


def _env_launch() -> Any:
    """A ``llamafactory-cli train`` launch from FORCE_TORCHRUN/NNODES/NPROC_PER_NODE in this environment, or None
    when none is set."""
    import os

    env = {k: os.environ[k] for k in LAUNCH_ENV if os.environ.get(k)}
    if not env.get("FORCE_TORCHRUN") and not env.get("NNODES"):
        return None
    from finetune_doctor.readers.config.accelerate import LaunchCommand   # only when the environment launches
    return LaunchCommand(launcher="llamafactory-cli", env=env, options={}, script="train",
                         text=" ".join(f"{k}={v}" for k, v in env.items()) + " llamafactory-cli train")


def text_only(data: dict[str, Any] | None) -> bool:
    """Whether the ``data`` facts show that no sample brings an image, video or audio: every configured dataset
    was read in full here (or by the training machine's context) and none has a sample with media
    (``with_media`` 0). False when the data is unknown or any dataset was not read: images stay possible."""
    sets = (data or {}).get("datasets") or []
    return bool(sets) and all(d.get("status") == "ok" and not d.get("with_media") for d in sets)


def _scan(asm: Assembly, config: str) -> dict[str, Any] | None:
    """The ``data`` facts: the datasets scanned here when they are here, else the statistics a ``doctor context``
    file carries (the training machine's scan); without either, a note says so. Data read here with no media
    (`text_only`) makes the run's ``media_inputs`` False."""
    from finetune_doctor.facts import data as data_facts   # the data scan's namespace: not lint's (issue #22)
    data = data_facts.assemble(asm.doc.values, config)
    if data is not None:
        asm.assumptions.extend(data_facts.assumptions(data))
        if asm.run is not None and asm.run.media_inputs and text_only(data):
            asm.run = asm.run.with_(media_inputs=False)   # no image reaches the tower (the vision term)
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
