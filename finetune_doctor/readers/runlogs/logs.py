"""Read captured training output (stdout/stderr via tee, launcher output, multi-rank interleaved logs) and
nvidia-smi CSV logs, streaming, in bounded memory, without judging anything.

How a text log is read. The file is scanned in 8 MiB chunks with one byte-level trigger expression; only the
lines that hold a trigger are decoded and parsed, so a multi-gigabyte log costs one C-level regex pass plus
a few microseconds per interesting line, and memory stays at a few chunks plus what is kept (metric series
in typed arrays, capped record lists). A line is delimited by ``\\n`` *or* ``\\r`` for parsing, because tqdm
rewrites its bar with carriage returns, but line numbers count ``\\n`` only (what an editor shows).
Binary junk, NUL bytes, invalid UTF-8, UTF-16 files (PowerShell ``tee``) and gzip-compressed logs are read;
what could not be read is reported in the returned `FileRead`.

Which step an event belongs to: the last training progress bar seen before it (``129/882 [40:17<3:41:05,
17.62s/it]`` means 129 optimizer steps are done), so an OOM, overflow or NCCL timeout printed after that bar
happened *during* step 130; a metric dict printed after the bar belongs to step 129 (HF's ProgressCallback
updates the bar in ``on_step_end`` before ``on_log`` writes the dict). The one exception is decided from the
text: once a line printed *during* step 130 (a DeepSpeed loss-scale line, which ``engine.step()`` prints before
HF increments ``global_step``) has followed bar 129, a metric dict after it belongs to step 130 -- the dict of
step 129 cannot come after step 130's optimizer step. This is what a pasted terminal shows: ``tqdm.write``
erases bar 130 before printing the dict, so the dict seems to follow bar 129 (case 065: ``379/2724 ...
OVERFLOW`` then ``{'loss': 2.0491, ...}`` is the step-380 log of a ``logging_steps: 10`` run). An overflow
that reduced the scale still completes its step (DeepSpeed skips the update, HF counts the step). Bars of other totals (eval loops,
``datasets.map``) are ignored once the training total is known from "Total optimization steps = N".

Line prefixes (a log viewer's line numbers, ``[rankN]:``, timestamps, Slurm and Kubernetes prefixes, a Markdown
quote, colour codes, Ray's worker prefix) are taken off before matching (readers/runlogs/lineprefix.py); a paste
whose long lines a terminal broke at its width is read joined back (readers/runlogs/unwrap.py). Module map:
readers/runlogs/logpatterns.py (every pattern, with the upstream line that prints it), readers/runlogs/logparse.py (the line parser), readers/runlogs/logfailures.py (failure lines),
readers/runlogs/logcontext.py (the bytes around a line). Cost is linear in the file: each hit hands the parsers at most
`HIT_BEFORE` + `HIT_AFTER` bytes, and the hits inside that window are not parsed again.

The common hit of a long log is HF's step dict alone on its line. It skips the line parser: one bytes expression
(logpatterns.py `HF_TRAIN_DICT_LINE_B`, the line parser's own dict expression plus the line end) and float() take
its four values, and the points go into the series in bulk (TextLogParser.train_dict / flush); a line float()
cannot read goes to the line parser. tests/test_postmortem_fastpath.py checks both give the same FileEvidence.
With grep (readers/runlogs/loggrep.py) the hits come with their line numbers, so only the bytes after a file's last hit
are counted for line feeds; benchmarks/results/postmortem_ranks.md has what each step saved.

Exact message texts and their version differences: reference/deepspeed/log_patterns.md (§2 DeepSpeed loss
scaling, §3 see_memory_usage, §5 PyTorch CUDA OOM by version, §6 NCCL watchdog, §7 HF Trainer dicts, §8 process
death) and the examples in reference/deepspeed/log_examples/ and reference/llamafactory/log_examples/.
"""

from __future__ import annotations

