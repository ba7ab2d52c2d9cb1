"""Today's failure messages, one fixture each (fixtures/postmortem/messages/FIXTURE.md says where each text comes
from): the reader's exact values, and the finding the postmortem makes of them.

Expected values are read off the fixture texts themselves (the numbers the messages print), not computed by the
code under test.
"""

from __future__ import annotations

import os

import pytest

from pmhelp import diagnose_report

from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes
from finetune_doctor.readers.runlogs.logs import read_text_log

MSG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem", "messages")


def read(name: str):
    return read_text_log(os.path.join(MSG, name))


def diagnose_file(tmp_path, name: str, config: str | None = None):
    return diagnose_report(tmp_path, os.path.join(MSG, name), config=config)


def codes(report) -> list[str]:
    return [f.name for f in report.findings]


# -- NCCL watchdog of every generation --------------------------------------------------------------------------

def test_watchdog_torch25_both_ranks_and_their_work():
    fe = read("nccl_torch25_lf2902.log")
    timeouts = [(n.rank, n.op, n.seq, n.numel_in, n.timeout_ms, n.ran_ms) for n in fe.nccl if n.kind == "timeout"]
    assert timeouts == [(0, "ALLREDUCE", 1516, 25427968, 600000, 600017), (1, "ALLREDUCE", 1517, 1, 600000, 600026)]
    last = [(n.rank, n.pg, n.work, n.last_enqueued, n.last_completed) for n in fe.nccl if n.kind == "last_work"]
    assert last == [(0, "1", 1516, 1516, 1515), (1, "1", 1517, 1517, 1516)]
    assert fe.last_step == 13 and fe.nccl[0].step == 14   # the timeout came during step 14 (bar 13/620)


def test_timeout_at_nccl_work_alone_with_viewer_prefixes_is_a_timeout(tmp_path):
    """LlamaFactory#7396: the paste has only '[PG 1 Rank 4] Timeout at NCCL work: 1580' and the checkTimeout
    frames, every line behind a '[80818]'-style prefix; it used to give no-run-evidence."""
    fe = read("nccl_viewer_prefix_lf7396.log")
    cut = [n for n in fe.nccl if n.kind == "last_work" and n.op == "timeout"]
    assert [(n.rank, n.pg, n.work, n.last_enqueued) for n in cut] == [(4, "1", 1580, None)]
    assert any(n.kind == "failed" for n in fe.nccl)    # the WorkNCCL::checkTimeout frame
    r = diagnose_file(tmp_path, "nccl_viewer_prefix_lf7396.log")
    assert codes(r)[0] == "nccl-timeout" and "no-run-evidence" not in codes(r)
    assert "rank 4" in r.findings[0].message and "#1580" in r.findings[0].message


def test_timeout_then_terminated_watchdog_names_the_collective(tmp_path):
    r = diagnose_file(tmp_path, "nccl_timeout_only_lf6269.log")
    f = r.findings[0]
    assert f.name == "nccl-timeout"
    assert "_REDUCE_SCATTER_BASE (SeqNum 7753)" in f.message and "600 s: torch's default NCCL timeout" in f.message


def test_pg_prefixes_with_description_and_guid():
    fe = read("nccl_default_pg_torch26.log")
    last = {(n.rank, n.pg, n.pg_desc, n.op, n.work, n.last_enqueued, n.last_completed) for n in fe.nccl
            if n.kind == "last_work"}
    assert (1, "0", "default_pg", "timeout", 6463, 6463, 6462) in last
    assert (3, "2", "default_pg", "timeout", 31, 58, 30) in last
    assert next(n for n in fe.nccl if n.kind == "timeout").timeout_ms == 1800000   # transformers' ddp_timeout


def test_desync_report_names_the_lagging_ranks(tmp_path):
    fe = read("nccl_desync_report.log")
    kinds = {(n.kind, n.ranks, n.seq) for n in fe.nccl if n.kind.startswith("desync")}
    assert kinds == {("desync-started", (3,), 212), ("desync-missing", (5, 6), None)}
    r = diagnose_file(tmp_path, "nccl_desync_report.log")
    assert r.findings[0].name == "nccl-timeout" and "rank(s) 3" in r.findings[0].message


