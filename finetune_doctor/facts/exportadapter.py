"""The LoRA adapter a merge (``llamafactory-cli export`` with ``adapter_name_or_path``) holds beside the base model.

What is resident (LF main ``model/adapter.py`` L181-199): with an adapter and no training, every adapter in
``adapter_name_or_path`` is merged, one after the other: ``PeftModel.from_pretrained(model, adapter)`` then
``merge_and_unload()``. ``from_pretrained`` puts the adapter's A/B matrices on the device of the layer they wrap
(the GPUs that ``export_device: auto`` / ``device_map="auto"`` filled, LF ``hparams/parser.py`` L694-699) and,
with peft's default ``autocast_adapter_dtype=True``, in float32 (LF only overrides it for KTransformers); an adapter
LF trained is saved in float32 anyway (trainable parameters upcast, ``model/adapter.py`` L310). So the peak of a
merge is the base weights plus the whole adapter at 4 bytes an element; accelerate planned the placement for the
base model alone, so the adapter does not spill to host RAM when the base fits the GPUs.

Adapter elements per wrapped linear = r x (in_features + out_features) (LoRA, Hu et al. 2021, arXiv:2106.09685
§4.1), counted over the decoder's linears by `analyzers.memory.params.lora_params`; ``modules_to_save`` keeps a
full copy of each named module (peft ``ModulesToSaveWrapper``). When the adapter's ``adapter_config.json`` is not
on this machine its rank is an assumption (``adapter-rank``): LF's defaults (``lora_rank`` 8 on every linear,
``lora_target: all``), with ranks 64 and 512 weighed. Units: GiB (2^30 bytes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GIB = 2 ** 30
ADAPTER_BYTES = 4                     # float32: peft autocast_adapter_dtype=True (see the module docstring)
ASSUMED_RANK = 8                      # LF FinetuningArguments.lora_rank default
OTHER_RANKS = (64, 512)


def _adapter_dirs(values: dict[str, Any]) -> list[str]:
    raw = values.get("adapter_name_or_path")
    if isinstance(raw, (list, tuple)):
        return [str(x).strip() for x in raw if str(x).strip()]
    # LF splits a comma-separated string into the list it merges in order (hparams/model_args.py __post_init__)
    return [x.strip() for x in str(raw or "").split(",") if x.strip()]


def _read_config(name: str, base_dir: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """(adapter_config.json as a dict, its path) of the adapter folder `name` (relative to the config's folder or
    the working directory, as LF opens it from where it is launched), or (None, None) when it is not here."""
    p = Path(os.path.expanduser(name))
    for cand in ([p] if p.is_absolute() else [Path(base_dir) / p] if base_dir else []) + [Path.cwd() / p]:
        f = cand / "adapter_config.json"
        if f.is_file():
            try:
                cfg = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                return None, None
            return (cfg, str(f)) if isinstance(cfg, dict) else (None, None)
    return None, None


def _targets(arch: Any, cfg: dict[str, Any]) -> tuple[str, ...]:
    """peft's ``target_modules``: a list of module names, ``"all-linear"``, or a regex string, whose module names
    (the canonical linears of `arch` it mentions) are taken; a regex naming none of them counts every linear."""
    t = cfg.get("target_modules")
    if isinstance(t, list):
        return tuple(str(x) for x in t)
    if isinstance(t, str) and t != "all-linear":
        names = {lin.name.split(".")[-1] for k, _ in arch.layer_groups() for lin in arch.kind_linears(k)}
        hit = tuple(n for n in sorted(names) if n in t)
        if hit:
            return hit
    return ("all",)


def adapter_elements(arch: Any, cfg: dict[str, Any]) -> int:
    """Elements of one LoRA adapter described by its `cfg` (adapter_config.json: ``r``, ``target_modules``,
    ``modules_to_save``, ``use_dora``) on the decoder of `arch`. Raises nothing: a missing ``r`` is peft's 8."""
    from finetune_doctor.analyzers.memory.params import lora_params

    r = cfg.get("r")
    rank = r if isinstance(r, int) and not isinstance(r, bool) and r > 0 else ASSUMED_RANK
    n, _, _ = lora_params(arch, _targets(arch, cfg), rank, dora=cfg.get("use_dora") is True)
    for m in cfg.get("modules_to_save") or ():
        if "embed" in str(m) or str(m) == "wte":
            n += arch.embedding_params()
        elif "lm_head" in str(m) or str(m) == "output":
            n += arch.lm_head_params()
    return n


