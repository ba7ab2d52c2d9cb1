"""Optimizer states and adapter sizes of the methods LLaMA-Factory builds itself (analyzers/memory/optstates.py,
analyzers/memory/params.py), against the optimizers' and peft's own layouts."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import estimate
from finetune_doctor.analyzers.memory.optstates import _trained_matrices
from finetune_doctor.analyzers.memory.weights import state_terms
from finetune_doctor.analyzers.memory.params import badam_block_params, count_params, oft_module_params
from finetune_doctor.dtypes import lowrank_state_elements
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.run import resolve_run


def tiny(**kw):
    cfg = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 4, "intermediate_size": 1408, "vocab_size": 32000, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False, **kw}
    return arch_from_config(cfg, "tiny-llama", "test")


ARCH = tiny()
# (out, in) of one layer's matrices: q, k, v, o, gate, up, down
SHAPES = [(512, 512), (256, 512), (256, 512), (512, 512), (1408, 512), (1408, 512), (512, 1408)]


def run(cfg):
    return resolve_run({"finetuning_type": "full", "optim": "adamw_torch", **cfg}, ARCH, None)


def test_lowrank_shapes_follow_the_projector():
    # std projection: a tall matrix is projected on the right (m x r moments), a wide one on the left (r x n)
    assert lowrank_state_elements(1408, 512, 16) == (16 * 1408, 16 * 512)
    assert lowrank_state_elements(512, 1408, 16) == (16 * 1408, 16 * 512)
    # a rank above the smaller side keeps the whole side (Vh[:rank] has at most min(m, n) rows)
    assert lowrank_state_elements(256, 512, 300) == (256 * 512, 256 * 256)


def test_galore_states_per_matrix_in_pure_bf16():
    """LF's GaLore example runs pure_bf16: moments and projector in bf16; non-target parameters (embeddings,
    lm_head, norms) keep AdamW's two bf16 moments."""
    r = run({"use_galore": True, "galore_rank": 16, "pure_bf16": True})
    c = count_params(r)
    s = state_terms(r, c)
    target = 0
    expected = 0.0
    for m, n in SHAPES:
        low, proj = lowrank_state_elements(m, n, 16)
        expected += ARCH.num_layers * (2 * low * 2 + proj * 2)
        target += ARCH.num_layers * m * n
    expected += (c.trainable - target) * 2 * 2
    assert s.states == expected
    assert s.gradients == c.trainable * 2        # not layer-wise: the whole gradient is held


def test_galore_on_fp32_keeps_the_whole_svd_factor():
    # galore_projector.py:72-92: float data is not copied, so the slice keeps U or Vh (min(m, n)^2 fp32) alive
    r = run({"use_galore": True, "galore_rank": 16, "bf16": True})
    c = count_params(r)
    s = state_terms(r, c)
    target = sum(ARCH.num_layers * m * n for m, n in SHAPES)
    expected = sum(ARCH.num_layers * (2 * lowrank_state_elements(m, n, 16)[0] * 4 + min(m, n) ** 2 * 4)
                   for m, n in SHAPES) + (c.trainable - target) * 8
    assert s.states == expected


def test_layerwise_galore_holds_one_gradient_at_a_time():
    r = run({"use_galore": True, "galore_layerwise": True, "pure_bf16": True})
    c = count_params(r)
    s = state_terms(r, c)
    assert not s.grads_persistent
    # the largest single gradient (the embedding's, 32000 x 512) plus the largest target's projected-back update
    # and SVD workspace (fp32 copy, U, Vh of the 1408 x 512 gate)
    m, n, k = 1408, 512, 512
    assert s.gradients == 32000 * 512 * 2 + 2 * m * n * 2 + 4 * (m * n + m * k + k * n)
    whole = state_terms(run({"use_galore": True, "pure_bf16": True}), c)
    end = "backward end of step 2"
    assert estimate(r).details["moments_gib"][end] < estimate(run({"use_galore": True, "pure_bf16": True})).details[
        "moments_gib"][end]
    assert whole.gradients == c.trainable * 2


def test_galore_target_substring_match():
    # trainer_utils.py:211-214: a target selects a module when it is a substring of the module's name
    r = run({"use_galore": True, "galore_target": "mlp"})
    assert sorted({(m, n) for m, n, _ in _trained_matrices(r, r.galore_target)}) == sorted({(1408, 512), (512, 1408)})


def test_apollo_random_projector_in_param_dtype():
    r = run({"use_apollo": True, "apollo_rank": 16, "bf16": True})
    c = count_params(r)
    target = sum(ARCH.num_layers * m * n for m, n in SHAPES)
    low = {s: lowrank_state_elements(*s, 16) for s in SHAPES}
    expected = sum(ARCH.num_layers * (2 * low[s][0] * 4 + low[s][1] * 4) for s in SHAPES) + (c.trainable - target) * 8
    assert state_terms(r, c).states == expected


