"""Round 10's kinds (issue #25), each in fresh wordings: English and Chinese, a title and a sentence, with and without
a one-line log. None of these texts is a round-10 case; they are written after the shapes users post (the threads
the search tool found: LlamaFactory#7582 "use qwen2.5-vl-7b +videos for sft, ValueError: Processor was not found",
#8964 "微调gemma3-270m-it报错: ValueError: Processor was not found", #8210 "transformers=4.52.3 but ValueError:
Processor was not found"; modelscope/ms-swift#107 "微调seqgpt后，使用微调过后的ckpt作为resume_from_ckpt参数，报错" with
torch's optimizer-group ValueError; kohya-ss/sd-scripts#378 "I killed my training and launch a resume from the last
checkpoint ... ValueError: loaded state dict contains a parameter group ...") and the exact lines the tools print:

- LLaMA-Factory data/mm_plugin.py ``_validate_input``: "Processor was not found, please check and update your
  model file." (older releases: "... your processor config.");
- torch/optim/optimizer.py ``load_state_dict`` (torch 2.13.0 :941-953): "loaded state dict contains a parameter
  group that doesn't match the size of optimizer's group", "loaded state dict has a different number of parameter
  groups";
- torch utils/data/dataloader.py: "RuntimeError: DataLoader worker (pid(s) 12345) exited unexpectedly";
- transformers' Qwen2-VL family: "Image features and image tokens do not match: tokens: 0, features 1024".

A finding read from words alone is at most a warning; a log line that proves it keeps its own severity.
"""

from __future__ import annotations


import pytest

from finetune_doctor.analyzers.postmortem.framecause import frame_lead
from finetune_doctor.evidence import Notice
from finetune_doctor.readers.runlogs import pasteblocks, userwords
from pmhelp import first_of_text as first


# -- 1. a version mismatch names the package ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "ValueError: Processor was not found, please check and update your model file.",
    "微调gemma3-4b报错: ValueError: Processor was not found, please check and update your model file",
    "Fine-tuning Qwen3-VL-8B with llamafactory stops with 'Processor was not found, please check and update your "
    "processor config.'",
    "[rank0]: ValueError: Processor was not found, please check and update your model file.",
])
def test_processor_not_found_names_the_installed_transformers(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "the installed transformers predates the model's processor class" in f.message
    assert "`pip show transformers`" in f.message


def test_processor_not_found_with_a_named_model_gives_the_release_it_needs(tmp_path):
    f = first(tmp_path, "训练 gemma3 时报错 ValueError: Processor was not found, please check and update your model file.")
    assert f.name == "run-crashed"   # the exception's own line: a log line, so its severity stays
    assert "needs transformers >= 4.50.0" in f.message   # catalog/tf_model_types.json's gemma3 row


_LOAD_CONFIG = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/LLaMA-Factory/src/llamafactory/train/tuner.py", line 50, in run_exp\n'
    "    run_sft(model_args, data_args, training_args, finetuning_args, generating_args, callbacks)\n"
    '  File "/home/u/LLaMA-Factory/src/llamafactory/train/sft/workflow.py", line 47, in run_sft\n'
    "    model = load_model(tokenizer, model_args, finetuning_args, training_args.do_train)\n"
    '  File "/home/u/LLaMA-Factory/src/llamafactory/model/loader.py", line 131, in load_model\n'
    "    config = load_config(model_args)\n"
    '  File "/home/u/LLaMA-Factory/src/llamafactory/model/loader.py", line 117, in {cut}')


@pytest.mark.parametrize("cut", ["l", "load_con", "load_config"])
def test_a_traceback_cut_in_lf_load_config_names_transformers(tmp_path, cut):
    f = first(tmp_path, _LOAD_CONFIG.format(cut=cut))
    assert f.name == "run-crashed"
    assert "the paste is cut inside transformers' load of the model" in f.message
    assert "a transformers older than the model" in f.message


def test_a_cut_function_name_is_not_completed_from_another_call():
    tb = Notice("x.log", 1, None, "traceback", "Traceback (most recent call last):",
                {"frames": ("load_model (loader.py)", "model = init_adapter(config)", "l (loader.py)")})
    assert frame_lead(tb) is None   # "l" is no prefix of init_adapter: nothing is guessed


