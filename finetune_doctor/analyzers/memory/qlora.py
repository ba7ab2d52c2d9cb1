"""QLoRA (bitsandbytes 4-bit) on the device beyond the packed weights: the dequantised weight of the linear being
computed, in forward and in backward.

Derived from bitsandbytes 0.48.2 (the wheel read in /tmp; LLaMA-Factory requires >= 0.39.0,
requirements/bitsandbytes.txt), ``bitsandbytes/autograd/_functions.py``:

* ``MatMul4Bit.forward`` (:357-384): ``torch.nn.functional.linear(A, F.dequantize_4bit(B, quant_state)
  .to(A.dtype).t(), bias)`` (:373) builds the whole ``out × in`` weight in the quantisation state's dtype, cast to
  the input's dtype when they differ (a second copy), uses it and drops it: autograd keeps only the packed ``B``
  and the state (``ctx.tensors = (None, B)``, :379-382), never the dequantised weight.
* ``MatMul4Bit.backward`` (:387-406): the input gradient ``grad_output @ dequantize_4bit(B).t()`` (:404) dequantises
  the weight again, so the backward of every quantised linear holds one dequantised weight beside the gradient it
  produces. The weight gradient is not computed (``req_gradB`` is False for frozen 4-bit weights).
* ``matmul_4bit`` (:409-450) takes the ``gemv_4bit`` kernel without dequantising only for a single-token input
  without grad (inference); training always takes ``MatMul4Bit``.

The quantisation state itself (an fp32 absmax per 64 elements, or with double quantisation a uint8 absmax per 64
plus an fp32 absmax per 256 of those, ``functional.py:826-900`` ``quantize_4bit`` with ``compress_statistics``) is
part of the stored bytes per parameter (dtypes.py ``weight_bytes_per_param``), persistent, not a transient.

One linear runs at a time, so the transient is that of the largest quantised linear of the stack.

**The saved input (bitsandbytes before 0.43.2).** Up to 0.43.1 ``MatMul4Bit.forward`` kept its input for backward
as a plain attribute, ``ctx.tensors = (A, B)`` whenever A or B needs a gradient, though the backward never reads A
(it computes only the input gradient). Read in the wheels: 0.41.1 ``_functions.py:523``, 0.42.0 :523, 0.43.1 :516
keep ``(A, B)``; 0.43.2 :516, 0.43.3 :516, 0.44.0 :516, 0.44.1 :516, 0.45.0 :469, 0.46.0 :329, 0.48.2 :380 keep
``(None, B)``. The change is bitsandbytes PR #1270 (commit 9e753741, merged 2024-07-16, first released in 0.43.2,
tagged 2024-07-23; https://github.com/bitsandbytes-foundation/bitsandbytes/pull/1270, where the maintainer calls it
the bug behind QLoRA's memory issues at larger batches and longer sequences).
`saved_input_terms` adds those inputs where nothing else keeps the same tensor (module docstring of that function).
"""

from __future__ import annotations

from finetune_doctor.arch import Linear
from finetune_doctor.dtypes import dtype_bytes
from finetune_doctor.run import Run
from finetune_doctor.run.stack import parse_version

# first bitsandbytes release whose MatMul4Bit no longer keeps its input (PR #1270, module docstring)
BNB_DROPS_INPUT = (0, 43, 2)
# the release the terms above were read from: what a fresh install of LLaMA-Factory (bitsandbytes>=0.39.0) gets
BNB_READ = "0.48.2"
# an old release that keeps the input, the alternative evaluated when the version is unknown
BNB_OLD = "0.43.1"


def is_bnb4(run: Run) -> bool:
    """bitsandbytes 4-bit on the fly (``quantization_bit: 4`` with the bnb method), the path MatMul4Bit serves."""
    return run.quantization_bit == 4 and (run.quantization_method or "bnb") in ("bnb", "bitsandbytes")


def is_bnb8(run: Run) -> bool:
    """bitsandbytes 8-bit on the fly (``quantization_bit: 8`` with the bnb method: LLM.int8's ``Linear8bitLt``,
    LF model/model_utils/quantization.py:179-181), the path ``MatMul8bitLt`` serves."""
    return run.quantization_bit == 8 and (run.quantization_method or "bnb") in ("bnb", "bitsandbytes")


