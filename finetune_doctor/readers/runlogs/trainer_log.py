"""Read what the Trainer itself wrote into ``output_dir``: LLaMA-Factory's ``trainer_log.jsonl``, HF's
``trainer_state.json`` (``log_history``), ``train/eval/all_results.json`` and the saved run arguments.

Formats (reference/llamafactory/LF_FACTS.md §5, log_examples/):

* ``trainer_log.jsonl`` — LF ``LogCallback.on_log`` (``train/callbacks.py:271-310``), one ``json.dumps`` object per
  log: ``current_steps, total_steps, loss, eval_loss, ..., lr, epoch, percentage, elapsed_time, remaining_time``
  (+ ``throughput``, ``total_tokens``, ``vram_allocated``, ``vram_reserved``). NaN is the bare token ``NaN``
  (Python's json writes and reads it). **No grad_norm.** Eval lines carry ``eval_loss`` and no ``loss``; the final
  summary line has neither. Resumed runs append (steps go back), unless ``overwrite_output_dir``.
* ``trainer_state.json`` — transformers ``TrainerState.save_to_json`` (indent 2, sorted keys), written at each
  checkpoint save and at the end; ``log_history`` holds every logged dict plus ``step``, with ``grad_norm``.
  A crashed run often has only ``checkpoint-N/trainer_state.json``. It can be large (one entry per log) and
  half-written, so it is parsed as a stream: the entries before the cut are kept.
* ``*_results.json`` — ``trainer.save_metrics`` (indent 4): their presence means the workflow got past training.

Readers never judge; they report what they read in `FileRead` (truncated last line, malformed lines).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.evidence import STEP_LIMIT, Fact, FileEvidence, FileRead, Notice, Restart, Series
from finetune_doctor.readers.runlogs.logpatterns import is_summary

MAX_JSONL_LINE = 1 << 20   # a longer "line" is not a LogCallback record
_READ = 1 << 20
MAX_ENTRY = 4 << 20        # a log_history entry bigger than this means the file is corrupt there

# trainer_log.jsonl / log_history keys -> canonical series names
_JSONL_KEYS = (("loss", "loss"), ("eval_loss", "eval_loss"), ("lr", "learning_rate"), ("epoch", "epoch"),
               ("throughput", "throughput"), ("vram_allocated", "vram_allocated"),
               ("vram_reserved", "vram_reserved"), ("reward", "reward"), ("accuracy", "accuracy"))
_STATE_KEYS = (("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "learning_rate"), ("epoch", "epoch"),
               ("eval_loss", "eval_loss"), ("rewards/accuracies", "accuracy"), ("rewards/margins", "reward_margin"))


def _series(store: dict[str, Series], name: str, path: str) -> Series:
    s = store.get(name)
    if s is None:
        s = store[name] = Series(name, path)
    return s


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):   # transformers 5.x may log strings
        try:
            return float(v)
        except ValueError:
            return None
    return None


def as_step(v: Any) -> int | None:
    """A logged step as an int; None for a non-number, and STEP_LIMIT for inf or a number at or above it (the
    series then records it as an unknown step and the read says so, evidence.py `Series.append`)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not (v == v and abs(v) != float("inf")):
        return STEP_LIMIT
    return int(v) if -1 <= v < STEP_LIMIT else STEP_LIMIT


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=path) from None


