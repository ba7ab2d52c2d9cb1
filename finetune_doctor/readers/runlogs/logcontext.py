"""The pieces of the text-log scan every line parser shares: capped record lists, the bytes around the line
being parsed (the traceback above an OOM, the ChildFailedError block below its header), signal names."""

from __future__ import annotations

import os
import re
from typing import Any

from finetune_doctor.evidence import MAX_RECORDS
from finetune_doctor.readers.runlogs import logpatterns as pat
from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes

LOOKAHEAD = 16 << 10     # bytes after a hit a parser may look at (a ChildFailedError block)
LOOKBACK = 32 << 10      # bytes before a hit kept across chunk boundaries (the traceback above an OOM)
MAX_LINE = 16 << 10      # a line around a hit is cut to this many bytes on each side


class Keep:
    """Capped lists: keep the first MAX_RECORDS of each kind, count the rest."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = {}
        self.dropped: dict[str, int] = {}

    def add(self, kind: str, item: Any) -> None:
        lst = self.lists.setdefault(kind, [])
        if len(lst) < MAX_RECORDS:
            lst.append(item)
        else:
            self.dropped[kind] = self.dropped.get(kind, 0) + 1

    def get(self, kind: str) -> tuple[Any, ...]:
        return tuple(self.lists.get(kind, ()))


def num(v: str) -> float | None:
    v = v.strip()
    try:
        return float(v)
    except ValueError:
        return None


def signame(code: int | None) -> str | None:
    return {-9: "SIGKILL", 137: "SIGKILL", -6: "SIGABRT", 134: "SIGABRT", -15: "SIGTERM", 143: "SIGTERM",
            -11: "SIGSEGV", 139: "SIGSEGV", -7: "SIGBUS"}.get(code) if code is not None else None


class LineContext:
    """Access to the bytes around the line being parsed (bounded: LOOKBACK before, LOOKAHEAD after)."""

    def __init__(self) -> None:
        self.buf = b""
        self.ls = 0
        self.le = 0

    def set(self, buf: bytes, ls: int, le: int) -> None:
        self.buf, self.ls, self.le = buf, ls, le

    def previous_line(self) -> str | None:
        end = self.ls - 1
        if end <= 0:
            return None
        start = max(self.buf.rfind(b"\n", max(0, end - MAX_LINE), end), self.buf.rfind(b"\r", max(0, end - MAX_LINE), end))
        return self.buf[start + 1:end].decode("utf-8", "replace").strip() or None

    def following_lines(self, n: int) -> list[str]:
        chunk = self.buf[self.le:self.le + LOOKAHEAD].decode("utf-8", "replace")
        return chunk.splitlines()[1:n + 1]

    def frames(self) -> tuple[str, ...]:
        """Function names and code lines of the traceback around the current line, nearest first: the frames
        above it up to "Traceback (most recent call last)", else a traceback that starts right below it."""
        before = self.buf[max(0, self.ls - 8192):self.ls].decode("utf-8", "replace").splitlines()[-80:]
        out: list[str] = []
        for ln in reversed(before):
            ln = strip_prefixes(ln)[0]
            if "Traceback (most recent call last)" in ln:
                break
            if pat.EXC.match(ln) and out:  # a previous exception: this traceback ended before it
                break
            frame_of(ln, out)
        if not out:
            after = self.buf[self.le:self.le + 8192].decode("utf-8", "replace").splitlines()[1:80]
            if after and "Traceback (most recent call last)" in strip_prefixes(after[0])[0]:
                lines = []
                for ln in after[1:]:
                    ln = strip_prefixes(ln)[0]
                    if pat.EXC.match(ln):
                        break
                    lines.append(ln)
                for ln in reversed(lines):
                    frame_of(ln, out)
        return tuple(out[:40])


FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>[\d.]+), in (?P<func>[\w<>]+)')


def frame_of(ln: str, out: list[str]) -> None:
    m = FRAME.match(ln)
    if m:
        out.append(f"{m.group('func')} ({os.path.basename(m.group('file'))})")
    elif ln.strip() and not ln.strip().startswith(("^", "~")):
        out.append(ln.strip()[:200])


def frames_below(lines: list[str]) -> tuple[str, ...]:
    """The frames of a traceback read downwards from `lines` (the lines after its header, or from its first
    frame when a paste lost the header), innermost last, as `frame_of` names them ("func (file.py)", or a code
    line): up to the exception line or the first line that is neither a frame nor indented code (the traceback
    ended there, or the paste was cut). A frame line cut before its function name keeps the code line above."""
    return frames_and_packages(lines)[0]


SITE_DIRS = ("site-packages/", "dist-packages/")


# a Markdown code fence ("```", "```text", "~~~") or the HTML of a collapsed block ("</details>", "<summary>Log
# </summary>") that closes a pasted log: no output of the run
_FENCE = re.compile(r"\s*(?:(?:```|~~~)[\w+-]*|</?details>|<summary>.*</summary>)\s*")


def only_below(context: LineContext, tail: re.Pattern) -> bool:
    """Whether every line after the current one up to the end of the file (the caller checked that the file
    ends within LOOKAHEAD) is blank, a Markdown fence closing the paste, or a line `tail` finds once its
    prefixes are off: the log ends on the current line's kind."""
    rest = context.buf[context.le:].decode("utf-8", "replace").splitlines()[1:]
    for t in rest:
        t = strip_prefixes(t)[0]
        if t.strip() and not _FENCE.fullmatch(t) and not tail.search(t):
            return False
    return True


