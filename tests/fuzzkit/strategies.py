"""Hypothesis strategies for the structured inputs the doctor reads, built from the project's own data:

* training YAMLs: the real LLaMA-Factory examples under fixtures/llamafactory/examples, with keys replaced or added
  from the key schema lint checks against (finetune_doctor/catalog/lf_keys.json via readers/config/keyschema.py), each
  value drawn for the key's declared type (``accepts``), its choices and range -- and, as often, one of the wrong
  kinds and edge values users write (a list for a count, -8, 0, 2^63, .inf);
* DeepSpeed JSONs: the configs LLaMA-Factory ships (finetune_doctor/catalog/lf_deepspeed) with values replaced;
* trainer_log.jsonl / trainer_state.json records in the shape LLaMA-Factory's LogCallback and HF's TrainerState
  write (fixtures/postmortem/case_049);
* log text: lines copied from the real logs under fixtures/postmortem, with numbers changed and noise between;
* gpus recordings: the JSONL that ``doctor gpus --record`` writes (fixtures/gpus/node0.jsonl) and
  nvidia-smi ``--query-gpu`` CSV (fixtures/gpus/smi_8xa800.csv);
* dataset_info.json entries with alpaca/sharegpt rows (LLaMA-Factory data/README.md formats).
"""

from __future__ import annotations

import glob
import json
import os
import re
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

from finetune_doctor.readers.config.keyschema import load_schema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EDGE_INTS = [0, 1, -1, -8, 2, 7, 8, 1023, 4096, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63)]
EDGE_FLOATS = [0.0, -0.0, 1e-12, 0.5, 1.0, 3.0, 1e30, 1e308, float("inf"), float("-inf"), float("nan")]
EDGE_STRS = ["", "auto", "none", "null", "true", "off", "1e-4", "-1", "0x10", "\x1b]0;pwned\x07", "a\x1b[31mred",
             "\u202e", "\t", "k=v", "../../etc/passwd", "ä漢字", "a" * 300]


@lru_cache(maxsize=1)
def schema_keys() -> list[tuple[str, dict[str, Any]]]:
    """(key, schema entry) for every top-level key LLaMA-Factory's parser declares, sorted by key."""
    keys = load_schema()["keys"]
    return sorted((k, v) for k, v in keys.items() if not k.startswith("_"))


@lru_cache(maxsize=1)
def example_yamls() -> list[str]:
    """The text of every real LLaMA-Factory example YAML in the fixtures, sorted by path."""
    paths = sorted(glob.glob(os.path.join(ROOT, "fixtures", "llamafactory", "examples", "**", "*.yaml"),
                             recursive=True))
    return [open(p, encoding="utf-8").read() for p in paths]


@lru_cache(maxsize=1)
def ds_configs() -> list[dict[str, Any]]:
    """The DeepSpeed JSONs LLaMA-Factory ships, parsed, sorted by file name."""
    paths = sorted(glob.glob(os.path.join(ROOT, "finetune_doctor", "catalog", "lf_deepspeed", "*.json")))
    return [json.load(open(p, encoding="utf-8")) for p in paths]


@lru_cache(maxsize=1)
def log_lines() -> list[str]:
    """Distinct non-empty lines of the real logs under fixtures/postmortem (at most 3000, first seen first)."""
    seen: dict[str, None] = {}
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "postmortem", "**", "*"), recursive=True)):
        if not (p.endswith((".log", ".txt", ".out")) and os.path.isfile(p)):
            continue
        with open(p, encoding="utf-8", errors="replace") as fh:
            for ln in fh:
                ln = ln.rstrip("\n")
                if ln.strip() and len(ln) < 2000:
                    seen.setdefault(ln, None)
        if len(seen) > 3000:
            break
    return list(seen)


