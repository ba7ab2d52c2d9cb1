"""``doctor context`` on the training machine, then ``doctor check --context`` elsewhere, gives the training
machine's report (issue 21). The "training machine" is built here: a tiny model folder (the real Qwen2.5-0.5B
config.json, a stored-weights header, and a BPE tokenizer trained in the test), a tiny alpaca dataset, one GPU seen
through NVML (the fake adapter replaying fixtures/gpus/one_card.json, idle). The "other machine" has only the YAML
and the context file: no model, no data, no GPU."""

from __future__ import annotations

import copy
import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.hardware import nvml
from finetune_doctor.hardware.fake import FakeAdapter
from finetune_doctor.readers.config.context import FILE_NAME, MAX_BYTES, sanitize
from test_data_fixtures import build_tokenizer

ROOT = Path(__file__).resolve().parent.parent
QWEN05 = ROOT / "fixtures" / "models" / "Qwen2.5-0.5B-Instruct" / "config.json"
ONE_CARD = ROOT / "fixtures" / "gpus" / "one_card.json"


def _idle_card() -> dict:
    """fixtures/gpus/one_card.json with its training process gone: the machine before launch."""
    snap = json.loads(ONE_CARD.read_text())
    card = snap["cards"][0]
    # NVML's v2 memory query counts the driver's reserve apart from `used`
    card.update(used_bytes=0, free_bytes=card["total_bytes"] - card["reserved_bytes"], processes=[], util_gpu=0,
                util_mem=0)
    return snap

YAML = """\
### a LoRA SFT run as LLaMA-Factory's examples write it
model_name_or_path: models/tiny-qwen
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: tiny_alpaca
dataset_dir: data
template: qwen
cutoff_len: 64
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
learning_rate: 1.0e-4
num_train_epochs: 1.0
bf16: true
output_dir: saves/tiny-qwen/lora/sft
"""

ROWS = [{"instruction": "Name a prime number larger than " + str(i), "input": "", "output": "A prime: " + "7" * i}
        for i in range(1, 40)] + [{"instruction": "Say hello.", "input": "", "output": "Hello! " * 30}]


def _training_machine(root: Path) -> Path:
    proj = root / "proj"
    model = proj / "models" / "tiny-qwen"
    model.mkdir(parents=True)
    cfg = json.loads(QWEN05.read_text())
    cfg.pop("torch_dtype", None)        # the weights decide the dtype (torch_dtype="auto")
    (model / "config.json").write_text(json.dumps(cfg, indent=2))
    head = json.dumps({"__metadata__": {"format": "pt"},
                       "model.embed_tokens.weight": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 16]}})
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head.encode() + bytes(16))
    for f in _TOKENIZER.iterdir():
        shutil.copy(f, model / f.name)
    (proj / "data").mkdir()
    (proj / "data" / "dataset_info.json").write_text(json.dumps({"tiny_alpaca": {"file_name": "tiny.json"}}))
    (proj / "data" / "tiny.json").write_text(json.dumps(ROWS, ensure_ascii=False))
    (proj / "train.yaml").write_text(YAML)
    return proj


_TOKENIZER = Path()


_CACHE = Path()


@pytest.fixture(scope="module", autouse=True)
def _tokenizer(tmp_path_factory):
    global _TOKENIZER, _CACHE
    _TOKENIZER = build_tokenizer(tmp_path_factory.mktemp("tok"), "qwen")   # trained once per module
    _CACHE = tmp_path_factory.mktemp("xdg")   # the scan's per-tokenizer piece counts, computed once (~20 s)


@pytest.fixture()
def machines(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "FINETUNE_DOCTOR_NO_NVML"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(_CACHE))
    proj = _training_machine(tmp_path)
    other = tmp_path / "laptop" / "repo"
    other.mkdir(parents=True)
    shutil.copy(proj / "train.yaml", other / "train.yaml")
    return proj, other


def _run(args, cwd, monkeypatch, gpus: bool):
    monkeypatch.chdir(cwd)
    if gpus:
        monkeypatch.setattr(nvml, "open_adapter", lambda *a, **k: FakeAdapter(_idle_card()))
        monkeypatch.delenv("FINETUNE_DOCTOR_NO_NVML", raising=False)
    else:
        monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r


