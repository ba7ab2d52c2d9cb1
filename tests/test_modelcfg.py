"""readers/model/modelcfg.py: finding a model's config.json (local, HF cache, catalog) and the bundled catalog's numbers.

The catalog checks compare every entry with two references that do not come from this code: the parameter
count the model card / hub / technical report publishes, and ``sum(p.numel())`` of the transformers model built
from the same config on the meta device (for the model types transformers ships).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.readers.model.defaults import DEFAULTS, defaults_for
from finetune_doctor.readers.model.generic import transformers_version
from finetune_doctor.readers.model.modelcfg import (
    arch_from_config,
    catalog_arch,
    catalog_entries,
    catalog_names,
    find_in_catalog,
    json_key_positions,
    load_arch,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
ENTRIES = {e["id"]: e for e in catalog_entries()}

REQUIRED = """
meta-llama/Llama-2-7b-hf meta-llama/Llama-2-13b-hf meta-llama/Llama-2-70b-hf meta-llama/Meta-Llama-3-8B
meta-llama/Meta-Llama-3-70B meta-llama/Llama-3.1-8B meta-llama/Llama-3.1-70B meta-llama/Llama-3.1-405B
meta-llama/Llama-3.2-1B meta-llama/Llama-3.2-3B meta-llama/Llama-3.3-70B-Instruct Qwen/Qwen-7B Qwen/Qwen-14B
Qwen/Qwen-72B Qwen/Qwen1.5-7B Qwen/Qwen1.5-14B Qwen/Qwen1.5-72B Qwen/Qwen2-7B Qwen/Qwen2-72B Qwen/Qwen2.5-0.5B
Qwen/Qwen2.5-1.5B Qwen/Qwen2.5-3B Qwen/Qwen2.5-7B Qwen/Qwen2.5-14B Qwen/Qwen2.5-32B Qwen/Qwen2.5-72B
Qwen/Qwen3-0.6B Qwen/Qwen3-1.7B Qwen/Qwen3-4B Qwen/Qwen3-8B Qwen/Qwen3-14B Qwen/Qwen3-32B Qwen/Qwen3-30B-A3B
Qwen/Qwen3-235B-A22B baichuan-inc/Baichuan2-7B-Base baichuan-inc/Baichuan2-13B-Base THUDM/chatglm3-6b
THUDM/glm-4-9b 01-ai/Yi-6B 01-ai/Yi-34B mistralai/Mistral-7B-v0.1 mistralai/Mixtral-8x7B-v0.1 google/gemma-2-2b
google/gemma-2-9b google/gemma-2-27b google/gemma-3-1b-pt google/gemma-3-4b-pt google/gemma-3-12b-pt
google/gemma-3-27b-pt deepseek-ai/deepseek-llm-7b-base deepseek-ai/deepseek-coder-6.7b-base
deepseek-ai/deepseek-coder-33b-base deepseek-ai/DeepSeek-V2-Lite microsoft/Phi-3-mini-4k-instruct
microsoft/Phi-3-medium-4k-instruct microsoft/phi-4 internlm/internlm2-7b internlm/internlm2-20b
""".split()


@pytest.fixture(autouse=True)
def _no_user_hf_cache(monkeypatch, tmp_path):
    """Keep the developer's own HF cache out of these tests."""
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


# ---- the catalog -------------------------------------------------------------------------------------------

