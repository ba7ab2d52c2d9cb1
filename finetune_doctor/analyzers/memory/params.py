"""Parameter counts of a run: total, trainable, frozen, by the finetuning type LLaMA-Factory applies.

* full: every parameter trains (LF `_setup_full_tuning`, adapter.py:49-54; a VLM's frozen vision tower and projector
  stay frozen — `ModelArch.extra_params` with `extra_frozen`).
* freeze: the last `freeze_trainable_layers` decoder layers (the first N when negative), modules filtered by
  `freeze_trainable_modules` (adapter.py:129-136).
* lora / dora: rank·(in + out) per targeted linear (peft LoraLayer: A is r×in, B is out×r); DoRA adds a magnitude
  vector of `out` per module (peft v0.18.1 ``tuners/lora/dora.py:64``, ``weight_norm`` of length out). rsLoRA
  changes only the scaling (alpha/√r), PiSSA only the initial values (the base weight keeps its shape,
  ``init_lora_weights="pissa_niter_<n>"``, LF adapter.py:288-294), LoRA+ only the learning rate of B (LF
  trainer_utils.py:372-409): all three count as LoRA. `all` targets every Linear except lm_head, which for an MoE
  model includes the router and every expert's projections (LF model_utils/misc.py:28-52 finds nn.Linear modules;
  with transformers 4.x experts are separate nn.Linear modules — the behaviour case 023 reports).
* oft: peft v0.18.1 ``tuners/oft/layer.py:446-475``: ``r = in // oft_block_size`` blocks when ``oft_rank`` is 0
  (LF's default, block size 32), else ``oft_block_size = in // r``; a size that does not divide ``in`` is moved to
  the nearest divisor (``adjust_oft_parameters``, :505-523); each block stores the upper triangle of a
  skew-symmetric matrix, ``b·(b-1)/2`` elements, so a module holds ``r·b·(b-1)/2``.
* KTransformers (`use_kt`) runs the routed experts on the CPU: their weights (`kt_expert_params`) and their LoRA
  leave the GPU's counts (LF docs/en/advanced/ktransformers.md).
* resize_vocab / added tokens make embed_tokens and lm_head trainable in full (adapter.py:246-255).
* With transformers >= 5 the routed experts are fused 3-D tensors and the router a ``*TopKRouter``, neither an
  nn.Linear: ``all`` then leaves them out (`ModelArch.experts_fused`, `router_linear`).
* When the meta-device build ran (`ModelArch.exact`), LoRA counts come from its module list instead
  (readers/model/meta.py ``lora_trainable``).
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.arch import TARGET_ALIASES, ModelArch

_ATTN_GROUP = {"q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"}


@dataclass(frozen=True)
class ParamCounts:
    """Element counts. `trainable` includes adapters; `base` is the pretrained model's parameters."""

    base: int
    trainable: int
    adapter: int            # LoRA/DoRA/OFT parameters added on top of `base` (0 for full/freeze)
    frozen: int             # base parameters that do not train
    trainable_base: int     # base parameters that train (full/freeze/resize_vocab)
    largest_layer: int
    router_lora_modules: int = 0
    expert_lora_params: int = 0
    kt_expert_params: int = 0   # routed-expert weights KTransformers keeps on the CPU (not in `frozen`)

    @property
    def total(self) -> int:
        return self.base + self.adapter


def _canonical(name: str) -> str:
    return name.split(".")[-1]


def _targets(arch: ModelArch, targets: tuple[str, ...]) -> tuple[set[str], bool]:
    """Canonical linear names hit by LoRA `targets`, and whether MoE routers are included."""
    if not targets or "all" in targets:
        # the module names themselves and the canonical roles they stand for (a fused query_key_value is q, k
        # and v for the memory model's saved-activation rules)
        names = {n for k, _ in arch.layer_groups() for lin in arch.kind_linears(k) if lin.targetable
                 for n in (_canonical(lin.name), *lin.roles)}
        return names, arch.is_moe and arch.router_linear
    hit: set[str] = set()
    router = False
    # Qwen(1) names its MLP w1/w2 (both h->I) and c_proj (I->h, also the attention output): modeling_qwen.py
    family = {"w1": ("up_proj",), "w2": ("gate_proj",), "c_proj": ("o_proj", "down_proj")} if arch.model_type == "qwen" else {}
    for t in targets:
        if t.strip() in family:
            hit.update(family[t.strip()])
            continue
        t = t.strip()
        if t in ("gate", "router"):
            router = arch.is_moe
            continue
        if t == "experts" and arch.experts_fused:
            continue
        hit.update(TARGET_ALIASES.get(t, (t,)))
        hit.update(TARGET_ALIASES.get(_canonical(t), ()))
        hit.add(_canonical(t))   # the module's own name (peft matches the last name component)
    return hit, router


