"""Round 14's word kinds (issue #25, wt/pmfix14a): the forms of the words-only yardstick's misses, each in wordings
that are not the yardstick's (fixtures/postmortem/paraphrases_round14.py), and the catalogue of known release
regressions (catalog/known_regressions.json, analyzers/postmortem/knownbugs.py).

The kinds: GPU memory said with OOM as a verb ("OOMs", "OOMed"); a SIGKILL said as an exit status with a verb or as
the shell's 128 + 9 = 137; CPython's faulthandler line for SIGABRT; a stop whose sender is named (SIGTERM, a
scheduler's pre-emption or time limit, Ctrl-C); a hang said as waiting or sitting there; an empty dataset said with
words between; a save said to crash with words between (Chinese); an exception class named mid-sentence with where
it was raised. A finding from words alone is at most a warning.
"""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.postmortem import knownbugs
from finetune_doctor.numbers import version_key
from finetune_doctor.readers.runlogs import userwords
from pmhelp import first_of_text as first


def symptom(text: str) -> str | None:
    said = userwords.read_words(text)
    return said["symptom"] if said else None


# -- the reader's kinds -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("the 13B run OOMs on every eval", "oom"),
    ("It OOMed at step 40 on an A10", "oom"),
    ("keeps OOMing after I raised cutoff_len", "oom"),
    ("the trainer exited with exit code -9 while packing", "killed"),
    ("container exit code 137 right after tokenization", "killed"),
    ("worker exited with status 137", "killed"),
    ("Fatal Python error: Aborted during backward", "native-crash"),
    ("got SIGABRT from the loss kernel", "native-crash"),
    ("the pod received SIGTERM mid-epoch", "interrupted"),
    ("job preempted on the spot instance at step 900", "interrupted"),
    ("slurm: CANCELLED AT 2024-05-01 DUE TO TIME LIMIT", "interrupted"),
    ("the run hit the wall-clock time limit of the cluster", "interrupted"),
    ("pressed Ctrl-C by accident and the trainer quit", "interrupted"),
    ("launch script just sits there after the dataset is loaded", "hang"),
    ("nothing happens after 'Loading checkpoint shards'", "hang"),
    ("进程一直在等着，nvidia-smi 显示利用率 100%", "hang"),
    ("半天都没有输出，也没有报错", "hang"),
    ("处理完数据集变成空的了", "no-samples"),
    ("过滤之后 0 条样本", "no-samples"),
    ("存 checkpoint 的时候进程崩了", "error"),
    ("RuntimeError during eval of the second epoch", "error"),
    ("KeyError upon loading the tokenizer of qwen3", "error"),
    # (after the FRESH set) the session a run hung on closed, a pod evicted; a failure after a qualified 30 minutes
    ("lost the ssh connection overnight and the run was gone", "interrupted"),
    ("tmux session died, training ended at step 1200", "interrupted"),
    ("远程连接断开后训练就停了", "interrupted"),
    ("the node evicted my job at epoch 2", "interrupted"),
    ("ddp run dies after roughly 30 minutes every time", "timeout"),
])
def test_round14_forms_are_read(text, expected):
    assert symptom(text) == expected


@pytest.mark.parametrize("text", [
    "exit code 1 after the first step",        # a positive exit status is a Python exception's, not a kill
    "see KeyboardInterruptHandler docs",        # no word boundary
    "return code 1370 from the launcher",       # not 137
    "the ValueError in the docs is unrelated",   # "in": no failure placed
    "ssh into the node and the loss is fine",    # ssh named, nothing closed
])
def test_round14_forms_do_not_overreach(text):
    assert symptom(text) not in ("killed", "interrupted", "error")


def test_exit_137_words_name_the_host_memory(tmp_path):
    f = first(tmp_path, "Training died with exit code 137 while tokenizing 2M samples")
    assert f.name == "host-oom-killed"
    assert f.severity != "error"   # words alone: at most a warning


def test_sigterm_words_name_a_stop_from_outside(tmp_path):
    f = first(tmp_path, "训练到一半收到 SIGTERM 就退出了")
    assert f.name == "stopped-from-outside"


# -- the catalogue of known regressions -------------------------------------------------------------------------------

def test_every_catalogue_row_is_sourced_and_ordered():
    rows = knownbugs.rows()
    assert len(rows) >= 5
    for r in rows:
        assert r["url"].startswith("https://github.com/") and r["source"]
        lo, hi = version_key(r["first"]), version_key(r["last"])
        assert lo is not None and hi is not None and lo <= hi
        if r["fixed_in"]:
            assert version_key(r["fixed_in"]) > hi   # the fixing release is past the affected ones


@pytest.mark.parametrize("version, blamed", [("4.36.0", True), ("4.36.2", True), ("4.36.0.dev0", True),
                                             ("4.37.0", False), ("4.35.2", False)])
def test_transformers_436_save_race_range(version, blamed):
    row = knownbugs.known_regression({"transformers": version}, "FileNotFoundError when saving a checkpoint")
    assert (row is not None and row["url"].endswith("/27925")) is blamed


def test_a_release_named_beside_another_symptom_is_not_blamed():
    # deepspeed 0.14.3's row is about zero gradients; an OOM said with that release names no regression
    assert knownbugs.known_regression({"deepspeed": "0.14.3"}, "CUDA out of memory with zero3") is None


def test_words_naming_a_regressed_release_lead_with_its_thread(tmp_path):
    f = first(tmp_path, "After moving to deepspeed 0.14.3 the grad_norm is 0 on every step")
    assert f.name == "no-parameter-update"
    assert "deepspeed 0.14.3, the release the words name, has a known regression" in f.message
    assert "https://github.com/deepspeedai/DeepSpeed/issues/5692" in f.message


