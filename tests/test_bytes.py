"""The shared byte tables (dtypes.py): bitsandbytes' layouts, and the analytic model and the simulate probe
reading the same numbers.

References: the layouts as bitsandbytes 0.50.1 writes them (``optim/optimizer.py`` ``Optimizer2State.init_state``:
``blocksize = 256``, ``blocks = n // blocksize + bool(n % blocksize)``, fp32 ``absmax1``/``absmax2``;
``functional.py`` ``quantize_4bit``: blocksize 64, nested ``quantize_blockwise(..., blocksize=256)``), and, where
bitsandbytes is installed, the tensors it really allocates on the CPU.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import finetune_doctor.dtypes as bt
from finetune_doctor.analyzers import memory
from finetune_doctor.run import OPTIM_IMPL


def _bnb_blocks(n: int, blocksize: int) -> int:
    # the expression of Optimizer2State.init_state, written out
    return n // blocksize + bool(n % blocksize)


@pytest.mark.parametrize("n", [100, 4095, 4096, 37_000, 4096 * 4096 + 1])
def test_8bit_adam_state_bytes_follow_the_blockwise_layout(n):
    if n < 4096:
        expected = 2 * 4 * n                                    # min_8bit_size: fp32 states
    else:
        expected = 2 * n + 2 * 4 * _bnb_blocks(n, 256)          # two uint8 states + two fp32 absmax vectors
    assert bt.optimizer_state_bytes("8bit", n, 2) == expected
    assert bt.optimizer_state_bytes("8bit_lion", n, 2) == expected // 2


def test_per_parameter_8bit_value_is_the_large_tensor_limit():
    assert bt.optimizer_state_bytes_per_param("8bit", 4.0) == 2 + 8 / 256
    assert bt.optimizer_state_bytes_per_param("8bit", 4.0, blocksize=bt.BNB_OPTIM_BLOCKSIZE_BEFORE_0_44) == 2 + 8 / 2048
    n = 256 * 100_000
    assert bt.optimizer_state_bytes("8bit", n, 2) / n == pytest.approx(bt.optimizer_state_bytes_per_param("8bit", 2.0))


def test_8bit_states_match_what_bitsandbytes_allocates():
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((1000, 37), (100,), (64, 64), (4097,))]
    opt = bnb.optim.AdamW8bit(params, lr=1e-3)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    for p in params:
        # the 256-entry quantization maps are shared across parameters (name2qmap), not per-parameter state
        got = sum(v.numel() * v.element_size() for k, v in opt.state[p].items()
                  if torch.is_tensor(v) and not k.startswith("qmap"))
        assert got == bt.optimizer_state_bytes("8bit", p.numel(), 4), p.shape


def test_4bit_weight_tensors_match_bitsandbytes_layout():
    sizes = bt.quantized_weight_tensors(300 * 70, 300, 4, double_quant=True)
    assert sizes == {"weight": 10_500, "absmax": math.ceil(21_000 / 64), "absmax2": 4 * 2, "code": 1024}
    assert bt.quantized_weight_tensors(300 * 70, 300, 4, double_quant=False) == {"weight": 10_500, "absmax": 4 * 329}
    assert bt.quantized_weight_tensors(300 * 70, 300, 8) == {"weight": 21_000, "SCB": 1200}
    big = 4096 * 4096
    per = sum(bt.quantized_weight_tensors(big, 4096, 4, True).values()) / big
    assert per == pytest.approx(bt.weight_bytes_per_param("nf4", True), rel=2e-4)   # + the per-tensor code
    with pytest.raises(ValueError):
        bt.quantized_weight_tensors(10, 1, 3)


def test_4bit_weights_match_what_bitsandbytes_allocates():
    torch = pytest.importorskip("torch")
    functional = pytest.importorskip("bitsandbytes.functional")
    w = torch.randn(300, 70, dtype=torch.bfloat16)
    packed, st = functional.quantize_4bit(w, compress_statistics=True, quant_type="nf4")
    sizes = bt.quantized_weight_tensors(w.numel(), 300, 4, double_quant=True)
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    assert (nbytes(packed), nbytes(st.absmax), nbytes(st.state2.absmax), nbytes(st.state2.code)) == (
        sizes["weight"], sizes["absmax"], sizes["absmax2"], sizes["code"])


@pytest.mark.parametrize("impl", sorted(set(OPTIM_IMPL.values())))
def test_analytic_model_reads_the_shared_table(impl):
    for state_b in (2.0, 4.0):
        assert memory.optimizer_state_bytes(impl, state_b) == bt.optimizer_state_bytes_per_param(impl, state_b)


def test_simulator_and_analytic_model_agree_on_8bit_states():
    torch = pytest.importorskip("torch")
    from finetune_doctor.probes.build import _analytic_state_bytes

    params = [torch.empty(4096, 4096, device="meta"), torch.empty(11008, 4096, device="meta")]
    for impl in ("8bit", "paged_8bit", "8bit_lion", "lion", "ademamix", "lomo"):
        total, _ = _analytic_state_bytes(params, SimpleNamespace(optimizer_impl=impl))
        n = sum(p.numel() for p in params)
        # both sides: the same per-parameter figure (sizes are multiples of 256, so no partial absmax block)
        assert total == pytest.approx(n * memory.optimizer_state_bytes(impl, 4.0), rel=1e-12), impl
