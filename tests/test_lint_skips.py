"""lint never skips silently (issue #25): a YAML of LLaMA-Factory keys only is linted, every other skip says why
on stderr, and what LLaMA-Factory rejects at launch comes before what depends on this machine's files.
Fixtures: fixtures/lint/issue25/ (LLaMA-Factory 0.9.5 keys; the LF messages quoted by the rules)."""

from __future__ import annotations

import os

from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.pipeline import lint
from finetune_doctor.settings import Options

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "lint", "issue25")


def test_a_yaml_of_data_keys_only_is_linted_and_its_conflict_found():
    p = os.path.join(FIX, "data_keys_only.yaml")
    assert lint.classify(p) == "lf"
    r = lint.run([p], Options(command="lint"))
    msgs = [f.message for f in r.findings if f.name == "conflicting-options"]
    assert any("`val_size: 0.1` with `streaming`" in m for m in msgs)


def test_other_yaml_is_skipped_with_its_reason_on_stderr():
    r = CliRunner().invoke(main, ["lint", os.path.join(FIX, "github_workflow.yaml")])
    assert r.exit_code == 0
    assert "skipped" in r.stderr and "github_workflow.yaml" in r.stderr and "not a training config" in r.stderr
    assert "skipped" not in r.stdout


def test_launch_errors_sort_before_findings_that_depend_on_this_machine():
    # --strict makes the paths that are not on this machine errors (without it they are not-checked-here, info)
    r = lint.run([os.path.join(FIX, "launch_and_machine.yaml")], Options(command="lint", strict=True))
    names = [f.name for f in r.findings if f.severity == "error"]
    assert names.index("deepspeed-file-missing") > names.index("conflicting-options")
    assert names.index("deepspeed-file-missing") > names.index("missing-required-key")


def test_standard_input_fragment_is_linted_and_a_foreign_one_skipped_with_its_reason():
    with open(os.path.join(FIX, "data_keys_only.yaml"), encoding="utf-8") as fh:
        r = CliRunner().invoke(main, ["lint", "-", "--format", "concise"], input=fh.read())
    assert r.exit_code == 1 and "`val_size: 0.1` with `streaming`" in r.stdout
    r = CliRunner().invoke(main, ["lint", "-"], input="name: CI\non: [push]\n")
    assert r.exit_code == 0 and "skipped -: a YAML with neither model_name_or_path" in r.stderr
