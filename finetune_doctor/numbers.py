"""One bounded number parser for every number the doctor reads from text a user controls (issue 27).

Python's ``int()`` refuses more than 4,300 digits with a ValueError, ``float()`` reads ``inf``/``nan``, and both
cost time linear in the digits: a 5,000-digit ``--torch``, a 5,000-digit value in a GPU recording or
``image_max_pixels: .inf`` each ended in "internal error". Every reader goes through these functions instead:

* `bounded_int(text)`: an integer of at most MAX_INT_DIGITS digits, else None (the caller says what it expected);
* `finite(x)`: a finite float in [-MAX_ABS, MAX_ABS], else None;
* `parse_version(v)`: ``"2.5.1+cu124"`` → ``(2, 5, 1)``; each part at most VERSION_PART_DIGITS digits and the
  whole string at most MAX_VERSION_CHARS characters, else None.

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
_VERSION = re.compile(r"\s*[vV]?(\d{1,%d})(?:\.(\d{1,%d}))?(?:\.(\d{1,%d}))?(?!\d)"
                      % ((VERSION_PART_DIGITS,) * 3))


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


def parse_version(v: Any) -> tuple[int, ...] | None:
    """The leading ``MAJOR[.MINOR[.PATCH]]`` of a version string as ints; None for None, garbage or an
    over-long string or part (a 5,000-digit ``--torch``)."""
    if not v or not isinstance(v, str) or len(v) > MAX_VERSION_CHARS:
        return None
    m = _VERSION.match(v)
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)
