"""Runs the encoder over a dataset's chunks, in-process or in a pool of forked worker processes, in row order.

Each worker holds its own copy of the encoder (and so of the tokenizer) from the fork; chunks travel as rows or as
raw JSON Lines text (parsed in the worker). At most three chunks per worker are in flight, which bounds memory.
Progress is reported through the caller's callback, ``progress(dataset, bytes_done, bytes_total)``; nothing here
touches the terminal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from finetune_doctor.analyzers.data.aggregate import MAX_EXAMPLES, DatasetAggregate, Packer
from finetune_doctor.analyzers.data.converter import ConvSpec
from finetune_doctor.analyzers.data.dataargs import DataSettings
from finetune_doctor.analyzers.data.encoder import Encoder
from finetune_doctor.readers.data.datasets import Chunk, DatasetSpec, RowError, iter_chunks, parse_json_lines, total_bytes

_W: dict[str, Any] = {}   # the encoder the forked workers inherit


def _worker_init(env: dict[str, str] | None = None) -> None:
    # Each worker encodes on one core; the parent's rayon pool must not be shared across fork.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if env:
        os.environ.update(env)


def _work(task: tuple) -> tuple:
    file, first_index, rows, raw, lines, cs = task
    enc: Encoder = _W["encoder"]
    errors: list[RowError] = []
    keys: set[str] = set()
    if raw is not None:
        rows, errors, keys = parse_json_lines(file, raw, lines, first_index)
    recs, problems = enc.process(rows, first_index, lines, cs)
    return recs, problems, [(e.kind, e.file, e.line, e.message, e.index, e.lf_fails) for e in errors], keys


@dataclass
class ScanResult:
    """Everything one dataset scan produced (before it becomes facts)."""

    agg: DatasetAggregate
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)
    cut_short: bool = False   # a file could not be read to its end

    def problem(self, kind: str, message: str, file: str | None, line: int | None, index: int | None,
                fatal: bool, row: int | None = None) -> None:
        """Count one problem of `kind`; `fatal`: LLaMA-Factory stops on it; `index` is the row in the dataset,
        `row` the row within `file` (0-based)."""
        p = self.problems.setdefault(kind, {"kind": kind, "count": 0, "fatal": False, "examples": []})
        p["count"] += 1
        p["fatal"] = p["fatal"] or fatal
        if len(p["examples"]) < MAX_EXAMPLES:
            p["examples"].append({"file": file, "line": line, "index": index, "row": row, "message": message})


class Scanner:
    """Runs `Encoder` over datasets, in-process or in a pool of forked workers, preserving row order."""

    def __init__(self, encoder: Encoder, settings: DataSettings, workers: int = 1,
                 progress: Callable[[str, int, int], None] | None = None):
        self.enc = encoder
        self.s = settings
        self.workers = max(1, workers)
        self.progress = progress
        self.pool = None
        self.packer = Packer(settings)
        if self.workers > 1:
            import multiprocessing as mp

            _W["encoder"] = encoder
            try:
                ctx = mp.get_context("fork")
            except ValueError:  # no fork on this platform: run in-process
                self.workers = 1
            else:
                self.pool = ctx.Pool(self.workers, initializer=_worker_init)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None

    def __enter__(self) -> "Scanner":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def scan(self, spec: DatasetSpec, max_rows: int | None = None, chunk_rows: int = 1000) -> ScanResult:
        res = ScanResult(DatasetAggregate(spec.name))
        cs = ConvSpec.of(spec)
        size = total_bytes(spec) or 1
        done_files = 0
        file_sizes = {f: (os.path.getsize(f) if os.path.exists(f) else 0) for f in spec.files}
        last_file = None

        def tasks() -> Iterator[tuple]:
            for ch in iter_chunks(spec, chunk_rows=chunk_rows, max_rows=max_rows, raw_jsonl=self.pool is not None):
                yield ch

        def handle(ch: Chunk, out: tuple) -> None:
            nonlocal done_files, last_file
            recs, problems, errors, keys = out
            if ch.file != last_file:
                if last_file is not None:
                    done_files += file_sizes.get(last_file, 0)
                last_file = ch.file
                res.files.append(ch.file)
            res.keys |= ch.keys | set(keys)
            first = ch.file_first

            def row(index: int | None) -> int | None:
                return None if index is None else index - first

            for e in ch.errors:
                res.cut_short = res.cut_short or e.fatal
                res.problem(e.kind, e.message, e.file, e.line, e.index, e.lf_fails, row(e.index))
            for kind, file, line, msg, index, lf_fails in errors:
                res.problem(kind, msg, file, line, index, lf_fails, row(index))
            for kind, index, line, msg, fatal in problems:
                res.problem(kind, msg, ch.file, line, index, fatal, row(index))
            add = res.agg.add
            for r in recs:
                add(r, ch.file, first)
            if self.s.packing:  # packing_stats are reported only with packing: skip the knapsack otherwise
                for r in recs:
                    self.packer.add(r[2], r[8])
            if self.progress:
                self.progress(spec.name, min(size, done_files + ch.bytes_done), size)

        if self.pool is None:
            for ch in tasks():
                if ch.raw is not None:  # pragma: no cover - raw only with a pool
                    rows, errs, keys = parse_json_lines(ch.file, ch.raw, ch.lines, ch.first_index)
                    ch.rows, ch.errors, ch.keys = rows, ch.errors + errs, ch.keys | keys
                recs, problems = self.enc.process(ch.rows or [], ch.first_index, ch.lines, cs)
                handle(ch, (recs, problems, [], set()))
        else:
            pending: list[tuple[Chunk, Any]] = []
            window = self.workers * 3  # chunks in flight: bounds memory while keeping workers busy
            for ch in tasks():
                task = (ch.file, ch.first_index, ch.rows, ch.raw, ch.lines, cs)
                pending.append((ch, self.pool.apply_async(_work, (task,))))
                ch.rows = ch.raw = None
                while len(pending) >= window:
                    c0, fut = pending.pop(0)
                    handle(c0, fut.get())
            for c0, fut in pending:
                handle(c0, fut.get())
        return res
