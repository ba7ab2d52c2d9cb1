"""Regression tests for the defects the fuzz suite (tests/test_fuzz_structured.py, tests/test_fuzz_corpus.py)
found, one test per defect, each on the smallest input that showed it (issue 17)."""

from __future__ import annotations

from array import array

from finetune_doctor.analyzers.postmortem.curves import Curve
from finetune_doctor.analyzers.postmortem.detectors import sparse_jumps


def _curve(values: list[float]) -> Curve:
    n = len(values)
    return Curve("grad_norm", array("q", range(0, 10 * n, 10)), array("d", values), array("q", range(1, n + 1)),
                 ((0, "trainer_state.json"),))


def test_sparse_jump_after_a_median_of_zeros_is_not_a_division_by_zero():
    # fuzz: trainer_state.json whose grad norms read 0, 0, 0.0625, 1.0 (ZeroDivisionError in `ratio`: v / 0)
    assert sparse_jumps(_curve([0.0, 0.0, 0.0625, 1.0, 0.0, 0.0]), 10.0) == []


def test_sparse_jump_over_a_positive_median_is_still_found():
    found = sparse_jumps(_curve([1.0, 1.1, 0.9, 50.0]), 10.0)
    assert [(s["step"], s["value"], s["baseline"]) for s in found] == [(30, 50.0, 1.0)]
    assert found[0]["ratio"] == 50.0



def test_sparse_jump_between_extreme_losses_is_not_a_math_domain_error():
    # fuzz (test_fuzz_structured, trainer_log.jsonl): a loss of 4.05e23 then 1e-300; their quotient underflows to
    # 0.0, and log(0) raised "math domain error" (an internal error, exit 2)
    assert sparse_jumps(_curve([4.0480450661462125e+23, 1e-300]), 4.0) == []
    found = sparse_jumps(_curve([1e-300, 1e-300, 4e23]), 4.0)
    assert [(s["step"], s["value"]) for s in found] == [(20, 4e23)]

# --- the hostile corpus's finds (tests/test_fuzz_corpus.py) -------------------------------------------------------

import math  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402

from finetune_doctor.analyzers.config.launch import check_launch, zero_stage_of  # noqa: E402
from finetune_doctor.projectconfig import find_project_config  # noqa: E402
from finetune_doctor.readers.data.datarows import parse_json_lines  # noqa: E402
from finetune_doctor.readers.gpus.smi import _first_json_line  # noqa: E402
from finetune_doctor.run.moments import _step  # noqa: E402
from fuzzkit.run import invoke  # noqa: E402

BASE = ("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: qwen\ncutoff_len: 2048\noutput_dir: out\n")


def test_project_config_discovery_survives_a_symlink_loop_and_a_too_long_name(tmp_path):
    loop = tmp_path / "loop"
    os.symlink("loop", loop)
    assert find_project_config(str(loop)) == {}
    assert find_project_config(str(tmp_path / ("x" * 300))) == {}


@pytest.mark.parametrize("command", ["lint", "check", "estimate"])
def test_symlink_loop_and_too_long_config_name_are_input_errors(tmp_path, command):
    loop = tmp_path / "loop.yaml"
    os.symlink("loop.yaml", loop)
    for path, why in ((str(loop), "Too many levels of symbolic links"), (str(tmp_path / ("x" * 300)), "too long")):
        out = invoke([command, path, "--offline"] + (["--no-data"] if command == "check" else []))
        assert out.problem is None and out.code == 2, out
        assert out.stderr.startswith(f"doctor: {path}: cannot read: ") and why in out.stderr, out.stderr


@pytest.mark.parametrize("key", ["logging_steps", "save_steps"])
def test_infinite_step_interval_is_a_finding_not_an_overflow(tmp_path, key):
    # transformers 5.6.0 training_args.py:1692 runs int(inf) on it: OverflowError, the run never starts
    probs = [p for p in check_launch({"stage": "sft", key: math.inf}) if p["key"] == key]
    # the sentence is the rule's (rules/invalid-step-setting.yaml, case steps-not-finite): checked in the output
    assert [p["kind"] for p in probs] == ["interval"] and probs[0]["check"] == "steps-not-finite"
    assert _step(math.inf) is None and _step(math.nan) is None and _step(500.7) == 500
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BASE + f"{key}: .inf\n")
    out = invoke(["lint", str(cfg)])
    assert out.problem is None and out.code == 1 and key in out.stdout, out
    assert f"`{key}: inf` is not a finite number" in out.stdout, out.stdout


