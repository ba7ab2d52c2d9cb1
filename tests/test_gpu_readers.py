"""Readers of nvidia-smi tables, --query-gpu CSV logs, JSONL recordings and pasted summaries, and the writers."""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.fake import FakeAdapter
from finetune_doctor.hardware.record import CsvRecorder, JsonlRecorder, open_recorder
from finetune_doctor.readers.gpus.smi import read_gpu_file

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "gpus"
MIB = 2**20


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


def test_smi_table_driver_470() -> None:
    path = FIX / "smi_470_2xa100.txt"
    rec = read_gpu_file(str(path))
    assert rec.format == "table" and len(rec.samples) == 1
    s = rec.samples[0]
    assert (s.driver, s.cuda_driver) == ("470.82.01", "11.4")
    c0, c1 = s.cards
    assert c0.name == "NVIDIA A100-SXM..."  # as nvidia-smi truncated it
    assert (c0.used_bytes, c0.total_bytes) == (78213 * MIB, 81251 * MIB)
    assert (c0.temperature_c, c0.power_w, c0.power_limit_w, c0.util_gpu) == (34, 298.0, 400.0, 100)
    assert c0.line == _line_of(path, "00000000:07:00.0")
    assert c1.line == _line_of(path, "00000000:0F:00.0")
    assert [(p.pid, p.used_bytes) for p in c0.processes] == [(41877, 77810 * MIB), (41878, 401 * MIB)]
    assert [(p.pid, p.used_bytes) for p in c1.processes] == [(41878, 61419 * MIB)]
    assert s.time is not None


def test_smi_table_driver_535_and_570_with_mig() -> None:
    s = read_gpu_file(str(FIX / "smi_535_4xh800.txt")).samples[0]
    assert [c.name for c in s.cards] == ["NVIDIA H800"] * 4
    assert [p.pid for c in s.cards for p in c.processes] == [1720431, 1720432, 1720433, 1720434]
    assert s.cards[2].power_w == 530.0
    m = read_gpu_file(str(FIX / "smi_570_2xh200_mig.txt")).samples[0]
    assert (m.driver, m.cuda_driver) == ("570.86.15", "12.8")
    g0, g1 = m.cards
    assert (g0.used_bytes, g0.total_bytes) == (131072 * MIB, 143771 * MIB)
    assert g0.mig == () and g1.mig_enabled is True
    assert [(x.gi, x.ci, x.used_bytes, x.total_bytes) for x in g1.mig] == [
        (1, 0, 45102 * MIB, 71424 * MIB), (2, 0, 7259 * MIB, 71424 * MIB)]
    assert [(p.pid, p.mig) for p in g1.processes] == [(2903311, "1/0"), (2903577, "2/0")]
    assert g1.util_gpu is None  # "N/A" under MIG


def test_query_csv() -> None:
    rec = read_gpu_file(str(FIX / "smi_8xa800.csv"))
    assert rec.format == "csv" and len(rec.samples) == 3
    assert all(len(s.cards) == 8 for s in rec.samples)
    last = rec.samples[2]
    assert last.cards[0].used_bytes == 77813 * MIB and last.cards[0].total_bytes == 81920 * MIB
    assert last.cards[0].name == "NVIDIA A800-SXM4-80GB"
    assert last.cards[3].power_w == pytest.approx(389.52 - 3 * 3.1, abs=0.005)
    assert rec.samples[1].time - rec.samples[0].time == pytest.approx(5.006, abs=1e-3)
    assert last.cards[0].processes is None


def test_truncated_csv_keeps_what_was_complete() -> None:
    rec = read_gpu_file(str(FIX / "smi_8xa800_truncated.csv"))
    assert [len(s.cards) for s in rec.samples] == [8, 8, 7]
    assert any("last row has no line end" in n for n in rec.notes)


def test_malformed_csv_row_names_its_line(tmp_path: Path) -> None:
    lines = (FIX / "smi_8xa800.csv").read_text().splitlines()
    lines[4] = lines[4].replace(" MiB, 81920", " MiB, eighty", 1)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_gpu_file(str(bad))
    assert err.value.line == 5 and "memory.total" in err.value.message
    headerless = tmp_path / "nohdr.csv"
    headerless.write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(InputError, match="without a header"):
        read_gpu_file(str(headerless))
    nomem = tmp_path / "nomem.csv"
    nomem.write_text("timestamp, index, utilization.gpu [%]\n2024/03/11 14:02:17.538, 0, 5 %\n")
    with pytest.raises(InputError, match="memory.used"):
        read_gpu_file(str(nomem))


