"""load_arch's search order (local, --model-config, HF / ModelScope / openMind caches, doctor's cache, catalog,
hub download) and the download's failure modes. The hub is mocked: no test reaches the network."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from finetune_doctor.readers.model import catalog as catalog_mod
from finetune_doctor.readers.model import hub
from finetune_doctor.readers.model.errors import ModelUnresolved
from finetune_doctor.readers.model.modelcfg import load_arch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
QWEN05 = FIXTURES / "Qwen2.5-0.5B-Instruct" / "config.json"
QWEN05_PARAMS = 494_032_768  # Qwen2.5-0.5B safetensors metadata on the hub


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE",
                "USE_MODELSCOPE_HUB", "USE_OPENMIND_HUB", "MODELSCOPE_CACHE", "OPENMIND_HUB_CACHE",
                "FINETUNE_DOCTOR_NO_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


def _hf_layout(root: Path, repo: str, src: Path, rev: str = "c" * 40) -> Path:
    snap = root / ("models--" + repo.replace("/", "--")) / "snapshots" / rev
    snap.mkdir(parents=True)
    shutil.copy(src, snap / "config.json")
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text(rev)
    return snap / "config.json"


REPO = "acme/qwen-mini"  # not in the catalog: only a file can resolve it


def test_local_wins_and_says_local(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(QWEN05, d / "config.json")
    arch, doc = load_arch(str(d))
    assert arch.source_kind == "local" and doc.path == str(d / "config.json")
    assert arch.total_params() == QWEN05_PARAMS


def test_model_config_file_or_dir(tmp_path):
    with pytest.raises(ModelUnresolved) as ei:
        load_arch(REPO)
    assert ei.value.fix.startswith(f"huggingface-cli download {REPO} config.json")
    assert "--model-config" in ei.value.message and ei.value.model == REPO
    arch, doc = load_arch(REPO, model_config=str(QWEN05))
    assert arch.source_kind == "model-config" and arch.total_params() == QWEN05_PARAMS
    arch2, _ = load_arch(REPO, model_config=str(QWEN05.parent))
    assert arch2.source_kind == "model-config"
    with pytest.raises(ModelUnresolved, match="no such file"):
        load_arch(REPO, model_config=str(tmp_path / "nope.json"))


@pytest.mark.parametrize("var", ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "cache_dir"])
def test_hf_cache_under_each_variable(tmp_path, monkeypatch, var):
    root = tmp_path / "c"
    _hf_layout(root / "hub" if var == "HF_HOME" else root, REPO, QWEN05)
    kw = {}
    if var == "cache_dir":
        kw["cache_dir"] = str(root)
    else:
        monkeypatch.setenv(var, str(root))
    arch, doc = load_arch(REPO, **kw)
    assert arch.source_kind == "hf-cache" and "/snapshots/" in doc.path


def test_modelscope_and_openmind_caches_only_under_their_switches(tmp_path, monkeypatch):
    ms = tmp_path / "ms"
    (ms / "hub" / "models" / "acme" / "qwen-mini").mkdir(parents=True)
    shutil.copy(QWEN05, ms / "hub" / "models" / "acme" / "qwen-mini" / "config.json")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(ms))
    with pytest.raises(ModelUnresolved):
        load_arch(REPO)
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    assert load_arch(REPO)[0].source_kind == "modelscope-cache"
    monkeypatch.delenv("USE_MODELSCOPE_HUB")
    om = tmp_path / "om"
    _hf_layout(om, REPO, QWEN05)
    monkeypatch.setenv("OPENMIND_HUB_CACHE", str(om))
    monkeypatch.setenv("USE_OPENMIND_HUB", "true")
    assert load_arch(REPO)[0].source_kind == "openmind-cache"


def test_modelscope_dotted_names_written_with_underscores(tmp_path, monkeypatch):
    root = tmp_path / "ms" / "hub" / "Qwen" / "Qwen2___5-0___5B-Instruct"
    root.mkdir(parents=True)
    shutil.copy(QWEN05, root / "config.json")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms"))
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "y")
    arch, _ = load_arch("Qwen/Qwen2.5-0.5B-Instruct")
    assert arch.source_kind == "modelscope-cache"


def test_catalog_after_caches(tmp_path, monkeypatch):
    arch, doc = load_arch("Qwen/Qwen2.5-7B-Instruct")
    assert doc is None and arch.source_kind == "catalog"
    _hf_layout(tmp_path / "hf", "Qwen/Qwen2.5-7B-Instruct", QWEN05)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    assert load_arch("Qwen/Qwen2.5-7B-Instruct")[0].source_kind == "hf-cache"


# ---- the download -------------------------------------------------------------------------------------------

def _fake_fetch(calls: list, content: Path = QWEN05):
    def fetch(repo_id, filename, root, timeout_s):
        calls.append((repo_id, filename))
        if filename != "config.json":
            raise FileNotFoundError(filename)
        return str(_hf_layout(Path(root), repo_id, content))
    return fetch


def test_download_only_when_allowed_then_cached(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(hub, "_hf_fetch", _fake_fetch(calls))
    with pytest.raises(ModelUnresolved):
        load_arch(REPO)                       # lint's call: no download allowed
    assert calls == []
    arch, doc = load_arch(REPO, allow_download=True)
    assert arch.source_kind == "hub" and calls == [(REPO, "config.json")]
    assert doc.path.startswith(str(tmp_path / "xdg" / "finetune-doctor" / "hub"))
    arch2, _ = load_arch(REPO)                 # second run, no download allowed: the doctor's cache serves it
    assert arch2.source_kind == "hub" and len(calls) == 1 and arch2.total_params() == QWEN05_PARAMS


def test_download_of_a_multimodal_model_also_asks_for_processor_configs(monkeypatch):
    calls: list = []
    monkeypatch.setattr(hub, "_hf_fetch", _fake_fetch(calls, FIXTURES / "Qwen3-VL-4B-Instruct" / "config.json"))
    load_arch(REPO, allow_download=True)
    assert [f for _, f in calls] == ["config.json", "preprocessor_config.json", "processor_config.json"]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_offline_forbids_the_download(monkeypatch, how):
    calls: list = []
    monkeypatch.setattr(hub, "_hf_fetch", _fake_fetch(calls))
    if how == "env":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnresolved) as ei:
        load_arch(REPO, allow_download=True, offline=how == "flag")
    assert calls == [] and ("--offline" if how == "flag" else "HF_HUB_OFFLINE=1") in ei.value.message


def test_failed_download_falls_back_with_the_reason(monkeypatch):
    def boom(*a, **k):
        raise OSError("Connection refused")
    monkeypatch.setattr(hub, "_hf_fetch", boom)
    with pytest.raises(ModelUnresolved) as ei:
        load_arch(REPO, allow_download=True)
    assert "failed: OSError: Connection refused" in ei.value.message


def test_hung_download_times_out(monkeypatch):
    release = threading.Event()

    def hang(*a, **k):
        release.wait(30)
        raise OSError("late")
    monkeypatch.setattr(hub, "_hf_fetch", hang)
    t0 = time.monotonic()
    with pytest.raises(ModelUnresolved, match="timed out after 0.3 s"):
        load_arch(REPO, allow_download=True, timeout_s=0.3)
    assert time.monotonic() - t0 < 5
    release.set()


def test_missing_client_is_a_note(monkeypatch):
    def missing(*a, **k):
        raise ModuleNotFoundError("No module named 'huggingface_hub'")
    monkeypatch.setattr(hub, "_hf_fetch", missing)
    with pytest.raises(ModelUnresolved, match=r"huggingface_hub is not installed"):
        load_arch(REPO, allow_download=True)


def test_modelscope_download_under_its_switch(monkeypatch):
    calls: list = []

    def ms_fetch(repo_id, filename, root, timeout_s):
        calls.append(filename)
        f = Path(root) / repo_id / filename
        f.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QWEN05, f)
        return str(f)
    monkeypatch.setattr(hub, "_ms_fetch", ms_fetch)
    monkeypatch.setattr(hub, "_hf_fetch", lambda *a, **k: pytest.fail("HF hub used under USE_MODELSCOPE_HUB"))
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    arch, _ = load_arch(REPO, allow_download=True)
    assert arch.source_kind == "hub" and calls == ["config.json"]
    assert load_arch(REPO)[0].source_kind == "hub"  # cached


# ---- catalog aliases ----------------------------------------------------------------------------------------

def test_same_architecture_as_entry(monkeypatch):
    """The alias form the catalog engineer writes: another entry's architecture plus config_overrides."""
    base = next(e for e in catalog_mod.catalog_entries() if e["id"] == "meta-llama/Llama-3.3-70B-Instruct")
    alias = {"id": "example-org/Distill-Llama-70B-Test", "aliases": ["Distill-Llama-70B-Test"],
             "same_architecture_as": "meta-llama/Llama-3.3-70B-Instruct",
             "source": "https://huggingface.co/example-org/Distill-Llama-70B-Test/blob/main/config.json",
             "basis": "distilled into Llama-3.3-70B-Instruct's weights", "config_overrides": {"vocab_size": 128256}}
    entries = catalog_mod.catalog_entries() + (alias,)
    monkeypatch.setattr(catalog_mod, "catalog_entries", lambda: entries)
    catalog_mod._index.cache_clear()
    try:
        arch, _ = load_arch("example-org/Distill-Llama-70B-Test")
        ref = catalog_mod.catalog_arch(base)
        assert arch.total_params() == ref.total_params() and arch.source_kind == "catalog"
        assert "architecture of meta-llama/Llama-3.3-70B-Instruct (catalog alias" in arch.notes
        assert arch.source.endswith("Distill-Llama-70B-Test/blob/main/config.json")
        alias["config_overrides"] = {"vocab_size": 128256 + 1000}
        catalog_mod._index.cache_clear()
        bigger, _ = load_arch("Distill-Llama-70B-Test")
        assert bigger.total_params() - ref.total_params() == 2 * 1000 * 8192  # embed + untied lm_head
    finally:
        catalog_mod._index.cache_clear()


