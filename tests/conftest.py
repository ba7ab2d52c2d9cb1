import os
import sys
from pathlib import Path

# CPU-only test machines may still carry an NVIDIA library; tests never read real GPUs unless marked gpu.
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

# pytest's rewritten test modules kept in a per-user temporary folder when PYTHONDONTWRITEBYTECODE forbids its own
# .pyc (tests/rewritecache.py: ~4 CPU s of each worker's collection); before any test module is imported
import rewritecache  # noqa: E402

rewritecache.install()

# an xdist worker's exit without the interpreter's teardown (tests/workerexit.py): its atexit handler first, so that
# the handlers of what is imported below (huggingface_hub, filelock) and of the tests run before it
import workerexit  # noqa: E402

workerexit.register()

# huggingface_hub reads HF_HUB_OFFLINE, HF_ENDPOINT and its other settings once, when first imported. Every worker
# imported it at collection (torch + transformers, module-level importorskip) until issue #22 made collection
# light; then the first import came inside whichever test first downloaded, under that test's monkeypatched
# environment (test_rules_null_facts sets HF_HUB_OFFLINE=1), and test_hub_offline's deadline test failed in 2 of 4
# fast-lane runs (2026-12-07; `pytest tests/test_rules_null_facts.py tests/test_hub_offline.py` fails the same way
# on main, where those two files import no transformers). Imported here, from the worker's own environment.
try:
    import huggingface_hub.file_download  # noqa: E402, F401
except ImportError:   # an optional dependency: the tests that need it skip
    pass


# The error model the rule cases and remedy tests were written against (finetune_doctor/analyzers/
# uncertainty_table.json as committed on 2026-12-02, kept in fixtures/uncertainty/pinned_table.json). Those tests
# check the rules' and planners' logic (a remedy aims at p_oom <= 5 %, a finding fires between two thresholds);
# benchmarks/calibrate.py refits the live table whenever the memory model changes, and how wide it makes the
# interval must not decide whether that logic is tested. Tests of the calibration itself use the live table.
import json as _json

import pytest as _pytest


@_pytest.fixture
def pinned_error_model(monkeypatch):
    from finetune_doctor.analyzers.memory import uncertainty
    pinned = _json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "uncertainty" /
                          "pinned_table.json").read_text(encoding="utf-8"))
    monkeypatch.setattr(uncertainty, "table", lambda: pinned)
    uncertainty.error_dist.cache_clear()
    yield pinned
    uncertainty.error_dist.cache_clear()


# The files whose module fixtures take minutes run first (whole suite, -n auto --dist loadfile, 2026-12-07 at load
# 2-3: test_fuzz_corpus 171 s, LF main's parity 102 s, test_fuzz_round2 102 s, 0.9.0's 77 s, 0.9.5's 70 s, v1's
# 42 s; the parity corpora took 150-400 s each before their oracles built LF's parser once, tests/parity/
# oracle.py). Under pytest-xdist's --dist loadfile (README, Development) a worker takes the next file when it is
# free: one that starts last finishes minutes after the other worker has gone idle. Order only; no test changes.
_HEAVY_FIRST = ("test_parity_release_090.py", "test_parity_lf.py", "test_parity_releases.py", "test_fuzz_corpus.py", "test_fuzz_round2.py",
                "test_margin_replay.py", "test_parity_v1.py", "test_fuzz_structured.py", "test_catalog_entries.py",
                # the slow lane's next longest files (CPU s in a run of -m "slow and not gpu", -n 2, 2026-12-07, load
                # 6-16, benchmarks/results/test_speed.md) and test_precommit (18 CPU s but 123 s wall: a clone and
                # pre-commit's own environment): unnamed, few tests each, they started among the short files and
                # test_precommit ended 47 s after the other worker had finished
                "test_precommit.py", "test_probe_simulate.py", "test_savers_liger.py", "test_postmortem_sources.py",
                "test_probe_replay.py", "test_data_piececount.py", "test_probe_calibration.py", "test_report_schema.py",
                "test_probe_gpu.py", "test_engines_fsdp2_sim.py", "test_data_scale.py", "test_data_media_parity.py")


