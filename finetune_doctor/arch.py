"""Model architecture as the memory model needs it, and exact parameter counts from it.

A `ModelArch` is the normalised content of a model's ``config.json`` (readers/modelcfg.py maps each
``model_type``'s field names onto it). Parameter counts are computed module by module from the shapes that
transformers builds for a decoder-only LLaMA-style model (``modeling_llama.py``: q/k/v/o projections, a gated
SwiGLU MLP of gate/up/down, RMSNorm weights, untied or tied embeddings), with the variants the catalog needs:
attention biases (Qwen1/1.5/2/2.5), a fused qkv (ChatGLM, InternLM2, Baichuan, Phi-3 — same element count),
LayerNorm with bias, Mixture-of-Experts MLPs with optional shared experts and leading dense layers
(Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3), DeepSeek-V2's multi-head latent attention, and the four
norms per layer of Gemma-2/3 and GLM-4-0414.

Vision towers of multimodal checkpoints are not decoder layers: their parameter counts come from the
``*_vision_params`` functions at the end of this module and land in `ModelArch.extra_params`.

Every count here was checked against ``sum(p.numel())`` of the transformers model built on the meta device
(tests/test_arch.py) and against the published counts of the bundled catalog (tests/test_modelcfg.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

# Canonical names of the linear modules of one decoder layer. LoRA targets are matched against these and
# against the aliases below (the names each family actually uses in its modeling file).
ATTN_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")

TARGET_ALIASES: dict[str, tuple[str, ...]] = {
    # fused qkv projections
    "W_pack": ("q_proj", "k_proj", "v_proj"),            # Baichuan / Baichuan2
    "c_attn": ("q_proj", "k_proj", "v_proj"),            # Qwen(1)
    "query_key_value": ("q_proj", "k_proj", "v_proj"),   # ChatGLM, Falcon
    "wqkv": ("q_proj", "k_proj", "v_proj"),              # InternLM2
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),          # Phi-3
    # attention output
    "dense": ("o_proj",), "wo": ("o_proj",), "o_proj": ("o_proj",),
    # MLP
    "w1": ("gate_proj",), "w3": ("up_proj",), "w2": ("down_proj",),
    "gate_up_proj": ("gate_proj", "up_proj"),            # Phi-3
    "dense_h_to_4h": ("gate_proj", "up_proj"),           # ChatGLM
    "dense_4h_to_h": ("down_proj",),
    "feed_forward.w1": ("gate_proj",), "feed_forward.w3": ("up_proj",), "feed_forward.w2": ("down_proj",),
}
for _n in ATTN_LINEARS + MLP_LINEARS:
    TARGET_ALIASES.setdefault(_n, (_n,))


@dataclass(frozen=True)
class Linear:
    """One linear module of a decoder layer: `count` copies of an `in_features`×`out_features` matrix."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    count: int = 1          # experts: one entry per expert kind, count = number of experts
    expert: bool = False    # routed expert (only `num_experts_per_tok` of them see each token)

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


