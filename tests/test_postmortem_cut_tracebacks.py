"""A traceback cut before its exception line inside LLaMA-Factory's start-up dependency check (issue #25, dev kind
of lf5751 / lf7920: a cut traceback): the frames alone establish a package outside the release's range
(analyzers/postmortem/cutcause.py).

Fixtures: fixtures/postmortem/cut_tracebacks/ — Python 3.11 traceback frames of `llamafactory-cli` as each layout
prints them: LLaMA-Factory main (source checkout: cli.py:24 ``launcher.launch()``, launcher.py:155, train/tuner.py:34,
hparams/__init__.py:21, hparams/parser.py:49 ``check_dependencies()``, extras/misc.py:97 and :92, transformers
utils/versions.py:111 ``_compare_versions``), LLaMA-Factory 0.9.0 installed from PyPI (cli.py:21, launcher.py:15,
train/tuner.py:25, hparams/__init__.py:20, hparams/parser.py:45 and :24) with its ``llamafactory-cli env`` block
(extras/env.py:34-57 keys, printed as "- key: value").
"""

from __future__ import annotations

import os
import shutil

from pmhelp import diagnose_dir

from finetune_doctor.analyzers.postmortem.cutcause import in_dependency_check

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem",
                   "cut_tracebacks")


def first(tmp_path, name: str, text: str | None = None):
    d = tmp_path / "run"
    d.mkdir()
    if text is None:
        shutil.copy(os.path.join(FIX, name), d / "train.log")
    else:
        (d / "train.log").write_text(text, encoding="utf-8")
    return diagnose_dir(str(d)).findings[0]


def test_a_cut_deep_in_require_version_names_the_requirement_the_paste_kept(tmp_path):
    f = first(tmp_path, "lf_main_require_version_cut.log")
    assert f.name == "run-crashed"
    assert "require_version (versions.py, transformers)" in f.message
    assert "start-up dependency check" in f.message and "here transformers (the requirement line" in f.message
    assert "DISABLE_VERSION_CHECK=1" in f.message and "the log was cut before the exception line" in f.message


def test_a_call_cut_mid_word_with_an_env_block_names_the_package_outside_the_range(tmp_path):
    f = first(tmp_path, "lf090_env_then_cut.log")
    assert f.name == "run-crashed" and "at `check_depend`" in f.message
    # LF 0.9.0 extras/misc.py:84 pins accelerate>=0.30.1,<=0.33.0; the env block says 0.34.2 (line 7)
    assert "here accelerate 0.34.2 (read at " in f.message and "train.log:7;" in f.message
    assert "LLaMA-Factory 0.9.0 requires accelerate>=0.30.1,<=0.33.0, llamafactory/extras/misc.py:84" in f.message
    assert "transformers 4.45.0" not in f.message     # in range (<=4.45.0): not blamed


def test_without_versions_the_packages_the_check_covers_are_listed(tmp_path):
    log = open(os.path.join(FIX, "lf090_env_then_cut.log"), encoding="utf-8").read().split("\n\n", 1)[1]
    f = first(tmp_path, "", log)
    assert "one of transformers, datasets, accelerate, peft, trl, the packages it checks" in f.message


def test_another_cut_in_the_parser_module_is_not_the_check(tmp_path):
    f = first(tmp_path, "lf090_parser_import_cut.log")
    assert f.name == "run-crashed" and "at `import transformers`" in f.message
    assert "dependency check" not in f.message


def test_the_cut_call_must_be_a_real_prefix_of_the_call():
    lf = (("llamafactory", "<module>", "parser.py"),)
    frames = ("<module> (parser.py)",)
    assert in_dependency_check(frames + ("check_dep",), lf)
    assert in_dependency_check(frames + ("check_dependencies()",), lf)
    assert not in_dependency_check(frames + ("chec",), lf)            # too short to tell from any name
    assert not in_dependency_check(frames + ("check_version(",), lf)  # not the call parser.py makes
    assert not in_dependency_check(frames + ("check_dep",), ())       # a parser.py of some other project
