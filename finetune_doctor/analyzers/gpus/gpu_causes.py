"""Why one card of a data-parallel job holds more memory than the others: the ``gpus.uneven`` item of
analyzers/gpus/gpu_cards.py, its causes ranked by the evidence, and a prescription for the top one.

The causes and where each pattern comes from are in `_causes`; the config keys read are LLaMA-Factory's
(LF_FACTS.md). Memory in GiB.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from finetune_doctor.readers.gpus.gpu_config import ConfigInfo

_MULTIMODAL_TEMPLATE = re.compile(r"(?:^|_)(?:vl|v|vision|llava|mllama|pixtral|paligemma|internvl|minicpm_[ov]|"
                                  r"glm4v|kimi_vl|video|omni|gemma3n?|llama4|qwen2_audio|intern_vl)(?:_|$|\d)", re.I)
_MULTIMODAL_MODEL = re.compile(r"-VL-|VL-|-VL$|llava|vision|pixtral|paligemma|internvl|minicpm-v|glm-4v|omni|"
                               r"idefics|mllama", re.I)


def rnd(x: float | None, nd: int = 2) -> float | None:
    """The one rounding of the gpus facts: GiB to `nd` decimals (two, as torch prints capacities)."""
    return None if x is None else round(float(x), nd)


_r = rnd


def uneven(jc: list[dict[str, Any]], cards: list[dict[str, Any]], cfg: ConfigInfo | None,
            stray: list[dict[str, Any]], split: list[dict[str, Any]], foreign: list[dict[str, Any]],
            history: Any, hosts: list[str], job_known: bool, busy_gib: float = 1.0) -> dict[str, Any] | None:
    """The ``gpus.uneven`` item for the job's cards `jc` (None for fewer than two comparable cards): fullest and
    emptiest card, spread, likely causes ranked (`_causes`) and the fix of the top cause."""
    # MIG cards are split into separate devices: not data-parallel peers of whole cards
    ranked = [d for d in jc if d["peak_gib"] is not None and not d["mig_enabled"]]
    if len(ranked) < 2:
        return None
    busiest = max(ranked, key=lambda d: d["peak_gib"])
    lightest = min(ranked, key=lambda d: d["peak_gib"])
    median = statistics.median(d["peak_gib"] for d in ranked)
    caps = [d["capacity_gib"] for d in ranked if d["capacity_gib"]]
    cap = min(caps) if caps else None
    spread = busiest["peak_gib"] - lightest["peak_gib"]
    # global rank 0 runs on the first visible card of the first node. When the job's processes are known, that
    # is its lowest-index card there (CUDA_VISIBLE_DEVICES may start elsewhere); from memory alone (a partial
    # paste may list only some cards) only card 0 can be taken as rank 0's
    first = [d["index"] for d in ranked if d["host"] == hosts[0]]
    rank0 = busiest["host"] == hosts[0] and bool(first) and (
        busiest["index"] == min(first) if job_known else busiest["index"] == 0)
    idle = [d["label"] for d in cards if not d["in_job"] and (d["peak_gib"] or 0) < busy_gib]
    moved = _busiest_moved(history, {(d["host"], d["index"]) for d in ranked})
    causes = _causes(busiest, median, rank0, moved, cfg, stray, split, foreign)
    top = causes[0] if causes else None
    fix_title, fix_key, fix_value = _fix_for(top, cfg)
    loc = busiest["location"]
    if cfg is not None and top and top.get("config_key"):
        pos = cfg.source.positions.get(top["config_key"])
        loc = {"file": cfg.path, "line": pos[0] if pos else None, "column": pos[1] if pos else None,
               "key": top["config_key"]}
    text = "; ".join(f"{i + 1}) {c['title']} ({c['evidence']})" for i, c in enumerate(causes)) or \
        "no cause stands out; pass --config to rank causes from the run's YAML"
    return {
        "n_cards": len(ranked),
        "busiest": {k: busiest[k] for k in ("label", "index", "host", "peak_gib", "capacity_gib")},
        "lightest": {k: lightest[k] for k in ("label", "index", "host", "peak_gib", "capacity_gib")},
        "median_gib": _r(median), "spread_gib": _r(spread), "spread_frac": _r(spread / cap, 3) if cap else None,
        "excess_gib": _r(busiest["peak_gib"] - median), "rank0": rank0, "idle": idle,
        "idle_text": f" {len(idle)} visible card(s) unused: {', '.join(idle)}." if idle else "",
        "moved": moved, "causes": causes, "causes_text": text, "top_cause": top["key"] if top else None,
        "fix_title": fix_title, "fix_key": fix_key, "fix_value": fix_value, "location": loc,
    }


def _busiest_moved(history: Any, keys: set[tuple[str, int]]) -> bool:
    """True when different cards were the fullest in different samples (a data-dependent peak).

    `history` is a SampleAccumulator (analyzers/gpus/gpu_cards.py): its per-sample memory of each card, in MiB."""
    winners = set()
    for sample in history.samples_used(keys):
        if len(sample) >= 2:
            ranked = sorted(sample, key=lambda kv: -kv[1])
            (top, used), second = ranked[0], ranked[1][1]
            if used - second > 512:  # ignore near-ties (0.5 GiB)
                winners.add(top)
    return len(winners) > 1


def _cfg_get(cfg: ConfigInfo | None, key: str) -> Any:
    return None if cfg is None else cfg.values.get(key)


def _causes(busiest: dict[str, Any], median: float, rank0: bool, moved: bool, cfg: ConfigInfo | None,
            stray: list[dict[str, Any]], split: list[dict[str, Any]], foreign: list[dict[str, Any]]) -> list[dict]:
    """Likely causes of the imbalance, best first: each with the evidence that points to it and a score.

    Scores are ordinal (which explanation fits the evidence better), not probabilities. Sources of the patterns:
    stray ranks on cuda:0 (cases/011: four 398 MiB contexts next to the model on GPU 0); rank-0-only work such
    as ZeRO-3 16-bit consolidation on save (DeepSpeed ``stage3_gather_16bit_weights_on_model_save``) and eval;
    data-dependent per-rank peaks of multimodal batches (cases/037, hiyouga/LlamaFactory#7110: the heavy card is
    gpu6, not gpu0); model split by ``device_map`` across cards (one pid with tensors on several cards).
    """
    excess = busiest["peak_gib"] - median
    out: list[dict[str, Any]] = []
    here = [s for s in stray if (s["host"], s["index"]) == (busiest["host"], busiest["index"])]
    if here:
        s = here[0]
        share = s["total_gib"] / excess if excess > 0 else 0
        out.append({"key": "multi-card-process", "score": 5 if share >= 0.5 else 3 if share >= 0.2 else 1,
                    "config_key": None,
                    "title": f"{s['subject']} a CUDA context on {s['label']}",
                    "evidence": f"{s['total_gib']:.2f} GiB together, {min(share, 9.99):.0%} of the excess"})
    f_here = [f for f in foreign if f["label"] == busiest["label"] and (f["used_gib"] or 0) > 0]
    if f_here:
        tot = sum(f["used_gib"] for f in f_here)
        out.append({"key": "foreign-process", "score": 5 if tot >= 0.5 * excess else 2, "config_key": None,
                    "title": f"a process outside the job uses {busiest['label']}",
                    "evidence": f"pid {', '.join(str(f['pid']) for f in f_here)}: {tot:.2f} GiB"})
    if split or _cfg_get(cfg, "device_map") or _cfg_get(cfg, "quantization_device_map"):
        key = "quantization_device_map" if _cfg_get(cfg, "quantization_device_map") else \
            "device_map" if _cfg_get(cfg, "device_map") else None
        ev = (f"pid {split[0]['pid']} holds tensors on {', '.join(split[0]['cards'])}" if split
              else f"{key} is set in the config")
        out.append({"key": "device-map", "score": 4 if split else 1, "config_key": key,
                    "title": "the model is split across cards by device_map (first card holds the embeddings, "
                             "last the lm_head)", "evidence": ev})
    multimodal, mm_key = _multimodal(cfg)
    if rank0:
        ev = []
        key = None
        score = 2
        for k in ("eval_dataset", "val_size", "eval_strategy", "evaluation_strategy", "do_eval"):
            v = _cfg_get(cfg, k)
            if v not in (None, False, 0, 0.0, "no", ""):
                ev.append(f"{k}: {v}")
                key = key or k
        if ev:
            score += 1
        z = (cfg.ds or {}).get("zero_optimization", {}) if cfg else {}
        if isinstance(z, dict) and z.get("stage") == 3 and z.get("stage3_gather_16bit_weights_on_model_save"):
            ev.append("ZeRO-3 gathers the full 16-bit weights when saving")
            key = key or "deepspeed"
            score += 1
        for k in ("predict_with_generate", "load_best_model_at_end", "compute_accuracy"):
            if _cfg_get(cfg, k):
                ev.append(f"{k}: true")
                key = key or k
                score += 1
        if cfg is None:
            ev.append("the fullest card is rank 0's; pass --config to check eval/save settings")
        out.append({"key": "rank0-work", "score": score, "config_key": key,
                    "title": "rank 0 does extra work (evaluation, metrics, checkpoint consolidation, logging)",
                    "evidence": "; ".join(ev) or "the fullest card is rank 0's"})
    if multimodal:
        out.append({"key": "multimodal", "score": (4 if not rank0 else 2) + (1 if moved else 0), "config_key": mm_key,
                    "title": "multimodal batches: the rank that draws the most or largest images peaks highest",
                    "evidence": f"{mm_key}: {_cfg_get(cfg, mm_key)}" + ("; the fullest card changed between "
                                                                         "samples" if moved else "")})
    elif moved or (not rank0 and not out):
        out.append({"key": "variable-length", "score": 2 if moved else 1, "config_key":
                    "cutoff_len" if _cfg_get(cfg, "cutoff_len") is not None else None,
                    "title": "per-rank batches of different lengths: the rank with the longest batch peaks highest",
                    "evidence": "the fullest card changed between samples" if moved
                    else f"{busiest['label']} is not rank 0's card"})
    out.sort(key=lambda c: -c["score"])
    return out


def _multimodal(cfg: ConfigInfo | None) -> tuple[bool, str | None]:
    if cfg is None:
        return False, None
    for k in ("image_max_pixels", "video_max_pixels", "image_dir", "media_dir", "freeze_vision_tower"):
        if k in cfg.values:
            return True, k
    tpl = _cfg_get(cfg, "template")
    if isinstance(tpl, str) and _MULTIMODAL_TEMPLATE.search(tpl):
        return True, "template"
    model = _cfg_get(cfg, "model_name_or_path")
    if isinstance(model, str) and _MULTIMODAL_MODEL.search(model):
        return True, "model_name_or_path"
    return False, None


def _fix_for(top: dict[str, Any] | None, cfg: ConfigInfo | None) -> tuple[str, str | None, Any]:
    """A prescription for the top cause: (title, config key to edit or None, new value)."""
    if top is None:
        return ("Find what the fullest card does that the others do not", None, None)
    k = top["key"]
    if k == "multi-card-process":
        return ("Make every rank call torch.cuda.set_device(LOCAL_RANK) before any CUDA work; look for .cuda(), "
                "device='cuda' or torch.cuda calls without an index in custom code run before the trainer", None, None)
    if k == "foreign-process":
        return ("Stop the other process or exclude the card with CUDA_VISIBLE_DEVICES", None, None)
    if k == "device-map":
        return ("Launch one process per card (llamafactory-cli train, or torchrun) instead of splitting one "
                "model with device_map", None, None)
    if k == "multimodal":
        cur = _cfg_get(cfg, "image_max_pixels")
        # LLaMA-Factory's default image_max_pixels is 768*768 = 589824 (LF_FACTS.md §4)
        cur = cur if isinstance(cur, (int, float)) and cur > 0 else 589824
        new = int(cur // 2)
        return (f"Cap the image size: image_max_pixels {int(cur)} -> {new} (fewer visual tokens per image)",
                "image_max_pixels", new)
    if k == "rank0-work":
        return ("Watch what rank 0 does when its card peaks (a ZeRO-3 save consolidating 16-bit weights, evaluation "
                "keeping predictions on the GPU until eval_accumulation_steps moves them, logging) and budget the "
                "busiest card for it", None, None)
    return ("Budget for the longest batch on every rank (cutoff_len), or sort batches by length", None, None)


