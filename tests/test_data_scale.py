"""Scanning at scale: worker processes give the same facts as one process; memory does not grow with the file.

The million-row scan of the issue is benchmarks/bench_data.py (recorded in benchmarks/results/bench_data.md); it
also runs here when FD_DATA_MILLION=1 is set, outside the default test run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_doctor.analyzers.data import tokens as K
from finetune_doctor.readers.data.datasets import resolve_datasets
from test_data_fixtures import build_tokenizer

ROOT = Path(__file__).resolve().parent.parent
WORDS = "the model reads a long answer about data and tokens before it writes 你好 again".split()


def write_rows(path: Path, n: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            row = {"instruction": " ".join(rng.choices(WORDS, k=rng.randint(3, 40))), "input": "",
                   "output": " ".join(rng.choices(WORDS, k=int(rng.lognormvariate(3.0, 1.0)) + 1))}
            if i % 997 == 5:
                f.write('{"instruction": "broken line"\n')  # malformed rows on the way
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (path.parent / "dataset_info.json").write_text(json.dumps({"big": {"file_name": path.name}}))


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> str:
    return str(build_tokenizer(tmp_path_factory.mktemp("tok") / "qwen", "qwen"))


@pytest.mark.slow
def test_workers_give_identical_facts(tmp_path, tok):
    write_rows(tmp_path / "big.jsonl", 6000)
    specs, _ = resolve_datasets(["big"], str(tmp_path))
    s = K.DataSettings(template="qwen", cutoff_len=64, micro_batch=4)
    t, _ = K.resolve_template(s, tok)

    def facts(workers: int) -> dict:
        return K.analyze_datasets(specs, s, K.ExactCounter(tok, t), t, workers=workers, chunk_rows=500,
                                  parallel_min_bytes=0)

    one, two = facts(1), facts(2)
    assert one == two
    ov = one["overall"]
    assert ov["rows"] == 6000 + 7 and ov["unreadable"] == 7 and ov["samples"] == 6000
    assert one["problems"][0]["count"] == 7 and one["partial"]


# Peak RSS is read from /proc/self/status (VmHWM): it starts afresh at exec, whereas ru_maxrss of a child keeps
# the size of the (large) pytest process it was forked from.
_PEAK = """
import json, sys
sys.path.insert(0, {root!r})
from finetune_doctor.analyzers.data.datascan import collect
cfg = {{"model_name_or_path": {tok!r}, "dataset": "big", "dataset_dir": {d!r}, "template": "qwen",
       "cutoff_len": 256}}
f = collect(cfg, {d!r} + "/c.yaml", workers=1, strict=True)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"rows": f["overall"]["rows"], "rss": hwm}}))
"""
needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")


def peak_rss_kib(d: Path, tok: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PEAK.format(root=str(ROOT), tok=tok, d=str(d))],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@needs_proc
def test_memory_does_not_grow_with_the_file(tmp_path, tok):
    small, large = tmp_path / "s", tmp_path / "l"
    small.mkdir()
    large.mkdir()
    write_rows(small / "big.jsonl", 5000)
    write_rows(large / "big.jsonl", 60000)
    a, b = peak_rss_kib(small, tok), peak_rss_kib(large, tok)
    assert (a["rows"], b["rows"]) == (5000 + 6, 60000 + 61)  # rows + the malformed lines (one per 997)
    size_mib = (large / "big.jsonl").stat().st_size / 2**20
    growth_mib = (b["rss"] - a["rss"]) / 1024
    # holding the rows would cost several times the file size in Python objects; streaming costs ~nothing
    assert growth_mib < max(8.0, 0.5 * size_mib), (growth_mib, size_mib)


@pytest.mark.slow
@needs_proc
@pytest.mark.skipif(os.environ.get("FD_DATA_MILLION") != "1", reason="set FD_DATA_MILLION=1 (takes minutes)")
def test_million_rows_bounded_memory(tmp_path, tok):
    d = tmp_path / "m"
    d.mkdir()
    write_rows(d / "big.jsonl", 1_000_000)
    r = peak_rss_kib(d, tok)
    assert r["rows"] == 1_000_000 + 1_000_000 // 997 + 1
    assert r["rss"] / 1024 < 400, r  # MiB: interpreter + tokenizers + bounded buffers and caches
