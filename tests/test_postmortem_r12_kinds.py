"""Round 12's kinds (issue #25, wt/pmfix17), each in a paste of its own shape that is not the round's text
(fixtures/postmortem/real_threads/cases_n.py holds the threads): a keyword a library's class does not take, named by
the package that defines the class (analyzers/postmortem/apicause.py); a tensor still on the meta device and the
cause the Ascend runtime states in its own block (msgcause.py); torchelastic's SignalException retyped by hand and
the CPU allocator's refusal without its size (readers/runlogs/logpatterns.py).
"""

from __future__ import annotations

from pmhelp import first_of_text as first

# -- a keyword a library's class does not take, said with no traceback ----------------------------------------------


def test_a_trl_trainer_keyword_names_trl_not_the_package_that_defines_it(tmp_path):
    f = first(tmp_path, "KTO训练报错 TypeError: KTOTrainer.__init__() got an unexpected keyword argument 'tokenizer'")
    assert f.name == "run-crashed"
    assert "KTOTrainer is trl's" in f.message and "`pip show trl`" in f.message
    assert "the package that defines" not in f.message
    assert "processing_class" in f.message and "huggingface/trl#2162" in f.message   # trl's rename on all trainers
    assert "0.8.6" not in f.message


def test_a_keyword_with_no_known_change_names_the_package_and_no_release(tmp_path):
    f = first(tmp_path, "TypeError: LoraConfig.__init__() got an unexpected keyword argument 'use_dora'")
    assert "LoraConfig is peft's" in f.message and "`pip show peft`" in f.message
    assert "#" not in f.message.split(" — ", 1)[1]     # no issue cited: no release fact is known for it


def test_the_removed_average_log_prob_names_the_trl_release_and_its_source(tmp_path):
    f = first(tmp_path, "  File \"/workspace/simpo/scripts/simpo_trainer.py\", line 88, in concatenated_forward\n"
                        "TypeError: DPOTrainer.get_batch_logps() got an unexpected keyword argument 'average_log_prob'")
    assert f.name == "run-crashed"
    assert "trl 0.8.6" in f.message and "hiyouga/LlamaFactory#4114" in f.message


def test_the_collator_built_with_a_tokenizer_names_trl_0_7_2(tmp_path):
    f = first(tmp_path, "TypeError: DPODataCollatorWithPadding.__init__() got an unexpected keyword argument "
                        "'tokenizer'")
    assert "DPODataCollatorWithPadding is trl's" in f.message and "trl 0.7.2" in f.message


def test_a_class_of_no_known_package_keeps_the_general_words(tmp_path):
    f = first(tmp_path, "TypeError: MyCustomTrainer.__init__() got an unexpected keyword argument 'gamma'")
    assert "the package that defines MyCustomTrainer" in f.message and "trl" not in f.message


# -- a tensor moved while still on the meta device -------------------------------------------------------------------

META = """\
[INFO|modeling_utils.py:4288] 2024-03-21 09:12:40,118 >> All the weights of ChatGLMForConditionalGeneration were initialized from the model checkpoint at THUDM/chatglm3-6b.
Traceback (most recent call last):
  File "/root/LLaMA-Factory/src/train_bash.py", line 14, in <module>
    main()
  File "/root/miniconda3/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1160, in to
    return self._apply(convert)
  File "/root/miniconda3/lib/python3.10/site-packages/torch/nn/modules/module.py", line 833, in _apply
    param_applied = fn(param)
  File "/root/miniconda3/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1158, in convert
    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)
NotImplementedError: Cannot copy out of meta tensor; no data! Please use torch.nn.Module.to_empty() instead of torch.nn.Module.to() when moving module from meta to a different device."""


def test_a_meta_tensor_copy_names_the_low_memory_load_and_its_switch(tmp_path):
    f = first(tmp_path, META)
    assert f.name == "run-crashed"
    assert "meta device" in f.message and "low_cpu_mem_usage: false" in f.message


# -- the cause the Ascend runtime states -----------------------------------------------------------------------------

