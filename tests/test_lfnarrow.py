"""No LLaMA-Factory version given: the config's own keys narrow the release range (readers/config/lfnarrow.py,
issue #21). Before, every one of LF's example training YAMLs got an `unverified-config-problem` warning
(``trust_remote_code`` is declared from 0.9.2 on), so a pre-commit hook warned on every file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config import lfrelease
from finetune_doctor.readers.config.keyschema import check_keys
from finetune_doctor.readers.config.lfnarrow import narrow
from finetune_doctor.readers.config.lfrelease import choose
from finetune_doctor.readers.config.yamlcfg import load_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"
APOLLO = EXAMPLES / "extras" / "apollo" / "llama3_full_sft.yaml"

QWEN2VL_MIXED = """\
### model
model_name_or_path: Qwen/Qwen2-VL-7B-Instruct
trust_remote_code: true
image_resolution: 512

### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all

### dataset
dataset: mllm_demo
template: qwen2_vl
cutoff_len: 2048

### output
output_dir: saves/qwen2_vl-7b/lora/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
bf16: true
"""


@pytest.fixture
def no_lf_here(monkeypatch):
    """The test venv carries llamafactory for the oracle tests; a user's laptop does not."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)


def _lint(path: Path, *args: str) -> dict:
    res = CliRunner().invoke(main, ["lint", str(path), "--format", "json", *args])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def test_apollo_example_narrows_to_the_releases_with_its_keys(no_lf_here):
    values = load_config(str(APOLLO)).values
    rel = narrow(choose(None), values)
    assert rel.versions == ("0.9.2", "0.9.3", "0.9.4", "0.9.5", "0.9.6.dev0") and not rel.known
    assert dict(rel.evidence)["trust_remote_code"] == "0.9.2-0.9.6.dev0"
    assert dict(rel.evidence)["use_apollo"] == "0.9.2-0.9.6.dev0"
    assert "exist together only in LLaMA-Factory 0.9.2-0.9.6.dev0" in rel.note and not rel.conflict
    # judged for the narrowed range, the 0.9.2 keys are no problem; for every release they were
    assert not [p for p in check_keys(values, env={}, release=rel) if p.condition]
    before = {p.key for p in check_keys(values, env={}, release=choose(None)) if p.condition}
    assert {"trust_remote_code", "use_apollo", "apollo_rank"} <= before


def test_keys_that_share_no_release_are_the_conflict(no_lf_here, tmp_path):
    cfg = tmp_path / "qwen2vl_lora_sft.yaml"
    cfg.write_text(QWEN2VL_MIXED, encoding="utf-8")
    rel = narrow(choose(None), load_config(str(cfg)).values)
    assert rel.conflict == (("trust_remote_code", "0.9.2-0.9.6.dev0"), ("image_resolution", "0.9.0-0.9.1"))
    assert len(rel.versions) == 11   # the selection is kept: no release to narrow to
    assert rel.note.endswith("exist together in no catalogued release: `trust_remote_code` (0.9.2-0.9.6.dev0); "
                             "`image_resolution` (0.9.0-0.9.1)")
    rep = _lint(cfg)
    ours = [f for f in rep["findings"] if f["name"] in ("keys-of-no-one-release", "unverified-config-problem")]
    assert [(f["name"], f["location"]["key"], f["location"]["line"]) for f in ours] == [
        ("keys-of-no-one-release", "trust_remote_code", 3)]
    assert ("`trust_remote_code` (0.9.2-0.9.6.dev0), `image_resolution` (0.9.0-0.9.1)" in ours[0]["message"]
            and ours[0]["severity"] == "error")
    # trust_remote_code from 0.9.2, image_resolution up to 0.9.1: only a git build between them may hold both
    assert "Only a git install between 0.9.1 and 0.9.2 could declare them all" in ours[0]["message"]


def test_keys_no_build_could_hold_together_are_an_error_that_says_so(no_lf_here, tmp_path):
    # train_mm_proj_only was declared up to 0.9.1, kt_non_expert_weight_path only in the snapshot (0.9.6.dev0):
    # releases lie between them, so no git install declares both
    cfg = tmp_path / "mixed.yaml"
    cfg.write_text(QWEN2VL_MIXED.replace("trust_remote_code: true\n", "kt_non_expert_weight_path: /data/w\n")
                   .replace("image_resolution: 512\n", "train_mm_proj_only: true\n"), encoding="utf-8")
    rep = _lint(cfg)
    ours = [f for f in rep["findings"] if f["name"] == "keys-of-no-one-release"]
    assert len(ours) == 1 and ours[0]["severity"] == "error", [f["name"] for f in rep["findings"]]
    assert "No build of LLaMA-Factory, released or from git, declares them all." in ours[0]["message"]
    assert "`train_mm_proj_only` (0.8.0-0.9.1)" in ours[0]["message"]


def test_one_old_key_narrows_to_its_releases(no_lf_here, tmp_path):
    cfg = tmp_path / "qwen2vl_lora_sft.yaml"
    cfg.write_text(QWEN2VL_MIXED.replace("trust_remote_code: true\n", ""), encoding="utf-8")
    rep = _lint(cfg)
    assert not [f for f in rep["findings"] if f["name"] in ("keys-of-no-one-release", "unverified-config-problem")]
    lf = next(a for a in rep["assumptions"] if a["name"] == "lf-version")
    assert lf["value"] == "any release 0.9.0-0.9.1" and lf["alternatives"] == ["0.9.0", "0.9.1"]
    assert "`image_resolution` (0.9.0-0.9.1)" in lf["source"]


def test_a_key_of_one_release_names_it_alone(no_lf_here, tmp_path):
    # kt_non_expert_weight_path exists only in the snapshot (0.9.6.dev0) at this catalogue
    cfg = tmp_path / "kt.yaml"
    cfg.write_text(QWEN2VL_MIXED.replace("image_resolution: 512\n", "kt_non_expert_weight_path: /data/w\n"),
                   encoding="utf-8")
    lf = next(a for a in _lint(cfg)["assumptions"] if a["name"] == "lf-version")
    assert lf["value"] == "0.9.6.dev0"


def test_a_known_version_a_v1_config_and_extra_args_are_not_narrowed(monkeypatch):
    values = load_config(str(APOLLO)).values
    known = choose("0.9.1")
    assert narrow(known, values) is known
    unknown = choose(None)
    assert narrow(unknown, values, "train-v1") is unknown
    monkeypatch.setenv("ALLOW_EXTRA_ARGS", "1")   # LF drops extra keys then: a key says nothing of the release
    assert narrow(unknown, values) is unknown


def test_lf_examples_get_no_release_warning(no_lf_here):
    """Measured with scripts/measure_release_warnings.py: before, 21 of these 23 training YAMLs got the warning
    (1.7 per file); each one's keys exist together in some release, so none does now."""
    files = sorted(p for p in EXAMPLES.rglob("*.yaml") if "do_train: true" in p.read_text(encoding="utf-8"))
    assert len(files) == 23
    ranges = {}
    for p in files:
        rep = _lint(p)
        assert not [f["location"].get("key") for f in rep["findings"]
                    if f["name"] in ("keys-of-no-one-release", "unverified-config-problem")], p
        ranges[p.name] = next(a["value"] for a in rep["assumptions"] if a["name"] == "lf-version")
    assert ranges["llama3_full_sft.yaml"] == "any release 0.9.2-0.9.6.dev0"
    assert sum(v == "any release 0.8.0-0.9.6.dev0" for v in ranges.values()) == 2
