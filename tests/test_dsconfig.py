"""The DeepSpeed config reader against independent references.

References used here, none of them this module's own tables:
* the installed transformers (``HfTrainerDeepSpeedConfig.trainer_config_process/_finalize``) and accelerate
  (``DeepSpeedPlugin``, ``set_mixed_precision``, ``deepspeed_config_process``) run on the same JSON and YAML values —
  the resolved dict and the mismatch text must be theirs (skipped when they are not installed);
* the installed DeepSpeed's pydantic models: field names, aliases and defaults, and accept/reject on a battery of
  values (skipped when DeepSpeed is not installed);
* reference/deepspeed/zero_fields_by_version.txt (copied to fixtures/deepspeed/): the ZeRO keys of each tag;
* reference/deepspeed/log_examples/config_validation_errors.log (copied): the exact HF mismatch lines;
* the JSON text itself, scanned line by line, for key positions.
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.facts.ds import facts_of as ds_facts
from finetune_doctor.readers.deepspeed import dsauto
from finetune_doctor.readers.deepspeed import dsschema as S
from finetune_doctor.readers.deepspeed.dsconfig import (DSConfig, build_ds_config, load_ds_config, parse_ds_text,
                                              resolve_ds_path, validate_with_deepspeed)
from finetune_doctor.readers.deepspeed.dsproblem import DSProblem

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "deepspeed"
LF_DS = ROOT / "fixtures" / "llamafactory" / "examples" / "deepspeed"
LF_EXAMPLES = sorted(LF_DS.glob("*.json"))
CASE_JSONS = sorted((ROOT / "fixtures" / "cases").glob("*/ds_config.json"))

# the training part of examples/train_lora/qwen3_lora_sft_ds3.yaml
LF_LORA = {"stage": "sft", "finetuning_type": "lora", "per_device_train_batch_size": 1,
           "gradient_accumulation_steps": 2, "learning_rate": 1.0e-4, "num_train_epochs": 3.0,
           "lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "bf16": True}
NEW = dict(ds_version="0.19.8", transformers_version="5.24.0")


def _have(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except Exception:
        return False


# string conditions: evaluated when a marked test is set up, not at collection, where every pytest-xdist worker
# imported deepspeed (~0.8 CPU s past torch and transformers) though one runs these tests
needs_hf = pytest.mark.skipif("not (_have('transformers') and _have('accelerate') and _have('deepspeed'))",
                              reason="transformers + accelerate + deepspeed not installed")
needs_ds = pytest.mark.skipif("not _have('deepspeed')", reason="deepspeed not installed")


def line_of(path: Path, needle: str, after: str | None = None) -> int:
    """1-based line of the first line containing `needle` (after the line containing `after`)."""
    lines = path.read_text().splitlines()
    start = 0
    if after:
        start = next(i for i, ln in enumerate(lines) if after in ln) + 1
    return next(i + 1 for i, ln in enumerate(lines) if i >= start and needle in ln)


def kinds(cfg: DSConfig, *ks: str) -> list[DSProblem]:
    return [p for p in cfg.problems if p.kind in ks]


ERROR_KINDS = ("unknown", "removed", "type", "invalid", "mismatch")


# --------------------------------------------------------------------------------------------------------------
# path resolution and parsing
# --------------------------------------------------------------------------------------------------------------

def _lf_root(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "LLaMA-Factory"
    (root / "examples" / "deepspeed").mkdir(parents=True)
    (root / "examples" / "train_lora").mkdir(parents=True)
    js = root / "examples" / "deepspeed" / "ds_z3_config.json"
    js.write_text((LF_DS / "ds_z3_config.json").read_text())
    y = root / "examples" / "train_lora" / "qwen3_lora_sft_ds3.yaml"
    y.write_text("deepspeed: examples/deepspeed/ds_z3_config.json\n")
    return root, y


def test_path_resolves_from_cwd_then_yaml_dir_then_parents(tmp_path, monkeypatch):
    root, y = _lf_root(tmp_path)
    want = (root / "examples" / "deepspeed" / "ds_z3_config.json").resolve()
    # run from the LLaMA-Factory root, as `llamafactory-cli train` is
    assert resolve_ds_path("examples/deepspeed/ds_z3_config.json", y, 11, cwd=root).resolve() == want
    # from anywhere else: found through the parents of the YAML's directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert resolve_ds_path("examples/deepspeed/ds_z3_config.json", y, 11, cwd=elsewhere).resolve() == want
    # a bare file name next to the YAML
    (y.parent / "local.json").write_text("{}")
    assert resolve_ds_path("local.json", y, 11, cwd=elsewhere).resolve() == (y.parent / "local.json").resolve()
    # the cwd wins over the YAML's directory when both have the file
    (elsewhere / "local.json").write_text("{}")
    assert resolve_ds_path("local.json", y, 11, cwd=elsewhere).resolve() == (elsewhere / "local.json").resolve()
    # absolute path
    assert resolve_ds_path(str(want), y, 11, cwd=elsewhere) == want


def test_missing_path_names_yaml_line_and_tried_paths(tmp_path):
    root, y = _lf_root(tmp_path)
    with pytest.raises(InputError) as ei:
        resolve_ds_path("examples/deepspeed/ds_z9_config.json", y, 11, cwd=tmp_path)
    err = ei.value
    assert err.file == str(y) and err.line == 11
    assert "ds_z9_config.json" in err.message and "not found" in err.message
    assert str(tmp_path / "examples/deepspeed/ds_z9_config.json") in err.message           # cwd
    assert str(y.parent.resolve() / "examples/deepspeed/ds_z9_config.json") in err.message  # YAML dir
    with pytest.raises(InputError) as ei:
        resolve_ds_path("examples/deepspeed", y, 11, cwd=root)
    assert "directory" in ei.value.message and ei.value.line == 11


@pytest.mark.parametrize("name, bad_line", [("commented.json", 3), ("trailing_comma.json", 5)])
def test_comments_and_trailing_commas_are_input_errors_with_the_line(name, bad_line):
    path = FIX / name
    # the line json itself reports, found independently of our reader
    try:
        json.loads(path.read_text())
    except json.JSONDecodeError as e:
        assert e.lineno == bad_line
    with pytest.raises(InputError) as ei:
        load_ds_config(str(path), "/x/train.yaml", 7, LF_LORA, 8, 4096, **NEW)
    assert ei.value.file == str(path) and ei.value.line == bad_line
    assert "json.load" in ei.value.message


@pytest.mark.parametrize("text, what", [("", "empty"), ("   \n", "empty"), ("[1, 2]", "JSON object"),
                                         ('"zero"', "JSON object")])
def test_empty_and_non_object_files(text, what):
    with pytest.raises(InputError) as ei:
        parse_ds_text(text, "ds.json")
    assert what in ei.value.message and ei.value.line == 1


def test_positions_match_the_json_text():
    path = LF_DS / "ds_z3_offload_config.json"
    cfg = load_ds_config(str(path), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    for dotted in ("train_batch_size", "bf16", "zero_optimization", "zero_optimization.stage3_prefetch_bucket_size",
                   "zero_optimization.offload_param"):
        leaf = dotted.rsplit(".", 1)[-1]
        assert cfg.positions[dotted][0] == line_of(path, f'"{leaf}"'), dotted
    # the same leaf name under two parents: pin_memory of offload_param comes after "offload_param"
    assert cfg.positions["zero_optimization.offload_param.pin_memory"][0] == line_of(
        path, '"pin_memory"', after='"offload_param"')
    assert cfg.positions["fp16.enabled"] == (line_of(path, '"enabled"'), 5)


def test_duplicate_keys_are_reported():
    text = '{\n  "zero_optimization": {"stage": 2},\n  "train_micro_batch_size_per_gpu": 2,\n' \
           '  "train_micro_batch_size_per_gpu": "auto"\n}\n'
    raw, pos, dups = parse_ds_text(text, "d.json")
    assert raw["train_micro_batch_size_per_gpu"] == "auto"      # json.load keeps the last value
    cfg = build_ds_config(raw, "d.json", pos, LF_LORA, 8, 4096, dup_paths=dups, **NEW)
    dup = kinds(cfg, "duplicate")
    assert [p.key for p in dup] == ["train_micro_batch_size_per_gpu"] and dup[0].line == 4   # json.load's copy


# --------------------------------------------------------------------------------------------------------------
# LLaMA-Factory's own configs and the case corpus
# --------------------------------------------------------------------------------------------------------------

def test_there_are_seven_reference_examples():
    assert len(LF_EXAMPLES) == 7 and len(CASE_JSONS) == 16


@pytest.mark.parametrize("path", LF_EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("lf", [LF_LORA, {**LF_LORA, "bf16": False, "fp16": True, "gradient_accumulation_steps": 8},
                                {"per_device_train_batch_size": 4}], ids=["bf16", "fp16", "defaults"])
def test_reference_examples_resolve_cleanly(path, lf):
    cfg = load_ds_config(str(path), "/x/t.yaml", 1, lf, 8, 3584, **NEW)
    errs = kinds(cfg, *ERROR_KINDS)
    if path.name == "ds_z3_fp8_config.json" and lf.get("fp16"):
        # the fp8 example hard-codes fp16.enabled false: meant for bf16 runs (test_fp8_example_...)
        assert [(p.key, p.kind) for p in errs] == [("fp16.enabled", "mismatch")]
        return
    assert not errs, [p.as_dict() for p in errs]
    assert not [k for k, v in dsauto.leaf_items(cfg.resolved) if v == "auto"]
    mbs = lf.get("per_device_train_batch_size", 8)
    gas = lf.get("gradient_accumulation_steps", 1)
    r = cfg.resolved
    assert r["train_micro_batch_size_per_gpu"] == mbs and r["gradient_accumulation_steps"] == gas
    if "train_batch_size" in cfg.raw:
        assert r["train_batch_size"] == 8 * mbs * gas
    assert r["gradient_clipping"] == 1.0
    assert r["bf16"]["enabled"] is bool(lf.get("bf16")) and r["fp16"]["enabled"] is bool(lf.get("fp16"))
    zo = r["zero_optimization"]
    if cfg.raw["zero_optimization"].get("reduce_bucket_size") == "auto":
        assert zo["reduce_bucket_size"] == 3584 ** 2
        assert zo["stage3_prefetch_bucket_size"] == int(0.9 * 3584 ** 2) == 11560550
        assert zo["stage3_param_persistence_threshold"] == 35840
    assert cfg.zero_stage == cfg.raw["zero_optimization"]["stage"]


def test_fp8_example_hard_codes_the_3584_hidden_size_values():
    # hf_integration.md §3: 12845056 = 3584², 11560550 ≈ 0.9·3584², 35840 = 10·3584, with two keys DeepSpeed never reads
    cfg = load_ds_config(str(LF_DS / "ds_z3_fp8_config.json"), "/x/t.yaml", 1, LF_LORA, 8, 3584, **NEW)
    zo = cfg.raw["zero_optimization"]
    assert (zo["reduce_bucket_size"], zo["stage3_prefetch_bucket_size"], zo["stage3_param_persistence_threshold"]) == (
        3584 ** 2, int(0.9 * 3584 ** 2), 10 * 3584)
    assert {p.key for p in kinds(cfg, "ignored")} == {"comms_config", "monitor_config"}
    # fp16.enabled is an explicit false: fine with bf16, a mismatch with fp16
    bad = load_ds_config(str(LF_DS / "ds_z3_fp8_config.json"), "/x/t.yaml", 1,
                         {**LF_LORA, "bf16": False, "fp16": True}, 8, 3584, **NEW)
    mm = kinds(bad, "mismatch")
    assert [(p.key, p.group, p.actual, p.expected) for p in mm] == [("fp16.enabled", "precision", False, True)]


CASE_EXPECT = {
    # case id: {(kind, key)} of error-or-silent problems the case's own JSON has with its own YAML
    "032": {("deprecated", "zero_optimization.cpu_offload"), ("invalid", "train_micro_batch_size_per_gpu")},
    "058": {("invalid", "train_micro_batch_size_per_gpu")},
    "059": {("invalid", "zero_optimization"), ("invalid", "train_micro_batch_size_per_gpu")},
    "065": {("invalid", "zero_optimization"), ("invalid", "train_micro_batch_size_per_gpu")},
}


@pytest.mark.parametrize("path", CASE_JSONS, ids=lambda p: p.parent.name)
def test_case_configs(path):
    from finetune_doctor.readers.config.yamlcfg import load_config

    case = path.parent.name
    lf = load_config(str(path.parent / "config.yaml")).values
    cfg = load_ds_config(str(path), str(path.parent / "config.yaml"), 1, lf, 8, 4096, **NEW)
    got = {(p.kind, p.key) for p in cfg.problems if p.kind in ERROR_KINDS + ("deprecated",)}
    assert got == CASE_EXPECT.get(case, set())
    # reconstructed files carry a `_note`: read, never used
    if "_note" in cfg.raw:
        assert ("ignored", "_note") in {(p.kind, p.key) for p in cfg.problems}
    f = ds_facts(cfg)
    if case == "058":
        assert f["zero_stage"] == 2 and f["overlap_comm"] is True
    if case == "032":
        assert f["offload_optimizer_device"] == "cpu" and f["fp16_enabled"] is True


# --------------------------------------------------------------------------------------------------------------
# HF's and accelerate's own code as the reference for resolution and mismatch text
# --------------------------------------------------------------------------------------------------------------

def _hf_args(lf: dict, world: int) -> SimpleNamespace:
    g = {**dsauto.HF_DEFAULTS, **{k: v for k, v in lf.items() if v is not None}}
    return SimpleNamespace(
        world_size=world, per_device_train_batch_size=g["per_device_train_batch_size"],
        gradient_accumulation_steps=g["gradient_accumulation_steps"], max_grad_norm=g["max_grad_norm"],
        learning_rate=g["learning_rate"], adam_beta1=g["adam_beta1"], adam_beta2=g["adam_beta2"],
        adam_epsilon=g["adam_epsilon"], weight_decay=g["weight_decay"], save_on_each_node=g["save_on_each_node"],
        fp16=g["fp16"], fp16_full_eval=g["fp16_full_eval"], bf16=g["bf16"], bf16_full_eval=g["bf16_full_eval"],
        get_warmup_steps=lambda n: g["warmup_steps"] if g["warmup_steps"] > 0 else math.ceil(n * g["warmup_ratio"]))


def hf_reference(raw: dict, lf: dict, world: int, hidden: int, steps: int) -> tuple[dict | None, str | None]:
    """The dict DeepSpeed receives from Trainer + accelerate, or the first ValueError on the way."""
    import logging

    from accelerate.utils import DeepSpeedPlugin
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

    logging.getLogger("accelerate").setLevel(logging.ERROR)
    args = _hf_args(lf, world)
    try:
        h = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
        h.trainer_config_process(args)
        plugin = DeepSpeedPlugin(hf_ds_config=h)
        plugin.set_mixed_precision("fp16" if args.fp16 else "bf16" if args.bf16 else "no")
        model = SimpleNamespace(config=SimpleNamespace(hidden_size=hidden))
        h.trainer_config_finalize(args, model, steps)
        cfg = plugin.deepspeed_config
        plugin.fill_match("gradient_accumulation_steps", must_match=False,
                          gradient_accumulation_steps=args.gradient_accumulation_steps)
        mbs = args.per_device_train_batch_size
        kwargs = {"gradient_clipping": 1.0, "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
                  "train_micro_batch_size_per_gpu": mbs,
                  "train_batch_size": mbs * cfg["gradient_accumulation_steps"] * world,
                  "zero_optimization.reduce_bucket_size": hidden * hidden,
                  "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
                  "zero_optimization.stage3_param_persistence_threshold": 10 * hidden}
        plugin.deepspeed_config_process(must_match=False, **kwargs)
        if "optimizer" not in cfg:
            cfg["zero_allow_untested_optimizer"] = True
        return cfg, None
    except ValueError as err:
        return None, str(err)
    finally:
        unset_hf_deepspeed_config()


def deepspeed_verdict(d: dict, world: int) -> str | None:
    """DeepSpeedConfig on the dict HF/accelerate produced, with the world size patched (schema.md §3)."""
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    saved = dist.get_world_size, dist.get_rank
    dist.get_world_size, dist.get_rank = (lambda *a, **k: world), (lambda *a, **k: 0)
    try:
        DeepSpeedConfig(copy.deepcopy(d))
        return None
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    finally:
        dist.get_world_size, dist.get_rank = saved


VARIANTS = [
    {**LF_LORA, "max_steps": 100},
    {**LF_LORA, "bf16": False, "fp16": True, "gradient_accumulation_steps": 4, "max_steps": 50},
    {"per_device_train_batch_size": 2, "max_steps": 10, "warmup_steps": 3},
]


def _parses(p: Path) -> bool:
    try:
        json.loads(p.read_text())
        return True
    except json.JSONDecodeError:
        return False


@needs_hf
@pytest.mark.parametrize("path", LF_EXAMPLES + CASE_JSONS + [p for p in sorted(FIX.glob("*.json")) if _parses(p)],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("vi", range(len(VARIANTS)))
def test_resolution_equals_transformers_and_accelerate(path, vi):
    lf = VARIANTS[vi]
    raw = json.loads(path.read_text())
    steps = lf["max_steps"]
    ref, err = hf_reference(raw, lf, 8, 4096, steps)
    cfg = build_ds_config(raw, str(path), {}, lf, 8, 4096, **NEW)
    errors = [p for p in cfg.problems if p.kind in ("invalid", "mismatch", "type", "unknown") and not p.silent]
    if err is None:
        assert cfg.received == ref
        # what HF and accelerate let through, DeepSpeed itself judges: our errors exactly when it raises
        ds_err = deepspeed_verdict(ref, 8)
        assert bool(errors) == (ds_err is not None), (ds_err, [p.as_dict() for p in errors])
        if dsauto.is_true(ref, "bf16.enabled") or dsauto.is_true(ref, "fp16.enabled") or True:
            from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
            h = HfTrainerDeepSpeedConfig(copy.deepcopy(raw))
            h.trainer_config_process(_hf_args(lf, 8))
            assert cfg.hf_dtype == {"torch.bfloat16": "bfloat16", "torch.float16": "float16",
                                    "torch.float32": "float32"}[str(h.dtype())]
    else:
        assert errors, f"HF/accelerate raise {err!r} but no problem was found"
        if err.startswith("Please correct the following DeepSpeed config values that mismatch"):
            want = [ln for ln in err.splitlines() if ln.startswith("- ds ")]
            got = [p.upstream for p in cfg.problems if p.kind == "mismatch" and p.upstream
                   and p.upstream.startswith("- ds ")]
            assert got == want
        elif err.startswith("`--mixed_precision` arg cannot be set"):
            assert any(p.group == "precision" for p in errors)
        elif "not found in kwargs" in err:
            key = re.search(r"`([^`]+)` not found", err).group(1)
            assert any(p.key == key for p in errors)
        else:
            assert any(p.detail and err in p.detail for p in errors), err


def test_mismatch_lines_are_the_logged_ones():
    # config_validation_errors.log (1): per_device 2, world x gas = 64, max_grad_norm 1.0, lr 1e-05, bf16 YAML
    log = (FIX / "config_validation_errors.log").read_text().splitlines()
    start = next(i for i, ln in enumerate(log) if ln.startswith("# (1) [real]"))
    want = [ln for ln in log[start + 1:start + 9] if ln.startswith("- ds ")]
    # transformers 5.x words the fp16 line without the amp backend (log line (1b))
    want = [ln.replace("fp16|fp16_full_eval+fp16_backend(amp)", "fp16|fp16_full_eval") for ln in want]
    raw = json.loads((FIX / "batch_mismatch.json").read_text())
    raw.update({"train_micro_batch_size_per_gpu": 4, "train_batch_size": 32, "gradient_accumulation_steps": "auto"})
    lf = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 8, "learning_rate": 1e-05, "bf16": True}
    cfg = build_ds_config(raw, None, {}, lf, 8, 4096, **NEW)
    got = [p.upstream for p in cfg.problems if p.kind == "mismatch"]
    assert got == want and len(want) == 6


def test_auto_find_batch_size_skips_batch_comparison():
    raw = json.loads((FIX / "batch_mismatch.json").read_text())
    lf = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": False, "fp16": True,
          "learning_rate": 3e-4, "max_grad_norm": 0.5, "auto_find_batch_size": True}
    cfg = build_ds_config(raw, None, {}, lf, 2, 4096, **NEW)
    assert [p.key for p in kinds(cfg, "mismatch")] == []


def test_absent_gradient_accumulation_steps():
    raw = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}
    cfg = build_ds_config(raw, None, {}, {"gradient_accumulation_steps": 8}, 4, 4096, **NEW)
    (p,) = kinds(cfg, "mismatch")
    assert (p.key, p.group, p.silent, p.expected) == ("gradient_accumulation_steps", "batch", True, 8)
    assert cfg.resolved["gradient_accumulation_steps"] == 1          # what accelerate inserts
    crash = build_ds_config({**raw, "train_batch_size": "auto"}, None, {}, {"gradient_accumulation_steps": 8}, 4,
                            4096, **NEW)
    (p,) = kinds(crash, "mismatch")
    assert p.silent is False and "train_batch_size is not equal" in p.detail
    assert crash.resolved["train_batch_size"] == 4 * 8 * 8           # HF filled it with the YAML's accumulation
    ok = build_ds_config(raw, None, {}, {"gradient_accumulation_steps": 1}, 4, 4096, **NEW)
    assert not kinds(ok, "mismatch")


def test_unknown_world_and_hidden_size_stay_unresolved():
    cfg = load_ds_config(str(LF_DS / "ds_z3_config.json"), "/x/t.yaml", 1, LF_LORA, None, None, **NEW)
    assert set(cfg.unresolved) == {"train_batch_size", "zero_optimization.reduce_bucket_size",
                                   "zero_optimization.stage3_prefetch_bucket_size",
                                   "zero_optimization.stage3_param_persistence_threshold"}
    assert cfg.resolved["train_batch_size"] is None and not kinds(cfg, *ERROR_KINDS)
    assert cfg.resolved["train_micro_batch_size_per_gpu"] == 1


def test_linting_a_json_alone_compares_nothing():
    cfg = load_ds_config(str(FIX / "batch_mismatch.json"), str(FIX / "batch_mismatch.json"), None, {}, None, None,
                         **NEW)
    assert not kinds(cfg, "mismatch")
    assert cfg.resolved["train_batch_size"] == 32 and cfg.hf_dtype is None
    assert "no_yaml" in cfg.caveats
    assert any("no LLaMA-Factory YAML" in n for n in ds_facts(cfg)["notes"])


def test_precision_section_without_enabled_is_silently_off():
    raw = {"train_micro_batch_size_per_gpu": "auto", "bf16": {"immediate_grad_update": True},
           "zero_optimization": {"stage": 2}}
    cfg = build_ds_config(raw, None, {}, {"bf16": True}, 8, 4096, **NEW)
    (p,) = kinds(cfg, "mismatch")
    assert (p.key, p.group, p.silent) == ("bf16.enabled", "precision", True)
    assert ds_facts(cfg)["bf16_enabled"] is False
    # an absent section is written by accelerate from the YAML flag: nothing to report
    cfg2 = build_ds_config({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}, None, {},
                           {"bf16": True}, 8, 4096, **NEW)
    assert not kinds(cfg2, "mismatch") and cfg2.resolved["bf16"] == {"enabled": True}
    assert cfg2.resolved["fp16"] == {"enabled": False} and cfg2.hf_dtype == "float32"


def test_hf_dtype_rules_4x_and_5x():
    base = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}
    # no fp16 section, no flags: 5.x fp32, 4.x fp16 (hf_integration.md §2 dtype())
    c = build_ds_config(base, None, {}, {"per_device_train_batch_size": 1}, 8, 4096, **NEW)
    assert (c.hf_dtype, c.hf_dtype_4x) == ("float32", "float16")
    c = build_ds_config({**base, "fp16": {"enabled": "auto"}}, None, {}, {"bf16": True}, 8, 4096, **NEW)
    assert (c.hf_dtype, c.hf_dtype_4x) == ("float32", "float32")      # auto → False: explicitly false
    c = build_ds_config({**base, "bf16": {"enabled": "auto"}}, None, {}, {"bf16": True}, 8, 4096, **NEW)
    assert (c.hf_dtype, c.hf_dtype_4x) == ("bfloat16", "bfloat16")


# --------------------------------------------------------------------------------------------------------------
# schema checks
# --------------------------------------------------------------------------------------------------------------

def test_typos_types_and_unfilled_autos():
    path = FIX / "zero3_typos.json"
    cfg = load_ds_config(str(path), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    got = {(p.kind, p.key): p for p in cfg.problems}
    typo = got[("unknown", "zero_optimization.stage3_prefech_bucket_size")]
    assert typo.suggestion == "stage3_prefetch_bucket_size" and typo.line == line_of(path, "stage3_prefech")
    assert ("invalid", "zero_optimization.offload_optimizer.device") in got
    assert ("type", "fp16.min_loss_scale") in got                 # 1e-10 in an int field (pydantic v2)
    live = got[("invalid", "zero_optimization.stage3_max_live_parameters")]
    assert live.expected == 1_000_000_000 and "not found in kwargs" in live.detail
    assert cfg.resolved["zero_optimization"]["stage3_max_live_parameters"] == 1_000_000_000
    # a typo'd key holding "auto" is one problem, not two
    assert ("invalid", "zero_optimization.stage3_prefech_bucket_size") not in got
    # 1.5e8 is an integral float: accepted
    assert not [p for p in cfg.problems if p.key == "zero_optimization.stage3_max_reuse_distance"]
    top = got[("ignored", "gradient_clip")]
    assert top.suggestion == "gradient_clipping"


def test_versioned_keys():
    raw = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "zero_optimization": {"stage": 3, "mics_shard_size": 8, "leaf_module": {"classes": []},
                                 "stage3_allgather_sequential": True}}
    by = lambda v: {(p.kind, p.key) for p in build_ds_config(raw, None, {}, LF_LORA, 8, 4096, ds_version=v,
                                                              transformers_version="5.24.0").problems
                    if p.kind != "ignored"}
    # 0.19.8 removed MiCS; leaf_module (0.18.0) and allgather_sequential (0.18.5) exist
    assert by("0.19.8") == {("removed", "zero_optimization.mics_shard_size")}
    # 0.18.0: MiCS is fine, allgather_sequential is not there yet
    assert by("0.18.0") == {("unknown", "zero_optimization.stage3_allgather_sequential")}
    # 0.16.9 (LLaMA-Factory's pin until 2026-01): neither new key
    assert by("0.16.9") == {("unknown", "zero_optimization.leaf_module"),
                            ("unknown", "zero_optimization.stage3_allgather_sequential")}
    # unknown version: newest schema, removal only a warning
    assert by(None) == {("deprecated", "zero_optimization.mics_shard_size")}


def test_deprecated_aliases():
    cfg = load_ds_config(str(FIX / "legacy_keys.json"), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    got = {(p.kind, p.key) for p in cfg.problems}
    assert ("deprecated", "zero_optimization.cpu_offload") in got
    assert ("invalid", "zero_optimization.stage3_gather_fp16_weights_on_model_save") in got   # both forms given
    assert ("removed", "amp") in got and ("removed", "zero_optimization.mics_shard_size") in got
    assert ds_facts(cfg)["offload_optimizer_device"] == "cpu"


def test_prefetch_float_from_old_transformers():
    raw = json.loads((LF_DS / "ds_z3_config.json").read_text())
    old = build_ds_config(raw, None, {}, LF_LORA, 8, 4096, ds_version="0.15.4", transformers_version="4.44.2")
    (p,) = kinds(old, "type")
    assert p.key == "zero_optimization.stage3_prefetch_bucket_size" and p.expected == 15099494
    assert old.resolved["zero_optimization"]["stage3_prefetch_bucket_size"] == pytest.approx(0.9 * 4096 ** 2)
    # pydantic v1 DeepSpeed truncated it silently; transformers 4.45 writes an int
    assert not kinds(build_ds_config(raw, None, {}, LF_LORA, 8, 4096, ds_version="0.14.4",
                                     transformers_version="4.44.2"), "type")
    assert not kinds(build_ds_config(raw, None, {}, LF_LORA, 8, 4096, ds_version="0.15.4",
                                     transformers_version="4.45.0"), "type")


def test_structural_problems():
    c = build_ds_config({"fp16": {"enabled": "auto"}}, None, {}, LF_LORA, 8, 4096, **NEW)
    assert {(p.kind, p.key) for p in kinds(c, "invalid")} == {("invalid", "zero_optimization"),
                                                               ("invalid", "train_micro_batch_size_per_gpu")}
    c = build_ds_config({"train_batch_size": "32", "train_micro_batch_size_per_gpu": 0,
                         "zero_allow_untested_optimizer": "false",
                         "zero_optimization": {"stage": 4, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}},
                        None, {}, {}, 8, 4096, **NEW)
    got = {(p.kind, p.key) for p in c.problems}
    assert {("type", "train_batch_size"), ("invalid", "train_micro_batch_size_per_gpu"),
            ("type", "zero_allow_untested_optimizer"), ("invalid", "zero_optimization.stage")} <= got
    # stage 4 is invalid, so the partial-offload check has no stage to compare with
    c = build_ds_config({"train_micro_batch_size_per_gpu": 1,
                         "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}},
                        None, {}, {}, 8, 4096, **NEW)
    (p,) = kinds(c, "invalid")
    assert p.key == "zero_optimization.offload_optimizer.ratio" and "Partial offloading" in p.detail


# --------------------------------------------------------------------------------------------------------------
# the vendored schema against DeepSpeed's own sources
# --------------------------------------------------------------------------------------------------------------

def _accepted_zero_keys(version: str) -> set[str]:
    v = S.parse_version(version)
    out = set()
    for name, spec in S.ZERO_FIELDS.items():
        if spec.since and v < S.parse_version(spec.since):
            continue
        if spec.removed and v >= S.parse_version(spec.removed):
            continue
        out.add(name)
        if spec.other_name:
            out.add(spec.other_name)
    return out


def test_zero_keys_per_tag_match_the_reference_table():
    for line in (FIX / "zero_fields_by_version.txt").read_text().splitlines():
        if line.startswith("  aliases:"):
            names |= set(line.split(":", 1)[1].split())
            if tag != "HEAD":
                assert _accepted_zero_keys(tag.lstrip("v")) == names, tag
            continue
        tag, _count, *fields = line.split()
        names = set(fields)


@needs_ds
def test_vendored_tables_match_the_installed_deepspeed():
    import deepspeed
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                       DeepSpeedZeroOffloadParamConfig)

    ver = deepspeed.__version__
    names = set()
    for n, f in DeepSpeedZeroConfig.model_fields.items():
        names.add(n)
        if f.alias:
            names.add(f.alias)
    assert _accepted_zero_keys(ver) == names
    for model, table in ((DeepSpeedZeroOffloadParamConfig, S.OFFLOAD_PARAM_FIELDS),
                         (DeepSpeedZeroOffloadOptimizerConfig, S.OFFLOAD_OPTIMIZER_FIELDS),
                         (DeepSpeedFP16Config, S.FP16_FIELDS), (DeepSpeedBF16Config, S.BF16_FIELDS)):
        assert set(model.model_fields) == set(table), model.__name__
        for k, f in model.model_fields.items():
            want = S.pin_memory_default(S.parse_version(ver)) if k == "pin_memory" else table[k].default
            assert f.default == want, (model.__name__, k)
    z = DeepSpeedZeroConfig()
    for k in S.MEMORY_ZERO_KEYS:
        spec = S.ZERO_FIELDS[k]
        assert getattr(z, spec.other_name or k) == (False if k == "overlap_comm" else spec.default), k


BATTERY = [
    ("zero_optimization", "stage", v) for v in (0, 3, "2", 2.0, True, 4, -1, 2.5, "two", None)
] + [
    ("zero_optimization", "reduce_bucket_size", v) for v in (5e8, "500000000", "5e8", 15099494.4, 0, -5, True, None)
] + [
    ("zero_optimization", "sub_group_size", v) for v in (1e9, 0, -1, 1.5)
] + [
    ("zero_optimization", "contiguous_gradients", v) for v in (True, "false", 1, 2, "yes", "maybe", None)
] + [
    ("zero_optimization", "overlap_comm", v) for v in (None, "false", 1, 3)
] + [
    ("zero_optimization", "offload_optimizer", v) for v in ({"device": "cpu"}, {"device": "gpu"}, {"device": "CPU"},
                                                            {"device": "nvme", "ratio": 1.5}, True, None,
                                                            {"device": "cpu", "fast": True})
] + [
    ("zero_optimization", "offload_param", v) for v in ({"buffer_count": -1}, {"max_in_cpu": 1e9},
                                                        {"buffer_size": 1.5e8}, {"buffer_size": 1.25})
] + [
    ("zero_optimization", k, 1) for k in ("stage3_prefech_bucket_size", "prefetch_bucket_size", "mics_shard_size")
] + [
    ("fp16", "min_loss_scale", v) for v in (1, 1e-10, 0.5, "2")
] + [
    ("fp16", "loss_scale", v) for v in (0, -1, 128.0, "x")
] + [
    ("fp16", "initial_scale_power", v) for v in (16, 16.0, 16.5)
] + [
    ("bf16", "enabled", v) for v in (True, "true", "nope")
] + [("bf16", "loss_scale", 0)]


@needs_ds
@pytest.mark.parametrize("section, key, value", BATTERY, ids=lambda x: repr(x))
def test_static_verdict_equals_pydantic(section, key, value):
    from pydantic import ValidationError
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    import deepspeed

    model = {"zero_optimization": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config, "bf16": DeepSpeedBF16Config}
    sec = {key: value}
    try:
        model[section](**sec)
        rejected = False
    except (ValidationError, AssertionError):
        rejected = True
    raw = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    raw[section] = {**raw.get(section, {}), **sec}
    if section == "zero_optimization" and key == "stage":
        raw[section] = {"stage": value}
    cfg = build_ds_config(raw, None, {}, {}, 8, 4096, ds_version=deepspeed.__version__, transformers_version="5.24.0")
    # problems that mirror a DeepSpeed error carry its text in `detail`; the HF-side ones (a string stage that
    # transformers does not see as ZeRO-3) do not, and DeepSpeed accepts those values
    flagged = [p for p in cfg.problems if p.kind in ("unknown", "removed", "type", "invalid") and p.detail
               and p.key and p.key.startswith(f"{section}.{key}")]
    assert bool(flagged) == rejected, [p.as_dict() for p in flagged]


@needs_ds
def test_validate_with_deepspeed():
    good = load_ds_config(str(LF_DS / "ds_z3_config.json"), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    assert validate_with_deepspeed(good) == []
    # what the vendored checks let through for an older target version, the installed DeepSpeed (0.19.8) rejects
    raw = {"train_micro_batch_size_per_gpu": "auto", "amp": {"enabled": False}, "zero_optimization": {"stage": 2}}
    old = build_ds_config(raw, None, {}, LF_LORA, 8, 4096, ds_version="0.16.9", transformers_version="5.24.0")
    assert not kinds(old, "removed", "invalid")
    (p,) = validate_with_deepspeed(old)
    assert p.kind == "deepspeed" and "Apex AMP" in p.detail
    # the batch identity is checked against the real world size, not DeepSpeed's offline default of 1
    raw = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
           "zero_optimization": {"stage": 2}}
    c8 = build_ds_config(raw, None, {}, {}, 8, 4096, **NEW)
    assert validate_with_deepspeed(c8) == []
    c4 = build_ds_config(raw, None, {}, {}, 4, 4096, **NEW)
    (p,) = validate_with_deepspeed(c4)
    assert "64 != 1 * 8 * 4" in p.detail


def test_validate_with_deepspeed_without_deepspeed(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)     # import deepspeed → ImportError
    cfg = load_ds_config(str(LF_DS / "ds_z2_config.json"), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    assert validate_with_deepspeed(cfg) is None


def test_lint_path_imports_no_heavy_library():
    code = (
        "import sys\n"
        "from finetune_doctor.readers.deepspeed.dsconfig import load_ds_config\n"
        "from finetune_doctor.facts.ds import facts_of as ds_facts\n"
        f"c = load_ds_config({str(LF_DS / 'ds_z3_offload_config.json')!r}, '/x/t.yaml', 1, {{'bf16': True}}, 8, 4096)\n"
        "ds_facts(c)\n"
        "bad = [m for m in ('torch', 'transformers', 'deepspeed', 'accelerate', 'pydantic') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --------------------------------------------------------------------------------------------------------------
# facts
# --------------------------------------------------------------------------------------------------------------

def test_facts_namespace():
    cfg = load_ds_config(str(FIX / "zero2_overlap_offload_param.json"), "/x/t.yaml", 1, LF_LORA, 8, 4096,
                         ds_version="0.18.0", transformers_version="5.24.0")
    f = ds_facts(cfg)
    assert f["zero_optimization"]["stage"] == 2 and f["zero_stage"] == 2
    assert (f["offload_optimizer_device"], f["offload_param_device"]) == ("cpu", "cpu")
    assert f["offload_optimizer_active"] is True and f["offload_param_active"] is False
    assert [o["key"] for o in f["ignored_offloads"]] == ["zero_optimization.offload_param"]
    assert f["overlap_comm"] is True and f["overlap_comm_known_bad"] is True
    # HF guide: 4.5 x (5e8 + 5e8) elements x 2 bytes = 9e9 bytes
    assert f["overlap_comm_buffer_gib"] == pytest.approx(9e9 / 2 ** 30)
    assert f["bf16_enabled"] is True and f["fp16_enabled"] is False and f["hf_dtype"] == "bfloat16"
    assert "zero_optimization.overlap_comm" in f["explicit"] and "bf16.enabled" not in f["explicit"]
    assert f["defaults"]["offload_param.buffer_size"] == 100_000_000
    assert "offload_param.pin_memory" not in f["defaults"]               # written in the file
    assert f["gradient_clipping"] == 1.0 and f["version"] == "0.18.0"
    for p in f["problems"]:
        assert set(p["location"]) == {"file", "line", "column", "key"}
    # ZeRO-3 default overlap, and the alias-aware getter
    z3 = load_ds_config(str(LF_DS / "ds_z3_config.json"), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    assert ds_facts(z3)["overlap_comm"] is False                       # LF writes false explicitly
    raw = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "prefetch_bucket_size": 7}}
    c = build_ds_config(raw, None, {}, {}, 8, 4096, **NEW)
    assert c.get("zero_optimization.stage3_prefetch_bucket_size") == 7
    assert c.get("zero_optimization.stage3_max_live_parameters") == 1_000_000_000
    assert c.defaults["overlap_comm"] is True and ds_facts(c)["overlap_comm"] is True


def test_gradient_clipping_default_depends_on_version():
    raw = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    assert ds_facts(build_ds_config(raw, None, {}, {}, 8, None, ds_version="0.19.2"))["gradient_clipping"] == 0.0
    assert ds_facts(build_ds_config(raw, None, {}, {}, 8, None, ds_version="0.19.3"))["gradient_clipping"] == 1.0


def test_inline_dict_value():
    raw = json.loads((LF_DS / "ds_z2_config.json").read_text())
    cfg = load_ds_config(raw, "/x/t.yaml", 4, LF_LORA, 2, 4096, **NEW)
    assert cfg.path is None and cfg.resolved["train_batch_size"] == 2 * 1 * 2
    assert ds_facts(cfg)["problems"] == []


def test_installed_version_matches_package_metadata():
    from importlib.metadata import version

    for dist in ("ruamel.yaml", "click", "pytest"):
        assert S.installed_version(dist) == version(dist)
    assert S.installed_version("no-such-distribution-xyz") is None


def test_byte_order_mark_fails_as_under_hf(tmp_path):
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + (LF_DS / "ds_z2_config.json").read_bytes())
    with open(p, encoding="utf-8") as f:       # what accelerate's HfDeepSpeedConfig does
        with pytest.raises(json.JSONDecodeError):
            json.load(f)
    with pytest.raises(InputError) as ei:
        load_ds_config(str(p), "/x/t.yaml", 1, LF_LORA, 8, 4096, **NEW)
    assert "BOM" in ei.value.message and ei.value.line == 1


def test_string_stage_is_not_zero3_for_transformers():
    raw = json.loads((LF_DS / "ds_z3_config.json").read_text())
    raw["zero_optimization"]["stage"] = "3"
    cfg = build_ds_config(raw, None, {}, LF_LORA, 8, 4096, **NEW)
    (p,) = kinds(cfg, "type")
    assert (p.key, p.check, p.fix_value, p.actual, p.stage) == ("zero_optimization.stage", "stage_not_int", 3, "3", 3)
    assert cfg.zero_stage == 3                              # DeepSpeed's view
    # transformers' view, when installed: its HfDeepSpeedConfig does not see ZeRO-3 either
    if _have("transformers") and _have("deepspeed"):
        from transformers.integrations.deepspeed import HfDeepSpeedConfig, unset_hf_deepspeed_config
        try:
            assert HfDeepSpeedConfig(copy.deepcopy(raw)).is_zero3() is False
        finally:
            unset_hf_deepspeed_config()
