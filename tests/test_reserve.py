"""The replay-derived allocator reserve of the analytic model (analyzers/memory/reserve.py, reserve_table.json)."""

from __future__ import annotations

import json

import pytest

from finetune_doctor.analyzers.memory import reserve
from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import GIB, Hardware

B = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048}


class _DS:
    def __init__(self, stage: int):
        self.resolved = {"zero_optimization": {"stage": stage}}
        self.defaults = {}


def _run(model: str, world: int = 1, stage: int | None = None, **kw):
    hw = Hardware(gpu="t", num_gpus=world, capacity_gib=None, bf16=True, source="flag")
    return resolve_run({**B, **kw}, load_arch(model)[0], hw, _DS(stage) if stage is not None else None)


@pytest.mark.parametrize("model, kw, world, stage, cls", [
    ("Qwen/Qwen2.5-7B", dict(finetuning_type="lora"), 1, None, "default"),
    ("Qwen/Qwen2.5-0.5B", dict(finetuning_type="full"), 1, None, "large_vocab_logits"),
    ("Qwen/Qwen2.5-7B", dict(finetuning_type="lora", cutoff_len=16384), 1, None, "long_sequence"),
    ("Qwen/Qwen1.5-MoE-A2.7B", dict(finetuning_type="lora"), 1, None, "moe"),
    ("Qwen/Qwen2.5-7B", dict(finetuning_type="full"), 8, 3, "zero"),
])
def test_shape_classes(model, kw, world, stage, cls):
    run = _run(model, world, stage, **kw)
    assert reserve.shape_class(run, compute_terms(run)) == cls


def test_table_has_every_class_with_shares_for_both_settings():
    table = json.loads(reserve.TABLE.read_text())["classes"]
    assert set(table) == {"default", "large_vocab_logits", "long_sequence", "moe"}
    for entry in table.values():
        for mode in ("off", "on"):
            assert 0.0 <= entry[mode]["min"] <= entry[mode]["median"] <= entry[mode]["max"] < 1.0
        assert entry["n"] == len(entry["members"]) >= 1


def test_estimate_applies_the_class_reserve():
    run = _run("Qwen/Qwen2.5-7B", finetuning_type="lora")
    est = estimate(run, Hardware(gpu="H100", num_gpus=1, capacity_gib=79.0, bf16=True, source="flag"))
    share, cls = reserve.reserve_fraction(run, compute_terms(run), expandable=False)
    d = est.details
    assert (d["reserve_class"], d["reserve_share"]) == (cls, share)
    assert d["reserve_gib"] == pytest.approx(est.peak_allocated * share, rel=1e-9)
    assert est.total == pytest.approx(est.peak_allocated + d["reserve_gib"] + d["runtime_gib"], rel=1e-9)
    # llamafactory-cli exports expandable_segments for torchrun launches: multi-GPU runs read the 'on' column
    multi = _run("Qwen/Qwen2.5-7B", world=2, finetuning_type="lora")
    assert reserve.reserve_fraction(multi, compute_terms(multi), expandable=True)[0] == \
        json.loads(reserve.TABLE.read_text())["classes"][cls]["on"]["median"]
    assert est.total * GIB > 0
    # ZeRO-2/3 is not derived from replays (stand-in traces): it keeps the former flat reserve
    z = _run("Qwen/Qwen2.5-7B", 8, 3, finetuning_type="full")
    assert reserve.reserve_fraction(z, compute_terms(z), expandable=False) == (0.08, "zero")
