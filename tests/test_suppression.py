"""Suppression comments: parsing, applying, and the unused-suppression rule (FD099) through the real engine."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from finetune_doctor.engine.judge import apply_suppressions
from finetune_doctor.engine.loader import find_rule, load_rules
from finetune_doctor.engine.suppression import Directive, apply, parse_suppressions, unused
from finetune_doctor.settings import Options
from finetune_doctor.types import Finding, Location

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"


def _f(code: str, line: int | None, file: str = "c.yaml", name: str = "some-rule") -> Finding:
    return Finding(code, name, "error", "config", "msg", Location(file, line, 1, None))


TEXT = """\
### model
model_name_or_path: m   # doctor: ignore[FD001, fd002]
# why: the team pins this on purpose
# doctor: ignore[accidental-fp32]

finetuning_type: full
url: http://x#doctor: ignore[FD003]
# doctor: ignore-file[FD203]
bf16: false
"""


def test_parse_lines_scopes_and_codes():
    s = parse_suppressions(TEXT)
    assert s.directives == (
        Directive(2, "line", ("FD001", "FD002"), (2,)),
        Directive(4, "line", ("accidental-fp32",), (4, 6)),   # own-line comment: itself and the next YAML line
        Directive(8, "file", ("FD203",)),
    )  # `http://x#doctor...` has no whitespace before '#': a value, not a comment (YAML 1.2 §6.6)


def test_apply_by_line_by_name_and_file_wide():
    s = parse_suppressions(TEXT)
    findings = [_f("FD001", 2), _f("FD002", 2), _f("FD001", 3), _f("FD101", 6, name="accidental-fp32"),
                _f("FD203", 9), _f("FD203", None), _f("FD203", 1, file="other.yaml")]
    kept, used = apply([f for f in findings if f.location.file == "c.yaml"], s)
    assert [(f.code, f.location.line) for f in kept] == [("FD001", 3)]
    assert used == {(2, "FD001"), (2, "FD002"), (4, "accidental-fp32"), (8, "FD203")}


def test_unused_respects_which_rules_ran():
    s = parse_suppressions("a: 1  # doctor: ignore[FD101, FD301, FD999]\n# doctor: ignore-file[FD203]\n")
    items = unused(s, frozenset(), "c.yaml", evaluated=["FD101", "FD203"], known=["FD101", "FD203", "FD301"])
    assert [(i["code"], i["line"], i["scope"], i["reason"]) for i in items] == [
        ("FD101", 1, "line", "unused"),
        ("FD999", 1, "line", "unknown"),      # FD301 exists but did not run here: not judged
        ("FD203", 2, "file", "unused"),
    ]
    assert items[0]["location"] == {"file": "c.yaml", "line": 1, "column": None, "key": None}
    assert unused(s, frozenset({(1, "FD101"), (2, "FD203")}), "c.yaml", ["FD101", "FD203"], None) == []


def test_the_rule_file_is_valid_and_shaped_as_required():
    rule = find_rule(load_rules(), "unused-suppression")
    assert (rule.code, rule.severity, rule.commands, rule.requires) == ("FD099", "warning", ("lint", "check"),
                                                                       ("lint",))


def test_apply_to_docs_with_the_engine(tmp_path):
    path = str(tmp_path / "c.yaml")
    text = "finetuning_type: full  # doctor: ignore[FD101]\nbf16: false  # doctor: ignore[FD002]\n"
    fp32 = Finding("FD101", "accidental-fp32", "error", "precision", "fp32", Location(path, 1, 1, "finetuning_type"))
    ds = Finding("FD201", "x", "error", "deepspeed", "ds", Location(str(tmp_path / "ds.json"), 3, 1, None))
    opts = Options(command="lint")
    out = apply_suppressions([fp32, ds], {path: text}, opts, "lint")
    assert [(f.code, f.location.file, f.location.line) for f in out] == [
        ("FD201", str(tmp_path / "ds.json"), 3), ("FD099", path, 2)]
    assert "FD002" in out[1].message and "suppresses nothing" in out[1].message
    # --ignore FD099 (or not selecting it) turns the unused report off; --select without FD002 leaves it unjudged
    assert [f.code for f in apply_suppressions([fp32], {path: text}, Options(command="lint",
                                                                            ignore=("FD099",)), "lint")] == []
    assert [f.code for f in apply_suppressions([fp32], {path: text},
                                               Options(command="lint", select=("FD1", "FD099")), "lint")] == []


def test_unused_finding_can_be_silenced_file_wide(tmp_path):
    path = str(tmp_path / "c.yaml")
    text = "bf16: false  # doctor: ignore[FD002]\n# doctor: ignore-file[FD099]\n"
    out = apply_suppressions([], {path: text}, Options(command="lint"), "lint")
    assert out == []


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="shared LLaMA-Factory examples not present")
def test_doctor_lint_end_to_end(tmp_path, monkeypatch):
    """`doctor lint` on a real LF example with an old key: suppressed by comment, then reported unused.

    In-process through click's command: three `python -m finetune_doctor` children cost ~1 CPU s each where
    nothing writes bytecode (this sandbox) and the process boundary adds nothing this test checks;
    tests/test_lintcli.py runs the console script in a child process and pins its output to click's."""
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    cfg = tmp_path / "qwen3_lora_sft.yaml"
    shutil.copy(EXAMPLES / "train_lora" / "qwen3_lora_sft.yaml", cfg)
    text = cfg.read_text().replace("lora_rank: 8", "lora_rank: 8\nnum_layer_trainable: 2  # doctor: ignore[FD002]")
    cfg.write_text(text)
    monkeypatch.chdir(tmp_path)

    def lint(*extra: str):
        return CliRunner().invoke(main, ["lint", "--format", "concise", *extra, str(cfg)])

    res = lint()
    assert "FD002" not in res.output and res.exit_code == 0, res.output
    cfg.write_text(text.replace("num_layer_trainable: 2  ", "freeze_trainable_layers: 2  "))
    res = lint()
    line = next(i for i, ln in enumerate(cfg.read_text().splitlines(), 1) if "freeze_trainable_layers" in ln)
    assert f"{cfg.name}:{line}:1: FD099" in res.output, res.output
    assert res.exit_code == 0  # a warning does not fail at the default --fail-on error
    assert lint("--fail-on", "warning").exit_code == 1


