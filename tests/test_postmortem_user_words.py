"""The user's own words as evidence (issue #25, round 7's largest kind): a short text with no log line shapes is
read as a description of the failure (readers/runlogs/userwords.py); the rule that judges the symptom from a log
judges it from the words (`ev.basis == 'words'`), says that no log lines were given and states no figure. Fixtures:
fixtures/postmortem/user_words/ (FIXTURE.md)."""

from __future__ import annotations

import time

import pytest

from finetune_doctor.readers.runlogs import logs, userwords
from pmhelp import diagnose, diagnose_report

FIX = "user_words"
NO_LOG = "no log lines were given"


@pytest.mark.parametrize("name, rule, words", [
    ("oom_eval_zh.txt", "cuda-oom", ['("爆显存") (验证)', "eval_accumulation_steps", "Tried to allocate"]),
    ("oom_save_en.txt", "cuda-oom", ['("out of memory") (saving)', "gathered on one GPU for the checkpoint"]),
    ("loss_zero_zh.txt", "loss-stuck-zero", ['("loss 一直为 0")', "logging_nan_inf_filter"]),
    ("nan_step_en.txt", "nan-loss", ['("NaN") around step 200', "fp16 overflow"]),
    ("hang_step_zh.txt", "run-hang", ['("卡住") around step 500', "py-spy dump"]),
    ("timeout_tokenize_en.txt", "nccl-timeout", ['("time out") (tokenized)', "preprocessing_num_workers"]),
    ("disk_save_zh.txt", "disk-full", ['("磁盘空间不足") (保存)', "checkpoint save"]),
    ("nccl_error_en.txt", "nccl-error", ['("NCCL error")', "NCCL_DEBUG=INFO"]),
    ("host_ram_load_en.txt", "host-oom-killed", ['("OOM-killed") (loading)', "dmesg"]),
    # the vocabulary widened for issue #25 (readers/runlogs/userwords_vocab.py)
    ("segfault_en.txt", "native-crash", ['("Segmentation fault") (first step)', "PYTHONFAULTHANDLER=1"]),
    ("illegal_access_zh.txt", "cuda-error", ['("illegal memory access")', "CUDA_LAUNCH_BLOCKING=1"]),
    ("loss_explodes_en.txt", "loss-diverged", ['("loss explodes") around step 800', "learning rate"]),
    ("loss_jump_zh.txt", "loss-diverged", ['("loss 突然变大")', "learning rate"]),
    ("killed_en.txt", "host-oom-killed", ['You describe a process killed ("gets Killed") (loading the dataset)',
                                          "cannot print a Python traceback", "dmesg"]),
    ("killed_zh.txt", "host-oom-killed", ['You describe a process killed ("被kill")', "OOM"]),
    ("stopped_zh.txt", "host-oom-killed", ['You describe a run that stopped with no error ("突然退出")',
                                           "cannot print a Python traceback"]),
    ("error_keyerror_en.txt", "run-crashed", ["KeyError qwen3_next", "(loading)", "whole traceback"]),
    ("version_zh.txt", "run-crashed", ["a version conflict", "requires transformers>=4.49.0", "pip show"]),
    ("image_tokens_en.txt", "image-tokens-exceed-cutoff", ['("image features and image tokens do not match")',
                                                          "cutoff_len", "fewer tokens than features"]),
    ("cuda_mem_zh.txt", "cuda-oom", ['("CUDA内存不足")']),
    ("hang_not_oom_en.txt", "run-hang", ['("hangs") around step 30']),
    ("loss_scale_zh.txt", "loss-scale-collapse", ['("loss scale 一直下降")', "bf16"]),
])
def test_a_description_gives_the_symptoms_rule_worded_from_the_words(tmp_path, name, rule, words):
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert found and found[0].name == rule, [f.name for f in found]
    msg = found[0].message
    assert msg.startswith("You describe") and NO_LOG in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    assert "no-run-evidence" not in [f.name for f in found]
    assert found[0].severity == "warning"   # from words alone: below the rule's error from a log line
    assert found[0].location.line == 1 and found[0].location.file.endswith(name)


def test_no_figure_is_invented_from_words(tmp_path):
    """An OOM said in words has no request, capacity or step: the message states none (no GiB figure)."""
    msg = diagnose(tmp_path, f"{FIX}/oom_eval_zh.txt")[0].message
    assert "GiB" not in msg.replace("with its GiB figures", "")
    rep = diagnose_report(tmp_path, f"{FIX}/oom_eval_zh.txt")
    assert not [e for e in rep.timeline if e.kind == "oom"]


