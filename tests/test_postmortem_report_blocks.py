"""A report that is a title above a long block that is no log (issue #25, session 11's dev misses): an environment
dump (``llamafactory-cli env``, ``pip list``, collect_env, nvidia-smi), a training YAML or a dataset sample is
blanked by its line shapes (readers/runlogs/pasteblocks.py), so the title's words count, and the versions of the
environment block reach the version readings as ``--env`` would (readers/config/stack.py `pasted_versions`).
Fixtures: fixtures/postmortem/report_blocks/ (FIXTURE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_doctor.readers.config import stack
from finetune_doctor.readers.runlogs import logs, pasteblocks, userwords
from pmhelp import FIXTURES, diagnose_report

FIX = FIXTURES / "report_blocks"


@pytest.mark.parametrize("name, rule, words", [
    # a title over print_env's bullets and a training YAML: 35 lines, the title alone is the report
    ("title_lf_env_yaml_zh.txt", "cuda-oom", ['("OOM") (eval)', "eval_accumulation_steps"]),
    # a title over pip list's header and rows
    ("title_pip_list_en.txt", "run-hang", ['("hangs") around step 0', "py-spy dump"]),
    # 5.4 KB: above the 4 KiB of words, below the 64 KiB a paste may have
    ("title_pip_list_long_zh.txt", "run-hang", ['("卡住") around step 1200']),
    ("title_nvidia_smi_en.txt", "nan-loss", ['("NaN") around step 300', "bf16"]),
    ("title_dataset_sample_zh.txt", "loss-stuck-zero", ['("loss 一直为 0")']),
    # transformers' `transformers env` bullets and its bug form's headings
    ("title_transformers_env_en.txt", "run-hang", ['("hangs") (at the end)', "final barrier"]),
])
def test_a_title_over_a_block_is_read_as_words(tmp_path, name, rule, words):
    text = (FIX / name).read_text(encoding="utf-8")
    assert len([ln for ln in text.splitlines() if ln.strip()]) > userwords.MAX_LINES   # too long before
    r = diagnose_report(tmp_path, FIX / name)
    assert r.findings and r.findings[0].name == rule, [f.name for f in r.findings]
    for w in words:
        assert w in r.findings[0].message
    assert "no log lines were given" in r.findings[0].message


def test_metric_lines_said_stay_words():
    """Three `key: value` lines of metrics are what the user saw, not a config: no training config key among
    them, so they are not blanked and name the symptom."""
    text = (FIX / "metrics_said_en.txt").read_text(encoding="utf-8")
    blanked, env = pasteblocks.blank_blocks(text)
    assert blanked == text and not env.strip()
    assert userwords.read_words(text)["symptom"] == "no-update"


def test_a_users_own_bullets_stay_words():
    """"- 模型: ... / - 现象: ..." bullets are the user's description, not print_env's (whose labels are versions,
    the platform and the devices): nothing is blanked and the symptom is read."""
    text = (FIX / "bullets_said_zh.txt").read_text(encoding="utf-8")
    assert pasteblocks.blank_blocks(text)[0] == text
    assert userwords.read_words(text)["symptom"] == "loss-zero"


def test_typed_metric_rows_are_no_pip_list():
    """"step 100 loss 0.0" typed by a user has no dotted version in its second column: no pip list row."""
    text = "loss goes to zero\nstep 100 loss 0.0\nstep 110 loss 0.0\nstep 120 loss 0.0\n"
    assert pasteblocks.blank_blocks(text)[0] == text


def test_blocks_keep_line_numbers_and_never_hold_log_lines():
    text = ("Run dies at eval\n- `llamafactory` version: 0.9.1\n- PyTorch version: 2.3.1+cu121 (GPU)\n"
            "- Transformers version: 4.45.2\n[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n")
    blanked, env = pasteblocks.blank_blocks(text)
    assert blanked.split("\n")[0] == "Run dies at eval"
    assert blanked.split("\n")[4].startswith("[rank0]: torch.OutOfMemoryError")   # a log line is never blanked
    assert blanked.count("\n") == text.count("\n")
    assert stack.pasted_versions(env) == {"llamafactory": ("0.9.1", 2), "torch": ("2.3.1+cu121", 3),
                                          "transformers": ("4.45.2", 4)}


def test_transformers_env_gives_versions():
    env = pasteblocks.blank_blocks((FIX / "title_transformers_env_en.txt").read_text(encoding="utf-8"))[1]
    assert stack.pasted_versions(env) == {"transformers": ("4.46.1", 5), "accelerate": ("1.1.1", 10),
                                          "torch": ("2.5.1+cu124", 12)}


def test_collect_env_and_conda_rows_give_versions():
    env = pasteblocks.blank_blocks((FIX / "title_collect_env_en.txt").read_text(encoding="utf-8"))[1]
    got = stack.pasted_versions(env)
    # collect_env's "PyTorch version:" line, its [pip3] rows and its [conda] rows (the last one read stands)
    assert got["torch"][0] == "2.4.0" and got["transformers"] == ("4.43.4", 49)


def test_pasted_versions_reach_the_version_readings(tmp_path):
    """The torch of a pasted collect_env block is the version the undefined-symbol reading names, with the file
    and line it came from, as --env gives it."""
    r = diagnose_report(tmp_path, FIX / "title_collect_env_en.txt")
    f = r.findings[0]
    assert f.name == "run-crashed"
    assert "flash-attn is a compiled extension built against another torch" in f.message
    assert "2.4.0 (" in f.message and "title_collect_env_en.txt:" in f.message


def test_env_flag_outranks_a_pasted_block(tmp_path):
    envf = tmp_path / "env.txt"
    envf.write_text("- PyTorch version: 2.5.1+cu124 (GPU)\n- Transformers version: 4.46.1\n")
    r = diagnose_report(tmp_path, FIX / "title_collect_env_en.txt", env_file=str(envf))
    assert "2.5.1+cu124 (" in r.findings[0].message and "2.4.0 (" not in r.findings[0].message


def test_a_paste_above_the_paste_bound_is_a_log(tmp_path):
    """Decided by size first: a file above MAX_PASTE_BYTES never reaches the block test, whatever it holds."""
    text = (FIX / "title_pip_list_long_zh.txt").read_text(encoding="utf-8")
    p = tmp_path / "train.log"
    body = text.split("\n", 1)[1]
    p.write_text(text + body * (userwords.MAX_PASTE_BYTES // len(body.encode()) + 1), encoding="utf-8")
    assert Path(p).stat().st_size > userwords.MAX_PASTE_BYTES
    fe = logs.read_text_log(str(p))
    assert fe.said is None and fe.env_versions == {}
