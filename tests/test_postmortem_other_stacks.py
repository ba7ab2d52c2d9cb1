"""Failure lines of stacks other than torch/DeepSpeed/HF, one real-shaped log each in
fixtures/postmortem/other_stacks/ (FIXTURE.md there names the upstream line that prints each): CUDA runtime and
library errors as darknet, NVIDIA's samples, TensorFlow, Caffe, Caffe2, CuPy and XLA print them; other trainers'
NaN and loss-scale lines (MAE-style loops, Megatron/NeMo, Lightning, mmdet, fairseq, NVIDIA's DLLogger,
insightface, apex); NCCL WARN lines that are failures in themselves; pastes cut before the exception line.

Each test asserts the first finding and the values the message must carry, read off the fixture text."""

from __future__ import annotations

import os
import shutil

import pytest
from pmhelp import in_folder

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.readers.runlogs.logs import read_text_log
from finetune_doctor.settings import Options

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem",
                   "other_stacks")


diagnose = in_folder("other_stacks")


# -- CUDA runtime errors: every spelling is the same cause record -------------------------------------------------

@pytest.mark.parametrize("name, kind, status", [
    ("cuda_darknet.log", "illegal-address", "an illegal memory access was encountered"),
    ("cuda_helper_samples.log", "illegal-address", "an illegal memory access was encountered"),
    ("cuda_tensorflow_launch_failed.log", "launch-failure", "unspecified launch failure"),
    ("cuda_caffe_check.log", "illegal-address", "an illegal memory access was encountered"),
    ("cuda_caffe2_enforce.log", "illegal-address", "an illegal memory access was encountered"),
    ("cuda_cupy_misaligned.log", "illegal-address", "misaligned address"),
    ("cudnn_tensorflow_handle.log", "cudnn", "CUDNN_STATUS_INTERNAL_ERROR"),
])
def test_other_stacks_cuda_errors_are_cuda_errors(tmp_path, name, kind, status):
    errs = read_text_log(os.path.join(FIX, name)).device_errors
    assert (errs[0].kind, errs[0].status) == (kind, status)
    f = diagnose(tmp_path, name)
    assert f[0].name == "cuda-error" and f"CUDA error: {status}" in f[0].message
    assert "no-run-evidence" not in [x.name for x in f]


def test_a_runtime_error_number_is_read_as_its_name():
    """Caffe prints the code only ("700 vs. 0"): 700 is cudaErrorIllegalAddress (driver_types.h)."""
    from finetune_doctor.readers.runlogs.logfailures import other_cuda_error

    got = other_cuda_error("Check failed: error == cudaSuccess (719 vs. 0)  foo")
    assert got is not None and got.status == "unspecified launch failure"
    assert other_cuda_error("x: CUDA_ERROR_ECC_UNCORRECTABLE").status == "uncorrectable ECC error encountered"
    assert other_cuda_error("Check failed: status == CUBLAS_STATUS_SUCCESS (13 vs. 0)  CUBLAS_STATUS_EXECUTION_FAILED"
                            ).status == "CUBLAS_STATUS_EXECUTION_FAILED"
    assert other_cuda_error("all is CUBLAS_STATUS_SUCCESS") is None


@pytest.mark.parametrize("name", ["oom_jax_xla.log", "oom_tensorflow.log", "oom_caffe_check.log"])
def test_other_stacks_out_of_memory_is_cuda_oom(tmp_path, name):
    assert len(read_text_log(os.path.join(FIX, name)).ooms) == 1
    f = diagnose(tmp_path, name)
    assert f[0].name == "cuda-oom" and "cuda-error" not in [x.name for x in f]


# -- NaN and loss-scale lines of other trainers --------------------------------------------------------------------

