"""The DeepSpeed rules (FD201-FD207) evaluated through the engine, each with failing and passing inputs.

Every input is a real-shaped DeepSpeed JSON (LLaMA-Factory's examples, the case corpus, fixtures/deepspeed/)
with LLaMA-Factory YAML values; locations are checked against the line of the key in the JSON text, found by
scanning the text, not by the reader's positions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_doctor.engine.evaluate import RuleContext, evaluate
from finetune_doctor.engine.loader import load_rules, select_rules
from finetune_doctor.facts.ds import facts_of as ds_facts
from finetune_doctor.readers.deepspeed.dsconfig import build_ds_config, load_ds_config
from finetune_doctor.readers.config.yamlcfg import load_config
from finetune_doctor.types import SourceDoc

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "deepspeed"
LF = ROOT / "fixtures" / "llamafactory" / "examples"
LF_DS = LF / "deepspeed"
CASES = ROOT / "fixtures" / "cases"
NEW = dict(ds_version="0.19.8", transformers_version="5.24.0")
OURS = ("FD201", "FD202", "FD203", "FD204", "FD205", "FD206", "FD207")
YAML_LF = dict(load_config(str(LF / "train_lora" / "qwen3_lora_sft_ds3.yaml")).values)


def _have(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except Exception:
        return False


def judge(ds_path: Path | None, lf: dict, *, raw: dict | None = None, world: int | None = 8,
          hidden: int | None = 4096, run: dict | None = None, ds_version: str | None = "0.19.8",
          yaml_positions: dict | None = None):
    if raw is not None:
        cfg = build_ds_config(raw, str(ds_path) if ds_path else None, {}, lf, world, hidden, ds_version=ds_version,
                              transformers_version="5.24.0")
    else:
        cfg = load_ds_config(str(ds_path), "/runs/train.yaml", 9, lf, world, hidden, ds_version=ds_version,
                             transformers_version="5.24.0")
    sources = {"config": SourceDoc("config", "/runs/train.yaml", yaml_positions or {"deepspeed": (9, 1)})}
    if cfg.path:
        sources["deepspeed"] = SourceDoc("deepspeed", cfg.path, cfg.positions)
    ctx = RuleContext(facts={"ds": ds_facts(cfg), "cfg": lf, "run": run or {"ptq_method": None}}, sources=sources)
    rules = select_rules(load_rules(), "lint", list(OURS), None)
    return evaluate(rules, ctx)


def codes(findings) -> list[str]:
    return sorted(f.code for f in findings)


def line_of(path: Path, needle: str, after: str | None = None) -> int:
    lines = path.read_text().splitlines()
    start = 0 if after is None else next(i for i, ln in enumerate(lines) if after in ln) + 1
    return next(i + 1 for i, ln in enumerate(lines) if i >= start and needle in ln)


def test_rules_load_with_docs_and_lint_command():
    rules = {r.code: r for r in load_rules() if r.code in OURS}
    assert set(rules) == set(OURS)
    for r in rules.values():
        assert r.category == "deepspeed" and "lint" in r.commands and "check" in r.commands
        for section in ("what_it_does", "why_bad", "example", "use_instead", "references"):
            assert r.docs.get(section), (r.name, section)
        assert Path(r.path).stem == r.name


# --------------------------------------------------------------------------------------------------------------
# passing: LLaMA-Factory's own configs
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(LF_DS.glob("*.json")), ids=lambda p: p.name)
def test_reference_examples_raise_nothing(path):
    assert judge(path, YAML_LF) == []


@pytest.mark.parametrize("yaml", ["train_lora/qwen3_lora_sft_ds3.yaml", "train_full/qwen3_full_sft.yaml",
                                  "extras/fp8/llama3_fp8_deepspeed_sft.yaml"])
def test_reference_yaml_with_its_json(yaml):
    doc = load_config(str(LF / yaml))
    path = LF.parent / doc.values["deepspeed"]       # LF resolves from its root
    assert judge(path, dict(doc.values)) == []


# --------------------------------------------------------------------------------------------------------------
# FD201 deepspeed-config-invalid
# --------------------------------------------------------------------------------------------------------------

def test_config_invalid_points_at_each_bad_key():
    path = FIX / "zero3_typos.json"
    found = [f for f in judge(path, YAML_LF) if f.code == "FD201"]
    by_key = {f.location.key: f for f in found}
    assert set(by_key) == {"zero_optimization.stage3_prefech_bucket_size", "zero_optimization.offload_optimizer.device",
                           "fp16.min_loss_scale", "zero_optimization.stage3_max_live_parameters"}
    typo = by_key["zero_optimization.stage3_prefech_bucket_size"]
    assert typo.location.file == str(path) and typo.location.line == line_of(path, '"stage3_prefech_bucket_size"')
    assert typo.severity == "error" and "did you mean stage3_prefetch_bucket_size" in typo.message
    edits = {(e.key, e.value, e.delete) for e in typo.fix.edits}
    assert edits == {("zero_optimization.stage3_prefech_bucket_size", None, True),
                     ("zero_optimization.stage3_prefetch_bucket_size", "auto", False)}
    dev = by_key["zero_optimization.offload_optimizer.device"]
    assert dev.location.line == line_of(path, '"device"', after='"offload_optimizer"')
    assert "'none', 'cpu' or 'nvme'" in dev.message
    live = by_key["zero_optimization.stage3_max_live_parameters"]
    assert "not found in kwargs" in live.message
    assert [(e.key, e.value) for e in live.fix.edits] == [("zero_optimization.stage3_max_live_parameters",
                                                           1_000_000_000)]
    # a problem without a mechanical repair carries no fix at all
    assert by_key["fp16.min_loss_scale"].fix is None
    assert all(f.fix is None or f.fix.safety == "unsafe" for f in found)


def test_config_invalid_clipping_and_lr_mismatch():
    path = FIX / "batch_mismatch.json"
    lf = {**YAML_LF, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4, "fp16": True,
          "bf16": False}
    found = [f for f in judge(path, lf, world=2) if f.code == "FD201"]
    assert {f.location.key for f in found} == {"gradient_clipping", "optimizer.params.lr"}
    clip = next(f for f in found if f.location.key == "gradient_clipping")
    assert "- ds gradient_clipping=0.5 vs hf max_grad_norm=1.0" in clip.message
    assert clip.location.line == line_of(path, '"gradient_clipping"')
    # with matching YAML values the same file passes
    ok = {**lf, "max_grad_norm": 0.5, "learning_rate": 3e-4}
    assert judge(path, ok, world=2) == []


def test_config_invalid_missing_sections():
    raw = {"gradient_accumulation_steps": "auto", "fp16": {"enabled": "auto", "loss_scale": 0}}
    found = judge(None, YAML_LF, raw=raw)
    assert codes(found) == ["FD201", "FD201"]
    assert {f.location.key for f in found} == {"zero_optimization", "train_micro_batch_size_per_gpu"}
    assert any("Please specify the ZeRO optimization config" in f.message for f in found)


def test_config_invalid_removed_keys_depend_on_version():
    path = FIX / "legacy_keys.json"
    on_new = [f for f in judge(path, YAML_LF) if f.code == "FD201"]
    assert {"amp", "zero_optimization.mics_shard_size"} <= {f.location.key for f in on_new}
    on_old = [f for f in judge(path, YAML_LF, ds_version="0.16.9") if f.code == "FD201"]
    assert not {"amp", "zero_optimization.mics_shard_size"} & {f.location.key for f in on_old}


def test_deepspeed_problems_from_check_are_reported():
    # the check pipeline appends validate_with_deepspeed() problems as plain dicts without a location
    cfg = load_ds_config(str(LF_DS / "ds_z2_config.json"), "/runs/train.yaml", 9, YAML_LF, 8, 4096, **NEW)
    facts = ds_facts(cfg)
    facts["problems"] = [{"key": None, "kind": "deepspeed", "check": "deepspeed", "version": "0.19.8",
                          "upstream": "X", "line": None}]
    ctx = RuleContext(facts={"ds": facts, "cfg": YAML_LF, "run": None},
                      sources={"deepspeed": SourceDoc("deepspeed", cfg.path, cfg.positions)})
    (f,) = evaluate(select_rules(load_rules(), "check", ["FD201"], None), ctx)
    assert f.location.file == cfg.path and f.message == "DeepSpeed 0.19.8 rejects the config: X"
    # through problem_dicts a keyed DeepSpeed problem points at its line
    from finetune_doctor.facts.ds import problem_dicts
    from finetune_doctor.readers.deepspeed.dsproblem import DSProblem

    facts["problems"] = problem_dicts(cfg, [DSProblem("zero_optimization.reduce_bucket_size", "deepspeed",
                                                      "deepspeed", version="0.19.8", detail="Y")])
    (f,) = evaluate(select_rules(load_rules(), "check", ["FD201"], None), ctx)
    assert f.location.line == line_of(LF_DS / "ds_z2_config.json", '"reduce_bucket_size"')


# --------------------------------------------------------------------------------------------------------------
# FD202 deepspeed-batch-mismatch
# --------------------------------------------------------------------------------------------------------------

def test_batch_mismatch():
    path = FIX / "batch_mismatch.json"
    lf = {**YAML_LF, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 8, "fp16": True,
          "bf16": False, "max_grad_norm": 0.5, "learning_rate": 3e-4}
    found = judge(path, lf, world=8)
    assert codes(found) == ["FD202"] * 3
    by_key = {f.location.key: f for f in found}
    tb = by_key["train_batch_size"]
    assert "- ds train_batch_size=32 vs hf train_batch_size (calculated)=128" in tb.message
    assert tb.location.line == line_of(path, '"train_batch_size"')
    assert tb.fix.safety == "safe" and [(e.key, e.value) for e in tb.fix.edits] == [("train_batch_size", "auto")]
    # 32 = 2 x 4 x 4: the same file fits a 2-GPU run with micro 4 and accumulation 4
    ok = {**lf, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
    assert judge(path, ok, world=2) == []


def test_batch_world_size_unknown_checks_only_what_it_can():
    path = FIX / "batch_mismatch.json"
    lf = {**YAML_LF, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4, "fp16": True,
          "bf16": False, "max_grad_norm": 0.5, "learning_rate": 3e-4}
    assert judge(path, lf, world=None) == []


def test_batch_absent_accumulation():
    raw = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}
    (f,) = judge(FIX / "virtual.json", {**YAML_LF, "gradient_accumulation_steps": 4}, raw=raw)
    assert f.code == "FD202" and f.location.key == "gradient_accumulation_steps"
    assert [(e.key, e.value) for e in f.fix.edits] == [("gradient_accumulation_steps", "auto")]
    assert judge(FIX / "virtual.json", {**YAML_LF, "gradient_accumulation_steps": 1}, raw=raw) == []


# --------------------------------------------------------------------------------------------------------------
# FD203 deepspeed-precision-mismatch
# --------------------------------------------------------------------------------------------------------------

def test_precision_mismatch_both_ways():
    path = FIX / "batch_mismatch.json"    # fp16 true, bf16 false
    lf = {**YAML_LF, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 4, "max_grad_norm": 0.5,
          "learning_rate": 3e-4, "bf16": True, "fp16": False}
    found = judge(path, lf, world=2)
    assert codes(found) == ["FD203", "FD203"]
    fp = next(f for f in found if f.location.key == "fp16.enabled")
    assert fp.location.line == line_of(path, '"enabled"', after='"fp16"')
    assert "- ds fp16.enabled=True vs hf fp16|fp16_full_eval=False" in fp.message
    assert fp.fix.safety == "safe" and [(e.key, e.value) for e in fp.fix.edits] == [("fp16.enabled", "auto")]
    assert judge(path, {**lf, "bf16": False, "fp16": True}, world=2) == []


def test_precision_section_without_enabled():
    path = FIX / "legacy_keys.json"    # "bf16": {"loss_scale": 0}
    found = [f for f in judge(path, {**YAML_LF, "bf16": True}) if f.code == "FD203"]
    assert [f.location.key for f in found] == ["bf16.enabled"]
    assert found[0].location.line == line_of(path, '"bf16"')            # absent key: its section's line
    assert not [f for f in judge(path, {**YAML_LF, "bf16": False}) if f.code == "FD203"]


def test_precision_both_enabled_by_yaml_flags():
    raw = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "fp16": {"enabled": True}, "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}
    found = judge(None, {**YAML_LF, "fp16": True, "bf16": True}, raw=raw)
    assert [(f.code, f.location.key) for f in found] == [("FD203", "fp16.enabled")]   # the explicit one
    assert "cannot be simultaneously enabled" in found[0].message


# --------------------------------------------------------------------------------------------------------------
# FD204 offload-param-without-zero3
# --------------------------------------------------------------------------------------------------------------

def test_offload_param_ignored_below_zero3():
    path = FIX / "zero2_overlap_offload_param.json"
    (f,) = [f for f in judge(path, YAML_LF) if f.code == "FD204"]
    assert f.severity == "warning" and f.location.key == "zero_optimization.offload_param"
    assert f.location.line == line_of(path, '"offload_param"')
    assert f.fix.safety == "safe" and [(e.key, e.delete) for e in f.fix.edits] == [
        ("zero_optimization.offload_param", True)]
    # ZeRO-3 with the same blocks: honoured
    raw = json.loads(path.read_text())
    raw["zero_optimization"]["stage"] = 3
    assert not [f for f in judge(path, YAML_LF, raw=raw) if f.code == "FD204"]


def test_offload_optimizer_ignored_at_stage0():
    raw = json.loads((LF_DS / "ds_z0_config.json").read_text())
    raw["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    (f,) = judge(LF_DS / "ds_z0_config.json", YAML_LF, raw=raw)
    assert f.code == "FD204" and f.location.key == "zero_optimization.offload_optimizer"
    assert judge(LF_DS / "ds_z2_offload_config.json", YAML_LF) == []   # stage 2 honours optimizer offload


# --------------------------------------------------------------------------------------------------------------
# FD205 overlap-comm-risk
# --------------------------------------------------------------------------------------------------------------

def test_overlap_comm_zero2():
    path = FIX / "zero2_overlap_offload_param.json"
    (f,) = [f for f in judge(path, YAML_LF, ds_version="0.18.0") if f.code == "FD205"]
    assert f.location.line == line_of(path, '"overlap_comm"')
    assert "8.38 GiB" in f.message                 # 4.5 x (5e8 + 5e8) x 2 bytes
    assert "0.18.0 is one of the affected releases" in f.message
    assert f.fix.safety == "safe" and [(e.key, e.value) for e in f.fix.edits] == [
        ("zero_optimization.overlap_comm", False)]
    (f,) = [f for f in judge(path, YAML_LF, ds_version="0.19.8") if f.code == "FD205"]
    assert "affected releases" not in f.message


def test_overlap_comm_case_058():
    path = CASES / "058" / "ds_config.json"
    lf = dict(load_config(str(CASES / "058" / "config.yaml")).values)
    found = [f for f in judge(path, lf, ds_version=None) if f.code == "FD205"]
    assert len(found) == 1 and "grad_norm nan" in found[0].message


def test_overlap_comm_passes_for_zero3_default_and_lf_zero2():
    raw = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": 3}}
    assert judge(None, YAML_LF, raw=raw) == []                     # overlap defaults to True at stage 3
    assert judge(LF_DS / "ds_z2_config.json", YAML_LF) == []


# --------------------------------------------------------------------------------------------------------------
# FD206 zero3-incompatible-quantization
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("quant, ptq, text", [
    ({"quantization_bit": 8}, None, "Only 4-bit quantized model can use fsdp+qlora or auto device map."),
    ({"quantization_bit": 8, "quantization_method": "bnb"}, None, "Only 4-bit quantized model can use"),
    ({"quantization_bit": 4, "quantization_method": "hqq"}, None,
     "HQQ quantization is incompatible with DeepSpeed ZeRO-3 or FSDP."),
    ({"quantization_bit": 8, "quantization_method": "eetq"}, None,
     "EETQ quantization is incompatible with DeepSpeed ZeRO-3 or FSDP."),
    ({}, "gptq", "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models."),
    ({"quantization_bit": 4}, "awq", "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models."),
])
def test_zero3_quantization_fails(quant, ptq, text):
    lf = {**YAML_LF, **quant}
    found = judge(LF_DS / "ds_z3_config.json", lf, run={"ptq_method": ptq},
                  yaml_positions={"deepspeed": (9, 1), "quantization_bit": (4, 1), "model_name_or_path": (2, 1)})
    (f,) = found
    assert f.code == "FD206" and f.severity == "error" and text in f.message
    assert f.location.key == ("model_name_or_path" if ptq else "quantization_bit")
    assert f.location.line == (2 if ptq else 4)


@pytest.mark.parametrize("ds, quant, ptq", [
    ("ds_z3_config.json", {"quantization_bit": 4}, None),                       # QLoRA + ZeRO-3 is supported
    ("ds_z3_config.json", {"quantization_bit": 4, "quantization_method": "bnb"}, None),
    ("ds_z3_config.json", {}, "mxfp4"),                                         # dequantized by LF
    ("ds_z3_config.json", {}, "fp8"),
    ("ds_z3_config.json", {}, None),
    ("ds_z2_config.json", {"quantization_bit": 8}, None),                       # ZeRO-2: fine
    ("ds_z2_config.json", {"quantization_bit": 4, "quantization_method": "hqq"}, "gptq"),
])
def test_zero3_quantization_passes(ds, quant, ptq):
    assert judge(LF_DS / ds, {**YAML_LF, **quant}, run={"ptq_method": ptq}) == []


def test_zero3_quantization_without_run_facts():
    # lint without a resolvable model: run is None, the on-the-fly check still works
    cfg = load_ds_config(str(LF_DS / "ds_z3_config.json"), "/runs/train.yaml", 9, YAML_LF, 8, 4096, **NEW)
    lf = {**YAML_LF, "quantization_bit": 8}
    ctx = RuleContext(facts={"ds": ds_facts(cfg), "cfg": lf, "run": None},
                      sources={"config": SourceDoc("config", "/runs/train.yaml", {"quantization_bit": (3, 1)})})
    (f,) = evaluate(select_rules(load_rules(), "lint", ["FD206"], None), ctx)
    assert f.location.line == 3


# --------------------------------------------------------------------------------------------------------------
# FD207 deepspeed-setting-ignored
# --------------------------------------------------------------------------------------------------------------

def test_setting_ignored():
    path = FIX / "legacy_keys.json"
    found = [f for f in judge(path, YAML_LF) if f.code == "FD207"]
    assert {f.location.key for f in found} == {"zero_optimization.cpu_offload"}
    (f,) = found
    assert f.severity == "warning" and f.location.line == line_of(path, '"cpu_offload"')
    assert {(e.key, json.dumps(e.value), e.delete) for e in f.fix.edits} == {
        ("zero_optimization.cpu_offload", "null", True),
        ("zero_optimization.offload_optimizer", json.dumps({"device": "cpu"}), False)}
    typo = [f for f in judge(FIX / "zero3_typos.json", YAML_LF) if f.code == "FD207"]
    assert [f.location.key for f in typo] == ["gradient_clip"]
    # keys DeepSpeed never reads and that look like nothing it knows are left alone (LF's own fp8 example)
    assert judge(LF_DS / "ds_z3_fp8_config.json", YAML_LF) == []


# --------------------------------------------------------------------------------------------------------------
# the case corpus and the command line
# --------------------------------------------------------------------------------------------------------------

CASE_CODES = {"032": ["FD201", "FD207"], "058": ["FD201", "FD205"], "059": ["FD201", "FD201"],
              "065": ["FD201", "FD201"]}


@pytest.mark.parametrize("path", sorted(CASES.glob("*/ds_config.json")), ids=lambda p: p.parent.name)
def test_cases(path):
    case = path.parent.name
    lf = dict(load_config(str(path.parent / "config.yaml")).values)
    assert codes(judge(path, lf, ds_version=None)) == CASE_CODES.get(case, [])


@pytest.mark.slow
def test_lint_command_and_safe_fix(tmp_path):
    for name in ("qwen2_lora_sft_batch_mismatch.yaml", "batch_mismatch.json"):
        shutil.copy(FIX / name, tmp_path / name)
    y = tmp_path / "qwen2_lora_sft_batch_mismatch.yaml"

    def lint(*extra):
        r = subprocess.run([sys.executable, "-m", "finetune_doctor", "lint", str(y), "--gpu", "8xA100-80GB",
                            "--format", "json", "--select", "FD2", *extra], capture_output=True, text=True,
                           cwd=ROOT)
        return r

    r = lint()
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    got = sorted((f["code"], f["location"]["key"]) for f in rep["findings"])
    assert got == [("FD201", "gradient_clipping"), ("FD201", "optimizer.params.lr"),
                   ("FD202", "gradient_accumulation_steps"), ("FD202", "train_batch_size"),
                   ("FD202", "train_micro_batch_size_per_gpu"), ("FD203", "bf16.enabled"),
                   ("FD203", "fp16.enabled")]
    assert all(f["location"]["file"].endswith("batch_mismatch.json") for f in rep["findings"])
    ds = tmp_path / "batch_mismatch.json"
    before = ds.read_bytes()
    lint("--fix")                        # only the files given are written: the JSON the YAML names was not given
    assert ds.read_bytes() == before
    lint("--fix", str(ds))
    fixed = json.loads(ds.read_text())
    assert fixed["train_batch_size"] == fixed["train_micro_batch_size_per_gpu"] == "auto"
    assert fixed["gradient_accumulation_steps"] == "auto"
    assert fixed["fp16"]["enabled"] == fixed["bf16"]["enabled"] == "auto"
    assert fixed["gradient_clipping"] == 0.5                     # unsafe: left for --unsafe-fixes
    r = lint()
    left = sorted(f["code"] for f in json.loads(r.stdout)["findings"])
    assert left == ["FD201", "FD201"]


def test_duplicate_key_is_a_warning_without_fix(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{\n  "train_micro_batch_size_per_gpu": "auto",\n  "gradient_accumulation_steps": "auto",\n'
                 '  "zero_optimization": {"stage": 2},\n  "zero_optimization": {"stage": 3}\n}\n')
    (f,) = judge(p, YAML_LF)
    # at the occurrence json.load keeps (issue #22: one JSON scanner, last wins)
    assert (f.code, f.location.key, f.location.line, f.fix) == ("FD207", "zero_optimization", 5, None)
    assert "json.load keeps the last value" in f.message


@pytest.mark.slow
# a string condition: evaluated when the test runs, so collection (every xdist worker, this slow test deselected
# in the fast lane) does not import deepspeed (0.5 CPU s with torch loaded, 2.4 s without), as test_dsconfig does
@pytest.mark.skipif("not (_have('deepspeed') and _have('torch'))", reason="deepspeed not installed")
def test_check_validate_deepspeed_reports_what_only_deepspeed_knows(tmp_path):
    """`doctor check --validate-deepspeed`: a rule of DeepSpeedConfig the vendored checks do not mirror
    (runtime/config.py: bf16_optimizer_states needs bf16_master_weights_and_grads) reaches FD201 with DeepSpeed's
    own text; without the flag the config passes."""
    raw = json.loads((LF_DS / "ds_z2_config.json").read_text())
    raw["bf16"]["bf16_optimizer_states"] = True
    (tmp_path / "ds.json").write_text(json.dumps(raw, indent=2))
    y = tmp_path / "train.yaml"
    y.write_text((LF / "train_lora" / "qwen3_lora_sft_ds3.yaml").read_text().replace(
        "examples/deepspeed/ds_z3_config.json", str(tmp_path / "ds.json")))

    def check(*extra):
        r = subprocess.run([sys.executable, "-m", "finetune_doctor", "check", str(y), "--gpu", "8xA100-80GB",
                            "--no-data", "--format", "json", "--select", "FD2", *extra], capture_output=True,
                           text=True, cwd=ROOT)
        assert r.returncode in (0, 1), r.stderr
        return json.loads(r.stdout)["findings"]

    assert check() == []
    (f,) = check("--validate-deepspeed")
    assert f["code"] == "FD201" and f["location"]["file"] == str(tmp_path / "ds.json")
    from importlib.metadata import version

    assert f["message"] == (f"DeepSpeed {version('deepspeed')} rejects the config: AssertionError: "
                            "bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled.")


# every check the readers emit, the rule(s) that word it ('' = DeepSpeed ignores it silently: no rule reports it)
CHECK_RULES = {
    "unknown_key": "FD201", "unknown_more": "FD201", "too_new": "FD201", "removed": "FD201", "missing_zero": "FD201",
    "not_object": "FD201", "no_batch_size": "FD201", "allreduce_sum_zero3": "FD201", "deprecated_both": "FD201",
    "pydantic": "FD201", "fp16_relation": "FD201", "stage_not_int": "FD201", "partial_offload": "FD201",
    "compute_grad_norm_zero3": "FD201", "nvme_no_path": "FD201", "int64_range": "FD201", "top_bool": "FD201",
    "top_number": "FD201", "top_integer": "FD201", "top_positive": "FD201", "top_negative": "FD201",
    "prefetch_float": "FD201", "unfilled_auto": "FD201", "deepspeed": "FD201",
    "mismatch": "FD201 FD202 FD203", "gas_absent": "FD202", "precision_no_enabled": "FD203", "both_halves": "FD203",
    "unknown_top": "FD207", "removed_later": "FD207", "legacy_bool_zero": "FD207", "legacy_bfloat16": "FD207",
    "deprecated_alias": "FD207", "duplicate": "FD207", "unknown_plain": "", "too_new_top": "",
}


def test_every_check_is_worded_by_its_rule():
    import re

    from finetune_doctor.readers.deepspeed.dsproblem import DS_CHECKS

    rules = {r.code: r for r in load_rules()}
    for check, codes in CHECK_RULES.items():
        for code in codes.split():
            msg = rules[code].message
            worded = check in msg.cases if msg.by is not None else f"'{check}'" in msg.text.source
            assert worded, (check, code)
    assert set(DS_CHECKS) == set(CHECK_RULES)
    emitted = set()
    for src in ("dscheck.py", "dsauto.py", "dsconfig.py"):
        text = (ROOT / "finetune_doctor" / "readers" / "deepspeed" / src).read_text()
        # the check is the third argument of every add(key, kind, check, ...) and of DSProblem(key, kind, check)
        emitted |= set(re.findall(r'(?:add|DSProblem)\([^,()]+, (?:kind|"[a-z]+"), "([a-z0-9_]+)"', text))
    assert emitted == set(CHECK_RULES), emitted ^ set(CHECK_RULES)
