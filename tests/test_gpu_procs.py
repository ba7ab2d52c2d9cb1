"""``doctor gpus --from`` on nvidia-smi's per-process views (issue #25): the Processes section pasted alone,
``--query-compute-apps`` CSV and ``pmon``; and a stray context on an idle card. Fixtures: fixtures/gpus/procs/
(nvidia-smi 550-580 layouts, see readers/gpus/smi_procs.py)."""

from __future__ import annotations

import os

from finetune_doctor.pipeline import gpus as gp
from finetune_doctor.readers.gpus.smi import read_gpu_file
from finetune_doctor.settings import Options

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "gpus", "procs")
MIB = 1 << 20


def report(name: str):
    return gp.run(Options(command="gpus"), from_files=[os.path.join(FIX, name)])


def test_processes_section_alone_is_read_and_shows_the_rank_contexts_on_gpu0():
    rec = read_gpu_file(os.path.join(FIX, "processes_only.txt"))
    assert rec.format == "processes"
    c0 = rec.samples[0].cards[0]
    assert [p.pid for p in c0.processes] == [331903, 331904, 331905, 331906]
    assert c0.used_bytes == (61244 + 3 * 398) * MIB and c0.total_bytes is None
    f = next(x for x in report("processes_only.txt").findings if x.name == "multi-card-process")
    assert "3 processes whose own cards are elsewhere (GPU 1-3)" in f.message and "0.39 GiB each" in f.message


def test_query_compute_apps_csv_places_cards_in_bus_order():
    rec = read_gpu_file(os.path.join(FIX, "compute_apps.csv"))
    assert rec.format == "compute-apps"
    assert [c.bus_id for c in rec.samples[0].cards] == ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"]
    assert any("PCI bus-id order" in n for n in rec.notes)
    f = next(x for x in report("compute_apps.csv").findings if x.name == "multi-card-process")
    assert "pids 331904" in f.message


def test_pmon_intervals_and_a_stray_context_on_an_idle_card():
    rec = read_gpu_file(os.path.join(FIX, "pmon.txt"))
    assert rec.format == "pmon" and len(rec.samples) == 2
    assert [(c.index, c.util_gpu) for c in rec.samples[0].cards] == [(0, 97), (1, 96), (2, 98), (3, 0)]
    f = next(x for x in report("pmon.txt").findings if x.name == "stray-context-idle-card")
    assert "GPU 3 holds 0.50 GiB at 0 % utilisation while GPU 0-2 train (95–97 %)" in f.message
    assert "pids 402117" in f.message


def test_an_idle_card_with_nothing_on_it_is_not_a_stray_context(tmp_path):
    p = tmp_path / "pmon.txt"
    text = open(os.path.join(FIX, "pmon.txt"), encoding="utf-8").read()
    p.write_text(text.replace("    3     402117     C      0      0      -      -      -      -    512      0    python",
                              "    3          -     -      -      -      -      -      -      -      -      -    -"))
    r = gp.run(Options(command="gpus"), from_files=[str(p)])
    assert not any(x.name == "stray-context-idle-card" for x in r.findings)
