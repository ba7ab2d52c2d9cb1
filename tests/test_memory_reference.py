"""The analytic memory model against independent references.

1. Byte-exact closed forms: AdamW state bytes and the fused/foreach/for-loop temporaries (reference/memory/REPORT.md §3).
2. Tensor peaks measured by a fake-mode simulation of Qwen2-7B (torch 2.13 FakeTensorMode + live-bytes tracker,
   reference/memory/REPORT.md §4 table "Results (GiB)"), each with the tolerance stated beside it.
"""

import pytest

from finetune_doctor.analyzers.memory import activation_bytes_per_token_layer, estimate
from finetune_doctor.arch import ModelArch
from finetune_doctor.run import resolve_run

QWEN2_7B = ModelArch(name="Qwen2-7B", model_type="qwen2", hidden_size=3584, num_layers=28, num_heads=28,
                     num_kv_heads=4, intermediate_size=18944, vocab_size=152064, qkv_bias=True, dtype="bfloat16")


def peak(cfg):
    return estimate(resolve_run(cfg, QWEN2_7B, None)).peak_allocated


def test_qwen2_7b_parameter_count_matches_report():
    # reference/memory/REPORT.md §4: "untied; 7.6156 B params"
    assert QWEN2_7B.total_params() == 7_615_616_512


def test_per_layer_activation_formula_is_byte_exact():
    # reference/memory/REPORT.md §3: per layer = s·b·(22h + 4h_kv + 8I) + 4·a·s·b; 232,560 B per token per layer for Qwen2-7B
    run = resolve_run({"finetuning_type": "full", "pure_bf16": True}, QWEN2_7B, None)
    assert activation_bytes_per_token_layer(run) == 22 * 3584 + 4 * 512 + 8 * 18944 + 4 * 28 == 232_560


FULL = {"finetuning_type": "full", "pure_bf16": True, "per_device_train_batch_size": 1,
        "disable_gradient_checkpointing": True}


@pytest.mark.parametrize("optim, expected", [("adamw_torch_fused", 56.74), ("adamw_torch", 70.93),
                                             ("adamw_hf", 58.77)])
def test_full_finetune_optimizer_step_is_exact(optim, expected):
    # 2 B weights + 2 B grads + 4 B states; foreach adds one state-sized temporary, for-loop two of the largest
    # parameter (the 152064 x 3584 embedding). Exact to the rounding of the report (0.01 GiB).
    assert peak({**FULL, "optim": optim, "cutoff_len": 1024}) == pytest.approx(expected, abs=0.01)


def test_fp32_trainable_with_bf16_autocast_is_exact():
    # reference/memory/REPORT.md §4: "fp32 master + bf16 autocast 117.54" (16 B/param + for-loop temporaries)
    cfg = {"finetuning_type": "full", "bf16": True, "optim": "adamw_hf", "per_device_train_batch_size": 1,
           "cutoff_len": 1024, "disable_gradient_checkpointing": True}
    assert peak(cfg) == pytest.approx(117.54, abs=0.01)


@pytest.mark.parametrize("cfg, measured, tol", [
    # step 2 at seq 4096: states live during forward/backward (reference/memory/REPORT.md §4: 73.70)
    ({**FULL, "optim": "adamw_hf", "cutoff_len": 4096}, 73.70, 0.02),
    # eager attention keeps s^2 probabilities (148.5)
    ({**FULL, "optim": "adamw_hf", "cutoff_len": 4096, "flash_attn": "disabled"}, 148.5, 0.02),
    # LoRA r8 all-linear, fp32 adapters on a bf16 base
    ({"lora_target": "all", "optim": "adamw_hf", "per_device_train_batch_size": 1, "cutoff_len": 1024,
      "disable_gradient_checkpointing": True}, 24.72, 0.03),
    ({"lora_target": "all", "bf16": True, "optim": "adamw_hf", "per_device_train_batch_size": 1,
      "cutoff_len": 1024, "disable_gradient_checkpointing": True}, 22.59, 0.03),
    ({"lora_target": "all", "bf16": True, "optim": "adamw_hf", "per_device_train_batch_size": 1,
      "cutoff_len": 1024}, 16.36, 0.01),
    ({"lora_target": "all", "optim": "adamw_hf", "per_device_train_batch_size": 1, "cutoff_len": 4096,
      "disable_gradient_checkpointing": True}, 55.64, 0.04),
    ({"lora_target": "all", "optim": "adamw_hf", "per_device_train_batch_size": 1, "cutoff_len": 4096}, 22.19, 0.01),
])
def test_against_fake_mode_measurements(cfg, measured, tol):
    assert peak(cfg) == pytest.approx(measured, rel=tol)


