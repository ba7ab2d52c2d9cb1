"""DeepSpeed launcher logs (issue #25): the launcher (deepspeed/launcher/launch.py `sigkill_handler`) prints
"Killing subprocess PID" for every child once one child exits with a non-zero code, or once the launcher itself
gets SIGINT/SIGTERM ("Main process received SIGTERM, exiting"). Those lines are a consequence: a child's
traceback anywhere in the log is the cause; with none, the child died of a signal (most often the host's OOM
killer), said with "most likely" since the exit code is not in the log. Fixtures: fixtures/postmortem/launcher/,
the launcher's lines as DeepSpeed 0.9-0.16 print them (launch.py:256 "process N spawned", launch.py:319/328
sigkill_handler), the child's output interleaved as a terminal shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmhelp import in_folder

_diagnose = in_folder("launcher")


def _findings(name: str, tmp_path: Path) -> list:
    return _diagnose(tmp_path, name)


def test_killing_lines_alone_are_a_child_killed_most_likely_by_the_host(tmp_path):
    f = _findings("killing_only.log", tmp_path)
    assert f[0].name == "host-oom-killed"
    assert "most likely the host ran out of RAM" in f[0].message
    assert "4 training process(es) (pids 20871, 20872, 20873, 20874)" in f[0].message
    # the bar of the checkpoint shards counts files, not steps: no training step is named
    assert "during step" not in f[0].message
    assert f[0].location.line == 11


@pytest.mark.parametrize("name, first, text", [
    # the child's exception is LLaMA-Factory's refusal of the dataset name: its rule leads (refusal.py)
    ("child_traceback.log", "dataset-not-defined", "\"Undefined dataset my_sft_data in dataset_info.json.\""),
    ("child_oom.log", "cuda-oom", "3.82 GiB"),
])
def test_a_child_traceback_wins_over_the_launcher_lines(tmp_path, name, first, text):
    f = _findings(name, tmp_path)
    assert f[0].name == first and text in f[0].message
    assert "host-oom-killed" not in [x.name for x in f]


def test_a_launcher_stopped_from_outside_is_not_a_host_oom(tmp_path):
    f = _findings("launcher_sigterm.log", tmp_path)
    assert "host-oom-killed" not in [x.name for x in f]
    assert f[0].name == "stopped-from-outside" and "SIGTERM from outside" in f[0].message
    assert "during step 39" in f[0].message
