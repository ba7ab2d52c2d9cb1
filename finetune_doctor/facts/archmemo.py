"""Each distinct model resolved once per lint: the scope `arch_memo` and the call `load_arch_once` that
facts/config.py `_arch` resolves a config's model through (pipeline/lint.py opens the scope around a lint).

A module of its own, free of the fact assembly, so that the lint pipeline can open the scope without importing
facts/config.py (an accelerate config's lint imports neither the run resolver nor the model readers,
tests/test_lazy_lint_imports.py).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.errors import InputError

_ARCH_MEMO: list[dict[tuple, Any]] = []
"""The model resolutions of the current `arch_memo()` scope (innermost last): empty outside one."""


class arch_memo:   # noqa: N801 - used as a `with` statement, like contextlib's lower-case managers
    """A scope (``with arch_memo(): ...``) in which `_arch` resolves each distinct model once: the lint of many
    configs (pipeline/lint.py `run`) names the same few models again and again (27 names in LLaMA-Factory's 95
    examples: 14 configs name Qwen/Qwen3-4B-Instruct-2507), and each resolution searches the local folders and
    the HF/ModelScope/openMind caches anew (~0.5 ms of CPU each on a loaded 2-core machine; the key holds every
    argument, the config's folder and template included, so 22 of those 83 resolutions are answered from the
    memo: ~5 ms of a lint's ~170 ms after start-up, issue #22). Within one command the files and
    the environment a resolution reads are taken as fixed, as every other fact of the command takes them; the
    scope ends with the command, so a library caller or a test that changes a cache between calls is unaffected."""

    def __enter__(self) -> "arch_memo":
        _ARCH_MEMO.append({})
        return self

    def __exit__(self, *exc: Any) -> None:
        _ARCH_MEMO.pop()


def load_arch_once(load_arch: Any, kw: dict[str, Any], assumptions: list[Any]) -> Any:
    """``load_arch(**kw, assumptions=...)``, answered from the current `arch_memo` scope when the same arguments
    were resolved in it: the same (arch, SourceDoc) pair (both frozen), the same assumptions appended to
    `assumptions`, or the same InputError raised again. Outside a scope, or with a context's config.json (a dict,
    not a key), it calls `load_arch` directly."""
    if not _ARCH_MEMO or kw.get("context_config") is not None:
        return load_arch(**kw, assumptions=assumptions)
    memo = _ARCH_MEMO[-1]
    key = tuple(sorted(kw.items()))
    got = memo.get(key)
    if got is None:
        mine: list[Any] = []
        try:
            got = ("ok", load_arch(**kw, assumptions=mine), tuple(mine))
        except InputError as err:
            got = ("err", err, tuple(mine))
        memo[key] = got
    assumptions.extend(got[2])
    if got[0] == "err":
        raise got[1].with_traceback(None)
    return got[1]
