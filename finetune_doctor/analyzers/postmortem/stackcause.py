"""A crash in a run whose logged package versions are outside what its LLaMA-Factory release requires at start-up
(``ev.crash.cause`` kind ``stack-range``, or appended to another cause's text).

Every release's ``check_dependencies`` (llamafactory/extras/misc.py, the file:line in catalog/lf_stack_ranges.json,
facts/stackrange.py) refuses transformers/datasets/accelerate/peft/trl outside its ranges before any key is read,
unless DISABLE_VERSION_CHECK is set. A log that states both LLaMA-Factory's version (``llamafactory-cli env``, its
banner) and such a package's version outside the range, and then crashes, ran a stack the release was not written
for: the check was skipped, or the package imported is not the one the env lines describe. That is a lead the
exception itself does not give (rounds 4-5's version mismatches: the exception named no version).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from finetune_doctor.numbers import parse_version

CATALOG = Path(__file__).resolve().parent.parent.parent / "catalog" / "lf_stack_ranges.json"
_CLAUSE = re.compile(r"^(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)$")
_NUM = re.compile(r"^v?(\d+(?:\.\d+)*)(.*)$")


@lru_cache(maxsize=1)
def _releases() -> dict[str, Any]:
    """The catalogue facts/stackrange.py judges start-up refusals with (read here as data: analyzers sit below
    facts in the flow)."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))["releases"]


def _outside(version: str, spec: str) -> bool:
    """True only when `version` ("4.36.0", "2.5.0+cu121") certainly fails `spec` ("transformers>=4.41.2,<=4.46.1");
    a pre/dev/local suffix, a ~= clause or anything unreadable is not judged (False), as facts/stackrange.py
    ``satisfies`` returns None for them."""
    m = _NUM.match(version.strip()[:64])
    got = parse_version(m.group(1)) if m else None
    if m is None or got is None:
        return False
    suffixed = bool(m.group(2).strip())
    fails = False
    for clause in re.sub(r"^[A-Za-z0-9_.\-]+", "", spec).split(","):
        m = _CLAUSE.match(clause.strip())
        want = parse_version(m.group(2)) if m else None
        if m is None or want is None:
            return False
        n = max(len(got), len(want))
        a, b = got + (0,) * (n - len(got)), want + (0,) * (n - len(want))
        c = (a > b) - (a < b)
        if c == 0 and suffixed:
            return False   # "4.41.2.dev0" against 4.41.2: the suffix decides, and it is not judged here
        ok = {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0, "==": c == 0, "!=": c != 0}[m.group(1)]
        fails = fails or not ok
    return fails


def stack_range_text(versions: Mapping[str, tuple[str, str]]) -> str | None:
    """Words naming each package of `versions` ({package: (version, where read)}) outside the ranges of the
    LLaMA-Factory release `versions["llamafactory"]` names; None when the release is not catalogued or every
    package is in range (or cannot be judged)."""
    lf = versions.get("llamafactory")
    if not lf:
        return None
    rel = _releases().get(lf[0])
    if rel is None:
        return None
    out = []
    for req in rel["requires"]:
        got = versions.get(req["package"])
        if got and _outside(got[0], req["spec"]):
            out.append(f"{req['package']} {got[0]} (it requires {req['spec']}, {req['where']}; {got[0]} read at "
                       f"{got[1]})")
    if not out:
        return None
    return (f"the logged stack is outside what LLaMA-Factory {lf[0]} requires at start-up: {'; '.join(out)}; that "
            "release refuses such a stack unless DISABLE_VERSION_CHECK is set, so the check was skipped or another "
            "install was imported: install the versions in range before looking further")


def _runs(names: list[str], order: list[str]) -> str:
    """"0.8.0–0.8.3, 0.9.1–0.9.3": `names` (a subset of `order`) as runs of consecutive releases."""
    out, run = [], []
    for r in order:
        if r in names:
            run.append(r)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}–{run[-1]}")
        run = []
    if run:
        out.append(run[0] if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return ", ".join(out)


def releases_judging(package: str, version: str) -> str | None:
    """Which catalogued LLaMA-Factory releases' start-up check admits and which refuses `package` at `version`
    (catalog/lf_stack_ranges.json, each release's ``check_dependencies``): "LLaMA-Factory's start-up check
    (llamafactory/extras/misc.py; releases 0.8.0–0.9.6.dev0 catalogued) refuses accelerate 0.34.2 in 0.9.0,
    0.9.4–0.9.6.dev0 and admits it in 0.8.0–0.8.3, 0.9.1–0.9.3". None when no release checks the package, or the version cannot be judged (a
    "0.x", a suffix at a bound: `_outside`)."""
    m = _NUM.match(version.strip()[:64])
    if m is None or parse_version(m.group(1)) is None or m.group(2).strip():
        return None
    order = list(_releases())
    refuse, admit, where = [], [], None
    for rel, row in _releases().items():
        req = next((q for q in row["requires"] if q["package"] == package), None)
        if req is not None and _outside(version, req["spec"]):
            refuse.append(rel)
            where = where or req["where"].split(":")[0]
        else:
            admit.append(rel)
    if not refuse:
        return None
    said = f"refuses {package} {version} in {_runs(refuse, order)}"
    if admit:
        said += f" and admits it in {_runs(admit, order)}"
    return (f"LLaMA-Factory's start-up check ({where}; releases {order[0]}–{order[-1]} catalogued) {said} "
            "(DISABLE_VERSION_CHECK=1 skips it)")


# an optimizer without .train(): transformers 4.45.0 Trainer.training_step calls self.optimizer.train() when the
# wrapper has one (trainer.py:3476-3477), and accelerate 0.33.0's AcceleratedOptimizer.train (accelerate/
# optimizer.py:124-128, both read from the wheels beside LF 0.9.0 in .lf-releases/0.9.0) forwards it to the torch
# optimizer, which has none (huggingface/transformers#33620, hiyouga/LlamaFactory#5402, unslothai/unsloth#1069:
# accelerate 0.34.2 cures it)
_OPT_TRAIN = re.compile(r"'(?:AdamW|Adam|SGD|Adafactor|AdamW8bit|PagedAdamW\w*|\w*Optimizer\w*)' object has no "
                        r"attribute '(?:train|eval)'")


def optimizer_train_pair(cls: str, msg: str) -> str | None:
    """The transformers/accelerate pair that calls ``optimizer.train()`` on an optimizer without it (`_OPT_TRAIN`),
    with the LLaMA-Factory releases whose start-up check refuses the accelerate that has the fix
    (`releases_judging`). None for any other AttributeError."""
    if cls != "AttributeError" or not _OPT_TRAIN.search(msg):
        return None
    lf = releases_judging("accelerate", "0.34.2")
    return ("transformers 4.45's Trainer calls optimizer.train(), which accelerate up to 0.33 forwards to a torch "
            "optimizer that has no such method (huggingface/transformers#33620): install accelerate>=0.34.2 "
            "beside that transformers (or a transformers before 4.45)" + (f"; {lf}, so on LLaMA-Factory 0.9.0 "
                                                                          "move to 0.9.1 or later" if lf else ""))
