"""`doctor postmortem RUN_DIR [--log FILE ...] [--config CONFIG.yaml] [--plot FILE.png]`: why a run died or
went NaN, from what it left behind.

Flow: find and read the files a run leaves (readers/runlogs/runlayout.py: LLaMA-Factory's output_dir, per-rank and
per-node logs, torchelastic error files, flight-recorder dumps, wandb/swanlab/mlflow folders, GPU recordings; in
parallel over the cores when there are many), join the run's config through facts/config.py (the same inputs as
``check``: ``--config`` with ``key=value`` overrides and ``--deepspeed``, else the ``training_args.yaml``
LLaMA-Factory saves in output_dir, else the YAML the launch command in ``cmdline.txt`` or the log itself names),
build the timeline and the ``ev`` facts (analyzers/postmortem/timeline.py), and judge: the rules whose ``commands`` include
``postmortem`` over all namespaces (cfg, run, model, hw, mem, ds, lint, ev), plus the config-level rules of
``check`` (categories config, precision, deepspeed) on the config read. A DeepSpeed file the config names but that
is not there is the ``deepspeed-file-missing`` finding.

Hardware: ``--gpu`` when given; otherwise the GPU capacity printed in a CUDA OOM message and the world size a
log states. NVML is not asked: the machine running the postmortem is not necessarily the one that trained.

Finding order: severity, then the rule's ``rank:N`` tag (root causes such as fp16-on-bf16-model-confirmed or
foreign-memory-on-gpu rank before the symptoms they explain, such as nan-loss or cuda-oom; rules without a
rank tag come last), then code. The first finding is the diagnosis.

Bad input never raises past the CLI: a missing path is an InputError (exit 2); unreadable, truncated or binary
files are reported in the ``read`` section and diagnosis goes on from the rest.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from finetune_doctor.analyzers.postmortem.timeline import analyze
from finetune_doctor.analyzers.postmortem.worldsplit import world_split
from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError, install_hint
from finetune_doctor.evidence import Evidence
from finetune_doctor.readers.config.accelerate import launch_file_in
from finetune_doctor.facts.assembly import Assembly
from finetune_doctor.facts.config import assemble_config, read_env_file
from finetune_doctor.facts.ev import past_start_up
from finetune_doctor.facts.loadfail import said_type_need, version_first
from finetune_doctor.analyzers.postmortem.kindwords import upgrade_beside_crash
from finetune_doctor.facts import hw as hw_facts
from finetune_doctor.facts import skeleton
from finetune_doctor.fsutil import output_sinks
from finetune_doctor.readers.runlogs.logs import regular_size
from finetune_doctor.readers.runlogs.runlayout import collect, discover, read_file
from finetune_doctor.reporters.plot import draw
from finetune_doctor.settings import Options
from finetune_doctor.types import SEVERITY_RANK, Assumption, Finding, Hardware, Report, SourceDoc

SPARK_POINTS = 120
CHECK_CATEGORIES = ("config", "precision", "deepspeed")
"""Categories of ``check`` rules that judge the config alone and so apply to a run that already happened (memory
rules do not: the logs show what the memory really did)."""
PARSE_TIME_TAG = "parse-time"
"""The rule tag of ``check`` rules whose errors stop LLaMA-Factory while it parses the arguments (each rule's *Why is
this bad?*: HfArgumentParser.parse_dict with allow_extra_keys=False, get_train_args, __post_init__): a run whose
logs show training steps got past them, so in a postmortem they are warnings (trial 7 c10, the same reasoning as
deepspeed-file-missing). A user's rule pack (``--rules``) tags its own the same way."""
CONSEQUENCE_TAG = "consequence"
"""The rule tag of postmortem rules whose failure another rank's exception explains (a collective timeout, an NCCL
error of a peer that went away: ProcessGroupNCCL.cpp ``WorkNCCL::checkTimeout`` fires on the ranks still waiting in
a collective that a rank which raised never entered). When ``ev.crash.first`` says a rank raised (a cause, not a
consequence: analyzers/postmortem/causes.py ``crash_facts``), their findings follow run-crashed instead of
preceding it by their ``rank:N``; alone, they keep their rank."""
LOG_ITEMS_TAG = "log-items"
"""The rule tag of static config rules (unknown-key, renamed-key, dataset-not-defined) that a postmortem evaluates
for the items it read from the log (``ev.refused_keys``, ``ev.undefined_dataset``: analyzers/postmortem/refusal.py):
their items from the config are not kept there (the config's keys reach a postmortem through check's pass below,
demoted when the run got past start-up; its datasets not at all, the registry here may not be the one that ran)."""
CMDLINE = "cmdline.txt"
OWN_OUTPUT_NOTE = "not read as logs, finetune-doctor's own output"
OWN_REPORT_MARKS = ("a finetune-doctor report", "this command's own report")
"""The problems readers/runlogs/runlayout.py gives a saved report of this tool and the file the report is being
written to; the note of either goes to stderr too (cli.py), where a user running ``| tee`` sees why."""
LR_HIGH_FULL = 5e-4
"""analyzers/postmortem/causes.py LR_HIGH["full"]: below it a full fine-tune's rate is not blamed, so the method
decides."""


