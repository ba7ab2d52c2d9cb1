"""What a native crash's own paste says beyond the signal (issue #25, trial 15): whether Python's fault handler was
already on, whether the user trimmed the stack, which exit status is shown, and the step the words give.

- CPython prints "Fatal Python error: Segmentation fault" (also "Bus error", "Aborted", "Illegal instruction",
  "Floating-point exception") from its fault handler (Python/faulthandler.c, ``faulthandler_fatal_error``), then
  the Python stack of each thread ("Current thread 0x... (most recent call first):" and its "File ..., line N in
  f" lines). The banner means the handler was on (PYTHONFAULTHANDLER=1, ``-X faulthandler``, or a library that
  enabled it), so advising PYTHONFAULTHANDLER=1 is advising what was done: the stack is under the banner.
- A paste trimmed by its writer ("...lots of stuff trimmed here...", "[...]", "省略", "<snip>") lost that
  stack: ask for it untrimmed.
- An exit status is stated only where a line shows it: bash's "Segmentation fault (core dumped)", UCX's "Caught
  signal 11 (Segmentation fault ...)" and the banner name the signal, not the status (128 + 11 = 139 for a shell,
  -11 for Python's subprocess) — trial 12 made the same decision for a bare ``Killed``.
- "96 steps into training", "at step 96", "第96步": the step the words give, as an approximate step.

Applied to ``ev.killed`` (analyzers/postmortem/causes.py `killed_facts`) by timeline.py; rule native-crash reads
``native_text``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from finetune_doctor.evidence import Evidence

FAULT_BANNER = re.compile(r"^Fatal Python error: (?:Segmentation fault|Bus error|Aborted|Illegal instruction|"
                          r"Floating[- ]point exception)", re.M)
TRIMMED = re.compile(r"\b(?:trimmed|snipped|truncated|omitted|cut (?:here|out|for brevity))\b|<snip>|\[\s*(?:\.{3}|…)\s*\]|"
                     r"\[(?:snip|trimmed|truncated|omitted)\]|省略|删减|截断|^\s*(?:\.{3,}|…+)\s*$", re.I | re.M)
_STEP_WORDS = re.compile(r"\b(?P<a>\d+)\s+(?:steps?|iter(?:ation)?s?)\s+(?:in|into)\b(?:\s+(?:the\s+)?(?:training|train|run|epoch)\b)?|\b(?:at|around|after)\s+step\s+"
                         r"(?P<b>\d+)\b|第\s*(?P<c>\d+)\s*(?:步|个?step)", re.I)

NATIVE_FAULT = ("a fault inside compiled code (a CUDA or C++ extension, a tokenizer, a kernel built for another torch "
                "or CUDA), which leaves no Python traceback")
VERSIONS = ("compare the versions of the compiled packages (flash-attn, bitsandbytes, deepspeed ops, vllm, "
            "liger-kernel) with the installed torch and CUDA")


def _short_texts(ev: Evidence) -> list[str]:
    """The whole texts of the short files (pastes) the reader kept (``FileEvidence.text``, readers/runlogs/
    logkept.py: files of at most 64 KiB); no file is read again."""
    return [f.text for f in ev.files if f.text]


# faulthandler's frame lines ("  File "/path/x.py", line 51 in f"), innermost first
_CURRENT = re.compile(r"^Current thread 0x[0-9a-fA-F]+ \(most recent call first\):", re.M)
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>[\w<>.]+)', re.M)


def native_text(banner: str | None, trimmed: str | None, frame: str | None = None) -> str:
    """The advice of rule native-crash for a fault read from a log: with the fault handler's banner in the
    input, where its stack is (and, where the paste was trimmed, to give it untrimmed); without it, to turn the
    handler on."""
    if banner is None:
        return (f"{NATIVE_FAULT}. Rerun with `PYTHONFAULTHANDLER=1` so Python prints the stack of the line that "
                f"faulted, and {VERSIONS}.")
    if frame and not trimmed:
        return (f"{NATIVE_FAULT.replace('leaves no Python traceback', 'raises no Python exception')}. "
                f"\"{banner}\" is CPython's fault handler speaking; the stack it printed under it starts at "
                f"{frame}, the innermost Python frame, whose call entered the compiled code that faulted: "
                f"{VERSIONS}, that package's first.")
    where = (f"the paste trims what follows it (\"{trimmed}\"): give the untrimmed lines under that banner" if trimmed
             else "give those lines whole")
    return (f"{NATIVE_FAULT.replace('leaves no Python traceback', 'raises no Python exception')}. \"{banner}\" is CPython's fault handler speaking, so it was already on and printed the "
            "Python stack of every thread right under that banner (\"Current thread 0x... (most recent call "
            f"first)\", then File/line entries, innermost first): {where} — the innermost frames of the thread that "
            f"faulted name the call that entered compiled code; and {VERSIONS}.")


def native_words(killed: dict[str, Any] | None, ev: Evidence) -> dict[str, Any] | None:
    """`killed` (``ev.killed``) with ``native_text`` and ``fix_title`` set for a native crash, the exit status
    dropped from ``how``/``timeline_text`` where no input line shows it, and the step the words give added to
    ``how`` ("about step 96, as the words say: ...") where no log gave one. Other kills come back unchanged (with
    ``native_text`` None); returns `killed`."""
    if not killed:
        return killed
    killed.setdefault("native_text", None)
    killed.setdefault("fix_title", "rerun with PYTHONFAULTHANDLER=1 to name the line that faulted")
    if not killed.get("native") or killed.get("shm") or killed.get("abort"):
        return killed
    texts = _short_texts(ev)
    joined = "\n".join(texts)
    b = FAULT_BANNER.search(joined)
    t = TRIMMED.search(joined)
    banner = b.group(0) if b else None
    # the user's whole trimming line, as written ("...lots of stuff trimmed here...")
    trimmed = joined[joined.rfind("\n", 0, t.start()) + 1:].split("\n", 1)[0].strip()[:80] if t else None
    # the thread that faulted is the one faulthandler heads "Current thread" (the others: "Thread 0x...")
    cur = _CURRENT.search(joined, b.end()) if b else None
    f = _FH_FRAME.search(joined, cur.end()) if cur else None
    frame = f"{f.group('func')} ({Path(f.group('file')).name}:{f.group('line')})" if f else None
    killed["native_text"] = native_text(banner, trimmed, frame)
    if banner and frame and not trimmed:
        killed["fix_title"] = f"check the compiled package that {frame} calls against the installed torch and CUDA"
    elif banner:
        killed["fix_title"] = ("give the untrimmed Python stack printed under the fault handler's banner"
                               if trimmed else "give the Python stack printed under the fault handler's banner")
    code = killed.get("exitcode")
    # CPython's CalledProcessError prints "died with <Signals.SIGSEGV: 11>" exactly for a return code of -11
    died = rf"died with <Signals\.\w+: {-code}>" if isinstance(code, int) and code < 0 else r"(?!x)x"
    shown = code is not None and (re.search(rf"(?<![\w.-]){code}(?![\w.])|{died}", str(killed.get("text") or "")) or
                                  any(re.search(rf"(?:exit ?code|return ?code|status)\s*[:=]?\s*{code}\b", x, re.I)
                                      for x in texts))
    if code is not None and not shown:
        for key in ("how", "timeline_text"):
            killed[key] = str(killed.get(key) or "").replace(f" (exit code {code})", "")
    s = _STEP_WORDS.search(joined) if killed.get("step") is None else None
    if s:
        n = int(s.group("a") or s.group("b") or s.group("c"))
        about = f"about step {n} (as the words say: \"{s.group(0)}\", not a logged step)"
        killed["how"], killed["timeline_text"] = f"{killed.get('how')} {about}", f"{killed.get('timeline_text')} {about}"
        killed["words_step"] = n
    return killed
