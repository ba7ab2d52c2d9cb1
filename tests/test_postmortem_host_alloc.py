"""A host allocation refused inside the process (c10's "DefaultCPUAllocator: can't allocate memory", a Python
RuntimeError with its traceback) is not the kernel's OOM killer: host-alloc-failed names the phase the evidence
shows and that phase's remedy; host-oom-killed's "killed ... with no Python traceback ... SIGKILL" must not be
said of it. Fixtures: fixtures/postmortem/host_alloc/ (FIXTURE.md there)."""

from __future__ import annotations

import pytest

from pmhelp import diagnose

FIX = "host_alloc"


@pytest.mark.parametrize("name, words", [
    ("tokenize_alloc.log", ["2.81 GiB", "during the dataset preprocessing (tokenization), before training started",
                            "_get_mm_inputs (mm_plugin.py)", "preprocessing_num_workers", "tokenized_path",
                            "not killed by the OOM killer"]),
    ("tokenize_alloc_no_traceback.log", ["0.50 GiB", "during the dataset preprocessing",
                                         "\"Running tokenizer on dataset (num_proc=64)\" at 61 %"]),
    ("save_alloc.log", ["1.45 GiB", "during a checkpoint save", "_save (trainer.py)", "save_only_model"]),
    ("huge_alloc.log", ["1.0 PiB", "during training step 121", "bad shape"]),
    ("memoryerror_tokenize.log", ["A host (CPU) memory allocation failed inside the process during the dataset "
                                  "preprocessing", "preprocess_dataset (pretrain.py)", "Python raised MemoryError"]),
    ("numpy_alloc.log", ["7.45 GiB", "during training step 821", "NumPy raised _ArrayMemoryError"]),
    ("arrow_alloc.log", ["4.00 GiB", "during the dataset preprocessing", "_map_single (arrow_dataset.py)",
                         "ArrowMemoryError", "tokenized_path"]),
])
def test_failed_host_allocation_names_its_phase(tmp_path, name, words):
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert found and found[0].name == "host-alloc-failed", [f.name for f in found]
    for w in words:
        assert w in found[0].message, (w, found[0].message)
    names = [f.name for f in found]
    assert "host-oom-killed" not in names and "run-crashed" not in names
    assert "SIGKILL" not in found[0].message and "no Python traceback" not in found[0].message


def test_a_kernel_kill_beside_it_is_still_the_kill(tmp_path):
    """The OOM killer's own record outranks an earlier refused allocation in the same log (the kill is what ended
    the run); both are said."""
    log = tmp_path / "src.log"
    log.write_text(
        "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 536870912 bytes. Error code 12 (Cannot allocate memory)\n"
        "[Mon Nov 30 10:02:11 2026] Out of memory: Killed process 48213 (python) total-vm:312345678kB, "
        "anon-rss:251234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:493812kB oom_score_adj:0\n")
    names = [f.name for f in diagnose(tmp_path, log)]
    assert names[:2] == ["host-oom-killed", "host-alloc-failed"], names


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.12 GiB is free.",
    "[WARNING|trainer.py:811] >> a MemoryError in a callback is retried",
])
def test_a_device_oom_or_a_sentence_naming_memoryerror_is_not_a_host_allocation(tmp_path, line):
    log = tmp_path / "src.log"
    log.write_text(line + "\n")
    assert "host-alloc-failed" not in [f.name for f in diagnose(tmp_path, log)]
