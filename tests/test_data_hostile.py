"""Hostile and careless dataset input (issue 17): every case ends in an input error or a per-dataset problem that
names the path, never an internal error or a hang, and only regular files are read.

The decoding cases restate what ``datasets.load_dataset`` 4.0.0 (the newest LLaMA-Factory 0.9.5 accepts; pyarrow
26, pandas 3.1) did with each file, run once on that stack:

==============================  =============================================  ===================================
file                            datasets 4.0.0                                 the doctor
==============================  =============================================  ===================================
JSON array with a UTF-8 BOM     fails ("Expected object or value", pandas)     rows read, ``encoding`` problem
JSON Lines with a UTF-8 BOM     loads (pyarrow skips the BOM)                  rows read, no problem
CSV with a UTF-8 BOM            loads (pandas skips it)                        rows read, no problem
text with a UTF-8 BOM           loads, the BOM stays in row 0's text           the same
latin-1 or UTF-16, any type     fails (UnicodeDecodeError / "Invalid UTF8")    ``encoding`` problem at the byte
raw U+0001 in a JSON Lines str  fails (pyarrow, then pandas "Trailing data")   ``malformed_json`` at the line
raw U+0001 in a JSON array str  loads (pandas' parser takes it)                row read
U+0001 in CSV / text            loads, it is content                           the same
a file with no row              fails ("corresponds to no data")               ``no_rows`` problem
==============================  =============================================  ===================================
"""

from __future__ import annotations

import codecs
import re
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_doctor.analyzers.data.datascan import collect
from finetune_doctor.errors import InputError
from finetune_doctor.readers.data import datarows as R
from finetune_doctor.readers.data import datasets as D
ROWS = [{"instruction": "héllo", "input": "", "output": "wörld"}, {"instruction": "b", "input": "", "output": "c"}]
CFG = {"stage": "sft", "template": "qwen", "cutoff_len": 512, "dataset": "d"}


def _setup(tmp_path: Path, entry: dict, files: dict[str, bytes] | None = None) -> Path:
    ddir = tmp_path / "data"
    ddir.mkdir(exist_ok=True)
    for name, data in (files or {}).items():
        (ddir / name).write_bytes(data)
    (ddir / "dataset_info.json").write_text(json.dumps({"d": entry}, indent=2))
    return ddir


def _scan(tmp_path: Path, entry: dict, files: dict[str, bytes] | None = None, **cfg) -> dict:
    _setup(tmp_path, entry, files)
    (tmp_path / "c.yaml").write_text("x: 1\n")
    return collect({**CFG, **cfg}, str(tmp_path / "c.yaml"), approximate=True, strict=True, cwd=str(tmp_path))


def _problems(facts: dict) -> dict[str, dict]:
    return {p["kind"]: p for p in facts["problems"]}


def _doctor(tmp_path: Path, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "FINETUNE_DOCTOR_NO_NVML": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "finetune_doctor", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env=env)


def _doctor_here(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> subprocess.CompletedProcess:
    """The same run as `_doctor`, in this process (click's runner, from `cwd`): ~0.4 s less per call than a fresh
    interpreter. The FIFO and device tests keep `_doctor`: a regression there would hang, and only a child process
    can be timed out."""
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.chdir(cwd)
    r = CliRunner().invoke(main, list(args), env={"FINETUNE_DOCTOR_NO_NVML": "1", "HF_HUB_OFFLINE": "1"})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)


def _config(tmp_path: Path) -> str:
    (tmp_path / "c.yaml").write_text(_config_text("d"))
    return "c.yaml"


# --- dataset_info.json: wrong types and shapes -----------------------------------------------------------------------


