"""bitsandbytes' paged optimizers (analyzers/memory/paged.py): states in unified memory count in what a roomy card
shows (`total`), and all but the largest parameter's leave what the run needs near the limit (`need`)."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate, paged
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.types import GIB, Hardware

# axolotl's examples/llama-3/fft-8b.yaml as LF keys (a dev calibration row: it trained on a 48 GB card)
FFT = {"finetuning_type": "full", "pure_bf16": True, "flash_attn": "fa2", "packing": True, "cutoff_len": 8192,
       "per_device_train_batch_size": 1}
A6000 = Hardware(gpu="RTX-A6000", num_gpus=1, capacity_gib=47.53, bf16=True, source="flag")


class _DS:
    resolved = {"zero_optimization": {"stage": 2}}
    defaults: dict = {}


def _run(optim: str, **kw):
    return resolve_run({**FFT, "optim": optim, **kw}, load_arch("meta-llama/Llama-3.1-8B")[0], A6000, None)


def test_paged_states_are_shown_but_not_needed():
    pg, plain = _run("paged_adamw_8bit"), _run("adamw_bnb_8bit")
    assert paged.is_paged(pg) and not paged.is_paged(plain)
    e_pg, e_plain = estimate(pg, A6000), estimate(plain, A6000)
    # the same tensors and the same shown total: the states are resident while the card has room
    assert e_pg.total == pytest.approx(e_plain.total) and e_pg.peak_allocated == pytest.approx(e_plain.peak_allocated)
    t = compute_terms(pg)
    a = pg.arch
    largest = max(a.embedding_params(), max(lin.params // lin.count for k, _n in a.layer_groups()
                                            for lin in a.kind_linears(k)))
    trainable = e_pg.details["params"]["trainable"]
    want = t.states * (1 - largest / trainable)
    assert e_pg.details["paged_states_gib"] == pytest.approx(want / GIB)
    assert 13.0 < want / GIB < 15.0          # 8-bit Adam: two 1-byte states per parameter of 8.03 B, less the embedding
    assert e_pg.need == pytest.approx(e_plain.need - want / GIB)
    # the row trained on its 48 GB card: over it by the shown total, under it by the need
    assert e_pg.total > A6000.capacity_gib > e_pg.need and e_pg.fits is True and e_plain.fits is False


@pytest.mark.parametrize("optim, kw", [
    ("paged_adamw_8bit", {"finetuning_type": "lora"}),          # adapter matrices: mostly under 1e5 elements
    ("adamw_torch", {}),
])
def test_nothing_is_evictable_without_paged_full_training(optim, kw):
    run = _run(optim, **kw)
    assert paged.evictable_state_bytes(run, compute_terms(run).states, 8.0e9) == 0.0


def test_deepspeed_builds_its_own_optimizer():
    run = resolve_run({**FFT, "optim": "paged_adamw_8bit"}, load_arch("meta-llama/Llama-3.1-8B")[0],
                      Hardware(gpu="RTX-A6000", num_gpus=2, capacity_gib=47.53, bf16=True, source="flag"), _DS())
    assert run.deepspeed and not paged.is_paged(run)


def test_lf_own_optimizers_are_not_paged():
    """BAdam (and GaLore, APOLLO, Muon) are optimizers LF builds itself: `optim: paged_*` does not reach them."""
    run = _run("paged_adamw_8bit", use_badam=True, badam_mode="layer")
    assert run.use_badam and not paged.is_paged(run)
    assert paged.evictable_state_bytes(run, compute_terms(run).states, 8.0e9) == 0.0
