"""The logits and the loss: lm_head's output, its fp32 upcast, log_softmax and their backward (REPORT.md §3), and
the variants LLaMA-Factory's stages add (DPO/KTO reference log-probs, the reward model's value head)."""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.run import Run


@dataclass(frozen=True)
class LogitTerms:
    """Bytes alive at the loss (`forward`) and during the loss's backward (`backward`)."""

    forward: float
    backward: float


def logit_dtype_bytes(run: Run) -> float:
    """Bytes per element of lm_head's output: fp32 with upcast_lmhead_output or fp32 compute, else half."""
    if run.upcast_lmhead_output or (run.autocast is None and run.compute_dtype == "float32"):
        return 4.0
    return 2.0 if run.autocast or run.weights_dtype != "float32" else 4.0


def eval_logit_bytes(run: Run, T: int) -> float:
    """The logits of an evaluation forward of `T` tokens under no_grad: lm_head's output, the loss's fp32 upcast
    (transformers ForCausalLMLoss: ``logits.float()``) and log_softmax's fp32 output alive together while the loss
    is computed. Fused losses that skip the logits in training (liger's fused linear cross-entropy) still
    materialise them in evaluation: liger-kernel's ``lce_forward`` (liger_kernel/transformers/model/*.py) fuses only
    under ``if self.training and labels is not None``. A reward model scores tokens."""
    if run.stage == "rm":
        return T * 4.0 * 2
    e = logit_dtype_bytes(run)
    return T * run.arch.vocab_size * (e + 4.0 + (4.0 if e == 2.0 else 0.0))


def logit_terms(run: Run, T: int) -> LogitTerms:
    """The logits of a micro batch of `T` tokens.

    lm_head output in the compute dtype, its fp32 upcast for the loss, log_softmax's fp32 output (REPORT.md §3:
    2sbV + 4sbV kept; the loss adds 4sbV while it runs); fp32 compute has no separate upcast. The loss's backward
    holds log_softmax's saved fp32 output, its incoming and its outgoing fp32 gradient together (12 B per token per
    vocabulary entry); the half-precision logits are gone by then (measured against the simulate probe,
    benchmarks/results/calibration.md).
    """
    a = run.arch
    e_logit = logit_dtype_bytes(run)
    fwd = T * a.vocab_size * (e_logit + 4.0 + (4.0 if e_logit == 2.0 else 0.0)
                              + (4.0 if run.shifted_logits_copy else 0.0))
    bwd = T * a.vocab_size * 12.0
    if e_logit == 2.0 and run.autocast is None and not a.loss_upcasts_logits:
        # remote-code loss on half-precision logits (ModelArch.loss_upcasts_logits): the logits, the contiguous
        # shifted copy and log_softmax's half output; its backward holds three half tensors
        fwd = T * a.vocab_size * (2.0 + 2.0 + 2.0)
        bwd = T * a.vocab_size * 6.0
    if run.stage in ("dpo", "kto") and (run.ref_model or run.finetuning_type in ("lora", "oft")):
        # LF computes the reference log-probs after the policy forward (dpo/trainer.py get_batch_loss_metrics),
        # under no_grad but while the policy's activations and logits are alive: its logits and their fp32
        # log-softmax exist at the same time.
        fwd += T * a.vocab_size * (e_logit + 4.0)
    if run.stage == "rm":
        fwd = bwd = T * 4.0 * 2   # a value head: one fp32 score per token (LF ValueHead), no vocabulary
    return LogitTerms(fwd, bwd)
