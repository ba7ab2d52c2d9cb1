"""Give every catalogue entry the provenance of its checkpoint dtype and vocabulary (issue 21).

Each entry of ``finetune_doctor/catalog/models.json`` gets ``provenance``: for ``torch_dtype`` and ``vocab_size``
the ``value`` the doctor sizes with, ``from`` (``config.json`` — the field of the model's own config.json, at the top
level or in ``text_config``; ``stored weights`` — the dtype of the checkpoint's tensors, which is what
``torch_dtype="auto"`` resolves to when config.json names none (transformers modeling_utils.py ``_get_dtype``);
``modeling code`` — remote code that picks its own precision; ``same_architecture_as`` — inherited from the base
entry), the ``source`` read, and ``checked``: true when the value was read in the cited file or page, false when it
is recalled and was not re-read (the report lists those). ``architecture`` names the file the shape fields come
from.

Values the copied config does not hold are in `MANUAL` with what was read. Run from the repository root:
``python scripts/catalog_provenance.py`` (rewrites models.json in the catalogue's own layout);
``python scripts/catalog_provenance.py --audit`` prints the counts of the stored records and writes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_catalog import load_catalog, write_catalog  # noqa: E402

# The config.json of these models names a dtype that the catalogue's copy (a fine-tune or conversion) left out, or
# names none, so the stored weights decide. Each: (value, from, source, checked).
MANUAL: dict[str, tuple[str, str, str, bool]] = {
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": (
        "bfloat16", "config.json",
        "the hub file itself is not stored (the copy read for the shapes, read_from, is a project's edit naming "
        "float16); read in configs transformers wrote after loading the hub checkpoint, which keep its torch_dtype "
        "field: onnx-community/DeepSeek-R1-Distill-Qwen-1.5B-ONNX config.json (_name_or_path "
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B, transformers 4.46.3: 'bfloat16'), "
        "adriabama06/DeepSeek-R1-Distill-Qwen-1.5B-GPTQ-8bit config.json (same _name_or_path, 4.47.1: 'bfloat16'), "
        "wh-zhu/DeepSeek-R1-TrRa-1.5B-lambda_2 (from the hub snapshot e93784059177, 4.45.0: 'bfloat16'); the stored "
        "weights are 16-bit: the hub tree (https://huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B/tree/"
        "main, and at commits e937840 and 6393b75) lists one model.safetensors of 3.55 GB for 1,777,088,000 "
        "elements, 2 bytes each, and config.json at 679 bytes: the read_from copy's fields without its auto_map, "
        "written as transformers writes them (sorted keys, two-space indent, a closing newline) with a six-character "
        "transformers_version, come to 679 bytes with 'bfloat16' and 678 with 'float16' or 'float32'", True),
    "google/gemma-7b": (
        "bfloat16", "config.json",
        "GemmaConfig printed after from_pretrained('google/gemma-7b') with transformers 4.45.2 (torch_dtype "
        "'bfloat16'), in a public notes file found by exact-string search on '\"_name_or_path\": \"google/gemma-7b\"'",
        True),
    "google/gemma-2b": (
        "bfloat16", "config.json",
        "verbatim copy of google/gemma-2b's config.json (transformers_version 4.38.0.dev0, torch_dtype 'bfloat16') "
        "embedded as GEMMA2_CONFIG in a public Lumina-2 text-encoder loader", True),
    "CohereForAI/c4ai-command-r-v01": (
        "float16", "config.json",
        "transformers docs/source/en/model_doc/cohere.md: 'The checkpoints uploaded on the Hub use torch_dtype = "
        "'float16''", True),
    "bigscience/bloom-560m": (
        "float16", "stored weights",
        "config.json names no dtype (BloomConfig of bigscience/bloom-560m printed with transformers 4.26.0 has no "
        "torch_dtype); the weights are FP16 (model summary at https://www.promptlayer.com/models/bloom-560m: "
        "'operates with FP16 precision'; 559,214,592 parameters in a 1.12 GB file = 2 bytes each)", True),
    "bigcode/starcoder2-3b": (
        "float32", "stored weights",
        "config.json names no dtype (the catalogue copies the hub file); the weights are float32: llama.cpp PR "
        "#5795 (https://github.com/ggml-org/llama.cpp/pull/5795) converts the 3B (hidden 3072, ffn 12288) with every "
        "tensor listed as f32, and refact PR #317 (https://github.com/smallcloudai/refact/pull/317) budgets "
        "12,000 MB for bigcode/starcoder2-3b (4 bytes x 3.03 B)", True),
    "openai-community/gpt2-large": (
        "float32", "stored weights",
        "config.json names no dtype; the weights were converted from OpenAI's float32 TensorFlow checkpoint "
        "(transformers PR #1064, https://github.com/huggingface/transformers/pull/1064, via "
        "convert_gpt2_checkpoint_to_pytorch; the family's 1.5B checkpoint is ~6 GB on disk, 4 bytes a parameter, "
        "https://github.com/openai/gpt-3/issues/1)", True),
    "openai/gpt-oss-120b": (
        "bfloat16", "stored weights",
        "config.json names no dtype (quantization_config mxfp4); the tensors outside the MoE experts are stored in "
        "BF16 and the experts in MXFP4 (gpt-oss model card, arXiv:2508.10925 section 2)", True),
    "openai/gpt-oss-20b": (
        "bfloat16", "stored weights",
        "config.json names no dtype (quantization_config mxfp4); the tensors outside the MoE experts are stored in "
        "BF16 and the experts in MXFP4 (gpt-oss model card, arXiv:2508.10925 section 2)", True),
    "Qwen/Qwen-1_8B": (
        "bfloat16", "modeling code",
        "config.json names no dtype and sets none of bf16/fp16/fp32: modeling_qwen.py QWenLMHeadModel.__init__ then "
        "picks bf16 where the GPU supports it (finetune_doctor/readers/model/generic.py _qwen1_dtype)", True),
    "Qwen/Qwen-7B": (
        "bfloat16", "modeling code",
        "config.json names no dtype and sets none of bf16/fp16/fp32: modeling_qwen.py QWenLMHeadModel.__init__ then "
        "picks bf16 where the GPU supports it (finetune_doctor/readers/model/generic.py _qwen1_dtype)", True),
    "Qwen/Qwen-14B": (
        "bfloat16", "modeling code",
        "config.json names no dtype and sets none of bf16/fp16/fp32: modeling_qwen.py QWenLMHeadModel.__init__ then "
        "picks bf16 where the GPU supports it (finetune_doctor/readers/model/generic.py _qwen1_dtype)", True),
    "Qwen/Qwen-72B": (
        "bfloat16", "modeling code",
        "config.json names no dtype and sets none of bf16/fp16/fp32: modeling_qwen.py QWenLMHeadModel.__init__ then "
        "picks bf16 where the GPU supports it (finetune_doctor/readers/model/generic.py _qwen1_dtype)", True),
    "Tele-AI/TeleChat2-7B": (
        "bfloat16", "stored weights",
        "config.json names no dtype (the hub file at commit cd0b54ce; a later change to it, commit 659fd56 "
        "'Update config.json', https://huggingface.co/Tele-AI/TeleChat2-7B/commit/"
        "659fd56c4cdb1864dd9318fc30de8d4883a66012, is +1 -1: architectures TeleChatForCausalLM -> "
        "TeleChat2ForCausalLM; the tree at main lists config.json at 1.05 kB, last changed by 'Update "
        "config.json'), so torch_dtype='auto' takes the dtype of the checkpoint's first floating-point "
        "tensor. The weights are four pickled shards whose pickle scan the hub tree prints (session 16, docs "
        "corpus): https://huggingface.co/Tele-AI/TeleChat2-7B/tree/main lists pytorch_model_00001-of-00004.bin "
        "(4.13 GB) and pytorch_model_00003-of-00004.bin (3.49 GB) with the pickle imports 'torch.BFloat16Storage', "
        "'torch._utils._rebuild_tensor_v2', 'collections.OrderedDict', beside pytorch_model_00002-of-00004.bin "
        "(3.49 GB) and pytorch_model_00004-of-00004.bin; the tree at commit b7cb4c7 "
        "(https://huggingface.co/Tele-AI/TeleChat2-7B/tree/b7cb4c70388b6259a08e55238ffe5bca43aa4945) shows the "
        "same imports for shards 1 and 4 (4.13 GB each). BFloat16Storage is the storage class torch.save writes "
        "for bfloat16 tensors, and the first shard is the one 'auto' reads. Size check: 4.13 + 3.49 + 3.49 + 4.13 "
        "= 15.24 GB (each figure rounded to 0.01 GB) against the doctor's count of this entry, 7,617,105,920 "
        "elements x 2 bytes = 15.23 GB (x 4 bytes would be 30.47 GB). Not to be taken for its variants: "
        "TeleChat2-7B-32K ships one 30.5 GB pytorch_model.bin of torch.FloatStorage (float32, "
        "https://huggingface.co/Tele-AI/TeleChat2-7B-32K/tree/main). Sessions 7-14 had looked for a shard list "
        "or header in GitHub Tele-AI/TeleChat2, hub mirrors and the code, issues and pages corpora",
        True),
    # Not re-read (sessions 7 and 8: no stored copy of the hub file or of the weights' header was found; session 7
    # searched the code, issues and docs corpora, the hub pages the docs corpus holds, and the GitHub repositories
    # named below): recalled, with what the stored copies saved from each model say.
    "baichuan-inc/Baichuan-7B": (
        "float16", "config.json",
        "config.json's own torch_dtype not read (no stored copy of the hub file: sessions 7-9 searched the code, "
        "issues, docs and pages corpora and GitHub repositories that vendor hub files). Read in session 11: the "
        "stored weights are bfloat16 -- the hub tree at the initial commit "
        "(https://huggingface.co/baichuan-inc/Baichuan-7B/tree/e2f3e14314a9e2bb57183160a3cc012e3c60c60c) and at "
        "main lists one pytorch_model.bin of 14 GB whose pickle imports are 'torch.BFloat16Storage', "
        "'collections.OrderedDict', 'torch._utils._rebuild_tensor_v2' (7.0 B elements x 2 bytes) -- and config.json "
        "is 656 bytes at both. LLaMA-Factory loads with torch_dtype='auto' (model/loader.py), which takes "
        "config.json's torch_dtype when it names one and the weights' only when it names none; 656 bytes is the "
        "size of the copies saved from it (hiyouga/Baichuan-7B-sft config.json: the same fields, 'float16', "
        "transformers 4.30.1), which with transformers' writer (sorted keys, two-space indent, closing newline) "
        "leaves room for a seven-letter dtype ('float16' or 'float32', as copies saved by 4.30 and 4.29.1 "
        "disagree), not 'bfloat16'. Session 12b looked again (GitHub baichuan-inc/Baichuan-7B: its stored files "
        "ever are code, DeepSpeed configs and media, no config.json; exact strings 'BaiChuanForCausalLM', "
        "'configuration_baichuan.BaiChuanConfig' and 'Model config BaiChuanConfig {' in the code corpus: "
        "registries and Baichuan2/TongGu logs only; a path search for Baichuan-7B/config.json; GitHub "
        "RahulSChand/gpu_poor all_configs.json, every version: Baichuan-7B's shape fields and vocab 64000 "
        "but no dtype; the issues corpus: no config print; the pages corpus twice: hub mirrors' model cards "
        "(repo.model.xfyun.cn aicloud/baichuan_7b README at 89c656c, model.drfengling.asia, hf.qhduan.com) and "
        "TheBloke's GPTQ card, no config.json): not found. Session 14: the exact string "
        "'\"_name_or_path\": \"baichuan-inc/Baichuan-7B\"' in the code corpus: no hit. Session 16: the docs corpus for the hub's commit and blob pages of "
        "baichuan-inc/Baichuan-7B (only the tree at e2f3e14 again: config.json 656 bytes, pytorch_model.bin of "
        "torch.BFloat16Storage) and for the ai.gitee.com hf-models mirror (its tokenizer_config.json page only); the "
        "code corpus, exact strings '\"modeling_baichuan.BaiChuanForCausalLM\"' and '\"model_type\": "
        "\"baichuan\",' (Baichuan2 and TongGu configs, fine-tunes' copies): not found. The weights' bfloat16 is "
        "not taken as the value: the stored weights decide only where config.json names no dtype, and this "
        "file's 656 bytes say it names one, which LLaMA-Factory's torch_dtype='auto' load then follows. So the value is float16 (the bytes "
        "equal bfloat16's), recalled from the "
        "copies, and the doctor names the dtype as an open assumption and weighs float32 (facts/assume.py "
        "_checkpoint); --model-config with the real config.json overrides it", False),
    "LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct": (
        "float32", "config.json",
        "recalled, not re-read: the hub's config.json names float32 and ships ~31 GB of shards; a bf16 re-save "
        "(heegyu/EXAONE-3.0-7.8B-Instruct-bf16, the catalogue's copy) exists for that reason. The LGAI-EXAONE hub "
        "file is not stored (the docs corpus holds re-saves and llamafied copies only); an upload of a config.json "
        "with the release's local auto_map and transformers 4.41.0 names float32 (huggingface.co "
        "Toastmachine/exaone_CSAT_test commit 67888f7e), the re-saves name bfloat16. --model-config with the real "
        "config.json overrides it. Session 8 looked again (docs and pages corpora for the LGAI-EXAONE blob and tree "
        "pages, the safetensors index): only re-saves (heegyu bf16, ModelCloud and yunguks GPTQ/bnb, Bingsu and "
        "maywell llamafied: bfloat16); LGAI-EXAONE's own EXAONE-3.5-7.8B-Instruct tree (commit 0ff6b5e) ships 7 "
        "shards of ~31 GB for 7.8 B parameters, 4 bytes each, the same house practice, not this file. Session 9 "
        "looked in GitHub (LG-AI-EXAONE/EXAONE-3.0 holds README, LICENSE and a logo only; an exact-string search of "
        "the code corpus for the exaone model_type line finds one more re-save, auto_map prefixed with the hub "
        "repository, transformers 4.45.2, bfloat16) and the pages corpus (two searches for the config and the "
        "shard list return a hub mirror's copy of Bingsu's llamafied GGUF card, translated READMEs and the "
        "technical report): no stored copy of the LGAI-EXAONE file or its safetensors index. Session 11 looked "
        "again (docs corpus for the hub page's tensor type, NVIDIA NeMo AutoModel's EXAONE-3.0 page, issues "
        "corpus): re-saves only; a llamafied copy (CarrotAI/EXAONE-3.0-7.8B-Instruct-Llamafied-8k) keeps 7 "
        "shards of 31.3 GB, 4 bytes an element, a conversion's size, not the file. Session 12b looked again "
        "(GitHub lgai-exaone/transformers: EXAONE 4 files only; a path search for "
        "EXAONE-3.0-7.8B-Instruct/config.json; the issues corpus: vLLM's new-model request #7236 without the "
        "file): not found. Session 14: the one stored print of this checkpoint's config (GitHub Retruth/deontic "
        "nlp_models/exaone/README.md and notebook.ipynb at a77cf87: ExaoneConfig with _name_or_path "
        "LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct, transformers 4.45.2, 'torch_dtype': 'bfloat16') is not the file's "
        "field: its loader (nlp_models/exaone/load_model.py get_exaone) passes torch_dtype=torch.bfloat16, and the "
        "same repository's print of meta-llama/Llama-2-7b-hf, loaded the same way, shows 'bfloat16' where that "
        "hub file names float16. The same notebook's load reports 7 checkpoint shards (heegyu's bf16 re-save has "
        "4): consistent with float32 at 5 GB a shard, not a read. Docs corpus for the hub page's tensor type: "
        "re-saves, llamafied copies and a GGUF only; issues corpus for a vLLM dtype='auto' load (whose engine "
        "line would show float16 for a float32 file): vLLM pull requests #7819 and #7942 ran it, but the stored "
        "excerpts stop before that line. Session 16: the code corpus, exact strings "
        "'\"eos_token_id\": 361,' (the Retruth print again, an EXAONE 4 test config), 'Model config "
        "ExaoneConfig {' and 'EXAONE-3.0-7.8B-Instruct/resolve/main/model' (no hit); the docs corpus for LG's "
        "tree, commit and blob pages (fine-tunes' upload commits with _name_or_path "
        "LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct, heegyu's and the llamafied trees, LG's EXAONE-3.5 trees, the "
        "EXAONE-3.0 collection, which lists an LG AWQ repository) and the pages corpus (a mirror of Bingsu's "
        "llamafied GGUF card): no LG tree, index or file. The doctor "
        "names the dtype as an open assumption and weighs bfloat16 (facts/assume.py _checkpoint)", False),
    "mistralai/Codestral-22B-v0.1": (
        "bfloat16", "config.json",
        "recalled, not re-read: the hub's config.json names bfloat16, as Mistral AI's other transformers uploads "
        "(Mistral-7B-v0.3) do; the catalogue's copy is an AWQ conversion that left it out. The hub repository is "
        "gated (huggingface.co/mistralai/Codestral-22B-v0.1 asks to share contact information first), so no stored "
        "copy of its files exists; unquantized uploads saved from it name bfloat16 (MrezaPRZ/codestral_bird_train "
        "and tomasonjo/text2cypher-codestral-16bit config.json, transformers 4.41). Session 8 looked again (docs "
        "corpus for the config's shape fields): conversions of Mistral's released weights name bfloat16 "
        "(bullerwins/Codestral-22B-v0.1-hf 'First model version', transformers 4.40.2; mistral-community's copy "
        "behind Orion-zhen's exl2), which says how the released tensors are stored but is not the gated file. "
        "Session 9 looked in the code corpus for vendored copies (a PyPI package, kalle 0.0.6, vendors the hub "
        "README under kalle/data/tokenizer_config/codestral/ but no config.json; xorbitsai/inference and lalamo "
        "register the model without its dtype; a snapshot_download script fetches params.json and "
        "consolidated.safetensors, Mistral's own format without a dtype field): no stored copy of the gated "
        "file. Session 11: the hub page of the gated repository is stored (its tags: safetensors, vllm, mistral, "
        "mistral-common; no file list or config), and the released tensors are 16-bit: the HF conversion "
        "mistral-community/Codestral-22B-v0.1 (tree at main) holds 9 safetensors shards, 44.5 GB for "
        "22,247,282,688 elements, 2 bytes each, with a 596-byte config.json, the size of bullerwins' conversion "
        "that names bfloat16. Session 12b looked again (a path search for Codestral-22B-v0.1/config.json; the "
        "issues corpus for a pasted copy of its shape fields): not found. Session 14: the docs corpus for the "
        "hub page's tensor type (another conversion only, ImagineIt/22b-Converted: _name_or_path "
        "mistralai/Codestral-22B-v0.1, transformers 4.41.2, bfloat16, vocab 32770 -- a re-save, not the file), "
        "the exact string 'Loading model: Codestral-22B-v0.1' (a GGUF conversion log) and the issues corpus for "
        "a conversion log: not found. Session 16: the code corpus, exact strings "
        "'\"_name_or_path\": \"mistralai/Codestral-22B-v0.1\"' and "
        "'mistralai/Codestral-22B-v0.1/blob/main/config.json' (no hit), and a pip package that vendors Codestral's "
        "card (kalle 0.0.6 data/tokenizer_config/codestral: README.md only); the docs corpus for the gated "
        "repository's tree: fine-tunes' upload commits whose config.json names _name_or_path "
        "mistralai/Codestral-22B-v0.1, bfloat16, transformers 4.41.2 and 4.42.3 (saved after training, not the "
        "file), mistral-community's and bullerwins' conversions (9 shards, 44.5 GB): not found. The doctor names "
        "the dtype as an "
        "open assumption and weighs float32 "
        "(facts/assume.py _checkpoint)",
        False),
}

# config.json names no vocabulary size: the transformers configuration class's default is what builds the model.
CLASS_DEFAULT_VOCAB: dict[str, tuple[int, str]] = {
    mid: (262_208, "transformers models/gemma3/configuration_gemma3.py Gemma3TextConfig vocab_size = 262_208 "
                   "(transformers 5.6.0, line 77); the config.json's text_config names none")
    for mid in ("google/gemma-3-4b-pt", "google/gemma-3-12b-pt", "google/gemma-3-27b-pt")
}

# Alias entries whose own config.json was not read (the basis says on what the shared layout rests): the values
# inherited from the base are the base's file, not theirs, so they are recorded as recalled (checked false).
# zai-org/GLM-4.6 left in session 14: its vocabulary was read in a load of a GGUF converted from its checkpoint
# (ALIAS_READ), its dtype in session 11.
UNREAD_ALIASES: set[str] = set()
# Where the alias's own value was looked for (appended to the base's source in its unread records).
UNREAD_NOTE: dict[str, str] = {}

# Alias fields read in a file of the alias's own checkpoint other than its config.json (a conversion saved from it):
# {id: {field: (value, source)}}; each is recorded as read (checked) from that source.
ALIAS_READ: dict[str, dict[str, tuple[Any, str]]] = {
    "zai-org/GLM-4.6": {"torch_dtype": (
        "bfloat16",
        "zai-org/GLM-4.6's own config.json not stored; read in two quantized conversions of that checkpoint made "
        "with LLM Compressor, which keep the dtype the checkpoint loaded in: "
        "https://huggingface.co/inference-optimization/GLM-4.6-FP8-dynamic/blob/main/config.json and "
        "https://huggingface.co/RedHatAI/GLM-4.6-NVFP4/blob/main/config.json ('dtype': 'bfloat16'; base_model "
        "zai-org/GLM-4.6 on the RedHatAI card, which says quantizing 'reduces the number of bits per parameter "
        "from 16 to 4')"),
        "vocab_size": (
            151552,
            "zai-org/GLM-4.6's own config.json not stored; read (session 14) in a llama.cpp load of a GGUF "
            "converted from that checkpoint, printed whole in ik_llama.cpp discussion #816 "
            "(https://github.com/ikawrakow/ik_llama.cpp/discussions/816, an archived copy in the code index, id "
            "39156493539; ubergarm/GLM-4.6-GGUF IQ5_K, which ubergarm converted from the new GLM-4.6 safetensors, "
            "ik_llama.cpp pull request #814; "
            "general.name 'GLM 4.6', general.version '4.6', glm4moe, 93 blocks = 92 + the next-token-prediction "
            "layer, 160 experts): 'tokenizer.ggml.tokens arr[str,151552]' and 'print_info: n_vocab = 151552'. "
            "llama.cpp's converter writes exactly config.json's vocab_size tokens (convert_hf_to_gguf.py "
            "get_vocab_base: vocab_size = hparams['vocab_size'], ids the tokenizer lacks padded as [PAD<i>]), and "
            "the loader refuses a token_embd.weight whose rows differ from n_vocab; this load placed every tensor "
            "(the thread's failure is a later compute-buffer allocation). Cross-check: "
            "the doctor's count of this entry with 151552 (352,797,814,784) plus the MTP layer's tensors the log "
            "lists (3,988,069,792) is 356,785,884,576, the log's 'model params = 356.786 B' (each id is 2 x 5120 "
            "elements: a vocabulary outside 151515-151612, GLM-4.7-Flash's 154880 among them, prints another "
            "value)")},
}

# Entries whose config was read in a copy that has no address of its own to put in read_from: what was read.
READ_ELSEWHERE = {
    # written by hand in bf63f77 (Qwen3.5 configs read as curl printed them in public session logs: no address)
    "Qwen/Qwen3.5-0.8B": (
        "https://huggingface.co/Qwen/Qwen3.5-0.8B/blob/main/config.json (read as verbatim hub config.json in "
        "a public session log: the hub file as `curl -sL "
        "https://huggingface.co/Qwen/Qwen3.5-0.8B/resolve/main/config.json` printed it (whole, 4-space "
        "layout, transformers_version 4.57.0.dev0))"),
    "Qwen/Qwen3.5-4B": (
        "https://huggingface.co/Qwen/Qwen3.5-4B/blob/main/config.json (read as verbatim hub config.json in a "
        "public session log: the hub file at revision 851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a as `curl -s -L"
        " https://huggingface.co/Qwen/Qwen3.5-4B/resolve/main/config.json` printed it (whole, "
        "transformers_version 4.57.0.dev0))"),
    "Qwen/Qwen3.5-9B": (
        "https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json (read as the hub file's first 50 lines, "
        "verbatim, as `curl -s -L https://huggingface.co/Qwen/Qwen3.5-9B/resolve/main/config.json | head -50` "
        "printed them in a public session log (text_config.dtype 'bfloat16' among them), and whole in a "
        "config.json saved by unsloth from unsloth/Qwen3.5-9B (vocab_size 248320, the vision tower): read_note)"),
    "zai-org/GLM-4.5V": "https://huggingface.co/zai-org/GLM-4.5V/blob/main/config.json as Glm4vMoeConfig printed "
                        "after from_pretrained of a local snapshot with transformers 5.7.0, in a public model-info "
                        "report (GitHub code index id 62538297598) that also lists the snapshot's safetensors tensors",
}


ABOUT = ("provenance records, for torch_dtype and vocab_size, the value the doctor sizes with, where it is from "
         "(config.json, stored weights, modeling code, transformers class default, or the base entry), the source "
         "read and whether it was re-read (checked); architecture names the file the shapes come from. It is "
         "written by scripts/catalog_provenance.py: run it after adding an entry (tests/test_catalog_provenance.py "
         "fails on an entry without it).")


def _find(cfg: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, str] | None:
    for k in keys:
        if cfg.get(k) is not None and cfg.get(k) != "auto":
            return cfg[k], k
    for sub in ("text_config", "llm_config", "language_config"):
        d = cfg.get(sub)
        if isinstance(d, dict):
            for k in keys:
                if d.get(k) is not None and d.get(k) != "auto":
                    return d[k], f"{sub}.{k}"
    return None


def provenance(entry: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``provenance`` object of one entry (module docstring)."""
    where = entry.get("read_from") or READ_ELSEWHERE.get(entry["id"]) or entry["source"]
    out: dict[str, Any] = {"architecture": where}
    cfg = entry.get("config")
    if cfg is None:   # an alias: its own overrides, else the base entry's
        ov = entry.get("config_overrides") or {}
        base = by_id[entry["same_architecture_as"]]
        while "config" not in base:
            base = by_id[base["same_architecture_as"]]
        basep = provenance(base, by_id)
        for field, keys in (("torch_dtype", ("torch_dtype", "dtype")), ("vocab_size", ("vocab_size",
                                                                                       "padded_vocab_size"))):
            hit = _find(ov, keys)
            if hit is not None:
                out[field] = {"value": hit[0], "from": "config.json", "field": hit[1], "source": entry["source"],
                              "checked": True}
            elif field in ALIAS_READ.get(entry["id"], {}):
                v, src = ALIAS_READ[entry["id"]][field]
                out[field] = {"value": v, "from": "config.json", "source": src, "checked": True}
            else:
                out[field] = {**basep[field], "from": f"same_architecture_as {base['id']}: " + basep[field]["from"]}
                if entry["id"] in UNREAD_ALIASES:
                    out[field]["checked"] = False
                    if entry["id"] in UNREAD_NOTE:
                        out[field]["source"] += f" ({UNREAD_NOTE[entry['id']]})"
        out["architecture"] = f"same_architecture_as {base['id']}"
        return out
    dt = _find(cfg, ("torch_dtype", "dtype"))
    if dt is not None:
        out["torch_dtype"] = {"value": dt[0], "from": "config.json", "field": dt[1], "source": where,
                              "checked": True}
    elif entry["id"] in MANUAL:
        v, frm, src, ok = MANUAL[entry["id"]]
        out["torch_dtype"] = {"value": v, "from": frm, "source": src, "checked": ok}
    voc = _find(cfg, ("vocab_size", "padded_vocab_size"))
    if voc is not None:
        out["vocab_size"] = {"value": voc[0], "from": "config.json", "field": voc[1], "source": where,
                             "checked": True}
    elif entry["id"] in CLASS_DEFAULT_VOCAB:
        v, src = CLASS_DEFAULT_VOCAB[entry["id"]]
        out["vocab_size"] = {"value": v, "from": "transformers class default", "source": src, "checked": True}
    return out