def test_a_save_error_with_transformers_436_names_the_rename_race(tmp_path):
    # FileNotFoundError is CPython's class for a rename's ENOENT: the staged save's episode (savecause.py) leads
    f = first(tmp_path, "FileNotFoundError on checkpoint save with transformers==4.36.1 and 4 GPUs")
    assert f.name == "run-crashed"
    assert "27925" in f.message and "4.37.0" in f.message
    assert "has a known regression" not in f.message   # the episode's own words, not the catalogue's beside them


def test_a_regressed_release_outside_a_save_leads_with_the_catalogue(tmp_path):
    f = first(tmp_path, "zero2 sft with deepspeed 0.17.6 errors out in allreduce_gradients")
    assert f.name == "run-crashed"
    assert "deepspeed 0.17.6, the release the words name, has a known regression" in f.message
    assert "deepspeedai/DeepSpeed/issues/7718" in f.message and "deepspeed 0.18.3 fixed it" in f.message
    assert f.message.count("`pip show deepspeed`") == 1   # one command, not two


# -- forms placed by userwords_more.PLACED: each kind at its symptom's precedence -------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("host memory keeps climbing until the whole box crashes", "host-oom"),   # not the catch-all "crashes"
    ("内存持续增长，最后训练崩了", "host-oom"),
    ("sft on 4 cards, Killed after the first eval", "killed"),
    ("after the tokenizer step nothing is logged, GPU utilization goes to 0%", "hang"),
    ("rank 3 keeps waiting in the barrier", "hang"),
    ("NCCL init failed on the second node", "nccl-error"),
    ("NET/IB : connection reset by peer during allreduce", "nccl-error"),
    ("NCCL watchdog timeout error at step 300", "timeout"),                  # a timeout stays nccl-timeout's
    ("peft is too old for this LoRA config", "version"),
    ("deepspeed 0.16.4 还不支持这个 offload 配置", "version"),
    ("downgrading to accelerate 0.33.0 solved it", "version"),
    ("unable to resume from checkpoint-2000", "error"),
    ("[Bug] qwen2.5-omni full sft error", "error"),
    ("scancel killed nothing, but the job was preempted at 3am", "interrupted"),
])
def test_placed_forms_are_read_at_their_symptoms_place(text, expected):
    assert symptom(text) == expected


@pytest.mark.parametrize("text", [
    "training finishes with no error",
    "torchrun: Sending process 881 closing signal SIGTERM",   # torchelastic stopping the others: not a sender
    "the loss looks fine, GPU utilization is 95%",
])
def test_placed_forms_do_not_overreach(text):
    assert symptom(text) not in ("error", "interrupted", "hang")


def test_place_refuses_a_missing_anchor():
    from finetune_doctor.readers.runlogs import userwords_more
    with pytest.raises(StopIteration):
        userwords_more.place((("oom", userwords_more.KILLED_WORD),))


# -- a host kill or RAM said in a phase: what fills host RAM there (saidlead.host_lead) -------------------------------

@pytest.mark.parametrize("text, needle", [
    ("8 卡训练加载模型的时候进程被 kill", "every training process reads the checkpoint into host RAM"),
    ("host RAM runs out while tokenizing with 64 workers", "`preprocessing_num_workers` processes"),
    ("Killed at the final save of a 70B zero3 run", "rank 0 copies the whole gathered 16-bit model"),
    ("CPU memory OOM during evaluation", "moves every batch's logits"),
])
def test_a_host_kill_in_a_phase_names_what_fills_host_ram(tmp_path, text, needle):
    f = first(tmp_path, text)
    assert f.name == "host-oom-killed"
    assert needle in f.message


def test_a_host_kill_without_a_phase_has_no_phase_lead(tmp_path):
    f = first(tmp_path, "the trainer gets killed, nothing else printed")
    assert f.name == "host-oom-killed" and "The words place it" not in f.message


# -- torch's OutOfMemoryError quoted with its request only (logfailures._TORCH_OOM) -----------------------------------

@pytest.mark.parametrize("text, requested", [
    ("torch.cuda.OutOfMemoryError: Tried to allocate 1.50 GiB", "1.50 GiB"),
    ("glm4 lora 训练报 torch.OutOfMemoryError: Tried to allocate 768.00 MiB", "768.00 MiB"),
])
def test_the_oom_class_with_its_request_is_a_cuda_oom(tmp_path, text, requested):
    f = first(tmp_path, text)
    assert f.name == "cuda-oom"
    assert f"tried to allocate {requested}" in f.message


def test_another_class_with_a_request_is_not_an_oom(tmp_path):
    f = first(tmp_path, "torch.cuda.AcceleratorError: Tried to allocate 1.50 GiB")
    assert f.name != "cuda-oom"


# -- NCCL's error said beside a rank's own failure: that failure first (userwords_more.MOVED) -------------------------

@pytest.mark.parametrize("text, expected", [
    ("ncclRemoteError on ranks 0-6 after rank 7 ran out of GPU memory", "oom"),
    ("多卡训练 NCCL 报错，其中一张卡出现 Segmentation fault", "native-crash"),
    ("NCCL error on node 2 after the OOM killer hit rank 9", "host-oom"),
    ("NCCL error: unhandled system error when launching on two nodes", "nccl-error"),   # NCCL alone stays NCCL's
])
def test_a_ranks_own_failure_outranks_the_nccl_errors_of_the_others(text, expected):
    assert symptom(text) == expected


def test_moved_symptoms_keep_every_entry():
    from finetune_doctor.readers.runlogs import userwords_vocab as vocab
    names = [n for n, _ in vocab.SYMPTOMS]
    assert names.index("nccl-error") > names.index("oom") > names.index("native-crash")
    assert names.index("nccl-error") < names.index("cuda-error")