import codecs
import gzip
import os
import re
import stat
import statistics
import zlib
from dataclasses import replace
from typing import Any, Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.evidence import FileEvidence, FileRead, Notice
from finetune_doctor.readers.config import stack
from finetune_doctor.readers.runlogs import loggrep, logkept, pasteblocks, statedwords, unwrap, userwords
from finetune_doctor.readers.runlogs import logpatterns as pat
from finetune_doctor.readers.runlogs.logcontext import LOOKAHEAD, LOOKBACK, LineContext
from finetune_doctor.readers.runlogs.logparse import TextLogParser
from finetune_doctor.readers.runlogs.logpatterns import size_bytes

CHUNK = 8 << 20          # bytes read at a time
FAST_DICTS = True        # HF's step dicts in bulk (tests/test_postmortem_fastpath.py compares it with False)
MAX_PENDING = 16 << 20   # a "line" longer than this is split (a log without newlines); the buffers of one such
# line (pending + chunk, the piece with its carried tail) then stay near 3 x 16 MiB, where 64 MiB gave ~200 MiB RSS
HIT_BEFORE = 2 << 10     # bytes before a hit the parsers see (the line start of a long line is cut there)
HIT_AFTER = 8 << 10      # bytes after a hit the parsers see (a CUDA OOM message is about 1 KiB)
GZIP_MAGIC = b"\x1f\x8b"
_CONTROL = bytes([*range(9), *range(14, 32), 127])   # control bytes that text does not hold


def regular_size(path: str) -> int:
    """The size in bytes of `path` if it is a regular file (after symlinks). A FIFO, a device such as
    /dev/zero, a socket or a directory would block or never end: InputError naming the path, as for a symlink
    loop or a path too long for the OS."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=path) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"not a regular file ({file_type(st.st_mode)}); not read", file=path)
    return st.st_size


def file_type(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _origin(p: TextLogParser) -> dict[str, Any]:
    """Who wrote the file, from its lines: the rank most of its ``[rankN]:`` prefixes name (or LLaMA-Factory's
    "Process rank" line, which also names its device, or NCCL's communicator line "comm 0x.. rank R nranks N",
    with ``world`` N), the local rank of torchrun's prefix, the host."""
    v = p.origin_votes
    out: dict[str, Any] = {}
    for key in ("rank", "local_rank", "host"):
        if v.get(key):
            best = max(v[key].items(), key=lambda kv: kv[1])
            out[key] = best[0]
            if len(v[key]) > 1:
                out[key + "s"] = sorted(v[key])
    lf = v.get("lf_rank")
    if lf and len(lf) == 1:
        (r, dev), = lf.items()
        out.setdefault("rank", r)
        if ":" in str(dev):
            try:
                out["gpu"] = int(str(dev).rsplit(":", 1)[1])
            except ValueError:
                pass
    nc = v.get("nccl_rank")
    if nc and "rank" not in out:
        # NCCL's communicator lines (logfailures.NCCL_COMM): one process's rank in the largest communicator
        # (the world); several pids in one file are several writers, so no one rank is the file's
        world = max(n for _, n in nc.values())
        ranks = {r for r, n in nc.values() if n == world}
        if len(ranks) == 1:
            out["rank"] = ranks.pop()
            out["world"] = world
        else:
            out["ranks"] = sorted(ranks)
    if out:
        out["source"] = "log lines"
    return out


def _with_comm_rank(recs: Any, origin: dict[str, Any]) -> Any:
    """The NCCL records of a file whose one writer NCCL's communicator line named (`_origin`'s ``world``: no
    ``[rankN]`` prefix decided it), with that rank where the line printed none (torch's watchdog line "Watchdog
    caught collective operation timeout" carries no rank of its own in some releases)."""
    if not recs or origin.get("world") is None or origin.get("rank") is None:
        return recs
    out = [replace(r, rank=origin["rank"]) if r.rank is None else r for r in recs]
    return type(recs)(out) if isinstance(recs, tuple) else out


def _timing(p: TextLogParser) -> dict[str, Any]:
    t = dict(p.timing)
    for k in ("tb_open", "tb_exc", "scale_reported", "line_step"):   # the parser's own running state, not a timing
        t.pop(k, None)
    if p.rates:
        t["sec_per_step"] = statistics.median(p.rates)
        t["rate_samples"] = len(p.rates)
    return t


