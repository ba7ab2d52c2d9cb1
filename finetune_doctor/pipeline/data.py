"""``doctor data``: token lengths of the configured datasets against cutoff_len.

Reads the config, scans the datasets (analyzers/data/datascan.py `collect`; the ``data`` facts are declared in
facts/data.py), judges them with the rules whose ``commands`` include ``data`` and returns the Report with
``sections["data"]``.
"""

from __future__ import annotations

from typing import Callable

from finetune_doctor.analyzers.data.datascan import collect
from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError
from finetune_doctor.facts import cfg as cfg_facts
from finetune_doctor.facts import data as data_facts
from finetune_doctor.facts import skeleton
from finetune_doctor.readers.data.datasets import DatasetDirNotFound
from finetune_doctor.readers.config.yamlcfg import load_config
from finetune_doctor.settings import Options
from finetune_doctor.types import Report, SourceDoc


def run(config: str, overrides: tuple[str, ...] | list[str], opts: Options, approximate: bool = False,
        workers: int | None = None, *, progress: Callable[[str, int, int], None] | None = None,
        cwd: str | None = None) -> Report:
    """``doctor data CONFIG [KEY=VALUE ...]``: scan the datasets, judge with the data rules, return the Report.

    `progress(dataset, bytes_done, bytes_total)` is called as the scan goes (the CLI draws it). Raises InputError
    when the config, its dataset_info.json or a dataset name is unusable (exit 2), and when no dataset_info.json
    defining the datasets is on this machine: the message says what was looked for, where, and how to point at it
    (``doctor check`` on the same config skips the scan with a note naming this command).
    """
    doc = load_config(config, tuple(overrides))
    if workers is not None and workers < 1:
        raise InputError("--workers needs at least 1", file="--workers")
    try:
        facts = collect(doc.values, doc.path, approximate=approximate, workers=workers, progress=progress,
                        strict=True, cwd=cwd)
    except DatasetDirNotFound as err:
        # the fix is in the config (dataset_dir) or in where the command runs: point at the config's key
        key = "dataset_dir" if "dataset_dir" in doc.values else "dataset"
        raise InputError(err.message, file=doc.path, line=doc.line_of(key)) from None
    sources: dict[str, SourceDoc] = {"config": doc.source()}
    if doc.overrides:
        sources["override"] = SourceDoc("override", "<command line>", {k: (1, 1) for k in doc.overrides})
    # the one facts skeleton (facts.skeleton): namespaces this command does not read are None, as for every command
    findings = judge("data", skeleton(cfg=cfg_facts.assemble(doc.values), data=facts), sources, opts,
                     texts={doc.path: doc.text})
    run_summary = {"stage": facts["stage"], "model": doc.values.get("model_name_or_path"),
                   "finetuning_type": doc.values.get("finetuning_type"),
                   "template": facts["template"]["name"], "micro_batch": facts["micro_batch"],
                   "grad_accum": doc.values.get("gradient_accumulation_steps", 1),
                   "seq_len": facts["cutoff_len"], "packing": facts["packing"]}
    return Report(command="data", inputs={"config": doc.path, "deepspeed": None, "run_dir": None},
                  findings=tuple(findings), run=run_summary, sections={"data": facts},
                  notes=tuple(facts.get("notes") or ()), assumptions=tuple(data_facts.assumptions(facts)))
