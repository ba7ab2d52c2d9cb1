"""The quote of a user's words a finding repeats (``FileEvidence.said["text"]``, readers/runlogs/userwords.py).

Issue forms put headings between the user's sentences (GitHub's bug-report templates: "System Info",
"Reproduction", "Expected behavior", "Who can help?"; LLaMA-Factory's "Reminder", "System Info", "Reproduction";
Chinese forms' "问题描述", "复现步骤", "报错信息"). Those are the template's words, not the user's, and a quote
that runs the title into them reads as one garbled sentence (trial 15). A quote also ends on a whole clause: cut
mid-phrase, a version the user listed ("pytorch 2.2 and 2.4") can be cut to one.
"""

from __future__ import annotations

import re

QUOTE_CHARS = 300
"""The longest quote, in characters (the bound userwords.py had)."""

# a line that is only a template heading: markdown #'s or ** around it, an optional colon
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*)?\s*(?:system info(?:rmation)?|reproduction|to reproduce|steps to reproduce|"
    r"expected behaviou?r|actual behaviou?r|who can help\??|information|tasks|reminder|others?|"
    r"describe the bug|bug description|description|environment|additional (?:context|information)|"
    r"error (?:message|log)s?|logs?|traceback|问题描述|复现(?:步骤|方法)?|报错信息|错误信息|系统信息|环境信息|预期行为|"
    r"期望行为|其他信息|其他|补充信息)\s*(?:\*\*)?\s*[:：]?\s*$", re.I)
# where a clause ends: a sentence's end, a semicolon, a comma, in English and Chinese
_SENTENCE_END = re.compile(r"[.!?;](?=\s)|[。！？；]")
_CLAUSE_END = re.compile(r",(?=\s)|[，、]")


def quote_text(text: str) -> str:
    """The user's words as one line for a finding to quote: template heading lines dropped (`_HEADING`),
    whitespace collapsed, and, past `QUOTE_CHARS`, cut after the last whole sentence (else clause, else word)
    that fits, with " …" to say so. `text` the short file's text; returns a str of at most QUOTE_CHARS + 2
    characters."""
    kept = " ".join(ln for ln in text.splitlines() if not _HEADING.match(ln))
    flat = " ".join(kept.split())
    if len(flat) <= QUOTE_CHARS:
        return flat
    head = flat[:QUOTE_CHARS + 1]
    for pat in (_SENTENCE_END, _CLAUSE_END):
        ends = [m.end() for m in pat.finditer(head) if m.end() >= QUOTE_CHARS // 3]
        if ends:
            return head[:ends[-1]].rstrip(" ,，、") + " …"
    cut = head.rfind(" ")
    return (head[:cut] if cut >= QUOTE_CHARS // 3 else head[:QUOTE_CHARS]).rstrip() + " …"
