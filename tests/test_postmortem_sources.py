"""More sources and many ranks: wandb, swanlab and mlflow run folders, LLaMA-Factory's running_log.txt,
torchelastic error files, flight-recorder dumps, per-rank and per-node logs, recordings of several nodes.

The wandb fixture (fixtures/postmortem/trackers/wandb/) was written by wandb 0.31's own offline writer
(``wandb.init(mode="offline")``, 40 rows of train/loss with 63.37 at step 30); the multi-rank fixture by
fixtures/postmortem/make_multirank.py (its docstring cites the line behind every message).
"""

from __future__ import annotations

import builtins
import glob
import json
import os
import shutil
import struct
import zlib

import pytest

from finetune_doctor.readers.runlogs import leveldblog
from finetune_doctor.readers.runlogs.trackers import read_mlflow_metric, read_swanlab, read_wandb
from pmhelp import diagnose_dir

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem")
WANDB_FILE = glob.glob(os.path.join(FIX, "trackers", "wandb", "offline-run-*", "run-*.wandb"))[0]


# -- trackers -----------------------------------------------------------------------------------------------------

def _wandb_values(fe):
    loss = next(s for s in fe.series if s.name == "train/loss")
    return list(loss.steps), list(loss.values)


def test_wandb_run_file_through_wandbs_own_record_type():
    pytest.importorskip("wandb")
    fe = read_wandb(WANDB_FILE)
    steps, vals = _wandb_values(fe)
    assert steps == list(range(1, 41)) and vals[29] == 63.37 and vals[0] == pytest.approx(1.99)
    assert "wandb's own Record type" in fe.read.note and fe.read.complete


