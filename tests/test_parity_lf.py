"""Launch parity: `doctor lint` against LLaMA-Factory 0.9.5's own argument parser on the corpus of
scripts/gen_parity_corpus.py (LF's examples, the users' cases, the fixtures and >= 3,000 generated mutations).

The oracle (tests/parity/oracle.py) is LF's ``get_train_args`` answering as a torchrun launch on bf16 GPUs, asked
about the whole corpus in one child process (tests/parity/oracle_run.py); the comparison (tests/parity/compare.py)
classifies each config. The test holds the issue-14 bar:

* recall of LF's rejections >= 99 %: an error finding at a right key and line;
* no error finding on a config LF accepts, except the documented later failures (compare.LATER_FAILURES);
* every config LF rejects and the doctor misses is one of KNOWN_MISSES, with its reason (benchmarks/results/
  parity.md lists them; scripts/parity_report.py regenerates it).

It needs the test extra's llamafactory (README, Development); without it the test is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("llamafactory") is None,
                                 reason="llamafactory not installed (pip install --no-deps llamafactory==0.9.5)")]

# configs LF rejects that the doctor does not flag, and why (each id is a corpus entry; a fixed one must go)
_FRAGMENT = ("a pasted fragment (stage and a few keys, no model_name_or_path): `doctor lint` recognises a YAML as "
             "a LLaMA-Factory config by its keys (pipeline/lint.py classify: model_name_or_path or two LF keys) "
             "and skips it; `doctor check` reports missing-required-key on it")
_TRAINING_MACHINE_PATH = ("an absolute DeepSpeed path of the training machine (/app/examples/deepspeed/...) that "
                          "this machine lacks: LF here fails to open it, while the doctor reads LLaMA-Factory's stock "
                          "copy of the file it names and says so (facts/config.py _deepspeed), as it would run there")
KNOWN_MISSES = {
    "fixture/fixtures/real_reports/08-qwen35-122b-a10b-lora-qv-z3-8xa100/config.yaml": _TRAINING_MACHINE_PATH,
    "fixture/fixtures/real_reports/09-qwen35-122b-a10b-lora-all-z3-8xa100/config.yaml": _TRAINING_MACHINE_PATH,
    "case/067": _FRAGMENT,
    "fixture/fixtures/postmortem/case_067/config.yaml": _FRAGMENT,
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list:
    from parity.compare import judge_entry
    from parity.oracle_run import corpus_index, oracle_verdicts

    index = corpus_index(tmp_path_factory)
    # the installed release answers in a child process as the other releases do (tests/test_parity_releases.py)
    src = Path(importlib.util.find_spec("llamafactory").submodule_search_locations[0]).parent
    verdicts, why = oracle_verdicts(src, index, tmp_path_factory.mktemp("parity_installed"))
    assert verdicts is not None, f"the installed LF's parser did not run: {why}"
    outs = [judge_entry(e, v) for e, v in zip(index, verdicts)]
    dump = os.environ.get("FD_PARITY_RESULTS")
    if dump:   # scripts/parity_report.py reads this
        Path(dump).write_text(json.dumps([asdict(o) for o in outs], indent=1) + "\n", encoding="utf-8")
    return outs


def test_corpus_holds_every_source(outcomes: list) -> None:
    by = Counter(o.source for o in outcomes)
    assert by["lf-example"] >= 20 and by["case"] >= 40 and by["fixture"] >= 30, by
    assert sum(n for s, n in by.items() if s.startswith("mutation:")) >= 3000, by
    for fam in ("type", "choice", "pair", "stage", "required", "deepspeed", "check", "static"):
        assert by[f"mutation:{fam}"] > 0, fam


def test_recall_of_lf_rejections(outcomes: list) -> None:
    from parity.compare import matrix

    m = matrix(outcomes)
    assert m["rejected"] >= 1000, m   # the corpus exercises LF's checks, not only configs that start
    assert m["recall"] >= 0.99, m
    missed = {o.id: (o.outcome, o.lf_error) for o in outcomes if o.outcome in ("missed", "misplaced")}
    unexplained = {k: v for k, v in missed.items() if k not in KNOWN_MISSES}
    assert not unexplained, unexplained
    stale = [k for k in KNOWN_MISSES if k not in missed]
    assert not stale, f"fixed, remove from KNOWN_MISSES: {stale}"


def test_no_error_on_a_config_lf_accepts(outcomes: list) -> None:
    false = [(o.id, o.errors) for o in outcomes if o.outcome == "false-error"]
    assert not false, false[:10]


def test_later_failures_name_the_later_failure(outcomes: list) -> None:
    """An error on an accepted config is a value LF takes unchecked: its message says what happens later."""
    words = ("fails", "raise", "silently", "nothing", "never", "rarely what was meant", "makes no sense", "stops", "diverges",
             "Unknown attention type", "DeepSpeed", "HF")
    for o in outcomes:
        if o.outcome != "later":
            continue
        for code, key, _line, message in o.errors:
            assert any(w in message for w in words), (o.id, code, key, message)


def test_the_issue_examples_are_caught(outcomes: list) -> None:
    """The known misses of issue 14, each a generated corpus entry: LF rejects them and the doctor now reports
    an error at the right key."""
    want = ["check/sft_lora/fp16+bf16", "check/sft_lora/no_model", "check/sft_full/pure_bf16_z3",
            "check/sft_full/unsloth_z3", "check/sft_lora/predict_while_training", "check/rm/train_on_prompt_not_sft",
            "check/ppo/ppo_no_reward", "check/sft_lora/best_not_multiple", "check/sft_lora/eval_strategy_no_data",
            "check/sft_lora/logging_steps=0", "check/sft_full/adapter_full", "check/sft_qlora/quant_resize_vocab",
            "check/pt/neat_not_sft", "check/sft_full/loraplus_full", "deepspeed/sft_lora/missing"]
    by_id = {o.id: o for o in outcomes}
    for i in want:
        assert by_id[i].outcome == "caught", (i, by_id[i])


def test_values_used_in_arithmetic_are_range_checked(outcomes: list) -> None:
    """Issue 17 class 2: LF takes these (parse_dict checks no range), the doctor reports each at its key."""
    by_id = {o.id: o for o in outcomes}
    for i, key in (("check/sft_lora/micro_batch_-8", "per_device_train_batch_size"),
                   ("check/sft_lora/grad_accum_0", "gradient_accumulation_steps"),
                   ("check/sft_lora/cutoff_len_-1", "cutoff_len"), ("check/sft_lora/lora_rank_0", "lora_rank")):
        o = by_id[i]
        assert o.outcome == "later", o
        assert any(code == "FD003" and k == key and "out of range" in msg for code, k, _l, msg in o.errors), o
