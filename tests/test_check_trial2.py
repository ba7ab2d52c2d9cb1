"""What the second new-user trial found `doctor check` asserting on what it had only assumed (issue #21), each pinned
as a kind on real-shaped inputs (fixtures/trial2/): an FSDP launch nobody named softening predicted OOMs; a -AWQ
repo id sized as bf16; runs given as command-line flags (LF WebUI's preview command) refused; image assumptions on
text-only runs; a liger-kernel assumption that moves nothing; v1 context parallelism without FlashAttention-2
(FD048, tests/rule_cases/v1-needs-flash-attention.yaml)."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
T2 = ROOT / "fixtures" / "trial2"
PACKED_DDP = T2 / "llama3.1-8b-lora-ddp-packed-7x4090.yaml"
AWQ70 = T2 / "llama3.1-70b-awq-lora-4xa100.yaml"
PREVIEW = T2 / "webui_preview_qwen2.5-7b_lora.txt"
PREVIEW_YAML = T2 / "webui_preview_qwen2.5-7b_lora.yaml"
SCRIPT = T2 / "train_qwen2.5-7b_lora.sh"
VL = T2 / "qwen2-vl-7b-lora-alpaca.yaml"
QUICK = ROOT / "fixtures" / "quickstart" / "llama7b_full_zero2_v100.yaml"
FSDP = "accelerate launch with FSDP"
UNQ = "unquantized, in the base model's dtype (an upper bound)"


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE"):
        monkeypatch.delenv(var, raising=False)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def check_json(*args):
    r = run("check", *args, "--offline", "--format", "json")
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.output)


def by_name(report):
    return {a["name"]: a for a in report["assumptions"]}


# -- 1. an FSDP launch no input names -------------------------------------------------------------------------------

def test_an_unnamed_fsdp_launch_is_shown_but_does_not_soften_a_predicted_oom():
    # 7 x 24 GB, DDP LoRA of an 8B with 4 packed 2048-token sequences per micro batch: ~35 GiB per card. Only the
    # launcher is open; `llamafactory-cli train` on 7 GPUs starts torchrun (LF launcher.py L60-126), so FSDP's
    # 23.6 GiB is shown and weighed but the run is `oom` and predicted-oom fires (it was at-risk, exit 0)
    code, d = check_json(PACKED_DDP, "--gpu", "7xRTX4090")
    mem = d["memory"]
    assert mem["verdict"] == "oom" and mem["p_oom"] > 0.5 and code == 1
    assert "predicted-oom" in [f["name"] for f in d["findings"]]
    launcher = by_name(d)["launcher"]
    assert FSDP in launcher["alternatives"] and launcher["moves_verdict"] is False
    assert launcher["effect"]["total_gib"][FSDP] < 23.64 < mem["per_gpu_gib"]["total"]
    assert "launcher.py" in launcher["source"] and "weighed but does not decide the verdict" in launcher["source"]
    # the mixture weighs it as the calibration table says (a weight of 1.0 on the assumed launcher, the refit of
    # session 8, leaves it out); whatever the weight, it decides nothing
    assert mem.get("deciding_assumption") is None


def test_where_lf_refuses_fsdp_it_is_not_an_alternative():
    code, d = check_json(AWQ70, "--gpu", "4xA100-80GB")
    launcher = by_name(d)["launcher"]
    assert FSDP not in launcher["alternatives"] and FSDP not in launcher["effect"]["total_gib"]
    assert "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models." in launcher["source"]


@pytest.mark.parametrize("cfg, refused", [
    ({"quantization_bit": 4}, None),
    ({"quantization_bit": 8}, "Only 4-bit quantized model can use fsdp+qlora or auto device map."),
    ({"quantization_bit": 4, "quantization_method": "hqq"}, "HQQ quantization is incompatible with DeepSpeed "
                                                            "ZeRO-3 or FSDP."),
    ({"quantization_bit": 8, "quantization_method": "eetq"}, "EETQ quantization is incompatible with DeepSpeed "
                                                             "ZeRO-3 or FSDP."),
    ({}, None),
])
def test_fsdp_refused_follows_lf_quantization(cfg, refused):
    from finetune_doctor.facts.kinds import fsdp_refused
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run

    arch, _ = load_arch("Qwen/Qwen2.5-7B-Instruct")
    assert fsdp_refused(resolve_run({"finetuning_type": "lora", "bf16": True, **cfg}, arch, None)) == refused
    awq, _ = load_arch("Qwen/Qwen2.5-7B-Instruct-AWQ")
    assert fsdp_refused(resolve_run({"finetuning_type": "lora"}, awq, None)).endswith("PTQ-quantized models.")


# -- 2. a quantized checkpoint named by its repo id -----------------------------------------------------------------

def test_an_awq_70b_without_config_json_is_sized_as_awq():
    # trial 2: "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4" headlined 131.8 GiB of bf16 weights per card
    code, d = check_json(AWQ70, "--gpu", "4xA100-80GB")
    per = d["memory"]["per_gpu_gib"]
    # 70.6 B parameters: the decoder linears at 4 bits + g128 scales/zeros, embeddings and head in fp16: ~37.4 GiB
    assert 35 < per["weights"] < 40 and per["total"] < 79.15
    assert d["memory"]["verdict"] != "oom" and "predicted-oom" not in [f["name"] for f in d["findings"]]
    q = by_name(d)["weights-quantization"]
    assert q["value"] == "awq 4-bit g128 (as the name's ending suggests)" and q["alternatives"] == [UNQ]
    assert q["effect"]["total_gib"][UNQ] > 140 and q["effect"]["verdict"][UNQ] == "oom"
    assert q["moves_verdict"] is False
    # LF refuses ZeRO-3/FSDP for a PTQ checkpoint: weights-replicated says so instead of prescribing ZeRO-3
    wr = next(f for f in d["findings"] if f["name"] == "weights-replicated")
    assert "refuses ZeRO-3 and FSDP" in wr["message"]


# -- 3. a run given as command-line flags ---------------------------------------------------------------------------

def test_the_webui_preview_command_reads_as_its_yaml():
    from finetune_doctor.readers.config.yamlcfg import load_config

    flags, yaml = load_config(str(PREVIEW)), load_config(str(PREVIEW_YAML))
    assert flags.values == yaml.values
    # each key sits at the line of its flag (line 1 is the ```bash fence)
    assert flags.positions["stage"] == (3, 1) and flags.positions["lora_target"] == (36, 1)
    _, a = check_json(PREVIEW, "--gpu", "RTX4090")
    _, b = check_json(PREVIEW_YAML, "--gpu", "RTX4090")
    assert a["run"] == b["run"] and a["memory"]["per_gpu_gib"] == b["memory"]["per_gpu_gib"]
    assert [(f["code"], f["location"]["key"]) for f in a["findings"]] == \
        [(f["code"], f["location"]["key"]) for f in b["findings"]]
    assert all(f["location"]["file"] == str(PREVIEW) for f in a["findings"])


def test_a_launch_script_reads_flags_as_hfargumentparser_does():
    from finetune_doctor.readers.config.yamlcfg import load_config

    v = load_config(str(SCRIPT)).values
    # `--do_train` alone is True (nargs "?", const True); `--lora-target` is lora_target; `--cutoff_len=4096`;
    # `--no_use_fast_tokenizer` is the complement of a bool that defaults to True; report_to takes a list
    assert v["do_train"] is True and v["lora_target"] == "all" and v["cutoff_len"] == 4096
    assert v["use_fast_tokenizer"] is False and v["report_to"] == ["wandb", "tensorboard"]
    assert v["learning_rate"] == 1e-4 and v["num_train_epochs"] == 3.0 and v["bf16"] is True
    _, d = check_json(SCRIPT, "--gpu", "2xRTX4090")
    assert d["run"]["seq_len"] == 4096 and d["run"]["micro_batch"] == 4 and d["run"]["world_size"] == 2
    # the script says how the run starts (FORCE_TORCHRUN=1 llamafactory-cli train): no launcher assumption, DDP
    # known, so weights-replicated may assert it
    assert "launcher" not in by_name(d) and d["run"]["engine"] == "ddp"
    assert "weights-replicated" in [f["name"] for f in d["findings"]]


def test_check_takes_the_command_after_a_double_dash():
    # the doctor's own options come before `--`; every word after it is the run
    r = run("check", "--gpu", "A100-80GB", "--offline", "--format", "json", "--", "llamafactory-cli", "train",
            "--stage", "sft", "--do_train", "--model_name_or_path", "Qwen/Qwen2.5-7B-Instruct", "--finetuning_type",
            "lora", "--template", "qwen", "--dataset", "alpaca_en_demo", "--cutoff_len=1024",
            "--per_device_train_batch_size", "2", "--output_dir", "out", "--bf16", "True")
    assert r.exit_code in (0, 1), r.output
    d = json.loads(r.output)
    assert d["run"]["seq_len"] == 1024 and d["run"]["micro_batch"] == 2 and d["run"]["finetuning_type"] == "lora"
    assert d["memory"]["verdict"] in ("fits", "at-risk")


@pytest.mark.parametrize("body, line, words", [
    ("  --do_train maybe \\\n", 3, "--do_train maybe: truthy value expected"),
    ("  --cutoff_len \\\n", 3, "--cutoff_len expects a value"),
    ("  --cutoff_len two \\\n", 3, "--cutoff_len two: an integer expected"),
    ("  --stage sft stray \\\n", 3, "--stage takes one value, got 2"),
])
def test_bad_flags_exit_2_with_file_and_line(tmp_path, body, line, words):
    f = tmp_path / "train.sh"
    f.write_text("llamafactory-cli train \\\n  --stage sft \\\n" + body + "  --model_name_or_path Qwen/Qwen2.5-7B\n")
    r = run("check", f, "--offline")
    assert r.exit_code == 2 and f"{f}:{line}: {words}" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_a_launch_line_that_names_a_yaml_says_which_file_to_check(tmp_path):
    f = tmp_path / "run.sh"
    f.write_text("FORCE_TORCHRUN=1 llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml\n")
    r = run("check", f, "--offline")
    assert r.exit_code == 2
    assert f"{f}:1: this command trains from examples/train_lora/llama3_lora_sft.yaml" in r.output


def test_a_yaml_that_quotes_a_command_stays_a_yaml(tmp_path):
    from finetune_doctor.readers.config.yamlcfg import load_config

    f = tmp_path / "train.yaml"
    f.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nrun_name: \"llamafactory-cli train --stage sft\"\n")
    assert load_config(str(f)).values["run_name"] == "llamafactory-cli train --stage sft"


# -- 4. images only where images can arrive -------------------------------------------------------------------------

IMAGE = {"image-pixels"}   # one assumption for the unread images since trial 11 (count and size)


def test_image_assumptions_need_a_media_template():
    _, vl = check_json(VL, "--gpu", "RTX4090")
    _, text = check_json(VL, "template=qwen", "--gpu", "RTX4090")
    assert IMAGE <= set(by_name(vl)) and not IMAGE & set(by_name(text))
    # the vision tower's moment is gone too: the text template's run is no larger
    assert text["memory"]["per_gpu_gib"]["total"] <= vl["memory"]["per_gpu_gib"]["total"]


def test_a_text_only_dataset_read_here_closes_the_image_assumptions(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"instruction": f"Translate sentence {i} into French.", "input": "", "output": "Bonjour."}
            for i in range(20)]
    (data / "my_text.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"my_text": {"file_name": "my_text.json"}}))
    cfg = tmp_path / "train.yaml"
    cfg.write_text(VL.read_text().replace("dataset: alpaca_en_demo", f"dataset: my_text\ndataset_dir: {data}"))
    r = run("check", cfg, "--gpu", "RTX4090", "--offline", "--format", "json")
    assert r.exit_code in (0, 1), r.output
    d = json.loads(r.output)
    assert not IMAGE & set(by_name(d))


def test_media_template_follows_lf_template_registry():
    from finetune_doctor.readers.model.byname import media_template

    assert media_template("qwen2_vl") and media_template("gemma3") and media_template("qwen3_5")
    assert not media_template("qwen") and not media_template("llama3") and not media_template("default")
    assert media_template("my_own_template")   # a template LF's catalogue does not know may carry a plugin
    assert media_template(None)   # no template: nothing said about the data, left open


# -- 5. liger-kernel only where it moves the peak -------------------------------------------------------------------

def test_liger_assumption_only_where_liger_moves_the_peak():
    # the quickstart's full ZeRO-2 run peaks at the optimizer step: liger's fused loss cannot move it
    _, quick = check_json(QUICK, "--gpu", "8xV100-32GB")
    assert quick["memory"]["verdict"] in ("oom", "at-risk") and "liger-kernel" not in by_name(quick)
    # a LoRA whose peak is the logits: listed, with the move it makes
    _, lora = check_json(PREVIEW_YAML, "--gpu", "RTX4090")
    liger = by_name(lora)["liger-kernel"]
    assert "would take the peak from" in liger["source"]
