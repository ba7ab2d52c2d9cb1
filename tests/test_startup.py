"""startup.py: the dataclass methods compiled once and cached give the same classes as dataclasses alone."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pkgast
from finetune_doctor import startup

ROOT = Path(__file__).resolve().parent.parent


_SRC = """
import dataclasses

@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: float = 0.5
    tags: tuple = dataclasses.field(default_factory=tuple, compare=False)
"""


def _make(module: str = "finetune_doctor._test_point"):
    """Point built in a fresh module named `module` (no __future__ import: annotations are objects); dataclasses
    hands the generated methods the globals of the class's module when sys.modules holds it."""
    import types

    mod = types.ModuleType(module)
    sys.modules[module] = mod
    try:
        exec(compile(_SRC, "<point>", "exec", dont_inherit=True), mod.__dict__)
    finally:
        del sys.modules[module]
    return mod.Point


def test_cached_exec_builds_the_same_class(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE", raising=False)
    plain = _make()
    startup.install()
    try:
        before = len(startup._CACHE)
        cached = _make()
        ours = len(startup._CACHE)
        foreign = _make("somebody_else")
        assert dataclasses.exec is startup._exec
        # the project's class went through the cache (unless an earlier test cached the same sources); another
        # package's did not
        assert ours >= before and any("def __init__(self,x:" in k for k in startup._CACHE)
        assert len(startup._CACHE) == ours
    finally:
        startup.uninstall()
    assert not hasattr(dataclasses, "exec")
    p, q = plain(1), cached(1)
    assert repr(p) == repr(q) and repr(q).endswith("Point(x=1, y=0.5, tags=())")
    assert q == cached(1, 0.5, ("other",)) and hash(q) == hash(cached(1)) and q != cached(2)
    # the generated __init__'s annotations are objects, as without the cache (no __future__ flag inherited)
    assert cached.__init__.__annotations__ == plain.__init__.__annotations__ == foreign.__init__.__annotations__
    assert plain.__init__.__annotations__["x"] is int
    try:
        q.x = 3
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("frozen")
    assert dataclasses.replace(q, x=5).x == 5 and [f.name for f in dataclasses.fields(q)] == ["x", "y", "tags"]


def test_cache_file_is_written_and_read_back(tmp_path):
    """A second process finds every method source in the file and compiles none."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FINETUNE_DOCTOR_NO_CACHE", None)
    code = ("from finetune_doctor import startup; startup.install()\n"
            "import finetune_doctor.types, finetune_doctor.run.model\n"
            "print(startup._NEW); startup.save()\n")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(first.stdout) > 20
    assert len(list((tmp_path / "finetune-doctor").glob("dataclass-code-*.marshal"))) == 1
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(second.stdout) == 0
    off = subprocess.run([sys.executable, "-c", code], env={**env, "FINETUNE_DOCTOR_NO_CACHE": "1"},
                         capture_output=True, text=True, check=True)
    assert int(off.stdout) == int(first.stdout)


def test_only_the_projects_classes_are_cached(tmp_path):
    """A dataclass of another package (transformers has hundreds) is built by the builtin exec, not cached."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FINETUNE_DOCTOR_NO_CACHE", None)
    code = ("from finetune_doctor import startup; startup.install()\n"
            "import dataclasses, json.decoder\n"
            "@dataclasses.dataclass(frozen=True)\nclass Outside:\n    a: int = 1\n"
            "print(startup._NEW, Outside(2) == Outside(2), repr(Outside()))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "True", "Outside(a=1)"]


_PATTERNS = [(r"(?P<year>\d{4})-(?P<month>\d\d)(?:-(?P<day>\d\d))?", 0), (r"^\s*v?(\d+)\.(\d+)", 0),
             ("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]", 0),
             (r"lora_(rank|alpha)\b", 2), (r"(?x) a  b # spaced\n", 0), (r"(?i)ZeRO-?(\d)", 0)]


def _compiled_in(module: str, pattern: str, flags: int):
    """``re.compile(pattern, flags)`` called from a module named `module` (whose patterns the cache keeps or not)."""
    import types

    mod = types.ModuleType(module)
    exec(compile("import re\nP = re.compile(PAT, FLAGS)\n", "<re>", "exec"), {**mod.__dict__, "PAT": pattern,
                                                                              "FLAGS": flags}, ns := {})
    return ns["P"]


def test_cached_regex_is_the_pattern_re_builds(tmp_path, monkeypatch):
    """A pattern built from the cached arguments of ``_sre.compile`` equals the one ``re`` builds (Pattern's own
    ``==`` compares pattern, flags and the matcher's code), with the same groups and names, in this process and,
    read back from the file, in the next one."""
    import re

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE", raising=False)
    plain = {(p, f): re.compile(p, f) for p, f in _PATTERNS}
    startup.install()
    try:
        for (p, f), want in plain.items():
            re.purge()
            got = _compiled_in("finetune_doctor._test_re", p, f)
            assert got is not want and got == want
            assert (got.groups, dict(got.groupindex), got.flags) == (want.groups, dict(want.groupindex), want.flags)
            assert (p, f) in startup._RE
        assert re.compile(b"bytes (pass) through").groups == 1   # not cached: only str patterns are
        # another package's patterns (torch compiles hundreds once a probe imports it) are built, not kept
        assert _compiled_in("torch._test_re", r"torch_only_(\d+)", 0).match("torch_only_7").group(1) == "7"
        assert (r"torch_only_(\d+)", 0) not in startup._RE
        m = re.compile(_PATTERNS[0][0]).match("2026-12")
        assert m is not None and m.group("year", "month", "day") == ("2026", "12", None)
        startup.save()
    finally:
        startup.uninstall()
    import re._compiler as comp

    assert comp.compile is not startup._re_compile
    files = list((tmp_path / "finetune-doctor").glob("re-code-*.marshal"))
    assert len(files) == 1
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FINETUNE_DOCTOR_NO_CACHE", None)
    code = ("import re; from finetune_doctor import startup; startup.install()\n"
            f"pats = {_PATTERNS!r}\n"
            "got = [re.compile(p, f) for p, f in pats]   # hits: read from the file, whoever asks\n"
            "plain = [startup._STATE['re_compile'](p, f) for p, f in pats]   # re's own compiler\n"
            "print(startup._RE_NEW[0], got == plain)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "True"]


def test_bundled_json_reads_a_marshal_copy_and_falls_back_to_the_json(tmp_path, monkeypatch):
    """fsutil.bundled_json: the JSON's own data, from the copy once written; a copy for another version of the
    file or a broken copy is never used."""
    import json

    from finetune_doctor.fsutil import bundled_json

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE", raising=False)
    src = tmp_path / "keys.json"
    src.write_text(json.dumps({"keys": {"lora_rank": {"type": "int"}}, "n": [1, 2.5, None, True]}))
    assert bundled_json(str(src)) == json.loads(src.read_text())
    copies = list((tmp_path / "cache" / "finetune-doctor").glob("json-*.marshal"))
    assert len(copies) == 1
    assert bundled_json(str(src)) == json.loads(src.read_text())
    src.write_text(json.dumps({"keys": {}, "n": [3]}))   # a new size: the old copy's key no longer matches
    assert bundled_json(str(src)) == {"keys": {}, "n": [3]}
    for copy in (tmp_path / "cache" / "finetune-doctor").glob("json-*.marshal"):
        copy.write_bytes(b"\x00not marshal")
    assert bundled_json(str(src)) == {"keys": {}, "n": [3]}
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_CACHE", "1")
    assert bundled_json(str(src)) == {"keys": {}, "n": [3]}


def test_every_project_dataclass_has_a_docstring():
    """``dataclasses`` gives a class without a docstring one built by ``inspect.signature`` when the class is
    created, at every start-up (0.05-8 ms each, issue #22: settings.Options cost a one-file lint 8 ms at load 9)."""
    import ast

    found = []
    for path in sorted((ROOT / "finetune_doctor").rglob("*.py")):
        for node in pkgast.nodes(path):   # parsed once per test process (pkgast.py)
            if isinstance(node, ast.ClassDef) and any(
                    "dataclass" in ast.unparse(d).split("(")[0] for d in node.decorator_list) \
                    and ast.get_docstring(node) is None:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert found == []


def test_prune_cache_keeps_the_written_file_the_newest_and_the_fresh(tmp_path, monkeypatch):
    """fsutil.prune_cache bounds one family of the cache folder (issue #22: 587 stale rule packs, 72 MB): the file
    just written, the `keep` - 1 newest others and any written in the last CACHE_FRESH_S seconds stay; older ones
    of the family and legacy-format files go; other families are not touched."""
    from finetune_doctor import fsutil

    now = 1_900_000_000.0
    monkeypatch.setattr("time.time", lambda: now)
    for i in range(10):   # rules-0 oldest (10 h ago) ... rules-9 newest (1 h ago)
        f = tmp_path / f"rules-{i:08x}.marshal"
        f.write_bytes(b"x")
        os.utime(f, (now - 3600 * (10 - i),) * 2)
    fresh = tmp_path / "rules-fresh.marshal"
    fresh.write_bytes(b"x")
    os.utime(fresh, (now - 60,) * 2)
    old = tmp_path / "rules-0123456789abcdef0123.json"   # a pack of the JSON format no longer written
    old.write_bytes(b"{}")
    other = tmp_path / "json-00000000.marshal"
    other.write_bytes(b"x")
    os.utime(other, (now - 10 ** 6,) * 2)
    written = tmp_path / "rules-00000000.marshal"   # the oldest of the family, just rewritten: kept all the same
    fsutil.prune_cache(written, "rules-", keep=3, legacy=(("rules-", ".json"),))
    left = sorted(p.name for p in tmp_path.iterdir())
    # keep=3: the written file and the two newest others (the fresh one and rules-9)
    assert left == ["json-00000000.marshal", "rules-00000000.marshal", "rules-00000009.marshal",
                    "rules-fresh.marshal"]
    for i in range(4):   # files written in the last CACHE_FRESH_S seconds stay whatever their number
        (tmp_path / f"rules-new{i}.marshal").write_bytes(b"x")
        os.utime(tmp_path / f"rules-new{i}.marshal", (now - i,) * 2)
    fsutil.prune_cache(written, "rules-", keep=3)
    assert sorted(p.name for p in tmp_path.glob("rules-*")) == sorted([
        "rules-00000000.marshal", "rules-fresh.marshal", *(f"rules-new{i}.marshal" for i in range(4))])


def test_a_new_rule_pack_prunes_stale_ones(tmp_path, monkeypatch):
    """The rule loader writes a pack for a changed rule directory and removes packs past the bound, old JSON ones
    included, so the cache folder does not grow with every edit (issue #22)."""
    from finetune_doctor.engine import loader

    cache = tmp_path / "cache" / "finetune-doctor"
    cache.mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for i in range(20):
        f = cache / f"rules-{i:08x}.marshal"
        f.write_bytes(b"stale")
        os.utime(f, (1_000_000_000 + i,) * 2)
    (cache / "rules-00112233445566778899.json").write_text("{}")
    loader._load_dir.cache_clear()
    try:
        loader._load_dir(str(ROOT / "rules"))
    finally:
        loader._load_dir.cache_clear()
    packs = sorted(p.name for p in cache.glob("rules-*"))
    from finetune_doctor.fsutil import CACHE_KEEP

    assert len(packs) == CACHE_KEEP
    assert not list(cache.glob("rules-*.json"))
    assert packs[:-1] == [f"rules-{i:08x}.marshal" for i in range(20 - CACHE_KEEP + 1, 20)]


def test_lint_keeps_caches_of_its_own(tmp_path):
    """`install("lint")` reads and writes ``lint-`` files only: what other commands cached is not read at a lint's
    start, and a lint's classes are found by the next lint (issue #22)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FINETUNE_DOCTOR_NO_CACHE", None)

    def run(family: str) -> int:
        code = (f"from finetune_doctor import startup; startup.install({family!r})\n"
                "import json.decoder\n"   # its patterns are the standard library's, which the cache keeps
                "import finetune_doctor.types\nprint(startup._NEW); startup.save()\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return int(out.stdout)

    shared = run("")
    folder = tmp_path / "finetune-doctor"
    assert shared > 10 and not list(folder.glob("lint-*"))
    assert run("lint") == shared            # the shared file is not the lint's: compiled again
    assert len(list(folder.glob("lint-dataclass-code-*.marshal"))) == 1
    assert len(list(folder.glob("lint-re-code-*.marshal"))) == 1
    assert len(list(folder.glob("dataclass-code-*.marshal"))) == 1   # the lint's file pruned none of the shared
    assert run("lint") == 0 and run("") == 0


def test_lint_defers_inspect_until_something_reads_it(tmp_path):
    """`install("lint")` imports ``dataclasses`` without ``inspect`` (issue #22): a lint of LLaMA-Factory's example
    configs never reads it (every project dataclass has a docstring, test above); a class without a docstring still
    gets the ``__doc__`` ``inspect.signature`` writes, and whoever imports ``inspect`` then gets the real module."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    code = ("import sys\nfrom finetune_doctor import startup; startup.install('lint')\n"
            "from finetune_doctor.pipeline import lint\nfrom finetune_doctor.settings import Options\n"
            f"files = sorted(str(p) for p in __import__('pathlib').Path({str(ROOT / 'fixtures/llamafactory/examples')!r})"
            ".rglob('*.yaml'))\n"
            "report = lint.run(files, Options(command='lint'), jobs=1)\n"
            "print(len(files), len(report.findings) > 0, 'signature' in vars(sys.modules['inspect']))\n"
            "import dataclasses\n@dataclasses.dataclass\nclass Bare:\n    x: int\n    y: str = 'a'\n"
            "import inspect\nprint(Bare.__doc__, inspect is sys.modules['inspect'], inspect.signature(Bare))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    first, second = out.stdout.splitlines()
    assert first == "30 True False"
    assert second == "Bare(x: int, y: str = 'a') True (x: int, y: str = 'a') -> None"


def test_rule_listing_is_what_pathlib_glob_and_stat_give(tmp_path):
    """engine/loader.py `_listing` (one scandir, issue #22) keys the rule-pack cache exactly as the glob and the
    stat of each file did: hidden files and names that only end in .yaml included, other suffixes left out."""
    from finetune_doctor.engine import loader

    for name, text in (("b-rule.yaml", "x: 1\n"), (".hidden.yaml", "y: 2\n"), ("a.yaml", ""), ("c.yml", "z\n"),
                       ("notes.yaml.bak", "")):
        (tmp_path / name).write_text(text)
    (tmp_path / "sub.yaml").mkdir()
    old = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(tmp_path.glob("*.yaml"))]
    assert loader._listing(str(tmp_path)) == old
    assert [n for n, _s, _m in old] == [".hidden.yaml", "a.yaml", "b-rule.yaml", "sub.yaml"]
    bundled = loader.bundled_rules_dir()
    assert loader._listing(str(bundled)) == [(p.name, p.stat().st_size, p.stat().st_mtime_ns)
                                              for p in sorted(bundled.glob("*.yaml"))]


@pytest.mark.parametrize("path", ["rules/a-b.yaml", "/x/.hidden.yaml", "a.b.yaml", "noext", "/x/rule.yaml/",
                                  "x/..yaml", "x/.yaml", "a.", ".", "..", "/", "a/.", "x/a.yaml.yaml", "x/a.YAML"])
def test_rule_stem_is_pathlibs(path):
    """engine/loader.py `_stem`: the rule file's name check reads what ``Path(path).stem`` gives (issue #22)."""
    from finetune_doctor.engine import loader

    assert loader._stem(path) == Path(path).stem


_ASKS = ["m.__doc__", "m.__file__", "m.__loader__.name", "m.__package__", "m.__all__ if hasattr(m, '__all__') else 0",
         "sorted(dir(m))[:3]", "'signature' in dir(m)", "m.signature(len)", "m.__spec__.origin",
         "__import__('importlib.util').util.find_spec('inspect').origin", "hasattr(m, '__path__')",
         "m.isfunction(m.getmembers)", "m.getsource(m.ismodule).split('(')[0]", "repr(m)"]


@pytest.mark.parametrize("ask", _ASKS)
def test_the_inspect_stand_in_answers_as_the_real_module(ask):
    """The stand-in `_defer_inspect` puts in ``sys.modules`` is fail safe (issue #22): any attribute it does not
    hold itself, dunders and ``dir()`` included, imports the real ``inspect``; so every question asked of it gets the
    real module's answer, and the real module then sits in ``sys.modules``."""
    code = ("import sys\nfrom finetune_doctor import startup\n"
            "real = __import__('inspect'); del sys.modules['inspect']\n"
            "m = startup._DeferredModule('inspect'); sys.modules['inspect'] = m\n"
            f"got = {ask}\n"
            "loaded = sys.modules['inspect'] is not m and type(sys.modules['inspect']).__name__ == 'module'\n"
            "import inspect as again\n"
            f"m = real\nwant = {ask}\n"
            "print(repr(got) == repr(want), loaded or 'origin' in " + repr(ask) + ", again is not None)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"], out.stdout


def test_import_of_a_deferred_module_does_not_load_it():
    """``import inspect`` while the stand-in sits in ``sys.modules`` reads only its ``__spec__`` (the real module's,
    found without running it): the deferral the lint's start-up saves ~5 ms with still holds."""
    code = ("import sys\nfrom finetune_doctor import startup\nstartup._defer_inspect()\n"
            "import dataclasses, inspect\nfrom importlib import util\n"
            "print(type(sys.modules['inspect']).__name__, 'signature' in vars(sys.modules['inspect']), "
            "util.find_spec('inspect').origin.endswith('inspect.py'), "
            "type(sys.modules['inspect']).__name__)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["_DeferredModule", "False", "True", "_DeferredModule"]


def test_the_dataclass_cache_keeps_only_what_the_package_generates(tmp_path):
    """The dataclass-code file grew across versions (937 kB, 456 entries, issue #22): a save now keeps a source only
    while the package still generates it. A source of a module the process imported but did not execute (its class
    changed), or of a module the package no longer has, is dropped; one of a module not imported this time stays for
    the command that imports it; the file then holds exactly the sources the package builds."""
    import marshal

    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FINETUNE_DOCTOR_NO_CACHE", None)
    code = ("from finetune_doctor import startup; startup.install()\n"
            "import finetune_doctor.types\nprint(startup._NEW); startup.save()\n")

    def run() -> int:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return int(out.stdout)

    first = run()
    (path,) = (tmp_path / "finetune-doctor").glob("dataclass-code-*.marshal")
    clean = marshal.loads(path.read_bytes())
    assert len(clean) == first > 10 and {m for _, m in clean.values()} == {"finetune_doctor.types"}
    stale = compile("x = 1", "<string>", "exec")
    data = dict(clean)
    dropped = next(iter(data))
    del data[dropped]                                      # types.py "changed": one source is new ...
    data["def __init__(self, old): pass"] = (stale, "finetune_doctor.types")          # ... and one is stale
    data["def __init__(self, gone): pass"] = (stale, "finetune_doctor.no_such_module")
    data["def __init__(self, later): pass"] = (stale, "finetune_doctor.probes.zerotrace")
    path.write_bytes(marshal.dumps(data))
    assert run() == 1
    after = marshal.loads(path.read_bytes())
    assert set(after) == set(clean) | {"def __init__(self, later): pass"}
    assert run() == 0