def test_infinite_quantization_bit_is_a_wrong_type_not_an_overflow(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BASE + "quantization_bit: .inf\n")
    for argv in (["lint", str(cfg)], ["estimate", str(cfg), "--gpu", "A100-80GB", "--offline"]):
        out = invoke(argv)
        assert out.problem is None and out.code in (1, 2), out
        assert "quantization_bit" in out.stdout + out.stderr


def test_zero_stage_probe_reads_a_deep_deepspeed_json_through_the_limited_reader(tmp_path):
    (tmp_path / "ds.json").write_text("[" * 5000 + "]" * 5000)
    assert zero_stage_of({"deepspeed": "ds.json"}, str(tmp_path / "train.yaml")) is None
    (tmp_path / "ds3.json").write_text('{"zero_optimization": {"stage": 3}}')
    assert zero_stage_of({"deepspeed": "ds3.json"}, str(tmp_path / "train.yaml")) == 3


def test_gpus_header_sniff_of_deep_json_is_not_a_recursion_error(tmp_path):
    assert _first_json_line("[" * 100000 + "]" * 100000) is None
    assert _first_json_line('{"schema": "x"}\n') == {"schema": "x"}
    p = tmp_path / "node0.json"
    p.write_text("[" * 100000 + "]" * 100000)
    out = invoke(["gpus", "--from", str(p)])
    assert out.problem is None and out.code == 2 and out.stderr.startswith(f"doctor: {p}:1: "), out


def test_trainer_state_logging_steps_1e400_is_no_count(tmp_path):
    (tmp_path / "trainer_state.json").write_text('{"global_step": 50, "max_steps": 100, "log_history": [], '
                                                 '"logging_steps": 1e400}')
    out = invoke(["postmortem", str(tmp_path)])
    assert out.problem is None and out.code in (0, 1), out


def test_model_config_name_too_long_names_the_flag_and_reason(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BASE)
    long = "y" * 300
    # estimate reports an unreadable model as check does (session 11, trial 11: an unsized model is FD607, exit 1,
    # in both commands; exit 2 stays for a config the doctor cannot read): no traceback, the flag and the OS's reason
    for command in ("estimate", "check"):
        out = invoke([command, str(cfg), "--model-config", long, "--gpu", "A100-80GB", "--offline"])
        assert out.problem is None and out.code == 1 and out.stderr == "", out
        assert "FD607" in out.stdout and "--model-config: cannot read: File name too long" in out.stdout, out


def test_lone_surrogate_in_a_dataset_row_is_a_row_error_as_pyarrow_refuses_it():
    pa_json = pytest.importorskip("pyarrow.json")
    import io

    import pyarrow as pa
    with pytest.raises(pa.ArrowInvalid, match="surrogate pair in string is invalid"):
        pa_json.read_json(io.BytesIO(b'{"instruction": "\\ud800"}\n'))
    lines = ['{"instruction": "\\ud800", "output": "x"}', '{"instruction": "\\ud83d\\ude00", "output": "x"}']
    rows, errors, _ = parse_json_lines("d.jsonl", lines, [1, 2], 0)
    assert rows[0] is None and rows[1] == {"instruction": "\U0001F600", "output": "x"}
    assert [(e.line, "surrogate" in e.message) for e in errors] == [(1, True)]


def test_lone_surrogate_in_a_json_array_dataset_does_not_crash_data(tmp_path):
    (tmp_path / "d.json").write_text('[{"instruction": "\\ud800", "output": "x"}]')
    (tmp_path / "dataset_info.json").write_text('{"ds": {"file_name": "d.json"}}')
    cfg = tmp_path / "train.yaml"
    cfg.write_text(BASE.replace("alpaca_en_demo", "ds") + f"dataset_dir: {tmp_path}\n")
    out = invoke(["data", str(cfg), "--approximate", "--workers", "1", "--offline"])
    assert out.problem is None and out.code in (1, 2) and "surrogate" in out.stdout + out.stderr, out


# --- the big-input benchmark's find (benchmarks/bench_big_inputs.py) --------------------------------------------

