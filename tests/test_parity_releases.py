"""Launch parity against other LLaMA-Factory releases than the installed 0.9.5 (tests/test_parity_lf.py): main
(the snapshot, 0.9.6.dev0, on transformers 5.6.0) and 0.9.0 (the wheel with the transformers 4.45.0 / peft / trl /
accelerate / datasets it pins, installed by .ci/run with ``pip install --no-deps --target .lf-releases/0.9.0``).
The doctor is told ``--llamafactory VERSION --transformers <that stack's>``; the corpus is tests/test_parity_lf.py's
(LF's examples, users' cases, fixtures, mutations), judged by the release's own ``get_train_args`` in a child
process (tests/parity/release_oracle.py), so the installed 0.9.5 stays the oracle of tests/test_parity_lf.py.

Bars as for 0.9.5: recall of LF's rejections >= 99 %, and no error on a config LF accepts other than the
documented later failures (compare.LATER_FAILURES). The misses that test_parity_lf.py documents (KNOWN_MISSES)
are allowed here too, for the same reasons.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from shared_dirs import shared_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
SHARED = shared_dir("oracles", "llamafactory-main", "src")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(SHARED is None, reason="no ../shared/oracles/llamafactory-main (LF main's parser)"),
              pytest.mark.skipif(importlib.util.find_spec("omegaconf") is None
                                 or importlib.util.find_spec("transformers") is None,
                                 reason="LF's parser needs the test extra (omegaconf, transformers, ...)")]


RELEASES = {"main": ("oracle", "5.6.0"), "0.9.0": (".lf-releases/0.9.0", "4.45.0")}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """LF main's verdicts (0.9.0's are tests/test_parity_release_090.py's: one file per release, so that
    ``--dist loadfile`` runs the two corpora on two workers at once)."""
    return release_outcomes("main", tmp_path_factory)


def release_outcomes(version: str, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The parity outcomes of the corpus under release `version` (a key of RELEASES); skips when it is absent."""
    from parity.compare import judge_entry
    from parity.oracle_run import corpus_index, oracle_verdicts

    where, transformers = RELEASES[version]
    src = SHARED / "oracles" / "llamafactory-main" / "src" if where == "oracle" else ROOT / where
    if not (src / "llamafactory").is_dir():
        pytest.skip(f"LF {version} is not installed at {src} (.ci/run installs it)")
    index = corpus_index(tmp_path_factory)
    verdicts, why = oracle_verdicts(src, index, tmp_path_factory.mktemp(f"parity_{version}"))
    if verdicts is None:
        pytest.skip(f"LF {version}'s parser could not run here: {why}")
    outs = [judge_entry(e, v, lf_version=version, transformers=transformers) for e, v in zip(index, verdicts)]
    dump = os.environ.get("FD_PARITY_RELEASE_RESULTS")
    if dump:
        from dataclasses import asdict

        Path(f"{dump}.{version}.json").write_text(json.dumps([asdict(o) for o in outs], indent=1) + "\n",
                                                  encoding="utf-8")
    return SimpleNamespace(version=version, outs=outs)


# LF 0.9.0 runs on transformers 4.45, whose own checks and choices the key schema does not hold (it is built from
# transformers 4.57.6, 5.6.0 and 5.8.0), and its parser has checks 0.9.5 dropped (analyzers/config/launch.py replays
# 0.9.5's). Each pattern is one such difference; where the doctor reports errors there, they are other keys 0.9.0
# rejects as well (trust_remote_code before 0.9.2, a template 0.9.0 lacks), LF stopping at the first.
DIFFERENCES_090 = {
    "is not a valid OptimizerNames": "transformers 4.45's optimizer names",
    "is not a valid SchedulerType": "transformers 4.45's scheduler names",
    "is not a valid IntervalStrategy": "transformers 4.45's strategies (no 'best')",
    "warmup_steps must be of type int": "transformers 4.45 checks warmup_steps in __post_init__",
    "requires the saving steps to be a round multiple": "transformers 4.45's load_best_model_at_end step check",
    "'<' not supported between instances of 'NoneType'": "transformers 4.45 compares an empty warmup_ratio",
    "missing 1 required positional argument: 'output_dir'": "transformers < 4.49 needs output_dir; the doctor "
                                                           "reports it, after another key 0.9.0 rejects first",
    "Please specify dataset for evaluation": "a check of LF 0.9.0's parser that 0.9.5 dropped",
    "Please specify which `template` to use": "a check of LF 0.9.0's parser that 0.9.5 dropped",
}


def test_recall_of_the_release_rejections(outcomes: SimpleNamespace) -> None:
    from parity.compare import matrix
    from test_parity_lf import KNOWN_MISSES

    m = matrix(outcomes.outs)
    assert m["rejected"] >= 1000, m
    assert m["recall"] >= 0.99, m
    missed = {o.id: (o.outcome, o.lf_error) for o in outcomes.outs if o.outcome in ("missed", "misplaced")}
    differences = DIFFERENCES_090 if outcomes.version == "0.9.0" else {}
    unexplained = {k: v for k, v in missed.items()
                   if k not in KNOWN_MISSES and not any(p in (v[1] or "") for p in differences)}
    assert not unexplained, unexplained


def test_no_error_on_a_config_the_release_accepts(outcomes: SimpleNamespace) -> None:
    false = [(o.id, o.errors) for o in outcomes.outs if o.outcome == "false-error"]
    assert not false, false[:10]
