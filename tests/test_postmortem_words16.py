"""Kinds of the words-only and error-line-in-words threads (issue #25, session 16, wt/pmfix16b), each in fresh
wordings written after the shapes users post, none of them a case of fixtures/postmortem/real_threads/:

- an error's own text written right against Chinese ("训练时提示Processor was not found", "出现element 0 of tensors
  does not require grad"): under Unicode rules a Han character is a word character, so a pattern's ``\\b`` never
  matches between it and the Latin text; every symptom pattern reads with ASCII word rules (re.A);
- LLaMA-Factory's "Processor was not found" with an InternVL model named without the "-hf" suffix: the original
  remote-code checkpoint (model_type internvl_chat) is the likely cause, and model_type in the folder's config.json is
  the input that decides (LlamaFactory#7789, #7802; rule internvl-remote-code-checkpoint on the check side).
"""

from __future__ import annotations

import re

import pytest

from finetune_doctor.analyzers.postmortem.newermodel import internvl_original
from finetune_doctor.readers.runlogs import userwords, userwords_vocab
from pmhelp import first_of_text as first


def test_every_symptom_pattern_reads_latin_words_against_chinese_with_ascii_word_rules():
    # the whole kind: a pattern with \b or \w under Unicode rules misses Latin text glued to a Han character
    unicode_rules = [(name, p.pattern[:60]) for name, p in userwords_vocab.SYMPTOMS
                     if re.search(r"\\[bBwW]", p.pattern) and not p.flags & re.A]
    assert unicode_rules == []


@pytest.mark.parametrize("text, words", [
    ("新版本在lora qwen2-vl时提示Processor was not found", "Processor was not found"),
    ("全参微调时出现element 0 of tensors does not require grad and does not have a grad_fn",
     "element 0 of tensors does not require grad"),
    ("单卡跑zero3时weight must be 2-D", "weight must be 2-D"),
    ("训练到第10步进程died with RuntimeError", "died with RuntimeError"),
])
def test_an_error_written_against_chinese_is_read_as_the_error(text, words):
    said = userwords.read_words(text + "\n")
    assert said is not None and said["symptom"] == "error"
    assert words in said["words"]


def test_processor_not_found_glued_to_chinese_is_read_as_the_error_not_nothing(tmp_path):
    f = first(tmp_path, "新版本llamafactory在lora qwen2-vl时提示Processor was not found\n")
    assert f.name == "run-crashed"
    assert "the installed transformers predates the model's processor class" in f.message


def test_processor_not_found_with_an_internvl_folder_without_hf_names_the_original_checkpoint_first(tmp_path):
    text = ("升级之后lora微调internvl3提示Processor was not found\n"
            "model_name_or_path: /data/models/InternVL3-2B\n"
            "template: intern_vl\n")
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"   # words only: at most a warning
    lead = f.message.index("most likely the model is InternVL's original remote-code checkpoint")
    assert "it is named `InternVL3-2B`, with no \"-hf\" suffix" in f.message
    assert "`model_type` in the model folder's config.json" in f.message   # the input that decides
    assert lead < f.message.index("the installed transformers predates")   # the likely cause first


@pytest.mark.parametrize("text, lead", [
    ("Processor was not found OpenGVLab/InternVL2_5-8B", "`InternVL2_5-8B`"),
    ("Processor was not found with InternVL3-8B-hf", ""),                  # the conversion: the other causes
    ("Processor was not found, internvl3-1b-hf and InternVL3-1B both tried", ""),
    ("Processor was not found for Qwen2.5-VL-7B-Instruct", ""),            # not InternVL
])
def test_internvl_original_reads_the_name_only(text, lead):
    out = internvl_original(text)
    assert (lead in out and out != "") if lead else out == ""


# -- the ZeRO-3 refusal of a quantized model, with the checkpoint the words name ---------------------------------------
# transformers' line as users paste it inside their sentence (LlamaFactory#2974's shape: the model named in the words,
# the line retyped); LLaMA-Factory's own refusal (model_utils/quantization.py) keeps its reading without a name