# -- CUDA errors --------------------------------------------------------------------------------------------------

def test_accelerator_error_oom_of_torch_28_is_a_cuda_oom(tmp_path):
    fe = read("accelerator_oom_torch28_wan2gp1083.log")
    assert [(o.format, o.exc) for o in fe.ooms] == [("runtime", "torch.AcceleratorError")]
    r = diagnose_file(tmp_path, "accelerator_oom_torch28_wan2gp1083.log")
    assert r.findings[0].name == "cuda-oom"


@pytest.mark.parametrize("name,table,site,cond", [
    ("device_assert_embedding_tf28104.log", "embedding", "Indexing.cu indexSelectLargeIndex",
     "srcIndex < srcSelectDimSize"),
    ("device_assert_loss_swift3267.log", "loss", "Loss.cu nll_loss_forward_reduce_cuda_kernel_2d",
     "t >= 0 && t < n_classes"),
])
def test_device_side_assert_out_of_vocabulary(tmp_path, name, table, site, cond):
    fe = read(name)
    (d,) = fe.device_errors
    assert (d.kind, d.exc, d.status, d.assert_site, d.assert_cond) == (
        "device-assert", "RuntimeError", "device-side assert triggered", site, cond)
    r = diagnose_file(tmp_path, name, "stage: sft\nfinetuning_type: lora\nbf16: true\n")
    f = r.findings[0]
    assert f.name == "cuda-error" and "outside the vocabulary" in f.message
    assert ("token ids" if table == "embedding" else "labels") in f.message
    assert [(e.key, e.value) for e in f.fix.edits] == [("resize_vocab", True)]


def test_illegal_memory_access_and_library_errors(tmp_path):
    (d,) = read("illegal_memory_access.log").device_errors
    assert (d.kind, d.exc, d.rank, d.step) == ("illegal-address", "torch.AcceleratorError", 2, 113)
    a, b = read("cublas_cudnn_errors.log").device_errors
    assert (a.kind, a.status, a.call.split("(")[0]) == ("cublas", "CUBLAS_STATUS_EXECUTION_FAILED", "cublasGemmEx")
    assert (b.kind, b.status) == ("cudnn", "CUDNN_STATUS_INTERNAL_ERROR")
    r = diagnose_file(tmp_path, "illegal_memory_access.log")
    assert r.findings[0].name == "cuda-error" and "illegal memory access" in r.findings[0].message
    assert "run-crashed" not in codes(r)    # the crash is explained by the CUDA error


def test_a_cuda_status_with_a_clause_for_its_meaning_reads_as_a_sentence(tmp_path):
    """Issue #25: "This is the NVIDIA driver is older ..." (the meaning of cudaErrorInsufficientDriver is a clause)."""
    f = diagnose_file(tmp_path, "driver_insufficient.log").findings[0]
    assert f.name == "cuda-error"
    assert "CUDA error: CUDA driver version is insufficient for CUDA runtime version. This means the NVIDIA driver " \
        "is older than the CUDA runtime torch was built with." in f.message
    assert "This is the" not in f.message


def test_a_watchdog_without_a_rank_says_so_and_names_ncclss_device(tmp_path):
    """Issue #25: "rank ?" was said when only NCCL's device index ("[3] NCCL INFO") was printed."""
    r = diagnose_file(tmp_path, "nccl_device_only.log")
    f = r.findings[0]
    assert f.name == "nccl-timeout"
    assert f.message.startswith("NCCL watchdog timeout (the rank is not printed, device 3): ALLREDUCE (SeqNum 2931)")
    assert "rank ?" not in f.message and "?" not in r.timeline[0].detail
    # two devices in one file (an interleaved log): no device is named
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    with open(os.path.join(MSG, "nccl_device_only.log"), encoding="utf-8") as fh:
        text = fh.read()
    (mixed / "two_devices.log").write_text("gpu-node-1:48214:48291 [4] NCCL INFO Using network Socket\n" + text)
    f = diagnose_report(mixed / "out", mixed / "two_devices.log").findings[0]
    assert f.message.startswith("NCCL watchdog timeout (the rank is not printed): ALLREDUCE")


