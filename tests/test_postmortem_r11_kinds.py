"""Round 11's kinds (issue #25, wt/pmfix15), each in a paste of its own shape that is not the round's text
(fixtures/postmortem/real_threads/cases_m.py holds the threads): the exception whose own words carry the cause
(analyzers/postmortem/msgcause.py), the c10d store's timeout beside the main process's preprocessing bar
(collectives.py `barrier_facts`), and the further kinds below.
"""

from __future__ import annotations

import pytest

from pmhelp import first_of_text as first

# -- an exception whose words state the cause ------------------------------------------------------------------------

PICKLE_MAP = """\
[INFO|2024-05-02 10:11:12] llamafactory.data.loader:52 >> Loading dataset identity.json...
Converting format of dataset (num_proc=16): 100%|██████████| 91/91 [00:00<00:00, 512.45 examples/s]
Running tokenizer on dataset (num_proc=16):   0%|          | 0/91 [00:00<?, ? examples/s]
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/multiprocess/pool.py", line 125, in worker
    result = (True, func(*args, **kwds))
  File "/opt/conda/lib/python3.10/site-packages/dill/_dill.py", line 388, in save
    StockPickler.save(self, obj, save_persistent_id)
TypeError: cannot pickle 'builtins.CoreBPE' object"""


def test_an_unpicklable_tiktoken_tokenizer_in_a_map_names_tiktoken_and_the_workers(tmp_path):
    f = first(tmp_path, PICKLE_MAP)
    assert f.name == "run-crashed"
    assert "tiktoken" in f.message and "num_proc=16" in f.message
    assert "preprocessing_num_workers: 1" in f.message


def test_an_unpicklable_lock_names_the_lock_not_tiktoken(tmp_path):
    f = first(tmp_path, PICKLE_MAP.replace("'builtins.CoreBPE'", "'_thread.RLock'"))
    assert "thread lock" in f.message and "tiktoken" not in f.message


RESUME_DS = """\
[INFO|trainer.py:2128] 2024-09-20 10:00:00,000 >> ***** Running training *****
[INFO|trainer.py:2129] 2024-09-20 10:00:00,000 >>   Num examples = 48,000
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 1938, in train
    return inner_training_loop(
  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 2110, in _inner_training_loop
    deepspeed_load_checkpoint(
  File "/usr/local/lib/python3.10/dist-packages/transformers/integrations/deepspeed.py", line 427, in deepspeed_load_checkpoint
    raise ValueError(f"Can't find a valid checkpoint at {checkpoint_path}")
ValueError: Can't find a valid checkpoint at saves/qwen2-7b/full/sft/checkpoint-500"""


def test_a_resume_without_a_valid_checkpoint_names_save_only_model(tmp_path):
    f = first(tmp_path, RESUME_DS)
    assert f.name == "run-crashed"
    assert "save_only_model" in f.message and "global_step" in f.message
    assert "the words name save_only_model" not in f.message   # the paste does not say it


def test_a_resume_said_with_save_only_model_leads_with_the_words(tmp_path):
    f = first(tmp_path, "I trained with save_only_model: true and now resuming fails\n" + RESUME_DS)
    assert "the words name save_only_model" in f.message


def test_libuv_missing_names_windows_and_the_switch(tmp_path):
    f = first(tmp_path, """\
PS C:\\Users\\me\\proj> torchrun --standalone --nproc_per_node=2 train.py
  File "C:\\Users\\me\\miniconda3\\envs\\t\\Lib\\site-packages\\torch\\distributed\\rendezvous.py", line 189, in _create_c10d_store
    return TCPStore(
RuntimeError: use_libuv was requested but PyTorch was build without libuv support""")
    assert f.name == "run-crashed"
    assert "Windows" in f.message and "USE_LIBUV=0" in f.message


def test_cublaslt_error_names_bitsandbytes_int8_and_4bit(tmp_path):
    f = first(tmp_path, """\
loading the 13B in 8bit on an H800 node
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/bitsandbytes/autograd/_functions.py", line 395, in forward
    out32, Sout32 = F.igemmlt(C32A, state.CxB, SA, state.SB)
  File "/usr/local/lib/python3.10/dist-packages/bitsandbytes/functional.py", line 1792, in igemmlt
    raise Exception('cublasLt ran into an error!')
Exception: cublasLt ran into an error!""")
    assert f.name == "run-crashed"
    assert "bitsandbytes" in f.message and "4-bit" in f.message and "H800" in f.message


