"""A paste copied from a terminal that broke its long lines at the window's width, joined back.

Selecting with the mouse in a terminal that shows a tmux or screen session (the multiplexer draws each row; the outer
terminal never saw a wrap), ``tmux capture-pane`` without ``-J``, some SSH clients and a terminal's scrollback after
a resize give hard line feeds where the terminal only wrapped (tmux's own copy mode does not: window-copy.c
``window_copy_copy_line`` adds no delimiter after a row flagged GRID_LINE_WRAPPED): a 300-character CUDA OOM
message of a 120-column window arrives as three lines of 120, 120 and 60 characters, a frame line
``  File ".../site-packages/transformers/trai`` + ``ner.py", line 2123, in train`` as two. The reader then sees a
frame cut in its path and a continuation line that ends the traceback, and an exception line without the figures
of its second half.

`unwrap` decides from the text alone whether that happened: the longest line length W (at least `MIN_WIDTH`
characters) is held by at least two lines that are followed by a non-blank line, and at least two of those breaks
fall inside a word (a letter or digit on both sides), which a line a program ended itself does not do, while a
terminal's wrap does wherever the column falls. Then every line of exactly W characters is joined with the line
after it (repeatedly, for a line wrapped more than once); the lines taken into it are left empty, so every other
line keeps its number and a finding still points at the line the user sees. Two equal lines in a row (the same
warning from several ranks) are never joined. Only pastes are unwrapped (readers/runlogs/logs.py: files that fit
in the first 64 KiB read), never a log a program wrote.
"""

from __future__ import annotations

import re

from finetune_doctor.readers.runlogs.lineprefix import NONE, strip_prefixes

MIN_WIDTH = 70   # narrower windows are rare; below this, equal-length lines are too often a coincidence
# how a line a program printed starts, which a wrap's continuation (the middle of a line) does not: a date or a
# clock, a bracket or a dict, a traceback's header or frame, a bar's percentage, an exception or warning class
_FRESH = re.compile(r"\s*(?:Traceback|File \"|\d{1,3}%\|)|\d{4}[-/]\d\d[-/]\d\d|\d\d?[-/]\d\d[- ]\d\d:|[\[{(]"
                    r"|[\w.]*(?:Error|Exception|Warning)\b")


def _continues(a: str, b: str) -> bool:
    """Whether `b` may be the rest of `a` broken at the terminal's width: not a line of its own (one that starts
    the way printed lines start, or behind a prefix lineprefix.py knows), and not the same line again."""
    return bool(b.strip()) and b != a and not _FRESH.match(b) and strip_prefixes(b)[1] is NONE


def _mid_word(a: str, b: str) -> bool:
    """Whether the break between `a` and `b` falls inside a word: a letter or digit on both sides, and not a
    lower-case letter before a capital, which is as often two lines a program ended itself ("... hours left" then
    "Loaded: ...", "CUDA Error: ..." in darknet's fixed-width log: fixtures/postmortem/other_stacks/
    cuda_darknet.log)."""
    x, y = a[-1:], b[:1]
    return x.isalnum() and y.isalnum() and not (x.islower() and y.isupper())


def unwrap(data: bytes) -> bytes | None:
    """`data` (a paste's bytes, UTF-8) with the lines a terminal wrapped at its width joined back, the same
    number of lines (the joined-in ones empty); None when the text shows no such wrap. Width is counted in
    characters, as a terminal counts columns for the ASCII a log mostly is (a line with wide CJK characters is
    never of the width and stays as it is)."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    body = [ln.rstrip("\r") for ln in lines]
    w = max((len(b) for b in body), default=0)
    if w < MIN_WIDTH:
        return None
    breaks = [i for i, b in enumerate(body[:-1]) if len(b) == w and _continues(b, body[i + 1])]
    if len(breaks) < 2 or sum(1 for i in breaks if _mid_word(body[i], body[i + 1])) < 2:
        return None
    out = list(body)
    i = 0
    while i < len(out) - 1:
        j = i
        while j < len(body) - 1 and len(body[j]) == w and _continues(body[j], body[j + 1]):
            out[i] += body[j + 1]
            out[j + 1] = ""
            j += 1
        i = j + 1
    return "\n".join(out).encode("utf-8")
