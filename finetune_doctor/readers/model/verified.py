"""Model types on which the generic decoder is verified: its total and LoRA (``all``, r=8) counts equal the
transformers meta-device build within 0.5 % for the default config and two resized ones
(tests/test_model_parity.py, run with transformers 5.24.0). ``load_arch(exact="auto")`` builds every other
type on the meta device when torch and transformers are installed."""

GENERIC_VERIFIED: frozenset[str] = frozenset("""
    aria_text axk1 bitnet cohere cohere2 cohere2_moe cwm deepseek_v2 deepseek_v3 diffllama ernie4_5 exaone
    exaone4 exaone_moe flex_olmo flint gemma gemma2 gemma3 gemma3_text gpt_oss granite granite_swa granitemoe
    granitemoe_swa granitemoeshared helium hy_v3 hyperclovax internlm3 iquestcoder kolibri1 llama mellum
    minicpm3 minimax_m2 ministral3 mistral mistral4 mixtral olmo olmo2 olmo3 olmoe phimoe qwen2 qwen2_5_vl
    qwen2_moe qwen2_vl qwen3 qwen3_5_moe_text qwen3_5_text qwen3_moe qwen3_next qwen3_vl qwen3_vl_moe
    sarvam_mla sarvam_moe seed_oss smollm3 solar_open stablelm vaultgemma youtu
""".split())
