"""Trial 17's postmortem trips (benchmarks/results/trial17.md) as kinds. Fixtures: fixtures/postmortem/trial17/
(FIXTURE.md names each thread).

- A rendezvous that never formed (c10d's client could not reach MASTER_ADDR:MASTER_PORT) is its own cause with
  network/launch advice, never an NCCL timeout "not the network"; --launch is read for the settings it holds.
- A log line read because nothing else was recognised is not called "no log lines were given".
- A loss that grows with gradient accumulation (a pasted table), or num_items_in_batch with two counts in one
  step, is transformers' GA loss path of 4.46.0-4.50, not a hang or a stop.
- key=value overrides without a config: exit 2 with one line that says what to do.
"""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from finetune_doctor.analyzers.postmortem.rendezvous import launch_settings
from finetune_doctor.cli import main
from pmhelp import FIXTURES, diagnose_dir, diagnose_report

FIX = FIXTURES / "trial17"
NO_LOG = "no log lines were given"


def _codes(r):
    return [f.name for f in r.findings]


def test_a_connect_warning_alone_is_a_rendezvous_that_never_formed(tmp_path):
    r = diagnose_report(tmp_path, FIX / "lf3715_connect.log")
    f = r.findings[0]
    assert f.name == "run-crashed" and "nccl-timeout" not in _codes(r), _codes(r)
    assert "::ffff:255.255.0.0:29500 (Connection timed out)" in f.message
    for w in ("never formed the rendezvous", "MASTER_ADDR", "firewall", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        assert w in f.message, w
    assert "not the network" not in f.message and NO_LOG not in f.message
    assert f.location.line == 1


def test_launch_is_read_and_named(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(FIX / "lf3715_connect.log", d / "log.txt")
    r = diagnose_dir(d, launch=str(FIX / "lf3715_train.sh"))
    msg = r.findings[0].message
    assert "MASTER_ADDR=192.168.0.1" in msg and "NNODES=1" in msg
    assert "192.168.0.1 is not this machine's loopback" in msg
    assert r.inputs["launch"] == str(FIX / "lf3715_train.sh")
    assert any(n.startswith("launch command read from") and "MASTER_PORT=29500" in n for n in r.notes), r.notes


def test_launch_on_loopback_gives_no_placeholder_words(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(FIX / "lf3715_connect.log", d / "log.txt")
    sh = tmp_path / "train.sh"
    sh.write_text("torchrun --nnodes 1 --master_addr=127.0.0.1 --master_port 29500 src/train.py a.yaml\n")
    r = diagnose_dir(d, launch=str(sh))
    assert "loopback" not in r.findings[0].message
    assert "MASTER_ADDR=127.0.0.1, MASTER_PORT=29500, NNODES=1" in r.findings[0].message


def test_a_launch_without_settings_says_so(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(FIX / "lf3715_connect.log", d / "log.txt")
    sh = tmp_path / "cmd.sh"
    sh.write_text("llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml\n")
    r = diagnose_dir(d, launch=str(sh))
    assert any("it sets none of MASTER_ADDR" in n for n in r.notes), r.notes


@pytest.mark.parametrize("text, want", [
    ("export MASTER_ADDR=10.1.2.3\nexport MASTER_PORT=12345\ntorchrun --nnodes=2 --node_rank=$NODE_RANK x.py\n",
     {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "12345", "NNODES": "2", "NODE_RANK": "$NODE_RANK"}),
    ("A=9.9.9.9; FORCE_TORCHRUN=1 NNODES=2 RANK=1 MASTER_ADDR=${A} llamafactory-cli train c.yaml\n",
     {"MASTER_ADDR": "9.9.9.9", "NNODES": "2", "NODE_RANK": "1"}),
])
def test_launch_settings(text, want):
    assert launch_settings(text) == want


@pytest.mark.parametrize("line, at", [
    # the forms real threads show (rendezvous.py CONNECT_LINE names each): ofsoundof/GRL-Image-Restoration#27
    ("trainer/0 [1]:[W socket.cpp:558] [c10d] The client socket has failed to connect to 0.0.0.5:40323 (errno: 110 "
     "- Connection timed out).", "0.0.0.5:40323 (Connection timed out)"),
    ("[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of (05, 40323).",
     "at 05:40323"),
    # pytorch/pytorch#107021
    ("[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to 192.0.0.1:1234",
     "192.0.0.1:1234 after 60s"),
    # lzhxmu/CPPO#6 (torch >= 2.4's glog prefix; the TCPStore line alone)
    ("[E521 15:43:02.707733876 socket.cpp:1023] [c10d] The client socket has timed out after 600000ms while trying "
     "to connect to (172.18.21.4, 37907).", "172.18.21.4:37907 after 600000ms"),
    ("[E521 15:43:02.707888867 TCPStore.cpp:318] [c10d] TCP client failed to connect/validate to host "
     "172.18.21.4:37907 - timed out (try=1, timeout=600000ms)", "at 172.18.21.4:37907"),
])
def test_other_connect_lines(tmp_path, line, at):
    (tmp_path / "t.log").write_text(line + "\n")
    f = diagnose_dir(tmp_path / "t.log").findings[0]
    assert f.name == "run-crashed" and at in f.message, f.message


def test_the_ipv6_localhost_warning_and_a_run_that_trained_are_not_connect_failures(tmp_path):
    benign = ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 97 - "
              "Address family not supported by protocol).\n")
    (tmp_path / "a.log").write_text(benign)
    assert not any("rendezvous" in f.message for f in diagnose_dir(tmp_path / "a.log").findings)
    trained = ("[W socket.cpp:663] [c10d] The client socket has failed to connect to [10.0.0.1]:29500 (errno: 111 - "
               "Connection refused).\n"
               "{'loss': 1.2345, 'grad_norm': 3.21, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
               "{'train_runtime': 100.0, 'train_samples_per_second': 1.0, 'train_steps_per_second': 0.1, "
               "'train_loss': 1.2, 'epoch': 1.0}\n")
    (tmp_path / "b.log").write_text(trained)
    assert not any("rendezvous" in f.message for f in diagnose_dir(tmp_path / "b.log").findings)


def test_a_log_line_read_as_words_is_not_called_no_log_lines(tmp_path):
    (tmp_path / "t.log").write_text("[E ProcessGroupGloo.cpp:138] Rank 1 timed out in monitoredBarrier\n")
    msg = diagnose_dir(tmp_path / "t.log").findings[0].message
    assert NO_LOG not in msg and "the log line read names no cause" in msg
    (tmp_path / "w.txt").write_text("The training timed out after an hour on 8 GPUs\n")
    assert NO_LOG in diagnose_dir(tmp_path / "w.txt").findings[0].message


def test_a_loss_table_by_gradient_accumulation_is_the_ga_loss_path(tmp_path):
    r = diagnose_report(tmp_path, FIX / "lf7443_ga_table.txt")
    f = r.findings[0]
    assert f.name == "grad-accum-loss-scaled" and "no-run-evidence" not in _codes(r), _codes(r)
    assert "2: 6.4, 4: 13.65, 16: 69, 32: 138" in f.message
    assert "transformers 4.49.0" in f.message and "4.46.0 to 4.50" in f.message and "4.51.3" in f.message
    assert "hung" not in " ".join(x.message for x in r.findings)


@pytest.mark.parametrize("given, words", [
    ({"transformers_version": "4.52.0"}, "outside the releases"),
])
def test_a_release_outside_the_span_points_at_the_loss_code(tmp_path, given, words):
    f = diagnose_report(tmp_path, FIX / "lf7443_ga_table.txt", **given).findings[0]
    assert f.name == "grad-accum-loss-scaled" and words in f.message and "liger-kernel" in f.message


def test_a_table_without_versions_asks_for_them_and_a_flat_table_is_no_evidence(tmp_path):
    table = ("| GPU | per device bs | gradient acc | Initial loss |\n|---|---|---|---|\n"
             "| 4 | 16 | 2 | {a} |\n| 4 | 8 | 4 | {b} |\n| 4 | 1 | 32 | {c} |\n")
    (tmp_path / "a.txt").write_text(table.format(a=6.4, b=13.65, c=138))
    f = diagnose_dir(tmp_path / "a.txt").findings[0]
    assert f.name == "grad-accum-loss-scaled" and "--transformers" in f.message
    (tmp_path / "b.txt").write_text(table.format(a=1.8, b=1.79, c=1.83))
    assert "grad-accum-loss-scaled" not in _codes(diagnose_dir(tmp_path / "b.txt"))


@pytest.mark.parametrize("version, lead", [(None, "items-unknown"), ("4.46.1", "items-in"), ("4.53.0", None)])
def test_num_items_in_batch_with_two_counts_in_one_step(tmp_path, version, lead):
    opts = {"transformers_version": version} if version else {}
    r = diagnose_report(tmp_path, FIX / "lf6639_num_items.log", **opts)
    names = _codes(r)
    if lead is None:
        assert "grad-accum-loss-scaled" not in names and names[0] == "run-stopped-without-error", names
        return
    f = r.findings[0]
    assert f.name == "grad-accum-loss-scaled", names
    assert "(279, 279, 470, 470)" in f.message and f.location.line == 11
    assert ("transformers 4.46.1 (--transformers)" in f.message) == (lead == "items-in")
    assert ("release was not given" in f.message) == (lead == "items-unknown")
    assert "run-stopped-without-error" in names   # the cut paste is still said, after the lead


def test_overrides_without_a_config_say_what_to_do(tmp_path):
    shutil.copy(FIX / "lf6639_num_items.log", tmp_path / "log.txt")
    res = CliRunner().invoke(main, ["postmortem", str(tmp_path), "gradient_accumulation_steps=4"])
    assert res.exit_code == 2
    out = res.output.strip()
    assert len(out.splitlines()) == 1
    assert "(gradient_accumulation_steps=4) need a config" in out and "--config" in out and "--transformers" in out
