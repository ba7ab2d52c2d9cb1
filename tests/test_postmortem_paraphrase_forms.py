"""Other forms of the words-only symptoms (issue #25, the paraphrase yardstick; readers/runlogs/userwords_forms.py):
a second user's words for the same failure kind, written here in wordings that are neither a dev case's nor a
paraphrase's (fixtures/postmortem/paraphrases.py), modelled on how users title such threads.

A finding read from words alone is at most a warning; nothing the words do not say is stated.
"""

from __future__ import annotations


import pytest

from finetune_doctor.readers.runlogs.userwords import read_words
from pmhelp import first_of_text as first


@pytest.mark.parametrize("text", [
    "Accelerate fails to initialize the process group on my cluster",
    "DPO script fails immediately with my dataset",
    "ppo training not working on 2 nodes of V100",
    "Since yesterday the sft run does not work anymore",
    "Trainer stops right away: it complains about the chat template",
    "Loading the merged model gives me a weird error",
    "合并lora权重失败",
    "qwen2-vl 微调跑不起来",
    "多模态数据训练不了，求助",
])
def test_a_failure_said_with_other_verbs_is_an_error_the_words_name(text):
    w = read_words(text)
    assert w is not None and w["symptom"] == "error", w


@pytest.mark.parametrize("text", [
    "gradient checkpointing does not work with my model, loss is nan",   # the NaN is what was said
    "Training is not working: out of memory on the first step",
])
def test_a_specific_symptom_keeps_its_reading(text):
    w = read_words(text)
    assert w is not None and w["symptom"] in ("nan", "oom"), w


@pytest.mark.parametrize("text,pkg", [
    ("Errors after upgrading peft to the newest release", "peft"),
    ("After updating transformers my LoRA run crashes on start", "transformers"),
    ("升级了deepspeed之后就报错了", "deepspeed"),
])
def test_a_release_said_to_break_a_run_without_its_number_is_a_version_conflict(tmp_path, text, pkg):
    w = read_words(text)
    assert w is not None and w["symptom"] == "version", w
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning" and pkg in f.message


def test_an_errno_text_without_its_class_at_a_save_names_the_save(tmp_path):
    f = first(tmp_path, "[Errno 39] Directory not empty while saving checkpoint-2000 on 4 nodes")
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "staged save" in f.message   # savecause.py: transformers' tmp-checkpoint rename


@pytest.mark.parametrize("text", ["Keeps running out of GPU memory at step 1 with a 4090",
                                  "out of CUDA memory while evaluating",
                                  "VRAM not enough? 7B lora on a 3060"])
def test_gpu_memory_said_in_other_forms_is_a_gpu_oom(tmp_path, text):
    w = read_words(text)
    assert w is not None and w["symptom"] == "oom", w


def test_a_data_format_error_with_words_between_is_a_dataset_without_samples(tmp_path):
    f = first(tmp_path, "my alpaca-style data throws a format error at startup")
    assert f.name == "no-valid-samples" and f.severity == "warning"


def test_the_end_of_training_said_as_a_verb_is_the_end_phase(tmp_path):
    assert read_words("The job crashes when training finishes")["phase"] == "end"
    assert read_words("训练都完成了，结束时报错")["phase"] == "end"


def test_a_bare_exception_quoted_in_a_sentence_is_that_exception(tmp_path):
    f = first(tmp_path, "Using FSDP on two A100s: Exception: Could not find the transformer layer class to wrap in "
                        "the model.")
    assert f.name == "run-crashed"
    assert "fsdp_transformer_layer_cls_to_wrap" in f.message


def test_several_nodes_failing_with_an_error_is_the_network_lead(tmp_path):
    f = first(tmp_path, "Training on two nodes fails with an error after init")
    assert f.name == "nccl-error" and f.severity == "warning"


@pytest.mark.parametrize("text", ["the model failed to converge after 3 epochs", "eval loss fails to decrease"])
def test_words_that_name_no_failure_of_the_run_are_not_read_as_one(text):
    # a loss that does not improve is not a crash, and a negated failure is none
    w = read_words(text)
    assert w is None or w["symptom"] != "error", w


# -- round 2 of the yardstick (set 2's misses, by kind) --------------------------------------------------------------

def test_machines_counted_in_chinese_with_an_error_is_the_network_lead(tmp_path):
    f = first(tmp_path, "三个节点一起跑 deepspeed 就出错")
    assert f.name == "nccl-error" and f.severity == "warning"


@pytest.mark.parametrize("text", ["模型训练到一半就僵住了", "8卡训练 step 20 之后假死"])
def test_chinese_words_for_a_frozen_run_are_a_hang(text):
    w = read_words(text)
    assert w is not None and w["symptom"] == "hang", w


@pytest.mark.parametrize("text", ["the installed accelerate and peft versions are not compatible",
                                  "flash-attn 与 torch 版本冲突"])
def test_releases_said_incompatible_with_words_between_are_a_version_conflict(text):
    w = read_words(text)
    assert w is not None and w["symptom"] == "version", w


@pytest.mark.parametrize("text", [
    "llama3 dpo error",
    "Qwen2 lora 训练时出现错误",
    "`labels` missing when I run the reward model script",
    "多卡时报 'Expected to mark a variable ready only once'",
])
def test_an_error_said_as_a_noun_a_missing_key_or_a_quoted_message_is_an_error(text):
    w = read_words(text)
    assert w is not None and w["symptom"] == "error", w


def test_a_message_with_its_class_in_brackets_after_it_is_read_as_that_exception(tmp_path):
    f = first(tmp_path, "Target modules {'c_attn'} not found in the base model (ValueError) with my qwen1 model")
    assert f.name == "run-crashed" and "Target modules" in f.message


def test_the_release_that_worked_then_the_newest_failing_is_a_version_regression(tmp_path):
    f = first(tmp_path, "peft 0.10.0 worked fine, the newest peft breaks my lora training")
    assert f.name == "run-crashed" and "version regression" in f.message and "peft" in f.message


@pytest.mark.parametrize("text", ["error rate of the classifier is 30 %, training is fine",
                                  "training error bars look wide on the plot"])
def test_an_error_rate_or_error_bars_are_no_failure(text):
    w = read_words(text)
    assert w is None or w["symptom"] != "error", w
