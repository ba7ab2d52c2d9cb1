"""A LLaMA Pro checkpoint that is not on this machine (issue #21: LF's own example names `models/llama3-8b-pro`,
which `expand.sh` writes from Meta-Llama-3-8B-Instruct with --num_expand 8, and got no verdict offline).

The expanded model is the base with `freeze_trainable_layers` decoder blocks added (LF model/adapter.py:80-88: the
trained blocks are every stride-th one, the inserted copies exactly when --num_expand equals it), recorded as the
`llama-pro-blocks` assumption. Reference parameter count by hand from Meta-Llama-3-8B's config.json (hidden 4096,
intermediate 14336, 32 layers, 32 heads, 8 KV heads, vocab 128256, untied): per block q,o 4096² each, k,v 4096x1024
each, gate/up/down 3x4096x14336, two RMSNorm weights 2x4096 = 218,112,000; base 8,030,261,248; +8 blocks =
9,775,157,248."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.model.byname import expansion_base
from finetune_doctor.readers.model.modelcfg import load_arch

EXAMPLE = Path(__file__).resolve().parent.parent / "fixtures/llamafactory/examples/extras/llama_pro/llama3_freeze_sft.yaml"
BLOCK = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


@pytest.mark.parametrize("name, base", [
    ("models/llama3-8b-pro", "models/llama3-8b"),
    ("/data/Llama-3-8B-Instruct-pro", "/data/Llama-3-8B-Instruct"),
    ("ckpt/qwen2.5-7b-expanded", "ckpt/qwen2.5-7b"),
    ("Qwen2-7B-moe", None),             # upcycling is no block expansion
    ("models/llama3-8b", None),         # nothing after the size
    ("models/pro-model", None),         # no size
])
def test_expansion_base(name, base):
    assert expansion_base(name) == base


def test_llama_pro_folder_sized_as_base_plus_added_blocks(tmp_path):
    asm: list = []
    arch, doc = load_arch("models/llama3-8b-pro", base_dir=str(tmp_path), offline=True, llama_pro_layers=8,
                          assumptions=asm)
    assert doc is None and arch.num_layers == 40 and arch.hidden_size == 4096
    blocks = [a for a in asm if a.name == "llama-pro-blocks"]
    assert len(blocks) == 1 and blocks[0].value == 40 and "--model-config" in blocks[0].resolve_with


def test_without_use_llama_pro_the_folder_stays_unknown(tmp_path):
    from finetune_doctor.readers.model.errors import ModelUnresolved

    with pytest.raises(ModelUnresolved):
        load_arch("models/llama3-8b-pro", base_dir=str(tmp_path), offline=True, assumptions=[])


def test_lf_example_gets_a_verdict_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["check", str(EXAMPLE), "--gpu", "A100-80GB", "--format", "json"])
    rep = json.loads(res.output)
    assert rep["memory"]["verdict"] in ("fits", "at-risk", "oom")
    # 9,775,157,248 parameters by hand (module docstring), the report's rounding to 0.01 B
    assert rep["run"]["params_b"] == pytest.approx((8_030_261_248 + 8 * BLOCK) / 1e9, abs=0.006)
    names = [a["name"] for a in rep["assumptions"]]
    assert "llama-pro-blocks" in names and "model" in names


def test_same_size_as_the_expanded_checkpoints_own_config(tmp_path, monkeypatch):
    """fixtures/models/llama3-8b-pro/config.json is an output of LF's expansion (40 layers): given it, the run is
    sized from it; without it, from the name. The two must agree on the parameter count."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.chdir(tmp_path)
    real = Path(__file__).resolve().parent.parent / "fixtures/models/llama3-8b-pro"
    got = {}
    for extra in ([], ["--model-config", str(real)]):
        res = CliRunner().invoke(main, ["check", str(EXAMPLE), "--gpu", "A100-80GB", "--format", "json", *extra])
        got[bool(extra)] = json.loads(res.output)["run"]["params_b"]
    assert got[False] == got[True]