def test_wandb_run_file_without_wandb_reads_the_same(monkeypatch):
    real = builtins.__import__

    def no_wandb(name, *a, **k):
        if name.startswith("wandb"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    fe = read_wandb(WANDB_FILE)
    steps, vals = _wandb_values(fe)
    assert steps == list(range(1, 41)) and vals[29] == 63.37 and "wire format" in fe.read.note


def test_wandb_folder_is_diagnosed(tmp_path):
    d = tmp_path / "out"
    shutil.copytree(os.path.join(FIX, "trackers"), d, symlinks=True)
    r = diagnose_dir(str(d))
    spike = next(f for f in r.findings if f.name == "loss-spike")
    assert "63.37" in spike.message and "step 30" in spike.message


def test_truncated_wandb_file_keeps_what_came_before(tmp_path):
    data = open(WANDB_FILE, "rb").read()
    p = tmp_path / "run-x.wandb"
    p.write_bytes(data[:len(data) // 2])
    fe = read_wandb(str(p))
    assert 0 < len(fe.series[0]) < 40 and not fe.read.complete


def _swanlab_file(path, rows):
    """Write a run file the way swanlab's DataStoreWriter frames it (swanlab/sdk/internal/core_python/store at
    b444209a): header, then one FULL record per ScalarRecord (record.proto field 13)."""
    def varint(n):
        out = b""
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])

    def field(num, wt, payload):
        return varint(num << 3 | wt) + payload

    def ld(num, b):
        return field(num, 2, varint(len(b)) + b)

    with open(path, "wb") as fh:
        fh.write(struct.pack("<4sHB", b":SWL", 0xE1D6, 2))
        for key, step, val in rows:
            scalar = ld(1, key.encode()) + field(2, 0, varint(step)) + ld(5, field(1, 1, struct.pack("<d", val)))
            rec = field(1, 0, varint(step)) + ld(13, scalar)
            crc = zlib.crc32(rec, zlib.crc32(bytes([1]))) & 0xFFFFFFFF
            fh.write(struct.pack("<IHB", crc, len(rec), 1) + rec)


def test_swanlab_run_file(tmp_path):
    p = tmp_path / "run-abc.swanlab"
    _swanlab_file(p, [("train/loss", s, 2.0 - s / 100 if s != 7 else float("nan")) for s in range(1, 11)])
    fe = read_swanlab(str(p))
    (s,) = fe.series
    assert s.name == "train/loss" and list(s.steps) == list(range(1, 11)) and s.values[5] == 1.94
    assert s.values[6] != s.values[6]   # NaN survives
    # a flipped payload byte fails swanlab's CRC: the scan stops there, the records before it are kept
    raw = bytearray(p.read_bytes())
    raw[200] ^= 0xFF
    p.write_bytes(bytes(raw))
    fe = read_swanlab(str(p))
    assert not fe.read.complete and "checksum" in fe.read.problems[0]


def test_mlflow_metric_files(tmp_path):
    m = tmp_path / "mlruns" / "0" / "abcdef" / "metrics"
    m.mkdir(parents=True)
    (m / "loss").write_text("".join(f"{1700000000000 + s} {v} {s}\n" for s, v in
                                    [(10, 2.1), (20, 2.0), (30, 1.9), (40, 41.5)]))
    (m / "learning_rate").write_text("1700000000000 0.0001 10\nbroken line\n")
    fe = read_mlflow_metric(str(m / "loss"), "loss")
    assert list(fe.series[0].steps) == [10, 20, 30, 40] and fe.series[0].values[3] == 41.5
    assert read_mlflow_metric(str(m / "learning_rate"), "learning_rate").read.problems == ("1 malformed line(s)",)
    r = diagnose_dir(str(tmp_path))
    assert any(f.name == "loss-spike" and "41.5" in f.message for f in r.findings)


def test_llamafactory_running_log(tmp_path):
    """running_log.txt: LF's LoggerHandler format (extras/logging.py:39-41) with the webui metric line
    (train/callbacks.py:302-307)."""
    d = tmp_path / "saves"
    d.mkdir()
    lines = [f"[INFO|2025-06-01 10:00:{s:02d}] callbacks.py:307 >> {{'loss': {v:.4f}, 'learning_rate': 1.0000e-04, "
             f"'epoch': {s / 100:.2f}}}" for s, v in [(1, 2.3), (2, 2.2), (3, 2.15), (4, 2.1), (5, 45.0)]]
    (d / "running_log.txt").write_text("\n".join(lines) + "\n")
    r = diagnose_dir(str(d))
    assert r.sections["read"]["files"][0]["kind"] == "text-log"
    assert any(f.name == "loss-spike" and "45" in f.message for f in r.findings)


# -- many ranks and nodes -----------------------------------------------------------------------------------------

def test_multirank_first_failure_waiting_stragglers_and_placement():
    r = diagnose_dir(os.path.join(FIX, "multirank"))
    rk = r.sections["postmortem"]["ranks"]
    assert rk["count"] == 8 and rk["nodes"] == ["node0", "node1"]
    ff = rk["first_failed"]
    assert (ff["rank"], ff["node"], ff["gpu"], ff["kind"]) == (5, "node1", 1, "CUDA out of memory")
    assert rk["waiting"] == [0, 1, 2, 3, 4, 6, 7]
    assert [(s["rank"], round(s["ratio"], 2)) for s in rk["stragglers"]] == [(6, 1.5)]
    assert rk["desync"]["lagging"] == [5] and "1580" in rk["desync"]["how"]
    names = [f.name for f in r.findings]
    assert names[:2] == ["cuda-oom", "nccl-timeout"] and "rank-failed-first" in names and "rank-straggler" in names
    nodes = {(g["node"], g["index"]) for g in r.sections["postmortem"]["gpus"]}
    assert nodes == {(f"node{n}", i) for n in (0, 1) for i in range(4)}   # both nodes' recordings joined


def test_flight_dumps_refuse_pickled_code(tmp_path):
    """A dump is a pickle: one that names a global (os.system) is refused, never run."""
    import pickle

    from finetune_doctor.readers.runlogs.flight import read_flight_dump

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"entries": [Evil()], "version": "2.4"}))
    fe = read_flight_dump(str(p), None)
    assert fe.read.kind == "flight-dump" and "refused" in fe.read.problems[0]
    assert not (tmp_path / "pwned").exists()


def test_flight_dumps_fallback_without_torch(monkeypatch):
    from finetune_doctor.readers.runlogs import flight
    monkeypatch.setattr(flight, "_with_torch", lambda records: None)
    recs = [flight.read_flight_dump(p, None).flight[0]
            for p in sorted(glob.glob(os.path.join(FIX, "multirank", "traces", "nccl_trace_rank_*")))]
    got = flight.laggards(recs)
    assert got["lagging"] == [5] and got["seq"] == 1580 and got["source"] == "flight recorder"


