"""Depth reduction of the simulate probe: which depths to build, and the affine extrapolation of each segment's
bytes to the model's depth (see simulate.py's module docstring for why memory is affine in depth)."""

from __future__ import annotations

from finetune_doctor.probes.spec import ProbeSpec
from finetune_doctor.probes.tracker import CATEGORIES, Peak


def extrapolate_peak(a: Peak, b: Peak, k: int, L: int) -> Peak:
    """Affine extrapolation of one segment from depths k (a) and k+1 (b) to depth L, per category."""
    by = {c: a.by_category.get(c, 0) + (L - k) * (b.by_category.get(c, 0) - a.by_category.get(c, 0))
          for c in CATEGORIES}
    by = {c: max(v, 0) for c, v in by.items()}
    return Peak(sum(by.values()), by)


def describe_segment(key: tuple, L: int) -> str:
    step, micro, phase = key[0], key[1], key[2]
    where = {"fwd": "forward", "bwd": "backward", "opt": "optimizer step", "zero": "zero_grad",
             "ref": "reference-model forward"}.get(phase, phase)
    pos = key[3:]
    if pos and pos[0] in ("b", "t"):
        i = pos[1] if pos[0] == "b" else L - 1 - pos[1]
        where += f", layer {i + 1} of {L}"
    elif pos:
        where += {"embed": ", embeddings", "head": ", final norm", "logits": ", logits and loss",
                  "end": ", end", "loss": ", loss"}.get(pos[0], f", {pos[0]}")
    s = f"step {step}"
    if micro:
        s += f" (micro-batch {micro + 1})"
    return f"{s}, {where}"


def choose_depth(spec: ProbeSpec, max_full: int = 4) -> tuple[int, ...]:
    """Depths to build: the full depth when it is small, else (k, k+1) with k large enough that both depths have
    the same kinds of layers at both ends of the stack (freeze tuning: the trainable block plus a frozen layer;
    MoE: the leading dense layers plus two sparse ones)."""
    L = spec.num_layers
    if L <= max_full:
        return (L,)
    k = 2
    if spec.finetuning_type == "freeze":
        k = max(k, 2 * (abs(spec.freeze_trainable_layers) + 1))
    cfg = spec.model_config or spec.standin_config
    fk = int(cfg.get("first_k_dense_replace") or 0)
    if fk:
        k = max(k, 2 * (fk + 1))
    dense = [i for i in (cfg.get("mlp_only_layers") or []) if isinstance(i, int)]
    if dense:
        k = max(k, 2 * (max(dense) + 2))
    if k + 1 >= L:
        return (L,)
    return (k, k + 1)
