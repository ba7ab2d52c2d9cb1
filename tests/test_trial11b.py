"""Trial 11's edges, second part: a pasted YAML cut off mid-config (cases 08, 09: LlamaFactory#8137, #5320) is not
judged as whole, and `estimate` exits as `check` does on a model it cannot size."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.facts.cutpaste import signs

# an LF example-shaped training YAML, whole (examples/train_full/*_full_sft.yaml's layout, a streamed corpus)
WHOLE = """### model
model_name_or_path: Qwen/Qwen2.5-0.5B

### method
stage: pt
do_train: true
finetuning_type: full

### dataset
dataset: c4_demo
template: empty
cutoff_len: 1024
streaming: true

### output
output_dir: saves/qwen2.5-0.5b/full/pt
logging_steps: 10

### train
per_device_train_batch_size: 8
gradient_accumulation_steps: 4
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1

### eval
# val_size: 0.1
# per_device_eval_batch_size: 1
"""

# the same config pasted into an issue that stops at its train section's header (the kind of #8137's paste)
CUT = WHOLE.split("### train")[0] + "### train\n"


def test_a_whole_example_shaped_config_shows_no_sign():
    # its eval section holds only commented keys: a section with something under it, not an empty one
    assert signs(WHOLE, {"do_train": True, "learning_rate": 1e-4, "num_train_epochs": 3.0}, "train") == []


@pytest.mark.parametrize("text, values, kind, expect", [
    # the paste stops at `### train`: it lost that section too (trial 17: no key of a training section is a sign)
    (CUT, {"do_train": True, "streaming": True}, "train", ["empty-section", "no-training-section"]),
    # a file that reads as whole is whole, schedule keys or not: LF's own rejection of such a file must stay an error
    (WHOLE.split("gradient_accumulation_steps")[0], {"do_train": True, "streaming": True}, "train", []),
    # a bare key as the last line: YAML reads null, no one ends a file with it on purpose
    ("stage: sft\ndo_train: true\nlearning_rate: 1.0e-5\nlr_scheduler_type:\n", {"do_train": True,
                                                                                  "learning_rate": 1e-5},
     "train", ["empty-last-key"]),
    ("stage: sft\ndo_train: true\nlearning_rate: 1.0e-5\n\n### train\n", {"do_train": True, "learning_rate": 1e-5},
     "train", ["empty-section"]),
    ("stage: sft\ndo_train: true\nnum_train_epochs: 1\nlora_target:\n  - q_proj\n  - v_pr",
     {"do_train": True, "num_train_epochs": 1}, "train", ["open-block"]),
    # a prediction config and a preprocessing-only run (tokenized_path: LF saves the dataset and exits) need no
    # schedule; an export config is not a training config
    ("stage: sft\ndo_predict: true\npredict_with_generate: true\n", {"do_predict": True}, "train", []),
    ("stage: sft\ndo_train: true\ntokenized_path: saves/ds\n", {"do_train": True, "tokenized_path": "saves/ds"},
     "train", []),
    ("model_name_or_path: x\nexport_dir: out\n", {"export_dir": "out"}, "export", []),
])
def test_each_cut_sign(text, values, kind, expect):
    assert [s["sign"] for s in signs(text, values, kind)] == expect


def _check(path, *args, command="check"):
    r = CliRunner().invoke(main, [command, str(path), "--gpu", "8xA100-80GB", "--llamafactory", "0.9.1",
                                  "--format", "json", *args])
    return r.exit_code, json.loads(r.output)


def _finding(report, code):
    return next(f for f in report["findings"] if f["code"] == code)


def test_a_cut_paste_hedges_what_rests_on_absent_keys(tmp_path):
    cut = tmp_path / "config.yaml"
    cut.write_text(CUT, encoding="utf-8")
    code, rep = _check(cut)
    f010, f101 = _finding(rep, "FD010"), _finding(rep, "FD101")
    # the key may be in the part the paste lost: no certain stop, so not an error (exit 0 under --fail-on error)
    assert f010["severity"] == "warning" and code == 0
    assert f010["message"].startswith("This file does not set `max_steps`, but it may be cut off (its last "
                                      "line is the section header `### train` with nothing under it)")
    assert "if the config as launched does not set it either:" in f010["message"]
    assert f101["message"].startswith("This file sets neither `bf16` nor `fp16`, but it may be cut off")
    assert [a["name"] for a in rep["assumptions"]].count("config-complete") == 1


def test_the_whole_config_keeps_the_certain_stop(tmp_path):
    whole = tmp_path / "config.yaml"
    whole.write_text(WHOLE, encoding="utf-8")
    code, rep = _check(whole)
    f010, f101 = _finding(rep, "FD010"), _finding(rep, "FD101")
    assert f010["severity"] == "error" and code == 1
    assert f010["message"].startswith("`streaming: true` without `max_steps`")
    # absence still worded as what the file says, with the behaviour conditional on launching it as it is
    assert f101["message"].startswith("This file sets neither `bf16` nor `fp16`: launched as it is, LLaMA-Factory")
    assert "config-complete" not in [a["name"] for a in rep["assumptions"]]


def test_a_key_set_on_the_command_line_is_not_absent(tmp_path):
    cut = tmp_path / "config.yaml"
    cut.write_text(CUT, encoding="utf-8")
    code, rep = _check(cut, "max_steps=1000", "bf16=true")
    assert not [f for f in rep["findings"] if f["code"] in ("FD010", "FD101")]


def test_explicitly_off_precision_is_not_worded_as_absent(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(WHOLE.replace("### eval", "bf16: false\n\n### eval"), encoding="utf-8")
    _, rep = _check(cfg)
    assert _finding(rep, "FD101")["message"].startswith("`bf16` and `fp16` are both off: launched as it is,")


@pytest.mark.parametrize("model, code, finding", [
    # a hub name the catalogue lacks (#5320's gpt2-medium kind): model-unresolved, an error
    ("gpt2-medium", 1, "FD607"),
    # a folder of the training machine: no memory verdict either, the same error (trial 16)
    ("/mnt/data/checkpoint/Kimi-VL-A3B-Instruct", 1, "FD607"),
])
def test_estimate_exits_as_check_on_a_model_it_cannot_size(tmp_path, model, code, finding):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(WHOLE.replace("Qwen/Qwen2.5-0.5B", model).replace("streaming: true\n", ""), encoding="utf-8")
    got = {}
    for command in ("check", "estimate"):
        r = CliRunner().invoke(main, [command, str(cfg), "--gpu", "8xA100-80GB", "--format", "json", "--offline"])
        rep = json.loads(r.output)
        got[command] = (r.exit_code, rep["memory"] is None or rep["memory"].get("per_gpu_gib") is None,
                        finding in [f["code"] for f in rep["findings"]])
    assert got["check"] == got["estimate"] == (code, True, True)


# -- the unread images of a multimodal run: none for a dataset whose dataset_info entry names no media column ------

VL = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "trial2" / "qwen2-vl-7b-lora-alpaca.yaml"


@pytest.mark.parametrize("entry, images", [
    # LF reads media only from the columns dataset_info names (data/parser.py: DatasetAttr.images defaults to None)
    ({"hf_hub_url": "llamafactory/alpaca_en"}, False),
    ({"hf_hub_url": "BUAADreamer/llava-en-zh-300k", "formatting": "sharegpt",
      "columns": {"messages": "messages", "images": "images"},
      "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}, True),
])
def test_a_dataset_info_entry_without_media_columns_closes_the_image_assumption(tmp_path, entry, images):
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"hub_set": entry}), encoding="utf-8")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(VL.read_text(encoding="utf-8").replace("dataset: alpaca_en_demo",
                                                          f"dataset: hub_set\ndataset_dir: {data}"), encoding="utf-8")
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "RTX4090", "--offline", "--format", "json"])
    rep = json.loads(r.output)
    names = [a["name"] for a in rep["assumptions"]]
    # the rows are on the hub, not here: only the entry decides
    assert ("image-pixels" in names) is images
    assert names.count("image-pixels") <= 1 and "images-per-sample" not in names
