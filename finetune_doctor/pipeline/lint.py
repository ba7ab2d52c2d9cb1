"""`doctor lint`: static rules over LLaMA-Factory YAMLs and DeepSpeed JSONs, for pre-commit.

Files are recognised by content, not by name: a YAML mapping with LLaMA-Factory keys is a training config; a JSON
object with DeepSpeed keys is a DeepSpeed config; anything else is skipped silently (pre-commit passes every
YAML/JSON of a commit). A training YAML is linted together with the DeepSpeed JSON it references, so a JSON that
was linted that way is not linted again on its own.

This module and everything it imports stay free of torch, transformers and deepspeed (DESIGN.md); no NVML, no
dataset is read. Memory rules run only when the project configuration (or --gpu) names the GPUs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from finetune_doctor.engine.judge import judge
from finetune_doctor.facts.config import assemble_config, assemble_ds_alone
from finetune_doctor.fixes import apply_fixes, collect_edits
from finetune_doctor.fixes.edit import diff_edits
from finetune_doctor.readers.lfkind import v1_hits
from finetune_doctor.settings import Options
from finetune_doctor.types import Finding, Report

LF_MARKERS = {"model_name_or_path", "stage", "finetuning_type", "do_train", "template", "dataset", "cutoff_len",
              "lora_target", "per_device_train_batch_size", "output_dir", "adapter_name_or_path"}
DS_MARKERS = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "fp16", "bf16",
              "gradient_accumulation_steps", "zero_allow_untested_optimizer", "optimizer", "scheduler"}


def classify(path: str) -> str | None:
    """'lf' for a LLaMA-Factory config, 'ds' for a DeepSpeed JSON, None for anything else (skipped).

    A file is judged by its content after the one decoding every command uses (readers/textfile.py): a file that
    is an LLaMA-Factory or DeepSpeed config by its keys but is not UTF-8 raises the same InputError `doctor check`
    raises for it; a file that is neither is not ours to judge. Raises InputError for a path that is missing or not
    a regular file.
    """
    from finetune_doctor.readers.textfile import decode, read_bytes, sniff_text

    data = read_bytes(path)
    kind = _kind_of_text(sniff_text(data), Path(path).suffix.lower())
    if kind is not None:
        decode(data, path, "LLaMA-Factory YAML" if kind == "lf" else "DeepSpeed JSON")
    return kind


def _kind_of_text(text: str, suffix: str) -> str | None:
    if suffix == ".json":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            # a broken JSON that looks like DeepSpeed is reported by the DS reader; others are not ours
            return "ds" if any(f'"{k}"' in text for k in ("zero_optimization", "train_micro_batch_size_per_gpu")) else None
        if isinstance(data, dict):
            strong = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                      "zero_allow_untested_optimizer", "gradient_clipping", "steps_per_print",
                      "wall_clock_breakdown", "zero_force_ds_cpu_optimizer"}
            precision = any(isinstance(data.get(k), dict) and ({"enabled", "loss_scale"} & set(data[k]))
                            for k in ("fp16", "bf16", "amp"))
            if set(data) & strong or precision:
                return "ds"
            if len(set(data) & LF_MARKERS) >= 2:
                return "lf"
        return None
    if suffix in (".yaml", ".yml"):
        keys = {line.split(":", 1)[0].strip().lstrip("\ufeff") for line in text.splitlines()
                if line and not line[0].isspace() and ":" in line and not line.lstrip().startswith("#")}
        if "model_name_or_path" in keys or len(keys & LF_MARKERS) >= 2 or len(v1_hits(keys)) >= 2:
            return "lf"   # a v0 config, or a LLaMA-Factory v1 one (USE_V1=1): readers/lfkind.py tells which
        return None
    return None


def lint_ds_alone(path: str, opts: Options) -> list[Finding]:
    """The lint findings of a DeepSpeed JSON given on its own."""
    asm = assemble_ds_alone(path)
    return judge("lint", asm.facts, asm.sources, opts)


def run(files: list[str], opts: Options, *, fix: bool = False, unsafe_fixes: bool = False) -> Report:
    """Lint `files`; with `fix`, apply safe (and with `unsafe_fixes`, unsafe) fixes. `diff` shows them instead."""
    findings: list[Finding] = []
    notes: list[str] = []
    linted_ds: set[str] = set()
    kinds = [(f, classify(f)) for f in files]
    skipped = [f for f, k in kinds if k is None]
    ds_inputs: list[str] = []
    recognised: dict[str, str] = {}
    assumed: dict[str, Any] = {}
    for f, kind in kinds:
        if kind != "lf":
            continue
        file_opts = _per_file(opts, f)
        asm = assemble_config(f, (), file_opts, static=True)
        recognised[f] = asm.kind
        for a in asm.assumptions:
            assumed.setdefault(a.name, a)
        findings.extend(judge("lint", asm.facts, asm.sources, file_opts, texts={asm.doc.path: asm.doc.text},
                              live=asm.live()))
        if asm.ds is not None and getattr(asm.ds, "path", None) and not asm.ds_stock:
            linted_ds.add(str(Path(asm.ds.path).resolve()))
            ds_inputs.append(str(asm.ds.path))
    for f, kind in kinds:
        if kind == "ds" and str(Path(f).resolve()) not in linted_ds:
            findings.extend(lint_ds_alone(f, _per_file(opts, f)))
    findings.sort(key=Finding.sort_key)
    if fix or unsafe_fixes:
        # only the files named on the command line are written: a pre-commit hook passes the staged files, and an
        # edit to an unstaged DeepSpeed JSON that a YAML names would be left behind as an unstaged change
        done = apply_fixes(findings, unsafe=unsafe_fixes, only=list(files))
        # re-lint: report only what is left after the fixes (ruff's behaviour), with what was written
        after = run(files, opts)
        return replace(after, notes=done.notes + after.notes,
                       sections={**after.sections, "fixes": {"fixed": done.fixed,
                                                             "remaining": len(after.findings)}})
    sections: dict[str, Any] = {}
    if skipped:
        sections["skipped"] = skipped
    recognised.update({f: "deepspeed" for f, k in kinds if k == "ds"})
    recognised.update({f: k for f in skipped if (k := _other_kind(f))})
    if recognised:
        sections["kinds"] = recognised   # which LF command (or flag) reads each file (readers/lfkind.py)
    ds_inputs += [f for f, k in kinds if k == "ds" and str(Path(f).resolve()) not in linted_ds]
    lf_files = [f for f, k in kinds if k == "lf"]
    return Report(command="lint", inputs={"config": lf_files[0] if len(lf_files) == 1 else None,
                                          "deepspeed": ds_inputs[0] if len(ds_inputs) == 1 else None,
                                          "run_dir": None, "files": list(files)},
                  findings=tuple(findings), notes=tuple(notes), sections=sections,
                  assumptions=tuple(assumed.values()))


def _other_kind(path: str) -> str | None:
    """The kind of a file that is not linted (an accelerate config, a dataset registry, ...), None when it is
    none LF knows of: read leniently, as it is only named in the report."""
    from finetune_doctor.readers.lfkind import kind_of
    from finetune_doctor.readers.textfile import read_text

    try:
        text = read_text(path, "file")
        if path.lower().endswith(".json"):
            values = json.loads(text)
        else:
            from ruamel.yaml import YAML

            values = YAML(typ="safe", pure=True).load(text)
    except Exception:   # not ours to judge: an unreadable extra file is only left unnamed
        return None
    return kind_of(values, suffix=Path(path).suffix.lower())


def diff(files: list[str], opts: Options, *, unsafe_fixes: bool = False) -> tuple[str, list[str], int]:
    """What ``--fix`` (with `unsafe_fixes`, ``--unsafe-fixes``) would change, as one unified diff, written nowhere.

    Returns (diff text, notes for stderr, number of unsafe fixes left out). The diff is raw so that it can be piped
    to ``patch -p0`` or reviewed in CI (ruff's ``--diff``). Raises InputError on unreadable input, as `run`.
    """
    findings = list(run(files, opts).findings)
    per_file, notes = collect_edits(findings, unsafe_fixes)
    chunks = [d for path, edits in per_file.items() if Path(path).is_file() and (d := diff_edits(path, edits))]
    hidden = 0 if unsafe_fixes else sum(1 for f in findings if f.fix is not None and f.fix.edits
                                        and f.fix.safety != "safe")
    return "".join(chunks), notes, hidden


def _per_file(opts: Options, path: str) -> Options:
    """Project configuration applies per file (each file finds its own pyproject/.finetune-doctor.toml)."""
    if opts.paths and Path(opts.paths[0]).resolve().parent == Path(path).resolve().parent:
        return opts
    fresh = Options.from_cli(command=opts.command, paths=[path], gpu=opts.gpu if opts.gpu else None,
                             fmt=opts.format, output=opts.output,
                             select=",".join(opts.select) if opts.select else None,
                             ignore=",".join(opts.ignore) if opts.ignore else None, fail_on=opts.fail_on,
                             lf_version=opts.lf_version, env_file=opts.env_file)
    return replace(fresh, rules_dirs=tuple(dict.fromkeys(opts.rules_dirs + fresh.rules_dirs)))