# Where a value came from differs between the machines by design: the report names it.
PROVENANCE = {("inputs",), ("model", "source"), ("model", "config"), ("hardware", "source")}


def _comparable(report: dict, base: str) -> dict:
    r = copy.deepcopy(report)
    for path in PROVENANCE:
        d = r
        for k in path[:-1]:
            d = d.get(k) or {}
        d.pop(path[-1], None)
    if (r.get("run") or {}).get("stack"):   # each version's source names the machine or the context file
        r["run"]["stack"] = [(x["package"], x["version"]) for x in r["run"]["stack"]]
    if r.get("data"):
        r["data"] = sanitize({k: v for k, v in r["data"].items() if k != "elapsed_s"}, base)
    return r


def test_context_then_check_elsewhere_gives_the_training_machines_report(machines, monkeypatch):
    proj, other = machines
    here = _run(["check", "train.yaml", "--format", "json"], proj, monkeypatch, gpus=True)
    assert here.exit_code in (0, 1), here.output
    a = json.loads(here.output)
    assert a["hardware"]["source"] == "nvml" and a["data"]["datasets"][0]["samples"] == len(ROWS)
    assert a["run"]["precision"]["weights"] == "bfloat16"          # from the safetensors header

    cap = _run(["context", "train.yaml"], proj, monkeypatch, gpus=True)
    assert cap.exit_code == 0, cap.output
    assert "wrote" in cap.output and FILE_NAME in cap.output
    ctx_file = proj / FILE_NAME
    ctx = json.loads(ctx_file.read_text())
    assert ctx["schema"] == "finetune-doctor/context" and ctx["version"] == 1
    assert ctx["model"]["weights_dtype"]["value"] == "bfloat16"
    assert {"torch", "transformers", "deepspeed", "llamafactory", "peft", "accelerate"} <= set(ctx["stack"])
    assert ctx["hardware"]["gpu"] and ctx["hardware"]["host_ram_gib"]
    ds = ctx["data"]["datasets"][0]
    assert {"p50", "p90", "p99", "max"} <= set(ds["total"]) and ds["samples"] == len(ROWS)
    assert ds["longest"] and all(isinstance(x["total"], int) for x in ds["longest"])
    text = ctx_file.read_text()
    assert str(proj) not in text and str(proj.parent) not in text      # no absolute path of the machine
    assert "prime number" not in text and "Hello!" not in text          # no data text

    shutil.copy(ctx_file, other / FILE_NAME)                            # committed beside the YAML
    there = _run(["check", "train.yaml", "--format", "json"], other, monkeypatch, gpus=False)
    assert there.exit_code == here.exit_code, there.output
    b = json.loads(there.output)
    assert b["inputs"]["context"].endswith(FILE_NAME) and b["model"]["source"] == "context"
    ca, cb = _comparable(a, str(proj)), _comparable(b, str(other))
    for k in sorted(set(ca) | set(cb)):
        assert json.dumps(cb.get(k), indent=1, sort_keys=True) == json.dumps(ca.get(k), indent=1, sort_keys=True), k
    # and the same through an explicit --context, from another folder
    shutil.move(str(other / FILE_NAME), str(other.parent / "ctx.json"))
    again = _run(["check", "train.yaml", "--context", "../ctx.json", "--format", "json"], other, monkeypatch,
                 gpus=False)
    assert _comparable(json.loads(again.output), str(other)) == _comparable(a, str(proj))


def test_estimate_and_lint_take_the_context(machines, monkeypatch):
    proj, other = machines
    _run(["context", "train.yaml"], proj, monkeypatch, gpus=True)
    shutil.copy(proj / FILE_NAME, other / FILE_NAME)
    here = json.loads(_run(["estimate", "train.yaml", "--format", "json"], proj, monkeypatch, gpus=True).output)
    there = json.loads(_run(["estimate", "train.yaml", "--format", "json"], other, monkeypatch, gpus=False).output)
    assert there["memory"] == here["memory"] and there["hardware"]["gpu"] == here["hardware"]["gpu"]
    lint = _run(["lint", "train.yaml", "--format", "json"], other, monkeypatch, gpus=False)
    assert lint.exit_code in (0, 1) and json.loads(lint.output)["command"] == "lint"