def _hardware_from_evidence(ev: Evidence) -> Hardware | None:
    """The GPU capacity a CUDA OOM message printed and the world size a log stated: enough for the OOM remedy
    planner's budget when no --gpu was given."""
    cap = None
    for f in ev.files:
        for o in f.ooms:
            if o.total:
                cap = o.total / (1 << 30)
                break
        if cap:
            break
    world = next((fact.value for f in ev.files for fact in f.facts if fact.name == "world_size"
                  and isinstance(fact.value, int)), None)
    notes: tuple[str, ...] = ()
    if world is None:
        world, notes = _world_from_header(ev)
    if world is None:
        # no log states the world size, but the ranks that print (``[rank3]:`` prefixes, rank files, failure
        # records) bound it from below: a ZeRO run sized on one rank would read 4·P/N with N = 1
        seen = [r for f in ev.files for r in (f.origin.get("rank"), *(o.rank for o in f.ooms),
                                              *(n.rank for n in f.nccl), *(k.rank for k in f.kills))
                if isinstance(r, int) and 0 <= r < 1 << 20]
        if seen and max(seen) > 0:
            world = max(seen) + 1
            notes = (f"world size taken as {world}, the highest rank the logs name plus one (a lower bound); "
                     "pass --gpu NxTYPE [--nnodes M] for the real one",)
    if cap is None and world is None:
        return None
    return Hardware(gpu=None, num_gpus=world, capacity_gib=cap, bf16=None, source="log", notes=notes)


def _log_world_over_nodes(hw: Hardware | None, nnodes: int | None) -> Hardware | None:
    """`hw` read from the logs (`_hardware_from_evidence`), whose GPU count is the whole world, spread over the
    ``--nnodes`` nodes: the sizing (run/resolve.py, per node = num_gpus // nnodes) then keeps that world instead
    of multiplying it by the nodes again (trial 18, LlamaFactory#5450: "world size 4" in the run line, "taken as
    2" in the notes). Unchanged without --nnodes or when the world is smaller than the node count."""
    if hw is None or not nnodes or nnodes < 2 or not hw.num_gpus or hw.num_gpus < nnodes:
        return hw
    note = (f"world size {hw.num_gpus} read from the logs spans the {nnodes} nodes --nnodes gives "
            f"({hw.num_gpus // nnodes} GPU(s) per node)")
    return replace(hw, nnodes=nnodes, notes=tuple(hw.notes) + (note,))


def _world_from_header(ev: Evidence) -> tuple[int | None, tuple[str, ...]]:
    """The rank count transformers' "***** Running training *****" header implies: its "Total train batch size (w.
    parallel, distributed & accumulation)" is per-device batch x gradient accumulation x world size
    (trainer.py ``_inner_training_loop``: ``total_train_batch_size = self._train_batch_size *
    args.gradient_accumulation_steps * args.world_size``). Read before the ranks a log names, which only bound it
    from below (trial 4, LlamaFactory#9194: 64 / (1 x 8) = 8 ranks while only rank 5 printed). (None, ()) when a
    figure is missing or the product does not divide."""
    got: dict[str, int] = {}
    for f in ev.files:
        for fact in f.facts:
            if fact.name in ("total_batch", "micro_batch", "grad_accum") and isinstance(fact.value, int):
                got.setdefault(fact.name, fact.value)
    total, per, accum = got.get("total_batch"), got.get("micro_batch"), got.get("grad_accum")
    if not (total and per and accum) or total % (per * accum):
        return None, ()
    world = total // (per * accum)
    return world, (f"world size {world} from the log's training header: total train batch size {total} = "
                   f"{per} per device x {accum} gradient accumulation x {world} ranks",)


def launch_command(ev: Evidence) -> tuple[str | None, list[str], str | None]:
    """(config YAML, key=value overrides, where) of the launch command: ``cmdline.txt`` in the run folder first
    (one shell line: ``llamafactory-cli train cfg.yaml k=v`` or torchrun of LF's launcher.py), else the command a
    log echoes (fact ``launch`` of readers/runlogs/logparse.py). (None, [], None) without one."""
    from finetune_doctor.readers.runlogs import logpatterns as pat
    if ev.run_dir:
        p = os.path.join(ev.run_dir, CMDLINE)
        if os.path.isfile(p):
            regular_size(p)
            with open(p, "r", encoding="utf-8", errors="replace") as fh:
                text = fh.read(1 << 16)
            flat = " ".join(text.replace("\\\n", " ").split())
            m = pat.LAUNCH_LF.search(flat) or pat.LAUNCH_TORCHRUN.search(flat)
            if m:
                try:
                    over = shlex.split(m.group("over"))
                except ValueError:
                    over = m.group("over").split()
                return m.group("yaml"), over, p
    for f in ev.files:
        for fact in f.facts:
            if fact.name == "launch" and isinstance(fact.value, dict) and fact.value.get("config"):
                return fact.value["config"], list(fact.value.get("overrides") or []), f"{fact.file}:{fact.line}"
    return None, [], None


