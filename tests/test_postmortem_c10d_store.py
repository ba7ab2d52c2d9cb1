"""c10d store errors on a client rank (issue #25): the store's server runs in rank 0's process, so a connection to
it that was reset or closed means rank 0 had gone, a wait that timed out means rank 0 had not got there, and a
connect that timed out means the master was never reached (analyzers/postmortem/launchcause.py `store_cause`).
Where rank 0's own exception is in the files, it is the cause and the store errors are its consequences
(ranks.py CONSEQUENCE_EXC / CONSEQUENCE_WORDS). Fixtures: fixtures/postmortem/c10d_store/ (FIXTURE.md)."""

from __future__ import annotations

import pytest

from pmhelp import FIXTURES, diagnose_dir, diagnose_report

FIX = FIXTURES / "c10d_store"


@pytest.mark.parametrize("name, words", [
    ("store_get_reset.log", ["rank 3's connection to it was reset or closed while it fetched NCCL's unique id",
                             "rank 0 had already exited", "consequence, not the cause"]),
    ("store_get_recv_zero.log", ["rank 2's connection to it was reset or closed", "rank 0's own output"]),
    ("store_get_wait_timeout.log", ["rank 1 waited on the c10d store", "timed out after 600 s", "ddp_timeout"]),
    ("store_socket_timeout.log", ["this rank waited on the c10d store and the wait timed out"]),
    ("client_connect_timeout.log", ["never reached the c10d store at 10.0.0.1:29500", "MASTER_ADDR/MASTER_PORT"]),
])
def test_a_store_error_alone_says_what_it_means(tmp_path, name, words):
    f = diagnose_report(tmp_path, FIX / name).findings[0]
    assert f.name == "run-crashed"
    for w in words:
        assert w in f.message, f.message


def test_a_connection_reset_alone_is_not_read_as_a_store(tmp_path):
    """"Connection reset by peer" without a store or c10d word (a download, any socket) establishes nothing."""
    p = tmp_path / "t.log"
    p.write_text("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n"
                 "ConnectionResetError: [Errno 104] Connection reset by peer\n")
    f = diagnose_report(tmp_path, p).findings[0]
    assert f.name == "run-crashed" and "c10d store" not in f.message


@pytest.mark.parametrize("rank0_first", [True, False])
@pytest.mark.parametrize("other", ["store_get_reset.log", "store_socket_timeout.log"])
def test_rank_0s_exception_outranks_the_store_errors_of_the_others(tmp_path, rank0_first, other):
    """Rank 0 raised; ranks 1-3 then lost the store it held. Whatever the order of the files and their clocks,
    rank 0's exception is the finding and the store errors are named as its consequences."""
    d = tmp_path / "run"
    d.mkdir()
    rank0 = ("[2024-06-01 10:00:05] [rank0]: Traceback (most recent call last):\n"
             "[2024-06-01 10:00:05] [rank0]:   File \"/workspace/src/train.py\", line 28, in <module>\n"
             "[2024-06-01 10:00:05] [rank0]:     main()\n"
             "[2024-06-01 10:00:05] [rank0]: ValueError: Undefined dataset my_data in dataset_info.json.\n")
    reset = (FIX / other).read_text()
    stamp = "2024-06-01 09:59:50" if not rank0_first else "2024-06-01 10:00:09"
    for r in (1, 2, 3):
        text = "".join(f"[{stamp}] " + ln.replace("[rank3]", f"[rank{r}]").replace("[3]", f"[{r}]") + "\n"
                       for ln in reset.splitlines())
        (d / f"rank{r}.log").write_text(text)
    (d / "rank0.log").write_text(rank0)
    r = diagnose_dir(d)
    # the exception's own cause first (LLaMA-Factory's refusal read from rank 0's line: refusal.py), then the
    # exception itself; the store errors after both
    names = [x.name for x in r.findings]
    assert names[:2] == ["dataset-not-defined", "run-crashed"], names
    assert all("Undefined dataset my_data" in f.message for f in r.findings[:2])
    assert str(r.findings[0].location.file).endswith("rank0.log")


def test_in_one_stream_a_later_store_timeout_does_not_replace_the_cause(tmp_path):
    """accelerate or torchrun without --log-dir print every rank to one stream: rank 0's exception, then the
    store wait another rank raised once rank 0 was gone ("wait timeout", no word of CONSEQUENCE_WORDS). The last
    *cause* ends the run; DistStoreError is a consequence (ranks.py), so rank 0's exception stays the finding."""
    p = tmp_path / "train.log"
    p.write_text("[rank0]: Traceback (most recent call last):\n"
                 "[rank0]:   File \"/workspace/src/train.py\", line 28, in <module>\n"
                 "[rank0]:     main()\n"
                 "[rank0]: ValueError: Undefined dataset my_data in dataset_info.json.\n"
                 "[rank1]: Traceback (most recent call last):\n"
                 "[rank1]:   File \"/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py\", "
                 "line 1141, in init_process_group\n"
                 "[rank1]:     default_pg, _ = _new_process_group_helper(\n"
                 "[rank1]: torch.distributed.DistStoreError: wait timeout after 600000ms, keys: /default_pg/0//cuda//0\n")
    found = diagnose_report(tmp_path, p).findings
    assert [f.name for f in found[:2]] == ["dataset-not-defined", "run-crashed"]
    assert all("Undefined dataset my_data" in f.message for f in found[:2]) and found[0].location.line == 4
