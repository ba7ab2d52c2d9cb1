"""The words of LLaMA-Factory's launch checks live beside their rules (issue #22, "prose out of code"): a converted
check of analyzers/config/launch.py gives its name (`check`) and the values it shows (`args`), and its rule's
message table (rules/<family>.yaml ``message: {by: item.check, cases}``) holds the sentence. These tests pin that
every converted check has its case in the rule its kind selects, that no case is dead, and that the sentences
reach the user as before (tests/rule_cases assert the LF quotes)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from finetune_doctor.analyzers.config import launch
from finetune_doctor.analyzers.config.launch import CHECK_KINDS, check_launch
from finetune_doctor.pipeline import lint
from finetune_doctor.settings import Options

ROOT = Path(__file__).resolve().parent.parent
RULES = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in (ROOT / "rules").glob("*.yaml")}
KIND_OF_RULE = re.compile(r"k\.kind == '(\w+)'")


def _rule_of_kind(kind: str) -> dict:
    found = [r for r in RULES.values() if KIND_OF_RULE.search(str(r.get("for_each") or ""))
             and KIND_OF_RULE.search(str(r["for_each"])).group(1) == kind]
    assert len(found) == 1, (kind, [r["name"] for r in found])
    return found[0]


def test_each_converted_check_has_its_case_in_the_rule_of_its_kind():
    for kind in sorted(set(CHECK_KINDS.values())):
        rule = _rule_of_kind(kind)
        message = rule["message"]
        assert message["by"] == "item.check", rule["name"]
        ours = {c for c, k in CHECK_KINDS.items() if k == kind}
        assert ours <= set(message["cases"]), (rule["name"], sorted(ours - set(message["cases"])))
        # other kinds' checks never reach this rule: a case for one would be dead text
        assert set(message["cases"]) <= ours, (rule["name"], sorted(set(message["cases"]) - ours))
        assert message["default"] == "{item.message}"   # the key schema's and v1's problems keep their own words


def test_every_declared_check_is_raised_somewhere_in_launch_py():
    tree = ast.parse(Path(launch.__file__).read_text(encoding="utf-8"))
    raised = {call.args[2].value for call in ast.walk(tree)
              if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_c"
              and len(call.args) >= 3 and isinstance(call.args[2], ast.Constant)}
    assert raised == set(CHECK_KINDS)


def test_a_converted_check_carries_no_sentence_and_its_rule_renders_it(tmp_path):
    values = {"model_name_or_path": "Qwen/Qwen2.5-7B", "stage": "sft", "do_train": True, "dataset": "alpaca_en_demo",
              "template": "qwen", "finetuning_type": "lora", "output_dir": "saves/x", "fp16": True, "bf16": True,
              "streaming": True, "val_size": 0.25, "max_steps": 100, "image_min_pixels": 4096,
              "image_max_pixels": 1024}
    probs = {p["check"]: p for p in check_launch(values) if p["check"]}
    assert set(probs) == {"fp16-and-bf16", "val-size-streaming", "pixels-max-below-min"}
    assert all(p["message"] is None for p in probs.values())
    assert probs["pixels-max-below-min"]["args"] == {"kind": "image", "high": "1024", "low": "4096"}
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in values.items()))
    msgs = sorted(f.message for f in lint.run([str(cfg)], Options(command="lint")).findings
                  if f.name == "conflicting-options")
    assert msgs == [
        '`fp16: true` and `bf16: true` together: transformers stops with "At most one of fp16 and bf16 can be True, '
        'but not both". Mixed precision has one compute dtype.',
        '`image_max_pixels: 1024` is smaller than `image_min_pixels: 4096`: LLaMA-Factory stops with '
        '"`image_max_pixels` cannot be smaller than `image_min_pixels`."',
        '`val_size: 0.25` with `streaming`: a stream has no length to take a share of; LLaMA-Factory stops with '
        '"Streaming mode should have an integer val size."',
    ]
