"""Fuzz suite, part 1 (issue 17 "Done when"): Hypothesis draws structured inputs of every kind the doctor reads
(tests/fuzzkit/strategies.py) and every command that reads them must keep the CLI contract of
tests/fuzzkit/run.py: exit 0, 1 or 2; never a traceback or ``internal error``; exit 2 with one
``doctor: <file>:<line>: ...`` line; no escape byte on stdout; done within the per-run time limit.

The profile is fixed (``derandomize=True``): CI draws the same examples on every run, so a failure reproduces.
Commands run in-process (click's CliRunner) with ``--offline`` and HF_HUB_OFFLINE=1: nothing reaches a network.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fuzzkit import strategies as fs
from fuzzkit.run import invoke

# Hypothesis fuzzers run hundreds of whole commands each: the slow lane (CI's `-m "not gpu"`), not the edit loop
pytestmark = pytest.mark.slow

PROFILE = dict(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
GPU = ["--gpu", "A100-80GB", "--offline"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def _ok(args: list[str], limit_s: float = 20.0, text: str = "") -> None:
    out = invoke(args, limit_s)
    event(f"{args[0]}{' --fix' if '--fix' in args else ''} exit {out.code}")
    assert out.problem is None, f"doctor {' '.join(args)}: {out.problem}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


class _Dir:
    def __enter__(self) -> str:
        self.path = tempfile.mkdtemp(prefix="fuzz-")
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8", errors="surrogatepass", newline="") as fh:
        fh.write(text)
    return path


_OVERRIDE = st.tuples(st.sampled_from([k for k, _ in fs.schema_keys()]),
                      st.sampled_from(["1", "0", "-8", "2", "true", "null", ".inf", "1e400", str(2**63), "[1,2]",
                                       "{a: 1}", "*a", "&a [*a]", "", "x", "\x1b]0;t\x07"])
                      ).map(lambda kv: f"{kv[0]}={kv[1]}")


@settings(max_examples=100, **PROFILE)
@given(text=fs.training_yaml(), overrides=st.lists(_OVERRIDE, max_size=2))
def test_training_yaml_lint_fix_check_estimate(text, overrides):
    with _Dir() as d:
        cfg = _write(os.path.join(d, "train.yaml"), text)
        _ok(["lint", cfg])
        _ok(["lint", "--fix", "--unsafe-fixes", _write(os.path.join(d, "copy.yaml"), text)])
        _ok(["check", cfg, *overrides, "--no-data", *GPU])
        _ok(["estimate", cfg, *overrides, *GPU])


@settings(max_examples=60, **PROFILE)
@given(ds=fs.deepspeed_json(), stage=st.sampled_from(["sft", "pt", "dpo"]))
def test_deepspeed_json_with_its_yaml(ds, stage):
    with _Dir() as d:
        js = _write(os.path.join(d, "ds.json"), ds)
        cfg = _write(os.path.join(d, "train.yaml"),
                     f"model_name_or_path: Qwen/Qwen2.5-7B\nstage: {stage}\ndo_train: true\nfinetuning_type: full\n"
                     f"dataset: alpaca_en_demo\ntemplate: qwen\ncutoff_len: 2048\noutput_dir: out\n"
                     f"per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nbf16: true\n"
                     f"deepspeed: {js}\n")
        _ok(["lint", cfg, js])
        _ok(["lint", "--fix", js], text=ds)
        _ok(["check", cfg, "--no-data", "--gpu", "8xA100-80GB", "--offline"])
        _ok(["estimate", cfg, "--gpu", "8xA100-80GB", "--offline"])


@settings(max_examples=60, **PROFILE)
@given(log=fs.trainer_log_jsonl(), state=fs.trainer_state_json(), which=st.sampled_from(["log", "state", "both"]))
def test_trainer_records_postmortem(log, state, which):
    with _Dir() as d:
        if which in ("log", "both"):
            _write(os.path.join(d, "trainer_log.jsonl"), log)
        if which in ("state", "both"):
            _write(os.path.join(d, "trainer_state.json"), state)
        _ok(["postmortem", d])
        _ok(["postmortem", d, "--format", "json"])


@settings(max_examples=80, **PROFILE)
@given(text=fs.log_text(), name=st.sampled_from(["train.log", "rank1.log", "nohup.out", "stderr.txt"]))
def test_log_text_postmortem(text, name):
    with _Dir() as d:
        run = os.path.join(d, "run")
        os.mkdir(run)
        log = _write(os.path.join(run, name), text)
        _ok(["postmortem", run])
        _ok(["postmortem", d, "--log", log, "--format", "github"])


@settings(max_examples=80, **PROFILE)
@given(rec=fs.gpus_recording())
def test_gpus_from_recording(rec):
    suffix, text = rec
    with _Dir() as d:
        path = _write(os.path.join(d, "node0" + suffix), text)
        _ok(["gpus", "--from", path])
        _ok(["gpus", "--from", path, "--format", "json"])


@settings(max_examples=50, **PROFILE)
@given(folder=fs.dataset_folder(), cutoff=st.sampled_from(["64", "1", "0", "-1", "2048"]))
def test_dataset_folder_data_and_check(folder, cutoff):
    with _Dir() as d:
        names = folder.pop("__names__")
        for name, text in folder.items():
            _write(os.path.join(d, name), text)
        cfg = _write(os.path.join(d, "train.yaml"),
                     f"model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nstage: sft\ndo_train: true\n"
                     f"finetuning_type: lora\ndataset: {names}\ndataset_dir: {d}\ntemplate: qwen\n"
                     f"cutoff_len: {cutoff}\noutput_dir: out\nper_device_train_batch_size: 2\n")
        _ok(["data", cfg, "--approximate", "--workers", "1", "--offline"])
        _ok(["check", cfg, "--gpu", "A100-80GB", "--offline"])
