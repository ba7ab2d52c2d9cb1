"""The device memory a torch_npu process holds outside PyTorch's allocator, as published NPU OOM messages show it,
against the doctor's runtime term for an Ascend card (analyzers/memory/runtime.py, npu.py).

torch_npu's OOM message states the card's total capacity, what PyTorch has reserved and what is free, so
``total - reserved - free`` is what the process (and the runtime) hold outside the caching allocator: the CANN
context and HCCL's communicator buffers. The lines are fixtures/gpus/oom_capacity_lines.txt's, verbatim.
"""

from __future__ import annotations

import re

import pytest

from finetune_doctor.analyzers.memory.constants import CUBLAS_WORKSPACE_MIB, CUDA_CONTEXT_GIB, MIB
from finetune_doctor.analyzers.memory.npu import hccl_bytes, hccl_communicators
from finetune_doctor.analyzers.memory.runtime import runtime_bytes
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import GIB

L3 = "meta-llama/Meta-Llama-3-8B"
_MSG = re.compile(r"\(NPU \d+; ([\d.]+) GiB total capacity; .*?; ([\d.]+) (GiB|MiB) free; ([\d.]+) GiB reserved")

# zai-org/CogVideo#63: one inference process on a 910B (no collective at all)
COGVIDEO = ("RuntimeError: NPU out of memory. Tried to allocate 35.31 GiB (NPU 0; 60.97 GiB total capacity; 26.13 GiB "
            "already allocated; 26.13 GiB current active; 33.81 GiB free; 26.61 GiB reserved in total by PyTorch)")
# hiyouga/LlamaFactory#5491: 8 x 910B, LLaMA-Factory, failing while the checkpoint shards load (after LF's dataset
# step, whose main_process_first barrier is the run's first collective, so the default group's communicator exists;
# DeepSpeed's clone of it is made later, in deepspeed.initialize)
LF5491 = ("RuntimeError: NPU out of memory. Tried to allocate 386.00 MiB (NPU 2; 60.97 GiB total capacity; 59.57 GiB "
          "already allocated; 59.57 GiB current active; 16.54 MiB free; 60.06 GiB reserved in total by PyTorch)")


def outside_allocator_gib(line: str) -> float:
    """total − reserved − free of one torch_npu OOM line, GiB."""
    m = _MSG.search(line)
    assert m, line
    total, free, unit, reserved = float(m.group(1)), float(m.group(2)), m.group(3), float(m.group(4))
    return total - reserved - (free / 1024.0 if unit == "MiB" else free)


def _run(gpus: str, **cfg):
    arch, _ = load_arch(L3)
    hw = parse_gpu_spec(gpus)
    return resolve_run({"bf16": True, "finetuning_type": "lora", "cutoff_len": 1024, **cfg}, arch, hw), hw


def test_the_messages_read_as_hand_computed():
    assert outside_allocator_gib(COGVIDEO) == pytest.approx(60.97 - 26.61 - 33.81)            # 0.55
    assert outside_allocator_gib(LF5491) == pytest.approx(60.97 - 60.06 - 16.54 / 1024)        # 0.894


def test_one_process_holds_the_context_only():
    run, hw = _run("910B")
    assert hccl_communicators(run) == 0
    # context 0.5 GiB + the 8 MiB workspace + 1 MiB (runtime.py), by hand: 0.5088 GiB
    want = CUDA_CONTEXT_GIB + (CUBLAS_WORKSPACE_MIB["other"] + 1.0) * MIB / GIB
    assert runtime_bytes(run, hw) / GIB == pytest.approx(want)
    assert want == pytest.approx(0.5088, abs=1e-4)
    # CogVideo#63 holds 0.55 GiB outside the allocator: the term is 0.04 GiB short of it
    assert abs(outside_allocator_gib(COGVIDEO) - want) < 0.05


def test_eight_ranks_hold_the_context_and_one_hccl_communicator():
    run, hw = _run("8x910B")
    assert hccl_communicators(run) == 1 and hccl_bytes(run) == 2 * 200 * MIB
    # 0.5088 + 2 x 200 MiB = 0.8994 GiB; LF#5491 (the default group only, at load) holds 0.894 GiB
    assert runtime_bytes(run, hw) / GIB == pytest.approx(0.5088 + 0.390625, abs=1e-4)
    assert abs(outside_allocator_gib(LF5491) - runtime_bytes(run, hw) / GIB) < 0.01
