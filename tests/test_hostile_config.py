"""Hostile and careless training configs: every command reads them the same way (readers/textfile.py) and stops
with one line `file:line: ...` and exit 2 — no hang, no RecursionError, no internal error (issue 17, classes 1, 3, 4).
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

NINE = ",".join(["*{0}"] * 9)


def _laughs() -> str:
    lines = ['model_name_or_path: Qwen/Qwen2.5-0.5B', 'a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(8):
        prev, cur = chr(97 + i), chr(98 + i)
        lines.append(f"{cur}: &{cur} [{NINE.format(prev)}]")
    return "\n".join(lines) + "\n"


CASES = {
    # name: (file bytes, expected message part, expected line)
    "billion-laughs": (_laughs().encode(), "alias expansion exceeds 250000 values", 2),
    "recursive-alias": (b"model_name_or_path: x\na: &a [*a]\n", "an alias contains itself", 2),
    "recursive-merge": (b"a: &a\n  <<: *a\n  x: 1\nmodel_name_or_path: x\n", "merges a mapping that contains it", 1),
    "deep-nesting": (("model_name_or_path: x\n" + "".join("  " * i + f"k{i}:\n" for i in range(900))
                      + "  " * 900 + "v: 1\n").encode(), "nesting exceeds 64 levels", 66),
    "huge-integer": (b"model_name_or_path: x\ncutoff_len: " + b"9" * 5000 + b"\n", "5000 digits exceeds", 2),
    "control-char": (b"model_name_or_path: x\nstage: \x07sft\n", "U+0007 is not allowed", 2),
    "utf16": ("model_name_or_path: x\nstage: sft\n".encode("utf-16"), "UTF-16 text", 1),
    "latin1": ("model_name_or_path: x\nrun_name: caf\xe9\n".encode("latin-1"), "not UTF-8 text: byte 0xE9", 2),
    "binary": (b"model_name_or_path: x\n\x00\x01\x02", "binary file", None),
}


def _run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(main, args)
    return res.exit_code, res.output


@pytest.mark.parametrize("command", ["lint", "check", "estimate"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_command_stops_with_one_line_naming_file_and_line(tmp_path, name, command):
    data, part, line = CASES[name]
    cfg = tmp_path / "train.yaml"
    cfg.write_bytes(data)
    args = [command, str(cfg)] + (["--no-data"] if command == "check" else [])
    code, out = _run(args)
    assert code == 2, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in out and "internal error" not in out, out
    where = f"{cfg}:{line}: " if line else f"{cfg}: "
    assert lines[0].startswith("doctor: " + where) and part in lines[0], lines[0]


@pytest.mark.parametrize("command", ["lint", "check"])
def test_a_fifo_and_a_device_are_refused_without_reading(tmp_path, command):
    fifo = tmp_path / "train.yaml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        code, out = _run([command, path])
        assert code == 2 and "not a regular file" in out and path in out, out


def test_merge_keys_merge_as_omegaconf_loads_them(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("base: &b {stage: sft, cutoff_len: 512, finetuning_type: lora}\n"
                   "model_name_or_path: Qwen/Qwen2.5-0.5B\n<<: *b\ncutoff_len: 1024\n")
    from finetune_doctor.readers.config.yamlcfg import load_config

    doc = load_config(str(cfg))
    # PyYAML's SafeLoader (what OmegaConf.load uses) merges the anchor; the explicit key wins
    import yaml

    assert {k: doc.values[k] for k in ("stage", "cutoff_len", "finetuning_type")} == \
        {k: yaml.safe_load(cfg.read_text())[k] for k in ("stage", "cutoff_len", "finetuning_type")} == \
        {"stage": "sft", "cutoff_len": 1024, "finetuning_type": "lora"}


def test_an_override_with_a_recursive_alias_is_an_input_error(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\n")
    code, out = _run(["check", str(cfg), "--no-data", "lora_target=&a [*a]"])
    assert code == 2 and "<command line>" in out and "recursive alias" in out, out


def test_stdin_is_read_as_a_config(monkeypatch):
    res = CliRunner().invoke(main, ["check", "-", "--no-data", "--format", "json"],
                             input="model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\nfinetuning_type: lora\n")
    assert res.exit_code in (0, 1), res.output
    import json

    assert json.loads(res.output)["inputs"]["config"] == "<stdin>"


TITLE = "\x1b]0;owned\x07"   # OSC 0: set the terminal window title


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github", "concise"])
def test_escape_sequences_from_a_file_never_reach_the_terminal(tmp_path, fmt):
    ds = tmp_path / "ds.json"
    key = TITLE.replace("\x1b", "\\u001b").replace("\x07", "\\u0007")   # as JSON escapes: raw ones are invalid
    # DeepSpeed's zero section forbids unknown keys, so the key name is quoted back in a finding
    ds.write_text('{"zero_optimization": {"stage": 2, '
                  f'"bogus{key}key": 1, "surrogate\\ud800": 2}}, "train_micro_batch_size_per_gpu": "auto"}}')
    cfg = tmp_path / "train.yaml"
    cfg.write_text(f"model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\nfinetuning_type: lora\ndeepspeed: {ds}\n"
                   f"run_name: \"x{TITLE.encode('unicode_escape').decode()}\"\n")
    res = CliRunner().invoke(main, ["lint", str(cfg), "--format", fmt])
    assert res.exit_code in (0, 1), res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "]0;owned" in res.output   # shown, escaped (as the file spells it, or as \x1b)
    res.output.encode("utf-8")   # printable: no lone surrogate left


def test_output_files_follow_the_umask_and_links_stay_links(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "dataset: alpaca_en_demo\n")
    out = tmp_path / "report.json"
    old = os.umask(0o022)
    try:
        assert CliRunner().invoke(main, ["lint", str(cfg), "--format", "json", "--output", str(out)]).exit_code == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert CliRunner().invoke(main, ["lint", str(cfg), "--format", "json", "--output", str(link)]).exit_code == 0
    assert link.is_symlink() and real.read_text().startswith("{")
