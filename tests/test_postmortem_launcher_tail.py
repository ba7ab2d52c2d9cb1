"""A launcher's tail below a rank's failure is its consequence, not its cause (issue #25, "cause and consequence mixed
up"): torchrun's failure summary with exit code 1 only says that the rank raised. Below a DataLoader worker's bus
error it must not hide the worker's signal (the kill the exception reported); below a rank's traceback the paste cut
before its exception line it must not be read as "a child's exception without its traceback" (the frames are in the
paste); above another rank's later NCCL watchdog timeout, that cut traceback (a rank that raised, away from a
collective) is the cause and the timeout its consequence. Appended to the 120 right dev pastes of the real threads,
torchrun's tail (exit code 1) turned 32 wrong before and 18 after; the 18 left are pastes the appended tail
contradicts (a summary of SIGKILL or SIGSEGV, a hang, a stop from outside) or cut tracebacks whose cause other words
above them gave. Rank 1's watchdog lines appended to them turned 22 wrong before, 11 after (the rest: kills and
hangs, which no exception line ties to a rank)."""

from __future__ import annotations

from pmhelp import diagnose

FIX = "paste_shapes"


def test_a_worker_signal_above_torchruns_summary_stays_the_cause(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/loader_bus_error_then_torchrun.log")
    assert found[0].name == "native-crash", [(f.name, f.message[:120]) for f in found]
    assert "a DataLoader worker process crashed with SIGBUS during step 513" in found[0].message
    assert "/dev/shm" in found[0].message
    # the exception the worker's death raised in rank 0 is still named, as the evidence, after the cause
    crashed = [f for f in found if f.name == "run-crashed"]
    assert crashed and "DataLoader worker (pid 48213) is killed by signal: Bus error" in crashed[0].message
    assert "torchrun's failure lines: consequences of rank 0's exception" in crashed[0].message


def test_a_cut_rank_traceback_above_torchruns_tail_names_its_frames(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/cut_rank_traceback_then_torchrun.log")[0]
    assert f.name == "run-crashed"
    assert "the innermost frame the log shows: prepare (accelerator.py, accelerate)" in f.message
    assert "accelerate's wrap of the model" in f.message
    assert "without its traceback" not in f.message


def test_a_cut_rank_traceback_outranks_another_ranks_later_watchdog(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/cut_rank_traceback_then_watchdog.log")
    names = [f.name for f in found]
    assert names[0] == "run-crashed" and "nccl-timeout" in names, names
    assert "the innermost frame the log shows: flash_attn_varlen_func (flash_attn_interface.py, flash_attn)" \
        in found[0].message
    assert "then the NCCL collective timeout on rank 1 (ALLREDUCE): consequences of rank 0's exception" \
        in found[0].message