def _resolve_config(config: str | None, ev: Evidence, notes: list[str]) -> tuple[str | None, list[str]]:
    """The config YAML to join and the overrides its source adds (module docstring for the order)."""
    if config:
        if not os.path.isfile(config):
            raise InputError("no such config file", file=config)
        return config, []
    if ev.saved_args:
        notes.append(f"config taken from {ev.saved_args} (the arguments LLaMA-Factory saved in the run directory)")
        return ev.saved_args, []
    yaml, over, where = launch_command(ev)
    if yaml is None:
        return None, []
    for cand in ([os.path.join(ev.run_dir, yaml)] if ev.run_dir else []) + [yaml]:
        if os.path.isfile(cand):
            notes.append(f"config taken from the launch command in {where}: {yaml}"
                         + (f" {' '.join(over)}" if over else ""))
            return cand, over
    notes.append(f"the launch command in {where} names {yaml}, which is not here: pass it with --config")
    return None, []


def _context(config: str | None, overrides: list[str], opts: Options, hw: Hardware | None,
             notes: list[str]) -> Assembly | None:
    """The config-side facts of `config` with `overrides` (facts/config.py, lenient: the run already happened,
    so a model or a DeepSpeed JSON that no longer resolves narrows the diagnosis instead of stopping it; a
    missing DeepSpeed file becomes ``lint.ds_missing``), or None without a config."""
    if not config:
        return None
    placeholder = hw or Hardware(gpu=None, num_gpus=None, capacity_gib=None, bf16=None, source="none")
    asm = assemble_config(config, tuple(overrides), opts, "postmortem", hw=placeholder)
    notes.extend(asm.notes)
    return asm


def _judge(facts: dict[str, Any], sources: dict[str, SourceDoc], opts: Options, live: dict[str, Any],
           has_config: bool) -> list[Finding]:
    """The postmortem rules (cause first), then the config-level rules of ``check`` (CHECK_CATEGORIES) by
    severity: the first finding stays the diagnosis of what happened. A static finding that a postmortem rule
    confirmed from the logs (``fp16-on-bf16-model`` / ``fp16-on-bf16-model-confirmed``) is not repeated."""
    found = _causes_first(_log_items_only(judge("postmortem", facts, sources, opts, live=live, order="rank"),
                                          facts, opts), facts, opts)
    if (facts.get("ev") or {}).get("basis") == "words":
        # read from the user's description alone (analyzers/postmortem/said.py): no line of the run confirms it,
        # so it is at most a warning, below what the same rule says from a log line; its message asks for the output
        found = [replace(f, severity="warning") if f.severity == "error" else f for f in found]
    hang = ((facts.get("ev") or {}).get("health") or {}).get("hang")
    if hang and not hang.get("shown"):
        # a hang the logs only allow (a log ending at start-up, or at a step under a days-long ddp_timeout) reads
        # the same as a cut paste: a warning; one they show (ranks at different steps, the heartbeat monitor) is
        # an error, so a CI wrapper's exit code tells that run from a clean one (README, trial 12)
        found = [replace(f, severity="warning") if f.name == "run-hang" and f.severity == "error" else f
                 for f in found]
    if not has_config:
        return found
    have = {(f.code, f.location.file, f.location.line) for f in found}
    confirmed = {f.name[:-len("-confirmed")] for f in found if f.name.endswith("-confirmed")}
    extra = [f for f in judge("check", facts, sources, opts, live=live)
             if f.category in CHECK_CATEGORIES and (f.code, f.location.file, f.location.line) not in have
             and f.name not in confirmed]
    why = past_start_up(facts.get("ev") or {})
    if why:
        parse_time = parse_time_rules(opts)
        extra = [_past_start_up(f, why) if f.name in parse_time else f for f in extra]
    return found + sorted(extra, key=lambda f: -SEVERITY_RANK.get(f.severity, 0))


def _log_items_only(found: list[Finding], facts: dict[str, Any], opts: Options) -> list[Finding]:
    """`found` without the findings of rules tagged LOG_ITEMS_TAG that do not stand on a log line an ``ev`` item
    of theirs was read from (file and line)."""
    ev = facts.get("ev") or {}
    lines = {(str((i.get("location") or {}).get("file")), (i.get("location") or {}).get("line"))
             for k in ("refused_keys", "undefined_dataset") for i in ev.get(k) or ()}
    from finetune_doctor.engine.loader import load_rules

    tagged = {r.name for r in load_rules(opts.rules_dirs) if LOG_ITEMS_TAG in r.tags}
    return [f for f in found if f.name not in tagged or (str(f.location.file), f.location.line) in lines]


def _causes_first(found: list[Finding], facts: dict[str, Any], opts: Options) -> list[Finding]:
    """`found` with the findings of rules tagged CONSEQUENCE_TAG moved right after run-crashed when the crash is
    an exception a rank raised before the others failed (``ev.crash.first``); unchanged otherwise."""
    if not ((facts.get("ev") or {}).get("crash") or {}).get("first"):
        return found
    k = next((i for i, f in enumerate(found) if f.name == "run-crashed"), None)
    if k is None:
        return found
    from finetune_doctor.engine.loader import load_rules

    tagged = {r.name for r in load_rules(opts.rules_dirs) if CONSEQUENCE_TAG in r.tags}
    moved = [f for f in found[:k] if f.name in tagged]
    if not moved:
        return found
    rest = [f for f in found if not any(f is m for m in moved)]
    j = next(i for i, f in enumerate(rest) if f is found[k]) + 1
    return rest[:j] + moved + rest[j:]


