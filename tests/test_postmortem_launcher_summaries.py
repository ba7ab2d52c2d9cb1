"""A launcher's summary of its child's end with nothing of the child's own output (issue #25): the same reading for
torchrun's ChildFailedError table (torch/distributed/elastic/multiprocessing/errors/__init__.py ``format_msg``,
"exitcode : -9 (pid: N)", "traceback : Signal 9 (SIGKILL) received by PID N"; the agent's "failed (exitcode: N)
local_rank: R (pid: P)" line, elastic/multiprocessing/api.py), accelerate's CalledProcessError (CPython
Lib/subprocess.py ``CalledProcessError.__str__``: "died with <Signals.SIGKILL: 9>.", "returned non-zero exit status
1.") and DeepSpeed's launcher (deepspeed/launcher/launch.py ``sigkill_handler``: "[launch.py:N:sigkill_handler]
[cmd ... '--local_rank=1' ...] exits with return code = -9"). Fixtures: fixtures/postmortem/launcher_summaries/
(the torchrun table and agent line, accelerate's traceback, DeepSpeed's three lines; -9, -11, -6 and 1 each)."""

from __future__ import annotations

import pytest

from pmhelp import FIXTURES, diagnose_report

FIX = FIXTURES / "launcher_summaries"
LAUNCHERS = ("torchrun", "accel", "ds")
WHO = {"torchrun": "rank 1", "accel": "a training process", "ds": "local rank 1"}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigkill_from_a_summary_is_most_likely_the_host_and_asks_for_dmesg(tmp_path, launcher):
    r = diagnose_report(tmp_path, FIX / f"{launcher}9.log")
    f = r.findings[0]
    assert f.name == "host-oom-killed", [x.name for x in r.findings]
    assert f.message.startswith(f"{WHO[launcher]} was killed by SIGKILL (exit code -9)")
    assert "most likely the host ran out of RAM" in f.message
    assert "dmesg -T" in f.message and "does not say who sent SIGKILL" in f.message


def test_a_kernel_record_beside_the_summary_is_no_guess(tmp_path):
    """With the kernel's own line the sender is known: no "most likely", no dmesg question."""
    text = (FIX / "torchrun9.log").read_text() + \
        "[Mon May 10 08:12:31 2024] Out of memory: Killed process 11238 (python) total-vm:812345678kB, " \
        "anon-rss:501234567kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1234567kB oom_score_adj:0\n"
    p = tmp_path / "t.log"
    p.write_text(text)
    f = diagnose_report(tmp_path, p).findings[0]
    assert f.name == "host-oom-killed"
    assert "most likely" not in f.message and "does not say who sent SIGKILL" not in f.message


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigsegv_from_a_summary_is_a_native_crash(tmp_path, launcher):
    r = diagnose_report(tmp_path, FIX / f"{launcher}11.log")
    assert r.findings[0].name == "native-crash"
    assert f"{WHO[launcher]} crashed with SIGSEGV (exit code -11)" in r.findings[0].message
    assert "host-oom-killed" not in [x.name for x in r.findings]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigabrt_from_a_summary_is_an_abort(tmp_path, launcher):
    """-6 gave run-crashed with torchrun's wrapper alone, and nothing at all under DeepSpeed's launcher."""
    r = diagnose_report(tmp_path, FIX / f"{launcher}6.log")
    f = r.findings[0]
    assert f.name == "native-crash", [x.name for x in r.findings]
    assert f"{WHO[launcher]} crashed with SIGABRT (exit code -6): the process aborted itself" in f.message
    assert "terminate called after throwing" in f.message and "host-oom-killed" not in [x.name for x in r.findings]


def test_sigabrt_after_an_nccl_timeout_stays_the_timeout(tmp_path):
    """The NCCL watchdog aborts the process after a collective timed out: the abort is no cause of its own."""
    text = ("[rank1]:[E ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800087 "
            "milliseconds before timing out.\n" + (FIX / "torchrun6.log").read_text())
    p = tmp_path / "t.log"
    p.write_text(text)
    names = [f.name for f in diagnose_report(tmp_path, p).findings]
    assert names[0] == "nccl-timeout" and "native-crash" not in names


@pytest.mark.parametrize("launcher, words", [
    ("torchrun", ["rank 1 (exit code 1)", "rank 1's own stderr"]),
    ("ds", ["DeepSpeed's launcher reports without its traceback: local rank 1 (exit code 1)",
            "printed its exception above this line"]),
    ("accel", ["returned non-zero exit status 1", "exited with code 1", "printed above this traceback"]),
])
def test_exit_code_1_asks_for_the_childs_own_error(tmp_path, launcher, words):
    """A child that exited with 1 raised a Python exception: the summary names the rank and asks for its output;
    DeepSpeed's bare return-code line gave no-run-evidence before."""
    f = diagnose_report(tmp_path, FIX / f"{launcher}1.log").findings[0]
    assert f.name == "run-crashed"
    for w in words:
        assert w in f.message


# -- torchelastic's per-rank entry pasted without its header (issue #25) -------------------------------------------

def test_a_headerless_entry_with_exit_code_1_names_the_rank_and_asks_for_its_stderr(tmp_path):
    """The "[0]:" block alone (time, host, rank, exitcode, error_file, traceback) gave no-run-evidence before."""
    r = diagnose_report(tmp_path, FIX / "torchrun_entry1.log")
    f = r.findings[0]
    assert f.name == "run-crashed", [x.name for x in r.findings]
    assert "rank 3 (exit code 1)" in f.message and "only in rank 3's own stderr" in f.message
    assert f.location.line == 5
    assert "no-run-evidence" not in [x.name for x in r.findings]


def test_a_headerless_sigkill_entry_reads_like_the_full_table(tmp_path):
    whole = diagnose_report(tmp_path / "a", FIX / "torchrun9.log").findings[0]
    alone = diagnose_report(tmp_path / "b", FIX / "torchrun_entry9.log").findings[0]
    assert alone.name == whole.name == "host-oom-killed"
    assert alone.message.startswith("rank 1 was killed by SIGKILL (exit code -9)")
    assert "dmesg -T" in alone.message


def test_headerless_entries_give_one_root_and_the_headed_table_is_not_read_twice():
    from finetune_doctor.readers.runlogs.logs import read_text_log
    kills = read_text_log(str(FIX / "torchrun_entries_two.log")).kills
    assert [(k.kind, k.rank, k.local_rank, k.exitcode, k.pid, k.host) for k in kills] == [
        ("child-failed-root", 5, 5, 1, 88412, "dgx-a100-02"), ("child-failed", 6, 6, 1, 88413, "dgx-a100-02")]
    headed = read_text_log(str(FIX / "torchrun1.log")).kills
    assert sorted(k.kind for k in headed) == ["child-failed-root", "torchrun-exit"]
