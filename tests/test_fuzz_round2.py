"""Fuzz suite, round 2 (issue 27, items 6-7): the classes the second hostile-input campaign found outside the
first suite, so that the next campaign finds nothing new in them.

Classes: (A) the project configuration — every key given values of every TOML type, nested arrays; (B) output
targets — FIFO, device, folder, socket, the input itself, a read-only file, hard links, a missing folder, stdout,
for ``--output`` and ``--fix``; (C) YAML anchors, aliases, merge keys and tabs under ``lint --fix``; (D) cost
bombs per reader in subprocesses, each under its command's RSS budget (benchmarks/results/rss_budgets.md).

The contract is tests/fuzzkit/run.py's: exit 0/1/2, no traceback or internal error, exit 2 names a file or flag.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finetune_doctor.projectconfig import SCHEMA, _find
from fuzzkit.run import invoke

ROOT = Path(__file__).resolve().parent.parent
PROFILE = dict(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
HEAD = ("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\n")
LIMIT_S = 30.0

# RSS budgets per command, MiB (benchmarks/results/rss_budgets.md; issue 27 item 6)
BUDGET_MIB = {"lint": 200, "check": 200, "gpus": 200, "check --probe": 600, "probe": 800}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _find.cache_clear()


def _ok(out, *, must_name: str | None = None) -> None:
    assert out.problem is None, out.problem
    if out.code == 2 and must_name is not None:
        assert must_name in out.stderr, out.stderr


# -- (A) project configuration ---------------------------------------------------------------------------------

def _toml_value(depth: int = 0) -> st.SearchStrategy[str]:
    scalars = st.one_of(st.integers(-10**6, 10**6).map(str), st.booleans().map(lambda b: str(b).lower()),
                        st.sampled_from(['"error"', '"A100-80GB"', '"FD0"', '""', '"x"', "1.5", "inf", "nan",
                                         '"2.5.1"', '"' + "9" * 300 + '"']))
    if depth >= 2:
        return scalars
    return st.one_of(scalars, st.lists(_toml_value(depth + 1), max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
                     st.dictionaries(st.sampled_from(["a", "*.yaml", "b"]), _toml_value(depth + 1), max_size=2)
                     .map(lambda d: "{" + ", ".join(f'"{k}" = {v}' for k, v in d.items()) + "}"))


# Hypothesis fuzzers (80 whole commands each) run in the slow lane, as tests/test_fuzz_structured.py's do; the fast
# lane keeps the classes' deterministic cases: tests/test_projectconfig_types.py (the campaign's bad values, one
# line, exit 2) and test_project_configuration_nesting below; tests/test_fix_yaml_anchors.py (anchors, aliases,
# merge keys and tabs under --fix).
@pytest.mark.slow
@settings(max_examples=80, **PROFILE)
@given(entries=st.dictionaries(st.sampled_from(sorted(SCHEMA) + ["tool", "unknown-key"]), _toml_value(),
                               min_size=1, max_size=3),
       where=st.sampled_from(["dot", "pyproject"]))
def test_project_configuration_values(tmp_path_factory, entries, where):
    tmp = tmp_path_factory.mktemp("proj")
    body = "".join(f'"{k}" = {v}\n' for k, v in entries.items())
    conf = tmp / (".finetune-doctor.toml" if where == "dot" else "pyproject.toml")
    conf.write_text(body if where == "dot" else "[tool.finetune-doctor]\n" + body)
    cfg = tmp / "train.yaml"
    cfg.write_text(HEAD)
    _find.cache_clear()
    for argv in (["lint", str(cfg)], ["check", str(cfg), "--no-data", "--offline"]):
        out = invoke(argv, LIMIT_S)
        _ok(out)
        if out.code == 2:
            assert str(conf) in out.stderr or str(cfg) in out.stderr, out.stderr


@pytest.mark.parametrize("depth", [33, 1000, 100_000])
def test_project_configuration_nesting(tmp_path, depth):
    (tmp_path / ".finetune-doctor.toml").write_text("select = " + "[" * depth + "]" * depth + "\n")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(HEAD)
    out = invoke(["lint", str(cfg)], LIMIT_S)
    _ok(out)
    assert out.code == 2 and "nested deeper" in out.stderr


# -- (B) output targets ------------------------------------------------------------------------------------------

def _targets(tmp: Path, cfg: Path) -> dict[str, tuple[str, bool]]:
    """name -> (path, whether the write must be refused)."""
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp / "sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(sock_path))
    (tmp / "folder").mkdir()
    ro = tmp / "ro.txt"
    ro.write_text("keep\n")
    ro.chmod(0o444)
    link = tmp / "link-to-config.yaml"
    link.symlink_to(cfg)
    return {"fifo": (str(fifo), True), "socket": (str(sock_path), True), "device": ("/dev/full", True),
            "folder": (str(tmp / "folder"), True), "the input": (str(cfg), True), "a link to the input": (str(link), True),
            "read-only": (str(ro), True), "missing folder": (str(tmp / "no" / "r.txt"), True),
            "new file": (str(tmp / "new.txt"), False), "stdout": ("-", False), "/dev/stdout": ("/dev/stdout", False)}


@pytest.mark.parametrize("command", ["lint", "check"])
def test_output_targets(tmp_path, command):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(HEAD + "dpo_beta: 0.1\n")
    before = cfg.read_bytes()
    for name, (target, refused) in _targets(tmp_path, cfg).items():
        argv = [command, str(cfg), "--output", target] + (["--no-data", "--offline"] if command == "check" else [])
        out = invoke(argv, LIMIT_S)
        _ok(out)
        assert (out.code == 2) == refused, (name, out.code, out.stderr)
        if refused:
            assert target in out.stderr, (name, out.stderr)
        assert cfg.read_bytes() == before, name
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode) and stat.S_ISCHR(os.stat("/dev/full").st_mode)


# -- (C) YAML anchors, aliases, merge keys and tabs under --fix -------------------------------------------------

_VALUE_KEYS = ["learning_rate", "warmup_ratio", "cutoff_len", "dpo_beta", "max_samples", "lora_rank"]


@st.composite
def _anchored(draw) -> str:
    keys = draw(st.lists(st.sampled_from(_VALUE_KEYS), min_size=2, max_size=5, unique=True))
    lines, anchors = [], []
    for k in keys:
        value = draw(st.sampled_from(["0.1", "1.0e-4", "2048", "8", "1000"]))
        sep = draw(st.sampled_from([": ", ":\t", ": \t"]))
        if anchors and draw(st.booleans()):
            lines.append(f"{k}{sep}*{draw(st.sampled_from(anchors))}")
        elif draw(st.booleans()):
            a = f"a{len(anchors)}"
            anchors.append(a)
            lines.append(f"{k}{sep}&{a} {value}")
        else:
            lines.append(f"{k}{sep}{value}")
    if draw(st.booleans()):
        lines.append("<<: {" + draw(st.sampled_from(["learing_rate: 1.0e-4", "dpo_beta: 0.1", "lora_rank: 8"])) + "}")
    return HEAD + "\n".join(lines) + "\n"


@pytest.mark.slow       # a hypothesis fuzzer: the slow lane (see test_project_configuration_values)
@settings(max_examples=80, **PROFILE)
@given(text=_anchored())
def test_fixes_under_anchors_aliases_merges_and_tabs(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("anch") / "train.yaml"
    p.write_text(text)
    before = yaml.load(text, Loader=yaml.CSafeLoader)
    out = invoke(["lint", "--fix", "--unsafe-fixes", str(p)], LIMIT_S)
    _ok(out)
    assert out.code in (0, 1), out.stderr    # a valid file never becomes an input error under --fix
    after = yaml.load(p.read_text(), Loader=yaml.CSafeLoader)   # still YAML, every alias still defined
    for k in ("model_name_or_path", "stage", "template", "dataset"):
        assert after[k] == before[k]


# -- (D) cost bombs per reader, in subprocesses, under the RSS budgets ------------------------------------------

_CHILD = ("import atexit, os, sys\n"
          "def _hwm():\n"
          "    with open('/proc/self/status') as fh, open(os.environ['FUZZ_HWM_FILE'], 'w') as out:\n"
          "        out.write(next(ln.split()[1] for ln in fh if ln.startswith('VmHWM:')))\n"
          "atexit.register(_hwm)\n"
          "from finetune_doctor.cli import main\n"
          "sys.argv[0] = 'doctor'\n"
          "main()\n")


def _peak(argv: list[str], timeout: float) -> tuple[int, float, str]:
    with tempfile.NamedTemporaryFile(suffix=".hwm") as hwm:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "FINETUNE_DOCTOR_NO_NVML": "1",
               "FUZZ_HWM_FILE": hwm.name}
        res = subprocess.run([sys.executable, "-c", _CHILD, *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env, timeout=timeout)
        return res.returncode, int(Path(hwm.name).read_text() or 0) / 1024, res.stderr.decode("utf-8", "replace")


def _bombs(tmp: Path) -> dict[str, list[str]]:
    keys = tmp / "keys.yaml"
    keys.write_text(HEAD + "".join(f"opt_{i:06d}_x: {i}\n" for i in range(100_000)))
    ds = tmp / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                              "comment": "x" * (10 << 20)}))
    esc = tmp / "esc.json"
    esc.write_text('{"zero_optimization": {"stage": 2}, "c": "' + "\\u00e9" * (2 << 20) + '"}')
    lines = (ROOT / "fixtures/gpus/node0.jsonl").read_text().splitlines()
    rec = tmp / "rec.jsonl"
    rec.write_text("\n".join([lines[0], lines[1].replace('"used_bytes":62914560000', '"used_bytes":' + "9" * 5000)])
                   + "\n")
    deep = tmp / "deep"
    deep.mkdir()
    (deep / ".finetune-doctor.toml").write_text("select = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (deep / "train.yaml").write_text(HEAD)
    return {"100k unknown keys": ["lint", str(keys)], "10 MiB DeepSpeed string": ["lint", str(ds)],
            "2M escapes in a DeepSpeed string": ["lint", str(esc)],
            "5,000-digit number in a recording": ["gpus", "--from", str(rec)],
            "100k nested arrays in the project configuration": ["lint", str(deep / "train.yaml")],
            "check of 100k unknown keys": ["check", str(keys), "--no-data", "--offline"]}


@pytest.mark.slow
def test_cost_bombs_stay_under_budget(tmp_path, capsys):
    rows = []
    for name, argv in _bombs(tmp_path).items():
        code, rss, err = _peak(argv, timeout=60)
        rows.append(f"{name} ({argv[0]}) {rss:.0f} MiB exit {code}")
        assert code in (0, 1, 2) and "internal error" not in err and "Traceback" not in err, (name, err[-400:])
        assert rss < BUDGET_MIB[argv[0]], (name, rss)
    with capsys.disabled():
        print("\nround-2 bombs, peak RSS: " + "; ".join(rows))


@pytest.mark.slow
def test_torch_commands_stay_under_budget(tmp_path):
    pytest.importorskip("torch")
    model = ROOT / "fixtures/models/Qwen2.5-0.5B-Instruct"
    cfg = tmp_path / "q.yaml"
    cfg.write_text(f"model_name_or_path: {model}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "lora_target: all\ndataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: o\ncutoff_len: 8192\n"
                   "per_device_train_batch_size: 4\nbf16: true\n")
    code, rss, err = _peak(["check", str(cfg), "--gpu", "T4", "--offline", "--no-data", "--probe"], timeout=400)
    assert code in (0, 1) and rss < BUDGET_MIB["check --probe"], (code, rss, err[-300:])
    code, rss, err = _peak(["probe", str(cfg), "--gpu", "A100-80GB", "--mode", "simulate"], timeout=400)
    assert code in (0, 1) and rss < BUDGET_MIB["probe"], (code, rss, err[-300:])