def parse_time_rules(opts: Options) -> frozenset[str]:
    """Names of the rules tagged PARSE_TIME_TAG in the rule pack `opts` loads (bundled rules and ``--rules``)."""
    from finetune_doctor.engine.loader import load_rules

    return frozenset(r.name for r in load_rules(opts.rules_dirs) if PARSE_TIME_TAG in r.tags)


def _past_start_up(f: Finding, why: str = "the logs show training steps") -> Finding:
    """A start-up refusal (a rule tagged PARSE_TIME_TAG) judged on a config whose run got past start-up
    (facts/ev.py `past_start_up`: training steps, or a failure only a started run can have): the logs outrank it,
    so it is a warning that says why rather than an error claiming the run could not start."""
    if f.severity != "error":
        return f
    text = f.message.rstrip()
    return replace(f, severity="warning", message=text + ("" if text.endswith(".") else ".") + (
        f" {why[0].upper() + why[1:]}, so the run got past start-up: the config read here is not exactly the one "
        "that ran (edited since, or judged for another LLaMA-Factory release than the one that ran)."))


def _skipped_notes(ev: Evidence, notes: list[str]) -> None:
    """Say what was not read and which extra reads it."""
    extra = [r for r in ev.skipped if any("extra" in p for p in r.problems)]
    if extra:
        kinds = sorted({m.group(1) for r in extra for p in r.problems for m in [re.search(r"needs the '(\w+)'", p)]
                        if m})
        notes.append(f"{len(extra)} file(s) not read for want of an extra ({', '.join(kinds)}): "
                     + "; ".join(os.path.basename(r.path) for r in extra[:3])
                     + " — the text logs were read; " + install_hint(",".join(kinds))
                     + " reads the rest")
    own = [r for r in ev.skipped if any(OWN_REPORT_MARKS[0] in p or OWN_REPORT_MARKS[1] in p for p in r.problems)]
    if own:
        notes.append(f"{OWN_OUTPUT_NOTE}: " + "; ".join(
            f"{os.path.basename(r.path)} ({'being written by this command' if OWN_REPORT_MARKS[1] in r.problems[0] else 'a saved report'})"
            for r in own[:8]) + (f" and {len(own) - 8} more" if len(own) > 8 else ""))
    odd = [r for r in ev.skipped if any("not a regular file" in p or p.startswith("not read:") for p in r.problems)
           and r not in extra and r not in own]
    if odd:
        notes.append(f"{len(odd)} path(s) skipped: " + "; ".join(f"{r.path} ({r.problems[0]})" for r in odd[:3]))


def _named_inputs(opts: Options) -> dict[tuple[int, int], str]:
    """The files given through flags that a run folder may also hold (an ``--env`` report saved beside the logs):
    (st_dev, st_ino) -> the flag, so that collect does not read them as logs (trial 3, LlamaFactory#6092)."""
    out: dict[tuple[int, int], str] = {}
    for flag, path in (("--env", opts.env_file),):
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        if st is not None:
            out[(st.st_dev, st.st_ino)] = flag
    return out


def _override_words(over: list[str]) -> str:
    """How the refusal of overrides without a config names them: the first three as given, and --deepspeed."""
    keys = [o for o in over if not o.startswith("deepspeed=")]
    shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
    return (f"key=value overrides ({shown})" if keys else "") + (" and " if keys and len(keys) < len(over) else "") \
        + ("--deepspeed" if len(keys) < len(over) else "")


def _refuse_config_as_run(path: str | None) -> None:
    """A LLaMA-Factory or DeepSpeed config given where the run's folder or log goes: an InputError saying which
    command or flag takes it, instead of "nothing to diagnose" read from a YAML scanned as a log."""
    # configs are a few KiB: a YAML/JSON over 1 MiB given as the run is a log or a dump, read as one
    if not path or os.path.splitext(path)[1].lower() not in (".yaml", ".yml", ".json") \
            or not os.path.isfile(path) or os.path.getsize(path) > (1 << 20):
        return
    from finetune_doctor.readers.config.lfkind import kind_of_file

    found = kind_of_file(path)   # None for what is not a readable config: read as the log it may be
    kind = "ds" if found == "deepspeed" else "lf" if found in ("train", "train-v1", "export", "export-v1", "chat",
                                                               "eval") else None
    if kind == "lf":
        raise InputError("this is a LLaMA-Factory config, not a run folder or log: `doctor check` judges it before "
                         "launch; after a run, give the run's folder or log and this file as --config", file=path)
    if kind == "ds":
        raise InputError("this is a DeepSpeed config, not a run folder or log: give the run's folder or log, and "
                         "this file as --deepspeed", file=path)


