"""What a traceback cut before its exception line still establishes from its frames alone (``ev.crash.cause``
kind ``dependency-check`` for a ``traceback-only`` crash).

LLaMA-Factory's start-up dependency check: ``hparams/parser.py`` calls ``check_dependencies()`` at import time
(0.9.0 parser.py:45, main parser.py:49), and ``check_dependencies`` (extras/misc.py, 0.9.0 :75-86; main :95-101)
runs one version requirement per package — transformers, datasets, accelerate, peft, trl in every catalogued
release (catalog/lf_stack_ranges.json) — through transformers' ``require_version`` (utils/versions.py:48-112), which
raises only when the installed package is missing or outside the range (ImportError / PackageNotFoundError), with
``DISABLE_VERSION_CHECK=1`` as the release's own way around it. So a traceback whose innermost frames are that
check names its cause even when the paste was cut before the ImportError line (LlamaFactory#7920, #5751): a
package outside the release's range. A paste is often cut inside a word ("check_de"), so the innermost code line
counts when it is a prefix of the call.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from finetune_doctor.analyzers.postmortem.framecause import FRAMES_LEAD, frame_lead
from finetune_doctor.analyzers.postmortem.msgcause import ARGS_LEAD, args_lead
from finetune_doctor.analyzers.postmortem.savecause import STAGED, staged_save_lead
from finetune_doctor.analyzers.postmortem.stackcause import _outside, _releases

__all__ = ["args_lead", "dependency_check_lead", "frame_lead", "in_dependency_check", "lead_kind", "staged_save_lead"]

_CHECK_FUNCS = {"check_dependencies (misc.py)", "check_version (misc.py)", "require_version (versions.py)"}
_CALL = "check_dependencies()"
_REQ = re.compile(r"""(?:check|require)_version\(\s*["']([A-Za-z][A-Za-z0-9_.\-]*?)\s*(?:[<>=!~]|["'])""")
_FUNC = re.compile(r"^[\w<>]+ \([\w.-]+\)$")


def _checked_packages() -> list[str]:
    """The packages some catalogued LLaMA-Factory release checks at start-up, in the order the releases list them."""
    seen: list[str] = []
    for rel in _releases().values():
        for req in rel["requires"]:
            if req["package"] not in seen:
                seen.append(req["package"])
    return seen


def in_dependency_check(frames: tuple[str, ...], pkgs: tuple[tuple[str, str, str], ...]) -> bool:
    """True when the innermost frames of a traceback (`frames`: the reader's "func (file.py)" entries with the
    code lines below them, outermost first; `pkgs`: (package, func, file) of the frames under an installed package
    or LLaMA-Factory's src/llamafactory/) are LLaMA-Factory's start-up dependency check: one of the last three
    function frames is ``check_dependencies``/``check_version`` of misc.py or transformers' ``require_version``
    called from there, or the innermost frame is LLaMA-Factory's parser.py module body and its code line, cut or
    whole, is the ``check_dependencies()`` call."""
    lf = {(f, fl) for p, f, fl in pkgs if p == "llamafactory"}
    funcs = [f for f in frames if _FUNC.match(f)]
    inner = funcs[-3:]
    for f in inner:
        name, _, file = f.partition(" (")
        if f in _CHECK_FUNCS and ((name, file[:-1]) in lf or f == "require_version (versions.py)" and lf):
            return True
    if not funcs or funcs[-1] != "<module> (parser.py)" or ("<module>", "parser.py") not in lf:
        return False
    code = frames[-1].strip() if frames and not _FUNC.match(frames[-1]) else ""
    return len(code) >= 5 and _CALL.startswith(code)


def _out_of_range(versions: Mapping[str, tuple[str, str]]) -> str | None:
    """The logged packages (`versions`: {package: (version, where read)}) outside the ranges of the logged
    LLaMA-Factory release (catalog/lf_stack_ranges.json), in words; None without a catalogued release or when
    none is certainly outside (stackcause._outside judges)."""
    lf = versions.get("llamafactory")
    rel = _releases().get(lf[0]) if lf else None
    if rel is None:
        return None
    out = [f"{req['package']} {versions[req['package']][0]} (read at {versions[req['package']][1]}; LLaMA-Factory "
           f"{lf[0]} requires {req['spec']}, {req['where']})"
           for req in rel["requires"] if req["package"] in versions
           and _outside(versions[req["package"]][0], req["spec"])]
    return " and ".join(out) or None


def dependency_check_lead(tb: Any, versions: Mapping[str, tuple[str, str]], said: str | None = None) -> str | None:
    """Words for a traceback cut inside LLaMA-Factory's start-up dependency check (`in_dependency_check`), or
    None: the package when the paste kept the requirement line (``check_version("transformers>=4.41.2,<=``) or
    the logged versions show it outside the logged release's range, else what the user's words beside the paste
    state of the versions (`said`: saidstack.stack_text, judged against LF's ranges), else the packages the
    check covers, and the two ways out the release itself offers."""
    v = tb.value if tb is not None and isinstance(tb.value, dict) else {}
    frames = tuple(x for x in (v.get("frames") or ()) if isinstance(x, str))
    if not frames or not in_dependency_check(frames, tuple(v.get("pkgs") or ())):
        return None
    named = next((m.group(1) for x in reversed(frames[-6:]) for m in [_REQ.search(x)] if m), None)
    rng = _out_of_range(versions)
    if named:
        which = f"here {named} (the requirement line the paste kept)"
    elif rng:
        which = f"here {rng}"
    elif said:
        which = said[:1].lower() + said[1:].rstrip(".")
    else:
        which = (f"one of {', '.join(_checked_packages())}, the packages it checks (`llamafactory-cli env` or "
                 "`pip show` gives their versions; the ImportError below the cut names the one and its range)")
    return ("the traceback stops inside LLaMA-Factory's start-up dependency check (hparams/parser.py calls "
            "check_dependencies() at import; extras/misc.py), which raises only when an installed package is "
            f"missing or outside the release's range: {which}; install it inside that range, or set "
            "DISABLE_VERSION_CHECK=1 to skip the check")


def lead_kind(lead: str) -> str:
    """The ``ev.crash.cause`` kind of a cut traceback's lead that is not the dependency check: ``staged-save``
    for transformers' staged checkpoint save read from the frames (savecause.py), ``frames-lead`` for the kinds a
    trainer frame names (framecause.py), ``unknown-args`` for LLaMA-Factory's refused arguments (msgcause.py),
    else ``warning-lead``."""
    if lead.startswith(ARGS_LEAD):
        return "unknown-args"
    return "staged-save" if lead.startswith(STAGED) else "frames-lead" if lead.startswith(FRAMES_LEAD) else "warning-lead"
