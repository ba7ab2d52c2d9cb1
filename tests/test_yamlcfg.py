"""The YAML reader types values as LLaMA-Factory's OmegaConf loader does, with key positions, and its fast
libyaml path gives exactly what the ruamel path gives on every real config in the repository."""

import re
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.readers.config import yamlcfg, yamlnodes
from finetune_doctor.readers.deepspeed.dsjson import parse as _parse_json

ROOT = Path(__file__).resolve().parent.parent
YAMLS = sorted((ROOT / "fixtures").rglob("*.yaml"))
JSONS = sorted([*(ROOT / "fixtures" / "deepspeed").rglob("*.json"), *(ROOT / "fixtures" / "cases").rglob("*.json"),
                *(ROOT / "fixtures" / "llamafactory").rglob("*.json")])


def test_omegaconf_typing():
    text = ("a: on\nb: 1e-4\nc: 1_000\nd: \"5e-6\"\ne: ~\nf: 0x10\ng: 1.0e-5\nh: off\ni: 'yes'\nj: 3\n"
            "m: 1e5\nn: [q_proj, v_proj]\no:\n  p: 2\n")
    values, pos = yamlcfg.parse_yaml_text(text, "x.yaml")
    # OmegaConf: YAML 1.1 bools/ints (0x10 = 16) plus its float pattern (1e-4, 1e5 are floats); quoted stays str
    assert values == {"a": True, "b": 1e-4, "c": 1000, "d": "5e-6", "e": None, "f": 16, "g": 1e-5, "h": False,
                      "i": "yes", "j": 3, "m": 100000.0, "n": ["q_proj", "v_proj"], "o": {"p": 2}}
    assert isinstance(values["m"], float) and pos["o.p"] == (14, 3) and pos["n"] == (12, 1)


def test_duplicate_key_and_malformed_yaml_name_the_line():
    with pytest.raises(InputError) as e:
        yamlcfg.parse_yaml_text("a: 1\nb: 2\na: 3\n", "x.yaml")
    assert e.value.line == 3 and "duplicate" in e.value.message
    with pytest.raises(InputError) as e:
        yamlcfg.parse_yaml_text("a: 1\n  b: : 2\n", "x.yaml")
    assert e.value.line == 2


@pytest.mark.skipif(not yamlnodes.available(), reason="PyYAML without libyaml")
@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_fast_path_equals_ruamel_path(path):
    text = path.read_text(encoding="utf-8")
    if re.search(r"^(on|off|yes|no):", text, re.M | re.I):
        # a YAML 1.1 boolean as a top-level key (a GitHub workflow's `on:`): OmegaConf, like the fast path, reads a
        # boolean there and ruamel's YAML 1.2 a string; no LLaMA-Factory key is one
        pytest.skip("YAML 1.1 boolean key")
    try:
        slow = yamlcfg._parse_with_ruamel(text, str(path))
    except InputError:
        pytest.skip("not YAML ruamel reads")
    assert yamlcfg.parse_yaml_text(text, str(path)) == slow


def test_json_key_positions_match_the_text():
    checked = 0
    for path in JSONS:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        try:
            positions = _parse_json(text, str(path)).positions
        except InputError:      # the malformed fixtures (comments, trailing commas) have no positions
            continue
        for key, (line, col) in positions.items():
            assert lines[line - 1][col - 1:].startswith(f'"{key.rsplit(".", 1)[-1]}"'), (path, key)
            checked += 1
    assert checked > 100
