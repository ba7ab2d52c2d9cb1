"""The NVML adapter, exercised through a stand-in pynvml module, the replaying fake, and detect()."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from finetune_doctor.hardware.fake import FakeAdapter, FakeNvmlModule, FakePsutil
from finetune_doctor.hardware.nvml import (
    LAUNCHER,
    NVMLQueryError,
    NVMLUnavailable,
    NvmlAdapter,
    ProcessResolver,
    detect,
    hardware_from_snapshot,
    visible_cards,
)
from finetune_doctor.hardware.snapshot import Snapshot

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "gpus"
MIB = 2**20
GIB = 2**30


def _snap(name: str) -> Snapshot:
    return FakeAdapter(FIX / f"{name}.json").snapshot()


def _adapter(snap: Snapshot, **kw) -> NvmlAdapter:
    return NvmlAdapter(nvml=FakeNvmlModule(snap, **kw), psutil_mod=FakePsutil(snap), host=snap.host)


@pytest.mark.parametrize("name", ["one_card", "eight_imbalance", "l40_foreign", "mig", "hidden_procs"])
def test_adapter_reads_back_what_the_driver_reports(name: str) -> None:
    """NVML calls answered from a recorded snapshot come back as the same snapshot (processes, MIG, ECC...)."""
    snap = _snap(name)
    got = _adapter(snap).snapshot()
    assert replace(got, time=0, notes=()) == replace(snap, time=0, notes=())


def test_memory_info_v1_fallback_on_an_old_driver() -> None:
    snap = _snap("one_card")
    got = _adapter(snap, missing={"nvmlDeviceGetMemoryInfo_v2"}).snapshot()
    c, ref = got.cards[0], snap.cards[0]
    # v1 has no reserved field and counts the driver's reservation as used
    assert c.reserved_bytes is None
    assert c.used_bytes == ref.used_bytes + ref.reserved_bytes
    assert c.total_bytes == ref.total_bytes


def test_unsupported_and_too_old_queries_read_as_none_with_a_note() -> None:
    snap = _snap("one_card")
    got = _adapter(snap, unsupported={"nvmlDeviceGetPowerUsage"}, missing={"nvmlDeviceGetRemappedRows"}).snapshot()
    c = got.cards[0]
    assert c.power_w is None and c.remapped_rows_pending is None
    assert c.used_bytes == snap.cards[0].used_bytes  # the rest of the card still reads
    assert "power draw: Not Supported" in got.notes
    assert "row remapping: the driver is too old for this query" in got.notes


def test_hidden_process_list_is_none_not_empty() -> None:
    got = _adapter(_snap("hidden_procs")).snapshot()
    assert all(c.processes is None for c in got.cards)
    assert "Insufficient Permissions" in got.cards[0].process_note


@pytest.mark.parametrize("err, words", [("LibraryNotFound", "no NVIDIA driver found"),
                                        ("DriverNotLoaded", "driver is not loaded")])
def test_no_driver_is_a_clean_unavailable(err: str, words: str) -> None:
    with pytest.raises(NVMLUnavailable) as exc:
        _adapter(_snap("one_card"), init_error=err)
    assert words in str(exc.value)
    assert "\n" not in str(exc.value)


def test_lost_gpu_mid_snapshot_is_a_query_error() -> None:
    with pytest.raises(NVMLQueryError, match="GPU 3: memory query failed: GPU is lost"):
        _adapter(_snap("eight_imbalance"), lost=3).snapshot()


def test_static_facts_are_read_once() -> None:
    snap = _snap("eight_imbalance")
    nv = FakeNvmlModule(snap)
    ps = FakePsutil(snap)
    ad = NvmlAdapter(nvml=nv, psutil_mod=ps, host="h")
    before = nv.calls
    ad.snapshot()
    first = nv.calls - before
    ad.snapshot()
    second = nv.calls - before - first
    # name, UUID, PCI id and compute capability (4 calls per card) are read on the first pass only
    assert first - second == 4 * 8
    # 8 rank pids (the 7 stray contexts on GPU 0 are the same pids): each command line is resolved once
    assert ps.lookups == 8


def test_real_bindings_without_a_driver() -> None:
    """On a machine without the NVIDIA driver, the real pynvml path ends in NVMLUnavailable, not a traceback."""
    try:
        ad = NvmlAdapter()
    except NVMLUnavailable as err:
        assert "driver" in str(err) or "NVML" in str(err)
        assert detect() is None
        return
    ad.close()
    pytest.skip("an NVIDIA driver is present")


@pytest.mark.gpu
def test_real_adapter_on_a_gpu() -> None:
    try:
        ad = NvmlAdapter()
    except NVMLUnavailable:
        pytest.skip("no NVIDIA driver")
    with ad:
        snap = ad.snapshot()
    assert snap.cards and all(c.total_bytes and c.total_bytes > c.used_bytes >= 0 for c in snap.cards)
    hw = hardware_from_snapshot(snap)
    assert hw is not None and hw.source == "nvml" and hw.num_gpus >= 1


def test_detect_from_nvml() -> None:
    hw = detect(FakeAdapter(FIX / "one_card.json"), env={})
    assert (hw.gpu, hw.num_gpus, hw.capacity_gib, hw.bf16, hw.source) == ("A100-80GB", 1, 79.15, True, "nvml")
    assert hw.in_use_gib == (round(42291 * MIB / GIB, 2),)
    assert hw.compute_capability == (8, 0)


def test_detect_without_a_driver_is_none() -> None:
    class NoDriver:
        def snapshot(self):
            raise NVMLUnavailable("no NVIDIA driver found")

        def close(self):
            pass

    assert detect(NoDriver(), env={}) is None
    with pytest.raises(NVMLUnavailable):
        FakeAdapter(FIX / "no_driver.json")


def test_detect_honours_cuda_visible_devices() -> None:
    snap = _snap("eight_imbalance")
    hw = hardware_from_snapshot(snap, env={"CUDA_VISIBLE_DEVICES": "3,5"})
    assert hw.num_gpus == 2
    assert hw.in_use_gib == (round(57588 * MIB / GIB, 2), round(57712 * MIB / GIB, 2))
    # UUID prefixes work, and an invalid entry hides itself and everything after it, as in CUDA
    cards = visible_cards(snap, env={"CUDA_VISIBLE_DEVICES": "GPU-8c0e6d3a-0007,9,1"})
    assert [c.index for c in cards] == [7]
    assert hardware_from_snapshot(snap, env={"CUDA_VISIBLE_DEVICES": ""}) is None


def test_detect_mig_counts_instances() -> None:
    hw = hardware_from_snapshot(_snap("mig"), env={})
    assert hw.num_gpus == 2
    assert hw.capacity_gib == round(40192 * MIB / GIB, 2)
    assert hw.in_use_gib == (round(19480 * MIB / GIB, 2), round(8200 * MIB / GIB, 2))


def test_unknown_card_capacity_is_total_minus_reserved() -> None:
    snap = _snap("one_card")
    odd = replace(snap, cards=(replace(snap.cards[0], name="NVIDIA Future GPU X"),))
    hw = hardware_from_snapshot(odd, env={})
    assert hw.gpu == "NVIDIA Future GPU X"
    assert hw.capacity_gib == round((81920 - 870) * MIB / GIB, 2)
    assert hw.bf16 is True  # from the compute capability 8.0


def test_process_resolver_on_this_process() -> None:
    psutil = pytest.importorskip("psutil")
    r = ProcessResolver(psutil)
    info = r.info(os.getpid())
    assert info["cmdline"] and ("python" in info["cmdline"].lower() or "pytest" in info["cmdline"])
    assert info["ppid"] == os.getppid()
    assert info["group"] is not None
    r.info(os.getpid())
    assert r.lookups == 1  # cached per (pid, start time)
    assert r.info(2**22 + 12345)["cmdline"] is None  # no such pid


@pytest.mark.parametrize("cmd, hit", [
    ("/usr/bin/python3 /usr/local/bin/torchrun --nproc_per_node 8 src/llamafactory/launcher.py a.yaml", True),
    ("/usr/bin/python -u -m deepspeed.launcher.launch --world_info=abc main.py", True),
    ("/opt/conda/bin/python /opt/conda/bin/llamafactory-cli train a.yaml", True),
    ("/usr/bin/python -m torch.distributed.run --nproc_per_node=4 train.py", True),
    ("/usr/bin/python /usr/local/bin/accelerate launch train.py", True),
    ("/usr/bin/python3 -u src/llamafactory/launcher.py a.yaml", False),
    ("python -m vllm.entrypoints.openai.api_server --model x", False),
])
def test_launcher_pattern(cmd: str, hit: bool) -> None:
    assert bool(LAUNCHER.search(cmd)) is hit