@pytest.mark.parametrize("entry, key", [
    ({"file_name": ["a.json", "b.json"]}, "file_name"),
    ({"file_name": 3}, "file_name"),
    ({"file_name": ""}, "file_name"),
    ({"hf_hub_url": {"repo": "x"}}, "hf_hub_url"),
    ({"file_name": "a.json", "formatting": "chatml"}, "formatting"),
    ({"file_name": "a.json", "columns": ["prompt"]}, "columns"),
    ({"file_name": "a.json", "columns": {"prompt": 7}}, "columns.prompt"),
    ({"file_name": "a.json", "tags": {"role_tag": ["from"]}}, "tags.role_tag"),
    ({"file_name": "a.json", "split": 0}, "split"),
    ({"file_name": "a.json", "num_samples": -1}, "num_samples"),
    ({"file_name": "a.json", "num_samples": 1.5}, "num_samples"),
    ({"file_name": "a.json", "num_samples": "10"}, "num_samples"),
    ({"file_name": "a.json", "num_samples": 2**64}, "num_samples"),
    ({"file_name": "a.json", "num_samples": True}, "num_samples"),
    ({"formatting": "alpaca"}, "names no source"),
    (["a.json"], "the entry"),
])
def test_wrong_types_in_dataset_info_are_input_errors_at_the_entry(tmp_path, entry, key):
    ddir = _setup(tmp_path, entry)
    with pytest.raises(InputError) as e:
        D.resolve_datasets(["d"], str(ddir))
    assert e.value.file == str(ddir / "dataset_info.json") and e.value.line == 2   # the line of "d":
    assert key in e.value.message and "LLaMA-Factory" in e.value.message


def test_file_name_list_through_both_commands(tmp_path, monkeypatch):
    _setup(tmp_path, {"file_name": ["a.json", "b.json"]})
    cfg = _config(tmp_path)
    r = _doctor_here(tmp_path, monkeypatch, "data", cfg)
    assert r.returncode == 2 and "internal error" not in r.stderr
    assert r.stderr.startswith("doctor: data/dataset_info.json:2:") or "dataset_info.json:2:" in r.stderr
    assert "file_name must be a non-empty string" in r.stderr and "not list" in r.stderr
    r = _doctor_here(tmp_path, monkeypatch, "check", cfg, "--gpu", "A100-80GB", "--format", "json")
    assert r.returncode in (0, 1) and "internal error" not in r.stderr
    found = [f for f in json.loads(r.stdout)["findings"] if f["name"] == "sample-values-invalid"]
    assert found and "file_name must be" in found[0]["message"]
    assert found[0]["location"]["file"].endswith("dataset_info.json") and found[0]["location"]["line"] == 2


@pytest.mark.parametrize("encoding, what", [("latin-1", "not UTF-8 at byte 25 (line 2)"), ("utf-16", "UTF-16")])
def test_dataset_info_not_utf8(tmp_path, encoding, what):
    ddir = tmp_path / "data"
    ddir.mkdir()
    (ddir / "dataset_info.json").write_bytes('{\n  "d": {"file_name": "héllo.json"}\n}\n'.encode(encoding))
    with pytest.raises(InputError) as e:
        D.resolve_datasets(["d"], str(ddir))
    assert what in e.value.message and "json.load" in e.value.message and e.value.file.endswith("dataset_info.json")


def test_dataset_info_with_a_bom_is_read_and_reported(tmp_path):
    ddir = _setup(tmp_path, {"file_name": "a.jsonl"}, {"a.jsonl": b'{"instruction": "a", "output": "b"}\n'})
    info = ddir / "dataset_info.json"
    info.write_bytes(codecs.BOM_UTF8 + info.read_bytes())
    (spec,), _ = D.resolve_datasets(["d"], str(ddir))
    assert "Unexpected UTF-8 BOM" in spec.info_problem   # json.load's own words, as LF would raise them
    facts = collect(CFG, str(tmp_path / "x.yaml"), approximate=True, cwd=str(tmp_path))
    p = _problems(facts)["dataset_info"]
    assert p["fatal"] and p["location"]["file"] == str(info) and facts["overall"]["samples"] == 1


