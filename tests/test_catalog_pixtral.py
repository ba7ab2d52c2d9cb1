"""Pixtral-12B in the bundled catalogue (issue 21; trial 10 case 04: a new user's run on it got "unknown model").

mistral-community/pixtral-12b is the HF-format release LLaMA-Factory registers (extras/constants.py "Pixtral-12B",
template pixtral): a ``LlavaForConditionalGeneration`` whose text config is Mistral-Nemo's decoder and whose
vision config is model_type 'pixtral' naming none of its widths. The references here do not come from the
doctor's reader:
- transformers 5.6.0's meta-device build of the catalogue config (run once, numbers below; rebuilt by the last
  test where torch and transformers are installed): 12,682,739,712 = text 12,247,782,400 + PixtralVisionModel
  403,489,792 + LlavaMultiModalProjector 31,467,520;
- the hub tree's six safetensors shards (4.99+4.96+4.91+4.91+4.26+1.34 GB at commit 1742abe, in the entry's
  published_basis): 25.37 GB, 2 bytes an element;
- the catalogue's own Mistral-Nemo entry, whose decoder the text config is.
Before this entry the doctor's llava wrapper counted every tower as CLIP: 88.8 M for the Pixtral encoder and a
768-wide projector, 2.5 % under.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from finetune_doctor.readers.model.catalog import catalog_arch, find_in_catalog
from finetune_doctor.readers.model.generic import arch_from_config

TOTAL, TEXT, TOWER, PROJECTOR = 12_682_739_712, 12_247_782_400, 403_489_792, 31_467_520


def _arch(name: str):
    entry, _how = find_in_catalog(name)
    assert entry is not None, name
    return entry, catalog_arch(entry, name)


@pytest.mark.parametrize("name", ["mistral-community/pixtral-12b", "AI-ModelScope/pixtral-12b", "pixtral-12b"])
def test_pixtral_12b_is_found_by_the_names_llamafactory_registers(name):
    entry, arch = _arch(name)
    assert entry["id"] == "mistral-community/pixtral-12b"
    assert arch.total_params() == TOTAL


def test_pixtral_12b_counts_its_pixtral_tower_and_projector_as_transformers_builds_them():
    entry, arch = _arch("mistral-community/pixtral-12b")
    assert arch.model_type == "llava" and arch.dtype == "bfloat16" and arch.vocab_size == 131072
    assert dict(arch.extra_parts) == {"vision_tower": TOWER, "projector": PROJECTOR}
    assert arch.total_params() - arch.extra_params == TEXT
    # the text model is Mistral-Nemo's decoder, element for element (an independent catalogue entry)
    assert _arch("mistralai/Mistral-Nemo-Instruct-2407")[1].total_params() == TEXT
    assert entry["provenance"]["torch_dtype"] == {"value": "bfloat16", "from": "config.json", "field": "torch_dtype",
                                                  "source": entry["read_from"], "checked": True}
    assert entry["provenance"]["vocab_size"]["field"] == "text_config.vocab_size"


def test_the_stored_shards_hold_the_counted_elements_at_two_bytes():
    entry, arch = _arch("mistral-community/pixtral-12b")
    shards = [float(x) for x in re.search(r"shards of ([\d.+]+) GB", entry["published_basis"]).group(1).split("+")]
    assert len(shards) == 6
    # each size is rounded to 0.01 GB on the hub page
    assert abs(sum(shards) * 1e9 - 2 * arch.total_params()) <= len(shards) * 0.005e9


def test_a_pixtral_tower_takes_pixtralvisionconfig_defaults_for_what_it_leaves_out():
    entry, _arch_ = _arch("mistral-community/pixtral-12b")
    cfg = entry["config"]
    spelled = {**cfg, "vision_config": {**cfg["vision_config"], "hidden_size": 1024, "intermediate_size": 4096,
                                        "num_hidden_layers": 24, "num_attention_heads": 16, "num_channels": 3}}
    assert arch_from_config(spelled, "x", "test").total_params() == TOTAL
    # one more encoder layer: two RMSNorms, q/k/v/o and the gated MLP, no biases (PixtralAttentionLayer)
    deeper = {**cfg, "vision_config": {**cfg["vision_config"], "num_hidden_layers": 25}}
    assert arch_from_config(deeper, "x", "test").total_params() - TOTAL == 2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096


def test_a_llava_with_a_clip_tower_is_still_counted_as_clip():
    # llava-1.5-7b: transformers' meta build of the catalogue entry (benchmarks/results/catalog_check.md)
    assert _arch("llava-hf/llava-1.5-7b-hf")[1].total_params() == 7_063_427_072


def test_estimate_sizes_a_pixtral_lora_run_offline(tmp_path, monkeypatch):
    """The trial's shape of run (LLaMA-Factory's examples/train_lora style, template pixtral): an estimate
    instead of 'unknown model ... not in the bundled catalog' (exit 2)."""
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text("model_name_or_path: mistral-community/pixtral-12b\nimage_max_pixels: 262144\n"
                                     "stage: sft\ndo_train: true\nfinetuning_type: lora\nlora_target: all\n"
                                     "dataset: mllm_demo\ntemplate: pixtral\ncutoff_len: 2048\noutput_dir: out\n"
                                     "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nbf16: true\n")
    r = CliRunner().invoke(main, ["estimate", "p.yaml", "--gpu", "A100-80GB", "--offline", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["run"]["model"] == "mistral-community/pixtral-12b" and d["run"]["params_b"] == pytest.approx(12.68)
    # 12.68 B frozen bf16 elements (the tower and projector too: LF freezes them by default) plus the LoRA adapters
    assert d["memory"]["per_gpu_gib"]["weights"] == pytest.approx(TOTAL * 2 / 2**30, abs=0.2)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
                    reason="needs torch and transformers for the meta-device build")
def test_transformers_builds_the_catalogue_config_to_the_same_count():
    import torch
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    entry, _ = find_in_catalog("mistral-community/pixtral-12b")
    cfg = LlavaConfig(**{k: v for k, v in entry["config"].items() if k != "architectures"})
    with torch.device("meta"):
        model = LlavaForConditionalGeneration(cfg)
    parts = {n: sum(p.numel() for p in m.parameters()) for n, m in
             (("tower", model.model.vision_tower), ("projector", model.model.multi_modal_projector))}
    assert (sum(p.numel() for p in model.parameters()), parts["tower"], parts["projector"]) == (TOTAL, TOWER,
                                                                                                PROJECTOR)