def read_trainer_log(path: str) -> FileEvidence:
    """Stream LLaMA-Factory's ``trainer_log.jsonl``. Every metric point keeps its line number.

    A malformed or truncated line is skipped and reported; a step that goes back marks a resume (LF appends
    to the file when the output dir is not overwritten). Raises InputError if the file cannot be opened.
    """
    size = _size(path)
    series: dict[str, Series] = {}
    problems: list[str] = []
    restarts: list[Restart] = []
    notices: list[Notice] = []
    bad: list[int] = []
    last_step = None
    total = None
    n = 0
    items = 0
    read = 0
    truncated_last = False
    with open(path, "rb") as fh:
        for n, raw in enumerate(_lines(fh), 1):
            read += len(raw)
            text = raw.strip()
            if not text:
                continue
            if len(text) > MAX_JSONL_LINE:
                bad.append(n)
                continue
            try:
                d = json.loads(text.decode("utf-8", "replace"))
            except ValueError:
                if not raw.endswith(b"\n"):
                    truncated_last = True
                else:
                    bad.append(n)
                continue
            if not isinstance(d, dict):
                bad.append(n)
                continue
            step = d.get("current_steps")
            step = as_step(step)
            if isinstance(d.get("total_steps"), int):
                total = d["total_steps"]
            if step is not None and last_step is not None and step < last_step:
                restarts.append(Restart(path, n, step, "resume",
                                        f"trainer_log.jsonl goes back from step {last_step} to {step}"))
            training = "loss" in d
            for key, name in _JSONL_KEYS:
                if not training and name != "eval_loss":
                    continue
                v = _num(d.get(key))
                if v is not None:
                    _series(series, name, path).append(step, v, n)
                    items += 1
            if "loss" not in d and "eval_loss" not in d and step is not None and total and step >= total:
                notices.append(Notice(path, n, step, "train-end", "final LogCallback line (training loop finished)"))
            if step is not None and step < STEP_LIMIT:
                last_step = step
    if truncated_last:
        problems.append(f"last line ({n}) is cut off (the run died while writing it)")
    if bad:
        problems.append(f"{len(bad)} malformed line(s), first at line {bad[0]}")
    facts = (Fact("total_steps", total, path, 1),) if total else ()
    return FileEvidence(FileRead(path, "trainer-log", size, read, lines=n, items=items,
                                 complete=not truncated_last, problems=tuple(problems)),
                        series=tuple(series.values()), restarts=tuple(restarts), notices=tuple(notices),
                        facts=facts, last_step=last_step, total_steps=total)


def _lines(fh: Any) -> Iterator[bytes]:
    """Lines of a binary file, each cut at MAX_JSONL_LINE + 1 bytes so one monster line cannot fill memory."""
    while True:
        ln = fh.readline(MAX_JSONL_LINE + 1)
        if not ln:
            return
        if len(ln) > MAX_JSONL_LINE and not ln.endswith(b"\n"):
            while True:   # drain the rest of the monster line
                more = fh.readline(MAX_JSONL_LINE)
                if not more or more.endswith(b"\n"):
                    break
        yield ln


_SCALAR = re.compile(r'"(?P<k>\w+)":\s*(?P<v>-?[\d.]+(?:[eE][-+]?\d+)?|true|false|null|NaN|"[^"\n]*")')


def read_trainer_state(path: str) -> FileEvidence:
    """Read HF's ``trainer_state.json`` as a stream: the ``log_history`` entries one by one, and the
    top-level scalars (global_step, max_steps, logging_steps, num_train_epochs, train_batch_size).

    A file cut in the middle (the process died while saving) keeps every entry before the cut and says so.
    Raises InputError if the file cannot be opened.
    """
    size = _size(path)
    series: dict[str, Series] = {}
    problems: list[str] = []
    facts: list[Fact] = []
    notices: list[Notice] = []
    results: dict[str, Any] = {}
    entries = 0
    complete = True
    dec = json.JSONDecoder()
    read = 0
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        buf = ""
        pos = 0
        eof = False
        line = 1

        def fill() -> bool:
            nonlocal buf, eof, read
            chunk = fh.read(_READ)
            if not chunk:
                eof = True
                return False
            read += len(chunk)
            buf += chunk
            return True

        while '"log_history"' not in buf and not eof:
            fill()
            if len(buf) > 4 * _READ and '"log_history"' not in buf:
                buf = buf[-1024:]
        i = buf.find('"log_history"')
        head = buf[:max(i, 0)] if i >= 0 else buf
        _scalars(head, path, facts)
        if i < 0:
            problems.append("no log_history in the file")
            return FileEvidence(FileRead(path, "trainer-state", size, read, complete=False, problems=tuple(problems)),
                                facts=tuple(facts))
        line += buf.count("\n", 0, i)
        j = buf.find("[", i)
        while j < 0 and not eof:
            fill()
            j = buf.find("[", i)
        pos = j + 1 if j >= 0 else len(buf)
        line += buf.count("\n", i, pos)
        ended = False
        while True:
            while True:   # skip separators, refilling as needed
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    if buf[pos] == "\n":
                        line += 1
                    pos += 1
                if pos < len(buf) or eof:
                    break
                fill()
            if pos >= len(buf):
                complete = False
                break
            if buf[pos] == "]":
                ended = True
                pos += 1
                break
            try:
                obj, end = dec.raw_decode(buf, pos)
            except ValueError:
                if eof:
                    complete = False
                    break
                if len(buf) - pos > MAX_ENTRY:
                    problems.append(f"log_history entry near line {line} is not valid JSON; stopped there")
                    complete = False
                    break
                fill()
                continue
            entry_line = line
            line += buf.count("\n", pos, end)
            pos = end
            entries += 1
            if isinstance(obj, dict):
                _state_entry(obj, entry_line, path, series, notices, results)
            if pos > _READ:
                buf = buf[pos:]
                pos = 0
        if ended:   # the top-level scalars after log_history are small; read at most 1 MiB of them
            while len(buf) - pos < _READ and fill():
                pass
            _scalars(buf[pos:], path, facts, line)
    if not complete:
        problems.append(f"file is cut off after {entries} log_history entries (the run died while saving it)")
    return _state_evidence(path, size, read, line, entries, complete, problems, series, facts, notices, results)


