"""The small BPE tokenizer the data tests use, trained here with the `tokenizers` library, and its checks.

`build_tokenizer(folder, variant)` trains a byte-level BPE (vocabulary 700) on a fixed corpus and writes
``tokenizer.json`` + ``tokenizer_config.json`` the way a Hugging Face model folder holds them, so that both
finetune-doctor (``tokenizers.Tokenizer.from_file``) and LLaMA-Factory (``AutoTokenizer.from_pretrained``, in
scripts/freeze_lf_lengths.py) load the same files. Variants:

* ``llama``: BOS ``<s>``, EOS ``</s>`` (a Llama-2 style special-token setup);
* ``qwen``: no BOS, EOS ``<|endoftext|>`` (Qwen style);
* ``chatml``: like ``qwen`` with EOS ``<|im_end|>`` and Qwen1.5's Jinja chat template (for ``template`` unset).

The special tokens the fixture templates use are in the vocabulary, except ``<|eom_id|>`` and ``<|end|>``, which
LLaMA-Factory's ``fix_special_tokens`` must add itself (exercising that path).

The expected lengths in fixtures/data/expected_lengths.json were produced by LLaMA-Factory with tokenizers
trained by this very function; `test_tokenizer_matches_frozen_fingerprint` fails if training ever produces a
different vocabulary (then re-run the freeze script).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "data"

SPECIALS = [
    "<|endoftext|>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>", "<end_of_turn>", "<|user|>", "<|assistant|>",
    "<|system|>", "<|observation|>", "[gMASK]", "sop", "<sop>", "<|im_sep|>",
]

_EN = [
    "Making crepes is an easy and delicious process.",
    "Describe a process of making crepes for a family breakfast.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Give three tips for staying healthy: eat well, sleep enough and exercise.",
    "Translate the following sentence into French, then explain the grammar.",
    "I have chicken, bell peppers, and rice. Find me a recipe.",
    "You are a helpful assistant. Answer briefly and cite your sources.",
    "Summarize the article in two sentences and list the key numbers.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    '{"name": "search_recipes", "arguments": {"ingredients": ["chicken", "rice"]}}',
    "Action: search\nAction Input: {\"query\": \"weather in Paris\"}",
    "### Instruction:\nWrite a haiku about autumn.\n\n### Response:\nLeaves fall, crisp and red.",
    "Human: What is the capital of Japan?\nAssistant: Tokyo is the capital of Japan.",
    "The mitochondria is the powerhouse of the cell; it produces ATP through respiration.",
    "Prices rose 3.5% in 2023, compared with 2.1% in 2022 and 7.0% in 2021.",
]
_ZH = ["你好，请介绍一下你自己。", "我是一个乐于助人的助手。", "今天的天气很好，我们去公园散步吧。",
       "请把下面的句子翻译成英文。"]


def corpus() -> list[str]:
    """A fixed, deterministic training corpus (English, code, JSON, Chinese)."""
    out = []
    for i in range(40):
        for j, s in enumerate(_EN):
            out.append(s if (i + j) % 3 else s.lower())
        out.extend(_ZH)
    return out


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


# Qwen1.5's ChatML chat template (tokenizer_config.json of Qwen/Qwen1.5-7B-Chat): used when a config sets no
# ``template`` and LLaMA-Factory parses the tokenizer's own template instead.
CHATML_JINJA = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

VARIANTS = {
    "llama": {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False},
    "qwen": {"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False},
    "chatml": {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False, "chat_template": CHATML_JINJA},
}


def build_tokenizer(folder: str | Path, variant: str = "llama") -> Path:
    """Train the tokenizer and write a model-style folder; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1000000, "pad_token": None,
           "clean_up_tokenization_spaces": False, **VARIANTS[variant]}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    return folder


def fingerprint(folder: str | Path) -> str:
    """sha256 of the vocabulary and merges (not of the JSON text, whose layout may vary across versions)."""
    data = json.loads((Path(folder) / "tokenizer.json").read_text())
    model = data["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    blob = json.dumps([sorted(model["vocab"].items()), merges,
                       sorted(t["content"] for t in data["added_tokens"])], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


# --- tests -------------------------------------------------------------------------------------------------------------


def test_training_is_deterministic(tmp_path):
    a = fingerprint(build_tokenizer(tmp_path / "a"))
    b = fingerprint(build_tokenizer(tmp_path / "b"))
    assert a == b


def test_tokenizer_matches_frozen_fingerprint(tmp_path):
    frozen = json.loads((FIXTURES / "expected_lengths.json").read_text())["tokenizer_fingerprint"]
    assert fingerprint(build_tokenizer(tmp_path / "t")) == frozen, (
        "the BPE trained here differs from the one LLaMA-Factory used when the expected lengths were frozen; "
        "re-run scripts/freeze_lf_lengths.py")


def test_special_tokens_are_single_tokens(tmp_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(build_tokenizer(tmp_path / "t") / "tokenizer.json"))
    for s in SPECIALS:
        assert len(tok.encode(s, add_special_tokens=False)) == 1, s
    # tokens the templates need but the vocabulary lacks: LF's fix_special_tokens adds them
    assert tok.token_to_id("<|eom_id|>") is None and tok.token_to_id("<|end|>") is None
