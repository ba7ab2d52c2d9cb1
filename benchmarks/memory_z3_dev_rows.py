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


def _compare(row: dict):
    """(assembly, calibrate.py `compare` of its prediction with the row's measurement) of `row`; compare is None
    when the row has no comparable measurement or the doctor no memory estimate."""
    asm = _assemble(row)
    mem = asm.memory
    if mem is None:
        return asm, None
    pred = {"total": mem.total, "peak_allocated": mem.peak_allocated,
            "runtime": float(mem.details.get("runtime_gib") or 0.0), "interval": None,
            "capacity": asm.hw.capacity_gib if asm.hw else None}
    return asm, compare(row, pred)


def at_length(row: dict, tokens: int) -> dict:
    """A copy of `row` whose ``cutoff_len`` is at most `tokens` (what the doctor is given for samples that short)."""
    cfg = dict(row.get("config") or {})
    cfg["cutoff_len"] = min(int(cfg.get("cutoff_len") or tokens), tokens)
    return {**row, "config": cfg}


def listing(floor: bool = False) -> list[dict]:
    """One dict per dev ZeRO-3 row with a comparable measurement (module docstring's columns). With `floor`, a
    ``samples: dataset`` row also carries ``err_floor``: its error re-predicted at FLOOR_TOKENS per sample."""
    out = []
    for row in load_rows():
        if row.get("split") != "dev" or not engine_of(row).startswith("ZeRO-3") or not row.get("measured"):
            continue
        asm, c = _compare(row)
        if c is None:
            continue
        mem = asm.memory
        cfg = config_for(row)
        tb = mem.details["terms_bytes"]
        samples = "fill" if samples_fill(row) else "dataset"
        err_floor = None
        if floor and samples == "dataset":
            _, cf = _compare(at_length(row, FLOOR_TOKENS))
            err_floor = cf["rel_err"] if cf else None
        out.append({"id": row["id"], "source": source_of(row), "repo": repo_of(row), "model": row["model"],
                    "method": row["method"],
                    "engine": engine_of(row), "seq": cfg.get("cutoff_len"),
                    "mb": cfg.get("per_device_train_batch_size", 1), "ga": cfg.get("gradient_accumulation_steps", 1),
                    "gc": bool(asm.run.gradient_checkpointing), "offload": offload_of(row),
                    "samples": samples, "pairwise": bool(asm.run.pairwise),
                    "counter": c["kind"], "measured": c["measured"], "predicted": c["predicted"], "err": c["rel_err"],
                    "err_floor": err_floor,
                    "moment": mem.details.get("peak_moment"), "world": asm.run.world_size,
                    "terms": {k: tb.get(k, 0.0) / GIB for k in TERMS}})
    return out


DIFF_KEYS = ("seq", "mb", "ga", "gc", "offload", "world", "method", "pairwise")

# the shortest sample `length_floor` re-predicts a dataset row at: below any chat template's own tokens, so no real
# sample of a named dataset is shorter
FLOOR_TOKENS = 128


def stated(item: dict) -> bool:
    """Whether a row's inputs are fully stated (issue 23's split (a)): no offload, samples that reach ``cutoff_len``
    (a packed or fixed-length benchmark) and a counter the source names (allocated, reserved or nvidia-smi)."""
    return item["engine"] == "ZeRO-3" and item["samples"] == "fill" and item["counter"] != "unknown"


def length_floor_err(item: dict) -> float:
    """The smallest |error| any sample length between FLOOR_TOKENS and ``cutoff_len`` can give a ``samples:
    dataset`` row, from its error at ``cutoff_len`` (``err``) and at FLOOR_TOKENS (``err_floor``): the doctor's
    peak does not fall when tokens are added (every term is a non-decreasing function of the micro-batch's
    tokens; the moments that do not depend on them, the step, are constants), so a measurement above the
    cutoff prediction stays that far under whatever the real lengths were, one below the floor prediction stays
    that far over, and one in between is matched by some length. A row that fills its length keeps ``err``.
    A fraction (0.25 = 25 %)."""
    e = item["err"]
    if item["samples"] != "dataset" or item.get("err_floor") is None or e <= 0:
        return abs(e)
    return max(item["err_floor"], 0.0)


def split_table(items: list[dict]) -> list[dict]:
    """Issue 23's split of the rows without offload: (a) `stated`, (b) the rest, (b) by sample kind, and the whole
    class as it is and with every (b) dataset row at its `length_floor_err` (the best a fix of how the
    prediction of unstated lengths is formed could reach). One dict per line: name, n, median |error|, under
    (< -10 %), within 10 %, over (> +10 %)."""
    z3 = [i for i in items if i["engine"] == "ZeRO-3"]
    groups = (("(a) stated: fill, counter stated", [i for i in z3 if stated(i)]),
              ("(b) the rest", [i for i in z3 if not stated(i)]),
              ("(b) fill, counter unknown (compared with the total)",
               [i for i in z3 if not stated(i) and i["samples"] == "fill"]),
              ("(b) samples: dataset", [i for i in z3 if i["samples"] == "dataset"]),
              ("(a)+(b), no offload", z3))
    out = []
    for name, rows in groups:
        errs = [i["err"] for i in rows]
        if errs:
            out.append({"name": name, "n": len(errs), "median_abs": statistics.median(map(abs, errs)),
                        "under": sum(e < -0.10 for e in errs), "within": sum(abs(e) <= 0.10 for e in errs),
                        "over": sum(e > 0.10 for e in errs)})
    floors = [length_floor_err(i) for i in z3]
    if z3 and any(i.get("err_floor") is not None for i in z3):
        out.append({"name": "(a)+(b), every dataset row at its best length (a floor)", "n": len(floors),
                    "median_abs": statistics.median(floors), "under": None,
                    "within": sum(f <= 0.10 for f in floors), "over": None})
    return out


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
    lines += ["", "Issue 23's split, rows without offload ((a) inputs fully stated; a dataset row's best length: "
              "`length_floor_err`):", "", "| subset | n | median abs | under | within 10 % | over |",
              "|---|---|---|---|---|---|"]
    for g in split_table(items):
        lines.append(f"| {g['name']} | {g['n']} | {g['median_abs']:.1%} | {'-' if g['under'] is None else g['under']}"
                     f" | {g['within']} | {'-' if g['over'] is None else g['over']} |")
    rising = [i["id"] for i in items if i.get("err_floor") is not None and i["err_floor"] > i["err"] + 1e-9]
    if any(i.get("err_floor") is not None for i in items):
        lines += ["", f"Dataset rows predicted higher at {FLOOR_TOKENS} tokens than at cutoff_len (would break "
                  f"`length_floor_err`'s premise): {', '.join(rising) or 'none'}."]
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
    ap.add_argument("--floor", action="store_true",
                    help=f"also re-predict each samples: dataset row at {FLOOR_TOKENS} tokens (issue 23's split)")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    items = listing(floor=args.floor)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": items, "pairs": pairs(items)}, indent=1), encoding="utf-8")
    print("\n".join(tables(items)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
