"""Trial 7's postmortem cases (fixtures/postmortem/trial7/README.md): what a new user found wrong, each fixed and
asserted on the real-shaped run folder."""

from __future__ import annotations

import os

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options
from pmhelp import diagnose_dir

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem", "trial7")


def _run(case: str, config: bool = True, gpu: str | None = None, logs: tuple[str, ...] = ()):
    d = os.path.join(FIX, case)
    run_dir = os.path.join(d, "run") if os.path.isdir(os.path.join(d, "run")) else d
    cfg = os.path.join(d, "config.yaml") if config else None
    return diagnose_dir(run_dir, [os.path.join(d, x) for x in logs], cfg, gpu=gpu)


def _events(r):
    return [(e.step, e.kind) for e in r.timeline]


# -- 1. evidence from the log outranks what this machine lacks (c10, LLaMA-Factory #7755) --------------------------

def test_a_run_that_trained_is_not_told_its_deepspeed_file_stops_the_launch():
    r = _run("c10-7755", gpu="3xV100-32GB")
    names = [f.name for f in r.findings]
    # before: nan-loss "not determined: the DeepSpeed file ... is not here", deepspeed-file-missing as an error
    assert "deepspeed-file-missing" not in names
    here = next(f for f in r.findings if f.name == "not-checked-here")
    assert here.severity == "info" and "cache/ds_z3_config.json" in here.message
    assert "the logs show the run trained (to step 3)" in here.message
    assert names[:3] == ["fp16-on-bf16-model-confirmed", "nan-loss", "loss-stuck-zero"]
    nan = r.findings[1]
    assert "not determined" not in nan.message
    assert "transformers warned before it that Gemma3 should be trained with eager attention, not sdpa" \
        in nan.message
    assert [(e.key, e.value) for e in nan.fix.edits] == [("flash_attn", "disabled")]
    assert "attention-backend-warning" in names and all(f.severity != "error" for f in r.findings[3:])


def test_the_deepspeed_finding_stays_for_a_run_that_never_trained(tmp_path):
    # the same config over a log that stops before any step: the launch-time finding still applies
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File \"launcher.py\", line 23, in <module>\n"
                   "ValueError: Expected a string path to an existing deepspeed config, or a dictionary, or a "
                   "base64 encoded string. Received: cache/ds_z3_config.json\n", encoding="utf-8")
    r = diagnose_dir(log, [], os.path.join(FIX, "c10-7755", "config.yaml"))
    assert "deepspeed-file-missing" in [f.name for f in r.findings]


# -- 3. steps from the strongest evidence (c03, LLaMA-Factory #7388) ---------------------------------------------------

def test_two_dicts_are_placed_at_their_own_steps_by_the_epoch():
    # 249 steps over 3 epochs = 83 per epoch: epoch 0.12 → step 10, 0.24 → step 20 (logging_steps 10). The
    # config's warmup (peak 1e-5) contradicts the logged 1.6e-5, so the learning rate is not used
    r = _run("c03-7388")
    ev = _events(r)
    assert (10, "first_loss") in ev and (10, "nan") in ev and (20, "loss_zero") in ev
    assert r.sections["postmortem"]["curves"]["loss"]["steps"] == [10, 20]
    nan = next(f for f in r.findings if f.name == "nan-loss")
    assert "about step 10" in nan.message


def test_warmup_learning_rates_place_dicts_without_a_bar():
    # c10: no progress bar; warmup_steps 30 to 5e-5: lr 3.3333e-06 → step 2, 5e-06 → step 3 (was "log #1")
    r = _run("c10-7755", gpu="3xV100-32GB")
    assert r.sections["postmortem"]["curves"]["loss"]["steps"] == [2, 3]
    assert "about step 2" in next(f for f in r.findings if f.name == "nan-loss").message


# -- 2. the doctor's own reports are not logs (c01, LLaMA-Factory #8471) -----------------------------------------------

def _rows(r):
    return {os.path.basename(x["path"]): x for x in r.sections["read"]["files"]}


