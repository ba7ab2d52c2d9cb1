"""`lint --fix` as a user and a pre-commit hook meet it (issue 17, class 7).

Each test writes a real-shaped LLaMA-Factory YAML (and DeepSpeed JSON), runs the CLI in-process and checks the
bytes on disk afterwards: CRLF files are fixed and stay CRLF, a symlinked config is fixed at its target, the
deleted key's trailing comment does not land on the key that replaces it, only the files named on the command
line are written, and the summary says what was fixed and what is left, as ruff does.
"""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.fixes.edit import apply_edits
from finetune_doctor.types import Edit

# full fine-tuning without bf16/fp16: FD101 accidental-fp32, whose safe fix adds `bf16: true`
FP32_FULL = ("model_name_or_path: Qwen/Qwen2.5-0.5B  # base model\n"
             "stage: sft\n"
             "do_train: true\n"
             "dataset: alpaca_en_demo\n"
             "finetuning_type: full\n")


def _lint(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["lint", *args])
    return res.exit_code, " ".join(res.output.split())      # the text reporter wraps at the terminal width


def test_crlf_config_is_fixed_and_keeps_its_line_ends(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_bytes(FP32_FULL.replace("\n", "\r\n").encode())
    code, out = _lint("--fix", str(cfg))
    raw = cfg.read_bytes()
    assert code == 0, out
    assert raw.endswith(b"bf16: true\r\n")
    assert b"\n" not in raw.replace(b"\r\n", b"")        # no bare LF line was introduced
    assert raw.count(b"\r\n") == FP32_FULL.count("\n") + 1
    assert "1 fixed, 0 remaining" in out


def test_symlinked_config_is_fixed_at_its_target(tmp_path):
    target = tmp_path / "configs" / "real.yaml"
    target.parent.mkdir()
    target.write_text(FP32_FULL)
    link = tmp_path / "train.yaml"
    link.symlink_to(target)
    code, out = _lint("--fix", str(link))
    assert code == 0, out
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == FP32_FULL + "bf16: true\n"


def test_a_key_replaced_by_another_drops_the_old_lines_comment(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("stage: sft\noptimizer: adamw  # typo\nlearning_rat: 1.0e-4  # peak\n")
    # each rename spelled as rules/unknown-key.yaml spells it: set the new key, delete the old one
    res = apply_edits(str(path), [Edit(file=str(path), key="optim", value="adamw_torch"),
                                  Edit(file=str(path), key="optimizer", delete=True),
                                  Edit(file=str(path), key="learning_rate", value=1e-4),
                                  Edit(file=str(path), key="learning_rat", delete=True)])
    assert res.changed
    # a new key with a new value: the comment spoke of the deleted one; a pure rename moves value and comment
    assert path.read_text() == "stage: sft\noptim: adamw_torch\nlearning_rate: 1.0e-4  # peak\n"


def _fp16_mismatch(tmp_path):
    ds = tmp_path / "ds_z3.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": True},
                              "zero_optimization": {"stage": 3}}, indent=2) + "\n")
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\ndataset: alpaca_en_demo\n"
                   "finetuning_type: lora\nbf16: true\ndeepspeed: ds_z3.json\n")
    return cfg, ds


def test_fix_writes_only_the_files_given(tmp_path):
    cfg, ds = _fp16_mismatch(tmp_path)
    before = ds.read_bytes()
    code, out = _lint("--fix", str(cfg))
    assert code == 1                                    # FD203 is still there
    assert ds.read_bytes() == before
    assert "not among the files given" in out and "0 fixed, 1 remaining" in out
    code, out = _lint("--fix", str(cfg), str(ds))
    assert code == 0, out
    assert json.loads(ds.read_text())["fp16"]["enabled"] == "auto"
    assert "1 fixed, 0 remaining" in out


def test_fixable_findings_are_marked_and_counted(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(FP32_FULL)
    code, out = _lint(str(cfg), "--format", "concise")
    assert code == 0                                    # a warning: lint fails on errors only
    assert out.startswith(f"{cfg}:5:1: FD101 [*] This file sets neither")
    code, out = _lint(str(cfg))
    assert out.endswith("0 errors, 1 warning, 0 info · 1 fixable with --fix")
    res = CliRunner().invoke(main, ["lint", "--fix", str(cfg), "--format", "json"])
    report = json.loads(res.output)
    assert report["fixes"] == {"fixed": 1, "remaining": 0}
    assert report["findings"] == []


def test_fix_edits_a_deepspeed_json_that_holds_nan_and_infinity(tmp_path):
    # json.load (DeepSpeed's and HF's reader) takes these literals; the fixer's scanner must too (found by the
    # fuzz corpus: internal error on `"stage": NaN`)
    cfg, ds = _fp16_mismatch(tmp_path)
    ds.write_text('{\n  "train_micro_batch_size_per_gpu": "auto",\n  "gradient_clipping": Infinity,\n'
                  '  "fp16": {"enabled": true, "loss_scale": NaN},\n  "zero_optimization": {"stage": 3}\n}\n')
    code, out = _lint("--fix", str(cfg), str(ds))
    assert "internal error" not in out
    text = ds.read_text()
    assert '"enabled": "auto"' in text and '"gradient_clipping": Infinity' in text and '"loss_scale": NaN' in text