def test_recorded_csv_gap_rows() -> None:
    rec = read_gpu_file(str(FIX / "recorded_gap.csv"))
    assert [s.gap is not None for s in rec.samples] == [False, True, False, False]
    assert rec.samples[1].gap == "nvidia-smi: Unknown Error"
    c = rec.samples[2].cards[1]
    assert (c.used_bytes, c.free_bytes, c.reserved_bytes, c.util_mem) == (67584 * MIB, 13466 * MIB, 870 * MIB, 58)


def test_jsonl_recordings_of_two_nodes() -> None:
    a = read_gpu_file(str(FIX / "node0.jsonl"))
    b = read_gpu_file(str(FIX / "node1.jsonl"))
    assert (a.format, a.host, b.host) == ("jsonl", "node0", "node1")
    assert len(b.samples) == 3 and b.samples[2].cards[2].used_bytes == (60000 + 4096 * 2) * MIB
    assert b.samples[0].cards[0].processes[0].cmdline.endswith("examples/qwen3_full.yaml")
    assert b.samples[2].cards[2].line == 4


def test_jsonl_truncated_and_malformed(tmp_path: Path) -> None:
    text = (FIX / "node0.jsonl").read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - 300])
    rec = read_gpu_file(str(cut))
    assert len(rec.samples) == 2 and "last line is truncated" in rec.notes[0]
    lines = text.splitlines()
    lines[2] = lines[2][:50]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_gpu_file(str(bad))
    assert err.value.line == 3


def test_case037_summary_paste() -> None:
    rec = read_gpu_file(str(FIX / "case037_summary.txt"))
    c6, c7 = rec.samples[0].cards
    assert (c6.index, c7.index) == (6, 7)
    assert c6.used_bytes == int(41.7285 * 2**30) and c6.total_bytes == int(41.7285 * 2**30) + int(6.2715 * 2**30)
    assert c7.used_bytes == 26 * 2**30


def test_not_a_gpu_file(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\nworld\n")
    with pytest.raises(InputError, match="not a GPU recording"):
        read_gpu_file(str(junk))
    with pytest.raises(InputError, match="cannot read"):
        read_gpu_file(str(tmp_path / "missing.csv"))
    with pytest.raises(InputError, match="machine without NVML"):
        read_gpu_file(str(FIX / "no_driver.json"))


@pytest.mark.parametrize("fixture", ["eight_imbalance", "mig", "hidden_procs"])
def test_csv_writer_reads_back(tmp_path: Path, fixture: str) -> None:
    snap = FakeAdapter(FIX / f"{fixture}.json").snapshot()
    out = tmp_path / "r.csv"
    rec = CsvRecorder(str(out))
    rec.write(snap)
    rec.write(snap)
    rec.close()
    back = read_gpu_file(str(out))
    assert len(back.samples) == 2
    for a, b in zip(snap.cards, back.samples[1].cards):
        assert (b.index, b.name, b.uuid, b.bus_id) == (a.index, a.name, a.uuid, a.bus_id)
        # the fixtures hold whole MiB; nvidia-smi's CSV prints MiB
        assert (b.used_bytes, b.total_bytes, b.free_bytes, b.reserved_bytes) == \
            (a.used_bytes, a.total_bytes, a.free_bytes, a.reserved_bytes)
        assert (b.util_gpu, b.temperature_c, b.power_w, b.power_limit_w) == \
            (a.util_gpu, a.temperature_c, a.power_w, a.power_limit_w)
    with pytest.raises(InputError, match="other columns"):
        bad = tmp_path / "theirs.csv"
        bad.write_text("timestamp, index, memory.used [MiB]\n")
        CsvRecorder(str(bad))


def test_jsonl_writer_reads_back(tmp_path: Path) -> None:
    snap = FakeAdapter(FIX / "l40_foreign.json").snapshot()
    out = tmp_path / "r.jsonl"
    rec = open_recorder(str(out), "l40-box", 1.0)
    assert isinstance(rec, JsonlRecorder)
    rec.write(snap)
    rec.close()
    back = read_gpu_file(str(out)).samples[0]
    assert back.cards == tuple(c.__class__(**{**c.__dict__, "line": 2}) for c in snap.cards)
    with pytest.raises(InputError, match=".csv"):
        open_recorder(str(tmp_path / "r.txt"))
