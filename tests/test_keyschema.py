"""The key schema (catalog/lf_keys.json) and check_keys, checked against the independent LLaMA-Factory reference.

The reference (/work/shared/reference/llamafactory/lf_args.json and LF_FACTS.md) was produced by reading LF HEAD and
introspecting transformers 4.57.6 and 5.8.0 separately from our generator, so agreement here is a real check of the
introspection, not of a copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_doctor.readers.config import keyschema
from finetune_doctor.readers.config.keyschema import KeyProblem, check_keys, extra_args_allowed, load_schema
from finetune_doctor.readers.config.yamlcfg import load_config

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "lint"
# the reference's lf_args.json (copied unchanged from /work/shared/reference/llamafactory) and LF's own examples
REF_ARGS = FIX / "lf_args.reference.json"
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"
needs_ref = pytest.mark.skipif(not (REF_ARGS.is_file() and EXAMPLES.is_dir()), reason="reference fixtures missing")

TRAIN_GROUPS = ("model", "data", "training", "finetuning", "generating")


def _ref_args() -> dict:
    return json.loads(REF_ARGS.read_text())["args"]


def _by_key(problems: list[KeyProblem]) -> dict[str, KeyProblem]:
    return {p.key: p for p in problems}


# --- the generated data --------------------------------------------------------------------------------------

def test_schema_names_its_sources_and_versions():
    s = load_schema()
    assert s["schema"] == "finetune-doctor/lf-keys/v1"
    pkgs = {(src["package"], src["version"], src["how"]) for src in s["sources"]}
    assert ("transformers", "4.57.6", "introspected") in pkgs
    assert ("transformers", "5.8.0", "introspected") in pkgs
    assert any(p == "llamafactory" for p, _, _ in pkgs)
    assert s["transformers_versions"] == ["4.57.6", "5.6.0", "5.8.0"]  # 5.6.0: the test extra's pin (LF 0.9.5 max)
    for src in s["sources"]:
        if src["package"] == "llamafactory":
            assert src["version"] in s["lf_versions"]
            assert src.get("sha256") and len(src["sha256"]) == 64


@needs_ref
def test_every_user_key_of_the_reference_is_known():
    ref = _ref_args()
    keys = load_schema()["keys"]
    for name, a in ref.items():
        assert name in keys, name
        if a["group"] in TRAIN_GROUPS and a.get("user_settable", True):
            assert keys[name]["init"] is True, name
            assert check_keys({name: a["default"]}, parser="any", transformers_version="5.8.0") == [] or \
                a.get("transformers_availability") == "v4.57.6_only", name


@needs_ref
def test_transformers_availability_matches_the_reference_introspection():
    """Our introspection of 4.57.6 and 5.8.0 gives the same per-version field sets as the reference's."""
    ref = _ref_args()
    keys = load_schema()["keys"]
    want = {"both": ["4.57.6", "5.8.0"], "v4.57.6_only": ["4.57.6"], "v5.8.0_only": ["5.8.0"]}
    checked = 0
    for name, a in ref.items():
        av = a.get("transformers_availability")
        if av is None or a.get("overrides_transformers_field"):
            continue
        assert keys[name]["origin"] == "transformers", name
        # 5.6.0 (introspected too, not in the reference) declares exactly the fields of 5.8.0
        got = [v for v in keys[name]["transformers_versions"] if v != "5.6.0"]
        assert got == want[av], name
        assert ("5.6.0" in keys[name]["transformers_versions"]) == ("5.8.0" in want[av]), name
        checked += 1
    # LF_FACTS §1: 137 fields in 4.57.6 and 117 in 5.8.0 (init fields; overwrite_output_dir is LF's own now)
    assert checked > 100
    n457 = sum(1 for e in keys.values() if e["origin"] == "transformers" and "4.57.6" in e["transformers_versions"]
               and e["init"])
    n58 = sum(1 for e in keys.values() if e["origin"] == "transformers" and "5.8.0" in e["transformers_versions"]
              and e["init"])
    assert (n457 + 1, n58) == (137, 117)  # +1: overwrite_output_dir, re-declared by LF so not counted as ours


def test_defaults_and_choices_that_matter_for_memory():
    """Values from LF_FACTS.md §3, which the reference authors read from LF source by hand."""
    k = load_schema()["keys"]
    assert k["cutoff_len"]["default"] == 2048
    assert k["finetuning_type"]["default"] == "lora"
    assert k["disable_gradient_checkpointing"]["default"] is False
    assert k["flash_attn"]["default"] == "auto"
    assert k["flash_attn"]["choices"] == ["auto", "disabled", "sdpa", "fa2", "fa3"]
    assert k["per_device_train_batch_size"]["default"] == 8
    assert k["lora_rank"]["default"] == 8
    assert k["image_max_pixels"]["default"] == 768 * 768
    assert k["ddp_timeout"]["default"] == 1800
    assert k["report_to"]["default_by_version"] == {"4.57.6": None, "5.6.0": "none", "5.8.0": "none"}
    assert "adamw_torch_fused" in k["optim"]["default_note"]


