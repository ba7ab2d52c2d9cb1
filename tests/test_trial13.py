"""New-user trial 13 (issue #21, honest verdicts): what `doctor check` said wrongly or without saying why.

Merge with an adapter: `llamafactory-cli export` with `adapter_name_or_path` holds the whole LoRA adapter in float32
beside the base weights while peft merges it (LF model/adapter.py L197-199, facts/exportadapter.py). The fixture is a
Qwen2.5-VL-32B-Instruct merge on one 80 GB card, the config.json as the hub publishes it (decoder 64 x 5120, MLP
27648, 8 KV heads of 128) and adapters as peft writes them. Rank 512 on the 7 decoder linears is
512 x (10240 + 6144 + 6144 + 10240 + 3 x 32768) x 64 = 4.295e9 elements = 16.0 GiB in float32."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from finetune_doctor.cli import main

QWEN25_VL_32B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40,
    "num_key_value_heads": 8, "vocab_size": 152064, "max_position_embeddings": 128000, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu", "rope_theta": 1000000.0,
    "vision_start_token_id": 151652, "vision_end_token_id": 151653, "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3456,
                      "num_heads": 16, "in_chans": 3, "out_hidden_size": 5120, "patch_size": 14,
                      "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                      "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2}}

MERGE = """### model
model_name_or_path: Qwen/Qwen2.5-VL-32B-Instruct
adapter_name_or_path: {adapter}
template: qwen2_vl
finetuning_type: lora

