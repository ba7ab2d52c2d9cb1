"""The project configuration is typed (issue 27): a bad value is one line naming the file, the key and what is
expected, exit 2 — never an internal error of every command. The values are the ones the campaign used."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.projectconfig import _find

CONFIG = "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n" \
         "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\n"

BAD = [
    ("gpu = 8", "gpu: expected a non-empty string, found number 8"),
    ('nnodes = "2"', "nnodes: expected a whole number of nodes from 1 to 65536, found string '2'"),
    ("nnodes = 0", "nnodes: expected a whole number of nodes from 1 to 65536, found number 0"),
    ("select = 5", "select: expected an array of strings (rule codes or prefixes), found number 5"),
    ("rules = [1]", "rules: expected an array of strings (paths or patterns), found an array of 1"),
    ('fail-on = "sometimes"', "fail-on: expected error, warning, info or never"),
    ("offline = 1", "offline: expected true or false, found number 1"),
    ('per-file-ignores = {"*.yaml" = "FD001"}', "per-file-ignores: expected a table of glob = [codes]"),
    ('format = "xml"', "format: expected text, json, sarif, github or concise"),
]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    _find.cache_clear()
    yield
    _find.cache_clear()


@pytest.mark.parametrize("where", ["pyproject", "dotfile"])
@pytest.mark.parametrize("line,expected", BAD)
def test_a_bad_value_is_one_line_naming_file_key_and_expectation(tmp_path, line, expected, where):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(CONFIG)
    if where == "pyproject":
        conf = tmp_path / "pyproject.toml"
        conf.write_text(f"[tool.finetune-doctor]\n{line}\n")
    else:
        conf = tmp_path / ".finetune-doctor.toml"
        conf.write_text(f"{line}\n")
    for cmd in (["lint", str(cfg)], ["check", str(cfg), "--no-data", "--offline"]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 2, (cmd, res.output)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and str(conf) in lines[0] and expected in lines[0], res.output
        assert "internal error" not in res.output


def test_tool_that_is_not_a_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text("tool = 5\n")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(CONFIG)
    res = CliRunner().invoke(main, ["lint", str(cfg)])
    assert res.exit_code == 2 and "tool: expected a table, found number 5" in res.output


def test_deep_nesting_is_refused_before_the_toml_reader_recurses(tmp_path):
    (tmp_path / ".finetune-doctor.toml").write_text("select = " + "[" * 1000 + "]" * 1000 + "\n")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(CONFIG)
    res = CliRunner().invoke(main, ["lint", str(cfg)])
    assert res.exit_code == 2 and "nested deeper than 32 levels" in res.output
    assert "RecursionError" not in res.output and "internal error" not in res.output


def test_valid_values_still_apply(tmp_path):
    (tmp_path / ".finetune-doctor.toml").write_text(
        'select = ["FD0"]\nignore = ["FD001"]\nnnodes = 2\nfail-on = "warning"\noffline = true\n'
        'exclude = ["old/"]\nextend-exclude = ["gen/"]\n')
    cfg = tmp_path / "train.yaml"
    cfg.write_text(CONFIG + "learing_rate: 1.0e-4\n")
    res = CliRunner().invoke(main, ["lint", str(cfg), "--format", "concise"])
    assert res.exit_code == 0 and "FD001" not in res.output, res.output
