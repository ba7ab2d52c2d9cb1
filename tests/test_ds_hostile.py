"""Hostile and careless DeepSpeed JSON (issue 17): every input is an input error at its file and line, or a
finding at its key — never an internal error, a hang, a traceback or unprintable output.

References, independent of the reader under test: CPython's own ``json.loads`` (what HF's ``json.load`` accepts
and the values it gives), the installed DeepSpeed's pydantic models and ``DeepSpeedConfig`` (what DeepSpeed
rejects; skipped without deepspeed), libyaml's composer (key positions) and the JSON text itself (lines).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.errors import InputError
from finetune_doctor.facts.ds import facts_of
from finetune_doctor.readers.deepspeed import dscheck, dsjson
from finetune_doctor.readers import limits
from finetune_doctor.readers.deepspeed import dsschema as S
from finetune_doctor.readers.deepspeed.dsconfig import build_ds_config, load_ds_config, read_ds_json

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures").rglob("*.json"))
NEW = dict(ds_version="0.19.8", transformers_version="5.24.0")
LF = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "bf16": True}
BASE = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto"}
YAML = """model_name_or_path: Qwen/Qwen2.5-7B
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: alpaca_en_demo
template: qwen
output_dir: saves/x
per_device_train_batch_size: 2
gradient_accumulation_steps: 4
bf16: true
deepspeed: {ds}
"""


def _have(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except Exception:
        return False


# a string condition: evaluated when a marked test is set up, not at collection (tests/test_dsconfig.py)
needs_ds = pytest.mark.skipif("not _have('deepspeed')", reason="deepspeed not installed")


def doctor(*args: str) -> tuple[int, str]:
    """Run the CLI in-process with FINETUNE_DOCTOR_DEBUG=1, so that an internal error raises here."""
    r = CliRunner().invoke(main, list(args), env={"FINETUNE_DOCTOR_DEBUG": "1", "FINETUNE_DOCTOR_NO_NVML": "1"})
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.output


def check_json(tmp_path: Path, text: str | bytes) -> tuple[int, str, Path]:
    """`doctor check` on a YAML that names a DeepSpeed file holding `text`; (exit code, output, JSON path)."""
    ds = tmp_path / "ds.json"
    ds.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    y = tmp_path / "train.yaml"
    y.write_text(YAML.format(ds=ds), encoding="utf-8")
    code, out = doctor("check", str(y), "--gpu", "8xA100-80GB", "--no-data", "--format", "json",
                       "--fail-on", "never")
    return code, out, ds


def findings(out: str) -> list[dict]:
    return json.loads(out[out.index("{"):])["findings"]


def input_error(out: str) -> str:
    """The one `doctor: FILE:LINE: message` line of an exit-2 run."""
    lines = [ln for ln in out.splitlines() if ln.startswith("doctor: ")]
    assert len(lines) == 1 and "internal error" not in out and "Traceback" not in out, out
    return lines[0]


def line_of_offset(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# --------------------------------------------------------------------------------------------------------------
# the parser is json.loads, with positions
# --------------------------------------------------------------------------------------------------------------

def _same(a, b) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _random_doc(rng: random.Random, depth: int = 0):
    kind = rng.choice(["obj", "list", "int", "float", "str", "const"] if depth < 5 else ["int", "str", "const"])
    if kind == "obj":
        return {rng.choice(["a", "b", "stage", "zero_optimization", "k\u00e9y", "x y", "dup"]) + str(rng.randrange(3)):
                _random_doc(rng, depth + 1) for _ in range(rng.randrange(4))}
    if kind == "list":
        return [_random_doc(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "int":
        return rng.choice([0, -1, 7, 10**18, -(10**30)])
    if kind == "float":
        return rng.choice([0.5, -1e-9, 1e300, 5e8, float("inf"), float("nan")])
    if kind == "str":
        return rng.choice(["", "auto", "cpu", "quote\"d", "back\\slash", "\u00fcnic\u00f6de", "\U0001f600"])
    return rng.choice([None, True, False])


@pytest.mark.parametrize("seed", range(40))
def test_parser_gives_what_json_loads_gives(seed):
    rng = random.Random(seed)
    doc = {"root": _random_doc(rng)}
    for indent in (None, 2, "\t"):
        text = json.dumps(doc, indent=indent, ensure_ascii=rng.random() < 0.5)
        assert _same(dsjson.parse(text, "r.json").values, json.loads(text))
        # every reported key position points at that key's text
        for key, (line, col) in dsjson.parse(text, "r.json").positions.items():
            leaf = json.dumps(key.rsplit(".", 1)[-1], ensure_ascii=False)
            src = text.splitlines()[line - 1][col - 1:]
            assert src.startswith(leaf) or src.startswith(json.dumps(key.rsplit(".", 1)[-1])), (key, src)


def _random_text(rng: random.Random, depth: int = 0) -> str:
    """JSON text as a person might write it: any spacing, duplicated keys, escaped names, nesting in lists."""
    ws = lambda: rng.choice(["", " ", "\n  ", "\t"])
    kind = rng.choice(["obj", "list", "scalar"] if depth < 6 else ["scalar"])
    if kind == "obj":
        names = [rng.choice(['"a"', '"stage"', '"a"', '"k\\u00e9y"', '"q\\"uote"', '"x.y"', '"\\u0041"'])
                 for _ in range(rng.randrange(5))]
        return "{" + ",".join(f"{ws()}{n}{ws()}:{ws()}{_random_text(rng, depth + 1)}" for n in names) + ws() + "}"
    if kind == "list":
        return "[" + ",".join(ws() + _random_text(rng, depth + 1) for _ in range(rng.randrange(4))) + ws() + "]"
    return rng.choice(["1", "-0.5e3", "null", "true", '"auto"', '"br]ace{"', '"co:lon"', "NaN", "-Infinity"])


@pytest.mark.parametrize("seed", range(60))
def test_fast_and_exact_parsers_agree(seed):
    rng = random.Random(500 + seed)
    text = '{"root":' + _random_text(rng) + ', "root": {"b": [ {"c": 1, "c": 2} ]}}'
    fast = dsjson._fast(text)
    assert fast is not None                              # within every limit: the json.loads way
    values, positions, dups = dsjson._Parser(text, "f.json").run()
    assert _same(fast.values, json.loads(text)) and _same(values, fast.values)
    assert fast.positions == positions and fast.duplicates == tuple(sorted(dups))
    assert "root" in fast.duplicates and "root.b.c" in fast.duplicates


@pytest.mark.parametrize("seed", range(40))
def test_syntax_errors_are_json_loads_errors(seed):
    rng = random.Random(1000 + seed)
    text = json.dumps({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}, "x": [1, 2.5, None]},
                      indent=2)
    pos = rng.randrange(1, len(text) - 1)
    broken = text[:pos] + rng.choice([",", "}", "]", "\"", "//", "1e", "-", "tru", "\x01"]) + text[pos:]
    try:
        json.loads(broken)
    except json.JSONDecodeError as ref:
        with pytest.raises(InputError) as err:
            dsjson.parse(broken, "b.json")
        assert err.value.line == ref.lineno and ref.msg in err.value.message
        assert err.value.file == "b.json"
    else:
        assert _same(dsjson.parse(broken, "b.json").values, json.loads(broken))


def test_fixture_positions_match_libyaml_and_values_match_json():
    from finetune_doctor.readers.config import yamlnodes
    checked = 0
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8")
        try:
            ref = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(ref, dict):
            continue
        doc = dsjson.parse(text, str(path))
        assert _same(doc.values, ref), path
        if yamlnodes.available():
            assert doc.positions == yamlnodes.key_positions(text), path
        checked += 1
    assert checked >= 40


# --------------------------------------------------------------------------------------------------------------
# limits: file:line: ... exceeds ...
# --------------------------------------------------------------------------------------------------------------

def test_integer_over_4300_digits(tmp_path):
    digits = "9" * (limits.MAX_INT_DIGITS + 700)
    text = '{\n  "zero_optimization": {\n    "stage": 2,\n    "reduce_bucket_size": ' + digits + "\n  }\n}\n"
    with pytest.raises(ValueError, match="4300"):        # what HF's json.load does with it
        json.loads(text)
    code, out, ds = check_json(tmp_path, text)
    assert code == 2
    assert input_error(out) == (f"doctor: {ds}:4: integer literal ({len(digits)} digits) exceeds the limit of 4300 "
                                "digits: Python's int parsing, and so HF's json.load, refuses longer ones")
    # 4300 digits exactly is an integer json reads: a finding at the key, not an input error
    code, out, _ = check_json(tmp_path, text.replace(digits, "9" * limits.MAX_INT_DIGITS))
    assert code in (0, 1)
    (f,) = [f for f in findings(out) if f["location"]["key"] == "zero_optimization.reduce_bucket_size"]
    assert f["code"] == "FD201" and "int64" in f["message"] and f["location"]["line"] == 4


@pytest.mark.parametrize("opener", ['{"a": ', "["])
def test_nesting_of_900_levels(tmp_path, opener):
    closer = "}" if opener.startswith("{") else "]"
    inner = "\n".join([opener] * 900) + "1" + closer * 900
    text = '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},\n "x": ' + inner + "}"
    json.loads(text)                                     # CPython's C parser reads it (under 1000 levels)
    code, out, ds = check_json(tmp_path, text)
    # the first container past the limit: the document is level 1, the n-th container under "x" is level n + 1
    offset = -1
    for _ in range(limits.MAX_DEPTH):
        offset = text.index(opener[0], offset + 1 if offset >= 0 else text.index('"x"'))
    line = line_of_offset(text, offset)
    assert code == 2 and input_error(out).startswith(f"doctor: {ds}:{line}: nesting depth (over 64 levels) exceeds")


def test_nesting_of_an_inline_deepspeed_dict():
    deep: dict = {"stage": 2}
    for _ in range(200):
        deep = {"a": deep}
    with pytest.raises(InputError) as err:
        load_ds_config({"zero_optimization": deep}, "/x/train.yaml", 12, LF, 8, 4096, **NEW)
    assert (err.value.file, err.value.line) == ("/x/train.yaml", 12) and "exceeds the limit of 64" in err.value.message


def test_too_many_values_is_refused_quickly(tmp_path):
    text = json.dumps({**BASE, "zero_optimization": {"stage": 2},
                       "x": list(range(limits.MAX_CONFIG_NODES + 1))})
    with pytest.raises(InputError) as err:
        dsjson.parse(text, "n.json")
    assert "number of values (over 250000) exceeds the limit of 250000" in err.value.message and err.value.line == 1


def test_file_over_the_size_limit_and_long_strings(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.write(b'{"a": "')
        f.truncate(limits.MAX_CONFIG_BYTES + 10)
    with pytest.raises(InputError) as err:
        read_ds_json(big)
    assert err.value.file == str(big) and "exceeds the limit of 16 MiB" in err.value.message
    text = '{\n"zero_optimization": {"stage": 2},\n"nvme": "' + "x" * (limits.MAX_SCALAR_CHARS + 1) + '"}'
    with pytest.raises(InputError) as err:
        dsjson.parse(text, "s.json")
    assert err.value.line == 3 and "string length (65537 characters) exceeds the limit of 65536" in err.value.message


# --------------------------------------------------------------------------------------------------------------
# wrong shapes and non-finite numbers: a finding at the key, and the run still resolves
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ['["cpu"]', '"cpu"', "5", "true"])
def test_offload_param_of_the_wrong_shape(tmp_path, value):
    text = ('{\n  "train_micro_batch_size_per_gpu": "auto",\n  "gradient_accumulation_steps": "auto",\n'
            '  "zero_optimization": {\n    "stage": 3,\n    "offload_param": ' + value + "\n  }\n}\n")
    code, out, ds = check_json(tmp_path, text)
    assert code in (0, 1), out
    rep = json.loads(out[out.index("{"):])
    (f,) = [f for f in rep["findings"] if f["location"]["key"] == "zero_optimization.offload_param"]
    assert f["code"] == "FD201" and f["location"]["line"] == 6 and f["location"]["file"] == str(ds)
    assert "Input should be a valid dictionary or instance of DeepSpeedZeroOffloadParamConfig" in f["message"]
    # the run model reads DeepSpeed's default (no parameter offload) instead of the broken value
    assert rep["run"]["zero_stage"] == 3 and rep["run"].get("offload_param") in (None, "none")


@pytest.mark.parametrize("key, value", [("zero_optimization", "[1]"), ("zero_optimization", '"3"'),
                                        ("fp16", '"yes"'), ("bf16", "null"), ("optimizer", "5"),
                                        ("scheduler", '["WarmupLR"]'), ("checkpoint", '"x"')])
def test_sections_of_the_wrong_shape(tmp_path, key, value):
    raw = {**BASE, "zero_optimization": {"stage": 2}}
    raw[key] = json.loads(value)
    text = json.dumps(raw, indent=2)
    code, out, ds = check_json(tmp_path, text)
    assert code in (0, 1), out
    hits = [f for f in findings(out) if f["location"]["key"] == key and f["code"] == "FD201"]
    assert len(hits) == 1 and f"{key} must be an object, found" in hits[0]["message"], findings(out)
    cfg = build_ds_config(raw, "ds.json", {}, LF, 8, 4096, **NEW)
    assert key not in cfg.resolved or isinstance(cfg.resolved[key], dict)       # dropped from the run model
    assert cfg.received[key] == raw[key] or key in ("fp16", "bf16")             # what DeepSpeed receives


def test_optimizer_params_of_the_wrong_shape():
    raw = {**BASE, "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": "lr=1e-4"}}
    cfg = build_ds_config(raw, None, {}, LF, 8, 4096, **NEW)
    (p,) = [p for p in cfg.problems if p.check == "not_object"]
    assert p.key == "optimizer.params" and "params" not in cfg.resolved["optimizer"]


@needs_ds
@pytest.mark.parametrize("key", sorted(S.TOP_SECTIONS))
def test_top_sections_are_objects_for_deepspeed(key):
    """What DeepSpeedConfig itself does with a non-object in each section the schema calls an object."""
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    saved = dist.get_world_size, dist.get_rank
    dist.get_world_size, dist.get_rank = (lambda *a, **k: 1), (lambda *a, **k: 0)
    try:
        for bad in ("x", [1], 5):
            with pytest.raises(Exception):
                DeepSpeedConfig({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}, key: bad})
            cfg = build_ds_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}, key: bad},
                                  None, {}, {}, 1, None, **NEW)
            assert [p.key for p in cfg.problems if p.check == "not_object"] == [key]
    finally:
        dist.get_world_size, dist.get_rank = saved


NONFINITE = [("zero_optimization", "reduce_bucket_size", v) for v in (math.inf, -math.inf, math.nan, 1e400, 1e300,
                                                                      10**30, 2**63 - 1)] + \
            [("zero_optimization", "stage", v) for v in (math.inf, math.nan, 1e300, 10**30)] + \
            [("zero_optimization", "overlap_comm", math.nan), ("fp16", "initial_scale_power", math.inf),
             ("fp16", "loss_scale", math.nan), ("zero_optimization", "offload_optimizer", {"ratio": math.inf})]


@needs_ds
@pytest.mark.parametrize("section, key, value", NONFINITE, ids=repr)
def test_nonfinite_and_huge_numbers_match_pydantic(section, key, value):
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from pydantic import ValidationError

    model = {"zero_optimization": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config}[section]
    try:
        model(**{key: value})
        rejected = False
    except ValidationError:
        rejected = True
    raw = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    raw.setdefault(section, {})[key] = value
    cfg = build_ds_config(raw, None, {}, {}, 8, 4096, **NEW)
    flagged = [p for p in cfg.problems if p.key and p.key.startswith(f"{section}.{key}") and p.detail]
    assert bool(flagged) == rejected, [p.as_dict() for p in flagged]
    # beyond int64 DeepSpeed's pydantic accepts a Python int, torch's sizes do not: a finding without upstream text
    if isinstance(value, int) and value > limits.INT64_MAX and key != "stage":
        assert [p.check for p in cfg.problems if p.key == f"{section}.{key}"] == ["int64_range"]
    # whatever was written, the run model holds a number of the schema's type
    v = cfg.get(f"{section}.{key}")
    assert v is None or isinstance(v, (int, float, dict)) and not (isinstance(v, float) and not math.isfinite(v)) \
        or key == "loss_scale"


@pytest.mark.parametrize("text", [
    '{"train_micro_batch_size_per_gpu": Infinity, "zero_optimization": {"stage": Infinity}}',
    '{"train_micro_batch_size_per_gpu": NaN, "gradient_accumulation_steps": NaN, "zero_optimization": {"stage": NaN}}',
    '{"train_micro_batch_size_per_gpu": 1e400, "train_batch_size": -1e400, "zero_optimization": {"stage": 1e400}}',
    '{"train_micro_batch_size_per_gpu": 99999999999999999999999, "zero_optimization": {"stage": 99999999999999}}',
])
def test_nonfinite_batch_and_stage_through_check(tmp_path, text):
    code, out, ds = check_json(tmp_path, text)
    assert code in (0, 1), out
    rep = json.loads(out[out.index("{"):])
    keys = {f["location"]["key"] for f in rep["findings"] if f["code"] == "FD201"}
    assert {"train_micro_batch_size_per_gpu", "zero_optimization.stage"} <= keys
    assert rep["run"]["zero_stage"] == 0          # DeepSpeed's default stage stands in for the rejected one


# --------------------------------------------------------------------------------------------------------------
# strings that cannot be printed, duplicates, encodings, empty and non-regular files
# --------------------------------------------------------------------------------------------------------------

def test_lone_surrogates_and_control_characters_stay_printable(tmp_path):
    text = ('{\n  "train_micro_batch_size_per_gpu": "\\ud800",\n  "zero_optimization": {\n    "stage": 2,\n'
            '    "\\udfff\\u001b]0;owned\\u0007": 1\n  },\n  "\\u001b[2J": {"x": "\\u009b"}\n}\n')
    ref = json.loads(text)                               # what HF reads: lone surrogates and escape sequences
    assert "\ud800" in ref["train_micro_batch_size_per_gpu"] and "\x1b[2J" in ref
    for fmt in ("json", "text", "github", "sarif"):
        ds = tmp_path / "ds.json"
        ds.write_text(text, encoding="utf-8")
        y = tmp_path / "train.yaml"
        y.write_text(YAML.format(ds=ds), encoding="utf-8")
        code, out = doctor("check", str(y), "--gpu", "8xA100-80GB", "--no-data", "--format", fmt, "--fail-on",
                           "never")
        assert code == 0, out
        out.encode("utf-8")                              # strict: no lone surrogate reached the output
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
        if fmt == "json":
            keys = {f["location"]["key"]: f for f in findings(out)}
            f = keys["zero_optimization.\\udfff\\u001b]0;owned\\u0007"]
            assert f["location"]["line"] == 5 and f["code"] == "FD201"
            assert keys["train_micro_batch_size_per_gpu"]["location"]["line"] == 2


def test_duplicate_keys_at_every_depth():
    text = ('{\n  "zero_optimization": {"stage": 2, "stage": 3, "offload_param": {"device": "cpu", "device": "none"}},\n'
            '  "train_micro_batch_size_per_gpu": 1,\n  "zero_optimization": {"stage": 1}\n}\n')
    doc = dsjson.parse(text, "d.json")
    assert _same(doc.values, json.loads(text))           # the last value wins, as json.load has it
    assert doc.duplicates == ("zero_optimization", "zero_optimization.offload_param.device", "zero_optimization.stage")
    cfg = build_ds_config(doc.values, "d.json", doc.positions, LF, 8, 4096, dup_paths=doc.duplicates, **NEW)
    dups = {p.key: p.line for p in cfg.problems if p.kind == "duplicate"}
    # each at the occurrence json.load keeps: the second zero_optimization (line 4) and what lies below it
    assert dups == {"zero_optimization": 4, "zero_optimization.offload_param.device": 2, "zero_optimization.stage": 4}


@pytest.mark.parametrize("data, line, what", [
    ('{"zero_optimization": {"stage": 2},\n "nvme_path": "caf\u00e9"}'.encode("latin-1"), 2, "not UTF-8 text: byte 0xE9"),
    (json.dumps({**BASE, "zero_optimization": {"stage": 2}}).encode("utf-16"), 1, "UTF-16 text"),
    (json.dumps({**BASE, "zero_optimization": {"stage": 2}}).encode("utf-16-be"), 1, "UTF-16-BE text"),
    (json.dumps({**BASE, "zero_optimization": {"stage": 2}}).encode("utf-32"), 1, "UTF-32 text"),
    (b"\xef\xbb\xbf" + json.dumps({**BASE, "zero_optimization": {"stage": 2}}).encode(), 1, "Unexpected UTF-8 BOM"),
    (b"", 1, "empty DeepSpeed config"), (b" \n\t\n", 1, "empty DeepSpeed config"),
    (b"[1, 2]", 1, "must be a JSON object, found list"),
])
def test_encodings_and_empty_files(tmp_path, data, line, what):
    code, out, ds = check_json(tmp_path, data)
    assert code == 2
    msg = input_error(out)
    assert msg.startswith(f"doctor: {ds}:{line}: ") and what in msg, msg
    with pytest.raises(Exception):                       # HF opens the file as UTF-8 and json.load's it
        with open(ds, encoding="utf-8") as f:
            ref = json.load(f)
        assert isinstance(ref, dict) and ref


def test_fifo_device_and_directory_as_the_deepspeed_file(tmp_path):
    fifo = tmp_path / "ds_fifo.json"
    os.mkfifo(fifo)
    (tmp_path / "ds_dir.json").mkdir()
    for target, what in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                         (tmp_path / "ds_dir.json", "is a directory")):
        y = tmp_path / "train.yaml"
        y.write_text(YAML.format(ds=target), encoding="utf-8")
        code, out = doctor("check", str(y), "--gpu", "8xA100-80GB", "--no-data")
        assert code == 2 and input_error(out).startswith(f"doctor: {y}:12: deepspeed: ") and what in out, out


def test_reading_a_fifo_or_device_directly_never_blocks(tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    code = ("import sys\nfrom finetune_doctor.errors import InputError\nfrom finetune_doctor.readers.deepspeed import dsjson\n"
            "for p in sys.argv[1:]:\n    try:\n        dsjson.read_bytes(p)\n    except InputError as e:\n"
            "        print(e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(fifo), "/dev/zero", str(tmp_path)], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.stdout.splitlines() == [f"{fifo}: DeepSpeed config is a FIFO, not a regular file",
                                     "/dev/zero: DeepSpeed config is a device, not a regular file",
                                     f"{tmp_path}: DeepSpeed config is a directory, not a regular file"], r.stderr


def test_os_errors_name_the_path(tmp_path):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    for value, why in ((str(loop), "Too many levels of symbolic links"), ("x" * 5000 + ".json", "too long")):
        with pytest.raises(InputError) as err:
            load_ds_config(value, str(tmp_path / "t.yaml"), 3, LF, 8, 4096, **NEW)
        assert (err.value.file, err.value.line) == (str(tmp_path / "t.yaml"), 3) and why in err.value.message
    with pytest.raises(InputError) as err:
        read_ds_json(loop)
    assert err.value.file == str(loop) and "cannot read DeepSpeed config" in err.value.message


# --------------------------------------------------------------------------------------------------------------
# size: 200k keys read in linear time (benchmarks/bench_ds_json.py measures it), findings stay bounded
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("where", ["top", "zero_optimization"])
def test_200k_keys(tmp_path, where):
    raw = {**BASE, "zero_optimization": {"stage": 2}}
    extra = {f"generated_key_{i}": i for i in range(200_000)}
    (raw if where == "top" else raw["zero_optimization"]).update(extra)
    text = json.dumps(raw, indent=1)
    ds = tmp_path / "ds.json"
    ds.write_text(text, encoding="utf-8")
    code, out = doctor("lint", str(ds), "--format", "json")
    assert code in (0, 1), out
    fs = findings(out)
    if where == "top":       # unknown top-level keys are ignored by DeepSpeed and look like no real key: no finding
        assert fs == []
    else:                    # 50 one by one, the other 199,950 folded into one finding
        unknown = [f for f in fs if f["code"] == "FD201"]
        assert len(unknown) == dscheck.MAX_UNKNOWN_PER_SECTION + 1
        last = unknown[-1] if "more keys" in unknown[-1]["message"] else next(f for f in unknown
                                                                               if "more keys" in f["message"])
        assert "and 199949 more keys after it" in last["message"]
        assert last["location"]["key"] == "zero_optimization.generated_key_50"
        assert last["location"]["line"] == text.splitlines().index('  "generated_key_50": 50,') + 1


def test_facts_of_a_hostile_config_are_plain_and_printable():
    raw = dsjson.parse('{"zero_optimization": {"stage": "3", "offload_param": [1], "\\ud800": 1},'
                       ' "train_batch_size": 1e400, "fp16": "on"}', "h.json").values
    cfg = build_ds_config(raw, "h.json", {}, LF, 8, 4096, **NEW)
    facts = facts_of(cfg)
    text = json.dumps(facts, default=str, ensure_ascii=False)
    text.encode("utf-8")
    assert facts["zero_stage"] == 3 and facts["offload_param_device"] is None
    assert all(isinstance(p["actual_text"], str) and len(p["actual_text"]) <= 200 for p in facts["problems"])
