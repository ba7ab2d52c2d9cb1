"""Build finetune_doctor/catalog/lf_releases.json: what each LLaMA-Factory release reads, as data.

For every published release (the wheels ``pip download --no-deps llamafactory==X -d DIR`` writes) and the source
snapshot (``../shared/oracles/llamafactory-main``), it walks the Python syntax tree of LF's own files -- nothing is
imported, so no release's dependencies are needed:

* ``hparams/*.py``: every ``@dataclass`` field (not ``init=False``) with the class declaring it, its ``Literal``
  choices or the values of the ``Enum`` it is typed with (enums from ``extras/constants.py`` and the hparams files);
* ``data/template.py``: every ``register_template(name=...)`` / ``_register_template(name=...)``;
* ``hparams/parser.py``: the file suffixes ``read_args`` takes as a config file (``sys.argv[1].endswith(...)``):
  0.8.0-0.9.0 read ``.yaml`` and ``.json`` only, so ``llamafactory-cli train x.yml`` hands "x.yml" to the argument
  parser, which stops with "the following arguments are required: --output_dir" (hiyouga/LlamaFactory#5604);
  stored as ``config_suffixes`` {suffix: index ranges};
* whether the release ships v1 at all: a ``llamafactory/v1/`` package and ``USE_V1`` read by ``cli.py`` (the
  wheels from 0.9.4 on do; stored as ``v1.in``, index ranges like the keys');
* for the snapshot also ``v1/config/*.py`` (the v1 argument classes behind ``USE_V1=1``) and the plugin names v1
  registers (``v1/plugins``: ``@X.register("name")``).

Usage::

    mkdir -p /tmp/lfwheels && for v in 0.8.0 0.8.1 0.8.2 0.8.3 0.9.0 0.9.1 0.9.2 0.9.3 0.9.4 0.9.5; do
        pip download --no-deps -d /tmp/lfwheels llamafactory==$v; done
    python scripts/build_lf_releases.py /tmp/lfwheels ../shared/oracles/llamafactory-main

The output is compact: each key and template is listed once with the versions that have it as index ranges
("0-4,6") into ``versions``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterable

OUT = Path(__file__).resolve().parent.parent / "finetune_doctor" / "catalog" / "lf_releases.json"
CHOICE_KEYS_LIMIT = 40   # a key's choices are stored only when they are a short closed list


def _vkey(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", v.split("dev")[0].rstrip(".")))


def _enums(trees: Iterable[ast.Module]) -> dict[str, list[Any]]:
    """Enum classes (``class X(str, Enum)`` / ``StrEnum``) -> member values, from literal assignments."""
    out: dict[str, list[Any]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b) for b in node.bases}
            if not any("Enum" in b for b in bases):
                continue
            vals = []
            for st in node.body:
                if isinstance(st, ast.Assign) and isinstance(st.value, ast.Constant):
                    vals.append(st.value.value)
            if vals:
                out[node.name] = vals
    return out


def _literal_choices(ann: ast.expr, enums: dict[str, list[Any]]) -> list[Any] | None:
    """The closed list of values an annotation allows (Literal[...] or an enum), None for an open type."""
    found: list[Any] = []
    open_type = False
    for sub in ast.walk(ann):
        if isinstance(sub, ast.Subscript) and ast.unparse(sub.value).endswith("Literal"):
            sl = sub.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            found += [e.value for e in elts if isinstance(e, ast.Constant)]
        elif isinstance(sub, ast.Name) and sub.id in enums:
            found += enums[sub.id]
        elif isinstance(sub, ast.Name) and sub.id in ("str", "int", "float", "bool", "dict", "list", "Any"):
            open_type = True
    return found if found and not open_type else None


def _field_call(value: ast.expr | None) -> tuple[bool, Any]:
    """(init, default) of a dataclass field's right-hand side."""
    if value is None:
        return True, None
    if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("field"):
        init = True
        default: Any = None
        for kw in value.keywords:
            if kw.arg == "init" and isinstance(kw.value, ast.Constant):
                init = bool(kw.value.value)
            if kw.arg == "default":
                default = _const(kw.value)
        return init, default
    return True, _const(value)


