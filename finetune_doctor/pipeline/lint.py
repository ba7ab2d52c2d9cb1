"""`doctor lint`: static rules over LLaMA-Factory YAMLs and DeepSpeed JSONs, for pre-commit.

Files are recognised by content, not by name: a YAML mapping with LLaMA-Factory keys is a training config; a JSON
object with DeepSpeed keys is a DeepSpeed config, and so is a YAML whose keys are all LLaMA-Factory's (a fragment
such as ``streaming: true`` with ``val_size: 0.1``); anything else is skipped, and the CLI says why on stderr
(pre-commit passes every YAML/JSON of a commit). A training YAML is linted together with the DeepSpeed JSON it references, so a JSON that
was linted that way is not linted again on its own.

This module and everything it imports stay free of torch, transformers and deepspeed (DESIGN.md); no NVML, no
dataset is read. Memory rules run only when the project configuration (or --gpu) names the GPUs.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers.config.lfkind import kind_of, kind_of_file, v1_hits
from finetune_doctor.settings import Options
from finetune_doctor.types import Finding, Report

# The judge, the fact assembly and the fixers (most of the project's modules) are imported where a file needs
# them: a commit whose YAMLs are none of LLaMA-Factory's (workflows, accelerate configs) is answered without them.

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
    from finetune_doctor.readers.textfile import decode, provided, read_bytes, sniff_text

    data = read_bytes(path)
    suffix = Path(path).suffix.lower()
    if provided(path) is not None and suffix not in (".json", ".yaml", ".yml"):
        # standard input without a telling --stdin-filename: a JSON object starts with "{", anything else is YAML
        suffix = ".json" if sniff_text(data).lstrip().startswith("{") else ".yaml"
    kind = _kind_of_text(sniff_text(data), suffix)
    if kind is not None:
        decode(data, path, "LLaMA-Factory YAML" if kind == "lf" else "DeepSpeed JSON")
    return kind


_DS_WORD = re.compile(r"\b(?:zero_optimization|train_micro_batch_size_per_gpu|train_batch_size)\b")


def _kind_of_text(text: str, suffix: str) -> str | None:
    if suffix == ".json":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            # a broken JSON that looks like DeepSpeed is reported by the DS reader (which `check` would call
            # malformed too): quoted keys, and also hjson-style or YAML text saved as .json (issue 27)
            return "ds" if _DS_WORD.search(text) else None
        if isinstance(data, dict):
            strong = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                      "zero_allow_untested_optimizer", "gradient_clipping", "steps_per_print",
                      "wall_clock_breakdown", "zero_force_ds_cpu_optimizer"}
            precision = any(isinstance(data.get(k), dict) and ({"enabled", "loss_scale"} & set(data[k]))
                            for k in ("fp16", "bf16", "amp"))
            if set(data) & strong or precision:
                return "ds"
            if len(set(data) & LF_MARKERS) >= 2 and kind_of(data, suffix=".json") != "hf-training-args":
                return "lf"
        return None
    if suffix in (".yaml", ".yml"):
        keys = _top_keys(text)
        if _names_lf(keys) or _only_lf_keys(keys) \
                or len(v1_hits(keys)) >= 2:
            return "lf"   # a v0 config, or a LLaMA-Factory v1 one (USE_V1=1): readers/config/lfkind.py tells which
        # a YAML that does not parse is not "someone else's file": the config reader reports it at its line (exit 2)
        # instead of a skip whose reason would guess at keys it could not read
        return "lf" if _malformed_yaml(text) else None
    return None


def _top_keys(text: str) -> set[str]:
    """The top-level keys of a YAML text as its lines show them (no parse): unindented ``key:`` lines, comments out."""
    return {line.split(":", 1)[0].strip().lstrip("\ufeff") for line in text.splitlines()
            if line and not line[0].isspace() and ":" in line and not line.lstrip().startswith("#")}


def _names_lf(keys: set[str]) -> bool:
    """A YAML whose top-level `keys` make it a LLaMA-Factory config at first sight: ``model_name_or_path`` or two of
    `LF_MARKERS`."""
    return "model_name_or_path" in keys or len(keys & LF_MARKERS) >= 2


def _malformed_yaml(text: str) -> bool:
    """Whether PyYAML (its C loader where built) refuses `text`; multi-document files count as parsed."""
    import yaml

    try:
        for _ in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            pass
    except yaml.YAMLError:
        return True
    return False
    return None


MACHINE_DEPENDENT = ("dataset-not-defined", "deepspeed-file-missing")
"""Lint rules whose verdict depends on files of the machine that runs the lint (the dataset_info.json under
dataset_dir, the DeepSpeed JSON's path): on a laptop or a CI runner they describe that machine, not the launch."""


def lint_order(f: Finding) -> tuple:
    """Severity first; within it, what LLaMA-Factory rejects at launch on any machine before the findings that
    depend on this machine's files (MACHINE_DEPENDENT); then file, line, code."""
    sev, *rest = f.sort_key()
    return (sev, f.name in MACHINE_DEPENDENT, *rest)


def _only_lf_keys(keys: set[str]) -> bool:
    """A YAML of two or more top-level keys, every one a key of LLaMA-Factory's argument schema
    (catalog/lf_keys.json) and one of them LLaMA-Factory's own (not only a transformers TrainingArguments key
    such as ``seed``): a fragment of a training config (``streaming: true`` with ``val_size: 0.1``), which
    LLaMA-Factory would read and reject as the rules do."""
    if len(keys) < 2:
        return False
    from finetune_doctor.readers.config.keyschema import load_schema

    schema = load_schema()["keys"]
    return all(k in schema for k in keys) and any(schema[k].get("origin") == "llamafactory" for k in keys)


def skip_reason(path: str) -> str:
    """Why `path` is not linted, in one line (the CLI prints it on stderr: a skip is never silent)."""
    from finetune_doctor.readers.textfile import provided, read_bytes, sniff_text

    suffix = Path(path).suffix.lower()
    text = sniff_text(read_bytes(path))
    if not text.strip():
        return "empty file"
    if provided(path) is not None and suffix not in (".json", ".yaml", ".yml"):
        suffix = ".json" if text.lstrip().startswith("{") else ".yaml"     # as `classify` reads standard input
    if suffix not in (".json", ".yaml", ".yml"):
        return f"not a YAML or JSON file by its suffix ({suffix or 'none'})"
    if suffix == ".json":
        return "a JSON without DeepSpeed keys (zero_optimization, train_micro_batch_size_per_gpu, fp16/bf16 ...)"
    return ("a YAML with neither model_name_or_path nor two LLaMA-Factory keys, and with keys LLaMA-Factory does "
            "not know: not a training config")


def lint_ds_alone(path: str, opts: Options) -> list[Finding]:
    """The lint findings of a DeepSpeed JSON given on its own."""
    from finetune_doctor.engine.judge import judge
    from finetune_doctor.facts.config import assemble_ds_alone

    asm = assemble_ds_alone(path)
    return judge("lint", asm.facts, asm.sources, opts)


def lint_accelerate_alone(path: str, opts: Options) -> list[Finding]:
    """The lint rules over an accelerate config on its own: an empty ``lint`` with ``accelerate``
    (facts/accel.py), the file as the ``config`` and ``accelerate`` source. Raises InputError as
    `load_accelerate_config`."""
    from finetune_doctor.engine.judge import judge
    from finetune_doctor.facts import lint as lint_facts
    from finetune_doctor.facts import skeleton
    from finetune_doctor.facts.accel import accelerate_fact
    from finetune_doctor.readers.config.accelerate import load_accelerate_config
    from finetune_doctor.types import SourceDoc

    acc = load_accelerate_config(path)
    facts = skeleton(cfg={}, lint={**lint_facts.assemble(None), "accelerate": accelerate_fact(acc)})
    sources = {role: SourceDoc(role, str(path), dict(acc.positions)) for role in ("config", "accelerate")}
    return judge("lint", facts, sources, opts)


def run(files: list[str], opts: Options, *, fix: bool = False, unsafe_fixes: bool = False, jobs: int = 1) -> Report:
    """Lint `files`; with `fix`, apply safe (and with `unsafe_fixes`, unsafe) fixes. `diff` shows them instead.

    `jobs` > 1 lets the files be classified and the LLaMA-Factory configs linted by that many processes forked
    after the first config (see `_in_workers`); the report is the same as with one."""
    findings: list[Finding] = []
    notes: list[str] = []
    linted_ds: set[str] = set()
    from finetune_doctor.facts.archmemo import arch_memo

    with arch_memo():   # each distinct model resolved once in this lint (facts/archmemo.py)
        kinds, results, alone = _classify_and_lint(files, opts, jobs)
    skipped = [f for f, k in kinds if k is None]
    # what each skipped file is to LF (kind_of_file reads and parses it): asked once, or given by the workers
    named: dict[str, str | None] = {f: k for f, (k, _found) in (alone or {}).items()}

    def named_kind(f: str) -> str | None:
        if f not in named:
            named[f] = kind_of_file(f)
        return named[f]

    ds_inputs: list[str] = []
    recognised: dict[str, str] = {}
    assumed: dict[tuple[str, str], Any] = {}
    made_for: dict[tuple[str, str], list[str]] = {}
    lf_paths = [f for f, kind in kinds if kind == "lf"]
    for f, (kind, assumptions, file_notes, file_findings, ds_path) in zip(lf_paths, results):
        recognised[f] = kind
        for a in assumptions:   # one entry per assumption and value over all files (facts/assume.py)
            assumed.setdefault((a.name, str(a.value)), a)
            made_for.setdefault((a.name, str(a.value)), []).append(f)
        notes.extend(file_notes)
        findings.extend(file_findings)
        if ds_path is not None:
            linted_ds.add(str(Path(ds_path).resolve()))
            ds_inputs.append(ds_path)
    for f, kind in kinds:
        if kind == "ds" and str(Path(f).resolve()) not in linted_ds:
            findings.extend(lint_ds_alone(f, _per_file(opts, f)))
    for f in [f for f in skipped if named_kind(f) == "accelerate"]:
        # an accelerate config is linted for what it decides itself (trial 3: a pre-commit hook passed an FSDP
        # config with "No findings" that LlamaFactory#8279 died of)
        found = alone[f][1] if alone is not None else _accelerate_alone(f, opts)
        if found is None:
            continue   # not one accelerate reads (no distributed_type): named as skipped, as before
        findings.extend(found)
        skipped.remove(f)
        recognised[f] = "accelerate"
        from finetune_doctor.readers.config.lfkind import NOT_LF

        notes.append(f"{f}: {NOT_LF['accelerate']}; its own FSDP/launch settings were linted")
    findings.sort(key=lint_order)
    if fix or unsafe_fixes:
        from finetune_doctor.fixes import apply_fixes

        _refuse_stdin(files)
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
    recognised.update({f: k for f in skipped if (k := named_kind(f))})
    if skipped:
        from finetune_doctor.readers.config.lfkind import NOT_LF

        # a file of a kind LF reads elsewhere (an accelerate config, a dataset registry) says which flag takes it,
        # as the Kinds section names it, instead of "not a training config"
        sections["skip_reasons"] = {f: (f"{NOT_LF[recognised[f]]}" if recognised.get(f) in NOT_LF
                                        else skip_reason(f)) for f in skipped}
    if recognised:
        sections["kinds"] = recognised   # which LF command (or flag) reads each file (readers/config/lfkind.py)
    ds_inputs += [f for f, k in kinds if k == "ds" and str(Path(f).resolve()) not in linted_ds]
    lf_files = [f for f, k in kinds if k == "lf"]
    return Report(command="lint", inputs={"config": lf_files[0] if len(lf_files) == 1 else None,
                                          "deepspeed": ds_inputs[0] if len(ds_inputs) == 1 else None,
                                          "run_dir": None, "files": list(files)},
                  findings=tuple(findings), notes=tuple(notes), sections=sections,
                  assumptions=_with_files(assumed, made_for, len(lf_paths)))


def _with_files(assumed: dict[tuple[str, str], Any], made_for: dict[tuple[str, str], list[str]],
                n_configs: int) -> tuple[Any, ...]:
    """The assumptions of a lint over `n_configs` configs, one per name and value, each naming the files it was made
    for when there are several (trial 5: `doctor lint DIR` listed two lf-version lines and a bare model without
    saying whose); as they are for one config."""
    if n_configs <= 1:
        return tuple(assumed.values())
    return tuple(replace(a, files=tuple(dict.fromkeys(made_for[key]))) for key, a in assumed.items())


ConfigResult = tuple[str, list[Any], list[str], list[Finding], "str | None"]
"""What linting one LLaMA-Factory config gives `run`: its kind, the assumptions that bear on lint, notes,
findings, and the DeepSpeed JSON linted with it (None when none or LF's stock one)."""

PARALLEL_MIN = 8
"""Fewest files a forked worker is given: forking and sending the results back cost ~2-5 ms a worker, linting
one config ~3 ms of CPU after start-up (benchmarks/results/lint.md), so a smaller share would not pay."""


def _lint_config(f: str, opts: Options) -> ConfigResult:
    from finetune_doctor.engine.judge import judge
    from finetune_doctor.facts.assumebase import MEMORY_ONLY
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.facts.lint import dropped_note

    file_opts = _per_file(opts, f)
    asm = assemble_config(f, (), file_opts, "lint")
    # without a memory estimate, the memory's own assumptions bear on no finding of lint
    assumptions = [a for a in asm.assumptions if asm.memory is not None or a.name not in MEMORY_ONLY]
    found = judge("lint", asm.facts, asm.sources, file_opts, texts={asm.doc.path: asm.doc.text}, live=asm.live())
    ds_path = None
    if asm.ds is not None and getattr(asm.ds, "path", None) and not asm.ds_stock:
        ds_path = str(asm.ds.path)
    return asm.kind, assumptions, list(dropped_note(f, asm.facts)), list(found), ds_path


def _classify_and_lint(files: list[str], opts: Options, jobs: int) -> tuple[list[tuple[str, str | None]],
                                                                             list[ConfigResult], Alone | None]:
    """The kind of every file (`classify`, in order), `_lint_config` of each LLaMA-Factory config among them, in
    order, and what the workers found of the skipped files (`Alone`; None from one process, where `run` asks
    itself, after the configs and the DeepSpeed JSONs). One process classifies every file, then lints the
    configs; with `jobs` > 1 (and fork available) the files are shared among forked workers (`_in_workers`),
    which give the same answer. Raises what one process raises: the first file `classify` refuses, else the first
    config `_lint_config` refuses."""
    import os

    if min(jobs, (len(files) - 1) // PARALLEL_MIN) >= 2 and hasattr(os, "fork"):
        got = _in_workers(files, opts, jobs)
        if got is not None:
            return got
    kinds = [(f, classify(f)) for f in files]
    return kinds, [_lint_config(f, opts) for f, k in kinds if k == "lf"], None


Alone = dict[str, tuple["str | None", "list[Finding] | None"]]
"""For each skipped file, as the workers give it: `kind_of_file`'s answer and, for an accelerate config,
`_accelerate_alone`'s findings (None where accelerate would not read it)."""

FileResult = tuple["str | None", Any]
"""What a worker gives for one file: its kind (`classify`) and, for a LLaMA-Factory config, `_lint_config`'s
result; for a skipped file (kind None), its `Alone` entry; else None."""


def _accelerate_alone(f: str, opts: Options) -> list[Finding] | None:
    """`lint_accelerate_alone` of a skipped file, None when accelerate would not read it (InputError)."""
    try:
        return list(lint_accelerate_alone(f, _per_file(opts, f)))
    except InputError:
        return None


def _work(paths: list[str], opts: Options, known: dict[str, str | None] | None = None) -> list[FileResult]:
    """`classify` each path and lint the LLaMA-Factory configs among them, in order; a skipped file gets its
    `kind_of_file` and, for an accelerate config, its own lint (which `run` does after the configs in one
    process). `known`: kinds already found by `classify` (the parent's, inherited by a forked worker)."""
    out: list[FileResult] = []
    for f in paths:
        kind = known[f] if known is not None and f in known else classify(f)
        if kind == "lf":
            out.append((kind, _lint_config(f, opts)))
        elif kind is None:
            named = kind_of_file(f)
            out.append((kind, (named, _accelerate_alone(f, opts) if named == "accelerate" else None)))
        else:
            out.append((kind, None))
    return out


def _in_workers(files: list[str], opts: Options, jobs: int) -> tuple[list[tuple[str, str | None]],
                                                                     list[ConfigResult], Alone] | None:
    """`_classify_and_lint` by forked workers, or None when any file raised (the caller then does it all in one
    process, which raises what one process raises: classify's first refusal before any config's, each the first
    in command-line order).

    This process lints the first config that names itself one by its keys (`_plain_config`; else it classifies the
    files in order up to the first config), that config alone, which imports the judge and fills this process's
    caches (rule pack, key schema, model catalogue); the rest, the files before it included (unclassified: the
    workers classify them), goes into a queue of chunks of consecutive files (`_queue`: files of one folder share options and
    models), which `jobs` - 1 forked children and this process drain as each finishes a chunk (`_drain`); each
    child sends its results back pickled through a pipe. Classifying in the workers too keeps the serial part of a
    lint to start-up and that first config: the 95 examples of LLaMA-Factory spend ~25 ms of CPU classifying, which
    one process did before any worker started (issue #22). Chunks taken as workers finish, not fixed halves: the
    files' costs differ ~10x (an accelerate config ~1.5 ms of CPU, a v1 config whose finding imports the memory model
    ~12 ms more), and fixed halves left one worker 5-27 ms of CPU behind the other on those 95 examples."""
    known: dict[str, str | None] = {}
    try:
        first = _plain_config(files)
        if first is not None:
            known[files[first]] = classify(files[first])   # "lf": the keys that picked it make classify say so
        else:
            for i, f in enumerate(files):
                known[f] = classify(f)
                if known[f] == "lf":
                    first = i
                    break
        # no config at all: nothing to share, as before (every file is already classified)
        head = _work(files if first is None else [files[first]], opts, known)
    except Exception:
        return None
    # the files before the first config (LF's examples/ starts with six accelerate configs, ~1.5 ms of CPU each
    # once the judge is imported) are the workers' too, their classification included: only the first config's
    # lint is serial
    rest = [] if first is None else [i for i in range(len(files)) if i != first]
    jobs = min(jobs, len(rest) // PARALLEL_MIN)
    if jobs < 2:
        mine: dict[int, FileResult] | None = dict(zip(rest, _work([files[i] for i in rest], opts, known)))
        got: list[dict[int, FileResult] | None] = []
    else:
        queue = _queue(rest, jobs)
        children = [_fork_run(queue, files, opts, known) for _ in range(jobs - 1)]
        try:
            mine = _drain(queue, files, opts, known)
        except Exception:   # the one-process path raises it again, after whatever a child's run would raise first
            mine = None
        got = [_collect(child) for child in children]   # every child is waited for
        _close(queue[0])
    done: dict[int, FileResult] = {}
    for part in [*got, mine]:
        if part is None:
            return None
        done.update(part)
    if sorted(done) != rest:   # a chunk no worker took (a short read of the queue): one process does it all
        return None
    at = 0 if first is None else first
    pairs = [done[i] for i in rest]
    pairs[at:at] = head
    kinds = [(f, kind) for f, (kind, _r) in zip(files, pairs)]
    alone: Alone = {f: r for f, (kind, r) in zip(files, pairs) if kind is None}
    return kinds, [r for kind, r in pairs if kind == "lf"], alone


def _plain_config(files: list[str]) -> int | None:
    """The index of the first file that names itself a LLaMA-Factory config on its face: a .yaml/.yml file (not
    standard input) with a top-level ``model_name_or_path`` or two of `LF_MARKERS`, the keys `_kind_of_text` reads
    first, so that `classify` says "lf" of it; None when no file does. `_in_workers` lints that one alone before
    forking, and leaves the files before it to the workers: LLaMA-Factory's examples/ starts with six accelerate
    configs, which `classify` parses whole to tell a broken YAML (`_malformed_yaml`), ~1 ms of CPU each that one
    process spent before any worker started (issue #22). A file that cannot be read is passed over here;
    `classify` reports it where it is classified."""
    from finetune_doctor.readers.textfile import provided, read_bytes, sniff_text

    for i, f in enumerate(files):
        if Path(f).suffix.lower() not in (".yaml", ".yml") or provided(f) is not None:
            continue
        try:
            text = sniff_text(read_bytes(f))
        except (InputError, OSError):
            continue
        if _names_lf(_top_keys(text)):
            return i
    return None


Queue = tuple[int, list[list[int]]]
"""The read end of a pipe holding one 4-byte chunk number per chunk, and the chunks (indices into the files)."""


def _queue(rest: list[int], jobs: int) -> Queue:
    """The chunks of `rest`, consecutive indices, written as 4-byte chunk numbers into a pipe whose write end is
    closed (a reader at the end gets EOF). Chunks shrink as they go ("guided" scheduling, as OpenMP's): each is
    the files left divided by twice the workers, at least one, so a worker starts on a long run of one folder
    (its options and models resolved once per process) and the last small chunks even out the ends."""
    import os

    chunks: list[list[int]] = []
    at = 0
    while at < len(rest):
        size = max(1, (len(rest) - at) // (2 * jobs))
        chunks.append(rest[at:at + size])
        at += size
    read, write = os.pipe()
    try:   # a few dozen numbers even for thousands of files: far below a pipe's buffer, so this never blocks
        os.write(write, b"".join(k.to_bytes(4, "little") for k in range(len(chunks))))
    finally:
        os.close(write)
    return read, chunks


def _drain(queue: Queue, files: list[str], opts: Options, known: dict[str, str | None]) -> dict[int, FileResult]:
    """`_work` of each chunk this process takes from `queue` until it is empty, by file index. A read of a 4-byte
    number is whole on a pipe (Linux and the BSDs read a pipe under its lock); a short one stops this worker and
    `_in_workers` finds the chunk missing."""
    import os

    out: dict[int, FileResult] = {}
    fd, chunks = queue
    while len(got := os.read(fd, 4)) == 4:
        for i in chunks[int.from_bytes(got, "little")]:
            out[i] = _work([files[i]], opts, known)[0]
    return out


def _close(fd: int) -> None:
    import os

    os.close(fd)


def _fork_run(queue: Queue, files: list[str], opts: Options, known: dict[str, str | None]) -> tuple[int, int]:
    """Fork a child that takes chunks of `files` from `queue` and classifies and lints them (`_drain`), and writes
    ``pickle((True, results by file index))`` (or ``(False, None)`` on any error) to a pipe; returns (pid, read
    end)."""
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns into the caller, never runs the parent's exit handlers
        code = 0
        try:
            os.close(read)
            # imported here, not before the fork: the parent needs it only to read the results, after its own share
            import pickle

            try:
                payload = pickle.dumps((True, _drain(queue, files, opts, known)), protocol=5)
            except BaseException:
                payload, code = pickle.dumps((False, None)), 1
            with os.fdopen(write, "wb") as out:
                out.write(payload)
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _collect(child: tuple[int, int]) -> dict[int, FileResult] | None:
    """The results a forked child sent, or None when it failed or sent nothing readable."""
    import os
    import pickle

    pid, read = child
    with os.fdopen(read, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    try:
        ok, results = pickle.loads(data)
    except Exception:   # a child killed before it wrote (out of memory): lint its files here
        return None
    return results if ok else None


def default_jobs() -> int:
    """How many processes `doctor lint` lints configs with: ``FINETUNE_DOCTOR_LINT_JOBS`` when set (1 turns the
    workers off); else the CPUs this process may run on that the 1-minute load average leaves free, rounded up
    (at least 1, at most 8), as GNU make's ``--load-average`` holds back jobs: a worker on a core that other work
    already holds only adds the fork's cost (measured on a 2-core machine at load 5.5: 2 processes took 15 % more
    CPU and no less wall time than one, benchmarks/results/lint.md). The load counts this process's own chain
    (pre-commit, a script linting file after file keeps one process runnable: load ~1 on an idle machine), so
    one runnable process is taken as ours: free = CPUs + 1 - load."""
    import math
    import os

    given = os.environ.get("FINETUNE_DOCTOR_LINT_JOBS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        free = math.ceil(cpus + 1 - os.getloadavg()[0])
    except (AttributeError, OSError):   # no load average on this platform: every CPU counts as free
        free = cpus
    return max(1, min(cpus, free, 8))


def diff(files: list[str], opts: Options, *, unsafe_fixes: bool = False) -> tuple[str, list[str], int]:
    """What ``--fix`` (with `unsafe_fixes`, ``--unsafe-fixes``) would change, as one unified diff, written nowhere.

    Returns (diff text, notes for stderr, number of unsafe fixes left out). The diff is raw so that it can be piped
    to ``patch -p0`` or reviewed in CI (ruff's ``--diff``). Raises InputError on unreadable input, as `run`.
    """
    from finetune_doctor.fixes import collect_edits
    from finetune_doctor.fixes.edit import diff_edits   # the YAML/JSON editors: only --diff and --fix need them

    _refuse_stdin(files)
    findings = list(run(files, opts).findings)
    per_file, notes = collect_edits(findings, unsafe_fixes)
    chunks = [d for path, edits in per_file.items() if Path(path).is_file() and (d := diff_edits(path, edits))]
    hidden = 0 if unsafe_fixes else sum(1 for f in findings if f.fix is not None and f.fix.edits
                                        and f.fix.safety != "safe")
    return "".join(chunks), notes, hidden


def _refuse_stdin(files: list[str]) -> None:
    from finetune_doctor.readers.textfile import provided

    for f in files:
        if provided(f) is not None:
            raise InputError("--fix and --diff rewrite files: standard input has none to rewrite "
                             "(lint the file itself)", file=f)


def statistics(report: Report) -> list[dict[str, Any]]:
    """``--statistics``: one row per rule code, most frequent first (ruff's order), as
    ``{"code", "name", "count", "fixable"}`` where `fixable` counts the findings ``--fix`` would apply."""
    from finetune_doctor.fixes import fixable

    rows: dict[str, dict[str, Any]] = {}
    for f in report.findings:
        row = rows.setdefault(f.code, {"code": f.code, "name": f.name, "count": 0, "fixable": 0})
        row["count"] += 1
        row["fixable"] += int(fixable(f))
    return sorted(rows.values(), key=lambda r: (-r["count"], r["code"]))


def _per_file(opts: Options, path: str) -> Options:
    """Project configuration applies per file (each file finds its own pyproject/.finetune-doctor.toml).

    The options are worked out once per folder (the configuration is found from the file's folder, its real path):
    LLaMA-Factory's 95 examples lie in ~20 folders, and each from_cli resolves paths and reads the project files."""
    here = _real_parent(path)
    if opts.paths and _real_parent(opts.paths[0]) == here:
        return opts
    if opts.config_file:
        return opts   # --config FILE: one configuration for every file, no discovery (ruff's --config)
    kept = _FOLDER_OPTIONS.get((id(opts), here))
    if kept is None or kept[0] is not opts:
        kept = _FOLDER_OPTIONS[(id(opts), here)] = (opts, _folder_options(opts, path))
    return replace(kept[1], paths=(path,))


_FOLDER_OPTIONS: dict[tuple[int, Path], tuple[Options, Options]] = {}


def _real_parent(path: str) -> Path:
    from finetune_doctor.fsutil import real_parent

    return real_parent(path)


def _folder_options(opts: Options, path: str) -> Options:
    fresh = Options.from_cli(command=opts.command, paths=[path], gpu=opts.gpu if opts.gpu else None,
                             fmt=opts.format, output=opts.output,
                             select=",".join(opts.select) if opts.select else None,
                             ignore=",".join(opts.ignore) if opts.ignore else None, fail_on=opts.fail_on,
                             lf_version=opts.lf_version, env_file=opts.env_file,
                             # the command line's inputs hold for every file, whichever folder it lies in
                             model_config=opts.model_config, accelerate_config=opts.accelerate_config,
                             launch=opts.launch, host_ram=opts.host_ram, context=opts.context)
    # the command line's stack and --strict hold for every file (a project file may add its own)
    return replace(fresh, rules_dirs=tuple(dict.fromkeys(opts.rules_dirs + fresh.rules_dirs)),
                   strict=opts.strict or fresh.strict,
                   transformers_version=opts.transformers_version or fresh.transformers_version,
                   torch_version=opts.torch_version or fresh.torch_version, offline=opts.offline or fresh.offline)
