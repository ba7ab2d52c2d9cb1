"""`doctor check`: read a run, assemble its facts, judge them with the rule pack, confirm fixes, report.

The facts are assembled by facts/config.py (cfg, lint, hw, model, run, ds, data, mem) and judged by
engine/judge.py; ``--probe`` confirms each memory/numerics fix (probes/confirm.py) and ``--fix`` writes the safe
fixes (fixes/).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError, install_hint
from finetune_doctor.facts.config import MODES, assemble_config
from finetune_doctor.readers.config.cliflags import as_launch
from finetune_doctor.settings import Options
from finetune_doctor.types import Report


def run(config: str, overrides: tuple[str, ...], opts: Options, *, probe: bool = False, probe_mode: str = "simulate",
        scan_data: bool = True, fix: bool = False, unsafe_fixes: bool = False, validate_ds: bool = False) -> Report:
    """The full diagnosis of `config` before launch; returns the Report (the CLI decides the exit code).

    Raises InputError on bad input (exit 2).
    """
    # a run given as a command line (readers/config/cliflags.py) says how it is launched too
    opts = replace(opts, launch=as_launch(config, opts.launch))
    # an unknown model narrows the diagnosis (model-unresolved) instead of ending it
    try:
        asm = assemble_config(config, overrides, opts,
                              replace(MODES["check"], scan_data=scan_data, validate_ds=validate_ds))
    except InputError as err:
        # imported here: the log reader's patterns cost ~0.09 s of a check's start-up, and only a file that fails
        # as YAML needs them (benchmarks/results/honest_check_speed.md)
        from finetune_doctor.readers.runlogs.logs import looks_like_log

        if err.message.startswith("malformed YAML") and looks_like_log(config):
            raise InputError(f"{err.message} — this looks like a training log: `doctor postmortem {config}` "
                             "explains a finished or crashed run", file=err.file, line=err.line) from None
        from finetune_doctor.readers.config.stack import looks_like_env_report

        if err.message.startswith("malformed YAML") and looks_like_env_report(config):
            raise InputError(f"{err.message} — this is `llamafactory-cli env` output, not a config: pass it as "
                             f"--env {config} beside the training YAML", file=err.file, line=err.line) from None
        raise
    findings = judge("check", asm.facts, asm.sources, opts, texts={asm.doc.path: asm.doc.text}, live=asm.live())
    probed = None
    if probe:
        findings, probed = _confirm(asm, findings, opts, probe_mode)
    from finetune_doctor.facts.lint import dropped_note

    notes = list(asm.notes) + dropped_note(config, asm.facts)
    if fix or unsafe_fixes:
        return _fix_and_recheck(config, overrides, opts, findings, asm, unsafe=unsafe_fixes, probe=probe,
                                probe_mode=probe_mode, scan_data=scan_data, validate_ds=validate_ds)
    sections: dict[str, Any] = {"model": asm.model_section()} if asm.run is not None else {}
    sections["config_kind"] = asm.kind   # which LF command reads it (readers/config/lfkind.py)
    if asm.kind_section:
        sections[asm.kind_section["kind"]] = asm.kind_section   # export / chat estimate (facts/kinds.py)
    if asm.facts.get("data"):
        sections["data"] = asm.facts["data"]
    if probed:
        sections["probe"] = probed   # the configured run's simulation replayed (probes/confirm.py probe_check)
    return Report(command="check", inputs=asm.inputs(), findings=tuple(findings), run=asm.run_summary(),
                  hardware=asm.hw, memory=asm.memory, sections=sections, notes=tuple(notes),
                  assumptions=tuple(asm.assumptions))


def _fix_and_recheck(config: str, overrides: tuple[str, ...], opts: Options, findings: list, asm: Any, *,
                     unsafe: bool, **again: Any) -> Report:
    """``check --fix``: write the fixes to the config named on the command line only (a DeepSpeed JSON or any
    other file it names is reported, not edited, as ``lint --fix`` does), then check again and report the state
    after the fix, with ``fixes: {fixed, remaining}`` (ruff's behaviour)."""
    from dataclasses import replace

    from finetune_doctor.fixes import apply_fixes

    done = apply_fixes(findings, unsafe=unsafe, texts={asm.doc.path: asm.doc.text}, only=[config])
    after = run(config, overrides, opts, **again)
    return replace(after, notes=tuple(done.notes) + after.notes,
                   sections={**after.sections, "fixes": {"fixed": done.fixed, "remaining": len(after.findings)}})


def _confirm(asm: Any, findings: list, opts: Options, mode: str) -> tuple[list, dict | None]:
    """`--probe`: fill each memory/numerics fix's ``confirmed`` and replay the configured run's simulation (the
    probe section); without torch a note names the install line."""
    try:
        import torch  # noqa: F401
    except ImportError:
        asm.notes.append(f"probes unavailable: install the [all] extra ({install_hint('all')})")
        return findings, None
    from finetune_doctor.probes.confirm import probe_check

    from finetune_doctor.reporters.sections.probe import progress as probe_progress   # rich: only --probe needs it

    with probe_progress() as say:   # a status line on a terminal's stderr, nothing otherwise
        return probe_check(asm, findings, opts, mode=mode, progress=say)