def open_chunks(path: str, problems: list[str]) -> Iterator[bytes]:
    """Yield the file's bytes in CHUNK pieces: gzip is decompressed; UTF-16 (with a BOM) is re-encoded to UTF-8."""
    with open(path, "rb") as raw:
        head = raw.read(4)
        raw.seek(0)
        if head[:2] == b"\x1f\x8b":
            fh: Any = gzip.open(raw)
        else:
            fh = raw
        if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
            dec = codecs.getincrementaldecoder("utf-16")(errors="replace")
            problems.append("UTF-16 text (re-encoded to UTF-8 for reading)")
            while True:
                b = fh.read(CHUNK)
                if not b:
                    tail = dec.decode(b"", final=True)
                    if tail:
                        yield tail.encode("utf-8")
                    return
                yield dec.decode(b).encode("utf-8")
        try:
            while True:
                b = fh.read(CHUNK)
                if not b:
                    return
                yield b
        except (OSError, EOFError, zlib.error) as err:  # a truncated or corrupt gzip stream
            what = "corrupt gzip stream" if head[:2] == GZIP_MAGIC else "read error"
            problems.append(f"stopped early: {what} ({type(err).__name__}: {err})")


def looks_binary(sample: bytes) -> bool:
    """True when a file's leading bytes are not text: a NUL or >10 % control bytes in the first 512 bytes
    (an event file, a pickle, an image), or >30 % in the whole sample. UTF-16 and gzip are text here."""
    if not sample:
        return False
    if sample[:2] in (b"\xff\xfe", b"\xfe\xff") or sample[:2] == b"\x1f\x8b":
        return False

    def bad(b: bytes) -> int:   # bytes < 9, 14..31 and 127, counted at C speed
        return len(b) - len(b.translate(None, _CONTROL))

    head = sample[:512]
    if b"\x00" in head or bad(head) > len(head) * 0.1:
        return True
    return bad(sample) > len(sample) * 0.3


def read_text_log(path: str, count_dicts: bool = False) -> FileEvidence:
    """Stream one captured log and extract every metric, OOM, loss-scale, NCCL, kill and warning line.

    Returns a `FileEvidence` whose `read` says how many bytes and lines were read and what went wrong.
    Memory: a few 8 MiB buffers plus the kept series/records, whatever the file size.
    Raises InputError when the path is not a regular file or cannot be opened at all.
    `count_dicts`: when grep finds the words (a plain file of at least loggrep.MIN_BYTES), HF's step-dict lines
    are counted (`FileEvidence.counted_dicts`), not parsed: their curves are then missing from the evidence, and
    the caller re-reads in full the file it keeps the curves of (readers/runlogs/runlayout.py `collect`). Every
    other line is read as without it; the bar rate is sampled at the remaining hits and at each chunk's end.
    """
    problems: list[str] = []
    size = regular_size(path)
    try:
        with open(path, "rb") as fh:
            sample = fh.read(65536)
    except OSError as err:
        raise InputError(f"cannot read log: {err.strerror or err}", file=path) from None
    if looks_binary(sample):
        return FileEvidence(FileRead(path, "unknown", size, 0, complete=False,
                                     problems=("not a text file (binary content); skipped",)))
    plain = sample[:2] not in (GZIP_MAGIC, b"\xff\xfe", b"\xfe\xff")
    joined = unwrap.unwrap(sample) if plain and size <= len(sample) else None
    if joined is not None:   # a paste whose long lines a terminal broke at its width: read as joined back
        sample = joined
        return _paste(scan_text(path, size, iter([joined]), problems), sample)
    with loggrep.trigger_offsets(path, pat.TRIGGER_WORDS, count_dicts) if plain and size >= loggrep.MIN_BYTES \
            else loggrep.none() as hits:
        fe = scan_text(path, size, open_chunks(path, problems), problems, hits)
    if hits is not None and not hits.ok:   # grep failed part-way: its offsets cannot be trusted
        return scan_text(path, size, open_chunks(path, []), [])
    if hits is not None and hits.dicts:
        fe = replace(fe, counted_dicts=hits.dicts)
    return _paste(fe, sample) if size <= len(sample) and plain else fe