CANN = """\
[rank5]: Traceback (most recent call last):
[rank5]:   File "/usr/local/python3.10/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3683, in barrier
[rank5]:     work = default_pg.barrier(opts=opts)
[rank5]: RuntimeError: create:torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:1914 HCCL function error: HcclGetRootInfo(&hcclID), error code is 7
[rank5]: [ERROR] 2024-11-02-08:41:10 (PID:51873, Device:5, RankID:5) ERR02200 DIST call hccl api failed.
[rank5]: EJ0001: 2024-11-02-08:41:10.552.118 Failed to initialize the HCCP process. Reason: Maybe the last training process is running.
[rank5]:         Solution: Wait for 10s after killing the last training process and try again."""


def test_the_runtimes_own_reason_is_quoted_with_the_process_check(tmp_path):
    f = first(tmp_path, CANN)
    assert f.name == "run-crashed"
    assert "EJ0001" in f.message and "\"Maybe the last training process is running\"" in f.message
    assert "npu-smi info" in f.message and "Wait for 10s" in f.message


def test_a_reason_that_names_no_process_gets_no_process_check(tmp_path):
    text = CANN.replace("Failed to initialize the HCCP process. Reason: Maybe the last training process is running.",
                        "Getting socket times out. Reason: 1. The remote does not initiate a connect request.")
    f = first(tmp_path, text)
    assert "EJ0001" in f.message and "The remote does not initiate a connect request" in f.message
    assert "npu-smi" not in f.message


# -- lines retyped or cut by hand ------------------------------------------------------------------------------------


def test_a_retyped_signal_exception_is_still_the_launcher_signalled(tmp_path):
    f = first(tmp_path, "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4213 got signal : 1")
    assert f.name == "stopped-from-outside" and "SIGHUP" in f.message


def test_the_cpu_allocators_refusal_without_its_size_is_a_host_allocation(tmp_path):
    f = first(tmp_path, "merge_and_unload 合并 Qwen2-72B 的 LoRA 时报 DefaultCPUAllocator: Can't allocate memory")
    assert f.name == "host-alloc-failed"
    assert "DefaultCPUAllocator" in f.message and " bytes" not in f.message.split("failed inside")[0]


# -- LLaMA-Factory's own no-sample check ended the run ---------------------------------------------------------------

NO_SAMPLES = """\
[INFO|2024-10-08 16:20:31] llamafactory.data.loader:157 >> Loading dataset alpaca_zh_demo.json...
Running tokenizer on dataset (num_proc=16): 100%|██████████| 1000/1000 [00:02<00:00, 412.55 examples/s]
Traceback (most recent call last):
  File "/root/LLaMA-Factory/src/llamafactory/launcher.py", line 23, in <module>
    launch()
  File "/root/LLaMA-Factory/src/llamafactory/train/pt/workflow.py", line 45, in run_pt
    dataset_module = get_dataset(template, model_args, data_args, training_args, stage="pt", **tokenizer_module)
  File "/root/LLaMA-Factory/src/llamafactory/data/loader.py", line 271, in get_dataset
    raise RuntimeError("Cannot find sufficient samples, consider increasing dataset size.")
RuntimeError: Cannot find sufficient samples, consider increasing dataset size."""


def test_the_no_sample_check_in_a_log_leads_with_the_data_rule_and_the_stage(tmp_path):
    from pmhelp import diagnose_dir

    (tmp_path / "train.log").write_text(NO_SAMPLES + "\n", encoding="utf-8")
    names = [f.name for f in diagnose_dir(str(tmp_path)).findings]
    assert names[:2] == ["no-valid-samples", "run-crashed"]      # the data rule leads, the traceback follows
    f = first(tmp_path, NO_SAMPLES)
    assert "Cannot find sufficient samples" in f.message and "dataset_info.json against the stage" in f.message


def test_another_runtime_error_in_the_loader_is_not_a_dataset_without_samples(tmp_path):
    f = first(tmp_path, NO_SAMPLES.replace("Cannot find sufficient samples, consider increasing dataset size.",
                                           "Unknown dataset format."))
    assert f.name == "run-crashed"


