"""`doctor lint` takes inputs as ruff does (issue 26): files, directories (walked, with the project's exclude /
extend-exclude and .gitignore honoured), ``-`` with ``--stdin-filename``; no input is exit 2. And ruff's
``--statistics``, ``--exit-zero``, ``--config FILE`` and ``--output-format``.

Fixtures are LLaMA-Factory's own example config with one renamed key (``learing_rate``, FD001) — the kind of
file a pre-commit hook sees — and a stock ZeRO-2 DeepSpeed JSON as LF ships it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers import textfile

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = (ROOT / "fixtures/llamafactory/examples/train_lora/qwen3_lora_sft.yaml").read_text()
BAD = EXAMPLE.replace("learning_rate:", "learing_rate:")
assert BAD != EXAMPLE


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.setattr(textfile, "_PROVIDED", {})


def lint(*args: str, stdin: bytes | None = None, cwd: Path | None = None):
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        return CliRunner().invoke(main, ["lint", *args], input=stdin)
    finally:
        os.chdir(old)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "configs" / "sub").mkdir(parents=True)
    (tmp_path / "configs" / "sub" / "a.yaml").write_text(BAD)
    (tmp_path / "configs" / "b.yml").write_text(BAD)
    (tmp_path / "configs" / "notes.json").write_text('{"not": "ours"}')
    (tmp_path / "configs" / ".venv").mkdir()
    (tmp_path / "configs" / ".venv" / "c.yaml").write_text(BAD)          # default exclusion
    (tmp_path / "configs" / "old").mkdir()
    (tmp_path / "configs" / "old" / "d.yaml").write_text(BAD)            # extend-exclude below
    (tmp_path / "configs" / "gen").mkdir()
    (tmp_path / "configs" / "gen" / "e.yaml").write_text(BAD)            # .gitignore below
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("configs/gen/\n")
    (tmp_path / "pyproject.toml").write_text('[tool.finetune-doctor]\nextend-exclude = ["configs/old"]\n')
    return tmp_path


def _files(res) -> list[str]:
    return sorted({Path(f["location"]["file"]).name for f in json.loads(res.output)["findings"]})


def test_no_input_is_a_usage_error():
    res = lint()
    assert res.exit_code == 2
    assert "no input" in res.output and "Traceback" not in res.output


def test_directory_is_walked_with_excludes_and_gitignore(tmp_path):
    root = _tree(tmp_path)
    res = lint(str(root / "configs"), "--format", "json")
    assert res.exit_code == 1, res.output
    assert _files(res) == ["a.yaml", "b.yml"]


def test_exclude_replaces_the_defaults(tmp_path):
    root = _tree(tmp_path)
    (root / "pyproject.toml").write_text('[tool.finetune-doctor]\nexclude = ["old/"]\n')
    res = lint(str(root / "configs"), "--format", "json")
    # .venv is no longer excluded (exclude replaces the default list), old/ is; gen/ stays git-ignored
    assert _files(res) == ["a.yaml", "b.yml", "c.yaml"]


def test_named_file_is_linted_even_when_excluded_unless_force_exclude(tmp_path):
    root = _tree(tmp_path)
    target = str(root / "configs" / "old" / "d.yaml")
    assert lint(target, "--format", "json").exit_code == 1
    res = lint(target, "--force-exclude", "--format", "json")
    assert res.exit_code == 0 and json.loads(res.output)["findings"] == []


def test_stdin_with_a_filename_finds_the_errors(tmp_path):
    res = lint("-", "--stdin-filename", "configs/qwen.yaml", "--format", "concise", stdin=BAD.encode())
    assert res.exit_code == 1, res.output
    assert res.output.startswith("configs/qwen.yaml:") and "FD001" in res.output and "learing_rate" in res.output


def test_stdin_without_a_filename_is_sniffed():
    res = lint("-", "--format", "json", stdin=BAD.encode())
    assert res.exit_code == 1
    assert [f["code"] for f in json.loads(res.output)["findings"]] == ["FD001"]


def test_stdin_cannot_be_fixed():
    res = lint("-", "--fix", stdin=BAD.encode())
    assert res.exit_code == 2 and "standard input" in res.output


def test_statistics_and_exit_zero(tmp_path):
    root = _tree(tmp_path)
    res = lint(str(root / "configs"), "--statistics")
    assert res.exit_code == 1
    assert res.output.split() == ["2", "FD001", "unknown-key"]   # two files, one code; its fix is unsafe
    res = lint(str(root / "configs"), "--statistics", "--output-format", "json", "--exit-zero")
    assert res.exit_code == 0
    assert json.loads(res.output) == [{"code": "FD001", "name": "unknown-key", "count": 2, "fixable": 0}]


def test_config_file_is_used_instead_of_discovery(tmp_path):
    root = _tree(tmp_path)
    other = tmp_path / "strict.toml"
    other.write_text('ignore = ["FD001"]\n')
    res = lint(str(root / "configs" / "b.yml"), "--config", str(other), "--format", "json")
    assert res.exit_code == 0 and json.loads(res.output)["findings"] == []
    missing = lint(str(root / "configs" / "b.yml"), "--config", str(tmp_path / "nope.toml"))
    assert missing.exit_code == 2 and "nope.toml" in missing.output


def test_output_format_is_an_alias_of_format(tmp_path):
    root = _tree(tmp_path)
    a = lint(str(root / "configs" / "b.yml"), "--output-format", "concise")
    b = lint(str(root / "configs" / "b.yml"), "--format", "concise")
    assert a.exit_code == b.exit_code == 1 and a.output == b.output and "FD001" in a.output


def test_command_line_inputs_hold_for_files_in_every_folder(tmp_path):
    """--launch (like --model-config, --host-ram, --context, --accelerate-config, --offline) is one input for the
    whole command: a file in a second folder, whose options are worked out from its own project files, keeps it
    (it was dropped there). The merge config under b/ is launched with `train`: FD049 wrong-subcommand."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "train.yaml").write_text(EXAMPLE)
    (tmp_path / "b" / "merge.yaml").write_text(
        "model_name_or_path: Qwen/Qwen2-VL-7B-Instruct\nadapter_name_or_path: saves/qwen2_vl-7b/lora/sft\n"
        "template: qwen2_vl\nfinetuning_type: lora\nexport_dir: models/qwen2_vl_lora_sft\nexport_device: cpu\n")
    (tmp_path / "cmdline.txt").write_text("llamafactory-cli train b/merge.yaml\n")
    res = lint("a/train.yaml", "b/merge.yaml", "--launch", "cmdline.txt", "--format", "json", cwd=tmp_path)
    found = [(Path(f["location"]["file"]).name, f["code"]) for f in json.loads(res.output)["findings"]]
    assert ("merge.yaml", "FD049") in found, found