def run(run_dir: str | None, logs: list[str], config: str | None, opts: Options, plot: str | None = None,
        overrides: tuple[str, ...] | list[str] = (), deepspeed: str | None = None) -> Report:
    """Diagnose a finished or crashed run; returns the Report (the CLI picks the exit code).

    `overrides` are ``key=value`` pairs merged into the config as ``llamafactory-cli train`` merges them;
    `deepspeed` is the DeepSpeed JSON (the same as ``deepspeed=FILE``). Raises InputError for bad input paths.
    """
    _refuse_config_as_run(run_dir)
    ev = collect(run_dir, list(logs or []), exclude=output_sinks(opts.output), named=_named_inputs(opts))
    notes: list[str] = []
    _skipped_notes(ev, notes)
    cfg_path, cmd_over = _resolve_config(config, ev, notes)
    over = list(cmd_over) + list(overrides) + ([f"deepspeed={deepspeed}"] if deepspeed else [])
    if over and not cfg_path:
        # trial 17: a user with only a log tried `gradient_accumulation_steps=4`; say what does take a setting
        raise InputError(f"{_override_words(over)} need a config, and none was found: give the run's YAML "
                         "with --config (or put training_args.yaml in the run folder); with no YAML at all, write "
                         "these keys into a small one and give it as --config (the keys it leaves out are then "
                         "judged at LLaMA-Factory's defaults); versions need no config (--transformers, --torch, "
                         "--llamafactory, --env)", file=run_dir)
    # the GPUs as check reads them (facts/hw.py `from_inputs`: --gpu, then the --env report), then the logs'
    hw = hw_facts.from_inputs(opts, read_env_file(opts.env_file) if opts.env_file else None, allow_nvml=False)
    if hw is None:
        hw = _log_world_over_nodes(_hardware_from_evidence(ev), opts.nnodes)
    env_opts = _log_as_env(opts, ev)   # a log holding an env block feeds what --env feeds (one reader)
    if hw is None and env_opts.env_file != opts.env_file:
        hw = hw_facts.from_inputs(env_opts, read_env_file(env_opts.env_file), allow_nvml=False)
    asm = _context(cfg_path, over, env_opts, hw, notes)
    if asm is None and hw is not None:
        notes.extend(hw.notes)     # with a config, assemble_config reports them
    if asm is not None:
        facts, sources, live = asm.facts, dict(asm.sources), asm.live()
        hw = asm.hw if asm.hw is not None and asm.hw.source != "none" else hw
    else:
        # the shared skeleton and hw builder: the hand-built hw dropped compute_capability, in_use_gib, nnodes, fp8
        facts = skeleton(hw=hw_facts.assemble(hw))
        sources, live = {}, {}
    given = {**_pasted_versions(ev), **_given_versions(opts)}   # --env and the flags win over a pasted block
    tl = analyze(ev, facts, given)
    facts["ev"] = tl.facts
    version_first(facts, given,   # a load failure of a model type the run's transformers predates (trial 12)
                  " ".join(str(f.said.get("text") or "") for f in ev.files if f.said))
    said_type_need(facts, given)   # a model type the user's words name, against the transformers that registers it
    upgrade_beside_crash(facts["ev"], ev)   # a title above the line that ties it to an upgrade (kindwords.py)
    _launched_past_deepspeed(facts, tl.facts, any(o.startswith("deepspeed=") for o in over))
    launch = opts.launch or (launch_file_in(ev.run_dir or run_dir) if (ev.run_dir or run_dir) else None)
    _launched_under_nohup(tl.facts, launch)
    _read_launch(tl.facts, launch, notes, ev)
    tl.facts["world_split"] = world_split(ev, launch)   # ranks told different world sizes (trial 12)
    facts["ev"]["skipped"] = [{"path": r.path, "why": r.problems[0] if r.problems else "",
                               "extra": _extra_of(r)} for r in ev.skipped][:64]
    main_log = next((f.read.path for f in ev.files if f.read.kind == "text-log"), None)
    if main_log and "log" not in sources:
        sources["log"] = SourceDoc("log", main_log)
    if ev.run_dir and "run_dir" not in sources:
        sources["run_dir"] = SourceDoc("run_dir", ev.run_dir)
    findings = _judge(facts, sources, opts, live, asm is not None)
    if asm is not None and any(f.name == "fragmentation" for f in findings):
        from finetune_doctor.probes.confirm import confirm_fragmentation

        findings = confirm_fragmentation(asm, findings, opts)   # replays the crashed config (probes/replayed.py)
    if plot:
        draw(tl, plot, title=_plot_title(facts, ev), inputs=[f.read.path for f in ev.files] + [cfg_path or ""])
        notes.append(f"plot written to {plot}")
    report = _report(ev, tl, asm, hw, cfg_path, findings, notes)
    if launch and Path(launch).is_file():   # read for its settings (_read_launch): the inputs say so (trial 17)
        report = replace(report, inputs={**report.inputs, "launch": launch})
    if asm is None and hw is not None and hw.source == hw_facts.ENV_CARD_ONLY:
        # the card from an environment report that does not count the cards (facts/hw.py: one assumed)
        report = replace(report, assumptions=report.assumptions + (Assumption(
            name="gpu-count", value=hw.num_gpus, source="the environment report names the card but not how many "
            "there were; one is assumed", alternatives=("several GPUs on the node",),
            resolve_with="--gpu NxTYPE (and --nnodes)", moves_verdict=False),))
    return report