def test_saved_reports_beside_the_run_are_skipped_with_a_reason():
    r = _run("c01-8471", gpu="2xA100-40GB")
    rows = _rows(r)
    # before: check.txt "text-log read 78 lines, 1 items", postmortem.txt read as a log
    assert rows["oom.log"]["status"] == "read" and rows["oom.log"]["kind"] == "text-log"
    for name in ("check.txt", "postmortem.txt"):
        assert rows[name]["status"] == "skipped"
        assert rows[name]["problems"] == ["not read: a finetune-doctor report (text format), this tool's output "
                                          "rather than the run's"]
    assert pm.own_output_notes(r) == ["not read as logs, finetune-doctor's own output: check.txt (a saved "
                                      "report); postmortem.txt (a saved report)"]
    assert r.findings[0].name == "cuda-oom"
    assert len([e for e in r.timeline if e.kind == "oom"]) == 1


def test_every_report_format_is_recognised_and_a_log_is_not(tmp_path):
    from finetune_doctor.readers.runlogs.ownreport import own_report_of
    from finetune_doctor.reporters import render

    r = _run("c01-8471", gpu="2xA100-40GB")
    for fmt in ("text", "json", "sarif", "concise", "github"):
        p = tmp_path / f"report.{fmt}.txt"
        p.write_text(render(r, fmt), encoding="utf-8")
        assert own_report_of(str(p)) == fmt, fmt
    for log in ("c01-8471/oom.log", "c03-7388/run/train.log", "c10-7755/run/train.log", "c12-7396/run/train.log",
                "c01-8471/config.yaml"):
        assert own_report_of(os.path.join(FIX, log)) is None, log
    # a log that merely mentions the tool, and an empty file (nothing to recognise yet)
    p = tmp_path / "train.log"
    p.write_text("doctor check\n[INFO|2025-06-30 10:00:01] llamafactory.hparams.parser:406 >> Process rank: 0\n")
    assert own_report_of(str(p)) is None
    (tmp_path / "empty.txt").write_text("")
    assert own_report_of(str(tmp_path / "empty.txt")) is None


