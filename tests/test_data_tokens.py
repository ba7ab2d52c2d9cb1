"""Truncation, labels, EOS loss, packing and statistics, against references derived by hand.

A character counter stands in for the tokenizer here (one token per character, special slots one token), so every
expected number below is computed in the comment next to it from the template strings of LLaMA-Factory's
template.py and its infer_seqlen rule, independently of the code under test. Token-exact parity with
LLaMA-Factory itself is tests/test_data_lf_parity.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from finetune_doctor.analyzers.data import templates as T
from finetune_doctor.analyzers.data import tokens as K
from finetune_doctor.readers.data.datasets import DEFAULT_COLUMNS, DEFAULT_TAGS


class CharCounter:
    """One token per character; BOS and EOS exist."""

    approximate = False
    has_bos = has_eos = True
    add_bos_token = False
    eos = "</s>"
    bos = "<s>"

    def length(self, text: str) -> int:
        return len(text)

    def lengths(self, texts: list[str]) -> list[int]:
        return [len(t) for t in texts]


ALPACA = K.ConvSpec("alpaca", False, dict(DEFAULT_COLUMNS), dict(DEFAULT_TAGS))
SHAREGPT = K.ConvSpec("sharegpt", False, dict(DEFAULT_COLUMNS), dict(DEFAULT_TAGS))
PAIRS = K.ConvSpec("sharegpt", True, {**DEFAULT_COLUMNS, "chosen": "chosen", "rejected": "rejected"},
                   dict(DEFAULT_TAGS))


def one(template: str, row: dict, cs: K.ConvSpec = ALPACA, **settings) -> dict:
    s = K.DataSettings(template=template, **settings)
    t = T.get_template(template)
    enc = K.Encoder(CharCounter(), t, s)
    (rec,), problems = enc.process([row], 0, [1], cs)
    keys = ("index", "line", "status", "source_full", "target_full", "total_full", "source", "target", "total",
            "labels", "flags", "pair")
    return dict(zip(keys, rec), problems=problems)


# default template: user = "Human: {q}" EOS "\nAssistant:"  → len(q) + 7 + 1 + 11
#                   assistant = "{a}" EOS "\n"               → len(a) + 1 + 1 ; EOS tail = len("\n") = 1
ROW = {"instruction": "abc", "input": "", "output": "hello"}  # source 3+19 = 22, target 5+2 = 7


def test_no_truncation():
    r = one("default", ROW, cutoff_len=100)
    assert (r["source_full"], r["target_full"], r["total_full"]) == (22, 7, 29)
    assert (r["total"], r["labels"], r["flags"]) == (29, 7, 0)


def test_short_target_is_kept_whole_and_source_cut():
    # infer_seqlen(22, 7, 25): 7*2 < 25 → target kept (7), source min(25-7, 22) = 18
    r = one("default", ROW, cutoff_len=25)
    assert (r["source"], r["target"], r["total"], r["labels"]) == (18, 7, 25, 7)
    assert r["flags"] & K.TRUNCATED and not r["flags"] & K.EOS_LOST


def test_proportional_cut_loses_eos():
    # infer_seqlen(22, 7, 12): 14 >= 12 and 44 >= 12 → target int(12*7/29) = 2, source 10; 5 tokens cut > tail 1
    r = one("default", ROW, cutoff_len=12)
    assert (r["source"], r["target"], r["total"]) == (10, 2, 12)
    assert r["flags"] & K.EOS_LOST


def test_cutting_only_the_tail_keeps_the_eos():
    row = {"instruction": "abc", "input": "", "output": "x" * 20}  # source 22, target 22
    # cutoff 43: int(43*22/44) = 21 → only the trailing "\n" is cut: EOS kept
    r = one("default", row, cutoff_len=43)
    assert (r["target"], r["flags"] & K.EOS_LOST) == (21, 0) and r["flags"] & K.TRUNCATED
    # cutoff 41: int(41*22/44) = 20 → EOS and "\n" cut
    assert one("default", row, cutoff_len=41)["flags"] & K.EOS_LOST


def test_multiturn_budget_drops_later_turns():
    row = {"conversations": [{"from": "human", "value": "a" * 10}, {"from": "gpt", "value": "b" * 10},
                             {"from": "human", "value": "c" * 10}, {"from": "gpt", "value": "d" * 10}]}
    # turn 1: source 10+19 = 29, target 12; turn 2 the same. cutoff 45:
    # turn 1: infer_seqlen(29, 12, 45): 24 < 45 → (29, 12), total 41; turn 2 budget 4: 24 >= 4, 58 >= 4 →
    # int(4*12/41) = 1 → (3, 1), total 45, labels 12 + 1
    r = one("default", row, SHAREGPT, cutoff_len=45)
    assert (r["total"], r["labels"]) == (45, 13)
    assert r["flags"] & K.TRUNCATED and r["flags"] & K.EOS_LOST
    # cutoff 41: the budget is used up by turn 1 → turn 2 dropped entirely
    r = one("default", row, SHAREGPT, cutoff_len=41)
    assert (r["total"], r["labels"]) == (41, 12)
    assert r["flags"] & K.TURNS_DROPPED and not r["flags"] & K.EOS_LOST


def test_mask_history_keeps_the_last_turn_and_labels_it_only():
    row = {"conversations": [{"from": "human", "value": "a" * 10}, {"from": "gpt", "value": "b" * 10},
                             {"from": "human", "value": "c" * 10}, {"from": "gpt", "value": "d" * 10}]}
    # reversed: last turn (29, 12) first → labels 12; first turn gets budget 4 → (3, 1) unlabelled
    r = one("default", row, SHAREGPT, cutoff_len=45, mask_history=True)
    assert (r["total"], r["labels"]) == (45, 12)


def test_train_on_prompt_labels_the_source():
    r = one("default", ROW, cutoff_len=100, train_on_prompt=True)
    assert r["labels"] == 29


def test_efficient_eos_template():
    # chatglm3: prefix [gMASK] sop (2); user <|user|> "\n" q <|assistant|> → 1+1+3+1; assistant "\n" a → 1+5
    # LF reserves one EOS: total = 2 + 6 + 6 + 1 = 15; labels = target 6 + final EOS 1
    r = one("chatglm3", ROW, cutoff_len=100)
    assert (r["source_full"], r["target_full"], r["total"], r["labels"]) == (8, 6, 15, 7)
    # the EOS is appended after truncation: never lost, even when the response is cut
    r = one("chatglm3", {"instruction": "abc", "input": "", "output": "y" * 40}, cutoff_len=20)
    assert r["flags"] & K.TRUNCATED and not r["flags"] & K.EOS_LOST and r["total"] == 20


def test_empty_response_with_the_empty_template_has_no_label():
    r = one("empty", {"instruction": "abc", "input": "", "output": ""}, cutoff_len=100)
    assert r["labels"] == 0 and r["flags"] & K.EMPTY_TARGET
    # with the default template the EOS and "\n" are still targets
    assert one("default", {"instruction": "abc", "input": "", "output": ""}, cutoff_len=100)["labels"] == 2


def test_pairwise_truncates_prompt_against_longest_response():
    row = {"conversations": [{"from": "human", "value": "q" * 30}],
           "chosen": {"from": "gpt", "value": "c" * 10}, "rejected": {"from": "gpt", "value": "r" * 40}}
    # prompt 30 + 19 = 49; chosen 12; rejected 42. cutoff 60: 84 >= 60, 98 >= 60 → target int(60*42/91) = 27,
    # prompt min(33, 49) = 33; chosen kept 12 → 45, rejected 27 → 60
    r = one("default", row, PAIRS, cutoff_len=60, stage="dpo")
    assert r["pair"] == (45, 60, 12, 27)
    assert r["total"] == 60 and r["flags"] & K.TRUNCATED and r["flags"] & K.EOS_LOST


def test_sharegpt_validity_matches_llamafactory():
    bad = {"conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "y"}]}
    r = one("default", bad, SHAREGPT, cutoff_len=100)
    assert r["status"] == K.DROPPED and r["problems"][0][0] == "wrong_role_order"
    odd = {"conversations": [{"from": "human", "value": "x"}]}
    assert one("default", odd, SHAREGPT, cutoff_len=100)["problems"][0][0] == "odd_message_count"
    tools_bad = {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}],
                 "tools": "[{name: search}]"}
    cs = K.ConvSpec("sharegpt", False, {**DEFAULT_COLUMNS, "tools": "tools"}, dict(DEFAULT_TAGS))
    r = one("default", tools_bad, cs, cutoff_len=100)
    assert r["status"] == K.ERROR and r["problems"][0][4] is True  # LF fails on it


def test_alpaca_without_response_is_dropped_for_sft():
    r = one("default", {"instruction": "abc", "input": "", "output": None}, cutoff_len=100)
    assert r["status"] == K.DROPPED and r["problems"][0][0] == "no_response"


def test_infer_seqlen_branches():
    assert K.infer_seqlen(100, 10, 50) == (40, 10)      # short target kept whole
    assert K.infer_seqlen(10, 100, 50) == (10, 40)      # short source kept whole
    assert K.infer_seqlen(100, 100, 50) == (25, 25)     # proportional
    assert K.infer_seqlen(0, 0, 50) == (0, 0)


def test_percentiles_are_nearest_rank():
    c = Counter(range(1, 101))  # 1..100
    assert [K.percentile(c, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert K.percentile(Counter({7: 3}), 99) == 7
    assert K.percentile(Counter(), 50) is None


def test_histogram_bins_hold_every_sample_and_the_cutoff():
    c = Counter({5: 2, 120: 1, 3000: 1})
    h = K.histogram(c, cutoff=2048)
    assert sum(h["counts"]) == 4 and h["edges"][-1] > 3000
    w = h["edges"][1]
    assert h["edges"][h["cutoff_bin"]] <= 2048 < h["edges"][h["cutoff_bin"]] + w


def test_greedy_knapsack_as_llamafactory():
    # sorted [2, 3, 5, 7, 9], capacity 10: take 9 (room 1) → pack [9]; then 7 (room 3), 3 → [7, 3];
    # then 5 (room 5), 2 → [5, 2]
    assert K.greedy_knapsack([5, 9, 2, 7, 3], 10) == [[9], [7, 3], [5, 2]]


def test_worst_micro_batch_padded_and_pairwise():
    agg = K.DatasetAggregate("x")
    for i, n in enumerate([10, 50, 33, 7]):
        agg.add((i, i + 1, K.OK, 0, n, n, 0, n, n, n, 0, None), "f")
    w = K.worst_micro_batch(agg, K.DataSettings(micro_batch=3, cutoff_len=64))
    # padded to the longest (50 → 56, a multiple of 8) for 3 rows; real tokens 50 + 33 + 10
    assert (w["seq_len"], w["tokens"], w["real_tokens"], w["cutoff_tokens"]) == (56, 168, 93, 192)
    p = K.worst_micro_batch(agg, K.DataSettings(micro_batch=3, cutoff_len=64, packing=True, packing_explicit=True))
    assert p["tokens"] == 3 * 64 and p["mode"] == "packed"


def test_approximate_counter_is_a_rough_estimate():
    a = K.ApproxCounter(T.get_template("qwen"))
    assert a.length("<|im_start|>") == 1
    assert a.length("你好世界") == 4
    assert a.length("hello world, this is text") == 7   # 25 bytes / 4, rounded up
    assert a.approximate


@pytest.mark.parametrize("name", sorted(T.TEMPLATES))
def test_every_template_formats_a_tool_conversation(name):
    msgs = [{"role": "user", "content": "hi"},
            {"role": "function", "content": '{"name": "f", "arguments": {"x": 1}}'},
            {"role": "observation", "content": "42"}, {"role": "assistant", "content": "done"}]
    t = T.get_template(name)
    slots = T.message_slots(t, msgs, "sys", '[{"name": "f", "description": "d", "parameters": '
                                            '{"type": "object", "properties": {"x": {"type": "integer"}}}}]')
    assert len(slots) == 4 and all(slots)