# -- the kernel log ----------------------------------------------------------------------------------------------

def test_every_xid_code_is_read_and_explained(tmp_path):
    xids = read("dmesg_xid.txt").xids
    assert [x.xid for x in xids] == [13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 119]
    assert (xids[0].pci, xids[0].pid, xids[0].process) == ("0000:3b:00", 40213, "python")
    r = diagnose_file(tmp_path, "dmesg_xid.txt")
    f = r.findings[0]
    # the first hardware code is 48 (13/31/43/45 are application faults in NVIDIA's catalogue)
    assert f.name == "gpu-xid-error" and "Xid 48 on GPU 0000:5e:00" in f.message and "double-bit ECC" in f.message
    from finetune_doctor.analyzers.postmortem.failures import XID_MEANINGS

    assert set(XID_MEANINGS) >= {13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 119}


def test_oom_killer_in_journalctl(tmp_path):
    fe = read("journalctl_oom_killer.txt")
    (k,) = fe.kills
    assert (k.kind, k.pid, k.bytes) == ("kernel-oom", 48211, 498123456 * 1024)
    assert fe.origin.get("host") == "node3"
    r = diagnose_file(tmp_path, "journalctl_oom_killer.txt")
    assert r.findings[0].name == "host-oom-killed"


# -- loss scaling in every wording --------------------------------------------------------------------------------

def test_loss_scaler_wordings():
    fe = read("loss_scaler_wordings.log")
    got = [(o.kind, o.attempted, o.new_scale) for o in fe.overflows]
    assert got == [("hysteresis", 65536.0, 65536.0), ("reduce", 65536.0, 32768.0), ("reduce", 32768.0, 16384.0),
                   ("reduce", 16384.0, 8192.0), ("reduce", 8192.0, 4096.0), ("bare", None, None),
                   ("reduce", 4096.0, 2048.0), ("reduce", 2048.0, 1024.0)]


# -- prefixes, versions ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line,text,rank", [
    ("[80818] [rank4]:[E321 02:07:12.539 ProcessGroupNCCL.cpp:1709] x", "[E321 02:07:12.539 ProcessGroupNCCL.cpp:1709] x", 4),
    ("2025-06-01T09:15:00.123456789Z [rank2]: Traceback (most recent call last):", "Traceback (most recent call last):", 2),
    ("3: [rank3]: RuntimeError: boom", "RuntimeError: boom", 3),
    ("  12 | [rank0]: Killed", "Killed", 0),
    ("[default5]:{'loss': 1.0}", "{'loss': 1.0}", None),
])
def test_line_prefixes_are_stripped(line, text, rank):
    got, pre = strip_prefixes(line)
    assert got == text and pre.rank == rank


def test_prefixed_lines_are_read_as_their_message():
    fe = read("prefixes_k8s_slurm.log")
    (o,) = fe.ooms
    assert (o.rank, o.requested, o.free) == (2, 2.0 * (1 << 30), 1.02 * (1 << 30))
    assert [(n.rank, n.work) for n in fe.nccl] == [(3, 88)]
    assert fe.timing["fail_wall"] == pytest.approx(1748769300.1234567)


def test_version_lines_become_the_stack_fact(tmp_path):
    r = diagnose_file(tmp_path, "versions_env.log")
    stack = r.sections["postmortem"]["stack"]
    assert {k: v["version"] for k, v in stack.items()} == {
        "llamafactory": "0.9.3", "torch": "2.6.0+cu124", "transformers": "4.52.4", "datasets": "3.6.0",
        "accelerate": "1.7.0", "peft": "0.15.2", "trl": "0.9.6", "gpu": "NVIDIA H100 80GB HBM3",
        "deepspeed": "0.16.9", "nccl": "2.21.5"}
    assert stack["torch"]["source"].endswith("versions_env.log:5")
