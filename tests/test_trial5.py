"""What a new user's fifth trial found (issue #21), each fixed as a kind.

1. A card named without its count (an ``llamafactory-cli env`` paste before "GPU number" was printed) keeps the
   count open: where the run shards over its ranks (ZeRO, FSDP), 2/4/8 GPUs per node are sized, and when one of
   them changes the verdict it is at-risk, not oom; ``--strict`` flags it; ``--gpu NxCARD`` removes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial5"


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def _run(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(main, [*args, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


def test_a_card_without_its_count_sizes_the_counts_and_opens_the_verdict():
    case = FX / "llama3_full_z3_env_no_count"
    code, rep = _run("check", str(case / "config.yaml"), "--env", str(case / "env.txt"), "--offline")
    mem = rep["memory"]
    launcher = next(a for a in rep["assumptions"] if a["name"] == "launcher")
    # one GPU holds the whole 8B model's fp32 Adam states: oom there; over 8 ranks ZeRO-3 shards them below 80 GB
    assert launcher["effect"]["verdict"]["torchrun over 2 GPUs per node"] != "fits"
    assert launcher["effect"]["verdict"]["torchrun over 8 GPUs per node"] == "fits"
    gib = launcher["effect"]["total_gib"]
    assert gib["torchrun over 2 GPUs per node"] > gib["torchrun over 4 GPUs per node"] \
        > gib["torchrun over 8 GPUs per node"]
    assert launcher["moves_verdict"] and rep["assumptions"][0]["name"] == "launcher"
    assert launcher["resolve_with"].startswith("--gpu NxCARD")
    assert mem["verdict"] == "at-risk" and mem["deciding_assumption"]["name"] == "launcher"
    assert code == 0
    # --strict turns it into an error; the count given removes it
    code, rep = _run("check", str(case / "config.yaml"), "--env", str(case / "env.txt"), "--offline", "--strict")
    assert code == 1 and any(f["name"] == "assumption-moves-verdict" and "launcher" in f["message"]
                             for f in rep["findings"])
    code, rep = _run("check", str(case / "config.yaml"), "--gpu", "8xA100-80GB", "--offline")
    assert rep["memory"]["verdict"] == "fits" and not any(
        a["name"] == "launcher" and a["moves_verdict"] for a in rep["assumptions"])


def test_a_replicated_run_without_its_count_is_not_sized_per_count():
    """DDP replicates the whole state on every rank: more GPUs do not lower the peak, so no count is weighed."""
    case = FX / "llama3_full_z3_env_no_count"
    _, rep = _run("check", str(case / "config.yaml"), "--env", str(case / "env.txt"), "--offline",
                  "deepspeed=null", "finetuning_type=lora")
    launcher = [a for a in rep["assumptions"] if a["name"] == "launcher"]
    assert launcher and launcher[0]["effect"]["total_gib"] == {} and not launcher[0]["moves_verdict"]