def _paste(fe: FileEvidence, sample: bytes) -> FileEvidence:
    """A paste's evidence with what only a short file gives: the exception its last line is, its whole text for
    the analyzers' words (readers/runlogs/logkept.py, so that none reads it again), and the user's words in it."""
    fe = replace(_exception_alone(fe, sample), text=sample[:logkept.PASTE_TEXT].decode("utf-8", "replace"))
    if len(sample) <= userwords.MAX_PASTE_BYTES:   # decided by size first: no long log reaches the prose test
        fe = _user_words(fe, sample)
    return fe


def _user_words(fe: FileEvidence, data: bytes) -> FileEvidence:
    """A short file that reads as the user's description of the failure (readers/runlogs/userwords.py): its
    symptom and phase in `FileEvidence.said`. Kept beside whatever the line scan found in it: whether the words
    count is decided once every file's evidence is known (analyzers/postmortem/said.py: only where no log line
    gave a diagnosis)."""
    text = data.decode("utf-8", "replace")
    env = stack.pasted_versions(pasteblocks.blank_blocks(text)[1])
    if env:   # an environment block pasted with the report: its versions, read as --env reads them
        fe = replace(fe, env_versions=env)
    words = pasteblocks.blank_blocks(text)[0]
    versions, setup = statedwords.stated_versions(words), statedwords.setup_words(words)
    # ZeRO-3 and an MoE model may be said by the pasted config itself (`deepspeed: ds_z3_config.json`,
    # `model_name_or_path: Qwen/Qwen3-30B-A3B`), which the words' reading blanks
    whole = statedwords.setup_words(text)
    setup.update({k: setup[k] or whole[k] for k in ("zero3", "moe")})
    if versions or any(setup.values()):   # what the words state of the stack and set-up, symptom or not
        fe = replace(fe, stated={"versions": versions, "setup": setup})
    said = userwords.read_words(text) or userwords.read_words_above_traceback(text)
    if said is None:
        return fe
    return replace(fe, said={**said, "file": fe.read.path})


_FULLWIDTH_COLON = re.compile(r"(Error|Exception)：\s*")


# a C/C++ compiler's own diagnostic (GCC and Clang print "FILE:LINE:COL: fatal error: MESSAGE", then "compilation
# terminated."): a build that torch.compile (Inductor's C++/Triton builds), a JIT extension (torch.utils.
# cpp_extension, DeepSpeed's op builders) or a package install ran, and that stopped there
COMPILER_FATAL = re.compile(r"^[\s`>*-]*(?P<src>[^\s:]+\.(?:h|hh|hpp|c|cc|cpp|cxx|cu|cuh)):\d+(?::\d+)?: "
                            r"(?P<msg>fatal error: \S.*?)[\s`]*$")