def test_unknown_model_error_is_typed_and_carries_the_fix():
    with pytest.raises(ModelUnresolved) as ei:
        load_arch("/no/such/dir/my-model")
    assert ei.value.fix == "--model-config path/to/config.json" and ei.value.file is None


@pytest.mark.slow
def test_exact_auto_builds_on_meta_only_outside_the_verified_types():
    """``exact="auto"``: a type outside GENERIC_VERIFIED (Video-LLaVA, whose LoRA ``all`` also wraps its towers)
    gets the meta-device counts, a verified one (Qwen2.5) keeps the generic decoder's, a remote-code type
    transformers does not ship (ChatGLM3) keeps the generic answer with a note."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from finetune_doctor.readers.model.meta import build_model, exact_counts
    from finetune_doctor.readers.model.verified import GENERIC_VERIFIED

    assert "video_llava" not in GENERIC_VERIFIED and "qwen2" in GENERIC_VERIFIED
    arch, _ = load_arch("LanguageBind/Video-LLaVA-7B-hf", exact="auto")
    assert arch.exact is not None and "meta-device build" in arch.notes
    ref = exact_counts(build_model(arch.raw), "video_llava")
    assert arch.total_params() == ref.total and arch.exact.lora_all_modules == ref.lora_all_modules
    assert any(".image_tower." in m for m in arch.exact.lora_all_modules)   # LF's default vision key misses it
    q, _ = load_arch("Qwen/Qwen2.5-7B-Instruct", exact="auto")
    assert q.exact is None
    glm, _ = load_arch("THUDM/chatglm3-6b", exact="auto")
    assert glm.exact is None and "meta-device build failed" in glm.notes


def test_a_hub_cache_folder_of_the_training_machine_is_sized_as_its_repository(tmp_path):
    # LF#7388 passed `.../models--Qwen--Qwen2.5-VL-3B-Instruct/snapshots/<sha>` from the training machine; the
    # folder name is huggingface_hub's encoding of the repository id (file_download.py repo_folder_name)
    path = str(tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "0123abc")
    by_path, _ = load_arch(path, offline=True)
    by_id, _ = load_arch("Qwen/Qwen2.5-7B-Instruct", offline=True)
    assert by_path.total_params() == by_id.total_params()
    assert "sized as Qwen/Qwen2.5-7B-Instruct" in by_path.notes
    with pytest.raises(ModelUnresolved) as err:           # an unknown repository still names what is missing
        load_arch(str(tmp_path / "models--acme--NoSuchModel-3B"), offline=True)
    assert "acme/NoSuchModel-3B" in err.value.message
    assert err.value.message.count(str(tmp_path / "models--acme--NoSuchModel-3B")) <= 1


@pytest.mark.parametrize("name, base", [
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1"),            # a release tag: same architecture
    ("unsloth/DeepSeek-R1-0528-BF16", "deepseek-ai/DeepSeek-R1"),           # ... and a precision conversion
    ("unsloth/gpt-oss-120b-BF16", "openai/gpt-oss-120b"),                   # LF dequantizes MXFP4 to bf16 anyway
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B"),
])
def test_release_tags_and_precision_endings_keep_the_architecture(name, base):
    found, how = catalog_mod.find_in_catalog(name)
    assert (found["id"], how) == (base, "stem")


def test_sizes_are_not_release_tags():
    # four digits with a unit are a size or a context length, never stripped as a release tag
    assert catalog_mod.stem("Qwen/Qwen2.5-7B-1024k") == "qwen2.5-7b-1024k"
    assert catalog_mod.stem("acme/model-2507") == "model"
