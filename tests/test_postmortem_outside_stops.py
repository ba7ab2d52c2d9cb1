"""Runs ended from outside the training code by a scheduler or a container, in the lines those print (issue #25:
kinds that recur across the held-out rounds' first misses are other tools' formats for a failure the doctor knows
from PyTorch's). Fixtures: fixtures/postmortem/outside_stops/ (FIXTURE.md names each upstream line)."""

from __future__ import annotations

import pytest

from pmhelp import diagnose

FIX = "outside_stops"


@pytest.mark.parametrize("name, rule, words", [
    ("slurm_time_limit.log", "stopped-from-outside",
     ["Slurm job 4412093 on gpu-a100-17", "Slurm's time limit", "during step 1411 of 3000", "longer --time"]),
    ("slurm_cancel.log", "stopped-from-outside", ["Slurm step 551203.0 on node-3", "a cancel (scancel"]),
    ("lightning_sigterm.log", "stopped-from-outside", ["rank 0 was stopped by SIGTERM from outside",
                                                       "Lightning logged \"Received SIGTERM\""]),
    ("k8s_oomkilled.log", "host-oom-killed", ["the cgroup (container) memory limit"]),
])
def test_a_stop_from_outside_names_who_stopped_it(tmp_path, name, rule, words):
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert found and found[0].name == rule, [f.name for f in found]
    for w in words:
        assert w in found[0].message, (w, found[0].message)


@pytest.mark.parametrize("text", [
    "the job was CANCELLED AT the end of the queue window\n",        # Slurm's line has its *** frame and entity
    "Reason:       Completed\n      Exit Code:    0\n",               # a container that ended normally
    "INFO: Received SIGTERM: 15 handlers registered, continuing\n",     # Lightning's line ends at the number
])
def test_look_alike_lines_are_not_stops(tmp_path, text):
    log = tmp_path / "src.log"
    log.write_text(text)
    names = [f.name for f in diagnose(tmp_path, log)]
    assert "stopped-from-outside" not in names and "host-oom-killed" not in names, names
