"""Fixes keep what YAML users rely on (issue 27): anchors, aliases and merge keys survive, or the fix says why
it cannot apply; a tab after ``key:`` (accepted by libyaml and OmegaConf, refused by ruamel) never blocks a fix;
an unknown key inside a merge key is no KeyError."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.fixes.edit import apply_edits
from finetune_doctor.types import Edit

HEAD = ("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\n")


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "train.yaml"
    p.write_text(HEAD + body)
    return p


def load(p: Path) -> dict:
    return yaml.load(p.read_text(), Loader=yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader)


def test_tab_after_the_colon_does_not_block_the_fix(tmp_path):
    p = write(tmp_path, "dpo_beta:\t0.1  # from an old tutorial\n")
    res = CliRunner().invoke(main, ["lint", "--fix", str(p)])
    assert res.exit_code == 0, res.output
    assert p.read_text().endswith("pref_beta:\t0.1  # from an old tutorial\n")


def test_tab_after_the_colon_with_a_new_value(tmp_path):
    p = write(tmp_path, "learning_rate:\t0.1\n")
    r = apply_edits(str(p), [Edit(str(p), "learning_rate", 0.0001)])
    assert r.changed and load(p)["learning_rate"] == 0.0001
    assert "learning_rate:\t0.0001" in p.read_text()


def test_deleting_an_anchor_an_alias_uses_is_refused_with_a_reason(tmp_path):
    p = write(tmp_path, "max_source_length: &len 1024\ncutoff_len: *len\n")
    before = p.read_text()
    r = apply_edits(str(p), [Edit(str(p), "max_source_length", delete=True)])
    assert not r.changed and p.read_text() == before          # was: exit 2 "undefined alias" on a valid file
    assert any("&len" in n and "*len" in n for n in r.notes)


def test_setting_an_anchored_value_an_alias_uses_is_refused(tmp_path):
    p = write(tmp_path, "learning_rate: &lr 0.1\nwarmup_ratio: 0.1\nlr_note: *lr\n")
    r = apply_edits(str(p), [Edit(str(p), "learning_rate", 0.0001)])
    assert not r.changed and any("anchor &lr" in n for n in r.notes)


def test_an_anchor_no_alias_uses_is_kept(tmp_path):
    p = write(tmp_path, "learning_rate: &lr 0.1\n")
    r = apply_edits(str(p), [Edit(str(p), "learning_rate", 0.0001)])
    assert r.changed and "learning_rate: &lr 0.0001" in p.read_text()


def test_a_rename_keeps_the_anchor_and_the_alias(tmp_path):
    p = write(tmp_path, "dpo_beta: &beta 0.1\nsimpo_gamma: *beta\n")
    r = apply_edits(str(p), [Edit(str(p), "pref_beta", 0.1), Edit(str(p), "dpo_beta", delete=True)])
    assert r.changed, r.notes
    text = p.read_text()
    assert "pref_beta: &beta 0.1" in text and "simpo_gamma: *beta" in text
    assert load(p)["simpo_gamma"] == 0.1


def test_an_alias_value_is_replaced_by_the_new_value_and_nothing_else_moves(tmp_path):
    p = write(tmp_path, "base_lr: &lr 0.1\nlearning_rate: *lr\n")
    r = apply_edits(str(p), [Edit(str(p), "learning_rate", 0.0001)])
    assert r.changed
    d = load(p)
    assert d["learning_rate"] == 0.0001 and d["base_lr"] == 0.1 and "base_lr: &lr 0.1" in p.read_text()


def test_unknown_key_inside_a_merge_key_is_no_key_error(tmp_path):
    p = write(tmp_path, "<<: {learing_rate: 1.0e-4}\n")
    before = p.read_text()
    res = CliRunner().invoke(main, ["lint", "--fix", "--unsafe-fixes", str(p)])
    assert res.exit_code == 1, res.output                      # the finding stays, reported
    assert "internal error" not in res.output and "KeyError" not in res.output
    assert "merge key" in res.output and p.read_text() == before


def test_a_merged_key_can_still_be_overridden(tmp_path):
    p = write(tmp_path, "defaults: &d {learning_rate: 0.1}\n<<: *d\n")
    r = apply_edits(str(p), [Edit(str(p), "learning_rate", 0.0001)])
    assert r.changed and load(p)["learning_rate"] == 0.0001 and load(p)["defaults"] == {"learning_rate": 0.1}
