"""Reporters: JSON schema v1, SARIF 2.1.0 validity, GitHub escaping, concise lines, text layout, catalogue.

Reports are built directly from the value types (no pipeline). The edits point at real-shaped fixture files
(fixtures/reporters/: LLaMA-Factory's qwen3_full_sft.yaml example with fp16 instead of bf16, and its
ds_z3_config.json unchanged), because old values and SARIF replacements are read from the files.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types as pytypes
from pathlib import Path

import jsonschema
import pytest

from finetune_doctor import __version__
from finetune_doctor.engine.loader import parse_rule
from finetune_doctor.errors import InputError
from finetune_doctor.reporters import REPORTERS, display_path, get_reporter, render, summary_line
from finetune_doctor.reporters._source import SourceIndex, Span, edit_text, yaml_scalar
from finetune_doctor.reporters.catalog import first_sentence, render_catalog, render_explain
from finetune_doctor.reporters.github import annotation, escape_data, escape_property
from finetune_doctor.reporters.sarif import replacements
from finetune_doctor.reporters.text import want_color
from finetune_doctor.types import (Confirmation, Edit, Finding, Fix, Hardware, Location, MemoryEstimate, Report,
                                   TimelineEvent)

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "fixtures" / "reporters"
CFG = str(FIX / "qwen3_full_sft_fp16.yaml")
DS = str(FIX / "ds_z3_config.json")
CFG_REL = "fixtures/reporters/qwen3_full_sft_fp16.yaml"
DS_REL = "fixtures/reporters/ds_z3_config.json"
SARIF_SCHEMA = json.loads((REPO / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def _at_repo(monkeypatch):
    # paths in output are shown relative to the working directory
    monkeypatch.chdir(REPO)
    for var in ("NO_COLOR", "FORCE_COLOR", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(var, raising=False)


def cfg_line(prefix: str) -> int:
    """1-based line of the first fixture-config line starting with `prefix` (an independent lookup)."""
    lines = Path(CFG).read_text(encoding="utf-8").split("\n")
    return next(i for i, ln in enumerate(lines, 1) if ln.startswith(prefix))


# ---------------------------------------------------------------------------------------------- fixtures
RUN = {"stage": "sft", "finetuning_type": "full", "model": "Qwen/Qwen3-4B-Instruct-2507", "params_b": 4.0225,
       "precision": {"weights": "bfloat16", "trainable": "float32", "compute": "float16"}, "zero_stage": 3,
       "offload": {"optimizer": None, "param": None}, "world_size": 8, "micro_batch": 1, "grad_accum": 2,
       "seq_len": 2048, "gradient_checkpointing": True, "attention": "sdpa"}
PER_GPU = {"weights": 0.937512, "gradients": 1.874, "optimizer": 7.4961, "activations": 70.104, "logits": 9.2659,
           "buffers": 1.2, "runtime": 1.5385, "total": 92.413}


def oom_finding() -> Finding:
    alt = Fix("Halve the sequence length", (Edit(CFG, "cutoff_len", 1024),), "unsafe",
              {"total_gib_before": 92.413, "total_gib_after": 70.2049}, "the model sees 1024 tokens per sample")
    fix = Fix("Offload optimizer states to CPU", (Edit(DS, "zero_optimization.offload_optimizer.device", "cpu"),),
              "safe", {"total_gib_before": 92.413, "total_gib_after": 61.0449}, "~15% lower throughput",
              Confirmation("simulate", 92.3049, 60.8, None), (alt,))
    return Finding("FD601", "predicted-oom", "error", "memory",
                   "Predicted peak 92.4 GiB per GPU exceeds the A100-80GB's 79.2 GiB.",
                   Location(CFG, cfg_line("cutoff_len:"), 1, "cutoff_len"), fix)


def fp16_finding() -> Finding:
    fix = Fix("Switch to bf16", (Edit(CFG, "bf16", True), Edit(CFG, "fp16", None, delete=True)), "unsafe")
    return Finding("FD102", "fp16-on-bf16-model", "warning", "precision",
                   "fp16: true on a model trained in bfloat16 [bold]overflows[/bold].",
                   Location(CFG, cfg_line("fp16:"), 1, "fp16"), fix)


def overlap_finding() -> Finding:
    return Finding("FD401", "overlap-comm-risk", "info", "deepspeed", "overlap_comm is false\nunder ZeRO-3.",
                   Location(DS, 20, 5, "zero_optimization.overlap_comm"))


def full_report(**kw) -> Report:
    base = dict(
        command="check", inputs={"config": CFG, "deepspeed": DS},
        findings=(oom_finding(), fp16_finding(), overlap_finding()),
        run=dict(RUN), hardware=Hardware("A100-80GB", 8, 79.15, True, "flag"),
        memory=MemoryEstimate(dict(PER_GPU), 85.004, 40.0, False, -13.263),
        timeline=(TimelineEvent(120, "nan", "loss became nan", "saves/trainer_log.jsonl:13"),),
        sections={"data": {"datasets": [{"name": "identity", "samples": 91, "p99_tokens": 210}],
                           "cutoff_len": 2048, "truncated_pct": 0.0}},
        notes=("Activations assume step >= 2.",),
    )
    base.update(kw)
    return Report(**base)


RULE_DOC = {
    "code": "FD102", "name": "fp16-on-bf16-model", "severity": "warning", "category": "precision",
    "commands": ["check", "lint"], "when": "cfg.fp16 == True", "message": "fp16 on a bf16 model",
    "location": {"file": "config", "key": "fp16"},
    "fix": {"title": "Switch to bf16", "safety": "unsafe",
            "edits": [{"file": "config", "key": "bf16", "value": True},
                      {"file": "config", "key": "fp16", "delete": True}]},
    "docs": {
        "what_it_does": "Flags fp16 mixed precision on a bf16 checkpoint. It reads the model's torch_dtype.",
        "why_bad": "Activations exceed fp16's maximum of 65504 and the loss scale collapses.",
        "example": "fp16: true\n",
        "use_instead": "bf16: true\n",
        "references": ["reference/llamafactory/LF_FACTS.md §2", "https://github.com/hiyouga/LlamaFactory/issues/2172"],
    },
}


def rule(**over):
    d = json.loads(json.dumps(RULE_DOC))
    d.update(over)
    return parse_rule(d, f"rules/{d['name']}.yaml")


# ---------------------------------------------------------------------------------------------- registry
def test_registry_and_dispatch():
    assert set(REPORTERS) == {"text", "json", "sarif", "github", "concise"}
    # render() is get_reporter(fmt).render() after making every string terminal-safe: a finding whose message
    # carries an escape sequence (a hostile key name) reaches the bare reporter as is, and render() without it
    from dataclasses import replace

    r = full_report()
    f0 = r.findings[0]
    hostile = replace(r, findings=(replace(f0, message=f0.message + " \x1b[2J\x1b]0;pwned\x07"),) + r.findings[1:])
    raw = json.loads(get_reporter("json").render(hostile))["findings"][0]["message"]
    safe = json.loads(render(hostile, "json"))["findings"][0]["message"]
    assert "\x1b" in raw and "\x1b" not in safe and "\x07" not in safe and safe.startswith(f0.message)
    assert render(r, "json") == get_reporter("json").render(r)   # nothing to make safe: the same text
    with pytest.raises(InputError, match="unknown output format 'xml'"):
        render(r, "xml")


def test_cheap_formats_do_not_import_rich_or_torch():
    # lint's reports hold findings only: every format, text included, renders them without rich
    code = ("import sys\n"
            "from finetune_doctor.types import Report, Finding, Location, Fix, Edit\n"
            "from finetune_doctor.reporters import render\n"
            "f = Finding('FD001', 'unknown-key', 'error', 'config', 'x', Location('a.yaml', 3, 1, 'x'),\n"
            "            Fix('Remove it', (Edit('a.yaml', 'x', None, True),), 'unsafe'))\n"
            "r = Report('lint', {'config': 'a.yaml'}, (f,), notes=('n',))\n"
            "for fmt in ('json', 'concise', 'github', 'text'): render(r, fmt, color=False)\n"
            "import finetune_doctor.reporters.sarif, finetune_doctor.reporters.text, finetune_doctor.reporters.catalog\n"
            "print(sorted(m for m in ('rich', 'torch', 'transformers', 'deepspeed', 'ruamel') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_display_path(tmp_path):
    assert display_path(CFG) == CFG_REL
    assert display_path("fixtures/reporters/x.yaml") == "fixtures/reporters/x.yaml"
    outside = str(tmp_path / "c.yaml")
    assert display_path(outside) == outside
    assert display_path(CFG, base=str(FIX)) == "qwen3_full_sft_fp16.yaml"


# ---------------------------------------------------------------------------------------------- json
V1 = ["schema", "tool", "command", "inputs", "run", "hardware", "memory", "findings", "timeline", "summary",
      "assumptions"]


def test_json_schema_v1_structure_and_rounding():
    d = json.loads(render(full_report(), "json"))
    assert list(d) == V1 + ["data", "notes"]
    assert d["schema"] == "finetune-doctor/report/v1"
    assert d["tool"] == {"name": "finetune-doctor", "version": __version__}
    assert d["command"] == "check"
    assert d["inputs"] == {"config": CFG, "deepspeed": DS, "run_dir": None}
    assert list(d["run"]) == ["stage", "finetuning_type", "model", "params_b", "precision", "zero_stage", "offload",
                              "world_size", "micro_batch", "grad_accum", "seq_len", "gradient_checkpointing",
                              "attention"]
    assert d["run"]["params_b"] == 4.02
    assert d["run"]["precision"] == {"weights": "bfloat16", "trainable": "float32", "compute": "float16"}
    assert d["run"]["offload"] == {"optimizer": None, "param": None}
    assert d["hardware"] == {"gpu": "A100-80GB", "num_gpus": 8, "capacity_gib": 79.15, "bf16": True,
                             "source": "flag"}
    assert d["memory"] == {
        "per_gpu_gib": {"weights": 0.94, "gradients": 1.87, "optimizer": 7.5, "activations": 70.1, "logits": 9.27,
                        "buffers": 1.2, "runtime": 1.54, "total": 92.41},
        "peak_allocated_gib": 85.0, "host_gib": 40.0, "fits": False, "headroom_gib": -13.26, "need_gib": 92.41, "method": "analytic",
        "verdict": None, "p_oom": None, "p_oom_model": None, "p_oom_unexplained": None, "interval_gib": None}
    assert list(d["memory"]["per_gpu_gib"]) == ["weights", "gradients", "optimizer", "activations", "logits",
                                                 "buffers", "runtime", "total"]
    assert d["timeline"] == [{"step": 120, "kind": "nan", "detail": "loss became nan",
                              "source": "saves/trainer_log.jsonl:13"}]
    assert d["summary"] == {"error": 1, "warning": 1, "info": 1}
    assert d["data"]["datasets"] == [{"name": "identity", "samples": 91, "p99_tokens": 210}]
    assert d["notes"] == ["Activations assume step >= 2."]


def test_json_finding_with_fix_is_exact():
    d = json.loads(render(full_report(), "json"))
    assert d["findings"][0] == {
        "code": "FD601", "name": "predicted-oom", "severity": "error", "category": "memory",
        "message": "Predicted peak 92.4 GiB per GPU exceeds the A100-80GB's 79.2 GiB.",
        "location": {"file": CFG, "line": cfg_line("cutoff_len:"), "column": 1, "key": "cutoff_len"},
        "fix": {
            "title": "Offload optimizer states to CPU",
            "edits": [{"file": DS, "key": "zero_optimization.offload_optimizer.device", "value": "cpu"}],
            "safety": "safe",
            "effect": {"total_gib_before": 92.41, "total_gib_after": 61.04},
            "confirmed": {"by": "simulate", "before_gib": 92.3, "after_gib": 60.8, "nan_free_steps": None},
            "cost": "~15% lower throughput",
            "alternatives": [{
                "title": "Halve the sequence length",
                "edits": [{"file": CFG, "key": "cutoff_len", "value": 1024}],
                "safety": "unsafe",
                "effect": {"total_gib_before": 92.41, "total_gib_after": 70.2},
                "confirmed": None,
                "cost": "the model sees 1024 tokens per sample"}],
        },
    }
    assert d["findings"][1]["fix"]["edits"][1] == {"file": CFG, "key": "fp16", "value": None, "delete": True}
    assert d["findings"][2]["fix"] is None


def test_json_lint_report_keeps_every_key():
    r = Report("lint", {"config": "a.yaml"})
    d = json.loads(render(r, "json"))
    assert list(d) == V1 + ["notes"]
    assert d["assumptions"] == []
    assert d["run"] is None and d["memory"] is None
    assert d["hardware"] == {"gpu": None, "num_gpus": None, "capacity_gib": None, "bf16": None, "source": "none"}
    assert d["inputs"] == {"config": "a.yaml", "deepspeed": None, "run_dir": None}
    assert d["findings"] == [] and d["timeline"] == [] and d["notes"] == []
    assert d["summary"] == {"error": 0, "warning": 0, "info": 0}


def test_json_partial_run_and_sections_are_made_plain():
    r = Report("estimate", {"config": "a.yaml"}, run={"model": "m", "precision": {"weights": "bfloat16"}},
               sections={"sweep": {"rows": ({"cutoff_len": 1024, "total": float("nan"), "fits": True},),
                                   "keys": {"cutoff_len"}, "where": Path("out")}})
    d = json.loads(render(r, "json"))
    assert d["run"]["precision"] == {"weights": "bfloat16", "trainable": None, "compute": None}
    assert d["run"]["zero_stage"] is None and d["run"]["offload"] == {"optimizer": None, "param": None}
    assert d["sweep"] == {"rows": [{"cutoff_len": 1024, "total": None, "fits": True}], "keys": ["cutoff_len"],
                          "where": "out"}


def test_json_section_may_not_replace_a_v1_key():
    with pytest.raises(ValueError, match="memory"):
        render(Report("check", {}, sections={"memory": {}}), "json")


# ---------------------------------------------------------------------------------------------- sarif
def apply_replacements(text: str, replacements: list[dict]) -> str:
    """Apply SARIF replacements (1-based lines/columns, whole-line defaults) to `text`, last first."""
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def off(line: int, col: int) -> int:
        return starts[line - 1] + col - 1

    spans = []
    for rep in replacements:
        reg = rep["deletedRegion"]
        a = off(reg["startLine"], reg.get("startColumn", 1))
        end_line = reg.get("endLine", reg["startLine"])
        if "endColumn" in reg:
            b = off(end_line, reg["endColumn"])
        else:
            nxt = starts[end_line] - 1 if end_line < len(starts) else len(text)
            b = nxt
        spans.append((a, b, rep.get("insertedContent", {}).get("text", "")))
    for a, b, new in sorted(spans, reverse=True):
        text = text[:a] + new + text[b:]
    return text


def sarif_of(report: Report, rules=()):
    return json.loads(render(report, "sarif", rules=rules))


def test_sarif_is_valid_against_the_official_schema():
    validator = jsonschema.Draft4Validator(SARIF_SCHEMA, format_checker=jsonschema.FormatChecker())
    log = sarif_of(full_report(), rules=[rule()])
    assert [e.message for e in validator.iter_errors(log)] == []
    # the validator does reject a broken log (negative control)
    log["runs"][0]["results"][0]["level"] = "fatal"
    del log["version"]
    assert len(list(validator.iter_errors(log))) == 2


def test_sarif_rules_deduplicated_and_indexed():
    extra = Finding("FD102", "fp16-on-bf16-model", "warning", "precision", "second one",
                    Location(CFG, 2, 1, "model_name_or_path"))
    log = sarif_of(full_report(findings=(oom_finding(), fp16_finding(), extra, overlap_finding())),
                   rules=[rule()])
    run = log["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids == ["FD102", "FD401", "FD601"]
    for res in run["results"]:
        assert ids[res["ruleIndex"]] == res["ruleId"]
    assert [r["level"] for r in run["results"]] == ["error", "warning", "warning", "note"]
    assert log["version"] == "2.1.0" and run["tool"]["driver"]["version"] == __version__
    assert run["columnKind"] == "unicodeCodePoints"


def test_sarif_rule_help_comes_from_rule_docs():
    r = rule()
    desc = sarif_of(full_report(findings=(fp16_finding(),)), rules=[r])["runs"][0]["tool"]["driver"]["rules"][0]
    assert desc["id"] == "FD102" and desc["name"] == "fp16-on-bf16-model"
    assert desc["shortDescription"]["text"] == "Flags fp16 mixed precision on a bf16 checkpoint."
    assert desc["fullDescription"]["text"] == (
        "Flags fp16 mixed precision on a bf16 checkpoint. It reads the model's torch_dtype. "
        "Activations exceed fp16's maximum of 65504 and the loss scale collapses.")
    assert desc["help"]["markdown"] == render_explain(r)
    for section in ("## What it does", "## Why is this bad?", "## Example", "Use instead:", "## References"):
        assert section in desc["help"]["text"]
    assert desc["helpUri"] == "https://github.com/hiyouga/LlamaFactory/issues/2172"
    assert desc["defaultConfiguration"] == {"level": "warning"}
    assert desc["properties"]["problem.severity"] == "warning"


def test_sarif_description_limit_and_unknown_rule_fallback():
    long = rule(docs={**RULE_DOC["docs"], "why_bad": "x " * 800})
    log = sarif_of(full_report(findings=(fp16_finding(), overlap_finding())), rules=[long])
    by_id = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert 1000 < len(by_id["FD102"]["fullDescription"]["text"]) <= 1024
    assert by_id["FD102"]["fullDescription"]["text"].endswith("…")
    assert by_id["FD401"]["name"] == "overlap-comm-risk"  # no rule file given: built from the finding
    assert by_id["FD401"]["help"]["text"]


def test_sarif_locations_are_relative_uris_with_regions():
    res = sarif_of(full_report(), rules=[rule()])["runs"][0]["results"]
    phys = res[0]["locations"][0]["physicalLocation"]
    assert phys == {"artifactLocation": {"uri": CFG_REL},
                    "region": {"startLine": cfg_line("cutoff_len:"), "startColumn": 1}}
    assert res[2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == DS_REL
    assert res[0]["properties"]["key"] == "cutoff_len"
    nofile = Finding("FD999", "x", "info", "runtime", "m", Location(None))
    res = sarif_of(Report("check", {"config": CFG}, (nofile,)))["runs"][0]["results"][0]
    assert res["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}


def test_sarif_yaml_fix_applies_to_the_file():
    res = sarif_of(full_report(findings=(fp16_finding(),)), rules=[rule()])["runs"][0]["results"][0]
    (fix,) = res["fixes"]
    assert fix["description"]["text"] == "Switch to bf16 (unsafe): bf16: (unset) → true; fp16: true → (delete)"
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == CFG_REL
    original = Path(CFG).read_text(encoding="utf-8")
    expected = "".join(ln for ln in original.splitlines(keepends=True) if ln != "fp16: true\n") + "bf16: true\n"
    assert apply_replacements(original, change["replacements"]) == expected


def test_sarif_value_replacement_keeps_inline_comment_and_json_shape():
    f1 = Finding("FD900", "report-to", "info", "config", "m", Location(CFG, cfg_line("report_to:"), 1, "report_to"),
                 Fix("Log to TensorBoard", (Edit(CFG, "report_to", "tensorboard"),), "safe"))
    f2 = Finding("FD901", "zero-stage", "info", "deepspeed", "m", Location(DS, 19, 5, "zero_optimization.stage"),
                 Fix("Use ZeRO-2", (Edit(DS, "zero_optimization.stage", 2),), "unsafe"))
    res = sarif_of(Report("check", {"config": CFG}, (f1, f2)))["runs"][0]["results"]
    original = Path(CFG).read_text(encoding="utf-8")
    after = apply_replacements(original, res[0]["fixes"][0]["artifactChanges"][0]["replacements"])
    assert after == original.replace("report_to: none  # choices", "report_to: tensorboard  # choices")
    ds_text = Path(DS).read_text(encoding="utf-8")
    ds_after = apply_replacements(ds_text, res[1]["fixes"][0]["artifactChanges"][0]["replacements"])
    want = json.loads(ds_text)
    want["zero_optimization"]["stage"] = 2
    assert json.loads(ds_after) == want
    assert [a for a, b in zip(ds_text.splitlines(), ds_after.splitlines()) if a != b] == ['    "stage": 3,']


def test_sarif_fix_without_text_form_stays_in_properties():
    # adding a key to a JSON object has no safe replacement: no "fixes", the structured fix is kept
    res = sarif_of(full_report(findings=(oom_finding(),)))["runs"][0]["results"][0]
    assert "fixes" not in res
    assert res["properties"]["fix"]["edits"][0]["key"] == "zero_optimization.offload_optimizer.device"
    assert res["properties"]["fix"]["alternatives"][0]["title"] == "Halve the sequence length"


# ---------------------------------------------------------------------------------------------- github
def runner_unescape_property(s: str) -> str:
    # the runner's order (actions/runner ActionCommand.cs): %25 last so "%253A" stays "%3A"
    for a, b in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        s = s.replace(a, b)
    return s


def runner_unescape_data(s: str) -> str:
    for a, b in (("%0D", "\r"), ("%0A", "\n"), ("%25", "%")):
        s = s.replace(a, b)
    return s


def test_github_escaping_rules():
    assert escape_data("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext: a,b"
    assert escape_property("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext%3A a%2Cb"
    assert escape_property("%3A") == "%253A"  # '%' first, so an existing escape is not mistaken for one
    for s in ("a:b,c%d\ne\rf", "%0A literal", "x%%,::"):
        assert runner_unescape_property(escape_property(s)) == s
        assert runner_unescape_data(escape_data(s)) == s


def test_github_annotation_exact():
    f = Finding("FD005", "flash-attn-invalid-value", "error", "config", "flash_attn: fa3 is not one of auto, sdpa, fa2",
                Location("configs/run,v1:x.yaml", 12, 3, "flash_attn"), Fix("Use fa2", (), "safe"))
    assert annotation(f) == ("::error file=configs/run%2Cv1%3Ax.yaml,line=12,col=3,"
                             "title=FD005 flash-attn-invalid-value::flash_attn: fa3 is not one of auto, sdpa, fa2"
                             "%0Afix: Use fa2")


def test_github_report_levels_paths_and_round_trip(monkeypatch):
    monkeypatch.setenv("GITHUB_WORKSPACE", str(REPO / "fixtures"))
    out = render(full_report(), "github").splitlines()
    assert [ln.split(" ", 1)[0] for ln in out[:3]] == ["::error", "::warning", "::notice"]
    assert out[-1] == "finetune-doctor check: 1 error, 1 warning, 1 info"
    m = re.match(r"^::(\w+) (.*?)::(.*)$", out[2])
    assert m is not None
    props = dict(p.split("=", 1) for p in m.group(2).split(","))
    assert {k: runner_unescape_property(v) for k, v in props.items()} == {
        "file": "reporters/ds_z3_config.json", "line": "20", "col": "5", "title": "FD401 overlap-comm-risk"}
    assert runner_unescape_data(m.group(3)) == "overlap_comm is false\nunder ZeRO-3."


def test_github_finding_without_file_or_line():
    f = Finding("FD800", "gpu-busy", "warning", "hardware", "GPU 0 is in use", Location(None))
    assert annotation(f) == "::warning title=FD800 gpu-busy::GPU 0 is in use"
    g = Finding("FD800", "gpu-busy", "warning", "hardware", "m", Location("a.yaml", None, None))
    assert annotation(g) == "::warning file=a.yaml,title=FD800 gpu-busy::m"


# ---------------------------------------------------------------------------------------------- concise
def test_concise_lines():
    nofile = Finding("FD800", "gpu-busy", "warning", "hardware", "GPU 0 is in use", Location(None))
    noline = Finding("FD001", "unknown-key", "error", "config", "x", Location(CFG, None, None, "x"))
    out = render(full_report(findings=(*full_report().findings, nofile, noline)), "concise")
    assert out.splitlines() == [
        "-:1:1: FD800 GPU 0 is in use",
        f"{DS_REL}:20:5: FD401 overlap_comm is false under ZeRO-3.",
        f"{CFG_REL}:1:1: FD001 x",
        f"{CFG_REL}:{cfg_line('cutoff_len:')}:1: FD601 [*] Predicted peak 92.4 GiB per GPU exceeds the A100-80GB's 79.2 GiB.",
        f"{CFG_REL}:{cfg_line('fp16:')}:1: FD102 fp16: true on a model trained in bfloat16 [bold]overflows[/bold].",
    ]
    assert render(Report("lint", {}), "concise") == ""


# ---------------------------------------------------------------------------------------------- text
def text_of(report: Report, **kw) -> str:
    kw.setdefault("color", False)
    kw.setdefault("width", 120)
    return render(report, "text", **kw)


def test_want_color(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    assert want_color(Tty()) is True
    assert want_color(pytypes.SimpleNamespace()) is False  # no isatty: a replaced stream
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert want_color(pytypes.SimpleNamespace()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert want_color(Tty()) is False  # NO_COLOR wins over both


def test_text_colour_only_when_asked(monkeypatch):
    plain = text_of(full_report())
    assert not ANSI.search(plain)
    coloured = text_of(full_report(), color=True)
    assert ANSI.search(coloured)
    assert ANSI.sub("", coloured).splitlines() == plain.splitlines()
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(render(full_report(), "text"))


def test_text_header_run_and_hardware():
    lines = text_of(full_report(), width=200).splitlines()
    assert lines[:3] == ["doctor check", f"  config: {CFG_REL}", f"  deepspeed: {DS_REL}"]
    assert lines[3] == ("run: Qwen/Qwen3-4B-Instruct-2507 (4.02B params) · sft/full · weights bf16, trainable fp32, "
                        "compute fp16 · ZeRO-3 · world size 8 · micro batch 1 × grad accum 2 · seq len 2048 · GC on · "
                        "attention sdpa")
    assert lines[4] == "gpus: 8 × A100-80GB · 79.15 GiB usable each · bf16 yes · from flag"


def test_text_memory_table_values():
    out = text_of(full_report())
    assert "Memory per GPU (busiest rank, analytic)" in out
    cap = 79.15
    for term, v in PER_GPU.items():
        row = re.search(rf"^\s+{term}\s+(\S+)\s+(\S+)$", out, re.M)
        assert row is not None, term
        assert row.groups() == (f"{v:.2f}", f"{100 * v / cap:.1f}%")
    assert ("capacity 79.15 GiB · headroom -13.26 GiB · fits NO · peak allocated 85.00 GiB · "
            "host RAM needed per node 40.00 GiB · method analytic") in " ".join(out.split())


def test_text_memory_without_capacity():
    out = text_of(full_report(hardware=Hardware(None, None, None, None), memory=MemoryEstimate(
        dict(PER_GPU), 85.0, 0.0, None, None)))
    assert re.search(r"^\s+weights\s+0\.94\s+—$", out, re.M)
    assert "fits unknown" in out and "capacity unknown" in out
    assert "gpus: unknown (pass --gpu" in out


def test_text_findings_fixes_and_order():
    out = text_of(full_report(), width=200)
    order = [out.index(s) for s in ("Timeline", "Errors (1)", "Warnings (1)", "Info (1)", "Data", "Notes")]
    assert order == sorted(order)
    assert f"FD601 predicted-oom  {CFG_REL}:{cfg_line('cutoff_len:')}" in out
    expected_block = [
        "  fix (safe): Offload optimizer states to CPU",
        "    zero_optimization.offload_optimizer.device: (unset) → \"cpu\"",
        "    effect: total 92.4 → 61.0 GiB",
        "    cost: ~15% lower throughput",
        "    confirmed by simulate probe: 92.3 → 60.8 GiB",
        "    alternatives:",
        "      2. Halve the sequence length (unsafe): cutoff_len: 2048 → 1024 · effect: total 92.4 → 70.2 GiB · "
        "cost: the model sees 1024 tokens per sample",
    ]
    lines = out.splitlines()
    i = lines.index(expected_block[0])
    assert lines[i:i + len(expected_block)] == expected_block
    assert "    bf16: (unset) → true" in lines and "    fp16: true → (delete)" in lines
    # rich markup in a message is shown, not interpreted
    assert "fp16: true on a model trained in bfloat16 [bold]overflows[/bold]." in out
    assert lines[-1] == "1 error, 1 warning, 1 info · 1 fixable with --fix"   # FD601's fix is safe, FD102's is not
    assert all(ln == ln.rstrip() for ln in lines)


def test_text_timeline_sections_notes():
    out = text_of(full_report())
    assert re.search(r"^\s+120\s+nan\s+loss became nan\s+trainer_log\.jsonl:13$", out, re.M)
    assert "identity" in out  # the data section (its own renderer now, else the generic dump) shows the dataset
    assert "2048" in out
    assert "  - Activations assume step >= 2." in out


def test_text_section_module_is_used(monkeypatch):
    name = "finetune_doctor.reporters.sections.zz_probe_test"
    mod = pytypes.ModuleType(name)
    mod.render = lambda data: [f"probe ran {data['steps']} steps", None]
    monkeypatch.setitem(sys.modules, name, mod)
    out = text_of(Report("probe", {"config": CFG}, sections={"zz_probe_test": {"steps": 2}}))
    assert "Zz probe test" in out and "  probe ran 2 steps" in out
    assert "steps: 2" not in out  # the module replaced the generic dump
    # a rich renderable that is also iterable-looking (Group) is drawn whole
    from rich.console import Group
    from rich.text import Text

    mod.render = lambda data: Group(Text("[one]"), Text("two"))
    lines = text_of(Report("probe", {}, sections={"zz_probe_test": {}})).splitlines()
    i = lines.index("Zz probe test")
    assert lines[i + 1:i + 3] == ["  [one]", "  two"]


def test_text_empty_lint_report():
    out = text_of(Report("lint", {"files": ["a.yaml", "b.json"]}))
    assert out.splitlines() == ["doctor lint", "  files: a.yaml, b.json", "", "No findings.", "",
                                "0 errors, 0 warnings, 0 info"]


def test_summary_line_plurals():
    assert summary_line({"error": 2, "warning": 1, "info": 3}) == "2 errors, 1 warning, 3 info"


# ---------------------------------------------------------------------------------------------- catalogue
EXPLAIN = """\
# fp16-on-bf16-model (FD102)

