"""A config that repeats a key (trial 8, LlamaFactory#8150: `report_to: tensorboard` on lines 27 and 39). How LF
reads it depends on the release (hparams/parser.py `read_args` of each wheel): 0.8.0-0.9.3 keep the last value
(yaml.safe_load / HfArgumentParser.parse_yaml_file), 0.9.4 on refuse the file (OmegaConf.load: "found duplicate
key"). The doctor judges it as a finding at its line, never an exit-2 refusal of the whole file, and the "looks
like a training log" hint is kept for text that reads as a log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.facts.lint import duplicate_facts
from finetune_doctor.readers.config.lfrelease import choose
from finetune_doctor.readers.config.yamlcfg import load_config

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "lint" / "trial8" / "8150_qwen3_8b_pt.yaml"


def _check(*args: str):
    r = CliRunner().invoke(main, ["check", str(FIX), "--gpu", "8x64GB", *args], catch_exceptions=False)
    return r, " ".join(r.output.split())   # the text reporter wraps lines


def test_a_release_that_loads_with_omegaconf_makes_it_an_error_at_the_repeat():
    r, out = _check("--llamafactory", "0.9.5")
    assert r.exit_code == 1, r.output
    assert "FD046 duplicate-key" in out and "8150_qwen3_8b_pt.yaml:39" in out
    assert "`report_to` is set twice (lines 27 and 39, the same value)" in out
    assert 'refuses a repeated key ("found duplicate key report_to")' in out
    # the rest of the diagnosis still runs: the memory estimate of the de-duplicated file
    # (the figure itself is the memory model's, pinned elsewhere; here only that the estimate was made)
    assert re.search(r"total \d+\.\d\d \d+\.\d% (needs to run .*? )?capacity 62\.74 GiB", out) and "looks like a training log" not in out


def test_a_release_that_keeps_the_last_value_makes_it_a_warning():
    r, out = _check("--llamafactory", "0.9.3")
    assert r.exit_code == 0, r.output
    assert "FD047 duplicate-key-last-wins" in out and "FD046" not in out
    assert "keeps the last value silently" in out and "releases 0.9.4-0.9.6.dev0 (OmegaConf.load)" in out


def test_an_unknown_release_is_open_and_the_last_value_is_read():
    doc = load_config(str(FIX))
    assert doc.values["report_to"] == "tensorboard"
    assert [(d["key"], d["first_line"], d["line"], d["same"]) for d in doc.duplicates] == [("report_to", 27, 39, True)]
    [d] = duplicate_facts(doc, choose(None))
    assert d["refused"] is None and d["kept_versions"] == "0.8.0-0.9.3" and d["refused_versions"] == "0.9.4-0.9.6.dev0"
    assert [x["refused"] for x in duplicate_facts(doc, choose("0.9.4"))] == [True]
    assert [x["refused"] for x in duplicate_facts(doc, choose("0.9.2"))] == [False]


def test_different_values_say_which_one_is_dropped(tmp_path):
    p = tmp_path / "lr.yaml"
    p.write_text(FIX.read_text().replace("learning_rate: 1.0e-5\n", "learning_rate: 1.0e-5\nlearning_rate: 2.0e-5\n"))
    doc = load_config(str(p))
    assert doc.values["learning_rate"] == 2.0e-5
    r = CliRunner().invoke(main, ["check", str(p), "--gpu", "8x64GB", "--llamafactory", "0.9.2"],
                           catch_exceptions=False)
    out = " ".join(r.output.split())
    assert "`learning_rate` is set twice (lines 32 and 33, with different values)" in out
    assert "so line 32 has no effect" in out


@pytest.mark.parametrize("text, log", [
    # a config is no log although `plot_loss: true` holds the trigger "loss: "
    (None, False),
    ("[INFO|trainer.py:2414] 2025-05-22 19:01:02,113 >> ***** Running training *****\n"
     "{'loss': 2.1, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.01}\n: bad: yaml: [\n", True),
])
def test_the_log_hint_only_for_text_that_reads_as_a_log(tmp_path, text, log):
    p = tmp_path / "x.yaml"
    p.write_text(FIX.read_text() + "  broken: [\n" if text is None else text)
    r = CliRunner().invoke(main, ["check", str(p)], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    assert ("looks like a training log" in r.output) is log


def test_with_no_release_known_it_is_an_assumption_not_a_finding(monkeypatch):
    from finetune_doctor.readers.config import lfrelease

    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    r, out = _check("--format", "json")
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(r.output)
    assert not [f for f in data["findings"] if f["name"] in ("duplicate-key", "duplicate-key-last-wins")]
    [a] = [a for a in data["assumptions"] if a["name"] == "duplicate-key"]
    assert "`report_to` (lines 27 and 39)" in a["source"] and "0.9.4-0.9.6.dev0" in a["alternatives"][0]