def _value_for(entry: dict[str, Any]) -> st.SearchStrategy:
    accepts = set(entry.get("accepts") or ["any"])
    opts: list[st.SearchStrategy] = []
    if entry.get("choices"):
        opts.append(st.sampled_from(entry["choices"]))
    r = entry.get("range") or {}
    if "int" in accepts:
        lo = r.get("min", -(2**31))
        opts.append(st.integers(min_value=int(lo) - 2, max_value=int(lo) + 4096))
    if "float" in accepts:
        opts.append(st.floats(allow_nan=True, allow_infinity=True, width=64))
    if "bool" in accepts:
        opts.append(st.booleans())
    if "str" in accepts and not entry.get("choices"):
        opts.append(st.text(max_size=20))
    if "null" in accepts:
        opts.append(st.none())
    if "dict" in accepts:
        opts.append(st.dictionaries(st.text(max_size=8), st.integers(), max_size=3))
    if "list" in accepts:
        opts.append(st.lists(st.text(max_size=8), max_size=3))
    # what users get wrong: another kind, or an edge value
    wrong = st.one_of(st.sampled_from(EDGE_INTS), st.sampled_from(EDGE_FLOATS), st.sampled_from(EDGE_STRS),
                      st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(),
                                                                             max_size=2))
    return st.one_of(*(opts or [st.none()]), wrong)


def _yaml_scalar(v: Any) -> str:
    """`v` written as YAML 1.1 flow text (json.dumps is valid YAML flow, except for the non-finite floats)."""
    if isinstance(v, float) and v != v:
        return ".nan"
    if v == float("inf"):
        return ".inf"
    if v == float("-inf"):
        return "-.inf"
    return json.dumps(v, ensure_ascii=False)


@st.composite
def training_yaml(draw) -> str:
    """A LLaMA-Factory training YAML: a real example with 1-6 schema keys replaced or added."""
    base = draw(st.sampled_from(example_yamls()))
    lines = base.splitlines()
    keys = schema_keys()
    for _ in range(draw(st.integers(1, 6))):
        key, entry = draw(st.sampled_from(keys))
        value = _yaml_scalar(draw(_value_for(entry)))
        pat = re.compile(rf"^{re.escape(key)}\s*:")
        hit = [i for i, ln in enumerate(lines) if pat.match(ln)]
        if hit:
            lines[hit[0]] = f"{key}: {value}"
        else:
            lines.insert(draw(st.integers(0, len(lines))), f"{key}: {value}")
    return "\n".join(lines) + ("\n" if draw(st.booleans()) else "")


def _mutate_json(draw, obj: Any, depth: int = 0) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if draw(st.integers(0, 9)) == 0:
                continue
            out[k] = _mutate_json(draw, v, depth + 1)
        if draw(st.integers(0, 5)) == 0:
            out[draw(st.sampled_from(["offload_param", "stage", "zero_optimization", "\x1b[2Jkey", "bf16",
                                      "train_micro_batch_size_per_gpu", "reduce_bucket_size"]))] = \
                draw(st.one_of(st.sampled_from(EDGE_INTS + EDGE_FLOATS + EDGE_STRS), st.lists(st.integers(),
                                                                                             max_size=2)))
        return out
    if isinstance(obj, list):
        return [_mutate_json(draw, v, depth + 1) for v in obj]
    if draw(st.integers(0, 3)) == 0:
        return draw(st.one_of(st.sampled_from(EDGE_INTS), st.sampled_from(EDGE_FLOATS), st.sampled_from(EDGE_STRS),
                              st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                   st.integers(), max_size=2)))
    return obj


def _dumps(obj: Any) -> str:
    """JSON text as Python's json writes it, which spells non-finite floats NaN/Infinity (DeepSpeed's reader,
    json.load, accepts them)."""
    return json.dumps(obj, indent=2, ensure_ascii=False)


@st.composite
def deepspeed_json(draw) -> str:
    """A DeepSpeed JSON: one LLaMA-Factory ships, with values dropped, replaced and added."""
    return _dumps(_mutate_json(draw, draw(st.sampled_from(ds_configs()))))


_NUM = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**6),
                 st.sampled_from(EDGE_INTS + EDGE_FLOATS), st.sampled_from(EDGE_STRS), st.none())


