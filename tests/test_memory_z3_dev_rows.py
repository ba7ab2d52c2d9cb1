"""benchmarks/memory_z3_dev_rows.py: the source keys rows are grouped by, the offload tag, and the rule that calls a
pair of rows contradicting (from the two ratios only), with hand-made rows."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import memory_z3_dev_rows as z  # noqa: E402


def test_repo_of_keys_a_project_and_a_thread():
    assert z.repo_of({"source": "https://github.com/modelscope/ms-swift/blob/8ae0ade71/examples/train/a.sh"}) == \
        "modelscope/ms-swift"
    assert z.repo_of({"source": "https://github.com/hiyouga/LlamaFactory/issues/7282#issuecomment-1"}) == \
        "hiyouga/LlamaFactory#7282"
    assert z.repo_of({"source": "https://gist.github.com/chenyaofo/d4cd6a20"}) == "chenyaofo/d4cd6a20"
    assert z.repo_of({"source": "https://example.org/page"}) == "example.org"


def test_offload_tag_reads_the_device():
    zo = {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "none"}}
    assert z.offload_of({"deepspeed": {"zero_optimization": zo}}) == "o"
    zo["offload_param"] = {"device": "cpu"}
    assert z.offload_of({"deepspeed": {"zero_optimization": zo}}) == "op"
    assert z.offload_of({"deepspeed": {"zero_optimization": {"stage": 3}}}) == "-"


def test_contradiction_kinds():
    # the gist's b8 pair: 39.1 -> 63.9 GiB measured (x1.63), the same terms predicted (x1.00)
    assert z.contradiction(63.9 / 39.1, 1.00) == "same-terms"
    # LF #7282: batch 1 and 64 both 25.1 GiB, predicted x22
    assert z.contradiction(1.00, 22.26) == "same-figure"
    # measured down 16 %, predicted up 47 %
    assert z.contradiction(0.84, 1.47) == "opposite"
    # both move the same way, or too little to tell
    assert z.contradiction(1.30, 1.20) is None
    assert z.contradiction(1.15, 1.00) is None     # 15 % apart: under the 20 % bar
    assert z.contradiction(1.02, 1.15) is None     # predicted moves under 20 %


def _item(i, **kw):
    base = {"id": i, "repo": "o/r", "source": "o/r/a", "model": "m", "counter": "allocated", "seq": 4096, "mb": 8,
            "ga": 1, "gc": True, "offload": "-", "world": 8, "method": "full", "pairwise": False, "samples": "fill",
            "measured": 40.0, "predicted": 34.0}
    base.update(kw)
    return base


def test_pairs_compare_only_comparable_lengths():
    a, b = _item("a"), _item("b", ga=2, measured=64.0)
    (p,) = z.pairs([a, b])
    assert p["differ"] == ["ga"] and abs(p["measured_ratio"] - 1.6) < 1e-9 and p["kind"] == "same-terms"
    # another counter, model or repository: not a pair
    assert z.pairs([a, _item("c", counter="unknown")]) == []
    assert z.pairs([a, _item("c", repo="x/y")]) == []
    # one fills its length, the other is a dataset run (an upper bound): not compared
    assert z.pairs([a, _item("c", samples="dataset", measured=20.0)]) == []
    # two dataset runs of different pages: lengths unknown on both sides, not compared; of one page: compared
    d1 = _item("d1", samples="dataset")
    assert z.pairs([d1, _item("d2", samples="dataset", source="o/r/b", measured=60.0)]) == []
    (q,) = z.pairs([d1, _item("d2", samples="dataset", measured=60.0)])
    assert q["differ"] == ["(no stated key)"] and q["kind"] == "same-terms"


def _z3(i, err, samples="fill", counter="allocated", floor=None, engine="ZeRO-3"):
    return {"id": i, "engine": engine, "samples": samples, "counter": counter, "err": err, "err_floor": floor}


def test_stated_needs_fill_a_named_counter_and_no_offload():
    assert z.stated(_z3("a", -0.1))
    assert not z.stated(_z3("b", -0.1, counter="unknown"))
    assert not z.stated(_z3("c", -0.1, samples="dataset"))
    assert not z.stated(_z3("d", -0.1, engine="ZeRO-3+offload"))


def test_length_floor_err_bounds_what_shorter_samples_can_reach():
    # under at cutoff_len: shorter samples only lower the prediction, the error stays
    assert z.length_floor_err(_z3("u", -0.30, samples="dataset", floor=-0.60)) == 0.30
    # over at cutoff_len, under at 128 tokens: some length in between matches
    assert z.length_floor_err(_z3("m", 0.40, samples="dataset", floor=-0.20)) == 0.0
    # over even at 128 tokens: that much over at best
    assert abs(z.length_floor_err(_z3("o", 2.70, samples="dataset", floor=0.25)) - 0.25) < 1e-12
    # a row that fills its length keeps its error; a dataset row never re-predicted too
    assert z.length_floor_err(_z3("f", 0.40, floor=-0.2)) == 0.40
    assert z.length_floor_err(_z3("n", 0.40, samples="dataset")) == 0.40


def test_split_table_medians():
    items = [_z3("a1", -0.05), _z3("a2", -0.15), _z3("a3", 0.25),                       # (a): 5, 15, 25 -> 15 %
             _z3("b1", -0.40, counter="unknown"),                                      # (b) fill, unknown counter
             _z3("d1", 0.50, samples="dataset", counter="unknown", floor=-0.10),        # floor 0
             _z3("d2", -0.20, samples="dataset", counter="unknown", floor=-0.50),       # floor 20 %
             _z3("x", 9.0, engine="ZeRO-3+offload")]                                   # not in the split
    g = {r["name"]: r for r in z.split_table(items)}
    a = g["(a) stated: fill, counter stated"]
    assert a["n"] == 3 and abs(a["median_abs"] - 0.15) < 1e-12 and (a["under"], a["within"], a["over"]) == (1, 1, 1)
    b = g["(b) the rest"]
    assert b["n"] == 3 and abs(b["median_abs"] - 0.40) < 1e-12
    assert g["(b) samples: dataset"]["n"] == 2
    assert g["(a)+(b), no offload"]["n"] == 6
    # floors: 0.05 0.15 0.25 0.40 0.0 0.20 -> median 0.175
    f = g["(a)+(b), every dataset row at its best length (a floor)"]
    assert abs(f["median_abs"] - 0.175) < 1e-12 and f["within"] == 2


def test_at_length_caps_the_cutoff_only():
    row = {"id": "r", "config": {"cutoff_len": 4096, "per_device_train_batch_size": 2}}
    short = z.at_length(row, 128)
    assert short["config"] == {"cutoff_len": 128, "per_device_train_batch_size": 2}
    assert row["config"]["cutoff_len"] == 4096                      # the row itself is not changed
    assert z.at_length({"config": {"cutoff_len": 64}}, 128)["config"]["cutoff_len"] == 64
