"""A paste whose text is an error is evidence even when its shape is not a traceback's: the size-mismatch list of
load_state_dict without its header, an exception quoted inside a sentence or after CJK punctuation, transformers'
unknown-model-type message without its class, a keyword TypeError retyped without spaces, the CUDA runtime's
illegal-address text as a title, torchrun's ChildFailedError line alone. One fixture per shape in
fixtures/postmortem/paste_shapes/ (FIXTURE.md names the upstream format of each); each used to be "Nothing to
diagnose" (round 6 of the real threads, issue #25)."""

from __future__ import annotations

import pytest

from pmhelp import diagnose

FIX = "paste_shapes"


@pytest.mark.parametrize("name, rule, words", [
    ("size_mismatch_list.log", "run-crashed",
     ["RuntimeError: size mismatch for base_model.model.model.embed_tokens.weight",
      "a vocabulary of 151936 rows against 152064 (128 more in the model)", "(1 more size mismatch(es) listed)"]),
    ("keyword_retyped.log", "run-crashed",
     ["TypeError: Trainer.__init__()got an unexpected keyword argument'tokenizer'",
      "Trainer is transformers', and the installed transformers does not take the keyword 'tokenizer'"]),
    ("model_type_title.log", "run-crashed",
     ["ValueError: The checkpoint you are trying to load has model type `qwen3_next`",
      "does not know the model type 'qwen3_next'"]),
    ("exception_in_sentence.log", "run-crashed",
     ["RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
      "cuda:1!", "launch one process per GPU"]),
    ("exception_after_cjk.log", "run-crashed",
     ["ValueError: Please launch distributed training with `llamafactory-cli` or `torchrun`."]),
    ("illegal_address_title.log", "cuda-error", ["an illegal memory access was encountered"]),
    ("child_failed_alone.log", "run-crashed",
     ["torchrun reported that a training process failed (ChildFailedError)", "give the whole output"]),
])
def test_a_paste_of_an_error_is_evidence(tmp_path, name, rule, words):
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert found and found[0].name == rule, (name, [(f.name, f.message) for f in found])
    for w in words:
        assert w in found[0].message, (w, found[0].message)


def test_a_quoted_exception_ends_at_its_closing_quote(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/exception_in_sentence.log")[0]
    assert "right after the first step" not in f.message


def test_the_mismatch_list_is_one_exception(tmp_path):
    from pmhelp import diagnose_report
    r = diagnose_report(tmp_path, f"{FIX}/size_mismatch_list.log")
    assert [f.name for f in r.findings].count("run-crashed") == 1


def test_a_warning_that_quotes_a_retried_exception_is_no_crash(tmp_path):
    names = [f.name for f in diagnose(tmp_path, f"{FIX}/warning_quotes_exception.log")]
    assert "run-crashed" not in names, names


@pytest.mark.parametrize("text", [
    # prose around an error-like word without the "Cls: message" shape
    "the Error: field of the report stays empty when training finishes\n",
    # a lower-case name or a name not ending in Error/Exception is no exception class
    "validation_error: 0.031 after epoch 2\n",
    # a summary line that quotes ChildFailedError among other words is not the class alone
    "see ChildFailedError in the torchrun docs for what the summary holds\n",
    # a code line of a traceback that handles an exception class
    "    except OSError: pass\n",
    # "illegal memory access" described, not cudaGetErrorString's text
    "An illegal memory access check is part of compute-sanitizer\n",
])
def test_words_alone_are_not_evidence(tmp_path, text):
    log = tmp_path / "x.log"
    log.write_text(text)
    names = [f.name for f in diagnose(tmp_path / "r", log)]
    assert not {"run-crashed", "cuda-error"} & set(names), names


def test_a_log_that_ends_while_the_dataset_loads_says_so(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/dataset_load_end.log")
    assert [f.name for f in found] == ["run-stopped-without-error"], [(f.name, f.message) for f in found]
    msg = found[0].message
    assert "The log ends while the dataset loads" in msg and "Loading dataset web_corpus_part2.jsonl" in msg
    assert "dataset_load_end.log:5" in msg and "most often killed by the kernel's OOM killer" in msg


def test_a_dataset_load_followed_by_training_is_no_load_stop(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/dataset_load_then_trains.log")
    assert found and not any("while the dataset loads" in f.message for f in found), [f.message for f in found]
    assert found[0].name == "run-stopped-without-error" and "step 1 of 100" in found[0].message


def test_a_frame_cut_before_its_file_head_names_the_package(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/cut_frame_head.log")[0]
    assert f.name == "run-crashed", (f.name, f.message)
    assert "TypeError: 'NoneType' object is not subscriptable" in f.message
    assert "raised inside accelerate, in prepare of accelerator.py" in f.message, f.message


def test_the_agents_failed_exitcode_line_alone_names_the_rank_and_code(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/agent_failed_exitcode.log")[0]
    assert f.name == "run-crashed", (f.name, f.message)
    assert "torchelastic's agent log reports without its traceback: local rank 2 (pid 48215) (exit code 1)" \
        in f.message, f.message
    assert "the exception is only in local rank 2's own stderr" in f.message


def test_a_config_without_model_type_says_what_the_folder_is_not(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/no_model_type.log")[0]
    assert f.name == "run-crashed", (f.name, f.message)
    assert "the config.json transformers read from saves/qwen2-7b/lora/sft has no `model_type` key" in f.message
    assert "adapter_name_or_path" in f.message
