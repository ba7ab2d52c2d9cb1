"""Every config-side fact namespace of one training config, assembled once per command.

The order follows the data: read the YAML with its overrides (cfg, lint) → the GPUs (hw) → the model's
architecture → the DeepSpeed JSON (ds) → the run LLaMA-Factory would execute (run, model) → the datasets (data,
when asked) → the memory estimate (mem). `assemble_config` serves ``check``, ``lint`` (static: no NVML, no data, no
deepspeed import), ``estimate``, ``probe`` and the config half of ``postmortem`` (lenient: a config that no longer
resolves does not stop the diagnosis of a run that already happened).

Each input family has a module of its own beside this one (split at the 800-line cap, issue #22): the `Assembly`
it fills (facts/assembly.py), the DeepSpeed JSON (facts/dsread.py), the launch line and accelerate config
(facts/launchread.py), the assumptions folded into the verdict (facts/verdict.py); the assumptions themselves are
facts/assume.py's and its family modules'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.errors import InputError
from finetune_doctor.facts import cfg as cfg_facts
from finetune_doctor.facts import skeleton
from finetune_doctor.facts import ds as ds_facts
from finetune_doctor.facts import dsread, launchread
from finetune_doctor.facts import hw as hw_facts
from finetune_doctor.facts import kinds
from finetune_doctor.facts.archmemo import load_arch_once as _load_arch_once
from finetune_doctor.facts.assembly import Assembly
from finetune_doctor.facts.bf16stack import bf16_refusal, stack_versions
from finetune_doctor.facts.stackrange import assumed_transformers, stack_refusal_facts
from finetune_doctor.facts import lint as lint_facts
from finetune_doctor.facts import machine
from finetune_doctor.facts import model as model_facts
from finetune_doctor.facts import quantassume
from finetune_doctor.facts import moeleaf, nothere
from finetune_doctor.facts import run as run_facts
from finetune_doctor.facts import tfmodeltype
from finetune_doctor.facts.verdict import lint_assumptions, record_assumptions, with_error_risk
from finetune_doctor.fsutil import real_parent
from finetune_doctor.readers.config.yamlcfg import ConfigDoc, load_config
from finetune_doctor.readers.config.lfnarrow import release_in_use
from finetune_doctor.readers.config.lfrelease import with_launch
from finetune_doctor.run import InvalidRunValue, resolve_run
from finetune_doctor.settings import Options
from finetune_doctor.types import Hardware, SourceDoc


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
    "estimate": Mode(need_model=False),   # an unsized model is a finding, as in check (trial 11: not exit 2)
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
    facts["lint"].update(tfmodeltype.facts(asm, arch))
    if arch is None:   # every config kind alike: a model this machine cannot see is info unless --strict (trial 6)
        nothere.model_not_here(asm, sizes=opts.command in ("check", "estimate"))
    if kind not in ("train", "train-v1") or (kind == "train" and kinds.predict_only(doc.values)):
        kinds.not_training(asm, arch)
        return lint_assumptions(asm)   # --strict judges a merge's or a chat's verdict-moving ones too
    # check, estimate and postmortem size a DeepSpeed file not here with the same stock stand-in (one home:
    # dsread.py `stand_in_deepspeed`, an assumption): the same inputs give the same total (trial 3, LF#8665)
    dsread.read_deepspeed(asm, arch, tolerate_missing=static, lenient=lenient)
    launchread.read_launch(asm, opts, lenient=lenient)
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
        asm.memory = mem_facts.judged(est, asm.hw, alt, run=asm.run)   # verdict, p_oom, interval (analyzers/memory/uncertainty.py)
        qalt = mem_facts.quant_alternative(lambda a: resolve(stack, a), asm.run, asm.hw,
                                           int(tokens) if tokens else None)
        quantassume.quant_assumption(asm, qalt)
        quantassume.named_quant_assumption(asm, lambda a: resolve(stack, a), int(tokens) if tokens else None)
        honest = record_assumptions(asm, opts, int(tokens) if tokens else None, alt) if assume else {}
        facts["mem"] = with_error_risk({**mem_facts.assemble(asm.memory, asm.hw, asm.run, alt, qalt),
                                        "deciding_assumption": None, "token_budget": None, **honest})
    elif assume:
        record_assumptions(asm, opts, None, None)
    lint_assumptions(asm)
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
    asm.context_use = machine.how_used(asm.context, opts)
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
    """The note of a run judged without a card (facts/launchray.py `gpus_unknown_note`, which facts/verdict.py asks
    again once the run's world size is resolved)."""
    from finetune_doctor.facts.launchray import gpus_unknown_note

    return gpus_unknown_note(opts.env_file, None)

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
            launch_env = None   # reported where the launch is read (facts/launchread.py)
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
    (facts/assumestack.py) that decides the run but not which keys are judged renamed; `stack` itself otherwise."""
    asm.tf_assumed = None if stack.get("transformers") else assumed_transformers(release)
    if asm.tf_assumed is not None:
        asm.stack = {**stack, "transformers": asm.tf_assumed["version"]}
    from finetune_doctor.run.stack import parse_version, torch_decides_optim

    tf = asm.stack.get("transformers")
    if not asm.stack.get("torch") and tf and not torch_decides_optim(parse_version(tf)):
        # a transformers before 4.54 ran on a torch before 2.8 (released after it): the torch-dependent terms
        # follow that, not a current stack (the torch-version assumption says so: facts/assumestack.py `stack_assumptions`)
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
    # --llamafactory states the release the run's LF-dependent terms follow too (run/resolve.py media_knobs: 0.9.0/
    # 0.9.1's image bounds; trial 16, LF#5590 was sized with 0.9.2's)
    for key, flag, name in (("torch", opts.torch_version, "--torch"), ("transformers", opts.transformers_version,
                            "--transformers"), ("llamafactory", getattr(opts, "lf_version", None), "--llamafactory")):
        if flag:
            found[key] = (flag, name)
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
        arch, model_src = _load_arch_once(load_arch, dict(
            model_name_or_path=str(name), base_dir=str(real_parent(config)),
            cache_dir=cache if isinstance(cache, str) else None, model_config=opts.model_config,
            allow_download=not static and opts.command in DOWNLOAD_COMMANDS, offline=opts.offline,
            exact=False if static else "auto", transformers_major=transformers,
            template=str(doc.values.get("template") or "") or None, multimodal=multimodal_hint(doc.values),
            context_config=machine.model_config(asm.context), llama_pro_layers=_llama_pro_layers(doc.values)),
            asm.assumptions)
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
            "name": str(name), "message": err.message,
            "sentence": err.message if err.message.endswith(".") else err.message + ".",
            "missing": getattr(err, "missing", "") or "",
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

def _llama_pro_layers(values: dict[str, Any]) -> int | None:
    """The blocks a LLaMA Pro run trains (``freeze_trainable_layers``, LF's default 2: hparams/finetuning_args.py)
    when the YAML sets ``use_llama_pro``; None otherwise."""
    if values.get("use_llama_pro") is not True:
        return None
    n = values.get("freeze_trainable_layers", 2)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def text_only(data: dict[str, Any] | None) -> bool:
    """Whether the ``data`` facts show that no sample brings an image, video or audio: every configured dataset
    was read in full here (or by the training machine's context) and none has a sample with media
    (``with_media`` 0), or its dataset_info.json entry, read here, names no images/videos/audios column (LF
    reads media from those only). False when the data is unknown or any dataset was not read: images stay
    possible."""
    sets = (data or {}).get("datasets") or []
    # or its dataset_info entry, read here, names no media column: LF loads no media for it (data/parser.py)
    return bool(sets) and all((d.get("status") == "ok" and not d.get("with_media"))
                              or (d.get("info_read") and d.get("media_columns") == []) for d in sets)


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
