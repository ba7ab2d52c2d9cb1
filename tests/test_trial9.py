"""What a new user's ninth trial found (issues #21, #25), each fixed as a kind (fixtures/trial9/README.md).

1. DeepSpeed AutoTP (`tensor_parallel.autotp_size`) was ignored: each GPU was said to hold the whole model and
   ZeRO-3 was offered as a safe fix although DeepSpeed before 0.19.4 refuses AutoTP with stage 3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

from casekit import run_json as _run

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial9"


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")




def _edits(rep: dict) -> list[tuple[str, object]]:
    out = []
    for f in rep["findings"]:
        fixes = [f.get("fix")] + list((f.get("fix") or {}).get("alternatives") or [])
        for fx in fixes:
            out += [(e["key"], e.get("value")) for e in (fx or {}).get("edits") or []]
    return out


def test_autotp_is_named_not_sized_and_zero3_is_not_offered():
    case = FX / "autotp_lora"
    _, rep = _run("check", str(case / "config.yaml"), "--env", str(case / "env.txt"), "--offline")
    names = [f["name"] for f in rep["findings"]]
    assert "weights-replicated" not in names          # the model is split over the TP group, not whole per GPU
    f = next(f for f in rep["findings"] if f["name"] == "deepspeed-autotp-not-sized")
    assert "groups of 2 GPUs" in f["message"] and "LlamaFactory#10140" in f["message"]
    assert "DeepSpeed 0.16.7 refuses AutoTP with ZeRO stage 3" in f["message"]
    assert ("zero_optimization.stage", 3) not in _edits(rep)
    assert all("ZeRO-3" not in str((x.get("fix") or {}).get("title")) for x in rep["findings"])
    # the estimate sizes every GPU as holding the whole model: its oom is not established
    tp = next(a for a in rep["assumptions"] if a["name"] == "tensor-parallel")
    assert tp["moves_verdict"] and rep["memory"]["verdict"] == "at-risk"
    assert rep["memory"]["deciding_assumption"]["name"] == "tensor-parallel"


def test_an_eval_only_config_is_sized_as_inference_at_the_eval_batch():
    _, rep = _run("check", str(FX / "eval_only" / "config.yaml"), "--gpu", "A10G", "--offline")
    assert rep["memory"] is None                       # no training step is sized
    p = rep["predict"]
    # per_device_eval_batch_size unset: transformers' default 8 sequences of cutoff_len (no generation)
    assert (p["batch"], p["batch_assumed"], p["generate"], p["max_len"]) == (8, True, False, 2048)
    # Qwen2.5-7B: 28 layers x 4 KV heads x 128 head_dim x 2 (K, V) x 2 bytes = 57,344 B/token; x 2048 x 8 = 0.875 GiB
    assert p["kv_gib"] == 0.875
    assert p["total_gib"] == round(p["weights_gib"] + 0.875, 2)
    assert any(a["name"] == "eval-batch" and a["value"] == 8 for a in rep["assumptions"])
    assert not any(a["name"] == "train-batch" for a in rep["assumptions"])
    assert any("do_eval run without do_train" in n for n in rep["notes"])


def test_the_printed_probability_never_disagrees_with_the_5_percent_target():
    from finetune_doctor.engine.evaluate import _message
    from finetune_doctor.engine.expr import Evaluator
    from finetune_doctor.engine.loader import load_rules
    from finetune_doctor.facts.mem import pct_text

    assert (pct_text(0.047), pct_text(0.0504), pct_text(0.0496), pct_text(0.05), pct_text(0.123)) == \
        ("4.7", "5.04", "4.96", "5.0", "12.3")
    rule = next(r for r in load_rules() if r.name == "predicted-tight-fit")
    # at-risk decided at the assumed values (7.8 %) while the p_oom mixed over the alternatives is 4.7 %
    mem = {"headroom_gib": 31.51, "need_gib": 47.6, "budget_gib": 79.15, "peak_moment": "loss backward of step 2",
           "total": 54.9, "error_label": "runs whose weights are not quantized: measured on 69 runs",
           "error_spread_pct": 14.0, "error_bias_pct": 6.1, "interval_lo_gib": 21.8, "interval_hi_gib": 71.9,
           "interval_basis": "the benchmarks' error", "p_oom_pct": 4.7, "p_oom_text": "4.7",
           "p_oom_assumed_pct": 7.8, "p_oom_assumed_text": "7.8", "verdict_reason": "error",
           "p_oom_model_pct": 4.7, "p_oom_model_text": "4.7", "p_oom_model_assumed_pct": 7.8,
           "p_oom_model_assumed_text": "7.8", "p_oom_other_pct": 0.0,   # q = 0: the two probabilities agree
           "alt_stack_fits": None, "error_rows": 69}
    from finetune_doctor.facts.verdict import error_risk

    mem["error_risk"] = error_risk(mem)   # the case the message reads, as facts/config.py assembles it
    ev = Evaluator({"mem": mem, "hw": {"gpu": "A100-80GB"}, "run": {"optim": "adamw_torch_fused"}})
    text = _message(rule, ev)
    assert "4.7 % probability by the memory model mixed over the alternatives of the open assumptions, and with " \
           "7.8 % at their assumed values" in text
    assert "4.7 % probability by the memory model, over the 5 %" not in text


def test_a_text_decoder_nested_under_llm_config_is_read():
    # remote-code InternVL-Chat nests its decoder under llm_config (configuration_internvl_chat.py), not text_config
    from finetune_doctor.readers.model.generic import arch_from_config

    llm = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 2048,
           "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
           "vocab_size": 151674, "max_position_embeddings": 32768, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16"}
    cfg = {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "torch_dtype": "bfloat16",
           "llm_config": llm, "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024}}
    a = arch_from_config(cfg, "models/internvl2_5-4b", "config.json")
    assert (a.hidden_size, a.num_layers, a.vocab_size, a.model_type) == (2048, 36, 151674, "internvl_chat")
    assert "only its text model ('qwen2') is counted" in a.notes


def test_a_dev_build_is_the_commit_between_the_release_before_and_the_one_it_names():
    # LF's extras/env.py VERSION becomes "X.Y.Z.dev0" right after X.Y.(Z-1) is tagged and stays until X.Y.Z: a git
    # install printing 0.9.4.dev0 is a commit between 0.9.3 and 0.9.4, so both are judged and only what they
    # agree on is certain
    from finetune_doctor.readers.config.lfrelease import choose

    assert choose("0.9.4.dev0", "--llamafactory").versions == ("0.9.3", "0.9.4")
    assert choose("0.9.4", "--llamafactory").versions == ("0.9.4",)
    assert choose("0.9.4.post1", "--llamafactory").versions == ("0.9.4",)


def _cfg(tmp_path, model: str, template: str) -> str:
    p = tmp_path / "config.yaml"
    p.write_text(f"model_name_or_path: {model}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                 f"dataset: mllm_demo\ntemplate: {template}\noutput_dir: saves/x\n", encoding="utf-8")
    return str(p)


def test_a_template_only_the_later_neighbour_registers_is_unverified_on_a_dev_build(tmp_path):
    cfg = _cfg(tmp_path, "Qwen/Qwen3-VL-2B-Instruct", "qwen3_vl_nothink")
    _, rep = _run("lint", cfg, "--llamafactory", "0.9.4.dev0")
    f = next(f for f in rep["findings"] if f["name"] == "unverified-config-problem")
    assert "`template: qwen3_vl_nothink` is not a template LLaMA-Factory 0.9.3 registers" in f["message"]
    assert "0.9.4.dev0 is a build between 0.9.3 and 0.9.4, so its commit decides" in f["message"]
    _, rep = _run("lint", cfg, "--llamafactory", "0.9.4")
    assert not any(f["name"] in ("unverified-config-problem", "template-not-registered") for f in rep["findings"])


def test_fd053_on_a_dev_build_gives_each_release_its_own_bound(tmp_path):
    # qwen3_moe needs transformers >= 4.51.0: 0.9.3 admits up to 4.52.4, 0.9.2 at most 4.49.0, so 0.9.3.dev0 is
    # not refused outright: only one bound stops short, an unverified warning (trial 11; it was silent)
    cfg = _cfg(tmp_path, "Qwen/Qwen3-30B-A3B", "qwen3")
    _, rep = _run("lint", cfg, "--llamafactory", "0.9.3.dev0")
    (f,) = [f for f in rep["findings"] if f["name"] == "model-type-unregistered-assumed"]
    assert "but LLaMA-Factory 0.9.2 (--llamafactory) runs with at most 4.49.0" in f["message"]
    assert "Unverified: LLaMA-Factory 0.9.3 admits a transformers that registers it" in f["message"]
    _, rep = _run("lint", cfg, "--llamafactory", "0.9.2.dev0")
    f = next(f for f in rep["findings"] if f["name"] == "model-type-unregistered-assumed")
    assert "0.9.1 accepts at most 4.46.1; 0.9.2 accepts at most 4.49.0" in f["message"]
    # 0.9.3's bound is not the dev build's: it appears only as the release to upgrade to (trial 11)
    assert "accepts at most 4.52.4" not in f["message"]
    assert '"llamafactory>=0.9.3"' in f["message"]


def test_a_chat_command_after_double_dash_reads_as_its_yaml(tmp_path):
    yaml = tmp_path / "chat.yaml"
    yaml.write_text("model_name_or_path: Qwen/Qwen2.5-7B-Instruct\ntemplate: qwen\ninfer_backend: huggingface\n",
                    encoding="utf-8")
    _, a = _run("check", str(yaml), "--gpu", "L4", "--offline")
    res = CliRunner().invoke(main, ["check", "--gpu", "L4", "--offline", "--format", "json", "--", "llamafactory-cli",
                                    "chat", "--model_name_or_path", "Qwen/Qwen2.5-7B-Instruct", "--template", "qwen",
                                    "--infer_backend", "huggingface"])
    assert res.exit_code in (0, 1), res.output
    b = json.loads(res.stdout)
    assert a["chat"] == b["chat"] and a["chat"]["weights_gib"] > 14
    assert [f["name"] for f in a["findings"]] == [f["name"] for f in b["findings"]]


def test_an_export_script_is_read_as_its_flags_and_an_export_model_launch_is_not_training(tmp_path):
    sh = tmp_path / "merge.sh"
    sh.write_text("#!/bin/bash\nCUDA_VISIBLE_DEVICES=0 accelerate launch --num_processes 1 src/export_model.py \\\n"
                  "  --model_name_or_path mistralai/Mistral-7B-Instruct-v0.3 --adapter_name_or_path saves/qlora \\\n"
                  "  --template mistral --finetuning_type lora --export_dir merged --quantization_bit 4\n",
                  encoding="utf-8")
    _, rep = _run("check", str(sh), "--gpu", "A10G", "--offline")
    names = [f["name"] for f in rep["findings"]]
    assert "export-merge-into-quantized" in names and "wrong-subcommand" not in names
    assert rep["config_kind"] == "export"


def test_a_script_of_a_command_that_reads_no_config_says_so(tmp_path):
    sh = tmp_path / "ui.sh"
    sh.write_text("export GRADIO_SERVER_PORT=7860\nllamafactory-cli webui\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(sh)])
    assert res.exit_code == 2
    assert "ui.sh:2: a launch script, not a config: `llamafactory-cli webui` runs no LLaMA-Factory command" \
        in res.output


def test_a_dev_build_read_from_env_is_not_told_to_pass_env(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text("- `llamafactory` version: 0.9.4.dev0\n- Transformers version: 4.57.1\n"
                   "- PyTorch version: 2.8.0+cu128 (GPU)\n", encoding="utf-8")
    cfg = _cfg(tmp_path, "Qwen/Qwen3-VL-2B-Instruct", "qwen3_vl_nothink")
    _, rep = _run("lint", cfg, "--env", str(env))
    f = next(f for f in rep["findings"] if f["name"] == "unverified-config-problem")
    # issue #25: the file that states the release is named with it, never after "the inputs do not say"
    assert "env.txt states LLaMA-Factory 0.9.4.dev0, but not the commit it was built from: the `Git commit` line " \
        "of `llamafactory-cli env`" in f["message"]
    assert "pass --env" not in f["message"] and "do not say" not in f["message"]


def test_the_memory_table_points_at_errors_that_are_not_about_memory(tmp_path):
    # trial 9: "fits" was printed above the finding that names why the run cannot start
    cfg = _cfg(tmp_path, "Qwen/Qwen3-30B-A3B", "qwen3")
    res = CliRunner().invoke(main, ["check", cfg, "--gpu", "8xA100-80GB", "--transformers", "4.49.0", "--offline",
                                    "--no-data"])
    out = res.output
    assert "read first: 1 error(s) below not about memory (FD052 model-type-unregistered)" in out
    assert out.index("read first") < out.index("\nFD052 model-type-unregistered")
