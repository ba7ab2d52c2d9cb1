"""Round 8's dev misses by KIND (issue #25, session 13, wt/pmfix13a): each kind read from other wordings — titles
and sentences, English and Chinese, with and without a one-line log — phrased after other public threads of the
same kind (found with the `search` tool; the address is beside each group), never round 8's own texts.

Kinds (analyzers/postmortem/kindwords.py): an upgrade that broke the run; a source checkout; an MoE hang under
ZeRO-1/2 or DDP; a crash at the end of training (with a local model: the Hub id check); a resumed run that
trained nothing; a named model's transformers release; FSDP's auto wrap finding no layer class (accelerate's
default config); a dtype mismatch of a plain `python` launch over several GPUs. A finding read from words alone
stays at most a warning.
"""

from __future__ import annotations


import pytest

from finetune_doctor.analyzers.postmortem import kindwords as kw
from finetune_doctor.readers.runlogs.userwords import read_words
from pmhelp import first_of_text as first


def _words_only(f) -> None:
    assert f.severity in ("warning", "info"), f"a words finding is at most a warning: {f.severity}"
    assert "what the words alone support" in f.message


# -- an upgrade that broke the run ---------------------------------------------------------------------------------
# phrased after huggingface/transformers#7262 ("When I updated my transformers to the latest, ... an error"),
# kaito-project/kaito#928 ("Fine-tuning script was broken when upgrade transformers to 4.49"),
# Soul-AILab/SoulX-Singer#21 ("transformers升级到5.2.0，很多地方都在报错"), huggingface/transformers#16601 ("ok for
# under ver ... problem with ver 4.2.0+")

@pytest.mark.parametrize("text, pkg, worked", [
    ("When I updated peft to the newest release, LoRA training fails", "peft", None),
    ("SFT script broke after upgrading transformers to 4.49", "transformers", None),
    ("deepspeed升级到0.16.5之后训练就报错了", "deepspeed", None),
    ("Training works with accelerate 0.34.2 but fails with 1.0.1", "accelerate", "0.34.2"),
    ("之前用 trl==0.12.0 正常，升级后报错", "trl", "0.12.0"),
])
def test_an_upgrade_said_before_a_failure_is_a_version_regression_naming_the_package(tmp_path, text, pkg, worked):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    _words_only(f)
    assert "version regression" in f.message and f"`pip show {pkg}`" in f.message
    if worked:
        assert f"the words name {pkg} {worked} as the release that worked" in f.message
        assert f"`pip install {pkg}=={worked}`" in f.message
    else:
        assert "the release that worked" in f.message


def test_the_upgrade_comes_before_the_judging_of_the_releases_the_words_name(tmp_path):
    # LF named (trial 15: its start-up check is judged only where LF's lines or LF is named)
    f = first(tmp_path, "LLaMA-Factory: used accelerate==0.30.1 at first; after updating accelerate to the latest the "
                        "run errors out")
    assert f.name == "run-crashed"
    assert f.message.index("version regression") < f.message.index("LLaMA-Factory's start-up check")


@pytest.mark.parametrize("text, pkg", [
    ("After upgrading trl the SFT run fails\nTypeError: SFTTrainer.__init__() got an unexpected keyword argument "
     "'tokenizer'", "trl"),
    ("升级 peft 到 0.11.0 后报错\nAttributeError: 'LoraModel' object has no attribute 'prepare_inputs_for_generation'",
     "peft"),
])
def test_a_title_tying_the_one_log_line_to_an_upgrade_adds_the_regression_to_the_lines_reading(tmp_path, text, pkg):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "error"   # the log line is the evidence
    assert "the words above it tie it to an upgrade" in f.message
    assert f"the release of {pkg} before the upgrade is the one the code was written for" in f.message


def test_a_start_up_refusal_under_an_upgrade_title_keeps_its_own_reading(tmp_path):
    f = first(tmp_path, "After upgrading transformers LLaMA-Factory refuses to start\nImportError: "
                        "transformers>=4.41.2,<=4.48.1 is required for a normal functioning of this module, but found "
                        "transformers==4.49.0.")
    assert f.name == "run-crashed" and "tie it to an upgrade" not in f.message


def test_no_upgrade_words_no_regression_lead(tmp_path):
    f = first(tmp_path, "LoRA training with peft 0.11.0 fails")
    assert "version regression" not in f.message


# -- a source checkout -----------------------------------------------------------------------------------------------
# phrased after huggingface/transformers#35407 ("Install latest transformers version (4.48.0-dev0) ... when building
# transformers from an earlier commit it works") and tonioo/sievelib#80 ("The master branch does not have this issue")

