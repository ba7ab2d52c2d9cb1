"""Device OOMs of accelerators other than CUDA, in their allocators' own words (fixtures/postmortem/other_devices/,
FIXTURE.md names each upstream message): the doctor reads their figures and names the device."""

from __future__ import annotations

import pytest

from pmhelp import diagnose


@pytest.mark.parametrize("name, words", [
    ("mps_oom.log", ["MPS (Apple GPU) out of memory during step 13", "tried to allocate 256.00 MiB",
                     "17.93 GiB allocated of the 18.13 GiB", "PYTORCH_MPS_HIGH_WATERMARK_RATIO"]),
    ("xpu_oom.log", ["XPU (Intel GPU) out of memory during step 41", "tried to allocate 1.96 GiB",
                     "on GPU 0 (812.00 MiB free of 15.11 GiB, 13.02 GiB allocated by PyTorch)"]),
])
def test_another_accelerators_oom_is_an_oom_with_its_figures(tmp_path, name, words):
    found = diagnose(tmp_path, f"other_devices/{name}")
    assert found and found[0].name == "cuda-oom", [f.name for f in found]
    for w in words:
        assert w in found[0].message, (w, found[0].message)


def test_a_cuda_oom_is_still_worded_cuda(tmp_path):
    log = tmp_path / "src.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                   "capacity of 79.15 GiB of which 1.12 GiB is free. Of the allocated memory 75.02 GiB is allocated "
                   "by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.\n")
    found = diagnose(tmp_path, log)
    assert found[0].name == "cuda-oom" and found[0].message.startswith("CUDA out of memory")
