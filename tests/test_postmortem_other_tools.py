"""Failure lines said by other tools, one real-shaped file each in fixtures/postmortem/other_tools/ (FIXTURE.md
there names the upstream line that prints each): an exception line quoted in markdown, DataParallel's re-raised
replica OOM, PyTorch DataLoader's worker signal handlers, Ray's memory monitor, DeepSpeed's launcher exit code
inside a sentence, torchelastic's failure summary without a traceback, and a first-log NaN grad norm of a skipped
fp16 step (issue #25, the kinds round 4 of the real threads missed).

Each test asserts the first finding and the values its message must carry, read off the fixture text."""

from __future__ import annotations

import os

import pytest
from pmhelp import in_folder

from finetune_doctor.readers.runlogs import logpatterns as pat
from finetune_doctor.readers.runlogs.logs import read_text_log

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem",
                   "other_tools")


diagnose = in_folder("other_tools")


# -- crash lines the reader takes as one ---------------------------------------------------------------------------

def test_an_exception_quoted_in_markdown_is_the_exception(tmp_path):
    notes = [n for n in read_text_log(os.path.join(FIX, "exc_in_markdown.txt")).notices if n.kind == "exception"]
    assert [n.value["cls"] for n in notes] == ["RuntimeError"]
    assert notes[0].value["rank"] == 0 and not notes[0].value["msg"].endswith("`")
    f = diagnose(tmp_path, "exc_in_markdown.txt")
    assert f[0].name == "run-crashed"
    assert "RuntimeError: Expected to have finished reduction in the prior iteration" in f[0].message


def test_dataparallel_replica_oom_is_a_cuda_oom_on_that_device(tmp_path):
    ooms = read_text_log(os.path.join(FIX, "dataparallel_replica_oom.log")).ooms
    assert len(ooms) == 1 and ooms[0].gpu == 1 and ooms[0].exc == "torch.cuda.OutOfMemoryError"
    f = diagnose(tmp_path, "dataparallel_replica_oom.log")
    assert f[0].name == "cuda-oom" and "run-crashed" not in [x.name for x in f]


@pytest.mark.parametrize("name, sig", [("loader_worker_segfault.log", "SIGSEGV"),
                                       ("loader_worker_bus_error.log", "SIGBUS"),
                                       ("loader_worker_fpe.log", "SIGFPE")])
def test_dataloader_worker_signals_are_native_crashes(tmp_path, name, sig):
    kills = read_text_log(os.path.join(FIX, name)).kills
    assert {k.kind for k in kills} == {"loader-signal"} and {k.signal for k in kills} == {sig}
    f = diagnose(tmp_path, name)
    assert f[0].name == "native-crash"
    assert f"a DataLoader worker process crashed with {sig}" in f[0].message
    assert ("shared memory (/dev/shm)" in f[0].message) == (sig == "SIGBUS")
    assert "host-oom-killed" not in [x.name for x in f]


def test_the_main_processs_report_of_a_worker_killed_by_sigkill_is_a_host_oom_kill(tmp_path):
    kills = read_text_log(os.path.join(FIX, "loader_worker_killed.log")).kills
    assert [(k.kind, k.signal, k.pid) for k in kills] == [("loader-signal", "SIGKILL", 3110)]
    f = diagnose(tmp_path, "loader_worker_killed.log")
    assert f[0].name == "host-oom-killed"
    assert f[0].message.startswith("a DataLoader worker process (pid 3110) was killed by SIGKILL")
    assert "native-crash" not in [x.name for x in f]


# -- host-RAM kills said by other tools ----------------------------------------------------------------------------

def test_rays_memory_monitor_is_a_host_oom_kill(tmp_path):
    kills = read_text_log(os.path.join(FIX, "ray_memory_monitor.log")).kills
    assert [k.kind for k in kills] == ["ray-oom", "ray-oom"]
    assert kills[1].pid == 20877 and kills[1].host == "10.4.1.22"
    f = diagnose(tmp_path, "ray_memory_monitor.log")
    assert f[0].name == "host-oom-killed"
    assert "pid 20877 was killed by Ray's memory monitor" in f[0].message
    assert "Ray saw 239.87GB of the node's 251.52GB in use (95 %)" in f[0].message


def test_ray_message_cut_after_the_node_is_still_read():
    m = pat.RAY_OOM.search("Memory on the node (IP: 10.1.2.3, ID: ab12) where the task (task ID: ff, name=head, "
                           "rank=0,, pid=4503, memory used")
    assert m and m.group("ip") == "10.1.2.3" and m.group("pid") == "4503" and m.group("used") is None