@pytest.mark.parametrize("name, where, what", [
    ("nan_mae_metriclogger.log", "step 4153", "loss nan"),       # Epoch [3] x 1251 + 400: the last step line
    ("nan_megatron_grad_norm.log", "step 850", "grad_norm nan"),
    ("nan_lightning_check_finite.log", "step 850", "loss nan"),   # Lightning's bar: epoch 3 x 250 + 100 (session 9)
    ("nan_nemo_bar.log", "step 129", "loss nan"),                 # the bar's global_step=129.0
])
def test_other_trainers_nan_lines_are_nan_loss(tmp_path, name, where, what):
    f = diagnose(tmp_path, name)
    assert f[0].name == "nan-loss" and f"at {where}: {what}" in f[0].message


def test_mmdet_check_loss_hook_and_its_epoch_iteration_lines(tmp_path):
    fe = read_text_log(os.path.join(FIX, "nan_mmdet_checkloss.log"))
    loss = next(s for s in fe.series if s.name == "loss")
    assert list(loss.steps) == [7330 + 50, 7330 + 100, 7330 + 100] and list(loss.values)[:2] == [1.2043, 1.1876]
    assert "nan-loss" in [x.name for x in diagnose(tmp_path, "nan_mmdet_checkloss.log")]


@pytest.mark.parametrize("name, text", [
    ("scale_apex_to_minimum.log", "the fp16 loss scale fell to 1.53e-05 (32 overflow(s) from 65536)"),
    ("scale_dllogger_bert.log", "the fp16 loss scale fell to 0.25 (3 overflow(s) from 65536)"),
    ("scale_insightface_zero.log", "the fp16 loss scale was already 0 the first time the log printed it"),
    ("scale_fairseq_min_reached.log", "the trainer stopped the run: the fp16 loss scale reached its minimum (0.0001)"),
])
def test_other_trainers_loss_scale_collapse(tmp_path, name, text):
    f = diagnose(tmp_path, name)
    assert f[0].name == "loss-scale-collapse" and text in f[0].message


def test_a_loss_scale_of_one_is_no_scaling_not_a_collapse(tmp_path):
    """Megatron's bf16 runs print "loss scale: 1.0" on every iteration line."""
    fe = read_text_log(os.path.join(FIX, "nan_megatron_grad_norm.log"))
    assert fe.overflows == () and [x.name for x in diagnose(tmp_path, "nan_megatron_grad_norm.log")][0] == "nan-loss"


def test_a_nan_after_the_scale_collapsed_is_blamed_on_fp16_without_a_config(tmp_path):
    """The scale lines alone say the run was fp16 (only fp16 scales the loss)."""
    f = diagnose(tmp_path, "scale_dllogger_bert.log")
    nan = next(x for x in f if x.name == "nan-loss")
    assert "at step 200: loss nan" in nan.message and "fp16 overflow: the loss scale collapsed before it" in nan.message


# -- NCCL WARN lines that are the error ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, desc", [
    ("nccl_socketstartconnect_only.log", "could not connect to 10.20.1.12: Connection refused"),
    ("nccl_connect_old_socket_h.log", "could not connect to 172.17.0.1: No route to host"),
    ("nccl_exceeded_retries.log", "connect() refused 20000 times: the peer never accepted"),
    ("nccl_closed_by_peer.log", "connection closed by remote peer trainer-1<44761>"),
    ("nccl_ib_completion_error.log", "InfiniBand completion error 12 from peer 10.40.0.24<39812>"),
    ("nccl_no_interface.log", "no socket interface found"),
])
def test_nccl_warn_failures_alone_are_nccl_errors(tmp_path, name, desc):
    f = diagnose(tmp_path, name)
    assert f[0].name == "nccl-error" and f'NCCL failed with "{desc}' in f[0].message


def test_a_docker_bridge_address_is_named(tmp_path):
    f = diagnose(tmp_path, "nccl_connect_old_socket_h.log")
    assert "docker's default bridge" in f[0].message