def _exception_alone(fe: FileEvidence, data: bytes) -> FileEvidence:
    """A short file in which the scan found nothing at all, whose last line shaped like an exception of a class
    outside builtins (logpatterns.EXC_ALONE: "zipfile.BadZipFile: ...", "triton.runtime.errors.OutOfResources:
    ..."; no trigger word is in such a line) is that exception: a one-line paste is a crash, not "nothing to
    diagnose". So is a builtin exception typed with a full-width colon ("AssertionError：
    ..."). Files with any other evidence are returned unchanged. With no such line, the first C/C++ compiler fatal
    error (`COMPILER_FATAL`) is the failure, as class ``CompileError``."""
    if any((fe.series, fe.ooms, fe.overflows, fe.aborts, fe.nccl, fe.kills, fe.notices, fe.device_errors, fe.xids)):
        return fe
    lines = data.decode("utf-8", "replace").splitlines()
    for k in range(len(lines) - 1, -1, -1):
        # a line typed with a Chinese input method puts a full-width colon after the class ("AssertionError：
        # Torch not compiled with CUDA enabled"), which no program prints: read as the ASCII colon it stands for
        m = pat.EXC_ALONE.match(lines[k]) or (
            pat.EXC_IN.search(_FULLWIDTH_COLON.sub(r"\1: ", lines[k]))
            if "Error：" in lines[k] or "Exception：" in lines[k] else None)
        if m:
            n = Notice(fe.read.path, k + 1, None, "exception", lines[k].strip()[:500],
                       {"cls": m.group("cls"), "msg": m.group("msg")[:300], "rank": None, "typeless": False})
            return replace(fe, notices=(n,))
    for k, ln in enumerate(lines):
        # no exception line: a compiler's fatal error quoted in the paste is the failure (trial 14: the user
        # quoted "pyconfig.h:3:12: fatal error: ...: No such file or directory" above their words); `cls` names
        # what printed it, not a Python class
        c = COMPILER_FATAL.match(ln) if "fatal error: " in ln else None
        if c:
            n = Notice(fe.read.path, k + 1, None, "exception", ln.strip()[:500],
                       {"cls": "CompileError", "msg": (c.group("src") + ": " + c.group("msg"))[:300], "rank": None,
                        "typeless": False, "compiler": True})
            return replace(fe, notices=(n,))
    return fe


def parse_text(path: str, data: bytes) -> FileEvidence:
    """The same scan over text already in memory (a torchelastic error file's traceback), reported as `path`."""
    return scan_text(path, len(data), iter([data]), [])


