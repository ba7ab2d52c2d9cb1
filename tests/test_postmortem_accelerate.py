"""An ``accelerate launch`` run's single interleaved log (issue #25): rank 2 raised a CUDA OOM, ranks 0, 1 and 3
timed out in the allreduce it never joined, and torchelastic's "Root Cause (first observed failure)" names rank 0.
The postmortem names rank 2 first. Fixture and the sources of its lines: fixtures/postmortem/causal/README.md.
"""

from __future__ import annotations

import os

from pmhelp import diagnose_dir


LOG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem",
                   "accelerate", "accelerate_oom_rank2.log")


def _oom_line() -> int:
    with open(LOG, encoding="utf-8") as fh:
        return next(i for i, t in enumerate(fh, 1) if t.startswith("[rank2]: torch.OutOfMemoryError"))


def test_accelerate_log_names_the_oom_rank_first_not_elastics_root_cause():
    r = diagnose_dir(LOG)
    assert r.findings[0].name == "cuda-oom" and r.findings[0].location.line == _oom_line()
    first = next(f for f in r.findings if f.name == "rank-failed-first")
    assert first.message.startswith("Rank 2 failed first (CUDA out of memory), by causality")
    assert "(0, 1, 3)" in first.message
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "rank 2 failed first (CUDA out of memory)" in nccl.message and "rank 0 failed first" not in nccl.message


def test_interleaved_log_is_split_into_its_ranks():
    from finetune_doctor.analyzers.postmortem.ranks import rank_facts
    from finetune_doctor.readers.runlogs.runlayout import collect

    rk = rank_facts(collect(LOG, []), {})
    assert rk["count"] == 4 and rk["states"] == {"timed out": 3, "raised": 1}
    assert rk["first_failed"]["rank"] == 2 and rk["first_failed"]["phase"] == "backward"
    row = next(x for x in rk["table"] if x["rank"] == 1)
    assert (row["failure"]["op"], row["failure"]["seq"]) == ("ALLREDUCE", 1580)