Severity: warning · Category: precision · Commands: check, lint

Fix is available (unsafe).

## What it does
Flags fp16 mixed precision on a bf16 checkpoint. It reads the model's torch_dtype.

## Why is this bad?
Activations exceed fp16's maximum of 65504 and the loss scale collapses.

## Example
```yaml
fp16: true
```

Use instead:
```yaml
bf16: true
```

## Fix safety
This fix is marked unsafe: it changes how the run trains (numerics, effective batch, or a memory/throughput \
trade-off), so it is applied only with `--unsafe-fixes`, after you have read it. It edits `bf16` (config), \
`fp16` (config).

## References
- reference/llamafactory/LF_FACTS.md §2
- <https://github.com/hiyouga/LlamaFactory/issues/2172>
"""


def test_render_explain_exact():
    assert render_explain(rule()) == EXPLAIN


def test_render_explain_without_fix_and_with_own_fix_safety():
    nofix = dict(RULE_DOC)
    nofix.pop("fix")
    text = render_explain(parse_rule(nofix, "rules/fp16-on-bf16-model.yaml"))
    assert "## Fix safety" not in text and "Fix is available" not in text
    own = rule(docs={**RULE_DOC["docs"], "fix_safety": "Unsafe: bf16 changes the numerics."})
    assert "## Fix safety\nUnsafe: bf16 changes the numerics.\n" in render_explain(own)
    planned = rule(fix={"title": "make it fit", "planner": "oom-remedies"})
    assert "Fix is computed for each finding." in render_explain(planned)
    assert "`oom-remedies` remedy planner" in render_explain(planned)


def test_render_explain_json_example_fence():
    r = rule(docs={**RULE_DOC["docs"], "example": '{"zero_optimization": {"stage": 3}}'})
    assert '## Example\n```json\n{"zero_optimization": {"stage": 3}}\n```' in render_explain(r)


def test_explain_fence_is_chosen_by_content():
    """FD308's example is a DeepSpeed log excerpt that starts with "[deepspeed]": text, not json."""
    from finetune_doctor.reporters.catalog import _lang

    log = ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2\n"
           "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")
    r = rule(docs={**RULE_DOC["docs"], "example": log + "\n"})
    assert "## Example\n```text\n[deepspeed] OVERFLOW!" in render_explain(r)
    assert _lang('[{"a": 1}]') == "json"
    assert _lang('"zero_optimization": {"stage": 3},\n"overlap_comm": false') == "json"
    assert _lang("bf16: true\n# keep the DeepSpeed block on auto\nfp16: false") == "yaml"
    assert _lang("{'loss': 0.0, 'grad_norm': nan}") == "text"
    assert _lang("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True llamafactory-cli train c.yaml") == "console"


