"""New-user trial 6 (12 real LLaMA-Factory reports): each problem by kind, with real-shaped configs of the same kind.

* one sizing of a checkpoint's storage for every config kind: a ``-AWQ`` / ``-GPTQ-Int4`` / ``-bnb-4bit`` upload
  named only by its repository id or folder is sized as it is stored (quant.py `hinted_spec`) in a train, a chat
  and an export config alike, and the chat/export report names the ``weights-quantization`` assumption, as
  training does (trial 6 case 12: a 14B -AWQ folder in a vLLM chat config sized as 26.39 GiB of bf16).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

pytestmark = pytest.mark.usefixtures("pinned_error_model")

TRAIN = """### model
model_name_or_path: {model}
### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
### dataset
dataset: alpaca_en_demo
template: qwen
cutoff_len: 1024
### output
output_dir: saves/qwen2.5-7b/lora/sft
### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
"""
CHAT = """model_name_or_path: {model}
template: qwen
infer_backend: vllm
vllm_maxlen: 8192
vllm_gpu_util: 0.9
"""
EXPORT = """### model
model_name_or_path: {model}
template: qwen
trust_remote_code: true
### export
export_dir: output/qwen2_5_7b_merged
export_size: 5
export_device: auto
"""


def _check(tmp_path: Path, body: str, *extra: str) -> dict:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(body, encoding="utf-8")
    r = CliRunner().invoke(main, ["check", str(cfg), "--offline", "--no-data", "--gpu", "4090", "--format", "json",
                                  "--fail-on", "never", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _weights(rep: dict) -> float:
    if rep.get("chat"):
        return rep["chat"]["weights_gib"]
    if rep.get("export"):
        return rep["export"]["weights_gib"]
    return rep["memory"]["per_gpu_gib"]["weights"]


@pytest.mark.parametrize(("model", "low", "high"), [
    # Qwen2.5-7B: 7.62 B params, 14.2 GiB in bf16; 4-bit linears + bf16 embeddings/head: ~5.2 GiB (the hub's
    # Qwen2.5-7B-Instruct-AWQ is 5.58 GB = 5.2 GiB of safetensors)
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", 4.8, 5.6),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", 4.8, 5.6),
    ("/data/models/Qwen2.5-7B-Instruct-bnb-4bit", 4.0, 5.6),
])
def test_checkpoint_storage_is_sized_alike_for_every_kind(model, low, high, tmp_path):
    got = {}
    for kind, body in (("train", TRAIN), ("chat", CHAT), ("export", EXPORT)):
        sub = tmp_path / kind
        sub.mkdir()
        rep = _check(sub, body.format(model=model))
        got[kind] = _weights(rep)
        if kind != "train":
            names = [a["name"] for a in rep["assumptions"]]
            assert "weights-quantization" in names, names
    assert all(low <= v <= high for v in got.values()), got
    # training adds the LoRA adapters (fp32, ~20 M params at rank 8 on every linear: < 0.1 GiB) to the same storage
    assert got["chat"] == got["export"] and 0 <= got["train"] - got["chat"] < 0.1, got


def test_unquantized_name_stays_bf16_in_chat(tmp_path):
    rep = _check(tmp_path, CHAT.format(model="Qwen/Qwen2.5-7B-Instruct"))
    assert rep["chat"]["weights_format"] is None and 14.0 <= rep["chat"]["weights_gib"] <= 14.4, rep["chat"]
    assert "weights-quantization" not in [a["name"] for a in rep["assumptions"]]


@pytest.mark.parametrize("body", [TRAIN, CHAT, EXPORT], ids=["train", "chat", "export"])
def test_unfetchable_hub_model_is_alike_for_every_kind(body, tmp_path):
    """A hub id in no cache and not in the catalogue, with --offline: the same finding whatever the config kind
    (trial 6: error for a chat config, info for a train config) - model-unresolved, worded as not fetchable from
    this machine, an error with or without --strict: `check` has no memory verdict without it (trial 16)."""
    # Qwen/Qwen3.5-9B has a catalogue entry since session 12, and a name built on it is sized as that entry with a
    # 'model' assumption; the 2B has none, so this name stays unresolvable offline
    text = body.format(model="Qwen/Qwen3.5-2B-Base-Preview")
    rep = _check(tmp_path, text)
    found = {f["code"]: f for f in rep["findings"]}
    assert "FD098" not in found and found["FD607"]["severity"] == "error", list(found)
    assert found["FD607"]["message"].startswith("No memory verdict: this machine cannot fetch")
    strict = tmp_path / "strict"
    strict.mkdir()
    rep = _check(strict, text, "--strict")
    assert "FD607" in [f["code"] for f in rep["findings"]]


MERGE_CPU = """### model
model_name_or_path: /data/models/Qwen2-72B-Instruct
adapter_name_or_path: saves/qwen2-72b/lora/sft
template: qwen
finetuning_type: lora
trust_remote_code: true
### export
export_dir: output/qwen2_72b_lora_merged
export_size: 2
export_device: cpu
export_legacy_format: false
"""


def test_cpu_merge_names_its_load_dtype_and_widens(tmp_path):
    """A CPU merge of a 72B on 252 GB of RAM (LlamaFactory#4711 was "Killed"): 142 GiB in bf16 fits, 284 GiB in
    float32 (LF's infer_optim_dtype on a machine with no CUDA/NPU device) does not: at-risk, the assumption named."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MERGE_CPU, encoding="utf-8")
    r = CliRunner().invoke(main, ["check", str(cfg), "--offline", "--host-ram", "252GB", "--format", "json",
                                  "--fail-on", "never"])
    rep = json.loads(r.stdout)
    ex = rep["export"]
    assert ex["verdict"] == "at-risk" and ex["fits"] is True, ex
    lo, hi = ex["interval_gib"]
    assert 140 < lo < 145 and 280 < hi < 290, ex["interval_gib"]
    a = {x["name"]: x for x in rep["assumptions"]}["load-dtype"]
    assert a["moves_verdict"] is True and list(a["effect"]["verdict"].values()) == ["oom"], a
    assert {"model"} <= {x["name"] for x in rep["assumptions"]}
    r = CliRunner().invoke(main, ["check", str(cfg), "--offline", "--host-ram", "252GB", "--strict"])
    assert r.exit_code == 1 and "FD641" in r.output, r.output   # --strict: a CI gate does not pass on the guess
    # a card for the merging machine says a device is there: LF loads in 16-bit, nothing to assume
    r = CliRunner().invoke(main, ["check", str(cfg), "--offline", "--host-ram", "252GB", "--gpu", "A100-80GB",
                                  "--format", "json", "--fail-on", "never"])
    rep = json.loads(r.stdout)
    assert rep["export"]["verdict"] == "fits" and "load-dtype" not in [x["name"] for x in rep["assumptions"]]


FREEZE_NO_PRECISION = """### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
trust_remote_code: true
### method
stage: sft
do_train: true
finetuning_type: freeze
freeze_trainable_layers: 4
freeze_trainable_modules: all
### dataset
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048
### output
output_dir: saves/qwen2.5-7b/freeze/sft
### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
learning_rate: 1.0e-5
"""


def test_fp32_message_agrees_with_the_inferred_compute_dtype(tmp_path):
    """LF infers bf16 from the checkpoint (the run line's compute dtype): FD101 says so and what runs in fp32,
    instead of "runs entirely in fp32" (trial 6 case 11)."""
    rep = _check(tmp_path, FREEZE_NO_PRECISION)
    msg = [f["message"] for f in rep["findings"] if f["code"] == "FD101"]
    assert msg and "loads the model in bfloat16" in msg[0] and "trainable layers to fp32" in msg[0], msg
    assert "entirely in fp32" not in msg[0]
    full = tmp_path / "full"
    full.mkdir()
    rep = _check(full, FREEZE_NO_PRECISION.replace("finetuning_type: freeze", "finetuning_type: full"))
    msg = [f["message"] for f in rep["findings"] if f["code"] == "FD101"]
    assert msg and "every trainable weight to fp32" in msg[0] and "full fine-tuning computes in fp32" in msg[0], msg


def test_dev_build_key_message_does_not_contradict_itself(tmp_path):
    """`use_muon` (0.9.3+) with --llamafactory 0.9.3.dev0: the stop applies to 0.9.2 of the allowed range, and the
    remedy is the env file, not the version flag just given (trial 6 case 05)."""
    body = FREEZE_NO_PRECISION.replace("finetuning_type: freeze", "finetuning_type: full").replace(
        "### dataset", "use_muon: true\n### dataset") + "bf16: true\n"
    rep = _check(tmp_path, body, "--llamafactory", "0.9.3.dev0")
    msg = [f["message"] for f in rep["findings"] if f["code"] == "FD041" and "use_muon" in f["message"]]
    assert msg and "that is LLaMA-Factory 0.9.2" in msg[0] and "pass --env FILE" in msg[0], msg
    assert "--llamafactory VERSION" not in msg[0] and "This holds only" not in msg[0]


def test_env_without_gpu_lines_is_named_as_given(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text("- `llamafactory` version: 0.9.2\n- Platform: Linux-5.15.0-x86_64-with-glibc2.35\n"
                   "- Python version: 3.10.14\n- PyTorch version: 2.4.0+cu121 (GPU)\n"
                   "- Transformers version: 4.46.1\n- Datasets version: 3.1.0\n- Accelerate version: 1.0.1\n"
                   "- PEFT version: 0.12.0\n- TRL version: 0.9.6\n", encoding="utf-8")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(FREEZE_NO_PRECISION + "bf16: true\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["check", str(cfg), "--offline", "--no-data", "--env", str(env), "--format", "json",
                                  "--fail-on", "never"])
    notes = [n for n in json.loads(r.stdout)["notes"] if n.startswith("GPUs unknown")]
    assert notes and "no --env" not in notes[0] and "names no GPU" in notes[0], notes


@pytest.mark.parametrize("flags", [("--transformers", "4.45.0"), ("--llamafactory", "0.8.3"),
                                   ("--llamafactory", "0.9.1")], ids=lambda f: " ".join(f))
def test_default_optimizer_follows_an_older_stated_stack(flags, tmp_path):
    """transformers before 4.54 defaults to adamw_torch whatever the torch (the fused default is
    huggingface/transformers#37358); an LF 0.8.x / 0.9.1 user gets such a transformers, and the torch of its time."""
    body = FREEZE_NO_PRECISION.replace("finetuning_type: freeze", "finetuning_type: full") + "bf16: true\n"
    rep = _check(tmp_path, body, *flags)
    assert rep["run"]["optim"] == "adamw_torch" and not rep["run"]["optim_assumed"], rep["run"]
    torch = {a["name"]: a for a in rep["assumptions"]}["torch-version"]
    assert torch["value"].startswith("< 2.8") and not torch["moves_verdict"], torch
    # no version stated: a current stack, the fused default (an assumption)
    now = tmp_path / "now"
    now.mkdir()
    rep = _check(now, body)
    assert rep["run"]["optim"] == "adamw_torch_fused" and rep["run"]["optim_assumed"]


def test_lf_08_takes_the_first_later_cap():
    from finetune_doctor.facts.stackrange import assumed_transformers
    from finetune_doctor.readers.config.lfrelease import choose

    got = assumed_transformers(choose("0.8.3", "--llamafactory"))
    assert got is not None and got["version"] == "4.45.0" and "0.9.0, the first release with one" in got["spec"]
