"""The text-log line parser: the training bar (which step an event belongs to), metric dicts, run facts,
DeepSpeed memory lines, warnings, exceptions, versions and the launch command. Failure lines are parsed by
readers/runlogs/logfailures.py, moments of the run (evaluation, save, the run's end) by readers/runlogs/logmoments.py (both mixed in); the scan that feeds it is readers/runlogs/logs.py. Patterns: readers/runlogs/logpatterns.py.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from typing import Any

from finetune_doctor.evidence import Fact, KillRecord, MemoryRecord, Notice, Restart, Series
from finetune_doctor.readers.runlogs import logpatterns as pat
from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes, wall_in_year
from finetune_doctor.readers.runlogs.logcontext import (
    FRAME, LOOKAHEAD, Keep, LineContext, dedented, frames_and_packages, num, only_below, traceback_end,
)
from finetune_doctor.readers.runlogs.logfailures import FailureLines
from finetune_doctor.readers.runlogs.logkept import frame_lines_above
from finetune_doctor.readers.runlogs.logmoments import MomentLines
from finetune_doctor.readers.runlogs.npulines import NpuLines, npu_line

MAX_DICT = 2048   # characters of a metric dict parsed (HF's dicts are a few hundred)
FAST_NAMES = ("loss", "grad_norm", "learning_rate", "epoch")   # HF's step dict, in its key order
FLUSH_DICTS = 4096   # step dicts held before they go into the series (bounds the waiting lists)


_BARE_EXC = re.compile(r"^(?P<cls>[A-Z]\w*(?:Error|Exception))(?P<msg>)(?P<colon>:?)$")


def _loading_bar(window: bytes, lo: int, j: int) -> bool:
    """True when the bar ending at `j` is transformers' "Loading checkpoint shards" bar (modeling_utils.py, the
    shards of a from_pretrained): it counts files, not steps. Looked at only while the training total is unknown."""
    k = window.rfind(b"Loading checkpoint shards", lo, j)
    return k >= 0 and window.find(b"\n", k, j) < 0 and window.find(b"\r", k, j) < 0


# ms-swift's trainer logs its step and total in every metric dict ("'global_step/max_steps': '1/94'" in the output
# its documentation shows for examples/train/full/train.sh): the run's plan, as HF's "Total optimization steps" is
SWIFT_STEPS = re.compile(r"'global_step/max_steps': '(?P<step>\d+)/(?P<total>\d+)'")


class TextLogParser(FailureLines, MomentLines, NpuLines):
    """State of one text-log scan. Call `feed_line` for every triggered line, in file order."""

    def __init__(self, path: str):
        self.path = path
        self.keep = Keep()
        self.series: dict[str, Series] = {}
        self.facts: dict[str, Fact] = {}
        self.step: int | None = None          # completed optimizer steps per the last training bar
        self.train_total: int | None = None
        self.bar_total_max = 0
        self.run_starts = 0
        self.last_mem_label: str | None = None
        self.last_mem_label_line = 0
        self.items = 0
        self.nccl_seen: set[tuple] = set()
        self.pending_mem: MemoryRecord | None = None
        self.in_step = False      # a line printed during step self.step + 1 has followed the last bar
        self.origin_votes: dict[str, dict[Any, Any]] = {}
        self.timing: dict[str, Any] = {}
        self.rates: list[float] = []     # seconds per step of the training bar, one per bar seen
        self.units = (b"s/it]", b"it/s]")   # the bar's rate units, the last one found first
        self.fast_steps: list[int | None] = []   # step dicts waiting for `flush`: step, line, four values
        self.fast_lines: list[int] = []
        self.fast_values: list[float] = []

    # -- progress -------------------------------------------------------------------------------------------
    def progress(self, window: bytes, lo: int = 0, hi: int | None = None) -> None:
        """Move the step to the last training bar in window[lo:hi]. Searched backwards from the end (only the last
        bar matters), skipping bars of other loops: an eval loop's total, a datasets.map "examples/s" bar."""
        end = len(window) if hi is None else hi
        for _ in range(64):
            # the unit of the last bar first: the other is then looked for only after it (the two never overlap)
            first, second = self.units
            a = window.rfind(first, lo, end)
            k = window.rfind(second, a + 1 if a >= 0 else lo, end)
            if k < 0:
                k = a
                if k < 0:
                    return
            else:
                self.units = (second, first)
            j = window.rfind(b"|", max(lo, k - 120), k)
            if j < 0:
                end = k
                continue
            m = pat.TQDM_RATE.match(window, j, k + 5)
            end = j
            if m is None:
                continue
            n, total = int(m.group(1)), int(m.group(2))
            if self.timing.get("loop_over"):
                return   # after "***** train metrics *****" no bar is the training loop's (`_moment`)
            if self.train_total is None and total != self.bar_total_max and (
                    self.timing.get("eval_open") or total in self.timing.get("eval_totals", ())):
                # the first bar after "***** Running Evaluation *****" counts evaluation batches (trial 10 case 09:
                # an excerpt that starts after training read "28/55" of the final evaluation as step 28 of 55)
                self.timing["eval_open"] = False
                self.timing.setdefault("eval_totals", set()).add(total)
                continue
            if self.train_total is not None:
                if total != self.train_total:
                    continue
            elif total < self.bar_total_max or _loading_bar(window, max(lo, j - 400), j):
                continue
            else:
                self.bar_total_max = total
            if n != self.step:
                self.in_step = False
                self._rate(m)
            self.step = n
            return

    def _rate(self, u: Any) -> None:
        """Seconds per step from the bar's rate (tqdm prints s/it below 1 it/s, it/s above), the last 4096."""
        try:
            r = float(u.group("rate"))
        except ValueError:
            return
        if r > 0:
            self.rates.append(r if u.group("unit") == b"s/it" else 1.0 / r)
            if len(self.rates) > 8192:
                del self.rates[:4096]

    def during(self) -> int | None:
        """The step in progress: one past the last completed step on the training bar."""
        return None if self.step is None else self.step + 1

    def step_now(self) -> int | None:
        """The step of a line that names none: the training bar's (`logged`), else the last step a step line
        named (another trainer's loop prints no bar)."""
        st = self.logged()
        return self.timing.get("line_step") if st is None else st

    def logged(self) -> int | None:
        """The step a metric dict belongs to: the bar's step, or the step in progress once a line printed
        during that step has followed the bar (see the module docstring)."""
        return self.during() if self.in_step else self.step

    # -- helpers --------------------------------------------------------------------------------------------
    def fact(self, name: str, value: Any, line: int) -> None:
        if name not in self.facts:
            self.facts[name] = Fact(name, value, self.path, line)
            if name == "total_steps":
                self.train_total = int(value)

    def point(self, name: str, step: int | None, value: float, line: int) -> None:
        if self.fast_steps:
            self.flush()
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series(name, self.path)
        s.append(step, value, line)

    # -- one line -------------------------------------------------------------------------------------------
    def feed_line(self, text: str, line: int, context: LineContext) -> int:
        """Parse one triggered line. Returns how many *extra* bytes after the line a parser consumed (0)."""
        text = pat.ANSI.sub("", text).strip("\r\n")
        text, pre = strip_prefixes(text)
        rank = pre.rank if pre.rank is not None else pre.task
        m = pat.RANK_ANY.search(text)   # "[rank3]: " after a tqdm fragment on the same line
        if m:
            rank = int(m.group(1))
            text = text[:m.start()] + text[m.end():]
        self._origin(pre, rank)
        wall = pre.wall if pre.wall is not None else self._glog_wall(text)
        self.items += 1
        if self._failures(text, line, rank, context, pre, wall):
            return 0
        if "'loss': " in text or "{'eval_" in text or "{'train_runtime'" in text:
            if self._metric_dict(text, line) and "Error" not in text and "OVERFLOW" not in text:
                return 0   # the common case in a long log: a metric dict and nothing else on its line
        elif "step:" in text and (" - actor/" in text) and pat.VERL_STEP.search(text):
            self._verl_line(text, line)
        elif "loss" in text or "Loss" in text:
            self._step_line(text, line)
        if "cale" in text or "NaN" in text or "nan" in text or "finite" in text or "Invalid loss" in text:
            self._numerics(text, line, rank)
        if '"current_steps"' in text:
            self._lf_jsonl(text, line)
        if "MA " in text or "CPU Virtual Memory" in text or "see_memory_usage" in text:
            self._memory(text, line, context)
        if "[WARNING|" in text or "[ERROR|" in text or "strongly recommended to train" in text:
            self._warning(text, line)
        if "Saving model checkpoint to" in text or "***** Running " in text or "train metrics *****" in text:
            self._moment(text, line)
        elif "No metric " in text or "Dropping the following result" in text:
            self._run_end(text, line)
        if "Time to load cpu_adam op" in text:   # DeepSpeed op_builder/builder.py:624 (0.19.8): ZeRO-Offload's Adam
            self.fact("cpu_adam", True, line)
        if "examples/s]" in text or "ba/s]" in text or "s/ba]" in text or "[c10d] waitForInput" in text:
            self._barrier_wait(text, line, rank)
        if "Traceback (most recent" in text:
            self.timing["tb_open"] = True
            # CPython's unraisable hook ("Exception ignored in: <obj>", Python/errors.c) prints a traceback of an
            # exception it then ignores (a __del__ at shutdown): it ended nothing (analyzers: no cause)
            self.timing["tb_ignored"] = "Exception ignored in" in (context.previous_line() or "")
            head = text.lstrip(" \t")   # the header's own column (a bar before it on its line is no indent)
            below = dedented(context.following_lines(200), len(text) - len(head) if head.startswith("Tr") else 0)
            frames, pkgs = frames_and_packages(below)
            self.keep.add("notices", Notice(self.path, line, self.during(), "traceback", text.strip()[:500],
                                            {"rank": rank, "frames": frames, "pkgs": pkgs,
                                             "warned": self._warned_before(context)}))
            self._tb_exception(below, line, rank)
        elif 'File "' in text and (not self.timing.get("tb_open") or line > self.timing.get("tb_exc", 1 << 62)) \
                and FRAME.match(text):
            # frames with no "Traceback" header before them since the last exception: a paste cut above the
            # header; the traceback starts here
            self.timing["tb_open"] = True
            lead = len(text) - len(text.lstrip(" \t"))   # CPython prints a frame line at column 2
            below = dedented(context.following_lines(200), lead - 2)
            frames, pkgs = frames_and_packages([text[max(0, lead - 2):]] + below)
            self.keep.add("notices", Notice(self.path, line, self.during(), "traceback",
                                            "frames of a traceback whose header the log does not hold",
                                            {"rank": rank, "frames": frames, "pkgs": pkgs}))
            self._tb_exception(below, line, rank)
        seen = line == self.timing.get("tb_exc") or (
            self._exception(text, line, rank, context) if "Error" in text or "Exception" in text else False)
        if not seen and any(w in text for w in pat.TYPELESS_TRIGGERS) and not pat.EXC.match(text.strip(" `>")) \
                and line > self.timing.get("mismatch_until", 0):
            self._typeless_exception(text, line, rank, context)
        elif not seen and "ChildFailedError" in text and pat.CHILD_FAILED_ALONE.fullmatch(text.strip(" `>*")):
            self.keep.add("notices", Notice(self.path, line, self.during(), "exception", text.strip()[:500],
                                            {"cls": "ChildFailedError", "msg": "", "rank": rank, "typeless": True}))
        if "version" in text:
            self._versions(text, line, context)
        if "Process rank: " in text:
            self._process(text, line)
        if "NCCL INFO" in text or "NCCL WARN" in text:
            # NCCL's own debug lines (NCCL_DEBUG=INFO): kept so that no finding says the files hold no NCCL line
            self.fact("nccl_line", text.strip()[:200], line)
        if "Initializing TorchBackend" in text or "NCCL INFO" in text or (
                "Process rank: " in text and "distributed training: True" in text):
            self._dist_init(text, line, rank, context)
        if "Loading " in text and "dataset" in text and pat.DATA_LOAD.search(text):
            self._data_load(text, line, rank, context)
        if "Failed to load processor: " in text:
            # LLaMA-Factory model/loader.py:109-111 (snapshot): AutoProcessor's exception, logged at INFO
            k = text.find("Failed to load processor: ")
            self.keep.add("notices", Notice(self.path, line, self.during(), "processor-failed",
                                            text[k + 26:].strip()[:300], {"rank": rank}))
        if "train" in text and ("llamafactory-cli" in text or "lmf " in text or "launcher.py" in text
                                or ".py " in text):
            self._launch(text, line)
        self._facts(text, line)
        return 0

    def _exception(self, text: str, line: int, rank: int | None, context: LineContext) -> bool:
        """An exception line (logpatterns.EXC), behind a logger's bracketed prefix, quoted in markdown, or quoted
        inside a sentence or title (EXC_IN: 'Getting "ValueError: ..." while ...'): a Notice of kind "exception".
        True when one was recorded."""
        m = pat.EXC.match(text)
        k = text.find("] ") if m is None and ("Error: " in text or "Exception: " in text) else -1
        while m is None and k >= 0:
            # a line behind a logger's own prefix ("2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [id]
            # OSError: ..."): the exception starts after one of the brackets
            m = pat.EXC.match(text[k + 2:])
            k = text.find("] ", k + 2)
        if m is None and ("`" in text[:4] or text.startswith(">")):
            # an exception line quoted in markdown (`` `[rank1]: RuntimeError: ...` ``, "> ValueError: ...")
            q = text.lstrip(" `>*-").rstrip().rstrip("`")
            m = pat.EXC.match(q)
            text = q if m else text
        if m is None and ("Error: " in text or "Exception: " in text) and "WARN" not in text \
                and "Warning" not in text:
            m, text = self._quoted_exception(text)
        if not m or "CUDA out of memory" in text:
            return False
        if "tb_open" not in self.timing:
            self._cut_head_frames(line, rank, context)
        ignored = bool(self.timing.get("tb_open") and self.timing.pop("tb_ignored", False))   # the traceback it ends
        self.timing["tb_open"] = False
        value = {"cls": m.group("cls"), "msg": m.group("msg")[:300], "rank": rank, "ignored": ignored,
                 "frame_lines": frame_lines_above(context.buf, context.ls, context.le)}
        if m.group("msg").rstrip().endswith("(look up to see its traceback):"):
            # transformers' lazy-module RuntimeError puts the import error it wraps on the next line
            # (utils/import_utils.py _LazyModule._get_module): that line is the cause
            nxt = context.following_lines(1)
            value["msg"] = (m.group("msg").rstrip() + " " + (nxt[0].strip() if nxt else ""))[:600]
        if "loading state_dict" in text:
            # torch's load_state_dict puts one "size mismatch for K: ..." per line below its header
            # (torch/nn/modules/module.py, 2.13.0 wheel :2443-2444, :2639)
            value["details"] = self._mismatches(text, line, context)
        self.keep.add("notices", Notice(self.path, line, self.during(), "exception", text.strip()[:500], value))
        self._interrupt(value["cls"], line, rank, text)
        return True

    def _interrupt(self, cls: str, line: int, rank: int | None, text: str) -> None:
        """A KeyboardInterrupt is also a stop from outside: CPython raises it in the main thread for SIGINT
        (Ctrl-C in the terminal, `kill -INT`, a launcher passing its own interrupt on), so it is recorded as
        the kill "interrupted" beside the exception (analyzers/postmortem/causes.py judges the two)."""
        if cls == "KeyboardInterrupt":
            self.keep.add("kills", KillRecord(self.path, line, self.during(), "interrupted", signal="SIGINT",
                                              rank=rank, text=text.strip()[:300]))

    @staticmethod
    def _warned_before(context: LineContext) -> dict[str, str] | None:
        """The last Python warning (logpatterns.PY_WARNING) in the 8 KiB above a traceback's header, back to the
        previous exception or traceback: {file, line, cat, msg}, or None. A lead where the traceback is cut
        before its exception line (analyzers/postmortem/crashcause.py `warning_lead`)."""
        before = context.buf[max(0, context.ls - 8192):context.ls].decode("utf-8", "replace").splitlines()[-60:]
        for ln in reversed(before):
            ln = strip_prefixes(ln)[0]
            if "Traceback (most recent" in ln or pat.EXC.match(ln):
                return None
            m = pat.PY_WARNING.search(ln) if "Warning: " in ln else None
            if m:
                return {"file": m.group("file"), "line": m.group("line"), "cat": m.group("cat"),
                        "msg": m.group("msg")[:200]}
        return None

    def _tb_exception(self, below: list[str], line: int, rank: int | None) -> None:
        """The line that ends the traceback opened at `line` (`below`: the lines after it) when its class is one
        that logpatterns.EXC does not read (``zipfile.BadZipFile``, ``triton.runtime.errors.OutOfResources``,
        ``StopIteration``: logpatterns.EXC_ANY), so that a traceback whose exception is there is not called cut.
        Recorded as an exception Notice at its own line."""
        k = traceback_end(below)
        if k is None:
            return
        ln = strip_prefixes(below[k])[0].strip()
        m = pat.EXC_ANY.match(ln) if not pat.EXC.match(ln) else _BARE_EXC.match(ln)   # the latter: "Cls:" alone
        if m is None and not pat.EXC.match(ln):
            # a builtin class with an empty message: CPython prints the bare name, no ": " (Lib/traceback.py
            # format_exception_only), e.g. `assert pg is not None` in torch's destroy_process_group (trial 10 case 12)
            m = _BARE_EXC.match(ln)
        if m is None:
            return
        msg = m.group("msg") or ""
        if m.re is _BARE_EXC and m.group("colon"):   # a message that starts with a line feed: its text is below
            msg = next((t for t in (strip_prefixes(x)[0].strip() for x in below[k + 1:k + 4]) if t), "")
            ln = f"{ln} {msg}".strip()
        at = line + k + 1
        self.timing["tb_exc"] = at
        self.keep.add("notices", Notice(self.path, at, self.during(), "exception", ln[:500],
                                        {"cls": m.group("cls"), "msg": msg[:300], "rank": rank,
                                         "ignored": self.timing.pop("tb_ignored", False)}))
        self._interrupt(m.group("cls"), at, rank, ln)

    def _cut_head_frames(self, line: int, rank: int | None, context: LineContext) -> None:
        """The frames above an exception when no traceback was opened before it and the paste starts inside
        one: its first frame line cut before ``File "`` (``pkg/mod.py", line N, in f``), as
        logpatterns.CUT_FRAME reads it, then code lines. Recorded as the traceback they are, so the package the
        exception was raised in is known (analyzers/postmortem/crashcause.py)."""
        before = context.buf[max(0, context.ls - 4096):context.ls].decode("utf-8", "replace").splitlines()[-24:]
        for k, ln in enumerate(before):
            c = pat.CUT_FRAME.match(strip_prefixes(ln)[0])
            if c:
                lines = [f'  File "{c.group("file")}", line {c.group("line")}, in {c.group("func")}'] + before[k + 1:]
                frames, pkgs = frames_and_packages(lines)
                self.keep.add("notices", Notice(self.path, line - (len(before) - k), self.during(), "traceback",
                                                "frames of a traceback whose header the log does not hold",
                                                {"rank": rank, "frames": frames, "pkgs": pkgs}))
                return

    @staticmethod
    def _quoted_exception(text: str) -> tuple[Any, str]:
        """(match, text from the class on) of an exception quoted inside a sentence (logpatterns.EXC_IN); a
        quote or bracket opened just before the class ends the message where it closes."""
        q = pat.EXC_IN.search(text)
        if q is None or text[:q.start()].rstrip(" (").endswith(("except", "raise")):
            return None, text   # a code line a traceback shows ("except OSError: pass"), not an exception
        rest = text[q.start():]
        close = pat.QUOTE_CLOSE.get(text[q.start() - 1]) if q.start() > 0 else None
        if close is not None:
            j = rest.rfind(close)
            rest = rest[:j] if j > len(q.group("cls")) + 2 else rest
        return pat.EXC.match(rest), rest

    def _mismatches(self, text: str, line: int, context: LineContext) -> list[str]:
        """The "size mismatch for K" lines of one load_state_dict error from `line` on (at most 24 after it); the
        lines they take are not read again as exceptions of their own."""
        after = context.following_lines(24)
        last = max((i for i, d in enumerate(after, 1) if "size mismatch for " in d), default=0)
        self.timing["mismatch_until"] = line + last
        return [d.strip()[:400] for d in [text] + after if "size mismatch for " in d][:16]

    def _typeless_exception(self, text: str, line: int, rank: int | None, context: LineContext) -> None:
        """An exception message quoted without its "Cls: " head (an issue title, a sentence, a wrapper's "error:
        ..." line) whose words only one raise site prints (logpatterns.TYPELESS_EXC): recorded as that exception,
        so a one-line paste is a crash, not "nothing to diagnose"."""
        for rx, cls in pat.TYPELESS_EXC:
            m = rx.search(text)
            if m:
                self.timing["tb_open"] = False
                value = {"cls": cls, "msg": m.group("msg")[:300], "rank": rank, "typeless": True}
                if m.group("msg").startswith("size mismatch for "):
                    value["details"] = self._mismatches(text, line, context)
                self.keep.add("notices", Notice(self.path, line, self.during(), "exception", text.strip()[:500],
                                                value))
                return

    def _barrier_wait(self, text: str, line: int, rank: int | None) -> None:
        """A c10d store wait that timed out and the dataset-preprocessing bar on the same line (tqdm leaves the
        cursor on its bar, so the next output starts there): analyzers/postmortem/collectives.barrier_facts."""
        m = pat.C10D_SOCKET_TIMEOUT.search(text)
        if m:
            self.keep.add("notices", Notice(self.path, line, self.during(), "store-timeout", text.strip()[:300],
                                            {"rank": rank, "ms": int(m.group("ms"))}))
        b = pat.DATASETS_BAR.search(text) if "/s]" in text or "s/ba]" in text else None
        if b:
            secs = 0
            for part in b.group("el").split(":"):
                secs = secs * 60 + int(part)
            self.keep.add("notices", Notice(self.path, line, self.during(), "prep-bar", b.group(0)[:200],
                                            {"desc": b.group("desc").strip(), "pct": int(b.group("pct")),
                                             "elapsed_s": secs}))

    def _failures(self, text: str, line: int, rank: int | None, context: LineContext, pre: Any,
                  wall: float | None) -> bool:
        """The failure lines (logfailures.py, npulines.py); True when the line was fully consumed."""
        if npu_line(text) and self._npu(text, line, rank, context, wall):
            return True
        if "out of memory" in text or "OutOfMemoryError" in text or "ALLOC_FAILED" in text \
                or "cudaErrorMemoryAllocation" in text or "OUT_OF_MEMORY" in text or "RESOURCE_EXHAUSTED" in text \
                or "OOM when allocating" in text or "Out of memory error on GPU" in text:
            if self._oom(text, line, rank, context):
                self.fail_wall(wall)
                return True
        if ("OVERFLOW!" in text or "overflow!" in text or "verflow detected" in text or "dynamic loss scale from" in text
                or "reducing loss scale" in text):
            self._overflow(text, line, rank)
        if ("at minimum - cannot" in text and pat.DS_MIN_SCALE.search(text)) or (
                "Minimum loss scale reached" in text and pat.OTHER_MIN_SCALE.search(text)):
            m = pat.OTHER_MIN_SCALE.search(text)
            if m:
                self.fact("min_loss_scale", num(m.group("min")), line)
            self.keep.add("aborts", Notice(self.path, line, self.during(), "min-loss-scale", text.strip()))
        if "NCCL" in text or "nccl" in text or "Watchdog caught" in text or "watchdog got stuck" in text \
                or "lagging" in text or "collective #" in text:
            self._nccl(text, line, rank, wall)
        if ("CUDA error" in text or "cuDNN error" in text or "Assertion " in text or "CUBLAS_STATUS_" in text
                or "untime error (" in text or "CUDA warning" in text or "cudaError" in text
                or "CUDA Error" in text or "CUDA_ERROR_" in text or "cudaSuccess" in text or "CUDNN_STATUS_" in text
                or "CUDA driver error" in text or "HIP error" in text or "Cuda failure" in text
                or "driver version is insufficient" in text or "driver on your system is too old" in text
                or "llegal memory access was" in text or (" at line " in text and " in file " in text)) \
                and "CUBLAS_STATUS_ALLOC_FAILED" not in text:
            self._device(text, line, rank, context, wall)
        if "NVRM" in text:
            self._kernel(text, line, pre)
        if ("Killed" in text or "exitcode" in text or "exits with return code" in text or "oom" in text
                or "Out Of Memory" in text or "Out of memory" in text or "received by PID" in text
                or "can't allocate memory" in text or "DefaultCPUAllocator" in text
                or "not enough memory: you" in text or "WinError 1455" in text
                or "sigkill_handler" in text or "Segmentation fault" in text
                or "Bus error" in text or "Illegal instruction" in text or "Task was killed due" in text
                or "Memory on the node" in text or "encountered in worker" in text or "is killed by signal" in text
                or "death signal" in text or "SignalException" in text or "Caught signal " in text
                or "with exit code -" in text or "died with <Signals." in text or "MemoryError" in text
                or "CANCELLED AT" in text or "Received SIGTERM" in text or "OOMKilled" in text or "Worker exit type" in text):
            self._kill(text, line, rank, context)
        if "Root Cause (first" in text:
            self._child_failed(line, context)
        elif text.strip() == "Failures:":
            self._child_failures(line, context)
        return False

    def _origin(self, pre: Any, rank: int | None) -> None:
        """Count what the prefixes say about who wrote the line (the file's rank, local rank, host) and its time."""
        o = self.origin_votes
        if rank is not None:
            o.setdefault("rank", {}).setdefault(rank, 0)
            o["rank"][rank] += 1
        if pre.local_rank is not None:
            o.setdefault("local_rank", {}).setdefault(pre.local_rank, 0)
            o["local_rank"][pre.local_rank] += 1
        if pre.host is not None:
            o.setdefault("host", {}).setdefault(pre.host, 0)
            o["host"][pre.host] += 1
        if pre.wall is not None:
            t = self.timing
            if t.get("first_wall") is None:
                t["first_wall"] = pre.wall
            t["last_wall"] = pre.wall

    def _glog_wall(self, text: str) -> float | None:
        """The time of a c10 glog prefix ``[E1003 18:37:01.832146912 File.cpp:N]`` (month not zero-padded)."""
        m = pat.GLOG_TIME.search(text)
        if not m:
            return None
        md = m.group("md")
        try:
            return wall_in_year(int(md[:-2]), int(md[-2:]), int(m.group("h")), int(m.group("mi")),
                                float(m.group("s")))
        except (ValueError, OverflowError):
            return None

    def _versions(self, text: str, line: int, context: LineContext) -> None:
        """Package versions a log states (``llamafactory-cli env``, ``ds_report``, DeepSpeed's init, NCCL INFO):
        facts ``version:<package>``, the first of each wins. The env block is read from its first line on (its
        other lines hold no trigger word)."""
        lines = [(line, text.strip())]
        if "`llamafactory` version" in text:
            lines += [(line + k, strip_prefixes(t)[0].strip()) for k, t in enumerate(context.following_lines(24), 1)]
        for ln, s in lines:
            for pkg, rx in pat.VERSION_LINES:
                name = f"version:{pkg}"
                if name in self.facts:
                    continue
                m = rx.search(s)
                if m:
                    self.fact(name, m.group("v"), ln)

    def _dist_init(self, text: str, line: int, rank: int | None, context: LineContext) -> None:
        """A distributed set-up line the log ends on: DeepSpeed's process-group set-up (logpatterns.DIST_INIT),
        LLaMA-Factory's "Process rank: R, ... distributed training: True" (printed once the process group is up),
        or an NCCL INFO line (NCCL_DEBUG=INFO: communicator set-up, done at the first collective), with nothing
        but more set-up lines or blank ones after it up to the end of the file (the bytes after a line reach
        LOOKAHEAD unless the file ends first, so only the last 16 KiB are decoded). A set-up line before other
        output is not kept. analyzers/postmortem/health.py reads a start-up hang from it."""
        if len(context.buf) - context.le >= LOOKAHEAD:
            return   # more than LOOKAHEAD bytes follow: not the end of the file (and no copy of them is made)
        if not only_below(context, pat.DIST_INIT_TAIL):
            return
        m = pat.DIST_INIT.search(text)
        kind = "deepspeed" if m else "nccl" if "NCCL INFO" in text else "llamafactory"
        self.keep.add("notices", Notice(self.path, line, self.during(), "dist-init", text.strip()[:300],
                                        {"rank": rank, "kind": kind, "backend": m.group("backend") if m else None,
                                         "ends_log": True}))

    def _data_load(self, text: str, line: int, rank: int | None, context: LineContext) -> None:
        """A dataset-loading line (logpatterns.DATA_LOAD) with nothing but more loading lines or blank ones after
        it up to the end of the file (as `_dist_init` decides it): the log stops while the data loads.
        analyzers/postmortem/health.py reads a stop from it."""
        if len(context.buf) - context.le >= LOOKAHEAD:
            return
        if only_below(context, pat.DATA_LOAD):
            self.keep.add("notices", Notice(self.path, line, self.during(), "data-load", text.strip()[:300],
                                            {"rank": rank, "ends_log": True}))

    def _process(self, text: str, line: int) -> None:
        """LLaMA-Factory's per-process line: this file's rank and its GPU (hparams/parser.py:652-653)."""
        m = pat.LF_PROCESS.search(text)
        if m:
            self.origin_votes.setdefault("lf_rank", {}).setdefault(int(m.group("rank")), m.group("dev"))
            self.fact("world_size", int(m.group("world")), line)

    def _launch(self, text: str, line: int) -> None:
        """The launch command the log echoes: config YAML and overrides (fact ``launch``)."""
        if "launch" in self.facts:
            return
        m = pat.LAUNCH_LF.search(text) or pat.LAUNCH_TORCHRUN.search(text)
        if m:
            self.fact("launch", {"config": m.group("yaml"), "overrides": m.group("over").split(), "form": "yaml"},
                      line)
            return
        m = pat.LAUNCH_ARGPARSE.search(text)
        if m and "--" in m.group("args"):
            self.fact("launch", {"config": None, "args": m.group("args").split(), "form": "argparse"}, line)

    def _facts(self, text: str, line: int) -> None:
        for name, kw, rx, conv in pat.FACTS:
            if name in self.facts or kw not in text:
                continue
            m = rx.search(text)
            if m:
                try:
                    v = m.group("v")
                    self.fact(name, conv(v.replace(",", "")) if conv in (int, float) else conv(v), line)
                except ValueError:
                    pass
        if "zero_stage" not in self.facts and pat.ZERO3_DETECTED.search(text):
            self.fact("zero_stage", 3, line)
        if pat.RUN_START.search(text):
            self.run_starts += 1
            if self.run_starts > 1:
                self.keep.add("restarts", Restart(self.path, line, self.step, "relaunch",
                                                  f"training started again (launch #{self.run_starts} in this log)"))
        m = pat.RESUME.search(text)
        if m:
            st = int(m.group("step")) if m.group("step") else None
            self.keep.add("restarts", Restart(self.path, line, st, "resume", text.strip()[:200]))

    # -- metrics ----------------------------------------------------------------------------------------------
    def train_dict(self, groups: tuple[bytes, ...], line: int) -> bool:
        """A line that is exactly HF's step dict (`HF_TRAIN_DICT_LINE_B`), given as its four number fields;
        False (nothing recorded) when float() does not read one of them: the line parser takes such a line. The
        points wait in flat lists and go into the series in bulk (`flush`) before any other point of those series,
        at the end of the file and every FLUSH_DICTS dicts, so the series are the same as when each point is
        appended as it comes (what `_metric_dict` records for the same line)."""
        try:
            vals = list(map(float, groups))
        except ValueError:
            return False
        self.items += 1
        if not self.fast_steps:
            for name in FAST_NAMES:   # created now, in the order the line parser would create them
                if name not in self.series:
                    self.series[name] = Series(name, self.path)
        st = self.step
        self.fast_steps.append(st + 1 if self.in_step and st is not None else st)   # `logged`
        self.fast_lines.append(line)
        self.fast_values.extend(vals)
        if len(self.fast_steps) >= FLUSH_DICTS:
            self.flush()
        return True

    def flush(self) -> None:
        """Move the waiting step-dict points into their series (see `train_dict`)."""
        if not self.fast_steps:
            return
        steps, lines, vals = self.fast_steps, self.fast_lines, self.fast_values
        self.fast_steps, self.fast_lines, self.fast_values = [], [], []
        plain = Series.plain(steps, lines)
        for k, name in enumerate(FAST_NAMES):
            self.series[name].extend(steps, vals[k::4], lines, plain)

    def _metric_dict(self, text: str, line: int) -> bool:
        m = pat.HF_TRAIN_DICT.search(text)
        if m and not pat.LF_CALLBACK.search(text, 0, m.start()):
            # the common line of a long log, HF's step dict of transformers 4.38+: four numbers, no other key
            try:
                vals = [float(x) for x in m.groups()]
            except ValueError:
                vals = None
            if vals is not None:
                st = self.logged()
                for name, v in zip(("loss", "grad_norm", "learning_rate", "epoch"), vals):
                    self.point(name, st, v, line)
                return True
        i = text.find("{'")
        body = text[i:] if i >= 0 else text[text.find("'loss'"):] if "'loss'" in text else text
        j = body.find("}")
        body = body[:j + 1] if 0 <= j < MAX_DICT else body[:MAX_DICT]   # one dict: HF prints one per line
        kv: dict[str, float] = {}
        for m in pat.KV.finditer(body):
            v = num(m.group("v"))
            if v is not None:
                kv[m.group("k")] = v
        if not kv:
            return False
        prefix = "lf_" if pat.LF_CALLBACK.search(text[:max(i, 0)] if i >= 0 else text) else ""
        if pat.is_summary(kv):
            self.keep.add("notices", Notice(self.path, line, self.logged(), "train-summary", body[:500], kv))
            return True
        if "loss" in kv:
            m = SWIFT_STEPS.search(body)   # ms-swift's own step and total in its dict
            if m and (self.step is None or self.timing.get("swift_steps")):   # no training bar gives the step
                self.step, self.timing["swift_steps"] = int(m.group("step")), True
                self.fact("total_steps", int(m.group("total")), line)
            if "rewards/chosen" in kv or "logps/chosen" in kv:
                # trl's preference trainers log these (DPOTrainer: rewards/margins too; KTOTrainer: kl), so the
                # stage is read from the log when no config is given (analyzers/postmortem/refmodel.py)
                self.fact("lf_stage", "kto" if "kl" in kv else "dpo", line)
            for key, name in (("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "learning_rate"),
                              ("epoch", "epoch")):
                if key in kv:
                    self.point(prefix + name, self.logged(), kv[key], line)
            return True
        if "eval_loss" in kv:
            self.point(prefix + "eval_loss", self.logged(), kv["eval_loss"], line)
            return True
        return False

    def _verl_line(self, text: str, line: int) -> None:
        """verl's console metrics line (logpatterns.VERL_STEP): the actor's grad norm and learning rate at the
        step; a policy loss only when non-finite (a NaN is evidence; a signed RL loss is no curve to judge)."""
        step = int(pat.VERL_STEP.search(text).group("step"))
        self.timing["line_step"] = step
        for m in pat.VERL_METRIC.finditer(text):
            x = num(m.group("v"))
            if x is None:
                continue
            k = m.group("k")
            if k == "actor/grad_norm":
                self.point("grad_norm", step, x, line)
            elif k == "actor/lr":
                self.point("learning_rate", step, x, line)
            elif not math.isfinite(x):
                self.point("loss", step, x, line)

    def _step_line(self, text: str, line: int) -> None:
        """Another trainer's step line (logpatterns.py `STEP_LINE_*`): loss, grad norm and learning rate at the
        step the line names, else at the count of a tqdm bar on the same line (`TQDM_COUNT`). A line without
        either is read only when its loss is non-finite (insightface's "Loss nan" half of a wrapped line: a NaN
        is evidence wherever it is printed), at the step in progress; a finite loss without a step is left alone
        (a loss named in prose)."""
        loss = pat.STEP_LINE_LOSS.search(text)
        if loss is None:
            self._bar_postfix(text, line)
            return
        m = pat.STEP_LINE_STEP.search(text)
        step = int(m.group(1)) if m else None
        if m is None and "[" in text and ("Epoch" in text or "Iter(" in text):
            e = pat.STEP_LINE_EPOCH_ITER.search(text)
            if e and e.group("it"):
                step = int(e.group("it"))
            elif e:
                step = (int(e.group("e")) - (0 if e.group("colon") else 1)) * int(e.group("n")) + int(e.group("i"))
            elif "Epoch " in text and "it/s," in text:
                # Lightning's bar: its last render on the line (tqdm's carriage returns keep earlier ones)
                text = text[text.rfind("Epoch "):] if text.count("Epoch ") > 1 else text
                b = pat.LIGHTNING_BAR.search(text)
                loss = pat.STEP_LINE_LOSS.search(text) if b else loss
                if b and loss:
                    step = int(b.group("e")) * int(b.group("n")) + int(b.group("i"))
        if step is None:
            # a bar on the same line counts the step its values were printed at (torchtune's "1|20|Loss: 1.93:
            # 2%|..| 20/1000 [...]" sets its description with the bar's own update; tqdm/std.py format_meter)
            bars = list(pat.TQDM_COUNT.finditer(text)) if " [" in text and "/" in text else ()
            step = int(bars[-1].group("n")) if bars else None
        if step is None:
            x = num(loss.group(1))
            if x is not None and not math.isfinite(x):
                self.point("loss", self.step_now(), x, line)
            return
        self.timing["line_step"] = step
        x = num(loss.group(1))
        if x is not None:
            self.point("loss", step, x, line)
        low = text.lower()   # the two keys' expressions are case-blind; most step lines hold neither word
        for rx, name, present in ((pat.STEP_LINE_GNORM, "grad_norm", "norm" in low),
                                  (pat.STEP_LINE_LR, "learning_rate", "lr" in low or "learning" in low)):
            if not present:
                continue
            v = rx.search(text)
            x = num(v.group(1)) if v else None
            if x is not None:
                self.point(name, step, x, line)

    # the postfix keys read as the supervised loss curve (signed RL losses - policy, value, KL - only when non-finite)
    SUPERVISED_LOSS_KEYS = ("loss", "train_loss", "gpt_loss", "lm_loss", "sft_loss", "nll_loss", "ce_loss")

    def _bar_postfix(self, text: str, line: int) -> None:
        """The losses a tqdm bar's postfix shows (logpatterns.TQDM_POSTFIX: "..| 20/1000 [.., gpt_loss=nan,
        loss_mean=nan, lr=2e-6]"), at the bar's count: a key of SUPERVISED_LOSS_KEYS is the loss curve; another
        key with "loss" in its name (a policy or auxiliary loss, which may be signed) only when non-finite; lr /
        learning_rate and grad_norm as named. The last render on the line (tqdm's carriage returns keep earlier
        ones)."""
        bars = list(pat.TQDM_POSTFIX.finditer(text))
        if not bars:
            return
        b = bars[-1]
        step = int(b.group("n"))
        seen_loss = False
        for item in b.group("post").split(","):
            k, _, v = item.strip().partition("=")
            key = k.strip().lower()
            x = num(v.strip())
            if x is None:
                continue
            if "loss" in key and "scale" not in key and not seen_loss:
                if key in self.SUPERVISED_LOSS_KEYS or not math.isfinite(x):
                    self.point("loss", step, x, line)
                    seen_loss = True
            elif key in ("lr", "learning_rate"):
                self.point("learning_rate", step, x, line)
            elif key in ("grad_norm", "gnorm"):
                self.point("grad_norm", step, x, line)

    def _lf_jsonl(self, text: str, line: int) -> None:
        i = text.find("{")
        try:
            d = json.loads(text[i:])
        except (ValueError, TypeError):
            return
        if not isinstance(d, dict):
            return
        st = d.get("current_steps")
        for key, name in (("loss", "loss"), ("lr", "learning_rate"), ("epoch", "epoch"), ("eval_loss", "eval_loss")):
            v = d.get(key)
            if isinstance(v, (int, float)):
                self.point(name, st, float(v), line)

    # -- memory -----------------------------------------------------------------------------------------------
    def _memory(self, text: str, line: int, context: LineContext) -> None:
        m = pat.MEM_MA.search(text)
        if m:
            label = context.previous_line()
            label = pat.DS_PREFIX.sub("", label).strip() if label else None
            if label and (pat.MEM_MA.search(label) or pat.MEM_CPU.search(label)):
                label = None
            rec = MemoryRecord(self.path, line, self.during(), label, float(m.group("ma")), float(m.group("mma")),
                               float(m.group("ca")), float(m.group("mca")))
            self.keep.add("memory", rec)
            if label:
                self.last_mem_label, self.last_mem_label_line = label, line
            return
        m = pat.MEM_CPU.search(text)
        mem = self.keep.lists.get("memory")
        if m and mem and mem[-1].line >= line - 2 and mem[-1].cpu_used is None:
            mem[-1] = replace(mem[-1], cpu_used=float(m.group("used")), cpu_percent=float(m.group("pct")))
        elif m:
            self.keep.add("memory", MemoryRecord(self.path, line, self.during(), None, cpu_used=float(m.group("used")),
                                                 cpu_percent=float(m.group("pct"))))
