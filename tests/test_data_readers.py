"""readers/data/datasets.py: dataset_info.json resolution as LLaMA-Factory does it, and streaming row readers.

References: the rows of each file as the standard library / pyarrow read them whole (json.load, csv, pyarrow),
and LLaMA-Factory's DatasetAttr rules (LF data/parser.py) restated in the assertions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.readers.data import datarows as R
from finetune_doctor.readers.data import datasets as D
from test_data_fixtures import FIXTURES


def _rows(spec: D.DatasetSpec, **kw) -> tuple[list, list, list]:
    rows, lines, errors = [], [], []
    for ch in D.iter_chunks(spec, **kw):
        rows += ch.rows
        lines += ch.lines
        errors += ch.errors
    return rows, lines, errors


def _spec(path: Path, ftype: str = "json") -> D.DatasetSpec:
    return D.DatasetSpec(name="t", load_from="file", source=path.name, files=(str(path),), file_type=ftype)


def _line_of_each_element(text: str) -> list[int]:
    """Independent reference: the line where each top-level array element starts (elements written one per
    json.dumps(indent=2) block, each opening with '  {')."""
    return [i + 1 for i, ln in enumerate(text.splitlines()) if ln.startswith("  {")]


@pytest.mark.parametrize("buf", [64, 1000, 1 << 20])
def test_json_array_streams_with_any_buffer_size(tmp_path, monkeypatch, buf):
    rows = [{"instruction": "x" * (i * 37 % 500), "output": "y\n" * (i % 7), "n": i} for i in range(300)]
    text = json.dumps(rows, indent=2)
    p = tmp_path / "a.json"
    p.write_text(text)
    monkeypatch.setattr(R, "_READ_BYTES", buf)
    got, lines, errors = _rows(_spec(p), chunk_rows=64)
    assert got == json.loads(text) and not errors
    assert lines == _line_of_each_element(text)


def test_json_array_element_larger_than_the_buffer(tmp_path, monkeypatch):
    rows = [{"a": "z" * 5000}, {"a": 1.5e10}, {"a": [1, 2, {"b": None}]}]
    p = tmp_path / "big.json"
    p.write_text(json.dumps(rows))
    monkeypatch.setattr(R, "_READ_BYTES", 100)
    got, _, errors = _rows(_spec(p))
    assert got == rows and not errors


def test_malformed_json_array_reports_the_line_and_stops(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('[\n  {"a": 1},\n  {"a": 2,,},\n  {"a": 3}\n]\n')
    got, _, errors = _rows(_spec(p))
    assert got == [{"a": 1}]
    assert len(errors) == 1 and errors[0].line == 3 and errors[0].fatal and errors[0].kind == "malformed_json"


def test_truncated_json_array(tmp_path):
    p = tmp_path / "cut.json"
    p.write_text('[{"a": 1}, {"a": 2')
    got, _, errors = _rows(_spec(p))
    assert got == [{"a": 1}] and errors and errors[0].fatal


def test_json_lines_in_a_json_file_and_blank_lines(tmp_path):
    p = tmp_path / "l.json"
    p.write_text('{"a": 1}\n\n{"a": 2}\n')
    got, lines, errors = _rows(_spec(p))
    assert got == [{"a": 1}, {"a": 2}] and lines == [1, 3] and not errors


def test_malformed_jsonl_lines_are_reported_and_the_scan_continues():
    spec = D.DatasetSpec(name="m", load_from="file", source="malformed.jsonl",
                         files=(str(FIXTURES / "malformed.jsonl"),), file_type="json")
    got, lines, errors = _rows(spec)
    assert [e.line for e in errors] == [2, 5, 6]
    assert [e.kind for e in errors] == ["malformed_json", "bad_row", "malformed_json"]
    assert "column" in errors[0].message and not any(e.fatal for e in errors)
    assert lines == [1, 2, 3, 5, 6, 7]  # the blank line 4 is skipped, as datasets does
    assert sum(r is not None for r in got) == 3


def test_max_rows_stops_early(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(50)))
    got, _, _ = _rows(_spec(p), chunk_rows=7, max_rows=20)
    assert [r["i"] for r in got] == list(range(20))


def test_csv_text_parquet_arrow(tmp_path):
    import csv

    spec = D.DatasetSpec(name="c", load_from="file", source="alpaca.csv", files=(str(FIXTURES / "alpaca.csv"),),
                         file_type="csv")
    got, lines, _ = _rows(spec)
    with open(FIXTURES / "alpaca.csv", newline="") as f:
        assert got == list(csv.DictReader(f))
    assert lines[0] == 2  # after the header
    txt = D.DatasetSpec(name="t", load_from="file", source="corpus.txt", files=(str(FIXTURES / "corpus.txt"),),
                        file_type="text")
    got, lines, _ = _rows(txt)
    expect = (FIXTURES / "corpus.txt").read_text().split("\n")[:-1]
    assert [r["text"] for r in got] == expect and lines == list(range(1, len(expect) + 1))

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pq.read_table(FIXTURES / "alpaca.parquet")
    spec = D.DatasetSpec(name="p", load_from="file", source="alpaca.parquet",
                         files=(str(FIXTURES / "alpaca.parquet"),), file_type="parquet")
    got, _, _ = _rows(spec, chunk_rows=5)
    assert got == table.to_pylist()
    for writer in ("stream", "file"):
        p = tmp_path / f"x-{writer}.arrow"
        with pa.OSFile(str(p), "wb") as sink:
            w = pa.ipc.new_stream(sink, table.schema) if writer == "stream" else pa.ipc.new_file(sink, table.schema)
            w.write_table(table)
            w.close()
        got, _, _ = _rows(_spec(p, "arrow"))
        assert got == table.to_pylist()


# --- dataset_info.json ------------------------------------------------------------------------------------------------


def test_resolution_follows_datasetattr():
    specs, ddir = D.resolve_datasets(["alpaca_demo", "alpaca_lines", "chat_roles", "dpo_pairs", "alpaca_badmap"],
                                     str(FIXTURES))
    by = {s.name: s for s in specs}
    assert ddir == str(FIXTURES)
    # no columns block: LF's defaults
    assert by["alpaca_lines"].columns["prompt"] == "instruction" and by["alpaca_lines"].columns["response"] == "output"
    # a columns block replaces every column: unmapped ones become None (DatasetAttr.join)
    assert by["alpaca_badmap"].columns["query"] is None and by["alpaca_badmap"].columns["prompt"] == "question"
    assert by["chat_roles"].tags["role_tag"] == "role" and by["chat_roles"].tags["observation_tag"] is None
    assert by["dpo_pairs"].ranking and by["dpo_pairs"].formatting == "sharegpt"
    info_text = (FIXTURES / "dataset_info.json").read_text().splitlines()
    assert info_text[by["chat_roles"].info_line - 1].strip().startswith('"chat_roles"')


def test_hub_priority_and_offline(tmp_path):
    env = {"HF_HOME": str(tmp_path / "hf")}
    (spec,), _ = D.resolve_datasets(["alpaca_en"], str(FIXTURES), env=env)
    assert spec.load_from == "hf_hub" and spec.source == "llamafactory/alpaca_en"
    assert "not available offline" in spec.unavailable
    (spec,), _ = D.resolve_datasets(["alpaca_en"], str(FIXTURES), env={**env, "USE_MODELSCOPE_HUB": "1"})
    assert spec.load_from == "ms_hub"


def test_hub_dataset_from_the_local_caches(tmp_path):
    pa = pytest.importorskip("pyarrow")
    rows = [{"instruction": "hi", "input": "", "output": "hello"}] * 3
    # (1) the datasets Arrow cache
    d = tmp_path / "hf" / "datasets" / "llamafactory___alpaca_en" / "default" / "0.0.0" / "abc123"
    d.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(d / "alpaca_en-train.arrow"), "wb") as sink:
        w = pa.ipc.new_stream(sink, table.schema)
        w.write_table(table)
        w.close()
    (spec,), _ = D.resolve_datasets(["alpaca_en"], str(FIXTURES), env={"HF_HOME": str(tmp_path / "hf")})
    assert spec.unavailable is None and spec.file_type == "arrow"
    assert _rows(spec)[0] == rows
    # (2) a hub snapshot with raw files, revision from refs/main
    snap = tmp_path / "hub" / "datasets--llamafactory--alpaca_en" / "snapshots" / "rev1" / "data"
    snap.mkdir(parents=True)
    (snap / "train.json").write_text(json.dumps(rows))
    (tmp_path / "hub" / "datasets--llamafactory--alpaca_en" / "refs").mkdir()
    (tmp_path / "hub" / "datasets--llamafactory--alpaca_en" / "refs" / "main").write_text("rev1")
    (spec,), _ = D.resolve_datasets(["alpaca_en"], str(FIXTURES),
                                    env={"HF_HOME": str(tmp_path / "nothing"), "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert spec.file_type == "json" and _rows(spec)[0] == rows


def test_folder_dataset_and_mixed_types(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a.jsonl").write_text('{"instruction": "a", "input": "", "output": "b"}\n')
    (tmp_path / "parts" / "b.jsonl").write_text('{"instruction": "c", "input": "", "output": "d"}\n')
    (tmp_path / "dataset_info.json").write_text(json.dumps({"parts": {"file_name": "parts"},
                                                            "mixed": {"file_name": "mixed"}}))
    (spec,), _ = D.resolve_datasets(["parts"], str(tmp_path))
    assert len(spec.files) == 2 and [r["output"] for r in _rows(spec)[0]] == ["b", "d"]
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.json").write_text("[]")
    (tmp_path / "mixed" / "b.csv").write_text("x\n")
    (spec,), _ = D.resolve_datasets(["mixed"], str(tmp_path))
    assert "mixed file types" in spec.unavailable


def test_dataset_info_errors(tmp_path):
    with pytest.raises(InputError, match="not defined"):
        D.resolve_datasets(["nope"], str(FIXTURES))
    (tmp_path / "dataset_info.json").write_text('{\n  "a": {"file_name": "x.json"},\n  "b": \n}\n')
    with pytest.raises(InputError) as e:
        D.resolve_datasets(["a"], str(tmp_path))
    assert e.value.line == 4
    with pytest.raises(InputError, match="cannot find"):
        D.find_dataset_dir("data", cwd=str(tmp_path), config_dir=str(tmp_path))


def test_dataset_dir_search_order(tmp_path):
    root = tmp_path / "LLaMA-Factory"
    (root / "data").mkdir(parents=True)
    (root / "data" / "dataset_info.json").write_text("{}")
    cfg_dir = root / "examples" / "train_lora"
    cfg_dir.mkdir(parents=True)
    # launched from the checkout: found relative to the working directory, as LF does
    assert D.find_dataset_dir("data", cwd=str(root), config_dir=str(cfg_dir)) == (str(root / "data"), "cwd")
    # launched elsewhere: found by walking up from the config
    assert D.find_dataset_dir("data", cwd=str(tmp_path), config_dir=str(cfg_dir)) == (str(root / "data"), "config")
