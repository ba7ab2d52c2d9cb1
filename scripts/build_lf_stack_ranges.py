"""Write finetune_doctor/catalog/lf_stack_ranges.json: the package ranges each LLaMA-Factory release requires at
start-up.

LLaMA-Factory's ``extras/misc.py`` ``check_dependencies`` calls transformers' ``require_version`` (directly in
0.8.0-0.9.1, through ``check_version`` from 0.9.2 on) once per package; a version outside the range raises
ImportError before training, unless ``DISABLE_VERSION_CHECK`` is set (and the call is not ``mandatory=True``).
This script reads that function from each published wheel (and the snapshot of main) with ``ast``: the
requirement string, the package, the line, and whether DISABLE_VERSION_CHECK skips it.

Usage: python scripts/build_lf_stack_ranges.py [WHEEL_DIR] [LF_MAIN_CHECKOUT] > finetune_doctor/catalog/lf_stack_ranges.json
(defaults /tmp/lfwheels and /work/shared/oracles/llamafactory-main; main is labelled with its version.py).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

MISC = "llamafactory/extras/misc.py"
_PKG = re.compile(r"^\s*([A-Za-z0-9_.\-]+)")


def _requirements(source: str) -> list[dict]:
    """Each require_version/check_version call in check_dependencies: {package, spec, line, skippable}."""
    tree = ast.parse(source)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "check_dependencies")
    out = []
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("require_version", "check_version")):
            continue
        arg = node.args[0]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            continue   # a computed requirement: not a fixed range
        mandatory = any(k.arg == "mandatory" and isinstance(k.value, ast.Constant) and k.value.value is True
                        for k in node.keywords)
        spec = arg.value.replace(" ", "")
        out.append({"package": _PKG.match(spec).group(1).lower(), "spec": spec,
                    "where": f"{MISC}:{node.lineno}", "skippable": not mandatory})
    return sorted(out, key=lambda r: int(r["where"].rsplit(":", 1)[1]))


def main(argv: list[str]) -> int:
    wheels = Path(argv[1] if len(argv) > 1 else "/tmp/lfwheels")
    main_tree = Path(argv[2] if len(argv) > 2 else "/work/shared/oracles/llamafactory-main")
    releases = {}
    for whl in sorted(wheels.glob("llamafactory-*-py3-none-any.whl"),
                      key=lambda p: tuple(int(x) for x in p.name.split("-")[1].split("."))):
        version = whl.name.split("-")[1]
        with zipfile.ZipFile(whl) as z:
            src = z.read(MISC).decode()
        releases[version] = {"from": f"PyPI {whl.name}",
                             "sha256": hashlib.sha256(whl.read_bytes()).hexdigest(),
                             "requires": _requirements(src)}
    misc = main_tree / "src" / MISC
    if misc.exists():
        vtext = (main_tree / "src/llamafactory/extras/env.py").read_text()
        version = re.search(r'^VERSION\s*=\s*"([^"]+)"', vtext, re.M).group(1)
        releases[version] = {"from": "LLaMA-Factory main snapshot (shared/oracles/llamafactory-main)",
                             "sha256": hashlib.sha256(misc.read_bytes()).hexdigest(),
                             "requires": _requirements(misc.read_text())}
    json.dump({"schema": "finetune-doctor/lf-stack-ranges/v1",
               "generated_by": "scripts/build_lf_stack_ranges.py",
               "disable_variable": "DISABLE_VERSION_CHECK",
               "releases": releases}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
