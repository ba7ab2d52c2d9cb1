"""Process start-up of the console script: the methods of the project's dataclasses compiled once, not per run.

Why: ``dataclasses.dataclass`` writes the source of each generated method (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, the frozen ``__setattr__``/``__delattr__``) and compiles it with ``exec`` every time a class is
created (CPython ``Lib/dataclasses.py``, ``_create_fn`` in 3.10-3.12, ``_FuncBuilder.add_fns_to_class`` in 3.13:
one ``exec(txt, globals, ns)`` per call). `doctor lint` of one file creates ~60 of them at import, ~330 methods:
about a third of its start-up on a 2-core machine (benchmarks/results/lint.md). Bytecode caching (``__pycache__``)
does not cover that source, as it is built at run time.

`install()` gives the ``dataclasses`` module an ``exec`` of its own (a module global shadows the builtin): a source
seen before is executed from its cached code object, compiled exactly as ``exec`` would compile it (filename
``<string>``, no ``__future__`` flags inherited), so every class and method is the same as without the cache.
Code objects live in one marshal file in the doctor's cache folder (`fsutil.cache_dir`, off with
FINETUNE_DOCTOR_NO_CACHE=1), keyed by the interpreter's bytecode tag and the ``dataclasses`` module file, like the
rule expressions' cache (engine/expr.py); each entry names the module of its class, and a save keeps only what the
package still generates (`_current`), so the file cannot outgrow the package's own dataclasses. Only the console
script installs it (`__main__.entry`): the process is the doctor's own, and a library user's interpreter is left
untouched.

Regular expressions are the same kind of cost: ``re.compile`` parses a pattern and builds its matcher's code in
Python on every start (``re/_compiler.py`` ``compile``: ``_parser.parse``, ``_code``, then ``_sre.compile``), and
PyYAML's reader alone compiles one large Unicode class at import (~5-9 ms of a one-file lint on this 2-core
machine; about 60 patterns, ~19 ms in all, benchmarks/results/lint.md). `install()` also keeps, per pattern string
and flags, the arguments ``_compiler.compile`` hands to ``_sre.compile`` (the code list, flags, groups, group
names) in a second marshal file keyed by the bytecode tag and ``re/_compiler.py``; a pattern seen before is built
by ``_sre.compile`` from them directly, which is what ``_compiler.compile`` ends with, so the Pattern is the same
object it would build. Patterns with the DEBUG flag, bytes or non-string patterns, and interpreters whose ``re``
lacks these internals go through unchanged.

`doctor lint` keeps both caches in files of its own (``lint-`` before the name, `install(family="lint")`): a
pre-commit hook is the start-up that must be short, and a file shared with `check`, `postmortem` and the probes
holds every class and pattern they ever built (on this machine 765 sources and 543 patterns, 2.5 MB, ~9.5 ms of
CPU to read at each start) where a lint executes ~410 and ~100 of them (0.7 MB, ~3.2 ms; issue #22).
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any

_CACHE: dict[str, Any] = {}     # generated source -> code object, from the file and this process
_MOD: dict[str, str] = {}       # generated source -> the project module whose class it was generated for
_NEW = 0                        # sources compiled in this process and not in the file yet
_USED: set[str] = set()         # sources this process executed (what a full file keeps)
_MAX = 8192                     # entries; past it the file restarts from this process's sources
_STATE: dict[str, Any] = {"path": None, "installed": False, "re_path": None, "re_compile": None, "family": ""}
_RE: dict[tuple[str, int], tuple[Any, ...]] = {}   # (pattern, flags) -> _sre.compile's other arguments
_RE_NEW = [0]                                       # patterns compiled in this process and not in the file yet
_RE_MAX = 4096                                      # entries; past it the file is not grown


def _cache_file() -> Any:
    """The cache file's Path, or None when caching is off or ``dataclasses`` has no file to key on."""
    from finetune_doctor.fsutil import cache_dir

    base = cache_dir()
    if base is None:
        return None
    import dataclasses

    try:
        st = os.stat(dataclasses.__file__)
    except (OSError, TypeError, AttributeError):   # a frozen or zipped stdlib: nothing to key on, no cache
        return None
    tag = f"{sys.implementation.cache_tag}-{st.st_size}-{st.st_mtime_ns}"
    return base / f"{_STATE['family']}dataclass-code-{tag}.marshal"


def _exec(source: Any, globals_: Any = None, locals_: Any = None, /, **kw: Any) -> None:
    """``exec`` as ``dataclasses`` calls it; a str source compiles once per cache, anything else goes through."""
    global _NEW
    if not isinstance(source, str) or kw:
        return builtins.exec(source, globals_, locals_, **kw)
    # dont_inherit: a str given to exec here would inherit this module's `from __future__ import annotations`;
    # compiled apart, the generated methods' annotations stay objects, as with the builtin exec in dataclasses.py
    if not _ours(globals_):
        return builtins.exec(compile(source, "<string>", "exec", dont_inherit=True), globals_, locals_)
    _USED.add(source)
    _MOD[source] = globals_["__name__"]
    code = _CACHE.get(source)
    if code is None:
        code = compile(source, "<string>", "exec", dont_inherit=True)
        _CACHE[source] = code
        _NEW += 1
    return builtins.exec(code, globals_, locals_)