def test_the_file_tee_writes_the_report_to_is_not_read(tmp_path):
    import shutil
    import subprocess
    import sys

    if not shutil.which("tee") or not os.path.isdir("/proc"):
        import pytest
        pytest.skip("needs tee and /proc (Linux)")
    d = tmp_path / "run"
    shutil.copytree(os.path.join(FIX, "c01-8471"), d)
    for name in ("check.txt", "postmortem.txt"):
        (d / name).unlink()
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    doc = subprocess.Popen([sys.executable, "-m", "finetune_doctor", "postmortem", str(d), "--config",
                            str(d / "config.yaml"), "--gpu", "2xA100-40GB"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env)
    tee = subprocess.Popen(["tee", str(d / "postmortem.txt")], stdin=doc.stdout, stdout=subprocess.DEVNULL)
    assert doc.stdout is not None
    doc.stdout.close()
    _, err = doc.communicate(timeout=120)
    tee.wait(timeout=30)
    text = (d / "postmortem.txt").read_text(encoding="utf-8")
    assert "postmortem.txt: not read: this command's own report is being written to it" in text
    assert "doctor: note: not read as logs, finetune-doctor's own output: postmortem.txt (being written by this " \
           "command)" in err.decode()
    assert "oom.log          text-log   read" in text


def test_an_output_file_in_the_run_folder_is_not_read(tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(os.path.join(FIX, "c01-8471"), d)
    (d / "check.txt").unlink()
    out = d / "postmortem.txt"   # a plain log's content: only --output marks it as the report's target
    out.write_text("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access\n")
    r = diagnose_dir(d, [], d / "config.yaml", output=str(out))
    assert _rows(r)["postmortem.txt"]["problems"] == ["not read: this command's own report is being written to it"]
    assert "cuda-error" not in [f.name for f in r.findings]


# -- 4. an NCCL timeout where every rank that printed only waited (c12, LLaMA-Factory #7396) ---------------------------

def test_the_silent_rank_is_named_when_every_printing_rank_timed_out():
    r = _run("c12-7396", config=False)
    rf = next(f for f in r.findings if f.name == "rank-failed-first")
    # before: "Rank 0 failed first (NCCL collective timeout), by the earliest failure line by wall clock"
    assert rf.message.startswith("Rank 1 is the likely root (no line in the files read), by causality: every "
                                 "rank that logged a failure (0, 2, 3, 4) only timed out, all on the same "
                                 "collective (ALLREDUCE #1580)")
    assert "rank(s) 1 of ranks 0-4 (4 the highest the logs name) printed nothing" in rf.message
    assert "by the earliest failure line by wall clock" not in rf.message
    assert rf.location.line == 1
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "rank 1 printed nothing while every rank that did timed out: the others waited on it" in nccl.message
    assert "(so the framework most likely passed none)" in nccl.message
    ranks = r.sections["postmortem"]["ranks"]
    assert ranks["first_failed"]["rank"] == 1 and ranks["waiting"] == [0, 2, 3, 4]


def _timeouts(tmp_path, seqs: dict[int, int], extra: str = "") -> str:
    lines = []
    for k, (rank, seq) in enumerate(sorted(seqs.items())):
        lines.append(f"[rank{rank}]:[E321 02:07:08.4{k}8271257 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog "
                     f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
                     "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds "
                     "before timing out.")
    p = tmp_path / "train.log"
    p.write_text(extra + "\n".join(lines) + "\n", encoding="utf-8")
    return str(p)


def test_a_rank_that_raised_stays_the_root_over_a_silent_one(tmp_path):
    oom = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
           "capacity of 79.15 GiB of which 1.10 GiB is free.\n")
    r = diagnose_dir(_timeouts(tmp_path, {0: 1580, 2: 1580}, oom))
    first = r.sections["postmortem"]["ranks"]["first_failed"]
    assert first["rank"] == 3 and "causality: rank 3 raised" in next(
        f for f in r.findings if f.name == "rank-failed-first").message


def test_a_paste_missing_half_the_ranks_names_no_silent_rank(tmp_path):
    # ranks 0 and 3 of four: two of four missing is a partial paste, not evidence about ranks 1 and 2
    r = diagnose_dir(_timeouts(tmp_path, {0: 1580, 3: 1580}))
    first = r.sections["postmortem"]["ranks"]["first_failed"]
    assert first["rank"] == 0 and first["how"].startswith("the earliest failure line by wall clock")
    msg = next(f for f in r.findings if f.name == "rank-failed-first").message
    assert "printed nothing" not in msg and "the clock is the weakest evidence" in msg


def _with_unknown_key(tmp_path):
    cfg = tmp_path / "config.yaml"
    with open(os.path.join(FIX, "c10-7755", "config.yaml"), encoding="utf-8") as fh:
        cfg.write_text(fh.read() + "fp32: true\n", encoding="utf-8")
    return str(cfg)


def test_a_start_up_refusal_is_a_warning_when_the_logs_show_steps(tmp_path):
    # LLaMA-Factory's parser refuses `fp32` (allow_extra_keys=False): a run that logged steps did not read it
    r = diagnose_dir(os.path.join(FIX, "c10-7755", "run"), [], _with_unknown_key(tmp_path), gpu="3xV100-32GB")
    f = next(f for f in r.findings if f.name == "unknown-key")
    assert f.severity == "warning" and f.location.key == "fp32"
    assert f.message.endswith("The logs show training steps, so the run got past start-up: the config read here is "
                              "not exactly the one that ran (edited since, or judged for another LLaMA-Factory "
                              "release than the one that ran).")
    assert r.findings[0].name == "fp16-on-bf16-model-confirmed"


def test_a_start_up_refusal_stays_an_error_for_a_run_that_logged_no_step(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\nValueError: Some keys are not used by the "
                   "HfArgumentParser: ['fp32']\n", encoding="utf-8")
    r = diagnose_dir(log, [], _with_unknown_key(tmp_path))
    f = next(f for f in r.findings if f.name == "unknown-key")
    assert f.severity == "error" and "got past start-up" not in f.message


def test_the_start_up_refusals_are_the_rules_tagged_parse_time():
    assert pm.parse_time_rules(Options(command="postmortem")) == {
        "unknown-key", "renamed-key", "missing-required-key", "conflicting-options", "v1-parse-error",
        "keys-of-no-one-release"}   # an error since trial 12: every release and LF main refuse the keys at start-up
