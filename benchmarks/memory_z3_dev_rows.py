"""Every dev measurement of a ZeRO-3 run (with or without offload, every method), one line each with the run's
shape and the memory model's terms at the peak, then the rows grouped by source and by the sign of their error,
and the pairs of rows of one source that the memory model cannot both reach (issue 23's listing).

Per row: source (host and path), model, method, tokens per sample as the doctor is given them (``cutoff_len`` after
calib_data.config_for), micro batch, gradient accumulation, activation checkpointing, offload (o = optimizer,
p = parameters), ``samples`` (fill: the source's samples reach the length; dataset: a real dataset whose lengths
no source states, so the figure at ``cutoff_len`` is an upper bound of the run's), counter, measured and predicted
GiB (calibrate.py `compare`: predicted / measured - 1 of the counter the source measured), the peak moment and the
terms in GiB (analyzers/memory/moments.py ``terms_bytes``).

Pairs of rows of one repository (or one thread) and model, read with the same counter (`pairs`): for each, the
measured ratio and the predicted ratio (second / first). A pair is listed as **contradicting** when

* ``opposite``: the measurements move one way and the doctor's terms for the keys that differ the other (both
  ratios more than 10 % from 1, on opposite sides);
* ``same-terms``: the doctor's terms give both rows the same figure (within 3 %) while the measurements differ by
  more than 20 %: the keys the rows state cannot reach both (gradient accumulation, for one, moves no device term
  of ZeRO-3 without offload: DeepSpeed v0.14.2 runtime/zero/stage3.py:1433-1437 copies the first micro-step's
  gradient partition into the same flat buffer later micro-steps add into);
* ``same-figure``: the measurements are the same (within 3 %) while the doctor's terms for the keys that differ
  move them by more than 20 % (a figure that does not move with batch size or length).

Only pairs whose sample lengths compare are read: both rows fill their length, or both are runs of one page on
its one dataset. Thresholds are chosen round numbers, not fitted; a pair says only that no one prediction per row can be within
10 % of both, never which of the two figures is wrong.

Dev rows only. The estimator is the tree first on PYTHONPATH (as in memory_dev_classes.py):

    PYTHONPATH=$PWD python benchmarks/memory_z3_dev_rows.py [--json FILE]

CPU only, about 20 s. Prints markdown; writes nothing unless --json is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from itertools import combinations
from pathlib import Path
from urllib.parse import urlparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import config_for, load_rows, samples_fill  # noqa: E402
from calibrate import compare, engine_of  # noqa: E402
from memory_z3full_terms import TERMS, _assemble  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

GIB = float(1 << 30)
SHORT = {"weights": "w", "grads_always": "gflat", "master": "m32", "states": "adam", "live_params": "live",
         "activations": "act", "recompute": "rec", "logits": "lg", "logits_bwd": "lgb", "grads_in_backward": "gbwd",
         "grads_step": "gstep", "step_temp": "tmp", "buffers": "buf"}


def repo_of(row: dict) -> str:
    """owner/name of a GitHub source (``#N`` added for an issue thread), else the host: the key sources of one
    project share, whatever commit or page a row cites."""
    u = urlparse(str(row.get("source") or ""))
    parts = [p for p in u.path.split("/") if p]
    if u.netloc.endswith("github.com") and len(parts) >= 2:
        base = "/".join(parts[:2])
        return base + (f"#{parts[3]}" if len(parts) >= 4 and parts[2] in ("issues", "pull", "discussions") else "")
    return u.netloc or str(row.get("source"))


def source_of(row: dict) -> str:
    """host/path of the row's source, without the scheme and query (a short key rows of one page share)."""
    u = urlparse(str(row.get("source") or ""))
    return (u.netloc + u.path).rstrip("/") or str(row.get("source"))


def offload_of(row: dict) -> str:
    """'o', 'p', 'op' or '-' from the row's zero_optimization (a device of none is no offload)."""
    z = (row.get("deepspeed") or {}).get("zero_optimization") or {}
    out = ""
    for key, tag in (("offload_optimizer", "o"), ("offload_param", "p")):
        dev = (z.get(key) or {}).get("device") if isinstance(z.get(key), dict) else None
        if dev and str(dev).lower() != "none":
            out += tag
    return out or "-"


def listing() -> list[dict]:
    """One dict per dev ZeRO-3 row with a comparable measurement (module docstring's columns)."""
    out = []
    for row in load_rows():
        if row.get("split") != "dev" or not engine_of(row).startswith("ZeRO-3") or not row.get("measured"):
            continue
        asm = _assemble(row)
        mem = asm.memory
        if mem is None:
            continue
        pred = {"total": mem.total, "peak_allocated": mem.peak_allocated,
                "runtime": float(mem.details.get("runtime_gib") or 0.0), "interval": None,
                "capacity": asm.hw.capacity_gib if asm.hw else None}
        c = compare(row, pred)
        if c is None:
            continue
        cfg = config_for(row)
        tb = mem.details["terms_bytes"]
        out.append({"id": row["id"], "source": source_of(row), "repo": repo_of(row), "model": row["model"],
                    "method": row["method"],
                    "engine": engine_of(row), "seq": cfg.get("cutoff_len"),
                    "mb": cfg.get("per_device_train_batch_size", 1), "ga": cfg.get("gradient_accumulation_steps", 1),
                    "gc": bool(asm.run.gradient_checkpointing), "offload": offload_of(row),
                    "samples": "fill" if samples_fill(row) else "dataset", "pairwise": bool(asm.run.pairwise),
                    "counter": c["kind"], "measured": c["measured"], "predicted": c["predicted"], "err": c["rel_err"],
                    "moment": mem.details.get("peak_moment"), "world": asm.run.world_size,
                    "terms": {k: tb.get(k, 0.0) / GIB for k in TERMS}})
    return out


DIFF_KEYS = ("seq", "mb", "ga", "gc", "offload", "world", "method", "pairwise")


def contradiction(measured_ratio: float, predicted_ratio: float) -> str | None:
    """'opposite', 'same-terms', 'same-figure' or None for a pair's two ratios (module docstring)."""
    rm, rp = measured_ratio, predicted_ratio
    if (rm > 1.10 and rp < 1 / 1.10) or (rm < 1 / 1.10 and rp > 1.10):
        return "opposite"
    if abs(rp - 1) <= 0.03 and abs(rm - 1) > 0.20:
        return "same-terms"
    if abs(rm - 1) <= 0.03 and abs(rp - 1) > 0.20:
        return "same-figure"
    return None


def pairs(items: list[dict]) -> list[dict]:
    """Pairs of rows of one repository and model read with one counter: the keys that differ, the measured and the
    predicted ratio (second / first) and the kind of contradiction (`contradiction`, None when there is none)."""
    out = []
    for a, b in combinations(items, 2):
        if a["repo"] != b["repo"] or a["model"] != b["model"] or a["counter"] != b["counter"]:
            continue
        # lengths must be comparable: both fill their length, or one page's runs on its one dataset
        if a["samples"] != b["samples"] or (a["samples"] == "dataset" and a["source"] != b["source"]):
            continue
        diff = [k for k in DIFF_KEYS if a[k] != b[k]]
        rm, rp = b["measured"] / a["measured"], b["predicted"] / a["predicted"]
        out.append({"a": a["id"], "b": b["id"], "differ": diff or ["(no stated key)"], "measured_ratio": rm,
                    "predicted_ratio": rp, "kind": contradiction(rm, rp)})
    return out


def tables(items: list[dict]) -> list[str]:
    """Markdown: the rows by source then error; groups by source and sign; the contradicting pairs."""
    head = ("| row | source | model | method | seq | mb | GA | ckpt | offload | samples | counter | measured | "
            "predicted | error | peak moment | " + " ".join(SHORT[k] for k in TERMS) + " |")
    lines = [f"### ZeRO-3 dev rows: {len(items)} measurements (no offload: "
             f"{sum(i['engine'] == 'ZeRO-3' for i in items)})", "",
             "Terms (GiB, in this order): " + ", ".join(f"{SHORT[k]} = {k}" for k in TERMS) + ".", "",
             head, "|" + "---|" * 16]
    for i in sorted(items, key=lambda i: (i["repo"], i["source"], i["err"])):
        t = " ".join(f"{i['terms'][k]:.1f}" for k in TERMS)
        lines.append(f"| {i['id']} | {i['source'][:48]} | {i['model'].split('/')[-1]} | {i['method']}"
                     f"{' (pairwise)' if i['pairwise'] else ''} | {i['seq']} | {i['mb']} | {i['ga']} | "
                     f"{'on' if i['gc'] else 'off'} | {i['offload']} | {i['samples']} | {i['counter']} | "
                     f"{i['measured']:.1f} | {i['predicted']:.1f} | {i['err']:+.1%} | {i['moment']} | {t} |")
    lines += ["", "| repository (or thread) | n | under (< -10 %) | within 10 % | over (> +10 %) | median signed | median abs |",
              "|---|---|---|---|---|---|---|"]
    by: dict[str, list[float]] = {}
    for i in items:
        by.setdefault(i["repo"], []).append(i["err"])
    for src, errs in sorted(by.items(), key=lambda kv: statistics.median(kv[1])):
        lines.append(f"| {src[:60]} | {len(errs)} | {sum(e < -0.10 for e in errs)} | "
                     f"{sum(abs(e) <= 0.10 for e in errs)} | {sum(e > 0.10 for e in errs)} | "
                     f"{statistics.median(errs):+.1%} | {statistics.median(map(abs, errs)):.1%} |")
    lines += ["", "| subset | n | under | within 10 % | over | median abs |", "|---|---|---|---|---|---|"]
    for name, sel in (("all", lambda i: True), ("no offload", lambda i: i["engine"] == "ZeRO-3"),
                      ("samples: fill", lambda i: i["samples"] == "fill"),
                      ("samples: dataset (upper bound at cutoff)", lambda i: i["samples"] == "dataset"),
                      ("counter stated", lambda i: i["counter"] != "unknown"),
                      ("no offload, fill, counter stated",
                       lambda i: i["engine"] == "ZeRO-3" and i["samples"] == "fill" and i["counter"] != "unknown")):
        errs = [i["err"] for i in items if sel(i)]
        if errs:
            lines.append(f"| {name} | {len(errs)} | {sum(e < -0.10 for e in errs)} | "
                         f"{sum(abs(e) <= 0.10 for e in errs)} | {sum(e > 0.10 for e in errs)} | "
                         f"{statistics.median(map(abs, errs)):.1%} |")
    bad = [p for p in pairs(items) if p["kind"]]
    lines += ["", f"Pairs of one repository and model that no one prediction per row reaches both of ({len(bad)}; "
              f"rows in them: {len({p[k] for p in bad for k in ('a', 'b')})}):", "",
              "| first | second | keys that differ | measured second/first | predicted second/first | kind |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {p['a']} | {p['b']} | {', '.join(p['differ'])} | {p['measured_ratio']:.2f} | "
              f"{p['predicted_ratio']:.2f} | {p['kind']} |" for p in bad]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the rows here as well")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    items = listing()
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": items, "pairs": pairs(items)}, indent=1), encoding="utf-8")
    print("\n".join(tables(items)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
