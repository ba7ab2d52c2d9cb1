"""tests/workerexit.py: an xdist worker's fast exit runs every atexit handler registered after it, flushes what
was written, and skips the interpreter's teardown; nothing changes outside a worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import workerexit

_CHILD = textwrap.dedent("""
    import atexit, logging, sys
    from types import SimpleNamespace
    sys.path.insert(0, {tests!r})
    import workerexit

    workerexit.register()   # as conftest does at import, before what registers handlers of its own
    # a handler registered later, as huggingface_hub's or filelock's at conftest's import: it must still run
    atexit.register(lambda: open({marker!r} + ".early", "w").write("ran"))
    registered = []
    config = SimpleNamespace(pluginmanager=SimpleNamespace(register=lambda p, n: registered.append(n)))
    if {worker!r}:
        config.workerinput = {{}}
    print("installed", workerexit.install(config), registered)
    # a handler registered later, as a test or the package registers one: it must still run
    atexit.register(lambda: open({marker!r}, "w").write("ran"))
    logging.basicConfig(filename={log!r}, level=logging.INFO)
    logging.getLogger("t").info("kept")
    # a finalizer that only the interpreter's teardown would run: it must not
    class Late:
        def __del__(self):
            open({late!r}, "w").write("teardown ran")
    sys.modules["late_holder"] = SimpleNamespace(obj=Late())
    sys.stdout.write("unflushed")
    sys.exit(3)
""")


def _child(tmp_path, worker: bool) -> tuple[subprocess.CompletedProcess, Path, Path, Path]:
    marker, log, late = tmp_path / "marker", tmp_path / "log", tmp_path / "late"
    code = _CHILD.format(tests=os.path.dirname(__file__), marker=str(marker), log=str(log), late=str(late),
                         worker=worker)
    env = {k: v for k, v in os.environ.items() if k != "FINETUNE_DOCTOR_TEST_FULL_EXIT"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    return done, marker, log, late


def test_a_worker_leaves_after_the_later_handlers_with_its_output_flushed(tmp_path):
    done, marker, log, late = _child(tmp_path, worker=True)
    assert done.stdout == "installed True ['finetune-doctor-workerexit']\nunflushed", done.stderr
    # os._exit(0): the status a worker ends with normally, not the SystemExit(3) it was leaving with
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran" and Path(f"{marker}.early").read_text() == "ran"
    assert "kept" in log.read_text()
    assert not late.exists()


def test_a_registered_handler_leaves_a_process_that_is_no_worker_alone(tmp_path):
    """A pytest that a test starts inherits PYTEST_XDIST_WORKER and imports conftest (so registers) but has no
    `workerinput`: its exit status and its teardown stay the interpreter's."""
    done, marker, _, late = _child(tmp_path, worker=False)
    assert done.stdout == "installed False []\nunflushed", done.stderr
    assert done.returncode == 3, done.stderr
    assert marker.read_text() == "ran" and late.read_text() == "teardown ran"


def test_nothing_is_installed_outside_a_worker_or_when_asked_not_to(monkeypatch):
    plugins = []
    stub = SimpleNamespace(register=lambda plugin, name: plugins.append(name))
    assert workerexit.install(SimpleNamespace(pluginmanager=stub)) is False   # the controller, or no xdist
    monkeypatch.setenv("FINETUNE_DOCTOR_TEST_FULL_EXIT", "1")
    assert workerexit.install(SimpleNamespace(workerinput={}, pluginmanager=stub)) is False
    assert plugins == []