@pytest.mark.parametrize("inner", [
    ('map (arrow_dataset.py)', "for rank, done, content in iflatmap_unordered("),
    ('_map_single (arrow_dataset.py)', "for i, batch in iter_outputs(shard_iterable):"),
    ('wrapper (arrow_dataset.py)', "out = func(self, *args, **kwargs)"),
])
def test_a_traceback_cut_in_lf_dataset_map_names_transformers(tmp_path, inner):
    func, file = inner[0].split(" ")
    log = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/w/LLaMA-Factory/src/llamafactory/data/loader.py", line 304, in get_dataset\n'
           "[rank0]:     dataset = _get_preprocessed_dataset(\n"
           '[rank0]:   File "/w/LLaMA-Factory/src/llamafactory/data/loader.py", line 250, in _get_preprocessed_dataset\n'
           "[rank0]:     dataset = dataset.map(\n"
           f'[rank0]:   File "/w/env/lib/python3.11/site-packages/datasets/{file[1:-1]}", line 3165, in {func}\n'
           f"[rank0]:     {inner[1]}")
    f = first(tmp_path, log)
    assert f.name == "run-crashed"
    assert "the paste is cut inside LLaMA-Factory's preprocessing of the dataset" in f.message
    assert "the installed transformers cannot build or call" in f.message


def test_datasets_map_without_lf_frames_gets_no_lf_lead(tmp_path):
    log = ("Traceback (most recent call last):\n"
           '  File "/w/train.py", line 40, in <module>\n'
           "    ds = ds.map(tokenize, num_proc=8)\n"
           '  File "/w/env/lib/python3.11/site-packages/datasets/arrow_dataset.py", line 3165, in map\n'
           "    for rank, done, content in iflatmap_unordered(")
    f = first(tmp_path, log)
    assert "LLaMA-Factory's preprocessing" not in f.message