# -- a lookup out of its table's range on the CPU --------------------------------------------------------------------

CPU_LOOKUP = """\
  File "/opt/conda/lib/python3.10/site-packages/transformers/models/gpt2/modeling_gpt2.py", line 844, in forward
    position_embeds = self.wpe(position_ids)
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/sparse.py", line 162, in forward
    return F.embedding(
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py", line 2233, in embedding
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
IndexError: index out of range in self"""


def test_a_cpu_lookup_out_of_range_names_the_vocabulary_and_the_position_table(tmp_path):
    f = first(tmp_path, CPU_LOOKUP)
    assert f.name == "cuda-error"
    assert "IndexError: index out of range in self" in f.message
    assert "len(tokenizer) against vocab_size" in f.message and "max_position_embeddings" in f.message


def test_another_index_error_is_not_a_lookup_out_of_range(tmp_path):
    f = first(tmp_path, CPU_LOOKUP.replace("index out of range in self", "list index out of range"))
    assert f.name != "cuda-error"


# -- a pasted plain `python` launch under several GPUs beside the same-device error ------------------------------

PLAIN_LAUNCH = """\
CUDA_VISIBLE_DEVICES=0,1,2,3 python finetune.py --model_name_or_path baichuan-inc/Baichuan2-7B-Base --bf16 True
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/data_parallel.py", line 185, in forward
    outputs = self.parallel_apply(replicas, inputs, module_kwargs)
  File "/home/user/.cache/huggingface/modules/transformers_modules/Baichuan2-7B-Base/modeling_baichuan.py", line 461, in forward
    hidden_states = self.norm(hidden_states)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!"""


def test_a_plain_python_launch_under_several_gpus_is_one_process_over_them(tmp_path):
    f = first(tmp_path, PLAIN_LAUNCH)
    assert f.name == "launched-as-data-parallel"
    assert "one process over 4 GPUs" in f.message and "`python finetune.py`" in f.message
    assert "cuda:1 and cuda:0" in f.message and "torchrun --nproc_per_node 4" in f.message


def test_the_same_error_under_torchrun_is_not_a_data_parallel_launch(tmp_path):
    f = first(tmp_path, PLAIN_LAUNCH.replace("python finetune.py", "torchrun --nproc_per_node 4 finetune.py"))
    assert f.name != "launched-as-data-parallel"


def test_one_visible_gpu_is_not_a_data_parallel_launch(tmp_path):
    f = first(tmp_path, PLAIN_LAUNCH.replace("CUDA_VISIBLE_DEVICES=0,1,2,3", "CUDA_VISIBLE_DEVICES=2"))
    assert f.name != "launched-as-data-parallel"


# -- Windows' console-script launcher ----------------------------------------------------------------------------


def test_the_windows_launchers_failure_names_windows_and_the_lf_multi_gpu_launch(tmp_path):
    f = first(tmp_path, "[INFO|2024-11-20 09:14:02] llamafactory.cli:157 >> Initializing distributed tasks at: "
                        "127.0.0.1:29500\nfailed to create process.")
    assert "Windows' console-script launcher" in f.message and "ddp_backend: gloo" in f.message
    assert "the line before it is LLaMA-Factory starting torchrun" in f.message


def test_the_launchers_fatal_error_without_lf_names_windows_only(tmp_path):
    f = first(tmp_path, "Fatal error in launcher: Unable to create process using '\"C:\\Program Files\\Python310\\"
                        "python.exe\"  \"C:\\Program Files\\Python310\\Scripts\\accelerate.exe\" launch train.py'")
    assert "Windows' console-script launcher" in f.message
    assert "LLaMA-Factory starting torchrun" not in f.message


# -- the catch-all error word introducing the error as printed ------------------------------------------------------


def test_an_error_word_closing_its_line_yields_to_the_quoted_errors_symptom(tmp_path):
    f = first(tmp_path, "两机16卡训练，加载完数据集后报错：\n"
                        "[3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
                        "store by key '0', but store->get('0') got error: Socket Timeout\n"
                        "Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:672 (most "
                        "recent call first):")
    assert f.name == "nccl-timeout" and "rank 0 tokenizing" in f.message


