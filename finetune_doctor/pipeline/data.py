"""``doctor data``: token lengths of the configured datasets against cutoff_len, and the same facts for ``check``.

Flow: the config (readers/yamlcfg.py) → datasets as LLaMA-Factory resolves them (readers/datasets.py) → the
model's tokenizer and template (analyzers/tokens.py, analyzers/templates.py) → per-sample lengths and statistics
→ rules with ``commands: [data]`` (FD401-FD411) → `Report` with ``sections["data"]``.

The ``data`` facts namespace (`collect` returns it; lengths in tokens; "full" means before truncation)::

    data.approximate          True when no tokenizer was found (or --approximate): lengths are estimates
    data.tokenizer            {source, kind: tokenizer.json|approximate, vocab_size, bos, eos, reason}
    data.template             {name, requested, efficient_eos, eos_tail_tokens, adds_eos, removed_upstream,
                               modelled, lf_registered, note}
    data.stage / .processor   LF stage; processor = supervised | packed_supervised | pairwise | pretrain |
                              pretrain_packed | unsupervised | feedback
    data.cutoff_len           as configured; data.effective_cutoff what samples are cut to (cutoff_len - 1 when
                              packing is set in the config, LF data_args.py:189)
    data.packing / .neat_packing / .micro_batch / .max_samples / .val_size / .mix_strategy
    data.dataset_dir          the folder holding dataset_info.json that was used, and data.dataset_dir_how
                              (cwd | config | absolute)
    data.datasets[]           per dataset, in config order: {name, source, load_from, formatting, ranking, files[],
                              file_type, location {file, line, column, key} (its dataset_info.json entry),
                              status: ok | partial | empty | unavailable, reason, rows, samples (kept by LF),
                              dropped, errors, unreadable, truncated, truncated_frac, eos_lost, empty_targets,
                              turns_dropped, with_media, tokens_trained, source/target/total/after_cutoff:
                              {p50, p90, p99, max, mean}, histogram {edges[], counts[], cutoff_bin},
                              longest[] {file, line, index, source, target, total, kept},
                              examples {truncated|eos_lost|empty_target|...: [{file, line, index, total, kept}]},
                              problems[]}
    data.overall              the same statistics over all scanned datasets (None when nothing was scanned)
    data.scanned              number of datasets read
    data.problems[]           {dataset, kind, count, fatal, what, message, location, examples[]}; kinds:
                              malformed_json, bad_row, unreadable, missing_column, wrong_role_order,
                              odd_message_count, no_response, empty_prompt, bad_value, stage_mismatch
    data.packing_stats        packed SFT: {rows, row_len, pad_frac, tokens}; packed pt: {blocks, block_len,
                              dropped_tokens}; None without packing
    data.worst_micro_batch    {mode: padded|pairwise|packed, micro_batch, rows, seq_len, tokens (rows × seq_len,
                              what the memory model should use), unpacked_seq_len, unpacked_tokens, packed_tokens,
                              cutoff_tokens (rows × cutoff_len), real_tokens}
    data.worst_micro_batch_tokens   = worst_micro_batch.tokens (None when nothing was scanned)
    data.cutoff_for_max / .cutoff_for_p99   the longest / the 99th-percentile sample rounded up to 128 tokens
    data.cutoff_over_p99      cutoff_len / p99 of the total length
    data.partial / .partial_reasons[]   results do not cover every configured row
    data.notes[]              what the numbers leave out (media tokens, val_size split, sampling, eval sets)
    data.elapsed_s            scan time in seconds
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.errors import InputError
from finetune_doctor.types import Report, SourceDoc


def _error_facts(message: str, location: dict[str, Any]) -> dict[str, Any]:
    return {"error": message, "partial": True, "partial_reasons": [message], "datasets": [], "overall": None,
            "problems": [{"dataset": None, "kind": "dataset_info", "count": 1, "fatal": True, "what": message,
                          "message": message, "location": location, "examples": []}],
            "worst_micro_batch": None, "worst_micro_batch_tokens": None, "approximate": None}


def collect(cfg: dict[str, Any], config_path: str, *, cutoff_len: int | None = None, micro_batch: int | None = None,
            approximate: bool = False, workers: int | None = None,
            progress: Callable[[str, int, int], None] | None = None, strict: bool = False,
            cwd: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The ``data`` facts for the config values `cfg` read from `config_path` (shape: module docstring).

    `cutoff_len` / `micro_batch` override the config's values (``doctor check`` passes the resolved run's).
    `approximate` skips the tokenizer. `workers` defaults to the CPU count (1 for small data). `progress` is
    called as ``progress(dataset, bytes_done, bytes_total)``.

    Returns None when the config names no dataset, or (unless `strict`) when its dataset_info.json is not on
    this machine: the data is not local. A malformed or incomplete dataset_info.json gives facts holding an
    ``error`` and a fatal ``dataset_info`` problem, unless `strict`, where it raises InputError (``doctor data``).
    """
    from finetune_doctor.analyzers import tokens as K
    from finetune_doctor.readers.datasets import DatasetDirNotFound, find_dataset_dir, resolve_datasets

    t0 = time.perf_counter()
    listed = K._as_list(cfg.get("dataset"))
    # LF keeps datasets in a dict keyed by name (loader.py _get_merged_dataset): a name listed twice is used once
    names = list(dict.fromkeys(listed or []))
    if not names:
        if strict:
            raise InputError("the config names no dataset (key `dataset`)", file=config_path)
        return None
    cwd = cwd or os.getcwd()
    config_dir = str(Path(config_path).resolve().parent)
    dataset_dir = str(cfg.get("dataset_dir") or "data")
    try:
        how = "online" if dataset_dir == "ONLINE" or dataset_dir.startswith("REMOTE:") else \
            find_dataset_dir(dataset_dir, cwd=cwd, config_dir=config_dir)[1]
        specs, ddir = resolve_datasets(names, dataset_dir, cwd=cwd, config_dir=config_dir,
                                       cache_dir=cfg.get("cache_dir"), env=env)
    except DatasetDirNotFound:
        if strict:
            raise
        return None
    except InputError as err:
        if strict:
            raise
        return _error_facts(err.message, {"file": err.file, "line": err.line, "column": None, "key": None})

    try:
        settings = K.DataSettings.from_config(cfg, cutoff_len=cutoff_len, micro_batch=micro_batch)
    except ValueError as err:
        if strict:
            raise InputError(str(err), file=config_path) from None
        return None  # the config rules report the bad value; nothing to scan against
    base_dirs = [cwd, config_dir] + [str(p) for p in Path(config_dir).parents]
    folder, why = (None, "--approximate was given") if approximate else K.find_tokenizer(
        cfg.get("model_name_or_path"), base_dirs=base_dirs, cache_dir=cfg.get("cache_dir"), env=env)
    template, tinfo = K.resolve_template(settings, folder)
    counter: Any = None
    if folder is not None:
        try:
            counter = K.ExactCounter(folder, template, add_tokens=K._as_list(cfg.get("add_tokens")),
                                     add_special_tokens=K._as_list(cfg.get("add_special_tokens")),
                                     split_special_tokens=K._as_bool(cfg.get("split_special_tokens")))
        except ImportError:
            why = f"{why}, but the tokenizers package is not installed (pip install tokenizers)"
        except Exception as err:  # a tokenizer.json this tokenizers version cannot load
            why = f"{folder}/tokenizer.json could not be loaded ({type(err).__name__}: {err})"
    if counter is None:
        counter = K.ApproxCounter(template)
    facts = K.analyze_datasets(specs, settings, counter, template, workers=workers or os.cpu_count() or 1,
                               progress=progress)
    facts["tokenizer"] = {**counter.describe(), "reason": why}
    facts["template"].update({k: v for k, v in tinfo.items() if k != "requested"})
    facts["dataset_dir"] = ddir
    facts["dataset_dir_how"] = how
    facts["worst_micro_batch_tokens"] = (facts["worst_micro_batch"] or {}).get("tokens")
    facts["notes"] = _notes(facts, cfg, settings, tinfo, why)
    twice = sorted({n for n in listed if listed.count(n) > 1})
    if twice:
        facts["notes"].append(f"{', '.join(twice)} listed more than once in `dataset`: LLaMA-Factory keeps datasets "
                              "by name and uses each once")
    facts["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return facts


def _notes(facts: dict[str, Any], cfg: dict[str, Any], settings: Any, tinfo: dict[str, Any], why: str) -> list[str]:
    notes = []
    if facts["approximate"]:
        notes.append(f"approximate token counts ({why}): a character-based estimate, not the model's tokenizer")
    if tinfo.get("note"):
        notes.append(tinfo["note"])
    if facts["dataset_dir_how"] == "config":
        notes.append(f"dataset_dir found relative to the config ({facts['dataset_dir']}); LLaMA-Factory resolves it "
                     "against the directory it is launched from")
    media = (facts["overall"] or {}).get("with_media") or 0
    if media:
        notes.append(f"{media} samples carry images/videos/audios: their media tokens are not counted")
    if settings.val_size:
        notes.append(f"val_size={settings.val_size}: LLaMA-Factory holds that share out for evaluation; statistics "
                     "cover every row")
    if settings.mix_strategy != "concat":
        notes.append(f"mix_strategy={settings.mix_strategy}: statistics cover every row of every dataset, not the "
                     "interleaved sample")
    if any(d.get("num_samples") for d in facts["datasets"]):
        notes.append("num_samples in dataset_info.json resamples rows at random; statistics cover the files as they are")
    if cfg.get("eval_dataset"):
        notes.append("eval_dataset is not scanned")
    if settings.streaming:
        notes.append("streaming: LLaMA-Factory preprocesses on the fly; the lengths are the same")
    if settings.packing and settings.processor == "packed_supervised":
        notes.append("packing groups rows per preprocessing batch in file order (with val_size the order is "
                     "shuffled first)")
    return notes


def run(config: str, overrides: tuple[str, ...] | list[str], opts: Any, approximate: bool = False,
        workers: int | None = None, *, progress: bool | None = None, cwd: str | None = None) -> Report:
    """``doctor data CONFIG [KEY=VALUE ...]``: scan the datasets, judge with the data rules, return the Report.

    Raises InputError when the config, its dataset_info.json or a dataset name is unusable (exit 2). Progress
    bars go to stderr when it is a terminal and the format is text (`progress` forces them on or off).
    """
    from finetune_doctor.engine.evaluate import RuleContext, evaluate
    from finetune_doctor.engine.loader import load_rules, select_rules
    from finetune_doctor.readers.yamlcfg import load_config

    doc = load_config(config, tuple(overrides))
    if workers is not None and workers < 1:
        raise InputError("--workers needs at least 1", file="--workers")
    import sys

    show = progress if progress is not None else (getattr(opts, "format", "text") in ("text", None)
                                                  and sys.stderr.isatty())
    bars = None
    if show:
        from finetune_doctor.reporters.sections.data import ScanProgress

        bars = ScanProgress()
    try:
        if bars is not None:
            bars.start()
        facts = collect(doc.values, doc.path, approximate=approximate, workers=workers,
                        progress=bars.update if bars is not None else None, strict=True, cwd=cwd)
    finally:
        if bars is not None:
            bars.stop()
    sources: dict[str, SourceDoc] = {"config": doc.source()}
    if doc.overrides:
        sources["override"] = SourceDoc("override", "<command line>", {k: (1, 1) for k in doc.overrides})
    ctx = RuleContext(facts={"cfg": doc.values, "data": facts}, sources=sources)
    rules = select_rules(load_rules(getattr(opts, "rules_dirs", ()) or ()), "data",
                         list(opts.select) if getattr(opts, "select", None) else None,
                         list(getattr(opts, "ignore", ()) or ()))
    findings = evaluate(rules, ctx)
    run_summary = {"stage": facts["stage"], "model": doc.values.get("model_name_or_path"),
                   "finetuning_type": doc.values.get("finetuning_type"),
                   "template": facts["template"]["name"], "micro_batch": facts["micro_batch"],
                   "grad_accum": doc.values.get("gradient_accumulation_steps", 1),
                   "seq_len": facts["cutoff_len"], "packing": facts["packing"]}
    return Report(command="data", inputs={"config": doc.path, "deepspeed": None, "run_dir": None},
                  findings=tuple(findings), run=run_summary, sections={"data": facts},
                  notes=tuple(facts.get("notes") or ()))