def audit(models: list[dict[str, Any]]) -> str:
    """Counts of the catalogue's provenance records: entries, records per ``from``, the ones not read (checked
    false) and the ones missing a value or a source (the issue-21 audit; tests/test_catalog_provenance.py asserts
    the same)."""
    lines = [f"{len(models)} entries ({sum('config' in e for e in models)} base, "
             f"{sum('same_architecture_as' in e for e in models)} alias)"]
    for field in ("torch_dtype", "vocab_size"):
        recs = [(e["id"], (e.get("provenance") or {}).get(field) or {}) for e in models]
        bad = [i for i, r in recs if r.get("value") in (None, "", "auto") or len(str(r.get("source") or "")) <= 10]
        kinds: dict[str, int] = {}
        for _i, r in recs:
            k = str(r.get("from", "none")).split(": ")[-1]
            kinds[k] = kinds.get(k, 0) + 1
        unread = [i for i, r in recs if r and r.get("checked") is False]
        lines.append(f"{field}: missing value or source {len(bad)} {bad}; from " +
                     ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) +
                     f"; not read in a stored file (checked false) {len(unread)} {unread}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    data = load_catalog()
    if "--audit" in (sys.argv[1:] if argv is None else argv):   # report the stored records, write nothing
        print(audit(data["models"]))
        return 0
    if ABOUT not in data["about"]:
        data["about"] = data["about"].rstrip() + " " + ABOUT
    by_id = {e["id"]: e for e in data["models"]}
    for e in data["models"]:
        e.pop("provenance", None)
    for e in data["models"]:
        e["provenance"] = provenance(e, by_id)
    missing = [e["id"] for e in data["models"] if not {"torch_dtype", "vocab_size"} <= set(e["provenance"])]
    write_catalog(data)
    # base entries whose dtype was recalled, and alias entries whose own config.json was not read (UNREAD_ALIASES)
    unchecked = [e["id"] for e in data["models"]
                 if not e["provenance"].get("torch_dtype", {}).get("checked", True)]
    print(f"{len(data['models'])} entries; missing: {missing or 'none'}; recalled, not re-read: {unchecked}")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