def dedented(lines: list[str], indent: int) -> list[str]:
    """`lines` (the lines below a traceback's header) without the `indent` blanks the whole paste was shifted
    by: a traceback pasted as a Markdown indented code block or inside a list item has its header at column
    `indent`, its frames at `indent` + 2 and its exception line at `indent`, where CPython printed them at 0, 2
    and 0 (Lib/traceback.py). A line that does not start with those blanks is kept as it is."""
    if indent <= 0:
        return lines
    pad = " " * indent
    return [ln[indent:] if ln.startswith(pad) else ln for ln in lines]


def traceback_end(lines: list[str]) -> int | None:
    """The index in `lines` (the lines below a "Traceback (most recent call last):" header, or below a frame)
    of the first line that is not a frame or its code: where CPython prints the exception (Lib/traceback.py
    ``TracebackException.format``); None when the frames run past the end of `lines`."""
    for k, ln in enumerate(lines):
        ln = strip_prefixes(ln)[0]
        if pat.EXC.match(ln) or (ln.strip() and not ln[:1].isspace()):
            return k
    return None


def frames_and_packages(lines: list[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """`frames_below`'s frames, and the frames that run inside an installed package: (package, function, file
    basename) for each frame whose path goes through ``site-packages/`` or ``dist-packages/`` (the top-level
    import name after it, ``transformers`` of ``.../site-packages/transformers/models/x/modeling_x.py``),
    innermost last. analyzers/postmortem/crashcause.py names the library an exception was raised in from them."""
    out: list[str] = []
    pkgs: list[tuple[str, str, str]] = []
    for ln in lines:
        ln = strip_prefixes(ln)[0]
        if pat.EXC.match(ln) or (ln.strip() and not ln[:1].isspace()):
            break
        m = FRAME.match(ln)
        if ln.lstrip().startswith('File "') and not m:
            continue   # a frame line the paste cut before its function name
        frame_of(ln, out)
        if m:
            path = m.group("file").replace("\\", "/")
            k = max(path.rfind(d) for d in SITE_DIRS)
            if k >= 0:
                top = path[k:].split("/", 2)[1]
                pkgs.append((top[:-3] if top.endswith(".py") else top, m.group("func"), os.path.basename(path)))
            elif "/src/llamafactory/" in path or "/src/llmtuner/" in path:
                # LLaMA-Factory run from its source checkout (pip install -e .): the trainer's own frames (its
                # package was llmtuner before 0.6)
                pkgs.append(("llamafactory", m.group("func"), os.path.basename(path)))
    return tuple(out[-40:]), tuple(pkgs[-40:])
