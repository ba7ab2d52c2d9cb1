"""Model types on which the generic decoder is verified: its total and LoRA (``all``, r=8) counts equal the
transformers meta-device build within 0.5 % for the default config and two resized ones
(tests/test_model_parity.py, run with transformers 5.24.0 and 5.6.0, LLaMA-Factory's test pin).
``load_arch(exact="auto")`` builds every other type on the meta device when torch and transformers are
installed; among the families LLaMA-Factory trains, that is DBRX (transformers cannot rebuild its default config, so the type is not verified here, though the catalog's
config is counted exactly), Video-LLaVA (LLaMA-Factory's ``lora_target: all`` also wraps its image/video towers,
which the decoder-only LoRA count leaves out), Gemma-4, the remote-code families (Qwen(1), ChatGLM, InternLM2,
Baichuan: no transformers class, so the build fails and the generic answer stands) and every type transformers
adds after these lists were made."""

GENERIC_VERIFIED: frozenset[str] = frozenset("""
    aria_text axk1 bitnet bloom cohere cohere2 cohere2_moe cwm deepseek_v2 deepseek_v3 diffllama ernie4_5 exaone
    exaone4 exaone_moe falcon flex_olmo flint gemma gemma2 gemma3 gemma3_text glm glm4 glm4_moe glm4_moe_lite
    glm4v glm4v_moe
    gpt2 gpt_oss granite granite_swa granitemoe granitemoe_swa granitemoeshared helium hy_v3 hyperclovax
    internlm3 iquestcoder jamba kolibri1 llama llama4 llama4_text llava llava_next mellum mimo_v2_flash minicpm3
    minimax_m2 ministral3 mistral mistral3 mistral4 mixtral olmo olmo2 olmo3 olmoe paligemma phi3 phimoe qwen2
    qwen2_5_vl qwen2_audio qwen2_moe qwen2_vl qwen3 qwen3_5 qwen3_5_moe qwen3_5_moe_text qwen3_5_text qwen3_moe
    qwen3_next qwen3_vl qwen3_vl_moe sarvam_mla sarvam_moe seed_oss smollm3 solar_open stablelm starcoder2
    vaultgemma youtu
""".split())
