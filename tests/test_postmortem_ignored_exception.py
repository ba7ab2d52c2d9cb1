"""An exception CPython printed and ignored does not end the run (issue #25: pastes that hold several errors where a
later one wins). CPython's unraisable hook (Python/errors.c ``PyErr_WriteUnraisable`` -> sys.unraisablehook) writes
"Exception ignored in: <obj>" and the traceback of an exception raised where none can propagate (a ``__del__``, a
finalizer at interpreter shutdown), then goes on: the exception before it is the cause. The pastes are written for
this test in CPython 3.10-3.12's shapes; none is a case of fixtures/postmortem/real_threads."""

from __future__ import annotations

from pmhelp import first_of_text

from finetune_doctor.readers.runlogs.logs import read_text_log

CAUSE_THEN_DEL = """\
Traceback (most recent call last):
  File "/home/u/LLaMA-Factory/src/llamafactory/data/converter.py", line 104, in __call__
    for turn_idx, message in enumerate(messages):
KeyError: 'conversations'
Exception ignored in: <function _ConnectionBase.__del__ at 0x7f1d2c3e5ab0>
Traceback (most recent call last):
  File "/usr/lib/python3.10/multiprocessing/connection.py", line 132, in __del__
    self._close()
  File "/usr/lib/python3.10/multiprocessing/connection.py", line 360, in _close
    _close(self._handle)
OSError: [Errno 9] Bad file descriptor"""

SHUTDOWN_THEN_CAUSE_RANK = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2481, in _inner_training_loop
[rank1]:     tr_loss_step = self.training_step(model, inputs, num_items_in_batch)
[rank1]: RuntimeError: expected scalar type BFloat16 but found Float
Exception ignored in: <function Pool.__del__ at 0x7fa81c2b1d80>
Traceback (most recent call last):
  File "/opt/conda/lib/python3.11/multiprocessing/pool.py", line 271, in __del__
ResourceWarning: unclosed running multiprocessing pool <multiprocessing.pool.Pool state=RUN pool_size=16>
Exception ignored in: <function tqdm.__del__ at 0x7fa7f8a3e700>
Traceback (most recent call last):
  File "/opt/conda/lib/python3.11/site-packages/tqdm/std.py", line 1148, in __del__
    self.close()
AttributeError: 'tqdm' object has no attribute 'last_print_t'"""


def test_the_reader_marks_the_ignored_exception_only():
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
        fh.write(CAUSE_THEN_DEL + "\n")
    exc = [(n.line, n.value["cls"], n.value["ignored"]) for n in read_text_log(fh.name).notices
           if n.kind == "exception"]
    assert exc == [(4, "KeyError", False), (11, "OSError", True)]


def test_the_exception_before_an_ignored_one_is_the_cause(tmp_path):
    f = first_of_text(tmp_path, CAUSE_THEN_DEL)
    assert f.name == "run-crashed"
    assert "with KeyError: 'conversations'" in f.message and "Bad file descriptor" not in f.message


def test_shutdown_noise_after_a_rank_s_exception_does_not_win(tmp_path):
    f = first_of_text(tmp_path, SHUTDOWN_THEN_CAUSE_RANK)
    assert f.name == "run-crashed"
    assert "expected scalar type BFloat16 but found Float" in f.message.split(" — ")[0]
