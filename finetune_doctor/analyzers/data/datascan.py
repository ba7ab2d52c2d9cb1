"""The data scan: token lengths of a config's datasets against cutoff_len, as LLaMA-Factory would preprocess them.

Flow: the config values → datasets as LLaMA-Factory resolves them (readers/data/datasets.py) → the model's tokenizer and
template (analyzers/data/tokenizer.py, analyzers/data/templates.py) → per-sample lengths (analyzers/data/encoder.py, run over the
chunks by analyzers/data/scanpool.py) → statistics (analyzers/data/aggregate.py) → facts (`analyze_datasets`). `collect` returns the
``data`` facts (their shape is declared in facts/data.py); ``doctor data`` and ``doctor check`` both call it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.analyzers.data import templates as T
from finetune_doctor.analyzers.data.aggregate import DatasetAggregate, round_up, worst_micro_batch
from finetune_doctor.analyzers.data.dataargs import DataSettings
from finetune_doctor.analyzers.data.encoder import UNREADABLE, Encoder
from finetune_doctor.analyzers.data.media import MediaCounter, media_facts, media_rule, read_preprocessor
from finetune_doctor.analyzers.data.scanpool import Scanner, ScanResult
from finetune_doctor.analyzers.data.tokenizer import ApproxCounter, ExactCounter, find_tokenizer, resolve_template
from finetune_doctor.run.values import as_bool, split_arg
from finetune_doctor.errors import InputError
from finetune_doctor.readers.data.datasets import DatasetDirNotFound, DatasetSpec, find_dataset_dir, resolve_datasets, \
    total_bytes


def _error_facts(message: str, location: dict[str, Any] | None) -> dict[str, Any]:
    """Facts of a scan that could not run: `message` says why; with a `location` (in dataset_info.json) it is
    also a fatal ``dataset_info`` problem, without one (a config value) the config rules speak for it."""
    problems = [] if location is None else [{"dataset": None, "kind": "dataset_info", "count": 1, "fatal": True,
                                            "what": message, "message": message, "location": location,
                                            "examples": []}]
    return {"error": message, "partial": True, "partial_reasons": [message], "datasets": [], "overall": None,
            "problems": problems, "worst_micro_batch": None, "worst_micro_batch_tokens": None, "approximate": None}


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
    t0 = time.perf_counter()
    listed = split_arg(cfg.get("dataset"))
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
            find_dataset_dir(dataset_dir, cwd=cwd, config_dir=config_dir, names=names)[1]
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
        settings = DataSettings.from_config(cfg, cutoff_len=cutoff_len, micro_batch=micro_batch)
    except ValueError as err:
        if strict:
            raise InputError(str(err), file=config_path) from None
        return _error_facts(f"data not scanned: {err}", None)  # not "not on this machine": the value is the reason
    base_dirs = [cwd, config_dir] + [str(p) for p in Path(config_dir).parents]
    folder, why = (None, "--approximate was given") if approximate else find_tokenizer(
        cfg.get("model_name_or_path"), base_dirs=base_dirs, cache_dir=cfg.get("cache_dir"), env=env)
    template, tinfo = resolve_template(settings, folder)
    counter: Any = None
    if folder is not None:
        try:
            counter = ExactCounter(folder, template, add_tokens=split_arg(cfg.get("add_tokens")),
                                     add_special_tokens=split_arg(cfg.get("add_special_tokens")),
                                     split_special_tokens=as_bool(cfg.get("split_special_tokens")))
        except ImportError:
            why = f"{why}, but the tokenizers package is not installed (pip install tokenizers)"
        except Exception as err:  # a tokenizer.json this tokenizers version cannot load
            why = f"{folder}/tokenizer.json could not be loaded ({type(err).__name__}: {err})"
    if counter is None:
        counter = ApproxCounter(template)
    rule = media_rule(settings.template, read_preprocessor(folder),
                      read_preprocessor(folder, "video_preprocessor_config.json"))
    # LF: media_dir defaults to dataset_dir; both are taken relative to where LF is launched (data_args.py)
    media_dir = os.path.join(cwd, settings.media_dir) if settings.media_dir else ddir
    media = MediaCounter(rule, settings, media_dir, cwd) if rule is not None else None
    facts = analyze_datasets(specs, settings, counter, template, workers=workers or os.cpu_count() or 1,
                               progress=progress, media=media)
    facts["media"] = media_facts(rule, settings, facts)
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
    media = facts.get("media") or {}
    if media.get("note"):
        notes.append(media["note"])
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


# --- whole-run analysis ----------------------------------------------------------------------------------------

PROBLEM_TEXT = {
    "malformed_json": "rows that are not valid JSON; LLaMA-Factory's loader (datasets) fails on the whole file",
    "bad_row": "rows that are not JSON objects; LLaMA-Factory's loader fails on them",
    "unreadable": "a file that cannot be read",
    "missing_column": "a mapped column that no row has; LLaMA-Factory's converter raises KeyError",
    "wrong_role_order": "conversations with roles out of order; LLaMA-Factory skips them ('Invalid role tag')",
    "odd_message_count": "conversations with a message count LLaMA-Factory cannot pair; skipped",
    "no_response": "rows without a usable response; LLaMA-Factory drops them ('Dropped invalid example')",
    "empty_prompt": "rows without text; LLaMA-Factory's pretraining processor fails on them",
    "bad_value": "values of the wrong type or malformed tool/function JSON; LLaMA-Factory fails on them",
    "stage_mismatch": "ranking data in a non-preference stage (or the reverse); LLaMA-Factory raises "
                      "'The dataset is not applicable in the current training stage.'",
    "encoding": "bytes LLaMA-Factory's loader cannot decode (not UTF-8, or a byte-order mark where it fails on one)",
    "row_too_large": "rows over the doctor's size limit per row; not measured (LLaMA-Factory reads them)",
    "no_rows": "a dataset without any row; LLaMA-Factory's loader (datasets) fails on it",
    "dataset_info": "dataset_info.json: LLaMA-Factory cannot read it as it is",
    "media_assumed": "media whose size was not read here (file not found or unreadable, a video without an MP4/MOV header): counted at "
                     "the largest size LLaMA-Factory lets through",
}
FATAL_KINDS = {"malformed_json", "bad_row", "unreadable", "missing_column", "bad_value", "empty_prompt",
               "stage_mismatch", "encoding", "no_rows", "dataset_info"}


def accessed_columns(spec: DatasetSpec, processor: str) -> dict[str, str]:
    """Columns LF's converter reads with ``example[col]`` for this dataset: {role: column name}.

    A column read that way must exist in the file's schema (some row has it), else ``KeyError`` (converter.py).
    The openai converter reads system/tools with ``.get`` and is forgiving there.
    """
    c = spec.columns
    out: dict[str, str] = {}
    if spec.formatting == "alpaca":
        roles = ["history", "prompt", "query", "system", "tools", "images", "videos", "audios", "kto_tag"]
        if spec.ranking:
            roles += ["chosen", "rejected"]
        elif not c.get("kto_tag"):
            roles.append("response")
    else:
        roles = ["messages", "images", "videos", "audios", "kto_tag"]
        if spec.formatting == "sharegpt":
            roles += ["tools"]
        if spec.ranking:
            roles += ["chosen", "rejected"]
    for r in roles:
        if c.get(r):
            out[r] = c[r]
    return out


def dataset_facts(spec: DatasetSpec, res: ScanResult | None, settings: DataSettings) -> dict[str, Any]:
    """One entry of ``data.datasets`` (its shape is declared in facts/data.py)."""
    base = {"name": spec.name, "source": spec.source, "load_from": spec.load_from, "formatting": spec.formatting,
            "ranking": bool(spec.ranking), "files": list(spec.files), "file_type": spec.file_type,
            "location": spec.location(), "num_samples": spec.num_samples, "cached_from": spec.cached_from,
            # LF reads media only from the columns its dataset_info entry names (data/parser.py DatasetAttr: images,
            # videos, audios default None, set from `columns` only): an entry read here that names none is
            # text-only whether or not its rows are on this machine (trial 11 case 01)
            "info_read": bool(spec.info_path) and not spec.info_problem,
            "media_columns": [r for r in ("images", "videos", "audios") if (spec.columns or {}).get(r)]}
    if res is None:
        base.update(status="unavailable", reason=spec.unavailable, samples=0, rows=0, problems=[])
        return base
    base.update(res.agg.facts(settings.effective_cutoff))
    probs = []
    for key, p in res.problems.items():
        kind = p.get("kind", key)
        first = p["examples"][0] if p["examples"] else {}
        msg = first.get("message", "")
        if first.get("line") is None and first.get("row") is not None:
            msg = f"row {first['row']}: {msg}"   # no line names this row (columnar file, one-line JSON array)
        probs.append({"dataset": spec.name, "kind": kind, "count": p["count"],
                      "fatal": p["fatal"] or kind in FATAL_KINDS, "what": PROBLEM_TEXT.get(kind, kind),
                      "message": msg,
                      "location": {"file": first.get("file"), "line": first.get("line"), "column": None,
                                   "key": None},
                      "examples": p["examples"]})
    probs.sort(key=lambda p: (not p["fatal"], -p["count"]))
    base["problems"] = probs
    partial = res.cut_short or res.agg.status[UNREADABLE] > 0
    base["status"] = "partial" if partial else ("empty" if base["samples"] == 0 else "ok")
    base["reason"] = None
    return base


def check_columns(spec: DatasetSpec, res: ScanResult, processor: str) -> None:
    """Record a ``missing_column`` problem for each column LF reads that no row of the files has."""
    if not res.agg.n_rows:
        return
    for role, col in accessed_columns(spec, processor).items():
        if col not in res.keys:
            have = ", ".join(sorted(res.keys)[:8]) or "none"
            msg = (f"columns.{role} = {col!r}, but no row has a {col!r} field (fields: {have})" if
                   spec.info_path else f"no row has a {col!r} field")
            res.problems["missing_column:" + role] = _one(
                "missing_column", msg, spec.info_path or (spec.files[0] if spec.files else None), spec.info_line)


def _one(kind: str, message: str, file: str | None, line: int | None) -> dict[str, Any]:
    return {"kind": kind, "count": 1, "fatal": True,
            "examples": [{"file": file, "line": line, "index": None, "row": None, "message": message}]}


def _dataset_checks(spec: DatasetSpec, res: ScanResult, settings: DataSettings) -> None:
    """Problems of a dataset as a whole: the stage takes no such data, a column LF reads is missing, no row."""
    if res.agg.n_rows == 0 and not res.problems:
        # datasets 4.0.0: 'Instruction "train" corresponds to no data!' ([] or blank lines), or
        # SchemaInferenceError for a zero-byte file (both seen with load_dataset on such files)
        files = ", ".join(spec.files[:3]) + (" …" if len(spec.files) > 3 else "")
        res.problems["no_rows"] = _one("no_rows", f"no row in {files}: LLaMA-Factory's loader (datasets) fails on "
                                       "a dataset without rows ('Instruction \"train\" corresponds to no data!')",
                                       spec.files[0] if spec.files else spec.info_path, None)
    ranking_stage = settings.lf_stage == "rm"
    if bool(spec.ranking) != ranking_stage and settings.lf_stage in ("rm", "sft", "pt", "ppo", "kto"):
        res.problems["stage_mismatch"] = _one("stage_mismatch", (
            f"dataset is {'ranked (pairwise)' if spec.ranking else 'not ranked'} but stage {settings.stage!r} "
            f"{'needs' if ranking_stage else 'does not take'} pairwise data"), spec.info_path, spec.info_line)
    check_columns(spec, res, settings.processor)


_SKIPS = {"malformed_json": "malformed", "bad_row": "not objects", "unreadable": "file unreadable",
          "encoding": "not UTF-8", "row_too_large": "over the size limit per row"}


def _skipped(entry: dict[str, Any]) -> set[str]:
    """Why rows of a partial dataset were not measured, in words."""
    return {_SKIPS[p["kind"]] for p in entry["problems"] if p["kind"] in _SKIPS} or {"unreadable"}


def _info_problems(specs: list[DatasetSpec]) -> list[dict[str, Any]]:
    """The ``dataset_info`` problems of dataset_info.json files that were read although LF fails on them."""
    out: list[dict[str, Any]] = []
    for path, what in dict.fromkeys((s.info_path, s.info_problem) for s in specs if s.info_problem):
        out.append({"dataset": None, "kind": "dataset_info", "count": 1, "fatal": True, "what": what,
                    "message": what, "location": {"file": path, "line": 1, "column": None, "key": None},
                    "examples": []})
    return out


def analyze_datasets(specs: list[DatasetSpec], settings: DataSettings, counter: Any, template: T.Template, *,
                     workers: int = 1, progress: Callable[[str, int, int], None] | None = None,
                     chunk_rows: int = 1000, parallel_min_bytes: int = 4 << 20,
                     media: MediaCounter | None = None) -> dict[str, Any]:
    """Scan `specs` in order and return the ``data`` facts (shape declared in facts/data.py).

    Worker processes are used when the files hold at least `parallel_min_bytes` (starting them costs more than
    scanning a few MB in-process, where ``encode_batch`` still uses every core).
    """
    enc = Encoder(counter, template, settings, media)
    overall = DatasetAggregate("overall")
    entries: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = _info_problems(specs)
    partial_reasons: list[str] = []
    small = sum(total_bytes(s) for s in specs if not s.unavailable) < parallel_min_bytes
    n_workers = 1 if small else max(1, workers)
    with Scanner(enc, settings, workers=n_workers, progress=progress) as scanner:
        for spec in specs:
            if spec.unavailable:
                entries.append(dataset_facts(spec, None, settings))
                partial_reasons.append(f"{spec.name}: {spec.unavailable}")
                continue
            res = scanner.scan(spec, max_rows=settings.max_samples, chunk_rows=chunk_rows)
            _dataset_checks(spec, res, settings)
            entry = dataset_facts(spec, res, settings)
            entries.append(entry)
            problems.extend(entry["problems"])
            if entry["status"] == "partial":
                partial_reasons.append(f"{spec.name}: rows skipped ({', '.join(sorted(_skipped(entry)))})")
            overall.merge(res.agg)
        scanner.packer.flush()
        scanner.close()
        packer = scanner.packer
    scanned = sum(1 for e in entries if e["status"] != "unavailable")
    ov = overall.facts(settings.effective_cutoff) if scanned else None
    if ov is not None:
        ov["truncated_in"] = [f"{e['name']} ({e['truncated']})" for e in entries if e.get("truncated")]
        ov["empty_targets_in"] = [f"{e['name']} ({e['empty_targets']})" for e in entries if e.get("empty_targets")]
    wmb = worst_micro_batch(overall, settings)
    p99 = ov["total"]["p99"] if ov else None
    mx = ov["total"]["max"] if ov else None
    facts: dict[str, Any] = {
        "approximate": bool(counter.approximate),
        "template": {"name": template.name, "requested": settings.template, "efficient_eos": template.efficient_eos,
                     "eos_tail_tokens": enc.eos_tail, "adds_eos": not enc.no_eos,
                     "removed_upstream": template.removed_upstream},
        "stage": settings.stage,
        "processor": settings.processor,
        "cutoff_len": settings.cutoff_len,
        "effective_cutoff": settings.effective_cutoff,
        "packing": settings.packing,
        "neat_packing": settings.neat_packing,
        "micro_batch": settings.micro_batch,
        "max_samples": settings.max_samples,
        "val_size": settings.val_size,
        "mix_strategy": settings.mix_strategy,
        "datasets": entries,
        "scanned": scanned,
        "overall": ov,
        "packing_stats": packer.facts() if settings.packing else None,
        "worst_micro_batch": wmb,
        "problems": problems,
        "partial": bool(partial_reasons),
        "partial_reasons": partial_reasons,
        "cutoff_for_max": round_up(mx),
        "cutoff_for_p99": round_up(p99),
        "cutoff_over_p99": round(settings.cutoff_len / p99, 2) if p99 else None,
    }
    return facts
