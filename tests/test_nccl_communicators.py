"""NCCL communicators a rank holds (analyzers/memory/collectives.py `communicators`, runtime.py `runtime_bytes`):
the default group's, and under DeepSpeed the clone of the world group its ZeRO optimizers reduce over, each at the size
NVIDIA/nccl#964 measured for one communicator (544 MB over 2 ranks, 688 MB over more, on A100: the constants
NCCL_2_RANKS_GIB / NCCL_MANY_RANKS_GIB). Expected figures are written out by hand; the DeepSpeed facts are read from
the installed package's source text (skipped where DeepSpeed is not installed), so a release that stops cloning the
world group fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory.collectives import communicators
from finetune_doctor.analyzers.memory.constants import (CUBLAS_WORKSPACE_MIB, CUDA_CONTEXT_GIB, MIB,
                                                        NCCL_2_RANKS_GIB, NCCL_MANY_RANKS_GIB)
from finetune_doctor.analyzers.memory.npu import hccl_communicators
from finetune_doctor.analyzers.memory.runtime import runtime_bytes
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import GIB

L3 = "meta-llama/Meta-Llama-3-8B"
# CUDA context 0.5 GiB + cuBLAS workspace 8 MiB + 1 MiB on an A100 (runtime.py): 0.5087890625 GiB
BASE_GIB = 0.5 + 9.0 / 1024.0


class _DS:
    """A resolved DeepSpeed config as readers/deepspeed/dsconfig.py hands it to resolve_run."""

    def __init__(self, stage: int):
        self.resolved = {"zero_optimization": {"stage": stage}}
        self.defaults = {}


def _run(gpus: str, stage: int | None):
    arch, _ = load_arch(L3)
    hw = parse_gpu_spec(gpus)
    cfg = {"bf16": True, "finetuning_type": "lora", "cutoff_len": 1024}
    return resolve_run(cfg, arch, hw, _DS(stage) if stage is not None else None), hw


def test_hand_base_matches_the_constants():
    assert CUDA_CONTEXT_GIB + (CUBLAS_WORKSPACE_MIB["other"] + 1.0) * MIB / GIB == pytest.approx(BASE_GIB)
    assert (NCCL_2_RANKS_GIB, NCCL_MANY_RANKS_GIB) == (0.51, 0.64)


@pytest.mark.parametrize("gpus, stage, comms, per_gib", [
    ("A100-80GB", 3, 0, 0.0),            # one rank: no collective, no communicator
    ("2xA100-80GB", None, 1, 0.51),      # DDP over 2 ranks: the default group only
    ("8xA100-80GB", None, 1, 0.64),      # DDP over 8
    ("2xA100-80GB", 2, 2, 0.51),         # ZeRO-2: default group + DeepSpeed's clone
    ("8xA100-80GB", 3, 2, 0.64),         # ZeRO-3 over 8: 0.5088 + 2 x 0.64 = 1.7888 GiB
])
def test_runtime_counts_one_communicator_per_group(gpus, stage, comms, per_gib):
    run, hw = _run(gpus, stage)
    assert communicators(run) == comms
    assert runtime_bytes(run, hw) / GIB == pytest.approx(BASE_GIB + comms * per_gib, abs=1e-9)


def test_zero3_on_eight_ranks_written_out():
    run, hw = _run("8xA100-80GB", 3)
    assert runtime_bytes(run, hw) / GIB == pytest.approx(1.7887890625, abs=1e-9)


def test_hccl_buffers_of_a_zero3_run_on_eight_npus():
    # two communicators (default group + DeepSpeed's clone) x 2 x HCCL_BUFFSIZE 200 MB (CANN's default), by hand
    run, hw = _run("8x910B", 3)
    assert hccl_communicators(run) == 2
    assert runtime_bytes(run, hw) / GIB == pytest.approx(BASE_GIB + 2 * 2 * 200 / 1024, abs=1e-9)   # 1.2901 GiB


def _ds_source(rel: str) -> str:
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("DeepSpeed is not installed")
    return (Path(list(spec.submodule_search_locations)[0]) / rel).read_text(encoding="utf-8")


def _function(src: str, name: str) -> str:
    m = re.search(rf"^def {name}\(.*?(?=^def |\Z)", src, re.S | re.M)
    assert m, name
    return m.group(0)


def test_deepspeed_clones_the_world_group_for_data_parallelism():
    groups = _ds_source("utils/groups.py")
    clone = _function(groups, "_clone_world_group")
    assert "dist.new_group(ranks=range(dist.get_world_size()))" in clone
    dp = _function(groups, "_get_data_parallel_group")
    assert dp.rstrip().splitlines()[-1].strip() == "return _clone_world_group()"
    engine = _ds_source("runtime/engine.py")
    assert "self.data_parallel_group = groups._get_data_parallel_group()" in engine
    assert engine.count("dp_process_group=self.seq_data_parallel_group") >= 2


def test_zero3_gathers_parameters_over_the_world_group():
    src = _ds_source("runtime/zero/partition_parameters.py")
    assert re.search(r"if data_parallel_group is None:\s+self\.ds_process_group = dist\.get_world_group\(\)", src)
