"""doctor gpus end to end on the fakes and the recorded files: facts, the four rules, watch/record, the CLI."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.fake import FakeAdapter
from finetune_doctor.hardware.nvml import NVMLQueryError, NVMLUnavailable
from finetune_doctor.pipeline import gpus as pipe
from finetune_doctor.readers.gpus.smi import read_gpu_file
from finetune_doctor.reporters.sections.gpus import render
from finetune_doctor.settings import Options

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "gpus"
CFG_Z3 = FIX / "configs" / "qwen2_5_7b_full_sft_ds3.yaml"
CFG_VL = FIX / "configs" / "qwen2_5vl_full_sft.yaml"
MIB = 2**20
GIB = 2**30


def _opts(**kw) -> Options:
    return Options(command="gpus", **kw)


def _run(fixture: str, **kw):
    return pipe.run(_opts(), source=FakeAdapter(FIX / f"{fixture}.json"), **kw)


def _codes(rep) -> list[str]:
    return sorted(f.code for f in rep.findings)


def _by(rep, code: str) -> list:
    return [f for f in rep.findings if f.code == code]


def _line(path: Path, key: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith(f"{key}:"))


def test_healthy_single_card_has_no_findings() -> None:
    rep = _run("one_card")
    assert rep.findings == ()
    data = rep.sections["gpus"]
    assert data["job"]["pids"] == [31337] and data["job"]["how"] == "looks like training"
    assert data["cards"][0]["peak_gib"] == round(42291 * MIB / GIB, 2)
    assert rep.hardware.gpu == "A100-80GB" and rep.hardware.source == "nvml"


def test_eight_cards_rank0_heavy_with_stray_contexts() -> None:
    rep = _run("eight_imbalance", config=str(CFG_Z3))
    assert _codes(rep) == ["FD501", "FD503", "FD504"]
    # independent arithmetic from the fixture: GPU 0 = rank 0 (75776 MiB) + 7 contexts of 512 MiB
    gpu0 = (75776 + 7 * 512) * MIB / GIB
    lightest = 57588 * MIB / GIB  # GPU 3
    (u,) = _by(rep, "FD501")
    assert f"GPU 0 peaks at {gpu0:.1f} GiB, {gpu0 - lightest:.1f} GiB more than GPU 3" in u.message
    causes = rep.sections["gpus"]["imbalance"]["causes"]
    assert [c["key"] for c in causes] == ["rank0-work", "multi-card-process"]
    assert "val_size: 0.05" in causes[0]["evidence"] and "ZeRO-3" in causes[0]["evidence"]
    # the finding points at the config key behind the top cause
    assert (u.location.file, u.location.line, u.location.key) == (str(CFG_Z3), _line(CFG_Z3, "val_size"), "val_size")
    (m,) = _by(rep, "FD503")
    assert "7 processes whose own cards are elsewhere (GPU 1-7)" in m.message
    assert "pids 7002, 7003, 7004, 7005, 7006, 7007, 7008" in m.message
    assert "3.50 GiB together" in m.message
    (n,) = _by(rep, "FD504")
    assert n.location.key == "GPU 0"
    assert f"{79.11 - gpu0:.2f} GiB left of 79.11 GiB" in n.message
    assert rep.sections["gpus"]["job"]["how"] == "matches --config"


def test_without_config_rank0_cause_asks_for_it() -> None:
    rep = _run("eight_imbalance")
    (u,) = _by(rep, "FD501")
    assert "pass --config" in u.message
    assert u.location.key == "GPU 0" and u.location.file is None


def test_foreign_processes_case035_shape() -> None:
    rep = _run("l40_foreign")
    assert _codes(rep) == ["FD501", "FD502", "FD502", "FD504"]
    f = {x.location.key: x.message for x in _by(rep, "FD502")}
    assert "pid 2231 (python -m vllm.entrypoints.openai.api_server" in f["GPU 0"]
    assert "user carol" in f["GPU 0"] and f"holding {35430 * MIB / GIB:.2f} GiB" in f["GPU 0"]
    assert "pid 88412" in f["GPU 3"] and "another container" in f["GPU 3"]
    (u,) = _by(rep, "FD501")
    assert rep.sections["gpus"]["imbalance"]["causes"][0]["key"] == "foreign-process"
    assert u.fix.title.startswith("Stop the other process")
    (n,) = _by(rep, "FD504")
    assert n.location.key == "GPU 0" and f"{44.32 - (9513 + 35430) * MIB / GIB:.2f} GiB left" in n.message
    job = rep.sections["gpus"]["job"]
    assert job["pids"] == list(range(5001, 5009)) and job["launcher"] == "pid 5000"


def test_mig_other_instance_is_not_foreign() -> None:
    rep = _run("mig")
    assert rep.findings == ()
    card = rep.sections["gpus"]["cards"][0]
    # headroom of the fullest MIG instance, which is the device that can run out
    assert card["capacity_gib"] == round(40192 * MIB / GIB, 2)
    assert card["headroom_gib"] == round((40192 - 19480) * MIB / GIB, 2)
    assert rep.hardware.num_gpus == 2


def test_hidden_process_info_still_checks_memory() -> None:
    rep = _run("hidden_procs")
    assert _codes(rep) == ["FD504"]
    assert _by(rep, "FD504")[0].location.key == "GPU 0"
    assert any("process information unavailable" in n for n in rep.notes)
    # spread 23869 - 22528 MiB = 1.31 GiB is under the 2 GiB threshold: not uneven
    assert rep.sections["gpus"]["imbalance"]["spread_gib"] == round((23869 - 22528) * MIB / GIB, 2)


def test_no_driver_without_from_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from finetune_doctor.hardware import nvml

    def no_driver():
        raise NVMLUnavailable("no NVIDIA driver found (libnvidia-ml.so is missing): install the driver")

    monkeypatch.setattr(nvml, "open_adapter", no_driver)
    with pytest.raises(InputError) as err:
        pipe.run(_opts())
    assert err.value.file == "nvml" and "no NVIDIA driver" in err.value.message


def test_case037_multimodal_cause_and_fix() -> None:
    rep = pipe.run(_opts(), from_files=[str(FIX / "case037_summary.txt")], config=str(CFG_VL))
    (u,) = _by(rep, "FD501")
    assert "GPU 6 peaks at 41.7 GiB, 15.7 GiB more than GPU 7 (26.0 GiB)" in u.message
    assert rep.sections["gpus"]["imbalance"]["causes"][0]["key"] == "multimodal"
    assert u.location.line == _line(CFG_VL, "image_max_pixels")
    (edit,) = u.fix.edits
    assert (edit.key, edit.value) == ("image_max_pixels", 1003520 // 2)
    assert u.fix.safety == "unsafe"


def test_query_csv_with_config_and_truncated_copy() -> None:
    full = pipe.run(_opts(), from_files=[str(FIX / "smi_8xa800.csv")], config=str(CFG_Z3))
    cut = pipe.run(_opts(), from_files=[str(FIX / "smi_8xa800_truncated.csv")])
    for rep in (full, cut):
        assert _codes(rep) == ["FD501", "FD504"]
        # peaks from the log: GPU 0 reaches 77813 MiB in the third sample
        assert rep.sections["gpus"]["cards"][0]["peak_gib"] == round(77813 * MIB / GIB, 2)
    assert _by(full, "FD501")[0].location.key == "val_size"
    assert _by(cut, "FD501")[0].location.file == str(FIX / "smi_8xa800_truncated.csv")
    assert _by(cut, "FD501")[0].location.line == 18  # the row of GPU 0's peak
    assert any("no line end" in n for n in cut.notes)


def test_smi_table_stray_context_without_owners() -> None:
    rep = pipe.run(_opts(), from_files=[str(FIX / "smi_470_2xa100.txt")])
    assert _codes(rep) == ["FD501", "FD503", "FD504"]
    (m,) = _by(rep, "FD503")
    assert "1 process whose own card is elsewhere (GPU 1) also holds a CUDA context on GPU 0" in m.message
    assert m.location.line == 9
    assert any("owners are unknown" in n for n in rep.notes)
    # balanced H800s, and a MIG card next to a full one, give nothing to report
    assert pipe.run(_opts(), from_files=[str(FIX / "smi_535_4xh800.txt")]).findings == ()
    assert pipe.run(_opts(), from_files=[str(FIX / "smi_570_2xh200_mig.txt")]).findings == ()


def test_two_nodes_read_together() -> None:
    rep = pipe.run(_opts(), from_files=[str(FIX / "node0.jsonl"), str(FIX / "node1.jsonl")])
    data = rep.sections["gpus"]
    assert data["hosts"] == ["node0", "node1"] and len(data["cards"]) == 8
    assert (rep.hardware.num_gpus, rep.hardware.nnodes) == (8, 2)
    (u,) = _by(rep, "FD501")
    assert u.message.startswith("node1 GPU 2 peaks at")
    assert (u.location.file, u.location.line) == (str(FIX / "node1.jsonl"), 4)
    assert data["job"]["n_cards"] == 8  # one job: the same launcher command on both nodes


def test_watch_and_record_survive_an_nvml_error(tmp_path: Path) -> None:
    for ext in ("csv", "jsonl"):
        out = tmp_path / f"rec.{ext}"
        frames: list = []
        rep = pipe.run(_opts(), watch=0.01, record=str(out), interval=0.01, count=4,
                       source=FakeAdapter(FIX / "watch_gap.json"), progress=frames.append)
        # the live view is fed one frame per sample, the last one summarising all four
        assert len(frames) == 4 and frames[-1]["samples"] == 4 and frames[-1]["gaps"] == 1
        stats = rep.sections["gpus"]["recorder"]
        assert (stats["samples"], stats["gaps"]) == (4, 1)
        assert stats["cpu_ms_mean"] is not None and stats["cpu_ms_mean"] >= 0
        assert any("1 of 4 samples failed" in n for n in rep.notes)
        back = read_gpu_file(str(out))
        assert [s.gap is not None for s in back.samples] == [False, True, False, False]
        # the samples after the gap were still taken: GPU 1's 67584 MiB comes from the third one
        assert rep.sections["gpus"]["cards"][1]["peak_gib"] == round(67584 * MIB / GIB, 2)
        assert rep.sections["gpus"]["hosts"] == ["a100-pair"]


class _Counting(FakeAdapter):
    def __init__(self, *a, cpu_s: float = 0.0, stop_after: int | None = None, **kw):
        super().__init__(*a, **kw)
        self.cpu_s, self.stop_after, self.n = cpu_s, stop_after, 0

    def snapshot(self):
        self.n += 1
        if self.stop_after is not None and self.n > self.stop_after:
            raise KeyboardInterrupt
        end = time.process_time() + self.cpu_s
        while time.process_time() < end:  # burn CPU like a slow driver call
            pass
        return super().snapshot()


class _Clock:
    """A fake monotonic clock: sampling costs `cost[k]` seconds of wall time, sleeping advances it exactly."""

    def __init__(self, costs: list[float]):
        self.t, self.costs, self.sleeps = 100.0, list(costs), []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(round(s, 6))
        self.t += s


class _Timed(FakeAdapter):
    def __init__(self, clock: _Clock, *a, **kw):
        super().__init__(*a, **kw)
        self.clock = clock

    def snapshot(self):
        self.clock.t += self.clock.costs.pop(0)
        return super().snapshot()


def test_fixed_rate_schedule() -> None:
    # samples take 30 ms, one takes 450 ms: ticks stay on t0 + k*0.2 s, and the slow one skips 2 ticks
    clock = _Clock([0.03, 0.03, 0.45, 0.03, 0.03])
    rep = pipe.run(_opts(), count=5, interval=0.2, source=_Timed(clock, FIX / "one_card.json"),
                   sleep=clock.sleep, clock=clock.now)
    assert clock.sleeps == [0.17, 0.17, 0.15, 0.17]
    stats = rep.sections["gpus"]["recorder"]
    assert (stats["missed_ticks"], stats["effective_interval_s"], stats["samples"]) == (2, 0.2, 5)


def test_overhead_is_bounded_by_widening_the_interval() -> None:
    rep = pipe.run(_opts(), count=7, interval=0.01, source=_Counting(FIX / "one_card.json", cpu_s=0.004),
                   sleep=lambda s: None)
    stats = rep.sections["gpus"]["recorder"]
    assert stats["cpu_ms_mean"] >= 4.0
    # 4 ms per sample is 40 % of a 10 ms period: widened until the sampler stays within 5 % of a core. The period
    # is set from the first 5 samples, each at least 4 ms by construction (the mean over all 7 can drift higher on
    # a loaded machine, so it is not the bound)
    assert stats["effective_interval_s"] >= 0.004 / pipe.OVERHEAD_BUDGET * 0.99
    assert any("interval widened from 0.01 s" in n for n in rep.notes)


def test_ctrl_c_ends_the_watch_with_a_report() -> None:
    rep = pipe.run(_opts(), watch=0.01, source=_Counting(FIX / "one_card.json", stop_after=3),
                   progress=lambda data: None, sleep=lambda s: None)
    assert rep.sections["gpus"]["samples"] == 3
    assert any("stopped by Ctrl-C after 3 samples" in n for n in rep.notes)


def test_single_snapshot_nvml_error_is_an_input_error() -> None:
    class Lost:
        def snapshot(self):
            raise NVMLQueryError("GPU 2: memory query failed: GPU is lost")

        def close(self):
            pass

    with pytest.raises(InputError, match="GPU is lost"):
        pipe.run(_opts(), source=Lost())


@pytest.mark.parametrize("kw, what", [({"watch": 0}, "--watch"), ({"count": 0}, "--count"),
                                      ({"interval": -1}, "--interval"),
                                      ({"from_files": ["x.csv"], "record": "y.csv"}, "--from")])
def test_bad_arguments(kw: dict, what: str) -> None:
    with pytest.raises(InputError) as err:
        pipe.run(_opts(), source=FakeAdapter(FIX / "one_card.json"), **kw)
    assert err.value.file == what


def test_select_and_ignore() -> None:
    rep = pipe.run(_opts(ignore=("FD504",)), source=FakeAdapter(FIX / "eight_imbalance.json"))
    assert _codes(rep) == ["FD501", "FD503"]
    rep = pipe.run(_opts(select=("multi-card-process",)), source=FakeAdapter(FIX / "eight_imbalance.json"))
    assert _codes(rep) == ["FD503"]


def test_gpu_spec_gives_capacity_to_unnamed_cards() -> None:
    rep = pipe.run(_opts(gpu="8xRTX-A6000"), from_files=[str(FIX / "case037_summary.txt")])
    assert rep.sections["gpus"]["cards"][0]["capacity_gib"] == 47.53
    assert rep.hardware.gpu == "RTX-A6000"


def test_section_renders() -> None:
    rep = _run("l40_foreign")
    con = Console(record=True, width=160)
    con.print(render(rep.sections["gpus"]))
    text = con.export_text()
    assert "GPU 0" in text and "L40" in text and "43.89" not in text  # one decimal in the card table
    assert "2231" in text and "foreign" in text and "carol" in text
    assert "fullest GPU 0" in text


def test_cli_from_file() -> None:
    from finetune_doctor.cli import main

    runner = CliRunner()
    res = runner.invoke(main, ["gpus", "--from", str(FIX / "node0.jsonl"), "--from", str(FIX / "node1.jsonl"),
                               "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["command"] == "gpus" and doc["findings"][0]["code"] == "FD501"
    assert doc["gpus"]["hosts"] == ["node0", "node1"]
    res = runner.invoke(main, ["gpus", "--from", str(FIX / "smi_470_2xa100.txt"), "--fail-on", "warning"])
    assert res.exit_code == 1 and "FD503" in res.output
    res = runner.invoke(main, ["gpus", "--from", str(FIX / "no_driver.json")])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_long_watch_keeps_every_sample_and_the_exact_peak() -> None:
    """A watch accumulates as it goes: all 1500 samples count, the peak is exact, and what is kept per sample is
    8 bytes per card (the live view sees only the last LIVE_WINDOW samples)."""
    base = FakeAdapter(FIX / "one_card.json").snapshot()
    c = base.cards[0]
    # GPU memory rises to a peak at sample 30 of 1500, then stays lower
    used = [(50_000 + (k if k <= 30 else 10)) * MIB for k in range(1500)]
    samples = [base.__class__(time=float(k), host="h", cards=(c.__class__(**{**c.__dict__, "used_bytes": u}),))
               for k, u in enumerate(used)]
    frames: list = []
    rep = pipe.run(_opts(), count=1500, interval=0.01, source=FakeAdapter(samples), sleep=lambda s: None,
                   progress=frames.append)
    data = rep.sections["gpus"]
    assert data["recorder"]["samples"] == 1500 and data["samples"] == 1500
    assert data["cards"][0]["peak_gib"] == round(50_030 * MIB / GIB, 2)
    assert frames[-1]["samples"] == pipe.LIVE_WINDOW


def test_live_view_draws_on_stderr_and_clears(capsys: pytest.CaptureFixture) -> None:
    from finetune_doctor.reporters.live import LiveView

    buf = io.StringIO()
    view = LiveView(console=Console(file=buf, width=80, force_terminal=True))
    rep = pipe.run(_opts(), count=3, interval=0.01, source=FakeAdapter(FIX / "one_card.json"), sleep=lambda s: None,
                   progress=view.update)
    view.stop()
    assert "GPU" in buf.getvalue() and rep.sections["gpus"]["samples"] == 3
    assert capsys.readouterr().out == ""


def test_a_recording_read_with_from_says_record_and_the_gpus_section_fits_80_columns() -> None:
    """--from reads a file: the hardware source is "record" (no driver was asked). The GPUs section is laid out
    for 80 columns as gpustat is: every line fits, the card names stay whole, each card and each process is one
    line, and several hosts get a block each instead of "node0 GPU…" labels."""
    from finetune_doctor.reporters.text import TextReporter

    rep = pipe.run(_opts(), from_files=[str(FIX / "node0.jsonl"), str(FIX / "node1.jsonl")])
    assert rep.hardware is not None and rep.hardware.source == "record"
    assert _run("one_card").hardware.source == "nvml"
    out = TextReporter(color=False, width=80).render(rep)
    assert "from record" in out and "from nvml" not in out
    lines = out[out.index("\nGPUs\n"):].splitlines()
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)
    heads = [ln.split() for ln in lines if ln.split()[:2] == ["GPU", "name"]]
    assert heads == [["GPU", "name", "used", "peak", "total", "memory", "util", "temp", "power", "job"]] * 2
    rows = [ln for ln in lines if "H100-80GB" in ln]
    assert len(rows) == 8 and all("79.11" in r and "300/400W" in r for r in rows)
    assert [ln.strip() for ln in lines if ln.strip() in ("node0", "node1")] == ["node0", "node1"]
    procs = [ln for ln in lines if ln.rstrip().endswith(" job") and "hana" in ln]
    assert len(procs) == 8 and all("qwen3_full.yaml" in ln for ln in procs)   # the config stays visible


@pytest.mark.slow
def test_ten_thousand_cards_fit_and_stay_linear() -> None:
    """10k cards in one snapshot (issue 17: over 30 s before): facts and the 80-column table in seconds."""
    from finetune_doctor.reporters.text import TextReporter

    base = FakeAdapter(FIX / "one_card.json").snapshot()
    c, p = base.cards[0], base.cards[0].processes[0]
    cards = tuple(c.__class__(**{**c.__dict__, "index": i, "processes": (p.__class__(**{**p.__dict__, "pid": 10_000 + i}),)})
                  for i in range(10_000))
    t0 = time.perf_counter()
    rep = pipe.run(_opts(), source=FakeAdapter([base.__class__(time=1.0, host="big", cards=cards)]))
    out = TextReporter(color=False, width=80).render(rep)
    elapsed = time.perf_counter() - t0
    assert len(rep.sections["gpus"]["cards"]) == 10_000 and rep.hardware.num_gpus == 10_000
    assert all(len(ln) <= 80 for ln in out.splitlines()[-30:])
    assert elapsed < 30, elapsed