def test_each_unused_suppression_message_is_a_case_of_the_rules_table(tmp_path):
    """rules/unused-suppression.yaml words its three messages as a table keyed by ``item.case`` (it held one
    template of nested ``x if c else y``, issue #22); the text a user reads is what the template wrote."""
    import json

    from click.testing import CliRunner

    from finetune_doctor.cli import main

    cfg = tmp_path / "train.yaml"
    cfg.write_text("# doctor: ignore-file[FD203]\nmodel_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\n"
                   "finetuning_type: lora\nlora_target: all\ndataset: alpaca_en_demo\ntemplate: qwen\n"
                   "cutoff_len: 2048\noutput_dir: saves/out\nper_device_train_batch_size: 2\n"
                   "gradient_accumulation_steps: 8\nlearning_rate: 1.0e-4  # doctor: ignore[FD9Z9]\n"
                   "bf16: true  # doctor: ignore[FD101]\n")
    r = CliRunner().invoke(main, ["lint", str(cfg), "--offline", "--format", "json"])
    got = sorted(f["message"] for f in json.loads(r.output)["findings"] if f["name"] == "unused-suppression")
    assert got == ["`# doctor: ignore-file[FD203]` suppresses nothing in this file.",
                   "`# doctor: ignore[FD101]` suppresses nothing: no FD101 finding on the line it covers.",
                   "`# doctor: ignore[FD9Z9]` names no known rule."]