# -- 2. words the reader found nothing in -----------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "训练过程中异常中断",
    "DDP 多卡训练跑到一半被中断了，日志里没有任何报错",
    "The training was interrupted after about 6 hours, nothing in the log",
])
def test_a_run_said_interrupted_is_a_stop_from_outside(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "stopped-from-outside" and f.severity == "warning"
    assert "You describe a run interrupted part-way" in f.message and "nohup does not protect" in f.message


def test_no_error_said_is_negated_with_renhe():
    # "没有任何报错" says no error was printed: not an error said
    said = userwords.read_words("训练到一半停了，没有任何报错")
    assert said is None or said["symptom"] != "error"
    assert userwords.read_words("训练到一半停了，有报错")["symptom"] == "error"


@pytest.mark.parametrize("text", [
    "用单卡 A100 80G 全参微调 7B 报OOM，命令如下：\n"
    "deepspeed --num_gpus 1 src/train.py \\\n    --model_name_or_path /data/Qwen2.5-7B \\\n    --stage sft \\\n"
    "    --do_train \\\n    --dataset alpaca_zh \\\n    --template qwen \\\n    --finetuning_type full \\\n"
    "    --output_dir out \\\n    --per_device_train_batch_size 4 \\\n    --cutoff_len 4096 \\\n    --bf16",
    "I get CUDA OOM with this launch:\n"
    "torchrun --nproc_per_node 2 train.py \\\n  --model /models/llama-3-8b \\\n  --batch_size 8 \\\n"
    "  --seq_len 8192 \\\n  --lr 2e-5 \\\n  --epochs 3 \\\n  --gradient_checkpointing false \\\n"
    "  --output_dir runs/x \\\n  --save_steps 500 \\\n  --logging_steps 10 \\\n  --bf16 true",
    "python -m trainer.run \\\n  --model_path Qwen3-4B \\\n  --epoch 3 \\\n  --batch_size 1 \\\n  --use_lora true \\\n"
    "  --lr 1e-4 \\\n  --data a.json \\\n  --out o \\\n  --save_every 100 \\\n  --eval_every 100 \\\n"
    "  --lora_r 8\n训练到 20% 左右就显存溢出",
])
def test_oom_said_beside_a_pasted_command_is_read(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "cuda-oom" and f.severity == "warning"


def test_a_pasted_command_is_blanked_and_its_words_kept():
    text = "报错如下\npython train.py \\\n  --a 1 \\\n  --b 2 \\\n  --c 3"
    blanked = pasteblocks.blank_blocks(text)[0]
    assert blanked.splitlines()[0] == "报错如下" and "--b" not in blanked


@pytest.mark.parametrize("text", [
    "DataLoader worker exited unexpectedly when fine-tuning qwen2-vl",
    "训练 Qwen2-VL 时 DataLoader worker 异常退出",
    "Training Qwen2.5-VL dies after 300 steps: the DataLoader worker died, the machine has 64 GB of RAM",
])
def test_a_dataloader_worker_said_to_die_is_host_memory(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "host-oom-killed" and f.severity == "warning"


def test_a_dataloader_worker_bus_error_stays_a_native_crash(tmp_path):
    f = first(tmp_path, "DataLoader worker exited unexpectedly with a Bus error")
    assert f.name == "native-crash"


@pytest.mark.parametrize("text", [
    "ZeRO-3 + LoRA: resuming from a checkpoint fails with a size mismatch, the checkpoint does not hold all the "
    "LoRA weights",
    "用 zero3 训练 lora，从 checkpoint 恢复训练时维度不匹配，保存的 adapter 不完整",
    "[BUG] deepspeed stage 3 with peft adapters: load_best_model_at_end fails, shape mismatch",
])
def test_zero3_adapter_checkpoint_said_names_the_sharded_save(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "under ZeRO-3 each rank holds a shard of every parameter" in f.message
    assert "stage3_gather_16bit_weights_on_model_save" in f.message


def test_a_size_mismatch_without_zero3_gets_no_zero3_lead(tmp_path):
    f = first(tmp_path, "resuming my LoRA checkpoint fails with a dimension mismatch")
    assert "ZeRO-3" not in f.message


# -- 3. the mechanism under another rule ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "ValueError: Image features and image tokens do not match: tokens: 0, features 1024",
    "多模态微调报错 Image features and image tokens do not match: tokens: 0, features 256，数据是按 mllm_demo 格式整理的",
    "Qwen2-VL SFT on my own data stops: Image features and image tokens do not match, tokens: 0, features: 512",
])
def test_no_image_placeholder_at_all_is_a_data_format_error(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "held no `<image>` tag" in f.message


def test_fewer_image_tokens_than_features_stays_a_cutoff_cut(tmp_path):
    f = first(tmp_path, "ValueError: Image features and image tokens do not match: tokens: 720, features 1024")
    assert f.name == "image-tokens-exceed-cutoff"


@pytest.mark.parametrize("text, limit", [
    ("Training stopped: disk memory OOM, checkpoints 400, 500 and 600 co-exist although save_total_limit is 1",
     True),
    ("save_total_limit 不生效，checkpoint 越来越多，硬盘爆了", True),
    ("[BUG] disk OOM during full fine-tuning of Qwen2-VL", False),
])
def test_disk_said_full_in_gpu_words_is_disk_full(tmp_path, text, limit):
    f = first(tmp_path, text)
    assert f.name == "disk-full" and f.severity == "warning"
    assert ("max(save_total_limit, 2)" in f.message) is limit


def test_words_above_a_cut_traceback_count(tmp_path):
    log = ("the disk memory OOM happens at the 3rd save\n"
           "Traceback (most recent call last):\n"
           '  File "/w/swift/cli/sft.py", line 18, in <module>\n'
           "    sft_main()\n"
           '  File "/w/swift/llm/base.py", line 49, in main\n'
           "    result = self.ru")
    f = first(tmp_path, log)
    assert f.name == "disk-full" and f.severity == "warning"


@pytest.mark.parametrize("text", [
    "ValueError: loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
    "断点续训报错 ValueError: loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
    "Resuming with resume_from_checkpoint fails: loaded state dict has a different number of parameter groups",
])
def test_optimizer_group_mismatch_names_the_trainable_set(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "the set of trainable parameters is not the one the checkpoint was saved with" in f.message


@pytest.mark.parametrize("path, key, pkg", [
    ("/home/u/xtuner/xtuner/model/modules/dispatch/__init__.py", "Qwen2ForCausalLM", "xtuner"),
    ("/opt/conda/lib/python3.10/site-packages/swift/llm/model/register.py", "InternLM2ForCausalLM", "swift"),
    ("/w/axolotl/src/axolotl/monkeypatch/multipack.py", "Gemma3ForConditionalGeneration", "axolotl"),
    ("/home/swift/xtuner/xtuner/model/modules/dispatch/__init__.py", "BaichuanForCausalLM", "xtuner"),   # innermost
])
def test_an_architecture_keyerror_in_a_trainer_file_names_the_trainer(tmp_path, path, key, pkg):
    log = (f'[rank0]:   File "{path}", line 261, in check\n'
           "[rank0]:     assert TRANSFORMERS_VERSION >= LOWEST_TRANSFORMERS_VERSION[\n"
           f"[rank0]: KeyError: '{key}'")
    f = first(tmp_path, log)
    assert f.name == "run-crashed"
    assert f"the KeyError is raised in {pkg}'s own code" in f.message and f"`{key}` is not in it" in f.message


def test_a_model_type_keyerror_is_not_read_as_a_trainer_table(tmp_path):
    log = ('  File "/w/xtuner/xtuner/model/sft.py", line 80, in build\n'
           "KeyError: 'qwen3_next'")
    assert "own code" not in first(tmp_path, log).message