@pytest.mark.parametrize("text, name", [
    ("用zero3微调Qwen1.5-7B-Chat-GPTQ-Int4一直报错: ValueError: DeepSpeed Zero-3 is not compatible with "
     "`low_cpu_mem_usage=True` or with passing a `device_map`.\n", "Qwen1.5-7B-Chat-GPTQ-Int4"),
    ("LoRA on Qwen/Qwen2-7B-Instruct-AWQ with ds_z3_config.json fails: ValueError: DeepSpeed Zero-3 is not "
     "compatible with `low_cpu_mem_usage=True` or with passing a `device_map`.\n", "Qwen/Qwen2-7B-Instruct-AWQ"),
])
def test_zero3_refusal_names_the_quantized_checkpoint_the_words_give(tmp_path, text, name):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert f"the words name `{name}`, a checkpoint its name says is stored quantized" in f.message
    assert "`quantization_config` in its config.json" in f.message   # the input that decides


@pytest.mark.parametrize("text", [
    "用zero3微调Qwen2-7B-Instruct报错: ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` "
    "or with passing a `device_map`.\n",
    # 4-bit bitsandbytes is the quantization ZeRO-3 shards: a -bnb-4bit name is not the clash
    "zero3 + unsloth/llama-3-8b-bnb-4bit: ValueError: DeepSpeed Zero-3 is not compatible with "
    "`low_cpu_mem_usage=True` or with passing a `device_map`.\n",
])
def test_zero3_refusal_without_a_quantized_name_keeps_the_general_reading(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "the words name" not in f.message
    assert "ZeRO-3 partitions every parameter at load, which a quantized model cannot be" in f.message


# -- the same-device error with the setting the words give -----------------------------------------------------------
# PyTorch's line as it prints it; the words after the shapes users post (a Ray launch line above it, a GRPO script's
# name in a Chinese sentence); without such words the general reading (one process over several GPUs) stays

SAME_DEVICE = ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 "
               "and cuda:0! (when checking argument for argument mat2 in method wrapper_CUDA_mm)")


def test_same_device_error_under_a_ray_launch_names_the_worker_resources(tmp_path):
    f = first(tmp_path, "USE_RAY=1 llamafactory-cli train examples/train_lora/llama3_lora_sft_ray.yaml\n\n"
                        + SAME_DEVICE + "\n")
    assert f.name == "run-crashed"
    assert "most likely a Ray worker given several GPUs" in f.message
    assert "ray_num_workers and resources_per_worker in the YAML" in f.message   # the input that decides