@pytest.mark.parametrize("text", [
    "Fine-tuning fails when transformers is installed from source",
    "Training crashes on the master branch, the PyPI release works",
    "拉取最新代码后训练报错",
])
def test_a_failure_on_a_source_checkout_names_the_checkout_against_the_installed_releases(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    _words_only(f)
    assert "source checkout" in f.message and "last tagged release" in f.message


# -- an MoE hang under ZeRO-1/2 or DDP -----------------------------------------------------------------------------------
# phrased after huggingface/trl#4631 ("DeepSpeed ZeRO-2 is unstable with GRPOTrainer using Qwen3-VL MoE"),
# huggingface/transformers#39275 ("hangs during training using deepspeed", Qwen3-30B-A3B) and accelerate#2662
# ("hangs during reduce_scatter calls when an expert is unused on 1 rank but used on the other")

@pytest.mark.parametrize("text", [
    "Mixtral training hangs with DeepSpeed ZeRO-2",
    "Qwen3-30B-A3B 用 zero2 训练卡住不动",
    "DDP fine-tuning of an MoE model gets stuck after a few steps",
])
def test_an_moe_hang_without_zero3_names_the_experts_gradients_not_zero3s_gathers(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-hang"
    _words_only(f)
    assert "ZeRO-3's expert gathers do not explain the hang" in f.message
    assert "transformers release that last worked" in f.message
    assert "is a known hang: each rank gathers only the experts" not in f.message


def test_an_moe_hang_under_zero3_alone_keeps_the_gather_lead(tmp_path):
    f = first(tmp_path, "Mixtral ZeRO-3 training hangs")
    assert f.name == "run-hang"
    assert "each rank gathers only the experts its tokens reach" in f.message
    assert "do not explain the hang" not in f.message


def test_a_watchdog_line_under_a_zero2_moe_title_gets_the_experts_gradients_as_its_likely(tmp_path):
    f = first(tmp_path, "Qwen3-MoE hangs with ZeRO-2\n[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
                        "collective operation timeout: WorkNCCL(SeqNum=2201, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                        "Timeout(ms)=1800000) ran for 1800085 milliseconds before timing out.")
    assert f.name == "nccl-timeout"
    assert "ALLREDUCE (SeqNum 2201)" in f.message
    assert "Likely: The words name ZeRO-2 with a mixture-of-experts model" in f.message


# -- a crash at the end of training ----------------------------------------------------------------------------------------
# phrased after yangzhipeng1108/moss-finetune-and-moss-finetune-int8#2 ("model_name_or_path 替换成本地路径 会报错") and
# hiyouga/LlamaFactory#7684 (HFValidationError for a local '/mnt/c/models/...' path)

@pytest.mark.parametrize("text", [
    "Training crashes at the end when the base model is a local folder",
    "训练结束时报错，基座模型用的是本地路径",
    "Run fails at the end of training with base_model: /data/models/llama-3-8b",
])
def test_a_crash_at_the_end_with_a_local_model_names_the_hub_id_check(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    _words_only(f)
    assert "at the end of training with a local model" in f.message
    assert "HFValidationError" in f.message and "the last checkpoint-N holds the trained weights" in f.message


def test_a_crash_at_the_end_without_a_local_model_lists_what_runs_after_the_loop(tmp_path):
    f = first(tmp_path, "Crash at the end of training")
    assert f.name == "run-crashed"
    assert "The words place the crash at the end of training:" in f.message and "HFValidationError" not in f.message


# -- a resumed run that trained nothing ------------------------------------------------------------------------------------
# phrased after huggingface/transformers#10290 ("training does not resume ... state.global_step >= state.max_steps"),
# allenai/longformer#136 ("Resume from checkpoint doesn't work": the checkpoint had done the epochs asked for) and
# ultralytics/ultralytics#24386 (resuming a run that was already finished)

@pytest.mark.parametrize("text", [
    "resume_from_checkpoint: training ends immediately without training",
    "Resuming from checkpoint-3000 finishes instantly, nothing is trained",
    "断点续训后直接结束，没有训练",
    "用 resume_from_checkpoint 继续训练，结果没有训练就退出了",
])
def test_a_resume_that_trained_nothing_names_the_skipped_steps(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "no-parameter-update"
    _words_only(f)
    assert "a resumed run ended without training" in f.message
    assert "raise num_train_epochs or max_steps past the checkpoint's step" in f.message


def test_resume_words_alone_are_no_resume_that_trained_nothing():
    assert not kw.resumed_untrained("resume_from_checkpoint fails with KeyError 'global_step'")
    assert kw.resumed_untrained("继续训练后立即结束")


# -- a named model with a crash and no traceback ---------------------------------------------------------------------------
# (facts/loadfail.py said_type_need reads catalog/tf_model_types.json; kindwords.family_type names the family)

@pytest.mark.parametrize("text, mtype, since", [
    ("Gemma3 微调报错", "gemma3", "4.50.0"),
    ("Qwen2.5-VL training crashes", "qwen2_5_vl", "4.49.0"),
    ("Llama 4 SFT failure", "llama4", "4.51.0"),
    ("Qwen1.5-7B 指令微调报错", "qwen2", "4.37.0"),
])
def test_a_named_model_with_a_crash_names_the_transformers_release_of_its_type(tmp_path, text, mtype, since):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    _words_only(f)
    assert f"The model type `{mtype}` the words name needs transformers >= {since}" in f.message
    assert "the first releases that carry a new type" in f.message and "`pip show transformers`" in f.message


def test_families_as_users_write_them():
    assert kw.family_type("BERT fine-tuning error") is None
    assert kw.family_type("qwen3-vl-8b") == "qwen3_vl" and kw.family_type("Qwen3-30B-A3B") == "qwen3_moe"
    assert kw.family_type("Qwen3.5") == "qwen3_5" and kw.family_type("qwen2.5 7b") == "qwen2"


# -- an engine on though the user turned it off -------------------------------------------------------------------------
# (no other thread of this kind was searched for: these follow the kind's mechanism, accelerate's default config
# read by `accelerate launch` without --config_file, and are not taken from round 8's axolotl394 thread)

@pytest.mark.parametrize("text", [
    "DeepSpeed gets enabled even though my config has no deepspeed key",
    "Training uses DeepSpeed ZeRO-3 although I never configured it",
    "明明关闭了 fsdp 还是启用了",
])
def test_an_engine_on_though_turned_off_names_accelerates_default_config(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    _words_only(f)
    assert "an engine was on though it was turned off" in f.message and "default_config.yaml" in f.message


# -- FSDP's auto wrap with no layer class (one line) -----------------------------------------------------------------------
# phrased after huggingface/accelerate#2872 ("Accelerate test fails: Exception: Could not find ..."),
# netease-youdao/BCEmbedding#66 ("accelerate加速，微调...报错：Could not find ...") and tatsu-lab/stanford_alpaca#58

@pytest.mark.parametrize("text", [
    "Exception: Could not find the transformer layer class to wrap in the model.",
    "accelerate launch fails\nException: Could not find the transformer layer class to wrap in the model.",
    "accelerate多卡微调报错：Could not find the transformer layer class to wrap in the model.",
])
def test_fsdp_auto_wrap_names_the_layer_class_and_accelerates_default_config(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "Could not find the transformer layer class" in f.message
    assert "fsdp_transformer_layer_cls_to_wrap" in f.message and "default_config.yaml" in f.message
    assert "`accelerate env`" in f.message


# -- a dtype mismatch inside a layer (one or two lines) --------------------------------------------------------------------
# phrased after mark1879/Baichuan-13B-Finetuning#23 ("多卡训练时报错": expected scalar type Half but found Float) and
# liangwq/Chatglm_lora_multi-gpu#18 ("单机多卡训练出现错误")

@pytest.mark.parametrize("text", [
    "RuntimeError: expected scalar type Half but found Float",
    "多卡训练时报错 RuntimeError: expected scalar type Half but found Float",
])
def test_a_dtype_mismatch_names_the_plain_python_launch_over_several_gpus(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "expected scalar type Half but found Float" in f.message
    assert "a plain `python` launch (no torchrun)" in f.message and "CUDA_VISIBLE_DEVICES=0" in f.message


def test_a_dtype_mismatch_under_two_precisions_says_the_flag_is_not_the_cause():
    text = kw.layer_cause("RuntimeError", "expected scalar type Float but found Half",
                          "bf16: expected scalar type Float but found BFloat16")
    assert text is not None and "with BFloat16 and with Half alike" in text
    assert "with BFloat16 and with Half" not in (kw.layer_cause("RuntimeError", "expected scalar type Float but "
                                                                 "found Half") or "")


# -- failures said without an error word; what stays as it was --------------------------------------------------------------

@pytest.mark.parametrize("text, symptom", [
    ("Fine-tuning of the foundation model: failure on the dev branch", "error"),
    ("在进行DPO训练时发生下面错误", "error"),
    ("DPO training on big datasets always failed after 30 minutes", "timeout"),   # the default timeout, as before
])
def test_failure_words_are_an_error_said_unless_a_duration_names_the_timeout(text, symptom):
    said = read_words(text)
    assert said is not None and said["symptom"] == symptom
