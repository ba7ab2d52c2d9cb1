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
