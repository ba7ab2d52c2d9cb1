"""Model architecture as the memory model needs it, and exact parameter counts from it.

A `ModelArch` is the normalised content of a model's ``config.json`` (readers/model/generic.py maps the field
names of every family onto it). Parameter counts are computed module by module from the shapes transformers
builds for a decoder-only model (``modeling_llama.py``: q/k/v/o projections, a gated SwiGLU MLP of gate/up/down,
RMSNorm weights, untied or tied embeddings), with the variants the families need: attention and MLP biases, a
fused qkv or gate_up (same element count), LayerNorm with bias, multi-head latent attention (DeepSeek-V2/V3),
Mixture-of-Experts MLPs (routed experts, shared experts, leading dense layers, sparse steps), gated linear
attention layers (Gated DeltaNet: Qwen3-Next, Qwen3.5), Mamba mixers (Jamba), attention sinks (gpt-oss), q/k norms
and four norms per layer (Gemma-2/3, GLM-4-0414), per-kind attention shapes (Gemma-4, MiMo-V2-Flash), fused and
renamed modules (Falcon, GPT-2's Conv1D, Phi-3), LayerNorm without bias or without parameters, learned positions.

Layers come in a few *kinds* (attention kind x dense/MoE MLP). Every per-layer quantity is computed once per kind
and multiplied by the number of layers of that kind (`layer_groups`), so nothing here costs more for a deeper
model. Parameters outside the decoder stack (vision tower, projector) are element counts in `extra_params`.

Counts are checked against ``sum(p.numel())`` of the transformers model built on the meta device
(tests/test_arch.py, tests/test_model_parity.py) and against published counts (tests/test_modelcfg.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from finetune_doctor.quant import QuantSpec

# Canonical names of the linear modules of one decoder layer. LoRA targets are matched against these and
# against the aliases below (the names each family actually uses in its modeling file).
ATTN_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")

TARGET_ALIASES: dict[str, tuple[str, ...]] = {
    # fused qkv projections
    "W_pack": ("q_proj", "k_proj", "v_proj"),            # Baichuan / Baichuan2
    "c_attn": ("q_proj", "k_proj", "v_proj"),            # Qwen(1), GPT-2
    "query_key_value": ("q_proj", "k_proj", "v_proj"),   # ChatGLM, Falcon, GPT-NeoX
    "wqkv": ("q_proj", "k_proj", "v_proj"),              # InternLM2
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),          # Phi-3
    # attention output
    "dense": ("o_proj",), "wo": ("o_proj",), "o_proj": ("o_proj",),
    # MLP
    "w1": ("gate_proj",), "w3": ("up_proj",), "w2": ("down_proj",),
    "gate_up_proj": ("gate_proj", "up_proj"),            # Phi-3, GLM
    "dense_h_to_4h": ("gate_proj", "up_proj"),           # ChatGLM
    "dense_4h_to_h": ("down_proj",),
    "feed_forward.w1": ("gate_proj",), "feed_forward.w3": ("up_proj",), "feed_forward.w2": ("down_proj",),
}
for _n in ATTN_LINEARS + MLP_LINEARS:
    TARGET_ALIASES.setdefault(_n, (_n,))

# attention kinds of `ModelArch.layer_types` (transformers' own names) that have no softmax attention
LINEAR_ATTENTION_TYPES = frozenset({"linear_attention"})
STATE_SPACE_TYPES = frozenset({"mamba"})
ACTIVE_SCOPES = ("all", "text", "no_input_embedding", "non_embedding")   # see ModelArch.active_params


# families pre-trained in bf16 even where config.json says float16 (Llama 2; Meta's model card): the one list, read by
# the postmortem (analyzers/postmortem/runctx.py) and, as the fact model.bf16_family (facts/model.py), by
# rules/fp16-on-bf16-model.yaml
BF16_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
                 "gemma3_text", "deepseek_v2", "phi3", "glm4", "chatglm", "internlm2")


@dataclass(frozen=True)
class Linear:
    """One linear module of a decoder layer: `count` copies of an `in_features`×`out_features` matrix.

    `targetable` is False for weights that are not ``nn.Linear`` modules in the transformers model (the fused 3-D
    expert tensors of transformers >= 5): LLaMA-Factory's ``find_all_linear_modules`` does not find them and
    LoRA cannot wrap them.
    """

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    count: int = 1          # experts: one entry per expert kind, count = number of experts
    expert: bool = False    # routed expert (only `num_experts_per_tok` of them see each token)
    targetable: bool = True
    role: str = ""          # canonical name (`ATTN_LINEARS`/`MLP_LINEARS`, "qkv", "gate_up") when `name` differs

    @property
    def roles(self) -> tuple[str, ...]:
        """Canonical names this module stands for: a fused qkv stands for q_proj, k_proj and v_proj."""
        r = self.role or self.name.rsplit(".", 1)[-1]
        return {"qkv": ("q_proj", "k_proj", "v_proj"), "gate_up": ("gate_proj", "up_proj")}.get(r, (r,))

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet layer shapes (transformers ``qwen3_next/modeling_qwen3_next.py`` ``Qwen3NextGatedDeltaNet``,
    ``qwen3_5/modeling_qwen3_5.py``): `num_k_heads`/`num_v_heads` heads of `k_head_dim`/`v_head_dim`, a depthwise
    causal conv of `conv_kernel` taps over q, k and v, and `split` when the input projection is four modules
    (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: Qwen3.5) instead of two (in_proj_qkvz, in_proj_ba)."""

    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int = 4
    split: bool = False

    def linears(self, h: int) -> list[Linear]:
        qk, v, nv = self.num_k_heads * self.k_head_dim, self.num_v_heads * self.v_head_dim, self.num_v_heads
        if self.split:
            ins = [Linear("in_proj_qkv", h, 2 * qk + v), Linear("in_proj_z", h, v), Linear("in_proj_b", h, nv),
                   Linear("in_proj_a", h, nv)]
        else:
            ins = [Linear("in_proj_qkvz", h, 2 * qk + 2 * v), Linear("in_proj_ba", h, 2 * nv)]
        return ins + [Linear("out_proj", v, h)]

    def other_params(self) -> int:
        """conv1d (depthwise, no bias) + dt_bias + A_log + the gated RMSNorm over one value head."""
        conv_dim = 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
        return conv_dim * self.conv_kernel + 2 * self.num_v_heads + self.v_head_dim


