"""One home per fact (issue #22): each fact that two commands resolve is resolved by one function, and these tests
pin the shared answer where two copies had drifted."""

import json
from pathlib import Path

import pytest

import pkgast
from finetune_doctor.analyzers.data.tokenizer import find_tokenizer
from finetune_doctor.readers.gpus import gpu_config
from finetune_doctor.readers.deepspeed.dsconfig import resolve_ds_path
from finetune_doctor.readers.data.hubcache import hf_hub_cache
from finetune_doctor.readers.lfenv import env_enabled
from finetune_doctor.readers.model.caches import cached_model_files, hub_cache_dirs

DS = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}


def test_gpus_config_finds_the_deepspeed_json_where_check_does(tmp_path, monkeypatch):
    """LF's YAMLs name ``examples/deepspeed/...`` relative to the checkout root; a YAML under examples/train_full/
    run from elsewhere is found in the YAML's parents by `doctor check` and, now, by `doctor gpus --config`."""
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed" / "ds_z3_config.json").write_text(json.dumps(DS))
    (tmp_path / "examples" / "train_full").mkdir()
    y = tmp_path / "examples" / "train_full" / "run.yaml"
    y.write_text("stage: sft\ndeepspeed: examples/deepspeed/ds_z3_config.json\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert resolve_ds_path("examples/deepspeed/ds_z3_config.json", y).read_text() == json.dumps(DS)
    info = gpu_config.load_config(str(y))
    assert info.ds == DS and not info.notes


def test_gpus_config_missing_deepspeed_is_a_note(tmp_path, monkeypatch):
    y = tmp_path / "run.yaml"
    y.write_text("stage: sft\ndeepspeed: nowhere/ds.json\n")
    monkeypatch.chdir(tmp_path)
    info = gpu_config.load_config(str(y))
    assert info.ds is None and info.notes == [f"{y}: deepspeed file nowhere/ds.json not found; ZeRO save cost "
                                              "not ranked"]


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("Y", True), ("y", True), ("0", False),
                                       ("yes", False), ("", False)])
def test_use_modelscope_hub_is_read_as_lf_reads_it(value, on):
    """LF's is_env_enabled: true, y or 1 (lower-cased); the dataset reader used to drop "y"."""
    from finetune_doctor.readers.data.datasets import _source

    env = {"USE_MODELSCOPE_HUB": value}
    assert env_enabled("USE_MODELSCOPE_HUB", env) is on
    attr = {"hf_hub_url": "org/ds", "ms_hub_url": "org/ds-ms"}
    assert _source(attr, env_enabled("USE_MODELSCOPE_HUB", env), False)["load_from"] == ("ms_hub" if on else "hf_hub")


def _nodes(path: Path) -> tuple:
    """Every node of one project module (``ast.walk`` order), parsed and walked once per test process (pkgast.py,
    shared with test_architecture and test_startup): two checks below read every module of the package."""
    return pkgast.nodes(path)


def _ms_tokenizer(root: Path) -> Path:
    folder = root / "hub" / "models" / "acme" / "tiny___v1"
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_tokenizer_and_model_config_use_one_modelscope_root(tmp_path):
    """modelscope puts models under $MODELSCOPE_CACHE/hub (utils/file_utils.py get_model_cache_root); the tokenizer
    finder used $MODELSCOPE_CACHE itself, and looked there even without USE_MODELSCOPE_HUB."""
    folder = _ms_tokenizer(tmp_path / "ms")
    env = {"MODELSCOPE_CACHE": str(tmp_path / "ms"), "HF_HUB_CACHE": str(tmp_path / "hf")}
    assert find_tokenizer("acme/tiny.v1", env=env)[0] is None
    on = {**env, "USE_MODELSCOPE_HUB": "1"}
    got, how = find_tokenizer("acme/tiny.v1", env=on)
    assert got == str(folder) and how.startswith("ModelScope cache")
    assert cached_model_files("acme/tiny.v1", "tokenizer.json", env=on) == [(folder / "tokenizer.json",
                                                                             "ModelScope cache")]


