"""The version of a distribution installed in the environment the doctor runs in, without importing it.

One home for every "which version is installed here" question (LLaMA-Factory's release, DeepSpeed's and
transformers' versions for the DeepSpeed checks): read from the ``<name>-<version>.dist-info`` folder names along
``sys.path``, the first one found winning as it does for ``importlib.metadata.version``. pip writes a dist-info for
every install, editable ones included (PEP 376, PEP 660), with the normalised name and the version in the folder
name (packaging's "Recording installed projects" spec). ``importlib.metadata`` itself is imported only when an
``.egg-info``/``.egg`` of the same name is seen (setuptools' develop installs name no version): it walks every
distribution's metadata and costs ~20 ms of start-up, a tenth of `doctor lint` on one file
(benchmarks/results/lint.md).
"""

from __future__ import annotations

import functools
import os
import sys


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


@functools.lru_cache(maxsize=256)
def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist` (any spelling: ``ruamel.yaml``, ``ruamel-yaml``), else None.

    One directory listing per ``sys.path`` entry and one answer per name, cached for the process (a lint of 95
    configs asks for llamafactory's 95 times). A broken metadata folder is no
    version (None), never an error: it is not the user's config problem.
    """
    want = _norm(dist)
    egg = False
    for entry in sys.path:
        for name in _listing(entry or "."):
            if name.endswith(".dist-info"):
                pkg, _, ver = name[: -len(".dist-info")].rpartition("-")
                if _norm(pkg) == want and ver:
                    return ver
            elif name.endswith((".egg-info", ".egg")) and _norm(name.split("-", 1)[0].rsplit(".egg", 1)[0]) == want:
                egg = True
    return _from_metadata(dist) if egg else None


def _from_metadata(dist: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:   # pragma: no cover - Python < 3.8
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None
    except Exception:   # a broken metadata folder is not the user's config problem
        return None


@functools.lru_cache(maxsize=64)
def _listing(path: str) -> tuple[str, ...]:
    try:
        return tuple(os.listdir(path))
    except OSError:
        return ()