def test_unknown_args_above_a_cut_traceback_name_the_renamed_key(tmp_path):
    f = first(tmp_path, """\
Got unknown args, potentially deprecated arguments: ['--name_module_trainable', 'q_proj,v_proj']
Traceback (most recent call last):
  File "/data/LLaMA-Factory/src/train_bash.py", line 14, in <module>
    main()
  File "/data/LLaMA-Factory/src/llmtuner/train/tuner.py", line 26, in run_exp
    model_args, data_args, training_args, finetuning_args, generating_args = get_train_args(args)
  File "/data/LLaMA-Factory/src/llmtuner/hparams/parser.py", line 91, in get_train""")
    assert f.name == "run-crashed"
    assert "--name_module_trainable (renamed to freeze_trainable_modules)" in f.message


def test_unknown_args_name_a_replacement_whose_value_means_something_else(tmp_path):
    """image_resolution (a side length in LF 0.9.0) was replaced by image_max_pixels (a pixel count): the catalog
    marks it ``same_value: false``, so the message does not say only "renamed" (the value must be converted)."""
    from finetune_doctor.readers.config.keyschema import load_schema

    assert load_schema()["retired"]["image_resolution"]["same_value"] is False
    f = first(tmp_path, """\
Got unknown args, potentially deprecated arguments: ['--image_resolution', '512']
Traceback (most recent call last):
  File "/data/LLaMA-Factory/src/llamafactory/launcher.py", line 23, in <module>
    launch()
  File "/data/LLaMA-Factory/src/llamafactory/hparams/parser.py", line 72, in _parse_args""")
    assert "--image_resolution (replaced by image_max_pixels, whose value means something else" in f.message
    assert "renamed to image_max_pixels" not in f.message


# -- the store's own timeout beside the main process's preprocessing bar ---------------------------------------------

BAR_TIMEOUT = ("Running tokenizer on train dataset:  61%|██████    | 610000/1000000 [29:58<19:10, 339.01 examples/s]"
               "Traceback (most recent call last):\n"
               '  File "run_clm.py", line 640, in <module>\n'
               "    main()\n"
               "RuntimeError: Socket Timeout")


def test_a_socket_timeout_beside_the_tokenizer_bar_is_the_barrier_timeout(tmp_path):
    f = first(tmp_path, BAR_TIMEOUT)
    assert f.name == "nccl-timeout"
    assert "Running tokenizer on train dataset" in f.message and "29 min 58 s" in f.message


def test_a_socket_timeout_without_a_bar_stays_the_crash(tmp_path):
    f = first(tmp_path, BAR_TIMEOUT.split("]", 1)[1])
    assert f.name == "run-crashed"


def test_a_datasets_1_batch_bar_is_read(tmp_path):
    f = first(tmp_path, BAR_TIMEOUT.replace("610000/1000000 [29:58<19:10, 339.01 examples/s]",
                                            "61/100 [29:58<19:10, 29.48s/ba]"))
    assert f.name == "nccl-timeout" and "61 %" in f.message


# -- a stop from outside named by torchelastic's class alone --------------------------------------------------------

def test_torchelastics_signal_exception_named_alone_is_a_stop_from_outside(tmp_path):
    f = first(tmp_path, "multi-node job dies every night with\n"
                        "raise SignalException(f\"Process {os.getpid()} got signal: {sigval}\", sigval=sigval)\n"
                        "torch.distributed.elastic.multiprocessing.api.SignalException\n"
                        "no OOM, no NCCL error before it")
    assert f.name == "stopped-from-outside"


# -- errno 28 where the full device is the container's /dev/shm -----------------------------------------------------

ENOSPC = """\
OSError: [Errno 28] No space left on device: '/workspace/ckpt/iter_0002000'
docker run --gpus all -it -v /data:/data nvcr.io/nvidia/pytorch:24.01-py3 bash"""


def test_errno_28_in_a_container_without_shm_size_names_dev_shm(tmp_path):
    f = first(tmp_path, ENOSPC)
    assert f.name == "disk-full"
    assert "/dev/shm" in f.message and "--shm-size" in f.message


def test_errno_28_in_a_container_with_shm_size_stays_the_disk(tmp_path):
    f = first(tmp_path, ENOSPC.replace("-it -v", "--shm-size=32g -it -v"))
    assert f.name == "disk-full" and "/dev/shm" not in f.message


# -- a loss said to train first and then collapse to 0 or NaN -------------------------------------------------------

