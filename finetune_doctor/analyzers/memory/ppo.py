"""PPO's rollout generation: the moment of a step where LLaMA-Factory's PPO trainer samples responses.

Every PPO step starts by generating responses for its queries (LF ``train/ppo/trainer.py`` ``get_inputs``, main
snapshot :350-372; the same block in LF 0.8.x). The policy generates inside TRL's
``unwrap_model_for_generation(self.model, self.accelerator)`` (LF imports it at :37 and calls it at :358, without
``gather_deepspeed3_params``). Under DeepSpeed ZeRO-3 that context manager gathers *every* parameter of the model
on every rank for the whole ``generate`` call (TRL ``trl/models/utils.py`` ``unwrap_model_for_generation``:
``deepspeed.zero.GatheredParameters(model.parameters())`` when ``deepspeed_plugin.zero_stage == 3``; 0.24.0
:338-344, where ``gather_deepspeed3_params`` defaults to True, the only behaviour before that flag existed).
So a ZeRO-3 PPO run needs the whole model once per GPU at generation, however many ranks share its partitions:
the reason LlamaFactory#5273 (Qwen2-72B LoRA PPO, ZeRO-3 on 8 A800 80GB) ran out "in the PPO sampling phase".

Terms of the moment (bytes, one rank):

* the gathered parameters: base parameters in the weights' dtype + the adapter (or trained parameters) in the
  trainable dtype; the rank's own partitions stay allocated beside them (GatheredParameters all-gathers into new
  full tensors), and ``static`` (the caller's) already counts those;
* the KV cache ``generate`` keeps: micro batch × (prompt + ``max_new_tokens``) tokens × 2 (K, V) × layers ×
  KV heads × head_dim × the compute dtype's bytes (transformers' DynamicCache holds one K and one V per layer);
  the prompt is bounded by cutoff_len (LF's unsupervised processor truncates prompt + response to it with
  ``infer_seqlen``, data/processor/unsupervised.py:54), ``max_new_tokens`` is LF's GeneratingArguments key
  (default 1024, hparams/generating_args.py:53-56).

Outside ZeRO-3 the weights are already whole on every rank: only the KV cache is added.
Not counted (small beside the two): the last position's logits per generated token and the value head.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.memory.params import ParamCounts
from finetune_doctor.dtypes import dtype_bytes
from finetune_doctor.run import Run


def gathered_model_bytes(run: Run, c: ParamCounts, weight_bytes: float) -> float:
    """Bytes one rank holds while ZeRO-3 gathers the whole model for ``generate``: ``c.base`` parameters at
    `weight_bytes` each (the base weights as loaded) + the adapter at the trainable dtype's bytes. 0 outside
    ZeRO-3 (the weights are already whole and counted)."""
    if not (run.deepspeed and run.zero_stage == 3):
        return 0.0
    trained_base = c.trainable_base * dtype_bytes(run.trainable_dtype)
    return (c.base - c.trainable_base) * weight_bytes + trained_base + c.adapter * dtype_bytes(run.trainable_dtype)


def kv_cache_bytes(run: Run) -> float:
    """The KV cache of one ``generate`` call: micro batch × (cutoff_len + max_new_tokens) × 2 × layers × KV heads ×
    head_dim × bytes of the compute dtype."""
    a = run.arch
    head_dim = getattr(a, "head_dim", None) or a.hidden_size // max(a.num_heads, 1)
    kv_heads = getattr(a, "num_kv_heads", None) or a.num_heads
    tokens = run.micro_batch * (run.seq_len + run.gen_new_tokens)
    return float(tokens * 2 * a.num_layers * kv_heads * head_dim * dtype_bytes(run.compute_dtype))


def generation_moment(run: Run, c: ParamCounts, weight_bytes: float,
                      static: float) -> tuple[str, float, dict[str, float], str] | None:
    """The PPO rollout moment (name, bytes, breakdown, when) on top of `static` bytes (weights, states, persistent
    buffers of the rank); None for any stage but ppo. It comes before every optimisation step, the first at step 0."""
    if run.stage != "ppo":
        return None
    gathered = gathered_model_bytes(run, c, weight_bytes)
    kv = kv_cache_bytes(run)
    parts: dict[str, Any] = {"weights": gathered, "activations": kv, "gradients": 0.0}
    return ("ppo generation", static + gathered + kv, parts, "PPO rollout generation, first at step 0")
