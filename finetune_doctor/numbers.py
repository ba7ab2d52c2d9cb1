"""One bounded number parser for every number the doctor reads from text a user controls (issue 27).

Python's ``int()`` refuses more than 4,300 digits with a ValueError, ``float()`` reads ``inf``/``nan``, and both
cost time linear in the digits: a 5,000-digit ``--torch``, a 5,000-digit value in a GPU recording or
``image_max_pixels: .inf`` each ended in "internal error". Every reader goes through these functions instead:

* `bounded_int(text)`: an integer of at most MAX_INT_DIGITS digits, else None (the caller says what it expected);
* `finite(x)`: a finite float in [-MAX_ABS, MAX_ABS], else None;
* `parse_version(v)`: ``"2.5.1+cu124"`` → ``(2, 5, 1)``; each part at most VERSION_PART_DIGITS digits and the
  whole string at most MAX_VERSION_CHARS characters, else None. The one reader of release strings: ``parts``
  keeps more (or all) numbers, ``suffix=True`` also returns what follows them (``".dev0"``, ``"rc1"``,
  ``"+cu121"``), `is_prerelease` says whether that suffix sorts before its number and `version_key` orders them.

No function here raises for any input; cost is linear in at most MAX_VERSION_CHARS / MAX_INT_DIGITS characters.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_INT_DIGITS = 30
"""Digits of the largest integer any config, recording or flag needs (bytes of memory are 15 digits)."""
MAX_ABS = 1e30
"""Largest magnitude of a float read from input (no memory, step or rate is larger)."""
VERSION_PART_DIGITS = 9
MAX_VERSION_CHARS = 128

_INT = re.compile(r"\s*([+-]?)(\d{1,%d})\s*" % MAX_INT_DIGITS)
# every dotted number, then the rest (a part longer than VERSION_PART_DIGITS ends the numbers before it, as a
# digit may not follow the last one read)
_VERSION = re.compile(r"\s*[vV]?(\d{1,%d}(?:\.\d{1,%d})*)(?!\d)(.*)" % ((VERSION_PART_DIGITS,) * 2), re.S)
_PRE = re.compile(r"(?:\.?dev\d*|(?:a|b|rc)\d+)\s*$", re.IGNORECASE)
_POST = re.compile(r"^\.?post\d*", re.IGNORECASE)


def bounded_int(text: Any) -> int | None:
    """`text` (a str, int or float holding a whole number) as an int of at most MAX_INT_DIGITS digits, else None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if abs(text) < 10 ** MAX_INT_DIGITS else None
    if isinstance(text, float):
        f = finite(text)
        return int(f) if f is not None and f == int(f) else None
    if not isinstance(text, str) or len(text) > MAX_INT_DIGITS + 8:
        return None
    m = _INT.fullmatch(text)
    return int(m.group(1) + m.group(2)) if m else None


def finite(x: Any) -> float | None:
    """`x` (a number, or a str holding one) as a finite float of magnitude at most MAX_ABS, else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, str):
        if len(x) > MAX_INT_DIGITS + 16:
            return None
        try:
            x = float(x)
        except ValueError:
            return None
    if isinstance(x, int):
        return float(x) if abs(x) <= MAX_ABS else None
    if isinstance(x, float):
        return x if math.isfinite(x) and abs(x) <= MAX_ABS else None
    return None


def parse_version(v: Any, *, parts: int | None = 3, suffix: bool = False) -> Any:
    """The release numbers of a version string as pip, ``--env`` or a flag writes it; None for None, a non-string,
    garbage or an over-long string or part (a 5,000-digit ``--torch``).

    ``parts``: how many leading numbers to keep (3: ``MAJOR[.MINOR[.PATCH]]``, ``"1.2.3.4"`` -> (1, 2, 3); None:
    all). With ``suffix=False`` the answer is that tuple of ints; with ``suffix=True`` it is ``(numbers, rest)``,
    `rest` being the text after the numbers, stripped: ``"0.9.2.dev0"`` -> ((0, 9, 2), ".dev0"), ``"4.46.0rc1"``
    -> ((4, 46, 0), "rc1"), ``"4.43.4+cu121"`` -> ((4, 43, 4), "+cu121"), ``"v0.9.1"`` -> ((0, 9, 1), "").
    A leading ``v`` and whitespace are read over. The suffix grammar is PEP 440's (pre ``a/b/rc N``, ``.devN``,
    ``.postN``, local ``+label``), which is what pip, ``llamafactory-cli env`` and ``torch.__version__`` print.
    """
    if not v or not isinstance(v, str) or len(v) > MAX_VERSION_CHARS:
        return None
    m = _VERSION.match(v)
    if not m:
        return None
    nums = tuple(int(x) for x in m.group(1).split("."))
    nums = nums if parts is None else nums[:parts]
    return (nums, m.group(2).strip()) if suffix else nums


def is_prerelease(rest: str) -> bool:
    """Whether the suffix `rest` of `parse_version(..., suffix=True)` makes a PEP 440 pre- or development release
    (``.dev0``, ``rc1``, ``a2``), which sorts before the release of the same numbers (``0.9.2.dev0 < 0.9.2``)."""
    return bool(rest) and _PRE.search(rest) is not None


def version_key(v: Any) -> tuple[tuple[int, ...], int] | None:
    """A sort key for a version string (None where `parse_version` gives None): the numbers padded with zeros
    (PEP 440: 4.51 == 4.51.0), then 0 for a pre/dev release, 2 for a post release, 1 otherwise (a local label such
    as ``+cu121`` compares as its release, as pip's ``==4.43.4`` accepts ``4.43.4+cu121``). Pre-releases of one
    number tie with each other."""
    got = parse_version(v, parts=None, suffix=True)
    if got is None:
        return None
    nums, rest = got
    rank = 0 if is_prerelease(rest) else 2 if _POST.match(rest) else 1
    return nums + (0,) * (8 - len(nums)), rank