def test_one_hf_hub_cache_order(tmp_path):
    env = {"HF_HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert hf_hub_cache(env) == hub_cache_dirs(env=env)[0] == tmp_path / "home" / "hub"
    env["HUGGINGFACE_HUB_CACHE"] = str(tmp_path / "legacy")
    assert hf_hub_cache(env) == tmp_path / "legacy"
    env["HF_HUB_CACHE"] = str(tmp_path / "new")
    assert hf_hub_cache(env) == hub_cache_dirs(env=env)[0] == tmp_path / "new"


def test_one_split_arg_with_lfs_empty_items():
    """LF keeps empty items (data_args.py split_arg); two of the four copies dropped them. The data scan, the launch
    checks and the run all read lists through run/values.py now."""
    from finetune_doctor.analyzers.config import launch
    from finetune_doctor.analyzers.data import tokens
    from finetune_doctor.run.values import split_arg, split_list

    assert split_arg("a, ,b,") == ["a", "", "b", ""]
    assert split_arg(["x", 1]) == ["x", "1"] and split_arg(None) is None and split_arg(3) == ["3"]
    assert tokens.as_list is split_arg and launch._names("a,,b") == ["a", "", "b"] and launch._names(3) is None
    assert split_list("q_proj, ,v_proj,") == ("q_proj", "v_proj")   # module names: an empty item names none
    # the probe's dataset sampler was a fifth copy (a list item that is not a str crashed it): it reads split_list
    import inspect

    from finetune_doctor.probes import confirm

    src = inspect.getsource(confirm.sample_batches)
    assert "split_list(" in src and '.split(",")' not in src


def test_one_as_bool():
    from finetune_doctor.analyzers.data import dataargs, tokens
    from finetune_doctor.run import values

    assert dataargs.as_bool is values.as_bool is tokens.as_bool
    assert [values.as_bool(v) for v in ("True", " on", "1", "no", "y", False, 1)] == [True, True, True, False,
                                                                                     False, False, True]


def test_one_json_key_scanner_places_a_duplicate_where_json_load_reads_it():
    """json.load keeps the last of two equal keys; every JSON reader now points at that one (three scanners had
    kept the first)."""
    from finetune_doctor.readers.deepspeed import dsjson
    from finetune_doctor.readers.model.configjson import json_key_positions

    text = '{\n  "zero_optimization": {\n    "stage": 2,\n    "stage": 3\n  },\n  "x": [{"k": 1}]\n}\n'
    assert json.loads(text)["zero_optimization"]["stage"] == 3
    want = {"zero_optimization": (2, 3), "zero_optimization.stage": (4, 5), "x": (6, 3), "x.k": (6, 10)}
    assert json_key_positions(text) == dsjson.key_positions(text) == want
    doc = dsjson.parse(text, "ds.json")
    assert doc.positions == want and doc.duplicates == ("zero_optimization.stage",)
    # the exact parser (taken for a text with an escaped control character) agrees with the fast scan
    slow = text.replace('"x"', '"x\\u0001"')
    assert dsjson.parse(slow, "ds.json").positions["zero_optimization.stage"] == (4, 5)
    # and --fix edits that occurrence (it edited the first, which json.load ignores, and refused the fix)
    from finetune_doctor.fixes.edit import render_edits
    from finetune_doctor.types import Edit

    out, changed = render_edits(text, [Edit("ds.json", "zero_optimization.stage", 1)], kind="json", path="ds.json")
    assert json.loads(out)["zero_optimization"]["stage"] == 1 and changed == ["zero_optimization.stage"]
    assert out.splitlines()[2:4] == ['    "stage": 2,', '    "stage": 1']


def test_one_bf16_family_list():
    """The rule reads model.bf16_family, built from the list the postmortem uses; no copy of the list in a rule."""
    from finetune_doctor.analyzers.postmortem.runctx import BF16_FAMILIES as in_postmortem
    from finetune_doctor.arch import BF16_FAMILIES

    root = Path(__file__).resolve().parent.parent
    rule = (root / "rules" / "fp16-on-bf16-model.yaml").read_text()
    assert "model.bf16_family" in rule and "'qwen2'" not in rule and "qwen2" in BF16_FAMILIES
    assert in_postmortem is BF16_FAMILIES


def test_one_size_formatter():
    from finetune_doctor.fsutil import format_bytes
    from finetune_doctor.readers.data import datarows
    from finetune_doctor.reporters.sections import read

    assert [format_bytes(n) for n in (None, 0, 512, 1536, 20 << 20, int(2.25 * (1 << 30)))] == [
        "0 B", "0 B", "512 B", "1.5 KiB", "20.0 MiB", "2.2 GiB"]
    assert datarows._size is read._size is format_bytes


@pytest.mark.parametrize("value, text", [(1e-5, "1.0e-5"), (5e-06, "5.0e-6"), (2.0e-4, "0.0002"), (1e20, "1.0e+20"),
                                         (True, "true"), (None, "null"), ("yes", '"yes"'), ("q_proj", "q_proj"),
                                         ("1e-5", '"1e-5"')])
def test_one_yaml_scalar_writer(value, text):
    """What --fix writes and what SARIF/text show as the edit are one spelling (they were 1.0e-5 vs 1.0e-05)."""
    from finetune_doctor.fixes.edit import yaml_scalar
    from finetune_doctor.reporters._source import yaml_scalar as shown

    assert yaml_scalar(value) == shown(value) == text


def test_postmortem_without_config_builds_hw_with_the_shared_builder(tmp_path):
    """The config-less postmortem built `hw` by hand and lost compute_capability, in_use_gib, nnodes and fp8."""
    from finetune_doctor.facts import CONFIG_NAMES, hw as hw_facts, skeleton
    from finetune_doctor.facts.hw import resolve

    hw = resolve("2xA100-80GB", 1, allow_nvml=False)
    facts = skeleton(hw=hw_facts.assemble(hw))
    assert set(facts) == set(CONFIG_NAMES) and facts["cfg"] is None
    assert {"compute_capability", "in_use_gib", "nnodes", "fp8", "host_ram_gib"} <= set(facts["hw"])
    assert facts["hw"]["compute_capability"] == hw.compute_capability


@pytest.mark.parametrize("cfg", [{"stage": "pt"}, {"stage": "sft"}, {"stage": "sft", "neat_packing": True},
                                 {"stage": "pt", "packing": False}, {"stage": "sft", "packing": "true"}, {}])
def test_the_data_scan_and_the_run_settle_packing_cutoff_and_batch_alike(cfg):
    from finetune_doctor.analyzers.data.dataargs import DataSettings
    from finetune_doctor.run.resolve import _stage_data

    ds = DataSettings.from_config(cfg)
    run = _stage_data(cfg, str(cfg.get("stage") or "sft"), "lora")
    assert (ds.packing, ds.neat_packing) == (run["packing"], run["neat_packing"])
    assert (ds.cutoff_len, ds.micro_batch) == (2048, 8)


def test_hardware_imports_no_reader():
    """hardware/ sits under readers/ (readers/gpus/smi.py reads what hardware/record.py writes): the recorder's formats
    are declared by the recorder, so no hardware module imports a reader."""
    import ast as _ast

    root = Path(__file__).resolve().parent.parent / "finetune_doctor" / "hardware"
    ups = []
    for f in sorted(root.glob("*.py")):
        for node in _ast.walk(_ast.parse(f.read_text())):
            if isinstance(node, _ast.ImportFrom) and (node.module or "").startswith("finetune_doctor.readers"):
                ups.append(f"{f.name}: {node.module}")
    assert ups == []


def test_command_modes_are_one_declared_table():
    from finetune_doctor.facts.config import MODES, Mode

    assert MODES["lint"] == Mode(static=True) and MODES["postmortem"] == Mode(need_model=False, lenient=True)
    assert set(MODES) == {"lint", "check", "estimate", "probe", "postmortem"}
    root = Path(__file__).resolve().parent.parent / "finetune_doctor" / "pipeline"
    for f in root.glob("*.py"):   # no call site spells the flags again
        text = f.read_text()
        assert "static=True" not in text and "lenient=True" not in text and "need_model=" not in text, f.name


def test_value_kinds_have_one_home():
    """The generator of catalog/lf_keys.json types Literal/enum choices with the key check's own rule."""
    import importlib.util
    import sys

    from finetune_doctor.readers.config.keyschema import value_kind

    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    sys.path.insert(0, scripts)
    try:
        spec = importlib.util.spec_from_file_location("gen_key_schema_for_test", Path(scripts) / "gen_key_schema.py")
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
    finally:
        sys.path.remove(scripts)
    assert gen._kind_of_value is value_kind
    assert [value_kind(v) for v in (None, True, 3, 2.5, "x", [1], {"a": 1}, object())] == \
        ["null", "bool", "int", "float", "str", "list", "dict", "any"]


def test_slot_text_step_has_one_home():
    """Both slot walks of the data encoder take each text through `_Texts.known`: a cached text counts, an
    unknown one is queued once per slot (its reference kept), an empty one neither."""
    import inspect

    from finetune_doctor.analyzers.data.encoder import Encoder, _Texts

    texts = _Texts()
    cache = {(hash("<|im_start|>"), len("<|im_start|>")): 3}
    assert [texts.known(s, cache) for s in ("<|im_start|>", "", "hello", "hello")] == [3, 0, 0, 0]
    assert texts.unique == ["hello"] and texts.refs == [0, 0]
    for walk in (Encoder._collect, Encoder._collect_plain):
        src = inspect.getsource(walk)
        assert "known(" in src and "cache.get(" not in src


@pytest.mark.parametrize("case", [
    # (config, flags, the finding whose fix is checked): trial 7 found 76 % vs 75 %, 49 % vs 47 %, 13 % vs 9 %
    ("fixtures/quickstart/llama7b_full_zero2_v100.yaml", ["optim=adamw_torch", "--gpu", "8xV100-32GB"], "FD601"),
    ("fixtures/trial_reports/gemma3-12b-lora-16k-z3off-8xa100.yaml",
     ["--env", "fixtures/trial_reports/gemma3-12b-lora-16k-z3off-8xa100.env.txt"], "FD606"),
    ("fixtures/trial_reports/qwen3-8b-lora-20k-2xa100-40gb.yaml", ["--gpu", "2xA100-40GB"], "FD640"),
])
def test_one_probability_of_oom_per_report(case):
    """The memory block's p_oom (a mixture over the open assumptions, facts/verdict.py `mixed_p_oom`) is the home of a
    run's probability of OOM: a remedy's "before" is that number, not the assumed values' alone."""
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    root = Path(__file__).resolve().parent.parent
    cfg, flags, code = case
    r = CliRunner().invoke(main, ["check", str(root / cfg), *[str(root / f) if f.startswith("fixtures/") else f
                                                              for f in flags], "--no-data", "--format", "json"])
    d = json.loads(r.output)
    fix = next(f for f in d["findings"] if f["code"] == code)["fix"]
    assert d["memory"]["p_oom"] is not None
    for f in (fix, *fix.get("alternatives", [])):
        assert f["effect"]["p_oom_before"] == pytest.approx(d["memory"]["p_oom"], abs=1e-3), f["title"]


LINT_PATH_PACKAGES = ("readers/config", "readers/model", "engine", "facts", "pipeline")


def test_release_ranges_have_one_public_reader():
    """The ``"0-3,7"`` release-range form of the catalogs is read by lfrelease.parse_ranges alone: lfv1's key
    tables ask it (they imported its private ``_parse_ranges`` before, issue #22)."""
    from finetune_doctor.readers.config import lfrelease, lfv1

    assert lfrelease.parse_ranges("0-2,5") == frozenset({0, 1, 2, 5})
    assert lfv1._in("0-2,5") == lfrelease.parse_ranges("0-2,5") and lfv1._in("") == frozenset()
    with pytest.raises(ValueError):
        lfrelease.parse_ranges("0-x")


def test_lint_path_imports_no_private_name_of_another_module():
    """A name another module needs has a public home: no module of the lint path imports a ``_private`` name from
    another project module (``import x as _y`` of a public name is fine)."""
    import ast

    root = Path(__file__).resolve().parent.parent / "finetune_doctor"
    found = []
    for pkg in LINT_PATH_PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            for node in _nodes(path):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("finetune_doctor"):
                    found += [f"{path.relative_to(root)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def _assumed(args: list[str], monkeypatch) -> list[dict]:
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE"):
        monkeypatch.delenv(var, raising=False)
    r = CliRunner().invoke(main, [*args, "--offline", "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)["assumptions"]


EX = Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "examples"


@pytest.mark.parametrize("extra, value, alternatives", [
    ([], "one process on one GPU (python, no torchrun)", ["torchrun over several GPUs", "accelerate launch"]),
    (["--nnodes", "2"], "llamafactory-cli train (torchrun, DDP, expandable segments on)",
     ["torchrun or deepspeed started by hand (allocator default)", "accelerate launch with FSDP"]),
    # one node, release not given (installed here or not: not necessarily the training machine's): LLaMA-Factory
    # before 0.8.0 ran one process over every visible GPU (facts/kinds.py DATA_PARALLEL), but this example's keys
    # exist only from a later release, which rules that launch out (trial 15, facts/launchray.py
    # `narrowed_past_first`; tests/test_trial15.py keeps it for LF 0.7.1's example)
    (["--gpu", "8xA100-80GB"], "llamafactory-cli train (torchrun, DDP, expandable segments on)",
     ["torchrun or deepspeed started by hand (allocator default)", "accelerate launch with FSDP"]),
    (["--gpu", "8xA100-80GB", "--llamafactory", "0.8.0"], "llamafactory-cli train (torchrun, DDP, expandable "
     "segments on)", ["torchrun or deepspeed started by hand (allocator default)", "accelerate launch with FSDP"]),
    (["--gpu", "A100-80GB"], None, None),
])
def test_the_launcher_assumption_has_one_producer(extra, value, alternatives, monkeypatch):
    """facts/kinds.py `launcher_assumption` writes the ``launcher`` assumption, read before the run is resolved and
    asked again with the resolved run's ranks (facts/assume.py weighs that entry); the report holds one entry, in
    lint and check alike (two producers with their own wording used to be merged by name, issue #22)."""
    config = str(EX / "train_lora" / "qwen3_lora_sft.yaml")
    for cmd in ("lint", "check"):
        got = [a for a in _assumed([cmd, config, *extra, *(["--no-data"] if cmd == "check" else [])], monkeypatch)
               if a["name"] == "launcher"]
        if value is None:
            assert got == []
            continue
        assert [(a["value"], a["alternatives"]) for a in got] == [(value, alternatives)]


def test_the_launcher_and_release_assumptions_are_written_in_one_module():
    """Only facts/kinds.py names the ``launcher`` and ``lf-version`` assumptions it produces."""
    import ast

    root = Path(__file__).resolve().parent.parent / "finetune_doctor"
    where = set()
    for path in sorted(root.rglob("*.py")):
        for node in _nodes(path):
            if isinstance(node, ast.Call):
                names = [k.value for k in node.keywords if k.arg == "name"] + list(node.args[:1])
                if any(isinstance(n, ast.Constant) and n.value in ("launcher", "lf-version") for n in names):
                    where.add(str(path.relative_to(root)))
    assert where == {"facts/kinds.py"}


def test_the_reserve_shown_and_needed_has_one_home():
    """The allocator reserve per shape class, the share a run shows and the share it needs (issue 23), is read from
    reserve_table.json by analyzers/memory/reserve.py alone; the estimate carries both, and every verdict decides on
    the need (uncertainty.assess's `need_gib`) while `total` keeps the shown reserve."""
    from finetune_doctor.analyzers.memory import compute_terms, estimate, reserve, uncertainty
    from finetune_doctor.facts.mem import shape_of
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run
    from finetune_doctor.types import Hardware

    pkg = Path(reserve.__file__).resolve().parents[2]
    readers = sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")
                     if '"reserve_table.json"' in p.read_text(encoding="utf-8"))   # the path as code names it
    assert readers == ["analyzers/memory/reserve.py"]
    hw = Hardware(gpu="A100-40GB", num_gpus=1, capacity_gib=39.39, bf16=True, source="flag")
    cfg = {"bf16": True, "finetuning_type": "lora", "cutoff_len": 11264, "per_device_train_batch_size": 1}
    run = resolve_run(cfg, load_arch("Qwen/Qwen2.5-7B")[0], hw, None)
    est = estimate(run, hw)
    t = compute_terms(run)
    assert est.details["reserve_share"] == reserve.reserve_fraction(run, t, False)[0]
    assert est.details["reserve_needed_share"] == reserve.needed_fraction(run, t, False)[0]
    assert est.need < 39.39 < est.total
    a = uncertainty.assess(est.total, 39.39, est.method, shape_of(est), est.need)
    assert est.fits is True and a.verdict != "oom"


# trial 3: check and postmortem read the same GPUs and size a DeepSpeed file that is not here the same way

TRIAL3 = Path(__file__).resolve().parent.parent / "fixtures" / "trial3"


def test_check_and_postmortem_take_the_gpu_from_the_same_env_file(tmp_path):
    from finetune_doctor.facts.hw import ENV_CARD_ONLY, from_inputs
    from finetune_doctor.pipeline import postmortem as pm
    from finetune_doctor.pipeline.check import run as check
    from finetune_doctor.readers.config.stack import read_env_file
    from finetune_doctor.settings import Options

    d = TRIAL3 / "qwen25_32b_qlora_partial"
    env = str(d / "env.txt")
    hw = from_inputs(Options(command="check"), read_env_file(env), allow_nvml=False)
    assert (hw.gpu, hw.bf16, hw.source) == ("RTX-2080Ti", False, ENV_CARD_ONLY)
    pr = pm.run(str(tmp_path), [str(d / "train.log")], str(d / "config.yaml"),
                Options(command="postmortem", env_file=env))
    cr = check(str(d / "config.yaml"), (), Options(command="check", env_file=env, offline=True), scan_data=False)
    assert pr.hardware.gpu == cr.hardware.gpu == "RTX-2080Ti"
    fp16 = next(f for f in pr.findings if f.name == "fp16-on-bf16-model")
    assert not any(e.key == "bf16" and e.value is True for e in (fp16.fix.edits if fp16.fix else ()))


def test_check_and_postmortem_size_a_deepspeed_file_not_here_with_the_same_stand_in(tmp_path):
    from finetune_doctor.pipeline import postmortem as pm
    from finetune_doctor.pipeline.check import run as check
    from finetune_doctor.settings import Options

    cfg = TRIAL3 / "qwen25vl3b_own_ds" / "config.yaml"
    cr = check(str(cfg), (), Options(command="check", gpu="A800-80GB", lf_version="0.9.4.dev0", offline=True),
               scan_data=False)
    pr = pm.run(str(tmp_path), [str(cfg.parent / "train.log")], str(cfg),
                Options(command="postmortem", gpu="A800-80GB", lf_version="0.9.4.dev0", offline=True))
    assert cr.memory is not None and pr.memory is not None
    # the same stand-in (LF's stock ZeRO-3 file, as the name ds_z3_config.json suggests), so the same total
    assert cr.inputs["deepspeed_stand_in"] == "examples/deepspeed/ds_z3_config.json"
    assert round(pr.memory.total, 2) == round(cr.memory.total, 2)
    assert pr.memory.per_gpu == cr.memory.per_gpu
    assert {f.name for f in pr.findings} & {"deepspeed-file-missing"} == set()
    assert [f.severity for f in pr.findings if f.name == "not-checked-here" and f.location.key == "deepspeed"] \
        == [f.severity for f in cr.findings if f.name == "not-checked-here" and f.location.key == "deepspeed"] \
        == ["info"]


def test_transformers_auto_bucket_values_have_one_home(tmp_path):
    """transformers' "auto" bucket values (h², int(0.9·h²), 10·h) were written in readers/deepspeed/dsauto.py and again
    in analyzers/memory/zero3.py, which probes/zerotrace.py read (issue #22): dsauto's `hf_auto_values` is the one
    home; the reader fills a config with it, the allocator replay reads it, and no other module restates it."""
    import re

    from finetune_doctor.analyzers.memory import zero3
    from finetune_doctor.arch import ModelArch
    from finetune_doctor.probes import zerotrace
    from finetune_doctor.readers.deepspeed import dsauto
    from finetune_doctor.readers.deepspeed.dsconfig import load_ds_config

    want = {"reduce_bucket_size": 16777216, "stage3_prefetch_bucket_size": 15099494,
            "stage3_param_persistence_threshold": 40960}
    assert dsauto.hf_auto_values(4096) == want and tuple(want) == dsauto.HIDDEN_SIZE_KEYS
    assert dsauto.hf_auto_values(4096, float_prefetch=True)["stage3_prefetch_bucket_size"] == 0.9 * 4096 * 4096
    assert zerotrace.hf_auto_values is dsauto.hf_auto_values and not hasattr(zero3, "hf_auto_values")
    p = tmp_path / "ds_z3.json"
    p.write_text(json.dumps({"zero_optimization": {"stage": 3, **dict.fromkeys(want, "auto")}}))
    for tfv, prefetch in (("4.57.0", 15099494), ("4.44.2", 0.9 * 4096 * 4096)):
        ds = load_ds_config(str(p), str(tmp_path / "train.yaml"), 1, {}, 8, 4096, transformers_version=tfv)
        got = {k: ds.resolved["zero_optimization"][k] for k in want}
        assert got == {**want, "stage3_prefetch_bucket_size": prefetch}, tfv
    # the replay of a ZeRO-3 "auto" block lands on the same prefetch bucket and persistence threshold
    arch = ModelArch(name="t", model_type="llama", hidden_size=4096, num_layers=2, num_heads=32, num_kv_heads=32,
                     intermediate_size=11008, vocab_size=32000)
    layout = zerotrace.layout_from_arch(arch, 3, 8, 2, full=True)
    assert (layout.reduce_bucket, layout.prefetch_bucket, layout.persistence) == tuple(want.values())
    root = Path(__file__).resolve().parent.parent / "finetune_doctor"
    square = re.compile(r"0\.9\s*\*\s*([\w.]+)\s*\*\s*\1\b")   # 0.9 * h * h, the prefetch formula
    restated = [str(p.relative_to(root)) for p in sorted(root.rglob("*.py"))
                if p.name != "dsauto.py" and square.search(p.read_text(encoding="utf-8"))]
    assert restated == []


# Called by name from outside Python's call syntax: ast.NodeVisitor's visit_<Node> dispatch, pickle's find_class.
_DISPATCHED = frozenset({"visit_BinOp", "visit_Compare", "find_class"})
# Left for the engineer of the NPU memory terms (analyzers/memory/npu.py; issue #23 lane): torch_npu's
# expandable-segments switch, written beside the HCCL terms and not wired into the reserve yet.
_DEAD_ELSEWHERE = frozenset({"expandable_on_npu"})


def test_no_function_that_nothing_names():
    """Issue #22 counted 10 functions nothing calls; session 9 deleted 9 and byname.candidates_text followed. A
    project function (module level or method, undecorated) whose name appears nowhere else in the package, the
    tests, the benchmarks, the scripts or the rule files is dead code. Words in comments count as a use, so this
    can miss a dead function but never flags a live one."""
    import ast
    import collections
    import re

    root = Path(__file__).resolve().parent.parent
    words: collections.Counter = collections.Counter()
    for folder, pattern in (("finetune_doctor", "*.py"), ("tests", "*.py"), ("benchmarks", "*.py"),
                            ("scripts", "*.py"), ("rules", "*.yaml")):
        for path in (root / folder).rglob(pattern):
            if path.resolve() != Path(__file__).resolve():   # the lists above are not a use
                words.update(re.findall(r"\w+", path.read_text(encoding="utf-8", errors="replace")))
    dead = set()
    for path in sorted((root / "finetune_doctor").rglob("*.py")):
        for node in pkgast.tree(path).body:
            funcs = [node] if isinstance(node, ast.FunctionDef) else \
                [m for m in node.body if isinstance(m, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
            dead |= {f.name for f in funcs if not f.name.startswith("__") and not f.decorator_list
                     and words[f.name] <= 1}
    assert dead - _DISPATCHED <= _DEAD_ELSEWHERE, sorted(dead - _DISPATCHED - _DEAD_ELSEWHERE)


@pytest.mark.parametrize("value, v0, v1", [("1", True, True), ("TRUE", True, True), ("y", True, True),
                                          ("yes", False, True), ("on", False, True), ("t", False, True),
                                          (" 1", False, False), ("0", False, False), ("", False, False)])
def test_lfs_env_switch_is_read_by_one_function(value, v0, v1):
    """LF's ``is_env_enabled`` was written seven times; one copy (DISABLE_VERSION_CHECK) stripped the value, which LF
    does not (extras/misc.py:258-260). Every reader of an LF switch now answers as readers/lfenv.py does, v1's
    ALLOW_EXTRA_KEYS with v1's wider set (v1/utils/env.py:28-30)."""
    import re

    from finetune_doctor.facts.stackrange import disabled
    from finetune_doctor.readers import lfenv
    from finetune_doctor.readers.config.accelerate import LaunchCommand
    from finetune_doctor.readers.config.keyschema import extra_args_allowed
    from finetune_doctor.readers.config.lfkind import is_v1
    from finetune_doctor.readers.config.lfv1 import extra_keys_allowed

    assert lfenv.env_enabled("V", {"V": value}) is v0 and lfenv.env_enabled("V", {"V": value}, v1=True) is v1
    assert env_enabled("USE_MODELSCOPE_HUB", {"USE_MODELSCOPE_HUB": value}) is v0
    assert extra_args_allowed({"ALLOW_EXTRA_ARGS": value}) is v0 and disabled({"DISABLE_VERSION_CHECK": value}) is v0
    assert extra_keys_allowed({"ALLOW_EXTRA_KEYS": value}) is v1
    assert is_v1({"model": "m"}, {"USE_V1": value}) is v0
    launch = LaunchCommand(launcher="llamafactory-cli", env={"FORCE_TORCHRUN": value}, options={}, script="train",
                           text="llamafactory-cli train")
    assert launch.env_flag("FORCE_TORCHRUN") is v0
    # no other module spells the true values (analyzers/memory/launchenv.py: the memory-terms lane, left)
    root = Path(__file__).resolve().parent.parent / "finetune_doctor"
    spelled = re.compile(r"lower\(\)\s+in\s+[(\[{][^)\]}]*[\"']y[\"']")
    copies = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if spelled.search(p.read_text("utf-8")))
    assert set(copies) <= {"readers/lfenv.py", "analyzers/memory/launchenv.py"}


def test_quant_holds_value_types_and_run_resolves():
    """quant.py mixed the checkpoint's value type with LLaMA-Factory's treatment of it (issue #22): the treatment
    (which formats LF dequantizes, what a quantized model may train with) is run/quantization.py's, beside the
    resolution of the YAML's quantization keys; quant.py defines no function that names LLaMA-Factory's choices."""
    from finetune_doctor import quant
    from finetune_doctor.run import quantization

    spec = quant.parse_quantization_config({"quant_method": "fp8", "weight_block_size": [128, 128]})
    t = quantization.lf_treatment(spec)
    assert (t.dequantized, t.lora_only, t.zero3_ok) == (True, False, True)
    awq = quantization.lf_treatment(quant.parse_quantization_config({"quant_method": "awq", "bits": 4,
                                                                      "group_size": 128}))
    assert (awq.dequantized, awq.lora_only, awq.zero3_ok, awq.dora_ok) == (False, True, False, False)
    assert not hasattr(quant, "lf_treatment") and not hasattr(quant, "LF_DEQUANTIZED")


def test_options_take_each_flag_by_its_field(tmp_path):
    """Options.from_cli took a parameter per flag (22, issue #22): it now takes the flags by field name, and each
    field is filled by one declared route (flag, flag over the project file, or derived), so a field added to
    Options without a route fails here instead of being silently never read."""
    import dataclasses

    from finetune_doctor.settings import FROM_CLI_ONLY, FROM_PROJECT, Options

    derived = {"command", "paths", "format", "output", "select", "ignore", "fail_on", "rules_dirs",
               "per_file_ignores", "project_file", "offline", "strict"}
    routes = derived | set(FROM_CLI_ONLY) | {f for f, _key in FROM_PROJECT}
    assert routes == {f.name for f in dataclasses.fields(Options)} and not set(FROM_CLI_ONLY) & derived
    (tmp_path / ".finetune-doctor.toml").write_text('gpu = "A100-80GB"\ntorch = "2.4.0"\nrules = ["mine"]\n'
                                                    'ignore = ["FD001"]\nstrict = true\n')
    cfg = str(tmp_path / "train.yaml")
    o = Options.from_cli(command="check", paths=[cfg], fmt="json", select="FD101, FD102", ignore="FD002",
                         rules_dirs=("cli",), torch_version="2.6.0", env_file="env.txt", no_data=True)
    assert (o.gpu, o.torch_version, o.format, o.select, o.ignore, o.rules_dirs, o.strict, o.env_file) == (
        "A100-80GB", "2.6.0", "json", ("FD101", "FD102"), ("FD002", "FD001"), ("cli", str(tmp_path / "mine")), True,
        "env.txt")
    assert Options.from_cli(command="check", paths=[cfg], gpu="H100").gpu == "H100"


def test_every_command_starts_its_facts_from_the_skeleton():
    """`doctor data` judged a hand-built ``{"cfg": ..., "data": ...}`` (issue #22: one facts skeleton): no pipeline
    module spells a facts dict; each starts from facts.skeleton, which holds every config namespace."""
    import ast

    root = Path(__file__).resolve().parent.parent / "finetune_doctor" / "pipeline"
    spelled = []
    for path in sorted(root.glob("*.py")):
        for node in _nodes(path):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "cfg" for k in node.keys):
                spelled.append(f"{path.name}:{node.lineno}")
    assert spelled == []