def _divisor_near(n: int, want: int) -> int:
    """peft's ``adjust_oft_parameters``: the divisor of `n` nearest to `want`, the lower one on a tie."""
    if want >= n:
        return n
    hi = want
    while hi <= n and n % hi:
        hi += 1
    lo = want
    while lo > 1 and n % lo:
        lo -= 1
    return lo if (want - lo) <= (hi - want) else hi


def oft_module_params(in_features: int, oft_rank: int = 0, oft_block_size: int = 32) -> int:
    """Trainable elements peft's OFT adds to one linear of `in_features` inputs (module docstring)."""
    if oft_rank == 0:
        fits = bool(oft_block_size) and in_features % oft_block_size == 0 and oft_block_size <= in_features
        b = oft_block_size if fits else _divisor_near(in_features, max(oft_block_size, 1))
        r = in_features // b
    else:
        fits = in_features % oft_rank == 0 and oft_rank <= in_features
        r = oft_rank if fits else _divisor_near(in_features, oft_rank)
        b = in_features // r
    return r * (b * (b - 1) // 2)


def lora_params(arch: ModelArch, targets: tuple[str, ...], rank: int, *, oft: bool = False,
                dora: bool = False, oft_rank: int = 0, oft_block_size: int = 32) -> tuple[int, int, int]:
    """(adapter elements, MoE layers whose router gets an adapter, adapter elements on routed experts) of LoRA
    (or OFT) at `rank` on `targets`; from the meta-device module list when `arch.exact` is set (plain LoRA)."""
    names, router = _targets(arch, targets)
    adapter = experts = routers = 0
    for kind, n in arch.layer_groups():
        for lin in arch.kind_linears(kind):
            if _canonical(lin.name) in names and lin.targetable:
                per = rank * (lin.in_features + lin.out_features)
                if oft:
                    per = oft_module_params(lin.in_features, oft_rank, oft_block_size)
                if dora:
                    per += lin.out_features
                adapter += n * per * lin.count
                if lin.expert:
                    experts += n * per * lin.count
        if router and kind[1] == "moe":
            adapter += n * (oft_module_params(arch.hidden_size, oft_rank, oft_block_size) if oft
                            else rank * (arch.hidden_size + arch.num_experts))
            routers += n
    if arch.exact is not None and not oft and not dora:
        from finetune_doctor.readers.model.meta import lora_trainable

        adapter = lora_trainable(arch.exact, targets, rank)
    return adapter, routers, experts


def kt_expert_params(arch: ModelArch) -> int:
    """Elements of the routed experts of every MoE layer (what KTransformers moves to the CPU)."""
    return sum(n * lin.params for k, n in arch.layer_groups() for lin in arch.kind_linears(k) if lin.expert)


def badam_block_params(run) -> int:  # run: finetune_doctor.run.Run
    """Trainable elements of BAdam's largest block in layer mode: one decoder layer (badam ``BlockOptimizer``
    ``infer_param_groups``: one block per ``layers.<i>.``, embeddings and lm_head not trained unless asked, which LF
    does not), or only its LoRA weights in LoRA mode (``lora_mode``, "Will only train the lora parameters")."""
    arch: ModelArch = run.arch
    if run.finetuning_type in ("lora", "oft"):
        return count_params(run).adapter // max(arch.num_layers, 1)
    return max((arch.kind_params(k) for k, _ in arch.layer_groups()), default=0)


def frozen_extra(run) -> int:  # run: finetune_doctor.run.Run
    """Elements outside the decoder (`ModelArch.extra_params`: towers, projector) that full fine-tuning leaves
    frozen. LLaMA-Factory's `_setup_full_tuning` (model/adapter.py at the main snapshot, :48-54) keeps every
    parameter whose name holds a forbidden key frozen and upcasts the rest to fp32; the forbidden keys are the
    composite model's vision keys under ``freeze_vision_tower`` and its projector keys under
    ``freeze_multi_modal_projector`` (model/model_utils/visual.py:173-193; both default true, hparams/
    finetuning_args.py:546-553). A tower of any kind (vision, audio) counts as a vision key, as LF registers them;
    parts that are neither (LLaVA-NeXT's ``image_newline``) stay counted as frozen, as before. The Qwen-VL towers
    count their merger inside the tower (readers/model/wrappers.py), which LF registers as the projector key
    (``visual.merger``, ~45 M elements at 7B): here it follows ``freeze_vision_tower``. An arch without a
    breakdown (`extra_parts` empty) follows ``freeze_vision_tower`` alone. 0 when `extra_frozen` is False."""
    arch = run.arch
    if not arch.extra_frozen or not arch.extra_params:
        return 0
    vt = bool(getattr(run, "freeze_vision_tower", True))
    proj = bool(getattr(run, "freeze_multi_modal_projector", True))
    if vt and proj:
        return int(arch.extra_params)
    if not arch.extra_parts:
        return int(arch.extra_params) if vt else 0
    frozen = 0
    for part, n in arch.extra_parts:
        if part == "projector":
            frozen += n if proj else 0
        elif part == "image_newline":
            frozen += n
        else:
            frozen += n if vt else 0
    return frozen


def count_params(run) -> ParamCounts:  # run: finetune_doctor.run.Run (not imported: avoids a cycle in typing)
    """Parameter counts for `run` (element counts, not bytes)."""
    arch: ModelArch = run.arch
    base = arch.total_params()
    largest = arch.largest_layer_params()
    emb = arch.embedding_params() + arch.lm_head_params()
    vocab_trainable = emb if run.resize_vocab else 0
    ft = run.finetuning_type
    if ft == "full":
        trainable_base = base - frozen_extra(run)
        return ParamCounts(base, trainable_base, 0, base - trainable_base, trainable_base, largest)
    if ft == "freeze":
        k = run.freeze_trainable_layers
        lo, hi = (arch.num_layers - k, arch.num_layers) if k > 0 else (0, min(-k, arch.num_layers))
        mods = set(run.freeze_trainable_modules)
        tb = 0
        for kind, n in arch.groups_in(lo, hi):
            if "all" in mods:
                tb += n * arch.kind_params(kind)
                continue
            for lin in arch.kind_linears(kind):
                group = "self_attn" if (lin.name in _ATTN_GROUP or set(lin.roles) & _ATTN_GROUP) else "mlp"
                if group in mods or lin.name in mods or _canonical(lin.name) in mods:
                    tb += n * lin.params
        tb += vocab_trainable
        return ParamCounts(base, tb, 0, base - tb, tb, largest)
    if ft in ("lora", "oft"):
        r = run.lora_rank
        adapter, routers, experts = lora_params(arch, tuple(run.lora_target), r, oft=ft == "oft",
                                                dora=run.use_dora and ft == "lora",
                                                oft_rank=getattr(run, "oft_rank", 0),
                                                oft_block_size=getattr(run, "oft_block_size", 32))
        tb = vocab_trainable
        for t in run.additional_target:
            if t in ("embed_tokens", "wte", "tok_embeddings", "word_embeddings"):
                tb += arch.embedding_params()
            elif t in ("lm_head", "output", "output_layer"):
                tb += arch.lm_head_params() or arch.embedding_params()
        kt = kt_expert_params(arch) if getattr(run, "use_kt", False) else 0
        if kt:
            # KTransformers: routed experts and their LoRA live on the CPU (kt_host_bytes counts them there)
            return ParamCounts(base, adapter - experts + tb, adapter - experts, base - tb - kt, tb, largest, routers,
                               experts, kt)
        return ParamCounts(base, adapter + tb, adapter, base - tb, tb, largest, routers, experts)
    # unknown finetuning type: treat as full so memory is not under-estimated
    return ParamCounts(base, base, 0, 0, base, largest)