def test_init_false_fields_are_derived_not_keys():
    s = load_schema()
    for name in ("compute_dtype", "device_map", "model_max_length", "block_diag_attn"):
        assert s["keys"][name]["init"] is False
        assert name in s["derived"]
    assert s["derived"]["model_max_length"]["derived_from"] == ["cutoff_len"]


def test_list_accepting_fields_read_from_lf_source():
    """split_arg keeps lists (data_args.py:148-169); adapter_name_or_path/add_tokens call .split and do not."""
    k = load_schema()["keys"]
    for name in ("dataset", "lora_target", "freeze_trainable_modules", "galore_target"):
        assert "list" in k[name]["accepts"], name
    for name in ("adapter_name_or_path", "add_tokens", "add_special_tokens"):
        assert "list" not in k[name]["accepts"], name


def test_retired_table_covers_lf_facts_1a():
    r = load_schema()["retired"]
    expect = {"dpo_beta": "pref_beta", "dpo_ftx": "pref_ftx", "dpo_loss": "pref_loss", "orpo_beta": "pref_beta",
              "num_layer_trainable": "freeze_trainable_layers", "name_module_trainable": "freeze_trainable_modules",
              "sft_packing": "packing", "cache_path": "tokenized_path", "new_special_tokens": "add_special_tokens",
              "image_resolution": "image_max_pixels", "image_dir": "media_dir", "vllm_dtype": "infer_dtype",
              "use_cache": "use_kv_cache", "evaluation_strategy": "eval_strategy"}
    for old, new in expect.items():
        assert r[old]["replacement"] == new, old
    assert r["fp32"]["replacement"] is None and "bf16" in r["fp32"]["explanation"]
    keys = load_schema()["keys"]
    for old, e in r.items():
        if e.get("replacement"):
            assert e["replacement"] in keys, old


# --- check_keys ----------------------------------------------------------------------------------------------

@needs_ref
@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.rglob("*.yaml")
                                        if "accelerate" not in p.parts), ids=lambda p: p.name)
def test_every_lf_example_config_is_clean(path):
    """The configs LLaMA-Factory ships are accepted by LLaMA-Factory, so no key problem may be reported."""
    doc = load_config(str(path))
    assert check_keys(doc.values, env={}) == []


def test_old_dpo_config_fixture():
    doc = load_config(str(FIX / "old_keys_dpo.yaml"))
    got = _by_key(check_keys(doc.values, env={}))
    assert set(got) == {"dpo_beta", "dpo_loss", "dpo_ftx", "max_samples", "sft_packing", "cache_path",
                        "learning_rate", "flash_attn", "compute_dtype", "evaluation_strategy"}
    assert (got["dpo_beta"].kind, got["dpo_beta"].replacement_key, got["dpo_beta"].fix,
            got["dpo_beta"].fix_value) == ("renamed", "pref_beta", "rename", 0.1)
    assert got["dpo_loss"].fix_value == "sigmoid"
    assert got["sft_packing"].replacement_key == "packing" and got["sft_packing"].fix_value is False
    assert got["cache_path"].replacement_key == "tokenized_path"
    # worded by renamed-key's case renamed/stops (rules/renamed-key.yaml), from the catalogue's entry
    assert (got["dpo_beta"].fate, got["dpo_beta"].check, got["dpo_beta"].message) == ("stops", "renamed", "")
    assert got["dpo_beta"].args == {"new": "pref_beta", "since": "v0.7",
                                    "why": "The DPO options were renamed pref_* when ORPO/SimPO joined DPO."}
    # OmegaConf YAML 1.1 typing as LF sees it
    assert (got["max_samples"].kind, got["max_samples"].fix_value) == ("wrong_type", 100000)
    assert (got["learning_rate"].kind, got["learning_rate"].fix_value) == ("wrong_type", 5e-6)
    assert (got["flash_attn"].kind, got["flash_attn"].fix_value) == ("invalid_value", "disabled")
    assert (got["flash_attn"].check, got["flash_attn"].ending) == ("choice-yaml-bool", "flash-attn")
    # derived key: compute_dtype bfloat16 is what bf16: true produces
    assert got["compute_dtype"].kind == "derived"
    assert (got["compute_dtype"].fix, got["compute_dtype"].replacement_key, got["compute_dtype"].fix_value) == \
        ("rename", "bf16", True)
    assert got["evaluation_strategy"].replacement_key == "eval_strategy"


