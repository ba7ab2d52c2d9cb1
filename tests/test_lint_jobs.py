"""`doctor lint` in forked workers (pipeline/lint.py `_lint_configs`, issue #22): the report of LLaMA-Factory's
example configs is the same with one process and with several, and a bad file raises what one process raises —
the first bad file in command-line order, even when a later one is linted by the parent.
Fixtures: fixtures/llamafactory/examples (LLaMA-Factory's own example configs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.pipeline import lint
from finetune_doctor.settings import Options

EXAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "examples"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers are forked (POSIX only)")


def _configs() -> list[str]:
    files = sorted(str(p) for p in EXAMPLES.rglob("*.yaml"))
    configs = [f for f in files if lint.classify(f) == "lf"]
    # 2 workers need 2 x PARALLEL_MIN configs after the first: else this tests the one-process path twice
    assert len(configs) > 2 * lint.PARALLEL_MIN, len(configs)
    return configs


def test_workers_give_the_report_of_one_process(monkeypatch):
    files = sorted(str(p) for p in EXAMPLES.rglob("*.yaml")) + sorted(str(p) for p in EXAMPLES.rglob("*.json"))
    forks: list[int] = []
    real_fork, real_collect = lint._fork_run, lint._collect
    monkeypatch.setattr(lint, "_fork_run", lambda *a: forks.append(0) or real_fork(*a))
    monkeypatch.setattr(lint, "_collect", lambda child: _count(forks, real_collect(child)))
    one = lint.run(files, Options(command="lint"), jobs=1)
    assert forks == []
    two = lint.run(files, Options(command="lint"), jobs=2)
    # one child (the parent drains the queue beside it); which files each took depends on the scheduler
    assert len(forks) == 2 and forks[1] < len(files)
    assert two.findings == one.findings and len(one.findings) > 0
    assert two.assumptions == one.assumptions and two.notes == one.notes
    assert two.sections == one.sections and two.inputs == one.inputs


def _count(forks: list[int], got: dict | None) -> dict | None:
    forks.append(len(got or {}))
    return got


def test_the_queue_gives_every_file_once_in_shrinking_chunks():
    """`_queue`/`_drain` (issue #22): guided chunks of consecutive files, each taken by exactly one reader."""
    import os

    rest = [i for i in range(95) if i != 6]
    fd, chunks = lint._queue(rest, 2)
    try:
        assert [i for c in chunks for i in c] == rest
        sizes = [len(c) for c in chunks]
        assert sizes[0] == len(rest) // 4 and sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
        taken: list[int] = []
        while len(got := os.read(fd, 4)) == 4:   # what two workers' reads share: each number comes out once
            taken.append(int.from_bytes(got, "little"))
        assert taken == list(range(len(chunks))) and os.read(fd, 4) == b""
    finally:
        os.close(fd)


def test_the_first_bad_file_in_order_raises_as_with_one_process(tmp_path):
    configs = _configs()
    bad_early, bad_late = tmp_path / "early.yaml", tmp_path / "late.yaml"
    bad_early.write_text("model_name_or_path: Qwen/Qwen3-4B\nstage: sft\n  finetuning_type: lora\n")
    bad_late.write_text("model_name_or_path: Qwen/Qwen3-4B\nstage: [sft\n")
    # early: in the forked child's run (files 1..n/2); late: in the run this process lints itself
    files = configs[:5] + [str(bad_early)] + configs[5:] + [str(bad_late)]
    serial, forked = _errors_serial_and_forked(files)
    assert serial.file == str(bad_early) and str(forked) == str(serial)


def _errors_serial_and_forked(files: list[str]) -> tuple[InputError, InputError]:
    """The InputError a lint of `files` raises with one process and with two."""
    with pytest.raises(InputError) as serial:
        lint.run(files, Options(command="lint"), jobs=1)
    with pytest.raises(InputError) as forked:
        lint.run(files, Options(command="lint"), jobs=2)
    return serial.value, forked.value


def test_jobs_from_the_environment(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_LINT_JOBS", "1")
    assert lint.default_jobs() == 1
    monkeypatch.setenv("FINETUNE_DOCTOR_LINT_JOBS", "3")
    assert lint.default_jobs() == 3
    monkeypatch.delenv("FINETUNE_DOCTOR_LINT_JOBS")
    assert 1 <= lint.default_jobs() <= 8


# one runnable process of the load is taken as this process's own chain (an idle machine running a script of lints)
@pytest.mark.parametrize("cpus, load, jobs", [(2, 0.0, 2), (2, 1.1, 2), (2, 2.2, 1), (2, 5.5, 1), (16, 3.5, 8),
                                              (16, 10.2, 7), (1, 0.0, 1)])
def test_jobs_follow_the_cores_the_load_leaves_free(monkeypatch, cpus, load, jobs):
    monkeypatch.delenv("FINETUNE_DOCTOR_LINT_JOBS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert lint.default_jobs() == jobs


def test_a_file_classify_refuses_raises_before_a_bad_config_as_with_one_process(tmp_path):
    """One process classifies every file before it lints any config, so a file `classify` refuses (not UTF-8, with
    a config's keys) raises even when an earlier config is broken; the workers classify as they go and fall back to
    one process on any error, which keeps that order (issue #22)."""
    configs = _configs()
    bad_config = tmp_path / "early.yaml"
    bad_config.write_text("model_name_or_path: Qwen/Qwen3-4B\nstage: [sft\n")
    not_utf8 = tmp_path / "late.yaml"
    not_utf8.write_bytes(b"model_name_or_path: Qwen/Qwen3-4B\nstage: sft\ndataset: caf\xe9\n")
    files = configs[:3] + [str(bad_config)] + configs[3:] + [str(not_utf8)]
    serial, forked = _errors_serial_and_forked(files)
    assert serial.file == str(not_utf8) and str(forked) == str(serial)


def test_skipped_files_linted_alone_by_a_worker_give_the_report_of_one_process(tmp_path):
    """Accelerate configs (linted on their own), a YAML that is no accelerate config (skipped) and DeepSpeed JSONs
    spread over the forked child's run and this process's: the same findings, notes, kinds and skip reasons as
    one process (issue #22: the workers classify and lint skipped accelerate configs too)."""
    configs = _configs()
    accel = sorted(str(p) for p in (EXAMPLES / "accelerate").glob("*.yaml"))
    ds = sorted(str(p) for p in (EXAMPLES / "deepspeed").glob("*.json"))
    plain = tmp_path / "not_a_config.yaml"
    plain.write_text("name: something else\nitems: [1, 2]\n")
    half = len(configs) // 2
    files = (configs[:2] + [accel[0], ds[0]] + configs[2:half] + [str(plain), accel[1]] + configs[half:]
             + accel[2:] + ds[1:])
    one = lint.run(files, Options(command="lint"), jobs=1)
    two = lint.run(files, Options(command="lint"), jobs=2)
    assert any(f.location.file in accel for f in one.findings)
    assert two.findings == one.findings and two.notes == one.notes
    assert two.sections == one.sections and str(plain) in one.sections["skipped"]
    assert {one.sections["kinds"][a] for a in accel} == {"accelerate"}


def test_only_the_first_plain_config_is_linted_before_the_fork(monkeypatch):
    """LLaMA-Factory's examples/ starts with accelerate configs: the parent lints the first config alone and leaves
    those, unclassified, to the workers (`_plain_config`, issue #22); the report is still one process's."""
    files = sorted(str(p) for p in EXAMPLES.rglob("*.yaml"))
    accel = sorted(str(p) for p in (EXAMPLES / "accelerate").glob("*.yaml"))
    assert files[:len(accel)] == accel and len(accel) == 4   # the fixture's order: four accelerate configs first
    first = files[len(accel)]
    assert lint.classify(first) == "lf"
    assert lint._plain_config(files) == len(accel)
    before_fork: list[str] = []
    forked: list[int] = []
    real_classify, real_fork = lint.classify, lint._fork_run
    monkeypatch.setattr(lint, "classify", lambda f: (before_fork.append(f) if not forked else None)
                        or real_classify(f))
    monkeypatch.setattr(lint, "_fork_run", lambda *a: forked.append(0) or real_fork(*a))
    two = lint.run(files, Options(command="lint"), jobs=2)
    assert forked == [0] and before_fork == [first]
    one = lint.run(files, Options(command="lint"), jobs=1)
    assert two.findings == one.findings and two.notes == one.notes and two.sections == one.sections
    assert {two.sections["kinds"][a] for a in accel} == {"accelerate"}


def test_plain_config_reads_keys_not_names(tmp_path):
    """`_plain_config` picks a YAML by its top-level keys as `classify` reads them first; JSON, standard input,
    indented or commented keys and a one-marker YAML are passed over (None when nothing qualifies)."""
    one_marker = tmp_path / "a.yaml"
    one_marker.write_text("template: qwen3\nname: x\n")
    commented = tmp_path / "b.yml"
    commented.write_text("# model_name_or_path: Qwen/Qwen3-4B\nnested:\n  model_name_or_path: Qwen/Qwen3-4B\n")
    as_json = tmp_path / "c.json"
    as_json.write_text('{"model_name_or_path": "Qwen/Qwen3-4B", "stage": "sft"}')
    two_markers = tmp_path / "d.YML"
    two_markers.write_text("\ufeffstage: sft\ndataset: alpaca_en_demo\n")
    paths = [str(one_marker), str(commented), str(as_json)]
    assert lint._plain_config(paths) is None
    assert lint._plain_config(paths + [str(two_markers)]) == 3
    assert lint.classify(str(two_markers)) == "lf"
