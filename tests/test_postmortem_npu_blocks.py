"""torch_npu's error block read as the failure it reports (issue #25, pasted output on Ascend NPUs;
readers/runlogs/npulines.py): device memory exhausted is an OOM, page-locked host memory refused is a host
allocation, an AI Core / AI CPU exception is a device error, each worded for the NPU. Fixtures:
fixtures/postmortem/npu_blocks/ (README.md says what each holds and where the line shapes come from)."""

from __future__ import annotations

from pmhelp import FIXTURES, diagnose, diagnose_dir

from finetune_doctor.readers.runlogs.logs import read_text_log

NPU = "npu_blocks/"


def test_a_device_allocation_refused_by_the_ascend_runtime_is_an_npu_oom(tmp_path):
    f = diagnose(tmp_path, NPU + "device_oom_207001.log")[0]
    assert f.name == "cuda-oom"
    assert f.message.startswith("NPU (Ascend) out of memory") and "on NPU 3" in f.message
    assert "CUDA" not in f.message


def test_the_reader_keeps_the_device_and_rank_of_the_block():
    fe = read_text_log(str(FIXTURES / NPU / "device_oom_207001.log"))
    (o,) = fe.ooms
    assert (o.format, o.gpu, o.rank, o.exc, o.line) == ("npu-runtime", 3, 3, "torch.OutOfMemoryError", 4)
    # the OOM line is consumed as a CUDA OOM line is: no second exception notice for it
    assert not [n for n in fe.notices if n.kind == "exception" and n.line == 4]


def test_pinned_host_memory_refused_is_a_host_allocation_with_its_bytes(tmp_path):
    f = diagnose(tmp_path, NPU + "host_pinned_el0018.log")[0]
    assert f.name == "host-alloc-failed"
    assert "7.00 GiB" in f.message   # 7516192768 bytes / 2^30, exact
    assert "locked-memory limit" in f.message and "optimizer set-up" in f.message


def test_an_aicore_exception_is_an_ascend_device_error_naming_the_operator(tmp_path):
    f = diagnose(tmp_path, NPU + "aicore_507015.log")[0]
    assert f.name == "cuda-error"
    assert f.message.startswith("The run died with an Ascend NPU error on rank 0")
    assert 'torch_npu: "The aicore execution is abnormal"' in f.message
    assert "aclnnFlashAttentionScoreGrad" in f.message and "CUDA" not in f.message


def test_the_asynchronous_runtimeerror_pasted_above_its_block_reads_the_block_below(tmp_path):
    f = diagnose(tmp_path, NPU + "aicpu_inner_first.log")[0]
    assert f.name == "cuda-error"
    assert 'RuntimeError: torch_npu: "aicpu exception"' in f.message


def test_a_cuda_error_is_still_worded_for_cuda(tmp_path):
    (tmp_path / "train.log").write_text(
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "[rank1]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\n", encoding="utf-8")
    f = diagnose_dir(str(tmp_path)).findings[0]
    assert f.name == "cuda-error"
    assert "The run died with a CUDA error on rank 1: RuntimeError: CUDA error: an illegal memory access" in f.message