# Then the fast lane's files that take longest, longest first, by their CPU seconds (the worker's own and its
# children's, os.times, summed over each file's tests) in a run of `-m "not slow and not gpu"` under -n 2 --dist
# loadfile with the package's bytecode and pytest's rewritten tests cached (2026-12-07 14:25 UTC, load 3-7; CPU
# rather than wall, which load inflates unevenly). The first file to need torch, transformers and peft carries
# their import (~4 s) where collection has not imported them already. (test_hub_offline, once entered at its 2 s
# wall wait on a silent socket, left the list when its test took a 0.4 s deadline, 2026-12-07.) Ordered by test
# count alone these came last: test_probe_progress (5 tests, the fast lane's longest file) started 98th of 125
# files and test_context (7 tests) 86th, so one worker ran them after the other had gone idle; test_startup,
# test_lazy_lint_imports and test_lazy_planners (few tests, each a handful of child processes) were not named before
# and started late for the same reason. Only the files of >= 0.9 CPU s are named: the order of the rest hardly
# moves the end, and a file added later still runs.
_SLOW_FAST_LANE_S = {"test_probe_progress.py": 8.8, "test_rule_cases.py": 6.7, "test_architecture.py": 3.6,
                     "test_startup.py": 3.4, "test_cases.py": 3.4, "test_context.py": 3.1,
                     "test_catalog_entries.py": 3.0, "test_postmortem_hostile.py": 2.9,
                     "test_data_lf_parity.py": 2.6, "test_lintcli.py": 2.6, "test_postmortem_sources.py": 2.3,
                     "test_rule_registry.py": 2.1, "test_ds_hostile.py": 2.0, "test_postmortem_counted.py": 1.8,
                     "test_lazy_lint_imports.py": 1.8, "test_terminal_width.py": 1.6, "test_arch.py": 1.4,
                     "test_lazy_planners.py": 1.3, "test_assumptions.py": 1.3, "test_one_home.py": 1.3,
                     "test_postmortem_real_threads.py": 1.2, "test_model_parity.py": 1.1, "test_fixer.py": 1.1,
                     "test_yamlcfg.py": 1.1, "test_output_policy.py": 1.0, "test_postmortem_cli.py": 1.0,
                     "test_catalog_provenance.py": 0.9, "test_examples.py": 0.9, "test_data_hostile.py": 0.9,
                     "test_dsconfig.py": 0.9}


def file_order(counts: dict[str, int]) -> list[str]:
    """The paths of `counts` (test file path -> its number of collected tests) in the order workers should take
    them: the named heavy files (`_HEAVY_FIRST`), then the fast lane's slow ones by measured seconds
    (`_SLOW_FAST_LANE_S`), then the others by number of tests, most first (xdist's own order for them); ties keep
    the order of `counts`."""
    rank = {name: i for i, name in enumerate(_HEAVY_FIRST)}

    def key(path: str) -> tuple[int, float, int]:
        name = Path(path).name
        return rank.get(name, len(rank)), -_SLOW_FAST_LANE_S.get(name, 0.0), -counts[path]

    return sorted(counts, key=key)


def pytest_configure(config):
    # an xdist worker skips the interpreter's teardown at its very end (tests/workerexit.py)
    workerexit.install(config)
    # pytest-xdist's --dist loadfile queues files by their number of tests, most first, unless told otherwise
    # (xdist/scheduler/loadscope.py, `loadscopereorder`, on by default in the 3.8.0 installed here): the parity
    # files, 2-7 tests each, then ran last and set the suite's wall time (seen 2026-12-07: 0.9.0's corpus started
    # ~25 minutes into a run under load 8). Off here, as --no-loadscope-reorder would set it, so that the order
    # pytest_collection_modifyitems sets holds (an explicit --loadscope-reorder is overridden too).
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    count: dict[str, int] = {}
    for item in items:
        count[str(item.path)] = count.get(str(item.path), 0) + 1
    # the long files start early and the short ones fill the end on both workers; stable within a file
    pos = {path: i for i, path in enumerate(file_order(count))}
    items.sort(key=lambda item: pos[str(item.path)])


