"""unsloth's own loss under ``use_unsloth`` (run/savers.py `_unsloth_loss`, analyzers/memory/logits.py
`unsloth_terms`): the in-place cross-entropy of releases before 2024.11.8 and the fused, chunked loss after; the
whole-window RoPE tables of releases before 2024.8 (weights.py `unsloth_rope_bytes`); with no release named, the
loss charged as transformers' and the releases weighed (facts/assumestack.py `unsloth_assumption`)."""

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
    assert resolve_run(BASE, ARCH, None, stack={"unsloth": "2024.11.7"}).unsloth_loss == "inplace"   # before CCE
    assert resolve_run(BASE, ARCH, None, stack={"unsloth": "2024.11.9"}).unsloth_loss == "fused"
    # unknown release: the loss stays charged as transformers' (case 013, LlamaFactory#3638: a long-context run
    # that ran out is short of its card under every release's own loss)
    assert resolve_run(BASE, ARCH, None).unsloth_loss == ""
    assert resolve_run({**BASE, "stage": "dpo"}, ARCH, None).unsloth_loss == ""   # no labels given to the model
    assert resolve_run({**BASE, "use_unsloth": False}, ARCH, None).unsloth_loss == ""
    # a type unsloth hands to FastModel: unsloth_zoo's compiled forward calls the same fused loss from 2025.8
    # (compiler.py apply_fused_lm_head, unsloth_fused_ce_loss since fc29e051); before, and unknown, the plain loss
    gemma3 = arch_from_config({**ARCH.raw, "model_type": "gemma3_text"}, "gemma3-shaped", "test")
    assert resolve_run(BASE, gemma3, None).unsloth_loss == ""
    assert resolve_run(BASE, gemma3, None, stack={"unsloth": "2025.7.9"}).unsloth_loss == ""
    assert resolve_run(BASE, gemma3, None, stack={"unsloth": "2025.8.1"}).unsloth_loss == "fused"
    assert resolve_run(BASE, gemma3, None, stack={"unsloth": "2026.3.2"}).unsloth_rope_positions == 0


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
    r = resolve_run(BASE, ARCH, None, stack={"unsloth": "2025.9.1"})
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


def test_an_unknown_release_is_an_assumption_weighed_against_each_release(tmp_path):
    from finetune_doctor.analyzers.memory.terms import compute_terms
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "quantization_bit: 4\nuse_unsloth: true\nbf16: true\ncutoff_len: 8192\n"
                   "per_device_train_batch_size: 2\ndataset: private_long\ntemplate: llama3\noutput_dir: out\n")
    opts = Options(command="estimate", paths=(str(cfg),), gpu="1xL4", offline=True)
    asm = assemble_config(str(cfg), (), opts)
    a = {x.name: x for x in asm.assumptions}["unsloth-version"]
    assert a.value.startswith("not known") and asm.run.unsloth_loss == ""
    fused, inplace, old = (a.effect_gib[k] for k in ("2024.11.8 or later (fused loss, logits in chunks)",
                                                     "2024.8-2024.11.7 (whole half-precision logits, in-place loss)",
                                                     "before 2024.8 (in-place loss, whole-window RoPE tables in "
                                                     "every layer)"))
    # 16384 tokens x 128256 x 12 B of plain-loss logits (24 GiB) against 4 GiB of bf16 logits (a moment the
    # recomputed layer outgrows here) and ~1 GiB chunks
    assert fused <= inplace < asm.memory.total / 2
    # Llama-3.1's 131072 positions x 128 x 2 tables x 2 B x 32 layers: 2 GiB of tensors more before 2024.8 (more
    # on the total, which carries the allocator's reserve)
    assert old - inplace >= 2.0
    env = tmp_path / "freeze.txt"
    env.write_text("unsloth==2024.10.0\ntorch==2.4.1\ntransformers==4.44.2\n")
    given = assemble_config(str(cfg), (), Options(command="estimate", paths=(str(cfg),), gpu="1xL4", offline=True,
                                                  env_file=str(env)))
    assert "unsloth-version" not in {x.name for x in given.assumptions}
    assert (given.run.unsloth_loss, given.run.unsloth_rope_positions) == ("inplace", 0)
    assert compute_terms(asm.run).logits > 2.5 * compute_terms(given.run).logits