def test_gradient_accumulation_keeps_gradients_at_the_loss():
    base = {**FULL, "optim": "adamw_torch_fused", "cutoff_len": 4096}
    one = estimate(resolve_run(base, QWEN2_7B, None))
    many = estimate(resolve_run({**base, "gradient_accumulation_steps": 8}, QWEN2_7B, None))
    grads = 7_615_616_512 * 2 / 2**30
    assert many.details["phase_gib"]["loss (step 2)"] - one.details["phase_gib"]["loss (step 2)"] == pytest.approx(grads)


class _DS:
    def __init__(self, **zero):
        self.resolved = {"zero_optimization": zero}
        self.defaults = {}


@pytest.mark.parametrize("zero, expected_bytes", [
    # DeepSpeed 0.19.8 stage_1_and_2.py setup_buckets: buf_0 of reduce_bucket_size elements, buf_1 with overlap_comm
    (dict(stage=2, reduce_bucket_size=2e8, overlap_comm=True), 2 * 2e8 * 2),
    (dict(stage=2, reduce_bucket_size=2e8, overlap_comm=False), 2 * 2e8),
    # stage3.py "# IPG": one buffer, overlap or not
    (dict(stage=3, reduce_bucket_size=2e8, overlap_comm=True), 2 * 2e8),
])
def test_deepspeed_reduction_buffer_has_its_full_bucket_size_for_a_small_lora(zero, expected_bytes):
    # LoRA r8 on q,v trains ~2.5 M parameters: the buffer is still allocated at the full bucket size (single
    # process, so no allgather bucket)
    run = resolve_run({"finetuning_type": "lora", "lora_target": "q_proj,v_proj", "bf16": True}, QWEN2_7B, None,
                      _DS(**zero))
    assert estimate(run).details["terms_bytes"]["buffers"] == expected_bytes


def test_without_contiguous_gradients_no_bucket_is_preallocated():
    run = resolve_run({"finetuning_type": "lora", "lora_target": "q_proj,v_proj", "bf16": True}, QWEN2_7B, None,
                      _DS(stage=2, reduce_bucket_size=2e8, overlap_comm=True, contiguous_gradients=False))
    trainable = 28 * 8 * ((3584 + 3584) + (3584 + 512))      # LoRA A and B of q_proj and v_proj, rank 8
    assert estimate(run).details["terms_bytes"]["buffers"] == 2 * trainable


def test_qwen1_remote_code_loss_stays_in_half_precision_without_autocast():
    # modeling_qwen.py QWenLMHeadModel.forward: contiguous shifted copy + CrossEntropyLoss, no .float(). Under
    # DeepSpeed (no AMP) the logits, the copy and log_softmax's output are all half: 6 B per token per vocab entry;
    # transformers' own heads upcast (2 + 4 + 4 B). Under autocast cross_entropy runs in fp32 for both.
    from dataclasses import replace

    qwen1 = replace(QWEN2_7B, name="Qwen-7B", model_type="qwen")
    cfg = {"finetuning_type": "full", "bf16": True, "cutoff_len": 1024, "per_device_train_batch_size": 1}
    T, V = 1024, QWEN2_7B.vocab_size
    ds = _DS(stage=3)
    for arch, per_entry in ((qwen1, 6.0), (QWEN2_7B, 10.0)):
        terms = estimate(resolve_run(cfg, arch, None, ds)).details["terms_bytes"]
        assert terms["logits"] == T * V * per_entry
    no_ds = [estimate(resolve_run(cfg, a, None)).details["terms_bytes"]["logits"] for a in (qwen1, QWEN2_7B)]
    assert no_ds[0] == no_ds[1]
