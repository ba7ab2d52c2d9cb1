"""Run health (issue #25): a run that never trained, a run stopped from outside, a run that hangs — on the
fixtures under fixtures/postmortem/health/ (HF Trainer's banner lines of transformers/trainer.py
``_inner_training_loop``, tqdm bars, the metric dicts ``Trainer.log`` prints, LLaMA-Factory's parser line)."""

from __future__ import annotations

import os

from pmhelp import diagnose

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem", "health")


def run(name: str):
    return pm.run(os.path.join(FIX, name), [], None, Options(command="postmortem"))


def test_lr_and_grad_norm_zero_for_the_whole_run_is_a_run_that_never_trained():
    r = run("no_update")
    f = r.findings[0]
    assert f.name == "no-parameter-update"
    assert "'learning_rate': 0.0 at all 40 logs (steps 10–400)" in f.message
    assert "'grad_norm': 0.0 at all 40 logs" in f.message and "loss stayed at 2.412" in f.message


def test_a_log_that_ends_at_46_of_400_without_an_error_was_stopped_from_outside():
    r = run("stopped")
    assert r.findings[0].name == "run-stopped-without-error"
    assert "step 46 of 400" in r.findings[0].message and "dmesg" in r.findings[0].message


def test_a_stopped_log_with_a_two_thousand_day_timeout_is_a_hang():
    r = run("hang")
    names = [f.name for f in r.findings]
    assert names[0] == "run-hang" and "run-stopped-without-error" not in names
    assert "step 37 of 400" in r.findings[0].message


def test_a_cut_oom_message_keeps_every_figure_printed_whole():
    """torch >= 2.1's message (c10/cuda/CUDACachingAllocator.cpp) cut after "and 2.1": the capacity, the free
    memory and the allocated figure survive; the cut figure is not read."""
    from finetune_doctor.readers.runlogs.runlayout import collect

    ev = collect(os.path.join(FIX, "oom_cut"), [])
    o = ev.files[0].ooms[0]
    gib = float(1 << 30)
    assert (o.format, o.gpu, o.total / gib, o.free / gib, o.allocated / gib, o.requested / gib) == \
        ("partial", 0, 79.15, 1.02, 75.31, 2.0)
    assert o.reserved_unallocated is None and o.this_process == 78.12 * gib
    assert "1.02 GiB free of 79.15 GiB" in run("oom_cut").findings[0].message


def test_a_crash_after_the_evaluation_at_a_save_step_is_during_the_checkpoint_save():
    r = run("save_after_eval")
    f = r.findings[0]
    # torch.save's zip writer stopping short ("unexpected pos N vs M") is a full disk (rule disk-full)
    assert f.name == "disk-full" and "during the checkpoint save at step 500" in f.message
    assert [(e.step, e.kind) for e in r.timeline] == [(500, "exception")]


def test_an_nccl_error_at_process_group_setup_is_nccl_error_not_a_timeout(tmp_path):
    """NCCL's own failure, as torch 2.x raises it from ProcessGroupNCCL (the DistBackendError text of
    torch/csrc/distributed/c10d/NCCLUtils.hpp C10D_NCCL_CHECK, NCCL's 'unhandled system error' and its WARN line):
    a connection problem between nodes, reported as FD326, never as a collective timeout."""
    log = tmp_path / "train.log"
    log.write_text(
        "[INFO|trainer.py:2243] 2025-03-02 10:01:12,118 >> ***** Running training *****\n"
        "node1:6601:6625 [0] include/socket.h:385 NCCL WARN Net : Connection closed by remote peer 10.0.0.2<46012>\n"
        "[rank0]: Traceback (most recent call last):\n"
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
        "error.\n", encoding="utf-8")
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    names = [f.name for f in r.findings]
    assert names[0] == "nccl-error" and "nccl-timeout" not in names


def test_a_log_that_ends_at_process_group_setup_is_a_startup_hang_said_conditionally(tmp_path):
    found = diagnose(tmp_path, "startup_hang/ds_init_last.log")
    assert found and found[0].name == "run-hang", [f.name for f in found]
    msg = found[0].message
    assert msg.startswith("The log ends at distributed start-up") and "ds_init_last.log:4" in msg
    assert "if the job was still running there" in msg and "main_process_port" in msg
    assert "no-run-evidence" not in [f.name for f in found]


def test_setup_lines_followed_by_model_loading_are_no_hang(tmp_path):
    names = [f.name for f in diagnose(tmp_path, "startup_hang/ds_init_then_loading.log")]
    assert "run-hang" not in names


def test_a_log_that_ends_in_nccls_set_up_is_a_startup_hang_in_nccl(tmp_path):
    found = diagnose(tmp_path, "startup_hang/nccl_init_last.log")
    assert found[0].name == "run-hang", [f.name for f in found]
    assert "NCCL's communicator set-up" in found[0].message and "nccl_init_last.log:10" in found[0].message
    assert "NCCL_P2P_DISABLE=1" in found[0].message


def test_a_log_that_ends_at_lfs_rank_lines_is_a_hang_after_setup(tmp_path):
    found = diagnose(tmp_path, "startup_hang/lf_process_rank_last.log")
    assert found[0].name == "run-hang" and "first collective or barrier" in found[0].message


def test_a_log_whose_length_only_a_bar_gives_asks_for_the_rest_before_it_says_stopped(tmp_path):
    found = diagnose(tmp_path, "health_paste/bar_ends_short.log")
    assert found and found[0].name == "run-stopped-without-error", [f.name for f in found]
    msg = found[0].message
    assert msg.startswith("The log ends at step 236 of 620 (38.1%, total from the progress bar's total)")
    assert "a log or paste cut there reads the same: give the whole output" in msg


def test_a_bar_only_log_with_a_curve_finding_leaves_the_diagnosis_to_the_curve(tmp_path):
    names = [f.name for f in diagnose(tmp_path, "health_paste/bar_ends_short_spike.log")]
    assert names[0] == "loss-spike" and "run-stopped-without-error" not in names