def test_a_plugin_warning_alone_is_not_an_nccl_error(tmp_path):
    assert "nccl-error" not in [x.name for x in diagnose(tmp_path, "nccl_plugin_warning_only.log")]


# -- pastes cut before the exception line ------------------------------------------------------------------------

def test_frames_without_header_or_exception_say_where_and_ask_for_the_rest(tmp_path):
    f = diagnose(tmp_path, "cut_frames_without_header.log")
    assert f[0].name == "run-crashed"
    # the frame with its package (site-packages/torch/autograd/__init__.py), as an exception's raised_at names it
    assert "in the backward pass (the innermost frame the log shows: backward (__init__.py, torch)" in f[0].message
    assert "give the lines after this traceback" in f[0].message


def test_a_cut_traceback_after_a_save_marker_is_in_the_save(tmp_path):
    f = diagnose(tmp_path, "cut_traceback_in_save.log")
    assert f[0].name == "run-crashed" and "during the checkpoint save of checkpoint-500" in f[0].message
    tb = [n for n in read_text_log(os.path.join(FIX, "cut_traceback_in_save.log")).notices if n.kind == "traceback"]
    assert tb[0].value["frames"][-2:] == ("save_file (torch.py)", "serialize_file(_flatten(tensors), filename, "
                                          "metadata=metadata)")


def test_a_rounded_step_is_no_step():
    """NeMo's bar rounds a large global_step ("global_step=3.2e+4"): it is not step 3."""
    from finetune_doctor.readers.runlogs.logpatterns import STEP_LINE_STEP

    assert STEP_LINE_STEP.search("loss=2.6, v_num=95nc, reduced_train_loss=2.590, global_step=3.2e+4") is None
    m = STEP_LINE_STEP.search("reduced_train_loss=nan, global_step=129.0, consumed_samples=16640.0")
    assert m is not None and m.group(1) == "129"


@pytest.mark.parametrize("line, ooms, device", [
    # ROCm torch: the CUDA allocator's message with "HIP" (torch >= 2.1 layout)
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 63.98 GiB"
     " of which 1.23 GiB is free. Of the allocated memory 60.10 GiB is allocated by PyTorch, and 1.02 GiB is reserved "
     "by PyTorch but unallocated.", 1, None),
    ("RuntimeError: HIP error: an illegal memory access was encountered", 0, "illegal-address"),
    ("RuntimeError: CUDA driver error: out of memory", 1, None),
    ("mxnet.base.MXNetError: [08:12:01] src/storage/./pooled_storage_manager.h:157: cudaMalloc retry failed: out of "
     "memory", 1, None),
    ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.250000GB memory on GPU 0, 15.380000GB "
     "memory has been allocated and available memory is only 400.250000MB.", 1, None),
])
def test_more_stacks_out_of_memory_and_device_errors(tmp_path, line, ooms, device):
    p = tmp_path / "train.log"
    p.write_text("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n" + line + "\n")
    fe = read_text_log(str(p))
    assert len(fe.ooms) == ooms
    assert [e.kind for e in fe.device_errors if e.kind != "out-of-memory"] == ([device] if device else [])
    if ooms:
        assert fe.ooms[0].gpu in (0, None)


@pytest.mark.parametrize("line", [
    "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
    "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be "
    "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
    "`error_if_nonfinite=False`",
])
def test_torch_own_nan_errors_are_non_finite_gradients(tmp_path, line):
    p = tmp_path / "train.log"
    p.write_text("step 40 | loss: 2.31\n" + line + "\n")
    gn = next(s for s in read_text_log(str(p)).series if s.name == "grad_norm")
    assert list(gn.steps) == [40] and all(v != v for v in gn.values)