def test_render_catalog_formats():
    other = rule(code="FD601", name="predicted-oom", severity="error", category="memory",
                 fix={"title": "make it fit", "planner": "oom-remedies"})
    bare = dict(RULE_DOC, code="FD003", name="invalid-value", severity="error", category="config")
    bare.pop("fix")
    rules = [other, rule(), parse_rule(bare, "rules/invalid-value.yaml")]
    rows = json.loads(render_catalog(rules, "json"))
    assert [r["code"] for r in rows] == ["FD003", "FD102", "FD601"]
    assert rows[1] == {"code": "FD102", "name": "fp16-on-bf16-model", "severity": "warning",
                       "category": "precision", "commands": ["check", "lint"], "fixable": True,
                       "fix_safety": "unsafe", "summary": "Flags fp16 mixed precision on a bf16 checkpoint."}
    assert rows[0]["fixable"] is False and rows[2]["fix_safety"] == "computed"
    text = render_catalog(rules, "text", color=False, width=120).splitlines()
    assert text[0].split() == ["code", "name", "severity", "category", "commands", "fixable"]
    body = [ln.split() for ln in text if ln.startswith("FD")]
    assert body == [["FD003", "invalid-value", "error", "config", "check,", "lint"],
                    ["FD102", "fp16-on-bf16-model", "warning", "precision", "check,", "lint", "unsafe"],
                    ["FD601", "predicted-oom", "error", "memory", "check,", "lint", "computed"]]
    assert text[-1].startswith("3 rules")
    md = render_catalog(rules, "markdown").splitlines()
    assert md[0] == "| code | name | severity | category | commands | fixable |"
    assert md[3] == "| FD102 | fp16-on-bf16-model | warning | precision | check, lint | unsafe |"
    with pytest.raises(InputError):
        render_catalog(rules, "xml")


