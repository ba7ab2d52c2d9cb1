"""The words of LLaMA-Factory's launch checks live beside their rules (issue #22, "prose out of code"): a converted
check of analyzers/config/launch.py gives its name (`check`) and the values it shows (`args`), and its rule's
message table (rules/<family>.yaml ``message: {by: item.check, cases}``) holds the sentence. These tests pin that
every converted check has its case in the rule its kind selects, that no case is dead, and that the sentences
reach the user as before (tests/rule_cases assert the LF quotes)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
import yaml

from finetune_doctor.analyzers.config import launch
from finetune_doctor.analyzers.config.launch import CHECK_KINDS, check_launch
from finetune_doctor.facts.ev import NAMESPACE as EV
from finetune_doctor.pipeline import lint
from finetune_doctor.settings import Options

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _rules() -> dict[str, dict]:
    """Every rule file, read when a test here first asks (not at import: every pytest-xdist worker collects this
    file and one runs it; reading the 145 files costs ~0.35 CPU s)."""
    return {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in (ROOT / "rules").glob("*.yaml")}


EV_FIELDS = EV.fields
KIND_OF_RULE = re.compile(r"k\.kind == '(\w+)'")


def _rule_of_kind(kind: str) -> dict:
    found = [r for r in _rules().values() if KIND_OF_RULE.search(str(r.get("for_each") or ""))
             and KIND_OF_RULE.search(str(r["for_each"])).group(1) == kind]
    assert len(found) == 1, (kind, [r["name"] for r in found])
    return found[0]


def test_each_converted_check_has_its_case_in_the_rule_of_its_kind():
    for kind in sorted(set(CHECK_KINDS.values())):
        rule = _rule_of_kind(kind)
        message = rule["message"]
        if "parts" in message:   # a clause before the table (missing-required-key's cut-paste hedge): the table is a part
            message = next(p for p in message["parts"] if isinstance(p, dict))
        assert message["by"] == "item.check", rule["name"]
        ours = {c for c, k in CHECK_KINDS.items() if k == kind}
        assert ours <= set(message["cases"]), (rule["name"], sorted(ours - set(message["cases"])))
        # checks of kinds the rule does not select never reach it: a case for one would be dead text
        # (dataset-not-defined also selects `not_here` under --strict)
        selected = {c for c, k in CHECK_KINDS.items() if k in KIND_OF_RULE.findall(str(rule["for_each"]))}
        # and the cases of the log's items a postmortem joins to them (facts/ev.py: ev.undefined_dataset's `check`)
        selected |= {c for name, fld in EV_FIELDS.items() if f"ev.{name}" in str(rule["for_each"])
                     for c in (fld.items or {}).get("check").values or ()}
        assert set(message["cases"]) <= selected, (rule["name"], sorted(set(message["cases"]) - selected))
        if kind != "not_here":   # not-checked-here words the model folder and DeepSpeed file around their message
            assert message["default"] == "{item.message}"   # the key schema's and v1's problems keep their own words


def test_every_declared_check_is_raised_somewhere_in_launch_py():
    """No dead case: each declared name is written in a check function (directly in `_c(...)` or in the table
    a loop of checks walks), and each `_c(...)` call with a literal name uses a declared one."""
    tree = ast.parse(Path(launch.__file__).read_text(encoding="utf-8"))
    in_functions = {n.value for fn in tree.body if isinstance(fn, ast.FunctionDef) and fn.name != "_c"
                    for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert set(CHECK_KINDS) <= in_functions, sorted(set(CHECK_KINDS) - in_functions)
    literal = {call.args[2].value for call in ast.walk(tree)
               if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_c"
               and len(call.args) >= 3 and isinstance(call.args[2], ast.Constant)}
    assert literal <= set(CHECK_KINDS) and len(literal) > 40


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


_BASE = ("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
         "dataset: alpaca_en_demo\ntemplate: qwen\nlearning_rate: 1.0e-4\noutput_dir: saves/x\n")   # a whole file: a training key set


# The six checks LF's parity corpus (scripts/gen_parity_corpus.py, 4,321 configs) does not reach; the other 64 gave
# the same findings before and after the move (all 4,321 configs compared, json). Expected: the sentences
# launch.py held before the move, word for word.
@pytest.mark.parametrize("config, code, message", [
    (_BASE.replace("output_dir: saves/x\n", ""), "FD010",
     "`output_dir` is not set: transformers 4.45 requires it and stops with \"__init__() missing 1 required "
     "positional argument: 'output_dir'\""),
    (_BASE + "fsdp: offload\n", "FD011",
     "`fsdp: offload` on its own: transformers stops with \"`--fsdp offload` can't work on its own.\""),
    (_BASE.replace("stage: sft", "stage: ppo") + "reward_model: saves/rm\nreward_model_type: lora\nuse_kt: true\n",
     "FD012", "`use_kt` with a LoRA reward model: LLaMA-Factory stops with \"KTransformers does not support lora "
              "reward model.\""),
    (_BASE + "save_steps: .inf\n", "FD016",
     "`save_steps: inf` is not a finite number: transformers stops in TrainingArguments (int(inf) raises "
     "OverflowError)."),
    (_BASE + "warmup_steps: -5\n", "FD016",
     "`warmup_steps: -5` is negative: transformers stops with \"warmup_steps must be an integer or a float\"."),
    (_BASE + "load_best_model_at_end: true\neval_strategy: steps\nsave_strategy: steps\neval_steps: 0.3\n"
             "save_steps: 0.5\nval_size: 0.1\n", "FD016",
     "`load_best_model_at_end` with `save_steps: 0.5` and `eval_steps: 0.3`: every saved checkpoint must have been "
     "evaluated; transformers stops with \"--load_best_model_at_end requires the saving steps to be a multiple of "
     "the evaluation steps\" (but found 0.5, which is not a multiple of 0.3)."),
])
def test_checks_the_parity_corpus_does_not_reach_keep_their_sentences(tmp_path, config, code, message):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config)
    found = [f.message for f in lint.run([str(cfg)], Options(command="lint", transformers_version="4.45.0")).findings
             if f.code == code]
    assert found == [message]


# The template and dataset lookups' sentences moved into template-not-registered, dataset-not-defined,
# not-checked-here and unverified-config-problem (by check; by item.case for the last). The parity corpus and LF's
# examples reach dataset-dir-not-here, dataset-undefined, template-misspelt, template-removed(-misspelt) and
# template-later-release (same findings before and after on all of them); these are the variants they do not reach.
# Expected: the sentences launch.py wrote before the move, word for word (printed by the tree before it).
_UNREACHED = [
    ("template: xyzzy_tpl\n", "0.9.5", "FD017",
     "`template: xyzzy_tpl` is not a template LLaMA-Factory 0.9.5 registers: it stops with \"Template xyzzy_tpl "
     "does not exist.\" when the data is loaded."),
    ("template: qwen\ndataset_dir: emptydir\n", "0.9.5", "FD018",
     "`dataset_dir: emptydir` holds no dataset_info.json here: LLaMA-Factory stops with \"Cannot open "
     "emptydir/dataset_info.json\" when the data is loaded."),
    # no release given and none installed: image_resolution narrows the release to 0.9.0-0.9.1 (lfnarrow)
    ("template: moss_vl\nimage_resolution: 512\n", None, "FD041",
     "`template: moss_vl` is not a template any LLaMA-Factory release from 0.9.0 to 0.9.1 registers: it stops with "
     "\"Template moss_vl does not exist.\" when the data is loaded. This holds only for LLaMA-Factory 0.9.0, 0.9.1; "
     "registered in 0.9.6.dev0, which the inputs do not say: pass --llamafactory VERSION or --env FILE to decide it."),
    ("template: qwen3_vl\nimage_resolution: 512\n", None, "FD041",
     "`template: qwen3_vl` is not a template any LLaMA-Factory release from 0.9.0 to 0.9.1 registers: it stops with "
     "\"Template qwen3_vl does not exist.\" when the data is loaded. Did you mean `qwen2_vl`? This holds only for "
     "LLaMA-Factory 0.9.0, 0.9.1; registered in 0.9.4-0.9.6.dev0, which the inputs do not say: pass --llamafactory "
     "VERSION or --env FILE to decide it."),
]


@pytest.mark.parametrize("extra, lf, code, message", _UNREACHED)
def test_lookup_variants_the_corpus_does_not_reach_keep_their_sentences(tmp_path, monkeypatch, extra, lf, code,
                                                                        message):
    from finetune_doctor.readers.config import lfrelease

    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    (tmp_path / "emptydir").mkdir()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(_BASE.replace("template: qwen\n", "") + extra)
    found = [f.message for f in lint.run([str(cfg)], Options(command="lint", lf_version=lf)).findings
             if f.code == code]
    assert found == [message]


def test_lookup_problems_carry_a_check_and_no_sentence(tmp_path):
    cfg = {"model_name_or_path": "Qwen/Qwen2.5-7B", "stage": "sft", "do_train": True, "finetuning_type": "lora",
           "dataset": "alpaca_en_demo", "output_dir": "saves/x", "template": "qwen3_NOTHINK",
           "dataset_dir": str(tmp_path / "nowhere")}
    probs = {p["check"]: p for p in check_launch(cfg, str(tmp_path / "config.yaml"))}
    assert set(probs) == {"template-misspelt", "dataset-dir-not-here"}
    assert all(p["message"] is None for p in probs.values())
    assert probs["template-misspelt"]["args"] == {"name": "qwen3_NOTHINK", "who": "LLaMA-Factory 0.9.5",
                                                  "near": "qwen3_nothink"}