@dataclass(frozen=True)
class AttentionShape:
    """Softmax-attention shapes of one attention kind where they differ from the model's own (`ModelArch.
    attention_shapes`): Gemma-4's full-attention layers (``global_head_dim``, ``num_global_key_value_heads``,
    ``attention_k_eq_v``: no v_proj), MiMo-V2-Flash's sliding layers (``swa_*`` fields, sinks)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    shared_kv: bool = False     # values are the keys (Gemma-4 attention_k_eq_v): no v_proj module
    sinks: bool = False         # one learned sink logit per head


@dataclass(frozen=True)
class MambaMixer:
    """Mamba (selective state-space) mixer shapes (transformers ``jamba/modeling_jamba.py`` ``JambaMambaMixer``):
    inner width ``mamba_expand * hidden``, state `d_state`, depthwise conv of `d_conv` taps, `dt_rank`, biases on
    the conv (`conv_bias`) and on in/out projections (`proj_bias`), and `inner_norms` (RMSNorms over dt, B, C)."""

    d_inner: int
    d_state: int
    d_conv: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False

    def linears(self, h: int) -> list[Linear]:
        di, b = self.d_inner, self.proj_bias
        return [Linear("in_proj", h, 2 * di, b), Linear("x_proj", di, self.dt_rank + 2 * self.d_state),
                Linear("dt_proj", self.dt_rank, di, True), Linear("out_proj", di, h, b)]

    def other_params(self) -> int:
        """conv1d (+bias) + A_log [d_inner, d_state] + D [d_inner] + the dt/B/C norms."""
        di = self.d_inner
        n = di * self.d_conv + (di if self.conv_bias else 0) + di * self.d_state + di
        return n + ((self.dt_rank + 2 * self.d_state) if self.inner_norms else 0)


@dataclass(frozen=True)
class ExactCounts:
    """What the transformers model built on the meta device says (readers/model/meta.py): `total` parameters
    (elements, tied weights once), `vision` (vision tower + projector), `linears` every ``*Linear`` module as
    ``(qualified name, in_features, out_features)``, `lora_all` what LLaMA-Factory's ``find_all_linear_modules``
    returns for ``lora_target: all``, `lora_all_modules` the qualified names LoRA then wraps, `experts` the
    routed-expert parameter layout as ``(qualified name, shape)`` of one layer, `source` the transformers version."""

    total: int
    vision: int = 0
    linears: tuple[tuple[str, int, int], ...] = ()
    lora_all: tuple[str, ...] = ()
    lora_all_modules: tuple[str, ...] = ()
    experts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    composite: bool = False
    forbidden: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class ModelArch:
    """Shapes of a decoder-only transformer. Sizes are element counts; `dtype` is the checkpoint dtype.

    `source` names where the numbers came from (a config.json path, the HF cache, or the catalog entry's
    upstream config.json address) and `source_kind` which step of the search found it: ``local``,
    ``model-config``, ``hf-cache``, ``modelscope-cache``, ``openmind-cache``, ``catalog`` or ``hub``.
    """

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int | None = None
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    gated_mlp: bool = True
    # norm modules: rmsnorm (a weight), layernorm (weight + bias), layernorm_nobias (Cohere, DBRX: weight only),
    # none (OLMo-1's parameter-free LayerNorm)
    norm: str = "rmsnorm"
    qk_norm: bool = False               # Qwen3 / Gemma3 per-head q/k norms
    qk_norm_scope: str = "head"         # head: one head_dim vector each; all: heads*hd and kv*hd (OLMo-2, Cohere)
    layer_norms: int = 2                # norm modules per decoder layer (Gemma-2/3, GLM-4-0414: 4; Cohere: 1)
    final_norm: bool = True             # a norm after the last layer (ChatGLM post_layer_norm=false drops it)
    positional: str = "rope"            # rope | alibi (Baichuan-13B: a [heads, seq, seq] bias, no rotary) | learned
    learned_positions: int = 0          # rows of a learned absolute position table (GPT-2 ``wpe``)
    embedding_norm: bool = False        # a norm right after the token embedding (BLOOM word_embeddings_layernorm)
    # transformers module names where they are not the canonical ones, as (role, name) pairs; the roles "qkv" and
    # "gate_up" make q/k/v (gate/up) one fused module (Falcon query_key_value, GPT-2 c_attn, Phi-3 gate_up_proj)
    module_names: tuple[tuple[str, str], ...] = ()
    linear_modules: bool = True         # the projections are nn.Linear (GPT-2's are Conv1D: LoRA `all` skips them)
    attention_shapes: tuple[tuple[str, AttentionShape], ...] = ()   # per attention kind, where they differ
    mamba: MambaMixer | None = None     # layers of kind "mamba" (Jamba)
    sliding_window: int | None = None   # tokens, when some or all layers use windowed attention
    dtype: str = "bfloat16"             # checkpoint dtype (config.json torch_dtype/dtype)
    max_position_embeddings: int | None = None
    # per-layer attention kinds, transformers' names ("full_attention", "sliding_attention", "linear_attention");
    # empty: every layer is softmax attention (windowed everywhere when `sliding_window` is set)
    layer_types: tuple[str, ...] = ()
    attn_output_gate: bool = False      # Qwen3-Next / Qwen3.5: q_proj also emits a per-head output gate
    attention_sinks: bool = False       # gpt-oss: one learned sink logit per head and layer
    linear_attention: LinearAttention | None = None
    # Mixture of experts
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0   # total width of the shared expert(s)
    shared_expert_gate: bool = False           # Qwen2-MoE: a 1-output sigmoid gate on the shared expert
    first_k_dense: int = 0                     # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    dense_layers: tuple[int, ...] = ()         # other dense layers (Qwen mlp_only_layers, sparse steps)
    router_bias: bool = False                  # gpt-oss router and experts carry biases
    experts_fused: bool = False                # experts are 3-D tensors, not nn.Linear (transformers >= 5)
    router_linear: bool = True                 # the router is an nn.Linear named "gate" (transformers 4.x)
    router_params: int = 0                     # router elements beyond num_experts x hidden (+ bias) per MoE layer
    dense_mlp_in_moe: bool = False             # MoE layers also run the dense MLP (Gemma-4 enable_moe_block)
    moe_norms: int = 0                         # extra norm modules of a MoE layer (Gemma-4: 3)
    # DeepSeek-V2 multi-head latent attention
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # parameters outside the decoder stack that the shapes above do not describe (vision tower, projector)
    extra_params: int = 0
    extra_frozen: bool = True
    extra_parts: tuple[tuple[str, int], ...] = ()   # breakdown of extra_params, e.g. (("vision_tower", n), ...)
    quant: QuantSpec | None = None             # the checkpoint's quantization_config; None: not quantized
    exact: ExactCounts | None = None           # counts of the meta-device build, when one ran
    source: str = ""
    source_kind: str = ""
    published_params: float | None = None      # billions, as the model card states (catalog only)
    notes: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    # ---- derived shapes --------------------------------------------------------------------------------
    @property
    def hd(self) -> int:
        """Head dimension (elements)."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def loss_upcasts_logits(self) -> bool:
        """Whether the model's own loss casts the logits to fp32 before the cross-entropy.

        transformers' causal-LM heads do (``ForCausalLMLoss``: ``logits.float()``; before 4.45 each model's forward).
        Qwen(1)'s remote code does not: QWenLMHeadModel.forward takes a contiguous copy of the shifted logits and
        calls CrossEntropyLoss on it in their own dtype (modeling_qwen.py of Qwen/Qwen-7B). Only autocast then
        brings fp32 in; without it (DeepSpeed fp16/bf16) the loss runs in half precision. Baichuan2's remote code
        does the same (BaichuanForCausalLM.forward: ``logits = self.lm_head(hidden_states)``, a contiguous copy of
        the shifted logits, a z-loss over their row maxima and CrossEntropyLoss, no ``.float()``; read in the
        ports of that forward in the code index, e.g. ipex-llm's baichuan2 forward, not in the hub file itself).
        Baichuan(1)'s forward, also ``model_type: baichuan``, predates transformers' own upcast (llama gained
        ``logits.float()`` in 4.31; Baichuan-7B came out on 4.29) and is taken to be the same (not read).
        """
        return self.model_type not in ("qwen", "baichuan")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def is_dense_layer(self, i: int) -> bool:
        return (not self.is_moe) or i < self.first_k_dense or i in self._dense_set()

    def _dense_set(self) -> frozenset[int]:
        if "dense" not in self._memo:
            self._memo["dense"] = frozenset(self.dense_layers)
        return self._memo["dense"]

    def attention_kind(self, i: int) -> str:
        """``linear`` for a linear-attention layer, ``mamba`` for a state-space one, ``sliding`` for a windowed
        one, else ``full``."""
        if self.layer_types and i < len(self.layer_types):
            t = self.layer_types[i]
            if t in LINEAR_ATTENTION_TYPES:
                return "linear"
            if t in STATE_SPACE_TYPES:
                return "mamba"
            return "sliding" if "sliding" in t else "full"
        return "sliding" if self.sliding_window else "full"

    def mlp_kind(self, i: int) -> str:
        """``dense`` or ``moe`` for decoder layer `i`."""
        return "dense" if self.is_dense_layer(i) else "moe"

    def layer_groups(self) -> tuple[tuple[tuple[str, str], int], ...]:
        """Layer kinds and how many layers of each: ``(((attention_kind, mlp_kind), count), ...)``, in order of
        first appearance. Built from counts, not by walking the layers (except an explicit `layer_types` list,
        which is as long as the config that holds it)."""
        if "groups" in self._memo:
            return self._memo["groups"]
        L = self.num_layers
        dense = {i for i in self._dense_set() if 0 <= i < L} | set(range(min(self.first_k_dense, L)))
        counts: dict[tuple[str, str], int] = {}
        if self.layer_types:
            for i in range(L):
                k = (self.attention_kind(i), "dense" if (not self.is_moe or i in dense) else "moe")
                counts[k] = counts.get(k, 0) + 1
        else:
            a = self.attention_kind(0)
            n_dense = L if not self.is_moe else len(dense)
            for k, n in (((a, "dense"), n_dense), ((a, "moe"), L - n_dense)):
                if n:
                    counts[k] = n
        groups = tuple(counts.items())
        self._memo["groups"] = groups
        return groups

    def groups_in(self, start: int, stop: int) -> tuple[tuple[tuple[str, str], int], ...]:
        """`layer_groups` restricted to decoder layers ``start <= i < stop`` (clipped to the stack): the kinds and
        counts of, say, the last k layers a freeze run trains. From counts unless an explicit `layer_types` list
        (as long as the config that holds it) must be walked."""
        lo, hi = max(0, start), min(self.num_layers, stop)
        if hi <= lo:
            return ()
        if lo == 0 and hi == self.num_layers:
            return self.layer_groups()
        if self.layer_types:
            counts: dict[tuple[str, str], int] = {}
            for i in range(lo, hi):
                counts[self._kind(i)] = counts.get(self._kind(i), 0) + 1
            return tuple(counts.items())
        a = self.attention_kind(0)
        if not self.is_moe:
            return (((a, "dense"), hi - lo),)
        dense = {i for i in self._dense_set() if lo <= i < hi} | set(range(lo, min(self.first_k_dense, hi)))
        return tuple((k, n) for k, n in (((a, "dense"), len(dense)), ((a, "moe"), hi - lo - len(dense))) if n)

    def kind_linear_params(self, kind: tuple[str, str]) -> int:
        """Elements of the linear weights (and biases) of one layer of `kind`: what a per-layer weight cast
        copies."""
        key = ("linparams", kind)
        if key not in self._memo:
            self._memo[key] = sum(lin.params for lin in self.kind_linears(kind))
        return self._memo[key]

    def _kind(self, i: int) -> tuple[str, str]:
        return self.attention_kind(i), self.mlp_kind(i)

    def norm_params(self, width: int | None = None) -> int:
        """Elements of one norm module over `width` (default: hidden size), by `norm`."""
        w = self.hidden_size if width is None else width
        return {"layernorm": 2 * w, "none": 0}.get(self.norm, w)

    def _names(self) -> dict[str, str]:
        if "names" not in self._memo:
            self._memo["names"] = dict(self.module_names)
        return self._memo["names"]

    def attention_shape(self, kind: str = "full") -> AttentionShape:
        """Heads, key/value heads and head widths of the softmax attention of layers of `kind`."""
        for k, shape in self.attention_shapes:
            if k == kind:
                return shape
        return AttentionShape(self.num_heads, self.num_kv_heads, self.hd, None, False, self.attention_sinks)

    def attention_linears(self, kind: str = "full") -> list[Linear]:
        h = self.hidden_size
        if kind == "linear" and self.linear_attention is not None:
            return self.linear_attention.linears(h)
        if kind == "mamba" and self.mamba is not None:
            return self.mamba.linears(h)
        if self.mla:
            hd = self.hd
            qk_head = (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
            out: list[Linear] = []
            if self.q_lora_rank:
                out += [Linear("q_a_proj", h, self.q_lora_rank),
                        Linear("q_b_proj", self.q_lora_rank, self.num_heads * qk_head)]
            else:
                out.append(Linear("q_proj", h, self.num_heads * qk_head))
            out += [
                Linear("kv_a_proj_with_mqa", h, self.kv_lora_rank + (self.qk_rope_head_dim or 0)),
                Linear("kv_b_proj", self.kv_lora_rank,
                       self.num_heads * ((self.qk_nope_head_dim or 0) + (self.v_head_dim or hd))),
                Linear("o_proj", self.num_heads * (self.v_head_dim or hd), h, self.o_bias),
            ]
            return out
        a = self.attention_shape(kind)
        q_out = a.num_heads * a.head_dim * (2 if self.attn_output_gate else 1)
        k_out = a.num_kv_heads * a.head_dim
        v_out = 0 if a.shared_kv else a.num_kv_heads * (a.v_head_dim or a.head_dim)
        o_in = a.num_heads * (a.v_head_dim or a.head_dim)
        names, t, b = self._names(), self.linear_modules, self.qkv_bias
        if "qkv" in names:
            qkv = [Linear(names["qkv"], h, q_out + k_out + v_out, b, targetable=t, role="qkv")]
        else:
            qkv = [Linear("q_proj", h, q_out, b, targetable=t), Linear("k_proj", h, k_out, b, targetable=t)]
            if v_out:
                qkv.append(Linear("v_proj", h, v_out, b, targetable=t))
        o = names.get("o_proj", "o_proj")
        return qkv + [Linear(o, o_in, h, self.o_bias, targetable=t, role="o_proj" if o != "o_proj" else "")]

    def _mlp(self, width: int, count: int = 1, expert: bool = False, prefix: str = "",
             bias: bool | None = None) -> list[Linear]:
        h = self.hidden_size
        b = self.mlp_bias if bias is None else bias
        t = not (expert and self.experts_fused) and self.linear_modules
        names = {} if (expert or prefix) else self._names()

        def lin(role: str, i: int, o: int) -> Linear:
            n = names.get(role, role)
            return Linear(prefix + n, i, o, b, count, expert, t, role if n != role else "")

        if self.gated_mlp and "gate_up" in names:
            return [lin("gate_up", h, 2 * width), lin("down_proj", width, h)]
        if self.gated_mlp:
            return [lin("gate_proj", h, width), lin("up_proj", h, width), lin("down_proj", width, h)]
        return [lin("up_proj", h, width), lin("down_proj", width, h)]

    def _mlp_linears_kind(self, mlp: str) -> list[Linear]:
        if mlp == "dense":
            return self._mlp(self.intermediate_size)
        out = self._mlp(self.moe_intermediate_size or self.intermediate_size, self.num_experts, True, "experts.",
                        bias=self.mlp_bias or self.router_bias)
        if self.dense_mlp_in_moe:
            out += self._mlp(self.intermediate_size)
        if self.shared_expert_intermediate_size:
            out += self._mlp(self.shared_expert_intermediate_size, 1, False, "shared_experts.")
        if self.shared_expert_gate:
            out.append(Linear("shared_expert_gate", self.hidden_size, 1))
        return out

    def _kind_linears(self, kind: tuple[str, str]) -> tuple[tuple[Linear, ...], tuple[Linear, ...]]:
        key = ("lin", kind)
        if key not in self._memo:
            self._memo[key] = (tuple(self.attention_linears(kind[0])), tuple(self._mlp_linears_kind(kind[1])))
        return self._memo[key]

    def kind_linears(self, kind: tuple[str, str]) -> list[Linear]:
        """Linear modules of one layer of `kind` (see `layer_groups`)."""
        att, mlp = self._kind_linears(kind)
        return list(att + mlp)

    def layer_linears(self, layer: int) -> list[Linear]:
        return self.kind_linears(self._kind(layer))

    def kind_other_params(self, kind: tuple[str, str]) -> int:
        """Non-linear parameters of one layer of `kind`: norms, router, MLA norms, q/k norms, sinks, conv."""
        h = self.hidden_size
        n = self.layer_norms * self.norm_params()
        if kind[0] == "linear" and self.linear_attention is not None:
            n += self.linear_attention.other_params()
        elif kind[0] == "mamba" and self.mamba is not None:
            n += self.mamba.other_params()
        else:
            a = self.attention_shape(kind[0])
            if self.qk_norm and self.qk_norm_scope == "all":
                n += self.norm_params(a.num_heads * a.head_dim) + self.norm_params(a.num_kv_heads * a.head_dim)
            elif self.qk_norm:
                n += 2 * self.norm_params(a.head_dim)
            if self.mla:
                n += self.norm_params(self.kv_lora_rank) + (self.norm_params(self.q_lora_rank)
                                                            if self.q_lora_rank else 0)
            if a.sinks:
                n += a.num_heads
        if kind[1] == "moe":
            n += self.num_experts * h + (self.num_experts if self.router_bias else 0) + self.router_params
            n += self.moe_norms * self.norm_params()
        return n

    def layer_other_params(self, layer: int) -> int:
        return self.kind_other_params(self._kind(layer))

    # ---- parameter counts ------------------------------------------------------------------------------
    def embedding_params(self) -> int:
        """Token embedding (elements), with a learned position table and an embedding norm where the model has one."""
        return (self.vocab_size + self.learned_positions) * self.hidden_size + (
            self.norm_params() if self.embedding_norm else 0)

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def kind_params(self, kind: tuple[str, str]) -> int:
        key = ("params", kind)
        if key not in self._memo:
            self._memo[key] = sum(lin.params for lin in self.kind_linears(kind)) + self.kind_other_params(kind)
        return self._memo[key]

    def layer_params(self, layer: int) -> int:
        return self.kind_params(self._kind(layer))

    def layers_params(self) -> int:
        """All decoder layers together (elements)."""
        return sum(n * self.kind_params(k) for k, n in self.layer_groups())

    def final_norm_params(self) -> int:
        return self.norm_params() if self.final_norm else 0

    def total_params(self) -> int:
        """All parameters, counted once (tied embeddings once), including `extra_params`; the meta-device
        build's count when one ran (`exact`)."""
        if self.exact is not None:
            return self.exact.total
        return (self.embedding_params() + self.lm_head_params() + self.final_norm_params() + self.extra_params
                + self.layers_params())

    def active_params(self, scope: str = "all") -> int:
        """Parameters one token passes through (MoE: `num_experts_per_tok` routed experts), by `scope`:

        * ``all``: everything, embeddings and vision/audio towers included;
        * ``text``: without the towers and projectors (`extra_params`): what the "A3B" / "A22B" in a multimodal
          MoE model's name counts (Qwen3-VL-235B-A22B: 22.2 B text-only, 22.8 B with the vision tower);
        * ``no_input_embedding``: without the input token embedding, the output head still counted: the gpt-oss
          model card's "active parameters" (arXiv:2508.10925 section 2, Table 1: 5.13 B for gpt-oss-120b, the
          unembedding counted as active, the embedding not);
        * ``non_embedding``: the text model without the input embedding and an untied output head (the
          "Non-Embedding" convention of the Qwen cards, `non_embedding_params`).

        Raises ValueError for another `scope`.
        """
        if scope not in ACTIVE_SCOPES:
            raise ValueError(f"active_params scope must be one of {', '.join(ACTIVE_SCOPES)}, not {scope!r}")
        total = self.total_params()
        if scope in ("text", "non_embedding"):
            total -= self.extra_params if self.exact is None else self.exact.vision
        if scope in ("no_input_embedding", "non_embedding"):
            total -= self.vocab_size * self.hidden_size
        if scope == "non_embedding":
            total -= self.lm_head_params()
        if not self.is_moe:
            return total
        for k, n in self.layer_groups():
            for lin in self._kind_linears(k)[1]:
                if lin.expert:
                    total -= n * (lin.params - lin.params // lin.count * self.num_experts_per_tok)
        return total

    def largest_layer_params(self) -> int:
        """Largest single parameter-holding module (elements): embeddings or one decoder layer."""
        return max([self.embedding_params(), self.lm_head_params()]
                   + [self.kind_params(k) for k, _ in self.layer_groups()])

    def with_layers(self, n: int) -> "ModelArch":
        return replace(self, num_layers=n, layer_types=self.layer_types[:n] if self.layer_types else (), exact=None)

    def non_embedding_params(self) -> int:
        """`total_params` minus input embeddings and an untied lm_head (the Qwen model cards' "Non-Embedding")."""
        return self.total_params() - self.embedding_params() - self.lm_head_params()

    def breakdown(self) -> dict[str, int]:
        """Parameter counts by part (elements): embedding, lm_head, layers, final_norm, and each `extra_parts`."""
        out = {"embedding": self.embedding_params(), "lm_head": self.lm_head_params(),
               "layers": self.layers_params(), "final_norm": self.final_norm_params()}
        if self.extra_parts:
            out.update(dict(self.extra_parts))
        elif self.extra_params:
            out["extra"] = self.extra_params
        return out
