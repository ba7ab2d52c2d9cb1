"""A short paste is evidence of a run when it holds a line only a training process (or its launcher) prints: an
exception message even without its "Cls: " head, a native signal report, a negative exit code, an NCCL WARN that
is a failure, a device assert. One fixture per kind in fixtures/postmortem/short_pastes/ (FIXTURE.md names the
upstream line of each); these pastes used to be "no-run-evidence" or a bare run-crashed."""

from __future__ import annotations

import pytest

from pmhelp import diagnose

FIX = "short_pastes"


def first(tmp_path, name: str):
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert found, name
    return found[0]


@pytest.mark.parametrize("name, rule, words", [
    ("typeless_keyword.log", "run-crashed",
     ["TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'evaluation_strategy'",
      "transformers renamed evaluation_strategy to eval_strategy in 4.41"]),
    ("typeless_template.log", "run-crashed",
     ["ValueError: Template gemma9 does not exist.", "registers no template 'gemma9'"]),
    # UCX's and glog's lines name the signal, not the exit status: none is stated (trial 15)
    ("ucx_caught_signal.log", "native-crash", ["crashed with SIGBUS:"]),
    ("glog_sigsegv.log", "native-crash", ["pid 20931 crashed with SIGSEGV:"]),
    ("exit_code_signal.log", "host-oom-killed", ["killed by SIGKILL (exit code -9)"]),
    ("died_with_sigkill.log", "host-oom-killed", ["killed by SIGKILL (exit code -9)"]),
    ("loader_bus_wrapped.log", "native-crash", ["DataLoader worker process (pid 3172) crashed with SIGBUS",
                                                "/dev/shm"]),
    ("nccl_shm_segment.log", "nccl-error", ["could not size a shared-memory segment: No space left on device",
                                            "--shm-size", "NCCL_SHM_DISABLE=1",
                                            "shared memory segment nccl-shm-recv-7f1c00e2a1b3c4d5-1-2-0"]),
    ("nccl_shm_system_error.log", "nccl-error", ["unhandled system error", "NCCL warned just before that it could "
                                                 "not size a shared-memory segment", "/dev/shm is too small"]),
    ("zero3_ptq_refusal.log", "run-crashed", ["incompatible with PTQ-quantized models", "train a quantized model "
                                              "with ZeRO-2 or without DeepSpeed"]),
    ("zero3_device_map_title.log", "run-crashed", ["ValueError: DeepSpeed Zero-3 is not compatible with",
                                                   "under LLaMA-Factory the device_map is the quantized model's"]),
    ("thc_assert_no_backticks.log", "cuda-error", ["embedding lookup", "srcIndex < srcSelectDimSize",
                                                   "token ids outside the vocabulary"]),
    ("thc_runtime_error_upper.log", "cuda-error", ["device-side assert triggered"]),
    ("lazy_import_undefined_symbol.log", "run-crashed",
     ["Failed to import transformers.models.qwen2.modeling_qwen2", "flash-attn is a compiled extension built "
      "against another torch", "an undefined symbol"]),
])
def test_a_short_paste_gets_its_causes_rule(tmp_path, name, rule, words):
    f = first(tmp_path, name)
    assert f.name == rule, (name, f.name, f.message)
    for w in words:
        assert w in f.message, (w, f.message)


def test_the_shm_segment_size_is_read_in_mib(tmp_path):
    log = tmp_path / "n.log"
    log.write_text("h:1:2 [0] misc/shmutils.cc:70 NCCL WARN Error while creating shared memory segment "
                   "nccl-shm-send-ab-0-1-2 (size 9437184)\n")
    f = diagnose(tmp_path / "r", log)[0]
    assert f.name == "nccl-error" and "nccl-shm-send-ab-0-1-2 (9.0 MiB)" in f.message


@pytest.mark.parametrize("text", [
    # the words without the raise site's shape are no exception
    "Template rendering took 3.2 s for 512 prompts\n",
    "loading Template qwen from the registry\n",
    # an assert that is not one of the index asserts, without its kernel head: any program's assert
    "Assertion check failed.\n",
    # a positive exit code is no signal
    "worker finished with exit code 1\n",
])
def test_words_alone_are_not_evidence(tmp_path, text):
    log = tmp_path / "x.log"
    log.write_text(text)
    names = [f.name for f in diagnose(tmp_path / "r", log)]
    assert not {"run-crashed", "cuda-error", "host-oom-killed", "native-crash"} & set(names), names


def test_a_sigterm_exit_code_is_not_an_oom(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("[runner] job step finished with exit code -15\n")
    assert "host-oom-killed" not in [f.name for f in diagnose(tmp_path / "r", log)]
