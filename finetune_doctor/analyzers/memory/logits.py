"""The logits and the loss: lm_head's output, its fp32 upcast, log_softmax and their backward (reference/memory/REPORT.md §3), the
variants LLaMA-Factory's stages add (DPO/KTO reference log-probs, the reward model's value head), and liger's
fused linear cross-entropy, which never materialises the logits."""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.analyzers.memory.activations import final_hidden_bytes, layer_transients
from finetune_doctor.dtypes import dtype_bytes as _bytes
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
        return value_head_bytes(run, T)
    e = logit_dtype_bytes(run)
    # before transformers 4.49 the loss also takes a contiguous fp32 copy of the shifted logits
    return T * run.arch.vocab_size * (_loss_input_bytes(run, e) + 4.0 + (4.0 if run.shifted_logits_copy else 0.0))


def _loss_input_bytes(run: Run, e_logit: float) -> float:
    """Bytes per element of the logits alive when the loss's log_softmax runs, for lm_head output of `e_logit` bytes:
    half-precision logits and their fp32 upcast (6); only the fp32 copy (4) where the forward itself upcast them
    (`Run.forward_upcasts_logits`, transformers < 4.46, run/stack.py): ``logits = logits.float()`` rebinds the name,
    so the half tensor is freed once the copy exists (the 6 bytes of that moment are below the loss's). A model whose
    own loss does not upcast (remote code, `ModelArch.loss_upcasts_logits`) runs its own forward, not
    transformers'."""
    if e_logit != 2.0:
        return e_logit
    return 4.0 if run.forward_upcasts_logits and run.arch.loss_upcasts_logits else 6.0


