"""Which project modules `doctor lint` of one plain training config imports (issue #22: the start-up of a pre-commit
hook is mostly imports). Modules a clean config without ``deepspeed:`` never uses are imported where they are used:
the DeepSpeed schema, problem and JSON readers, the accelerate reader, the data and memory namespaces, the fixers,
the text reporter's source index, the weights' dtype reader, the chat-template registry. A config that names a DeepSpeed JSON still imports the
DeepSpeed readers and gets its ``ds`` facts, and the facts.ds declarations still load for the rule loader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples" / "train_lora"
PLAIN = EXAMPLES / "qwen3_lora_sft.yaml"          # no deepspeed:, no accelerate config beside it
WITH_DS = EXAMPLES / "qwen3_lora_sft_ds3.yaml"    # deepspeed: examples/deepspeed/ds_z3_config.json

# imported by a lint of PLAIN on main before this change (python -X importtime), not used by it
NOT_ON_A_PLAIN_LINT = (
    "finetune_doctor.readers.deepspeed.dsschema", "finetune_doctor.readers.deepspeed.dsproblem",
    "finetune_doctor.readers.deepspeed.dsjson", "finetune_doctor.readers.config.accelerate",
    "finetune_doctor.facts.data", "finetune_doctor.fixes", "finetune_doctor.reporters._source",
    "finetune_doctor.readers.model.weights", "finetune_doctor.facts.mem", "finetune_doctor.engine.planners",
    "finetune_doctor.analyzers.data.templates",   # the chat-template registry: qwen3 is in the release's table
)
HEAVY = ("torch", "transformers", "deepspeed")

CODE = """
import io, json, sys
from finetune_doctor import lintcli
out = sys.stdout
sys.stdout = io.StringIO()
try:
    lintcli.main(sys.argv[1:])
except SystemExit as done:
    code = done.code
text = sys.stdout.getvalue()
sys.stdout = out
print(json.dumps({"code": code, "text": text, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    """One warm cache folder: the first lint in it parses the rule files (the loader's name check reads every
    fact namespace, facts.ds's declarations included), as a first run on a machine does; the pins are about
    every later run."""
    home = tmp_path_factory.mktemp("xdg")
    _lint(home, home, PLAIN)
    return home


def _lint(cwd, cache_home, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FINETUNE_DOCTOR_LINT_JOBS": "1", "XDG_CACHE_HOME": str(cache_home)}
    out = subprocess.run([sys.executable, "-c", CODE, *map(str, args)], env=env, capture_output=True, text=True,
                         check=True, cwd=cwd)
    return json.loads(out.stdout)


def test_a_plain_config_lint_leaves_the_unused_modules_unimported(tmp_path, cache_home):
    got = _lint(tmp_path, cache_home, PLAIN)
    assert got["code"] == 0 and "No findings." in got["text"]
    mods = set(got["modules"])
    assert [m for m in NOT_ON_A_PLAIN_LINT if m in mods] == []
    assert [m for m in HEAVY if m in mods] == []
    # the lint did run its path: the judge, the fact assembly, the run resolution and the text reporter
    assert {"finetune_doctor.engine.judge", "finetune_doctor.facts.config", "finetune_doctor.run.resolve",
            "finetune_doctor.reporters.text", "finetune_doctor.facts.ds"} <= mods


def test_a_deepspeed_config_still_reads_its_json(tmp_path, cache_home):
    got = _lint(tmp_path, cache_home, "--format", "json", WITH_DS)
    mods = set(got["modules"])
    assert {"finetune_doctor.readers.deepspeed.dsschema", "finetune_doctor.readers.deepspeed.dsproblem",
            "finetune_doctor.readers.deepspeed.dsjson"} <= mods
    report = json.loads(got["text"])
    assert report["inputs"]["deepspeed"].endswith("ds_z3_config.json")


def test_the_ds_declarations_load_on_first_use():
    code = ("import sys\nfrom finetune_doctor.facts import ds\n"
            "before = 'finetune_doctor.readers.deepspeed.dsproblem' in sys.modules\n"
            "ns = ds.NAMESPACE\n"
            "print(before, 'finetune_doctor.readers.deepspeed.dsproblem' in sys.modules, ns.name, "
            "'zero_optimization' in ns.fields, ds.DERIVED['problems'].items is ds.PROBLEM_ITEM, "
            "'check' in ds.PROBLEM_ITEM and bool(ds.PROBLEM_ITEM['check'].values))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "ds", "True", "True", "True"]
    with pytest.raises(AttributeError):
        import finetune_doctor.facts.ds as ds_mod

        ds_mod.NOT_A_DECLARATION


def test_an_accelerate_config_lint_imports_no_run_resolver_nor_model_readers(tmp_path, cache_home):
    # the launch checks need run/values.py only; the run package's names load on first use (run/__init__.py)
    acc = ROOT / "fixtures" / "llamafactory" / "examples" / "accelerate" / "fsdp2_config.yaml"
    got = _lint(tmp_path, cache_home, acc)
    mods = set(got["modules"])
    assert "finetune_doctor.run.values" in mods and "finetune_doctor.analyzers.config.launch" in mods
    assert [m for m in ("finetune_doctor.run.resolve", "finetune_doctor.run.model", "finetune_doctor.arch",
                        "finetune_doctor.readers.model.catalog", "finetune_doctor.readers.model.generic")
            if m in mods] == []
    from finetune_doctor.run import InvalidRunValue, Run, resolve_run   # the old import path still works

    assert resolve_run.__module__ == "finetune_doctor.run.resolve" and Run.__name__ == "Run"
    assert issubclass(InvalidRunValue, Exception)


def test_a_fix_shown_in_text_imports_no_ruamel(tmp_path, cache_home):
    # the text reporter types each fix's value (fixes/edit.py `_plain_ok` -> yamlcfg.type_scalar): ~11 ms of CPU
    # for importing ruamel.yaml when the YAML was read through libyaml, which holds no ruamel ScalarString
    galore = ROOT / "fixtures" / "llamafactory" / "examples" / "extras" / "galore" / "llama3_full_sft.yaml"
    got = _lint(tmp_path, cache_home, galore)
    assert "optim: (unset) → adamw_torch" in got["text"]
    assert [m for m in got["modules"] if m.startswith("ruamel")] == []


def test_type_scalar_keeps_a_quoted_ruamel_scalar_a_string():
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    from finetune_doctor.readers.config.yamlcfg import type_scalar

    assert type_scalar(DoubleQuotedScalarString("true")) == "true"
    assert type_scalar(DoubleQuotedScalarString("1e-4")) == "1e-4"
    assert type_scalar("true") is True and type_scalar("1e-4") == 1e-4
