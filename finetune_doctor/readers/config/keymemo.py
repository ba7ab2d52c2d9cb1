"""The keys of LLaMA-Factory configs already found clean in this process, for readers/config/keyschema.py.

A lint of many configs asks about the same keys with the same values again and again (LLaMA-Factory's 95 examples:
~1,750 key checks, each through the 0.9.5/main schema, the release's key table and its closed choices; ~20 ms of
CPU per lint on a 2-core machine, issue #22). A key whose check found nothing is remembered with its value, per
schema table and judging context (release, parser, transformers version); the next config that sets the same key to
the same value skips the check. Only answers that read nothing but the key, its value and that context are kept:
`check_keys` adds a key only when no step found a problem (a problem, or a problem a release later drops, may read
the config's other keys, and is always checked anew).
"""

from __future__ import annotations

from typing import Any

_CLEAN: dict[tuple[Any, ...], tuple[Any, set[tuple[Any, ...]]]] = {}
_PLAIN = frozenset((str, int, float, bool, type(None)))
_MAX_CONTEXTS = 256   # distinct (schema, release, parser, transformers) contexts kept; past it the memo restarts


def clean_keys(schema: Any, release: Any, mode: str, tf_major: Any, tf_version: Any) -> set[tuple[Any, ...]]:
    """The set of `memo_key`s found clean under this context (one set per context; the caller adds to it). The
    schema is held beside its set, so an id reused by another table cannot answer for it."""
    ctx = (id(schema), release, mode, tf_major, tf_version)
    got = _CLEAN.get(ctx)
    if got is None or got[0] is not schema:
        if len(_CLEAN) >= _MAX_CONTEXTS:
            _CLEAN.clear()
        got = _CLEAN[ctx] = (schema, set())
    return got[1]


def memo_key(key: str, value: Any) -> tuple[Any, ...] | None:
    """(key, value's type, value) for a scalar value (the type keeps ``True`` apart from ``1`` and ``1.0``); None
    for a list or mapping, which is always checked."""
    return (key, value.__class__, value) if value.__class__ in _PLAIN else None
