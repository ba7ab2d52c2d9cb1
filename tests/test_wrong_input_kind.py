"""A file given to the wrong command, or a YAML that does not parse, is told apart from "nothing to say" (issue 26's
edges; found by the 2026-12-07 new-user trial): `postmortem CONFIG.yaml` names `check`, `check train.log` names
`postmortem`, and a malformed YAML handed to `lint` is an error at its line, on a file or on standard input.

Inputs are the repository's real fixtures: LLaMA-Factory's example config, a stock-shaped DeepSpeed JSON and a run
log with HF Trainer's metric dicts and tqdm bar (fixtures/postmortem/case_041).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers import textfile

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "fixtures/llamafactory/examples/train_lora/qwen3_lora_sft.yaml"
DS = ROOT / "fixtures/deepspeed/zero3_typos.json"
LOG = ROOT / "fixtures/postmortem/case_041/log.txt"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.setattr(textfile, "_PROVIDED", {})


def _run(*args, stdin=None):
    return CliRunner().invoke(main, list(args), input=stdin)


def test_postmortem_on_a_training_config_names_check():
    res = _run("postmortem", str(CONFIG))
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line and line.endswith("--config")
    assert f"{CONFIG}: this is a LLaMA-Factory config" in line and "`doctor check`" in line


def test_postmortem_on_a_deepspeed_json_names_its_flag():
    res = _run("postmortem", str(DS))
    assert res.exit_code == 2 and "DeepSpeed config" in res.output and "--deepspeed" in res.output


def test_check_on_a_log_names_postmortem():
    res = _run("check", str(LOG))
    assert res.exit_code == 2
    assert "malformed YAML" in res.output and f"`doctor postmortem {LOG}`" in res.output


def test_check_on_a_broken_config_does_not_call_it_a_log(tmp_path):
    bad = tmp_path / "train.yaml"
    bad.write_text("model_name_or_path: Qwen/Qwen3-4B\nstage: [sft\n")
    res = _run("check", str(bad))
    assert res.exit_code == 2 and "malformed YAML" in res.output and "postmortem" not in res.output


@pytest.mark.parametrize("where", ["stdin", "file"])
def test_lint_reports_a_malformed_yaml_of_unknown_keys(tmp_path, where):
    if where == "stdin":
        res = _run("lint", "-", stdin=b"foo: [\n")
        name = "-"
    else:
        (tmp_path / "x.yaml").write_text("foo: [\n")
        name = str(tmp_path / "x.yaml")
        res = _run("lint", name)
    assert res.exit_code == 2
    assert res.output.strip() == f"doctor: {name}:2: malformed YAML: did not find expected node content"


def test_lint_still_skips_a_wellformed_foreign_yaml(tmp_path):
    wf = tmp_path / "ci.yaml"
    wf.write_text("name: ci\non: [push]\njobs:\n  t:\n    runs-on: ubuntu-latest\n")
    res = _run("lint", str(wf))
    assert res.exit_code == 0 and "not a training config" in res.output


@pytest.mark.parametrize("name, catalogued, fair", [
    ("/gpfs/public/models/Qwen2-VL-72B-Instruct", "Qwen/Qwen2-VL-7B-Instruct", False),   # 72B is no typo of 7B
    ("Qwen/Qwen2.5-8B-Instruct", "Qwen/Qwen2.5-7B", True),                                # 8B may be a typo of 7B
    ("/models/my-finetune", "Qwen/Qwen2.5-7B", True),                                     # no size stated
])
def test_a_suggestion_keeps_the_size_the_name_states(name, catalogued, fair):
    from finetune_doctor.readers.model import byname
    from finetune_doctor.readers.model.catalog import find_in_catalog

    entry = find_in_catalog(catalogued)
    assert entry is not None
    assert byname.near_size(name, entry[0]) is fair


def test_a_skipped_file_of_a_kind_lf_reads_elsewhere_says_which_flag_takes_it(tmp_path):
    """LLaMA-Factory's examples/accelerate/fsdp_config.yaml handed to lint: the skip reason names
    --accelerate-config, as the Kinds section names it accelerate (it said "not a training config")."""
    acc = tmp_path / "fsdp_config.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_machines: 1\nnum_processes: 2\n"
                   "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\nmixed_precision: bf16\n")
    res = _run("lint", str(acc), "--format", "json")
    rep = json.loads(res.stdout)
    assert rep["kinds"][str(acc)] == "accelerate"
    # linted since trial 3 (its own settings: rules/fsdp-wrap-class-unset.yaml), and the note names the flag
    assert any(n.startswith(f"{acc}: ") and "--accelerate-config" in n for n in rep["notes"])