def test_typo_config_fixture():
    doc = load_config(str(FIX / "typos_sft.yaml"))
    got = _by_key(check_keys(doc.values, env={}))
    assert set(got) == {"per_device_train_batch_size", "learing_rate", "num_train_epoch", "lr_scheduler_type",
                        "bf16", "quantization_method"}
    assert got["per_device_train_batch_size"].kind == "wrong_type"
    assert got["per_device_train_batch_size"].fix is None  # no number to guess
    assert "auto_find_batch_size" in got["per_device_train_batch_size"].suggestion
    assert (got["learing_rate"].kind, got["learing_rate"].replacement_key) == ("unknown", "learning_rate")
    assert got["num_train_epoch"].replacement_key == "num_train_epochs"
    assert (got["lr_scheduler_type"].fix, got["lr_scheduler_type"].fix_value) == ("set", "cosine")
    assert (got["bf16"].kind, got["bf16"].fix_value) == ("wrong_type", True)
    assert (got["quantization_method"].kind, got["quantization_method"].fix_value) == ("invalid_value", "bnb")


def test_rename_becomes_delete_when_the_new_key_is_already_set():
    got = _by_key(check_keys({"stage": "dpo", "dpo_beta": 0.1, "pref_beta": 0.2}, env={}))
    assert got["dpo_beta"].fix == "delete"
    assert "already sets `pref_beta`" in got["dpo_beta"].suggestion


def test_unknown_key_did_you_mean_and_hyphens():
    got = _by_key(check_keys({"stage": "sft", "gradient-accumulation-steps": 4, "warmup_ration": 0.1,
                              "zzz_not_a_key": 1}, env={}))
    assert got["gradient-accumulation-steps"].replacement_key == "gradient_accumulation_steps"
    assert got["gradient-accumulation-steps"].fix == "rename"
    assert got["gradient-accumulation-steps"].check == "not-snake-case"
    assert (got["warmup_ration"].check, got["warmup_ration"].args) == ("unknown-near", {"alts": "`warmup_ratio`"})
    assert got["zzz_not_a_key"].kind == "unknown" and got["zzz_not_a_key"].fix is None
    assert (got["zzz_not_a_key"].check, got["zzz_not_a_key"].args) == ("unknown", None)   # no did-you-mean


def test_flash_attn_values():
    for value, fix in ((True, "fa2"), (False, "disabled"), ("off", "disabled"), ("FA2", "fa2")):
        (p,) = check_keys({"flash_attn": value}, env={})
        assert (p.kind, p.fix_value) == ("invalid_value", fix), value
    for ok in ("auto", "disabled", "sdpa", "fa2", "fa3"):
        assert check_keys({"flash_attn": ok}, env={}) == []