@pytest.mark.parametrize("name", ["question_no_symptom.txt", "loss_error_question_en.txt"])
def test_a_question_without_a_symptom_is_still_nothing_to_diagnose(tmp_path, name):
    """No cause is guessed from words that name none: a question, or "loss error" (a complaint about the loss,
    not an exception), stays "nothing to diagnose"."""
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert [f.name for f in found] == ["no-run-evidence"]


def test_an_exception_typed_with_a_full_width_colon_is_the_exception(tmp_path):
    """A Chinese input method's "：" after the class is read as the colon CPython prints: the crash is read from
    the exception (its cause explained), not from words."""
    found = diagnose(tmp_path, f"{FIX}/fullwidth_colon_zh.txt")
    assert found[0].name == "run-crashed" and not found[0].message.startswith("You describe")
    assert "AssertionError: Torch not compiled with CUDA enabled" in found[0].message


@pytest.mark.parametrize("text, symptom", [
    ("training hangs, no OOM", "hang"),                    # a negated symptom is skipped, the next one counts
    ("没有OOM，但是训练卡住了", "hang"),
    ("no NCCL timeout, but the loss is nan", "nan"),
    ("I killed the job after it printed loss 0.0", "loss-zero"),   # the user killing it is no kill by the host
    ("DataLoader worker is killed by signal: Bus error", "native-crash"),
    ("CUDA error: out of memory on GPU 3", "oom"),          # c10's OOM status is an OOM, not another CUDA error
    ("显存溢出 when evaluating", "oom"),
    ("系统内存不足，进程退出", "host-oom"),
    ("加载数据集时爆内存", "host-oom"),
    ("训练时内存 OOM，机器只有 64G", "host-oom"),
    ("GPU 内存 OOM", "oom"),
    ("Qwen2.5-VL is not supported by transformers 4.44", "version"),
    ("梯度爆炸，loss变成很大", "diverged"),
    ("ValueError raised when packing is on", "error"),
    ("fp16 训练 loss scale 降到最小后退出", "loss-scale"),
    ("训练到一半突然中断，没有报错信息", "stopped"),
    ("Training stops without any error at step 46", "stopped"),
    ("训练过程中被 killed，内存 256G", "killed"),
    ("model loading very slow and then killed", "killed"),
    ("没有报错，但是 loss 为 nan", "nan"),                   # "没有报错" negates the error, not the NaN
    ("grad_norm 一直为 0，loss 不变", "no-update"),
    ("训练时出现 段错误 (核心已转储)", "native-crash"),
    ("Floating point exception when training with deepspeed", "native-crash"),
    ("GPU memory overflow at the second epoch", "oom"),
    ("progress bar stays at 0% on 8 GPUs", "hang"),
    ("进度条一直是0%", "hang"),
    ("learning rate is 0 during the whole training", "no-update"),
    ("lora 训练参数不更新", "no-update"),
    ("lr 为 0.0001 时 loss 为 nan", "nan"),                    # a rate that is not 0 is no missing update
    ("Current loss scale already at minimum when training llama 13b", "loss-scale"),
    ("how to set lora_alpha for qwen", None),
])
def test_symptom_vocabulary(text, symptom):
    got = userwords.read_words(text)
    assert (got and got["symptom"]) == symptom, got


@pytest.mark.parametrize("text, symptom, phase, step", [
    ("QLoRA run: loss is 0 from the first step", "loss-zero", "start", None),
    ("训练时 loss 为nan", "nan", None, None),
    ("Training hangs at step 1200 on 16 GPUs", "hang", None, 1200),
    ("fine-tune fails after 2 hours", None, None, None),           # no symptom word: nothing is guessed
    ("the job runs fine for 30 minutes", None, None, None),        # 30 minutes without a failure is no timeout
    ("loss 0.53 at step 100, is that fine?", None, None, None),    # a number that is not 0 is no loss-zero
    ("evaluation 阶段 超时", "timeout", "evaluation", None),
    ("OSError: [Errno 28] No space left on device during datasets map()", "disk-full", "tokenization", None),
])
def test_read_words(text, symptom, phase, step):
    got = userwords.read_words(text)
    if symptom is None:
        assert got is None
        return
    assert got is not None and got["symptom"] == symptom and got["phase"] == phase and got["step"] == step


def test_a_paste_with_log_shapes_is_not_prose():
    paste = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    main()\n"
             "[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n")
    assert not userwords.looks_like_prose(paste)
    assert userwords.read_words(paste) is None


