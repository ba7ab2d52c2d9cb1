"""Launch and sizing mistakes that an exception's text establishes (analyzers/postmortem/launchcause.py): run-crashed
says them after the exception. Fixtures: fixtures/postmortem/launch_causes/ (FIXTURE.md names each upstream line)."""

from __future__ import annotations

import pytest

from pmhelp import FIXTURES as PM_FIXTURES, diagnose

FIXTURES = PM_FIXTURES / "launch_causes"


@pytest.mark.parametrize("name, words", [
    ("ds_no_launcher_save.log", ["during the checkpoint save of checkpoint-100",
                                 "never wrapped by deepspeed.initialize", "without a distributed launcher",
                                 "FORCE_TORCHRUN=1"]),
    ("force_torchrun.log", ["no distributed launcher started", "FORCE_TORCHRUN=1 llamafactory-cli train"]),
    ("clients_joined.log", ["only 8 of the 16 processes reached the rendezvous store", "8 never connected",
                            "MASTER_ADDR:MASTER_PORT"]),
    ("vllm_kv_cache.log", ["no room left for its KV cache", "vllm_gpu_util", "vllm_maxlen"]),
    ("fp16_unscale.log", ["found gradients in fp16", "autocast_adapter_dtype", "train in bf16"]),
    ("typeless_unscale.log", ["ValueError: Attempting to unscale FP16 gradients", "found gradients in fp16"]),
    ("typeless_force_torchrun.log", ["ValueError: Please use `FORCE_TORCHRUN=1`", "no distributed launcher"]),
    ("typeless_clients_joined.log", ["DistStoreError", "only 8 of the 16 processes"]),
    ("port_in_use.log", ["rendezvous port 29500 is already taken", "MASTER_PORT"]),
    ("gloo_peer_closed.log", ["gloo connection (10.12.0.5) went away", "a consequence, not the cause"]),
    ("no_cuda_gpus.log", ["the process sees no GPU", "CUDA_VISIBLE_DEVICES"]),
    ("bf16_unsupported.log", ["compute capability 8.0", "fp16: true"]),
    ("shm_full_worker.log", ["could not pass a batch through shared memory", "/dev/shm is full, not the disk",
                             "--shm-size"]),
    ("cpu_only_torch.log", ["CPU-only build"]),
    ("stack_out_of_range.log", ["outside what LLaMA-Factory 0.8.3 requires at start-up",
                                "transformers 4.36.0 (it requires transformers>=4.41.2, llamafactory/extras/misc.py:82",
                                "DISABLE_VERSION_CHECK"]),
])
def test_the_launch_mistake_is_named(tmp_path, name, words):
    found = diagnose(tmp_path, f"launch_causes/{name}")
    assert found and found[0].name == "run-crashed", [f.name for f in found]
    for w in words:
        assert w in found[0].message, (w, found[0].message)


@pytest.mark.parametrize("line", [
    "AttributeError: 'DeepSpeedEngine' object has no attribute 'save_checkpoint'",   # the engine itself: not this
    "AttributeError: 'GemmaForCausalLM' object has no attribute 'save_pretrained_merged'",
])
def test_other_attribute_errors_are_not_a_missing_launcher(tmp_path, line):
    log = tmp_path / "src.log"
    log.write_text(line + "\n")
    found = diagnose(tmp_path, log)
    assert not any("distributed launcher" in f.message for f in found), [f.message for f in found]


def test_a_stack_in_range_adds_nothing(tmp_path):
    text = (FIXTURES / "stack_out_of_range.log").read_text().replace("Transformers version: 4.36.0",
                                                                      "Transformers version: 4.43.4")
    log = tmp_path / "src.log"
    log.write_text(text)
    found = diagnose(tmp_path, log)
    assert found[0].name == "run-crashed" and "outside what LLaMA-Factory" not in found[0].message


@pytest.mark.parametrize("name, rule, words", [
    ("duplicate_gpu.log", "nccl-error", ["two ranks were given the same GPU", "ranks 1 and 0",
                                         "one process per visible GPU"]),
    ("invalid_ordinal.log", "cuda-error", ["a GPU index that is not visible", "--nproc_per_node"]),
])
def test_a_launch_mistake_inside_an_nccl_or_cuda_error_is_named(tmp_path, name, rule, words):
    found = diagnose(tmp_path, f"launch_causes/{name}")
    assert found and found[0].name == rule, [f.name for f in found]
    assert "called inconsistently" not in found[0].message
    for w in words:
        assert w in found[0].message, (w, found[0].message)


def test_dev_shm_full_is_not_the_disk(tmp_path):
    names = [f.name for f in diagnose(tmp_path, "launch_causes/shm_full_worker.log")]
    assert "disk-full" not in names, names
