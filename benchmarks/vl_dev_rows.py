"""The vision-language rows of the calibration dev half (rounds 1-8), scored one by one through
benchmarks/calibrate.py's per-row path (`score_all`: `predict` + `compare`), without running the whole calibration.

A row counts as vision-language when its model name names a VL family (VL_WORDS). "images stated" is whether the
row's config carries ``image_max_pixels`` (or ``video_max_pixels``) and none of its ``unknown`` notes names the image
sizes. Prints a markdown table (id, round, source, model, images stated, measured or outcome, predicted, p_oom).

    PYTHONPATH=$PWD python benchmarks/vl_dev_rows.py > benchmarks/results/vl_dev_rows.md

CPU only; reads no held-out row (rows whose ``split`` is not ``dev`` are skipped before anything is predicted).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calib_data import HELD_OUT_ROUND, load_rows  # noqa: E402
from calibrate import score_all  # noqa: E402

for _p in reversed([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]):
    sys.path.insert(0, _p)

VL_WORDS = re.compile(r"(-vl|vl-|llava|pixtral|vision|minicpm-v|glm-4v|omni|idefics|paligemma|mllama|internvl|"
                      r"qwen2vl|cogvlm|deepseek-vl)", re.I)


def is_vl(row: dict) -> bool:
    return bool(VL_WORDS.search(str(row.get("model") or "")))


def images_stated(row: dict) -> bool:
    cfg = row.get("config") or {}
    named = any(re.search(r"image|video|pixel", str(u), re.I) for u in row.get("unknown") or ())
    return ("image_max_pixels" in cfg or "video_max_pixels" in cfg) and not named


def vl_dev_rows() -> list[dict]:
    return [r for r in load_rows() if r.get("split") == "dev" and int(r.get("round") or 1) < HELD_OUT_ROUND
            and is_vl(r)]


def table(scored: list[dict]) -> list[str]:
    out = ["| id | round | source | model | images stated | measured / outcome | predicted GiB | p_oom |",
           "|---|---|---|---|---|---|---|---|"]
    for s in scored:
        r, p, c = s["row"], s["pred"], s["cmp"]
        meas = f"{c['measured']:.1f} GiB {c['kind']} ({c['rel_err']:+.0%})" if c else str(r.get("outcome") or "")
        if c and r.get("outcome"):
            meas += f", {r['outcome']}"
        pred = "refused: " + p["error"][:60] if "error" in p else (
            f"{c['predicted']:.1f}" if c else f"{p['total']:.1f} of {p['capacity'] or 0:.1f}")
        pom = "" if "error" in p or p.get("p_oom") is None else f"{p['p_oom']:.2f}"
        out.append(f"| {r['id']} | {r.get('round', 1)} | {r['source']} | {r['model']} | "
                   f"{'yes' if images_stated(r) else 'no'} | {meas} | {pred} | {pom} |")
    return out


def summary(scored: list[dict]) -> list[str]:
    """Brier of the reported p_oom over the rows with an outcome (oom = 1), median and max |error| over the rows
    with a measurement (calibrate.py `compare`: predicted / measured - 1 of the counter the source measured)."""
    import statistics

    out = [(s["pred"]["p_oom"], 1.0 if s["row"]["outcome"] == "oom" else 0.0) for s in scored
           if s["row"].get("outcome") in ("oom", "trained") and s["pred"].get("p_oom") is not None]
    errs = [abs(s["cmp"]["rel_err"]) for s in scored if s["cmp"]]
    brier = sum((p - y) ** 2 for p, y in out) / len(out) if out else float("nan")
    return [f"VL dev rows: {len(scored)}; Brier {brier:.3f} over {len(out)} outcomes "
            f"({sum(y for _p, y in out):.0f} OOM); median |error| {statistics.median(errs):.1%}, "
            f"max {max(errs):.1%} over {len(errs)} measurements"]


def main() -> int:
    scored = score_all(vl_dev_rows())
    print("\n".join(table(scored) + [""] + summary(scored)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