def test_a_long_text_is_never_read_as_words(tmp_path):
    """Decided by size first: a file above MAX_BYTES is a log, whatever its words."""
    p = tmp_path / "train.log"
    p.write_text(("the run hangs and I do not know why. " * 200)[: userwords.MAX_BYTES + 100])
    assert logs.read_text_log(str(p)).said is None
    q = tmp_path / "short.log"
    q.write_text("the run hangs and I do not know why\n")
    assert logs.read_text_log(str(q)).said["symptom"] == "hang"


def test_words_never_outrank_log_lines(tmp_path):
    """A log with a real OOM line keeps the log's message (ev.basis log), however it is worded around."""
    p = tmp_path / "run"
    p.mkdir()
    (p / "train.log").write_text(
        "my run hangs, help\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.11 GiB memory in use. "
        "Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.40 GiB is reserved by PyTorch but "
        "unallocated.\n")
    from pmhelp import diagnose_dir
    found = diagnose_dir(str(p)).findings
    assert found[0].name == "cuda-oom" and not found[0].message.startswith("You describe")
    assert "run-hang" not in [f.name for f in found]


def test_read_words_is_cheap():
    t0 = time.perf_counter()
    for _ in range(200):
        userwords.read_words("QWEN 训练时进入eval阶段就报OOM, loss 一直为 0, 卡住了")
    assert time.perf_counter() - t0 < 1.0


def test_a_failure_after_the_default_collective_timeout_reads_as_a_timeout(tmp_path):
    """torch.distributed's default process-group timeout and HF's ddp_timeout are 1800 s: "fails after 30 minutes"
    names no symptom word, but the duration is the timeout's; the message says it is inferred from that."""
    said = userwords.read_words("Multi-GPU SFT crashes after 30 minutes while the dataset is tokenized")
    assert said["symptom"] == "timeout" and said["inferred"] and said["default_timeout"]
    assert said["phase"] == "tokenization"
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text("Multi-GPU SFT crashes after 30 minutes while the dataset is tokenized\n")
    from pmhelp import diagnose_dir
    f = diagnose_dir(str(p)).findings[0]
    assert f.name == "nccl-timeout" and f.message.startswith('You describe a failure ("after 30 minutes")')
    assert "1800 s" in f.message and "preprocessing_num_workers" in f.message