def fused_experts_left_unquantized(run: Run, lin: Linear) -> bool:
    """Whether on-the-fly quantization (``quantization_bit``) leaves this linear in the load dtype: routed experts
    held as fused 3-D parameters (transformers 5's MoE layers, gpt-oss's in 4.x too: `ModelArch.experts_fused`) are
    no ``nn.Linear``, and transformers swaps only ``nn.Linear``/``Conv1D`` modules for bitsandbytes' 4-/8-bit ones
    (transformers 5.6.0 integrations/bitsandbytes.py:184 ``replace_with_bnb_linear``; HQQ and EETQ test
    ``isinstance(module, nn.Linear)`` too: integrations/hqq.py:54, integrations/eetq.py:109), so the experts, most of
    an MoE's weights, stay 16-bit (bitsandbytes-foundation/bitsandbytes#1849, open; the Experts4bit PRs #1965/#1984
    unmerged). unsloth quantizes them itself (unsloth-zoo#527, opened 2026-03-02, merged; unsloth#4032), so a
    ``use_unsloth`` run is left as quantized. A pre-quantized checkpoint is sized as stored (run/quantization.py),
    not here."""
    return bool(lin.expert and run.arch.experts_fused and run.quantization_bit and not run.use_unsloth)


def largest_quantized_linear(run: Run) -> int:
    """Elements of the largest single quantised weight (``out × in`` of one linear, one expert's for MoE)."""
    a = run.arch
    # fused 3-D experts are not quantized on the fly (`fused_experts_left_unquantized`): no dequantised copy
    return max((lin.in_features * lin.out_features for kind, _n in a.layer_groups() for lin in a.kind_linears(kind)
                if not fused_experts_left_unquantized(run, lin)), default=0)


def dequant_transient_bytes(run: Run) -> float:
    """Bytes of the dequantised weight a 4-bit linear holds while it runs (forward, checkpoint recompute and
    backward alike): ``out × in`` in the state's dtype (the dtype the weight was loaded in, LF's compute dtype),
    plus a cast to the activation dtype when that differs (:373, :404). 8-bit (LLM.int8) multiplies int8 matrices
    in forward and dequantises only in backward, once, in the input's dtype: ``CB = state.CB.to(ctx.dtype_A,
    copy=True).mul_(...)`` then ``grad_A = matmul(grad_output, CB)`` (``MatMul8bitLt.backward``, read in the wheels
    0.41.1 ``autograd/_functions.py:479``, 0.43.3 :473, 0.44.1 :473, 0.45.0 :433, 0.46.0 :293, 0.48.2 :289; the
    frozen ``Int8Params`` keep no ``CBt``, so the int8 backward branch is not taken). 0 outside bitsandbytes and
    under unsloth (its own kernels)."""
    n = largest_quantized_linear(run)
    act_b = dtype_bytes(run.compute_dtype if run.autocast is None else run.autocast)
    if is_bnb8(run) and not run.use_unsloth:
        return n * act_b
    if not is_bnb4(run):
        return 0.0
    state_b = dtype_bytes(run.compute_dtype)
    return n * state_b + (n * act_b if act_b != state_b else 0.0)


def bnb_version(run: Run) -> tuple[str, str] | None:
    """(version, where it came from) of bitsandbytes on the training machine: ``--env`` (a pip freeze or
    ``llamafactory-cli env`` listing it), the packages installed here when this is the training machine, or a
    ``doctor context`` file (facts/config.py ``_stack``); None when none of them names it."""
    for pkg, v, src in run.stack_sources:
        if pkg == "bitsandbytes" and parse_version(v) is not None:
            return v, src
    return None


def keeps_input(run: Run) -> bool:
    """Whether the run's MatMul4Bit keeps its input for backward: bitsandbytes < 0.43.2 (module docstring). An
    unknown version is taken as the release read (0.48.2, does not keep it); memory/assumed.py records that.
    8-bit: always — ``MatMul8bitLt.forward`` sets ``ctx.tensors = (CAt, subA, A)`` whenever an input needs a
    gradient in every release read (0.41.1 ``autograd/_functions.py:431``, 0.43.3 :425, 0.44.1 :425, 0.45.0 :389,
    0.46.0 :243, 0.48.2 :239), so no version decides it."""
    if run.use_unsloth:
        return False    # unsloth's own LoRA kernels replace bitsandbytes' matmul autograd function
    if is_bnb8(run):
        return True
    if not is_bnb4(run):
        return False
    found = bnb_version(run)
    v = parse_version(found[0]) if found else None
    return v is not None and v < BNB_DROPS_INPUT