@st.composite
def trainer_log_jsonl(draw) -> str:
    """trainer_log.jsonl as LLaMA-Factory's LogCallback writes it, one record a line, values varied."""
    n = draw(st.integers(0, 30))
    total = draw(st.one_of(st.integers(1, 10**6), _NUM))
    out = []
    for i in range(n):
        rec = {"current_steps": draw(st.one_of(st.just((i + 1) * 10), _NUM)), "total_steps": total,
               "loss": draw(_NUM), "lr": draw(_NUM), "epoch": draw(_NUM), "percentage": draw(_NUM),
               "elapsed_time": "0:00:00", "remaining_time": "0:00:00"}
        if draw(st.booleans()):
            rec["grad_norm"] = draw(_NUM)
        line = json.dumps(rec)
        if draw(st.integers(0, 15)) == 0:
            line = line[: draw(st.integers(0, len(line)))]
        out.append(line)
    return "\n".join(out) + ("\n" if draw(st.booleans()) else "")


@st.composite
def trainer_state_json(draw) -> str:
    """trainer_state.json as HF's TrainerState.save_to_json writes it, with log_history varied."""
    hist = []
    for i in range(draw(st.integers(0, 30))):
        rec = {"epoch": draw(_NUM), "grad_norm": draw(_NUM), "learning_rate": draw(_NUM), "loss": draw(_NUM),
               "step": draw(st.one_of(st.just(i * 10), _NUM))}
        hist.append(rec)
    state = {"best_metric": None, "epoch": draw(_NUM), "global_step": draw(_NUM), "log_history": hist,
             "max_steps": draw(_NUM), "train_batch_size": draw(_NUM)}
    if draw(st.integers(0, 8)) == 0:
        state["log_history"] = draw(st.sampled_from([{}, "x", 3, None, [[1]], [None]]))
    text = _dumps(state)
    if draw(st.integers(0, 10)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@st.composite
def log_text(draw) -> str:
    """Log text: real lines from fixtures/postmortem, numbers changed, with noise and odd line ends between."""
    lines = log_lines()
    out = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(0, 9))
        if kind <= 6:
            ln = draw(st.sampled_from(lines))
            if draw(st.booleans()):
                ln = _NUMBER.sub(lambda m: str(draw(st.sampled_from(
                    ["0", "nan", "inf", "1e400", str(2**63), "-1", m.group(0), "9" * 30]))), ln, count=3)
        elif kind == 7:
            ln = draw(st.text(max_size=80))
        elif kind == 8:
            ln = "\x1b]0;title\x07" + draw(st.sampled_from(lines))
        else:
            ln = "{'loss': " + _yaml_scalar(draw(_NUM)) + ", 'grad_norm': " + _yaml_scalar(draw(_NUM)) + \
                 ", 'learning_rate': 1e-05, 'epoch': " + _yaml_scalar(draw(_NUM)) + "}"
        out.append(ln)
    sep = draw(st.sampled_from(["\n", "\r\n", "\r", "\n\n"]))
    return sep.join(out)


def _mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """`valid` three times in four, else a hostile number: most recordings then get past their first bad value."""
    return st.one_of(valid, valid, valid, _NUM)


def _card(draw, i: int) -> dict[str, Any]:
    total = draw(_mostly(st.just(85520809984)))
    return {"index": draw(_mostly(st.just(i))), "name": draw(st.sampled_from(
        ["NVIDIA H100 80GB HBM3", "NVIDIA A800-SXM4-80GB", "\x1b[31mred", ""])),
        "uuid": f"GPU-{i:08d}", "bus_id": f"00000000:{i:02X}:00.0",
        "used_bytes": draw(_mostly(st.integers(0, 85520809984))), "total_bytes": total,
        "free_bytes": draw(_mostly(st.integers(0, 85520809984))), "util_gpu": draw(_mostly(st.integers(0, 100))),
        "temperature_c": 60, "power_w": 300.0,
        "processes": draw(st.one_of(st.just([]), st.lists(st.fixed_dictionaries(
            {"pid": _NUM, "name": st.text(max_size=10), "used_bytes": _NUM}), max_size=2)))}


