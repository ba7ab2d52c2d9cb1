"""The moments of a training step and the estimate: the peak of one process on its busiest GPU.

The peak is the largest of the moments of a step, each a sum of terms (analyzers/memory/terms.py):

* **loss** — end of the forward of a micro-batch: static state + every saved activation + the logits at the loss
  (+ gradients when gradient accumulation keeps them from earlier micro-batches, or DeepSpeed keeps buffers);
* **loss backward** — the loss's backward: its fp32 gradients instead of the logits;
* **backward** — one checkpointed layer rebuilt;
* **backward end** — static state + all gradients (activations are freed as backward walks down the layers);
* **optimizer step** — static state + gradients + the optimizer implementation's temporaries.

Optimizer states are created lazily inside the first optimizer step (torch.optim.AdamW._init_group), so step 1 runs
without them. On top of the tensors come the allocator's reserve (analyzers/memory/reserve.py) and the runtime.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.memory.activations import activation_bytes_per_token_layer
from finetune_doctor.analyzers.memory.dataparallel import gathered_logit_bytes
from finetune_doctor.analyzers.memory.logits import eval_logit_bytes
from finetune_doctor.analyzers.memory.assumed import term_assumptions
from finetune_doctor.analyzers.memory.npu import is_npu
from finetune_doctor.analyzers.memory.paged import evictable_state_bytes
from finetune_doctor.analyzers.memory.ppo import generation_moment
from finetune_doctor.analyzers.memory.runtime import runtime_bytes
from finetune_doctor.analyzers.memory.terms import compute_terms
from finetune_doctor.analyzers.memory.params import ParamCounts, count_params
from finetune_doctor.analyzers.memory.weights import weight_bytes_per_param
from finetune_doctor.analyzers.memory.reserve import needed_fraction, needed_reserve, pool_reserve, reserve_fraction
from finetune_doctor.run import Run
from finetune_doctor.types import GIB, Hardware, MemoryEstimate


def estimate(run: Run, hw: Hardware | None = None, *, tokens: int | None = None,
             counts: ParamCounts | None = None) -> MemoryEstimate:
    """Predicted steady-state peak per rank (GiB) as nvidia-smi and max_memory_allocated would show it.

    `total` has the allocator reserve a roomy card shows; ``details["need_gib"]`` the tensor peak + the reserve the
    run needs + the runtime (reserve.py 'Shown and needed') less a paged optimizer's states the driver pages out
    (paged.py): it decides `fits`, `headroom` and ``first_oom`` against `hw.capacity_gib` (None without a GPU).
    `tokens` replaces micro batch × cutoff_len by a measured worst micro-batch. Returns per_gpu terms at the peak
    phase; `details` holds every term in bytes, the three phase totals and the parameter counts.
    """
    c = counts or count_params(run)
    t = compute_terms(run, c, tokens)
    W = t.weights + t.buffers + t.grads_always
    held = t.gradients if t.grads_persistent else 0.0
    # Moments of a step, in execution order. Optimizer states are created lazily inside the first optimizer step
    # (torch.optim.AdamW._init_group), so step 1 runs without them; from step 2 on every moment carries them.
    def moments(states: float) -> list[tuple[str, float, dict[str, float]]]:
        opt = t.master + states
        g_bwd = max(held, t.grads_in_backward)
        return _vision_moment(t, W + opt, held) + [
            ("loss", W + opt + t.live_params + held + t.activations + t.autocast_cache + t.logits,
             {"activations": t.activations + t.autocast_cache, "logits": t.logits, "gradients": held,
              "weights": t.weights + t.live_params}),
            # the autocast weight cache is dropped when the forward's autocast region exits (only casts that
            # autograd saved survive, which the per-layer activations already count)
            ("loss backward", W + opt + t.live_params + g_bwd + t.activations + t.logits_bwd,
             {"activations": t.activations, "logits": t.logits_bwd, "gradients": g_bwd,
              "weights": t.weights + t.live_params}),
            ("backward", W + opt + t.live_params + g_bwd + t.activations + t.autocast_cache + t.recompute,
             {"activations": t.activations + t.autocast_cache + t.recompute, "gradients": g_bwd,
              "weights": t.weights + t.live_params}),
            *_hold_moment(t, W + opt, g_bwd), ("backward end", W + opt + t.live_params + t.gradients,
             {"gradients": t.gradients, "weights": t.weights + t.live_params}),
            ("optimizer step", W + t.master + t.states + t.gradients + t.grads_step + t.step_temp,
             {"gradients": t.gradients + t.grads_step, "weights": t.weights, "temp": t.step_temp}),
        ]

    steady = moments(t.states)
    later = later_moments(run, t)
    name, peak, parts = max(steady + [(n, v, p) for n, v, p, _ in later], key=lambda m: m[1])
    phase = {"vision tower": "forward/loss", "loss": "forward/loss", "loss backward": "backward", "backward": "backward",
             "backward end": "backward", "optimizer step": "optimizer step"}.get(name, name)
    comp = {
        "weights": parts.get("weights", 0.0),
        "gradients": parts.get("gradients", 0.0) + t.grads_always,
        "optimizer": t.master + t.states + parts.get("temp", 0.0),
        "activations": parts.get("activations", 0.0),
        "logits": parts.get("logits", 0.0),
        "buffers": t.buffers,
    }
    phases = {f"{n} (step 2)": v for n, v, _ in steady}
    # a resumed run loads the optimizer states before step 1 (transformers Trainer._load_optimizer_and_scheduler)
    first = steady if run.resume else moments(0.0)
    # loading the model: the weights (partitioned under ZeRO-3, except a bitsandbytes model: zero3.py) before any step
    timeline = ([("model load", t.model_load)] + [(label, v) for _, v, _, label in later if label.endswith("step 0")]
                + [(f"{n} of step 1", v) for n, v, _ in first[:-1]] + [("optimizer step of step 1", steady[-1][1])]
                + [(f"{n} of step 2", v) for n, v, _ in steady[:-1]]
                + [(label, v) for _, v, _, label in later if not label.endswith("step 0")])
    # llamafactory-cli exports expandable_segments:True when it starts torchrun itself (LF 0.9.5 launcher.py:80-83);
    # accelerate launch, torchrun or deepspeed started by hand leave the allocator's default; torch_npu reads only
    # PYTORCH_NPU_ALLOC_CONF, so on an Ascend NPU the CUDA variable LF exports changes nothing (npu.py)
    expandable = run.world_size > 1 and run.launcher in (None, "llamafactory-cli") and not is_npu(hw)
    # the allocator's reserve by shape class, derived from allocator replays (analyzers/memory/reserve.py)
    reserve_share, shape = reserve_fraction(run, t, expandable)
    reserve = pool_reserve(peak, reserve_share, t)   # FSDP's stream pools and init floor (reserve.py)
    # OOM is decided on what the run needs, not what a roomy card shows (reserve.py 'Shown and needed'; paged.py)
    needed_share, _ = needed_fraction(run, t, expandable)
    rt = runtime_bytes(run, hw)
    total = peak + reserve + rt
    paged = evictable_state_bytes(run, t.states, c.trainable)
    need = peak + needed_reserve(peak, needed_share, t) + rt - paged
    per_gpu = {k: v / GIB for k, v in comp.items()}
    per_gpu["runtime"] = (rt + reserve) / GIB
    per_gpu["total"] = total / GIB
    first_oom, fits, headroom = _against_card(hw, timeline, need, rt, needed_share, paged, {"model load"} | (
        set() if run.resume else {f"{n} of step 1" for n, _v, _p in first[:-1]}), t)
    details: dict[str, Any] = {
        "phase_gib": {k: v / GIB for k, v in phases.items()},
        "terms_bytes": {k: float(v) for k, v in t.__dict__.items() if isinstance(v, float)},
        "params": {"base": c.base, "trainable": c.trainable, "adapter": c.adapter, "frozen": c.frozen,
                   "trainable_base": c.trainable_base, "expert_lora": c.expert_lora_params},
        "tokens_per_micro_batch": tokens if tokens is not None else run.tokens_per_micro_batch,
        "reserve_gib": reserve / GIB,
        "reserve_share": reserve_share,
        # the figure fits/oom/p_oom are decided on (uncertainty.assess `need_gib`): tensors + needed reserve + runtime
        "need_gib": need / GIB, "reserve_needed_gib": (need - peak - rt + paged) / GIB,
        "reserve_needed_share": needed_share, "paged_states_gib": paged / GIB,
        "reserve_class": shape, "quantized": bool(run.quantization_bit),   # the error class (uncertainty.py)
        "first_oom": first_oom,
        "peak_moment": next((label for n, _, _, label in later if n == name), None)
        or (f"{name} of step 2" if name != "optimizer step" else "optimizer step"),
        "moments_gib": {name: b / GIB for name, b in timeline},
        "runtime_gib": rt / GIB,
    }
    # host RAM per node peaks when a ZeRO-3 checkpoint is consolidated on rank 0 (hostsave.py); LF saves at least
    # once, at the end of training
    details.update(host_steady_gib=t.host / GIB, host_save_gib=t.host_save / GIB,
                   assumptions=term_assumptions(run, hw, t))
    return MemoryEstimate(per_gpu=per_gpu, peak_allocated=peak / GIB, host=(t.host + t.host_save) / GIB, fits=fits,
                          headroom=headroom, method="analytic", phase=phase, details=details)


def _against_card(hw: Hardware | None, timeline: list[tuple[str, float]], need: float, rt: float,
                  needed_share: float, paged: float = 0.0, before_states: set[str] | frozenset[str] = frozenset(),
                  terms: Any = None) -> tuple[str | None, bool | None, float | None]:
    """(first moment that would not fit, fits, headroom GiB) of a run that needs `need` bytes at its peak, with
    `timeline` its moments' tensor bytes, `rt` the runtime bytes and `needed_share` the reserve it needs (reserve.py
    'Shown and needed': room before an OOM is counted against the need, not the cache a roomy card shows); `paged`
    bytes of optimizer states the driver can page out (paged.py) leave every moment but those in `before_states`
    (model load and step 1 before its optimizer step, which hold no states); `terms` (FSDP1's pools) as
    reserve.py `needed_reserve` takes them. All None without a card."""
    if hw is None or not hw.capacity_gib:
        return None, None, None
    in_use = max(hw.in_use_gib) if hw.in_use_gib else 0.0
    budget = (hw.capacity_gib - in_use) * GIB - rt
    first_oom = next((n for n, b in timeline
                      if b + needed_reserve(b, needed_share, terms) - (0.0 if n in before_states else paged) > budget),
                     None)
    headroom = hw.capacity_gib - in_use - need / GIB
    return first_oom, headroom >= 0, headroom


def _hold_moment(t: Any, static: float, g_bwd: float) -> list[tuple[str, float, dict[str, float]]]:
    """ZeRO-3 with DeepSpeed >= 0.19.3 and reentrant checkpointing: every frozen decoder layer gathered while the
    first layer is recomputed and differentiated (zero3.py `frozen_recompute_hold`, weights.py `backward_hold`);
    none otherwise. `static` is the step's resident bytes (weights, buffers, masters, states)."""
    if not t.backward_hold:
        return []
    return [("backward, first layer", static + t.live_params + t.backward_hold + g_bwd + t.recompute,
             {"activations": t.recompute, "gradients": g_bwd,
              "weights": t.weights + t.live_params + t.backward_hold})]


def _vision_moment(t: Any, static: float, held: float) -> list[tuple[str, float, dict[str, float]]]:
    """The vision tower's moment: it runs first, before any decoder activation exists (vision.py); none
    without a tower."""
    v = getattr(t, "vision", 0.0)
    if not v:
        return []
    return [("vision tower", static + t.live_params + held + v,
             {"activations": v, "gradients": held, "weights": t.weights + t.live_params})]


def later_moments(run: Run, t: Any) -> list[tuple[str, float, dict[str, float], str]]:
    """Moments after the steady step that can run out on their own: (name, bytes, breakdown, when).

    * evaluation (run/moments.py says when): the static state without gradients (the optimizer step's zero_grad
      frees them; DeepSpeed's persistent partition buffers stay), ZeRO-3's gathered parameters, one layer's working
      set under no_grad (bounded by the layer's saved activations) and the eval batch's logits
      (logits.eval_logit_bytes) for ``per_device_eval_batch_size`` × cutoff_len tokens;
    * checkpoint save: the static state and, under ZeRO-3, the module gathered for the 16-bit state dict
      (DeepSpeed ``_zero3_consolidated_16bit_state_dict`` gathers one module at a time and copies it to the host);
    * PPO's rollout generation before every step: under ZeRO-3 the whole model gathered, and the KV cache (ppo.py).
    """
    out: list[tuple[str, float, dict[str, float], str]] = []
    static = t.weights + t.buffers + t.grads_always + t.master + t.states + t.live_params
    if run.eval_during_training:
        T_e = run.eval_micro_batch * run.rank_seq_len * (2 if run.pairwise else 1)   # split under SP as well
        a = run.arch
        layers = {0, a.num_layers - 1, min(a.first_k_dense, a.num_layers - 1)}
        work = T_e * max(activation_bytes_per_token_layer(run, i) for i in layers)
        logits = eval_logit_bytes(run, T_e) + gathered_logit_bytes(run, T_e, training=False)   # dataparallel.py
        when = ("evaluation before step 1, at step 0" if run.eval_first_step == 0 else
                f"first evaluation, at step {run.eval_first_step}" if run.eval_first_step else
                "first evaluation, at the end of epoch 1")
        out.append(("evaluation", static + work + logits,
                    {"weights": t.weights + t.live_params, "activations": work, "logits": logits,
                     "gradients": 0.0}, when))
    if run.save_first_step:
        out.append(("checkpoint save", static + (t.live_params if run.deepspeed and run.zero_stage == 3 else 0.0),
                    {"weights": t.weights + t.live_params, "gradients": 0.0},
                    f"first checkpoint save, at step {run.save_first_step}"))
    if run.stage == "ppo":
        wq = run.linear_weight_bytes or weight_bytes_per_param(run.weights_dtype, run.double_quantization)
        gen = generation_moment(run, count_params(run), wq, static)
        if gen is not None:
            out.append(gen)
    return out
