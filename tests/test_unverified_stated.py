"""FD041 (unverified-config-problem) when an input file states the LLaMA-Factory release (issue #25): a
development build read from `llamafactory-cli env`'s block (the issue template puts it above the log) is said to be
stated by that file first; "the inputs do not say which one ran" is kept for inputs that name no release
(tests/test_keyschema_messages.py pins those)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from finetune_doctor.cli import main

CFG = """\
model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct
stage: sft
do_train: true
finetuning_type: lora
dataset: mllm_demo
template: qwen2_vl
image_resolution: 262144
output_dir: saves/qwen2_5vl-7b/lora/sft
"""
ENV = """\
- `llamafactory` version: 0.9.2.dev0
- Platform: Linux-5.15.0-105-generic-x86_64-with-glibc2.35
- Python version: 3.10.14
- PyTorch version: 2.5.1+cu124 (GPU)
- Transformers version: 4.46.1
- Datasets version: 3.1.0
- Accelerate version: 1.0.1
- PEFT version: 0.12.0
- TRL version: 0.9.6
- GPU type: NVIDIA A100-SXM4-80GB
"""


def _fd041(tmp_path, *args):
    cfg = tmp_path / "qwen2_5vl_lora_sft.yaml"
    cfg.write_text(CFG, encoding="utf-8")
    res = CliRunner().invoke(main, ["lint", str(cfg), "--format", "json", *args])
    rep = json.loads(res.output)
    return next(f for f in rep["findings"] if f["code"] == "FD041")["message"]


def test_a_release_the_env_block_states_is_named_before_what_stays_open(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text(ENV, encoding="utf-8")
    msg = _fd041(tmp_path, "--env", str(env))
    assert "that is LLaMA-Factory 0.9.2 (0.9.2.dev0 is a build between 0.9.1 and 0.9.2, so its commit decides); " \
        f"{env} states LLaMA-Factory 0.9.2.dev0, but not the commit it was built from: the `Git commit` line of " \
        "`llamafactory-cli env` (or `git log -1` in the LLaMA-Factory checkout) gives it." in msg
    assert "do not say" not in msg

