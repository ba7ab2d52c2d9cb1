"""Every dev measurement of the QLoRA and NPU classes (or any class of memory_dev_classes.py) with the doctor's
term split beside its error, grouped by source and sign, by model size and by batch shape: the listing issue 23's
QLoRA/NPU work reads its misses from.

Dev rows only (benchmarks/data/calibration_rows*.yaml rows whose ``split`` is dev; rounds 1-6). Errors are
benchmarks/calibrate.py `compare`'s (predicted / measured - 1 of the counter the source measured; an npu-smi reading
of an Ascend card carries the firmware's share, calibrate.py `npu_smi_offset_gib`). The term split is the
`memory.per_gpu_gib` of the same in-process `doctor estimate` (weights, gradients, optimizer, activations, logits,
buffers, runtime — the allocator reserve sits in runtime — and total), read from the Assembly calibrate.py's
`predict` builds (this script wraps `assemble_config` to keep it; nothing else changes).

    PYTHONPATH=$PWD python benchmarks/memory_dev_terms.py                         # QLoRA and NPU
    PYTHONPATH=$PWD python benchmarks/memory_dev_terms.py --cls DDP --json /tmp/ddp_terms.json

CPU only, about a minute for QLoRA. Prints markdown; writes only the optional --json.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import load_rows, samples_fill  # noqa: E402
from calibrate import engine_of  # noqa: E402
from memory_dev_classes import classes  # noqa: E402
from memory_dev_rows import family, run_listing  # noqa: E402

# the tree named on PYTHONPATH goes back in front of this checkout (as memory_dev_classes.py does)
for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

TERMS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "runtime", "total")
# counters a source can state (calib_data docstring); ``unknown`` or no kind is a counter not stated
STATED_COUNTERS = ("allocated", "reserved", "nvidia-smi", "boundary")
# model-size bands (billions of parameters, the catalogue's count) the QLoRA question "under or over per size" reads
SIZE_BANDS = ((0.0, 4.0, "< 4 B"), (4.0, 10.0, "4-10 B"), (10.0, 40.0, "10-40 B"), (40.0, 1e9, ">= 40 B"))


def unstated(row: dict[str, Any]) -> list[str]:
    """What the row's source leaves open among the three inputs that move a QLoRA/NPU figure most: ``lengths`` (the
    samples do not reach cutoff_len by the source's own statement, calib_data `samples_fill`), ``counter`` (the
    measured kind is not one of STATED_COUNTERS) and ``versions`` (no ``stack`` pin, or an ``unknown`` entry that
    names a version: bitsandbytes/transformers/unsloth not printed). Empty: every input stated."""
    out = []
    if not samples_fill(row):
        out.append("lengths")
    if (row.get("measured") or {}).get("kind") not in STATED_COUNTERS:
        out.append("counter")
    if not row.get("stack") or any("version" in str(u).lower() for u in row.get("unknown") or ()):
        out.append("versions")
    return out


def config_brief(c: dict[str, Any]) -> str:
    """The keys of a row's config that decide its QLoRA/NPU terms, in one cell: method, rank, bits, attention,
    precision, checkpointing, optimizer."""
    parts = [str(c.get("finetuning_type") or "lora"), f"r{c.get('lora_rank') or 8}" if
             (c.get("finetuning_type") or "lora") == "lora" else "",
             f"{c['quantization_bit']}-bit" if c.get("quantization_bit") else "",
             f"attn {c.get('flash_attn') or 'auto'}", "bf16" if c.get("bf16") else "fp16" if c.get("fp16") else "",
             "no gc" if c.get("disable_gradient_checkpointing") else "", str(c.get("optim") or "")]
    return " ".join(p for p in parts if p)


def score_with_terms(row: dict[str, Any]) -> dict[str, Any] | None:
    """One dev row scored as calibrate.py scores it, with the term split and parameter count of the same estimate;
    None when the row has no comparable measurement or the doctor refuses it."""
    import calibrate
    import finetune_doctor.facts.config as fc

    kept: dict[str, Any] = {}
    orig = fc.assemble_config

    def keep(*a: Any, **k: Any) -> Any:
        kept["asm"] = orig(*a, **k)
        return kept["asm"]

    fc.assemble_config = keep
    try:
        pred = calibrate.predict(row)
    finally:
        fc.assemble_config = orig
    cmp = calibrate.compare(row, pred)
    asm = kept.get("asm")
    if cmp is None or asm is None or asm.memory is None:
        return None
    c = row["config"]
    b = int(c.get("per_device_train_batch_size") or 1)
    return {"id": row["id"], "framework": family(row), "model": row["model"], "gpu": row.get("gpu"),
            "engine": engine_of(row), "counter": cmp["kind"], "measured_gib": round(cmp["measured"], 2),
            "predicted_gib": round(cmp["predicted"], 2), "err_pct": round(100 * cmp["rel_err"], 1),
            "terms": {k: round(float(asm.memory.per_gpu.get(k, 0.0)), 2) for k in TERMS},
            "peak_allocated_gib": round(asm.memory.peak_allocated, 2),
            "params_b": round(asm.run.arch.total_params() / 1e9, 2) if asm.run is not None else None,
            "batch": b, "cutoff_len": c.get("cutoff_len"), "samples": row.get("samples"),
            "shape": f"{b} x {c.get('cutoff_len') or '?'}",
            "unstated": "+".join(unstated(row)) or "all stated", "source": row.get("source"),
            "config": config_brief(c),
            "resid_gib": round(cmp["measured"] - cmp["predicted"], 2),
            "tokens_band": tokens_band(b * int(c.get("cutoff_len") or 1024)),
            "lora_rank": int(c.get("lora_rank") or 8) if c.get("finetuning_type", "lora") == "lora" else "-"}


def listing(cls: str) -> list[dict[str, Any]]:
    """The dev rows of `cls` with a comparable measurement, scored with their term split, by error."""
    out = [s for r in load_rows() if r["split"] == "dev" and cls in classes(r) if (s := score_with_terms(r))]
    return sorted(out, key=lambda d: d["err_pct"])


# tokens per micro batch (batch × cutoff; LF's default cutoff 1024 where the row gives none), the per-token question
TOKEN_BANDS = ((0, 2048, "< 2k"), (2048, 4096, "2k-4k"), (4096, 8192, "4k-8k"), (8192, 16384, "8k-16k"),
               (16384, 1 << 40, ">= 16k"))


def tokens_band(tokens: int) -> str:
    return next(name for lo, hi, name in TOKEN_BANDS if lo <= tokens < hi)


def size_band(params_b: float | None) -> str:
    if params_b is None:
        return "?"
    return next(name for lo, hi, name in SIZE_BANDS if lo <= params_b < hi)


def _summary(title: str, key: str, items: list[dict[str, Any]]) -> list[str]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for d in items:
        groups.setdefault(str(d[key]), []).append(d)
    out = [f"| {title} | n | median abs error | median signed | under (< -10 %) | within 10 % | over (> +10 %) | "
           "median measured - predicted GiB |", "|---|---|---|---|---|---|---|---|"]
    for g, ds in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        errs = [d["err_pct"] for d in ds]
        resid = statistics.median(d["resid_gib"] for d in ds)
        out.append(f"| {g} | {len(errs)} | {statistics.median(map(abs, errs)):.1f}% | {statistics.median(errs):+.1f}% | "
                   f"{sum(e < -10 for e in errs)} | {sum(abs(e) <= 10 for e in errs)} | {sum(e > 10 for e in errs)} | "
                   f"{resid:+.2f} |")
    return out + [""]


def table(cls: str, items: list[dict[str, Any]]) -> list[str]:
    """Markdown: the rows with their terms (GiB), then summaries by framework, by model size, by batch shape."""
    head = " | ".join(TERMS)
    out = [f"## {cls}: {len(items)} dev measurements", "",
           f"| error | row | framework | card | engine | counter | measured | predicted | params B | batch x cutoff | "
           f"not stated | {head} | config | source |", "|---" * (13 + len(TERMS)) + "|"]
    for d in items:
        t = " | ".join(f"{d['terms'][k]:.2f}" for k in TERMS)
        out.append(f"| {d['err_pct']:+.1f}% | {d['id']} | {d['framework']} | {d['gpu'] or '-'} | {d['engine']} | "
                   f"{d['counter']} | {d['measured_gib']:.2f} | {d['predicted_gib']:.2f} | {d['params_b']} | "
                   f"{d['shape']} | {d['unstated']} | {t} | {d['config']} | {d['source']} |")
    out.append("")
    for d in items:
        d["size"] = size_band(d["params_b"])
        d["sign"] = "under" if d["err_pct"] < -10 else "over" if d["err_pct"] > 10 else "within 10 %"
    out += _summary("framework", "framework", items)
    out += _summary("model size", "size", items)
    out += _summary("micro batch", "batch", items)
    out += _summary("tokens per micro batch", "tokens_band", items)
    out += _summary("LoRA rank", "lora_rank", items)
    out += _summary("counter", "counter", items)
    out += _summary("inputs not stated", "unstated", items)
    for d in items:
        d["stated"] = "fully stated" if d["unstated"] == "all stated" else "something not stated"
    out += _summary("inputs", "stated", items)
    if items:
        errs = [d["err_pct"] for d in items]
        out.append(f"All: n {len(errs)}, median |error| {statistics.median(map(abs, errs)):.1f}%, median signed "
                   f"{statistics.median(errs):+.1f}%, within 10 % {sum(abs(e) <= 10 for e in errs)}.")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    return run_listing(argv, __doc__, listing, table)


if __name__ == "__main__":
    sys.exit(main())