def test_badam_layer_mode_holds_one_block():
    """BAdam layer mode: one decoder layer trains; its bf16 gradient, an fp32 copy (BlockOptimizer
    ``param.clone().float()``) and fp32 AdamW moments on it."""
    r = run({"use_badam": True, "badam_mode": "layer"})
    c = count_params(r)
    blk = ARCH.kind_params(next(iter(ARCH.layer_groups()))[0])
    assert badam_block_params(r) == blk
    s = state_terms(r, c)
    assert (s.gradients, s.master, s.states) == (blk * 2, blk * 4, blk * 8)
    assert r.trainable_dtype == "bfloat16"    # LF keeps BAdam in half precision (adapter.py:340-343)


def test_badam_ratio_mode_keeps_a_sparse_share():
    r = run({"use_badam": True, "badam_mode": "ratio", "badam_update_ratio": 0.1})
    c = count_params(r)
    s = state_terms(r, c)
    assert s.states == pytest.approx(2 * c.trainable * 0.1 * 2)
    assert s.gradients == pytest.approx(c.trainable * 0.1 * (2 + 16))   # values + int64 COO indices


def test_muon_momentum_on_matrices_adamw_on_the_rest():
    r = run({"use_muon": True, "bf16": True})
    c = count_params(r)
    matrices = sum(ARCH.num_layers * m * n for m, n in SHAPES)
    s = state_terms(r, c)
    assert s.states == matrices * 4 + (c.trainable - matrices) * 2 * 4


def test_oft_counts_match_peft():
    """peft's OFT (tuners/oft/layer.py): r = in // block_size blocks of b(b-1)/2 skew-symmetric entries."""
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    for in_f, out_f in [(512, 1408), (1408, 512), (100, 64)]:
        for rank, block in [(0, 32), (8, 0), (0, 30)]:
            cfg = peft.OFTConfig(r=rank, oft_block_size=block, target_modules=["0"])
            model = peft.get_peft_model(torch.nn.Sequential(torch.nn.Linear(in_f, out_f, bias=False)), cfg)
            n = sum(p.numel() for p in model.parameters() if p.requires_grad)
            assert oft_module_params(in_f, rank, block) == n, (in_f, out_f, rank, block)


def test_dora_adds_one_magnitude_per_output_and_peft_agrees():
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    r = resolve_run({"finetuning_type": "lora", "use_dora": True, "lora_rank": 8}, ARCH, None)
    plain = resolve_run({"finetuning_type": "lora", "lora_rank": 8}, ARCH, None)
    extra = count_params(r).adapter - count_params(plain).adapter
    assert extra == ARCH.num_layers * sum(out for out, _ in SHAPES)
    lin = torch.nn.Sequential(torch.nn.Linear(512, 1408, bias=False))
    m = peft.get_peft_model(lin, peft.LoraConfig(r=8, target_modules=["0"], use_dora=True))
    assert sum(p.numel() for p in m.parameters() if p.requires_grad) == 8 * (512 + 1408) + 1408


@pytest.mark.parametrize("key, value", [("use_rslora", True), ("pissa_init", True), ("loraplus_lr_ratio", 16.0)])
def test_rslora_pissa_and_loraplus_keep_lora_sizes(key, value):
    base = {"finetuning_type": "lora", "lora_rank": 8, "bf16": True}
    a = estimate(resolve_run({**base, key: value}, ARCH, None))
    b = estimate(resolve_run(base, ARCH, None))
    assert a.peak_allocated == b.peak_allocated


def test_muon_lora_on_a_hybrid_stack_counts_every_layer_kind():
    # Qwen2-MoE with a dense first layer (mlp_only_layers): layer 0's shapes are not the MoE layers'. Reference:
    # walk every decoder layer's adapted linears and sum LoRA's A (r x in) and B (out x r) matrices.
    moe = arch_from_config({"model_type": "qwen2_moe", "hidden_size": 256, "num_hidden_layers": 4,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 1024,
                            "moe_intermediate_size": 128, "shared_expert_intermediate_size": 512,
                            "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [0],
                            "vocab_size": 1000, "torch_dtype": "bfloat16"}, "tiny-moe", "test")
    r = resolve_run({"finetuning_type": "lora", "lora_target": "all", "lora_rank": 8, "use_muon": True,
                     "bf16": True}, moe, None)
    c = count_params(r)
    layer0 = {lin.name for lin in moe.layer_linears(0)}
    assert layer0 != {lin.name for lin in moe.layer_linears(1)}          # the stack really is hybrid
    rank, e_t = 8, 4.0
    walked = sum(lin.count * rank * (lin.in_features + lin.out_features)
                 for i in range(moe.num_layers) for lin in moe.layer_linears(i) if lin.targetable)
    walked = min(walked, c.trainable)
    s = state_terms(r, c)
    assert s.states == walked * e_t + (c.trainable - walked) * 2 * e_t
