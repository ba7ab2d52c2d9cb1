"""tests/conftest.py's pytest-xdist scheduler: in the fast lane (slow tests deselected, --dist loadfile) every file
of `_TORCH_FILES` goes to one worker as one work unit, so the other worker never imports torch; elsewhere xdist's
own per-file units are kept. Driven through xdist's own LoadFileScheduling with two stand-in workers that record
what they are sent, as DSession drives it (xdist/dsession.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import conftest

pytest.importorskip("xdist")

COLLECTION = [
    "tests/test_probe_replay.py::test_format_size_and_message_words",
    "tests/test_lintcli.py::test_one",
    "tests/test_lintcli.py::test_two",
    "tests/test_lintcli.py::test_three",
    "tests/test_rule_cases.py::test_rule_case[a]",
    "tests/test_rule_cases.py::test_rule_case[b]",
    "tests/test_postmortem_cli.py::test_plot_writes_a_png",
    "tests/test_arch.py::test_counts[llama]",
    "tests/test_yamlcfg.py::test_four",
    "tests/test_model_parity.py::test_registered_types_are_the_imported_mappings",
]


class _Worker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += [COLLECTION[i] for i in indices]

    def shutdown(self) -> None:
        self.shutting_down = True


def _config(markexpr: str, dist: str = "loadfile") -> SimpleNamespace:
    values = {"dist": dist, "tx": ["2*popen"], "loadscopereorder": False}
    return SimpleNamespace(option=SimpleNamespace(markexpr=markexpr, loadscopereorder=False),
                           getvalue=values.__getitem__)


def _run(sched) -> list[_Worker]:
    """Both workers collect, the scheduler hands out its first units, then each worker reports its next test done,
    in turn, until nothing is left and both are told to shut down."""
    workers = [_Worker("gw0"), _Worker("gw1")]
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, COLLECTION)
    sched.schedule()
    progressed = True
    while progressed:
        progressed = False
        for w in workers:
            pending = [n for unit in sched.assigned_work[w].values() for n, done in unit.items() if not done]
            if pending:
                sched.mark_test_complete(w, COLLECTION.index(pending[0]))
                progressed = True
    assert all(w.shutting_down for w in workers)
    return workers


def test_fast_lane_keeps_the_torch_files_on_one_worker_and_shares_the_rest():
    sched = conftest.pytest_xdist_make_scheduler(_config("not slow and not gpu"), None)
    assert sched is not None
    gw0, gw1 = _run(sched)
    torch_tests = {n for n in COLLECTION if n.split("::")[0].rsplit("/", 1)[1] in conftest._TORCH_FILES}
    assert torch_tests == {COLLECTION[i] for i in (0, 4, 5, 7, 9)}
    # the first unit in the queue is the group: the first worker gets all of it, the other none of it (with
    # xdist's per-file units the second worker would take test_arch.py here)
    assert torch_tests <= set(gw0.sent) and not torch_tests & set(gw1.sent)
    # every test runs once, and the other files are shared out, not all left to one worker
    assert sorted(gw0.sent + gw1.sent) == sorted(COLLECTION)
    assert set(gw1.sent) >= {COLLECTION[1], COLLECTION[2], COLLECTION[3]}


@pytest.mark.parametrize("markexpr, dist", [("not gpu", "loadfile"), ("", "loadfile"), ("slow", "loadfile"),
                                            ("not slow and not gpu", "load"),
                                            ("not slow and not gpu", "loadgroup")])
def test_the_whole_suite_and_other_modes_keep_xdists_scheduler(markexpr, dist):
    assert conftest.pytest_xdist_make_scheduler(_config(markexpr, dist), None) is None


@pytest.mark.parametrize("markexpr, deselected", [("not slow and not gpu", True), ("not gpu and not slow", True),
                                                  ("not slow", True), ("gpu", True), ("not gpu", False),
                                                  ("slow or gpu", False), ("", False), ("not (", False)])
def test_whether_the_mark_expression_leaves_slow_tests_out(markexpr, deselected):
    assert conftest._slow_deselected(_config(markexpr)) is deselected
