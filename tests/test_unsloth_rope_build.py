"""unsloth's version string 2024.7 spans builds with and without the dynamic RoPE change (run/savers.py
`UNSLOTH_AMBIGUOUS_ROPE_RELEASE`: main from 2024-07-02 to 2024-07-24, 54dd81de67 on 2024-07-18): the window form is
kept as the value and the later builds' form is weighed as the ``unsloth-rope-build`` assumption
(facts/assumestack.py). Mistral-Nemo (1,024,000 positions) makes the difference plain: hand-computed below."""

from __future__ import annotations

from pathlib import Path

import pytest

GIB = 2 ** 30


def _assumptions(tmp_path: Path, unsloth: str, model: str = "mistralai/Mistral-Nemo-Instruct-2407") -> dict:
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    cfg = tmp_path / "train.yaml"
    cfg.write_text(f"model_name_or_path: {model}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "quantization_bit: 4\nuse_unsloth: true\nuse_unsloth_gc: true\nlora_target: all\n"
                   "cutoff_len: 2048\nper_device_train_batch_size: 2\nfp16: true\ndataset: alpaca_en_demo\n"
                   "template: mistral\noutput_dir: out\n", encoding="utf-8")
    env = tmp_path / "freeze.txt"
    env.write_text(f"unsloth=={unsloth}\ntorch==2.3.1\n", encoding="utf-8")
    opts = Options(command="estimate", paths=(str(cfg),), gpu="1xT4-16GB", offline=True, env_file=str(env))
    asm = assemble_config(str(cfg), (), opts)
    return {"asm": asm, **{a.name: a for a in asm.assumptions}}


def test_2024_7_weighs_the_dynamic_rope_build(tmp_path):
    got = _assumptions(tmp_path, "2024.7")
    asm, a = got["asm"], got["unsloth-rope-build"]
    assert asm.run.unsloth_rope_positions == 1024000      # max(cutoff_len, the checkpoint's window)
    (label,) = a.alternatives
    # by hand: 40 layers x (cos + sin) x 1,024,000 positions x head_dim 128 x 2 B (fp16) = 19.53 GiB of tables
    tables = 40 * 2 * 1024000 * 128 * 2
    from finetune_doctor.analyzers.memory import estimate

    window, dynamic = estimate(asm.run, asm.hw), estimate(asm.run.with_(unsloth_rope_positions=0), asm.hw)
    assert window.peak_allocated - dynamic.peak_allocated == pytest.approx(tables / GIB, rel=1e-6)
    assert a.effect_gib[label] == pytest.approx(dynamic.total, rel=1e-6)
    assert a.effect_verdict[label] != "oom" and a.moves_verdict


@pytest.mark.parametrize("release", ["2024.6", "2024.8"])
def test_other_releases_are_not_ambiguous(tmp_path, release):
    got = _assumptions(tmp_path, release)
    assert "unsloth-rope-build" not in got
    assert got["asm"].run.unsloth_rope_positions == (1024000 if release == "2024.6" else 0)
