"""One output policy for --output, --fix, --record and --plot (issue 27; finetune_doctor/fsutil.py).

Each defect the second hostile-input campaign found has its case here: a FIFO and a device replaced by a report,
the config overwritten by its own report, ``--output /dev/stdout`` into a pipe, a read-only file rewritten by
``--fix``, hard links split, and "internal error" on a full disk, a read-only folder or file system.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor import fsutil
from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "fixtures" / "quickstart"
BAD = ("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
       "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\ndpo_beta: 0.1  # renamed: FD002, a safe fix\n")


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    for f in QUICK.iterdir():
        shutil.copy2(f, tmp_path / f.name)
    return tmp_path


def check(cfg: Path, *extra: str):
    return CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--offline", "--no-data", *extra])


def one_line_error(res, *words: str) -> None:
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in lines[0] and "Traceback" not in res.output, res.output
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_output_never_replaces_a_fifo(run_dir):
    fifo = run_dir / "pipe"
    os.mkfifo(fifo)
    one_line_error(check(run_dir / "llama7b_full_zero2_v100.yaml", "--output", str(fifo)), "pipe", "is a FIFO")
    assert fifo.is_fifo()


def test_output_never_replaces_a_device(run_dir):
    # as root os.replace would have swapped /dev/full for the report (the campaign's machine lost its /dev/full)
    one_line_error(check(run_dir / "llama7b_full_zero2_v100.yaml", "--output", "/dev/full"), "is a device")
    assert Path("/dev/full").is_char_device()


@pytest.mark.parametrize("victim", ["llama7b_full_zero2_v100.yaml", "ds_z2_config.json"])
def test_output_never_overwrites_an_input(run_dir, victim):
    before = (run_dir / victim).read_bytes()
    res = check(run_dir / "llama7b_full_zero2_v100.yaml", "--output", str(run_dir / victim))
    one_line_error(res, victim, "is an input of this run")
    assert (run_dir / victim).read_bytes() == before


def test_dash_and_dev_stdout_write_to_stdout(run_dir):
    for target in ("-", "/dev/stdout"):
        res = check(run_dir / "llama7b_full_zero2_v100.yaml", "--output", target, "--format", "json")
        assert res.exit_code == 1 and res.output.lstrip().startswith("{"), res.output


def test_dev_stdout_into_a_pipe(run_dir):
    res = subprocess.run([sys.executable, "-m", "finetune_doctor", "check", str(run_dir / "llama7b_full_zero2_v100.yaml"),
                          "--gpu", "A100-80GB", "--offline", "--no-data", "--output", "/dev/stdout", "--format", "json"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "FINETUNE_DOCTOR_NO_NVML": "1"})
    assert res.returncode == 1, res.stderr
    assert '"schema": "finetune-doctor/report/v1"' in res.stdout and res.stderr == ""


def test_read_only_file_is_refused_by_output_and_fix(tmp_path):
    ro = tmp_path / "report.txt"
    ro.write_text("keep me\n")
    ro.chmod(0o444)
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BAD)
    one_line_error(check(cfg, "--output", str(ro)), "read-only file")
    assert ro.read_text() == "keep me\n"
    cfg.chmod(0o444)
    one_line_error(CliRunner().invoke(main, ["lint", "--fix", str(cfg)]), "train.yaml", "read-only file")
    assert cfg.read_text() == BAD and (cfg.stat().st_mode & 0o777) == 0o444


def test_fix_keeps_hard_links(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BAD)
    twin = tmp_path / "twin.yaml"
    os.link(cfg, twin)
    res = CliRunner().invoke(main, ["lint", "--fix", str(cfg)])
    assert res.exit_code == 0, res.output
    assert cfg.stat().st_nlink == 2 and os.path.samefile(cfg, twin)
    assert "pref_beta: 0.1" in twin.read_text()


def test_output_keeps_hard_links(run_dir):
    out = run_dir / "report.txt"
    out.write_text("old\n")
    os.link(out, run_dir / "latest.txt")
    check(run_dir / "llama7b_full_zero2_v100.yaml", "--output", str(out))
    assert (run_dir / "latest.txt").read_text().startswith("doctor check")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_write_faults_are_one_line_and_leave_the_file(tmp_path, monkeypatch, code):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BAD)

    def fail(*a, **k):
        raise OSError(code, os.strerror(code))

    # a full disk fails at the first flush to the temporary file; a read-only folder or file system at its creation
    monkeypatch.setattr(fsutil.os, "fsync", fail) if code == errno.ENOSPC else \
        monkeypatch.setattr(__import__("tempfile"), "mkstemp", fail)
    one_line_error(CliRunner().invoke(main, ["lint", "--fix", str(cfg)]), "train.yaml", os.strerror(code))
    assert cfg.read_text() == BAD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.yaml"]      # no temporary file left behind
    one_line_error(check(cfg, "--output", str(tmp_path / "r.txt")), "r.txt", os.strerror(code))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_record_refuses_a_fifo_and_stdout(tmp_path):
    from finetune_doctor.errors import InputError
    from finetune_doctor.hardware.record import open_recorder

    fifo = tmp_path / "samples.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO"):
        open_recorder(str(fifo))
    with pytest.raises(InputError, match="standard output carries the report"):
        open_recorder("-")


def test_plot_never_overwrites_an_input(tmp_path):
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    shutil.copytree(ROOT / "fixtures" / "postmortem" / "case_041", run)
    victim = next(p for p in sorted(run.rglob("*")) if p.name == "trainer_log.jsonl")
    before = victim.read_bytes()
    res = CliRunner().invoke(main, ["postmortem", str(run), "--plot", str(victim)])
    one_line_error(res, "trainer_log.jsonl", "is an input of this run")
    assert victim.read_bytes() == before
