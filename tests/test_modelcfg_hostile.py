"""Hostile and broken config.json files: one InputError naming the file, the line and the key; nothing hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from finetune_doctor.readers.model.errors import ModelConfigInvalid
from finetune_doctor.readers.model.modelcfg import load_arch

BASE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "bfloat16"}


def _write(tmp_path: Path, cfg, raw: str | None = None) -> Path:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(raw if raw is not None else json.dumps(cfg, indent=1))
    return d


@pytest.mark.parametrize("key,value,words", [
    ("num_attention_heads", 0, "is 0, below 1"),
    ("hidden_size", -64, "is -64, below 1"),
    ("num_hidden_layers", 10_000_000, "exceeds 16384"),
    ("vocab_size", 10 ** 30, "exceeds"),
    ("intermediate_size", "big", "not an integer"),
    ("num_key_value_heads", 8, "more than its 4 attention heads"),
    ("num_hidden_layers", 2.5, "not an integer"),
    ("num_attention_heads", True, "not an integer"),
])
def test_bad_sizes_name_file_line_and_key(tmp_path, key, value, words):
    d = _write(tmp_path, {**BASE, key: value})
    with pytest.raises(ModelConfigInvalid) as ei:
        load_arch(str(d))
    err = ei.value
    assert words in err.message and err.key == key and err.file == str(d / "config.json")
    assert err.line == next(i for i, t in enumerate((d / "config.json").read_text().splitlines(), 1) if f'"{key}"' in t)


def test_missing_keys_and_unknown_type(tmp_path):
    # an unknown type has no class defaults to fill a missing size (LlamaConfig would default vocab_size)
    cfg = {**{k: v for k, v in BASE.items() if k != "vocab_size"}, "model_type": "brand_new_thing"}
    with pytest.raises(ModelConfigInvalid, match="has no 'vocab_size'") as ei:
        load_arch(str(_write(tmp_path, cfg)))
    assert ei.value.key == "vocab_size"
    with pytest.raises(ModelConfigInvalid, match="has no 'hidden_size'"):
        load_arch(str(_write(tmp_path, {"model_type": "brand_new_thing", "d_x": 3})))


@pytest.mark.parametrize("raw,words", [
    ("{not json", "not valid JSON"),
    ('{"hidden_size": Infinity}', "exceeds what it can hold"),
    ('{"hidden_size": 1' + "0" * 5000 + "}", "exceeds what it can hold"),
    ("[" * 100_000 + "]" * 100_000, "nests deeper"),
    ("[1, 2]", "JSON object"),
    ("", "not valid JSON"),
])
def test_unparsable_files(tmp_path, raw, words):
    with pytest.raises(ModelConfigInvalid, match=words):
        load_arch(str(_write(tmp_path, None, raw)))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_a_fifo_is_not_read(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    os.mkfifo(d / "config.json")
    with pytest.raises(ModelConfigInvalid, match="not a regular file"):
        load_arch(str(d / "config.json"))


def test_deep_model_costs_nothing_grouped_by_layer_kind(tmp_path):
    """Per-layer arithmetic is per layer kind: 16,384 MoE layers cost what 2 do."""
    from finetune_doctor.readers.model.generic import arch_from_config

    cfg = {**BASE, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "head_dim": 16, "num_hidden_layers": 16384, "mlp_only_layers": [0, 5]}
    t0 = time.perf_counter()
    arch = arch_from_config(cfg, "x", "s")
    small = arch_from_config({**cfg, "num_hidden_layers": 6}, "x", "s")
    assert arch.total_params() - small.total_params() == (16384 - 6) * arch.kind_params(("full", "moe"))
    assert time.perf_counter() - t0 < 1.0


def test_lint_on_a_ten_million_layer_config_returns_quickly(tmp_path):
    d = _write(tmp_path, {**BASE, "num_hidden_layers": 10_000_000})
    y = tmp_path / "train.yaml"
    y.write_text(f"model_name_or_path: {d}\nstage: sft\nfinetuning_type: lora\nlora_target: all\n")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "finetune_doctor.cli", "lint", str(y)], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1"})
    assert time.monotonic() - t0 < 30 and "Traceback" not in out.stderr, out.stderr
