"""Write finetune_doctor/catalog/lf_z3_leaf.json: the model types each LLaMA-Factory release marks as DeepSpeed
ZeRO-3 leaf modules.

Under ZeRO-3, LLaMA-Factory's ``model/model_utils/moe.py`` ``add_z3_leaf_module`` hands the sparse MoE block of
each model type it knows to DeepSpeed's ``set_z3_leaf_modules``, so the whole block's parameters are gathered at
once; without it, ranks that route their tokens to different experts ask ZeRO-3 for different parameters and the
collective waits forever at the first step. This script reads, with ``ast``, every comparison of ``model_type`` (or
``text_model_type``) with a string inside that function, from each published wheel and the snapshot of main.

Usage: python scripts/build_lf_z3_leaf.py [WHEEL_DIR] [LF_MAIN_CHECKOUT] > finetune_doctor/catalog/lf_z3_leaf.json
(defaults /tmp/lfwheels and /work/shared/oracles/llamafactory-main; main is labelled with its version.py).
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

MOE = "llamafactory/model/model_utils/moe.py"


def leaf_types(source: str) -> list[str]:
    """The model types `add_z3_leaf_module` in `source` gives a leaf module (sorted)."""
    tree = ast.parse(source)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "add_z3_leaf_module")
    out: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Compare):
            continue
        # `model_type == ...` (0.9.0 on) or `getattr(model.config, "model_type", None) == ...` (0.8.x)
        sides = [node.left, *node.comparators]
        names = [n.id for n in sides if isinstance(n, ast.Name)]
        names += [a.value for n in sides if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id == "getattr" for a in n.args if isinstance(a, ast.Constant)]
        if not any(n in ("model_type", "text_model_type") for n in names):
            continue
        for c in node.comparators:
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                out.add(c.value)
            elif isinstance(c, (ast.Tuple, ast.List)):
                out |= {e.value for e in c.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return sorted(out)


def main() -> None:
    wheels = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/lfwheels")
    main_src = Path(sys.argv[2] if len(sys.argv) > 2 else "/work/shared/oracles/llamafactory-main")
    releases: dict[str, dict] = {}
    for whl in sorted(wheels.glob("llamafactory-*.whl")):
        version = whl.name.split("-")[1]
        with zipfile.ZipFile(whl) as z:
            releases[version] = {"model_types": leaf_types(z.read(MOE).decode("utf-8")),
                                 "where": f"{MOE} add_z3_leaf_module ({whl.name})"}
    src = main_src / "src" / MOE
    ver = re.search(r'VERSION\s*=\s*"([^"]+)"', (main_src / "src/llamafactory/extras/env.py").read_text())
    releases[ver.group(1) if ver else "main"] = {"model_types": leaf_types(src.read_text(encoding="utf-8")),
                                                  "where": f"{MOE} add_z3_leaf_module (main snapshot)"}
    json.dump({"about": __doc__.split("\n\n")[0], "releases": releases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
