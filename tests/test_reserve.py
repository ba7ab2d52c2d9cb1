"""The replay-derived allocator reserve of the analytic model (analyzers/memory/reserve.py, reserve_table.json)."""

from __future__ import annotations

import json
import statistics

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
    assert set(table) == {"default", "large_vocab_logits", "long_sequence", "moe", "zero"}
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
    # ZeRO-2/3 reads its own class, derived from replays of DeepSpeed's allocation order (derive_zero_reserve.py)
    z = _run("Qwen/Qwen2.5-7B", 8, 3, finetuning_type="full")
    zero = json.loads(reserve.TABLE.read_text())["classes"]["zero"]
    assert reserve.reserve_fraction(z, compute_terms(z), expandable=False) == (zero["off"]["median"], "zero")


# -- shown and needed (reserve.py 'Shown and needed') ---------------------------------------------------------------

NEEDED_MD = reserve.TABLE.parents[3] / "benchmarks" / "results" / "reserve_needed.md"


def test_needed_entries_are_the_replays_medians_and_never_above_shown():
    """reserve_table.json's ``needed`` is what benchmarks/derive_needed_reserve.py wrote: per class and kind of
    training the median of the replayed configs' smallest completing capacity (the page lists every config)."""
    table = json.loads(reserve.TABLE.read_text())["classes"]
    rows = [line.split(" | ") for line in NEEDED_MD.read_text().splitlines()
            if line.startswith("| ") and line.count(" | ") == 6 and "model: config" not in line]
    # the zero class is replayed by derive_zero_reserve.py (tests/test_reserve_zero.py checks its entry)
    table = {k: v for k, v in table.items() if k != "zero"}
    assert len(rows) == sum(e["n"] for e in table.values())          # one page row per replayed config
    for cls, entry in table.items():
        for kind, need in entry["needed"].items():
            mine = [r for r in rows if r[0] == f"| {cls}" and
                    reserve.trains_kind(r[1].split(": ")[1].split(",")[0].split(" ")[0]) == kind]
            assert need["n"] == len(mine) >= 1
            assert need["off"]["median"] == pytest.approx(statistics.median(float(r[4]) for r in mine), abs=6e-4)
            assert need["on"]["median"] == pytest.approx(statistics.median(float(r[6].rstrip(" |")) for r in mine),
                                                         abs=6e-4)
    # what the replays show: an adapter run needs a fraction of what it shows; a full run of its class needs more
    # (three full configs since issue 23's session 13: 0.216 for a 1.5B at 1 x 8192, 0.096 and 0.065 for the 7B/8B
    # shapes whose peak is many tokens' fp32 logits; median 0.096 against the adapters' 0.033)
    long = table["long_sequence"]["needed"]
    assert long["adapter"]["off"]["median"] < 0.25 * table["long_sequence"]["off"]["median"]
    assert long["full"]["off"]["median"] > 2 * long["adapter"]["off"]["median"]


@pytest.mark.parametrize("model, kw, expandable", [
    ("Qwen/Qwen2.5-7B", dict(finetuning_type="lora", cutoff_len=16384), False),
    ("Qwen/Qwen2.5-7B", dict(finetuning_type="lora", cutoff_len=16384), True),
    ("Qwen/Qwen2.5-1.5B", dict(finetuning_type="full", cutoff_len=8192), False),
    ("Qwen/Qwen2.5-7B", dict(finetuning_type="lora"), False),
])
def test_needed_fraction_reads_class_kind_and_mode(model, kw, expandable):
    run = _run(model, **kw)
    t = compute_terms(run)
    share, cls = reserve.needed_fraction(run, t, expandable)
    entry = json.loads(reserve.TABLE.read_text())["classes"][cls]
    kind = "full" if kw["finetuning_type"] == "full" else "adapter"
    want = entry["needed"][kind]["on" if expandable else "off"]["median"]
    assert share == min(want, reserve.reserve_fraction(run, t, expandable)[0])


def test_zero_runs_need_what_their_replays_need():
    """ZeRO's need comes from the replays of DeepSpeed's own allocation order (derive_zero_reserve.py), per kind
    of training, never above what the class shows."""
    zero = json.loads(reserve.TABLE.read_text())["classes"]["zero"]
    for ftype, kind in (("full", "full"), ("lora", "adapter")):
        z = _run("Qwen/Qwen2.5-7B", 8, 3, finetuning_type=ftype)
        t = compute_terms(z)
        for expandable, mode in ((False, "off"), (True, "on")):
            shown = reserve.reserve_fraction(z, t, expandable)
            assert reserve.needed_fraction(z, t, expandable) == (
                min(zero["needed"][kind][mode]["median"], shown[0]), "zero")


def test_estimate_decides_fit_on_the_need_and_shows_the_total():
    """A 7B LoRA at 16k tokens shows ~17 % reserve on a roomy card but needs ~3 %: on a card between the two
    figures it fits (headroom against the need), while `total` stays what nvidia-smi would show."""
    run = _run("Qwen/Qwen2.5-7B", finetuning_type="lora", cutoff_len=16384)
    free = estimate(run, None)
    d = free.details
    need_share, _ = reserve.needed_fraction(run, compute_terms(run), False)
    assert d["reserve_needed_share"] == need_share
    assert free.need == pytest.approx(free.peak_allocated * (1 + need_share) + d["runtime_gib"], rel=1e-9)
    assert free.total == pytest.approx(free.peak_allocated * (1 + d["reserve_share"]) + d["runtime_gib"], rel=1e-9)
    assert free.total - free.need > 4.0                                        # GiB: the cache it can give back
    cap = (free.total + free.need) / 2
    hw = Hardware(gpu="x", num_gpus=1, capacity_gib=cap, bf16=True, source="flag")
    est = estimate(run, hw)
    assert est.total > cap and est.fits is True and est.details["first_oom"] is None
    assert est.headroom == pytest.approx(cap - est.need, abs=1e-9)
    from finetune_doctor.analyzers.memory import uncertainty
    a = uncertainty.assess(est.total, cap, "analytic", "long_sequence/unquantized", est.need)
    assert a.verdict != "oom" and uncertainty.assess(est.total, cap, "analytic", "long_sequence/unquantized").verdict \
        == "oom"
    # the interval stays the shown total's
    assert a.interval_gib == uncertainty.assess(est.total, None, "analytic", "long_sequence/unquantized").interval_gib


def test_fsdp_needs_its_init_floor_but_not_its_idle_side_pools():
    """FSDP1 (reserve.py `needed_reserve`): idle blocks of FSDP's own stream pools are whole free segments that the
    allocator releases before an OOM; the blocks initialisation left in the default pool hold live shards and stay."""
    from types import SimpleNamespace

    t = SimpleNamespace(side_pools=5.0, side_live=2.0, init_floor=12.0)
    # default stream: 8 of the 10-byte peak; its pool is the init floor (12 > 8 × 1.05); plus the live side blocks
    assert reserve.needed_reserve(10.0, 0.05, t) == pytest.approx(12.0 + 2.0 - 10.0)
    assert reserve.pool_reserve(10.0, 0.05, t) == pytest.approx(12.0 + 5.0 - 10.0)
    # without FSDP's pools the need is the share of the peak
    assert reserve.needed_reserve(10.0, 0.05) == pytest.approx(0.5)
    assert reserve.needed_reserve(10.0, -0.03) == 0.0            # a replay artefact below zero counts as none
