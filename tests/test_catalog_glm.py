"""The GLM entries LLaMA-Factory 0.9.3-0.9.5 users fine-tune (issue 21): GLM-4.1V-9B-Thinking, GLM-4.5-Air,
GLM-4.5V, GLM-4.5 and GLM-4.6, the transformers releases that register their model types, and the GLM-V vision
tower the doctor now counts; and Seed-OSS-36B, another 2025 family LF registers.

Each count is compared with a reference that does not come from the doctor's reader:
- GLM-4.5V: the element count of the tensors stored in its 46 safetensors files (107,710,933,120, printed with its
  config in a public model-info report; catalogue entry `notes`), less the 45 x 128 float32
  ``e_score_correction_bias`` router entries that transformers keeps as buffers, not parameters; exact.
- GLM-4.5-Air: 106 B total (transformers' glm4_moe model doc, zai-org/GLM-4.5 README); that figure includes the
  multi-token-prediction layer transformers does not build, so 1 %.
- GLM-4.5 / GLM-4.6: 355 B total (the same doc; Xinference's GLM-4.6 spec), 1 %.
- GLM-4.6 with its vocabulary: a llama.cpp load of a GGUF converted from its checkpoint prints 356.786 B,
  the doctor's count plus the next-token-prediction layer it lists, to the printed digit.
- GLM-4.7-Flash: 30 B (transformers' glm4_moe_lite model doc: "a 30B-parameter mixture-of-experts model"), 1 %.
- Seed-OSS-36B-Instruct: 36 B (transformers' seed_oss model doc: "36B-parameter dense"), 1 %.
- GLM-4.1V-9B-Thinking: only its name's 9 B (the GLM-4-9B text model; 15 %, the catalogue's nominal bar), and,
  where torch is installed, transformers' meta-device build of the catalogue config, exact.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from finetune_doctor.facts.tfmodeltype import type_by_name, unregistered
from finetune_doctor.readers.model.catalog import catalog_arch, find_in_catalog
from finetune_doctor.readers.model.vision import glm4v_vision_params

ROOT = Path(__file__).resolve().parent.parent
GLM45V_STORED = 107_710_933_120          # safetensors census of zai-org/GLM-4.5V
GLM45V_ROUTER_BUFFERS = 45 * 128         # e_score_correction_bias of the 45 MoE layers: buffers in transformers


def _arch(name: str):
    entry, _how = find_in_catalog(name)
    assert entry is not None, name
    return entry, catalog_arch(entry, name)


def _within(got: int, billions: float, tol: float) -> bool:
    return abs(got / (billions * 1e9) - 1) <= tol


def test_glm_45v_is_sized_to_its_stored_tensors():
    entry, arch = _arch("zai-org/GLM-4.5V")
    assert arch.model_type == "glm4v_moe" and arch.dtype == "bfloat16" and arch.vocab_size == 151552
    assert arch.total_params() == GLM45V_STORED - GLM45V_ROUTER_BUFFERS == entry["published_exact"]
    assert dict(arch.extra_parts)["vision_tower"] == 858_681_856
    # its text model is GLM-4.5-Air's decoder: same count, element for element
    assert arch.total_params() - arch.extra_params == _arch("zai-org/GLM-4.5-Air")[1].total_params()


@pytest.mark.parametrize("name, billions", [("zai-org/GLM-4.5-Air", 106), ("zai-org/GLM-4.5", 355),
                                            ("zai-org/GLM-4.6", 355), ("GLM-4.5-Air", 106),
                                            ("ByteDance-Seed/Seed-OSS-36B-Instruct", 36),
                                            ("zai-org/GLM-4.7-Flash", 30)])
def test_glm_moe_totals_are_within_1_percent_of_the_published_size(name, billions):
    assert _within(_arch(name)[1].total_params(), billions, 0.01)


def test_glm_41v_text_model_is_its_nominal_9b_and_the_tower_is_counted():
    _entry, arch = _arch("THUDM/GLM-4.1V-9B-Thinking")     # the pre-rename organisation finds the same entry
    assert arch.model_type == "glm4v" and arch.layer_norms == 4 and not arch.o_bias
    assert _within(arch.total_params() - arch.extra_params, 9, 0.15)
    assert dict(arch.extra_parts)["vision_tower"] == 892_498_432


@pytest.mark.parametrize("name, experts, first_dense, moe_width, layers", [
    ("zai-org/GLM-4.5-Air", 128, 1, 1408, 46), ("zai-org/GLM-4.5V", 128, 1, 1408, 46),
    ("zai-org/GLM-4.5", 160, 3, 1536, 92), ("zai-org/GLM-4.6", 160, 3, 1536, 92),
    ("zai-org/GLM-4.7-Flash", 64, 1, 1536, 47)])
def test_glm_moe_layout(name, experts, first_dense, moe_width, layers):
    _entry, a = _arch(name)
    per_token = 4 if name.endswith("Flash") else 8
    assert (a.num_experts, a.num_experts_per_tok, a.first_k_dense, a.moe_intermediate_size,
            a.shared_expert_intermediate_size, a.num_layers) == (experts, per_token, first_dense, moe_width,
                                                                 moe_width, layers)


def test_glm_45_and_46_differ_only_in_context_and_46_dtype_and_vocab_are_read():
    """GLM-4.6's own config.json is not stored: its layout and dtype were read in two quantized conversions of its
    checkpoint (issue 21, session 11), its vocabulary in a llama.cpp load of a GGUF converted from it (session 14)."""
    e45, a45 = _arch("zai-org/GLM-4.5")
    e46, a46 = _arch("zai-org/GLM-4.6")
    assert (a45.max_position_embeddings, a46.max_position_embeddings) == (131072, 202752)
    assert a45.total_params() == a46.total_params()
    dt, voc = e46["provenance"]["torch_dtype"], e46["provenance"]["vocab_size"]
    assert dt["checked"] is True and dt["value"] == "bfloat16" and "GLM-4.6-FP8-dynamic" in dt["source"]
    assert voc["checked"] is True and voc["value"] == 151552 and "discussions/816" in voc["source"]
    assert e46["basis"].startswith("compared with two quantized conversions of its checkpoint, not with its own")
    assert all(e45["provenance"][f]["checked"] is True for f in ("torch_dtype", "vocab_size"))


# ik_llama.cpp discussion #816 (https://github.com/ikawrakow/ik_llama.cpp/discussions/816): a load of
# ubergarm/GLM-4.6-GGUF prints 'model params = 356.786 B' (llama.cpp prints the count in billions to 3 decimals)
# and lists the one next-token-prediction layer (blk.92) it keeps unused; the doctor does not count that layer
# (transformers does not build it).
GLM46_GGUF_BILLIONS = 356.786


def _glm46_mtp_layer() -> int:
    """Elements of blk.92 as the log lists them (sizes there: attn_q.bias 49,152 bytes = 12,288 f32, ffn_gate_inp
    3,276,800 bytes = 160 x 5120 f32, exp_probs_b 640 bytes = 160 f32): attention with q/k/v biases and per-head
    q/k norms, two layer norms, router and its bias, 160 routed + 1 shared expert of width 1536, the eh_proj
    (2h -> h) and its enorm/hnorm/shared_head_norm."""
    h, q, kv, e, m = 5120, 96 * 128, 8 * 128, 160, 1536
    attention = h * q + q + 2 * (h * kv + kv) + q * h + 2 * 128
    return attention + 2 * h + h * e + e + (e + 1) * 3 * h * m + 2 * h * h + 3 * h


def test_glm_46_count_with_its_vocabulary_is_what_llama_cpp_prints_for_its_gguf():
    """The vocabulary sets 2 x 5120 elements an id: the printed 356.786 B admits 151515-151612 only, so the
    recorded 151552 is checked against the stored tensors, GLM-4.7-Flash's 154880 (or 151365 tokens) is not."""
    _entry, arch = _arch("zai-org/GLM-4.6")
    assert arch.vocab_size == 151552
    total = arch.total_params() + _glm46_mtp_layer()
    assert round(total / 1e9, 3) == GLM46_GGUF_BILLIONS
    for other in (154880, 151365):
        assert round((total + (other - 151552) * 2 * 5120) / 1e9, 3) != GLM46_GGUF_BILLIONS