def test_yaml11_typing_as_lf_sees_it(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("stage: sft\nlearning_rate: 1e-4\nbf16: on\nmax_steps: 1e3\nlogging_steps: 1e1\n"
                   "lora_dropout: 5e-2\nresume_from_checkpoint: ~\n")
    got = _by_key(check_keys(load_config(str(cfg)).values, env={}))
    # 1e-4 float and on -> True are fine; max_steps is an int field, logging_steps a float one (transformers)
    assert set(got) == {"max_steps"}
    assert got["max_steps"].fix_value == 1000


def test_allow_extra_args_is_read_like_lf():
    assert extra_args_allowed({"ALLOW_EXTRA_ARGS": "1"})
    assert extra_args_allowed({"ALLOW_EXTRA_ARGS": "TRUE"})
    assert extra_args_allowed({"ALLOW_EXTRA_ARGS": "y"})
    assert not extra_args_allowed({"ALLOW_EXTRA_ARGS": "yes"})  # is_env_enabled accepts true/y/1 only
    assert not extra_args_allowed({})
    strict = _by_key(check_keys({"dpo_beta": 0.1, "foo": 1}, env={}))
    lax = _by_key(check_keys({"dpo_beta": 0.1, "foo": 1}, env={"ALLOW_EXTRA_ARGS": "1"}))
    assert (strict["foo"].condition, strict["foo"].fate, strict["foo"].check, strict["foo"].message) == (
        None, "stops", "unknown", "")
    assert lax["foo"].condition == "ALLOW_EXTRA_ARGS is set" and lax["foo"].fate == "drops"
    assert lax["dpo_beta"].fix == "rename"  # still worth fixing: the value has no effect under the old name


def test_allow_extra_args_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("ALLOW_EXTRA_ARGS", "1")
    (p,) = check_keys({"foo": 1})
    assert p.condition == "ALLOW_EXTRA_ARGS is set"
    monkeypatch.delenv("ALLOW_EXTRA_ARGS")
    (p,) = check_keys({"foo": 1})
    assert p.condition is None


def test_transformers_version_specific_keys():
    vals = {"stage": "sft", "save_safetensors": True, "no_cuda": False, "use_cache": False}
    unknown_ver = _by_key(check_keys(vals, env={}))
    assert unknown_ver["save_safetensors"].condition == "transformers 5.x"
    assert unknown_ver["no_cuda"].replacement_key == "use_cpu"
    assert unknown_ver["use_cache"].kind == "renamed" and unknown_ver["use_cache"].condition == "transformers 4.x"
    v4 = _by_key(check_keys(vals, env={}, transformers_version="4.57.6"))
    assert set(v4) == {"use_cache"} and v4["use_cache"].condition is None
    v5 = _by_key(check_keys(vals, env={}, transformers_version="5.8.0"))
    assert set(v5) == {"save_safetensors", "no_cuda"}  # use_cache is transformers 5's own key
    assert v5["save_safetensors"].condition is None


def test_eval_only_keys_in_a_training_config():
    got = _by_key(check_keys({"stage": "sft", "task": "mmlu_test", "n_shot": 5}, env={}))
    assert (got["task"].kind, got["task"].check, got["task"].args) == (
        "unknown", "not-for-training", {"who": "llamafactory-cli eval"})
    assert check_keys({"task": "mmlu_test", "n_shot": 5, "model_name_or_path": "m"}, env={}) == []


def test_lists_and_space_separated_choices():
    assert check_keys({"lora_target": ["q_proj", "v_proj"], "report_to": ["wandb"]}, env={}) == []
    (p,) = check_keys({"adapter_name_or_path": ["a", "b"]}, env={})
    assert p.kind == "wrong_type"
    assert check_keys({"fsdp": "full_shard auto_wrap"}, env={}) == []
    (p,) = check_keys({"fsdp": "full_shard zero3"}, env={})
    assert (p.kind, p.check, p.args["bad"]) == ("invalid_value", "item-not-among", "zero3")


def test_null_values():
    assert check_keys({"resume_from_checkpoint": None, "bf16": None}, env={}) == []
    (p,) = check_keys({"cutoff_len": None}, env={})
    assert p.kind == "wrong_type" and p.message == "" and p.check == "null-needs-value"   # worded by invalid-value
    assert p.args == {"expected": "an integer", "default": "2048"}


def test_load_schema_is_cached():
    assert load_schema() is load_schema()


def test_import_stays_light():
    """readers/config/keyschema.py is on the lint path: no torch/transformers, difflib only when needed."""
    code = ("import sys; import finetune_doctor.readers.config.keyschema as k; "
            "bad=[m for m in ('torch','transformers','deepspeed','difflib') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
@needs_ref
def test_generator_falls_back_to_lf_args_and_installed_transformers(tmp_path):
    """Without LF importable: --lf-args gives LF's keys, transformers is introspected from this environment."""
    out = tmp_path / "keys.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_key_schema.py"), "--lf-version", "none",
                    "--lf-args", str(REF_ARGS), "--transformers", "installed", "--out", str(out)],
                   check=True, capture_output=True, text=True, cwd=ROOT,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    data = json.loads(out.read_text())
    import transformers

    srcs = {(s["package"], s["how"]): s for s in data["sources"]}
    assert srcs[("llamafactory", "reference")]["version"] == "0.9.6.dev0"
    assert srcs[("transformers", "introspected")]["version"] == transformers.__version__
    assert data["transformers_versions"] == [transformers.__version__]
    ref = _ref_args()
    lf_own = [n for n, a in ref.items() if not str(a.get("source", "")).startswith("transformers")]
    assert all(n in data["keys"] for n in lf_own)
    from dataclasses import fields

    tf_fields = {f.name for f in fields(transformers.Seq2SeqTrainingArguments)}
    got_tf = {n for n, e in data["keys"].items() if e["origin"] == "transformers"}
    assert got_tf == tf_fields - {n for n in lf_own}
    assert keyschema.check_keys({"dpo_beta": 1}, env={}, schema=data)[0].replacement_key == "pref_beta"


@pytest.mark.parametrize("env, want", [
    ({}, 'Unknown key `foo`: LLaMA-Factory stops with "Some keys are not used by the HfArgumentParser".'),
    ({"ALLOW_EXTRA_ARGS": "1"}, "Unknown key `foo`: LLaMA-Factory drops it silently because ALLOW_EXTRA_ARGS is "
                                "set, so it has no effect. (ALLOW_EXTRA_ARGS is set)"),
])
def test_the_fate_of_an_undeclared_key_is_worded_by_the_rule(tmp_path, monkeypatch, env, want):
    """The reader says which fate (KeyProblem.fate); rules/unknown-key.yaml's message table words it, and the
    sentence a user reads is the one the reader wrote before (issue #22: the fate's words lived in Python)."""
    import json

    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\nfoo: 1\n")
    r = CliRunner().invoke(main, ["lint", str(cfg), "--offline", "--format", "json"])
    got = [f["message"] for f in json.loads(r.output)["findings"] if f["name"] == "unknown-key"]
    assert got == [want]
