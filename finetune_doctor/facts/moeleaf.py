"""Whether the LLaMA-Factory release in use gathers the model's MoE blocks whole under DeepSpeed ZeRO-3.

Under ZeRO-3 every parameter is partitioned and fetched by hooks as modules run. In a sparse MoE block each rank
runs only the experts its tokens were routed to, so ranks ask for different parameters and ZeRO-3's collective
fetches never match: the run hangs at the first step. LLaMA-Factory's ``model/model_utils/moe.py``
``add_z3_leaf_module`` makes the MoE block of each model type it knows a leaf (DeepSpeed ``set_z3_leaf_modules``:
fetched whole), and only under ZeRO-3; catalog/lf_z3_leaf.json lists those types per release
(scripts/build_lf_z3_leaf.py reads them from the 0.8.0-0.9.5 wheels and the main snapshot). Trial 5: Qwen3-VL
MoE (``qwen3_vl_moe``) full SFT under ZeRO-3 on a 0.9.4.dev0 install hung at step 1; 0.9.3 lacks the type, 0.9.4
has it. Only model types some release knows are judged: for the others nothing here says whether they need it.

Only the standard library is imported: `doctor lint` reaches this module.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

CATALOG = Path(__file__).resolve().parent.parent / "catalog" / "lf_z3_leaf.json"


@lru_cache(maxsize=1)
def load() -> dict[str, dict[str, Any]]:
    """{release: {"model_types": [...], "where": file and function}}."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))["releases"]


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"


def fact(asm: Any) -> dict[str, Any] | None:
    """The ``lint.moe_z3_leaf`` fact of an assembly with a resolved run: {model_type, releases (the judged ones),
    without (those that do not make its MoE block a leaf), first (the first catalogued release that does),
    certain (every judged release lacks it), variant (certain | dev-build | range: which sentence the rule says),
    given (the version as the inputs state it)}; None unless the run is a ZeRO-3 run of an MoE model whose type some
    release knows, the LF release is read (not assumed), and at least one judged release lacks the type."""
    run, release = getattr(asm, "run", None), getattr(asm, "release", None)
    if run is None or run.zero_stage != 3 or not run.arch.is_moe:
        return None
    if release is None or not release.known or getattr(release, "older", False):
        return None
    table = load()
    raw = run.arch.raw if isinstance(run.arch.raw, dict) else {}
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    types = [t for t in (run.arch.model_type, text.get("model_type")) if t]
    known = [t for t in types if any(t in r["model_types"] for r in table.values())]
    judged = [v for v in release.versions if v in table]
    if not known or not judged:
        return None
    has = [v for v in judged if any(t in table[v]["model_types"] for t in known)]
    without = [v for v in judged if v not in has]
    if not without:
        return None
    first = next(v for v, r in table.items() if any(t in r["model_types"] for t in known))
    # which sentence the rule says (rules/moe-zero3-leaf-missing.yaml `by`): every judged release lacks the leaf;
    # a build between two releases of which the later has it (trial 17, LF PR #8876: GLM-4.5V under ZeRO-3 on
    # 0.9.4.dev0 trained, trial 5's Qwen3-VL-MoE on another 0.9.4.dev0 hung: the commit decides); a range of releases
    variant = "certain" if not has else ("dev-build" if getattr(release, "note", "") else "range")
    return {"model_type": known[0], "releases": _span(judged), "without": _span(without), "first": first,
            "certain": not has, "variant": variant, "given": getattr(release, "given", None) or _span(judged),
            "where": table[first]["where"].split(" (")[0]}