def input_bytes_per_token_layer(run: Run, layer: int, adapted_kept: bool) -> float:
    """Bytes per token of the distinct inputs of one decoder layer's 4-bit linears that MatMul4Bit keeps and
    nothing else already keeps: q/k/v share the attention norm's output (h), o_proj reads the attention output
    (heads × head_dim), gate/up share the MLP norm's output (h), down_proj reads the gated product (I; per routed
    expert ``moe_intermediate_size × experts_per_tok``), each at the activation dtype (2 bytes under autocast or a
    half compute dtype, else 4).

    `adapted_kept`: the saved-activation model (activations.py ``activation_bytes_per_token_layer``) already counts
    the input of every projection that carries a trainable adapter, since peft's ``lora_A(dropout(x))`` keeps x
    itself when lora_dropout is 0 (nn.Identity): the same storage, so it is not counted again. Above 0, peft's
    ``nn.Dropout`` hands lora_A a new tensor (v0.18.1 ``tuners/lora/layer.py:188-191``, ``bnb.py:568``) and the
    dropout keeps only its mask, so x is held by MatMul4Bit alone and counts for every projection. peft's 4-bit layer
    casts x to the adapter's dtype only outside autocast (``requires_conversion = not
    torch.is_autocast_enabled()``, peft v0.18.1 ``tuners/lora/bnb.py:563-566``): fp32 adapters on half inputs
    without autocast keep an fp32 copy, not x, so x counts. False where those saves are discarded (non-reentrant
    checkpointing's pack hook drops autograd's saved tensors but not a Python attribute such as ``ctx.tensors``). MoE layers' gate/up inputs are the dispatched copies that model counts
    already. Layer 0's q/k/v input needs no gradient without checkpointing (LF calls
    ``enable_input_require_grads`` only with it); counted anyway (one layer's h, an upper bound)."""
    from finetune_doctor.analyzers.memory.activations import _trainable_linear_names

    a = run.arch
    e = 2.0 if run.autocast or dtype_bytes(run.compute_dtype) == 2 else 4.0
    cast_copy = not run.autocast and run.trainable_dtype == "float32" and e == 2.0
    # with lora_dropout > 0 lora_A keeps the dropped copy, not x (activations.py ``_lora_dropout_bytes`` frees x),
    # so MatMul4Bit's ctx.tensors is then the only holder of x
    dropped = run.finetuning_type == "lora" and run.lora_dropout > 0.0
    kept = _trainable_linear_names(run) if adapted_kept and not cast_copy and not dropped else set()
    dense = a.is_dense_layer(layer)
    width = a.intermediate_size if dense else (a.moe_intermediate_size or a.intermediate_size) * a.num_experts_per_tok
    inputs = (({"q_proj", "k_proj", "v_proj", "q_a_proj", "kv_a_proj_with_mqa"}, a.hidden_size),
              ({"o_proj"}, a.num_heads * a.hd),
              ({"gate_proj", "up_proj"}, a.hidden_size if dense else 0),
              ({"down_proj"}, width))
    return e * sum(n for names, n in inputs if not names & kept)


def saved_input_terms(run: Run, T: int, trainable: range, frozen: range) -> tuple[float, float]:
    """(saved, recompute) bytes MatMul4Bit's kept inputs add for a micro batch of `T` tokens; (0, 0) unless
    `keeps_input`. `trainable`/`frozen`: the decoder layers with trainable parameters and the frozen ones above
    them (activations.py ``_grad_layers``); layers below keep nothing (no gradient reaches their inputs).

    * No checkpointing: every layer on the gradient's path keeps them until its backward:
      ``T · Σ input_bytes_per_token_layer`` (adapted inputs excluded; a frozen layer keeps no projection input in
      the activation model, so all of its inputs count).
    * Reentrant checkpointing (LF's default, ``use_reentrant_gc``; unsloth's offloaded checkpoint alike): the
      first forward runs under no_grad, so ``needs_input_grad`` is False and nothing is kept; only the layer being
      recomputed keeps them, beside its rebuilt activations: ``T · max`` over layers, in the recompute term.
    * Non-reentrant checkpointing (FSDP2, KTransformers): the forward runs with grad and ``ctx.tensors`` is no
      saved tensor, so the checkpoint's hooks never drop it: every checkpointed layer keeps all its 4-bit linears'
      inputs until its backward (``T · L · all inputs``), and the recomputed layer its own again.
    """
    if not keeps_input(run):
        return 0.0, 0.0
    frozen_b = T * sum(input_bytes_per_token_layer(run, i, False) for i in frozen)
    one = T * max((input_bytes_per_token_layer(run, i, True) for i in trainable), default=0.0)
    if not run.gradient_checkpointing:
        return T * sum(input_bytes_per_token_layer(run, i, True) for i in trainable) + frozen_b, 0.0
    if run.use_reentrant_gc or run.unsloth_gc:
        return frozen_b, one
    return T * sum(input_bytes_per_token_layer(run, i, False) for i in trainable) + frozen_b, one