def adapter_term(asm: Any, arch: Any, values: dict[str, Any]) -> dict[str, Any] | None:
    """The adapter a merge holds at its peak: ``{"adapter_gib", "adapter_params_b", "adapter_rank",
    "adapter_read"}`` (the largest of the adapters merged one at a time; `adapter_read` False when its rank is
    assumed), or None when the export names no adapter. An adapter folder not on this machine becomes a
    ``not_here`` key (rules/not-checked-here.yaml) and the ``adapter-rank`` assumption (`rank_assumption`)."""
    dirs = _adapter_dirs(values)
    if not dirs:
        return None
    base = str(Path(asm.doc.path).resolve().parent) if getattr(asm.doc, "path", None) else None
    best: tuple[int, int | str, bool, str] | None = None
    for d in dirs:
        cfg, where = _read_config(d, base)
        if cfg is None:
            n, rank, read, where = arch_default(arch), ASSUMED_RANK, False, d
            _not_here(asm, d)
        else:
            n, rank, read = adapter_elements(arch, cfg), cfg.get("r", ASSUMED_RANK), True
        if best is None or n > best[0]:
            best = (n, rank, read, str(where))
    assert best is not None
    return {"adapter_gib": round(best[0] * ADAPTER_BYTES / GIB, 2), "adapter_params_b": round(best[0] / 1e9, 3),
            "adapter_rank": best[1], "adapter_read": best[2], "adapter_source": best[3]}


def arch_default(arch: Any, rank: int = ASSUMED_RANK) -> int:
    """Elements of an adapter at `rank` on every linear of the decoder (LF's ``lora_target: all``)."""
    return adapter_elements(arch, {"r": rank, "target_modules": "all-linear"})


def _not_here(asm: Any, name: str) -> None:
    from finetune_doctor.facts.nothere import PATH_NOT_HERE

    doc = asm.doc
    asm.facts["lint"]["keys"].append({
        "key": "adapter_name_or_path", "kind": "not_here", "suggestion": None, "replacement": None, "fix": None,
        "fix_value": None, "condition": PATH_NOT_HERE,
        "message": f"adapter folder '{name}' has no adapter_config.json here: its rank and target modules, which "
                   "the merge holds in GPU memory beside the base model, are assumed (adapter-rank)",
        "line": doc.line_of("adapter_name_or_path"), "override": "adapter_name_or_path" in doc.overrides})


def rank_assumption(arch: Any, base_peak_gib: float, limit_gib: float | None, verdict: str | None) -> Any:
    """The ``adapter-rank`` assumption of a merge whose adapter is not here: rank `ASSUMED_RANK` on every linear,
    with `OTHER_RANKS` weighed, each sized on `base_peak_gib` (the merge's peak without the adapter) and judged
    against `limit_gib` (the memory it runs in; None: not judged). `verdict` is the verdict at the assumed rank."""
    from finetune_doctor.types import Assumption

    effect, verdicts = {}, {}
    for r in OTHER_RANKS:
        label = f"rank {r} on every linear layer"
        effect[label] = round(base_peak_gib + arch_default(arch, r) * ADAPTER_BYTES / GIB, 2)
        if limit_gib:
            verdicts[label] = "fits" if effect[label] <= limit_gib else "oom"
    moves = verdict is not None and any(v != verdict for v in verdicts.values())
    return Assumption(
        name="adapter-rank", value=f"rank {ASSUMED_RANK} on every linear layer (LLaMA-Factory's lora_rank and "
                                   "lora_target defaults)",
        source="the adapter's adapter_config.json is not on this machine; the merge holds the whole adapter in "
               "float32 on the GPUs beside the base model (peft from_pretrained, LF model/adapter.py L197-199)",
        alternatives=tuple(effect), effect_gib=effect, effect_verdict=verdicts,
        resolve_with="the adapter folder on this machine (its adapter_config.json gives r and target_modules)", moves_verdict=moves)


NO_PROBABILITY = ("no probability: no measured merge peaks calibrate this estimate (the training probabilities "
                  "come from measured training runs), so the verdict is the point estimate against the memory")
