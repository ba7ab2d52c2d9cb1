"""LLaMA-Factory v1 at start-up (issue 24): the gradient accumulation v1 derives from ``global_batch_size``, the
layout checks it raises before training (v1 core/utils/batching.py L184-195, accelerator/interface.py L70-99),
and the releases that have no v1 at all (the first wheel with ``llamafactory/v1`` and ``USE_V1`` is 0.9.4).

The configs are LF's own v1 examples (examples/v1/train_full/train_full_fsdp2.yaml, train_full_ulysses_cp.yaml)
with the batch keys a user adds; the parity of the layout checks against v1's own code is tests/test_parity_v1.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config.lfrelease import choose, v1_releases
from finetune_doctor.readers.config.lfv1 import batch_layout

FSDP2 = """model: Qwen/Qwen3-0.6B
trust_remote_code: true
model_class: llm

# FSDP Config
dist_config:
  name: fsdp2
  dcp_path: null

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_fsdp2
micro_batch_size: {mbs}
global_batch_size: {gbs}
cutoff_len: 2048
learning_rate: 1.0e-4
bf16: true
max_steps: 10
"""


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for k in ("WORLD_SIZE", "NPROC_PER_NODE", "FORCE_TORCHRUN", "RANK", "USE_V1"):
        monkeypatch.delenv(k, raising=False)


def _run(tmp_path: Path, text: str, *args: str, command: str = "check") -> dict:
    p = tmp_path / "v1.yaml"
    p.write_text(text, encoding="utf-8")
    extra = ["--no-data", "--offline"] if command == "check" else []
    res = CliRunner().invoke(main, [command, str(p), "--format", "json", *extra, *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("values, world, accum, error", [
    ({}, 8, 1, None),                                                     # no global batch: dp x micro per step
    ({"global_batch_size": 32, "micro_batch_size": 2}, 8, 2, None),
    ({"global_batch_size": 20, "micro_batch_size": 2}, 8, None, "Got 20 % (8 * 2) != 0."),
    ({"global_batch_size": 8, "cp_size": 2}, 8, 2, None),               # dp = 8 // 2
    ({"global_batch_size": 8, "cp_size": 2}, 3, None, "world_size (3) must be divisible by cp_size (2)."),
    ({"global_batch_size": 8, "dp_size": 2}, 4, None, "got 2 * 1 != 4."),
    ({"global_batch_size": 8, "dp_size": 2, "cp_size": 2}, 4, 4, None),
    ({"global_batch_size": 6}, 1, 6, None),                              # one process: dp 1, nothing checked
    ({"global_batch_size": 4, "micro_batch_size": 0}, 2, None, "ZeroDivisionError"),
    ({"mp_replicate_size": 2, "mp_shard_size": 2}, 4, 1, None),
    ({"mp_replicate_size": 2, "mp_shard_size": 2}, 6, None, "got 2 * 2 != 6."),
    # fsdpturbo's expert parallelism (LF's Qwen3.5-35B-A3B example: ep_size 16) needs dp divisible by ep_size
    ({"dist_config": {"name": "fsdpturbo", "ep_size": 16}}, 8, 1, "got 8 % 16 != 0."),
    ({"dist_config": {"name": "fsdpturbo", "ep_size": 16}}, 16, 1, None),
    ({"dist_config": {"name": "fsdpturbo", "ep_size": 16}}, 1, 1, "got 1 % 16 != 0."),
    ({"dist_config": {"name": "fsdpturbo", "ep_size": 0}}, 4, 1, "ep_size must be positive, got 0."),
    ({"dist_config": {"name": "fsdp2", "ep_size": 16}}, 8, 1, None),           # only fsdpturbo reads ep_size
])
def test_batch_layout_follows_v1(values, world, accum, error):
    lay = batch_layout(values, world)
    assert lay["accum"] == accum
    assert (lay["error"] is None) if error is None else (error in lay["error"])


def test_global_batch_becomes_the_runs_accumulation(tmp_path):
    """global_batch_size 12 of micro-batches of 2: 3 micro-batches per step on 2 GPUs, 6 on one; the run summary
    and the memory model see it (accumulation > 1 keeps the gradients between micro-batches)."""
    two = _run(tmp_path, FSDP2.format(mbs=2, gbs=12), "--gpu", "2xH100-80GB")
    assert (two["run"]["world_size"], two["run"]["micro_batch"], two["run"]["grad_accum"]) == (2, 2, 3)
    assert not [f for f in two["findings"] if f["severity"] == "error"]
    one = _run(tmp_path, FSDP2.format(mbs=2, gbs=2), "--gpu", "1xH100-80GB")
    assert one["run"]["grad_accum"] == 1
    many = _run(tmp_path, FSDP2.format(mbs=2, gbs=12), "--gpu", "1xH100-80GB")
    assert many["run"]["grad_accum"] == 6
    # the same run with accumulation keeps a gradient buffer across micro-batches: never less memory
    assert many["memory"]["per_gpu_gib"]["total"] >= one["memory"]["per_gpu_gib"]["total"]


def test_not_divisible_on_known_gpus_is_an_error_with_v1s_condition(tmp_path):
    rep = _run(tmp_path, FSDP2.format(mbs=2, gbs=12), "--gpu", "4xH100-80GB", command="lint")
    errs = [f for f in rep["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["location"]["key"]) for f in errs] == [("FD043", "global_batch_size")]
    assert "Got 12 % (4 * 2) != 0." in errs[0]["message"] and errs[0]["location"]["line"] == 16


def test_launch_file_decides_the_process_count(tmp_path):
    launch = tmp_path / "run.sh"
    launch.write_text("USE_V1=1 torchrun --nproc_per_node 4 -m llamafactory.v1.launcher sft v1.yaml\n",
                      encoding="utf-8")
    rep = _run(tmp_path, FSDP2.format(mbs=2, gbs=12), "--launch", str(launch), "--gpu", "8xH100-80GB")
    assert rep["run"]["world_size"] == 4
    assert [f["code"] for f in rep["findings"] if f["severity"] == "error"] == ["FD043"]


def test_unknown_world_is_an_assumption_and_a_warning_naming_the_failing_counts(tmp_path):
    rep = _run(tmp_path, FSDP2.format(mbs=1, gbs=12), command="lint")
    assert not [f for f in rep["findings"] if f["severity"] == "error"]
    warn = [f for f in rep["findings"] if f["code"] == "FD044"]
    assert len(warn) == 1 and "5, 7, 8, 16, 32 or 64 process(es)" in warn[0]["message"]
    assert "1, 2, 3, 4 or 6" in warn[0]["message"]
    a = next(a for a in rep["assumptions"] if a["name"] == "v1-world-size")
    assert a["value"] == "1 process: gradient accumulation 12"
    assert "4 processes: accumulation 3" in a["alternatives"]
    # a global batch every common count divides: no warning, no assumption
    quiet = _run(tmp_path, FSDP2.format(mbs=1, gbs=13440), command="lint")
    assert not [f for f in quiet["findings"] if f["code"] == "FD044"]


def test_release_catalogue_knows_where_v1_starts():
    assert v1_releases()[0] == "0.9.4" and "0.9.3" not in v1_releases()
    assert not choose("0.8.3").has_v1 and choose("0.9.4").has_v1 and choose("main").has_v1
    assert choose("0.9.3.post1").has_v1 is False


@pytest.mark.parametrize("version", ["0.8.3", "0.9.0", "0.9.3"])
def test_a_release_without_v1_refuses_a_v1_config_with_one_error(tmp_path, version):
    text = FSDP2.format(mbs=2, gbs=12) + "flash_attn: fa2\n"   # a v1 parse error too: only the release is reported
    rep = _run(tmp_path, text, "--llamafactory", version, "--gpu", "4xH100-80GB", command="lint")
    errs = [f for f in rep["findings"] if f["severity"] == "error"]
    assert len(errs) == 1 and errs[0]["code"] == "FD043", errs
    assert f"LLaMA-Factory {version} has no v1" in errs[0]["message"] and "0.9.4" in errs[0]["message"]


def test_a_release_from_env_file_without_v1_refuses_too(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text("- `llamafactory` version: 0.9.2\n- Platform: Linux-5.15.0-x86_64-with-glibc2.35\n"
                   "- Python version: 3.10.14\n- PyTorch version: 2.4.0+cu121 (GPU)\n"
                   "- Transformers version: 4.45.0\n", encoding="utf-8")
    rep = _run(tmp_path, FSDP2.format(mbs=1, gbs=8), "--env", str(env), command="lint")
    assert [f["code"] for f in rep["findings"] if f["severity"] == "error"] == ["FD043"]


def test_lf_version_assumption_of_a_v1_config_names_the_v1_releases(tmp_path):
    rep = _run(tmp_path, FSDP2.format(mbs=1, gbs=8), command="lint")
    a = next(a for a in rep["assumptions"] if a["name"] == "lf-version")
    assert a["value"] == "a release with v1 (>= 0.9.4)"
    assert a["alternatives"] == list(v1_releases())
    given = _run(tmp_path, FSDP2.format(mbs=1, gbs=8), "--llamafactory", "0.9.5", command="lint")
    assert not [a for a in given["assumptions"] if a["name"] == "lf-version"]