def test_a_deepspeed_exit_minus_nine_in_a_sentence_is_a_kill(tmp_path):
    kills = read_text_log(os.path.join(FIX, "deepspeed_exit_in_prose.txt")).kills
    assert [(k.kind, k.exitcode, k.signal) for k in kills] == [("launcher-exit", -9, "SIGKILL")]
    f = diagnose(tmp_path, "deepspeed_exit_in_prose.txt")
    assert f[0].name == "host-oom-killed" and "SIGKILL (exit code -9)" in f[0].message


def test_a_positive_exit_code_in_a_sentence_is_no_kill():
    assert read_text_log(os.path.join(FIX, "deepspeed_exit_positive_in_prose.txt")).kills == ()


# -- torchelastic's summary alone ----------------------------------------------------------------------------------

def test_elastic_summary_alone_names_the_failed_ranks_and_asks_for_their_stderr(tmp_path):
    kills = read_text_log(os.path.join(FIX, "elastic_failures_only.log")).kills
    assert sorted((k.kind, k.rank, k.exitcode) for k in kills) == [("child-failed", 3, 1),
                                                                    ("child-failed-root", 2, 1)]
    f = diagnose(tmp_path, "elastic_failures_only.log")
    assert f[0].name == "run-crashed"
    assert "rank 2 (exit code 1), rank 3 (exit code 1), rank 2 first" in f[0].message
    assert "only in rank 2's own stderr" in f[0].message
    assert "no-run-evidence" not in [x.name for x in f]


def test_torchruns_child_failed_error_reports_the_child_not_the_wrapper(tmp_path):
    kills = read_text_log(os.path.join(FIX, "elastic_child_failed_error.log")).kills
    assert [(k.kind, k.rank) for k in kills] == [("child-failed-root", 0)]
    f = diagnose(tmp_path, "elastic_child_failed_error.log")
    assert f[0].name == "run-crashed" and "rank 0 (exit code 1)" in f[0].message
    assert "ChildFailedError" not in f[0].message


# -- a skipped fp16 step is not a NaN run --------------------------------------------------------------------------

def test_a_first_log_nan_grad_norm_with_the_loss_falling_is_a_skipped_step(tmp_path):
    log = read_text_log(os.path.join(FIX, "nan_first_log_mmcv.log"))
    gn = next(s for s in log.series if s.name == "grad_norm")
    assert list(gn.steps) == [50, 100, 150]   # mmcv's "Epoch [1]" is the first epoch: no 14658 offset
    f = diagnose(tmp_path, "nan_first_log_mmcv.log")
    names = [x.name for x in f]
    assert names[0] == "fp16-overflow-benign" and "nan-loss" not in names
    assert "grad_norm was nan at 1 log(s) (from step 50)" in f[0].message
    assert "the files do not say fp16 is on" in f[0].message


def test_a_first_log_nan_grad_norm_with_the_loss_rising_is_not_benign(tmp_path):
    names = [x.name for x in diagnose(tmp_path, "nan_first_log_mmcv_rising.log")]
    assert "fp16-overflow-benign" not in names and "nan-loss" in names


# -- a timeout at the preprocessing barrier ------------------------------------------------------------------------

def test_a_c10d_store_timeout_during_dataset_map_is_a_barrier_timeout(tmp_path):
    notes = read_text_log(os.path.join(FIX, "barrier_store_timeout.log")).notices
    assert [(n.value["rank"], n.value["ms"]) for n in notes if n.kind == "store-timeout"] == [(3, 1800000)]
    bar = next(n.value for n in notes if n.kind == "prep-bar")
    assert (bar["desc"], bar["pct"], bar["elapsed_s"]) == ("Map (num_proc=16)", 71, 29 * 60 + 58)
    f = diagnose(tmp_path, "barrier_store_timeout.log")
    assert f[0].name == "nccl-timeout"
    assert f[0].message.startswith("Distributed timeout at a barrier on rank 3")
    assert "within 1800 s" in f[0].message and '"Map (num_proc=16)" at 71 % after 29 min 58 s' in f[0].message
    assert "run-crashed" not in [x.name for x in f]


def test_a_traceback_cut_in_main_process_first_is_the_preprocessing_barrier(tmp_path):
    f = diagnose(tmp_path, "barrier_main_process_first_cut.log")
    assert f[0].name == "nccl-timeout" and "the barrier of main_process_first" in f[0].message
    assert "preprocessing_num_workers" in f[0].message and "at 64 % after 30 min 0 s" in f[0].message


def test_an_error_inside_the_preprocessing_is_not_a_barrier_timeout(tmp_path):
    names = [x.name for x in diagnose(tmp_path, "barrier_main_process_first_error.log")]
    assert names[0] == "run-crashed" and "nccl-timeout" not in names


def test_a_kill_after_the_last_step_names_no_step_past_the_end(tmp_path):
    f = diagnose(tmp_path, "ray_after_last_step.log")
    assert f[0].name == "host-oom-killed" and "Ray's memory monitor" in f[0].message
    assert "during step" not in f[0].message