@dataclass(frozen=True)
class ModelArch:
    """Shapes of a decoder-only transformer. Sizes are element counts; `dtype` is the checkpoint dtype.

    `source` names where the numbers came from (a config.json path, the HF cache, or the catalog entry's
    upstream config.json address).
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
    norm: str = "rmsnorm"               # rmsnorm | layernorm
    qk_norm: bool = False               # Qwen3 / Gemma3 per-head q/k norms
    layer_norms: int = 2                # norm modules per decoder layer (Gemma-2/3, GLM-4-0414: 4)
    final_norm: bool = True             # a norm after the last layer (ChatGLM post_layer_norm=false drops it)
    positional: str = "rope"            # rope | alibi (Baichuan-13B: a [heads, seq, seq] bias, no rotary)
    sliding_window: int | None = None   # tokens, when some or all layers use windowed attention
    dtype: str = "bfloat16"             # checkpoint dtype (config.json torch_dtype/dtype)
    max_position_embeddings: int | None = None
    # Mixture of experts
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0   # total width of the shared expert(s)
    shared_expert_gate: bool = False           # Qwen2-MoE: a 1-output sigmoid gate on the shared expert
    first_k_dense: int = 0                     # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    dense_layers: tuple[int, ...] = ()         # other dense layers (Qwen mlp_only_layers)
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
    source: str = ""
    published_params: float | None = None      # billions, as the model card states (catalog only)
    notes: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
        brings fp32 in; without it (DeepSpeed fp16/bf16) the loss runs in half precision.
        """
        return self.model_type != "qwen"

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def is_dense_layer(self, i: int) -> bool:
        return (not self.is_moe) or i < self.first_k_dense or i in self.dense_layers

    def attention_linears(self) -> list[Linear]:
        h, hd = self.hidden_size, self.hd
        if self.mla:
            qk_head = (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
            out: list[Linear] = []
            if self.q_lora_rank:
                out += [Linear("q_a_proj", h, self.q_lora_rank), Linear("q_b_proj", self.q_lora_rank, self.num_heads * qk_head)]
            else:
                out.append(Linear("q_proj", h, self.num_heads * qk_head))
            out += [
                Linear("kv_a_proj_with_mqa", h, self.kv_lora_rank + (self.qk_rope_head_dim or 0)),
                Linear("kv_b_proj", self.kv_lora_rank,
                       self.num_heads * ((self.qk_nope_head_dim or 0) + (self.v_head_dim or hd))),
                Linear("o_proj", self.num_heads * (self.v_head_dim or hd), h),
            ]
            return out
        return [
            Linear("q_proj", h, self.num_heads * hd, self.qkv_bias),
            Linear("k_proj", h, self.num_kv_heads * hd, self.qkv_bias),
            Linear("v_proj", h, self.num_kv_heads * hd, self.qkv_bias),
            Linear("o_proj", self.num_heads * hd, h, self.o_bias),
        ]

    def _mlp(self, width: int, count: int = 1, expert: bool = False, prefix: str = "") -> list[Linear]:
        h = self.hidden_size
        if self.gated_mlp:
            return [Linear(prefix + "gate_proj", h, width, self.mlp_bias, count, expert),
                    Linear(prefix + "up_proj", h, width, self.mlp_bias, count, expert),
                    Linear(prefix + "down_proj", width, h, self.mlp_bias, count, expert)]
        return [Linear(prefix + "up_proj", h, width, self.mlp_bias, count, expert),
                Linear(prefix + "down_proj", width, h, self.mlp_bias, count, expert)]

    def mlp_linears(self, layer: int) -> list[Linear]:
        if self.is_dense_layer(layer):
            return self._mlp(self.intermediate_size)
        out = self._mlp(self.moe_intermediate_size or self.intermediate_size, self.num_experts, True, "experts.")
        if self.shared_expert_intermediate_size:
            out += self._mlp(self.shared_expert_intermediate_size, 1, False, "shared_experts.")
        return out

    def layer_linears(self, layer: int) -> list[Linear]:
        return self.attention_linears() + self.mlp_linears(layer)

    def layer_other_params(self, layer: int) -> int:
        """Non-linear parameters of one layer: norms, router, MLA norms, q/k norms."""
        h = self.hidden_size
        per_norm = h * (2 if self.norm == "layernorm" else 1)
        n = self.layer_norms * per_norm
        if self.qk_norm:
            n += 2 * self.hd
        if self.mla:
            n += self.kv_lora_rank + (self.q_lora_rank or 0)
        if not self.is_dense_layer(layer):
            n += self.num_experts * h  # router
            if self.shared_expert_gate:
                n += h
        return n

    # ---- parameter counts ------------------------------------------------------------------------------
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def layer_params(self, layer: int) -> int:
        return sum(lin.params for lin in self.layer_linears(layer)) + self.layer_other_params(layer)

    def final_norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm == "layernorm" else 1) if self.final_norm else 0

    def total_params(self) -> int:
        """All parameters, counted once (tied embeddings once), including `extra_params`."""
        return (self.embedding_params() + self.lm_head_params() + self.final_norm_params() + self.extra_params
                + sum(self.layer_params(i) for i in range(self.num_layers)))

    def active_params(self) -> int:
        """Parameters one token passes through (MoE: `num_experts_per_tok` routed experts)."""
        if not self.is_moe:
            return self.total_params()
        total = self.total_params()
        for i in range(self.num_layers):
            for lin in self.mlp_linears(i):
                if lin.expert:
                    total -= lin.params - lin.params // lin.count * self.num_experts_per_tok
        return total

    def largest_layer_params(self) -> int:
        """Largest single parameter-holding module (elements): embeddings or one decoder layer."""
        return max([self.embedding_params(), self.lm_head_params()]
                   + [self.layer_params(i) for i in range(self.num_layers)])

    def with_layers(self, n: int) -> "ModelArch":
        return replace(self, num_layers=n)

    def non_embedding_params(self) -> int:
        """`total_params` minus input embeddings and an untied lm_head (the Qwen model cards' "Non-Embedding")."""
        return self.total_params() - self.embedding_params() - self.lm_head_params()

    def breakdown(self) -> dict[str, int]:
        """Parameter counts by part (elements): embedding, lm_head, layers, final_norm, and each `extra_parts`."""
        out = {"embedding": self.embedding_params(), "lm_head": self.lm_head_params(),
               "layers": sum(self.layer_params(i) for i in range(self.num_layers)),
               "final_norm": self.final_norm_params()}
        if self.extra_parts:
            out.update(dict(self.extra_parts))
        elif self.extra_params:
            out["extra"] = self.extra_params
        return out