def _pasted_versions(ev: Any) -> dict[str, tuple[str, str]]:
    """{package: (version, where)} of the environment blocks pasted in the files read (a report's
    ``llamafactory-cli env``, ``pip list`` or collect_env block: readers/runlogs/logs.py, read by the lines
    ``--env`` reads); the first file that gives a package wins, and ``--env`` and the version flags win over both."""
    found: dict[str, tuple[str, str]] = {}
    for f in ev.files:
        for pkg, (version, line) in f.env_versions.items():
            found.setdefault(pkg, (str(version), f"{f.read.path}:{line}"))
    return found


def _log_as_env(opts: Options, ev: Any) -> Options:
    """`opts` with ``env_file`` set to the first file read as a log that holds an environment block (its
    `FileEvidence.env_versions`: LLaMA-Factory's issue template puts ``llamafactory-cli env`` above the
    traceback), when no ``--env`` was given: the same file read by the one reader of ``--env`` (readers/config/
    stack.py `read_env_file`), so the config is judged for the release that ran and its GPU type counts (trial 14:
    a log stating ``llamafactory version: 0.9.2.dev0`` was judged as if no version were known). A block whose
    versions that reader refuses is left out, as a paste is not an input the user named."""
    if opts.env_file:
        return opts
    from dataclasses import replace as _replace

    from finetune_doctor.errors import InputError as _InputError

    for f in ev.files:
        if f.env_versions:
            try:
                read_env_file(f.read.path)
            except _InputError:
                continue
            return _replace(opts, env_file=f.read.path)
    return opts


def _given_versions(opts: Options) -> dict[str, tuple[str, str]]:
    """{package: (version, where)} the user gave for the training machine: ``--env FILE`` (``llamafactory-cli
    env`` or ``pip list``), then ``--torch`` / ``--transformers`` over it (facts/config.py ``_stack``'s order)."""
    found: dict[str, tuple[str, str]] = {}
    if opts.env_file:
        from finetune_doctor.facts.config import read_env_file

        env = read_env_file(opts.env_file)
        found.update({k: (str(v), opts.env_file) for k, v in env.versions.items() if v})
    for key, flag in (("torch", opts.torch_version), ("transformers", opts.transformers_version),
                      ("llamafactory", opts.lf_version)):
        if flag:
            found[key] = (flag, f"--{key}")
    return found


def _read_launch(evf: dict[str, Any], launch: str | None, notes: list[str], ev: Evidence) -> None:
    """Say in the notes what the launch file (--launch, or the run folder's cmdline.txt) sets of the rendezvous
    (analyzers/postmortem/rendezvous.py `launch_settings`), else what a launch line pasted in a log sets
    (readers/runlogs/launchlines.py, trial 18: LlamaFactory#5864), and add it to a rendezvous failure's cause
    (trial 17, LlamaFactory#3715: the file held the wrong MASTER_ADDR and was read for nothing else). A multi-node
    launch naming the example's master address is noted whatever the failure (`placeholder_master`)."""
    from finetune_doctor.analyzers.postmortem.rendezvous import (launch_note, launch_settings, placeholder_master,
                                                                 with_launch)
    from finetune_doctor.readers.runlogs.launchlines import launch_lines
    from finetune_doctor.readers.textfile import read_text

    if launch and Path(launch).is_file():
        settings = launch_settings(read_text(launch, "launch command"))
        notes.append(launch_note(launch, settings))
    else:
        pasted = next(((f.read.path, lines[0]) for f in ev.files if f.text
                       for lines in [launch_lines(f.text)] if lines), None)
        if pasted is None:
            return
        settings = launch_settings(pasted[1])
        if not settings:
            return
        notes.append(launch_note(f"the launch line pasted in {pasted[0]}", settings))
    with_launch(evf.get("crash"), settings)
    flag = placeholder_master(settings)
    if flag and flag not in str((evf.get("crash") or {}).get("cause_text")):
        notes.append(flag)
    evf["launch_nodes"] = int(settings["NNODES"]) if settings.get("NNODES", "").isdigit() else None


def _launched_under_nohup(evf: dict[str, Any], launch: str | None) -> None:
    """Mark ``ev.killed.nohup`` when the launcher was signalled from outside and the launch line (`launch`: the
    --launch file or the run folder's cmdline.txt) runs it under ``nohup``: nohup only sets SIGHUP to ignored
    before it execs, and torchelastic's PContext.start then installs its own handler for SIGHUP
    (TORCHELASTIC_SIGNALS_TO_HANDLE, default SIGTERM,SIGINT,SIGHUP,SIGQUIT; torch/distributed/elastic/
    multiprocessing/api.py), so closing the session still stops the run (LlamaFactory issue 9695)."""
    k = evf.get("killed")
    if not k or not k.get("outside") or not launch or not Path(launch).is_file():
        return
    from finetune_doctor.readers.textfile import read_text

    k["nohup"] = re.search(r"(?:^|[\s;&|(])nohup\s", read_text(launch, "launch command")) is not None