@pytest.mark.parametrize("text, what", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"d": {"file_name": "a.json", "num_samples": ' + "9" * 5000 + "}}", "exceeds"),
    ('{\n "d": {"file_name": "a\x01.json"}\n}', "Invalid control character"),
])
def test_dataset_info_limits(tmp_path, text, what):
    ddir = tmp_path / "data"
    ddir.mkdir()
    (ddir / "dataset_info.json").write_text(text)
    with pytest.raises(InputError) as e:
        D.resolve_datasets(["d"], str(ddir))
    assert what in e.value.message


# --- files that are not regular files --------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs need a POSIX system")
def test_fifo_and_devices_are_never_read(tmp_path):
    ddir = _setup(tmp_path, {"file_name": "pipe.json"})
    os.mkfifo(ddir / "pipe.json")
    (ddir / "parts").mkdir()
    (ddir / "parts" / "a.json").write_text(json.dumps(ROWS))
    os.mkfifo(ddir / "parts" / "b.json")
    info = {"d": {"file_name": "pipe.json"}, "z": {"file_name": "/dev/zero"}, "p": {"file_name": "parts"}}
    (ddir / "dataset_info.json").write_text(json.dumps(info))
    specs, _ = D.resolve_datasets(["d", "z", "p"], str(ddir))
    reasons = [s.unavailable for s in specs]
    assert "is a FIFO (named pipe), not a regular file" in reasons[0] and str(ddir / "pipe.json") in reasons[0]
    assert "/dev/zero is a character device" in reasons[1]
    assert str(ddir / "parts" / "b.json") in reasons[2] and "FIFO" in reasons[2]
    # through the CLI: no hang (a FIFO opened for reading would wait for a writer), a finding naming the path
    (tmp_path / "c.yaml").write_text(_config_text("d,z,p"))
    r = _doctor(tmp_path, "data", "c.yaml", "--format", "json", timeout=120)
    assert r.returncode == 1, r.stderr
    missing = [f for f in json.loads(r.stdout)["findings"] if f["name"] == "dataset-file-missing"]
    assert len(missing) == 3 and any("pipe.json" in f["message"] for f in missing)
    with pytest.raises(R.Unreadable, match="FIFO"):
        R.open_regular(str(ddir / "pipe.json"))


def _config_text(datasets: str) -> str:
    return ("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\nstage: sft\nfinetuning_type: lora\ntemplate: qwen\n"
            f"cutoff_len: 512\ndataset: {datasets}\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs need a POSIX system")
def test_dataset_info_json_that_is_a_fifo(tmp_path):
    (tmp_path / "data").mkdir()
    os.mkfifo(tmp_path / "data" / "dataset_info.json")
    (tmp_path / "c.yaml").write_text(_config_text("d"))
    r = _doctor(tmp_path, "data", "c.yaml")
    assert r.returncode == 2 and "dataset_info.json: is a FIFO (named pipe), not a regular file" in r.stderr


def test_symlink_loop_and_name_too_long(tmp_path):
    ddir = _setup(tmp_path, {"file_name": "loop.json"})
    os.symlink(ddir / "loop.json", ddir / "loop.json")
    info = {"d": {"file_name": "loop.json"}, "n": {"file_name": "x" * 5000 + ".json"}}
    (ddir / "dataset_info.json").write_text(json.dumps(info))
    loop, long = D.resolve_datasets(["d", "n"], str(ddir))[0]
    assert str(ddir / "loop.json") in loop.unavailable and "symbolic links" in loop.unavailable
    assert "File name too long" in long.unavailable
    os.symlink(tmp_path / "data" / "dataset_info.json", tmp_path / "info-loop")
    (tmp_path / "d2").mkdir()
    os.symlink(tmp_path / "d2" / "dataset_info.json", tmp_path / "d2" / "dataset_info.json")
    with pytest.raises(InputError, match="symbolic links"):
        D.resolve_datasets(["d"], str(tmp_path / "d2"))