class _Scan:
    """The scan state across chunks: the carried-over tail (for tracebacks above a hit), the partial last line,
    absolute offsets, line numbers."""

    def __init__(self, p: TextLogParser, hits: "_Hits | None" = None, fast: bool = True) -> None:
        self.p = p
        self.hits = hits      # trigger offsets found by grep (readers/runlogs/loggrep.py), else the regex finds them
        self.fast = fast      # HF's step dicts in bulk (TextLogParser.train_dict); False: every line by feed_line
        self.ctx = LineContext()
        self.prev_tail = b""
        self.line_no = 1      # without grep: the line of the first byte not yet scanned
        self.skip_abs = 0     # hits before this absolute offset were consumed by an earlier line
        self.abs_pending = 0  # absolute offset of the first byte not yet scanned
        self.tq_abs = 0       # absolute offset up to which tqdm bars were scanned
        # with grep: the last hit's line and byte offset (the line feeds after it are not counted yet)
        self.hit_line = 1
        self.uncounted = 0

    def piece(self, data: bytes, cut: int) -> None:
        """Scan data[:cut] (it ends at a line end, or at the end of the file)."""
        p, ctx, hits = self.p, self.ctx, self.hits
        buf = self.prev_tail + data
        off = len(self.prev_tail)
        base_abs = self.abs_pending - off          # absolute offset of buf[0]
        cursor, line = off, self.line_no
        end = off + cut
        start = max(off, self.skip_abs - base_abs)
        dict_line = pat.HF_TRAIN_DICT_LINE_B.match if self.fast else None
        last = -1                                  # the last hit of this piece
        while start < end:
            # search again past each parsed window (not finditer): a line of kilobytes full of trigger words
            # costs one search per window, not one per word
            if hits is None:
                m = pat.TRIGGER.search(buf, start, end)
                if m is None:
                    break
                pos = m.start()
                line += buf.count(b"\n", cursor, pos)
                cursor = pos
            else:
                i = hits.i   # the next hit is usually the one after the last (one hit a line)
                offs = hits.offs
                if i >= len(offs) or offs[i] < base_abs + start:
                    i = hits.seek(base_abs + start)
                    if i < 0:
                        break
                    offs = hits.offs
                h = offs[i]
                if h >= base_abs + end:
                    break
                pos = h - base_abs
                line = hits.lines[i]
                hits.i = i + 1
            last = pos
            win_start = self.tq_abs - base_abs
            if win_start < pos:
                p.progress(buf, max(win_start, 0), pos)
                self.tq_abs = base_abs + pos
            # HF's step dict alone on its line (the hit is its "'loss': ", the line starts one byte before it):
            # the common line of a long log, taken without the generic parsers when every value is a number
            fast = dict_line(buf, pos - 1, pos + HIT_AFTER) if dict_line is not None and pos > 0 \
                and buf[pos - 1] == 123 and (pos == 1 or buf[pos - 2] in (10, 13)) else None
            if fast is not None and p.train_dict(fast.groups(), line):
                le = fast.end()
                if buf[le - 1] in (10, 13):
                    le -= 1
            else:
                le = self._line(buf, pos, line, ctx)
            self.skip_abs = base_abs + le
            start = max(le, pos + 1)
        if self.tq_abs < base_abs + end:   # bars after the last hit of this piece still move the step
            p.progress(buf, max(self.tq_abs - base_abs, off), end)
            self.tq_abs = base_abs + end
        if hits is None:
            self.line_no = line + buf.count(b"\n", cursor, end)
        elif last >= 0:   # the line feeds after the last hit are counted at the end, only after the file's last
            self.hit_line, self.uncounted = line, base_abs + last
        self.prev_tail = buf[max(0, end - LOOKBACK):end]
        self.abs_pending += cut

    def _line(self, buf: bytes, pos: int, line: int, ctx: LineContext) -> int:
        """Hand the line around the hit at `pos` to the line parser; returns where the line ends."""
        le = buf.find(b"\n", pos, pos + HIT_AFTER)
        le_r = buf.find(b"\r", pos, le if le >= 0 else pos + HIT_AFTER)
        if le_r >= 0:
            le = le_r
        elif le < 0:
            le = min(len(buf), pos + HIT_AFTER)
        lo = max(0, pos - HIT_BEFORE)
        ls = max(buf.rfind(b"\n", lo, pos), buf.rfind(b"\r", lo, pos))
        ls = ls + 1 if ls >= 0 else lo      # a longer line is cut to HIT_BEFORE before the hit
        ctx.set(buf, ls, le)
        self.p.feed_line(buf[ls:le].decode("utf-8", "replace"), line, ctx)
        return le

    def lines_seen(self, path: str) -> int:
        """1 + the line feeds scanned: counted by the scan without grep; with grep, the last hit's line plus
        the line feeds after it, read again from `path` (the plain file grep read; usually a few bytes, as a
        crashed run's log ends with its failure lines)."""
        if self.hits is None:
            return self.line_no
        n = self.hit_line
        try:
            with open(path, "rb") as fh:
                fh.seek(self.uncounted)
                left = self.abs_pending - self.uncounted
                while left > 0:
                    b = fh.read(min(CHUNK, left))
                    if not b:
                        break
                    n += b.count(b"\n")
                    left -= len(b)
        except OSError:   # gone since it was read: the lines up to the last hit are what is known
            pass
        return n


class _Hits:
    """grep's hits (readers/runlogs/loggrep.py `Offsets.batches`): increasing byte offsets and their lines, consumed in
    order, one batch in memory at a time."""

    def __init__(self, batches: Iterator[tuple[list[int], list[int]]]) -> None:
        self.batches = batches
        self.offs: list[int] = []
        self.lines: list[int] = []
        self.i = 0

    def seek(self, off: int) -> int:
        """The index in `offs` of the first hit at or after byte `off`, or -1 when there is none."""
        i, offs = self.i, self.offs
        while True:
            n = len(offs)
            while i < n and offs[i] < off:
                i += 1
            if i < n:
                self.i = i
                return i
            nxt = next(self.batches, None)
            if nxt is None:
                self.i = i
                return -1
            self.offs, self.lines = nxt
            offs, i = self.offs, 0


