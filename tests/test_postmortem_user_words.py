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
    ("host_ram_load_en.txt", "host-oom-killed", ['("OOM-kill") (loading)', "dmesg"]),
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


def test_a_question_without_a_symptom_is_still_nothing_to_diagnose(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/question_no_symptom.txt")
    assert [f.name for f in found] == ["no-run-evidence"]


@pytest.mark.parametrize("text, symptom, phase, step", [
    ("QLoRA run: loss is 0 from the first step", "loss-zero", None, None),
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