def test_truncated_parquet_and_arrow_files(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(ROWS * 50)
    pq.write_table(table, tmp_path / "whole.parquet")
    data = (tmp_path / "whole.parquet").read_bytes()
    for name, cut in (("head.parquet", data[: len(data) // 2]), ("tail.parquet", data[:4] + data[len(data) // 2:]),
                      ("junk.parquet", b"PAR1" + b"\x00" * 64)):
        facts = _scan(tmp_path, {"file_name": name}, {name: cut})
        p = _problems(facts)["unreadable"]
        assert p["fatal"] and p["location"]["file"].endswith(name), p
        assert "not a readable Parquet file" in p["message"] and "fails on it too" in p["message"]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    whole = sink.getvalue().to_pybytes()
    facts = _scan(tmp_path, {"file_name": "cut.arrow"}, {"cut.arrow": whole[: len(whole) // 2]})
    assert "not a readable Arrow file" in _problems(facts)["unreadable"]["message"]


def test_corrupt_gzip(tmp_path):
    good = gzip.compress(json.dumps(ROWS).encode())
    # a .json.gz is no type LLaMA-Factory loads (FILEEXT2TYPE has no "gz")
    facts = _scan(tmp_path, {"file_name": "d.json.gz"}, {"d.json.gz": good[: len(good) // 2]})
    assert facts["datasets"][0]["status"] == "unavailable" and "not a type" in facts["datasets"][0]["reason"]
    # gzip bytes under a .json name: not UTF-8, and said to be compressed
    facts = _scan(tmp_path, {"file_name": "d.json"}, {"d.json": good[: len(good) // 2]})
    p = _problems(facts)["encoding"]
    assert "gzip-compressed" in p["message"] and "gunzip" in p["message"] and p["fatal"]


# --- one decoding policy -------------------------------------------------------------------------------------------

_ARR = json.dumps(ROWS, ensure_ascii=False, indent=2)
_JL = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS)
_CSV = "instruction,input,output\nhéllo,,wörld\nb,,c\n"
_TXT = "héllo wörld\nb c\n"
BOM = codecs.BOM_UTF8


@pytest.mark.parametrize("name, data, rows, kind", [
    ("a.json", BOM + _ARR.encode(), 2, "encoding"),
    ("a.jsonl", BOM + _JL.encode(), 2, None),
    ("a.csv", BOM + _CSV.encode(), 2, None),
    ("a.txt", BOM + _TXT.encode(), 2, None),
    ("a.json", _ARR.encode("latin-1"), 0, "encoding"),
    ("a.jsonl", _JL.encode("latin-1"), 0, "encoding"),
    ("a.csv", _CSV.encode("latin-1"), 0, "encoding"),
    ("a.txt", _TXT.encode("latin-1"), 0, "encoding"),
    ("a.json", _ARR.encode("utf-16"), 0, "encoding"),
    ("a.jsonl", _JL.encode("utf-16"), 0, "encoding"),
    ("a.csv", _CSV.encode("utf-16"), 0, "encoding"),
    ("a.txt", _TXT.encode("utf-16"), 0, "encoding"),
    ("a.jsonl", _JL.replace("wörld", "w\x01rld").encode(), 1, "malformed_json"),
    ("a.json", _ARR.replace("wörld", "w\x01rld").encode(), 2, None),
    ("a.csv", _CSV.replace("wörld", "w\x01rld").encode(), 2, None),
    ("a.txt", _TXT.replace("wörld", "w\x01rld").encode(), 2, None),
    ("a.json", b"", 0, "no_rows"),
    ("a.json", b"[]", 0, "no_rows"),
    ("a.jsonl", b"\n\n", 0, "no_rows"),
    ("a.txt", b"", 0, "no_rows"),
])
def test_decoding_policy_follows_datasets(tmp_path, name, data, rows, kind):
    ftype = "text" if name.endswith(".txt") else None
    cols = {"columns": {"prompt": "text"}} if ftype else {}
    facts = _scan(tmp_path, {"file_name": name, **cols}, {name: data}, **({"stage": "pt"} if ftype else {}))
    d = facts["datasets"][0]
    assert d["rows"] - d["unreadable"] == rows
    probs = _problems(facts)
    if kind is None:
        assert not probs, probs
    else:
        assert kind in probs and probs[kind]["fatal"], probs
        assert probs[kind]["location"]["file"].endswith(name)
    if kind == "encoding" and rows == 0:
        msg = probs[kind]["message"]
        assert "not UTF-8 at byte" in msg and "encoding='utf-8'" in msg and "iconv" in msg
        assert ("UTF-16" in msg) == data.startswith(codecs.BOM_UTF16_LE)


def test_decoding_keeps_rows_before_the_bad_byte_and_names_the_line(tmp_path):
    data = _JL.encode() * 3 + "ñ".encode("latin-1") + b"\n" + _JL.encode()
    facts = _scan(tmp_path, {"file_name": "a.jsonl"}, {"a.jsonl": data})
    p = _problems(facts)["encoding"]
    assert facts["datasets"][0]["samples"] == 6 and p["location"]["line"] == 7
    assert f"byte {len(_JL.encode()) * 3:,} (line 7)" in p["message"]
    assert facts["datasets"][0]["status"] == "partial"


def test_text_bom_stays_in_the_first_row(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(BOM + b"one\r\ntwo\rthree\n\nfour")
    spec = D.DatasetSpec(name="t", load_from="file", source="a.txt", files=(str(p),), file_type="text")
    rows = [r for ch in D.iter_chunks(spec) for r in ch.rows]
    # universal newlines, as datasets' text builder opens the file
    assert [r["text"] for r in rows] == ["\ufeffone", "two", "three", "", "four"]


# --- where a row is ------------------------------------------------------------------------------------------------


def test_one_line_json_array_gives_row_indexes_not_line_1(tmp_path):
    rows = [{"instruction": f"q{i}", "input": "", "output": "a" * (i * 40)} for i in range(40)]
    rows[7] = {"instruction": 5, "output": "x"}     # a bad value the converter reports
    facts = _scan(tmp_path, {"file_name": "big.json"}, {"big.json": json.dumps(rows).encode()}, cutoff_len=64)
    d = facts["datasets"][0]
    assert all(it["line"] is None for it in d["longest"])
    assert [it["row"] for it in d["longest"]] == [39, 38, 37, 36, 35]
    bad = _problems(facts)["bad_value"]
    assert bad["location"]["line"] is None and bad["message"].startswith("row 7: ")
    assert all(ex["line"] is None for ex in d["examples"]["truncated"])
    # the same rows one per line keep their lines
    facts = _scan(tmp_path, {"file_name": "big.json"}, {"big.json": json.dumps(rows, indent=None).replace(
        "}, {", "},\n{").encode()}, cutoff_len=64)
    assert [it["line"] for it in facts["datasets"][0]["longest"]] == [40, 39, 38, 37, 36]


def test_row_is_counted_within_each_file_of_a_folder(tmp_path):
    ddir = _setup(tmp_path, {"file_name": "parts"})
    (ddir / "parts").mkdir()
    (ddir / "parts" / "a.json").write_text(json.dumps(ROWS * 3))
    (ddir / "parts" / "b.json").write_text(json.dumps([{"instruction": 1, "output": "x"}]))
    facts = collect(CFG, str(tmp_path / "x.yaml"), approximate=True, cwd=str(tmp_path))
    ex = _problems(facts)["bad_value"]["examples"][0]
    assert ex["file"].endswith("b.json") and ex["row"] == 0 and ex["index"] == 6


# --- careless input: huge rows, deep nesting ---------------------------------------------------------------------


def test_rows_over_the_limit_are_skipped_not_held(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "MAX_ROW_BYTES", 1000)
    big = {"instruction": "x" * 5000, "input": "", "output": "y"}
    jl = json.dumps(ROWS[1]) + "\n" + json.dumps(big) + "\n" + json.dumps(ROWS[1]) + "\n"
    arr = json.dumps([ROWS[1], big, ROWS[1], {"instruction": ["z" * 3000], "output": "q"}, ROWS[1]])
    for name, data in (("a.jsonl", jl), ("a.json", arr), ("a.txt", "ok\n" + "w" * 3000 + "\nok\n")):
        facts = _scan(tmp_path, {"file_name": name, **({"columns": {"prompt": "text"}} if name.endswith("txt")
                                                      else {})}, {name: data.encode()},
                      **({"stage": "pt"} if name.endswith("txt") else {}))
        d = facts["datasets"][0]
        p = _problems(facts)["row_too_large"]
        assert not p["fatal"] and "over the doctor's limit" in p["message"] and d["status"] == "partial"
        assert d["samples"] == (3 if name == "a.json" else 2), (name, d)
    facts = _scan(tmp_path, {"file_name": "a.csv"}, {"a.csv": ("instruction,output\n" + "v" * 3000 + ",o\n").encode()})
    assert _problems(facts)["row_too_large"]["message"].startswith("line 2:")


@pytest.mark.parametrize("buf", [7, 64, 4096])
def test_array_elements_over_the_limit_are_skipped_across_buffer_ends(tmp_path, monkeypatch, buf):
    monkeypatch.setattr(R, "MAX_ROW_BYTES", 200)
    monkeypatch.setattr(R, "_READ_BYTES", buf)
    tricky = {"instruction": 'a "quoted" ] } [ { \\ ' * 30, "nested": [[{"x": "]"}]] * 20, "output": "y"}
    rows = [ROWS[1], tricky, ROWS[1], "s" * 500, 12345678901234567890, ROWS[1]]
    p = tmp_path / "a.json"
    p.write_text(json.dumps(rows, indent=1))
    spec = D.DatasetSpec(name="t", load_from="file", source="a.json", files=(str(p),), file_type="json")
    got = [(r, e) for ch in D.iter_chunks(spec, chunk_rows=2) for r, e in [(ch.rows, ch.errors)]]
    read = [r for rs, _ in got for r in rs]
    errors = [e for _, es in got for e in es]
    assert read == [ROWS[1], None, ROWS[1], None, None, ROWS[1]]
    assert [e.kind for e in errors] == ["row_too_large", "row_too_large", "bad_row"]
    assert not any(e.fatal for e in errors)


def test_deep_nesting_in_rows(tmp_path):
    deep = "[" * 50_000 + "]" * 50_000
    jl = json.dumps(ROWS[1]) + '\n{"instruction": ' + deep + "}\n" + json.dumps(ROWS[1]) + "\n"
    facts = _scan(tmp_path, {"file_name": "a.jsonl"}, {"a.jsonl": jl.encode()})
    p = _problems(facts)["malformed_json"]
    assert "nested too deeply" in p["message"] and p["location"]["line"] == 2
    assert facts["datasets"][0]["samples"] == 2
    facts = _scan(tmp_path, {"file_name": "a.json"}, {"a.json": f"[{json.dumps(ROWS[1])}, {deep}]".encode()})
    assert "nested too deeply" in _problems(facts)["malformed_json"]["message"]
    # nesting a converter walks (tools, history) is a bad value of that row, not a crash
    tools = json.dumps(ROWS[1] | {"tools": json.loads("[" * 900 + "]" * 900)})
    facts = _scan(tmp_path, {"file_name": "a.jsonl", "columns": {"prompt": "instruction", "response": "output",
                                                                   "tools": "tools"}}, {"a.jsonl": tools.encode()})
    assert facts["datasets"][0]["rows"] == 1


def test_chunks_are_bounded_in_characters(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "CHUNK_CHARS", 10_000)
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps({"instruction": "x" * 3000, "i": i}) + "\n" for i in range(20)))
    spec = D.DatasetSpec(name="t", load_from="file", source="a.jsonl", files=(str(p),), file_type="json")
    sizes = [len(ch) for ch in D.iter_chunks(spec)]
    assert sum(sizes) == 20 and max(sizes) == 4   # 4 rows of ~3 KB pass 10,000 characters


# --- doctor check and doctor data agree when the data is not here -------------------------------------------------


def test_check_and_data_agree_when_the_datasets_are_not_on_this_machine(tmp_path, monkeypatch):
    (tmp_path / "cfgs").mkdir()
    (tmp_path / "cfgs" / "c.yaml").write_text(_config_text("alpaca_en_demo"))
    r = _doctor_here(tmp_path, monkeypatch, "data", "cfgs/c.yaml")
    assert r.returncode == 2 and r.stderr.startswith("doctor: cfgs/c.yaml:6: cannot find the dataset_info.json that "
                                                     "defines dataset alpaca_en_demo")
    assert f"looked in {tmp_path / 'data'}, {tmp_path / 'cfgs' / 'data'}" in r.stderr
    assert "dataset_dir" in r.stderr and "launched from" in r.stderr
    r = _doctor_here(tmp_path, monkeypatch, "check", "cfgs/c.yaml", "--gpu", "A100-80GB", "--format", "json")
    assert r.returncode in (0, 1)
    assert any("datasets not scanned" in n and "doctor data" in n for n in json.loads(r.stdout)["notes"])
    # an unrelated dataset_info.json found above the config: both commands say the same thing
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dataset_info.json").write_text('{"other": {"file_name": "x.json"}}')
    r = _doctor_here(tmp_path / "cfgs", monkeypatch, "data", "c.yaml")
    assert r.returncode == 2 and "defines none of them" in r.stderr and "unrelated" not in r.stderr
    r = _doctor_here(tmp_path / "cfgs", monkeypatch, "check", "c.yaml", "--gpu", "A100-80GB", "--format", "json")
    assert any("datasets not scanned" in n for n in json.loads(r.stdout)["notes"])


@pytest.mark.parametrize("key, value, what", [
    ("per_device_train_batch_size", float("inf"), "per_device_train_batch_size must be an integer"),
    ("max_samples", -3, "max_samples must be an integer from 1"),
    ("preprocessing_batch_size", 2**70, "from 1 to 2\\^63 - 1"),
    ("template", ["qwen"], "template must be a string"),
    ("val_size", "ten", "val_size must be a number"),
])
def test_config_values_of_the_wrong_type_or_range(tmp_path, key, value, what):
    _setup(tmp_path, {"file_name": "a.json"}, {"a.json": json.dumps(ROWS).encode()})
    with pytest.raises(InputError, match=what):
        collect({**CFG, key: value}, str(tmp_path / "c.yaml"), approximate=True, strict=True, cwd=str(tmp_path))
    facts = collect({**CFG, key: value}, str(tmp_path / "c.yaml"), approximate=True, cwd=str(tmp_path))
    assert re.search(what, facts["error"]) and facts["error"].startswith("data not scanned") and not facts["problems"]


def test_tokenizer_files_that_are_not_utf8_or_not_json(tmp_path):
    from finetune_doctor.analyzers.data.tokenizer import read_tokenizer_config

    (tmp_path / "tokenizer_config.json").write_bytes('{"eos_token": "é"}'.encode("latin-1"))
    (tmp_path / "special_tokens_map.json").write_text("[" * 100_000)
    (tmp_path / "chat_template.jinja").write_bytes(b"\xff\xfe{")
    assert read_tokenizer_config(str(tmp_path)) == {}