### export
export_dir: output/qwen2_5vl_32b_merged
export_size: 5
export_device: auto
export_legacy_format: false
"""

LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _merge(tmp_path: Path, adapter: str, rank: int | None, *args: str) -> tuple[int, dict]:
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_VL_32B), encoding="utf-8")
    if rank is not None:
        d = tmp_path / adapter
        d.mkdir(parents=True, exist_ok=True)
        (d / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.05,
            "base_model_name_or_path": "Qwen/Qwen2.5-VL-32B-Instruct", "target_modules": LINEARS,
            "modules_to_save": None, "use_dora": False}), encoding="utf-8")
    cfg = tmp_path / "merge.yaml"
    cfg.write_text(MERGE.format(adapter=adapter), encoding="utf-8")
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A800-80GB", "--model-config",
                                  str(tmp_path / "config.json"), "--offline", "--format", "json", *args])
    return r.exit_code, json.loads(r.stdout)


def test_merge_counts_a_rank_512_adapter_and_does_not_fit(tmp_path):
    code, rep = _merge(tmp_path, "saves/qwen2_5vl-32b/lora/r512", 512)
    ex = rep["export"]
    assert ex["adapter_params_b"] == 4.295 and ex["adapter_gib"] == 16.0 and ex["adapter_read"] is True
    assert ex["weights_gib"] == 62.31 and ex["peak_gib"] == 81.43
    # the base model (65.43 GiB with its working set) fits the card, so accelerate puts it all there and the adapter
    # lands on the same card: no spill to host RAM, an OOM
    assert ex["fits"] is False and ex["verdict"] == "oom" and ex["spill_gib"] == 0.0
    assert code == 1 and [f["code"] for f in rep["findings"] if f["severity"] == "error"] == ["FD643"]
    assert not [a for a in rep["assumptions"] if a["name"] == "adapter-rank"]


def test_merge_with_a_rank_8_adapter_fits(tmp_path):
    code, rep = _merge(tmp_path, "saves/qwen2_5vl-32b/lora/r8", 8)
    ex = rep["export"]
    assert ex["adapter_params_b"] == 0.067 and ex["adapter_gib"] == 0.25 and ex["peak_gib"] == 65.68
    assert code == 0 and ex["verdict"] == "fits"
    # the verdict says why it carries no probability
    assert ex["p_oom"] is None and "no measured merge peaks" in ex["no_probability"]


def test_merge_with_an_adapter_not_here_is_said_and_its_rank_assumed(tmp_path):
    code, rep = _merge(tmp_path, "saves/not/on/this/machine", None)
    ex = rep["export"]
    assert ex["adapter_read"] is False and ex["adapter_rank"] == 8 and ex["peak_gib"] == 65.68
    [a] = [a for a in rep["assumptions"] if a["name"] == "adapter-rank"]
    assert a["moves_verdict"] is True
    assert a["effect"]["verdict"] == {"rank 64 on every linear layer": "fits", "rank 512 on every linear layer": "oom"}
    assert a["effect"]["total_gib"]["rank 512 on every linear layer"] == 81.43
    assert ex["verdict"] == "at-risk" and ex["interval_gib"] == [65.68, 81.43]
    [f] = [f for f in rep["findings"] if f["code"] == "FD098"]
    assert f["location"]["key"] == "adapter_name_or_path" and "saves/not/on/this/machine" in f["message"]
    assert code == 0


def test_merge_text_shows_the_adapter_row(tmp_path):
    _merge(tmp_path, "saves/r512", 512)
    r = CliRunner().invoke(main, ["check", str(tmp_path / "merge.yaml"), "--gpu", "A800-80GB", "--model-config",
                                  str(tmp_path / "config.json"), "--offline"], env={"COLUMNS": "140"})
    row = next(ln for ln in r.stdout.splitlines() if "LoRA adapter" in ln)
    assert "4.295 B params, float32, rank 512" in row and row.split()[-2:] == ["16.00", "20.2%"]


# -- a launch failure the data scan proves (FD417) -------------------------------------------------------------------

VL_TRAIN = """### model
model_name_or_path: Qwen/Qwen2.5-VL-3B-Instruct
image_max_pixels: 12845056
### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
### dataset
dataset: screens
dataset_dir: data
template: qwen2_vl
cutoff_len: 1024
### output
output_dir: saves/qwen2.5vl-3b/lora/sft
### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
bf16: true
"""


def _vl_data(tmp_path: Path, images: list[str]) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    # PPM headers: Pillow reads the size from the header alone, as it does for a PNG
    (d / "shot.ppm").write_text("P6\n1920 1080\n255\n", encoding="utf-8")    # 2,646 tokens at 28 px a token
    (d / "icon.ppm").write_text("P6\n448 448\n255\n", encoding="utf-8")      # 256 tokens
    (d / "dataset_info.json").write_text(json.dumps({"screens": {
        "file_name": "screens.json", "formatting": "sharegpt",
        "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}),
        encoding="utf-8")
    rows = [{"messages": [{"role": "user", "content": "<image>Read the form and list its fields."},
                          {"role": "assistant", "content": "Name: Li Wei; Date: 2024-03-02; Amount: 350.00"}],
             "images": [img]} for img in images]
    (d / "screens.json").write_text(json.dumps(rows), encoding="utf-8")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(VL_TRAIN, encoding="utf-8")
    return cfg


def _codes(rep: dict) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in rep["findings"]}


def test_some_samples_cut_inside_their_image_stop_the_run(tmp_path):
    cfg = _vl_data(tmp_path, ["shot.ppm", "icon.ppm", "shot.ppm"])
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--offline", "--format", "json"])
    rep = json.loads(r.stdout)
    assert rep["data"]["overall"]["media_cut"] == 2 and rep["data"]["overall"]["with_media"] == 3
    assert _codes(rep)["FD417"] == "error" and r.exit_code == 1
    [f] = [f for f in rep["findings"] if f["code"] == "FD417"]
    assert f["message"].startswith("2 of the 3 samples are cut by `cutoff_len: 1024`")
    assert "stops at the first batch that draws one" in f["message"]


def test_the_error_leads_the_text_report(tmp_path):
    cfg = _vl_data(tmp_path, ["shot.ppm", "shot.ppm"])
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--offline"], env={"COLUMNS": "140"})
    lines = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Memory per GPU"))
    assert "read first: 1 error(s) below not about memory (FD417 multimodal-samples-cut)" in lines[at + 1]
    assert "every sample is one, so the first step fails" in r.stdout and r.exit_code == 1


def test_images_that_fit_or_are_not_here_prove_no_cut(tmp_path):
    cfg = _vl_data(tmp_path, ["icon.ppm", "missing.png"])
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--offline", "--format", "json"])
    rep = json.loads(r.stdout)
    # icon: 256 tokens fit whole; missing.png: its size is assumed (the largest LF lets through), so no cut is certain
    assert rep["data"]["overall"]["media_cut"] == 0 and "FD417" not in _codes(rep)


# -- the headline p_oom's mixture made visible ------------------------------------------------------------------------

LONG_LORA = """### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all
### dataset
dataset: long_docs
template: qwen
cutoff_len: 32768
### output
output_dir: saves/qwen2.5-7b/lora/sft
### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 2.0
bf16: true
"""


def test_the_mixture_weights_and_the_stated_probability_are_printed(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(LONG_LORA, encoding="utf-8")
    args = ["check", str(cfg), "--gpu", "A100-80GB", "--no-data", "--offline"]
    rep = json.loads(CliRunner().invoke(main, args + ["--format", "json"]).stdout)
    mem = rep["memory"]
    mix = {m["name"]: m["weights"] for m in mem["mixture_weights"]}
    lengths = mix["sample-lengths"]
    assert lengths[0][0] == "every sample fills cutoff_len (32768 tokens)" and lengths[0][2] == mem["per_gpu_gib"]["total"]
    for ws in mix.values():   # each assumption's weights sum to one (they multiply across assumptions)
        assert abs(sum(w for _l, w, _t in ws) - 1.0) < 0.005, ws
    # stated: every sample at 32768 tokens, 2 per micro batch, does not fit an 80 GB card; the shorter lengths pull
    # the headline down, and both figures are given
    assert mem["p_oom_assumed"] > 0.5 and mem["p_oom"] < mem["p_oom_assumed"]
    text = " ".join(CliRunner().invoke(main, args, env={"COLUMNS": "120"}).stdout.split())
    # the JSON carries the probabilities rounded and the text rounds the unrounded value to a percent,
    # so a value near x.5 % may print either neighbour: the printed percent is within half a point of the JSON's
    m = re.search(r"at cutoff_len 32768 \(every sample filling it\), the other values as assumed: probability of "
                  r"OOM (\d+) %", text)
    assert m and abs(int(m.group(1)) - 100 * mem["p_oom_assumed"]) <= 0.51, (m and m.group(1), mem["p_oom_assumed"])
    m = re.search(r"the headline (\d+) % averages over plausible values with the table's weights — sample lengths",
                  text)
    assert m and abs(int(m.group(1)) - 100 * mem["p_oom"]) <= 0.51, (m and m.group(1), mem["p_oom"])
    assert "the data on this machine, or --context FILE" in text


def test_the_shown_weights_are_the_mixture_s_own():
    from finetune_doctor.facts.assume import mixture
    from finetune_doctor.types import Assumption

    lengths = Assumption(name="sample-lengths", value="every sample fills cutoff_len (8192 tokens)", source="t",
                         alternatives=("samples of 512 tokens", "samples of 2048 tokens"),
                         effect_gib={"samples of 512 tokens": 30.0, "samples of 2048 tokens": 45.0})
    torch = Assumption(name="torch-version", value=">= 2.8", source="t", alternatives=("torch < 2.8",),
                       effect_gib={"torch < 2.8": 95.0})
    shown: list = []
    comps = mixture(90.0, None, [lengths, torch], None, shown=shown)
    by = {name: dict(zip(labels, [w for w, _r, _b in opts])) for name, labels, opts in shown}
    assert set(by) == {"sample-lengths", "torch-version"}
    assert list(by["sample-lengths"]) == [lengths.value, "samples of 512 tokens", "samples of 2048 tokens"]
    # every component's weight is the product of one shown weight per assumption
    prods = sorted(round(a * b, 6) for a in by["sample-lengths"].values() for b in by["torch-version"].values())
    assert prods == sorted(round(w, 6) for w, _t, _b in comps)


# -- Qwen(1) remote code loads in the compute dtype ------------------------------------------------------------------

QWEN1_7B = {"architectures": ["QWenLMHeadModel"], "model_type": "qwen", "hidden_size": 4096,
            "intermediate_size": 22016, "num_hidden_layers": 32, "num_attention_heads": 32, "kv_channels": 128,
            "vocab_size": 151936, "seq_length": 8192, "max_position_embeddings": 8192, "layer_norm_epsilon": 1e-06,
            "no_bias": True, "tie_word_embeddings": False, "bf16": False, "fp16": False, "fp32": False,
            "torch_dtype": "bfloat16", "rotary_emb_base": 10000, "use_flash_attn": "auto"}

QWEN1_LORA = """model_name_or_path: Qwen/Qwen-7B-Chat
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048
output_dir: saves/qwen-7b/lora/sft
per_device_train_batch_size: 1
gradient_accumulation_steps: 16
learning_rate: 1.0e-4
num_train_epochs: 1.0
{flag}: true
"""


def _precision(tmp_path: Path, flag: str, model: dict) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(model), encoding="utf-8")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(QWEN1_LORA.format(flag=flag), encoding="utf-8")
    r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "V100-32GB", "--model-config",
                                  str(tmp_path / "config.json"), "--no-data", "--offline", "--format", "json"])
    return json.loads(r.stdout)["run"]["precision"]


def test_qwen1_remote_code_loads_in_fp16_under_fp16(tmp_path):
    # LF sets config.fp16 (model/patcher.py L389-392) and modeling_qwen.py calls .half() on the transformer
    assert _precision(tmp_path, "fp16", QWEN1_7B) == {"weights": "float16", "trainable": "float32",
                                                      "compute": "float16"}
    assert _precision(tmp_path, "bf16", QWEN1_7B)["weights"] == "bfloat16"


def test_other_models_keep_the_checkpoint_dtype_under_fp16(tmp_path):
    qwen2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "vocab_size": 152064, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 1000000.0}
    # torch_dtype="auto" (LF model/loader.py): the checkpoint's bf16, whatever the compute dtype
    assert _precision(tmp_path, "fp16", qwen2)["weights"] == "bfloat16"


# -- the verdict line says why (reporter) ---------------------------------------------------------------------------

def _text(mem) -> str:
    from finetune_doctor.reporters.text import TextReporter
    from finetune_doctor.types import Hardware, Report

    r = Report("check", {"config": "config.yaml"}, run={"model": "m"},
               hardware=Hardware("A100-80GB", 8, 79.15, True, "flag"), memory=mem)
    return " ".join(TextReporter(color=False, width=120).render(r).split())


def test_at_risk_under_five_percent_names_the_alternative_that_decides():
    from finetune_doctor.types import MemoryEstimate

    # a 47.1 GiB ZeRO-3 full fine-tune whose torch < 2.8 alternative (49.1 GiB) crosses the 5 % line
    per = {"weights": 4.62, "gradients": 8.35, "optimizer": 29.61, "activations": 0.0, "logits": 0.0,
           "buffers": 0.07, "runtime": 4.46, "total": 47.12}
    deciding = {"name": "torch-version", "value": ">= 2.8", "alternative": "torch < 2.8 (adamw_torch)",
                "alternative_total_gib": 49.12, "alternative_verdict": "at-risk", "verdict_assumed": "fits",
                "total_gib": 47.12, "resolve_with": "--torch VERSION"}
    mem = MemoryEstimate(per, 42.65, 61.0, True, 35.14, verdict="at-risk", p_oom=0.139, p_oom_model=0.048,
                         interval_gib=(30.87, 86.3), details={"deciding_assumption": deciding,
                                                             "p_oom_unexplained": 0.2, "peak_moment": "optimizer step",
                                                             "moments_gib": {"backward of step 2": 40.1,
                                                                             "optimizer step": 42.6}})
    text = _text(mem)
    assert ("verdict at-risk (an alternative of torch-version is at-risk, see below; the verdict is fits or oom "
            "only under every alternative) · the memory model puts 4.8 % on running out") in text
    # the breakdown at the optimizer step says why activations read 0.00
    assert ("at the peak moment, the optimizer step: the step's activations and logits are freed by then (the "
            "largest other moment, backward of step 2, holds 40.10 GiB of tensors)") in text
    # and the JSON's p_oom_unexplained (0.2) is the q the text names beside its half
    assert "10 % of the time: half of p_oom_unexplained q = 20 %" in text


def test_strict_judges_an_adapter_not_here_by_its_rank_assumption(tmp_path):
    # --strict: the verdict-moving adapter-rank assumption is the error (FD641), not an undefined dataset
    code, rep = _merge(tmp_path, "saves/not/on/this/machine", None, "--strict")
    assert [f["code"] for f in rep["findings"] if f["severity"] == "error"] == ["FD641"] and code == 1