DS_REFUSED = "existing deepspeed config"
"""What transformers' HfTrainerDeepSpeedConfig raises for a path that is not a file ("Expected a string path to an
existing deepspeed config, or a dictionary, or a base64 encoded string. Received: ...", integrations/deepspeed.py)."""


def _launched_past_deepspeed(facts: dict[str, Any], evf: dict[str, Any], override: bool) -> None:
    """A DeepSpeed file the config names that is not here, in a run whose logs show training steps: transformers
    opens that file while parsing the arguments (integrations/deepspeed.py, HfTrainerDeepSpeedConfig), before any
    step, so the training machine had it. The launch-time error (deepspeed-file-missing) would contradict the
    logs; the absence becomes what it is, a machine-dependent fact not checked here (not-checked-here, info).
    Trial 7 c10 (LLaMA-Factory #7755) headlined the missing file above the run's real causes. Without steps it is
    the same info, as `doctor check` has it, unless the logs show transformers refusing the path (`DS_REFUSED`):
    trial 3 (LLaMA-Factory #8665) got the error for a run that was tokenising its data."""
    lint = facts.get("lint") or {}
    missing = lint.get("ds_missing")
    crash = evf.get("crash") or {}
    if not missing or DS_REFUSED in str(crash.get("msg") or crash.get("text") or ""):
        return   # the logs show transformers stopping on it: deepspeed-file-missing, an error
    why = past_start_up(evf)
    lint.pop("ds_missing")
    last = (evf.get("steps") or {}).get("last")
    if why == "the logs show training steps":
        why = "the logs show the run trained" + (f" (to step {last})" if last is not None else "")
    # without either, as `doctor check` judges it (the not-checked-here rule): absent here, perhaps not there
    said = (f"{why}, so the training machine had it" if why is not None
            else "the logs do not show the run stopping on it, so it may be on the training machine")
    lint.setdefault("keys", []).append({
        "key": "deepspeed", "kind": "not_here", "suggestion": None, "replacement": None, "fix": None,
        "fix_value": None, "condition": "not on this machine", "line": None, "override": override,
        "message": f"{missing.get('message')}; {said}"})


def own_output_notes(report: Report) -> list[str]:
    """The report's notes about files skipped as this tool's own output (for stderr)."""
    return [n for n in report.notes if n.startswith(OWN_OUTPUT_NOTE)]


def _extra_of(r: Any) -> str | None:
    for p in r.problems:
        m = re.search(r"needs the '(\w+)' extra", p)
        if m:
            return m.group(1)
    return None


def _plot_title(facts: dict[str, Any], ev: Evidence) -> str:
    model = (facts.get("cfg") or {}).get("model_name_or_path") or ((facts.get("ev") or {}).get("model") or {}).get(
        "name")
    where = ev.run_dir or next((f.read.path for f in ev.files), "")
    return f"{model or 'model unknown'} — {where}"


def _report(ev: Evidence, tl: Any, asm: Assembly | None, hw: Hardware | None, cfg_path: str | None,
            findings: list[Finding], notes: list[str]) -> Report:
    sections = {"postmortem": section_data(tl), "read": read_data(ev)}
    inputs = {"config": cfg_path, "deepspeed": None, "run_dir": ev.run_dir}
    run_d = None
    memory = None
    if asm is not None:
        run_d = asm.run_summary()
        memory = asm.memory
        oom = any(getattr(e, "kind", None) == "oom" for e in tl.events)
        if memory is not None and not oom and not (hw is not None and hw.capacity_gib):
            # nothing to compare it with and no OOM to explain: the table would only distract from the cause
            memory = None
            notes.append("memory estimate left out (no GPU known, no OOM in the logs): `doctor estimate` shows it")
        if asm.ds is not None and getattr(asm.ds, "path", None):
            inputs["deepspeed"] = str(asm.ds.path)
    if hw is not None and hw.source == "none":
        hw = None
    return Report(command="postmortem", inputs=inputs, findings=tuple(findings), run=run_d, hardware=hw,
                  memory=memory, timeline=tl.events, sections=sections, notes=tuple(notes),
                  assumptions=_assumptions(tl.facts, findings))


def _assumptions(f: dict[str, Any], findings: list[Finding]) -> tuple[Assumption, ...]:
    """What a finding used that the inputs did not say: the fine-tuning method behind the learning-rate
    judgement when neither a config nor the log's trainable share tells it (analyzers/postmortem/causes.py); the
    memory an "out of memory" said in words names when they do not say GPU (trial 14)."""
    out = []
    lh = f.get("lr_high") or {}
    if lh and not lh.get("method_known") and any(x.name == "learning-rate-too-high-confirmed" for x in findings):
        out.append(Assumption(
            name="finetuning-method", value="lora", source="no config and no trainable share in the logs: LoRA's "
            "threshold (5e-3), the higher one, so that a full fine-tune is not blamed on a rate that is usual for it",
            alternatives=("full", "freeze"), resolve_with="--config the run's YAML (finetuning_type)",
            moves_verdict=bool(lh.get("lr") is not None and lh["lr"] < LR_HIGH_FULL)))
    sd = f.get("said") or {}
    if sd.get("symptom") == "oom" and sd.get("memory") != "gpu" and any(x.name == "cuda-oom" for x in findings):
        out.append(Assumption(
            name="oom-memory", value="GPU memory", source=f"the words (\"{sd.get('words')}\") say out of memory "
            "without naming the GPU's; the symptom rule reads them as CUDA's", alternatives=("host RAM",),
            resolve_with="the error's full text (CUDA out of memory ... Tried to allocate) or `dmesg -T | grep -i "
            "kill` on the node", moves_verdict=True))
    gs = f.get("grad_spike") or {}
    if gs.get("clipped_unfelt") and gs.get("max_grad_norm_source") != "config":
        out.append(Assumption(
            name="max-grad-norm", value=gs.get("max_grad_norm"), source="no config: HF's and LLaMA-Factory's "
            "default max_grad_norm (transformers training_args.py)", alternatives=(0.0,),
            resolve_with="--config the run's YAML (max_grad_norm)", moves_verdict=True))
    return tuple(out)


