"""New-user trial 18 (benchmarks/results/trial18.md): model folders named the way caches and users flatten a
repository id, a YAML LLaMA-Factory's loader refuses, a key valid only in old releases, and too few Ray workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.model.catalog import owner_joined_repo

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "trial18"
K1 = FIX / "k1_qwen3_14b_full_ray_cut.yaml"
L1 = FIX / "l1_lora_eval_split.yaml"


def _invoke(*args: str, codes=(0, 1)):
    r = CliRunner().invoke(main, [*args, "--offline"])
    assert r.exit_code in codes, r.output
    return r


def _json(*args: str) -> dict:
    return json.loads(_invoke(*args, "--format", "json").stdout)


@pytest.mark.parametrize("leaf, repo", [
    ("Qwen_Qwen3-14B", "Qwen/Qwen3-14B"),             # LlamaFactory#8641's folder
    ("Qwen__Qwen3-14B", "Qwen/Qwen3-14B"),
    ("Qwen___Qwen2___5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),   # ModelScope writes a dot as ___
    ("meta-llama--Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),
])
def test_owner_joined_folder_reads_as_its_repository(leaf, repo):
    assert owner_joined_repo(f"/workspace/models/{leaf}")[0] == repo


@pytest.mark.parametrize("leaf", ["Qwen3-14B", "my_qwen3-14b", "Qwen_", "qwen2.5-7b"])
def test_no_catalogue_owner_in_front_is_no_repository(leaf):
    assert owner_joined_repo(f"/m/{leaf}") is None


@pytest.mark.parametrize("path", ["/workspace/models/Qwen_Qwen3-14B", "/m/Qwen__Qwen3-14B", "/m/Qwen___Qwen3-14B",
                                  "/cache/models--Qwen--Qwen3-14B"])
def test_flattened_folder_is_sized_as_the_catalogue_entry_and_said_so(path):
    """Trial 18, trip 4: `doctor check` of LF#8641's config gave FD607 model-unresolved for
    /workspace/models/Qwen_Qwen3-14B; the repository the name encodes is now sized, the reading an assumption."""
    d = _json("estimate", str(K1), f"model_name_or_path={path}", "--gpu", "2xA100-80GB")
    assert d["run"]["params_b"] == pytest.approx(14.77, abs=0.01)
    model = [a for a in d["assumptions"] if a["name"] == "model"]
    assert len(model) == 1 and model[0]["value"] == "Qwen/Qwen3-14B"
    assert f"folder name '{path}' read as the repository Qwen/Qwen3-14B" in model[0]["source"]
    assert model[0]["resolve_with"].startswith("--model-config")
    assert "FD607" not in [f["code"] for f in d["findings"]]


def _codes(d: dict) -> dict[str, dict]:
    return {f["code"]: f for f in d["findings"]}


def test_fewer_ray_workers_than_gpus_warns_with_the_count():
    """Trial 18, trip 5: LF#8641 ran `ray_num_workers: 3` on 3 machines × 2 GPUs; check sized 3 ranks and said
    nothing of the 3 idle GPUs (only the opposite case, FD618, existed)."""
    d = _json("check", str(K1), "--gpu", "2xA100-80GB", "--nnodes", "3", "--llamafactory", "0.9.3")
    f = _codes(d)["FD625"]
    assert f["severity"] == "warning" and f["location"]["key"] == "ray_num_workers"
    assert "but the run is given 6 GPUs over 3 node(s)" in f["message"]
    assert f["fix"]["edits"][0]["value"] == 6
    assert "FD618" not in _codes(d)


@pytest.mark.parametrize("workers, code", [("6", None), ("8", "FD618")])
def test_one_worker_per_gpu_is_quiet_and_more_is_the_other_rule(workers, code):
    d = _json("check", str(K1), "--gpu", "2xA100-80GB", "--nnodes", "3", "--llamafactory", "0.9.3",
              f"ray_num_workers={workers}")
    assert "FD625" not in _codes(d)
    assert (code in _codes(d)) if code else ("FD618" not in _codes(d))


def test_a_file_pyyaml_refuses_is_an_error_that_names_the_line(monkeypatch):
    """Trial 18, trip 1: LF#8641's YAML ends in a bare `resources_per_worker`; PyYAML (LF's loader) stops on it,
    yet `doctor lint` and `check` exited 0. The cut-paste reading stays for the other findings."""
    from finetune_doctor.readers.config import lfrelease

    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    r = _invoke("lint", str(K1), "--llamafactory", "0.9.3", "--format", "json", codes=(1,))
    d = json.loads(r.stdout)
    f = _codes(d)["FD022"]
    assert f["severity"] == "error" and f["location"]["line"] == 47
    assert ("while scanning a simple key (line 47, column 1): could not find expected ':' (line 48, column 1)"
            in f["message"])
    assert "`resources_per_worker`" in f["message"]
    assert any(a["name"] == "config-complete" for a in d["assumptions"])   # still read as a cut paste
    d = _json("check", str(K1), "--gpu", "2xA100-80GB", "--nnodes", "3", "--llamafactory", "0.9.3")
    assert "FD022" in _codes(d) and d["summary"]["error"] >= 1


def test_the_refusal_is_pyyamls_own_words():
    import yaml

    from finetune_doctor.readers.config.yamlnodes import loader_refusal

    text = K1.read_text(encoding="utf-8")
    with pytest.raises(yaml.YAMLError) as err:
        yaml.safe_load(text)
    assert err.value.problem == "could not find expected ':'" and err.value.context == "while scanning a simple key"
    assert loader_refusal(text).startswith("while scanning a simple key (line 47")
    assert loader_refusal(text.rsplit("resources_per_worker", 1)[0]) is None


def _no_lf_installed(monkeypatch):
    from finetune_doctor.readers.config import lfrelease

    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)


def test_a_key_of_old_releases_is_a_warning_naming_the_range_and_the_refusing_release(monkeypatch):
    """Trial 18, trip 2: `doctor lint` of LF#5843's eval config assumed 0.8.0-0.8.2 because of `split` and said
    "No findings"; the user ran 0.9.1.dev0, which refused the key."""
    _no_lf_installed(monkeypatch)
    d = _json("lint", str(L1))
    f = _codes(d)["FD023"]
    assert f["severity"] == "warning" and f["location"]["key"] == "split" and f["location"]["line"] == 10
    msg = " ".join(f["message"].split())
    assert "`split` exists only in LLaMA-Factory 0.8.0-0.8.2: 0.8.3 and later refuse it" in msg
    assert "write `task: mmlu_test` and delete `split`" in msg and "pass --llamafactory VERSION" in msg
    lf = next(a for a in d["assumptions"] if a["name"] == "lf-version")
    assert "0.8.0-0.8.2" in lf["value"]


def test_a_stated_release_decides_instead(monkeypatch):
    _no_lf_installed(monkeypatch)
    d = _json("lint", str(L1), "--llamafactory", "0.9.1")
    assert "FD023" not in _codes(d) and "FD001" in _codes(d)
    d = _json("lint", str(L1), "--llamafactory", "0.8.2")
    assert not _codes(d)


def test_a_training_config_gets_the_plain_wording(monkeypatch, tmp_path):
    _no_lf_installed(monkeypatch)
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "dataset: alpaca_en_demo\nsplit: train\ntemplate: qwen\noutput_dir: saves/x\n"
                   "per_device_train_batch_size: 1\nlearning_rate: 1.0e-4\nbf16: true\n", encoding="utf-8")
    f = _codes(_json("lint", str(cfg)))["FD023"]
    msg = " ".join(f["message"].split())
    assert "task:" not in msg and "`split` exists only in LLaMA-Factory 0.8.0-0.8.2: 0.8.3 and later refuse it" in msg


def test_keys_of_the_same_releases_are_one_finding(monkeypatch):
    """LF's Ray example of 0.9.2-0.9.4 (LF#8641, #7327) carries four keys 0.9.5 dropped: one warning names them."""
    _no_lf_installed(monkeypatch)
    d = _json("lint", str(K1))
    old = [f for f in d["findings"] if f["code"] == "FD023"]
    assert len(old) == 1 and old[0]["location"]["line"] == 43
    assert ("`ray_run_name`, `ray_storage_path`, `placement_strategy` exist only in LLaMA-Factory 0.9.2-0.9.4: "
            "0.9.5 and later refuse them" in " ".join(old[0]["message"].split()))