def test_first_sentence():
    assert first_sentence("Checks `bf16`. Then more.") == "Checks `bf16`."
    assert first_sentence("Version 2.1.0 is read. Next") == "Version 2.1.0 is read."
    assert first_sentence("no stop here") == "no stop here"


def test_catalog_of_the_bundled_pack_renders():
    # every rule file of the pack must be explainable and land in SARIF help unchanged
    from finetune_doctor.engine.loader import load_rules

    pack = load_rules()
    if not pack:
        pytest.skip("rule pack is empty")
    for r in pack:
        text = render_explain(r)
        assert text.startswith(f"# {r.name} ({r.code})\n") and "## What it does" in text
    rows = [ln for ln in render_catalog(pack, "text", color=False).splitlines() if re.match(r"^[A-Z]+\d+ ", ln)]
    assert [ln.split()[0] for ln in rows] == sorted(r.code for r in pack)


# ---------------------------------------------------------------------------------------------- source lookup
NESTED_YAML = """\
### model
model_name_or_path: Qwen/Qwen2.5-7B   # base
flash_attn: "fa2 # not a comment"
lora:
  rank: 8
  targets:
    - q_proj
template: |
  multi
eval_dataset:
dataset: alpaca_en_demo"""


def test_yaml_scalar_types_round_trip_as_llamafactory_reads_them():
    assert yaml_scalar(True) == "true" and yaml_scalar(None) == "null" and yaml_scalar(8) == "8"
    # the spelling --fix writes (fixes/edit.py, the one writer; issue #22)
    assert yaml_scalar(1e-05) == "1.0e-5" and yaml_scalar(2.5e-06) == "2.5e-6" and yaml_scalar(0.1) == "0.1"
    assert yaml_scalar("fa2") == "fa2" and yaml_scalar("examples/deepspeed/ds_z3_config.json") == \
        "examples/deepspeed/ds_z3_config.json"
    # strings a YAML 1.1 reader would retype stay strings
    assert yaml_scalar("true") == '"true"' and yaml_scalar("1e-4") == '"1e-4"' and yaml_scalar("off") == '"off"'
    assert yaml_scalar("a b: c") == '"a b: c"'


