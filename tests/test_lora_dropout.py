"""peft's ``lora_dropout`` in the saved-activation model (issue 23): the per-module dropout term of
analyzers/memory/activations.py ``_lora_dropout_bytes`` against hand computations from its docstring's rule, the
reading of the key, and, where the environment has torch and peft, a measurement of what autograd saves for one
peft LoRA Linear with dropout 0.1 against 0. Byte counts: every tolerance is exact unless stated."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory.activations import activation_bytes_per_token_layer, activation_terms
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

L3 = "meta-llama/Meta-Llama-3-8B"
H, I_ = 4096, 14336      # Llama-3-8B hidden and intermediate sizes (config.json); 32 layers


def _run(**cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "lora",
            "lora_target": "all"}
    arch, _ = load_arch(L3)
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec("1xA100-80GB"), None)


def _delta(**cfg) -> float:
    return activation_bytes_per_token_layer(_run(lora_dropout=0.1, **cfg)) - activation_bytes_per_token_layer(
        _run(**cfg))


def test_lora_dropout_is_read_and_defaults_to_lf_zero():
    assert _run().lora_dropout == 0.0                     # LF finetuning_args.py: lora_dropout default 0.0
    assert _run(lora_dropout=0.05).lora_dropout == 0.05
    assert _run(lora_dropout="0.1").lora_dropout == 0.1
    assert _run(lora_dropout="lots").lora_dropout == 0.0  # the key-schema rules report the type
    assert _run(lora_dropout=1.5).lora_dropout == 0.0     # nn.Dropout refuses p > 1


def test_fp32_adapters_under_autocast_add_only_the_masks():
    # LF's default LoRA: fp32 adapters, bf16 autocast. peft casts x to fp32 for each adapter (own copy at rate 0);
    # with dropout the dropped tensor replaces that copy: 1 byte of mask per input element of each module.
    # q,k,v,gate,up read h; o_proj reads 32 heads x 128 = h; down_proj reads I.
    assert _delta() == 5 * H + H + I_ == 38912


def test_half_adapters_share_x_at_rate_zero_and_keep_their_own_copies_with_dropout():
    # pure_bf16: bf16 adapters on bf16 x, so at rate 0 q/k/v share one x (gate/up another; o and down alone).
    # With dropout each module keeps mask (1 B) + dropped copy (2 B) and the shared x is freed:
    # group of m modules on n features: m·n·3 − 2n.
    expected = (3 * H * 3 - 2 * H) + (2 * H * 3 - 2 * H) + (H * 3 - 2 * H) + (I_ * 3 - 2 * I_)
    assert expected == 63488
    assert _delta(pure_bf16=True) == expected


def test_qlora_bnb_under_autocast():
    # peft's bnb layers do not cast x under autocast (bnb.py:563-566), so o_proj/down_proj's lora_A kept x itself:
    # m=1 groups: n·3 − 2n = n. q/k/v and gate/up: the activation model already counts one copy per module there,
    # which with dropout is the dropped copy: masks only. Every group adds n, as for plain LoRA.
    assert _delta(quantization_bit=4) == 5 * H + H + I_


def test_only_adapted_modules_count_and_other_methods_add_nothing():
    assert _delta(lora_target="q_proj,v_proj") == 2 * H          # two masks over the attention norm's output
    assert _delta(finetuning_type="full") == 0.0
    assert _delta(finetuning_type="freeze") == 0.0


def test_checkpointing_holds_the_term_for_one_layer_only():
    T = 2048
    for gc, layers in ((True, 1), (False, 32)):
        cfg = {} if gc else {"disable_gradient_checkpointing": True}
        r0, r1 = _run(**cfg), _run(lora_dropout=0.1, **cfg)
        c = count_params(r0)
        t0, t1 = activation_terms(r0, c, T), activation_terms(r1, c, T)
        grew = (t1.saved + t1.recompute) - (t0.saved + t0.recompute)
        assert grew == T * 38912 * layers, gc


def _peft_saved_bytes(p: float, half_adapter: bool) -> int:
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    m = torch.nn.Sequential()
    m.add_module("lin", torch.nn.Linear(64, 48, bias=False))
    model = peft.get_peft_model(m.to(torch.bfloat16),
                                peft.LoraConfig(r=4, target_modules=["lin"], lora_dropout=p))
    if half_adapter:
        model = model.to(torch.bfloat16)
    model.train()
    x = torch.randn(10, 64, dtype=torch.bfloat16, requires_grad=True)
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


@pytest.mark.parametrize("half_adapter, x_bytes, shared", [(False, 4, False), (True, 2, True)])
def test_peft_layer_measured_on_cpu(half_adapter, x_bytes, shared):
    # 10 tokens x 64 features through one adapted module (m=1). On the CPU aten's dropout keeps a noise tensor in
    # the dtype reaching lora_A (Dropout.cpp's non-fused path) where CUDA keeps a 1-byte bool mask, so the
    # measured growth is the model's rule with the mask at x_bytes: own copy -> n·x_bytes; shared -> n·2x − n·x.
    n = 10 * 64
    grew = _peft_saved_bytes(0.1, half_adapter) - _peft_saved_bytes(0.0, half_adapter)
    assert grew == (n * (x_bytes + x_bytes) - n * x_bytes if shared else n * x_bytes)


def test_native_dropout_keeps_a_bool_mask():
    # the CUDA path (fused native_dropout): its backward keeps only the mask, one byte per element
    torch = pytest.importorskip("torch")
    x = torch.randn(10, 64, requires_grad=True)
    seen: list = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append((t.dtype, t.numel())) or t, lambda t: t):
        torch.ops.aten.native_dropout(x, 0.1, True)[0].sum()
    assert seen == [(torch.bool, 640)]
