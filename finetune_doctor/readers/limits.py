"""Limits every reader of untrusted input applies, in one place: a breach is an InputError
``file:line: ... exceeds ...`` (exit 2), never a hang, a RecursionError or a process grown to gigabytes.

The numbers are generous for what the files really hold and far below what hurts:

* ``MAX_DEPTH`` — nesting of mappings/lists. A LLaMA-Factory YAML nests 1-3 levels, a DeepSpeed JSON 4, a model's
  config.json 3-4 (``text_config.rope_scaling``); 64 leaves room and stays far from Python's recursion limit (1000).
* ``MAX_VALUES`` — values after alias expansion. LLaMA-Factory knows ~420 keys; 100k stops "billion laughs" (nine
  nested aliases of nine items each expand to 10^9 values from a 1 KB file) within milliseconds.
* ``MAX_CONFIG_BYTES`` — a config or DeepSpeed JSON larger than 16 MiB is no config; reading stops there.
* ``MAX_SCALAR_CHARS`` — one scalar of a config; 1 MiB.
* ``MAX_INT_DIGITS`` — Python's own limit for int('...') (sys.int_info.default_max_str_digits, PEP 651 follow-up
  CVE-2020-10735): 4300 digits; a longer integer is reported, not raised as ValueError.
* ``INT64_MAX`` — counters (steps, sizes, record lengths) are int64 wherever torch, TensorBoard or NCCL write them;
  a larger value is corrupt input.
"""

from __future__ import annotations

MAX_DEPTH = 64
MAX_VALUES = 100_000
MAX_CONFIG_BYTES = 16 << 20
MAX_SCALAR_CHARS = 1 << 20
MAX_INT_DIGITS = 4300
INT64_MAX = (1 << 63) - 1


class LimitExceeded(Exception):
    """A reader limit was breached. `what` is the human phrase ("nesting exceeds 64 levels"), `line` 1-based."""

    def __init__(self, what: str, line: int | None = None):
        super().__init__(what)
        self.what, self.line = what, line