def test_rope_tables_before_dynamic_rope():
    """unsloth < 2024.8 builds cos/sin for max(cutoff_len, max_position_embeddings) positions in every layer
    (unsloth llama.py:905-926, :1076 at 0a433c33ca); 2024.8 grows them with the batch (54dd81de67)."""
    from finetune_doctor.analyzers.memory.weights import unsloth_rope_bytes

    long_ctx = arch_from_config({**ARCH.raw, "max_position_embeddings": 1048576}, "llama3-1m", "test")
    r = resolve_run({**BASE, "fp16": True, "bf16": False}, long_ctx, None, stack={"unsloth": "2024.5"})
    assert r.unsloth_rope_positions == 1048576 and r.unsloth_loss == "inplace"
    # 4 layers x cos and sin x 1,048,576 x 128 x 2 B (fp16): 2 GiB; a 32-layer Llama-3-8B-1048k: 16 GiB
    assert unsloth_rope_bytes(r) == 4 * 2 * 1048576 * 128 * 2
    longer = resolve_run({**BASE, "cutoff_len": 2_000_000}, long_ctx, None, stack={"unsloth": "2024.5"})
    assert longer.unsloth_rope_positions == 2_000_000      # unsloth extends the window to max_seq_length
    assert resolve_run(BASE, long_ctx, None, stack={"unsloth": "2024.8"}).unsloth_rope_positions == 0
    qwen = arch_from_config({**ARCH.raw, "model_type": "qwen2"}, "qwen2-shaped", "test")
    assert resolve_run(BASE, qwen, None, stack={"unsloth": "2024.5"}).unsloth_rope_positions == 0   # not replaced
    assert unsloth_rope_bytes(resolve_run(BASE, long_ctx, None)) == 0.0


def test_a_fastmodel_type_weighs_the_compiled_fused_loss(tmp_path):
    """Round 12's unsloth rows (Qwen3.5, a type unsloth hands to FastModel) were sized with the whole fp32 logits
    and no unsloth assumption at all: the compiled forward's fused loss (run/savers.py UNSLOTH_COMPILED_FUSED_FROM)
    is now the release's form and the alternative an unknown release is weighed against."""
    from finetune_doctor.facts.config import assemble_config
    from finetune_doctor.settings import Options

    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen3.5-9B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "lora_rank: 16\nlora_target: all\nuse_unsloth: true\nbf16: true\ncutoff_len: 2048\n"
                   "per_device_train_batch_size: 2\noptim: adamw_8bit\ndataset: private\ntemplate: qwen3_5\n"
                   "output_dir: out\n")
    asm = assemble_config(str(cfg), (), Options(command="estimate", paths=(str(cfg),), gpu="1xA100-80GB",
                                                offline=True))
    a = {x.name: x for x in asm.assumptions}["unsloth-version"]
    (label,) = a.alternatives
    assert label.startswith("2025.8 or later") and asm.run.unsloth_loss == ""
    # 4096 tokens x 248320 x 12 B of plain-loss logits (11.4 GiB) against one ~1 GiB chunk
    assert asm.memory.total - a.effect_gib[label] > 9.0
    env = tmp_path / "freeze.txt"
    env.write_text("unsloth==2026.3.1\n")
    given = assemble_config(str(cfg), (), Options(command="estimate", paths=(str(cfg),), gpu="1xA100-80GB",
                                                  offline=True, env_file=str(env)))
    assert given.run.unsloth_loss == "fused" and "unsloth-version" not in {x.name for x in given.assumptions}
    assert given.memory.total == pytest.approx(a.effect_gib[label], abs=0.05)
