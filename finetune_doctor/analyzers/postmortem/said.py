"""The user's own words as evidence: the symptom a description names, when the run left nothing else to read.

readers/runlogs/userwords.py reads a short file that is prose (an issue title, a sentence) into ``FileEvidence.said``.
Here it becomes the ``ev.said`` fact, but only when no log line gave any evidence: a symptom read from words never
competes with one read from the run's own output. The rules that judge a symptom from a log (cuda-oom, nan-loss,
loss-stuck-zero, nccl-timeout, nccl-error, disk-full, host-oom-killed, run-hang) read ``ev.said`` as a second,
weaker kind of evidence and word their finding as what the words alone support, asking for the output.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import location_of
from finetune_doctor.evidence import Evidence

# every evidence no-run-evidence counts (rules/no-run-evidence.yaml), and the detectors that need a log
_LOG_EVIDENCE = ("oom", "nan", "crash", "nccl", "nccl_error", "killed", "cuda_error", "xid", "loss_zero", "host_alloc",
                 "scale", "gpus", "completed", "has_metrics", "grad_nan_only", "diverged", "image_cut",
                 "attention_warning")


def said_facts(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    """``ev.said``: {symptom, words, phase, phase_words, step, after, text, location} of the first file read as the
    user's words (readers/runlogs/userwords.py `read_words`), or None when there is none or when any log evidence
    (`_LOG_EVIDENCE`, a hang or a stop of the run-health detector) was found."""
    if any(out.get(k) for k in _LOG_EVIDENCE):
        return None
    h = out.get("health") or {}
    if h.get("hang") or h.get("stopped"):
        return None
    for f in ev.files:
        if f.said:
            s = dict(f.said)
            s["location"] = location_of(s.pop("file"), s.pop("line"))
            return s
    return None
