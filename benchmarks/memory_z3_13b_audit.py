"""Issue 23 (wt/mem13b): the under-predicted ZeRO-3 dev rows audited one by one, and the class medians with and
without the rows that measure something LLaMA-Factory's run does not hold.

Per ZeRO-3 dev row predicted more than 10 % under its measurement (the direction in which a ``fits`` verdict can
OOM), what the doctor resolved for it: the counter the source measured and the card's capacity (measured /
capacity: a figure at 90 % of the card or more, on a card that trained, is what the caching allocator reaches when
it grows to the card and frees its cache on a failed ``cudaMalloc`` before retrying, c10
CUDACachingAllocator.cpp ``DeviceCachingAllocator::malloc`` → ``release_cached_blocks``; such a figure bounds the
run's need from above only), the stage-3 knobs as the run resolves them (``overlap_comm``: DeepSpeed's default is
on for stage 3, zero/config.py ``overlap_comm_valid``; reduce_bucket_size, stage3_prefetch_bucket_size,
stage3_max_live_parameters, stage3_max_reuse_distance, stage3_param_persistence_threshold after transformers' "auto"
fill-in), whether the model is built under ``zero.Init``, the output layer's gathered bytes (tied or not) and
the ZeRO-3 live terms at the loss and in backward (analyzers/memory/zero3.py `zero3_live`), the logits at the
loss, and the peak moment.

Then the class medians (rows without offload, and with): all rows; without the 8 pairwise (DPO) rows, all of them
ms-swift's DPO trainer, whose log-probs take a path LLaMA-Factory's DPO does not (memory_z3_dpo_rows.md); without
the rows whose figure sits at the card (as above); fully stated rows (memory_z3_dev_rows.py `stated`) and the rest.
Nothing is dropped from the data: each median is printed beside the one over all rows.

Dev rows only (rounds 1-8). The estimator is the tree first on PYTHONPATH:

    PYTHONPATH=$PWD python benchmarks/memory_z3_13b_audit.py [--json FILE]

CPU only, about 20 s of CPU. Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import config_for, load_rows, samples_fill  # noqa: E402
from calibrate import engine_of  # noqa: E402
from memory_z3_dev_rows import _compare, offload_of  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

GIB = float(1 << 30)
# a figure at or above this share of the card's capacity is read as the allocator having grown to the card
AT_CARD = 0.90


def audit_row(row: dict) -> dict | None:
    """The audit dict of one ZeRO-3 dev row (module docstring's columns); None without a comparable figure."""
    from finetune_doctor.analyzers.memory.zero3 import output_layer_gathered_bytes, setting, zero3_live

    asm, c = _compare(row)
    if c is None:
        return None
    run, mem = asm.run, asm.memory
    live = zero3_live(run)
    tb = mem.details["terms_bytes"]
    cap = asm.hw.capacity_gib if asm.hw else None
    cfg = config_for(row)
    return {"id": row["id"], "method": row["method"], "engine": engine_of(row), "offload": offload_of(row),
            "tokens": int(cfg.get("cutoff_len") or 0) * int(cfg.get("per_device_train_batch_size") or 1),
            "samples": "fill" if samples_fill(row) else "dataset", "pairwise": bool(run.pairwise),
            "counter": c["kind"], "measured": c["measured"], "predicted": c["predicted"], "err": c["rel_err"],
            "capacity": cap, "of_card": (c["measured"] / cap) if cap else None,
            "outcome": row.get("outcome"), "world": run.world_size, "gc": bool(run.gradient_checkpointing),
            "overlap_comm": bool(run.overlap_comm), "zero3_init": bool(run.zero3_init),
            "reduce_bucket": setting(run, "reduce_bucket_size"),
            "prefetch": setting(run, "stage3_prefetch_bucket_size"),
            "max_live": setting(run, "stage3_max_live_parameters"),
            "reuse": setting(run, "stage3_max_reuse_distance"),
            "persist": setting(run, "stage3_param_persistence_threshold"),
            "tied": bool(run.arch.tie_word_embeddings), "head_gib": output_layer_gathered_bytes(run) / GIB,
            "at_loss_gib": live.at_loss / GIB, "in_bwd_gib": live.in_backward / GIB,
            "logits_gib": tb.get("logits", 0.0) / GIB, "moment": mem.details.get("peak_moment"),
            "engine_stated": engine_of(row) == "ZeRO-3" and samples_fill(row) and c["kind"] != "unknown"}


def at_card(i: dict) -> bool:
    """Whether the row's figure sits at the card (`AT_CARD` of its capacity or more) on a run that trained or
    whose outcome is not stated."""
    return i["of_card"] is not None and i["of_card"] >= AT_CARD and i["outcome"] in (None, "trained")


def medians(items: list[dict]) -> list[tuple[str, int, float | None]]:
    """(subset, n, median |error|) for the class and the subsets the module docstring names."""
    def med(sel):
        errs = [abs(i["err"]) for i in items if sel(i)]
        return len(errs), (statistics.median(errs) if errs else None)

    z3 = lambda i: i["engine"] == "ZeRO-3"  # noqa: E731
    subsets = (("ZeRO-3 (no offload), all rows", z3),
               ("ZeRO-3 (no offload), without the pairwise (ms-swift DPO) rows", lambda i: z3(i) and not i["pairwise"]),
               ("ZeRO-3 (no offload), without the rows at the card", lambda i: z3(i) and not at_card(i)),
               ("ZeRO-3 (no offload), without either", lambda i: z3(i) and not i["pairwise"] and not at_card(i)),
               ("ZeRO-3 (no offload), fully stated", lambda i: z3(i) and i["engine_stated"]),
               ("ZeRO-3 (no offload), the rest", lambda i: z3(i) and not i["engine_stated"]),
               ("ZeRO-3 with or without offload, all rows", lambda i: True),
               ("ZeRO-3 with or without offload, without the DPO rows", lambda i: not i["pairwise"]))
    return [(name, *med(sel)) for name, sel in subsets]


def tables(items: list[dict]) -> list[str]:
    """Markdown: the under-predicted rows' audit, then the medians."""
    lines = ["| row | method | tokens/mb | counter | measured | predicted | error | of card | overlap_comm | "
             "zero.Init | reduce bucket | prefetch | max live | reuse | persist | head (tied) GiB | "
             "live at loss / in bwd GiB | logits GiB | peak moment |", "|" + "---|" * 19]
    for i in sorted((i for i in items if i["err"] < -0.10), key=lambda i: (i["offload"], i["method"], i["err"])):
        card = f"{i['of_card']:.0%}" + (" (at card)" if at_card(i) else "") if i["of_card"] else "-"
        lines.append(
            f"| {i['id']} | {i['method']}{'' if i['offload'] == '-' else ' +off ' + i['offload']} | {i['tokens']} | "
            f"{i['counter']} | {i['measured']:.1f} | {i['predicted']:.1f} | {i['err']:+.1%} | {card} | "
            f"{'on' if i['overlap_comm'] else 'off'} | {'yes' if i['zero3_init'] else 'no'} | "
            f"{i['reduce_bucket']:.3g} | {i['prefetch']:.3g} | {i['max_live']:.3g} | {i['reuse']:.3g} | "
            f"{i['persist']:.3g} | {i['head_gib']:.2f}{' (tied)' if i['tied'] else ''} | "
            f"{i['at_loss_gib']:.2f} / {i['in_bwd_gib']:.2f} | {i['logits_gib']:.2f} | {i['moment']} |")
    lines += ["", "| subset | n | median abs error |", "|---|---|---|"]
    lines += [f"| {name} | {n} | {'-' if m is None else f'{m:.1%}'} |" for name, n, m in medians(items)]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the audited rows here as well")
    args = ap.parse_args(argv)
    os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    items = []
    for row in load_rows():
        if row.get("split") == "dev" and engine_of(row).startswith("ZeRO-3") and row.get("measured"):
            a = audit_row(row)
            if a is not None:
                items.append(a)
    if args.json:
        Path(args.json).write_text(json.dumps(items, indent=1), encoding="utf-8")
    print("\n".join(tables(items)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