def test_an_owner_in_front_of_no_known_model_stays_unresolved():
    d = _json("estimate", str(K1), "model_name_or_path=/m/Qwen__foo", "--gpu", "2xA100-80GB")
    assert "FD607" in _codes(d) and not [a for a in d["assumptions"] if a["name"] == "model"]


def test_a_stated_release_words_an_eval_configs_split_by_the_task_name(monkeypatch, tmp_path):
    """Trial 18, trip 2: with --llamafactory 0.9.1, FD001 on LF#5843's eval config gave the training answer
    ("set per dataset in dataset_info.json"); an eval config's split lives in the task name."""
    _no_lf_installed(monkeypatch)
    msg = " ".join(_codes(_json("lint", str(L1), "--llamafactory", "0.9.1"))["FD001"]["message"].split())
    assert "the split is part of the task name (`task: mmlu_test`" in msg and "dataset_info.json" not in msg
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "dataset: alpaca_en_demo\nsplit: train\ntemplate: qwen\noutput_dir: saves/x\n"
                   "per_device_train_batch_size: 1\nlearning_rate: 1.0e-4\nbf16: true\n", encoding="utf-8")
    msg = _codes(_json("lint", str(cfg), "--llamafactory", "0.9.1"))["FD001"]["message"]
    assert "set per dataset in dataset_info.json" in msg and "task:" not in msg
