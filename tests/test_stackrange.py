"""LLaMA-Factory's start-up package ranges (facts/stackrange.py, catalog/lf_stack_ranges.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from finetune_doctor.facts import stackrange
from finetune_doctor.readers.config.lfrelease import choose, load as load_releases

ROOT = Path(__file__).resolve().parent.parent
WHEELS = Path("/tmp/lfwheels")


@pytest.mark.parametrize(("version", "spec", "want"), [
    ("5.2.0", "transformers>=4.51.0,<=4.57.1", False),      # trial 4 case 02: LF 0.9.4
    ("4.57.1", "transformers>=4.51.0,<=4.57.1", True),      # the upper bound is inclusive
    ("4.51", "transformers>=4.51.0,<=4.57.1", True),        # PEP 440: 4.51 == 4.51.0
    ("4.46.1", "transformers>=4.41.2,<=4.49.0,!=4.46.0,!=4.46.1", False),   # 0.9.2's excluded releases
    ("4.46.4", "transformers>=4.41.2,<=4.49.0,!=4.46.0,!=4.46.1", True),
    ("0.18.1", "peft>=0.14.0,<=0.17.1", False),
    ("5.2.0", "transformers>=4.41.2", True),                # 0.8.x set no upper bound
    ("4.57.1.dev0", "transformers>=4.51.0,<=4.57.1", None),  # a dev build of the bound: packaging orders it
    ("4.58.0.dev0", "transformers>=4.51.0,<=4.57.1", False),  # above the bound whatever its suffix
    ("2.5.0+cu121", "torch>=2.5.0", None),                  # a local build of the bound itself
    ("garbage", "peft>=0.14.0", None),
])
def test_satisfies(version, spec, want):
    assert stackrange.satisfies(version, spec) is want


def test_catalogue_covers_every_catalogued_release_with_five_packages():
    cat = stackrange.load()
    assert list(cat["releases"]) == list(load_releases()["versions"])
    for v, rel in cat["releases"].items():
        assert [r["package"] for r in rel["requires"]] == ["transformers", "datasets", "accelerate", "peft", "trl"], v
        assert all(r["skippable"] and r["where"].startswith("llamafactory/extras/misc.py:") for r in rel["requires"])
    r094 = {r["package"]: r for r in cat["releases"]["0.9.4"]["requires"]}
    assert r094["transformers"] == {"package": "transformers", "spec": "transformers>=4.51.0,<=4.57.1",
                                    "where": "llamafactory/extras/misc.py:97", "skippable": True}
    assert r094["peft"]["spec"] == "peft>=0.14.0,<=0.17.1"


@pytest.mark.skipif(not WHEELS.is_dir(), reason="the LLaMA-Factory wheels are not on this machine")
def test_catalogue_is_what_the_script_reads_from_the_wheels(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts/build_lf_stack_ranges.py"), str(WHEELS),
                          str(tmp_path / "no-main")], capture_output=True, text=True, check=True).stdout
    fresh = json.loads(out)["releases"]
    committed = stackrange.load()["releases"]
    assert fresh == {v: r for v, r in committed.items() if v in fresh}
    assert len(fresh) == 10


def _refuse(lf: str, versions: dict[str, str], *envs: dict[str, str]) -> list[dict]:
    return stackrange.refusals(choose(lf, "--llamafactory"), {p: (v, "--x") for p, v in versions.items()}, *envs)


def test_one_release_refuses_with_its_requirement_and_message():
    (got,) = _refuse("0.9.4", {"transformers": "5.2.0", "peft": "0.17.1", "trl": "0.24.0"})
    assert (got["package"], got["certain"], got["releases"], got["where"]) == (
        "transformers", True, "0.9.4", "llamafactory/extras/misc.py:97")
    assert got["message"] == ("transformers>=4.51.0,<=4.57.1 is required for a normal functioning of this module, "
                              "but found transformers==5.2.0.")


def test_disable_version_check_silences():
    assert _refuse("0.9.4", {"transformers": "5.2.0"}, {"DISABLE_VERSION_CHECK": "1"}) == []
    assert _refuse("0.9.4", {"transformers": "5.2.0"}, {}, {"DISABLE_VERSION_CHECK": "TRUE"}) == []
    assert len(_refuse("0.9.4", {"transformers": "5.2.0"}, {"DISABLE_VERSION_CHECK": "0"})) == 1


def test_a_range_warns_only_when_every_release_refuses():
    # 0.9.5.dev0 stands for 0.9.4 and 0.9.5: 4.50.0 is below both floors, 4.56.0 inside 0.9.5's range
    (got,) = _refuse("0.9.5.dev0", {"transformers": "4.50.0"})
    assert (got["certain"], got["releases"]) == (False, "0.9.4-0.9.5")
    assert got["specs_text"] == "transformers>=4.51.0,<=4.57.1; transformers>=4.55.0,<=5.6.0"
    assert _refuse("0.9.5.dev0", {"transformers": "4.56.0"}) == []
    # newer than the catalogue, judged as main: never an error
    (got,) = _refuse("0.9.7", {"transformers": "5.6.0"})
    assert got["certain"] is False


def test_a_release_before_the_catalogue_is_not_judged():
    assert _refuse("0.7.1", {"transformers": "4.30.0"}) == []


def test_lint_does_not_import_heavy_packages():
    code = ("import sys, finetune_doctor.facts.stackrange as s; s.load(); "
            "print(any(m in sys.modules for m in ('torch', 'transformers', 'deepspeed', 'packaging')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout.strip()
    assert out == "False"


def test_the_release_installed_here_against_another_machines_version_is_a_warning():
    here = choose("0.9.4", "installed here")
    (flag,) = stackrange.refusals(here, {"transformers": ("5.2.0", "--transformers")})
    (local,) = stackrange.refusals(here, {"transformers": ("5.2.0", "installed here")})
    assert (flag["certain"], local["certain"]) == (False, True)


def test_a_refusal_only_one_bounding_release_makes_is_kept_as_unverified():
    # trial 11 (LlamaFactory#6884): 0.9.2.dev0 stands for 0.9.1 (transformers<=4.46.1) and 0.9.2 (<=4.49.0); a
    # transformers only the older bound refuses was dropped, as if no release refused it
    (low,) = _refuse("0.9.2.dev0", {"transformers": "4.49.0"})
    assert (low["scope"], low["certain"], low["refused_by"], low["given"]) == ("some", False, "0.9.1", "0.9.2.dev0")
    assert low["spec"] == "transformers>=4.41.2,<=4.46.1"
    assert low["admitted_by"].startswith("0.9.2 (transformers>=4.41.2,<=4.49.0,")
    # the newer bound refusing it (0.9.5 raised the floor to 4.55.0; 0.9.4 admits 4.52.4)
    (high,) = _refuse("0.9.5.dev0", {"transformers": "4.52.4"})
    assert (high["scope"], high["refused_by"], high["spec"]) == ("some", "0.9.5", "transformers>=4.55.0,<=5.6.0")
    # a development build of the bound itself cannot be decided by 0.9.2 (4.49.0.dev0 <= 4.49.0 is packaging's, not
    # a guess), while 0.9.1 refuses it outright: still unverified, not silent
    (dev,) = _refuse("0.9.2.dev0", {"transformers": "4.49.0.dev0"})
    assert (dev["scope"], dev["refused_by"]) == ("some", "0.9.1")
    # every bound refusing it stays the range rule's
    (both,) = _refuse("0.9.5.dev0", {"transformers": "4.50.0"})
    assert (both["scope"], both["refused_by"]) == ("all", "0.9.4, 0.9.5")
    # a version with no release of its own is not narrowed from all releases: the unknown release stays silent
    assert stackrange.refusals(choose(None), {"transformers": ("4.49.0", "--x")}) == []