@st.composite
def gpus_recording(draw) -> tuple[str, str]:
    """(file suffix, text) of a ``doctor gpus --record`` JSONL or an nvidia-smi --query-gpu CSV."""
    if draw(st.booleans()):
        lines = [json.dumps({"schema": "finetune-doctor/gpus-record/v1", "host": "node0", "interval_s": 1.0,
                             "started": 1717840800.0})]
        for t in range(draw(st.integers(0, 6))):
            snap = {"time": draw(_mostly(st.just(1717840800.0 + t))), "host": "node0",
                    "driver": "535.104.05", "cuda_driver": "12.2",
                    "cards": [_card(draw, i) for i in range(draw(st.integers(0, 4)))]}
            if draw(st.integers(0, 8)) == 0:
                snap["cards"] = draw(st.sampled_from([None, "x", {}, [1]]))
            lines.append(json.dumps(snap))
        return ".jsonl", "\n".join(lines) + "\n"
    head = ("timestamp, index, name, pci.bus_id, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
            "utilization.gpu [%]")
    rows = [head]
    for i in range(draw(st.integers(0, 8))):
        vals = [draw(st.sampled_from(["2024/06/08 10:00:00.000", "2024/06/08 10:00:00.000", "", "x"])),
                str(draw(_mostly(st.just(i)))),
                draw(st.sampled_from(["NVIDIA A800-SXM4-80GB", "\x1b[2J", "a,b"])), f"00000000:{i:02X}:00.0",
                f"{draw(_mostly(st.just(81920)))} MiB", f"{draw(_mostly(st.integers(0, 81920)))} MiB",
                draw(st.sampled_from(["1 MiB", "1 MiB", "[N/A]", "", "-5 MiB"])), f"{draw(_mostly(st.just(50)))} %"]
        rows.append(", ".join(vals))
    return ".csv", "\n".join(rows) + "\n"


_ROW_TEXT = st.one_of(st.text(max_size=40), st.sampled_from(EDGE_STRS))


@st.composite
def dataset_folder(draw) -> dict[str, str]:
    """{file name: text} of a dataset folder: dataset_info.json and the files it names (alpaca or sharegpt)."""
    files: dict[str, str] = {}
    info: dict[str, Any] = {}
    for n in range(draw(st.integers(1, 3))):
        fmt = draw(st.sampled_from(["alpaca", "sharegpt"]))
        ext = draw(st.sampled_from([".json", ".jsonl"]))
        name = f"d{n}{ext}"
        entry: dict[str, Any] = {"file_name": draw(st.one_of(st.just(name), st.sampled_from(
            [[name], 3, None, "", "../x.json", "missing.json", "a\x1b]0;t\x07.json"])))}
        if fmt == "sharegpt":
            entry["formatting"] = "sharegpt"
            entry["columns"] = {"messages": "conversations"}
        if draw(st.integers(0, 5)) == 0:
            entry["columns"] = draw(st.sampled_from([[], "x", {"prompt": 3}, {"messages": None}]))
        info[f"ds{n}"] = entry
        rows = []
        for _ in range(draw(st.integers(0, 8))):
            if fmt == "alpaca":
                row: Any = {"instruction": draw(_ROW_TEXT), "input": draw(_ROW_TEXT), "output": draw(_ROW_TEXT)}
            else:
                row = {"conversations": [{"from": draw(st.sampled_from(["human", "gpt", "system", "x"])),
                                          "value": draw(_ROW_TEXT)} for _ in range(draw(st.integers(0, 4)))]}
            if draw(st.integers(0, 10)) == 0:
                row = draw(st.sampled_from([None, 3, "x", [], {"output": [1]}]))
            rows.append(row)
        if ext == ".json":
            files[name] = json.dumps(rows, ensure_ascii=False)
        else:
            files[name] = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"
    files["dataset_info.json"] = json.dumps(info, ensure_ascii=False, indent=2)
    files["__names__"] = ",".join(info)
    return files