@pytest.mark.parametrize("text", [
    "the loss hovered around 1.8 for 300 steps, then dropped to 0 and stayed there",
    "全参微调 qwen2-7b，一开始 loss 在 1.5 左右，跑到 800 步之后 loss 就开始为 nan",
    "LoRA on llama3: loss was fine for the first 50 steps, then suddenly nan",
])
def test_a_loss_said_to_train_then_collapse_names_the_learning_rate_first(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "learning-rate-too-high-confirmed"
    assert f.severity == "warning" and "fp16" in f.message   # words alone: the other cause is named too


@pytest.mark.parametrize("text, rule", [
    ("loss is nan from the very first step", "nan-loss"),
    ("fp16 training of qwen2: loss 2.0 for the first 50 steps, then nan", "nan-loss"),   # fp16 named: fp16 first
])
def test_a_collapse_without_a_loss_that_trained_first_stays_its_symptom(tmp_path, text, rule):
    assert first(tmp_path, text).name == rule


# -- host RAM in words -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "excessive memory usage when I turn on offload_optimizer: cpu, the node swaps and dies",
    "开启 offload 之后内存占用异常，机器直接卡死",
    "full finetune with zero2 cpu offload gets OOM after the first epoch, when the dataloader workers restart",
    "num_workers=16 forks copies of the dataset and the job hits OOM",
])
def test_memory_said_beside_what_holds_host_ram_is_the_hosts(tmp_path, text):
    assert first(tmp_path, text).name == "host-oom-killed"


def test_an_oom_said_of_the_gpu_beside_offload_stays_the_gpus(tmp_path):
    assert first(tmp_path, "CUDA OOM even with offload_param on 8 GPUs").name == "cuda-oom"


@pytest.mark.parametrize("text", [
    "每次保存模型之后训练就退出了，也没有报错",
    "跑到第二个epoch进程结束了，无任何报错",
])
def test_a_stop_then_no_error_in_the_chinese_order_is_a_silent_stop(tmp_path, text):
    assert first(tmp_path, text).name == "host-oom-killed"


# -- a model said not to learn at all ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "after switching to FSDP the loss stays exactly the same every epoch (use_orig_params: false in my accelerate yaml)",
    "训练了 3 个 epoch，loss 一直不变，模型根本没学到东西",
])
def test_a_loss_said_constant_is_no_update(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "no-parameter-update"
    assert ("use_orig_params off" in f.message) == ("use_orig_params" in text)


def test_a_loss_said_not_decreasing_is_not_no_update(tmp_path):
    (tmp_path / "train.log").write_text("loss is not decreasing after 2 epochs\n", encoding="utf-8")
    from pmhelp import diagnose_dir
    r = diagnose_dir(str(tmp_path))
    assert not r.findings or r.findings[0].name != "no-parameter-update"


# -- a hang said after the last metrics line --------------------------------------------------------------------------

SWIFT_DICTS = """\
{'loss': 1.2101, 'grad_norm': 3.11, 'learning_rate': 9.9e-05, 'token_acc': 0.71, 'epoch': 0.49, 'global_step/max_steps': '250/1000', 'percentage': '25.00%', 'elapsed_time': '1h 2m 3s', 'remaining_time': '3h 6m 9s', 'memory(GiB)': 61.2, 'train_speed(iter/s)': 0.067}
{'loss': 1.1873, 'grad_norm': 2.87, 'learning_rate': 9.7e-05, 'token_acc': 0.72, 'epoch': 0.5, 'global_step/max_steps': '260/1000', 'percentage': '26.00%', 'elapsed_time': '1h 4m 31s', 'remaining_time': '3h 3m 41s', 'memory(GiB)': 61.2, 'train_speed(iter/s)': 0.067}"""


def test_ms_swift_dicts_give_the_step_and_total(tmp_path):
    from pmhelp import diagnose_dir
    (tmp_path / "train.log").write_text(SWIFT_DICTS + "\n", encoding="utf-8")
    r = diagnose_dir(str(tmp_path))
    assert r.findings[0].name == "run-stopped-without-error"
    assert "step 260 of 1000" in r.findings[0].message


def test_a_hang_said_below_the_last_dict_is_a_hang_and_a_warning(tmp_path):
    f = first(tmp_path, SWIFT_DICTS + "\n\nit has been stuck here for two hours, both nodes at 100% GPU util")
    assert f.name == "run-hang" and f.severity == "warning"
    assert "step 260 of 1000" in f.message and "stuck" in f.message