def test_nccls_own_cuda_check_is_a_cuda_error(tmp_path):
    """NCCL's CUDACHECK (src/include/checks.h): "NCCL WARN Cuda failure 700 '<cudaGetErrorString>'"."""
    p = tmp_path / "train.log"
    p.write_text("gpu3:811:870 [3] enqueue.cc:1459 NCCL WARN Cuda failure 700 'an illegal memory access was "
                 "encountered'\ngpu3:811:870 [3] NCCL INFO group.cc:64 -> 1 [Async thread]\n")
    errs = read_text_log(str(p)).device_errors
    assert [(e.kind, e.status) for e in errs] == [("illegal-address", "an illegal memory access was encountered")]
    p.write_text("gpu3:811:870 [3] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n")
    assert len(read_text_log(str(p)).ooms) == 1


def test_a_peers_nccl_error_is_the_consequence_of_a_ranks_oom(tmp_path):
    """One rank ran out of memory; its peer's socket was closed by it. The OOM is the cause, the NCCL error is
    not reported on its own."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(os.path.join(FIX, "nccl_closed_by_peer.log"), d / "rank1.log")
    shutil.copy(os.path.join(FIX, "oom_tensorflow.log"), d / "rank0.log")
    names = [f.name for f in pm.run(str(d), [], None, Options(command="postmortem")).findings]
    assert names[0] == "cuda-oom" and "nccl-error" not in names


def test_a_launch_failure_is_explained_not_just_quoted(tmp_path):
    f = diagnose(tmp_path, "cuda_tensorflow_launch_failed.log")
    assert "an exception in a kernel while it ran" in f[0].message
    assert f[0].fix is not None and "dmesg" in f[0].fix.title


@pytest.mark.parametrize("line, metric, step", [
    # detectron2 engine/train_loop.py: the iteration is the line's own
    ("FloatingPointError: Loss became infinite or NaN at iteration=1234!", "loss", 1234),
    ("Batch 77: Invalid loss, terminating training", "loss", 40),              # Keras TerminateOnNaN
    ("2024-01-02 10:00:00,001 (trainer:752) WARNING: The grad norm is nan. Skipping updating the model.",
     "grad_norm", 40),                                                           # ESPnet
])
def test_more_trainers_nan_lines(tmp_path, line, metric, step):
    p = tmp_path / "train.log"
    p.write_text("step 40 | loss: 2.31\n" + line + "\n")
    s = next(x for x in read_text_log(str(p)).series if x.name == metric)
    assert list(s.steps)[-1] == step and list(s.values)[-1] != list(s.values)[-1]


@pytest.mark.parametrize("line, status", [
    ("ExternalError: CUDA error(700), an illegal memory access was encountered.",
     "an illegal memory access was encountered"),                                # PaddlePaddle
    ("mxnet.base.MXNetError: [10:01:02] src/engine/threaded_engine.cc:331: Check failed: e == cudaSuccess || e == "
     "cudaErrorCudartUnloading (719 vs. 0) : CUDA: unspecified launch failure", "unspecified launch failure"),
])
def test_paddle_and_mxnet_cuda_errors(tmp_path, line, status):
    p = tmp_path / "train.log"
    p.write_text(line + "\n")
    assert [e.status for e in read_text_log(str(p)).device_errors] == [status]


def test_a_rank_whose_traceback_was_cut_is_the_cause_of_the_others_timeout(tmp_path):
    """Rank 1's paste lost the header and the exception line, but its frames are its own failure (backward
    pass); rank 0 only timed out in the ALLREDUCE: rank 1 failed first, by causality."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(os.path.join(FIX, "cut_frames_without_header.log"), d / "rank1.log")
    (d / "rank0.log").write_text(
        "[rank0]:[E321 03:10:00.000000002 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=91580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
        "1800089 milliseconds before timing out.\n")
    f = pm.run(str(d), [], None, Options(command="postmortem")).findings
    first = next(x for x in f if x.name == "rank-failed-first")
    assert first.message.startswith("Rank 1 failed first (a traceback cut before its exception line), by causality")
    assert "rank 1 failed first" in next(x for x in f if x.name == "nccl-timeout").message