def _checker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("catalog_check", ROOT / "scripts" / "catalog_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ROOT = Path(__file__).resolve().parent.parent
BASES = {mid: e for mid, e in ENTRIES.items() if "same_architecture_as" not in e}
# Entries whose architecture the config-driven decoder does not count as transformers builds it, with the
# relative error against the meta-device model (transformers 5.24) and why; `check` takes the meta build for
# these types (readers/model/meta.py maybe_exact: they are outside GENERIC_VERIFIED).
READER_GAPS: dict[str, str] = {}
# What a publisher's "active parameters" count leaves out, by model type: gpt-oss counts no input embedding (model
# card arXiv:2508.10925, Table 1); the "A3B"/"A22B" of a VL MoE name, Llama-4's "17B active" and Gemma-4's "3.8B
# active" (its card lists the vision encoder apart) count the language model only; Qwen3-Next's and GLM-4.5/4.7's
# activated counts are taken as the Qwen cards' "Non-Embedding" convention (not stated on those cards).
ACTIVE_SCOPE = {"gpt_oss": "no_input_embedding", "qwen3_vl_moe": "text", "qwen3_5_moe": "text", "llama4": "text",
                "gemma4": "text", "qwen3_next": "non_embedding", "glm4_moe": "non_embedding",
                "glm4v_moe": "non_embedding"}   # GLM-4.5V's "12B active" is GLM-4.5-Air's text count


def _stated_precision(billions: float) -> float:
    """Half a unit of the last digit a published count states (3 -> 0.5, 3.8 -> 0.05), relative to it."""
    text = repr(float(billions)).rstrip("0").rstrip(".")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10 ** -decimals / billions


def test_catalog_has_the_required_models_with_sources():
    assert len(ENTRIES) >= 150 and len(ENTRIES) == len(catalog_entries())
    assert set(REQUIRED) <= set(catalog_names())
    for e in catalog_entries():
        assert e["source"].startswith("https://huggingface.co/") and e["source"].endswith("config.json")
        assert e.get("published_basis") or e.get("basis")


@pytest.mark.parametrize("mid", sorted(BASES))
def test_catalog_count_matches_published(mid):
    """The reader's count against the published one, at the tolerance and scope the entry states
    (scripts/catalog_check.py: 1 %, or 15 % for a size known only from the model's name)."""
    if mid in READER_GAPS:
        pytest.xfail(f"reader gap: {READER_GAPS[mid]}")
    e = BASES[mid]
    arch = catalog_arch(e)
    scope = e.get("published_scope", "all")
    total = {"all": arch.total_params(), "text": arch.total_params() - arch.extra_params,
             "non_embedding": arch.non_embedding_params()}[scope]
    tol = 0.15 if e.get("published_nominal") else 0.01
    assert abs(total / 1e9 / e["published_params"] - 1) <= tol, (total, e["published_params"], scope)
    if "published_exact" in e and scope == "all":
        assert total == e["published_exact"]
    if "published_non_embedding_params" in e:  # Qwen cards: "Number of Parameters (Non-Embedding)"
        assert abs(arch.non_embedding_params() / 1e9 / e["published_non_embedding_params"] - 1) <= 0.01
    if "published_active_params" in e:  # as precise as the digits stated, at least 2% (a name's "A3B": nominal)
        pub = e["published_active_params"]
        active = arch.active_params(ACTIVE_SCOPE.get(arch.model_type, "all"))
        bound = tol if e.get("published_nominal") else max(0.02, _stated_precision(pub))
        assert abs(active / 1e9 / pub - 1) <= bound, (active, pub, arch.model_type)
    if "published_vision_params" in e:  # Gemma 3 report, Table 1
        assert abs(dict(arch.extra_parts)["vision_tower"] / 1e9 / e["published_vision_params"] - 1) <= 0.01


@pytest.mark.slow
@pytest.mark.parametrize("mid", sorted(ENTRIES))
def test_catalog_counts_equal_transformers_meta_models(mid):
    """Every entry (alias entries through their base) whose model_type transformers ships, built on the meta device
    from the same config dict by scripts/catalog_check.py (independent of this reader): equal counts."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cc = _checker()
    by_id = {e["id"]: e for e in cc.load()}
    root = by_id[mid]
    while "same_architecture_as" in root:
        root = by_id[root["same_architecture_as"]]
    if "verify" in root:
        pytest.skip(root["verify"])
    try:
        meta = cc.meta_count(cc.resolved_config(by_id[mid], by_id))
    except KeyError as err:
        pytest.skip(str(err))
    except Exception as err:  # a release whose strict config class rejects the hub's file (5.6.0: DBRX)
        if not (isinstance(err, (TypeError, ValueError)) or "Validation" in type(err).__name__):
            raise
        pytest.skip(f"transformers {transformers_mod().__version__} rejects this config.json: {str(err)[:120]}")
    if mid in READER_GAPS:
        pytest.xfail(f"reader gap: {READER_GAPS[mid]}")
    assert catalog_arch(ENTRIES[mid]).total_params() == meta


def transformers_mod():
    import transformers

    return transformers


def test_catalog_facts_beyond_counts():
    b13 = catalog_arch(ENTRIES["baichuan-inc/Baichuan2-13B-Base"])
    assert b13.positional == "alibi" and catalog_arch(ENTRIES["baichuan-inc/Baichuan2-7B-Base"]).positional == "rope"
    glm = catalog_arch(ENTRIES["THUDM/chatglm3-6b"])
    assert (glm.num_kv_heads, glm.hd, glm.qkv_bias, glm.o_bias, glm.intermediate_size) == (2, 128, True, False, 13696)
    qwen1 = catalog_arch(ENTRIES["Qwen/Qwen-7B"])
    assert qwen1.intermediate_size == 11008 and qwen1.dtype == "bfloat16"  # half of config's 22016
    g3 = catalog_arch(ENTRIES["google/gemma-3-4b-pt"])
    assert (g3.num_heads, g3.num_kv_heads, g3.hd, g3.vocab_size, g3.layer_norms, g3.qk_norm, g3.tie_word_embeddings) \
        == (8, 4, 256, 262208, 4, True, True)
    v2 = catalog_arch(ENTRIES["deepseek-ai/DeepSeek-V2-Lite"])
    assert v2.mla and v2.q_lora_rank is None and v2.first_k_dense == 1 and v2.shared_expert_intermediate_size == 2816
    assert catalog_arch(ENTRIES["mistralai/Mistral-7B-v0.1"]).sliding_window == 4096
    assert catalog_arch(ENTRIES["mistralai/Mistral-7B-v0.3"]).sliding_window is None  # explicit null
    assert catalog_arch(ENTRIES["google/gemma-2-9b"]).dtype == "float32"


def test_defaults_match_the_transformers_configuration_classes():
    """Fields a config.json may leave out take the class defaults; ours must equal transformers'."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    renamed = {"num_experts": "num_local_experts"}
    # fields the hub's remote-code DeepSeek configs have and transformers' own classes dropped
    not_in_transformers = {("deepseek_v2", "moe_layer_freq"), ("deepseek_v3", "moe_layer_freq")}
    compared = 0
    version = transformers_version(transformers.__version__)   # some defaults changed between 5.6 and 5.24
    for mt in DEFAULTS:
        if mt not in CONFIG_MAPPING or mt in ("yi", "deepseek"):
            continue
        defaults = defaults_for(mt, version)
        got = transformers.AutoConfig.for_model(mt).to_dict()
        for k, v in defaults.items():
            if (mt, k) in not_in_transformers:
                continue
            key = k if k in got else renamed.get(k, k)
            assert key in got, (mt, k)
            assert got[key] == v, (mt, k, got[key], v)
            compared += 1
    assert compared > 100


# ---- resolving model_name_or_path --------------------------------------------------------------------------

def test_local_dir_relative_to_the_yaml_directory(tmp_path, monkeypatch):
    yaml_dir = tmp_path / "configs"
    (yaml_dir / "models").mkdir(parents=True)
    shutil.copytree(FIXTURES / "Qwen2.5-0.5B-Instruct", yaml_dir / "models" / "qwen")
    monkeypatch.chdir(tmp_path)  # the cwd does not have models/qwen: only base_dir finds it
    arch, doc = load_arch("models/qwen", base_dir=str(yaml_dir))
    assert doc is not None and doc.role == "model"
    assert doc.path == str(yaml_dir / "models" / "qwen" / "config.json")
    assert arch.total_params() == 494_032_768  # Qwen2.5-0.5B safetensors metadata
    assert (arch.tie_word_embeddings, arch.qkv_bias, arch.num_kv_heads, arch.dtype) == (True, True, 2, "bfloat16")
    assert arch.sliding_window is None  # use_sliding_window: false
    text = (yaml_dir / "models" / "qwen" / "config.json").read_text().splitlines()
    line, col = doc.positions["hidden_size"]
    assert text[line - 1][col - 1:].startswith('"hidden_size"')
    assert doc.locate("vocab_size").line == next(i for i, t in enumerate(text, 1) if '"vocab_size"' in t)


def test_local_dir_relative_to_cwd_and_absolute_and_direct_file(tmp_path, monkeypatch):
    shutil.copytree(FIXTURES / "chatglm3-6b", tmp_path / "glm")
    monkeypatch.chdir(tmp_path)
    a1, _ = load_arch("glm", base_dir=str(tmp_path / "elsewhere"))
    a2, _ = load_arch(str(tmp_path / "glm"))
    a3, _ = load_arch(str(tmp_path / "glm" / "config.json"))
    assert a1.total_params() == a2.total_params() == a3.total_params() == 6_243_584_000
    assert a1.dtype == "float16" and a1.model_type == "chatglm"


def test_remote_code_qwen1_fixture_reads_without_model_code():
    arch, doc = load_arch(str(FIXTURES / "Qwen-7B-Chat"))
    assert arch.total_params() == 7_721_324_544
    assert "auto_map" in doc.positions  # read as plain JSON, nothing imported
    assert "bf16" in arch.notes


def test_multimodal_fixture_counts_the_vision_tower():
    arch, doc = load_arch(str(FIXTURES / "Qwen2-VL-2B-Instruct"))
    assert arch.total_params() == 2_208_985_600  # hub safetensors metadata of Qwen/Qwen2-VL-2B-Instruct
    assert dict(arch.extra_parts)["vision_tower"] == arch.extra_params and arch.extra_frozen
    assert doc.positions["vision_config.depth"][0] > doc.positions["vision_config"][0]


def _make_hub_cache(root: Path, repo: str, fixture: str, revs: list[str], main: str | None) -> Path:
    """The layout huggingface_hub writes: blobs/<hash>, snapshots/<rev>/config.json -> ../../blobs/<hash>."""
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "blobs").mkdir(parents=True)
    text = (FIXTURES / fixture / "config.json").read_text()
    for i, rev in enumerate(revs):
        blob = folder / "blobs" / f"{i:040x}"
        blob.write_text(text.replace('"num_hidden_layers": 24', f'"num_hidden_layers": {24 + i}'))
        snap = folder / "snapshots" / rev
        snap.mkdir(parents=True)
        (snap / "config.json").symlink_to(os.path.relpath(blob, snap))
        os.utime(snap / "config.json", (1_700_000_000 + i, 1_700_000_000 + i), follow_symlinks=True)
    if main:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(main)
    return folder


