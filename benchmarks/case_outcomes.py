"""Fits/OOM outcome of the real cases that state their GPUs: predicted vs what happened.

Baseline: the outcome each user reported (fixtures/cases/INDEX.md, "outcome" column), read into the table below
with the reason for each label. A case whose config cannot be sized (no model, or a `<size>` placeholder, or a
model outside LLaMA-Factory) counts as a miss in the strict score and is listed apart in the expressible score.
Runs each case as tests/casekit.py lays it out, with the GPUs of expected.yaml. Writes
benchmarks/results/case_outcomes.md.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")

from casekit import CASES, lay_out  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402

from finetune_doctor.errors import InputError  # noqa: E402
from finetune_doctor.engine.judge import judge  # noqa: E402
from finetune_doctor.facts.config import assemble_config  # noqa: E402
from finetune_doctor.settings import Options  # noqa: E402

# case -> (actual outcome, why that label), for every memory case whose GPUs are stated (INDEX.md)
OUTCOMES = {
    "001": ("oom", "OOM yes (12.94 GiB alloc)"),
    "002": ("oom", "OOM at the first Adam step"),
    "004": ("oom", "OOM yes"),
    "005": ("oom", "OOM yes; needs 3x80G ZeRO-2"),
    "008": ("oom", "near-OOM on all GPUs; ZeRO-3 was needed"),
    "010": ("oom", "OOM + uneven use"),
    "011": ("oom", "OOM at trainer init on GPU0"),
    "013": ("oom", "OOM at cutoff 102400"),
    "014": ("oom", "OOM yes"),
    "016": ("oom", "OOM yes"),
    "017": ("oom", "OOM above 6k (config asks 12288)"),
    "019": ("oom", "OOM mid-run"),
    "020": ("oom", "OOM yes"),
    "023": ("oom", "OOM yes"),
    "025": ("oom", "OOM at step ~129"),
    "026": ("oom", "OOM yes; 4-bit fixes"),
    "028": ("oom", "OOM at the first optimizer step"),
    "029": ("oom", "OOM yes"),
    "031": ("fits", "the config is the working run (ZeRO-3 offload, mbs 1, < 2048)"),
    "032": ("fits", "fits on A100-40G with offload"),
    "034": ("oom", "OOM (TRL, fp32 load)"),
    "035": ("oom", "OOM on GPU0"),
    "037": ("oom", "OOM often (multimodal imbalance)"),
    "038": ("fits", "fits at 35-39 GB"),
    "040": ("oom", "slightly over 24 GB"),
}


def main() -> int:
    expected = YAML(typ="safe").load((CASES / "expected.yaml").read_text())
    rows, right, expressible, right_expr, right_warn, right_expr_warn = [], 0, 0, 0, 0, 0
    for case, (actual, why) in OUTCOMES.items():
        exp = expected[case]
        with tempfile.TemporaryDirectory() as t:
            cfg = lay_out(case, Path(t))
            cwd = os.getcwd()
            os.chdir(t)
            try:
                opts = Options(command="check", paths=(str(cfg),), gpu=str(exp["gpu"]) if exp.get("gpu") else None,
                               nnodes=exp.get("nnodes"), torch_version=exp.get("torch"),
                               transformers_version=exp.get("transformers"))
                asm = assemble_config(str(cfg), tuple(exp.get("overrides", [])), opts)
                mem = asm.memory
                pred = None if mem is None or mem.fits is None else ("fits" if mem.fits else "oom")
                # the rule pack itself decides whether the fit is flagged (rules/predicted-tight-fit.yaml)
                tight = pred == "fits" and any(f.name == "predicted-tight-fit" for f in judge("check", asm.facts, asm.sources, opts, live=asm.live()))
                detail = "-" if mem is None else f"{mem.total:.1f} / {asm.hw.capacity_gib:.1f} GiB" if asm.hw else f"{mem.total:.1f} GiB"
                if mem is not None and mem.p_oom is not None:
                    detail += f" (p_oom {100 * mem.p_oom:.0f} %)"
            except InputError as err:
                tight = False
                # the case is copied to a temporary folder: keep its random name out of the results file
                msg = re.sub(r"/tmp/\w+/", "", err.message)
                pred, detail = None, f"not sized: {msg[:60]}"
            finally:
                os.chdir(cwd)
        ok = pred == actual
        warned = ("oom" if tight else pred) == actual
        right += ok
        right_warn += warned
        if pred is not None:
            expressible += 1
            right_expr += ok
            right_expr_warn += warned
        verdict = "fits (tight: FD606)" if tight else (pred or "n/a")
        rows.append(f"| {case} | {exp.get('gpu') or 'n/a'} | {actual} | {verdict} | {'✓' if ok else '✗'} | "
                    f"{'✓' if warned else '✗'} | {detail} | {why} |")
    n = len(OUTCOMES)
    text = "\n".join([
        "# Fits/OOM outcome of the real cases that state their GPUs", "",
        "'right (fits flag)' scores the estimate's fits/OOM alone; 'right (with FD606)' counts a fit that the",
        "predicted-tight-fit warning flags (the at-risk verdict: a probability of OOM over 5 % by the error the",
        "benchmarks measured, analyzers/memory/uncertainty.py, or OOM on the torch < 2.8 default optimizer when the stack",
        "is not stated) as the doctor's OOM warning. The verdicts' Brier scores: benchmarks/results/margin.md.", "",
        "| case | GPUs | reported | predicted | right (fits flag) | right (with FD606) | predicted total / capacity | "
        "reported outcome |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        f"Strict score (a case that cannot be sized counts as wrong): **{right}/{n} = {right / n:.0%}** on the fits "
        f"flag, {right_warn}/{n} = {right_warn / n:.0%} with FD606.",
        f"Among the {expressible} cases that can be sized: {right_expr}/{expressible} = "
        f"{right_expr / max(expressible, 1):.0%} on the fits flag, {right_expr_warn}/{expressible} = "
        f"{right_expr_warn / max(expressible, 1):.0%} with FD606.", ""])
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "case_outcomes.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