def _bad(other: Path, monkeypatch, content) -> str:
    (other / "ctx.json").write_text(content if isinstance(content, str) else json.dumps(content))
    r = _run(["check", "train.yaml", "--context", "ctx.json", "--no-data"], other, monkeypatch, gpus=False)
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line
    return line


def test_bad_context_files_are_one_line_exit_2(machines, monkeypatch):
    proj, other = machines
    _run(["context", "train.yaml"], proj, monkeypatch, gpus=True)
    good = json.loads((proj / FILE_NAME).read_text())
    assert "not a doctor context file" in _bad(other, monkeypatch, {"schema": "something-else", "version": 1})
    assert "not a doctor context file" in _bad(other, monkeypatch, "[1, 2")
    assert "newer than this doctor reads" in _bad(other, monkeypatch, {**good, "version": 2})
    assert "larger than a doctor context can be" in _bad(other, monkeypatch, " " * (MAX_BYTES + 1))
    wrong = {**good, "model": {**good["model"], "name": "Qwen/Qwen2.5-7B"}}
    line = _bad(other, monkeypatch, wrong)
    assert "captured for model 'Qwen/Qwen2.5-7B'" in line and "models/tiny-qwen" in line and "train.yaml" in line


def test_a_dtype_that_disagrees_with_config_json_names_both(machines, monkeypatch):
    proj, other = machines
    _run(["context", "train.yaml"], proj, monkeypatch, gpus=True)
    ctx = json.loads((proj / FILE_NAME).read_text())
    ctx["model"]["config"]["torch_dtype"] = "float32"
    (proj / "ctx.json").write_text(json.dumps(ctx))
    r = _run(["check", "train.yaml", "--context", "ctx.json", "--no-data"], proj, monkeypatch, gpus=True)
    assert r.exit_code == 2
    assert "config.json gives torch_dtype bfloat16" in r.output and "ctx.json gives float32" in r.output


def test_secrets_and_paths_stay_on_the_machine(machines, monkeypatch):
    proj, _ = machines
    (proj / "train.sh").write_text(f"HF_TOKEN=hf_{'a' * 30} WANDB_API_KEY=0123456789abcdef \\\n"
                                   f"  llamafactory-cli train {proj}/train.yaml\n")
    r = _run(["context", "train.yaml", "--launch", "train.sh"], proj, monkeypatch, gpus=True)
    assert r.exit_code == 0, r.output
    text = (proj / FILE_NAME).read_text()
    assert "hf_aaaa" not in text and "0123456789abcdef" not in text and "<redacted>" in text
    assert str(proj) not in text
    r = _run(["context", "train.yaml", "--launch", "train.sh", "--keep-paths"], proj, monkeypatch, gpus=True)
    assert str(proj) in (proj / FILE_NAME).read_text()


def test_a_context_beside_the_config_serves_only_its_own_config(machines, monkeypatch):
    proj, other = machines
    _run(["context", "train.yaml"], proj, monkeypatch, gpus=True)
    shutil.copy(proj / FILE_NAME, other / FILE_NAME)
    (other / "other.yaml").write_text(YAML.replace("models/tiny-qwen", "Qwen/Qwen2.5-7B"))
    r = _run(["lint", "other.yaml", "train.yaml", "--format", "json"], other, monkeypatch, gpus=False)
    assert r.exit_code in (0, 1), r.output      # a folder of configs is linted; the context is not forced on both
    r = _run(["check", "other.yaml", "--no-data", "--format", "json"], other, monkeypatch, gpus=False)
    d = json.loads(r.output)
    assert d["inputs"].get("context") is None and any("not used for this config" in n for n in d["notes"])