def test_source_index_yaml_nested_quoted_and_blocks(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(NESTED_YAML, encoding="utf-8")
    src = SourceIndex()
    assert src.value(str(p), "model_name_or_path") == Span(2, 21, 36, "Qwen/Qwen2.5-7B", True, False)
    assert src.value(str(p), "flash_attn").text == '"fa2 # not a comment"'
    assert src.value(str(p), "lora.rank") == Span(5, 9, 10, "8", True, False)
    assert src.value(str(p), "lora").block and src.value(str(p), "lora.targets").block
    assert src.value(str(p), "template") is None  # block scalar: not located
    assert src.value(str(p), "eval_dataset").text == "" and not src.value(str(p), "eval_dataset").block
    assert src.value(str(p), "bf16") is False
    assert src.value(str(tmp_path / "missing.yaml"), "bf16") is None


def test_yaml_replacements_edge_cases(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(NESTED_YAML, encoding="utf-8")  # no trailing newline
    src = SourceIndex()

    def apply(*edits):
        reps = []
        for e in edits:
            got = replacements(e, src)
            assert got is not None, e
            reps.extend(got)
        return apply_replacements(NESTED_YAML, reps)

    assert apply(Edit(str(p), "bf16", True)) == NESTED_YAML + "\nbf16: true"
    assert apply(Edit(str(p), "dataset", None, delete=True)) == NESTED_YAML.replace("\ndataset: alpaca_en_demo", "\n")
    assert apply(Edit(str(p), "eval_dataset", "alpaca_en_demo")) == NESTED_YAML.replace(
        "eval_dataset:", "eval_dataset: alpaca_en_demo")
    assert apply(Edit(str(p), "lora.rank", 16)) == NESTED_YAML.replace("rank: 8", "rank: 16")
    assert apply(Edit(str(p), "flash_attn", "sdpa")) == NESTED_YAML.replace('"fa2 # not a comment"', "sdpa")
    assert replacements(Edit(str(p), "lora", None, delete=True), src) is None  # a block
    assert replacements(Edit(str(p), "template", "x"), src) is None  # block scalar
    assert replacements(Edit(str(p), "lora.alpha", 16), src) is None  # nested insert: the fixer's job
    assert replacements(Edit(str(p), "fp16", None, delete=True), src) == []  # absent: nothing to do


def test_json_replacements_edge_cases():
    src = SourceIndex()
    assert replacements(Edit(DS, "zero_optimization.offload_optimizer", {"device": "cpu"}), src) is None
    assert replacements(Edit(DS, "gradient_clipping", None, delete=True), src) is None
    reps = replacements(Edit(DS, "bf16.enabled", True), src)
    after = json.loads(apply_replacements(Path(DS).read_text(encoding="utf-8"), reps))
    assert after["bf16"] == {"enabled": True} and after["fp16"]["enabled"] == "auto"


def test_edit_text_prefers_the_edits_own_old_value():
    e = pytypes.SimpleNamespace(file=CFG, key="cutoff_len", value=1024, delete=False, old=4096)
    assert edit_text(e, SourceIndex()) == "cutoff_len: 4096 → 1024"
    assert edit_text(Edit(CFG, "cutoff_len", 1024), SourceIndex()) == "cutoff_len: 2048 → 1024"
    assert edit_text(Edit("/nonexistent/x.yaml", "cutoff_len", 1024), SourceIndex()) == "cutoff_len → 1024"
    assert edit_text(Edit(DS, "zero_optimization.stage", 2), SourceIndex()) == "zero_optimization.stage: 3 → 2"


def test_json_lists_verdict_moving_assumptions_first():
    from finetune_doctor.types import Assumption
    quiet = Assumption("eval-batch", 8, "transformers default", (1,), resolve_with="per_device_eval_batch_size")
    loud = Assumption("gpu-variant", "A100-80GB", "--gpu A100 names two cards", ("A100-40GB",),
                      effect_gib={"A100-40GB": 41.237}, effect_verdict={"A100-40GB": "oom"},
                      resolve_with="--gpu A100-40GB or --gpu A100-80GB", moves_verdict=True)
    d = json.loads(render(Report("check", {"config": "a.yaml"}, assumptions=(quiet, loud)), "json"))
    assert [a["name"] for a in d["assumptions"]] == ["gpu-variant", "eval-batch"]
    assert d["assumptions"][0]["effect"] == {"total_gib": {"A100-40GB": 41.24}, "verdict": {"A100-40GB": "oom"}}
    assert d["assumptions"][1]["alternatives"] == [1] and d["assumptions"][1]["moves_verdict"] is False
