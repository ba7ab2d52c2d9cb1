"""`doctor check` runs on every training config among LLaMA-Factory's own examples, in text and JSON, from the
LLaMA-Factory root (where `deepspeed: examples/deepspeed/...` paths resolve), and finds no error in them except
where the example itself is wrong for the current stack. The accelerate configs of examples/accelerate are
launch configs, not training configs: each is checked with the training config LLaMA-Factory launches with it
(examples/extras/fsdp_qlora/train.sh), given as `--accelerate-config` and as the launch line itself (`--launch`)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from finetune_doctor.cli import main

LF_ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory"
TRAIN = sorted(p for p in (LF_ROOT / "examples").rglob("*.yaml") if "do_train: true" in p.read_text())
ACCELERATE = sorted((LF_ROOT / "examples" / "accelerate").glob("*.yaml"))
FSDP_QLORA = "examples/extras/fsdp_qlora/llama3_lora_sft.yaml"
# examples whose errors are real. GaLore/APOLLO set no `optim`, and transformers' default on torch >= 2.8
# (adamw_torch_fused) is one LLaMA-Factory's GaLore/APOLLO builders reject (LF_FACTS.md §3): with the torch of the
# training machine not given here that is a warning (galore-default-optim-unverified), not an error.
# llama_pro's `models/llama3-8b-pro` is on no hub and not on this machine: it is sized as Meta-Llama-3-8B with the
# blocks LLaMA Pro adds (readers/model/modelcfg.py `_by_expansion`; tests/test_llama_pro_expansion.py compares it
# with the expanded config.json in fixtures/models/llama3-8b-pro), so it is checked like every other example.
# On 8 GPUs LLaMA-Factory launches torchrun, which refuses the layer-wise GaLore/APOLLO and BAdam these examples
# set up for one GPU (their own comments say "use false for DDP training"; LF 0.9.5 hparams/parser.py:387-398).
KNOWN_ERRORS = {"extras/galore/llama3_full_sft.yaml": {"distributed-incompatible-option"},
                "extras/apollo/llama3_full_sft.yaml": {"distributed-incompatible-option"},
                "extras/badam/llama3_full_sft.yaml": {"distributed-incompatible-option"}}
# the engine each example trains with (run/engines.py); every other example trains with DDP or DeepSpeed
ENGINES = {"megatron/qwen3_moe_full.yaml": "megatron", "megatron/qwen2_vl_full.yaml": "megatron",
           "megatron_bridge/llama3_sft.yaml": "megatron"}


def test_there_are_training_examples():
    assert len(TRAIN) >= 18
    assert {p.parent.name for p in TRAIN} >= {"megatron", "megatron_bridge", "fsdp_qlora"}
    assert len(ACCELERATE) >= 4


def _check(args: list[str]) -> tuple[int, dict]:
    res = CliRunner().invoke(main, ["check", *args, "--gpu", "8xA100-80GB", "--no-data", "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.output)


@pytest.mark.parametrize("path", TRAIN, ids=lambda p: str(p.relative_to(LF_ROOT / "examples")))
def test_example(path, monkeypatch):
    monkeypatch.chdir(LF_ROOT)
    rel = str(path.relative_to(LF_ROOT / "examples"))
    code, report = _check([str(path)])
    errors = {f["name"] for f in report["findings"] if f["severity"] == "error"}
    assert errors == KNOWN_ERRORS.get(rel, set()), (rel, report["findings"])
    assert report["memory"] is not None and report["memory"]["per_gpu_gib"]["total"] > 0
    assert report["run"]["engine"] == ENGINES.get(rel, report["run"]["engine"]), report["run"]
    if rel not in ENGINES:
        assert report["run"]["engine"] in ("ddp", "deepspeed", "single"), (rel, report["run"])
    text = CliRunner().invoke(main, ["check", str(path), "--gpu", "8xA100-80GB", "--no-data"])
    assert text.exit_code == code


@pytest.mark.parametrize("acc", ACCELERATE, ids=lambda p: p.name)
def test_accelerate_example(acc, monkeypatch):
    """Each accelerate config with the FSDP-QLoRA example: FSDP as the config says, its ranks, an estimate that is
    the sharded one (below the same run replicated), no error."""
    monkeypatch.chdir(LF_ROOT)
    rel = str(acc.relative_to(LF_ROOT))
    values = YAML(typ="safe", pure=True).load(acc.read_text(encoding="utf-8"))
    _, report = _check([FSDP_QLORA, "--accelerate-config", rel])
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    assert report["run"]["engine"] == "fsdp" and report["run"]["world_size"] == values["num_processes"]
    assert report["memory"]["per_gpu_gib"]["total"] > 0
    _, ddp = _check([FSDP_QLORA])
    assert report["memory"]["per_gpu_gib"]["weights"] < ddp["memory"]["per_gpu_gib"]["weights"]
    version = values["fsdp_config"].get("fsdp_version", 1)
    assert any(f"FSDP{'2' if version == 2 else ''} " in n for n in report["notes"]), report["notes"]


def test_fsdp_qlora_launch_script(monkeypatch):
    """LLaMA-Factory's own launch line for FSDP+QLoRA (train.sh) gives the same run as naming its accelerate
    config: the script's `accelerate launch --config_file examples/accelerate/fsdp_config.yaml` is followed."""
    monkeypatch.chdir(LF_ROOT)
    _, by_launch = _check([FSDP_QLORA, "--launch", "examples/extras/fsdp_qlora/train.sh"])
    _, by_config = _check([FSDP_QLORA, "--accelerate-config", "examples/accelerate/fsdp_config.yaml"])
    assert by_launch["run"] == by_config["run"] and by_launch["run"]["engine"] == "fsdp"
    assert by_launch["memory"]["per_gpu_gib"] == by_config["memory"]["per_gpu_gib"]
    assert not [f for f in by_launch["findings"] if f["severity"] == "error"]
