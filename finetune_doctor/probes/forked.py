"""Run one piece of a probe in a forked child process while the parent runs another (the simulate probe's two
depths, k and k+1 layers, are independent simulations of the same spec).

Why fork and not spawn: a spawned interpreter would import torch and transformers again (seconds, more than a
depth costs), while a fork shares the parent's imported modules copy-on-write. The child sends its result back
pickled through a pipe and leaves with ``os._exit`` (no atexit handlers, no flush of the parent's buffered
output, so nothing is printed twice). Only where fork is safe and pays: Linux (the default start method there,
Python ``multiprocessing`` docs, "Contexts and start methods"), more than one CPU this process may run on
(``os.sched_getaffinity``) with one of them idle (`worthwhile`). The child writes nothing (`_silence`): a thread
of the parent (a terminal status line) does not exist there, and a lock it held at the fork stays held.

A child that fails for any reason yields None: the caller then runs the piece itself, so the error a user sees is
the one the sequential run raises.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any, Callable


def usable() -> bool:
    """Whether `start` can fork here (Linux, more than one CPU available to this process)."""
    return _cpus() > 1


def _cpus() -> int:
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 0
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 0


def worthwhile() -> bool:
    """Whether a piece should run in a child now: `usable()` and a CPU is idle (the 1-minute load average,
    this process included, at most the CPUs available minus one). The child costs CPU time of its own — it starts
    without the fake-tensor dispatch cache the parent fills (torch/_subclasses/fake_tensor.py
    ``FakeTensorMode.cache``), which one sequential process reuses from one depth to the next — so on a busy
    machine it buys no wall time (benchmarks/results/margin_speed.md) and only takes CPU from the other jobs."""
    n = _cpus()
    if n < 2:
        return False
    try:
        return os.getloadavg()[0] <= n - 1
    except OSError:
        return False


class Forked:
    """A piece of work running in a forked child; `result()` waits for it (None when the child failed)."""

    def __init__(self, fn: Callable[[], Any]):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: compute, send, leave without running the parent's exit handlers
            code = 1
            try:
                os.close(r)
                _silence()
                data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(w, "wb") as f:
                    f.write(data)
                code = 0
            except BaseException:  # noqa: BLE001 - any failure: the parent reruns the piece and raises it
                pass
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._fd = pid, r

    def result(self) -> Any:
        """The child's return value, or None when it failed (it exited non-zero or sent nothing readable)."""
        with os.fdopen(self._fd, "rb") as f:
            data = f.read()
        _, status = os.waitpid(self._pid, 0)
        if status != 0 or not data:
            return None
        try:
            return pickle.loads(data)
        except Exception:  # a truncated or unreadable payload: rerun in the parent
            return None

    def abandon(self) -> None:
        """Wait for the child without its result (the parent failed first and is raising)."""
        try:
            os.close(self._fd)
        except OSError:
            pass
        try:
            os.waitpid(self._pid, 0)
        except ChildProcessError:
            pass


def _silence() -> None:
    """The child writes nothing: its output (warnings the parent's own depth prints too) would interleave with
    the parent's, and the parent's streams may have been locked by a thread at the fork."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")


def start(fn: Callable[[], Any]) -> Forked | None:
    """`fn` running in a forked child, or None where `usable()` is false or the fork fails (run it yourself)."""
    if not usable():
        return None
    try:
        return Forked(fn)
    except OSError:
        return None
