"""Paste kinds round 7 showed (issue #25): transformers' Qwen2-VL features/tokens mismatch read by what its two
numbers establish (analyzers/postmortem/mmcause.py), and a Ray worker gone without an exception read as a host-RAM
kill (readers/runlogs/logfailures.py RAY_WORKER_GONE). Fixtures in fixtures/postmortem/short_pastes/ (FIXTURE.md)."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.postmortem.mmcause import MISMATCH
from pmhelp import diagnose

FIX = "short_pastes"


def test_fewer_placeholder_tokens_than_features_is_a_cut_by_cutoff_len(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/vl_placeholders_cut.log")
    assert found[0].name == "image-tokens-exceed-cutoff", [f.name for f in found]
    msg = found[0].message
    assert "tokens: 1436, features: 2048" in msg and "612 fewer image placeholder tokens" in msg
    assert "cutoff_len" in msg and "run-crashed" not in [f.name for f in found]
    assert found[0].location.line == 8


def test_more_tokens_than_features_is_no_cut(tmp_path):
    """A cut only removes placeholders: more tokens than features stays a plain crash, not a cutoff_len cause."""
    found = diagnose(tmp_path, f"{FIX}/vl_placeholders_extra.log")
    assert found[0].name == "run-crashed"
    assert "image-tokens-exceed-cutoff" not in [f.name for f in found]


@pytest.mark.parametrize("line, tokens, features", [
    ("ValueError: Image features and image tokens do not match: tokens: 720, features 360", 720, 360),   # 4.45-4.49
    ("ValueError: Image features and image tokens do not match, tokens: 1991, features: 2990", 1991, 2990),  # 5.x
    ("ValueError: Video features and video tokens do not match, tokens: 10, features: 40", 10, 40),
])
def test_both_wordings_are_read(line, tokens, features):
    m = MISMATCH.search(line)
    assert m and int(m.group("tokens")) == tokens and int(m.group("features")) == features


def test_a_ray_worker_gone_without_an_exception_is_a_likely_host_ram_kill(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/ray_worker_gone.log")
    assert found[0].name == "host-oom-killed", [f.name for f in found]
    msg = found[0].message
    assert msg.startswith("A Ray worker was killed by a SIGKILL Ray could not see")
    assert "most likely the host ran out of RAM" in msg
    assert "run-crashed" not in [f.name for f in found]


def test_ray_memory_monitor_kill_still_says_the_monitor(tmp_path):
    """The memory monitor's own message is certain, not inferred (unchanged by the worker-gone reading)."""
    p = tmp_path / "run"
    p.mkdir()
    (p / "train.log").write_text(
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node (IP: 10.0.0.5, ID: 7f3a) where the task (actor ID: 9c1d, name=WorkerDict.__init__, "
        "pid=90211, memory used=61.20GB) was running was 480.11GB / 503.50GB (0.953552), which exceeds the memory "
        "usage threshold of 0.95.\n")
    from pmhelp import diagnose_dir
    f = diagnose_dir(str(p)).findings[0]
    assert f.name == "host-oom-killed" and "Ray's memory monitor" in f.message and "most likely" not in f.message
