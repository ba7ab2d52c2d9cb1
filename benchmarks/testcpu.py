"""A pytest plugin that records each test's CPU and wall seconds, per xdist worker, for benchmarks/test_speed.py.

Load it with ``-p benchmarks.testcpu`` (repository root on PYTHONPATH) and set TESTCPU_OUT to a folder: every
process (each xdist worker, or the single process without xdist) writes ``<worker>.json`` there at the end with
its start time, the time its first and last test ended, its collection CPU and, per test, the nodeid, the phase
CPU seconds (its own and its children's user+sys, ``os.times``: a `doctor` child process a test starts counts
towards that test) and wall seconds of setup+call+teardown. CPU rather than wall because this machine is shared
and load inflates wall unevenly. Not loaded by default: it costs nothing in a normal run.
"""

from __future__ import annotations

import json
import os
import time

import pytest

_T0 = time.time()
_REC: dict = {"tests": []}
_STACKS: list = []


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _kids() -> float:
    # the reaped children's share alone (a `doctor` or `python -c` child a test starts; in the controller, the workers)
    t = os.times()
    return t.children_user + t.children_system


_GC = {"t": 0.0, "n": [0, 0, 0], "s": [0.0, 0.0, 0.0], "t0": 0.0}


def _gc_cb(phase, info):
    # time in the collector itself, by generation (gc.callbacks: the same thread, before and after each collection)
    if phase == "start":
        _GC["t0"] = time.process_time()
    else:
        g = info["generation"]
        _GC["n"][g] += 1
        _GC["s"][g] += time.process_time() - _GC["t0"]


def pytest_sessionstart(session):
    import gc
    gc.callbacks.append(_gc_cb)
    _REC["start_wall"] = _T0
    _REC["start_cpu"] = _cpu()


def pytest_collection_finish(session):
    _REC["collected_wall"] = time.time()
    _REC["collected_cpu"] = _cpu()
    import gc
    _REC["collected_gc_objects"] = len(gc.get_objects())
    _REC["collected_gc"] = {"n": list(_GC["n"]), "s": list(_GC["s"])}
    import sys
    _REC["first_import"] = {name: "collection" for name in _HEAVY if name in sys.modules}


# the heavy imports a test may be the first in its worker to pay for (recorded with the test that first had them)
_HEAVY = ("torch", "transformers", "peft", "deepspeed", "llamafactory", "accelerate", "datasets", "matplotlib",
          "trl", "numpy", "hypothesis", "pyarrow", "tokenizers", "safetensors", "scipy", "pandas")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import sys
    c0, w0, k0 = _cpu(), time.time(), _kids()
    yield
    c1, w1, k1 = _cpu(), time.time(), _kids()
    first = _REC.setdefault("first_import", {})
    for name in _HEAVY:
        if name not in first and name in sys.modules:
            first[name] = item.nodeid
    _REC["tests"].append([item.nodeid, round(c1 - c0, 4), round(w1 - w0, 4), round(w1, 3), round(k1 - k0, 4)])


def pytest_sessionfinish(session):
    out = os.environ.get("TESTCPU_OUT")
    if not out:
        return
    _REC["end_wall"] = time.time()
    _REC["end_cpu"] = _cpu()
    _REC["end_children_cpu"] = _kids()
    import gc
    _REC["end_gc_objects"] = len(gc.get_objects())
    _REC["end_gc"] = {"n": list(_GC["n"]), "s": list(_GC["s"])}
    t = time.process_time()
    gc.collect()
    _REC["end_full_collect_s"] = time.process_time() - t
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.makedirs(out, exist_ok=True)
    # what may hold the process up once its tests are done (xdist's controller waits up to 10 s for a worker to exit)
    import threading
    _REC["threads"] = [[t.name, t.daemon] for t in threading.enumerate()]
    try:
        kids = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as f:
                kids += f.read().split()
        _REC["children"] = kids
    except OSError:
        pass
    if os.environ.get("TESTCPU_STACKS"):
        import faulthandler
        _STACKS.append(open(os.path.join(out, f"{worker}.stacks"), "w", encoding="utf-8"))
        faulthandler.dump_traceback_later(float(os.environ["TESTCPU_STACKS"]), repeat=True, file=_STACKS[-1])
    with open(os.path.join(out, f"{worker}.json"), "w", encoding="utf-8") as f:
        json.dump(_REC, f)
    import atexit

    def _at_exit() -> None:
        with open(os.path.join(out, f"{worker}.exit"), "w", encoding="ascii") as f:
            f.write(f"{time.time()}\n")
    atexit.register(_at_exit)
