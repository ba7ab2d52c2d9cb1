"""unsloth's own loss under ``use_unsloth`` (run/savers.py `_unsloth_loss`, analyzers/memory/logits.py
`unsloth_terms`): the in-place cross-entropy of releases before 2024.11 and the fused, chunked loss after."""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory.activations import layer_transients
from finetune_doctor.analyzers.memory.logits import logit_terms, unsloth_chunks, unsloth_terms
from finetune_doctor.readers.model.generic import arch_from_config
from finetune_doctor.run import resolve_run

ARCH = arch_from_config({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                         "torch_dtype": "bfloat16", "max_position_embeddings": 8192, "tie_word_embeddings": False},
                        "llama3-shaped", "test")
BASE = {"stage": "sft", "finetuning_type": "lora", "quantization_bit": 4, "use_unsloth": True, "use_unsloth_gc": True,
        "bf16": True, "per_device_train_batch_size": 2, "cutoff_len": 2048}


def test_release_decides_the_loss_path():
    assert resolve_run(BASE, ARCH, None, stack={"unsloth": "2024.8"}).unsloth_loss == "inplace"
    assert resolve_run(BASE, ARCH, None, stack={"unsloth": "2024.10.0"}).unsloth_loss == "inplace"
    assert resolve_run(BASE, ARCH, None, stack={"unsloth": "2024.11.9"}).unsloth_loss == "fused"
    assert resolve_run(BASE, ARCH, None).unsloth_loss == "fused"          # unknown release: today's
    assert resolve_run({**BASE, "stage": "dpo"}, ARCH, None).unsloth_loss == ""   # no labels given to the model
    assert resolve_run({**BASE, "use_unsloth": False}, ARCH, None).unsloth_loss == ""


def test_inplace_loss_keeps_one_half_precision_logits():
    r = resolve_run(BASE, ARCH, None, stack={"unsloth": "2024.8"})
    T, V = 4096, 128256
    lg = logit_terms(r, T)
    # the bf16 logits plus one fp32 loss and logsumexp per row; the backward writes into the same tensor
    assert lg.forward == T * V * 2 + T * 8
    assert lg.backward == lg.forward
    plain = logit_terms(r.with_(unsloth_loss=""), T)
    assert plain.forward > 4 * lg.forward


def test_chunk_count_follows_unsloth_zoo():
    # n = round(T·V·4 / 2^30 / 1 / 4) · 4, at least 1: 4096 x 128256 fp32 is 1.96 GiB -> one chunk;
    # 65536 x 152064 is 37.1 GiB -> round(9.28) · 4 = 36 chunks of about 1 GiB
    assert unsloth_chunks(4096, 128256) == 1
    assert unsloth_chunks(65536, 152064) == 36
    assert unsloth_chunks(65536, 152064, target_gib=2.0) == 20


def test_fused_loss_holds_a_chunk_not_the_logits():
    r = resolve_run(BASE, ARCH, None)
    T, V, H = 65536, 128256, 4096
    u = unsloth_terms(r, T, 2.0)
    rows = -(-T // unsloth_chunks(T, V))
    saved = T * H * 2            # grad_inputs, empty_like(hidden_states) in bf16; lm_head frozen under LoRA
    assert u.backward == saved
    assert u.forward == pytest.approx(saved + T * 8 + rows * V * (2 + 4 + 4))
    # about 3 GiB where the plain loss holds tens of GiB; with the logits gone, the last layer's moment
    # (its down projection's transients) can be the larger one, as with liger's fused loss
    lg = logit_terms(r, T)
    assert lg.forward == max(u.forward, T * layer_transients(r)[0]) and lg.backward == u.backward
    assert u.forward / 2**30 < 4.0 < 40.0 < logit_terms(r.with_(unsloth_loss=""), T).forward / 2**30