def _ours(globals_: Any) -> bool:
    """Whether the class being built is the project's: the methods of other packages' dataclasses (transformers
    defines hundreds once a probe imports it) stay uncached, so the file lint reads at start-up stays small."""
    name = globals_.get("__name__") if isinstance(globals_, dict) else None
    return isinstance(name, str) and (name == "finetune_doctor" or name.startswith("finetune_doctor."))


def install(family: str = "") -> None:
    """Read the cache file and give ``dataclasses`` the caching ``exec``; idempotent, never raises. `family`
    ``"lint"`` reads and writes the files of `doctor lint` alone (see the module docstring); ``""`` the shared ones."""
    if _STATE["installed"]:
        return
    _STATE["family"] = f"{family}-" if family else ""
    if family == "lint":
        _defer_inspect()
    import dataclasses
    import marshal
    from types import CodeType

    path = _cache_file()
    if path is not None:
        try:
            data = marshal.loads(path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            data = None
        if isinstance(data, dict):
            for k, v in data.items():   # source -> (code, module); a file of another layout is read as empty
                if isinstance(k, str) and isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], CodeType) \
                        and isinstance(v[1], str):
                    _CACHE[k], _MOD[k] = v
    _STATE["path"] = path
    dataclasses.exec = _exec   # type: ignore[attr-defined]
    _install_re(path)
    _STATE["installed"] = True