def scan_text(path: str, size: int, chunks: Iterator[bytes], problems: list[str],
              hits: "loggrep.Offsets | None" = None, fast: bool | None = None) -> FileEvidence:
    """The scan of `read_text_log` over `chunks` (the module docstring says how); `hits`: the trigger words'
    byte offsets and lines when grep found them (then `path` is the plain file the chunks come from);
    `fast=False` parses HF's step dicts line by line too (the reference the bulk path is tested against;
    None: `FAST_DICTS`)."""
    p = TextLogParser(path)
    fast = FAST_DICTS if fast is None else fast
    sc = _Scan(p, _Hits(hits.batches()) if hits is not None else None, fast)
    pending = b""
    read = nul = 0
    last_byte = b"\n"
    eof = False
    head: dict[str, Any] = {}
    while not eof:
        chunk = next(chunks, None)
        if chunk is None:
            eof, chunk = True, b""
        if not read:   # the start-up lines' world sizes from the first chunk (no second read, logkept.py)
            head = logkept.head_statements(chunk[:logkept.MAX_HEAD])
        read += len(chunk)
        if chunk:
            last_byte = chunk[-1:]
        if b"\x00" in chunk:   # memchr speed; the count only for a chunk that has one
            nul += chunk.count(b"\x00")
        data = pending + chunk if pending else chunk
        if eof:
            cut = len(data)
        else:
            cut = data.rfind(b"\n", 0, max(0, len(data) - LOOKAHEAD))
            if cut < 0:
                if sc.hits is not None and hits is not None and hasattr(hits, "stop"):
                    # a line longer than a chunk: grep would hold all of it in memory (readers/runlogs/loggrep.py)
                    hits.stop()
                    sc.line_no = sc.lines_seen(path)   # grep's line numbers end here; the scan counts on
                    sc.hits = None
                if len(data) < MAX_PENDING:
                    pending = data
                    continue
                cut = len(data) - LOOKAHEAD
                problems.append(f"a line longer than {MAX_PENDING >> 20} MiB near byte {sc.abs_pending + cut} was split")
            else:
                cut += 1
        sc.piece(data, cut)
        pending = data[cut:]
    if nul:
        problems.append(f"{nul} NUL bytes (binary junk) ignored")
    p.flush()
    lines = sc.lines_seen(path) - 1 + (1 if read and last_byte != b"\n" else 0)
    rd = FileRead(path, "text-log", size, read, lines=lines, items=p.items, complete=not any(
        "stopped early" in x for x in problems), problems=tuple(problems))
    origin = _origin(p)
    return FileEvidence(
        origin=origin, timing=_timing(p), device_errors=p.keep.get("device_errors"), xids=p.keep.get("xids"),
        read=rd, series=tuple(p.series.values()), ooms=p.keep.get("ooms"), overflows=p.keep.get("overflows"),
        aborts=p.keep.get("aborts"), nccl=_with_comm_rank(p.keep.get("nccl"), origin), kills=p.keep.get("kills"),
        memory=p.keep.get("memory"), notices=p.keep.get("notices"), facts=tuple(p.facts.values()),
        restarts=p.keep.get("restarts"), dropped=dict(p.keep.dropped), last_step=p.logged(),
        total_steps=p.train_total or (p.bar_total_max or None), head=head)


# -- GPU recordings ------------------------------------------------------------------------------------------------
# nvidia-smi tables and --query-gpu CSV, doctor gpus --record files and per-card summaries are read by
# readers/gpus/smi.py; here we only recognise them so that they are not scanned as training logs.
_GPU_CSV_HEAD = re.compile(r"\b(index|uuid)\b.*\bmemory\.used\b|\bmemory\.used\b.*\b(index|uuid)\b", re.I)
_GPU_SUMMARY = re.compile(r"^\s*gpu\s*\d+\s*$", re.M | re.I)


def looks_gpu_record(sample: bytes) -> bool:
    """True when a file starts like a GPU recording readers/gpus/smi.py reads (not like a training log)."""
    text = sample[:8192].decode("utf-8", "replace")
    head = text.lstrip()
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    if "," in first and _GPU_CSV_HEAD.search(first):
        return True
    if head.startswith('{"schema": "finetune-doctor/gpus-record'):
        return True
    if re.match(r"^(?:\w{3} \w{3}\s+\d+ [\d:]+ \d{4}\s*)?\+-+\+", head) and "NVIDIA-SMI" in head[:2000]:
        return True
    return bool(_GPU_SUMMARY.search(head[:2000]) and re.search(r"^\s*used:", head[:2000], re.M | re.I)
                and not pat.TRIGGER.search(sample[:8192]))