def _const(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        text = ast.unparse(node)
        m = re.match(r"^[A-Za-z_]+\.([A-Z0-9_]+)$", text)   # an enum member: keep its name, lower-cased
        return m.group(1).lower() if m else None


def _dataclass_fields(trees: dict[str, ast.Module], enums: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """key -> {"cls", "choices", "default"} for every init field of every @dataclass in `trees`."""
    out: dict[str, dict[str, Any]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
                continue
            for st in node.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                    continue
                init, default = _field_call(st.value)
                if not init:
                    continue
                entry: dict[str, Any] = {"cls": node.name}
                ch = _literal_choices(st.annotation, enums)
                if ch and len(ch) <= CHOICE_KEYS_LIMIT:
                    entry["choices"] = ch
                if isinstance(default, (bool, int, float, str)) or default is None:
                    entry["default"] = default
                out.setdefault(st.target.id, entry)
    return out


def _templates(tree: ast.Module | None) -> list[str]:
    names: list[str] = []
    if tree is None:
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).lstrip("_") == "register_template":
            arg = next((kw.value for kw in node.keywords if kw.arg == "name"), node.args[0] if node.args else None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.append(arg.value)
    return sorted(set(names))


def _config_suffixes(tree: ast.Module | None) -> list[str]:
    """The suffixes hparams/parser.py tests the first argument for (``sys.argv[1].endswith(".yaml")``): the files
    ``read_args`` (``_parse_args`` before 0.9.1) loads as a config instead of handing them to the argument parser."""
    found: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "endswith"
                and "sys.argv[1]" in ast.unparse(node.func.value) and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return sorted(found)


def _read_release(files: dict[str, str]) -> dict[str, Any]:
    """One release from {relative path under llamafactory/: source text}."""
    parse = {p: ast.parse(t) for p, t in files.items()}
    hp = {p: t for p, t in parse.items() if p.startswith("hparams/")}
    enums = _enums([t for p, t in parse.items() if p.startswith(("hparams/", "extras/constants"))])
    return {"fields": _dataclass_fields(hp, enums), "templates": _templates(parse.get("data/template.py")),
            "suffixes": _config_suffixes(parse.get("hparams/parser.py"))}


def _wheel_files(whl: Path) -> tuple[str, dict[str, str], str, dict[str, str] | None]:
    """(version, {hparams/template/constants path: text}, sha256, the v1 sources as `_snapshot_files` takes them
    when the release ships v1 — a v1 package and USE_V1 in cli.py — else None)."""
    version = whl.name.split("-")[1]
    out = {}
    v1: dict[str, str] = {}
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        cli = z.read("llamafactory/cli.py").decode("utf-8") if "llamafactory/cli.py" in names else ""
        has_v1 = any(n.startswith("llamafactory/v1/") for n in names) and "USE_V1" in cli
        for n in names:
            if n.startswith("llamafactory/") and n.endswith(".py") and (
                    n.startswith("llamafactory/hparams/") or n in ("llamafactory/data/template.py",
                                                                   "llamafactory/extras/constants.py")):
                out[n[len("llamafactory/"):]] = z.read(n).decode("utf-8")
            parts = n.split("/")
            if has_v1 and n.startswith("llamafactory/v1/") and n.endswith(".py") and (
                    "config" in parts or "plugins" in parts or parts[-1] == "types.py"):
                v1[n[len("llamafactory/"):]] = z.read(n).decode("utf-8")
    return version, out, hashlib.sha256(whl.read_bytes()).hexdigest(), (v1 if has_v1 else None)


def _snapshot_files(root: Path) -> tuple[str, dict[str, str], dict[str, str]]:
    src = root / "src" / "llamafactory"
    v0 = {}
    for p in [*sorted((src / "hparams").glob("*.py")), src / "data" / "template.py", src / "extras" / "constants.py"]:
        v0[str(p.relative_to(src))] = p.read_text(encoding="utf-8")
    v1 = {str(p.relative_to(src)): p.read_text(encoding="utf-8")
          for p in sorted((src / "v1").rglob("*.py")) if "config" in p.parts or "plugins" in p.parts
          or p.name == "types.py"}
    m = re.search(r'(?m)^(?:__version__|VERSION)\s*=\s*"([^"]+)"', (src / "extras" / "env.py").read_text(encoding="utf-8"))
    return (m.group(1) if m else "main"), v0, v1


def _v1(files: dict[str, str]) -> dict[str, Any]:
    """The v1 argument classes' fields and the plugin names v1 registers, per plugin family."""
    parse = {p: ast.parse(t) for p, t in files.items()}
    cfg = {p: t for p, t in parse.items() if p.startswith("v1/config/")}
    enums = _enums(parse.values())
    fields = _dataclass_fields(cfg, enums)
    plugins: dict[str, set[str]] = {}
    for p, tree in parse.items():
        if not p.startswith("v1/plugins/"):
            continue
        for node in ast.walk(tree):
            # @KernelPlugin("liger_kernel").register() (0.9.5 on) or @PeftPlugin("lora").register (0.9.4): the
            # plugin class names the family
            reg = node.func if isinstance(node, ast.Call) else node
            if (isinstance(reg, ast.Attribute) and reg.attr == "register" and isinstance(reg.value, ast.Call)
                    and reg.value.args):
                a = reg.value.args[0]
                cls = ast.unparse(reg.value.func)
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and cls.endswith("Plugin"):
                    plugins.setdefault(cls, set()).add(a.value)
    return {"fields": fields, "plugins": {k: sorted(v) for k, v in sorted(plugins.items())}}


def _ranges(idx: list[int]) -> str:
    parts, start = [], None
    for i, x in enumerate(idx):
        if start is None:
            start = x
        if i + 1 == len(idx) or idx[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def build(wheel_dir: Path, snapshot: Path) -> dict[str, Any]:
    releases, with_v1 = [], []
    v1_by_release: dict[int, dict[str, Any]] = {}
    for whl in sorted(wheel_dir.glob("llamafactory-*.whl"), key=lambda p: _vkey(p.name.split("-")[1])):
        version, files, sha, v1_files = _wheel_files(whl)
        if v1_files is not None:
            with_v1.append(len(releases))
            v1_by_release[len(releases)] = _v1(v1_files)
        releases.append((version, _read_release(files), {"version": version, "from": f"PyPI {whl.name}",
                                                         "sha256": sha}))
    snap_version, v0, v1 = _snapshot_files(snapshot)
    if v1 and "USE_V1" in (snapshot / "src" / "llamafactory" / "cli.py").read_text(encoding="utf-8"):
        with_v1.append(len(releases))
        v1_by_release[len(releases)] = _v1(v1)
    commit = (snapshot.parent.parent / "reference" / "llamafactory" / "SNAPSHOT_COMMIT.txt")
    releases.append((snap_version, _read_release(v0), {
        "version": snap_version, "from": "LLaMA-Factory source snapshot (shared/oracles/llamafactory-main)",
        "commit": commit.read_text(encoding="utf-8").split()[0] if commit.is_file() else None}))
    versions = [v for v, _, _ in releases]
    keys: dict[str, dict[str, Any]] = {}
    templates: dict[str, list[int]] = {}
    suffixes: dict[str, list[int]] = {}
    for i, (_, rel, _) in enumerate(releases):
        for suf in rel["suffixes"]:
            suffixes.setdefault(suf, []).append(i)
        for k, e in rel["fields"].items():
            slot = keys.setdefault(k, {"in": [], "cls": e["cls"]})
            slot["in"].append(i)
            if "choices" in e:
                slot.setdefault("choices", {})[str(i)] = e["choices"]
            slot.setdefault("default", {})[str(i)] = e.get("default")
        for t in rel["templates"]:
            templates.setdefault(t, []).append(i)
    for k, slot in keys.items():
        slot["in"] = _ranges(slot["in"])
        # store only where a value changes between consecutive releases that have the key
        for what in ("choices", "default"):
            if what not in slot:
                continue
            compact, last = {}, object()
            for i in sorted(slot[what], key=int):
                if slot[what][i] != last:
                    compact[i] = last = slot[what][i]
            slot[what] = compact
    return {
        "schema": "finetune-doctor/lf-releases/v1",
        "generated_by": "scripts/build_lf_releases.py",
        "versions": versions,
        "sources": [s for _, _, s in releases],
        "keys": dict(sorted(keys.items())),
        "templates": {t: _ranges(i) for t, i in sorted(templates.items())},
        "config_suffixes": {x: _ranges(i) for x, i in sorted(suffixes.items())},
        "v1": {"version": snap_version, "in": _ranges(with_v1), **_v1(v1), **_v1_by_release(v1_by_release)},
    }


def _v1_by_release(per: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Which releases' v1 declares each field (``fields_in``) and registers each plugin (``plugins_in``), as index
    ranges: v1 changes between the releases that ship it (0.9.4 has no ``train_dataset``, 0.9.5 no ``cp_size``)."""
    fields: dict[str, list[int]] = {}
    plugins: dict[str, dict[str, list[int]]] = {}
    for i in sorted(per):
        for f in per[i]["fields"]:
            fields.setdefault(f, []).append(i)
        for fam, names in per[i]["plugins"].items():
            for n in names:
                plugins.setdefault(fam, {}).setdefault(n, []).append(i)
    return {"fields_in": {f: _ranges(i) for f, i in sorted(fields.items())},
            "plugins_in": {fam: {n: _ranges(i) for n, i in sorted(ns.items())} for fam, ns in sorted(plugins.items())}}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    data = build(Path(argv[0]), Path(argv[1]))
    OUT.write_text(json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {len(data['versions'])} versions, {len(data['keys'])} keys, "
          f"{len(data['templates'])} templates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
