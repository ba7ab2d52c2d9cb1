"""A dataset that gave no sample, read from the traceback of the StopIteration it leaves (``ev.crash.cause`` kind
``no-samples``).

LLaMA-Factory takes the first processed sample to print it: ``next(iter(dataset))`` after the tokenizing map
(0.9.0 data/loader.py:199-207, main data/loader.py:264-271). An empty dataset raises StopIteration there; 0.9.x
turns it into "Cannot find valid samples, check `data/README.md` for the data format." (for stage pt "Cannot find
sufficient samples, consider increasing dataset size."), older llmtuner releases let the bare StopIteration
through from data/preprocess.py (``print_function(next(iter(dataset)))``). The same words said by the user are
the no-valid-samples rule's words case (readers/runlogs/userwords_vocab.py "no-samples").

The checks that say so in words are read by their message, wherever the traceback was cut: 0.9.x's two
RuntimeErrors above, and older llmtuner's ``raise RuntimeError("Empty dataset!")`` at the end of
``preprocess_dataset`` (src/llmtuner/dsets/preprocess.py:266 in the traceback of hiyouga/LlamaFactory#1413, where
stage pt over an instruction dataset kept no text). With such a crash the no-valid-samples rule leads (its
``no-samples`` case) and run-crashed follows.
"""

from __future__ import annotations

import re
from typing import Any

# LLaMA-Factory's own refusals of a dataset that gave no sample (0.9.x data/loader.py; llmtuner dsets/preprocess.py)
NO_SAMPLES = re.compile(r"Cannot find (?:valid|sufficient) samples|^Empty dataset!?$")

# LLaMA-Factory's functions that take the first processed sample (llmtuner and llamafactory alike)
_PREPROCESS = ("preprocess_dataset (preprocess.py)", "_get_preprocessed_dataset (loader.py)",
               "get_dataset (loader.py)", "preprocess_dataset (loader.py)")
_WORDS = ("the dataset came out of preprocessing empty: LLaMA-Factory takes the first processed sample to print it "
          "(next(iter(dataset))), which raises StopIteration when no sample survived conversion and tokenization "
          "(0.9.x says 'Cannot find valid samples, check data/README.md for the data format', for stage pt 'Cannot "
          "find sufficient samples'; data/loader.py). Check `formatting` and `columns` in dataset_info.json against "
          "the file (sharegpt keys, role tags), whether every sample was cut or dropped, and for pt whether the "
          "corpus fills one cutoff_len block; `doctor data CONFIG.yaml` counts the rows that survive")


def empty_dataset(cls: str, frames: tuple[Any, ...], pkgs: tuple[Any, ...], msg: str = "") -> str | None:
    """Words for a StopIteration (`cls`) raised where LLaMA-Factory takes its first processed sample: the
    innermost LLaMA-Factory frame (`pkgs`: (package, func, file), innermost last) is one of `_PREPROCESS`, or
    a code line of the traceback (`frames`) is ``next(iter(dataset))``; or a RuntimeError whose message `msg` is
    one of LLaMA-Factory's own no-sample checks (`NO_SAMPLES`). None otherwise."""
    if cls == "RuntimeError" and NO_SAMPLES.search(msg.strip()):
        return _WORDS
    if cls != "StopIteration":
        return None
    lf = [f"{p[1]} ({p[2]})" for p in pkgs if p and p[0] == "llamafactory"]
    code = any("next(iter(dataset" in str(x) for x in frames)
    return _WORDS if code or (lf and lf[-1] in _PREPROCESS) else None