# The cyclic garbage collector during collection and after it (issue #22). Collecting the fast lane imports every
# test module, torch and transformers in each xdist worker: ~390,000 objects that live to the end, which CPython's
# full collections (one each time the tracked heap grows by a quarter) walked 23 times, 3.2 CPU s per worker of the
# 14.6 its collection took, and every later full collection walked them again (5.9 CPU s of full collections per
# worker in all, 2026-12-07, gc.callbacks). None of them is garbage: the collector stays off while the modules
# import and what collection built is then frozen (gc.freeze: the collector skips those objects from then on;
# reference counting still frees them). Objects the tests create are collected as before, pytest's closing sweep
# for unraisable exceptions included.
# During the tests, the objects a worker keeps grow again from ~0 to 0.5-1 million (the modules torch, transformers
# and pandas import, module fixtures, caches), and a full collection came each time the old generation had grown
# by a quarter and ten middle-generation collections had passed (CPython's third threshold): 7-12 full collections
# per worker, 1.3-1.6 CPU s (2026-12-07, benchmarks/testcpu.py's gc.callbacks record). With the third threshold at
# 100 a full collection waits for 100 middle-generation ones: 2 per worker, 0.4-0.8 CPU s; young cycles are
# still collected by the first two generations as before (the largest process's peak RSS: 604-709 MB with it, 771-863
# MB on main, benchmarks/results/test_speed.md session 14). Only in the fast lane (`_slow_deselected`), where it was
# measured: the slow tests' memory under it was not.
_FULL_GC_EVERY = 100


@_pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    import gc

    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if _slow_deselected(session.config):
            gc.set_threshold(*gc.get_threshold()[:2], _FULL_GC_EVERY)
        if was_on:
            gc.enable()


# The fast lane's files whose tests import torch (and transformers, peft, deepspeed: each imports torch), found
# 2026-12-07 by running `-m "not slow and not gpu"` with those four packages refused at import: these files failed,
# errored or skipped, every other file passed. Each pytest-xdist worker that runs one of them pays the imports once
# (torch + transformers + numpy ~2.3 CPU s, transformers' modelling code and torch._dynamo on the first model build
# or `import peft` ~2.3 s more, deepspeed, benchmarks/results/test_speed.md); spread over both workers by
# --dist loadfile, both paid. A file missing here still runs: its worker then pays the imports too.
_TORCH_FILES = frozenset({
    "test_arch.py", "test_assumptions.py", "test_bytes.py", "test_cases.py", "test_catalog_entries.py",
    "test_catalog_glm.py", "test_catalog_pixtral.py", "test_catalog_qwen35.py", "test_ds_hostile.py",
    "test_dsconfig.py", "test_lora_dropout.py", "test_margin_replay.py", "test_memory_terms_upstream.py",
    "test_model_parity.py", "test_model_type_required.py", "test_modelcfg.py", "test_postmortem_cases.py",
    "test_postmortem_readers.py", "test_postmortem_timeline.py", "test_probe_calibration.py",
    "test_probe_pipeline.py", "test_probe_progress.py", "test_probe_replay.py", "test_probe_simulate.py",
    "test_probe_spec.py", "test_reserve_zero_depth.py", "test_rule_cases.py", "test_rules_null_facts.py",
    "test_savers_optimizers.py", "test_trial13.py", "test_zero3_ga_peak.py",
    # passes without torch, but reads flight-recorder dumps with torch's own analyzer when it is there
    # (readers/runlogs/flight.py `_analyze_with_torch`): the one file that still imported torch and numpy on the
    # other worker (benchmarks/testcpu.py's first-import record, 2026-12-07)
    "test_postmortem_sources.py"})
_TORCH_GROUP = "tests/<the files that import torch>"


def _slow_deselected(config) -> bool:
    """Whether the run's -m expression leaves out a test marked `slow` alone (the fast lane); False when it cannot
    tell."""
    expr = getattr(config.option, "markexpr", "") or ""
    if not expr:
        return False
    try:
        from _pytest.mark.expression import Expression
        return not Expression.compile(expr).evaluate(lambda name, **kw: name == "slow")
    except Exception:   # pytest's private expression API changed: schedule as xdist does
        return False


@_pytest.hookimpl(tryfirst=True, optionalhook=True)   # a hook of pytest-xdist: absent without it
def pytest_xdist_make_scheduler(config, log):
    """Under --dist loadfile in the fast lane, one work unit holds every file of `_TORCH_FILES` (in the order
    `file_order` gives them), so one worker imports torch and the other none. The whole suite keeps xdist's own
    per-file units: there the same files carry minutes of slow tests that must not queue behind each other."""
    if config.getvalue("dist") != "loadfile" or not _slow_deselected(config):
        return None
    from xdist.scheduler import LoadFileScheduling

    class _TorchOnOneWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return _TORCH_GROUP if Path(scope).name in _TORCH_FILES else scope

    return _TorchOnOneWorker(config, log)
