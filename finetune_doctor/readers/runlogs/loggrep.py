"""Find the trigger words of a large plain-text log with grep, when the machine has it.

Why: Python's regular-expression engine tries its branches at every byte whose value can start one of ~70 words,
which caps the text-log scan near 25 MB/s a core (benchmarks/results/postmortem_ranks.md); ``grep -F`` with the
same fixed strings runs Commentz-Walter / Aho-Corasick over the bytes at several hundred MB/s. grep only
*finds* the words: ``grep -o -b -n -a -F -f WORDS FILE`` prints the line number and byte offset of every match
(``-a`` treats binary junk as text, ``LC_ALL=C`` makes offsets and matching byte-exact), and readers/runlogs/logs.py parses
the lines around those offsets exactly as it parses the ones its own expression finds (the test compares both).
grep's line numbers spare Python its count of line feeds (CPython's ``bytes.count`` of one byte runs near
1 GB/s, grep's memchr-based count several times faster): only the bytes after the last match are counted.

Used for plain files of at least `MIN_BYTES` (gzip and UTF-16 logs are decoded by Python, so their offsets
differ); without grep, or with ``FINETUNE_DOCTOR_NO_GREP=1``, the reader's own expression finds the words.
Offsets stream from grep's stdout in 64 KiB batches: memory does not grow with the number of matches. grep
holds a whole line in memory before it prints a match in it, so a log without newlines would cost grep the size
of the file (662 MiB and 450 s for 256 MB, benchmarks/results/big_inputs.md): readers/runlogs/logs.py stops grep
(`Offsets.stop`) at the first line longer than a chunk and finds the rest of the words itself, and grep runs
under an address-space limit (`GREP_MAX_BYTES`): grep reads ahead of the scan, so a long line can grow it before
the scan meets that line; past the limit grep stops with "memory exhausted" (exit 2) and the scan falls back to
its own expression.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from typing import Iterator

MIN_BYTES = 4 << 20
GREP_MAX_BYTES = 128 << 20   # grep's address space: ~10 MiB for itself and the words, the rest for one line


def _limit_memory() -> None:   # in the child, before exec
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (GREP_MAX_BYTES, GREP_MAX_BYTES))


_WORDS: dict[tuple[str, ...], str] = {}


def _words_file(words: tuple[str, ...]) -> str:
    path = _WORDS.get(words)
    if path is None or not os.path.exists(path):
        fd, path = tempfile.mkstemp(prefix="doctor-triggers-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(words) + "\n")
        _WORDS[words] = path
        atexit.register(lambda p=path: os.path.exists(p) and os.unlink(p))
    return path


_HIT = re.compile(rb"^(\d+):(\d+):", re.M)
# the hits of every word but HF's step-dict key: grep -o prints the word after the offset, so the dict hits of
# a counted read are told apart (and counted) over a whole batch in C, never one by one in Python
DICT_WORD = b"'loss': "
_HIT_NOT_DICT = re.compile(rb"^(\d+):(\d+):(?!" + re.escape(DICT_WORD) + rb"\n)", re.M)
_DICT_HIT = b":" + DICT_WORD + b"\n"
BATCH = 1 << 16   # bytes of grep's output parsed at a time


class Offsets:
    """grep's matches as batches of (byte offsets, line numbers), two lists each, in file order; `ok` is False
    when grep ended with an error (exit status 2). The line number is grep's (``-n``: 1 + the line feeds before
    the match), the one readers/runlogs/logs.py would count."""

    def __init__(self, proc: subprocess.Popen, count_dicts: bool = False) -> None:
        self.proc = proc
        self.ok = True
        self.stopped = False
        # a counted read (`count_dicts`): the hits of HF's step-dict key are counted in `dicts`, not yielded
        self.count_dicts = count_dicts
        self.dicts = 0

    def stop(self) -> None:
        """End grep now: the caller finds the words from here on itself. The offsets grep printed before stay
        valid, also when grep already died of its memory limit: that happens only on a line longer than the one
        the caller stops at, and grep prints the matches of earlier lines, in order, before it reads further."""
        self.stopped, self.ok = True, True
        if self.proc.poll() is None:
            self.proc.kill()

    def batches(self) -> Iterator[tuple[list[int], list[int]]]:
        assert self.proc.stdout is not None
        read = self.proc.stdout.read1
        rest = b""
        hit = _HIT_NOT_DICT if self.count_dicts else _HIT
        while True:
            block = read(BATCH)
            if not block:
                break
            if rest:
                block = rest + block
            k = block.rfind(b"\n") + 1
            rest = block[k:]
            if self.count_dicts:
                self.dicts += block.count(_DICT_HIT, 0, k)
            found = hit.findall(block, 0, k)
            if found:
                yield [int(o) for _, o in found], [int(n) for n, _ in found]
        if self.proc.wait() not in (0, 1) and not self.stopped:
            self.ok = False

    def __iter__(self) -> Iterator[int]:
        """The offsets alone."""
        for offs, _ in self.batches():
            yield from offs


@contextlib.contextmanager
def trigger_offsets(path: str, words: tuple[str, ...], count_dicts: bool = False) -> Iterator[Offsets | None]:
    """The offsets of `words` in `path` from grep, or None (grep missing or disabled); `count_dicts`: the hits
    of HF's step-dict key (`DICT_WORD`) are counted, not yielded (`Offsets.dicts`)."""
    exe = None if os.environ.get("FINETUNE_DOCTOR_NO_GREP") else shutil.which("grep")
    if exe is None:
        yield None
        return
    proc = subprocess.Popen([exe, "-o", "-b", "-n", "-a", "-F", "-f", _words_file(tuple(words)), "--", path],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            env={**os.environ, "LC_ALL": "C"}, bufsize=1 << 16, preexec_fn=_limit_memory)
    try:
        yield Offsets(proc, count_dicts)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def none() -> Iterator[None]:
    """The no-grep case of `trigger_offsets`."""
    yield None
