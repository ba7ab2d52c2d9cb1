"""The limits every reader applies to untrusted input, in one place, each with the reason for its number.

A breach is an `InputError` naming the file and line, worded ``... exceeds ...`` (exit 2), never a hang, a
traceback or an ``internal error``. The numbers are far above any real LLaMA-Factory or DeepSpeed config and far
below what would exhaust the machine or Python; the measurements behind them are in each comment.

Used by readers/dsjson.py (DeepSpeed JSON). The YAML reader can take the same numbers: a training config is the
same kind of small, hand-written file.
"""

from __future__ import annotations

import sys

MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest config file read (bytes). Real DeepSpeed JSONs are < 5 KB, LLaMA-Factory YAMLs < 5 KB and LF's own
data/dataset_info.json ~40 KB, so 16 MiB is over 300x any of them. A 16 MiB JSON of small keys parses into about
150 MB of Python objects (measured: 200k keys, 4.6 MB of text, ~60 MB RSS growth), which keeps a command under the
400 MiB RSS budget of issue 17."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists (levels). DeepSpeed's deepest real section is about 6 levels
(``data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.<metric>.schedule_config``) and
LLaMA-Factory YAMLs nest 1-2. Every recursive walk of a parsed tree (``copy.deepcopy``, the rule engine's fact
wrappers, json's own C scanner) spends 1-3 Python frames per level against Python's default recursion limit of
1000, so 64 levels leave a wide margin where ~900 levels raise RecursionError today."""

MAX_NODES = 1_000_000
"""Most values (mapping entries plus list items) in one file. 200k keys are legal and must stay fast (issue 17);
a million small values take about 250 MB as Python objects, still inside the RSS budget."""

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

MAX_YAML_ALIASES = 1_000
"""Proposal for the YAML reader: most alias uses (``*name``) in one document. LLaMA-Factory YAMLs use none; the
billion-laughs expansion of issue 17 needs only 9 levels of 10 aliases each to reach 10^9 nodes, and with at most
1000 alias uses, each expanding to at most MAX_NODES values, the work stays bounded."""


def exceeds(what: str, value: int | str, limit: int | str, why: str = "") -> str:
    """The message of a breached limit: ``<what> (<value>) exceeds the limit of <limit>[: <why>]``."""
    return f"{what} ({value}) exceeds the limit of {limit}" + (f": {why}" if why else "")