class _DeferredModule(type(sys)):   # type: ignore[misc]
    """A stand-in in ``sys.modules`` for a module not imported yet. It answers only what the import system asks of a
    module already in ``sys.modules`` (``__name__``; ``__spec__``, which ``import x`` reads to see whether the module
    is still initializing: CPython 3.11 ``Python/import.c`` ``import_ensure_initialized``; the real module's spec,
    found without executing it, so ``importlib.util.find_spec`` and ``reload`` see the real file). Every other
    attribute, dunders included (``__doc__``, ``__file__``, ``__loader__``, ``__path__``, ``__all__``) and ``dir()``,
    imports the real module, which takes the stand-in's place in ``sys.modules``; the stand-in then forwards every
    lookup and assignment to it. Fail safe: whatever the stand-in does not know comes from the real module."""

    _LOCAL = frozenset({"__dict__", "__class__", "__name__", "__spec__"})

    def __getattribute__(self, name: str) -> Any:
        d = object.__getattribute__(self, "__dict__")
        real = d.get("_real")
        if real is not None:
            return getattr(real, name)
        if name == "__spec__":
            return _DeferredModule._spec(d)
        if name in _DeferredModule._LOCAL:
            return object.__getattribute__(self, name)
        return getattr(_DeferredModule._load(self), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(_DeferredModule._load(self), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(_DeferredModule._load(self), name)

    def __dir__(self) -> list[str]:
        return dir(_DeferredModule._load(self))

    def __repr__(self) -> str:
        return repr(_DeferredModule._load(self))

    @staticmethod
    def _spec(d: dict[str, Any]) -> Any:
        """The real module's ModuleSpec (the path finder's answer, cached; no module code runs), else None."""
        spec = d.get("_spec")
        if spec is None:
            import importlib.machinery

            spec = importlib.machinery.PathFinder.find_spec(d["__name__"])
            d["_spec"] = spec
        return spec

    @staticmethod
    def _load(stand_in: Any) -> Any:
        """Import the real module in the stand-in's place (once) and return it."""
        d = object.__getattribute__(stand_in, "__dict__")
        real = d.get("_real")
        if real is None:
            import importlib

            name = d["__name__"]
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
            real = importlib.import_module(name)
            d["_real"] = real
        return real


def _defer_inspect() -> None:
    """Let ``dataclasses`` import without ``inspect`` (with ``dis``, ``tokenize``, ``linecache``: ~5 ms of a lint's
    start-up on a 2-core machine, issue #22): ``dataclasses`` imports it at its top but calls it only for a class
    without a docstring (``inspect.signature`` builds the ``__doc__``; CPython 3.10-3.13 ``Lib/dataclasses.py``
    ``_process_class``), and none of the classes a lint builds lacks one. A ``_DeferredModule`` stands in until
    something reads an attribute of it; whoever imports ``inspect`` after that gets the real module. A no-op once
    ``inspect`` or ``dataclasses`` is imported."""
    if "inspect" in sys.modules or "dataclasses" in sys.modules:
        return
    sys.modules["inspect"] = _DeferredModule("inspect")


def _install_re(dc_path: Any) -> None:
    """Give ``re._compiler`` the caching `_re_compile` (see the module docstring); a no-op where ``re`` lacks the
    internals it needs or caching is off (`dc_path` None)."""
    import marshal

    comp = sys.modules.get("re._compiler")
    if dc_path is None or comp is None or not all(hasattr(comp, n) for n in ("_code", "_parser", "_sre", "compile")):
        return
    try:
        st = os.stat(comp.__file__)
    except (OSError, TypeError, AttributeError):
        return
    tag = f"{sys.implementation.cache_tag}-{st.st_size}-{st.st_mtime_ns}"
    path = dc_path.parent / f"{_STATE['family']}re-code-{tag}.marshal"
    try:
        data = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        data = None
    if isinstance(data, dict):
        _RE.update((k, v) for k, v in data.items() if isinstance(k, tuple) and isinstance(v, tuple) and len(v) == 5)
    _STATE["re_path"], _STATE["re_compile"] = path, comp.compile
    comp.compile = _re_compile


_RE_PACKAGES = frozenset({"finetune_doctor", "yaml", "ruamel", "click", "rich", "simpleeval"})


def _re_ours(frame: Any) -> bool:
    """Whether the pattern being compiled is the project's, its lint-path libraries' or the standard library's (the
    first caller outside ``re``): patterns of torch or transformers (hundreds once a probe imports them) are not
    kept, so the file every start-up reads stays small, as the dataclass cache keeps only the project's classes."""
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] == "re":
        frame = frame.f_back
    if frame is None:
        return False
    name = str(frame.f_globals.get("__name__", ""))
    if name.split(".")[0] in _RE_PACKAGES:
        return True
    path = str(frame.f_globals.get("__file__") or "")
    stdlib = os.path.dirname(os.__file__)
    return path.startswith(stdlib + os.sep) and "site-packages" not in path


def _re_compile(p: Any, flags: int = 0) -> Any:
    """``re._compiler.compile`` with the arguments of ``_sre.compile`` kept per (pattern, flags) string pattern."""
    comp = sys.modules["re._compiler"]
    if type(p) is not str or type(flags) is not int or flags & comp.SRE_FLAG_DEBUG:
        return _STATE["re_compile"](p, flags)
    args = _RE.get((p, flags))
    if args is None:
        parsed = comp._parser.parse(p, flags)
        code = comp._code(parsed, flags)
        groupindex = dict(parsed.state.groupdict)
        indexgroup: list[Any] = [None] * parsed.state.groups
        for k, i in groupindex.items():
            indexgroup[i] = k
        # the code holds int subclasses (re._constants._NamedIntConstant): plain ints, as _sre reads them, marshal
        args = (int(flags | parsed.state.flags), [int(c) for c in code], int(parsed.state.groups - 1), groupindex,
                tuple(indexgroup))
        if len(_RE) < _RE_MAX and _re_ours(sys._getframe(1)):
            _RE[(p, flags)] = args
            _RE_NEW[0] += 1
    return comp._sre.compile(p, args[0], args[1], args[2], args[3], args[4])


def uninstall() -> None:
    """Give ``dataclasses`` back the builtin ``exec`` (tests; the console script keeps the cache to its end)."""
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        del dataclasses.exec   # type: ignore[attr-defined]
    comp = sys.modules.get("re._compiler")
    if comp is not None and getattr(comp, "compile", None) is _re_compile:
        comp.compile = _STATE["re_compile"]
    _STATE["installed"] = False


def save() -> None:
    """Write the sources compiled in this process into the cache file; best effort (a read-only or full disk
    leaves the file as it was, never an error). The console script calls it once the command is done."""
    global _NEW
    _save_re()
    path = _STATE["path"]
    if not _NEW or path is None:
        return
    import marshal

    from finetune_doctor.errors import InputError
    from finetune_doctor.fsutil import prune_cache, write_bytes

    data = {k: (v, _MOD.get(k, "")) for k, v in _CACHE.items() if _current(k)}
    if len(data) > _MAX:
        data = {k: v for k, v in data.items() if k in _USED}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        write_bytes(str(path), marshal.dumps(data))
        if fresh:   # a new file: another interpreter or dataclasses.py
            prune_cache(path, f"{_STATE['family']}dataclass-code-")
    except (InputError, OSError, ValueError):
        return
    _NEW = 0


def _current(source: str) -> bool:
    """Whether a cached source is one the package as installed still generates, so that the file holds at most what
    the package defines (it grew across versions, 456 entries where a lint uses ~410, issue #22): a source this
    process executed is; one of a module this process imported but did not execute is stale (every project
    dataclass is built at its module's import: none is nested in a function); one of a module with no file in the
    package is gone; one of a module this process did not import is kept for the command that imports it."""
    if source in _USED:
        return True
    mod = _MOD.get(source, "")
    if mod in sys.modules:
        return False
    parts = mod.split(".")
    if parts[0] != "finetune_doctor":
        return False
    base = os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts[1:])
    return os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))


def _save_re() -> None:
    """Write the patterns compiled in this process into the regular-expression cache file; best effort."""
    path = _STATE["re_path"]
    if not _RE_NEW[0] or path is None:
        return
    import marshal

    from finetune_doctor.errors import InputError
    from finetune_doctor.fsutil import prune_cache, write_bytes

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        write_bytes(str(path), marshal.dumps(_RE))
        if fresh:
            prune_cache(path, f"{_STATE['family']}re-code-")
    except (InputError, OSError, ValueError):
        return
    _RE_NEW[0] = 0
