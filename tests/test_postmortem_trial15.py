"""Trial 15's postmortem KINDS (issue #25, wt/fixtrial15pm), each from several wordings — English and Chinese, titles
and sentences — shaped like the version reports, AttributeErrors and native crashes users post to transformers,
TRL, peft, accelerate and PyTorch trackers, not the trial's three texts alone (those are pinned last):

1. a version regression said in words: "works with X a, fails with X b", "after upgrading X to b", "X a 可以跑，b
   报错" → the package and both releases, pin the one that worked or upgrade past the one that broke; a failure
   said to stay across several releases of one package → the package held at one release is the lead;
   LLaMA-Factory's start-up check is judged only where LF is named (saidstack.lf_named).
2. an AttributeError on a trainer, accelerate or peft object with no frame → the two packages of the pairing and
   `pip show A B` (attrpair.py).
3. a native crash: the fault handler's banner means it was on (no PYTHONFAULTHANDLER=1 advice), a trimmed paste
   asks for the untrimmed stack, no exit status that no line shows, the step the words give (nativewords.py).
4. quotes: issue-template headings dropped, whole clauses, every release listed kept (quotewords.py, statedwords).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.readers.runlogs.quotewords import QUOTE_CHARS, quote_text
from finetune_doctor.readers.runlogs.statedwords import stated_versions
from finetune_doctor.settings import Options

TRIAL = Path(__file__).resolve().parent.parent / "fixtures" / "postmortem" / "trial15"


def report(tmp_path: Path, text: str, name: str = "issue.txt"):
    (tmp_path / name).write_text(text, encoding="utf-8")
    return pm.run(str(tmp_path), [], None, Options(command="postmortem"))


def first(tmp_path: Path, text: str):
    r = report(tmp_path, text + "\n")
    assert r.findings, "no finding"
    return r.findings[0]


# -- 1. a version regression said in words -----------------------------------------------------------------------

@pytest.mark.parametrize("text, pkg, worked, failed", [
    # title-style, English
    ("Training fails after upgrading transformers to 4.46.0, works with transformers 4.45.2", "transformers",
     "4.45.2", "4.46.0"),
    # sentence-style, English, the package named twice
    ("With peft 0.10.0 training works, but peft 0.11.0 fails with the same script", "peft", "0.10.0", "0.11.0"),
    # Chinese, an upgrade then the release that was fine
    ("升级 transformers 到 4.46.2 后报错，4.45.2 正常", "transformers", "4.45.2", "4.46.2"),
    # Chinese, no upgrade word: one release runs, the next fails
    ("deepspeed 0.14.0 可以跑，0.14.1 就报错", "deepspeed", "0.14.0", "0.14.1"),
])
def test_a_release_that_works_beside_one_that_fails_names_both_and_both_ways_out(tmp_path, text, pkg, worked,
                                                                                  failed):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert f"{pkg} {worked} works and {pkg} {failed} fails" in f.message
    assert f"`pip install {pkg}=={worked}`" in f.message
    assert f"upgrade {pkg} past {failed} (`pip install -U {pkg}`)" in f.message
    assert "version regression" in f.message
    # the words name no LLaMA-Factory: its start-up check is not judged
    assert "start-up check" not in f.message and "llamafactory-cli" not in f.message


def test_an_upgrade_with_only_the_new_release_names_it_and_asks_for_the_one_that_worked(tmp_path):
    f = first(tmp_path, "After upgrading peft to 0.11.0 training fails with RuntimeError")
    assert "The words say peft 0.11.0 fails" in f.message
    assert "`pip install peft==<the release that worked>`" in f.message
    assert "The words name peft 0.11.0" in f.message   # "peft to 0.11.0" is a stated release


@pytest.mark.parametrize("text, tried, held", [
    ("pytorch 2.2 and 2.4 are tested. transformers 4.46.2. FSDP training fails with RuntimeError",
     "torch 2.2 and 2.4", "transformers 4.46.2"),
    ("I tried both deepspeed 0.14.4 and 0.15.1 and still get the error; transformers 4.45.0",
     "deepspeed 0.14.4 and 0.15.1", "transformers 4.45.0"),
    ("torch 2.1/2.3 都报错 RuntimeError，peft 0.11.1", "torch 2.1 and 2.3", "peft 0.11.1"),
    ("换了 deepspeed 0.14.4 和 0.15.1 都报错，transformers 4.45.0", "deepspeed 0.14.4 and 0.15.1",
     "transformers 4.45.0"),
])
def test_a_failure_that_stays_across_releases_leads_with_the_package_held_fixed(tmp_path, text, tried, held):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert f"The words say the error stays across {tried}" in f.message
    assert f"{held} is the release the words hold fixed: a regression in it is the lead" in f.message
    assert f"`pip install -U {held.split()[0]}`" in f.message
    # the lead comes before the releases the words name
    assert f.message.index("stays across") < f.message.index(f"The words name {tried.split()[0]}")


@pytest.mark.parametrize("text", [
    "Tested with torch 2.4 and transformers 4.46.2: RuntimeError during training",
    # one of the releases tried works: not a failure that stays
    "Tested torch 2.1 and 2.3: 2.1 works, 2.3 fails with RuntimeError; transformers 4.46.2",
])
def test_no_persistence_without_several_failing_releases(tmp_path, text):
    f = first(tmp_path, text)
    assert "stays across" not in f.message


@pytest.mark.parametrize("text, judged", [
    ("transformers 4.46.2: training fails with RuntimeError", False),
    ("LLaMA-Factory with transformers 4.46.2: training fails with RuntimeError", True),
    ("llamafactory-cli train fails with RuntimeError, transformers 4.46.2", True),
    ("用 LlamaFactory 训练报错，transformers 4.46.2", True),
])
def test_lf_start_up_check_is_judged_only_where_lf_is_named(tmp_path, text, judged):
    f = first(tmp_path, text)
    assert ("LLaMA-Factory's start-up check" in f.message) is judged
    assert ("llamafactory-cli env" in f.message) is judged


# -- 2. an AttributeError on a trainer, accelerate or peft object --------------------------------------------------

@pytest.mark.parametrize("text, owner, base, attr", [
    ("AttributeError: 'SFTTrainer' object has no attribute 'tokenizer'", "trl", "transformers", "tokenizer"),
    ("AttributeError: 'AcceleratorState' object has no attribute 'distributed_type'", "accelerate", "transformers",
     "distributed_type"),
    ("AttributeError: 'PeftModelForCausalLM' object has no attribute 'enable_input_require_grads'", "peft",
     "transformers", "enable_input_require_grads"),
    ("AttributeError: 'CustomSeq2SeqTrainer' object has no attribute 'processing_class'", "llamafactory",
     "transformers", "processing_class"),
])
def test_a_trainer_attribute_missing_in_one_line_is_a_pairing_of_two_packages(tmp_path, text, owner, base, attr):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert f"a release pairing of {owner} and {base}" in f.message
    assert f"`pip show {owner} {base}`" in f.message and f"`{attr}`" in f.message


@pytest.mark.parametrize("text", [
    "运行 DPO 时报错：'DPOTrainer' object has no attribute 'ref_model'",
    "KTOTrainer crashes: 'KTOTrainer' object has no attribute 'current_gradient_accumulation_steps'",
])
def test_the_pairing_said_in_words_names_trl_and_transformers(tmp_path, text):
    f = first(tmp_path, text)
    assert "a release pairing of trl and transformers" in f.message
    assert "`pip show trl transformers`" in f.message


@pytest.mark.parametrize("text", [
    "AttributeError: 'NoneType' object has no attribute 'shape'",
    "AttributeError: 'Qwen2ForCausalLM' object has no attribute 'foo'",
])
def test_other_objects_are_not_a_pairing(tmp_path, text):
    f = first(tmp_path, text)
    assert "release pairing" not in f.message


# -- 3. a native crash ------------------------------------------------------------------------------------------

BANNER = "Fatal Python error: Segmentation fault\n"
UCX = ("[gpu-node-3:1187:0:1187] Caught signal 11 (Segmentation fault: address not mapped to object at address "
       "(nil))\n")


@pytest.mark.parametrize("trim", ["[...]\n", "...省略...\n", "<snip>\n", "(rest of the stack trimmed)\n"])
def test_the_fault_handler_banner_with_a_trimmed_stack_asks_for_it_untrimmed(tmp_path, trim):
    f = first(tmp_path, "FSDP2 run dies:\n" + BANNER + trim + UCX)
    assert f.name == "native-crash"
    assert "PYTHONFAULTHANDLER=1" not in f.message and "PYTHONFAULTHANDLER" not in f.fix.title
    assert "give the untrimmed lines under that banner" in f.message
    assert "exit code" not in f.message   # the signal is shown, the status is not


def test_the_fault_handler_stack_pasted_names_its_innermost_frame(tmp_path):
    f = first(tmp_path, BANNER + "\nCurrent thread 0x00007f2d8c5fe740 (most recent call first):\n"
              '  File "/opt/conda/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 51 in '
              "_flash_attn_forward\n"
              '  File "/opt/conda/lib/python3.10/site-packages/torch/autograd/function.py", line 553 in apply\n')
    assert f.name == "native-crash"
    assert "starts at _flash_attn_forward (flash_attn_interface.py:51)" in f.message
    assert "PYTHONFAULTHANDLER" not in f.message


@pytest.mark.parametrize("text, step", [
    ("I get this crash with FSDP, 96 steps into training:\n", 96),
    ("训练到第1200步时崩溃:\n", 1200),
    ("Segfault at step 350 every time:\n", 350),
])
def test_the_step_the_words_give_is_an_approximate_step(tmp_path, text, step):
    f = first(tmp_path, text + UCX)
    assert f.name == "native-crash"
    assert f"about step {step} (as the words say:" in f.message and "not a logged step" in f.message


@pytest.mark.parametrize("line", [
    UCX,
    "/bin/bash: line 1:  4242 Segmentation fault      (core dumped) python train.py\n",
    "Segmentation fault (core dumped)\n",
])
def test_no_exit_status_that_no_line_shows(tmp_path, line):
    f = first(tmp_path, line)
    assert f.name == "native-crash"
    assert "139" not in f.message and "exit code" not in f.message
    # no banner: turning the handler on is still the advice
    assert "PYTHONFAULTHANDLER=1" in f.message


def test_an_exit_status_a_line_shows_is_kept(tmp_path):
    f = first(tmp_path, "[2024-05-01 10:00:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
                        "(exitcode: -11) local_rank: 0 (pid: 1234) of binary: /usr/bin/python")
    assert "SIGSEGV (exit code -11)" in f.message


# -- 4. quotes ------------------------------------------------------------------------------------------------------

def test_template_headings_are_not_quoted_and_every_release_listed_is_kept(tmp_path):
    text = ("Gradient accumulation crash under FSDP with SFTTrainer\n\n### System Info\n\n- torch 2.1 and 2.3\n"
            "- transformers 4.46.1\n\n### Who can help?\n\n@muellerzr\n\n### Reproduction\n\nRun the peft FSDP "
            "example and training crashes with RuntimeError.\n\n### Expected behavior\n\nIt trains.\n")
    f = first(tmp_path, text)
    for heading in ("System Info", "Who can help", "Reproduction", "Expected behavior"):
        assert heading not in f.message
    assert "torch 2.1 and 2.3" in f.message


@pytest.mark.parametrize("text", [
    "问题描述\n训练报错 RuntimeError\n复现步骤\n运行 sft 脚本\n报错信息\nRuntimeError: expected dtype",
    "**Describe the bug**\nThe run crashes with RuntimeError.\n**To Reproduce**\nrun train.py",
])
def test_heading_lines_are_dropped_from_the_quote(text):
    q = quote_text(text)
    assert not any(h in q for h in ("问题描述", "复现步骤", "报错信息", "Describe the bug", "To Reproduce"))


def test_a_long_quote_ends_on_a_whole_clause():
    text = ("FSDP training of a 7B model crashes in the backward pass. " * 3 + "pytorch 2.2 and 2.4 are tested, "
            "transformers 4.46.2, and the error stays the same whatever dtype I set for the model and the "
            "trainer, float16, float32 or bfloat16, on four A6000 cards with the example script from the docs")
    q = quote_text(text)
    assert len(q) <= QUOTE_CHARS + 2 and q.endswith(" …")
    body = q[:-2]
    assert body.endswith((".", ",", "2.4 are tested", "transformers 4.46.2")), body[-40:]


@pytest.mark.parametrize("text, pkg, versions", [
    ("pytorch 2.2 and 2.4 are tested", "torch", ["2.2", "2.4"]),
    ("torch 2.1/2.3/2.4 all fail", "torch", ["2.1", "2.3", "2.4"]),
    ("deepspeed 0.14.2 和 0.15.1 都不行", "deepspeed", ["0.14.2", "0.15.1"]),
    ("works with transformers 4.45.2, fails with transformers 4.46.0", "transformers", ["4.45.2", "4.46.0"]),
    # one package named: a bare release of its major elsewhere is its own; CUDA's is not
    ("升级 transformers 到 4.46.2 后报错，4.45.2 正常, CUDA 12.1.0", "transformers", ["4.46.2", "4.45.2"]),
])
def test_every_release_the_words_list_is_stated(text, pkg, versions):
    v = stated_versions(text)[pkg]
    assert [v["version"], *v.get("also", [])] == versions


# -- the trial's own three posts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case, checks", [
    ("01", ["torch 2.2 and 2.4", "transformers 4.46.2 is the release the words hold fixed"]),
    ("02", ["about step 96", "give the untrimmed lines under that banner"]),
    ("03", ["a release pairing of trl and transformers", "`pip show trl transformers`"]),
])
def test_trial15_posts(tmp_path, case, checks):
    r = report(tmp_path, (TRIAL / f"{case}.txt").read_text(encoding="utf-8"), "post.txt")
    msg = r.findings[0].message
    assert all(c in msg for c in checks), (case, msg)
    assert "start-up check" not in msg and "exit code 139" not in msg and "System Info" not in msg
    assert "PYTHONFAULTHANDLER" not in msg


def test_the_frame_named_is_the_current_threads_not_another_threads(tmp_path):
    f = first(tmp_path, BANNER + "\nThread 0x00007f5c2e7fc700 (most recent call first):\n"
              '  File "/usr/lib/python3.10/threading.py", line 324 in wait\n\n'
              "Current thread 0x00007f5d1a2b3740 (most recent call first):\n"
              '  File "/opt/conda/lib/python3.10/site-packages/bitsandbytes/functional.py", line 1402 in '
              "dequantize_4bit\n")
    assert "starts at dequantize_4bit (functional.py:1402)" in f.message and "threading.py" not in f.message
