"""``data``: token statistics of the configured datasets against cutoff_len (analyzers/data/datascan.py `collect`).

Lengths are tokens; "full" means before truncation. None when the config names no dataset or its data is not on
this machine (``doctor check`` then says so in a note). Percentile blocks are ``{p50, p90, p99, max, mean}``.
"""

from __future__ import annotations

from typing import Any, Mapping

from finetune_doctor.facts.schema import LOCATION, OPEN, F, Namespace

_STATS = OPEN("percentiles: p50, p90, p99, max, mean")
_EXAMPLE = {"file": F("str", "dataset file"),
            "line": F("int", "the line that starts the row, or None where no line names it (columnar files, several "
                             "JSON array elements on one line)"),
            "index": F("int", "row index in the dataset (0-based)"), "row": F("int", "row index in the file (0-based)"),
            "message": F("str", "what is wrong (problem examples)"),
            "source": F("int", "prompt tokens"), "target": F("int", "response tokens"),
            "total": F("int", "tokens before truncation"), "kept": F("int", "tokens after truncation")}
_PROBLEM = {
    "dataset": F("str", "dataset name"), "kind": F("str", "malformed_json | bad_row | unreadable | missing_column | "
                                                          "wrong_role_order | odd_message_count | no_response | "
                                                          "empty_prompt | bad_value | stage_mismatch | dataset_info | "
                                                          "encoding | row_too_large | no_rows"),
    "count": F("int", "rows affected"), "fatal": F("bool", "LLaMA-Factory stops on it"),
    "what": F("str", "short description"), "message": F("str", "full message"), "location": LOCATION(),
    "examples": F("list", "examples", items=_EXAMPLE),
}
_DATASET = {
    "name": F("str", "dataset name"), "source": F("str", "where it comes from"), "load_from": F("str", "file | hf_hub | ..."),
    "formatting": F("str", "alpaca | sharegpt | ..."), "ranking": F("bool", "pairwise data"),
    "files": F("list", "files read"), "file_type": F("str", "json | jsonl | parquet | ..."), "location": LOCATION(),
    "status": F("str", "ok | partial | empty | unavailable"), "reason": F("str", "why not ok"),
    "rows": F("int", "rows read"), "samples": F("int", "rows LLaMA-Factory keeps"), "dropped": F("int", "rows dropped"),
    "errors": F("int", "rows with errors"), "unreadable": F("int", "unreadable rows"),
    "truncated": F("int", "samples cut by cutoff_len"), "truncated_frac": F("float", "share truncated"),
    "eos_lost": F("int", "samples whose EOS is cut off"), "empty_targets": F("int", "samples left with no target"),
    "turns_dropped": F("int", "turns dropped by truncation"), "with_media": F("int", "samples with images/videos/audio"),
    "media_cut": F("int", "samples whose truncation certainly removes media placeholder tokens (they fail in the "
                          "model's forward: analyzers/data/encoder.py MEDIA_CUT)"),
    "tokens_trained": F("int", "target tokens after truncation"), "num_samples": F("int", "dataset_info num_samples"),
    "cached_from": F("str", "a cache the rows were read from"),
    "info_read": F("bool", "its dataset_info.json entry was read here (whether or not its rows are here)"),
    "media_columns": F("list", "the media columns (images, videos, audios) its dataset_info entry names: LF reads "
                               "media from these only (data/parser.py)"),
    "total": _STATS, "target": _STATS, "after_cutoff": _STATS,
    "histogram": OPEN("edges[], counts[], cutoff_bin"),
    "longest": F("list", "longest samples", items=_EXAMPLE), "examples": OPEN("examples by kind"),
    "problems": F("list", "problems of this dataset", items=_PROBLEM),
}

NAMESPACE = Namespace("data", __doc__.split("\n\n")[0], {
    "approximate": F("bool", "no tokenizer was found (or --approximate): lengths are estimates"),
    "tokenizer": OPEN("source, kind, vocab_size, bos, eos, reason"),
    "template": OPEN("name, requested, efficient_eos, eos_tail_tokens, adds_eos, modelled, lf_registered, note"),
    "stage": F("str", "LLaMA-Factory stage"),
    "processor": F("str", "supervised | packed_supervised | pairwise | pretrain | pretrain_packed | unsupervised | feedback"),
    "cutoff_len": F("int", "as configured"), "effective_cutoff": F("int", "what samples are cut to"),
    "packing": F("bool", "packing"), "neat_packing": F("bool", "neat_packing"), "micro_batch": F("int", "micro batch"),
    "max_samples": F("int", "max_samples"), "val_size": F("float", "val_size"), "mix_strategy": F("str", "mix_strategy"),
    "dataset_dir": F("str", "the folder holding dataset_info.json"),
    "dataset_dir_how": F("str", "cwd | config | absolute | online"),
    "datasets": F("list", "per dataset, in config order", items=_DATASET),
    "overall": F("dict", "statistics over all scanned datasets", fields={
        "total": _STATS, "target": _STATS, "after_cutoff": _STATS, "longest": F("list", "longest", items=_EXAMPLE),
        "examples": OPEN("examples by kind"), "histogram": OPEN("histogram")}, open=True),
    "scanned": F("int", "datasets read"),
    "problems": F("list", "problems over all datasets", items=_PROBLEM),
    "packing_stats": OPEN("packed SFT: rows, row_len, pad_frac, tokens; packed pt: blocks, block_len, dropped_tokens"),
    "worst_micro_batch": OPEN("the micro batch the memory model should use: mode, rows, seq_len, tokens, ..."),
    "worst_micro_batch_tokens": F("int", "tokens of the worst micro batch"),
    "cutoff_for_max": F("int", "the longest sample, rounded up to 128"),
    "cutoff_for_p99": F("int", "the 99th percentile, rounded up to 128"),
    "cutoff_over_p99": F("float", "cutoff_len / p99 of the total length"),
    "partial": F("bool", "results do not cover every configured row"),
    "partial_reasons": F("list", "why"), "notes": F("list", "what the numbers leave out"),
    "media": OPEN("media tokens: family, template, processor_source, samples, assumed_samples, limits, note"),
    "elapsed_s": F("float", "scan time, seconds"), "error": F("str", "why the scan could not run"),
})


def assemble(values: Mapping[str, Any], config_path: str) -> dict[str, Any] | None:
    """The ``data`` facts for `values` read from `config_path`, or None when the data is not on this machine.

    A scan that fails for a reason other than bad input must not hide the config diagnosis: it becomes facts with
    ``error`` and ``partial``.
    """
    from finetune_doctor.analyzers.data.datascan import collect
    from finetune_doctor.errors import InputError

    try:
        return collect(dict(values), config_path)
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - see docstring
        return {"error": f"{type(err).__name__}: {err}", "partial": True}


def assumptions(data: Mapping[str, Any] | None) -> list:
    """The `Assumption`s of a scan (media sizes and token rules, analyzers/data/media.py), for Report.assumptions."""
    from finetune_doctor.analyzers.data.media import media_assumptions

    return media_assumptions((data or {}).get("media"))
