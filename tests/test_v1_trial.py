"""What a new user met running LLaMA-Factory's own v1 examples (issue 24, trial of 2026-12-07): prescriptions in v0
keys that v1 rejects, a DeepSpeed dist_config without its file, v1's own optimizer, the trainer the subcommand
picks, and v1's merge command.

Configs are LF's v1 examples (examples/v1/train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml,
train_lora/train_lora_dpo.yaml) as LF ships them, or with the one key a user changes.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config.lfkind import COMMANDS
from finetune_doctor.readers.config.lfrelease import v1_catalog

MOE = """model: Qwen/Qwen3.5-35B-A3B
model_class: llm

dist_config:
  name: fsdpturbo
  ep_size: 16
  ep_dispatcher: eager

### data
train_dataset: data/v1_sft_demo.yaml

### training
output_dir: outputs/test_qwen3_moe
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-5
bf16: true
max_steps: 10
"""

DPO = """model: Qwen/Qwen3-4B
model_class: llm

peft_config:
  name: lora
  r: 16
  lora_alpha: 32
  lora_dropout: 0.05
  target_modules: all

dist_config:
  name: fsdp2
  dcp_path: null

train_dataset: data/v1_dpo_demo.yaml
output_dir: ./outputs/test_lora
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-5
max_steps: 10
"""


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def _json(tmp_path, text, *args):
    cfg = tmp_path / "v1.yaml"
    cfg.write_text(text)
    res = CliRunner().invoke(main, ["check", str(cfg), "--format", "json", "--fail-on", "never", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_no_prescription_writes_a_key_v1_does_not_declare(tmp_path):
    # 48 GB cards: at-risk by the memory model's own probability (on 16 H100-80GB it puts 4 % on running out, and
    # since issue #21 the verdict is read on that, not on the all-cause p_oom: fits, no FD606 to carry the edits)
    rep = _json(tmp_path, MOE, "--gpu", "16xL40S")
    fields = v1_catalog()["fields"]
    fixes = [f["fix"] for f in rep["findings"] if f.get("fix")]
    edits = [e for fx in fixes for e in fx["edits"] + [e for a in fx.get("alternatives", []) for e in a["edits"]]
             if e["file"].endswith("v1.yaml")]
    assert [e["key"] for e in edits if e["key"].split(".")[0] not in fields] == []
    assert {f["code"] for f in rep["findings"]} >= {"FD606"}   # the finding stays, without the v0 keys' edits


def test_deepspeed_without_its_file_stops_v1(tmp_path):
    rep = _json(tmp_path, DPO.replace("  name: fsdp2\n  dcp_path: null\n", "  name: deepspeed\n"))
    hits = [f for f in rep["findings"] if f["code"] == "FD043"]
    assert len(hits) == 1 and "DeepSpeed config_file is required." in hits[0]["message"]


def test_v1_runs_torch_adamw_and_says_which_trainer_it_assumed(tmp_path):
    rep = _json(tmp_path, DPO)
    assert rep["run"]["optim"] == "adamw_torch"
    stage = [a for a in rep["assumptions"] if a["name"] == "v1-stage"]
    assert len(stage) == 1 and stage[0]["value"].startswith("sft") and stage[0]["alternatives"][0].startswith("dpo")
    (tmp_path / "run.sh").write_text("USE_V1=1 llamafactory-cli dpo v1.yaml\n")
    rep = _json(tmp_path, DPO, "--launch", str(tmp_path / "run.sh"))
    assert not [a for a in rep["assumptions"] if a["name"] == "v1-stage"]


def test_v1_merges_with_merge():
    assert COMMANDS["export-v1"] == "USE_V1=1 llamafactory-cli merge"


ULYSSES = """model: Qwen/Qwen3-0.6B
trust_remote_code: true
model_class: llm

flash_attn: flash_attention_2

dist_config:
  name: fsdp2
  dcp_path: null

cp_mode: ulysses
cp_size: 2

train_dataset: data/v1_sft_demo.yaml
output_dir: outputs/test_ulysses_cp
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
bf16: false
max_steps: 10
"""


def _lint(tmp_path, text, *args):
    cfg = tmp_path / "v1.yaml"
    cfg.write_text(text)
    res = CliRunner().invoke(main, ["lint", str(cfg), "--format", "json", "--exit-zero", *args])
    return [(f["code"], f["message"]) for f in json.loads(res.stdout)["findings"]]


@pytest.mark.parametrize("release, refused", [
    # v1 changed between the releases that ship it (catalog v1.fields_in / plugins_in, read from the wheels):
    # 0.9.4's v1 has `dataset`, no train_dataset, max_steps or flash_attn; 0.9.5's has no context parallel
    ("0.9.4", {f"`{k}` is not a v1 key of LLaMA-Factory 0.9.4"
               for k in ("train_dataset", "max_steps", "flash_attn", "cp_mode", "cp_size")}),
    ("0.9.5", {"`cp_mode` is not a v1 key of LLaMA-Factory 0.9.5", "`cp_size` is not a v1 key of LLaMA-Factory 0.9.5"}),
    ("0.9.6.dev0", set()),
])
def test_v1_keys_are_judged_for_the_release_named(tmp_path, release, refused):
    found = _lint(tmp_path, ULYSSES, "--llamafactory", release)
    errors = {m.split(" (")[0] for c, m in found if c == "FD001"}
    assert errors == refused
    # 0.9.4 reads dist_config without a plugin registry: fsdp2 is not called unregistered there
    assert not [m for c, m in found if c == "FD003"]


def test_a_plugin_main_registers_is_refused_by_a_release_without_it(tmp_path):
    found = _lint(tmp_path, MOE, "--llamafactory", "0.9.5")
    assert [m[:48] for c, m in found if c == "FD003"] == ["`dist_config.name: fsdpturbo` is not a plugin v1"]
    assert not [m for c, m in _lint(tmp_path, MOE, "--llamafactory", "0.9.6.dev0") if c == "FD003"]