def test_ascend_gpus_come_from_an_npu_smi_output(machines, monkeypatch):
    proj, _ = machines
    r = _run(["context", "train.yaml", "--no-data", "--from", ROOT / "fixtures" / "gpus" / "npu_smi_8x910b3.txt"],
             proj, monkeypatch, gpus=False)
    assert r.exit_code == 0, r.output
    hw = json.loads((proj / FILE_NAME).read_text())["hardware"]
    assert (hw["gpu"], hw["num_gpus"], hw["source"]) == ("Ascend-910B-64GB", 8, "record")


def _leaves(x, pre: str = "") -> dict:
    """Every leaf of a JSON report by its path (``run.stack[3].source``)."""
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _leaves(val, f"{pre}.{key}" if pre else key).items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _leaves(val, f"{pre}[{i}]").items()} or {pre: []}
    return {pre: x}


# What legitimately differs between the training machine's report and the one made elsewhere from its context:
# where a value came from (the context file instead of this machine's folder, NVML or installed packages), the
# scan's own time, the data files' absolute paths (the context keeps them relative: no path of the user's machine
# leaves it), and the per-row pointers to truncated samples (the context keeps quantiles and the longest samples,
# not every row). Everything else -- verdict, peak, p_oom, interval, budget, assumptions, findings, notes, the
# run, the hardware, the data statistics -- must match leaf for leaf.
LEGIT = (r"inputs\.context", r"inputs\.context_use",   # found beside the config (trial 16)
         r"model\.(source|config)", r"hardware\.source", r"run\.stack\[\d+\]\.source",
         r"data\.elapsed_s", r"data\.dataset_dir",
         r"data\.(datasets\[\d+\]\.|overall\.)(files\[\d+\]|location\.file|longest\[\d+\]\.file)",
         r"data\.(datasets\[\d+\]\.|overall\.)examples\..*")


def test_the_round_trip_differs_only_where_a_value_came_from(machines, monkeypatch):
    """The whole JSON report, leaf by leaf (not a chosen subset): the paths that differ are exactly the LEGIT
    ones, the relative data paths are the training machine's made relative, and without the context the same
    laptop gets another report (no verdict: the model folder is not there), so the comparison can fail."""
    import re

    proj, other = machines
    a = json.loads(_run(["check", "train.yaml", "--format", "json"], proj, monkeypatch, gpus=True).output)
    bare = json.loads(_run(["check", "train.yaml", "--format", "json"], other, monkeypatch, gpus=False).output)
    _run(["context", "train.yaml"], proj, monkeypatch, gpus=True)
    shutil.copy(proj / FILE_NAME, other / FILE_NAME)
    b = json.loads(_run(["check", "train.yaml", "--format", "json"], other, monkeypatch, gpus=False).output)

    # what is compared carries the verdict and what moves it
    mem = a["memory"]
    assert mem["verdict"] == "fits" and mem["p_oom"] is not None and mem["interval_gib"] and mem["peak_allocated_gib"]
    assert a["assumptions"] and a["findings"] and a["data"]["datasets"][0]["samples"] == len(ROWS)

    la, lb = _leaves(a), _leaves(b)
    differ = {k for k in set(la) | set(lb) if la.get(k, "<absent>") != lb.get(k, "<absent>")}
    unexplained = sorted(k for k in differ if not any(re.fullmatch(p, k) for p in LEGIT))
    assert unexplained == [], [(k, la.get(k), lb.get(k)) for k in unexplained]
    # each kind of legitimate difference is really there (the list above is not stale)
    for p in (r"inputs\.context", r"model\.source", r"hardware\.source", r"run\.stack\[\d+\]\.source",
              r"data\.datasets\[0\]\.files\[0\]"):
        assert any(re.fullmatch(p, k) for k in differ), p
    assert (lb["model.source"], lb["hardware.source"]) == ("context", "context")
    for k in differ:
        if k.startswith("data.") and k in lb and str(la.get(k, "")).startswith(str(proj)):   # the same file
            assert la[k] == str(proj / lb[k]), k

    # the laptop without the context: no model, no data, no GPU -> another report altogether
    assert (bare.get("memory") or {}).get("verdict") is None
    assert sum(1 for k in set(la) | set(_leaves(bare)) if la.get(k) != _leaves(bare).get(k)) > 100
