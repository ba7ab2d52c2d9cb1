"""The limits every reader applies to untrusted input, in one place, each with the reason for its number.

A breach is an `InputError` naming the file and line, worded ``... exceeds ...`` (exit 2), never a hang, a
traceback or an ``internal error``. The numbers are far above any real LLaMA-Factory or DeepSpeed config and far
below what would exhaust the machine or Python; the measurements behind them are in each comment.

Used by readers/deepspeed/dsjson.py (DeepSpeed JSON) and readers/config/yamlcfg.py with readers/config/yamlnodes.py (training YAMLs and
``key=value`` overrides): a training config is the same kind of small, hand-written file.
"""

from __future__ import annotations

import sys

MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""Largest config file read (bytes). Real DeepSpeed JSONs are < 5 KB, LLaMA-Factory YAMLs < 5 KB and LF's own
data/dataset_info.json ~40 KB: 16 MiB is over 300x any of them, and reading it whole costs at most 16 MiB of bytes
plus its decoded text. Logs and records (trainer_state.json, *.jsonl, recordings) are data, not configs: they are
streamed and need limits of their own."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists (levels). DeepSpeed's deepest real section is about 6 levels
(``data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.<metric>.schedule_config``) and
LLaMA-Factory YAMLs nest 1-2. Every recursive walk of a parsed tree (``copy.deepcopy``, the rule engine's fact
wrappers, json's own C scanner) spends 1-3 Python frames per level against Python's default recursion limit of
1000, so 64 levels leave a wide margin where ~900 levels raise RecursionError today."""

MAX_CONFIG_NODES = 250_000
"""Most values (mapping entries plus list items) in one config file. A real DeepSpeed config holds < 100, so this
is 2500x that; a generated 200k-key JSON (issue 17) still reads, in time linear in its size (measured in
benchmarks/results/ds_json.md: 249k keys, 8 MiB of indented text, ≈ 3.3 s and ≈ 210 MiB peak RSS for the whole
``doctor lint`` process), and the parsed tree cannot push a command past the 400 MiB RSS budget of issue 17."""

MAX_INT_DIGITS = getattr(sys.int_info, "default_max_str_digits", 0) or 4300
"""Longest integer literal (decimal digits). CPython refuses to convert longer ones (``ValueError: Exceeds the
limit (4300 digits) for integer string conversion``, CVE-2020-10735, Python 3.11 and backports), so HF's
``json.load`` fails on them too: the run cannot start."""

INT64_MAX = 2**63 - 1
"""Largest integer a count or size may hold. DeepSpeed hands bucket sizes, buffer counts and batch sizes to torch
and its C++ extensions, which size tensors with int64 (c10 ``int64_t``): a larger value overflows there, and the
memory model's float arithmetic loses all meaning long before that."""

MAX_SCALAR_CHARS = 65_536
"""Longest string scalar (characters). No DeepSpeed or LLaMA-Factory value is longer than a file path
(PATH_MAX 4096 on Linux) or a list of dataset names; 64 Ki characters bounds what a message may quote."""

# YAML aliases: every alias's expansion counts toward MAX_CONFIG_NODES, so the billion-laughs document of issue 17
# (9 levels of 9 aliases, 10^9 values once expanded, from 1 KB) stops after 250k values instead of hanging, and an
# alias inside its own anchor (a recursive alias) or a merge key merging its own mapping is refused outright.


def exceeds(what: str, value: int | str, limit: int | str, why: str = "") -> str:
    """The message of a breached limit: ``<what> (<value>) exceeds the limit of <limit>[: <why>]``."""
    return f"{what} ({value}) exceeds the limit of {limit}" + (f": {why}" if why else "")


class LimitExceeded(Exception):
    """A reader limit was breached. `what` is the human phrase ("nesting exceeds 64 levels"), `line` 1-based."""

    def __init__(self, what: str, line: int | None = None):
        super().__init__(what)
        self.what, self.line = what, line