@pytest.mark.parametrize("text", [
    "跑grpo的时候报错：Expected all tensors to be on the same device, but found at least two devices\n",
    "GRPO with use_vllm=True on 4 GPUs fails: " + SAME_DEVICE + "\n",
])
def test_same_device_error_in_an_rl_run_names_the_model_beside_the_policy(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "most likely a model beside the policy sits on another card" in f.message
    assert "The input that decides: the device each model is put on" in f.message


def test_same_device_error_without_a_setting_in_the_words_keeps_the_one_process_reading(tmp_path):
    f = first(tmp_path, SAME_DEVICE + "\n")
    assert f.name == "run-crashed"
    assert "most likely" not in f.message
    assert "the model is spread over several GPUs in one process" in f.message


# -- an error said of a remote-code model family, nothing else said ---------------------------------------------------
# titles as users write them (LlamaFactory's "baichuan2 13b lora 训练报错", "chatglm3-6b 微调报错" shapes)

@pytest.mark.parametrize("text, named", [
    ("baichuan2 13b lora 训练报错\n", "baichuan2 13b"),
    ("chatglm3-6b 微调报错\n", "chatglm3-6b"),
    ("Error when fine-tuning internlm2-7b with full sft\n", "internlm2-7b"),
    ("Qwen-14B-Chat sft 报错\n", "Qwen-14B"),
])
def test_an_error_said_of_a_remote_code_family_names_its_model_files(tmp_path, text, named):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert f"The words name {named}, a model whose modelling code ships with its checkpoint" in f.message
    assert "The input that decides: the traceback's innermost frame" in f.message


@pytest.mark.parametrize("text", [
    "qwen2.5-7b lora 训练报错\n",                                          # transformers' own qwen2 classes
    "chatglm3-6b 微调报错 No module named 'flash_attn'\n",                 # a package named: its lead instead
])
def test_no_remote_code_lead_for_a_transformers_family_or_words_that_name_a_package(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "a model whose modelling code ships with its checkpoint" not in f.message


# -- the shell's "not found" and a failure said with no exception class ----------------------------------------------
# each shell's own wording (dash, bash, zsh); the sentences after the shapes users post

@pytest.mark.parametrize("text, cmd", [
    ("点击开始后终端提示 /bin/sh: 1: llamafactory-cli: not found\n", "llamafactory-cli"),
    ("Running the script prints: bash: deepspeed: command not found\n", "deepspeed"),
    ("zsh: command not found: torchrun\n", "torchrun"),
])
def test_the_shells_not_found_names_the_environment_that_ran_it(tmp_path, text, cmd):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert f"the shell found no program `{cmd}` on its PATH" in f.message
    assert ("the web UI launches training through it" in f.message) == cmd.startswith("llamafactory")


@pytest.mark.parametrize("text", [
    "Exception raised with trainer + FSDP + gradient accumulation on a tiny dataset\n",
    "Fatal error when resuming a ZeRO-3 run from its checkpoint\n",
])
def test_a_failure_said_without_a_class_is_an_error_not_nothing(tmp_path, text):
    said = userwords.read_words(text)
    assert said is not None and said["symptom"] == "error"
    assert first(tmp_path, text).name == "run-crashed"


def test_not_found_of_a_path_is_not_the_shells(tmp_path):
    # a file that is not there is no program missing from PATH
    said = userwords.read_words("FileNotFoundError: dataset_info.json not found\n")
    assert said is None or "command not found" not in str(said.get("words"))
    f = first(tmp_path, "训练报错: dataset_info.json not found\n")
    assert "on its PATH" not in f.message


# -- an error said of unsloth alone ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "加了 --use_unsloth 之后训练报错\n",
    "Training fails with use_unsloth: true on a 4090\n",
])
def test_an_error_said_of_unsloth_names_its_compiled_stack(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "The words tie the error to unsloth" in f.message
    assert "`python -m bitsandbytes`" in f.message and "The input that decides" in f.message


def test_unsloth_named_beside_an_error_text_keeps_that_texts_reading(tmp_path):
    f = first(tmp_path, "use_unsloth 训练报错 No module named 'unsloth_zoo'\n")
    assert "The words tie the error to unsloth" not in f.message


@pytest.mark.parametrize("text, words", [
    ("训练报错 No module named 'unsloth_zoo'\n", "unsloth_zoo is not installed in the Python environment"),
    ("sft fails: cannot import name 'is_torch_greater_or_equal' from 'transformers.utils'\n", "transformers"),
])
def test_an_import_fragment_quoted_without_its_class_is_read_as_that_class(tmp_path, text, words):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "Read as the error's own text" in f.message and words in f.message


# -- which kernel an illegal memory access came from ------------------------------------------------------------------
# Triton's own prefix (triton/backends/nvidia/driver.c gpuAssert) and CUDA's status text, as users quote them

def test_a_triton_illegal_access_names_a_patched_triton_kernel(tmp_path):
    f = first(tmp_path, "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered\n")
    assert f.name == "cuda-error"
    assert "the faulting kernel is a Triton-compiled op: most likely one a package patched into the model" in f.message
    assert "The run that decides: the same step with that patch off" in f.message


def test_an_illegal_access_with_flash_attention_named_names_the_attention_kernel(tmp_path):
    f = first(tmp_path, "With attn_implementation=\"flash_attention_2\" and packing, training Qwen2.5-7B crashes with "
                        "`CUDA error: an illegal memory access was encountered`.\n")
    assert f.name == "cuda-error"
    assert "the text names flash_attention_2: most likely the flash-attention kernel read past its inputs" in f.message
    assert "flash_attn: sdpa in LLaMA-Factory" in f.message


def test_an_illegal_access_with_no_kernel_named_keeps_the_general_meaning(tmp_path):
    f = first(tmp_path, "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert f.name == "cuda-error"
    assert "most likely" not in f.message and "Xid 31/13/94" in f.message


# -- an error said of a resume, no error text -------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "加了resume_from_checkpoint想接着训练，结果报错了\n",
    "Resuming from checkpoint-500 fails after I raised num_train_epochs\n",
])
def test_an_error_said_of_a_resume_names_the_checkpoint_folder_first(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "most often the folder resume_from_checkpoint names is not one the run can resume from" in f.message
    assert "The input that decides: what that folder holds" in f.message


def test_a_resume_error_with_its_text_keeps_that_texts_reading(tmp_path):
    f = first(tmp_path, "resume_from_checkpoint 报错 ValueError: loaded state dict has a different number of parameter "
                        "groups\n")
    assert "most often the folder resume_from_checkpoint names" not in f.message
    assert "the set of trainable parameters is not the one the checkpoint was saved with" in f.message


@pytest.mark.parametrize("words, named", [
    ("使用Qwen14B-chat-Int4作为base模型", ("Qwen14B-chat-Int4", "integer")),
    ("TheBloke/Llama-2-7B-GPTQ under zero3", ("TheBloke/Llama-2-7B-GPTQ", "GPTQ")),
    ("用int4量化的模型跑zero3", None),          # the format word alone names no checkpoint
    ("Qwen2.5-7B-Instruct with ZeRO-3", None),
])
def test_quantized_name_reads_a_checkpoint_name_only(words, named):
    from finetune_doctor.analyzers.postmortem.quantcause import quantized_name
    assert quantized_name(words) == named


@pytest.mark.parametrize("text, hit", [
    ("Qwen-7B-Chat 报错", True), ("baichuan-13b-chat 报错", True), ("internlm2_5-7b-chat error", True),
    ("qwen 7b 报错", False),     # loosely written: as likely Qwen2.5-7B, transformers' own classes
    ("Qwen2-7B 报错", False), ("llama3 报错", False),
])
def test_remote_families_are_read_as_users_name_them(text, hit):
    from finetune_doctor.analyzers.postmortem.remotewords import REMOTE_FAMILIES
    assert bool(REMOTE_FAMILIES.search(text)) is hit


# -- torch's CheckpointError: a recomputation that saved another number of tensors -----------------------------------
# torch/utils/checkpoint.py's text, with the counts on the lines after as torch 2.1+ prints them

def test_a_checkpoint_recomputation_mismatch_names_a_fused_op_in_the_block(tmp_path):
    f = first(tmp_path, "torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: A different number of "
                        "tensors was saved during the original forward and recomputation.\n"
                        "Number of tensors saved during forward: 31\nNumber of tensors saved during recomputation: 9\n")
    assert f.name == "run-crashed"
    assert "the checkpointed block ran differently when it was recomputed" in f.message
    assert "most likely an op inside it that saves tensors on its own terms" in f.message
    assert "The run that decides: the same step with the fused op swapped for its torch form" in f.message


def test_the_checkpoint_mismatch_said_in_words_is_read_too(tmp_path):
    f = first(tmp_path, "FSDP + activation checkpointing 报错: A different number of tensors was saved during the "
                        "original forward and recomputation\n")
    assert f.name == "run-crashed"
    assert "the checkpointed block ran differently" in f.message


def test_the_zero3_refusal_quoted_without_its_class_is_read_with_the_named_checkpoint(tmp_path):
    f = first(tmp_path, "使用Qwen-7B-Chat-Int4做lora，zero3报错 DeepSpeed Zero-3 is not compatible with "
                        "low_cpu_mem_usage=True or with passing a device_map\n")
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "the words name `Qwen-7B-Chat-Int4`, a checkpoint its name says is stored quantized" in f.message


@pytest.mark.parametrize("text, lead", [
    ("用flash_attention_2训练qwen2.5时报illegal memory access\n", "The text names flash_attention_2: most likely"),
    ("liger kernel 开启后 illegal memory access\n", "The text names liger kernel, whose kernels are Triton-compiled"),
    ("illegal memory access at step 30\n", None),
])
def test_an_illegal_access_said_in_words_names_the_kernel_the_words_give(tmp_path, text, lead):
    f = first(tmp_path, text)
    assert f.name == "cuda-error" and f.severity in ("warning", "error")
    assert (lead in f.message) if lead else ("most likely the" not in f.message)


@pytest.mark.parametrize("text", [
    "flash_attn: sdpa\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
    "flash_attn: disabled\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
    "use_liger_kernel=False,\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
])
def test_a_kernel_named_only_as_switched_off_is_not_the_kernel_the_text_names(tmp_path, text):
    # LLaMA-Factory's flash_attn key set to sdpa/disabled, TrainingArguments' repr with Liger off: the paste names
    # what the run did not use, so no lead points at it (kernelwords._OFF)
    f = first(tmp_path, text)
    assert f.name == "cuda-error"
    assert "the text names" not in f.message and "Xid 31/13/94" in f.message


def test_an_installed_vllm_in_an_env_listing_is_not_an_rl_run(tmp_path):
    # `llamafactory-cli env` (LLaMA-Factory's issue template) lists vLLM when it is installed; an SFT run spread over
    # two cards keeps the one-process reading (devicecause.RL_SAID)
    f = first(tmp_path, "- `llamafactory` version: 0.9.3\n- PyTorch version: 2.6.0+cu124 (GPU)\n"
                        "- vLLM version: 0.8.4\n\n" + SAME_DEVICE + "\n")
    assert f.name == "run-crashed"
    assert "a model beside the policy" not in f.message
    assert "the model is spread over several GPUs in one process" in f.message


def test_a_shells_not_found_above_another_exception_is_not_its_cause(tmp_path):
    # "/bin/sh: 1: nvcc: not found" (a build step's probe) printed above an unrelated exception: that exception keeps
    # its own reading (msgcause._not_on_path reads the other lines only for words without a class)
    f = first(tmp_path, "/bin/sh: 1: nvcc: not found\nTraceback (most recent call last):\n"
                        "  File \"/opt/LLaMA-Factory/src/llamafactory/hparams/parser.py\", line 70, in _parse_args\n"
                        "    raise ValueError(msg)\nValueError: Some specified arguments are not used by the "
                        "HfArgumentParser: ['--lora_rnak', '8']\n")
    assert f.name == "run-crashed" and "on its PATH" not in f.message


def test_llamafactorys_liger_key_names_liger_when_on_and_not_when_off(tmp_path):
    # LLaMA-Factory's own key is enable_liger_kernel (hparams/model_args.py), transformers' use_liger_kernel
    on = first(tmp_path, "enable_liger_kernel: true\nRuntimeError: CUDA error: an illegal memory access was "
                         "encountered\n")
    assert "the text names enable_liger_kernel, whose kernels are Triton-compiled ops" in on.message
    off = first(tmp_path, "enable_liger_kernel: false\nRuntimeError: CUDA error: an illegal memory access was "
                          "encountered\n")
    assert "the text names" not in off.message
