"""benchmarks/memory_z3ddp_rows.py: the group a ZeRO-3 / DDP calibration row is listed under comes from the row's
own fields (card, unit and figure, samples, datasets, counter), never from its error."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import memory_z3ddp_rows as z  # noqa: E402

ZO3 = {"zero_optimization": {"stage": 3}}


def _row(**kw):
    row = {"id": "x", "source_type": "framework-doc", "method": "lora", "config": {"cutoff_len": 2048},
           "deepspeed": ZO3, "gpu": "4xA100-80GB", "measured": {"value": 30, "unit": "GiB", "kind": "allocated"},
           "samples": "fill"}
    row.update(kw)
    return row


def test_groups_follow_the_rows_fields():
    assert z.group(_row(gpu="4xAscend-910B-64GB")) == "npu"
    # '4 * 24GB GPU memory' on 24 GB cards is the card, whatever else the row says
    assert z.group(_row(gpu="4xRTX-3090", measured={"value": 24, "unit": "GB", "kind": "unknown"},
                        samples="dataset")) == "card-size"
    assert z.group(_row(gpu="4xRTX-3090", measured={"value": 22, "unit": "GB", "kind": "unknown"})) == \
        "counter-unknown"
    # a real dataset with no known longest sample, or one that packs (packing fills every sequence)
    assert z.group(_row(samples="dataset")) == "lengths-unknown"
    assert z.group(_row(samples="dataset", datasets=["swift/self-cognition#1000"], model="Qwen/Qwen2.5-7B")) == "stated"
    assert z.group(_row(samples="dataset", datasets=["swift/self-cognition"], model="Qwen/Qwen2.5-7B",
                        config={"cutoff_len": 2048, "packing": True})) == "lengths-unknown"
    assert z.group(_row(measured={"value": 30, "unit": "GiB", "kind": "unknown"})) == "counter-unknown"
    assert z.group(_row()) == "stated"


def test_classes():
    assert z.in_class(_row()) == "ZeRO-3"
    assert z.in_class(_row(deepspeed={"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})) == \
        "ZeRO-3"
    assert z.in_class(_row(deepspeed=None, gpu="2xA100-80GB")) == "DDP"
    assert z.in_class(_row(deepspeed=None, gpu="1xA100-80GB")) is None
    assert z.in_class(_row(deepspeed={"zero_optimization": {"stage": 2}})) is None