def test_an_error_word_closing_its_line_over_a_plain_error_stays_the_catch_all(tmp_path):
    f = first(tmp_path, "微调时报错：\n数据集的格式好像不对，不知道怎么改")
    assert f.name == "run-crashed" and f.message.startswith("You describe an error")


# -- GPU memory said tight for the fresh run beside a resume said to fail --------------------------------------------


def test_a_tight_fresh_run_and_a_failing_resume_is_the_resumes_gpu_memory(tmp_path):
    f = first(tmp_path, "Fine-tuning Mistral-7B with QLoRA on a 16GB card: training from scratch just fits.\n\n"
                        "But when I resume from the last checkpoint it crashes while loading the optimizer state.")
    assert f.name == "cuda-oom" and "(resume" in f.message
    assert "huggingface/transformers#22159" in f.message and "optimizer states saved in the checkpoint" in f.message


def test_loading_from_a_checkpoint_is_a_resume_not_a_save():
    from finetune_doctor.readers.runlogs import userwords_vocab as vocab

    assert vocab.first_phase("when loading from checkpoint the run fails")[0] == "resume"
    assert vocab.first_phase("it fails while saving the checkpoint")[0] == "save"


# -- LLaMA-Factory's own refusals of a config: an undefined dataset, retired keys ------------------------------------


def _all(tmp_path, text: str) -> list:
    from pmhelp import diagnose_dir

    (tmp_path / "train.log").write_text(text + "\n", encoding="utf-8")
    return diagnose_dir(str(tmp_path)).findings


def test_an_undefined_dataset_names_the_registry_and_the_folder(tmp_path):
    found = _all(tmp_path, "ValueError: Undefined dataset my_chats in dataset_info.json.")
    assert [f.name for f in found[:2]] == ["dataset-not-defined", "run-crashed"]   # the lint rule leads (refusal.py)
    for f in found[:2]:
        assert "`dataset: my_chats`" in f.message and "relative to the folder the command runs in" in f.message


def test_retired_keys_are_named_with_their_replacements_not_as_unknown(tmp_path):
    found = _all(tmp_path, "ValueError: Some keys are not used by the HfArgumentParser: ['image_resolution', "
                           "'new_special_tokens']")
    assert [f.name for f in found[:3]] == ["renamed-key", "renamed-key", "run-crashed"]   # one per key (refusal.py)
    f = found[2]
    assert "all 2 keys are ones an older LLaMA-Factory took" in f.message
    assert "new_special_tokens (renamed to add_special_tokens)" in f.message
    assert "image_max_pixels, whose value means something else" in f.message
    assert "not an argument of any" not in f.message


def test_a_key_of_no_release_is_still_unknown(tmp_path):
    f = first(tmp_path, "ValueError: Some keys are not used by the HfArgumentParser: ['lora_rnak']")
    assert "not an argument of any LLaMA-Factory release" in f.message


def test_words_above_a_traceback_are_read_whatever_tag_the_lines_carry():
    from finetune_doctor.readers.runlogs.userwords import read_words_above_traceback

    paste = ("the job timed out after 30 minutes while rank 0 was still loading the data\n"
             "Traceback (most recent call last):\n"
             '  File "/workspace/train.py", line 12, in <module>\n'
             "    main()")
    for tag in ("", "> ", "\x1b[31m", "trainer-1  | ", "[1,0]<stderr>:"):
        said = read_words_above_traceback("\n".join(tag + ln for ln in paste.split("\n")))
        assert said and said["symptom"] == "timeout" and said["above_traceback"], repr(tag)


def test_the_launch_is_located_at_its_own_line(tmp_path):
    f = first(tmp_path, "\n\nexport CUDA_VISIBLE_DEVICES=0,1\n\n" + PLAIN_LAUNCH.replace("CUDA_VISIBLE_DEVICES=0,1,2,3 ", ""))
    assert f.name == "launched-as-data-parallel" and f.location.line == 5 and "over 2 GPUs" in f.message
