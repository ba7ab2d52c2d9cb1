"""A pytest-xdist worker leaves without the interpreter's teardown once everything of its own has run (issue #22).

When a worker's tests are done it has already sent its results (xdist's "workerfinished" event carries the exit
status, xdist/remote.py `pytest_sessionfinish`; the controller reads that, never the worker's process status,
xdist/dsession.py `worker_workerfinished`), run pytest's unconfigure and cleanup, and returned from execnet's
`serve`. What is left is CPython's finalization: tearing down every module (torch, transformers, pandas and the
~220 test modules in one of the two workers) and freeing a heap of 0.5-1 million tracked objects one by one,
with a last garbage collection over it. Measured 2026-12-07 (fast lane, -n 2 --dist loadfile, load ~4,
benchmarks/testcpu.py with faulthandler stacks every 0.5 s): 4 s of wall in the worker that imported the most,
with no Python frame on the stack, while the controller waited for it (xdist/workermanage.py `teardown_nodes`
waits up to 10 s for each worker's gateway); benchmarks/results/test_speed.md has the before and after.

`register` (tests/conftest.py, before anything else it imports) adds an atexit handler that does nothing until
`install` (conftest's `pytest_configure`) has seen `config.workerinput`, which xdist sets only in a worker: a
pytest started by a test inherits PYTEST_XDIST_WORKER but never leaves this way. Handlers run last-registered
first, so every handler registered after conftest's import has run when this one runs: a test's, the package's
(readers/runlogs/loggrep.py removes its temporary files), huggingface_hub's (it closes its HTTP session) and
filelock's (it releases held locks), both imported by conftest. Registered before it in a worker are only logging's
`shutdown`, called here, and execnet's default group, which holds no gateway in a worker. Then stdout and stderr
are flushed and the process leaves with `os._exit(0)`, the status a worker ends with after a normal run. The
ordinary exit stays in the controller, a run without xdist, under coverage measurement (coverage.py saves its data
file from its own atexit handler, registered earlier) and with FINETUNE_DOCTOR_TEST_FULL_EXIT=1 set.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys

import pytest


_IN_WORKER: list[bool] = []   # set by `install` in an xdist worker


def _leave() -> None:
    if not _IN_WORKER or "coverage" in sys.modules:   # coverage.py may still have to write its data file: the ordinary exit
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:   # a closed or broken stream: nothing more can be written to it anyway
            pass
    os._exit(0)


class _FreezeAfterLastCollection:
    """pytest's unraisableexception plugin collects garbage twice as a session ends: in its `pytest_unconfigure`
    (then reports what the finalizers raised) and again in its config cleanup, where warnings are no longer
    recorded (_pytest/config `_do_configure`: record=False). Each is a full collection over the worker's heap
    (0.3-0.45 CPU s at 0.5-1 million objects, 2026-12-07). Run after the first (trylast), this freezes what it left:
    every object alive then is out of the second pass, which walks only what the cleanup itself creates."""

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config) -> None:
        gc.freeze()


def register() -> None:
    """Add the exit handler; call it before importing what registers atexit handlers that must still run."""
    atexit.register(_leave)


def install(config) -> bool:
    """Arm the fast exit in an xdist worker (`config.workerinput` is set by xdist/remote.py before pytest
    configures); returns whether it was armed. `register` must have run in this process."""
    if not hasattr(config, "workerinput"):
        return False
    if os.environ.get("FINETUNE_DOCTOR_TEST_FULL_EXIT"):
        return False
    _IN_WORKER.append(True)
    config.pluginmanager.register(_FreezeAfterLastCollection(), "finetune-doctor-workerexit")
    return True