def sniff(path: str) -> str:
    """Guess what a file given with ``--log`` (or a ``*.txt``/``*.log`` of the run directory) is:
    trainer-log | trainer-state | event-file | gpu-record | text-log | unknown (binary)."""
    name = os.path.basename(path)
    if "tfevents" in name:
        return "event-file"
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "unknown"
        with open(path, "rb") as fh:
            sample = fh.read(65536)
    except OSError:
        return "text-log"
    head = sample.lstrip()[:200]
    if head.startswith(b'{"current_steps"'):
        return "trainer-log"
    if head.startswith(b"{") and b'"log_history"' in sample:
        return "trainer-state"
    if looks_gpu_record(sample):
        return "gpu-record"
    if looks_binary(sample):
        return "unknown"
    return "text-log"


# lines every trainer's console prints and no config holds: logging prefixes, tracebacks, HF metric dicts, tqdm bars
_LOG_MARK = re.compile(rb"^(?:\[(?:INFO|WARNING|ERROR)\|)|^Traceback \(most recent call last\)|^\{'(?:loss|train_runtime)'"
                       rb"|^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|\d+/\d+ \[\d+:\d\d<", re.M)


def looks_like_log(path: str) -> bool:
    """Whether `path` reads as a training log or a trainer's state file rather than a config: `check` names
    `postmortem` when such a file fails as YAML. Reads at most 64 KiB; an unreadable path is not a log."""
    kind = sniff(path)
    if kind in ("trainer-log", "trainer-state", "event-file"):
        return True
    if kind != "text-log":
        return False
    try:
        with open(path, "rb") as fh:
            sample = fh.read(65536)
    except OSError:
        return False
    if _LOG_MARK.search(sample):
        return True
    # a trigger word alone ("loss: " of `plot_loss: true`) is no log when the text reads as YAML keys
    return bool(pat.TRIGGER.search(sample)) and not _reads_as_keys(sample)


_KEY_LINE = re.compile(rb"^\s*(?:-\s|[\w.\-\"'/]+\s*:(?:\s|$))")


def _reads_as_keys(sample: bytes) -> bool:
    """Whether `sample` reads as a config's keys rather than a console log: at least 80 % of its first 200 lines
    that are neither blank nor ``#`` comments are ``key: value`` lines (``_KEY_LINE``: a bare, dotted or quoted
    name, a colon, then a space or the line's end) or ``- item`` list lines.

    It decides one question: `looks_like_log` found a trigger word in a file that failed as YAML, and a config
    holding such a word (``NCCL_P2P_DISABLE=1`` in a comment) is still no log (trial 8,
    LlamaFactory#8150: a YAML refused for a repeated key was called a log). The formats that give the rule:
    LLaMA-Factory's training configs are YAML block mappings (hparams/parser.py ``read_args``, main:117-124,
    loads ``.yaml``/``.yml`` with OmegaConf.load) or JSON objects (``.json``, json.load), so nearly every line
    of either is a key line (a JSON object's ``{`` and ``}`` are the exceptions, 2 lines of ~20). A console log's lines are messages;
    the ones shaped like keys are few (a torchrun failure paste: 8 of its 18 lines, its root-cause block's
    ``time      : ...`` six among them). Below 80 % the text is judged a log. A YAML made mostly of block scalars (``|`` text over many
    lines) or a log made mostly of ``name: value`` lines is judged the other way (tests/test_logs_keys.py pins
    both sides)."""
    lines = [ln for ln in sample.splitlines()[:400] if ln.strip() and not ln.lstrip().startswith(b"#")][:200]
    return bool(lines) and sum(1 for ln in lines if _KEY_LINE.match(ln)) >= 0.8 * len(lines)


__all__ = ["looks_like_log", "read_text_log", "sniff", "size_bytes", "looks_binary", "looks_gpu_record", "regular_size", "open_chunks"]
