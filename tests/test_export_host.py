"""`llamafactory-cli export` on the CPU against the host RAM (issue 24), and the export/chat sections of the text
report drawn as tables. The merge config is LF's own examples/merge_lora/qwen3_lora_sft.yaml (Qwen3-4B-Instruct-2507:
4.02e9 parameters in bf16 = 7.49 GiB) and the same file naming Qwen2.5-72B-Instruct (72.7e9: 135.4 GiB)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from finetune_doctor.cli import main

MERGE = """### Note: DO NOT use quantized model or quantization_bit when merging lora adapters

### model
model_name_or_path: {model}
adapter_name_or_path: saves/qwen3-4b/lora/sft
template: qwen3_nothink
trust_remote_code: true

### export
export_dir: saves/qwen3_sft_merged
export_size: 5
export_device: cpu  # choices: [cpu, auto]
export_legacy_format: false
"""


def _check(tmp_path: Path, model: str, *args: str, fmt: str = "json") -> tuple[int, str]:
    p = tmp_path / "merge.yaml"
    p.write_text(MERGE.format(model=model), encoding="utf-8")
    # the adapter the merge names, as LF writes it after `lora_rank: 8, lora_target: all` on Qwen3-4B: the merge
    # holds it in float32 beside the weights (facts/exportadapter.py)
    ad = tmp_path / "saves" / "qwen3-4b" / "lora" / "sft"
    ad.mkdir(parents=True, exist_ok=True)
    (ad / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "lora_dropout": 0.0,
        "base_model_name_or_path": model, "modules_to_save": None,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}),
        encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(p), "--no-data", "--offline", "--format", fmt, *args],
                             env={"COLUMNS": "120"})
    return res.exit_code, res.stdout


def test_cpu_merge_fits_the_host_ram_given(tmp_path):
    code, out = _check(tmp_path, "Qwen/Qwen3-4B-Instruct-2507", "--host-ram", "16GB")
    rep = json.loads(out)
    assert code == 0 and rep["export"]["device"] == "cpu"
    assert rep["export"]["host_ram_gib"] == 14.9 and rep["export"]["fits"] is True
    assert rep["export"]["weights_gib"] == 7.49 and rep["export"]["peak_gib"] == 7.93
    assert rep["export"]["adapter_gib"] == 0.06 and rep["export"]["adapter_rank"] == 8
    assert not [a for a in rep["assumptions"] if a["name"] == "host-ram"]
    assert not [n for n in rep["notes"] if "--host-ram is judged with the GPUs" in n or "GPUs unknown" in n]


def test_cpu_merge_over_the_host_ram_is_a_host_oom(tmp_path):
    code, out = _check(tmp_path, "Qwen/Qwen2.5-72B-Instruct", "--host-ram", "64GB")
    rep = json.loads(out)
    assert code == 1 and rep["export"]["fits"] is False
    errs = [f for f in rep["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errs] == ["FD644"]
    assert "142.59 GiB at the peak" in errs[0]["message"] and "59.6 GiB of host RAM" in errs[0]["message"]
    assert errs[0]["location"]["key"] == "export_device"


def test_host_ram_unknown_is_an_assumption(tmp_path):
    code, out = _check(tmp_path, "Qwen/Qwen2.5-72B-Instruct")
    rep = json.loads(out)
    assert code == 0 and rep["export"]["fits"] is None and not rep["findings"]
    a = next(a for a in rep["assumptions"] if a["name"] == "host-ram")
    assert "142.59 GiB" in a["source"] and "--host-ram" in a["resolve_with"]


def test_host_ram_with_gpus_judges_the_cpu_merge_by_the_host(tmp_path):
    # GPUs known do not decide a CPU merge: 80 GB cards, 64 GB of RAM -> host OOM
    rep = json.loads(_check(tmp_path, "Qwen/Qwen2.5-72B-Instruct", "--gpu", "2xA100-80GB", "--host-ram", "64GB")[1])
    assert [f["code"] for f in rep["findings"] if f["severity"] == "error"] == ["FD644"]


def test_export_section_is_a_table(tmp_path):
    _, out = _check(tmp_path, "Qwen/Qwen3-4B-Instruct-2507", "--host-ram", "16GB", fmt="text")
    section = out.split("\nExport\n", 1)[1].split("\nNotes", 1)[0]
    lines = [ln.strip() for ln in section.splitlines() if ln.strip()]
    assert lines[0] == "Merge peak in host RAM (export_device: cpu)"
    assert lines[2].startswith("weights (4.022 B params, bfloat16)") and lines[2].split()[-2:] == ["7.49", "50.3%"]
    # Qwen3-4B at rank 8 on its 7 linears x 36 layers: 16.5 M elements, 0.06 GiB in float32
    assert lines[4].startswith("LoRA adapter (0.017 B params, float32, rank 8)") and lines[4].split()[-2:] == ["0.06", "0.4%"]
    assert lines[5].startswith("total at the peak") and lines[5].split()[-2:] == ["7.93", "53.2%"]
    # no card named: LF may load it in float32 (no CUDA/NPU device, infer_optim_dtype), 15.79 GiB > 14.90 (trial 6)
    assert "host RAM 14.90 GiB · fits at-risk (7.93-15.79 GiB over the load-dtype assumption)" in lines[6]
    assert "peak_gib:" not in out and "kind: export" not in out


def test_chat_section_is_a_table(tmp_path):
    p = tmp_path / "chat.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen3-4B-Instruct-2507\ntemplate: qwen3_nothink\ninfer_backend: vllm\n"
                 "vllm_maxlen: 8192\nvllm_gpu_util: 0.9\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(p), "--no-data", "--offline", "--gpu", "A100-80GB"],
                             env={"COLUMNS": "120"})
    section = res.stdout.split("\nChat\n", 1)[1].split("\nNotes", 1)[0]
    lines = [ln.strip() for ln in section.splitlines() if ln.strip()]
    assert lines[0] == "Inference memory per GPU (vllm)"
    assert lines[2].split()[-2:] == ["7.49", "9.5%"] and lines[3].startswith("KV cache at 8192 tokens")
    assert "the engine reserves 71.24 GiB of each card up front · fits yes" in lines[5]
    assert "weights_gib:" not in res.stdout


def test_host_ram_unknown_still_gives_a_verdict_that_names_it(tmp_path):
    """Issue 21: a verdict on every config whose model is known. With no --host-ram the CPU merge is at-risk,
    deciding assumption host-ram, at the host RAM it needs: the float32 peak (15.79 GiB, no card named: LF may load
    it in float32) without a GPU, the 16-bit peak (7.93 GiB) with one; the host-ram assumption weighs both sides of
    that line, moves the verdict and comes first; --host-ram removes it."""
    rep = json.loads(_check(tmp_path, "Qwen/Qwen3-4B-Instruct-2507")[1])
    e = rep["export"]
    assert (e["verdict"], e["deciding"], e["host_ram_needed_gib"], e["fits"]) == ("at-risk", "host-ram", 15.79, None)
    first = rep["assumptions"][0]
    assert first["name"] == "host-ram" and first["moves_verdict"] is True
    assert first["effect"]["verdict"] == {"host RAM >= 15.79 GiB free where it merges": "fits",
                                          "host RAM < 15.79 GiB free": "oom"}
    assert not rep["findings"]                      # at-risk is not an error: no rule fires on fits None
    gpu = json.loads(_check(tmp_path, "Qwen/Qwen3-4B-Instruct-2507", "--gpu", "A100-80GB")[1])["export"]
    assert (gpu["verdict"], gpu["host_ram_needed_gib"]) == ("at-risk", 7.93)
    given = json.loads(_check(tmp_path, "Qwen/Qwen3-4B-Instruct-2507", "--gpu", "A100-80GB", "--host-ram", "16GB")[1])
    assert given["export"]["verdict"] == "fits" and "deciding" not in given["export"]
    assert "host-ram" not in [a["name"] for a in given["assumptions"]]
    _, text = _check(tmp_path, "Qwen/Qwen3-4B-Instruct-2507", "--gpu", "A100-80GB", fmt="text")
    assert "fits at-risk (needs 7.93 GiB of host RAM: host-ram assumption)" in " ".join(text.split())