def _state_evidence(path: str, size: int, read: int, line: int, entries: int, complete: bool, problems: list[str],
                    series: dict[str, Series], facts: list[Fact], notices: list[Notice],
                    results: dict[str, Any]) -> FileEvidence:
    last = None
    gs = next((f.value for f in facts if f.name == "global_step"), None)
    for s in series.values():
        if len(s):
            last = max(last or 0, max(s.steps))
    ms = next((f.value for f in facts if f.name == "max_steps"), None)
    gs = gs if isinstance(gs, int) and not isinstance(gs, bool) and 0 <= gs < STEP_LIMIT else None
    ms = ms if isinstance(ms, int) and not isinstance(ms, bool) and 0 < ms < STEP_LIMIT else None
    return FileEvidence(FileRead(path, "trainer-state", size, read, lines=line, records=entries,
                                 items=sum(len(s) for s in series.values()), complete=complete,
                                 problems=tuple(problems)),
                        series=tuple(series.values()), facts=tuple(facts), notices=tuple(notices), results=results,
                        last_step=gs if isinstance(gs, int) else last, total_steps=ms if isinstance(ms, int) else None)


def _scalars(text: str, path: str, facts: list[Fact], base_line: int = 1) -> None:
    wanted = {"global_step", "max_steps", "logging_steps", "num_train_epochs", "train_batch_size", "epoch",
              "save_steps", "eval_steps", "num_input_tokens_seen"}
    have = {f.name for f in facts}
    for m in _SCALAR.finditer(text):
        k = m.group("k")
        if k in wanted and k not in have:
            try:
                v = json.loads(m.group("v"))
            except ValueError:
                continue
            facts.append(Fact(k, v, path, base_line + text.count("\n", 0, m.start())))
            have.add(k)


def _state_entry(obj: dict[str, Any], line: int, path: str, series: dict[str, Series], notices: list[Notice],
                 results: dict[str, Any]) -> None:
    step = obj.get("step")
    step = as_step(step)
    if is_summary(obj):
        results.update({k: v for k, v in obj.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)})
        notices.append(Notice(path, line, step, "train-summary", "final Trainer log (training loop finished)",
                              {k: v for k, v in obj.items() if k != "step"}))
        return
    training = "loss" in obj
    for key, name in _STATE_KEYS:
        if not training and name != "eval_loss":   # an eval entry's epoch/lr is not a training point
            continue
        v = _num(obj.get(key))
        if v is not None:
            _series(series, name, path).append(step, v, line)


def read_results(path: str) -> FileEvidence:
    """``train_results.json`` / ``eval_results.json`` / ``all_results.json``: a flat dict of final metrics.
    A malformed file is reported, not raised."""
    size = _size(path)
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not an object")
    except ValueError as err:
        return FileEvidence(FileRead(path, "results", size, size, complete=False,
                                     problems=(f"not valid JSON ({err})",)))
    vals = {k: v for k, v in d.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return FileEvidence(FileRead(path, "results", size, size, items=len(vals)), results=vals)


SAVED_ARGS = ("training_args.yaml", "llamaboard_config.yaml")
"""Arguments LLaMA-Factory saves in output_dir (the WebUI writes both; LF_FACTS.md §5). ``training_args.bin``
(HF's pickled TrainingArguments) is never unpickled: loading a pickle runs code."""


def find_saved_args(run_dir: str) -> tuple[str | None, list[FileRead]]:
    """The run's saved YAML in `run_dir` (``training_args.yaml`` first), and reads to report for what is
    there but not used (the pickled ``training_args.bin``)."""
    found = None
    notes: list[FileRead] = []
    for name in SAVED_ARGS:
        p = os.path.join(run_dir, name)
        if os.path.isfile(p) and found is None and name == "training_args.yaml":
            found = p
    binp = os.path.join(run_dir, "training_args.bin")
    if os.path.isfile(binp):
        notes.append(FileRead(binp, "args", _size(binp), 0, complete=False,
                              problems=("pickled TrainingArguments not loaded (unpickling would run code)",)))
    return found, notes
