"""DeepSpeed's batch-size assertion read as the config error it is (issue #25, DeepSpeed's lines in a paste;
analyzers/postmortem/dsbatch.py): the product is computed from the line's own numbers and the world size it
would hold for is named. Pastes written for this test in DeepSpeed 0.9-0.19's shapes (config.py
``_batch_assertion``; releases before 0.10 print no space before the numbers); none is a case of
fixtures/postmortem/real_threads."""

from __future__ import annotations

from pmhelp import first_of_text

ONE_OF_TWO = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/config.py", line 853, in _do_error_check
[rank0]:     assert self.train_batch_size == self.train_micro_batch_size_per_gpu * self.gradient_accumulation_steps * self.world_size, (
[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 * 8 * 1"""

OLD_NO_SPACE = """\
  File "/opt/conda/lib/python3.8/site-packages/deepspeed/runtime/config.py", line 712, in _batch_assertion
    f'Check batch related parameters. train_batch_size is not equal'
AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size24 != 4 * 4 * 2"""


def test_a_config_written_for_two_processes_started_as_one(tmp_path):
    f = first_of_text(tmp_path, ONE_OF_TWO)
    assert f.name == "run-crashed"
    # 4 x 8 x 1 = 32, and 64 = 4 x 8 x 2
    assert "world size 1 = 32; the three hold for 2 processes and 1 were started" in f.message
    assert "not a DeepSpeed bug" in f.message and "library's own code" not in f.message


def test_a_global_batch_no_accumulation_can_make_is_said_so(tmp_path):
    f = first_of_text(tmp_path, OLD_NO_SPACE)
    # 4 x 4 x 2 = 32; 24 = 4 x 3 x 2: the accumulation is the odd one
    assert "world size 2 = 32; for micro batch 4 on 2 processes train_batch_size 24 needs " \
           "gradient_accumulation_steps 3, and 4 is set" in f.message


def test_a_global_batch_not_divisible_by_the_ranks(tmp_path):
    line = ("AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
            "gradient_acc_step * world_size 100 != 2 * 8 * 6")
    f = first_of_text(tmp_path, line)
    # 2 x 8 x 6 = 96; 100 / (2 x 6) = 8.33: no accumulation makes it
    assert "= 96; train_batch_size 100 is not a whole multiple of micro batch × world size (2 × 6 = 12)" in f.message
