"""The numerics probe on a real checkpoint written to disk: a LLaMA whose MLP has an outlier feature (as real
checkpoints do, the cause of fp16 overflow) overflows in fp16 in that module, bf16 does not, and upcasting the MLP
to fp32 removes it. With no weights on disk the probe says numerics cannot be confirmed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from finetune_doctor.probes.numerics import FP16_MAX, probe_numerics, weights_on_disk  # noqa: E402


@pytest.fixture(scope="module")
def outlier_checkpoint(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        # one intermediate feature of layer 1 grows past fp16's range (gate·up ≈ 1e6) and down_proj maps it
        # back to a small residual contribution: an overflow inside the MLP that fp32 or bf16 survive
        mlp = model.model.layers[1].mlp
        mlp.up_proj.weight[0].fill_(40.0)
        mlp.gate_proj.weight[0].fill_(40.0)
        mlp.down_proj.weight[:, 0].fill_(1e-6)
    path = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(path)
    return str(path)


def batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (1, 24), generator=g) for _ in range(2)]


def test_fp16_overflow_is_found_and_bf16_removes_it(outlier_checkpoint):
    assert weights_on_disk(outlier_checkpoint)
    r = probe_numerics(outlier_checkpoint, batches(), "float16", "bfloat16")
    fp16, bf16 = r.passes
    assert r.confirmed is True
    # the product act(gate)·up is not a module output; the first module that returns it is down_proj
    assert fp16.first_overflow == "model.layers.1.mlp.down_proj"
    assert fp16.loss is None                     # the loss of an overflowed forward is not finite
    assert bf16.first_overflow is None and bf16.loss is not None
    assert bf16.max_abs ** 2 > FP16_MAX          # gate and up outputs whose product exceeds fp16's range


def test_fp32_upcast_of_the_named_module_removes_it(outlier_checkpoint):
    r = probe_numerics(outlier_checkpoint, batches(), "float16", upcast_modules=("layers.1.mlp",))
    assert r.confirmed is True and r.passes[1].first_overflow is None


def test_a_clean_model_is_not_confirmed(outlier_checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(outlier_checkpoint)
    with torch.no_grad():
        mlp = m.model.layers[1].mlp
        mlp.up_proj.weight[0].fill_(0.01)
        mlp.gate_proj.weight[0].fill_(0.01)
    m.save_pretrained(tmp_path)
    r = probe_numerics(str(tmp_path), batches(), "float16", "bfloat16")
    assert r.confirmed is False and r.passes[0].first_overflow is None and "no overflow" in r.note


def test_random_weights_cannot_confirm_numerics(tmp_path):
    r = probe_numerics(str(tmp_path), batches())
    assert r.confirmed is None and "cannot be confirmed" in r.note and r.passes == ()
    assert probe_numerics(None, batches()).confirmed is None
