"""Optimizer states of the optimizers LLaMA-Factory builds itself (train/trainer_utils.py ``create_custom_optimizer``):
GaLore and APOLLO (low-rank projected Adam moments), BAdam (one block at a time, or a sparse share), Muon
(momentum on matrices, AdamW on the rest). LoRA+ builds the ordinary optimizer with its own learning-rate groups
(``_create_loraplus_optimizer``, :372-409) and keeps ordinary states.

Each function returns bytes of one rank without DeepSpeed (weights.py `_torch_states` calls them) and cites the
optimizer's own source:

* GaLore: jiaweizzhao/GaLore @2cc66f8 ``galore_torch/galore_projector.py`` and ``adamw.py``;
* APOLLO: zhuhanqing/APOLLO @76b3472 ``apollo_torch/apollo.py`` and ``random_projector.py``;
* BAdam: Ledzy/BAdam @bf989dc ``src/badam/block_optim.py``;
* Muon: LLaMA-Factory's copy, ``src/llamafactory/third_party/muon/muon.py`` (ff6d4d1).
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.analyzers.memory.params import _ATTN_GROUP, _canonical, _targets, badam_block_params
from finetune_doctor.dtypes import lowrank_state_elements, optimizer_state_bytes_per_param
from finetune_doctor.dtypes import dtype_bytes as _bytes
from finetune_doctor.run import Run


@dataclass(frozen=True)
class OptStates:
    """Bytes of an LF-built optimizer: `gradients` held from backward to the step (layerwise GaLore/APOLLO: one
    parameter's at a time), `persistent` whether they outlive a micro-batch, `master` fp32 copies the optimizer
    owns (BAdam), `states`, `grads_step` extra gradient bytes inside step(), `temp` the step's temporaries."""

    gradients: float
    persistent: bool
    master: float
    states: float
    grads_step: float
    temp: float


def _trained_matrices(run: Run, targets: tuple[str, ...] | None = None) -> list[tuple[int, int, int]]:
    """(out, in, copies) of every trainable decoder weight matrix of full/freeze tuning that `targets` select:
    ``all`` is LF's ``find_all_linear_modules`` (every nn.Linear but lm_head, model_utils/misc.py:28-52), other
    names match a module when they are a substring of its name (trainer_utils.py:211-214)."""
    a = run.arch
    if run.finetuning_type == "freeze":
        k = run.freeze_trainable_layers
        layers = range(a.num_layers - k, a.num_layers) if k > 0 else range(0, min(-k, a.num_layers))
        groups: list[tuple[tuple[str, str], int]] = []
        for i in layers:
            groups.append((a._kind(i), 1))
    else:
        groups = list(a.layer_groups())
    names = None
    if targets is not None and "all" not in targets:
        names = set(targets)
    out = []
    for kind, n in groups:
        for lin in a.kind_linears(kind):
            if not lin.targetable:
                continue
            full = ("self_attn." if _canonical(lin.name) in _ATTN_GROUP else "mlp.") + _canonical(lin.name)
            if names is not None and not any(t in full for t in names):
                continue
            out.append((lin.out_features, lin.in_features, n * lin.count))
    return out


def lowrank_states(run: Run, P_t: float, e_t: float) -> OptStates:
    """GaLore / APOLLO on full or freeze tuning.

    Per target matrix ``m × n`` (out × in) at rank r (LF default 16, finetuning_args.py:279/318): ``proj_type``
    std projects on the smaller side, so the projected gradient and both Adam moments are ``r × max(m, n)``
    (galore_projector.py:12-21, apollo random_projector.py:108-116; moments ``zeros_like(grad)`` of the
    projected gradient in the gradient's dtype, adamw.py:105-109, apollo.py:138-142). The projector is
    ``r × min(m, n)`` in the parameter's dtype — except GaLore on fp32 parameters, whose projector is a slice of
    the full SVD factor and keeps all ``min(m, n)²`` fp32 of it alive (galore_projector.py:72-92: no copy when the
    data is already float). Non-target parameters keep ordinary states. The SVD runs at step 0 and every
    ``update_proj_gap`` steps on an fp32 copy of the gradient with ``full_matrices=False`` factors
    (galore_projector.py:72-81): that and the projected-back update (m·n, times the scale) are the step's
    temporaries, for the largest matrix. Layerwise (``galore_layerwise``/``apollo_layerwise``): LF steps each
    parameter in its post-accumulate-grad hook and drops its gradient (trainer_utils.py:253-267, :334-348), so
    gradients never accumulate.
    """
    galore = run.use_galore
    rank = run.galore_rank if galore else run.apollo_rank
    layerwise = run.galore_layerwise if galore else run.apollo_layerwise
    mats = _trained_matrices(run, run.galore_target if galore else run.apollo_target)
    impl = "galore_8bit" if run.optimizer_impl in ("8bit", "paged_8bit") and galore else "galore"
    state_b = 4.0 if run.trainable_dtype == "float32" else e_t
    per_elem = optimizer_state_bytes_per_param(impl, state_b)
    svd = galore or run.apollo_proj == "svd"
    states = 0.0
    covered = 0
    largest = (0, 0)
    for m, n, copies in mats:
        low, proj = lowrank_state_elements(m, n, rank)
        proj_bytes = (min(m, n) ** 2 * 4.0) if (svd and run.trainable_dtype == "float32") else proj * e_t
        states += copies * (low * per_elem + proj_bytes)
        covered += copies * m * n
        largest = max(largest, (m, n), key=lambda s: s[0] * s[1])
    states += max(P_t - covered, 0) * optimizer_state_bytes_per_param("fused", state_b)
    m, n = largest
    k = min(m, n)
    temp = 2.0 * m * n * e_t + (4.0 * (m * n + m * k + k * n) if svd else 0.0)
    if layerwise:
        # one parameter's gradient and its update at a time, inside backward: the largest gradient is the
        # embedding's or lm_head's when they train (they step in their hooks too, as plain AdamW)
        a = run.arch
        biggest = max(m * n, a.embedding_params(), a.lm_head_params()) if run.finetuning_type == "full" else m * n
        return OptStates(biggest * e_t + temp, False, 0.0, states, 0.0, 0.0)
    return OptStates(P_t * e_t, run.grad_accum > 1, 0.0, states, 0.0, temp)


def badam_states(run: Run, P_t: float, e_t: float) -> OptStates:
    """BAdam (LF ``_create_badam_optimizer``, trainer_utils.py:412-470; the model stays in half precision,
    adapter.py:340-343).

    Layer mode (``BlockOptimizer``): only the active block requires grad (``switch_trainable_params``,
    block_optim.py:490-528); the block's half-precision gradients, an fp32 copy of its parameters that the base
    optimizer updates (``param.clone().float()``, :515) and that optimizer's fp32 states on them; at the step the
    gradients are converted to fp32 one parameter at a time and the half ones dropped (``_grad_to_hp``,
    :275-287). Ratio mode (``BlockOptimizerRatio``): every parameter trains, but each gradient is made sparse in
    its post-accumulate hook, keeping ``update_ratio`` of the entries with int64 COO indices, and the Adam moments
    are vectors of those entries only (``sparse_update_hook``, :578 and :805-; the moments are
    ``zeros_like(p.grad._values())``, :731-734)."""
    if run.badam_mode == "ratio":
        share = run.badam_update_ratio
        return OptStates(P_t * share * (e_t + 16.0), True, 0.0, 2.0 * P_t * share * e_t, 0.0, 0.0)
    blk = float(badam_block_params(run))
    states = blk * optimizer_state_bytes_per_param(run.optimizer_impl, 4.0)
    temp = {"fused": 0.0, "foreach": blk * 4.0}.get(run.optimizer_impl, 0.0)
    return OptStates(blk * e_t, run.grad_accum > 1, blk * 4.0, states, blk * (4.0 - e_t), temp)


def muon_states(run: Run, P_t: float, e_t: float) -> OptStates:
    """LF's Muon (``_create_muon_optimizer``, trainer_utils.py:498-524): every trainable 2-D parameter that is
    not an embedding or lm_head keeps one momentum buffer ``zeros_like(g)`` (muon.py:176-178); the others keep
    AdamW's ``moment1``/``moment2`` (:207-210), all in the gradient's dtype. The Newton-Schulz step of one matrix
    works on a bfloat16 copy (muon.py:48-73): the Nesterov sum (m·n in the gradient's dtype), X and X/‖X‖, the
    k×k products ``X Xᵀ``, ``A A``, ``bA``, ``c(AA)``, B, and ``B X``, ``aX`` (k = min(m, n), 2 B each); the
    largest matrix decides."""
    a = run.arch
    if run.finetuning_type in ("lora", "oft"):
        names, _ = _targets(a, run.lora_target)
        r = run.lora_rank
        # per layer kind: a hybrid stack's first layer (dense before MoE, linear attention before full) is not
        # every layer's shape
        mats = [(m, n, count * lin.count) for kind, count in a.layer_groups() for lin in a.kind_linears(kind)
                if _canonical(lin.name) in names for m, n in ((r, lin.in_features), (lin.out_features, r))]
        matrix_elems = sum(m * n * c for m, n, c in mats)
    else:
        mats = _trained_matrices(run)
        matrix_elems = sum(m * n * c for m, n, c in mats)
    matrix_elems = min(matrix_elems, P_t)
    states = matrix_elems * e_t + (P_t - matrix_elems) * 2.0 * e_t
    m, n = max(((m, n) for m, n, _ in mats), key=lambda s: s[0] * s[1], default=(0, 0))
    k = min(m, n)
    temp = m * n * (e_t + 8.0) + 12.0 * k * k
    return OptStates(P_t * e_t, run.grad_accum > 1, 0.0, states, 0.0, temp)
