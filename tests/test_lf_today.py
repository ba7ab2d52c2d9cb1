"""LLaMA-Factory as its users run it today (issue 24): the release a config is judged for, every config kind LF
reads, v1 configs, and no launcher invented when none is known.

The release catalog (finetune_doctor/catalog/lf_releases.json) is built by scripts/build_lf_releases.py from LF's
published wheels and the snapshot; the cases below are real configs of runs that trained on the release named
(`quantization_method: bitsandbytes` on 0.8.x, `image_resolution` on 0.9.1) and LF's own examples.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config.keyschema import check_keys
from finetune_doctor.readers.config.lfkind import kind_of
from finetune_doctor.readers.config.lfrelease import choose, load, version_in_use
from shared_dirs import shared_dir

ROOT = Path(__file__).resolve().parent.parent
SHARED = shared_dir("reference", "llamafactory", "examples")
QLORA_08 = """model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
quantization_bit: 4
quantization_method: bitsandbytes
dataset: alpaca_en_demo
template: llama3
cutoff_len: 1024
output_dir: saves/llama3-8b/qlora/sft
per_device_train_batch_size: 1
bf16: true
"""


def _lint(tmp_path: Path, text: str, *args: str, name: str = "c.yaml") -> dict:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(main, ["lint", str(p), "--format", "json", *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def _errors(report: dict) -> list[tuple[str, str]]:
    return [(f["name"], f["location"]["key"]) for f in report["findings"] if f["severity"] == "error"]


def test_catalog_covers_every_release_users_run():
    data = load()
    assert data["versions"][:4] == ["0.8.0", "0.8.1", "0.8.2", "0.8.3"]
    assert {"0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4", "0.9.5"} <= set(data["versions"])
    assert data["versions"][-1] == "0.9.6.dev0" and data["v1"]["version"] == "0.9.6.dev0"
    assert all(s.get("sha256") or s.get("commit") for s in data["sources"])
    assert len(data["templates"]) > 100 and len(data["keys"]) > 250


@pytest.mark.parametrize(("given", "versions", "known"), [
    ("0.9.5", ("0.9.5",), True), ("main", ("0.9.6.dev0",), True), ("0.9.6.dev0", ("0.9.6.dev0",), True),
    ("0.8.4", ("0.8.3", "0.9.0"), True), ("0.8.4.dev0", ("0.8.3", "0.9.0"), True),
    ("0.9.7", ("0.9.6.dev0",), True), ("0.7.1", ("0.8.0",), True), (None, None, False), ("nightly", None, False)])
def test_version_choice(given, versions, known):
    rel = choose(given)
    assert rel.known is known
    assert rel.versions == (versions or tuple(load()["versions"]))


def test_version_precedence():
    assert version_in_use("0.8.3", {"llamafactory": "0.9.1"}).versions == ("0.8.3",)
    assert version_in_use(None, {"llamafactory": "0.9.1"}, "env.txt").source == "env.txt"
    assert version_in_use(None, None, use_installed=False).known is False


@pytest.mark.parametrize(("version", "values"), [
    ("0.8.3", {"quantization_method": "bitsandbytes", "quantization_bit": 4}),   # the user's 0.8.4 run trained
    ("0.8.4", {"quantization_method": "bitsandbytes", "quantization_bit": 4}),
    ("0.9.1", {"image_resolution": 512}),
    ("0.9.2", {"new_special_tokens": "<a>,<b>"}),
])
def test_a_key_or_value_the_release_declares_is_no_problem(version, values):
    base = {"model_name_or_path": "m", "stage": "sft", "do_train": True}
    assert check_keys({**base, **values}, env={}, release=choose(version), transformers_version="4.57.6") == []


def test_the_same_keys_on_a_release_that_lacks_them():
    rel = choose("0.9.5")
    probs = {p.key: p for p in check_keys({"stage": "sft", "quantization_method": "bitsandbytes",
                                           "image_resolution": 512}, env={}, release=rel,
                                          transformers_version="5.6.0")}
    assert probs["quantization_method"].kind == "invalid_value" and probs["quantization_method"].condition is None
    assert probs["image_resolution"].kind == "renamed"


def test_unknown_release_warns_instead_of_erroring(tmp_path):
    report = _lint(tmp_path, QLORA_08, "--llamafactory", "unknown-build")
    assert not _errors(report)
    warned = [f for f in report["findings"] if f["name"] == "unverified-config-problem"]
    assert warned and warned[0]["location"]["key"] == "quantization_method"
    lf = [a for a in report["assumptions"] if a["name"] == "lf-version"]
    assert lf and lf[0]["resolve_with"].startswith("--llamafactory")


def test_release_from_env_file(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text("- `llamafactory` version: 0.8.3\n- Platform: Linux\n- Python version: 3.10.12\n"
                   "- PyTorch version: 2.3.0+cu121 (GPU)\n- Transformers version: 4.41.2\n", encoding="utf-8")
    assert not _errors(_lint(tmp_path, QLORA_08, "--env", str(env)))
    assert ("invalid-value", "quantization_method") in _errors(_lint(tmp_path, QLORA_08, "--llamafactory", "0.9.5"))


def test_template_by_release(tmp_path):
    text = QLORA_08.replace("quantization_method: bitsandbytes\n", "").replace("template: llama3", "template: moss_vl")
    assert not _errors(_lint(tmp_path, text, "--llamafactory", "main"))
    errs = _lint(tmp_path, text, "--llamafactory", "0.9.5")
    msg = [f["message"] for f in errs["findings"] if f["name"] == "template-not-registered"]
    assert msg and "LLaMA-Factory 0.9.5 (only 0.9.6.dev0)" in msg[0]


@pytest.mark.parametrize(("values", "kind"), [
    ({"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "num_processes": 2}, "accelerate"),
    ({"identity": {"file_name": "identity.json"}, "alpaca_en_demo": {"file_name": "alpaca_en_demo.json"}},
     "dataset_info"),
    ({"identity": {"path": "data/identity.json", "source": "local", "converter": "alpaca"}}, "v1-dataset"),
    ({"model_name_or_path": "Qwen/Qwen3-4B", "template": "qwen3", "infer_backend": "vllm"}, "chat"),
    ({"model_name_or_path": "Qwen/Qwen3-4B", "adapter_name_or_path": "saves/x", "template": "qwen3",
      "export_dir": "out", "export_device": "cpu"}, "export"),
    ({"model_name_or_path": "Qwen/Qwen3-4B", "template": "qwen3", "task": "mmlu_test", "n_shot": 5,
      "lang": "en", "save_dir": "saves/eval"}, "eval"),
    ({"model": "Qwen/Qwen3-4B", "peft_config": {"name": "lora"}, "micro_batch_size": 1}, "train-v1"),
    ({"model": "Qwen/Qwen3-4B", "peft_config": {"name": "lora", "export_dir": "out"}}, "export-v1"),
    ({"model_name_or_path": "Qwen/Qwen3-4B", "stage": "sft", "do_train": True}, "train"),
])
def test_config_kinds(values, kind):
    assert kind_of(values) == kind


def test_a_file_that_is_not_an_lf_config_names_its_flag(tmp_path):
    acc = tmp_path / "fsdp.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n"
                   "fsdp_config:\n  fsdp_version: 2\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(acc), "--no-data"])
    assert res.exit_code == 2
    line = res.output.strip().splitlines()
    assert len(line) == 1 and "--accelerate-config" in line[0] and "unknown key" not in line[0]


def test_merge_is_not_modelled_as_training(tmp_path):
    cfg = tmp_path / "merge.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\nadapter_name_or_path: saves/qwen3-4b/lora/sft\n"
                   "template: qwen3_nothink\ntrust_remote_code: true\nexport_dir: saves/qwen3_sft_merged\n"
                   "export_size: 5\nexport_device: cpu\nexport_legacy_format: false\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--offline", "--format", "json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    # the adapter folder is not on this machine: said at info level (its rank is an assumption), nothing else
    assert report["memory"] is None and report["run"] is None
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("FD098", "info")]
    assert "adapter_name_or_path" in report["findings"][0]["message"]
    assert "adapter-rank" in {a["name"] for a in report["assumptions"]}
    note = next(n for n in report["notes"] if "export" in n)
    # Qwen3-4B: 4.02e9 parameters in bf16 = 7.49 GiB, loaded into host RAM with a rank-8 LoRA adapter in fp32 beside
    # it (7.93 GiB at the peak, facts/exportadapter.py) and written back as 7.49 GiB
    assert "host RAM" in note and "7.93 GiB at the peak" in note and "about 7.49 GiB in 2 shard" in note
    assert "logits" not in " ".join(report["notes"])


def test_vllm_chat_reserves_its_fraction(tmp_path):
    cfg = tmp_path / "chat.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\ntemplate: qwen3_nothink\n"
                   "infer_backend: vllm\nvllm_maxlen: 8192\nvllm_gpu_util: 0.9\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--offline", "--gpu", "A100-80GB",
                                    "--format", "json"])
    report = json.loads(res.stdout)
    note = next(n for n in report["notes"] if "vllm" in n)
    assert "8192 tokens" in note and "reserves" in note and report["memory"] is None


GALORE = """model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
stage: sft
do_train: true
finetuning_type: full
use_galore: true
galore_layerwise: true
galore_target: mlp,self_attn
dataset: identity
template: llama3
cutoff_len: 2048
output_dir: saves/llama3-8b/full/sft
per_device_train_batch_size: 1
pure_bf16: true
optim: adamw_torch
"""


def test_no_invented_launcher(tmp_path, monkeypatch):
    for k in ("WORLD_SIZE", "NPROC_PER_NODE", "FORCE_TORCHRUN"):
        monkeypatch.delenv(k, raising=False)
    alone = _lint(tmp_path, GALORE)
    assert not _errors(alone)
    assert [a for a in alone["assumptions"] if a["name"] == "launcher"]
    assert ("distributed-incompatible-option", "galore_layerwise") in _errors(_lint(tmp_path, GALORE, "--gpu",
                                                                                    "8xA100-80GB"))
    monkeypatch.setenv("FORCE_TORCHRUN", "1")
    assert ("distributed-incompatible-option", "galore_layerwise") in _errors(_lint(tmp_path, GALORE))


def _examples() -> list[Path]:
    if SHARED is None:
        return []
    root = SHARED / "reference" / "llamafactory" / "examples"
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


@pytest.mark.slow
@pytest.mark.skipif(SHARED is None, reason="no ../shared/reference/llamafactory/examples (the LF snapshot)")
def test_lf_examples_at_the_snapshot_lint_clean_on_main(monkeypatch):
    """Every YAML and JSON under LF's examples/ at the snapshot, linted together with no --gpu for LF main: no
    error, and every file recognised as a config kind."""
    monkeypatch.chdir(SHARED / "reference" / "llamafactory")
    files = [str(p.relative_to(Path.cwd())) for p in _examples()]
    res = CliRunner().invoke(main, ["lint", *files, "--llamafactory", "main", "--format", "json"])
    report = json.loads(res.stdout)
    assert not [(f["location"]["file"], f["name"]) for f in report["findings"] if f["severity"] == "error"]
    assert set(report["kinds"]) == set(files), set(files) - set(report["kinds"])
    kinds = set(report["kinds"].values())
    assert {"train", "train-v1", "export", "export-v1", "chat", "accelerate", "deepspeed"} <= kinds


@pytest.mark.slow
@pytest.mark.skipif(SHARED is None, reason="no ../shared/reference/llamafactory/examples (the LF snapshot)")
@pytest.mark.parametrize("version", ["0.9.0", "0.9.5"])
def test_lf_examples_on_older_releases_fail_only_for_what_the_release_lacks(version, monkeypatch):
    """The snapshot's examples judged for an older release: each error names a key, value or template that release
    does not have (the catalog says so), never one it has."""
    monkeypatch.chdir(SHARED / "reference" / "llamafactory")
    files = [str(p.relative_to(Path.cwd())) for p in _examples() if "/v1/" not in str(p)]
    res = CliRunner().invoke(main, ["lint", *files, "--llamafactory", version, "--format", "json"])
    report = json.loads(res.stdout)
    rel = choose(version)
    errs = [f for f in report["findings"] if f["severity"] == "error"]
    assert errs   # main's examples use what older releases lack (moss_vl, kt_config, ...)
    for f in errs:
        key = f["location"]["key"]
        assert f["name"] in ("unknown-key", "renamed-key", "template-not-registered", "invalid-value"), f
        if f["name"] == "template-not-registered":
            name = f["message"].split("`template: ")[1].split("`")[0]
            assert not rel.has_template(name), f
        elif f["name"] != "invalid-value":
            assert not rel.has_key(key), f


@pytest.mark.slow
@pytest.mark.skipif(SHARED is None, reason="no ../shared/reference/llamafactory/examples (the LF snapshot)")
def test_every_v1_training_example_gets_an_estimate(monkeypatch):
    """Offline, every v1 training example gets its estimate from the bundled catalog (Qwen/Qwen3.5-0.8B, the last one
    missing, has its entry), FSDP2 sharded where dist_config says fsdp2; a model the catalog lacked would narrow the
    check to model-unresolved, as for v0."""
    monkeypatch.chdir(SHARED / "reference" / "llamafactory")
    train = [p for p in sorted(Path("examples/v1").rglob("*.yaml")) if "export" not in p.name]
    assert len(train) >= 15
    estimated = 0
    for p in train:
        # 16 GPUs: the fsdpturbo MoE example sets ep_size 16, which v1 refuses on fewer data-parallel ranks (FD043)
        res = CliRunner().invoke(main, ["check", str(p), "--no-data", "--offline", "--gpu", "16xH100-80GB",
                                        "--llamafactory", "main", "--format", "json"])
        assert res.exit_code in (0, 1), (p, res.output)
        report = json.loads(res.stdout)
        assert not [f for f in report["findings"] if f["severity"] == "error" and f["category"] == "config"], p
        if report["memory"] is None:
            assert "model-unresolved" in {f["name"] for f in report["findings"]}, (p, report["notes"])
            continue
        estimated += 1
        assert report["memory"]["per_gpu_gib"]["total"] > 0
        if "fsdp2" in p.read_text() and "deepspeed" not in p.read_text():
            assert report["run"]["engine"] == "fsdp", (p, report["run"])
    assert estimated == len(train)


def test_use_v1_on_the_launch_line_reads_the_config_as_v1(tmp_path):
    """`USE_V1=1 llamafactory-cli sft x.yaml` runs v1's parser whatever the keys: a v0 YAML launched so stops on
    its first v0 key (LF main cli.py: USE_V1 dispatches to v1/launcher.py)."""
    launch = tmp_path / "train.sh"
    launch.write_text("USE_V1=1 llamafactory-cli sft v0.yaml\n", encoding="utf-8")
    cfg = tmp_path / "v0.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen3-4B\nstage: sft\ndo_train: true\ndataset: identity\n"
                   "template: qwen3\noutput_dir: saves/x\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(cfg), "--launch", str(launch), "--no-data", "--offline",
                                    "--format", "json"])
    report = json.loads(res.stdout)
    assert report["config_kind"] == "train-v1"
    first = next(f for f in report["findings"] if f["location"]["key"] == "model_name_or_path")
    assert first["name"] == "unknown-key" and "the model is `model`" in first["message"]


def test_lint_names_the_kind_of_every_file(tmp_path):
    acc = tmp_path / "fsdp.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n", encoding="utf-8")
    info = tmp_path / "dataset_info.json"
    info.write_text('{"identity": {"file_name": "identity.json"}}', encoding="utf-8")
    v1 = tmp_path / "v1.yaml"
    v1.write_text("model: Qwen/Qwen3-4B\npeft_config:\n  name: lora\n  r: 16\nmicro_batch_size: 1\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["lint", str(acc), str(info), str(v1), "--format", "json"])
    report = json.loads(res.stdout)   # the skip reasons of the files lint does not judge go to stderr
    assert report["kinds"] == {str(acc): "accelerate", str(info): "dataset_info", str(v1): "train-v1"}
    assert not _errors(report)
