"""The piece counter (analyzers/data/piececount.py) against the tokenizer itself: the same count for every text, the
long way for the texts it must not count, and no fast path for pipelines it does not mirror."""

from __future__ import annotations

import json
import random
import unicodedata

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("regex")

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from finetune_doctor.analyzers.data import piececount as P  # noqa: E402
from finetune_doctor.analyzers.data import tokens as K  # noqa: E402
from finetune_doctor.analyzers.data import templates as T  # noqa: E402
from test_data_fixtures import SPECIALS, build_tokenizer, corpus  # noqa: E402

QWEN2 = next(p for p in P.KNOWN_SPLITS if r"\p{N}|" in p)
LLAMA3 = next(p for p in P.KNOWN_SPLITS if r"\p{N}{1,3}" in p)

# mixed scripts, digits, every Unicode space, contractions (with the long s that case-folds to s), combining marks
# that NFC composes, emoji outside the BMP, and added tokens inside text
TORTURE = [
    "Hello world! It's 2024; we'll see 12345 items.", "THEY'RE HERE'S 'S 'ſ", "你好，世界。今天天气很好！",
    "Привет, мир! Καλημέρα κόσμε", "مرحبا بالعالم ١٢٣", "नमस्ते दुनिया", "e\u0301te\u0301 cafe\u0301",
    "tabs\tand\u00a0nbsp\u2003em\u3000ideographic\u2028line\u0085nel", "  leading and trailing  ", "\n\n\r\n x",
    "emoji 😀👍🏽 family 👨‍👩‍👧", "code:\n    return a + b  # ok\n", "<|im_start|>user\nhi<|im_end|>", "x<s>y</s>",
    "ℌ𝔢𝔩𝔩𝔬 ﬁ ﬂ Ⅻ ½ ²", "a" * 300, "🙂" * 5, "", " ", "'", "'s's's",
]


def _train(pre, normalizer=None) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus() + TORTURE, trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def _folder(tmp_path, tok: Tokenizer, name: str):
    d = tmp_path / name
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "bos_token": None}))
    return d


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _random_texts(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    pool = corpus() + TORTURE
    return [" ".join(rng.choices(pool, k=rng.randint(1, 6))) for _ in range(n)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2-bytelevel", "qwen2-split-nfc", "llama3-split"])
def test_counts_equal_the_tokenizers_own(tmp_path, kind):
    if kind == "gpt2-bytelevel":
        tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        pattern = QWEN2 if kind.startswith("qwen2") else LLAMA3
        tok = _train(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            normalizers.NFC() if "nfc" in kind else None)
    folder = _folder(tmp_path, tok, kind)
    fast = K.ExactCounter(str(folder), T.get_template("qwen"))
    slow = K.ExactCounter(str(folder), T.get_template("qwen"), fast_count=False)
    assert fast._pieces is not None and slow._pieces is None
    texts = TORTURE + _random_texts(400)
    assert fast.lengths(texts) == slow.lengths(texts)
    # and against encode() one text at a time, special-token handling included
    assert fast.lengths(texts) == [len(slow.tk.encode(t, add_special_tokens=False)) if t else 0 for t in texts]


@pytest.mark.slow
def test_texts_it_must_not_count_go_to_the_tokenizer(tmp_path):
    folder = build_tokenizer(tmp_path / "tok", "chatml")
    c = K.ExactCounter(str(folder), T.get_template("qwen"))
    seen: list[list[str]] = []

    def slow(texts):
        seen.append(list(texts))
        return c._encode_lengths(texts)

    texts = ["plain ascii text", "<|im_start|>user", "smile 😀", "中文 text"]
    out = c._pieces.lengths(texts, slow)
    assert seen == [["<|im_start|>user", "smile 😀"]]          # an added token's text; a character beyond the BMP
    assert out == c._encode_lengths(texts)


def test_pipelines_it_does_not_mirror_have_no_fast_path(tmp_path):
    meta = _train(pre_tokenizers.Metaspace())
    prefix = _train(pre_tokenizers.ByteLevel(add_prefix_space=True))
    other = _train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+|\w+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    for name, tok in (("metaspace", meta), ("prefix", prefix), ("unknown-split", other)):
        assert P.PieceCounter.build(tok) is None, name


@pytest.mark.slow
def test_engine_sweep_is_cached_and_finds_what_differs(tmp_path):
    tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    bad = P.PieceCounter._engine_disagreements(tok, P.GPT2_REGEX, use_cache=True)
    cached = list((tmp_path / "cache" / "finetune-doctor").glob("pieces-*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["disagree"] == bad
    # whatever the two engines' Unicode versions, every character they disagree on really splits differently
    pre = tok.pre_tokenizer
    import regex

    for cp in bad[:20]:
        probe = P._PROBE.format(c=chr(cp))
        rust = [p for p, _ in pre.pre_tokenize_str(probe)]
        py = [q for w in regex.findall(P.GPT2_REGEX, probe)
              for q, _ in pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(w)]
        assert rust != py
    # and the common scripts are not among them (else the fast path would rarely run)
    assert not any(unicodedata.name(chr(cp), "").startswith(("CJK UNIFIED", "LATIN", "CYRILLIC")) for cp in bad)


@pytest.mark.slow
def test_truncation_and_padding_in_tokenizer_json_are_ignored_as_transformers_ignores_them(tmp_path):
    tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.enable_truncation(max_length=4)
    tok.enable_padding(length=64)
    folder = _folder(tmp_path, tok, "trunc")
    texts = ["a fairly long sentence that has well over four tokens in it", "short"]
    for fast in (True, False):
        c = K.ExactCounter(str(folder), T.get_template("qwen"), fast_count=fast)
        plain = Tokenizer.from_str(tok.to_str())
        plain.no_truncation()
        plain.no_padding()
        assert c.lengths(texts) == [len(plain.encode(t, add_special_tokens=False)) for t in texts]
        assert c.lengths(texts)[0] > 4


@pytest.mark.slow
def test_an_unwritable_cache_costs_a_sweep_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    bad = P.PieceCounter._engine_disagreements(tok, P.GPT2_REGEX, use_cache=True)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_CACHE", "1")
    assert P.PieceCounter._engine_disagreements(tok, P.GPT2_REGEX, use_cache=True) == bad
