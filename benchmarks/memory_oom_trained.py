"""The dev runs that trained (or a measurement on a named card) that the doctor calls ``oom``: one line each with
what decides it, so that each can be sorted by kind (issue 23's "no run that completed called oom", issue 21's
verdicts). Only dev rows are assembled (calib_data.load_rows, ``split == "dev"``); nothing is written.

    PYTHONPATH=$PWD python benchmarks/memory_oom_trained.py [--all]

For each row: the verdict, p_oom_model, predicted total and need against the card's capacity, the largest memory
term, and every open assumption with the verdicts its alternatives give (an assumption with no alternative that
fits is why the verdict stays ``oom``). ``--all`` lists every dev run that trained, whatever its verdict.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from calib_data import load_rows  # noqa: E402
from calibrate import predict  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)


def describe(row: dict, pred: dict) -> list[str]:
    """Markdown lines for one row."""
    if "error" in pred:
        return [f"| {row['id']} | error | | | | | {pred['error'][:80]} |"]
    total, hw, assumptions, _gpu = pred["mix"]
    from finetune_doctor.facts.assume import NOT_OPEN

    terms = {k: v for k, v in (row.get("_terms") or {}).items()}
    opened = []
    for a in assumptions:
        if not a.effect_verdict:
            continue
        vs = ",".join(f"{k}:{v}" for k, v in a.effect_verdict.items())
        opened.append(f"{a.name}{'' if a.name not in NOT_OPEN else '(closed)'}[{vs}]")
    big = sorted(((v, k) for k, v in terms.items() if k != "total"), reverse=True)[:int(os.environ.get("NTERMS", "2"))]
    return [f"| {row['id']} | {row.get('method')} {row.get('config', {}).get('stage', 'sft')} | {pred['verdict']} | "
            f"{pred.get('p_oom_model', 0) or 0:.3f} | {pred['total']:.1f} / {pred['need']:.1f} vs "
            f"{pred['capacity'] or 0:.1f} | {' '.join(f'{k}={v:.1f}' for v, k in big)} | "
            f"{'; '.join(opened) or '-'} | {_budget(pred.get('budget'))} |"]


def _budget(b: tuple | None) -> str:
    """The token budget of the report (facts/assume.py `token_budget`): the longest sample that fits with the error
    band, and without it (the point estimate of what the run needs)."""
    if not b or b[0] is None:
        return "-"
    return f"{b[0]} / {b[1]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every dev run that trained, whatever its verdict")
    ap.add_argument("--ids", help="only these row ids (comma-separated)")
    args = ap.parse_args(argv)
    rows = [r for r in load_rows() if r["split"] == "dev" and r.get("outcome") == "trained" and r.get("gpu")]
    if args.ids:
        rows = [r for r in rows if r["id"] in set(args.ids.split(","))]
    import finetune_doctor.facts.config as fc

    print("| id | method stage | verdict | p_oom_model | total / need vs capacity (GiB) | largest terms | "
          "assumptions with evaluated verdicts | token budget per sample (with band / point) |")
    print("|---|---|---|---|---|---|---|---|")
    n = 0
    orig = fc.assemble_config
    for r in rows:
        seen = {}

        def spy(*a, **k):
            asm = orig(*a, **k)
            if asm.memory is not None:
                seen.update(asm.memory.per_gpu)
                seen["_p_model"] = asm.memory.p_oom_model or 0.0
                tb = (asm.memory.details.get("token_budget") or {}).get("train") or {}
                seen["_budget"] = (tb.get("tokens_per_sample"), tb.get("card_tokens_per_sample"))
            return asm
        fc.assemble_config = spy
        try:
            pred = predict(r)
        finally:
            fc.assemble_config = orig
        pred["p_oom_model"] = seen.pop("_p_model", None)
        pred["budget"] = seen.pop("_budget", None)
        r = {**r, "_terms": seen}
        if pred.get("verdict") == "oom" or args.all:
            n += pred.get("verdict") == "oom"
            print("\n".join(describe(r, pred)))
    print(f"\n{n} of {len(rows)} dev runs that trained are called oom.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
