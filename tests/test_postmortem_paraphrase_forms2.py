"""More forms of the words-only symptoms (issue #25's paraphrase yardstick over rounds 1-6 and set 3's leftovers;
readers/runlogs/userwords_forms.py, userwords_vocab.FAILURE_SAID): each written here in a wording that is neither a
dev case's nor a paraphrase's (fixtures/postmortem/paraphrases.py), modelled on how users title such threads.

A finding read from words alone is at most a warning.
"""

from __future__ import annotations


import pytest

from finetune_doctor.readers.runlogs.userwords import read_words
from pmhelp import first_of_text as first


@pytest.mark.parametrize("text,quoted", [
    # transformers utils/import_utils.py's flash-attn check, quoted without its ImportError head
    ("升级之后一直提示 you need flash_attn package version to be greater or equal than 2.3.0. Detected version 2.1.1.",
     "Detected version 2.1.1"),
    # transformers utils/versions.py's require_version text, without the class
    ("llamafactory-cli webui: tokenizers>=0.19.0 is required for a normal functioning of this module, but found "
     "tokenizers==0.15.2", "tokenizers==0.15.2"),
])
def test_a_version_requirement_quoted_without_its_class_is_a_version_conflict(tmp_path, text, quoted):
    w = read_words(text)
    assert w is not None and w["symptom"] == "version", w
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning" and quoted in f.message
    assert "version conflict" in f.message


def test_bao_before_an_english_message_without_quotes_is_an_error(tmp_path):
    w = read_words("合并模型时报 size mismatch for lm_head weight")
    assert w is not None and w["symptom"] == "error", w


@pytest.mark.parametrize("text", ["Fine-tuning on multi-server setup crashes after the first epoch",
                                  "训练 qwen2 跨 multi machines 的时候 sft job fails",
                                  "training across machines gives an error at startup"])
def test_multi_machine_or_server_with_a_failure_is_the_network_lead(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "nccl-error" and f.severity == "warning"


def test_multi_machine_with_the_exception_quoted_keeps_the_exception(tmp_path):
    f = first(tmp_path, "multi-machine run fails: RuntimeError: Expected all tensors to be on the same device")
    assert f.name == "run-crashed"


@pytest.mark.parametrize("text", ["DPO on llama3-8b blows up my GPU at step 30",
                                  "VRAM usage blew up after enabling packing"])
def test_gpu_memory_said_to_blow_up_is_a_gpu_oom(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "cuda-oom" and f.severity == "warning"


@pytest.mark.parametrize("text,quoted", [
    ("runtimeError: expected scalar type Half but found Float (qlora)", "expected scalar type Half"),
    ("keyError: 'conversations' with my sharegpt file", "conversations"),
    ("ppo training -- KeyError \"response\"", "response"),
])
def test_a_class_typed_lower_case_or_without_its_colon_is_an_error(tmp_path, text, quoted):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning" and quoted in f.message


@pytest.mark.parametrize("text", ["the eval loss is flat although the job does not fail at all",
                                  "my script never fails but the loss curve is flat",
                                  "errorbars look odd; KeyboardInterrupt is what I pressed"])
def test_a_negated_failure_or_no_class_is_no_failure(text):
    w = read_words(text)
    assert w is None or w["symptom"] != "error", w


def test_a_failure_still_said_after_the_negation_fix(tmp_path):
    f = first(tmp_path, "the lora job fails at step 120 on two 3090s")
    assert f.name == "run-crashed" and f.severity == "warning"


@pytest.mark.parametrize("text", [
    "compute_loss() takes 3 positional arguments but 4 were given",
    "collate_fn missing 1 required positional argument: 'features'",
    "xformers is not available, but is needed for memory efficient attention",
    "Fused kernels only support Hopper GPUs or newer",
    "gradient_accumulation_steps is not equal to 16 * 2 as configured",
    "Asking to return token_type_ids while setting add_special_tokens to False",
])
def test_an_exception_message_pasted_alone_without_class_is_an_error(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning" and text[:20] in f.message


@pytest.mark.parametrize("text", ["the eval loss is not equal to the train loss, is that ok?",
                                  "this repo only supports the idea of small models",
                                  "loss is not available in the logs but the run goes on"])
def test_prose_that_only_looks_like_a_library_message_is_not_an_error(text):
    w = read_words(text)
    assert w is None or w["symptom"] != "error", w
