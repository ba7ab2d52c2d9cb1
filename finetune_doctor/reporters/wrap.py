"""Terminal width and word wrapping for the text outputs (issue 26: output that respects the terminal).

Width: ``COLUMNS`` when it holds a number (what shells export and what users set for a pipe:
``COLUMNS=80 doctor check … | cat``), else the width of the terminal on standard output, else of standard error
(the real width when only stdout is piped), else `DEFAULT_WIDTH`. This is the order rich's Console uses, minus
standard input, which under pytest or CI may be a terminal that is not the one the output reaches.

Wrapping breaks only at blanks. A single word longer than a whole line is broken after a ``/``, ``,`` or ``_``
where it has one (paths, key lists), and only as a last resort mid-word; a number is never broken (it moves
to the next line whole). Styled pieces keep their style across the break. Width counts characters, which is
right for the ASCII and Latin text the reports hold (wide CJK characters in a path would count one cell each).
"""

from __future__ import annotations

import os
import re
from typing import Iterator

DEFAULT_WIDTH = 100
MIN_WIDTH = 40
MAX_WIDTH = 1000

Piece = tuple[str, "str | None"]
_RUN = re.compile(r"\s+|\S+")
_SOFT_BREAK = re.compile(r"(?<=[/,_])")


_render_width: list[int] = []


def render_width(default: int = DEFAULT_WIDTH) -> int:
    """The width the text report being drawn has (sections size their own drawings to it), else `default`."""
    return _render_width[-1] if _render_width else default


class rendering_at:
    """``with rendering_at(width):`` — the width `render_width` returns while a report is drawn."""

    def __init__(self, width: int):
        self.width = width

    def __enter__(self) -> None:
        _render_width.append(self.width)

    def __exit__(self, *exc: object) -> None:
        _render_width.pop()


def terminal_width(default: int = DEFAULT_WIDTH) -> int:
    """Columns to format for, clamped to [MIN_WIDTH, MAX_WIDTH] (see the module docstring for the order)."""
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and len(raw) <= 5 and int(raw) > 0:
        return _clamp(int(raw))
    import sys

    # the streams the output goes to (sys.stdout may be replaced, e.g. by click's test runner: then no terminal)
    for stream in (sys.stdout, sys.stderr):
        try:
            cols = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            continue
        if cols > 0:
            return _clamp(cols)
    return _clamp(default)


def _clamp(n: int) -> int:
    return max(MIN_WIDTH, min(MAX_WIDTH, n))


def _words(pieces: list[Piece]) -> Iterator[tuple[bool, list[Piece]]]:
    """(is_blank, styled parts) runs: a word that spans pieces stays one word."""
    word: list[Piece] = []
    for text, style in pieces:
        for m in _RUN.finditer(text):
            run = m.group(0)
            if run.isspace():
                if word:
                    yield False, word
                    word = []
                yield True, [(run, style)]
            else:
                word.append((run, style))
    if word:
        yield False, word


def _plain(parts: list[Piece]) -> str:
    return "".join(t for t, _ in parts)


def _split_long(parts: list[Piece], room: int) -> list[list[Piece]]:
    """A word longer than `room`, cut into chunks of at most `room` characters at soft breaks when possible."""
    text = _plain(parts)
    chunks: list[str] = []
    while len(text) > room:
        cut = max((m.start() for m in _SOFT_BREAK.finditer(text, 1, room + 1)), default=0)
        cut = cut or room
        chunks.append(text[:cut])
        text = text[cut:]
    chunks.append(text)
    # give each chunk the style of the piece its first character came from
    out: list[list[Piece]] = []
    pos = 0
    bounds = []
    for t, s in parts:
        bounds.append((pos, pos + len(t), s))
        pos += len(t)
    pos = 0
    for c in chunks:
        styled: list[Piece] = []
        for start, end, s in bounds:
            lo, hi = max(start, pos), min(end, pos + len(c))
            if lo < hi:
                styled.append((_plain(parts)[lo:hi], s))
        out.append(styled)
        pos += len(c)
    return out


def wrap_pieces(pieces: list[Piece], width: int, first: str = "", rest: str = "") -> list[list[Piece]]:
    """`pieces` (text, style) laid out in lines of at most `width` characters, the first line prefixed by `first`,
    the others by `rest` (a hanging indent). Blanks at a break are dropped; blanks inside a line are kept."""
    lines: list[list[Piece]] = [[(first, None)] if first else []]
    used = start = len(first)
    pending: list[Piece] = []   # blanks since the last word: written only when a word follows on the same line

    def newline() -> None:
        nonlocal used, start
        lines.append([(rest, None)] if rest else [])
        used = start = len(rest)

    for blank, parts in _words(pieces):
        if blank:
            pending.extend(parts)
            continue
        size = len(_plain(parts))
        gap = 0 if used == start else len(_plain(pending))
        if used + gap + size <= width:
            if gap:
                lines[-1].extend(pending)
            lines[-1].extend(parts)
            used += gap + size
        elif size <= width - len(rest):
            newline()
            lines[-1].extend(parts)
            used += size
        else:   # longer than any line: cut at soft breaks, each chunk on a line of its own
            if used != start:
                newline()
            for i, chunk in enumerate(_split_long(parts, max(1, width - max(len(first), len(rest))))):
                if i:
                    newline()
                lines[-1].extend(chunk)
                used += len(_plain(chunk))
        pending = []
    return lines


def wrap_text(line: str, width: int) -> list[str]:
    """One preformatted line wrapped to `width`: its own indentation is kept, continuation lines are indented two
    more (four after a ``- `` bullet, so they align with the bullet's text)."""
    if len(line) <= width:
        return [line]
    body = line.lstrip(" ")
    pad = line[:len(line) - len(body)]
    rest = pad + ("  " if body.startswith(("- ", "* ")) else "") + "  "
    if len(rest) > width // 2:
        rest = pad[:width // 4] + "  "
    return ["".join(t for t, _ in ln).rstrip() for ln in wrap_pieces([(body, None)], width, pad, rest)]


def wrap_markdown(text: str, width: int) -> str:
    """Markdown (``doctor explain``) with its prose lines wrapped to `width`: fenced code and headings are left
    as written (a wrapped YAML line would change what it says), and so is a line that is one link (a URL cut
    in two cannot be opened)."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append(line)
        elif fenced or line.startswith("#") or len(line) <= width or _one_link(line):
            out.append(line)
        else:
            out.extend(wrap_text(line, width))
    return "\n".join(out)


def _one_link(line: str) -> bool:
    body = line.strip().removeprefix("- ").strip()
    return " " not in body and "://" in body