def value_head_bytes(run: Run, T: int) -> float:
    """Bytes of the forward of LLaMA-Factory's reward model over `T` tokens at its largest moment.

    LF wraps the model in TRL's ``AutoModelForCausalLMWithValueHead`` (LF model/loader.py:184 at the snapshot,
    :186 at v0.9.5, :178 at v0.9.0) and its PairwiseTrainer calls it with ``output_hidden_states=True``
    (train/rm/trainer.py:98; :92 at v0.9.0, :101 at v0.9.2). TRL's forward runs the whole causal LM, so lm_head's logits over
    the vocabulary are computed although the reward uses only the value head: ``lm_logits =
    base_model_output.logits`` and, for half-precision logits, ``lm_logits = lm_logits.float()`` while
    ``base_model_output`` still holds the half tensor (trl 0.24.0 models/modeling_value_head.py:169 and :178-179;
    0.9.6, LF 0.9.0's pin, :180 and :189-190). Both exist together at the end of the forward (6 B per token per
    vocabulary entry; 4 B where the logits are fp32 already); nothing in the reward's graph reads them, so they
    are gone before the backward. Plus the value head's fp32 score per token and its input's fp32 copy
    (T·8 B, as before)."""
    e = logit_dtype_bytes(run)
    logits = T * run.arch.vocab_size * (e + (4.0 if e == 2.0 else 0.0))
    return logits + T * 4.0 * 2


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def flce_chunk_tokens(tokens: int, hidden: int, vocab: int) -> int:
    """Rows of one chunk of liger's fused linear cross-entropy: ``inc_factor = ceil(V / H)``, ``chunk_size =
    next_power_of_2(ceil(BT / inc_factor))`` (liger-kernel v0.8.2 ``ops/fused_linear_cross_entropy.py:64-70``,
    unchanged since v0.4), so that one chunk of logits is about the size of the hidden states."""
    inc = -(-vocab // max(hidden, 1))
    return min(_next_pow2(-(-tokens // max(inc, 1))), tokens)   # the last (or only) chunk is sliced at BT


def _head_trains(run: Run) -> bool:
    """lm_head's weight requires grad: full tuning, or resize_vocab / additional_target making it trainable
    (LF adapter.py:246-255)."""
    heads = {"lm_head", "output", "output_layer"}
    return run.finetuning_type == "full" or run.resize_vocab or bool(heads & set(run.additional_target))


def flce_terms(run: Run, T: int, e_in: float) -> LogitTerms:
    """liger's fused linear cross-entropy over `T` tokens whose final hidden states are `e_in` bytes per element
    (liger-kernel v0.8.2 ``ops/fused_linear_cross_entropy.py`` ``fused_linear_cross_entropy_forward``):

    * kept from the forward to the backward, as the gradients it computes in the forward (``save_for_backward``
      of ``grad_input`` and ``grad_weight``, lines 72-84, :395-): ``grad_input`` ``zeros_like(_input)`` (T·H·e_in)
      and, when lm_head trains, ``grad_weight`` ``zeros_like(weight)`` (V·H in the weight's dtype);
    * per-token bookkeeping: the fp32 ``loss_1d`` (line 86), the ``target != ignore_index`` mask (line 92) and the
      labels shifted by padding (``transformers/model/loss_utils.py:87-88``, int64);
    * inside each chunk (lines 108-257): the chunk's logits, ``chunk × V`` in the matmul dtype (the loss gradient
      is written into it in place by the Triton kernel), the ``chunk × H`` product copied into ``grad_input``, and,
      when lm_head trains, the ``grad_weight`` update: one ``addmm`` straight into an fp32 ``grad_weight`` on
      torch >= 2.8 (lines 235-255, `Run.flce_addmm_out_dtype`), else ``torch.mm(...).float()``, a V·H temporary
      in the matmul dtype plus its fp32 copy (line 257).

    The loss's backward only scales those saved gradients in place (``fused_linear_cross_entropy_backward``,
    lines 292-336), so `backward` is what was saved.
    """
    a = run.arch
    H, V = a.hidden_size, a.vocab_size
    e_mm = 2.0 if run.autocast else max(e_in, _bytes(run.weights_dtype if run.finetuning_type != "full"
                                                     else run.trainable_dtype))
    saved = T * H * e_in
    if _head_trains(run):
        e_w = _bytes(run.trainable_dtype)
        saved += V * H * e_w
        temp_w = 0.0 if (run.flce_addmm_out_dtype and e_w == 4.0 and e_mm == 2.0) else V * H * (e_mm + 4.0)
    else:
        temp_w = 0.0
    book = T * (4.0 + 1.0 + 8.0)
    chunk = flce_chunk_tokens(T, H, V)
    temp = chunk * (V + H) * e_mm + temp_w
    return LogitTerms(saved + book + temp, saved)


GIB = float(1 << 30)


def unsloth_chunks(tokens: int, vocab: int, target_gib: float = 1.0) -> int:
    """Chunks of unsloth_zoo's fused loss over `tokens` rows: ``n = T · V · 4 / 2^30 / target / 4``, rounded and
    times 4, at least 1 (unsloth_zoo ``fused_losses/cross_entropy_loss.py`` ``_get_chunk_multiplier`` and
    ``get_chunk_size``), so one chunk's fp32 logits are about `target_gib`. unsloth 2025.8 passes ``target_gb=1``
    (unsloth/models/llama.py at 806bee2433); later releases pass None, half the GPU's free memory at the first call,
    which only makes the chunks larger on a card with room: 1 GiB is the size that a tight card gets."""
    return max(round(tokens * vocab * 4 / GIB / target_gib / 4) * 4, 1)


def unsloth_terms(run: Run, T: int, e_in: float) -> LogitTerms:
    """unsloth's own loss over `T` tokens (`Run.unsloth_loss`, run/savers.py cites the paths):

    * ``inplace`` (unsloth < 2024.11.8, ``Fast_CrossEntropyLoss`` in unsloth/kernels/cross_entropy_loss.py:288-369 at
      015bdef0d9): lm_head's output in the model's dtype, cast to it (llama.py ``logits.to(_get_dtype(...))``), is
      saved with one fp32 logsumexp and one fp32 loss per row; the backward kernel writes the gradient into the
      saved logits and returns them, so the backward holds the same T·V tensor and nothing more.
    * ``fused`` (later): the logits exist one chunk at a time (`unsloth_chunks`); ``UnslothFusedLoss.forward``
      computes each chunk's gradient inside the forward and saves ``grad_inputs`` (``empty_like(hidden_states)``,
      T·H in the hidden states' dtype) and, when lm_head trains, ``grad_lm_head`` (V·H). A chunk's working set is
      its logits in the weight's dtype, their fp32 upcast for ``cross_entropy`` and that upcast's fp32 gradient
      (``compute_fused_ce_loss`` under ``torch.func.grad_and_value``). cut-cross-entropy, the path where it is
      installed, keeps less than that chunk.
    """
    a = run.arch
    H, V = a.hidden_size, a.vocab_size
    e = logit_dtype_bytes(run)
    if run.unsloth_loss == "inplace":
        return LogitTerms(T * V * e + T * 8.0, T * V * e + T * 8.0)
    saved = T * H * e_in + (V * H * _bytes(run.trainable_dtype) if _head_trains(run) else 0.0)
    rows = -(-T // unsloth_chunks(T, V))
    return LogitTerms(saved + T * 8.0 + rows * V * (e + 4.0 + 4.0), saved)


def final_softcap(run: Run) -> float | None:
    """The model's ``final_logit_softcapping`` (its config.json, or the text model's config of a multimodal one),
    None when it has none."""
    raw = run.arch.raw or {}
    for cfg in (raw, raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}):
        v = cfg.get("final_logit_softcapping")
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


def logit_terms(run: Run, T: int) -> LogitTerms:
    """The logits of a micro batch of `T` tokens.

    lm_head output in the compute dtype, its fp32 upcast for the loss, log_softmax's fp32 output (reference/memory/REPORT.md §3:
    2sbV + 4sbV kept; the loss adds 4sbV while it runs); fp32 compute has no separate upcast. The loss's backward
    holds log_softmax's saved fp32 output, its incoming and its outgoing fp32 gradient together (12 B per token per
    vocabulary entry); the half-precision logits are gone by then (measured against the simulate probe,
    benchmarks/results/calibration.md). With liger's fused linear cross-entropy (`Run.liger_flce`: pt/sft only,
    run/savers.py) see `flce_terms`; ``upcast_lmhead_output`` then has nothing to act on (the forward hook sits on
    lm_head, which the fused loss never calls).
    """
    a = run.arch
    if run.liger_flce and run.stage in ("pt", "sft"):
        # with the logits gone, the forward's largest moment may be inside the last layer instead
        f = flce_terms(run, T, final_hidden_bytes(run))
        return LogitTerms(max(f.forward, T * layer_transients(run)[0]), f.backward)
    if run.unsloth_loss:
        # softcapping and logit scaling happen inside unsloth's kernels (or per chunk): no extra T·V tensors
        u = unsloth_terms(run, T, final_hidden_bytes(run))
        return LogitTerms(max(u.forward, T * layer_transients(run)[0]), u.backward)
    e_logit = logit_dtype_bytes(run)
    fwd = T * a.vocab_size * (_loss_input_bytes(run, e_logit) + 4.0 + (4.0 if run.shifted_logits_copy else 0.0))
    bwd = T * a.vocab_size * 12.0
    if e_logit == 2.0 and run.autocast is None and not a.loss_upcasts_logits:
        # remote-code loss on half-precision logits (ModelArch.loss_upcasts_logits): the logits, the contiguous
        # shifted copy and log_softmax's half output; its backward holds three half tensors
        fwd = T * a.vocab_size * (2.0 + 2.0 + 2.0)
        bwd = T * a.vocab_size * 6.0
    if final_softcap(run) is not None:
        # final-logit soft-capping (Gemma-2; transformers models/gemma2/modeling_gemma2.py:536-540 at 5.6.0, the
        # same three lines since 4.42; Gemma-4 gemma4/modeling_gemma4.py:1840-1843, its multimodal head from the
        # text config at :2539-2542; litgpt's `do_softcapping` is the same ops): logits / cap, tanh, * cap, each
        # a new tensor in the logits' dtype. tanh's backward reads its output, so that tensor stays from the
        # forward until the loss's gradient reaches it, beside the capped logits the loss takes
        fwd += T * a.vocab_size * e_logit
        bwd += T * a.vocab_size * e_logit
    if run.stage in ("dpo", "kto") and (run.ref_model or run.finetuning_type in ("lora", "oft")):
        # LF computes the reference log-probs after the policy forward (dpo/trainer.py get_batch_loss_metrics),
        # under no_grad but while the policy's activations and logits are alive: its logits and their fp32
        # log-softmax exist at the same time. LF reads the logits as ``.logits.to(torch.float32)`` and keeps that
        # fp32 tensor (chosen/rejected logits for its metrics, dpo/trainer.py:230-250), so the policy holds fp32
        # logits + log_softmax and the reference adds the same, 16 B per token and vocabulary entry whether or not
        # the forward upcast them (`_loss_input_bytes`: the 2 B it drops there come back here)
        fwd += T * a.vocab_size * (e_logit + 4.0 + (6.0 - _loss_input_bytes(run, e_logit) if e_logit == 2.0 else 0.0))
    if run.stage == "rm":
        # the value head's scores are what the loss keeps; the vocabulary logits TRL's wrapper still computes
        # are alive only at the end of the forward (`value_head_bytes`)
        fwd, bwd = value_head_bytes(run, T), T * 4.0 * 2
    return LogitTerms(fwd, bwd)
