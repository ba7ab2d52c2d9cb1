"""The AMD, Ascend and XML readers, and what doctor gpus --from does with hostile or careless files (issue 17)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.errors import InputError
from finetune_doctor.pipeline import gpus as pipe
from finetune_doctor.readers.gpus.smi import open_gpu_file, read_gpu_file
from finetune_doctor.settings import Options

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "gpus"
MIB = 2**20
GIB = 2**30


def _run(*files: str, **kw):
    return pipe.run(Options(command="gpus", **kw), from_files=[str(f) for f in files])


def test_rocm_smi_meminfo_and_use_merge_into_one_sample() -> None:
    rec = read_gpu_file(str(FIX / "rocm_smi_8xmi300x.json"))
    assert rec.format == "rocm-smi" and len(rec.samples) == 1
    c0 = rec.samples[0].cards[0]
    # rocm-smi prints bytes as strings: 206141652992 B total, the value HIP reports as torch's total memory
    assert (c0.total_bytes, c0.used_bytes, c0.util_gpu) == (206141652992, 171798691840, 100)
    rep = _run(FIX / "rocm_smi_8xmi300x.json")
    cards = rep.sections["gpus"]["cards"]
    assert cards[0]["capacity_gib"] == round(206141652992 / GIB, 2) == 191.98
    assert [f.code for f in rep.findings] == ["FD501"]   # GPU 0 holds 30 GiB more than the other ranks
    assert rep.hardware.gpu == "191.98 GiB card" and rep.hardware.source == "record"


def test_amd_smi_static_then_metric_with_a_warning_banner() -> None:
    rec = read_gpu_file(str(FIX / "amd_smi_4xmi300x.json"))
    assert rec.format == "amd-smi" and len(rec.samples) == 1
    c = rec.samples[0].cards
    assert [x.name for x in c] == ["AMD Instinct MI300X OAM"] * 4
    # amd-smi's "MB" is MiB: 196592 MB is the MI300X's 192 GiB
    assert c[0].total_bytes == 196592 * MIB and c[0].used_bytes == 180224 * MIB
    assert (c[0].util_gpu, c[0].power_w, c[0].temperature_c, c[0].bus_id) == (97, 612.0, 71, "0000:0c:00.0")
    rep = _run(FIX / "amd_smi_4xmi300x.json")
    assert rep.hardware.gpu == "MI300X" and rep.hardware.capacity_gib == 191.98


def test_npu_smi_910b3_with_processes() -> None:
    rec = read_gpu_file(str(FIX / "npu_smi_8x910b3.txt"))
    s = rec.samples[0]
    assert rec.format == "npu-smi" and s.driver == "24.1.0" and len(s.cards) == 8
    assert (s.cards[0].used_bytes, s.cards[0].total_bytes) == (61587 * MIB, 65536 * MIB)
    assert [(p.pid, p.used_bytes) for p in s.cards[0].processes] == [(2087416, 58142 * MIB)]
    rep = _run(FIX / "npu_smi_8x910b3.txt")
    assert sorted(f.code for f in rep.findings) == ["FD501", "FD504"]
    assert rep.hardware.gpu == "Ascend-910B-64GB" and rep.hardware.num_gpus == 8


def test_npu_smi_a3_two_chips_per_npu_are_four_910c_devices() -> None:
    s = read_gpu_file(str(FIX / "npu_smi_a3_910c.txt")).samples[0]
    assert [c.index for c in s.cards] == [0, 1, 2, 3]          # numbered by Phy-ID
    assert {c.name for c in s.cards} == {"Ascend 910C"}
    assert all(c.processes == () for c in s.cards)             # "No running processes found"
    assert _run(FIX / "npu_smi_a3_910c.txt").hardware.gpu == "Ascend-910C"


def test_nvidia_smi_xml() -> None:
    s = read_gpu_file(str(FIX / "smi_q_x_2xh100.xml")).samples[0]
    assert (s.driver, s.cuda_driver) == ("550.127.05", "12.4")
    g0, g1 = s.cards
    assert (g0.total_bytes, g0.used_bytes, g0.reserved_bytes) == (81559 * MIB, 78213 * MIB, 551 * MIB)
    assert (g0.util_gpu, g0.temperature_c, g0.power_w, g0.power_limit_w) == (100, 61, 612.44, 700.0)
    assert [(p.pid, p.used_bytes) for p in g0.processes] == [(913301, 76800 * MIB), (913302, 512 * MIB)]
    assert g0.mig_enabled is False and g0.ecc_uncorrected == 0
    rep = _run(FIX / "smi_q_x_2xh100.xml")
    assert sorted(f.code for f in rep.findings) == ["FD501", "FD503", "FD504"]


def test_xml_log_with_several_documents_streams(tmp_path: Path) -> None:
    one = (FIX / "smi_q_x_2xh100.xml").read_text()
    log = tmp_path / "loop.xml"
    log.write_text(one * 3)
    assert len(read_gpu_file(str(log)).samples) == 3


@pytest.mark.parametrize("payload", [
    '<?xml version="1.0"?>\n<!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">'
    '<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">'
    '<!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;"><!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">]>\n'
    '<nvidia_smi_log><gpu><product_name>&h;</product_name></gpu></nvidia_smi_log>\n',
    '<?xml version="1.0"?>\n<nvidia_smi_log><gpu><fb_memory_usage><total>lots MiB</total></fb_memory_usage>'
    '</gpu></nvidia_smi_log>\n',
])
def test_hostile_xml_is_an_input_error(tmp_path: Path, payload: str) -> None:
    bad = tmp_path / "bomb.xml"
    bad.write_text(payload)
    with pytest.raises(InputError) as err:
        read_gpu_file(str(bad))
    assert err.value.file == str(bad) and err.value.line is not None


@pytest.mark.parametrize("mutate, what", [
    (lambda d: d["cards"][0].__setitem__("used_bytes", "42291"), "used_bytes must be an integer"),
    (lambda d: d["cards"][0].__setitem__("total_bytes", -1), "out of range"),
    (lambda d: d["cards"][0].__setitem__("temperature_c", 1e400), "temperature_c must be an integer"),
    (lambda d: d["cards"][0].__setitem__("power_w", float("nan")), "out of range"),
    (lambda d: d.__setitem__("cards", {"0": {}}), "cards must be a list"),
    (lambda d: d["cards"][0].__setitem__("processes", [{"pid": "7"}]), "pid must be an integer"),
    (lambda d: d["cards"][0].__setitem__("used_bytes", True), "must be an integer"),
    (lambda d: d["cards"].__setitem__(0, [1, 2]), "must be a JSON object"),
])
def test_wrong_types_in_a_recording_name_file_and_line(tmp_path: Path, mutate, what: str) -> None:
    lines = (FIX / "node0.jsonl").read_text().splitlines()
    d = json.loads(lines[2])
    mutate(d)
    lines[2] = json.dumps(d)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_gpu_file(str(bad))
    assert (err.value.file, err.value.line) == (str(bad), 3) and what in err.value.message
    res = CliRunner().invoke(main, ["gpus", "--from", str(bad)])
    assert res.exit_code == 2 and f"{bad}:3:" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("doc, what", [
    ({"card0": {"VRAM Total Memory (B)": "lots", "VRAM Total Used Memory (B)": "1"}}, "expected a number"),
    ({"card0": {"VRAM Total Memory (B)": ["1"]}}, "expected a number"),
    ({"card0": "x"}, "must be an object"),
    ([{"gpu": "zero", "mem_usage": {}}], "card number"),
    ([{"gpu": 0, "mem_usage": {"used_vram": {"value": -5, "unit": "MB"}}}], "out of range"),
    ({"gpu_data": {"gpu": 0}}, "must be a list"),
])
def test_wrong_types_in_vendor_json(tmp_path: Path, doc, what: str) -> None:
    bad = tmp_path / "smi.json"
    bad.write_text(json.dumps(doc, indent=2) + "\n")
    with pytest.raises(InputError) as err:
        read_gpu_file(str(bad))
    assert err.value.file == str(bad) and err.value.line is not None and what in err.value.message


def test_dev_zero_and_directories_are_refused_without_reading(tmp_path: Path) -> None:
    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(InputError) as err:
            open_gpu_file(path)
        assert err.value.file == path and "not a regular file" in err.value.message
    res = CliRunner().invoke(main, ["gpus", "--from", "/dev/zero"])
    assert res.exit_code == 2 and "/dev/zero" in res.output


def test_a_fifo_is_refused_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result: list = []

    def attempt() -> None:
        try:
            open_gpu_file(str(fifo))
        except InputError as err:
            result.append(err)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(timeout=5)
    if t.is_alive():   # unblock the thread before failing: a writer end lets open() return
        with open(fifo, "w"):
            pass
        pytest.fail("opening a FIFO blocked")
    assert result and "a FIFO, not a regular file" in result[0].message


def test_stdin_is_read_with_a_dash() -> None:
    text = (FIX / "smi_535_4xh800.txt").read_text()
    res = CliRunner().invoke(main, ["gpus", "--from", "-", "--format", "json"], input=text)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert len(doc["gpus"]["cards"]) == 4 and doc["gpus"]["hosts"] == ["stdin"]


def test_a_line_without_end_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from finetune_doctor.readers.gpus import gpu_input
    monkeypatch.setattr(gpu_input, "MAX_LINE", 1000)
    big = tmp_path / "one.csv"
    big.write_text("index, memory.used [MiB]\n" + "0" * 5000)
    with pytest.raises(InputError) as err:
        read_gpu_file(str(big))
    assert "exceeds" in err.value.message and err.value.line == 2


def test_utf16_paste_from_powershell(tmp_path: Path) -> None:
    text = (FIX / "smi_535_4xh800.txt").read_text()
    p = tmp_path / "smi.txt"
    p.write_bytes(text.encode("utf-16"))
    assert len(read_gpu_file(str(p)).samples[0].cards) == 4


def test_a_recording_named_json_is_read_as_the_jsonl_it_is(tmp_path: Path) -> None:
    """open_recorder accepts .json and writes JSONL; reading it back must not take it for one document."""
    p = tmp_path / "rec.json"
    p.write_text((FIX / "node0.jsonl").read_text())
    rec = read_gpu_file(str(p))
    assert rec.format == "jsonl" and len(rec.samples) == len(read_gpu_file(str(FIX / "node0.jsonl")).samples)
