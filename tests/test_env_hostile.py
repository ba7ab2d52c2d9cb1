"""An environment report (`--env`) is untrusted input like any other (issue 27: "a bad --env version is blamed on the
bundled catalog entry"): a version the bounded parser (numbers.py) refuses is one line naming the file and the
line, exit 2, never Python's int-conversion limit from deep inside the model reader; a GPU count too long to be one
is not read."""

from __future__ import annotations

from click.testing import CliRunner

from finetune_doctor.cli import main

CONFIG = ("model_name_or_path: deepseek-ai/DeepSeek-V2-Lite\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
          "lora_target: all\ndataset: alpaca_en_demo\ntemplate: deepseek\ncutoff_len: 1024\nbf16: true\n"
          "output_dir: out\n")


def _check(tmp_path, env_text: str):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    env = tmp_path / "machine.env"
    env.write_text(env_text, encoding="utf-8")
    return CliRunner().invoke(main, ["check", str(cfg), "--env", str(env), "--gpu", "A100-80GB", "--no-data",
                                     "--offline", "--format", "json"])


def test_a_five_thousand_digit_version_in_env_is_one_line_at_its_line(tmp_path):
    r = _check(tmp_path, "- `torch` version: 2.5.0\n- `transformers` version: " + "9" * 5000 + ".1.0\n")
    assert r.exit_code == 2
    assert "machine.env:2: `transformers` version '" in r.stderr and "(5004 characters)" in r.stderr
    assert "internal error" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_pip_freeze_lines_are_bounded_too(tmp_path):
    r = _check(tmp_path, "torch==2.5.0\ntransformers==" + "4" * 5000 + "\n")
    assert r.exit_code == 2 and "machine.env:2:" in r.stderr and "internal error" not in r.stderr


def test_a_gpu_count_too_long_to_be_one_is_not_read(tmp_path):
    r = _check(tmp_path, "- `transformers` version: 4.46.0\n- GPU number: " + "9" * 5000 + "\n")
    assert r.exit_code in (0, 1) and "internal error" not in r.stderr
