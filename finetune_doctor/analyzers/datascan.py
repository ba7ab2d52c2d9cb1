"""The data scan: token lengths of a config's datasets against cutoff_len, as LLaMA-Factory would preprocess them.

Flow: the config values → datasets as LLaMA-Factory resolves them (readers/datasets.py) → the model's tokenizer and
template (analyzers/tokens.py, analyzers/templates.py) → per-sample lengths and statistics. `collect` returns the
``data`` facts (their shape is declared in facts/data.py); ``doctor data`` and ``doctor check`` both call it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.errors import InputError


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
