"""torchrun stopped from outside (issue #25, trial 8 case LlamaFactory#9695): torchelastic's agent logs "Received 1
death signal, shutting down workers" (torch/distributed/elastic/agent/server/api.py) and raises SignalException
"Process N got signal: 1" (multiprocessing/api.py `_terminate_process_handler`). The run was not a crash: the
launcher got SIGHUP, and nohup did not help because torchelastic installs its own SIGHUP handler (PContext.start,
TORCHELASTIC_SIGNALS_TO_HANDLE). Fixtures: fixtures/postmortem/trial8/9695/ (the issue's pasted log tail and
launch line; run2 adds the SignalException line from the issue's title)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pmhelp import diagnose_dir


FIX = Path(__file__).resolve().parent.parent / "fixtures" / "postmortem" / "trial8" / "9695"


def _run(tmp_path: Path, run: str, launch: str | None) -> list:
    d = tmp_path / run
    shutil.copytree(FIX / run, d)
    return list(diagnose_dir(d, launch=launch).findings)


@pytest.mark.parametrize("run", ["run", "run2"])
def test_sighup_under_nohup_is_stopped_from_outside_not_fine_nor_a_crash(tmp_path, run):
    f = _run(tmp_path, run, str(FIX / "cmdline.txt"))
    assert [x.name for x in f] == ["stopped-from-outside"]
    msg = f[0].message
    assert "torchrun (the torchelastic agent" in msg and "SIGHUP from outside" in msg
    assert "during step 1664 of 2840" in msg
    assert "under nohup, which does not protect a torchrun job" in msg and "setsid" in msg
    assert f[0].location.line == 13


def test_without_nohup_in_the_launch_line_it_asks_who_sent_the_signal(tmp_path):
    launch = tmp_path / "cmd.txt"
    launch.write_text("FORCE_TORCHRUN=1 llamafactory-cli train examples/train_lora/qwen3_vl_think_lora_sft.yaml\n")
    f = _run(tmp_path, "run", str(launch))
    assert [x.name for x in f] == ["stopped-from-outside"]
    assert "nohup, which does not" not in f[0].message
    assert "Check who sent the signal" in f[0].message


@pytest.mark.parametrize("line, sig, who", [
    # Python < 3.11 prints the signal.Signals member by name
    ("Received Signals.SIGTERM death signal, shutting down workers", "SIGTERM", "a scheduler's time limit"),
    ("Received 2 death signal, shutting down workers", "SIGINT", "Ctrl-C"),
])
def test_the_signal_is_named_in_both_printings(tmp_path, line, sig, who):
    text = (FIX / "run" / "train_qwen3vl_think_1229.log").read_text(encoding="utf-8")
    d = tmp_path / "r"
    d.mkdir()
    (d / "train.log").write_text(text.replace("Received 1 death signal, shutting down workers", line),
                                 encoding="utf-8")
    f = list(diagnose_dir(d).findings)
    assert [x.name for x in f] == ["stopped-from-outside"]
    assert f"{sig} from outside ({who}" in f[0].message


def test_the_summary_says_stopped_from_outside_not_crashed(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(FIX / "run", d)
    rep = diagnose_dir(d, launch=str(FIX / "cmdline.txt"))
    sec = rep.sections["postmortem"]
    assert sec["stopped_outside"] is True and sec["steps"]["last"] == 1663 and sec["steps"]["total"] == 2840