def test_glm_vision_tower_count_follows_its_fields():
    vc = {"hidden_size": 1536, "out_hidden_size": 4096, "intermediate_size": 10944, "depth": 24, "patch_size": 14,
          "temporal_patch_size": 2, "spatial_merge_size": 2, "image_size": 336, "in_channels": 3}
    base = glm4v_vision_params(vc)
    assert base == 858_681_856
    # one more block: two norms, qkv, proj and the O-wide gated MLP, no biases
    assert glm4v_vision_params({**vc, "depth": 25}) - base == 2 * 1536 + 4 * 1536 * 1536 + 3 * 1536 * 4096
    # a qkv bias adds 3E per block
    assert glm4v_vision_params({**vc, "attention_bias": True}) - base == 24 * 3 * 1536


@pytest.mark.parametrize("mtype, older, first", [("glm4v", "4.52.4", "4.53.0"), ("glm4_moe", "4.53.3", "4.54.0"),
                                                 ("glm4v_moe", "4.55.4", "4.56.0"), ("seed_oss", "4.55.0", "4.56.0")])
def test_the_first_transformers_release_of_each_glm_type(mtype, older, first):
    hit = unregistered(mtype, older, True, "--transformers")
    assert hit is not None and hit["since"] == first and hit["source_of_since"]
    assert unregistered(mtype, first, True, "--transformers") is None


def test_glm_v_names_state_their_model_type():
    assert type_by_name("zai-org/GLM-4.1V-9B-Base") == "glm4v"
    assert type_by_name("zai-org/GLM-4.5V-FP8") == "glm4v_moe"
    assert type_by_name("zai-org/GLM-4.5V") == "glm4v_moe"
    assert type_by_name("zai-org/GLM-4.5") is None


def _meta_count(cfg):
    spec = importlib.util.spec_from_file_location("catalog_check", ROOT / "scripts" / "catalog_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.meta_count(cfg)


@pytest.mark.parametrize("name", ["zai-org/GLM-4.5V", "zai-org/GLM-4.1V-9B-Thinking", "zai-org/GLM-4.5-Air",
                                  "ByteDance-Seed/Seed-OSS-36B-Instruct", "zai-org/GLM-4.7-Flash"])
def test_the_doctor_counts_what_transformers_builds(name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    entry, arch = _arch(name)
    assert arch.total_params() == _meta_count(entry["config"])


def test_a_glm_45_air_lora_run_is_sized_offline_without_an_open_model(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "air.yaml").write_text("model_name_or_path: zai-org/GLM-4.5-Air\nstage: sft\ndo_train: true\n"
                                       "finetuning_type: lora\ntemplate: glm4_moe\ndataset: alpaca_en_demo\n"
                                       "cutoff_len: 2048\nper_device_train_batch_size: 1\nbf16: true\n"
                                       "output_dir: out\n")
    r = CliRunner().invoke(main, ["estimate", "air.yaml", "--gpu", "8xH100-80GB", "--offline", "--format", "json"])
    d = json.loads(r.output)
    assert d["run"]["params_b"] == pytest.approx(106.85, abs=0.01)
    assert d["run"]["precision"]["weights"] == "bfloat16"
    assert not [a for a in d.get("assumptions", []) if a["name"] == "model"]