@pytest.mark.parametrize("text, rule, words", [
    # a title over torchrun's wrapper line alone (torch/distributed/elastic/multiprocessing/errors/__init__.py)
    ("Qwen2.5-7B LoRA: OOM at evaluation on 4 GPUs\n"
     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError\n", "cuda-oom", '("OOM") (evaluation)'),
    # a Chinese title over a launcher's CalledProcessError (subprocess.py's "returned non-zero exit status")
    ("训练卡住不动\nsubprocess.CalledProcessError: Command '['torchrun', 'train.py']' returned non-zero exit status 1.\n",
     "run-hang", '("卡住")'),
])
def test_a_title_outranks_a_line_that_names_no_cause(tmp_path, text, rule, words):
    """A line that only says a child failed names no cause; the symptom the user's words name comes first."""
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text(text)
    from pmhelp import diagnose_dir
    found = diagnose_dir(str(p)).findings
    assert found[0].name == rule and words in found[0].message, [(f.name, f.message[:80]) for f in found]
    assert "run-crashed" not in [f.name for f in found]
    assert NO_LOG not in found[0].message and "names no cause" in found[0].message


def test_a_line_that_names_its_cause_outranks_the_words(tmp_path):
    """An exception with its message is the run's own evidence: the words beside it are not read as the cause."""
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text("my run hangs\nValueError: Undefined dataset foo in dataset_info.json.\n")
    from pmhelp import diagnose_dir
    found = diagnose_dir(str(p)).findings
    # the refusal's rule (analyzers/postmortem/refusal.py), then the exception: both from the line, not the words
    assert [f.name for f in found[:2]] == ["dataset-not-defined", "run-crashed"]
    assert all("Undefined dataset foo" in f.message for f in found[:2])
    assert "run-hang" not in [f.name for f in found]


@pytest.mark.parametrize("text, metric", [
    ("grad_norm 是 nan，loss 正常", "grad_norm"),
    ("gradient norm is NaN from step 10", "grad_norm"),
    ("loss 为 nan", "loss"),
])
def test_a_nan_said_of_the_grad_norm_is_not_a_nan_loss(tmp_path, text, metric):
    """Issue #25: "training went non-finite" overstates a NaN grad_norm with a finite loss; the words say which."""
    said = userwords.read_words(text)
    assert said["symptom"] == "nan" and said["metric"] == metric
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text(text + "\n")
    from pmhelp import diagnose_dir
    msg = diagnose_dir(str(p)).findings[0].message
    assert ("non-finite grad norm" in msg and "matters only if the loss follows" in msg) == (metric == "grad_norm")


@pytest.mark.parametrize("text, phase", [
    ("训练一直卡在 Loading checkpoint shards", "loading"),    # checkpoint shards load the model, no save
    ("resume_from_checkpoint 时 OOM", "resume"),
    ("OOM when saving the checkpoint", "save"),
    ("Training killed while loading the dataset", "tokenization"),
])
def test_phase_vocabulary(text, phase):
    assert userwords.read_words(text)["phase"] == phase


@pytest.mark.parametrize("text, symptom", [
    ("To avoid OOM I set the batch size to 1, but training still hangs at step 10", "hang"),
    ("为了防止OOM开了梯度检查点，结果训练卡住了", "hang"),
    # the title is the user's summary: its symptom outranks one the paragraph mentions in passing
    ("Training hangs after the first evaluation\nI use fp16; last week a different run had a nan loss", "hang"),
    ("Qwen2.5 全参微调 loss 为 0\n环境：8x A100 80G，显存不足时会报 OOM", "loss-zero"),
    # a title with no symptom: the paragraph's words count
    ("Qwen2.5-7B SFT problem\nthe loss becomes nan at step 300", "nan"),
])
def test_the_title_and_avoided_symptoms(text, symptom):
    assert userwords.read_words(text)["symptom"] == symptom


@pytest.mark.parametrize("text, advice", [
    ('Training stuck at "Running tokenizer on dataset" with 8 GPUs', "main_process_first"),
    ("训练一直卡在 Loading checkpoint shards", "network file system"),
    ("multi-GPU training hangs after the first evaluation", "predict_with_generate"),
    ("vllm +zero2 hangs", None),     # no phase: only the general advice
])
def test_a_hang_said_with_its_phase_gets_that_phases_advice(tmp_path, text, advice):
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text(text + "\n")
    from pmhelp import diagnose_dir
    f = diagnose_dir(str(p)).findings[0]
    assert f.name == "run-hang" and "py-spy dump" in f.message
    phrases = ("main_process_first", "network file system", "predict_with_generate", "final barrier")
    assert [w for w in phrases if w in f.message] == ([advice] if advice else [])


@pytest.mark.parametrize("text, reading", [
    # the class and its quoted key, as transformers' configuration_auto.py raises it for an unknown model type
    ("Qwen3-Next LoRA fails with KeyError 'qwen3_next' when loading", "does not know the model type 'qwen3_next'"),
    # CPython's ModuleNotFoundError text in a title without its colon (with it, the line is read as the exception)
    ("training fails with ModuleNotFoundError No module named 'flash_attn'", "flash_attn is not installed"),
    # LLaMA-Factory's own refusal (data/mm_plugin.py) without its class
    ("Qwen2-VL: Processor was not found", "needs the model's processor"),
    ("flash-attn 安装失败", None),    # no error text to read: the finding says the words name no place
])
def test_an_error_quoted_in_words_is_read_as_the_errors_own_text(tmp_path, text, reading):
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text(text + "\n")
    from pmhelp import diagnose_dir
    f = diagnose_dir(str(p)).findings[0]
    assert f.name == "run-crashed" and f.message.startswith("You describe an error")
    if reading:
        assert "Read as the error's own text: " in f.message and reading in f.message, f.message
    else:
        assert "Read as the error's own text" not in f.message and "name the error but not where" in f.message


@pytest.mark.parametrize("text, advice", [
    ("resume_from_checkpoint 时 OOM", "loads optimizer.pt straight onto each GPU"),
    ("OOM at the first step with cutoff_len 8192", "the step itself does not fit"),
])
def test_an_oom_said_on_resume_or_at_the_first_step_gets_that_phases_reading(tmp_path, text, advice):
    p = tmp_path / "run"
    p.mkdir()
    (p / "issue.txt").write_text(text + "\n")
    from pmhelp import diagnose_dir
    f = diagnose_dir(str(p)).findings[0]
    assert f.name == "cuda-oom" and advice in f.message and "cannot tell which term" not in f.message