# ---- vision towers of multimodal checkpoints -----------------------------------------------------------
# Each function takes the checkpoint's ``vision_config`` dict (config.json field names) and returns element
# counts. Shapes follow the transformers modules named in each docstring; tests/test_arch.py checks every
# function against ``sum(p.numel())`` of those modules built on the meta device.

def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def siglip_vision_params(vc: dict[str, Any]) -> int:
    """SigLIP vision encoder (transformers ``siglip/modeling_siglip.py`` ``SiglipVisionTransformer``).

    Patch conv with bias, learned position embeddings for ``(image_size // patch_size)**2`` patches, pre-LN
    encoder layers (LayerNorm with bias, q/k/v/out with bias, fc1/fc2 MLP with bias), a post LayerNorm and,
    when ``vision_use_head`` (default true), the attention-pooling head. Gemma-3 sets ``vision_use_head: false``.
    """
    e, i = int(vc.get("hidden_size", 768)), int(vc.get("intermediate_size", 3072))
    layers = int(vc.get("num_hidden_layers", 12))
    c, p, size = int(vc.get("num_channels", 3)), int(vc.get("patch_size", 16)), int(vc.get("image_size", 224))
    n = c * p * p * e + e + (size // p) ** 2 * e
    per_layer = 2 * 2 * e + 4 * _linear(e, e) + _linear(e, i) + _linear(i, e)
    n += layers * per_layer + 2 * e
    if vc.get("vision_use_head", True):
        n += e + _linear(e, 3 * e) + _linear(e, e) + 2 * e + _linear(e, i) + _linear(i, e)
    return n


def qwen2_vl_vision_params(vc: dict[str, Any]) -> int:
    """Qwen2-VL ViT with its patch merger (transformers ``qwen2_vl/modeling_qwen2_vl.py``
    ``Qwen2VisionTransformerPretrainedModel``).

    ``embed_dim`` is the ViT width and ``hidden_size`` the language model width the merger projects to.
    Conv3d patch embedding without bias over ``temporal_patch_size x patch_size^2`` pixels; blocks of
    LayerNorm(+bias), fused qkv with bias, proj with bias, fc1/fc2 MLP (``mlp_ratio``) with bias; merger =
    LayerNorm(embed_dim) then Linear(m^2 E, m^2 E) and Linear(m^2 E, hidden_size), both with bias.
    """
    e = int(vc.get("embed_dim", 1280))
    out = int(vc.get("hidden_size", 3584))
    r = int(round(float(vc.get("mlp_ratio", 4)) * e))
    depth = int(vc.get("depth", 32))
    c = int(vc.get("in_channels", vc.get("in_chans", 3)))
    p, t = int(vc.get("patch_size", 14)), int(vc.get("temporal_patch_size", 2))
    m2 = int(vc.get("spatial_merge_size", 2)) ** 2
    n = c * t * p * p * e
    n += depth * (2 * 2 * e + _linear(e, 3 * e) + _linear(e, e) + _linear(e, r) + _linear(r, e))
    n += 2 * e + _linear(m2 * e, m2 * e) + _linear(m2 * e, out)
    return n


def qwen2_5_vl_vision_params(vc: dict[str, Any]) -> int:
    """Qwen2.5-VL window-attention ViT with merger (transformers ``qwen2_5_vl/modeling_qwen2_5_vl.py``).

    Same layout as Qwen2-VL but with RMSNorm (weight only), a gated SiLU MLP of gate/up/down with bias and
    width ``intermediate_size``; the ViT width is ``hidden_size`` and the merger output ``out_hidden_size``.
    """
    e, i = int(vc.get("hidden_size", 1280)), int(vc.get("intermediate_size", 3420))
    out = int(vc.get("out_hidden_size", 3584))
    depth = int(vc.get("depth", 32))
    c = int(vc.get("in_channels", vc.get("in_chans", 3)))
    p, t = int(vc.get("patch_size", 14)), int(vc.get("temporal_patch_size", 2))
    m2 = int(vc.get("spatial_merge_size", 2)) ** 2
    n = c * t * p * p * e
    n += depth * (2 * e + _linear(e, 3 * e) + _linear(e, e) + 2 * _linear(e, i) + _linear(i, e))
    n += e + _linear(m2 * e, m2 * e) + _linear(m2 * e, out)
    return n


def qwen3_vl_vision_params(vc: dict[str, Any]) -> int:
    """Qwen3-VL ViT with merger and DeepStack mergers (transformers ``qwen3_vl/modeling_qwen3_vl.py``).

    Conv3d patch embedding with bias, learned position embeddings (``num_position_embeddings``), blocks of
    LayerNorm(+bias), qkv/proj with bias and a fc1/fc2 MLP with bias; the final merger normalises the ViT
    width before the 2x2 shuffle, each of the ``len(deepstack_visual_indexes)`` DeepStack mergers normalises
    after it (LayerNorm over m^2 E).
    """
    e, i = int(vc.get("hidden_size", 1152)), int(vc.get("intermediate_size", 4304))
    out = int(vc.get("out_hidden_size", 3584))
    depth = int(vc.get("depth", 27))
    c = int(vc.get("in_channels", 3))
    p, t = int(vc.get("patch_size", 16)), int(vc.get("temporal_patch_size", 2))
    m2 = int(vc.get("spatial_merge_size", 2)) ** 2
    npos = int(vc.get("num_position_embeddings", 2304))
    n = c * t * p * p * e + e + npos * e
    n += depth * (2 * 2 * e + _linear(e, 3 * e) + _linear(e, e) + _linear(e, i) + _linear(i, e))
    mlp = _linear(m2 * e, m2 * e) + _linear(m2 * e, out)
    n += 2 * e + mlp
    n += len(vc.get("deepstack_visual_indexes", [8, 16, 24]) or []) * (2 * m2 * e + mlp)
    return n
