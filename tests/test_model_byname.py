"""Sizing by name, never silently (issue 21): a name-based match keeps the family, the size class and MoE-vs-dense
the name states; a folder named plainly after one catalogue model is sized as it, with an assumption; the template
and image_*/video_* keys narrow the family; shell variables and unreadable paths are named as such."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.model import modelcfg
from finetune_doctor.readers.model.byname import infer, multimodal_hint, same_class, traits
from finetune_doctor.readers.model.catalog import catalog_arch, find_in_catalog
from finetune_doctor.readers.model.errors import ModelUnresolved
from finetune_doctor.readers.model.modelcfg import load_arch

YAML = """\
model_name_or_path: {model}
stage: sft
do_train: true
finetuning_type: lora
template: {template}
dataset: alpaca_en_demo
cutoff_len: 2048
per_device_train_batch_size: 2
bf16: true
output_dir: saves/out
"""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


def _params(repo: str) -> int:
    entry, _ = find_in_catalog(repo)
    return catalog_arch(entry, repo).total_params()


def test_a_57b_moe_folder_is_never_sized_as_a_dense_7b():
    name = "/data/models/Qwen2-57B-A14B-Instruct"
    assert traits(name).active == "a14b" and traits(name).size == "57b"
    assert not same_class(name, find_in_catalog("Qwen/Qwen2-7B")[0])
    assert not same_class(name, find_in_catalog("Qwen/Qwen2.5-14B")[0])
    # the catalogue holds Qwen2-57B-A14B since trial 16: the folder is sized as that MoE entry, never a dense one
    assert infer(name).entry["id"] == "Qwen/Qwen2-57B-A14B"
    assert load_arch(name)[0].num_experts == 64
    other = "/data/models/Qwen2-47B-A9B-Instruct"   # a MoE the catalogue lacks: unresolved
    assert infer(other) is None
    with pytest.raises(ModelUnresolved) as ei:
        load_arch(other)
    # no suggestion of another size class either
    assert "Qwen/Qwen2-7B" not in ei.value.message and "Qwen2.5-14B" not in ei.value.message


def test_a_folder_named_after_one_catalogue_model_is_sized_as_it_with_an_assumption():
    out: list = []
    arch, doc = load_arch("/data/model/Qwen2.5-7b-sft-v3", assumptions=out)
    assert doc is None and arch.source_kind == "catalog"
    assert arch.total_params() == _params("Qwen/Qwen2.5-7B")
    assert [(a.name, a.value, a.source, a.resolve_with) for a in out] == [
        ("model", "Qwen/Qwen2.5-7B", "folder name", "--model-config")]
    assert "folder name '/data/model/Qwen2.5-7b-sft-v3'" in arch.notes


def test_an_ambiguous_folder_name_is_not_guessed():
    # Mistral-7B v0.1 and v0.3 differ in vocabulary (32,000 vs 32,768): a folder 'mistral-7b-sft' could be either
    assert infer("/data/model/mistral-7b-sft-v2") is None
    with pytest.raises(ModelUnresolved):
        load_arch("/data/model/mistral-7b-sft-v2")
    # the catalogue's own alias 'mistral-7b' (v0.1) still serves the plain name, and says it is an assumption
    out: list = []
    load_arch("/data/model/mistral-7b-sft", assumptions=out)
    assert [(a.value, a.source) for a in out] == [("mistralai/Mistral-7B-v0.1", "folder name")]
    assert infer("/data/model/my-finetune") is None   # a name without a size decides nothing


def test_template_and_image_keys_narrow_to_the_vision_model():
    out: list = []
    arch, _ = load_arch("/data/model/Qwen2-7B-sft", template="qwen2_vl", multimodal="template qwen2_vl",
                        assumptions=out)
    assert arch.model_type == "qwen2_vl" and arch.extra_params > 0
    assert out[0].value == "Qwen/Qwen2-VL-7B-Instruct" and out[0].source == "folder name"
    assert "not the text-only Qwen/Qwen2-7B" in arch.notes
    # without the template the same folder is the text model
    text, _ = load_arch("/data/model/Qwen2-7B-sft")
    assert text.model_type == "qwen2" and text.extra_params == 0
    assert multimodal_hint({"template": "qwen2_vl"}) == "template qwen2_vl"
    assert multimodal_hint({"template": "qwen", "video_fps": 2.0}) == "video_fps is set"
    assert multimodal_hint({"template": "gemma3"}) is None   # gemma3 also serves the text-only 1B


def test_an_exact_repo_id_is_never_replaced():
    out: list = []
    arch, _ = load_arch("Qwen/Qwen2-7B", template="qwen2_vl", multimodal="template qwen2_vl", assumptions=out)
    assert arch.model_type == "qwen2" and out == []


def test_shell_variables_are_named():
    out: list = []
    arch, _ = load_arch("${model_dir}/Qwen2.5-7B", assumptions=out)
    assert "unexpanded shell variable ${model_dir}" in arch.notes
    assert out[0].value == "Qwen/Qwen2.5-7B" and out[0].source == "folder name"
    with pytest.raises(ModelUnresolved) as ei:
        load_arch("$MODEL")
    assert "unexpanded shell variable $MODEL" in ei.value.message and "did you mean" not in ei.value.message


def test_an_unreadable_path_is_named(tmp_path, monkeypatch):
    d = tmp_path / "models" / "private-model"
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    real = os.access
    monkeypatch.setattr(modelcfg.os, "access", lambda p, m: False if str(p) == str(d) else real(p, m))
    with pytest.raises(ModelUnresolved) as ei:
        load_arch(str(d))
    assert f"{d} exists but is not readable here (permission denied)" in ei.value.message


def test_check_reports_the_assumption_in_json(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(YAML.format(model="/data/model/Qwen2.5-7b-sft-v3", template="qwen"))
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--no-data", "--format", "json"])
    d = json.loads(r.output)
    assert d["model"]["source"] == "catalog" and d["run"]["params_b"] == pytest.approx(7.62, abs=0.01)
    (model,) = [a for a in d["assumptions"] if a["name"] == "model"]
    assert {"name": "model", "value": "Qwen/Qwen2.5-7B", "source": "folder name",
            "resolve_with": "--model-config"}.items() <= model.items()
    cfg.write_text(YAML.format(model="/data/models/Qwen2-47B-A9B-Instruct", template="qwen"))
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--no-data", "--format", "json"])
    d = json.loads(r.output)
    # a local folder that is not on this machine and names no catalogue model: no memory verdict, an error
    # (trial 16), as under --strict
    assert d["memory"] is None and [f["name"] for f in d["findings"] if f["name"] == "model-unresolved"]
    assert r.exit_code == 1
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--no-data", "--format", "json",
                                  "--strict"])
    d = json.loads(r.output)
    assert d["memory"] is None and [f["name"] for f in d["findings"] if f["name"] == "model-unresolved"]


def test_a_name_that_says_another_architecture_is_not_sized_as_the_base():
    # LLaMA Pro's block expansion (LF scripts/llama_pro.py writes models/llama3-8b-pro) adds decoder layers
    assert infer("models/llama3-8b-pro") is None and infer("/x/Qwen2-7B-moe-upcycled") is None
    assert infer("/x/Qwen2.5-7B-to-14B") is None
    with pytest.raises(ModelUnresolved):
        load_arch("models/llama3-8b-pro")


def test_a_name_without_a_family_word_takes_the_templates_family():
    r = infer("/data/output/sft-7b", template="gemma")
    assert r is not None and r.entry["id"] == "google/gemma-7b" and "template gemma" in r.why
    assert infer("/data/output/sft-7b") is None                     # no family, no template: nothing decided
    assert infer("/data/output/sft-8b", template="llama3") is None  # Llama 3 and 3.1 share the template
