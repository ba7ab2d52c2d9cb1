"""One reader of release strings (issue #22, "one home per fact"): numbers.parse_version, with the suffix and the
number of parts as parameters, answers for facts/stackrange.py, readers/config/lfrelease.py, probes/allocconf.py,
readers/deepspeed/dsschema.py and run/stack.py. The strings are the shapes pip, ``llamafactory-cli env`` and
``torch.__version__`` print (a git install of LF prints ``0.9.2.dev0`` between the 0.9.1 and 0.9.2 tags; CUDA
wheels of torch print ``2.5.1+cu121``; transformers' release candidates ``4.46.0rc1``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from finetune_doctor.facts import stackrange
from finetune_doctor.numbers import is_prerelease, parse_version, version_key
from finetune_doctor.probes import allocconf
from finetune_doctor.readers.config import lfrelease
from finetune_doctor.readers.deepspeed import dsschema
from finetune_doctor.run import stack


@pytest.mark.parametrize(("text", "numbers", "rest", "pre"), [
    ("0.9.2.dev0", (0, 9, 2), ".dev0", True),
    ("4.46.0rc1", (4, 46, 0), "rc1", True),
    ("4.43.4+cu121", (4, 43, 4), "+cu121", False),
    ("v0.9.1", (0, 9, 1), "", False),
    ("0.9.5.post1", (0, 9, 5), ".post1", False),
    ("1.2.3.4", (1, 2, 3, 4), "", False),
])
def test_the_reader_splits_numbers_from_the_suffix(text, numbers, rest, pre):
    assert parse_version(text, parts=None, suffix=True) == (numbers, rest)
    assert parse_version(text) == numbers[:3]
    assert is_prerelease(rest) is pre


@pytest.mark.parametrize("text", [None, "", "garbage", "x1.2", "9" * 200, 42])
def test_unreadable_is_none_for_every_shape(text):
    assert parse_version(text) is None
    assert parse_version(text, parts=None, suffix=True) is None
    assert version_key(text) is None


def test_order_dev_before_release_before_post_and_local_as_its_release():
    order = ["0.9.1", "0.9.2.dev0", "0.9.2", "0.9.2.post1", "0.9.3rc1", "0.9.3"]
    assert sorted(reversed(order), key=version_key) == order
    assert version_key("4.51") == version_key("4.51.0")              # PEP 440 pads with zeros
    assert version_key("4.43.4+cu121") == version_key("4.43.4")      # pip's ==4.43.4 accepts the local build
    assert version_key("4.46.0rc1") < version_key("4.46.0") < version_key("4.46.1")


def test_every_call_site_gives_the_shared_answer():
    # stackrange: the numbers and whether a suffix makes the answer hinge on packaging's ordering
    assert stackrange._parts("0.9.2.dev0") == ((0, 9, 2), True)
    assert stackrange._parts("4.43.4+cu121") == ((4, 43, 4), True)
    assert stackrange._parts("v0.9.1") == ((0, 9, 1), False)
    assert stackrange.satisfies("4.46.0rc1", "transformers>=4.41.2,<=4.46.0") is None   # rc1 of the bound
    assert stackrange.satisfies("4.46.0rc1", "transformers<=4.45.2") is False
    # lfrelease: major.minor.patch, and the dev build judged between its neighbours
    assert lfrelease._vtuple("v0.9.1") == (0, 9, 1)
    assert lfrelease._vtuple("0.9") == (0, 9, 0)
    assert lfrelease._vtuple("1") is None   # a bare major is not an LF version: judged for every release
    assert lfrelease._prerelease("0.9.2.dev0") and lfrelease._prerelease("0.9.3rc1")
    assert not lfrelease._prerelease("0.9.5.post1") and not lfrelease._prerelease("0.9.2")
    assert lfrelease.choose("0.9.2.dev0").versions == ("0.9.1", "0.9.2")
    assert lfrelease.choose("v0.9.1").versions == ("0.9.1",)
    # allocconf: major.minor or nothing; dsschema: every number; run/stack: the first three
    assert allocconf._version_tuple("2.5.1+cu121") == (2, 5)
    assert allocconf._version_tuple("2") is None
    assert dsschema.parse_version("0.16.9+cu121") == (0, 16, 9)
    assert dsschema.parse_version("5.0.0.dev0") == (5, 0, 0)
    assert stack.parse_version("4.43.4+cu121") == (4, 43, 4)


def test_the_other_readers_of_versions_read_through_it():
    from types import SimpleNamespace

    from finetune_doctor.analyzers.config.launch import _Cfg
    from finetune_doctor.analyzers.memory import launchenv
    from finetune_doctor.facts.kinds import data_parallel_open

    # PYTORCH_ALLOC_CONF is read first from torch 2.8 on; an unreadable version is taken as new
    assert launchenv._newer("2.8.0") and not launchenv._newer("2.7.1+cu118") and launchenv._newer(None)
    assert launchenv._newer("2")
    # the training machine's transformers as (major, minor)
    assert _Cfg({}, None, transformers="4.46.0rc1").tf == (4, 46) and _Cfg({}, None, transformers="4").tf is None
    # DataParallel stays open for an LF release before 0.8.0 (the torchrun launch), read as major.minor[.patch]
    asm = SimpleNamespace(nnodes=1, hw=None, doc=SimpleNamespace(values={}),
                          release=SimpleNamespace(known=True, source="--llamafactory", given="v0.7.1"))
    assert data_parallel_open(asm, "ddp", False)
    asm.release.given = "0.8.0.dev0"   # compared by its numbers, as before: 0.8.0
    assert not data_parallel_open(asm, "ddp", False)


def test_the_lint_path_does_not_import_packaging():
    code = ("import sys; import finetune_doctor.numbers, finetune_doctor.facts.stackrange, "
            "finetune_doctor.readers.config.lfrelease; print('packaging' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