def _no_newline_log(path, mib: int) -> None:
    words = "CUDA out of memory 'loss': NCCL Killed Traceback (most recent call last) "
    chunk = words * ((1 << 20) // len(words))
    with open(path, "w") as fh:
        for _ in range(mib):
            fh.write(chunk)


def _summary(fe):
    return (len(fe.ooms or ()), len(fe.kills or ()), len(fe.nccl or ()), len(fe.notices or ()), fe.read.lines,
            fe.read.bytes_read if hasattr(fe.read, "bytes_read") else None)


@pytest.mark.slow
def test_log_without_newlines_stops_grep_and_reads_the_same_as_without_it(tmp_path, monkeypatch):
    # 256 MB without a newline cost 662 MiB (grep held the whole line) and 450 s; grep is now stopped at the first
    # line longer than a chunk and capped in address space, and the scan finds the same evidence
    from finetune_doctor.readers.runlogs import loggrep
    from finetune_doctor.readers.runlogs.logs import read_text_log

    log = tmp_path / "train.log"
    _no_newline_log(log, 12)
    stops = []
    real_stop = loggrep.Offsets.stop
    monkeypatch.setattr(loggrep.Offsets, "stop", lambda self: (stops.append(1), real_stop(self))[1])
    with_grep = read_text_log(str(log))
    assert stops == [1]
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_GREP", "1")
    assert _summary(read_text_log(str(log))) == _summary(with_grep)


def test_grep_stopped_early_keeps_its_offsets_valid(tmp_path):
    from finetune_doctor.readers.runlogs import loggrep
    log = tmp_path / "a.log"
    log.write_bytes(b"x\nCUDA out of memory\n" * 10)
    with loggrep.trigger_offsets(str(log), ("CUDA out of memory",)) as hits:
        if hits is None:
            pytest.skip("no grep on this machine")
        first = next(iter(hits))
        hits.stop()
        assert first == 2 and hits.ok


def test_grep_past_its_memory_limit_is_a_failed_grep_not_a_big_process(tmp_path, monkeypatch):
    from finetune_doctor.readers.runlogs import loggrep
    monkeypatch.setattr(loggrep, "GREP_MAX_BYTES", 24 << 20)
    log = tmp_path / "a.log"
    _no_newline_log(log, 48)
    with loggrep.trigger_offsets(str(log), ("CUDA out of memory",)) as hits:
        if hits is None:
            pytest.skip("no grep on this machine")
        assert list(hits) == [] and not hits.ok   # "memory exhausted", exit 2: readers/runlogs/logs.py rescans itself


# --- session 14's CI run of the structured fuzz suite ---------------------------------------------------------------

def test_sparkline_over_the_whole_float_range_is_drawn_not_a_nan(tmp_path):
    # fuzz: a trainer_state.json whose learning rates span -1.8e308 to 9.98e291 (inf - inf: NaN into int())
    from finetune_doctor.reporters.sections.postmortem import BLOCKS, sparkline

    line, bad = sparkline([0, 10, 20, 30], [-1.7976931348623157e308, 0.0, 0.0, 9.9792015476736e291], 0, 30, width=4)
    assert bad == [] and line[0] == BLOCKS[0] and line[-1] == BLOCKS[-1] and len(line) == 4


def test_a_dict_epoch_no_run_reaches_places_no_step(tmp_path):
    # fuzz: a metrics dict with epoch 1.3e16 among real lines (OverflowError filling the int64 steps array)
    from finetune_doctor.pipeline import postmortem as pm
    from finetune_doctor.settings import Options

    # the generated log as the fuzzer wrote it: accelerate's notice lines around two progress bars and dicts
    notice = "The following values were not passed to `accelerate launch` and had defaults used instead:\n"
    (tmp_path / "train.log").write_text(
        "\n" + notice * 18 + "  2%|          | 8/400 [01:52<1:31:28, 14.40s/it]\n"
        "{'loss': 0.0, 'grad_norm': null, 'learning_rate': 1e-05, 'epoch': 1.3176245766935394e+16}\n"
        + notice * 11 + "\n1%|▉   | 6/1184 [00:21<1:09:10,  3.52s/it][2021-02-04 15:06:19,825] [INFO] "
        "[stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 134217728.0, "
        "reducing to 67108864.0\n"
        "{'loss': 3.5534, 'grad_norm': 1.4142135381698608, 'learning_rate': 2.0454545454545457e-06, "
        "'epoch': 0.01}", encoding="utf-8")
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert r.findings and all(f.name for f in r.findings)
