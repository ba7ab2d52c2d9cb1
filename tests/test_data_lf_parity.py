"""finetune-doctor's token lengths equal LLaMA-Factory's, sample by sample.

The reference is fixtures/data/expected_lengths.json: LLaMA-Factory 0.9.5's own ``get_dataset`` run on the fixture
datasets with the BPE tokenizer that tests/test_data_fixtures.py trains (scripts/freeze_lf_lengths.py made it, in
an environment where LLaMA-Factory is installed; the project does not depend on LLaMA-Factory). Each run fixes a
template, a stage (sft / rm / pt / ppo), a cutoff_len and data options (mask_history, train_on_prompt,
enable_thinking, packing, neat_packing, tool_format, default_system). Compared per kept sample, in order:

* sft: input length and number of labelled tokens;
* rm (pairwise): chosen and rejected lengths and label counts;
* kto: the length and label count of the main (desirable or undesirable) sequence;
* pt: input length (no packing) / number of blocks (packing);
* packed sft: number of packed rows, and with neat_packing the real (unpadded) tokens of each row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finetune_doctor.analyzers.data import tokens as K
from finetune_doctor.readers.data.datasets import iter_chunks, resolve_datasets
from test_data_fixtures import FIXTURES, build_tokenizer

EXPECTED = json.loads((FIXTURES / "expected_lengths.json").read_text())
RUNS = EXPECTED["runs"]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("tok")
    return {v: str(build_tokenizer(base / v, v)) for v in ("llama", "qwen", "chatml")}


_COUNTERS: dict[tuple, K.ExactCounter] = {}


def _counter(folder: str, template) -> K.ExactCounter:
    """One `ExactCounter` per tokenizer folder and what of the template it reads (its stop words and
    replace_eos, tokenizer.py `ExactCounter.__init__`), shared by this module's tests: counts depend on nothing
    else, and a counter per test loaded the tokenizer, rebuilt its piece counter and re-encoded the same words
    359 times (4.9 of this file's ~6 CPU s, 2026-12-07). The first test of each key still encodes every word."""
    key = (folder, tuple(template.stop_words), template.replace_eos)
    if key not in _COUNTERS:
        _COUNTERS[key] = K.ExactCounter(folder, template)
    return _COUNTERS[key]


def _settings(run: dict) -> K.DataSettings:
    cfg = {"stage": run["stage"], **run["data"]}
    return K.DataSettings.from_config(cfg)


def _scan(run: dict, tokenizers: dict[str, str]):
    s = _settings(run)
    t, _ = K.resolve_template(s, tokenizers[run["tokenizer"]])
    counter = _counter(tokenizers[run["tokenizer"]], t)
    enc = K.Encoder(counter, t, s)
    (spec,), _ = resolve_datasets([run["dataset"]], str(FIXTURES))
    records, problems, read_errors = [], [], []
    packer = K.Packer(s)
    for ch in iter_chunks(spec, chunk_rows=7):  # small chunks: exercises chunk boundaries
        recs, probs = enc.process(ch.rows, ch.first_index, ch.lines, K.ConvSpec.of(spec))
        records += recs
        problems += probs
        read_errors += ch.errors
        for r in recs:
            packer.add(r[2], r[8])
    packer.flush()
    return s, records, problems, read_errors, packer


def test_the_reference_covers_what_the_issue_asks():
    ids = {r["id"] for r in RUNS}
    kinds = {r["stage"] for r in RUNS}
    assert {"sft", "rm", "pt", "ppo", "kto"} <= kinds
    datasets = {r["dataset"] for r in RUNS}
    assert {"alpaca_demo", "sharegpt_tools", "dpo_pairs", "alpaca_dpo", "chat_roles"} <= datasets
    assert len(ids) == len(RUNS) > 200
    # the small cutoffs really truncate: the reference holds sequences cut exactly at cutoff_len
    cut = [r for r in RUNS if r["stage"] == "sft" and r["data"]["cutoff_len"] == 96 and "samples" in r]
    assert any(any(n == 96 for n, _ in r["samples"]) for r in cut)


@pytest.mark.parametrize("run", RUNS, ids=[r["id"] for r in RUNS])
def test_lengths_match_llamafactory(run, tokenizers):
    if run["dataset"] == "alpaca_parquet":
        pytest.importorskip("pyarrow")  # parquet files need pyarrow (an optional dependency)
    s, records, problems, read_errors, packer = _scan(run, tokenizers)
    ok = [r for r in records if r[2] == K.OK]
    if "error" in run:
        # LF could not build this dataset at all; the doctor must say why instead of reporting clean numbers
        assert read_errors or any(p[4] for p in problems), run["error"]
        return
    if run["stage"] == "rm":
        got = [[r[11][0], r[11][1], r[11][2], r[11][3]] for r in ok]
        assert got == run["samples"]
    elif run["stage"] == "pt" and s.packing:
        assert packer.blocks == len(run["samples"])
        assert all(n == s.cutoff_len for n in run["samples"])
    elif run["stage"] == "pt":
        assert [r[8] for r in ok] == run["samples"]
    elif run["stage"] == "kto":  # the desirable/undesirable sequence (the KL sequence is not counted)
        assert [[r[8], r[9]] for r in ok] == [s[:2] for s in run["samples"]]
    elif run["stage"] == "ppo":  # unsupervised: input_ids is the prompt, labels the response
        assert [[r[6], r[7]] for r in ok] == run["samples"]
    elif s.packing:
        assert packer.packs == len(run["rows"])
        assert all(n == s.cutoff_len for n, _ in run["rows"])
        if s.neat_packing:
            assert packer.tokens == sum(real for _, real in run["rows"])
    else:
        assert [[r[8], r[9]] for r in ok] == run["samples"]


EXTRA_ROWS = [  # rows that must leave the plain-template shortcut or that stress its string handling
    {"instruction": "say {{idx}} and {{content}}", "input": "", "output": "ok {{content}}", "system": "sys"},
    {"instruction": "Hi", "input": "there", "output": "", "system": "You are {{content}} here."},
    {"instruction": "", "input": "", "output": "only an answer", "system": ""},
    {"instruction": "multi", "input": "", "output": "turns", "system": "S",
     "history": [["first q", "first a"], ["second {{idx}}", "second a"]]},
]


@pytest.mark.parametrize("tok", ["qwen", "llama", "chatml"])
@pytest.mark.parametrize("name", sorted(K.T.TEMPLATES))
def test_plain_template_shortcut_gives_the_general_paths_counts(name, tok, tokenizers):
    """`Encoder._collect_plain` (the per-row shortcut for plain templates) must give exactly the records of the
    general ``plan_multiturn`` path, for every template, on every sft fixture dataset, with a real BPE
    tokenizer (so that a text split or joined differently would change a count)."""
    s = K.DataSettings(template=name, cutoff_len=64)
    t = K.T.get_template(name)
    counter = _counter(tokenizers[tok], t)
    fast, slow = K.Encoder(counter, t, s), K.Encoder(counter, t, s)
    slow._roles = None
    from finetune_doctor.readers.data.datasets import DEFAULT_COLUMNS, DEFAULT_TAGS

    cols = {**DEFAULT_COLUMNS, "system": "system", "history": "history"}
    extra = K.ConvSpec("alpaca", False, cols, dict(DEFAULT_TAGS))
    assert fast.process(EXTRA_ROWS, 0, [1, 2, 3, 4], extra) == slow.process(EXTRA_ROWS, 0, [1, 2, 3, 4], extra)
    for ds in ("alpaca_demo", "alpaca_lines", "sharegpt_tools", "chat_roles", "wrong_roles"):
        (spec,), _ = resolve_datasets([ds], str(FIXTURES))
        for ch in iter_chunks(spec, chunk_rows=50):
            cs = K.ConvSpec.of(spec)
            assert fast.process(ch.rows, ch.first_index, ch.lines, cs) == \
                slow.process(ch.rows, ch.first_index, ch.lines, cs)
    if t.kind == "plain" and "{{idx}}" not in str(t.user):
        assert fast._roles is not None  # the shortcut is actually exercised for plain templates


def test_a_template_tail_is_counted_apart_only_when_the_tokenizer_splits_there(tokenizers):
    """`ExactCounter.separate_suffix`: a tail opening with a special token is its own piece; not when that
    token strips the space before it, must be a single word, is encoded as text, or when another added token
    could match across the boundary. Each verdict is checked against real encodings."""
    from tokenizers import AddedToken

    t = K.T.get_template("qwen")
    texts = ["hello world", "a ", "x\n", "tail <", "<|im_", ""]

    def additive(c: K.ExactCounter, tail: str) -> bool:
        return all(c.length(x + tail) == c.length(x) + c.length(tail) for x in texts)

    c = K.ExactCounter(tokenizers["qwen"], t)
    assert c.separate_suffix("<|im_end|>\n") and additive(c, "<|im_end|>\n")
    assert not c.separate_suffix("\n<|im_end|>")  # starts with text: may merge with the content
    c.tk.add_special_tokens([AddedToken("<|strip|>", special=True, normalized=False, lstrip=True)])
    assert not c.separate_suffix("<|strip|>\n") and not additive(c, "<|strip|>\n")
    c.tk.add_special_tokens([AddedToken("<|word|>", special=True, normalized=False, single_word=True)])
    assert not c.separate_suffix("<|word|>") and not additive(c, "<|word|>")
    c.tk.add_special_tokens([AddedToken("<<|im_end|>", special=True, normalized=False)])  # spans "x<" + tail
    assert not c.separate_suffix("<|im_end|>") and not additive(c, "<|im_end|>")
    c2 = K.ExactCounter(tokenizers["qwen"], t, split_special_tokens=True)
    assert not c2.separate_suffix("<|im_end|>\n")
