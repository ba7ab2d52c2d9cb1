"""benchmarks/zero3_ga_peak.py's meter: the bytes of storages created under it, until each is freed, and their peak
(hand-sized tensors on CPU)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from lazyskip import importorskip_when_run  # noqa: E402

torch = None
_needs_torch = importorskip_when_run("torch", bind=globals())   # imported when a test runs (lazyskip.py)

import zero3_ga_peak as g  # noqa: E402

MIB = 1 << 20


def test_meter_follows_storages_not_tensor_objects():
    m = g._meter()
    with m:
        a = torch.empty(MIB // 4)                  # 1 MiB of fp32
        v = a[:10]                                 # a view: no new memory
        p = torch.nn.Parameter(torch.empty(MIB // 2))   # 2 MiB
        del a
        assert m.live == 3 * MIB                   # the view keeps a's storage
        del v
        assert m.live == 2 * MIB
        p.data = torch.empty(0)                    # DeepSpeed's release: the storage goes
        assert m.live == 0
    assert m.peak == 3 * MIB


def test_meter_skips_in_place_results():
    before = torch.zeros(MIB // 4)                 # live before the meter: not counted
    m = g._meter()
    with m:
        before.add_(1.0)
        out = before * 2                           # a new 1 MiB storage
        assert m.live == MIB
        del out
    assert m.live == 0 and m.peak == MIB
