"""Defaults of the transformers configuration classes for the fields that change parameter counts.

A config.json may leave a field out; transformers then takes the class default (transformers 5.x
``models/<type>/configuration_<type>.py``; for remote-code families their own ``configuration_*.py`` on the
hub). tests/test_modelcfg.py compares these tables with the classes.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
                "sliding_window": 4096},
    "mixtral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
                "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False},
    "qwen2_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "tie_word_embeddings": False,
                  "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1},
    "qwen3": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "tie_word_embeddings": False,
              "attention_bias": False},
    "qwen3_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "tie_word_embeddings": False,
                  "attention_bias": False, "num_experts": 128, "num_experts_per_tok": 8,
                  "moe_intermediate_size": 768, "decoder_sparse_step": 1},
    "gemma": {"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "tie_word_embeddings": True,
              "attention_bias": False},
    "gemma2": {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
               "attention_bias": False, "sliding_window": 4096},
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096},
    "phi3": {"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
             "num_attention_heads": 32, "tie_word_embeddings": False},
    "glm": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
            "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "tie_word_embeddings": False,
            "attention_bias": True},
    "deepseek_v2": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "tie_word_embeddings": False, "attention_bias": False,
                    "moe_intermediate_size": 1407, "n_routed_experts": 64, "n_shared_experts": 2,
                    "first_k_dense_replace": 0, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v3": {"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
                    "num_attention_heads": 128, "tie_word_embeddings": False, "attention_bias": False,
                    "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                    "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    "cohere": {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
               "num_attention_heads": 64, "tie_word_embeddings": True, "attention_bias": False,
               "use_qk_norm": False},
    "cohere2": {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
                "num_attention_heads": 64, "head_dim": 128, "tie_word_embeddings": True, "attention_bias": False,
                "sliding_window": 4096},
    "starcoder2": {"vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
                   "num_attention_heads": 24, "num_key_value_heads": 2, "tie_word_embeddings": True,
                   "use_bias": True, "sliding_window": None},
    "falcon": {"vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
               "tie_word_embeddings": True, "bias": False, "multi_query": True, "new_decoder_architecture": False,
               "parallel_attn": True},
    "bloom": {"vocab_size": 250880, "hidden_size": 64, "n_layer": 2, "n_head": 8, "tie_word_embeddings": True},
    "gpt2": {"vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "tie_word_embeddings": True,
             "n_positions": 1024},
    "dbrx": {"vocab_size": 32000, "d_model": 2048, "n_layers": 24, "n_heads": 16, "tie_word_embeddings": False},
    "jamba": {"vocab_size": 65536, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False, "num_experts": 16,
              "num_experts_per_tok": 2, "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2,
              "expert_layer_offset": 1, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
              "mamba_conv_bias": True, "mamba_proj_bias": False},
    "llama4_text": {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "num_hidden_layers": 48,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                    "tie_word_embeddings": False, "attention_bias": False, "num_local_experts": 16,
                    "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "intermediate_size_mlp": 16384},
    "mimo_v2_flash": {"vocab_size": 152576, "hidden_size": 4096, "intermediate_size": 16384,
                      "num_hidden_layers": 48, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192,
                      "tie_word_embeddings": False, "attention_bias": False, "num_experts_per_tok": 8,
                      "moe_intermediate_size": 2048, "n_routed_experts": 256, "v_head_dim": 128},
    "olmo": {"vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False,
             "attention_bias": False},
    "glm4_moe": {"vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
                 "num_attention_heads": 96, "num_key_value_heads": 8, "tie_word_embeddings": False,
                 "attention_bias": False, "use_qk_norm": False, "num_experts_per_tok": 8,
                 "moe_intermediate_size": 1408, "n_routed_experts": 128},
    # remote-code families: defaults of their own configuration_*.py on the hub
    "internlm2": {"vocab_size": 103168, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "bias": True, "tie_word_embeddings": False},
    "baichuan": {"vocab_size": 125696, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "tie_word_embeddings": False},
    "qwen": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
             "num_attention_heads": 32, "no_bias": True, "tie_word_embeddings": False},
    "chatglm": {"padded_vocab_size": 65024, "hidden_size": 4096, "ffn_hidden_size": 13696, "num_layers": 28,
                "num_attention_heads": 32, "kv_channels": 128, "multi_query_attention": False,
                "multi_query_group_num": 1, "add_qkv_bias": False, "add_bias_linear": False, "rmsnorm": True,
                "post_layer_norm": True},
}
DEFAULTS["yi"] = DEFAULTS["llama"]
DEFAULTS["deepseek"] = DEFAULTS["llama"]
DEFAULTS["glm4"] = DEFAULTS["glm"]
# the VL text classes default to the 72B shapes; tie_word_embeddings lives on the wrapper (see _WRAPPER_TIE_DEFAULT)
DEFAULTS["qwen2_vl_text"] = {"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568,
                              "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8}
DEFAULTS["qwen2_5_vl_text"] = DEFAULTS["qwen2_vl_text"]
DEFAULTS["qwen3_vl_text"] = {k: v for k, v in DEFAULTS["qwen3"].items() if k != "tie_word_embeddings"}
DEFAULTS["qwen3_vl_moe_text"] = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
                                  "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                                  "head_dim": 128, "attention_bias": False, "num_experts": 60,
                                  "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "decoder_sparse_step": 1}



# Defaults that older transformers releases set differently: model_type -> [(first release with the values in
# DEFAULTS, the values before it)]. transformers 5.6.0 (LLaMA-Factory's test pin) DeepseekV2Config defaults
# vocab_size to 32000; 5.24.0 to 102400 (DeepSeek-V2's own vocabulary).
OLDER: dict[str, list[tuple[tuple[int, int], dict[str, Any]]]] = {
    "deepseek_v2": [((5, 24), {"vocab_size": 32000})],
}


def defaults_for(model_type: str, version: tuple[int, int] = (5, 24)) -> dict[str, Any]:
    """The class defaults of `model_type` under transformers `version` (major, minor): `DEFAULTS` with the
    `OLDER` values of every change the version predates. Empty for a type without a table."""
    base = DEFAULTS.get(model_type, {})
    changes = [old for since, old in OLDER.get(model_type, ()) if version < since]
    if not changes:
        return base
    out = dict(base)
    for old in changes:
        out.update(old)
    return out