def test_elastic_error_file():
    from finetune_doctor.readers.runlogs.elastic import read_elastic_error

    fe = read_elastic_error(os.path.join(FIX, "multirank", "node1", "attempt_0", "1", "error.json"))
    assert fe.timing["fail_wall"] == 1774058400 + 7 * 60 + 1
    assert any(n.kind == "exception" and n.value["cls"] == "OutOfMemoryError" for n in fe.notices)
    assert fe.ooms and fe.ooms[0].requested == 1.88 * (1 << 30)
    from finetune_doctor.readers.runlogs.runlayout import origin_of

    assert origin_of(os.path.join(FIX, "multirank", "node1", "attempt_0", "1", "error.json"),
                     os.path.join(FIX, "multirank")) == {"local_rank": 1, "attempt": 0, "node": "node1",
                                                          "source": "path"}


@pytest.mark.slow
def test_many_rank_files_are_read_in_parallel_with_the_same_result(tmp_path):
    from finetune_doctor.readers.runlogs import runlayout
    d = tmp_path / "big"
    src = os.path.join(FIX, "multirank")
    shutil.copytree(src, d)
    pad = ("2026-03-21T02:00:30.000000000Z [INFO|2026-03-21 02:00:30] llamafactory.data.loader:64 >> "
           "Loading dataset identity.json...\n") * 60000      # ~7 MB per rank log: above the parallel threshold
    for p in glob.glob(str(d / "node*" / "rank*.log")):
        text = open(p, encoding="utf-8").read()
        first, rest = text.split("\n", 1)
        open(p, "w", encoding="utf-8").write(first + "\n" + pad + rest)
    serial = runlayout.collect(str(d), [], workers=1)
    parallel = runlayout.collect(str(d), [], workers=2)
    assert [f.read.path for f in serial.files] == [f.read.path for f in parallel.files]
    assert [(f.origin, f.timing, len(f.nccl), len(f.ooms)) for f in serial.files] == \
        [(f.origin, f.timing, len(f.nccl), len(f.ooms)) for f in parallel.files]


def test_grep_finder_and_the_readers_own_expression_agree(tmp_path, monkeypatch):
    """A plain log of >= 4 MiB has its trigger words found by grep (readers/runlogs/loggrep.py); the parse must be the
    same as with the reader's own expression, record for record."""
    import shutil as _sh

    from finetune_doctor.readers.runlogs import loggrep
    from finetune_doctor.readers.runlogs.logs import read_text_log

    if _sh.which("grep") is None:
        pytest.skip("no grep on this machine")
    msg = os.path.join(FIX, "messages")
    parts = [open(os.path.join(msg, n), encoding="utf-8").read() for n in sorted(os.listdir(msg))
             if n.endswith((".log", ".txt"))]
    bar = "".join(f"  1%|▏         | {s}/900 [00:{s % 60:02d}<40:00,  3.00s/it]\r" for s in range(1, 40)) + "\n"
    body = []
    size = 0
    i = 0
    while size < loggrep.MIN_BYTES + (1 << 20):
        chunk = bar + f"{{'loss': {2 - i / 1e5:.4f}, 'grad_norm': 1.0, 'learning_rate': 1e-4, 'epoch': 0.01}}\n" \
            + parts[i % len(parts)]
        body.append(chunk)
        size += len(chunk.encode())
        i += 1
    p = tmp_path / "big.log"
    p.write_text("".join(body), encoding="utf-8")

    def shape(fe):
        return ([(s.name, list(s.steps), [round(v, 9) if v == v else "nan" for v in s.values], list(s.lines))
                 for s in fe.series], [(o.line, o.step, o.format) for o in fe.ooms],
                [(n.line, n.kind, n.rank, n.seq, n.work) for n in fe.nccl], [(d.line, d.kind) for d in fe.device_errors],
                [(x.line, x.xid) for x in fe.xids], [(o.line, o.kind, o.new_scale) for o in fe.overflows],
                [(k.line, k.kind) for k in fe.kills], fe.read.lines, fe.last_step)

    with_grep = read_text_log(str(p))
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_GREP", "1")
    without = read_text_log(str(p))
    assert shape(with_grep) == shape(without)
    assert len(with_grep.ooms) > 10 and len(with_grep.nccl) > 10 and with_grep.series