# -- sections -------------------------------------------------------------------------------------------------------

def read_data(ev: Evidence) -> dict[str, Any]:
    """The ``read`` section: what each file gave and what could not be read."""
    rows = []
    for r in ev.reads():
        status = "read" if r.complete and not r.problems else ("skipped" if r.bytes_read == 0 and not r.items
                                                                 else "partial")
        rows.append({"path": r.path, "kind": r.kind, "status": status, "size": r.size, "bytes_read": r.bytes_read,
                     "lines": r.lines or None, "records": r.records or None, "items": r.items,
                     "problems": list(r.problems), "note": r.note})
    return {"run_dir": ev.run_dir, "files": rows,
            "duplicates": [{"path": p, "same_as": q} for p, q in ev.duplicates],
            "counts": {s: sum(1 for x in rows if x["status"] == s) for s in ("read", "partial", "skipped")}}


def _nf(v: float) -> Any:
    """JSON-safe value: non-finite floats as the strings 'nan', 'inf', '-inf'."""
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v


def downsample(steps: Any, values: Any, n: int = SPARK_POINTS) -> tuple[list[int], list[Any]]:
    """At most `n` buckets over the points: each bucket keeps its extreme (largest distance from the overall
    median) and any non-finite value, so spikes and NaN survive the reduction."""
    m = len(values)
    if m <= n:
        return list(steps), [_nf(v) for v in values]
    import statistics

    fin = [v for v in values if v == v and abs(v) != float("inf")]
    med = statistics.median(fin) if fin else 0.0
    out_s, out_v = [], []
    for b in range(n):
        lo, hi = b * m // n, (b + 1) * m // n
        best = None
        for i in range(lo, hi):
            v = values[i]
            if not (v == v and abs(v) != float("inf")):
                best = i
                break
            if best is None or abs(v - med) > abs(values[best] - med):
                best = i
        assert best is not None
        out_s.append(steps[best])
        out_v.append(_nf(values[best]))
    return out_s, out_v


def _ranks_section(rk: dict[str, Any] | None) -> dict[str, Any] | None:
    if not rk:
        return None
    return {k: rk.get(k) for k in ("count", "nodes", "first_failed", "waiting", "waiting_count", "stragglers",
                                   "desync", "failed_count")}


def section_data(tl: Any) -> dict[str, Any]:
    """The ``postmortem`` section: curves reduced for sparklines, event marks, and the run's outline."""
    f = tl.facts
    curves = {}
    for name in ("loss", "grad_norm", "learning_rate", "loss_scale"):
        c = tl.curves.get(name)
        if c is None or not len(c):
            continue
        s, v = downsample(c.steps, c.values)
        fin = [x for x in c.values if x == x and abs(x) != float("inf")]
        curves[name] = {"steps": s, "values": v, "points": len(c), "basis": c.basis,
                        "min": min(fin) if fin else None, "max": max(fin) if fin else None,
                        "last": _nf(c.values[-1]), "nonfinite": len(c) - len(fin)}
    marks = [{"step": e.step, "kind": e.kind} for e in tl.events if e.step is not None]
    gpus = None
    if f.get("gpus"):
        gpus = [{"index": c["index"], "name": c["name"], "node": c.get("node"), "peak_gib": round(c["peak_gib"], 2),
                 "total_gib": None if c["total_gib"] is None else round(c["total_gib"], 2), "samples": c["samples"]}
                for c in f["gpus"]["cards"]]
    return {"steps": f.get("steps"), "completed": bool(f.get("completed")), "gpus": gpus,
            # DeepSpeed's minimum-loss-scale abort is an exception that ends the run, like any other crash
            "crashed": bool(f.get("crash") or f.get("oom") or f.get("nccl") or f.get("killed")
                            or (f.get("scale") or {}).get("trajectory") == "abort"),
            # a launcher signalled from outside (rule stopped-from-outside): the training code did not fail
            "stopped_outside": bool((f.get("killed") or {}).get("outside") and not f.get("crash")),
            "curves": curves, "marks": marks, "events": len(tl.events), "stack": f.get("stack"),
            "ranks": _ranks_section(f.get("ranks")),
            "restarts": len(f.get("restarts") or [])}


__all__ = ["run", "collect", "discover", "read_file", "section_data", "read_data", "downsample", "launch_command"]
