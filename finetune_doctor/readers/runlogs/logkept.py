"""What the text-log reader keeps of a file's own lines so that no analyzer opens the file again (issue #25: one
read of each file; tests/test_postmortem_read_once.py counts the opens).

- `PASTE_TEXT`: the whole text of a file this short is kept (``FileEvidence.text``): a paste, whose words beyond
  the trigger lines the analyzers read (analyzers/postmortem/nativewords.py: Python's fault-handler banner, a
  trimmed stack, an exit status, the step the words give). A longer file is a rank's log; nothing of it is kept.
- `head_statements`: the world sizes stated in a log's first `MAX_HEAD` bytes (``FileEvidence.head``), taken from
  the scan's first chunk. LLaMA-Factory's launcher logs "Initializing N distributed tasks at: ADDR:PORT"
  (launcher.py:69 at the snapshot), each process "Process rank: R, world size: W, ..." (hparams/parser.py:652-653),
  accelerate's ``PartialState`` "Num processes: W" in its ``__repr__`` (accelerate state.py);
  analyzers/postmortem/worldsplit.py compares them across ranks (moved here from there: the analyzer read each
  log's head again).
- `frame_lines_above`: the ``File "..."`` lines among an exception line and the `FRAME_WINDOW` - 1 lines above
  it, kept in the exception's Notice (``value["frame_lines"]``): a paste cut above its "Traceback" header keeps
  no traceback notice, yet these frames name the file that raised (analyzers/postmortem/newermodel.py
  `trainer_table_key`).
"""

from __future__ import annotations

import re
from typing import Any

PASTE_TEXT = 65536
"""Bytes: a file of at most this size is kept whole as text (the reader's first read, logs.py, is this long)."""

MAX_HEAD = 256 << 10
"""Bytes of a log's start read for its stated world sizes: LF's launcher line is a log's first and the
per-process lines follow within the start-up output; it bounds the work on runs of hundreds of 50 MB rank logs
(each file's first stated world size is also the parser's Fact world_size, wherever it was printed)."""

FRAME_WINDOW = 12
"""Lines: the exception line and the 11 above it, searched for ``File "..."`` frame lines."""

LF_TASKS = re.compile(r"Initializing (?P<n>\d+) distributed tasks at: (?P<addr>\S+)")
LF_WORLD = re.compile(r"Process rank: (?P<rank>\d+), world size: (?P<world>\d+)")
ACCEL_WORLD = re.compile(r"^\s*Num processes: (?P<world>\d+)\s*$")


def head_statements(head: bytes) -> dict[str, Any]:
    """{tasks: (n, line) | None, worlds: {world: first line}, addr: the master "ADDR:PORT" of the tasks line}
    stated in `head` (a log's first `MAX_HEAD` bytes; lines 1-based)."""
    out: dict[str, Any] = {"tasks": None, "worlds": {}, "addr": None}
    head = head[:MAX_HEAD]
    if b"distributed tasks" not in head and b"world size" not in head and b"Num processes" not in head:
        return out    # the common case costs one scan in C, no decoding
    for i, raw in enumerate(head.decode("utf-8", "replace").splitlines(), 1):
        if "distributed tasks" in raw and out["tasks"] is None:
            m = LF_TASKS.search(raw)
            if m:
                out["tasks"] = (int(m.group("n")), i)
                out["addr"] = m.group("addr")
        elif "world size" in raw or "Num processes" in raw:
            m = LF_WORLD.search(raw) or ACCEL_WORLD.search(raw)
            if m:
                out["worlds"].setdefault(int(m.group("world")), i)
    return out


def frame_lines_above(buf: bytes, ls: int, le: int) -> tuple[str, ...]:
    """The ``File "..."`` lines (stripped, at most 300 characters each) among the line buf[ls:le] and the
    `FRAME_WINDOW` - 1 lines above it, in file order. Lines end at ``\\n`` (what a traceback prints)."""
    lo = ls
    for _ in range(FRAME_WINDOW - 1):
        k = buf.rfind(b"\n", max(0, lo - 8192), max(0, lo - 1))
        if k < 0:
            lo = max(0, lo - 8192)
            break
        lo = k + 1
    window = buf[lo:le]
    if b'File "' not in window:
        return ()
    return tuple(ln.strip()[:300] for ln in window.decode("utf-8", "replace").split("\n") if 'File "' in ln)
