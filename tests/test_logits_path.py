"""The logits and log-softmax path by stage and by transformers release (issue #23/#21, "no run that completed
called oom"), each term counted by hand from the upstream lines analyzers/memory/logits.py cites:

* transformers < 4.46 casts lm_head's output to fp32 inside the causal-LM forward (4.45.0 modeling_llama.py:1214,
  :1219), so the half-precision logits are gone when the loss runs; from 4.46 the half tensor stays beside the
  loss's fp32 upcast;
* LLaMA-Factory's DPO keeps fp32 logits and their log_softmax for the policy and the reference (dpo/trainer.py
  :230-250), whatever the release's forward does;
* LLaMA-Factory's reward model runs TRL's value-head wrapper, whose forward computes the vocabulary logits and their
  fp32 copy (trl models/modeling_value_head.py), so a reward model's forward holds T x V logits too.
"""

from __future__ import annotations

from finetune_doctor.analyzers.memory.dataparallel import gathered_logit_bytes
from finetune_doctor.analyzers.memory.logits import eval_logit_bytes, logit_terms, value_head_bytes
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

L3 = "meta-llama/Meta-Llama-3-8B"
VOCAB = 128256        # Llama-3-8B config.json vocab_size
T = 2048              # one micro-batch of 2048 tokens


def _run(tf: str | None = None, **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": T, "finetuning_type": "lora"}
    arch, _ = load_arch(L3)
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec("A100-80GB"),
                       stack={"transformers": tf} if tf else None)


def test_forward_upcast_flag_follows_the_transformers_release():
    assert _run("4.45.2").forward_upcasts_logits and _run("4.45.2").shifted_logits_copy
    new_copy = _run("4.46.0")
    assert not new_copy.forward_upcasts_logits and new_copy.shifted_logits_copy
    assert not _run("4.57.1").forward_upcasts_logits and not _run().forward_upcasts_logits


def test_sft_logits_by_transformers_release():
    # >= 4.49: bf16 logits 2 + loss upcast 4 + log_softmax 4 = 10 B per token and vocabulary entry
    assert logit_terms(_run("4.57.1"), T).forward == T * VOCAB * 10 == 2_626_682_880
    # 4.46-4.48: the same plus the loss's contiguous fp32 copy of the shifted logits: 14 B
    assert logit_terms(_run("4.46.0"), T).forward == T * VOCAB * 14
    # < 4.46: the forward's own .float() drops the bf16 tensor: fp32 logits 4 + shifted copy 4 + log_softmax 4 = 12 B
    # (was 14 B, which kept the freed bf16 logits)
    old = logit_terms(_run("4.45.2"), T)
    assert old.forward == T * VOCAB * 12 == 3_152_019_456
    # the backward is unchanged: log_softmax's saved output and its two fp32 gradients
    assert old.backward == logit_terms(_run("4.57.1"), T).backward == T * VOCAB * 12


def test_evaluation_logits_by_transformers_release():
    assert eval_logit_bytes(_run("4.57.1"), T) == T * VOCAB * 10
    assert eval_logit_bytes(_run("4.45.2"), T) == T * VOCAB * 12


def test_dpo_keeps_sixteen_bytes_whatever_the_forward_does():
    # policy fp32 logits 4 + log_softmax 4, reference the same: 16 B; the shifted copy as the SFT loss of the release
    new, old = _run("4.57.1", stage="dpo"), _run("4.45.2", stage="dpo")
    assert logit_terms(new, T).forward == T * VOCAB * 16
    assert logit_terms(old, T).forward == T * VOCAB * (16 + 4)


def test_reward_model_forward_holds_the_vocabulary_logits_of_the_value_head_wrapper():
    rm = _run("4.57.1", stage="rm")
    # TRL's wrapper: base output's bf16 logits 2 B + their fp32 copy 4 B, plus the value head's T x 8 B
    expect = T * VOCAB * 6 + T * 8
    assert value_head_bytes(rm, T) == expect == 1_576_026_112
    terms = logit_terms(rm, T)
    assert terms.forward == expect
    # nothing in the reward's graph reads the logits: the backward keeps the scores only
    assert terms.backward == T * 8
    assert eval_logit_bytes(rm, T) == expect
    # LF's upcast_lmhead_output: lm_head's output is fp32 already, TRL makes no second copy
    fp32 = _run("4.57.1", stage="rm", upcast_lmhead_output=True)
    assert value_head_bytes(fp32, T) == T * VOCAB * 4 + T * 8


def test_reward_model_under_data_parallel_gathers_the_fp32_logits():
    rm = _run("4.57.1", stage="rm").with_(dp_replicas=4)
    assert gathered_logit_bytes(rm, T) == 4 * T * (VOCAB + 1) * 4


def test_baichuan2_remote_loss_runs_in_half_precision_under_deepspeed():
    # Baichuan2's own forward keeps lm_head's bf16 output, its contiguous shifted copy and CrossEntropyLoss's bf16
    # log_softmax: 6 B per token and vocabulary entry under DeepSpeed bf16 (no autocast), whatever the transformers
    arch, _ = load_arch("baichuan-inc/Baichuan2-13B-Base")
    assert not arch.loss_upcasts_logits and arch.vocab_size == 125696

    class _DS:
        resolved = {"zero_optimization": {"stage": 3}}
        defaults: dict = {}

    cfg = {"bf16": True, "per_device_train_batch_size": 16, "cutoff_len": 512, "finetuning_type": "lora"}
    run = resolve_run(cfg, arch, parse_gpu_spec("RTX-A6000"), _DS(), stack={"transformers": "4.36.2"})
    assert run.autocast is None
    t = logit_terms(run, 16 * 512)
    assert t.forward == 8192 * 125696 * 6 == 6_178_209_792 and t.backward == 8192 * 125696 * 6
    # a transformers-native model on the same run: fp32 logits 4 + shifted copy 4 + log_softmax 4 (< 4.46)
    llama, _ = load_arch(L3)
    nat = resolve_run(cfg, llama, parse_gpu_spec("RTX-A6000"), _DS(), stack={"transformers": "4.36.2"})
    assert logit_terms(nat, 8192).forward == 8192 * VOCAB * 12
