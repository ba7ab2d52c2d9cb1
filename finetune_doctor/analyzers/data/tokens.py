"""Token lengths of LLaMA-Factory training samples, computed the way LF's preprocessing computes them.

For each row this module does what LF does between ``load_dataset`` and the trainer (LF_FACTS.md §4), keeping
only lengths:

1. **convert** the row to prompt/response messages (``data/converter.py``: alpaca, sharegpt, openai), with LF's
   validity checks (role order, message count, unsupervised rows);
2. **format** it with the configured template (analyzers/data/templates.py) and **count tokens** of every slot with
   the model's fast tokenizer (``tokenizers``; one ``encode_batch`` per chunk), after the tokenizer fixes LF
   applies (``patch_tokenizer`` add_tokens / add_special_tokens, ``Template.fix_special_tokens``);
3. **truncate** with ``infer_seqlen`` (``data/processor/processor_utils.py``) turn by turn as the supervised
   processor does (``processor/supervised.py`` ``_encode_data_example``), or once per pair (``pairwise.py``),
   or by blocks (``pretrain.py``); count labels, truncated samples, lost end-of-turn tokens, empty targets;
4. **aggregate**: exact percentiles from length counters, a histogram, the longest samples with file and line,
   LF's greedy-knapsack packing per ``preprocessing_batch_size`` rows, and the worst micro-batch.

Work is split in chunks of rows across worker processes (fork, one tokenizer per process), results are merged
in row order. Memory stays bounded: rows are dropped after their chunk, and lengths are kept as counters.

Without a tokenizer an `ApproxCounter` estimates lengths from characters and the result says ``approximate``.

This module is the public face of that flow; each step lives in its own module:

===================  ==============================================================================
analyzers/dataargs   `DataSettings` (LF's data arguments), `infer_seqlen`
analyzers/tokenizer  tokenizer discovery, `ExactCounter` / `ApproxCounter`, `resolve_template`
analyzers/converter  LF's converters: `convert_row`, `ConvSpec`, `RowProblem`
analyzers/encoder    `Encoder`: rows → `SampleRecord` lengths after truncation
analyzers/aggregate  `DatasetAggregate`, percentiles, histogram, `Packer`, `worst_micro_batch`
analyzers/scanpool   `Scanner`: the worker pool, chunks in row order
analyzers/datascan   `analyze_datasets` (specs → ``data`` facts) and `collect` (config → ``data`` facts)
===================  ==============================================================================
"""

from __future__ import annotations

from finetune_doctor.analyzers.data import templates as T
from finetune_doctor.analyzers.data.aggregate import DatasetAggregate, Packer, greedy_knapsack, histogram, pad8, \
    percentile, round_up, worst_micro_batch
from finetune_doctor.analyzers.data.converter import ConvSpec, RowProblem, convert_row
from finetune_doctor.analyzers.data.dataargs import DataSettings, infer_seqlen
from finetune_doctor.analyzers.data.datascan import FATAL_KINDS, PROBLEM_TEXT, accessed_columns, analyze_datasets, \
    check_columns, dataset_facts
from finetune_doctor.analyzers.data.encoder import DROPPED, EMPTY_TARGET, EOS_LOST, ERROR, HAS_MEDIA, OK, TRUNCATED, \
    TURNS_DROPPED, UNREADABLE, Encoder, SampleRecord
from finetune_doctor.analyzers.data.scanpool import Scanner, ScanResult
from finetune_doctor.analyzers.data.tokenizer import ApproxCounter, ExactCounter, find_tokenizer, read_tokenizer_config, \
    render_chat_template, resolve_template
from finetune_doctor.run.values import as_bool, split_arg

as_list = split_arg   # LF's split_arg, the one copy (run/values.py), under the name this facade always exported
_as_bool, _as_list = as_bool, split_arg   # the names LF's ``split_arg`` port had before the split

__all__ = [
    "T", "DatasetAggregate", "Packer", "greedy_knapsack", "histogram", "pad8", "percentile", "round_up",
    "worst_micro_batch", "ConvSpec", "RowProblem", "convert_row", "DataSettings", "as_bool", "as_list",
    "infer_seqlen", "FATAL_KINDS", "PROBLEM_TEXT", "accessed_columns", "analyze_datasets", "check_columns",
    "dataset_facts", "DROPPED", "EMPTY_TARGET", "EOS_LOST", "ERROR", "HAS_MEDIA", "OK", "TRUNCATED",
    "TURNS_DROPPED", "UNREADABLE", "Encoder", "SampleRecord", "Scanner", "ScanResult", "ApproxCounter",
    "ExactCounter", "find_tokenizer", "read_tokenizer_config", "render_chat_template", "resolve_template",
]