def test_hf_cache_snapshot_named_by_refs_main(tmp_path, monkeypatch):
    old, new = "a" * 40, "b" * 40
    _make_hub_cache(tmp_path / "hf" / "hub", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct", [old, new], main=old)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    arch, doc = load_arch("Qwen/Qwen2.5-0.5B-Instruct")
    assert doc is not None and f"/snapshots/{old}/config.json" in doc.path
    assert arch.num_layers == 24 and "HF hub cache" in arch.notes


def test_hf_cache_without_refs_takes_newest_and_hub_cache_env_wins(tmp_path, monkeypatch):
    _make_hub_cache(tmp_path / "c1", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct", ["1" * 40, "2" * 40], None)
    _make_hub_cache(tmp_path / "hf" / "hub", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct", ["3" * 40], None)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c1"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    arch, doc = load_arch("qwen/qwen2.5-0.5b-instruct")  # case differs from the folder name
    assert f"/snapshots/{'2' * 40}/" in doc.path and arch.num_layers == 25
    arch2, doc2 = load_arch("Qwen/Qwen2.5-0.5B-Instruct", hf_home=str(tmp_path / "hf"))  # explicit hf_home first
    assert f"/snapshots/{'3' * 40}/" in doc2.path


def test_catalog_by_repo_id_alias_and_basename_of_missing_path(tmp_path):
    arch, doc = load_arch("Qwen/Qwen2.5-7B-Instruct", base_dir=str(tmp_path))
    assert doc is None and arch.name == "Qwen/Qwen2.5-7B" and arch.total_params() == 7_615_616_512
    assert arch.source.startswith("bundled catalog: https://huggingface.co/Qwen/Qwen2.5-7B/")
    arch, _ = load_arch("/data/model/llama-2-7b", base_dir=str(tmp_path))
    assert arch.name == "meta-llama/Llama-2-7b-hf" and "matched by name" in arch.notes
    assert load_arch("Baichuan2-13B-Chat")[0].name == "baichuan-inc/Baichuan2-13B-Base"
    assert load_arch("qwen2.5-7b-instruct")[0].name == "Qwen/Qwen2.5-7B"
    arch, _ = load_arch("meta-llama/Llama-2-7b-hf")
    assert "matched by name" not in arch.notes


def test_catalog_by_stem_modelscope_dir_and_quantized_name():
    arch, _ = load_arch("/root/autodl-tmp/Qwen/Qwen2___5-7B-Instruct")  # ModelScope's on-disk name
    assert arch.name == "Qwen/Qwen2.5-7B"
    arch, _ = load_arch("/models/Qwen2.5-14B-Instruct-GPTQ-Int4")
    assert arch.name == "Qwen/Qwen2.5-14B" and "quantized" in arch.notes
    assert load_arch("gemma-3-12b-it")[0].name == "google/gemma-3-12b-pt"


def test_adapter_directory_is_sized_as_its_base_model(tmp_path):
    arch, doc = load_arch(str(FIXTURES / "qwen2.5-lora-adapter"))
    assert doc is None and arch.name == "Qwen/Qwen2.5-7B" and "PEFT adapter" in arch.notes


def test_malformed_config_json_names_file_and_line(tmp_path):
    with pytest.raises(InputError) as ei:
        load_arch(str(FIXTURES / "broken-config"))
    err = ei.value
    assert err.file == str(FIXTURES / "broken-config" / "config.json")
    assert err.line == 27  # the closing brace after the trailing comma on line 26
    assert "not valid JSON" in err.message and str(err).startswith(f"{err.file}:27: ")


def test_config_that_is_not_an_object_or_lacks_fields(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text("[1, 2]\n")
    with pytest.raises(InputError, match="JSON object"):
        load_arch(str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    # a type with no class defaults to fall back on (transformers' LlamaConfig would default the heads)
    (tmp_path / "b" / "config.json").write_text(json.dumps({"model_type": "my_arch", "hidden_size": 8}))
    with pytest.raises(InputError, match="has no 'num_attention_heads'") as ei:
        load_arch(str(tmp_path / "b"))
    assert ei.value.file == str(tmp_path / "b" / "config.json")


def test_unknown_model_lists_where_it_looked_and_suggests(tmp_path):
    with pytest.raises(InputError) as ei:
        load_arch("Qwen/Qwen2.5-8B-Instruct", base_dir=str(tmp_path))
    msg = ei.value.message
    assert msg.startswith("unknown model 'Qwen/Qwen2.5-8B-Instruct': no config.json at ")
    assert "not in the HF cache" in msg and "not in the bundled catalog" in msg
    assert "did you mean" in msg and "Qwen/Qwen2.5-7B" in msg
    with pytest.raises(InputError, match=r"has no config\.json"):
        (tmp_path / "empty").mkdir()
        load_arch("empty", base_dir=str(tmp_path))


def test_dtype_rules():
    base = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 16, "vocab_size": 10}
    a = arch_from_config(base, "x", "s")
    assert a.dtype == "float32" and "float32" in a.notes  # transformers' default when config names none
    assert arch_from_config({**base, "dtype": "bfloat16"}, "x", "s").dtype == "bfloat16"  # transformers 5 key
    assert arch_from_config({**base, "torch_dtype": "float16"}, "x", "s").dtype == "float16"
    q = {"model_type": "qwen", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 32, "vocab_size": 10, "kv_channels": 4}
    assert arch_from_config({**q, "fp16": True}, "x", "s").dtype == "float16"


def test_unknown_model_type_reads_llama_shaped_and_says_so():
    cfg = {"model_type": "my_llama", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 16, "vocab_size": 10, "torch_dtype": "bfloat16"}
    arch = arch_from_config(cfg, "x", "s")
    assert arch.total_params() == 4 * 64 + 3 * 128 + 3 * 8 + 2 * 80 and "LLaMA-shaped" in arch.notes and "generic decoder" in arch.notes
    with pytest.raises(InputError, match="first generation"):
        arch_from_config({"model_type": "chatglm", "inner_hidden_size": 16384, "hidden_size": 4096}, "x", "s")


def test_json_key_positions_nested_and_escaped():
    text = '{\n  "a": 1,\n  "b\\"q": {"c": [ {"d": 2} ], "e": "x:y"},\n\t"f": null\n}'
    pos = json_key_positions(text)
    assert set(pos) == {"a", 'b"q', 'b"q.c', 'b"q.c.d', 'b"q.e', "f"}
    lines = text.splitlines()
    for key, raw in (("a", '"a"'), ('b"q', '"b\\"q"'), ('b"q.c', '"c"'), ('b"q.c.d', '"d"'), ('b"q.e', '"e"'),
                     ("f", '"f"')):
        line, col = pos[key]
        assert lines[line - 1][col - 1:].startswith(raw + ":"), key
    assert pos["a"] == (2, 3) and pos['b"q'] == (3, 3) and pos["f"] == (4, 2)


def test_reader_imports_no_torch_or_transformers():
    code = ("import sys, finetune_doctor.readers.model.modelcfg as m; m.catalog_entries(); "
            "bad = [x for x in ('torch', 'transformers') if x in sys.modules]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_wrong_json_types_are_input_errors_not_tracebacks():
    cfg = json.loads((FIXTURES / "Qwen2-VL-2B-Instruct" / "config.json").read_text())
    cfg["vision_config"]["depth"] = "thirty-two"
    with pytest.raises(InputError, match="unexpected type") as ei:
        arch_from_config(cfg, "q", "/x/config.json")
    assert ei.value.file == "/x/config.json"
    cfg = {"model_type": "qwen2_moe", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": 16, "vocab_size": 10, "mlp_only_layers": "0,1"}
    with pytest.raises(InputError):
        arch_from_config(cfg, "q", "s")
