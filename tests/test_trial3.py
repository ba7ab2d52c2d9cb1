"""What a new user's third trial found (issue #21, /tmp/briefs8/trial3_report.md), each fixed as a kind.

1. A development build (``0.9.2.dev0``, what ``llamafactory-cli env`` prints for a git install) is judged as a version
   between the release before it and the release it leads to: a key only one of them declares is a warning, never
   silence (the 0.9.2 keys LF stopped on in hiyouga/LlamaFactory#7677) nor an error; with no version at all, a key
   only some releases declare is the README's unverified-config-problem warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config.keyschema import check_keys
from finetune_doctor.readers.config.lfrelease import choose, version_in_use
from finetune_doctor.readers.config.yamlcfg import load_config

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial3"
STOPPED_ON = {"freeze_language_model", "freeze_multi_modal_projector", "image_max_pixels", "video_max_pixels"}


def _run(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(main, [*args, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.parametrize(("given", "versions"), [
    ("0.9.2.dev0", ("0.9.1", "0.9.2")), ("0.9.1.dev0", ("0.9.0", "0.9.1")), ("0.9.3rc1", ("0.9.2", "0.9.3")),
    ("0.9.2", ("0.9.2",)), ("0.9.5.post1", ("0.9.5",)), ("0.9.6.dev0", ("0.9.6.dev0",)),
    ("0.9.6.dev3", ("0.9.6.dev0",)), ("0.8.4.dev0", ("0.8.3", "0.9.0"))])
def test_a_development_build_is_judged_between_releases(given, versions):
    rel = choose(given)
    assert rel.known and rel.versions == versions


def test_dev_build_keys_of_the_next_release_are_warnings_not_silence():
    doc = FX / "qwen2vl_dev_build" / "config.yaml"
    code, rep = _run("lint", str(doc), "--llamafactory", "0.9.2.dev0")
    warned = {f["location"]["key"] for f in rep["findings"] if f["name"] == "unverified-config-problem"}
    assert STOPPED_ON <= warned
    assert not [f for f in rep["findings"] if f["severity"] == "error"] and code == 0
    msg = next(f["message"] for f in rep["findings"] if f["location"]["key"] == "image_max_pixels")
    assert "LLaMA-Factory 0.9.1 (0.9.2.dev0 is a build between 0.9.1 and 0.9.2" in msg
    # the finished release has them all: nothing to say
    _, rep = _run("lint", str(doc), "--llamafactory", "0.9.2")
    assert not [f for f in rep["findings"] if f["location"].get("key") in STOPPED_ON]


def test_dev_build_read_from_the_env_file():
    d = FX / "qwen2vl_dev_build"
    _, rep = _run("lint", str(d / "config.yaml"), "--env", str(d / "env.txt"))
    warned = {f["location"]["key"] for f in rep["findings"] if f["name"] == "unverified-config-problem"}
    assert STOPPED_ON <= warned


def test_no_version_warns_on_keys_only_some_releases_declare():
    values = dict(load_config(str(FX / "qwen2vl_dev_build" / "config.yaml")).values)
    rel = version_in_use(None, None, use_installed=False)
    probs = {p.key: p for p in check_keys(values, env={}, release=rel, transformers_version="4.46.1")}
    assert STOPPED_ON <= set(probs)
    assert probs["image_max_pixels"].condition == "LLaMA-Factory 0.8.0-0.9.1"
    assert probs["image_max_pixels"].fate == "stops"
    # keys every release declares stay silent
    assert not {"stage", "cutoff_len", "template", "dataset"} & set(probs)
