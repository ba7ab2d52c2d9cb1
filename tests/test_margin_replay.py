"""The allocator replay wired into the reports (probes/replayed.py, probes/confirm.py): `doctor check --probe` and
`doctor probe` replay the configured run's simulation on the user's card, and `doctor postmortem` confirms the
fragmentation finding by replaying the crashed config. References: the allocator replay of the same simulation
called directly (probes/replay.py), the runtime terms of analyzers/memory/runtime.py, PyTorch's OOM message format
(``DeviceCachingAllocator::malloc``), and the error model of the simulated method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lazyskip import importorskip_when_run  # noqa: E402

_needs_torch = importorskip_when_run("torch", "transformers")   # at the first test (lazyskip.py)

_needs_peft = importorskip_when_run("peft")   # at the first test (lazyskip.py)

from finetune_doctor.analyzers.memory import uncertainty  # noqa: E402
from finetune_doctor.cli import main  # noqa: E402
from finetune_doctor.hardware.catalog import parse_gpu_spec  # noqa: E402
from finetune_doctor.pipeline import postmortem as pm  # noqa: E402
from finetune_doctor.probes.replay import replay_sim  # noqa: E402
from finetune_doctor.probes.replayed import replay_probe, untrusted  # noqa: E402
from finetune_doctor.probes.simulate import simulate  # noqa: E402
from finetune_doctor.probes.spec import spec_from_run  # noqa: E402
from finetune_doctor.readers.model.modelcfg import load_arch  # noqa: E402
from finetune_doctor.run import resolve_run  # noqa: E402
from finetune_doctor.settings import Options  # noqa: E402

GIB = float(1 << 30)
QWEN05 = """model_name_or_path: Qwen/Qwen2.5-0.5B
stage: sft
do_train: true
finetuning_type: full
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048
output_dir: saves/qwen2.5-0.5b/full/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
learning_rate: 1.0e-5
bf16: true
"""


def _qwen05(gpu: str):
    hw = parse_gpu_spec(gpu)
    run = resolve_run({"finetuning_type": "full", "bf16": True, "cutoff_len": 2048,
                       "per_device_train_batch_size": 1, "gradient_accumulation_steps": 2},
                      load_arch("Qwen/Qwen2.5-0.5B")[0], hw)
    return run, hw


@pytest.mark.slow
def test_replay_view_adds_runtime_and_fails_where_pytorch_would():
    run, small = _qwen05("RTX-3080-10GB")
    sim = simulate(spec_from_run(run), steps=2, trace=True)
    view = replay_probe(run, small, sim, env={})
    direct = replay_sim(sim)                                # the same trace, no card, default settings
    from finetune_doctor.analyzers.memory import runtime_bytes

    runtime = runtime_bytes(run, small) / GIB
    assert view.runtime_gib == pytest.approx(runtime, abs=1e-9) and view.outside_gib == pytest.approx(0.0, abs=1e-9)
    assert view.total_gib == pytest.approx(direct.peak_reserved_gib + runtime, abs=1e-6)
    assert untrusted(view, sim) is None                     # the replay's allocated peak is the tracker's
    # 9.85 GiB is too small: the capped replay fails at a request, in PyTorch's words
    assert view.fits is False and view.oom is not None
    msg = view.oom["message"]
    assert msg.startswith("CUDA out of memory. Tried to allocate ")
    assert "GPU 0 has a total capacity of 9.85 GiB" in msg and "is reserved by PyTorch but unallocated" in msg
    # with expandable segments (toggled) the same trace reserves no more than without
    assert view.toggled is not None and view.toggled.conf.expandable_segments
    assert replay_sim(sim, view.toggled.conf).peak_reserved <= direct.peak_reserved * 1.02
    # on a large card it fits and nothing fails
    run80, big = _qwen05("A100-80GB")
    fit = replay_probe(run80, big, sim, env={})
    assert fit.fits and fit.oom is None


@pytest.mark.slow
def test_check_probe_section_carries_the_replay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(QWEN05, encoding="utf-8")
    r = CliRunner().invoke(main, ["check", "config.yaml", "--gpu", "RTX-3080-10GB", "--no-data", "--probe",
                                  "--format", "json"])
    d = json.loads(r.output)
    rep = d["probe"]["replay"]
    assert rep["total_gib"] == pytest.approx(rep["peak_reserved_gib"] + rep["runtime_gib"], abs=2e-3)
    assert rep["fits"] is False and rep["oom"]["message"].startswith("CUDA out of memory. Tried to allocate")
    assert rep["verdict"] == "oom" and rep["with_expandable_segments"]["expandable_segments"] is True
    dist = uncertainty.error_dist("simulated", rep["error_class"])
    assert rep["p_oom"] == pytest.approx(uncertainty.p_oom(rep["total_gib"], rep["capacity_gib"], dist), abs=2e-3)
    # the fixes' before figure is the same replay's total
    oom = next(f for f in d["findings"] if f["name"] == "predicted-oom")
    assert oom["fix"]["confirmed"]["before_gib"] == pytest.approx(rep["total_gib"], abs=0.01)


@pytest.mark.slow
def test_doctor_probe_memory_is_the_replay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(QWEN05, encoding="utf-8")
    r = CliRunner().invoke(main, ["probe", "config.yaml", "--gpu", "A100-80GB", "--mode", "simulate",
                                  "--format", "json"])
    d = json.loads(r.output)
    mem, rep = d["memory"], d["probe"]["replay"]
    assert mem["method"] == "simulated" and rep["fits"] is True and rep["oom"] is None
    assert mem["per_gpu_gib"]["total"] == pytest.approx(rep["total_gib"], abs=0.01)
    assert mem["verdict"] == "fits" and mem["p_oom"] < 0.01
    assert mem["interval_gib"][0] < mem["per_gpu_gib"]["total"] < mem["interval_gib"][1]


@pytest.mark.slow
def test_postmortem_confirms_fragmentation_by_replaying_the_crashed_config(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    # a fragmented OOM on a T4 (14.75 GiB), the words of PyTorch >= 2.2's message
    (d / "err.log").write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of "
        "14.75 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 13.72 GiB memory in "
        "use. Of the allocated memory 11.31 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but "
        "unallocated.\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(QWEN05, encoding="utf-8")
    r = pm.run(str(d), [], str(cfg), Options(command="postmortem"))
    frag = next(f for f in r.findings if f.name == "fragmentation")
    assert "The allocator model of this configuration agrees" in frag.message
    conf = frag.fix.confirmed
    assert conf is not None and conf.by == "replay"
    assert conf.after_gib <= conf.before_gib * 1.02 and "14.8" in (conf.note or "")
