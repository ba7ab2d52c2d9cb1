"""360-LLaMA-Factory's sequence parallelism (run/seqpar.py): ``sequence_parallel_size`` N pads every sample to
cutoff_len and gives each rank of an SP group 1/N of it (data/loader.py:234-284, data/data_utils.py:96-103 at
6fd8b28), so the per-token terms of a rank (activations, logits) are those of cutoff_len / N tokens while the
weights, gradients and optimizer states are not split by it. Round 12's miss: the README's Qwen2.5-7B full SFT at
210k tokens with SP 8 on 8 x A800 trained, and the doctor, blind to the key, sized every rank at 210k tokens
(p_oom 0.90)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import estimate
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.run import resolve_run
from finetune_doctor.run.seqpar import sp_cutoff
from finetune_doctor.types import Hardware

from casekit import run_json

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "engines" / "seqpar360"
# Qwen2.5-7B's shapes (Qwen/Qwen2.5-7B config.json) cut to 2 layers
CONFIG = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 2, "num_attention_heads": 28,
          "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "torch_dtype": "bfloat16",
          "tie_word_embeddings": False, "max_position_embeddings": 131072}
ARCH = arch_from_config(CONFIG, "qwen2.5-7b-shaped", "test")
BASE = {"stage": "sft", "finetuning_type": "full", "bf16": True, "flash_attn": "fa2", "cutoff_len": 32768,
        "per_device_train_batch_size": 1, "packing": True}
HW = Hardware(gpu="A800-80GB", num_gpus=8, capacity_gib=79.3, bf16=True)


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")


def test_cutoff_is_raised_to_a_multiple_of_eight_per_rank():
    # parser.py:265-270: 210000 / 8 = 26250 is not a multiple of 8, so cutoff_len becomes (26250 + 6) * 8
    assert sp_cutoff(210000, 8) == 210048
    assert sp_cutoff(32768, 4) == 32768 and sp_cutoff(1000, 1) == 1000
    run = resolve_run({**BASE, "cutoff_len": 210000, "sequence_parallel_size": 8}, ARCH, HW)
    assert (run.sp_size, run.sp_mode, run.seq_len, run.rank_seq_len) == (8, "zigzag-ring", 210000, 26256)
    assert run.tokens_per_micro_batch == 26256 and run.fills_cutoff
    assert any("raises cutoff_len 210000 to 210048" in n for n in run.notes)


def test_pairwise_data_is_split_per_sequence():
    run = resolve_run({**BASE, "stage": "dpo", "packing": False, "sequence_parallel_size": 4}, ARCH, HW)
    assert run.rank_seq_len == 8192 and run.tokens_per_micro_batch == 2 * 8192   # chosen + rejected, each split
    assert run.fills_cutoff                           # padded to cutoff_len before the split (loader.py:235-254)


def test_per_token_terms_are_a_rank_share_and_the_rest_is_untouched():
    one = estimate(resolve_run(BASE, ARCH, HW), HW)
    sp = estimate(resolve_run({**BASE, "sequence_parallel_size": 8}, ARCH, HW), HW)
    at_share = estimate(resolve_run({**BASE, "cutoff_len": 32768 // 8}, ARCH, HW), HW)
    for k in ("weights", "gradients", "optimizer"):
        assert sp.per_gpu[k] == pytest.approx(one.per_gpu[k], rel=1e-12)
    for k in ("activations", "logits"):        # exactly what one rank holds at 4096 tokens without SP
        assert sp.per_gpu[k] == pytest.approx(at_share.per_gpu[k], rel=1e-12)
    assert sp.per_gpu["logits"] < one.per_gpu["logits"] / 7.9


def test_measured_lengths_do_not_shrink_a_padded_split():
    # the fork pads every sample to cutoff_len before the split: a short measured micro-batch changes nothing
    run = resolve_run({**BASE, "packing": False, "sequence_parallel_size": 8}, ARCH, HW)
    assert estimate(run, HW, tokens=512).per_gpu["logits"] == pytest.approx(estimate(run, HW).per_gpu["logits"])


@pytest.mark.parametrize("cfg, words", [
    ({"sequence_parallel_size": 3}, "does not divide cutoff_len 32768"),
    ({"sequence_parallel_size": 16}, "does not divide the 8 ranks"),
    ({"sequence_parallel_size": 8, "sequence_parallel_mode": "ulysses"}, "implements zigzag-ring only"),
])
def test_what_the_fork_refuses_is_noted(cfg, words):
    run = resolve_run({**BASE, **cfg}, ARCH, HW)
    assert any(words in n for n in run.notes), run.notes


def test_check_names_the_split_and_weighs_the_key_dropped():
    _, rep = run_json("estimate", str(FX / "qwen2.5_7b_full_sft_sp8.yaml"), "--gpu", "8xA800-80GB", "--offline")
    names = [a["name"] for a in rep["assumptions"]]
    assert "sample-lengths" not in names         # every sample is padded to cutoff_len, then split
    a = next(a for a in rep["assumptions"] if a["name"] == "sequence-parallel")
    assert "over 8 ranks (zigzag-ring): 26256 of 210000 tokens per rank" in a["value"]
    (label,) = a["alternatives"]
    assert "ALLOW_EXTRA_ARGS" in label
    mem = rep["memory"]
    total = mem["per_gpu_gib"]["total"]
    # the whole sequence per rank would not fit an 80 GB card; the split does, and the dropped key (shown only)
    # neither opens the verdict nor enters p_oom's mixture
    assert a["effect"]["verdict"][label] == "oom" and a["effect"]["total_gib"][label] > 4 * total
    assert not a["moves_verdict"] and total < 79.3 and mem["p_oom"] < 0.5


def test_calibration_harness_gives_the_fork_its_key():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from calib_data import config_for, sequence_parallel_of

    row = {"framework": "360-LLaMA-Factory (LLaMA-Factory fork adding sequence parallelism)",
           "config": {"stage": "sft", "cutoff_len": 210000, "packing": True},
           "unknown": ["sequence parallelism: sequence_parallel_size 8 (360-LLaMA-Factory's own key)"]}
    assert sequence_parallel_of(row) == 8 and config_for(row)["sequence_parallel_size"] == 8
    # xtuner pads a split batch to a multiple of the size only: not the fork's key
    xt = {**row, "framework": "xtuner (DeepSpeed ZeRO + sequence parallelism)"}
    assert sequence_parallel_of(xt) is None and "sequence_parallel_size" not in config_for(xt)


def test_hyper_parallel_context_split_is_read_and_weighed_not_silently_ignored(tmp_path):
    # LF main's HyperParallel backend (finetuning_args.py:500-521, tuner.py:92-100 at ff6d4d1): its cp split is in
    # the external hyper_parallel package, so the rank is sized whole and the split is the open alternative
    run = resolve_run({**BASE, "use_hyper_parallel": True, "hyper_parallel_cp_size": 8}, ARCH, HW)
    assert (run.hp_cp_size, run.sp_size, run.rank_seq_len) == (8, 1, 32768)
    assert resolve_run({**BASE, "stage": "dpo", "use_hyper_parallel": True, "hyper_parallel_cp_size": 8},
                       ARCH, HW).hp_cp_size == 1           # pt and sft only
    cfg = tmp_path / "hp_cp8.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: full\n"
                   "use_hyper_parallel: true\nhyper_parallel_cp_size: 8\ndataset: alpaca_en_demo\ntemplate: qwen\n"
                   "cutoff_len: 65536\npacking: true\nper_device_train_batch_size: 1\nbf16: true\n"
                   "flash_attn: fa2\noutput_dir: saves/hp\n", encoding="utf-8")
    _, rep = run_json("estimate", str(cfg), "--gpu", "8xH100-80GB", "--offline")
    a = next(a for a in rep["assumptions"] if a["name"] == "context-parallel")
    assert a["value"] == "each rank holds the whole sequence (HyperParallel cp 8 not sized)"
    label = "the sequence split over 8 ranks"
    # whole: 64k tokens of 151936-wide logits per rank do not fit an 80 GB card; split 8 ways they do, so the
    # verdict is open and this assumption decides it
    assert a["effect"]["verdict"][label] == "fits" and a["moves_verdict"]
    assert a["effect"]["total_gib"][label] < rep["memory"]["per_gpu_gib"]["total"] / 4
    assert rep["memory"]["verdict"] == "at-risk"
    assert rep["memory"]["deciding_assumption"]["name"] == "context-parallel"


def test_the_deepseek_guide_rows_launch_with_xtuners_own_zero3_file():
    # code/xtuner/configs/deepspeed/deepspeed_zero3_offload.json at ccf17c5: overlap_comm on, no bucket keys
    # (DeepSpeed's defaults, not transformers' "auto"), the row's offloads kept
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from calib_data import framework_ds_json

    row = {"framework": "xtuner (ScienceOne-AI fork with DeepseekV3ForCausalLM, DeepSpeed ZeRO)",
           "deepspeed": {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}}
    zo = framework_ds_json(row)["zero_optimization"]
    assert zo == {"overlap_comm": True, "stage3_gather_16bit_weights_on_model_save": True, "stage": 3,
                  "offload_param": {"device": "cpu"}}
    assert framework_ds_json({**row, "framework": "xtuner (mmengine, DeepSpeed ZeRO-3)"}) is None
